"""Figure 10, decode: tokens per second (all sequences) against batch, one panel a context,
one line a machine; a star where the step is compute-bound, a cross where batch × context
no longer fits beside the weights."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..study.tables import ok_rows
from ._style import (
    COLOURS,
    _empty,
    _finish,
    _plt,
    axis,
    band_traces,
    bound_label,
    custom,
    empty_spec,
    hover,
    interval_band,
    label,
    sources,
    spec,
)

NUMBER = 10
NAME = "decode"
TITLE = "Decode: tokens per second against batch, at a short and a long context"
CAPTION = ("A GQA transformer decoding one token a sequence against a KV cache of a short and a long "
           "context: tokens per second of all sequences against batch. Batching shares the weight reads, so "
           "tokens/s climbs until the cache, which grows with batch × context, takes over; a star marks a "
           "compute-bound step, a cross a batch that does not fit beside the weights; the shaded band is each "
           "prediction's interval (docs/intervals.md).")
TABLES = ("rows",)
NEEDS = "decode cases at several batch sizes"
OPT_IN = False

Row = Mapping[str, Any]


def _selected(data: Row) -> list[Row]:
    return [r for r in ok_rows(data.get("rows") or []) if r.get("phase") == "decode" and r.get("tokens_per_second")]


def _overfull(r: Row) -> bool:
    return r.get("max_batch_that_fits") is not None and r["batch"] > int(r["max_batch_that_fits"])


def _panel(ax, sel: Sequence[Row], ctx: int, machines: Sequence[str], cmap) -> None:
    for k, m in enumerate(machines):
        sub = sorted((r for r in sel if r["machine"] == m and int(r["context"]) == ctx), key=lambda r: r["batch"])
        if not sub:
            continue
        colour = cmap(k % 10)
        xs, ys = [r["batch"] for r in sub], [r["tokens_per_second"] for r in sub]
        ax.plot(xs, ys, color=colour, marker="o", ms=3, label=label(sub[0]))
        interval_band(ax, xs, ys, sub, colour)
        for r in sub:
            if r["bound_class"] == "compute":
                ax.plot(r["batch"], r["tokens_per_second"], "*", color=colour, ms=11)
            if _overfull(r):
                ax.plot(r["batch"], r["tokens_per_second"], "x", color="k", ms=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences decoding together)")
    ax.set_title(f"{sel[0]['network']}, context {ctx}")
    ax.grid(True, which="major", alpha=0.3)


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: its decode cases."""
    return {"rows": [r for r in rows if r.get("phase") == "decode"]}


def draw(data: Row):
    sel = _selected(data)
    contexts = sorted({int(r["context"]) for r in sel})
    if not sel or len({r["batch"] for r in sel}) < 2:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(contexts), figsize=(5 * len(contexts), 4.5), squeeze=False, sharey=True)
    machines = list(dict.fromkeys(r["machine"] for r in sorted(sel, key=lambda r: (r["year"], r["machine"]))))
    for ax, ctx in zip(axes[0], contexts, strict=True):
        _panel(ax, sel, ctx, machines, cmap)
    axes[0][0].set_ylabel("tokens per second (all sequences)")
    axes[0][0].legend(fontsize=7)
    _finish(fig, sources("Star: compute-bound step. Cross: batch x context does not fit in the machine's memory "
                         "beside the weights (simulated as if it did)."))
    return fig


def plotly(data: Row) -> dict[str, Any]:
    sel = _selected(data)
    if not sel or len({r["batch"] for r in sel}) < 2:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    traces, k = [], 0
    for i, ctx in enumerate(dict.fromkeys(r["context"] for r in sel)):
        for m in dict.fromkeys(r["machine"] for r in sel):
            s = sorted((r for r in sel if r["machine"] == m and r["context"] == ctx), key=lambda r: r["batch"])
            if not s:
                continue
            traces += band_traces([r["batch"] for r in s], [r["tokens_per_second"] for r in s], s,
                                  COLOURS[k % 10], f"{m}, context {ctx}")
            traces.append({
                "type": "scatter", "mode": "lines+markers", "name": f"{m}, context {ctx}",
                "x": [r["batch"] for r in s], "y": [r["tokens_per_second"] for r in s],
                "line": {"dash": "dot" if i else "solid", "color": COLOURS[k % 10]},
                "marker": {"size": 8, "symbol": ["star" if r.get("bound_class") == "compute" else "x" if _overfull(r)
                                                 else "circle" for r in s]},
                "customdata": custom(s, ("machine", "network", "batch", "context", "tokens_per_second",
                                         bound_label, "max_batch_that_fits")),
                "hovertemplate": hover(("machine", "network", "batch", "context", "tokens/s", "binds",
                                        "largest batch that fits"))})
            k += 1
    return spec(traces, xaxis=axis("batch (sequences decoding together)", True),
                yaxis=axis("tokens per second (all sequences)", True))


def prose(data: Row) -> str:
    return ""
