"""Figure 3, the stall breakdown: where one network's per-example training step spends its
time on each machine (arithmetic, stall per memory level, dispatch, vector start-up), with
what binds it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..study.tables import per_example_rows, stall_levels
from ._style import (
    COMPUTE_COLOUR,
    OVERHEAD_COLOUR,
    STALL_COLOURS,
    _empty,
    _finish,
    _plt,
    axis,
    bound_label,
    e,
    empty_spec,
    fmt,
    hover,
    label,
    sources,
    spec,
)

NUMBER = 3
NAME = "stall_breakdown"
TITLE = "Where each machine's step spends its time"
CAPTION = ("One network's per-example training step (NETtalk, batch 1) on each machine, as shares of the step's "
           "time: arithmetic, the stall attributed to each memory level (nearest first), kernel dispatch (the "
           "host issuing each kernel, or the device's gap between kernels) and vector start-up. At batch 1 a "
           "classic network's kernels are microseconds of work, so on every GPU and TPU the step is almost all "
           "dispatch: what these bars show there is launch overhead, not memory. Right of each bar: the step's "
           "bound class (from its sensitivity: the machine figure its time depends on most) and its memory time ÷ "
           "arithmetic time. Overlapped memory traffic is charged to the arithmetic it runs under, so a step can be "
           "memory-bound (ratio above 1) with arithmetic its largest share; the label says which binds.")
TABLES = ("rows",)
NEEDS = "per-example training cases of one network on several machines"
OPT_IN = False

Row = Mapping[str, Any]
STARTUP_COLOUR = "#8ec5e6"
# Each bound class's colour in the label beside a bar (the share's colour where it has one).
CLASS_COLOURS = {"compute": COMPUTE_COLOUR, "memory": STALL_COLOURS[0], "dispatch": OVERHEAD_COLOUR,
                 "startup": "#3a8fbf", "interconnect": "#937860", "power": "#c44e52", "mixed": "#555555"}


def one_network(rows: Sequence[Row]) -> tuple[str | None, list[Row]]:
    """NETtalk's rows (or the first network's), oldest machine first."""
    nets = list(dict.fromkeys(r["network"] for r in rows))
    network = "nettalk" if "nettalk" in nets else (nets[0] if nets else None)
    return network, sorted((r for r in rows if r["network"] == network), key=lambda r: (r["year"], r["machine"]))


def parts(levels: Sequence[str]) -> list[tuple[str, str, str]]:
    """(label, column, colour) of each share of a step's time, in the order they stack
    (``startup_fraction`` is derived: see :func:`share`)."""
    out = [("compute", "compute_fraction", COMPUTE_COLOUR)]
    out += [(f"stall: {lv}", f"stall_{lv}", STALL_COLOURS[k % len(STALL_COLOURS)]) for k, lv in enumerate(levels)]
    return out + [("dispatch (kernel launch)", "dispatch_fraction", OVERHEAD_COLOUR),
                  ("vector start-up", "startup_fraction", STARTUP_COLOUR)]


def share(row: Row, column: str) -> float:
    """A row's share in ``column``; vector start-up is the overhead that is not dispatch."""
    if column == "startup_fraction":
        return max(0.0, float(row.get("overhead_fraction") or 0.0) - float(row.get("dispatch_fraction") or 0.0))
    return float(row.get(column) or 0.0)


def largest(row: Row, levels: Sequence[str]) -> str:
    """The label of a row's largest share."""
    return max(parts(levels), key=lambda p: share(row, p[1]))[0]


def bound_text(row: Row) -> str:
    """What binds the step, beside its bar: its bound class and memory time ÷ arithmetic time."""
    ratio = row.get("memory_ratio")
    return f"{row.get('bound_class') or '?'}" + (f" · mem/arith {ratio:.3g}" if ratio is not None else "")


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: per-example training at batch 1 on real machines."""
    return {"rows": per_example_rows(rows)}


def draw(data: Mapping[str, Any]):
    network, sel = one_network(data.get("rows") or [])
    if not sel:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    # One horizontal bar per machine, oldest at the top, so fifty names stay readable.
    fig, ax = plt.subplots(figsize=(10, max(3.8, 0.24 * len(sel) + 2.4)))
    y = np.arange(len(sel))
    left = np.zeros(len(sel))
    for name, col, colour in parts(stall_levels(sel)):
        vals = np.array([share(r, col) for r in sel])
        if not vals.any():
            continue
        ax.barh(y, vals, left=left, color=colour, label=name, height=0.75)
        left += vals
    ax.set_yticks(y, [label(r) for r in sel], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step's time")
    ax.set_xlim(0, 1.0)
    for k, r in enumerate(sel):
        ax.text(1.01, k, bound_text(r), transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=6.5,
                color=CLASS_COLOURS.get(r.get("bound_class"), "#333333"))
    ax.text(1.01, 1.0, "bound class ·\nmemory ÷ arithmetic", transform=ax.transAxes, va="bottom", ha="left",
            fontsize=7, weight="bold")
    ax.set_title(f"{network}, batch 1, per-example updates: where each step's time goes", pad=34)
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.005), ncol=4, frameon=False)
    _finish(fig, sources())
    return fig


def breakdown_spec(rows: Sequence[Row], label_of: Callable[[Row], str], levels: Sequence[str],
                   horizontal: bool) -> dict[str, Any]:
    """Stacked bars of each row's shares of its cycles (this figure's, and the report's
    machine picker's with one bar per case)."""
    labels = [label_of(r) for r in rows]
    traces = []
    for name, col, colour in parts(levels):
        vals = [share(r, col) for r in rows]
        if not any(vals):
            continue
        t: dict[str, Any] = {"type": "bar", "name": name, "marker": {"color": colour},
                             "customdata": [[labels[i], fmt(vals[i]), fmt(r.get("seconds")), bound_label(r),
                                             fmt(r.get("memory_ratio"))] for i, r in enumerate(rows)],
                             "hovertemplate": hover(("case", f"{name} share", "seconds", "bound (class, figure)",
                                                     "memory time ÷ arithmetic time"))}
        if horizontal:
            t.update(orientation="h", x=vals, y=labels)
        else:
            t.update(x=labels, y=vals)
        traces.append(t)
    time = axis("share of the step's time", range=[0, 1])
    if horizontal:  # the bound class beside each bar, as the PNG has it
        notes = [{"x": 1.01, "xref": "paper", "y": labels[i], "yref": "y", "text": e(bound_text(r)),
                  "showarrow": False, "xanchor": "left", "font": {"size": 10,
                                                                   "color": CLASS_COLOURS.get(r.get("bound_class"),
                                                                                              "#333")}}
                 for i, r in enumerate(rows)]
        return spec(traces, barmode="stack", height=max(360, 22 * len(rows) + 120), xaxis=time,
                    yaxis={"autorange": "reversed", "automargin": True}, annotations=notes,
                    margin={"t": 40, "r": 190, "b": 55, "l": 70})
    return spec(traces, barmode="stack", height=460, yaxis=time, xaxis={"automargin": True})


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    _, sel = one_network(data.get("rows") or [])
    if not sel:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    return breakdown_spec(sel, lambda r: f"{r.get('name') or r['machine']} ({r['year']})",
                          stall_levels(data.get("rows") or []), horizontal=True)


def share_class(part: str) -> str:
    """The bound class a share's label belongs to."""
    return ("compute" if part == "compute" else "memory" if part.startswith("stall") else
            "dispatch" if part.startswith("dispatch") else "startup")


def prose(data: Mapping[str, Any]) -> str:
    network, sel = one_network(data.get("rows") or [])
    if not sel:
        return ""
    levels = stall_levels(sel)
    out = []
    modern = [r for r in sel if r.get("kind") in ("gpu", "tpu", "wafer")]
    if modern:
        dispatch = [r for r in modern if share_class(largest(r, levels)) == "dispatch"]
        bound = [r for r in modern if r.get("bound_class") == "dispatch"]
        shares = sorted(share(r, "dispatch_fraction") for r in dispatch)
        out.append(f"On {len(dispatch)} of the {len(modern)} GPUs, TPUs and wafers the largest share of "
                   f"{e(network)}'s step is dispatch"
                   + (f" ({shares[0]:.0%} to {shares[-1]:.0%} of the step)" if shares else "")
                   + f", and {len(bound)} of them are dispatch-bound by their sensitivity: at batch 1 the "
                   "kernels are too small for memory or arithmetic to show.")
    differ = [r for r in sel if r.get("bound_class") not in (None, "mixed")
              and share_class(largest(r, levels)) != r["bound_class"]]
    if differ:
        out.append("Where the largest share is not what binds: " + "; ".join(
            f"{e(label(r))} is {e(r['bound_class'])}-bound ({e(r.get('bound'))}, memory ÷ arithmetic "
            f"{r['memory_ratio']:.3g}) with {e(largest(r, levels))} its largest share, "
            f"{share(r, dict((n, c) for n, c, _ in parts(levels))[largest(r, levels)]):.0%}" for r in differ)
                   + ". A share is the time a component takes once overlap is counted (memory traffic that "
                   "runs under arithmetic or start-up is charged to them); the bound class is what the step's time "
                   "depends on most.")
    return " ".join(out)
