"""Figure 7, the validation: memwall's predictions against published measurements,
log-log, the 2x band shaded (the judge is :mod:`memwall.study.validation`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..vocabulary import METRIC_UNITS, METRICS
from ._style import _plt, axis, custom, e, empty_spec, hover, spec

NUMBER = 7
NAME = "validation"
TITLE = "Validation: memwall's predictions against published measurements"
CAPTION = ("memwall's prediction for each published measurement of era_data/measurements "
           "(GEMMs, CUPS of the 1980s machines, a Megatron-LM floor) against the measured value, log-log; "
           "the grey band is within 2x; the bar through a point is the prediction's interval, converted to the "
           "metric (a rate's is the seconds' inverted; docs/intervals.md). The table below gives each case with "
           "its source note.")
# ``cases``: the judge's rows (CaseResult.as_dict); ``summary``: its summary; ``eras``
# (optional, for the colours): [{"name", "first", "last"}] as the judge bins years.
TABLES = ("cases", "summary")
NEEDS = "published measurements (era_data/measurements) that memwall predicts"
OPT_IN = False

BAND = 2.0
# One marker for each metric the measurement files declare (vocabulary.METRICS), in
# its order; "^" and "v" are kept for the bound checks, which point the way the bound holds.
MARKERS = dict(zip(METRICS, ("s", "D", "o", "X", "P", "p", "h", "*", "<", ">"), strict=True))
UNITS = {metric: units[0] for metric, units in METRIC_UNITS.items()}
ERA_COLOURS = ("#b2182b", "#ef8a62", "#2166ac")
UNKNOWN = "year unknown"


def _predicted(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in data.get("cases") or [] if r.get("predicted") and r.get("measured")]


def _bars(rows: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    """Each row's distance below and above its prediction to its interval's ends (0 without one)."""
    below = [r["predicted"] - r["interval"]["low"] if r.get("interval") else 0.0 for r in rows]
    above = [r["interval"]["high"] - r["predicted"] if r.get("interval") else 0.0 for r in rows]
    return below, above


def _era(year: int | None, eras: Sequence[Mapping[str, Any]]) -> str:
    return next((e["name"] for e in eras if year is not None and e["first"] <= year <= e["last"]), UNKNOWN)


def draw(data: Mapping[str, Any]):
    """Predicted against measured, log-log, the 2x band shaded, points coloured by era.

    Each metric keeps its own unit (FLOP/s, CUPS, ...) on both axes, so a point's distance
    from the diagonal is the ratio whatever the metric. Bound checks are drawn hollow, with
    an arrow-like marker showing on which side the prediction must fall."""
    plt = _plt()
    rows = _predicted(data)
    eras = data.get("eras") or []
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    values = [v for r in rows for v in (r["measured"], r["predicted"],
                                        *((r["interval"]["low"], r["interval"]["high"]) if r.get("interval") else ()))]
    values = values or [1.0, 10.0]
    lo, hi = min(values) / 4, max(values) * 4
    xs = [lo, hi]
    ax.fill_between(xs, [x / BAND for x in xs], [x * BAND for x in xs], color="0.88", label="within 2x")
    ax.plot(xs, xs, color="0.4", lw=0.8, label="predicted = measured")
    colours = {**{e["name"]: c for e, c in zip(eras, ERA_COLOURS, strict=False)}, UNKNOWN: "0.5"}
    seen: set[tuple[str, str]] = set()
    for r in rows:
        era = _era(r.get("year"), eras)
        metric = r["metric"]
        point = r.get("check", "point") == "point"
        marker = MARKERS.get(metric, "o") if point else ("^" if r["check"].startswith("lower") else "v")
        label_key = (era, metric if point else r["check"])
        label = None
        if label_key not in seen:
            seen.add(label_key)
            said = f"{metric.replace('_', ' ')} ({UNITS[metric]})" if metric in UNITS else metric
            label = f"{era} - {said if point else r['check']}"
        if r.get("interval"):  # the prediction's interval, drawn under its point
            below, above = _bars([r])
            ax.errorbar(r["measured"], r["predicted"], yerr=[below, above], fmt="none", ecolor=colours.get(era, "0.5"),
                        elinewidth=0.8, alpha=0.6, capsize=2, zorder=2)
        ax.scatter(r["measured"], r["predicted"], marker=marker, s=46, zorder=3, label=label,
                   facecolors=colours.get(era, "0.5") if point else "none", edgecolors=colours.get(era, "0.5"),
                   linewidths=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    shown = dict.fromkeys(UNITS.get(r["metric"], r["metric"]) for r in rows)
    ax.set_xlabel(f"measured (the metric's unit: {', '.join(shown) or 'none'})")
    ax.set_ylabel("predicted by memwall (same unit)")
    ax.set_title("memwall against published measurements")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    ax.text(0.99, 0.01, "sources: era_data/measurements/*.toml", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout()
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = _predicted(data)
    if not rows:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    lo = min(min(r["measured"], r["predicted"], (r.get("interval") or {}).get("low", math.inf)) for r in rows) / 4
    hi = max(max(r["measured"], r["predicted"], (r.get("interval") or {}).get("high", 0.0)) for r in rows) * 4
    traces: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "within 2×", "x": [lo, hi, hi, lo],
         "y": [lo / BAND, hi / BAND, hi * BAND, lo * BAND], "fill": "toself", "fillcolor": "rgba(0,0,0,0.08)",
         "line": {"width": 0}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines", "name": "predicted = measured", "x": [lo, hi], "y": [lo, hi],
         "line": {"color": "#666", "width": 1}, "hoverinfo": "skip"}]
    for metric in dict.fromkeys(r["metric"] for r in rows):
        s = [r for r in rows if r["metric"] == metric]
        below, above = _bars(s)
        traces.append({"type": "scatter", "mode": "markers", "name": metric, "x": [r["measured"] for r in s],
                       "y": [r["predicted"] for r in s], "marker": {"size": 9},
                       "error_y": {"type": "data", "symmetric": False, "array": above, "arrayminus": below,
                                   "thickness": 1, "width": 2},
                       "customdata": custom(s, ("id", "machine", "workload", "measured", "predicted", "ratio",
                                                lambda r: r.get("check"))),
                       "hovertemplate": hover(("case", "machine", "workload", "measured", "predicted", "ratio",
                                               "check"))})
    return spec(traces, xaxis=axis("measured (metric's unit)", True), yaxis=axis("predicted by memwall (same unit)",
                                                                              True))


def prose(data: Mapping[str, Any]) -> str:
    summ = data.get("summary") or {}
    if not summ.get("point_cases"):
        return ""
    return (f"{summ['point_cases']} point checks: {summ['share_within_2x']:.0%} within 2×, median "
            f"|log2 ratio| {summ['median_abs_log2_ratio']:.2f} ({2 ** summ['median_abs_log2_ratio']:.2f}×), "
            f"worst {e(summ['worst_case'])} ({2 ** summ['worst_abs_log2_ratio']:.2f}×)." + _coverage(summ))


def _coverage(summ: Mapping[str, Any]) -> str:
    """The intervals' coverage, in sample and leave-one-out, when the summary has it."""
    iv = summ.get("interval_coverage")
    if not iv or not iv.get("checks"):
        return ""
    loo = iv["leave_one_out"]
    return (f" The intervals ({iv['nominal']:.0%} nominal) hold {iv['covered']} of {iv['checks']} speed measurements"
            + (f"; each calibrated without its own measurement, {loo['covered']} of {loo['checks']}"
               if loo.get("checks") else "") + ".")
