"""Figure 5, the capacity ledger: bytes of saved activations against bytes of parameters as
the batch grows, without and with √L checkpointing (no simulation: the steps' ledgers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model_version import MODEL_VERSION
from ..study.tables import LEDGER_WIDTH
from ._style import _empty, _finish, _plt, axis, custom, empty_spec, hover, spec

NUMBER = 5
NAME = "capacity_ledger"
TITLE = "The capacity ledger: saved activations against parameters"
CAPTION = ("Bytes of saved activations against bytes of parameters as the batch grows; they "
           "cross at batch = width for a chain of square layers, and √L checkpointing moves the crossover right.")
TABLES = ("ledger",)
NEEDS = "a network whose training step builds"
OPT_IN = False


def draw(data: Mapping[str, Any]):
    table = data.get("ledger") or []
    if not table:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    net = table[0]["network"]
    none = sorted((r for r in table if r["checkpoint"] == "none"), key=lambda r: r["batch"])
    xs = [r["batch"] for r in none]
    ax.plot(xs, [r["weights"] for r in none], color="#4c72b0", lw=2, label="parameters (weights)")
    styles = {"none": ("#c44e52", "-"), "sqrt": ("#55a868", "--")}
    for ck in dict.fromkeys(r["checkpoint"] for r in table):
        sub = sorted((r for r in table if r["checkpoint"] == ck), key=lambda r: r["batch"])
        colour, ls = styles.get(ck, ("#8172b3", "-."))
        label = "saved activations" + ("" if ck == "none" else f", {'√L' if ck == 'sqrt' else ck} checkpointing")
        ax.plot([r["batch"] for r in sub], [r["activations"] for r in sub], color=colour, ls=ls, marker="o",
                ms=3, label=label)
    ax.axvline(LEDGER_WIDTH, color="#555555", ls=":", lw=1)
    ax.text(LEDGER_WIDTH * 1.08, 0.03, f"batch = width = {LEDGER_WIDTH}", fontsize=7, rotation=90, va="bottom",
            transform=ax.get_xaxis_transform())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (examples)")
    ax.set_ylabel("bytes held at the step's peak (B)")
    ax.set_title(f"{net}: saved activations overtake parameters as the batch grows")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    _finish(fig, f"Capacity ledger of memwall {MODEL_VERSION}'s training step (live bytes per tensor class at "
            f"the step's peak), from the {net} network preset in era_data/networks; no simulation needed.")
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    table = data.get("ledger") or []
    if not table:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    none = [r for r in table if r["checkpoint"] == "none"]
    traces = [{"type": "scatter", "mode": "lines", "name": "parameters (weights)", "x": [r["batch"] for r in none],
               "y": [r["weights"] for r in none], "line": {"width": 3}}]
    for ck in dict.fromkeys(r["checkpoint"] for r in table):
        s = [r for r in table if r["checkpoint"] == ck]
        traces.append({"type": "scatter", "mode": "lines+markers", "name": f"saved activations, checkpoint {ck}",
                       "x": [r["batch"] for r in s], "y": [r["activations"] for r in s],
                       "customdata": custom(s, ("network", "batch", "checkpoint", "activations", "weights", "peak")),
                       "hovertemplate": hover(("network", "batch", "checkpoint", "activations B", "weights B",
                                               "peak B"))})
    return spec(traces, xaxis=axis("batch (examples)", True), yaxis=axis("bytes held at the step's peak (B)", True))


def prose(data: Mapping[str, Any]) -> str:
    return ""
