"""Figure 3, the stall breakdown: where one network's per-example training step spends its
cycles on each machine (arithmetic, stall per memory level, overhead)."""

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
    empty_spec,
    fmt,
    hover,
    label,
    sources,
    spec,
)

NUMBER = 3
NAME = "stall_breakdown"
TITLE = "Stall breakdown per machine"
CAPTION = ("Where one network's per-example training step spends its cycles on each machine: "
           "arithmetic, then the stall attributed to each memory level, then fixed overhead.")
TABLES = ("rows",)
NEEDS = "per-example training cases of one network on several machines"
OPT_IN = False

Row = Mapping[str, Any]


def one_network(rows: Sequence[Row]) -> tuple[str | None, list[Row]]:
    """NETtalk's rows (or the first network's), oldest machine first."""
    nets = list(dict.fromkeys(r["network"] for r in rows))
    network = "nettalk" if "nettalk" in nets else (nets[0] if nets else None)
    return network, sorted((r for r in rows if r["network"] == network), key=lambda r: (r["year"], r["machine"]))


def parts(levels: Sequence[str], overhead: str = "overhead (launch, vector start-up)") -> list[tuple[str, str, str]]:
    """(label, column, colour) of each share of a step's cycles, in the order they stack."""
    out = [("compute", "compute_fraction", COMPUTE_COLOUR)]
    out += [(f"stall: {lv}", f"stall_{lv}", STALL_COLOURS[k % len(STALL_COLOURS)]) for k, lv in enumerate(levels)]
    return out + [(overhead, "overhead_fraction", OVERHEAD_COLOUR)]


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: per-example training at batch 1 on real machines."""
    return {"rows": per_example_rows(rows)}


def draw(data: Mapping[str, Any]):
    network, sel = one_network(data.get("rows") or [])
    if not sel:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    # One horizontal bar per machine, oldest at the top, so fifty names stay readable.
    fig, ax = plt.subplots(figsize=(9, max(3.5, 0.24 * len(sel) + 1.6)))
    y = np.arange(len(sel))
    left = np.zeros(len(sel))
    for name, col, colour in parts(stall_levels(sel)):
        vals = np.array([float(r.get(col) or 0.0) for r in sel])
        if not vals.any():
            continue
        ax.barh(y, vals, left=left, color=colour, label=name, height=0.75)
        left += vals
    ax.set_yticks(y, [label(r) for r in sel], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step's cycles")
    ax.set_xlim(0, 1.0)
    ax.set_title(f"{network}, batch 1, per-example updates: where the cycles go")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.04), ncol=3)
    _finish(fig, sources())
    return fig


def breakdown_spec(rows: Sequence[Row], label_of: Callable[[Row], str], levels: Sequence[str],
                   horizontal: bool) -> dict[str, Any]:
    """Stacked bars of each row's shares of its cycles (this figure's, and the report's
    machine picker's with one bar per case)."""
    labels = [label_of(r) for r in rows]
    traces = []
    for name, col, colour in parts(levels, "overhead (launch, start-up)"):
        vals = [r.get(col) or 0 for r in rows]
        t: dict[str, Any] = {"type": "bar", "name": name, "marker": {"color": colour},
                             "customdata": [[labels[i], fmt(vals[i]), fmt(r.get("seconds")), bound_label(r)]
                                            for i, r in enumerate(rows)],
                             "hovertemplate": hover(("case", f"{name} share", "seconds", "binds"))}
        if horizontal:
            t.update(orientation="h", x=vals, y=labels)
        else:
            t.update(x=labels, y=vals)
        traces.append(t)
    share = axis("share of the step's cycles", range=[0, 1])
    if horizontal:
        return spec(traces, barmode="stack", height=max(360, 22 * len(rows) + 120), xaxis=share,
                    yaxis={"autorange": "reversed", "automargin": True})
    return spec(traces, barmode="stack", height=460, yaxis=share, xaxis={"automargin": True})


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    _, sel = one_network(data.get("rows") or [])
    if not sel:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    return breakdown_spec(sel, lambda r: f"{r.get('name') or r['machine']} ({r['year']})",
                          stall_levels(data.get("rows") or []), horizontal=True)


def prose(data: Mapping[str, Any]) -> str:
    return ""
