"""Figure 2, the regime flip: per-example training's memory time ÷ arithmetic time (or,
for rows without it, its stall fraction) against machine balance."""

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
    hover,
    sources,
    spaced,
    spec,
)

NUMBER = 2
NAME = "regime_flip"
TITLE = "The regime flip: stall fraction against machine balance"
CAPTION = ("Per-example training (batch 1): each point is one machine, at its memory time ÷ "
           "arithmetic time (memory_ratio; 1 is the flip, above it the step waits on memory more than it computes). "
           "Dotted lines mark each network's arithmetic intensity with no cache reuse, where the flip is expected "
           "as balance passes it; hollow points are cases whose weights fit in the machine's largest on-chip level. "
           "Launch and vector start-up are neither memory nor arithmetic: the sweep's rows give them as "
           "dispatch_fraction and overhead_fraction (figure 3 shows them).")
TABLES = ("rows",)
NEEDS = "per-example (batch 1) training cases on real machines"
OPT_IN = False

Row = Mapping[str, Any]


def stall_vs_balance(ax, rows: Sequence[Row], intensity: Mapping[str, float], connect: bool) -> None:
    """Stall fraction against balance, one colour a network, its no-reuse intensity dotted."""
    # Lines only where the points are one machine varied (synthetic); real machines differ
    # in more than balance, so they are drawn as points.
    nets = list(dict.fromkeys(r["network"] for r in rows))
    cmap = _plt().get_cmap("tab10")
    for k, net in enumerate(nets):
        sub = sorted((r for r in rows if r["network"] == net), key=lambda r: r["balance"])
        colour = cmap(k % 10)
        ax.plot([r["balance"] for r in sub], [r["stall_fraction"] for r in sub], marker="o", ms=4,
                lw=1 if connect else 0, color=colour, label=net, alpha=0.85)
        if net in intensity:
            ax.axvline(intensity[net], color=colour, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("machine balance (FLOP/s ÷ memory B/s, FLOP/B) at the workload's dtype")
    ax.set_ylabel("stall fraction (cycles waiting on memory ÷ total)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, title="network (dotted: its no-reuse intensity)", title_fontsize=7)


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: per-example training at batch 1 on real machines."""
    return {"rows": per_example_rows(rows)}


def draw(data: Mapping[str, Any]):
    sel = data.get("rows") or []
    if not sel:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    if any(r.get("memory_ratio") is not None for r in sel):
        return _memory_ratio_flip(sel)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    intensity = no_reuse_intensity(sel)
    stall_vs_balance(ax, sel, intensity, connect=False)
    first = [r for r in sel if r["network"] == sel[0]["network"]]
    for r in spaced(sorted(first, key=lambda r: r["balance"]),
                    lambda r: (math.log10(r["balance"]), r["stall_fraction"]), (0.12, 0.05)):
        ax.annotate(r.get("name") or r["machine"], (r["balance"], r["stall_fraction"]), fontsize=6,
                    xytext=(3, -8), textcoords="offset points", color="#444444")
    ax.set_title("Per-example training: stall fraction against machine balance")
    _finish(fig, sources("Dotted lines: FLOPs per byte of main-memory traffic on the machine that moves "
                         "the most for that network (no reuse); the flip is expected where balance "
                         "passes it."))
    return fig


def _ratio_points(ax, ax2, sel: Sequence[Row], intensity: Mapping[str, float], cmap) -> dict[Any, bool]:
    drawn = {ax: False, ax2: False}  # a log axis with nothing on it cannot be drawn
    for k, net in enumerate(dict.fromkeys(r["network"] for r in sel)):
        sub = sorted((r for r in sel if r["network"] == net and r.get("memory_ratio")), key=lambda r: r["balance"])
        colour = cmap(k % 10)
        streamed = [r for r in sub if not r.get("weights_on_chip")]
        on_chip = [r for r in sub if r.get("weights_on_chip")]
        ax.scatter([r["balance"] for r in streamed], [r["memory_ratio"] for r in streamed], s=18, color=colour,
                   label=net)
        ax.scatter([r["balance"] for r in on_chip], [r["memory_ratio"] for r in on_chip], s=30, facecolors="none",
                   edgecolors=colour, label=None if streamed else net)
        ov = [(r["balance"], r["overhead_fraction"] / r["compute_fraction"]) for r in sub
              if r.get("compute_fraction") and r.get("overhead_fraction")]
        ax2.scatter([x for x, _ in ov], [y for _, y in ov], s=18, color=colour, marker="s", label=net)
        drawn[ax] = drawn[ax] or bool(sub)
        drawn[ax2] = drawn[ax2] or bool(ov)
        if net in intensity:
            ax.axvline(intensity[net], color=colour, ls=":", lw=1)
        seed = sorted((r["balance"], r["seed_memory_ratio"]) for r in sub if r.get("seed_memory_ratio"))
        if seed:  # the seed's β / I(T): a straight line through (I, 1) for each network
            ax.plot([x for x, _ in seed], [y for _, y in seed], color=colour, ls="--", lw=0.8, alpha=0.7)
    return drawn


def _memory_ratio_flip(sel: Sequence[Row]):
    """The flip on its own axis: memory time ÷ arithmetic time (1 is the flip), and beside
    it the time the step spends on dispatch and start-up, per unit of arithmetic time."""
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5))
    drawn = _ratio_points(ax, ax2, sel, no_reuse_intensity(sel), plt.get_cmap("tab10"))
    first = sorted((r for r in sel if r["network"] == sel[0]["network"] and r.get("memory_ratio")),
                   key=lambda r: r["balance"])
    for r in spaced(first, lambda r: (math.log10(r["balance"]), math.log10(r["memory_ratio"])), (0.15, 0.25)):
        ax.annotate(r.get("name") or r["machine"], (r["balance"], r["memory_ratio"]), fontsize=6,
                    xytext=(3, -8), textcoords="offset points", color="#444444")
    ax.axhline(1.0, color="#555555", lw=1)
    for a, label in ((ax, "memory time ÷ arithmetic time"), (ax2, "dispatch and start-up time ÷ arithmetic time")):
        if not drawn[a]:
            a.text(0.5, 0.5, "no case has any", transform=a.transAxes, ha="center", color="#777777")
            a.set_ylabel(label)
            continue
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("machine balance (FLOP/B) at the workload's dtype")
        a.set_ylabel(label)
        a.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, title="network (dotted: no-reuse intensity)", title_fontsize=7)
    ax.set_title("Per-example training: the flip is where the ratio crosses 1")
    ax2.set_title("What the ratio leaves out: launch and vector start-up")
    _finish(fig, sources("memory_ratio from each case's result; dotted lines: each network's no-reuse "
                         "intensity, the predicted crossing. Hollow: the weights fit in the machine's largest "
                         "on-chip level, so the step need not stream them from memory. Dashed: the seed model's "
                         "β / I (every operand from main memory once, no cache): points below it reuse data "
                         "in cache, points above it miss more than once or wait on latency."))
    return fig


def flip_spec(rows: Sequence[Row], connect: bool) -> dict[str, Any]:
    """The interactive flip (figures 2 and 6): memory_ratio where the rows have it, else the
    stall fraction, against balance; each network's seed line and no-reuse intensity."""
    use_ratio = any(r.get("memory_ratio") is not None for r in rows)
    key = "memory_ratio" if use_ratio else "stall_fraction"
    intensity = no_reuse_intensity(rows)
    traces: list[dict[str, Any]] = []
    for k, net in enumerate(dict.fromkeys(r["network"] for r in rows)):
        s = sorted((r for r in rows if r["network"] == net), key=lambda r: r["balance"])
        colour = COLOURS[k % 10]
        traces.append({
            "type": "scatter", "mode": "lines+markers" if connect else "markers", "name": net,
            "x": [r["balance"] for r in s], "y": [r.get(key) for r in s],
            "marker": {"size": 8, "color": colour,
                       "symbol": ["circle-open" if r.get("weights_on_chip") else "circle" for r in s]},
            "customdata": custom(s, (lambda r: r.get("name") or r["machine"], "network", "balance", "stall_fraction",
                                     "memory_ratio", "overhead_fraction", "seconds", bound_label,
                                     lambda r: "yes (hollow)" if r.get("weights_on_chip") else "no")),
            "hovertemplate": hover(("machine", "network", "balance", "stall fraction", "memory ÷ arithmetic time",
                                    "overhead share", "seconds", "binds", "weights fit on chip"))})
        seed = [r for r in s if r.get("seed_memory_ratio")]
        if use_ratio and seed:
            traces.append({"type": "scatter", "mode": "lines", "name": f"{net}: seed model β / I",
                           "x": [r["balance"] for r in seed], "y": [r["seed_memory_ratio"] for r in seed],
                           "line": {"dash": "dash", "width": 1, "color": colour}, "hoverinfo": "name"})
        if intensity.get(net):
            i = intensity[net]
            traces.append({"type": "scatter", "mode": "lines", "name": f"{net}: no-reuse intensity {i:.4g}",
                           "x": [i, i], "y": [1e-4, 1e4] if use_ratio else [0, 1],
                           "line": {"dash": "dot", "color": colour}, "hoverinfo": "name"})
    yaxis = (axis("memory time ÷ arithmetic time (1 is the flip)", True) if use_ratio
             else axis("stall fraction", range=[-0.03, 1.03]))
    return spec(traces, xaxis=axis("machine balance (FLOP/B) at the workload's dtype", True), yaxis=yaxis)


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = data.get("rows") or []
    return flip_spec(rows, connect=False) if rows else empty_spec(f"{NUMBER}. {TITLE}", NEEDS)


def against_seed(rows: Sequence[Row], simulated: str, seed: str, what: str, why: str) -> str:
    """A sentence: how far the simulation's figure is from the seed model's, over ``rows``."""
    ratios = sorted(r[simulated] / r[seed] for r in rows if r.get(simulated) and r.get(seed))
    if not ratios:
        return ""
    median = ratios[len(ratios) // 2]
    return f" Against {what}, the simulated value is {ratios[0]:.2g}–{ratios[-1]:.2g}× it (median {median:.2g}×): {why}"


def prose(data: Mapping[str, Any]) -> str:
    flip = data.get("rows") or []
    if not flip:
        return ""
    key = "memory_ratio" if any(r.get("memory_ratio") is not None for r in flip) else "stall_fraction"
    bits = []
    for net in dict.fromkeys(r["network"] for r in flip):
        sub = [r for r in flip if r["network"] == net and r.get(key) is not None]
        if sub:
            lo, hi = min(sub, key=lambda r: r[key]), max(sub, key=lambda r: r[key])
            bits.append(f"{e(net)} from {lo[key]:.3g} ({e(lo.get('name'))}) to {hi[key]:.3g} ({e(hi.get('name'))})")
    what = "memory time ÷ arithmetic time" if key == "memory_ratio" else "stall fraction"
    return (f"Across the machines, {what} runs: " + "; ".join(bits) + "."
            + against_seed(flip, "memory_ratio", "seed_memory_ratio",
                           "the seed model's β / I (every operand from main memory once)",
                           "below 1 where caches give reuse the seed does not count, above it where "
                           "a miss repeats or latency, not bandwidth, sets the memory time."))
