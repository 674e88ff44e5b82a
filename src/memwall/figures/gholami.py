"""Figure 12, Gholami's case study simulated: BERT-Base, BERT-Large and GPT-2 over sequence
length on their CPU (FLOPs, memory bytes, intensity, latency), and beside them another
machine and batched decode. Opt-in: its cases are its own (:mod:`memwall.study.gholami`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..study.gholami import GHOLAMI_SUM_BOUND, gholami_summary
from ..study.tables import GHOLAMI_REF
from ._style import _empty, _finish, _plt, axis, custom, e, empty_spec, hover, sources, spec

NUMBER = 12
NAME = "gholami"
TITLE = "Gholami's case study, simulated: encoders against a decoder over sequence length"
CAPTION = ("Gholami et al.'s profile of BERT-Base, BERT-Large and GPT-2 at batch 1 with 8-bit weights on a Xeon "
           "Gold 6242, simulated: FLOPs, main-memory bytes, arithmetic intensity and latency against sequence "
           "length (GPT-2 generating the sequence token by token), and beside them a modern machine and batched "
           "decode. Drawn only when asked for (experiments/12_gholami.py): it simulates cases of its own.")
TABLES = ("rows", "summary")
NEEDS = "BERT-Base, BERT-Large and GPT-2 simulated at several sequence lengths"
OPT_IN = True

COLOURS = {"bert-base": "#4c72b0", "bert-large": "#55a868", "gpt2-small": "#c44e52"}

Row = Mapping[str, Any]


def _lines(rows: Sequence[Row], key: str, styles: Mapping[tuple[str, int], str]):
    """(machine, batch, network, its rows by length, line style) of each line drawn."""
    for (machine, batch), ls in styles.items():
        for net in dict.fromkeys(r["network"] for r in rows):
            line = sorted((r for r in rows if r["machine"] == machine and r["batch"] == batch and r["network"] == net
                           and r.get(key)), key=lambda r: r["length"])
            if line:
                yield machine, batch, net, line, ls


def _panel(ax, rows: Sequence[Row], key: str, *, styles: Mapping[tuple[str, int], str]) -> None:
    for machine, batch, net, line, ls in _lines(rows, key, styles):
        tag = "" if len(styles) == 1 else f", {machine}" + (f", batch {batch}" if batch > 1 else "")
        ax.plot([r["length"] for r in line], [r[key] for r in line], ls=ls, marker="o", ms=3,
                color=COLOURS.get(net, "#8172b3"), label=f"{net}{tag}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _styles(rows: Sequence[Row]) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], str]]:
    """The line styles of Gholami's own panels (their machine, batch 1) and of the panels beyond them."""
    home = rows[0]["machine"]
    others = [m for m in dict.fromkeys(r["machine"] for r in rows) if m != home]
    solo = {(home, 1): "-"}
    beyond = {**solo, **{(m, 1): "--" for m in others}}
    batches = sorted({r["batch"] for r in rows if r["batch"] > 1})
    beyond.update({(m, b): ":" for m in (home, *others) for b in batches})
    return solo, beyond


def draw(data: Row):
    """Gholami's four panels on their CPU (FLOPs, memory bytes, intensity, latency against
    sequence length) and, beside them, intensity and latency on a modern machine and with
    batched decode."""
    rows = data.get("rows") or []
    if not rows:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    home = rows[0]["machine"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    solo, beyond = _styles(rows)
    panels = (("flops", "(a) FLOPs", "FLOPs of the pass (forward; GPT-2: every generated token)"),
              ("bytes", "(b) Memory operations", "main-memory bytes (read + written)"),
              ("intensity", "(c) Arithmetic intensity", "FLOPs per main-memory byte"),
              ("latency_norm", "(d) Latency", "latency ÷ BERT-Base's at the shortest length"))
    grid = axes.ravel()  # reading order: (a) (b) (c) / (d) (e) (f)
    for ax, (key, title, ylabel) in zip(grid[:4], panels, strict=True):
        _panel(ax, rows, key, styles=solo)
        ax.set_title(f"{title}, {home}, batch 1, {rows[0]['dtype']}", fontsize=9)
        ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=7)
    for ax, key, title, ylabel in (
            (grid[4], "intensity", "(e) Arithmetic intensity", panels[2][2]),
            (grid[5], "latency_norm", "(f) Latency", "latency per sequence ÷ BERT-Base's at the shortest length")):
        _panel(ax, rows, key, styles=beyond)
        ax.set_title(f"{title}: other machines, batched decode", fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
    low, high = grid[4].get_ylim()
    grid[4].set_ylim(low, high * 30)  # headroom: the legend goes above the lines
    grid[4].legend(fontsize=5.5, ncol=2, loc="upper right")
    fig.suptitle(f"{NUMBER}. Gholami's case study, simulated: encoders against a decoder ({_span(rows)})",
                 fontsize=11)
    n_ctx = max((r["sampled_contexts"] or 0) for r in rows)
    _finish(fig, sources(
        f"Beside {GHOLAMI_REF}: at batch 1 on this CPU with 8-bit weights and activations, GPT-2's arithmetic intensity "
        "is orders of magnitude below BERT's and its latency grows faster with the sequence, at similar FLOPs. "
        "Here: encoders = one forward pass over the sequence; GPT-2 = the sequence generated token by token, the "
        f"sum of its decode steps at contexts 0 ... L-1, from at most {n_ctx} sampled contexts interpolated linearly "
        f"(within {GHOLAMI_SUM_BOUND:.0%} of the exact sum where tested, tests/test_gholami.py). Learned position "
        "tables extended past the presets' 512 (BERT) and 1024 (GPT-2). Right column, what one profile could not "
        "show: the same on another machine (dashed) and decode batched (dotted; per sequence)."))
    fig.subplots_adjust(top=0.92)
    return fig


def _span(rows: Sequence[Row]) -> str:
    home = rows[0]["machine"]
    ratios = [s for s in gholami_summary(rows) if s["machine"] == home and s["what"] == "encoder/decoder"]
    return (f"encoder/decoder intensity {min(s['intensity_ratio'] for s in ratios):.0f}–"
            f"{max(s['intensity_ratio'] for s in ratios):.0f}x on {home}") if ratios else ""


def plotly(data: Row) -> dict[str, Any]:
    """Panels (e) and (f): intensity and latency against length, every machine and batch."""
    rows = data.get("rows") or []
    if not rows:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    _, beyond = _styles(rows)
    dash = {"-": "solid", "--": "dash", ":": "dot"}
    traces = []
    for j, key in enumerate(("intensity", "latency_norm")):
        for machine, batch, net, line, ls in _lines(rows, key, beyond):
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{net}, {machine}, batch {batch}",
                           "legendgroup": f"{net}{machine}{batch}", "showlegend": j == 0,
                           "xaxis": "x2" if j else "x", "yaxis": "y2" if j else "y",
                           "x": [r["length"] for r in line], "y": [r[key] for r in line],
                           "line": {"color": COLOURS.get(net, "#8172b3"), "dash": dash[ls]},
                           "customdata": custom(line, ("machine", "network", "batch", "length", "flops", "bytes",
                                                       "seconds", key)),
                           "hovertemplate": hover(("machine", "network", "batch", "length", "FLOPs", "memory bytes",
                                                   "seconds", key))})
    return spec(traces, grid={"rows": 1, "columns": 2, "pattern": "independent"},
                xaxis=axis("sequence length (tokens)", True), xaxis2=axis("sequence length (tokens)", True),
                yaxis=axis("FLOPs per main-memory byte", True),
                yaxis2=axis("latency per sequence ÷ BERT-Base's at the shortest length", True))


def prose(data: Row) -> str:
    rows = data.get("rows") or []
    return f"{e(_span(rows))}." if rows and _span(rows) else ""
