"""The intervals' calibration: from the judged point checks to ``era_data/intervals.toml``.

Owns: which judged cases calibrate (:func:`calibrating`: point checks of a speed metric
that were predicted), their residual (:func:`residual`: ln(measured seconds ÷ predicted
seconds), whatever the metric), the groups and their quantiles (:func:`calibrate`), the
coverage the calibration reaches on a set, in sample and leave-one-out (:func:`coverage_of`,
:func:`leave_one_out`), the file's text (:func:`calibration_text`, :func:`write_calibration`)
and the staleness check (:func:`stale`). ``memwall validate --write-intervals`` runs it;
reading the file and putting an interval on a result is :mod:`memwall.simulation.intervals`'.
docs/intervals.md states the method as computed here.

Calibration is uncertainty, not tuning: nothing here moves a prediction's seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..simulation.intervals import ANY, COMMAND, Calibration, Group, default_path, load_calibration

if TYPE_CHECKING:
    from .validation import CaseResult

COVERAGE = 0.8  # the nominal share of measurements an interval holds
MIN_COUNT = 8  # the fewest point checks a group needs to have quantiles of its own
TIMES = ("seconds", "seconds_per_token")  # speed metrics that are times; the others are rates


# The speed metrics a measurement may state (memwall.study.measurements); the others are energy.
SPEED = (*TIMES, "flops", "samples_per_second", "tokens_per_second", "cups", "cps")


def is_speed(metric: str) -> bool:
    return metric in SPEED


def residual(r: CaseResult) -> float:
    """ln(measured seconds ÷ predicted seconds): a time's ln(measured ÷ predicted), a rate's
    ln(predicted ÷ measured) (a rate is work ÷ seconds, the same work on both sides)."""
    assert r.ratio is not None and r.ratio > 0
    return -math.log(r.ratio) if r.metric in TIMES else math.log(r.ratio)


def calibrating(results: Sequence[CaseResult]) -> list[CaseResult]:
    """The cases a calibration learns from: point checks of a speed metric, predicted, with
    a regime (bound checks say only on which side a prediction falls; energy is not seconds)."""
    return [r for r in results if r.status == "ok" and r.check == "point" and r.ratio is not None and r.ratio > 0
            and is_speed(r.metric) and r.regime is not None]


def quantile(values: Sequence[float], p: float) -> float:
    """The p-quantile of ``values`` as split conformal prediction takes it: sorted
    x_1..x_n, the k-th with k = ⌈(n + 1) p⌉ for an upper tail and ⌊(n + 1) p⌋ for a lower one
    (clamped to 1..n). A new residual exchangeable with the n falls at or below the upper
    one with probability at least p (above the lower one likewise), so an interval between
    the two tails holds a new measurement at least the nominal share of the time; the plain
    order statistic at p (n - 1) is one rank narrower and held 90 of 123 shipped checks
    leave-one-out (73 %), below the nominal 80 %."""
    xs = sorted(values)
    n = len(xs)
    k = math.ceil((n + 1) * p) if p >= 0.5 else math.floor((n + 1) * p)
    return xs[min(max(k, 1), n) - 1]


def calibrate(results: Sequence[CaseResult], *, coverage: float = COVERAGE, min_count: int = MIN_COUNT,
              model_version: str | None = None) -> Calibration:
    """The groups of :func:`calibrating`'s cases: each (machine kind, regime), every kind in a
    regime (``*``), a kind in every regime, with at least ``min_count`` checks, and the pooled
    group (all, if at least two); each with the (1 - coverage)/2 and (1 + coverage)/2
    quantiles of its residuals."""
    from ..model_version import MODEL_SOURCE_VERSION as MODEL_VERSION

    cases = calibrating(results)
    members: dict[tuple[str, str], list[float]] = {}
    for r in cases:
        e = residual(r)
        # a machine whose profile did not load has no kind: it calibrates the groups over every kind only
        keys = ((r.kind, r.regime), (ANY, r.regime), (r.kind, ANY), (ANY, ANY)) if r.kind else \
            ((ANY, r.regime), (ANY, ANY))
        for key in keys:
            members.setdefault(key, []).append(e)
    tail = (1 - coverage) / 2
    groups = tuple(Group(kind, reg, len(es), quantile(es, tail), quantile(es, 1 - tail))
                   for (kind, reg), es in sorted(members.items())
                   if len(es) >= (2 if (kind, reg) == (ANY, ANY) else max(min_count, 2)))
    return Calibration(coverage=coverage, model_version=model_version or MODEL_VERSION, command=COMMAND,
                       min_count=min_count, groups=groups)


def covers(r: CaseResult, calibration: Calibration) -> bool | None:
    """Whether the case's residual lies in its group's interval (its ends included); None
    when no group serves it."""
    group = calibration.group_for(r.kind, r.regime)
    if group is None:
        return None
    lo, hi = group.factors
    return math.log(lo) <= residual(r) <= math.log(hi)


def coverage_of(results: Sequence[CaseResult], calibration: Calibration) -> tuple[int, int]:
    """(cases inside their interval, cases with one) among :func:`calibrating`'s."""
    flags = [covers(r, calibration) for r in calibrating(results)]
    return sum(1 for f in flags if f), sum(1 for f in flags if f is not None)


def leave_one_out(results: Sequence[CaseResult], *, coverage: float = COVERAGE,
                  min_count: int = MIN_COUNT) -> tuple[int, int]:
    """(cases inside, cases with an interval) when each case's interval is calibrated on the
    others alone, by the same rules (a group left under ``min_count`` falls back): the
    coverage to expect on a measurement the calibration has not seen."""
    cases = calibrating(results)
    inside = total = 0
    for i, r in enumerate(cases):
        held = calibrate(cases[:i] + cases[i + 1:], coverage=coverage, min_count=min_count, model_version="-")
        flag = covers(r, held)
        if flag is not None:
            total += 1
            inside += flag
    return inside, total


def stale(calibration: Calibration | None) -> str | None:
    """A sentence when the calibration was computed at another model version (its point
    predictions may since have moved), else None. Never an error: the intervals still apply."""
    from ..model_version import MODEL_SOURCE_VERSION as MODEL_VERSION

    if calibration is None or calibration.model_version == MODEL_VERSION:
        return None
    return (f"the intervals ({calibration.path}) were calibrated at model version {calibration.model_version}, "
            f"this is {MODEL_VERSION}: rerun '{calibration.command}' to recalibrate them")


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def calibration_text(calibration: Calibration, stats: Mapping[str, Any]) -> str:
    """The file: a header saying what it is and how it is rebuilt, ``[calibration]`` (the
    nominal coverage, the model version, the command, ``min_count`` and ``stats``) and one
    ``[[group]]`` per group."""
    lines = [
        "# The prediction intervals' calibration (docs/intervals.md). Generated: do not edit;",
        f"# rebuild it with `{calibration.command}` after the model changes.",
        "# Each group: the quantiles of ln(measured seconds / predicted seconds) over the shipped",
        "# point checks of speed metrics of that machine kind and regime ('*': any).",
        "",
        "[calibration]",
        f"coverage = {_toml_value(calibration.coverage)}",
        f"model_version = {_toml_value(calibration.model_version)}",
        f"command = {_toml_value(calibration.command)}",
        f"min_count = {calibration.min_count}",
        *(f"{k} = {_toml_value(v)}" for k, v in stats.items()),
    ]
    for g in calibration.groups:
        lines += ["", "[[group]]", f"kind = {_toml_value(g.kind)}", f"regime = {_toml_value(g.regime)}",
                  f"count = {g.count}", f"low = {_toml_value(g.low)}", f"high = {_toml_value(g.high)}"]
    return "\n".join(lines) + "\n"


def write_calibration(results: Sequence[CaseResult], path: str | Path | None = None, *,
                      coverage: float = COVERAGE, min_count: int = MIN_COUNT,
                      measurements: str = "the shipped set") -> tuple[Path, Calibration, dict[str, Any]]:
    """Calibrate on ``results`` and write the file (None: the shipped ``era_data/intervals.toml``):
    returns its path, the calibration read back and what it reports of itself (point
    checks, in-sample and leave-one-out coverage)."""
    from ..execute.store import atomic_write

    cal = calibrate(results, coverage=coverage, min_count=min_count)
    inside, total = coverage_of(results, cal)
    loo_in, loo_total = leave_one_out(results, coverage=coverage, min_count=min_count)
    stats: dict[str, Any] = {
        "measurements": measurements,
        "point_checks": len(calibrating(results)),
        "in_sample_covered": inside, "in_sample_checks": total,
        "leave_one_out_covered": loo_in, "leave_one_out_checks": loo_total,
    }
    out = Path(path) if path is not None else default_path()
    atomic_write(out, calibration_text(cal, stats))
    written = load_calibration(out)
    assert written is not None
    return out, written, stats


def summary(results: Sequence[CaseResult], calibration: Calibration | None = None) -> dict[str, Any] | None:
    """``summary.interval_coverage`` of ``memwall validate --json``: the nominal coverage, how many
    point checks of speed the shipped intervals hold (``covered`` of ``checks``, ``share``),
    the same calibrated leave-one-out on this set (``leave_one_out``), the model version
    the file was computed at and whether that is stale; None without a calibration."""
    cal = calibration if calibration is not None else load_calibration()
    if cal is None:
        return None
    inside, total = coverage_of(results, cal)
    loo_in, loo_total = leave_one_out(results, coverage=cal.coverage, min_count=cal.min_count)
    return {"nominal": cal.coverage, "checks": total, "covered": inside,
            "share": inside / total if total else None,
            "leave_one_out": {"checks": loo_total, "covered": loo_in,
                              "share": loo_in / loo_total if loo_total else None},
            "calibrated_at": cal.model_version, "stale": stale(cal) is not None,
            "file": cal.path, "command": cal.command}
