"""Figure 6, the synthetic balance sweep: one compute engine with its memory bandwidth swept
over four decades, stall fraction against balance with nothing else changed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..study.tables import no_reuse_intensity, per_example_rows
from ._style import _empty, _finish, _plt, empty_spec, sources
from .regime_flip import flip_spec, stall_vs_balance

NUMBER = 6
NAME = "synthetic_balance"
TITLE = "Synthetic balance sweep: one engine, memory bandwidth over four decades"
CAPTION = ("One compute engine with its memory bandwidth swept over four decades: stall "
           "fraction against balance, with nothing else changed.")
TABLES = ("rows",)
NEEDS = "cases on synthetic machines (BASE@bw=X) at batch 1"
OPT_IN = False


def from_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The tables, from a sweep's rows: per-example training at batch 1 on synthetic machines."""
    return {"rows": per_example_rows(rows, synthetic=True)}


def draw(data: Mapping[str, Any]):
    sel = data.get("rows") or []
    if not sel:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    stall_vs_balance(ax, sel, no_reuse_intensity(sel), connect=True)
    base = sel[0]["machine"].split("@")[0]
    ax.set_title(f"One compute engine ({base}), its memory bandwidth swept")
    _finish(fig, sources(f"Machines: the {base} profile with its main-memory bandwidth replaced; "
                         "compute rates and caches unchanged."))
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = data.get("rows") or []
    return flip_spec(rows, connect=True) if rows else empty_spec(f"{NUMBER}. {TITLE}", NEEDS)


def prose(data: Mapping[str, Any]) -> str:
    return ""
