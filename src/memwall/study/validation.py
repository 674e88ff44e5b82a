"""The judge: memwall's predictions against published measurements.

Owns: turning a :class:`~memwall.study.measurements.Measurement` into the :class:`Case` that
reproduces it (:func:`case_for`), converting a prediction (the ``memwall inspect`` dict)
into the measurement's metric (:func:`predicted_metric`), the per-case comparison
(:func:`validate`, one :class:`CaseResult` each), the summary (:func:`summarize`), the
text table (:func:`format_table`) and the eras the summary groups by (:func:`era_of`).
Predicting many cases at once, and storing the predictions, is
:mod:`memwall.execute.validation`'s job.

A measurement whose machine or network memwall does not know is reported with that
status, never dropped. The predictor is injected (any ``Case -> dict`` function), so the
comparison is tested without the simulator; by default it is
:func:`memwall.simulation.run_case`.

Metric conversions, exactly as computed here (``s`` = predicted seconds of one step,
``b`` = examples in the step, ``C`` = the network's connections, i.e. weights):

* ``seconds``            = s (generate: the whole request, ``serving.request_seconds``)
* ``flops``              = the prediction's ``achieved_flops`` (its FLOPs ÷ s)
* ``samples_per_second`` = b ÷ s, per device: on d devices the whole step's examples ÷ s ÷ d
* ``tokens_per_second``  = decode and prefill: the serving figure (all sequences, every
  device); generate: the requests' output tokens ÷ the request's seconds, every device
  (``serving.tokens_per_second``); train and forward: the step's tokens ÷ s, per device
  as ``samples_per_second``
* ``seconds_per_token``  = decode: the step's seconds; generate: the mean decode step
  (``serving.tpot_seconds``)
* ``cups``               = C × b ÷ s   (s of a training step: forward, backward, update)
* ``cps``                = C × b ÷ s   (s of a forward pass only)

``cups`` and ``cps`` are the prediction's own (it computes C × b ÷ s for the phase it
ran); where it ran the other phase, C comes from the network preset.

Each judged case carries the prediction's interval in its metric (:func:`metric_interval`,
from the calibration installed now: :func:`with_intervals`), and the summary its coverage
(``interval_coverage``, :mod:`memwall.study.intervals`; docs/intervals.md).
"""


from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..options import GEMM, OPTIONS, Case
from ..options import names as option_names
from .identity import is_path
from .measurements import Measurement

if TYPE_CHECKING:
    from ..simulation.intervals import Calibration

Predictor = Callable[[Case], Mapping[str, Any]]

# Metrics where a smaller prediction is the optimistic one (the others are rates).
LOWER_IS_BETTER = ("seconds", "seconds_per_token", "joules", "watts")
BAND = 2.0  # a prediction within a factor of BAND of the measurement counts as "within 2x"


@dataclass(frozen=True)
class CaseResult:
    """One measurement and memwall's prediction of it."""

    id: str
    machine: str
    workload: str
    metric: str
    measured: float
    predicted: float | None
    ratio: float | None  # predicted / measured
    status: str  # ok | unknown machine | unknown network | error
    check: str  # point | lower-bound-on-prediction | upper-bound-on-prediction
    bound: str | None  # what memwall says limits the step: 'compute' or a level name
    reliability: str
    notes: str
    explanation: str | None
    source: str
    year: int | None
    error: str | None = None  # the reason, when status is not ok
    kind: str | None = None  # the machine's kind (gpu, vector, array, ...), for the table by kind
    framework: str | None = None  # the software that ran the measured step (Measurement.framework)
    # the prediction's regime (memwall.simulation.intervals.regime) and its interval in the
    # metric's unit ({"low", "high", "coverage"}; a rate's low end from the seconds' high end)
    regime: str | None = None
    interval: dict[str, float] | None = None
    seconds: float | None = None  # the prediction's seconds, which the interval is on

    @property
    def optimistic(self) -> bool | None:
        """Whether the prediction is on the optimistic side of the measurement: faster,
        or cheaper in energy (a time, joules or watts below it; a rate above it)."""
        if self.ratio is None or self.ratio == 1.0:
            return None if self.ratio is None else False
        return self.ratio < 1.0 if self.metric in LOWER_IS_BETTER else self.ratio > 1.0

    @property
    def log2_ratio(self) -> float | None:
        return None if self.ratio is None else math.log2(self.ratio)

    @property
    def in_interval(self) -> bool | None:
        """Whether the measurement lies in the prediction's interval (its ends included)."""
        if self.interval is None or self.status != "ok":
            return None
        return self.interval["low"] <= self.measured <= self.interval["high"]

    @property
    def within_band(self) -> bool | None:
        """Point checks: within 2x. Bound checks: the bound holds."""
        if self.ratio is None:
            return None
        if self.check == "lower-bound-on-prediction":
            return self.ratio >= 1.0
        if self.check == "upper-bound-on-prediction":
            return self.ratio <= 1.0
        return 1.0 / BAND <= self.ratio <= BAND

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["log2_ratio"] = self.log2_ratio
        d["within_band"] = self.within_band
        d["in_interval"] = self.in_interval
        return d


def case_for(m: Measurement) -> Case:
    """The simulation that reproduces a measurement's workload: its machine, its workload and
    every case option the file states (memwall.options), the rest at their defaults."""
    if m.gemm is not None:
        return Case(machine=m.machine, gemm=m.gemm, phase="forward",
                    **{o.name: getattr(m, o.name) for o in OPTIONS if GEMM in o.workloads})
    return Case(machine=m.machine, network=m.network_file or m.network, **{k: getattr(m, k) for k in option_names()})


# The energy metrics and the key of a result's energy table each reads.
ENERGY_METRICS = {"joules": "joules", "watts": "watts_average", "tokens_per_joule": "tokens_per_joule"}


def _energy_metric(metric: str, prediction: Mapping[str, Any]) -> float:
    energy = prediction.get("energy")
    if not energy:
        raise InputError(f"the prediction has no energy: machine {prediction.get('machine')!r} states no "
                         "[energy] figures", field="metric")
    key = ENERGY_METRICS[metric]
    if not energy.get(key):
        why = "the step has no tokens" if metric == "tokens_per_joule" else "it is zero"
        raise InputError(f"the prediction has no {key!r}: {why}", field="metric")
    return float(energy[key])


def predicted_metric(metric: str, prediction: Mapping[str, Any], *, batch: int = 1,
                     network: str | None = None) -> float:
    """The prediction (a ``memwall inspect`` dict), in the measurement's metric (see the
    module docstring for the formulas)."""
    seconds = prediction.get("seconds")
    if not isinstance(seconds, int | float) or seconds <= 0:
        raise InputError(f"the prediction has no positive 'seconds' (got {seconds!r})", field="seconds")
    seconds = float(seconds)
    # with gradient accumulation a step is an optimizer step of accumulate x batch examples
    examples = (prediction.get("optimizer_step") or {}).get("examples") or prediction.get("batch", batch)
    if metric == "seconds":
        return seconds
    if metric == "flops":
        return float(prediction["achieved_flops"])
    whole = prediction.get("global_step")  # several devices: the whole step, every replica
    if metric == "samples_per_second":
        if whole:
            return float(whole["examples_per_second"]) / int(whole["devices"])
        return examples / seconds
    serving = prediction.get("serving")
    if metric == "tokens_per_second" and not serving:
        # a training or forward step's throughput, per device (published training tables)
        if whole:
            per_device = float(whole["tokens_per_second_per_device"])
        else:
            per_device = float((prediction.get("optimizer_step") or {}).get("tokens") or 0) / seconds
        if per_device <= 0:
            raise InputError("the prediction has no tokens: the network is not a sequence model (use "
                             "samples_per_second)", field="metric")
        return per_device
    if metric in ("tokens_per_second", "seconds_per_token"):
        if not serving or serving.get(metric) is None:  # a request of one output token has no decode step
            raise InputError(f"the prediction has no {metric!r}: it is not a decode, prefill or generate case "
                             "(with a decode step)",
                             field="metric")
        return float(serving[metric])
    if metric in ENERGY_METRICS:
        return _energy_metric(metric, prediction)
    if metric in ("cups", "cps"):
        # run_case reports 'cups' for a training step and 'cps' for a forward one, both
        # connections x examples / seconds; the other is 0, and then the preset says C.
        own = prediction.get(metric)
        if own:
            return float(own)
        if network is None:
            raise InputError(f"cannot convert to {metric!r}: the network's connections are unknown",
                             field="connections")
        from ..networks import load_network

        return load_network(network).connections * examples / seconds
    raise InputError(f"unknown metric {metric!r}", field="metric")


# Speed metrics that are times; the other speed metrics are rates (work ÷ seconds).
TIME_METRICS = ("seconds", "seconds_per_token")


def metric_interval(metric: str, predicted: float, seconds: float,
                    interval: Mapping[str, float] | None) -> dict[str, float] | None:
    """The interval on the prediction's ``seconds``, in the measurement's metric: a time
    scales with the seconds (predicted × low ÷ seconds, predicted × high ÷ seconds); a rate
    is inverted (predicted × seconds ÷ high is its low end: the slow tail is the low rate);
    an energy metric has none (the interval is on time)."""
    if interval is None or metric in ENERGY_METRICS or not seconds > 0:
        return None
    lo, hi = interval["low"] / seconds, interval["high"] / seconds
    if metric in TIME_METRICS:
        return {"low": predicted * lo, "high": predicted * hi, "coverage": interval["coverage"]}
    return {"low": predicted / hi, "high": predicted / lo, "coverage": interval["coverage"]}


def known_ids(kind: str) -> set[str] | None:
    """Ids of the shipped machines or networks (None: check nothing)."""
    if kind == "machine":
        from ..profiles import machine_ids

        return set(machine_ids())
    from ..networks import network_ids

    return set(network_ids())


def default_predictor() -> Predictor:
    """:func:`memwall.simulation.run_case`."""
    from ..simulation import run_case

    return run_case


def validate(measurements: Sequence[Measurement], predictor: Predictor | None = None, *,
             check_ids: bool = True) -> list[CaseResult]:
    """Predict every measurement; one :class:`CaseResult` per measurement, in order.

    With ``check_ids`` a machine or network missing from the shipped catalogues is reported
    as 'unknown machine' / 'unknown network' before the predictor is asked (a path to a
    profile file is allowed: the predictor decides). An InputError from the predictor is
    reported on its case, as 'error', and the others still run.
    """
    from ..simulation.intervals import load_calibration, regime

    predictor = predictor or default_predictor()
    machines = known_ids("machine") if check_ids else None
    networks = known_ids("network") if check_ids else None
    results = []
    for m in measurements:
        status, error, prediction = "ok", None, None
        if machines is not None and m.machine not in machines and not m.machine.endswith(".toml"):
            status, error = "unknown machine", f"no machine profile {m.machine!r}"
        elif networks is not None and m.network is not None and m.network not in networks \
                and not is_path(m.network):
            status, error = "unknown network", f"no network preset {m.network!r}"
        else:
            try:
                prediction = predictor(case_for(m))
                predicted = predicted_metric(m.metric, prediction, batch=m.batch, network=m.network)
            except InputError as err:
                text = str(err)
                if "unknown machine" in text or "no machine" in text:
                    status = "unknown machine"
                elif "unknown network" in text or "no network" in text:
                    status = "unknown network"
                else:  # a profile that exists but cannot be used is an error, not an unknown
                    status = "error"
                error, prediction = text, None
            except Exception as err:  # noqa: BLE001 - any failure is this case's, reported on it
                status, error, prediction = "error", f"{type(err).__name__}: {err}", None
        year, kind = _machine_info(m.machine)
        reg = seconds = None
        if prediction is None:
            predicted = ratio = None
            bound = None
        else:
            ratio = predicted / m.value
            bound = prediction.get("bound")
            bound = str(bound) if bound is not None else None
            reg, seconds = regime(prediction), float(prediction["seconds"])
        results.append(CaseResult(
            id=m.id, machine=m.machine, workload=m.workload, metric=m.metric, measured=m.value,
            predicted=predicted, ratio=ratio, status=status, check=m.check, bound=bound,
            reliability=m.reliability, notes=m.notes, explanation=m.explanation, source=m.source,
            year=m.year if m.year is not None else year, error=error, kind=kind, framework=m.framework,
            regime=reg, seconds=seconds,
        ))
    # the intervals from the calibration shipped now (a stored prediction's may predate it)
    return with_intervals(results, load_calibration())


def with_intervals(results: Sequence[CaseResult], calibration: Calibration | None) -> list[CaseResult]:
    """``results`` with each interval from ``calibration`` (None: none), in the metric's unit
    (:func:`metric_interval`); the predictions are untouched."""
    from ..simulation.intervals import interval_of

    out = []
    for r in results:
        interval = None
        if r.status == "ok" and r.predicted is not None and r.seconds:
            interval = metric_interval(r.metric, r.predicted, r.seconds,
                                       interval_of(r.seconds, r.kind, r.regime, calibration))
        out.append(replace(r, interval=interval))
    return out
    return results


def _machine_info(machine: str) -> tuple[int | None, str | None]:
    """The machine's year and kind; (None, None) for one that cannot be loaded."""
    from ..profiles import load_machine

    try:
        m = load_machine(machine)
    except InputError:  # year and kind only group the summary; an unknown machine is reported on its case
        return None, None
    return m.year, m.kind


def summarize(results: Sequence[CaseResult], intervals: Calibration | None = None) -> dict[str, Any]:
    """Cases, median and worst |log2 ratio| and the share within 2x (point checks), bound checks held.

    Only point checks enter the median, worst and share: a bound check (e.g. a multi-GPU run's
    per-device speed as a floor for a single-device prediction) says nothing about how close
    the prediction should be, only on which side it must fall.
    """
    point = [r for r in results if r.check == "point" and r.ratio is not None]
    bounds = [r for r in results if r.check != "point" and r.ratio is not None]
    worst = max(point, key=lambda r: abs(r.log2_ratio or 0.0)) if point else None
    not_run: dict[str, list[str]] = {}
    for r in results:
        if r.status != "ok":
            not_run.setdefault(r.status, []).append(r.id)
    return {
        "cases": len(results),
        "predicted": len(point) + len(bounds),
        **_stats(point),
        "worst_abs_log2_ratio": abs(worst.log2_ratio) if worst and worst.log2_ratio is not None else None,
        "worst_case": worst.id if worst else None,
        "bound_cases": len(bounds),
        "bounds_held": sum(1 for r in bounds if r.within_band),
        "not_predicted": not_run,
        "by_era": _grouped(point, lambda r: era_of(r.year)),
        "by_kind": _grouped(point, lambda r: r.kind or "unknown"),
        # speed (time, rates) and energy (joules, watts, tokens per joule) are judged apart
        "by_quantity": _grouped(point, lambda r: "energy" if r.metric in ENERGY_METRICS else "speed"),
        "optimistic_share": sum(1 for r in point if r.optimistic) / len(point) if point else None,
        "calibration": calibration(point),
        # the intervals' empirical coverage on this set (memwall.study.intervals.summary)
        "interval_coverage": interval_summary(results, intervals),
    }


def interval_summary(results: Sequence[CaseResult], calibration: Calibration | None = None) -> dict[str, Any] | None:
    """How many point checks of speed lie in their interval, in sample and leave-one-out
    (:func:`memwall.study.intervals.summary`; ``calibration`` None: the shipped one); None
    without a calibration."""
    from .intervals import summary

    return summary(results, calibration)


def calibration(point: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """One row per (era, machine kind, framework) of point checks: how many, the median
    ratio oriented so that above 1 is optimistic (predicted ÷ measured for a rate, measured
    ÷ predicted for a time, joules or watts: a group mixing both reads as one), the share
    within 2x, and the share on the optimistic side (:attr:`CaseResult.optimistic`)."""
    groups: dict[tuple[str, str, str], list[CaseResult]] = {}
    for r in point:
        groups.setdefault((era_of(r.year), r.kind or "unknown", r.framework or "unstated"), []).append(r)
    return [{"era": era, "kind": kind, "framework": framework, "count": len(rs),
             "median_ratio": statistics.median(r.ratio if r.metric not in LOWER_IS_BETTER else 1 / r.ratio
                                               for r in rs if r.ratio),
             "within_2x": sum(1 for r in rs if r.within_band) / len(rs),
             "optimistic_share": sum(1 for r in rs if r.optimistic) / len(rs)}
            for (era, kind, framework), rs in sorted(groups.items())]


def _grouped(point: Sequence[CaseResult], key: Callable[[CaseResult], str]) -> dict[str, dict[str, Any]]:
    """Point checks per group: how many, their median |log2 ratio| and the share within 2x."""
    groups: dict[str, list[CaseResult]] = {}
    for r in point:
        groups.setdefault(key(r), []).append(r)
    return {name: _stats(rs) for name, rs in sorted(groups.items())}


def _stats(point: Sequence[CaseResult]) -> dict[str, Any]:
    """How many point checks, their median |log2 ratio| and the share within 2x (None if none)."""
    return {"point_cases": len(point),
            "median_abs_log2_ratio": statistics.median(abs(r.log2_ratio or 0.0) for r in point) if point else None,
            "share_within_2x": sum(1 for r in point if r.within_band) / len(point) if point else None}


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _interval_text(r: CaseResult) -> str:
    """``low-high`` in the metric's unit, ``*`` after it when the measurement lies outside."""
    if r.interval is None:
        return "-"
    return f"{_num(r.interval['low'])}-{_num(r.interval['high'])}" + ("" if r.in_interval else " *")


def format_table(results: Sequence[CaseResult], summary: Mapping[str, Any] | None = None) -> str:
    """The text report: one row per case, its note, then the summary."""
    summary = summary if summary is not None else summarize(results)
    header = ("id", "machine", "workload", "metric", "measured", "predicted", "ratio", "interval", "bound", "check")
    rows = []
    for r in results:
        mark = {"lower-bound-on-prediction": ">=", "upper-bound-on-prediction": "<="}.get(r.check, "")
        held = "" if r.within_band is None else (" ok" if r.within_band else " MISS")
        rows.append((r.id, r.machine, r.workload, r.metric, _num(r.measured),
                     _num(r.predicted) if r.status == "ok" else r.status,
                     _num(r.ratio), _interval_text(r), r.bound or "-", (mark or "point") + held))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(header, widths, strict=True)).rstrip()]
    for r, row in zip(results, rows, strict=True):
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
        note = r.error if r.status != "ok" else (r.explanation or r.notes)
        lines.append("    note: " + " ".join(note.split()))
    lines.append("")
    med, worst = summary["median_abs_log2_ratio"], summary["worst_abs_log2_ratio"]
    share = summary["share_within_2x"]
    lines.append(
        f"{summary['cases']} cases, {summary['predicted']} predicted; "
        f"point checks: {summary['point_cases']}, median |log2 ratio| {_num(med)}"
        + (f" ({2 ** med:.2f}x)" if med is not None else "")
        + f", worst {_num(worst)}"
        + (f" ({2 ** worst:.2f}x, {summary['worst_case']})" if worst is not None else "")
        + ", within 2x: " + ("-" if share is None else f"{share:.0%}")
    )
    lines.append(f"bound checks: {summary['bounds_held']} of {summary['bound_cases']} held")
    if summary.get("optimistic_share") is not None:
        lines.append(f"optimistic (faster or cheaper than measured): {summary['optimistic_share']:.0%} of point checks")
    for title, key in (("by era", "by_era"), ("by machine kind", "by_kind"), ("by quantity", "by_quantity")):
        groups = summary.get(key) or {}
        if groups:
            width = max(len(name) for name in groups)
            lines.append(f"{title}: point checks, median |log2 ratio|, within 2x")
            lines.extend(f"  {name.ljust(width)}  {g['point_cases']:3d}  {g['median_abs_log2_ratio']:.3f} "
                         f"({2 ** g['median_abs_log2_ratio']:.2f}x)  {g['share_within_2x']:.0%}"
                         for name, g in groups.items())
    rows = summary.get("calibration") or []
    if rows:
        lines.append("calibration: era, machine kind, framework: point checks, median ratio (above 1 optimistic: "
                     "predicted/measured for a rate, measured/predicted for a time or energy), within 2x, optimistic "
                     "(faster or cheaper than measured)")
        names = [" | ".join((r["era"], r["kind"], r["framework"])) for r in rows]
        width = max(len(n) for n in names)
        lines.extend(f"  {n.ljust(width)}  {r['count']:3d}  {r['median_ratio']:.3g}  {r['within_2x']:.0%}  "
                     f"{r['optimistic_share']:.0%}" for n, r in zip(names, rows, strict=True))
    iv = summary.get("interval_coverage")
    if iv and iv["checks"]:
        loo = iv["leave_one_out"]
        lines.append(f"interval ({iv['nominal']:.0%} nominal): {iv['covered']} of {iv['checks']} point checks of speed "
                     f"inside ({iv['share']:.0%}); calibrated on the others alone (leave-one-out): {loo['covered']} of "
                     f"{loo['checks']}" + (f" ({loo['share']:.0%})" if loo["share"] is not None else "")
                     + f"; calibration at model {iv['calibrated_at']}" + (" (stale)" if iv["stale"] else ""))
    for status, ids in summary["not_predicted"].items():
        lines.append(f"{status}: {', '.join(ids)}")
    return "\n".join(lines)


def to_json(results: Sequence[CaseResult], intervals: Calibration | None = None) -> dict[str, Any]:
    """``{"cases": [...], "summary": {...}}`` for ``memwall validate --json`` (``intervals``:
    the calibration the coverage is of; None: the shipped one)."""
    return {"cases": [r.as_dict() for r in results], "summary": summarize(results, intervals)}


ERAS: tuple[tuple[str, int, int], ...] = (
    ("1976-1995: vector and scalar machines", 0, 1995),
    ("1996-2012: cache CPUs, early GPUs", 1996, 2012),
    ("2013-: GPUs and TPUs", 2013, 9999),
)


def era_of(year: int | None) -> str:
    if year is None:
        return "year unknown"
    for name, lo, hi in ERAS:
        if lo <= year <= hi:
            return name
    return "year unknown"

