"""Figure 16, where a step's joules go: per-example and batched NETtalk from the VAX to
Blackwell, and Llama 3 8B batch-1 decode on three GPUs, as stacked shares of the step's
energy by component (arithmetic, on-chip levels, main memory, the on-chip fabric per
main-memory byte, interconnect, static power, host), of all its joules and of its dynamic
joules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._style import (
    COMPUTE_COLOUR,
    OVERHEAD_COLOUR,
    _empty,
    _finish,
    _plt,
    axis,
    custom,
    e,
    empty_spec,
    hover,
    sources,
    spec,
)

NUMBER = 16
NAME = "energy_share"
TITLE = "Where a step's energy goes: data movement against arithmetic and static power"
CAPTION = ("The joules of one step by component, as shares, for NETtalk trained per example (batch 1, an update "
           "per example) and batched (batch 64, one update per batch) on machines from 1976 to 2024, and for "
           "Llama 3 8B decoding one token at batch 1 against a 512-token context on three GPUs. Left: shares of "
           "all the step's joules; right: of its dynamic joules (static power and the host left out). Data "
           "movement (hatched) is every memory level's bytes at its energy per byte, main memory's, the on-chip "
           "fabric's per main-memory byte (where a profile states it, from a measured stream's power) and the "
           "links'. Each share is the energy model's counts × the profiles' energy figures, most of them "
           "estimates (see figure 15 and each profile's provenance); machines whose profile states no [energy] "
           "are left out and named below the bars. Static power × seconds dominates wherever the step is short "
           "against the chip's idle draw, so the left panel says more about step time than about the bytes.")
TABLES = ("steps", "components", "lacking")
NEEDS = "machine profiles with [energy] figures"
OPT_IN = False

Row = Mapping[str, Any]
# The component groups, in stacking order: (key, label, colour, data movement)
GROUPS = (("arithmetic", "arithmetic", COMPUTE_COLOUR, False),
          ("levels", "on-chip levels (registers, caches, scratchpads)", "#dd8452", True),
          ("memory", "main memory", "#c44e52", True),
          ("fabric", "on-chip fabric and clocking, per main-memory byte", "#da8bc3", True),
          ("interconnect", "interconnect", "#8172b3", True),
          ("static", "static power × seconds", "#8c8c8c", False),
          ("host", "host issuing kernels", OVERHEAD_COLOUR, False))
DYNAMIC = tuple(g for g, *_ in GROUPS if g not in ("static", "host"))



def _label(r: Row) -> str:
    return f"{r['machine']} · {r['workload']}"


def _lacking_note(data: Mapping[str, Any]) -> str:
    lacking = data.get("lacking") or []
    if not lacking:
        return "Every machine named states [energy]."
    machines = list(dict.fromkeys(r["machine"] for r in lacking))
    return (f"Left out (the profile states no [energy], so no joules): {', '.join(machines)} "
            f"({len(lacking)} step{'s' if len(lacking) != 1 else ''}).")


def _shares(r: Row, groups: Sequence[str]) -> list[float]:
    total = sum(r[f"joules_{g}"] for g in groups)
    return [r[f"joules_{g}"] / total if total > 0 else 0.0 for g in groups]


def _per_unit(r: Row) -> str:
    if r.get("joules_per_unit") is None:
        return ""
    return f"{r['joules_per_unit']:.3g} J/{'CU' if r['unit'] == 'connection update' else r['unit']}"


def draw(data: Mapping[str, Any]):
    steps = data.get("steps") or []
    if not steps:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.42 * len(steps) + 2.6), sharey=True)
    ys = list(range(len(steps)))[::-1]
    every = [g for g, *_ in GROUPS]
    for ax, groups in ((left, every), (right, list(DYNAMIC))):
        starts = [0.0] * len(steps)
        for g, label, colour, movement in GROUPS:
            if g not in groups:
                continue
            widths = [_shares(r, groups)[groups.index(g)] for r in steps]
            if ax is right:
                widths = [w if r["dynamic_movement_share"] is not None else 0.0 for w, r in zip(widths, steps,
                                                                                                 strict=True)]
            ax.barh(ys, widths, left=starts, color=colour, hatch="///" if movement else None, edgecolor="white",
                    lw=0.5, label=label if ax is left else None)
            starts = [s + w for s, w in zip(starts, widths, strict=True)]
        ax.set_xlim(0, 1.32)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.grid(True, axis="x", alpha=0.3)
    for y, r in zip(ys, steps, strict=True):
        left.text(1.02, y, f"{100 * r['data_movement_share']:.3g} % moving\n{_per_unit(r)}", va="center",
                  fontsize=6)
        dyn = r["dynamic_movement_share"]
        right.text(1.02 if dyn is not None else 0.02, y,
                   f"{100 * dyn:.3g} % moving" if dyn is not None else "no dynamic energy stated (all static)",
                   va="center", fontsize=6)
    left.set_yticks(ys)
    left.set_yticklabels([_label(r) for r in steps], fontsize=7)
    left.set_xlabel("share of the step's joules")
    right.set_xlabel("share of the step's dynamic joules (static power and host left out)")
    left.set_title("All joules of the step", fontsize=10)
    right.set_title("Dynamic joules only", fontsize=10)
    left.legend(fontsize=6, loc="lower center", bbox_to_anchor=(0.5, 1.06), ncol=3)
    _finish(fig, sources("Joules: the energy model's counts (operations by dtype, bytes at every level, a "
                         "scratchpad charged for what it stages) × each profile's energy figures, plus static "
                         "power × the step's seconds; most figures are estimates (each profile's provenance). "
                         "Hatched: data movement. J/CU: joules per connection update. " + _lacking_note(data)))
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    steps = data.get("steps") or []
    if not steps:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    every = [g for g, *_ in GROUPS]
    labels = [_label(r) for r in steps]
    traces: list[dict[str, Any]] = []
    for axes, groups in (("", every), ("2", list(DYNAMIC))):
        for g, label, colour, movement in GROUPS:
            if g not in groups:
                continue
            shares = [_shares(r, groups)[groups.index(g)] for r in steps]
            traces.append({"type": "bar", "orientation": "h", "name": label, "legendgroup": g,
                           "showlegend": axes == "", "x": shares, "y": labels, "xaxis": "x" + axes,
                           "yaxis": "y" + axes,
                           "marker": {"color": colour, "pattern": {"shape": "/" if movement else ""}},
                           "customdata": custom(steps, ("machine", "workload", f"joules_{g}", "joules",
                                                        "data_movement_share", "dynamic_movement_share",
                                                        "joules_per_unit", "unit")),
                           "hovertemplate": hover(("machine", "step", f"{label} J", "step J", "movement share",
                                                   "movement share of dynamic J", "J per unit", "unit"))})
    return spec(traces, barmode="stack", height=140 + 34 * len(steps), margin={"t": 40, "r": 20, "b": 55, "l": 300},
                xaxis=axis("share of the step's joules", domain=[0, 0.48], range=[0, 1]),
                yaxis=axis("", autorange="reversed"),
                xaxis2=axis("share of dynamic joules (static, host left out)", domain=[0.52, 1], range=[0, 1],
                            anchor="y2"),
                yaxis2=axis("", anchor="x2", matches="y", showticklabels=False, autorange="reversed"))


def prose(data: Mapping[str, Any]) -> str:
    steps = data.get("steps") or []
    if not steps:
        return ""
    bits = []
    for r in steps:
        dyn = r["dynamic_movement_share"]
        bits.append(f"{e(r['machine'])}, {e(r['workload'])}: {r['joules']:.3g} J a step"
                    + (f" ({_per_unit(r)})" if r.get("joules_per_unit") is not None else "")
                    + f", {100 * r['data_movement_share']:.3g} % moving data"
                    + (f" ({100 * dyn:.3g} % of the dynamic joules)" if dyn is not None
                       else " (no dynamic energy stated)"))
    return "By the energy model: " + "; ".join(bits) + ". " + e(_lacking_note(data))
