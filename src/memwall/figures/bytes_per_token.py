"""Figure 13, bytes per token: weights, optimizer state, the gradient all-reduce and the
activations of a training step per token, stacked, against batch (no simulation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..study.tables import BYTES_PER_TOKEN_PARTS
from ._style import STALL_COLOURS, _empty, _finish, _log_log, _plt, axis, custom, empty_spec, hover, spec

NUMBER = 13
NAME = "bytes_per_token"
TITLE = "Bytes per token: weights, optimizer, communication and activations against batch"
CAPTION = ("Bytes per token of a training step, stacked by what they are: weights and gradients "
           "(every micro-batch), optimizer state and the gradient all-reduce (every optimizer step), and activations "
           "between kernels, each operand once as the kernels name it. The first three fall as 1/T; activations do "
           "not, so past their crossing more batch buys no intensity.")
TABLES = ("bytes",)
NEEDS = "a network whose training step builds"
OPT_IN = False


def draw(data: Mapping[str, Any]):
    table = data.get("bytes") or []
    if not table:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    rows = sorted(table, key=lambda r: r["tokens"])
    x = [r["tokens"] for r in rows]
    ax.stackplot(x, *[[r[p] for r in rows] for p in BYTES_PER_TOKEN_PARTS], colors=STALL_COLOURS[:4],
                 labels=["weights and gradients (every micro-batch)", "optimizer state (every optimizer step)",
                         f"gradient all-reduce, {rows[0]['dp']} replicas (every optimizer step)",
                         "activations between kernels"])
    _log_log(ax, "tokens per micro-batch (one micro-batch per optimizer step)", "bytes per token",
             f"{rows[0]['network']} at {rows[0]['seq_len']} tokens a sequence: bytes per token, by what they are",
             "upper right")
    _finish(fig, "Each operand once, as the step's kernels name it (the seed model's traffic, "
            "memwall.seed.bytes_by_class); the all-reduce moves 2 (N-1)/N of the gradient bytes per device. "
            "Weights, optimizer and communication fall as 1/T; activations do not: past the batch where "
            "they cross, more batch buys no intensity.")
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = sorted(data.get("bytes") or [], key=lambda r: r["tokens"])
    if not rows:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    names = ("weights and gradients", "optimizer state", "gradient all-reduce", "activations")
    traces = [{"type": "scatter", "mode": "lines", "stackgroup": "bytes", "name": name,
               "x": [r["tokens"] for r in rows], "y": [r[part] for r in rows], "line": {"color": STALL_COLOURS[k]},
               "customdata": custom(rows, ("network", "batch", "tokens", part)),
               "hovertemplate": hover(("network", "batch", "tokens", f"{name} B/token"))}
              for k, (part, name) in enumerate(zip(BYTES_PER_TOKEN_PARTS, names, strict=True))]
    return spec(traces, xaxis=axis("tokens per micro-batch", True), yaxis=axis("bytes per token (stacked)", True))


def prose(data: Mapping[str, Any]) -> str:
    return ""
