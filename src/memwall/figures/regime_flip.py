"""Figure 2, the regime flip: per-example training's memory time ÷ arithmetic time
(memory_ratio; for rows without it, its stall fraction) against machine balance, with the
flip that already separates 1980s vector machines from scalar ones."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..study.tables import FLIP_NETWORK, flip_finding, no_reuse_intensity, per_example_rows
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
    place_labels,
    sources,
    spec,
)

NUMBER = 2
NAME = "regime_flip"
TITLE = "The regime flip: memory time ÷ arithmetic time against machine balance"
CAPTION = ("Per-example training (batch 1): each point is one machine and network, at its memory time ÷ "
           "arithmetic time (memory_ratio: the kernels' memory terms over their arithmetic; 1 is the flip, above "
           "it the step's kernels wait on memory longer than they compute) against the machine's balance at the "
           "step's dtype. Dotted lines mark each network's arithmetic intensity with no cache reuse, where the flip "
           "is expected as balance passes it; dashed, the seed model's β / I; hollow points are cases whose weights "
           "fit in the machine's largest on-chip level. Labels give NETtalk's ratio on the machines to 1989. The "
           "right panel is what the ratio leaves out: dispatch and vector start-up time ÷ arithmetic time "
           "(figure 3 shows the whole step).")
TABLES = ("rows", "finding")
NEEDS = "per-example (batch 1) training cases on real machines"
OPT_IN = False

Row = Mapping[str, Any]
RATIO_AXIS = "memory time ÷ arithmetic time (memory_ratio; 1 is the flip)"
OVERHEAD_AXIS = "dispatch and start-up time ÷ arithmetic time"
BALANCE_AXIS = "machine balance (FLOP/B) at the step's dtype"


def stall_vs_balance(ax, rows: Sequence[Row], intensity: Mapping[str, float], connect: bool) -> None:
    """Stall fraction against balance, one colour a network, its no-reuse intensity dotted
    (rows stored before memory_ratio was reported)."""
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
    ax.set_xlabel(BALANCE_AXIS)
    ax.set_ylabel("stall fraction (time waiting on memory ÷ step)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, title="network (dotted: its no-reuse intensity)", title_fontsize=7)


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: per-example training at batch 1 on real machines,
    and the finding (NETtalk on the machines to 1989)."""
    return {"rows": per_example_rows(rows), "finding": flip_finding(rows)}


def short(name: str) -> str:
    """A machine's name without its parenthesis (``Cray-2 (one CPU)`` -> ``Cray-2``)."""
    return re.sub(r"\s*\(.*?\)", "", name or "").strip()


def finding(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """NETtalk's flip among the machines to 1989, from the finding table: those whose memory
    time exceeds arithmetic (``over``) and the scalar machines (``scalar``), each with its
    ratio; None where the table has neither."""
    table = [r for r in data.get("finding") or [] if r.get("memory_ratio") is not None]
    over = [r for r in table if r["memory_ratio"] > 1]
    scalar = [r for r in table if r.get("kind") == "scalar"]
    if not over or not scalar:
        return None
    return {"network": FLIP_NETWORK, "over": over, "scalar": scalar, "until": max(r["year"] for r in table),
            "scalar_low": min(scalar, key=lambda r: r["memory_ratio"]),
            "scalar_high": max(scalar, key=lambda r: r["memory_ratio"])}


def _ports(r: Row) -> str:
    if r.get("flops_per_element") is None:
        return ""
    ports = r["memory_ports"]
    return (f"{ports:.3g} memory port{'s' if ports != 1 else ''}, its pipes doing {r['flops_per_element']:.3g} "
            "FLOP a clock for each element the ports carry; ")


def draw(data: Mapping[str, Any]):
    sel = data.get("rows") or []
    if not sel:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    if any(r.get("memory_ratio") is not None for r in sel):
        return _memory_ratio_flip(sel, data)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    stall_vs_balance(ax, sel, no_reuse_intensity(sel), connect=False)
    ax.set_title("Per-example training: stall fraction against machine balance")
    first = [r for r in sel if r["network"] == sel[0]["network"]]
    _finish(fig, sources("These rows carry no memory_ratio (stored before it was reported), so the stall "
                         "fraction is drawn. Dotted lines: FLOPs per byte of main-memory traffic on the machine "
                         "that moves the most for that network (no reuse)."),
            then=lambda: place_labels(ax, [(r["balance"], r["stall_fraction"], short(r.get("name") or r["machine"]))
                                           for r in sorted(first, key=lambda r: r["year"])],
                                      avoid=[(r["balance"], r["stall_fraction"]) for r in sel]))
    return fig


def _ratio_points(ax, ax2, sel: Sequence[Row], intensity: Mapping[str, float], cmap) -> dict[Any, bool]:
    drawn = {ax: False, ax2: False}  # a log axis with nothing on it cannot be drawn
    for k, net in enumerate(dict.fromkeys(r["network"] for r in sel)):
        sub = sorted((r for r in sel if r["network"] == net and r.get("memory_ratio")), key=lambda r: r["balance"])
        colour = cmap(k % 10)
        streamed = [r for r in sub if not r.get("weights_on_chip")]
        on_chip = [r for r in sub if r.get("weights_on_chip")]
        ax.scatter([r["balance"] for r in streamed], [r["memory_ratio"] for r in streamed], s=18, color=colour,
                   label=net, zorder=3)
        ax.scatter([r["balance"] for r in on_chip], [r["memory_ratio"] for r in on_chip], s=30, facecolors="none",
                   edgecolors=colour, label=None if streamed else net, zorder=3)
        ov = [(r["balance"], r["overhead_fraction"] / r["compute_fraction"]) for r in sub
              if r.get("compute_fraction") and r.get("overhead_fraction")]
        ax2.scatter([x for x, _ in ov], [y for _, y in ov], s=18, color=colour, marker="s", label=net)
        drawn[ax] = drawn[ax] or bool(sub)
        drawn[ax2] = drawn[ax2] or bool(ov)
        if net in intensity:
            ax.axvline(intensity[net], color=colour, ls=":", lw=1)
        seed = sorted((r["balance"], r["seed_memory_ratio"]) for r in sub if r.get("seed_memory_ratio"))
        if seed:  # the seed's β / I: a straight line through (I, 1) for each network
            ax.plot([x for x, _ in seed], [y for _, y in seed], color=colour, ls="--", lw=0.8, alpha=0.7)
    return drawn


def _labels(sel: Sequence[Row], found: Mapping[str, Any] | None) -> list[tuple[Any, ...]]:
    """NETtalk's labels, most important first: the machines to 1989 above the flip, the
    scalar ones, then every other machine newest first (kept where there is room)."""
    net = FLIP_NETWORK if any(r["network"] == FLIP_NETWORK for r in sel) else sel[0]["network"]
    points = {r["machine"]: r for r in sel if r["network"] == net and r.get("memory_ratio")}
    items, seen = [], set()
    if found:
        for r in [*found["over"], *sorted(found["scalar"], key=lambda r: r["memory_ratio"])]:
            if r["machine"] in points:
                p = points[r["machine"]]
                items.append((p["balance"], p["memory_ratio"], f"{short(r['name'])} {r['memory_ratio']:.3g}"))
                seen.add(r["machine"])
    for r in sorted(points.values(), key=lambda r: -r["year"]):
        if r["machine"] not in seen:  # beside its point or not at all
            items.append((r["balance"], r["memory_ratio"], short(r.get("name") or r["machine"]), 3))
    return items


def _memory_ratio_flip(sel: Sequence[Row], data: Mapping[str, Any]):
    """The flip on its own axis: memory time ÷ arithmetic time (1 is the flip), and beside
    it the time the step spends on dispatch and start-up, per unit of arithmetic time."""
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 6.2), gridspec_kw={"width_ratios": [1.5, 1]})
    drawn = _ratio_points(ax, ax2, sel, no_reuse_intensity(sel), plt.get_cmap("tab10"))
    ax.axhline(1.0, color="#555555", lw=1)
    for a, label in ((ax, RATIO_AXIS), (ax2, OVERHEAD_AXIS)):
        a.set_ylabel(label)
        if not drawn[a]:
            a.text(0.5, 0.5, "no case has any", transform=a.transAxes, ha="center", color="#777777")
            continue
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel(BALANCE_AXIS)
        a.grid(True, which="major", alpha=0.3)
    found = finding(data)
    if found and drawn[ax]:
        over = "\n".join(f"  {short(r['name'])} ({r['year']}): {r['memory_ratio']:.3g}" for r in found["over"])
        lo, hi = found["scalar_low"], found["scalar_high"]
        ax.text(0.015, 0.985, f"{found['network']}, machines to {found['until']}: memory > arithmetic on\n{over}\n"
                f"scalar machines: {lo['memory_ratio']:.2g} ({short(lo['name'])}) to "
                f"{hi['memory_ratio']:.2g} ({short(hi['name'])})",
                transform=ax.transAxes, va="top", ha="left", fontsize=7, linespacing=1.3,
                bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "#bbbbbb", "alpha": 0.9})
    ax.legend(fontsize=7, title="network (dotted: no-reuse intensity; hollow: weights fit on chip)",
              title_fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.13), ncol=4, frameon=False)
    ax.set_title("Per-example training: memory time ÷ arithmetic time (the flip is at 1)")
    ax2.set_title("What the ratio leaves out: dispatch and vector start-up")
    labels = _labels(sel, found) if drawn[ax] else []
    avoid = [(r["balance"], r["memory_ratio"]) for r in sel if r.get("memory_ratio")]
    _finish(fig, sources("memory_ratio from each case's result (the kernels' memory time terms over their "
                         "arithmetic, whether or not overlap hides them); dotted lines: each network's no-reuse "
                         "intensity, the predicted crossing. Hollow: the weights fit in the machine's largest "
                         "on-chip level. Dashed: the seed model's β / I (every operand from main memory once, no "
                         "cache): points below it reuse data in cache, points above it miss more than once or "
                         "wait on latency."),
            then=lambda: place_labels(ax, labels, avoid=avoid))
    return fig


def flip_spec(rows: Sequence[Row], data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The interactive figure 2: memory_ratio (where the rows have it, else the stall
    fraction) against balance, each network's seed line and no-reuse intensity, the
    finding's machines labelled with their ratio; beside it dispatch and start-up ÷ arithmetic."""
    use_ratio = any(r.get("memory_ratio") is not None for r in rows)
    key = "memory_ratio" if use_ratio else "stall_fraction"
    intensity = no_reuse_intensity(rows)
    traces: list[dict[str, Any]] = []
    fields = (lambda r: r.get("name") or r["machine"], "network", "balance", "memory_ratio", "stall_fraction",
              "overhead_fraction", "seconds", bound_label, lambda r: "yes (hollow)" if r.get("weights_on_chip") else "no")
    names = ("machine", "network", "balance (FLOP/B)", "memory time ÷ arithmetic time", "stall fraction",
             "overhead share", "seconds", "bound (class, figure)", "weights fit on chip")
    for k, net in enumerate(dict.fromkeys(r["network"] for r in rows)):
        s = sorted((r for r in rows if r["network"] == net), key=lambda r: r["balance"])
        colour = COLOURS[k % 10]
        traces.append({
            "type": "scatter", "mode": "markers", "name": net, "legendgroup": net,
            "x": [r["balance"] for r in s], "y": [r.get(key) for r in s],
            "marker": {"size": 8, "color": colour,
                       "symbol": ["circle-open" if r.get("weights_on_chip") else "circle" for r in s]},
            "customdata": custom(s, fields), "hovertemplate": hover(names)})
        seed = [r for r in s if r.get("seed_memory_ratio")]
        if use_ratio and seed:
            traces.append({"type": "scatter", "mode": "lines", "name": f"{net}: seed model β / I", "legendgroup": net,
                           "x": [r["balance"] for r in seed], "y": [r["seed_memory_ratio"] for r in seed],
                           "line": {"dash": "dash", "width": 1, "color": colour}, "hoverinfo": "name"})
        if intensity.get(net):
            i = intensity[net]
            traces.append({"type": "scatter", "mode": "lines", "name": f"{net}: no-reuse intensity {i:.4g}",
                           "legendgroup": net, "x": [i, i], "y": [1e-4, 1e4] if use_ratio else [0, 1],
                           "line": {"dash": "dot", "color": colour}, "hoverinfo": "name"})
        ov = [r for r in s if r.get("compute_fraction") and r.get("overhead_fraction")]
        if use_ratio and ov:
            traces.append({"type": "scatter", "mode": "markers", "name": f"{net}: dispatch and start-up",
                           "legendgroup": net, "showlegend": False, "xaxis": "x2", "yaxis": "y2",
                           "x": [r["balance"] for r in ov],
                           "y": [r["overhead_fraction"] / r["compute_fraction"] for r in ov],
                           "marker": {"size": 7, "color": colour, "symbol": "square"},
                           "customdata": custom(ov, fields), "hovertemplate": hover(names)})
    if not use_ratio:
        return spec(traces, xaxis=axis(BALANCE_AXIS, True),
                    yaxis=axis("stall fraction (time waiting on memory ÷ step)", range=[-0.03, 1.03]))
    notes = []
    found = finding(data or {})
    if found:
        at = {(r["machine"], r["network"]): r for r in rows}
        for r in [*found["over"], found["scalar_low"], found["scalar_high"]]:
            p = at.get((r["machine"], found["network"]))
            if p and p.get("memory_ratio"):
                notes.append({"x": _log10(p["balance"]), "y": _log10(p["memory_ratio"]), "xref": "x", "yref": "y",
                              "text": f"{e(short(r['name']))} {r['memory_ratio']:.3g}", "showarrow": True,
                              "arrowhead": 0, "ax": -40, "ay": -22, "font": {"size": 10}})
    return spec(traces, height=520, annotations=notes,
                xaxis={**axis(BALANCE_AXIS, True), "domain": [0, 0.58]},
                yaxis=axis(RATIO_AXIS, True),
                xaxis2={**axis(BALANCE_AXIS, True), "domain": [0.7, 1], "anchor": "y2"},
                yaxis2={**axis(OVERHEAD_AXIS, True), "anchor": "x2"},
                shapes=[{"type": "line", "xref": "x domain", "yref": "y", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                         "line": {"color": "#555", "width": 1}}])


def _log10(value: float) -> float:
    import math

    return math.log10(value)  # plotly places annotations on a log axis by the exponent


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = data.get("rows") or []
    return flip_spec(rows, data) if rows else empty_spec(f"{NUMBER}. {TITLE}", NEEDS)


def against_seed(rows: Sequence[Row], simulated: str, seed: str, what: str, why: str) -> str:
    """A sentence: how far the simulation's figure is from the seed model's, over ``rows``."""
    ratios = sorted(r[simulated] / r[seed] for r in rows if r.get(simulated) and r.get(seed))
    if not ratios:
        return ""
    median = ratios[len(ratios) // 2]
    return f" Against {what}, the simulated value is {ratios[0]:.2g}–{ratios[-1]:.2g}× it (median {median:.2g}×): {why}"


def finding_prose(data: Mapping[str, Any]) -> str:
    """The finding as a sentence, its numbers from the data ("" where it has none)."""
    found = finding(data)
    if not found:
        return ""
    over = [f"the {e(short(r['name']))} ({r['year']}, {e(r['kind'])}) {r['memory_ratio']:.3g} "
            f"({e(_ports(r))}bound by {e(r.get('bound'))})" for r in found["over"]]
    scalar = ", ".join(f"{e(short(r['name']))} {r['memory_ratio']:.2g}"
                       for r in sorted(found["scalar"], key=lambda r: r["year"]))
    years = [r["year"] for r in found["over"] if r.get("kind") == "vector"]
    vector = f" the {min(years)}–{max(years)} vector machines" if years else " the machines above"
    syears = [r["year"] for r in found["scalar"]]
    bounds = sorted({r.get("bound") for r in found["scalar"] if r.get("bound")})
    classes = sorted({r.get("bound_class") for r in found["scalar"] if r.get("bound_class")})
    bound = f", bound by {e(' or '.join(classes))} ({e(', '.join(bounds))})" if classes else ""
    micro = [r for r in found["over"] if r.get("memory_ratio_micro") is not None]
    seed_view = ("" if not micro else
                 " Part of it is the whole step's own: counted as the seed counts it (the micro-batch's kernels, "
                 "each element at its dtype's width, so neither the update that follows every example nor the "
                 "64-bit word an fp32 element takes on a Cray), the ratio is "
                 + ", ".join(f"{e(short(r['name']))} {r['memory_ratio_micro']:.3g}" for r in micro) + ".")
    return (f"<b>The flip is already in the 1980s.</b> On per-example {e(found['network'])}, memory time "
            f"exceeds arithmetic time on " + "; ".join(over) + f". Every scalar machine of {min(syears)}–"
            f"{max(syears)} sits below 1 ({scalar}){bound}. At batch 1 the flip already separates{vector} "
            f"from the scalar workstations.{seed_view} ")


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
    return (finding_prose(data) + f"Across the machines, {what} runs: " + "; ".join(bits) + "."
            + against_seed(flip, "memory_ratio", "seed_memory_ratio",
                           "the seed model's β / I (every operand from main memory once)",
                           "below 1 where caches give reuse the seed does not count, above it where "
                           "a miss repeats or latency, not bandwidth, sets the memory time."))
