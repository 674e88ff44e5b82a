"""The judge: memwall's predictions against published measurements.

Owns: turning a :class:`~memwall.experiments.measurements.Measurement` into the :class:`Case` that
reproduces it (:func:`case_for`), converting a prediction (the ``memwall inspect`` dict)
into the measurement's metric (:func:`predicted_metric`), the per-case comparison
(:func:`validate`, one :class:`CaseResult` each), the summary (:func:`summarize`), the
text table (:func:`format_table`) and the figure (:func:`validation_figure`).

A measurement whose machine or network memwall does not know is reported with that
status, never dropped. The predictor is injected (any ``Case -> dict`` function), so the
comparison is tested without the simulator; by default it is
:func:`memwall.simulate.run_case`.

Metric conversions, exactly as computed here (``s`` = predicted seconds of one step,
``b`` = examples in the step, ``C`` = the network's connections, i.e. weights):

* ``seconds``            = s
* ``flops``              = the prediction's ``achieved_flops`` (its FLOPs ÷ s)
* ``samples_per_second`` = b ÷ s
* ``cups``               = C × b ÷ s   (s of a training step: forward, backward, update)
* ``cps``                = C × b ÷ s   (s of a forward pass only)

``cups`` and ``cps`` are the prediction's own (it computes C × b ÷ s for the phase it
ran); where it ran the other phase, C comes from the network preset.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..simulate import Case
from .measurements import Measurement, is_network_path

Predictor = Callable[[Case], Mapping[str, Any]]

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

    @property
    def log2_ratio(self) -> float | None:
        return None if self.ratio is None else math.log2(self.ratio)

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
        return d


def case_for(m: Measurement) -> Case:
    """The simulation that reproduces a measurement's workload."""
    if m.gemm is not None:
        return Case(machine=m.machine, gemm=m.gemm, dtype=m.dtype, phase="forward", dispatch=m.dispatch)
    return Case(
        machine=m.machine,
        network=m.network_file or m.network,
        batch=m.batch,
        checkpoint=m.checkpoint,
        updates=m.updates,
        phase=m.phase,
        optimizer=m.optimizer,
        dtype=m.dtype,
        seq_len=m.seq_len,
        dispatch=m.dispatch,
        accumulate=m.accumulate,
        fusion=m.fusion,
        context=m.context,
        weights=m.weights,
        kv_dtype=m.kv_dtype,
        weight_group=m.weight_group,
        weight_zero=m.weight_zero,
        dp=m.dp, tp=m.tp, pp=m.pp, ep=m.ep, zero=m.zero,
    )


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
    if metric == "samples_per_second":
        return examples / seconds
    if metric in ("tokens_per_second", "seconds_per_token"):
        serving = prediction.get("serving")
        if not serving or metric not in serving:
            raise InputError(f"the prediction has no {metric!r}: it is not a decode or prefill case", field="metric")
        return float(serving[metric])
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


def _known(kind: str) -> set[str] | None:
    """Ids of the shipped machines or networks (None: check nothing)."""
    if kind == "machine":
        from ..profiles import machine_ids

        return set(machine_ids())
    from ..networks import network_ids

    return set(network_ids())


def default_predictor() -> Predictor:
    """:func:`memwall.simulate.run_case`."""
    from ..simulate import run_case

    return run_case


def validate(measurements: Sequence[Measurement], predictor: Predictor | None = None, *,
             check_ids: bool = True) -> list[CaseResult]:
    """Predict every measurement; one :class:`CaseResult` per measurement, in order.

    With ``check_ids`` a machine or network missing from the shipped catalogues is reported
    as 'unknown machine' / 'unknown network' before the predictor is asked (a path to a
    profile file is allowed: the predictor decides). An InputError from the predictor is
    reported on its case, as 'error', and the others still run.
    """
    predictor = predictor or default_predictor()
    machines = _known("machine") if check_ids else None
    networks = _known("network") if check_ids else None
    results = []
    for m in measurements:
        status, error, prediction = "ok", None, None
        if machines is not None and m.machine not in machines and not m.machine.endswith(".toml"):
            status, error = "unknown machine", f"no machine profile {m.machine!r}"
        elif networks is not None and m.network is not None and m.network not in networks \
                and not is_network_path(m.network):
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
        if prediction is None:
            predicted = ratio = None
            bound = None
        else:
            ratio = predicted / m.value
            bound = prediction.get("bound")
            bound = str(bound) if bound is not None else None
        year, kind = _machine_info(m.machine)
        results.append(CaseResult(
            id=m.id, machine=m.machine, workload=m.workload, metric=m.metric, measured=m.value,
            predicted=predicted, ratio=ratio, status=status, check=m.check, bound=bound,
            reliability=m.reliability, notes=m.notes, explanation=m.explanation, source=m.source,
            year=m.year if m.year is not None else year, error=error, kind=kind,
        ))
    return results


def _machine_info(machine: str) -> tuple[int | None, str | None]:
    """The machine's year and kind; (None, None) for one that cannot be loaded."""
    from ..profiles import load_machine

    try:
        m = load_machine(machine)
    except InputError:  # year and kind only group the summary; an unknown machine is reported on its case
        return None, None
    return m.year, m.kind


def summarize(results: Sequence[CaseResult]) -> dict[str, Any]:
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
    }


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


def format_table(results: Sequence[CaseResult], summary: Mapping[str, Any] | None = None) -> str:
    """The text report: one row per case, its note, then the summary."""
    summary = summary if summary is not None else summarize(results)
    header = ("id", "machine", "workload", "metric", "measured", "predicted", "ratio", "bound", "check")
    rows = []
    for r in results:
        mark = {"lower-bound-on-prediction": ">=", "upper-bound-on-prediction": "<="}.get(r.check, "")
        held = "" if r.within_band is None else (" ok" if r.within_band else " MISS")
        rows.append((r.id, r.machine, r.workload, r.metric, _num(r.measured),
                     _num(r.predicted) if r.status == "ok" else r.status,
                     _num(r.ratio), r.bound or "-", (mark or "point") + held))
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
    for title, key in (("by era", "by_era"), ("by machine kind", "by_kind")):
        groups = summary.get(key) or {}
        if groups:
            width = max(len(name) for name in groups)
            lines.append(f"{title}: point checks, median |log2 ratio|, within 2x")
            lines.extend(f"  {name.ljust(width)}  {g['point_cases']:3d}  {g['median_abs_log2_ratio']:.3f} "
                         f"({2 ** g['median_abs_log2_ratio']:.2f}x)  {g['share_within_2x']:.0%}"
                         for name, g in groups.items())
    for status, ids in summary["not_predicted"].items():
        lines.append(f"{status}: {', '.join(ids)}")
    return "\n".join(lines)


def to_json(results: Sequence[CaseResult]) -> dict[str, Any]:
    """``{"cases": [...], "summary": {...}}`` for ``memwall validate --json``."""
    return {"cases": [r.as_dict() for r in results], "summary": summarize(results)}


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


_MARKERS = {"flops": "o", "cups": "s", "cps": "D", "seconds": "v", "samples_per_second": "P"}
_UNITS = {"flops": "FLOP/s", "cups": "CUPS", "cps": "CPS", "seconds": "s", "samples_per_second": "samples/s"}


def validation_figure(cases: Iterable[CaseResult], out_dir: str | Path) -> list[Path]:
    """Predicted against measured, log-log, the 2x band shaded, points coloured by era.

    Each metric keeps its own unit (FLOP/s, CUPS, ...) on both axes, so a point's distance
    from the diagonal is the ratio whatever the metric. Bound checks are drawn hollow, with
    an arrow-like marker showing on which side the prediction must fall. Writes
    ``validation.png`` and ``validation.svg`` into out_dir and returns their paths.
    """
    import matplotlib.pyplot as plt

    rows = [c.as_dict() for c in cases]
    rows = [r for r in rows if r.get("predicted") and r.get("measured")]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    values = [v for r in rows for v in (r["measured"], r["predicted"])] or [1.0, 10.0]
    lo, hi = min(values) / 4, max(values) * 4
    xs = [lo, hi]
    ax.fill_between(xs, [x / BAND for x in xs], [x * BAND for x in xs], color="0.88", label="within 2x")
    ax.plot(xs, xs, color="0.4", lw=0.8, label="predicted = measured")
    colours = dict(zip([e[0] for e in ERAS] + ["year unknown"], ["#b2182b", "#ef8a62", "#2166ac", "0.5"],
                       strict=True))
    seen: set[tuple[str, str]] = set()
    for r in rows:
        era = era_of(r.get("year"))
        metric = r["metric"]
        point = r.get("check", "point") == "point"
        marker = _MARKERS.get(metric, "o") if point else ("^" if r["check"].startswith("lower") else "v")
        label_key = (era, metric if point else r["check"])
        label = None
        if label_key not in seen:
            seen.add(label_key)
            label = f"{era} - {_UNITS.get(metric, metric) if point else r['check']}"
        ax.scatter(r["measured"], r["predicted"], marker=marker, s=46, zorder=3, label=label,
                   facecolors=colours[era] if point else "none", edgecolors=colours[era], linewidths=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (the metric's unit: FLOP/s, CUPS, CPS, s, samples/s)")
    ax.set_ylabel("predicted by memwall (same unit)")
    ax.set_title("memwall against published measurements")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    ax.text(0.99, 0.01, "sources: era_data/measurements/*.toml", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout()
    paths = [out_dir / "validation.png", out_dir / "validation.svg"]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def cached_predictor(folder: str | Path, predictor: Predictor | None = None) -> Predictor:
    """``predictor`` (default :func:`memwall.simulate.run_case`), its answers stored in
    ``folder`` like sweep cases: keyed by the case, the machine profile, the network and
    :data:`memwall.MODEL_VERSION`, so a rerun predicts only what changed."""
    from ..run.row import case_key
    from .store import Store

    store = Store(folder, content="result")
    predict = predictor or default_predictor()

    def run(case: Case) -> Mapping[str, Any]:
        key = case_key(case)
        rec = store.get(key)
        if rec is not None and rec.get("status") == "ok":
            return rec["result"]
        result = dict(predict(case))
        result.pop("kernels", None)  # the judge needs the step's totals, not its kernels
        store.put({"key": key, "status": "ok", "case": case.as_dict(), "result": result})
        return result

    return run


def _predict_one(case: Case) -> tuple[Case, dict[str, Any] | None]:
    from ..simulate import run_case

    try:
        return case, dict(run_case(case))
    except Exception:  # noqa: BLE001 - validate() asks again in the parent and reports why on the case
        return case, None


def prefetch(cases: Sequence[Case], folder: str | Path, jobs: int | None = None) -> int:
    """Predict, on ``jobs`` worker processes (None: the cores), every case not yet stored
    in ``folder`` (:func:`cached_predictor`'s store), so that the validation's predictions
    run side by side rather than one after another; returns how many were computed. A
    case that fails is left for :func:`validate`, which reports its reason."""
    from concurrent.futures import ProcessPoolExecutor

    from ..run.row import case_key
    from .store import Store
    from .sweep import _stop_workers, _watch_parent, default_jobs

    store = Store(folder, content="result")
    todo = list(dict.fromkeys(c for c in cases if (store.get(case_key(c)) or {}).get("status") != "ok"))
    jobs = min(jobs or default_jobs(), len(todo))
    if jobs < 2:
        return 0
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_watch_parent, initargs=(os.getpid(),))
    done = 0
    try:
        for case, result in pool.map(_predict_one, todo):
            if result is not None:
                result.pop("kernels", None)
                store.put({"key": case_key(case), "status": "ok", "case": case.as_dict(), "result": result})
                done += 1
    except BaseException:
        _stop_workers(pool)  # Ctrl-C, a dead worker: kill, don't wait; finished predictions are kept
        raise
    pool.shutdown(wait=True)
    return done


def write_validation(out: str | Path, measurements: str | Path | None = None, *, jobs: int | None = None,
                     one_device: bool = False) -> list[Path]:
    """Validate the shipped measurements (or those in ``measurements``, a file or folder) into
    a sweep folder: ``validation.json`` beside its results, ``figures/validation.png`` (and
    ``.svg``, and the figure's data as ``.csv``) beside its figures.

    Predictions are stored under ``out/validation/`` (see :func:`cached_predictor`), made
    on ``jobs`` processes (:func:`prefetch`), and the figure is redrawn only when the
    table it draws differs from the one last drawn. ``one_device`` keeps the measurements
    of one device (a quick sweep's: the multi-device point checks take minutes to predict;
    ``memwall validate`` and the full sweep run them all)."""
    from .measurements import load_measurements
    from .store import atomic_write, write_csv

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    measured = load_measurements(measurements)
    if one_device:
        measured = [m for m in measured if m.dp * m.tp * m.pp == 1]
    known = _known("machine"), _known("network")
    prefetch([case_for(m) for m in measured if m.machine in known[0] and (m.network is None or m.network in known[1])],
             out / "validation", jobs)
    results = validate(measured, cached_predictor(out / "validation"))
    data = to_json(results)
    text = json.dumps(data, indent=1) + "\n"
    figdir = out / "figures"
    paths = [figdir / "validation.png", figdir / "validation.svg"]
    old = out / "validation.json"
    same = old.is_file() and old.read_text(encoding="utf-8") == text and all(p.is_file() for p in paths)
    if same:
        return paths
    atomic_write(old, text)
    paths = validation_figure(results, figdir)
    write_csv(figdir / "validation.csv", data["cases"])
    return paths
