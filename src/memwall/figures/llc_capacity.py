"""Figure 11, the cache each network needs: main-memory bytes of one training step against
the capacity of the last cache level, each curve from one pass of the capacity sweep."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._style import (
    COLOURS,
    STALL_COLOURS,
    _empty,
    _finish,
    _plt,
    axis,
    custom,
    empty_spec,
    hover,
    sources,
    spec,
)

NUMBER = 11
NAME = "llc_capacity"
TITLE = "Cache each network needs: main-memory bytes against last-level capacity"
CAPTION = ("Main-memory bytes of one training step against the capacity of the last cache level, "
           "every capacity from one replay (LRU stack distances), per network of an era on a machine of its era; a "
           "circle marks the machine's actual capacity. Where a curve falls to zero the step fits in that cache.")
TABLES = ("capacity",)
NEEDS = "a machine with a sweepable (LRU, write-back) last cache level"
OPT_IN = False


def _curves(table):
    for case in dict.fromkeys((r["machine"], r["network"]) for r in table):
        yield case, sorted((r for r in table if (r["machine"], r["network"]) == case), key=lambda r: r["capacity"])


def draw(data: Mapping[str, Any]):
    table = data.get("capacity") or []
    if not table:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for ((machine, network), rows), colour in zip(_curves(table), STALL_COLOURS * 4, strict=False):
        ax.plot([r["capacity"] for r in rows], [r["memory_bytes"] for r in rows], color=colour, lw=1.5,
                marker=".", ms=3, label=f"{network} on {machine} ({rows[0]['level']})")
        for r in rows:
            if r["actual"]:
                ax.plot([r["capacity"]], [r["memory_bytes"]], marker="o", ms=8, mfc="none", color=colour)
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1024)  # (linear below 1 KiB: a step that fits moves 0 B)
    ax.set_ylim(0, 3 * max(max(r["memory_bytes"] for r in table), 1024))
    ax.set_xlabel("last-level cache capacity (B), at the machine's line size and set count")
    ax.set_ylabel("main-memory bytes of one training step (read + written)")
    ax.set_title("How much cache each network needs: memory traffic against last-level capacity")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    _finish(fig, sources("Each curve is one pass of the capacity sweep (LRU stack distances, exact for "
                         "every associativity); circles mark each machine's actual capacity. The step's "
                         "second pass, after one to warm the caches; no sampling."))
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    table = data.get("capacity") or []
    if not table:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    traces = []
    for k, ((machine, network), s) in enumerate(_curves(table)):
        traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{network} on {machine} ({s[0]['level']})",
                       "x": [r["capacity"] for r in s], "y": [max(r["memory_bytes"], 1) for r in s],
                       "line": {"color": COLOURS[k % 10]},
                       "marker": {"size": [12 if r["actual"] else 4 for r in s],
                                  "symbol": ["circle-open" if r["actual"] else "circle" for r in s]},
                       "customdata": custom(s, ("machine", "network", "capacity", "memory_bytes",
                                                lambda r: "yes" if r["actual"] else "")),
                       "hovertemplate": hover(("machine", "network", "capacity B", "memory bytes",
                                               "the machine's own"))})
    return spec(traces, xaxis=axis("last-level cache capacity (B)", True),
                yaxis=axis("main-memory bytes of one training step (1 = none)", True))


def prose(data: Mapping[str, Any]) -> str:
    return ""
