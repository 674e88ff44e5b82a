"""Figure 6, the synthetic balance sweep: one compute engine, its balance swept over four
decades two ways (main memory's bandwidth alone; the whole memory system scaled with it),
memory time ÷ arithmetic time against balance with nothing else changed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..study.tables import no_reuse_intensity, per_example_rows
from ._style import (
    COLOURS,
    _empty,
    _finish,
    _plt,
    axis,
    bound_label,
    custom,
    e,
    empty_spec,
    fmt,
    hover,
    sources,
    spec,
)

NUMBER = 6
NAME = "synthetic_balance"
TITLE = "Synthetic balance sweep: one engine, its memory over four decades"
CAPTION = ("One compute engine (the H100's profile) at batch 1, per-example training: memory time ÷ arithmetic "
           "time (memory_ratio; 1 is the flip) against balance, two ways. Left, main memory's bandwidth alone is "
           "replaced (BASE@bw=X): the caches, their bandwidths and every latency stay the H100's, so as bandwidth "
           "grows the ratio stops at a floor the on-chip level and latency set (at batch 1 few tiles are in "
           "flight, and Little's law, bytes in flight ÷ latency, caps what each level delivers) and never "
           "reaches 1. Right, the whole memory system is scaled by one factor (BASE@hier=X): main memory's and "
           "each cache level's bandwidth multiplied by it and every latency divided by it, so every memory time "
           "term shrinks with it and the ratio crosses 1 at the balance marked. Dotted: each network's no-reuse "
           "intensity. Hover gives each step's bound class: at batch 1 on this engine the step's seconds are "
           "mostly kernel dispatch, which neither changes.")
TABLES = ("rows",)
NEEDS = "cases on synthetic machines (BASE@bw=X and BASE@hier=X) at batch 1"
OPT_IN = False

Row = Mapping[str, Any]
PANELS = (("memory", "main memory's bandwidth alone (BASE@bw=X)"),
          ("hierarchy", "the whole memory system scaled (BASE@hier=X)"))
RATIO_AXIS = "memory time ÷ arithmetic time (memory_ratio; 1 is the flip)"
BALANCE_AXIS = "balance (FLOP/B) at the step's dtype"


def _scaled(machine: str) -> str:
    return "hierarchy" if "@hier=" in machine else "memory"


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: per-example training at batch 1 on synthetic
    machines, each row with what its machine scales (``scaled``: memory or hierarchy)."""
    return {"rows": [{**r, "scaled": _scaled(r["machine"])} for r in per_example_rows(rows, synthetic=True)]}


def crossing(rows: Sequence[Row]) -> float | None:
    """The balance where memory_ratio crosses 1 along ``rows`` (one network, one way of
    scaling), log-log between the points that bracket it; None if it never does."""
    pts = sorted((r["balance"], r["memory_ratio"]) for r in rows if r.get("memory_ratio"))
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if (y0 - 1) * (y1 - 1) <= 0 and y0 != y1:
            t = (0 - math.log(y0)) / (math.log(y1) - math.log(y0))
            return math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0)))
    return None


def summary(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per network and way of scaling: the lowest ratio reached and the balance of the flip."""
    out = []
    for scaled, _ in PANELS:
        for net in dict.fromkeys(r["network"] for r in rows):
            sub = [r for r in rows if r["network"] == net and r["scaled"] == scaled and r.get("memory_ratio")]
            if sub:
                low = min(sub, key=lambda r: r["memory_ratio"])
                out.append({"scaled": scaled, "network": net, "lowest": low["memory_ratio"],
                            "lowest_at": low["balance"], "flip": crossing(sub)})
    return out


def draw(data: Mapping[str, Any]):
    sel = [r for r in data.get("rows") or [] if r.get("memory_ratio")]
    if not sel:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4), sharey=True)
    intensity = no_reuse_intensity(sel)
    nets = list(dict.fromkeys(r["network"] for r in sel))
    flips = {(s["scaled"], s["network"]): s["flip"] for s in summary(sel)}
    for ax, (scaled, heading) in zip(axes, PANELS, strict=True):
        for k, net in enumerate(nets):
            sub = sorted((r for r in sel if r["network"] == net and r.get("scaled", _scaled(r["machine"])) == scaled),
                         key=lambda r: r["balance"])
            if not sub:
                continue
            colour = COLOURS[k % 10]
            ax.plot([r["balance"] for r in sub], [r["memory_ratio"] for r in sub], marker="o", ms=4, lw=1,
                    color=colour, label=net)
            if net in intensity:
                ax.axvline(intensity[net], color=colour, ls=":", lw=1)
            flip = flips.get((scaled, net))
            if flip:
                ax.plot([flip], [1.0], marker="D", ms=6, color=colour, markeredgecolor="k", zorder=4)
        ax.axhline(1.0, color="#555555", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(BALANCE_AXIS)
        ax.set_title(heading, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        crossed = [(net, flips[(scaled, net)]) for net in nets if flips.get((scaled, net))]
        ax.text(0.98, 0.03, ("memory_ratio crosses 1 at balance\n" + "\n".join(f"{net}: {f:.3g} FLOP/B"
                                                                          for net, f in crossed))
                if crossed else "no network crosses 1", transform=ax.transAxes, ha="right", va="bottom",
                fontsize=7, linespacing=1.3, bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "#bbbbbb"})
    axes[0].set_ylabel(RATIO_AXIS)
    axes[0].legend(fontsize=7, title="network (dotted: no-reuse intensity)", title_fontsize=7, loc="upper left")
    base = sel[0]["machine"].split("@")[0]
    fig.suptitle(f"One compute engine ({base}) at batch 1: memory time ÷ arithmetic time as its memory is swept",
                 fontsize=11)
    _finish(fig, sources(f"Machines: the {base} profile. Left: main-memory bandwidth replaced, caches, latencies "
                         "and compute unchanged. Right: every level's bandwidth times one factor and every latency "
                         "divided by it (Little's law keeps bytes in flight ÷ latency in step with bandwidth); "
                         "diamonds: where memory_ratio crosses 1, interpolated log-log between the points beside it."))
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = [r for r in data.get("rows") or [] if r.get("memory_ratio")]
    if not rows:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    intensity = no_reuse_intensity(rows)
    flips = {(s["scaled"], s["network"]): s["flip"] for s in summary(rows)}
    traces: list[dict[str, Any]] = []
    fields = (lambda r: r.get("name") or r["machine"], "network", "balance", "memory_ratio", "stall_fraction",
              "seconds", bound_label)
    names = ("machine", "network", "balance (FLOP/B)", "memory time ÷ arithmetic time", "stall fraction", "seconds",
             "bound (class, figure)")
    for p, (scaled, _) in enumerate(PANELS):
        xa, ya = ("x", "y") if p == 0 else ("x2", "y2")
        for k, net in enumerate(dict.fromkeys(r["network"] for r in rows)):
            s = sorted((r for r in rows if r["network"] == net and r.get("scaled", _scaled(r["machine"])) == scaled),
                       key=lambda r: r["balance"])
            if not s:
                continue
            colour = COLOURS[k % 10]
            traces.append({"type": "scatter", "mode": "lines+markers", "name": net, "legendgroup": net,
                           "showlegend": p == 0, "xaxis": xa, "yaxis": ya,
                           "x": [r["balance"] for r in s], "y": [r["memory_ratio"] for r in s],
                           "line": {"color": colour}, "customdata": custom(s, fields), "hovertemplate": hover(names)})
            if intensity.get(net):
                i = intensity[net]
                traces.append({"type": "scatter", "mode": "lines", "name": f"{net}: no-reuse intensity {fmt(i)}",
                               "legendgroup": net, "showlegend": p == 0, "xaxis": xa, "yaxis": ya, "x": [i, i],
                               "y": [1e-3, 1e4], "line": {"dash": "dot", "color": colour}, "hoverinfo": "name"})
            flip = flips.get((scaled, net))
            if flip:
                traces.append({"type": "scatter", "mode": "markers", "name": f"{net}: flips at {fmt(flip)} FLOP/B",
                               "legendgroup": net, "xaxis": xa, "yaxis": ya, "x": [flip], "y": [1.0],
                               "marker": {"symbol": "diamond", "size": 10, "color": colour,
                                          "line": {"color": "#000", "width": 1}},
                               "hovertemplate": f"{e(net)}: memory_ratio crosses 1 at balance {fmt(flip)} FLOP/B"
                                                "<extra></extra>"})
    titles = [{"text": e(h), "xref": f"x{'' if p == 0 else 2} domain", "yref": "paper", "x": 0.5, "y": 1.06,
               "showarrow": False, "font": {"size": 12}} for p, (_, h) in enumerate(PANELS)]
    one = {"type": "line", "yref": "y", "y0": 1, "y1": 1, "x0": 0, "x1": 1, "line": {"color": "#555", "width": 1}}
    return spec(traces, height=500, annotations=titles,
                shapes=[{**one, "xref": "x domain"}, {**one, "xref": "x2 domain", "yref": "y2"}],
                xaxis={**axis(BALANCE_AXIS, True), "domain": [0, 0.47]}, yaxis=axis(RATIO_AXIS, True),
                xaxis2={**axis(BALANCE_AXIS, True), "domain": [0.53, 1], "anchor": "y2"},
                yaxis2={**axis("", True), "anchor": "x2", "matches": "y"})


def prose(data: Mapping[str, Any]) -> str:
    rows = [r for r in data.get("rows") or [] if r.get("memory_ratio")]
    if not rows:
        return ""
    out = []
    alone = [s for s in summary(rows) if s["scaled"] == "memory"]
    scaled = [s for s in summary(rows) if s["scaled"] == "hierarchy"]
    if alone:
        out.append("With main memory's bandwidth alone swept, memory time ÷ arithmetic time falls no lower than "
                   + "; ".join(f"{s['lowest']:.3g} ({e(s['network'])})" for s in alone)
                   + (": no network flips, the on-chip level and latency floor it." if not any(s["flip"] for s in alone)
                      else "."))
    if scaled:
        flips = [s for s in scaled if s["flip"]]
        out.append("With the whole memory system scaled, it crosses 1 at balance "
                   + "; ".join(f"{s['flip']:.3g} FLOP/B ({e(s['network'])})" for s in flips) + "."
                   if flips else "With the whole memory system scaled, no network crosses 1 in the range swept.")
    return " ".join(out)
