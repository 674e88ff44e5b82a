"""Figure 8, the roofline explorer: every kernel of each stored step on one machine under
the machine's roofs (the report's copy has a machine picker)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..study.tables import ROOFLINE_MACHINES
from ._style import COLOURS, _empty, _finish, _log_log, _plt, axis, empty_spec, fmt, hover, sources, spec

NUMBER = 8
NAME = "roofline"
TITLE = "Roofline explorer: every kernel of a step under the machine's roofs"
CAPTION = ("Every kernel of each stored step on one machine: FLOPs per byte of main-memory traffic "
           "against achieved FLOP/s, under the peak and each memory level's bandwidth ceiling.")
TABLES = ("points", "roofs")
NEEDS = "a sweep's stored cases on real machines, and its machines.json"
OPT_IN = False

Row = Mapping[str, Any]


def roof_lines(roof: Row) -> list[tuple[str, float]]:
    """(level, bytes/s) for main memory and each level with a bandwidth, outermost first."""
    out = [("memory", float(roof["memory_bandwidth"]))]
    out += [(lv["name"], float(lv["bandwidth"])) for lv in reversed(roof["levels"]) if lv.get("bandwidth")]
    return out


def roof_peak(roof: Row, dtype: str | None = None) -> float:
    peaks = roof["peak_flops"]
    return float(peaks.get(dtype or roof["primary_dtype"]) or peaks[roof["primary_dtype"]])


def _points(data: Row) -> list[Row]:
    return [p for p in data.get("points") or () if p.get("intensity")]


def first_machine(points: Sequence[Row]) -> str:
    """The machine drawn first: the first of ROOFLINE_MACHINES in the data, else the one with most kernels."""
    machines = [p["machine"] for p in points]
    return next((m for m in ROOFLINE_MACHINES if m in machines), max(set(machines), key=machines.count))


def draw(data: Row):
    points = _points(data)
    if not points or not data.get("roofs"):
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    machine = first_machine(points)
    pts = [p for p in points if p["machine"] == machine]
    roof = next(r for r in data["roofs"] if r["machine"] == machine)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    cmap = plt.get_cmap("tab10")
    for k, net in enumerate(dict.fromkeys(p["network"] for p in pts)):
        sub = [p for p in pts if p["network"] == net]
        label: str | None = net
        for hollow in (False, True):
            part = [p for p in sub if (p["intensity_level"] != "memory") == hollow]
            if part:
                ax.scatter([p["intensity"] for p in part], [p["achieved_flops"] for p in part], s=16,
                           color="none" if hollow else cmap(k % 10), edgecolors=cmap(k % 10), label=label)
                label = None
    xs = np.logspace(math.log10(min(p["intensity"] for p in pts)) - 1,
                     math.log10(max(p["intensity"] for p in pts)) + 1, 100)
    peak = roof_peak(roof)
    ax.axhline(peak, color="#222222", lw=1.2, label=f"peak {peak:.3g} FLOP/s ({roof['primary_dtype']})")
    ceiling = (roof.get("achievable_flops") or {}).get(roof["primary_dtype"])
    if ceiling and ceiling < peak:
        ax.axhline(ceiling, color="#222222", lw=1, ls=":",
                   label=f"products' measured ceiling {ceiling:.3g} FLOP/s ([compute.achievable])")
    held = (roof.get("sustained_flops") or {}).get(roof["primary_dtype"])
    if held and held < (ceiling or peak):
        ax.axhline(held, color="#888888", lw=1, ls=":",
                   label=f"at the power limit (training steps) {held:.3g} FLOP/s ([compute.sustained])")
    for j, (level, bw) in enumerate(roof_lines(roof)):
        ax.plot(xs, np.minimum(bw * xs, peak), color="#222222" if j == 0 else "#888888",
                ls="-" if j == 0 else "--", lw=1, label=f"{level} ceiling: {bw:.3g} B/s × intensity")
    _log_log(ax, "arithmetic intensity (FLOP per byte of main-memory traffic)", "achieved FLOP/s of the kernel",
             f"{roof['name']}: every kernel of each stored step under its roofs", "lower right")
    _finish(fig, sources("Hollow: kernels that move no main-memory bytes, placed at their intensity against "
                         "the level that served them. Ceilings: each level's bandwidth from the profile."))
    return fig


def _machine_traces(pts: Sequence[Row], roof: Row | None) -> list[dict[str, Any]]:
    traces: list[dict[str, Any]] = []
    for k, net in enumerate(dict.fromkeys(p["network"] for p in pts)):
        s = [p for p in pts if p["network"] == net]
        traces.append({
            "type": "scatter", "mode": "markers", "name": net, "x": [p["intensity"] for p in s],
            "y": [p["achieved_flops"] for p in s],
            "marker": {"size": 7, "color": COLOURS[k % 10],
                       "symbol": ["circle" if p["intensity_level"] == "memory" else "circle-open" for p in s]},
            "customdata": [[p.get("name"), f"{net} batch {p['batch']} ({p.get('checkpoint')})",
                            f"{p['kernel']} [{p['phase']}, {p['op']}]", f"{fmt(p['intensity'])} vs "
                            f"{p['intensity_level']}", fmt(p["achieved_flops"]), fmt(p["seconds"]), p.get("bound")]
                           for p in s],
            "hovertemplate": hover(("machine", "case", "kernel", "FLOP/B", "achieved FLOP/s", "seconds", "bound"))})
    if roof is None or not pts:
        return traces
    xs = [p["intensity"] for p in pts]
    x0, x1 = min(xs) / 10, max(xs) * 10
    peak = roof["peak_flops"][roof["primary_dtype"]]
    traces.append({"type": "scatter", "mode": "lines", "name": f"peak {fmt(peak)} FLOP/s", "x": [x0, x1],
                   "y": [peak, peak], "line": {"color": "#222"}})
    for j, (level, bw) in enumerate(roof_lines(roof)):
        x = [x0, max(x0, min(peak / bw, x1)), x1]
        traces.append({"type": "scatter", "mode": "lines", "name": f"{level} ceiling {fmt(bw)} B/s", "x": x,
                       "y": [min(peak, v * bw) for v in x],
                       "line": {"color": "#999" if j else "#222", "dash": "dash" if j else "solid"}})
    return traces


def plotly(data: Row) -> dict[str, Any]:
    """One machine's kernels at a time: a menu picks the machine (its traces made visible)."""
    points = _points(data)
    if not points or not data.get("roofs"):
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    machines = list(dict.fromkeys(p["machine"] for p in points))
    shown = first_machine(points)
    traces, owner = [], []
    for m in machines:
        roof = next((r for r in data["roofs"] if r["machine"] == m), None)
        mine = _machine_traces([p for p in points if p["machine"] == m], roof)
        traces += [{**t, "visible": m == shown} for t in mine]
        owner += [m] * len(mine)
    buttons = [{"label": m, "method": "update", "args": [{"visible": [o == m for o in owner]}]} for m in machines]
    menu = {"buttons": buttons, "active": machines.index(shown), "direction": "down", "showactive": True,
            "x": 0, "xanchor": "left", "y": 1.12, "yanchor": "top"}
    return spec(traces, updatemenus=[menu], margin={"t": 60, "r": 20, "b": 55, "l": 70},
                xaxis=axis("arithmetic intensity (FLOP per byte of main-memory traffic)", True),
                yaxis=axis("achieved FLOP/s", True))


def prose(data: Row) -> str:
    pts = data.get("points") or []
    if not pts:
        return ""
    bound = sum(1 for p in pts if p.get("bound") == "compute")
    return (f"{len(pts)} kernels on {len({p['machine'] for p in pts})} machines; "
            f"{bound} of them compute-bound. Pick a machine from the figure's menu to see its kernels under its "
            "roofs.")
