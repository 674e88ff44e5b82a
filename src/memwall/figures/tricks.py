"""Figure 14, what each trick buys: seconds per token of one device and the bytes one device
holds, with none of modern training's tricks and then each added in turn. Opt-in: its
ladders of cases are its own (:mod:`memwall.study.tricks`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._style import (
    STALL_COLOURS,
    _empty,
    _finish,
    _plt,
    axis,
    bound_label,
    custom,
    empty_spec,
    hover,
    sources,
    spec,
)

NUMBER = 14
NAME = "tricks"
TITLE = "What each trick buys: time per token and memory per device, the tricks added in turn"
CAPTION = ("Per case (a network on a machine of its era), left to right: no tricks, then batching, accumulation, "
           "mixed precision, fusion, fused attention, checkpointing, ZeRO-3 and a pipeline, each added to all "
           "those before it: seconds per token of one device (top) and the bytes one device holds at its peak "
           "(bottom; grey where they do not fit its memory). Drawn only when asked for "
           "(experiments/14_tricks.py): it simulates cases of its own.")
TABLES = ("ladder",)
NEEDS = "the ladders of memwall.study.tricks"
OPT_IN = True

Row = Mapping[str, Any]


def _ladders(table: Sequence[Row]):
    for case in dict.fromkeys((r["machine"], r["network"]) for r in table):
        rows = sorted((r for r in table if (r["machine"], r["network"]) == case), key=lambda r: r["index"])
        yield case, rows, [r["trick"] if r["index"] == 0 else "+ " + r["trick"] for r in rows]


def draw(data: Row):
    """Per case (a network on a machine of its era), bars left to right: seconds per token of
    one device and bytes one device holds, with none of the tricks and then each added."""
    table = data.get("ladder") or []
    if not table:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    ladders = list(_ladders(table))
    fig, axes = plt.subplots(2, len(ladders), figsize=(5.2 * len(ladders), 7.5), squeeze=False)
    for col, ((machine, network), rows, names) in enumerate(ladders):
        xs = range(len(rows))
        top, bottom = axes[0][col], axes[1][col]
        top.bar(xs, [r["seconds_per_token"] for r in rows], color=STALL_COLOURS[0])
        top.set_yscale("log")
        top.set_title(f"{network} on {machine}", fontsize=9)
        top.set_ylabel("seconds per token, one device" if col == 0 else "")
        bottom.bar(xs, [r["device_bytes"] for r in rows],
                   color=[STALL_COLOURS[1] if r["fits"] else "#888888" for r in rows])
        if rows[0].get("capacity"):
            bottom.axhline(rows[0]["capacity"], color="k", lw=1, ls="--")
        bottom.set_yscale("log")
        bottom.set_ylabel("bytes one device holds at its peak" if col == 0 else "")
        for ax in (top, bottom):
            ax.set_xticks(list(xs), names, rotation=55, ha="right", fontsize=7)
            ax.grid(True, axis="y", which="major", alpha=0.3)
    _finish(fig, sources("Each bar adds one trick to all those left of it (memwall.study.tricks.TRICKS): "
                         "batch 8, 8 micro-batches per optimizer step, 16-bit arithmetic with fp32 main gradients, "
                         "full fusion, fused attention, checkpointing every layer, ZeRO-3 over 8 data-parallel "
                         "devices, then 4 pipeline stages (x 2 replicas, ZeRO-1). Time per token of one device: a "
                         "multi-device step's seconds x its devices / its tokens. Grey: the device's share does "
                         "not fit its memory (dashed); the 1980s had only batching."))
    return fig


def plotly(data: Row) -> dict[str, Any]:
    """Seconds per token (left) and bytes a device holds (right), one bar series per case."""
    table = data.get("ladder") or []
    if not table:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    traces = []
    for (machine, network), rows, names in _ladders(table):
        for j, key in enumerate(("seconds_per_token", "device_bytes")):
            traces.append({"type": "bar", "name": f"{network} on {machine}", "legendgroup": f"{machine}{network}",
                           "showlegend": j == 0, "xaxis": "x2" if j else "x", "yaxis": "y2" if j else "y",
                           "x": names, "y": [r[key] for r in rows],
                           "marker": {"line": {"width": [0 if r["fits"] else 2 for r in rows], "color": "#888"}},
                           "customdata": custom(rows, ("trick", "seconds_per_token", "device_bytes",
                                                       lambda r: "yes" if r["fits"] else "no", bound_label)),
                           "hovertemplate": hover(("trick", "seconds per token", "bytes a device holds", "fits",
                                                   "binds"))})
    return spec(traces, grid={"rows": 1, "columns": 2, "pattern": "independent"}, barmode="group",
                yaxis=axis("seconds per token, one device", True),
                yaxis2=axis("bytes one device holds at its peak", True))


def prose(data: Row) -> str:
    return ""
