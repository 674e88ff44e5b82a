"""Figure 15, the energy balance: energy per FLOP and per byte of main memory across eras,
and their ratio (pJ/B ÷ pJ/FLOP) beside the time balance of figure 1, from the profiles'
[energy] figures only (no sweep)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._style import (
    COLOURS,
    KIND_MARKERS,
    _empty,
    _finish,
    _plt,
    axis,
    custom,
    e,
    empty_spec,
    hover,
    place_labels,
    spaced,
    spec,
)

NUMBER = 15
NAME = "energy_balance"
TITLE = "Energy balance: joules per FLOP and per byte across eras, beside the time balance"
CAPTION = ("From the machine profiles alone (no simulation): the energy of one FLOP of each machine's primary "
           "dtype on its matrix units ([energy]) and of one byte moved to or from main memory ([memory] energy), in "
           "pJ, by year; and their ratio, the energy balance (pJ/B ÷ pJ/FLOP: how many FLOPs cost as much as one "
           "byte of main memory), beside the time balance of figure 1 (peak FLOP/s ÷ bytes/s). Where the energy "
           "balance is above the time balance, a step at the time balance's intensity still spends more energy "
           "moving bytes than computing. Machines whose profile states neither figure are left out, not drawn as "
           "zero; a machine whose profile states its dynamic energy as zero (all of it static power) is drawn "
           "only at its rated power ÷ peak. The paragraph below counts both and the figures' sources: nearly "
           "all are estimates (scaled from Horowitz's 45 nm table, O'Connor's DRAM per-bit energies, data "
           "sheets' power, or carried from a sibling part's measurement), not measurements; the H200's and "
           "B200's tensor-core figures are derived from their measured power-saturated product rates.")
TABLES = ("machines", "lacking")
NEEDS = "machine profiles with [energy] figures"
OPT_IN = False

Row = Mapping[str, Any]


def _positive(rows: Sequence[Row], key: str) -> list[Row]:
    return [r for r in rows if r.get(key) is not None and r[key] > 0]


def counts(data: Mapping[str, Any]) -> dict[str, Any]:
    """What the figure leaves out and where its figures come from, for the footnote and the prose."""
    rows, lacking = data.get("machines") or [], data.get("lacking") or []
    both = _positive(rows, "energy_balance")
    zero = [r for r in rows if r.get("pj_per_flop") == 0 and not r.get("pj_per_byte")]
    byte_only = [r for r in rows if r.get("pj_per_flop") is None and r.get("pj_per_byte")]
    flop_only = [r for r in rows if r.get("pj_per_flop") and r.get("pj_per_byte") is None]
    statuses: dict[str, int] = {}
    for r in rows:
        for key, value in (("flop_status", "pj_per_flop"), ("byte_status", "pj_per_byte")):
            if r.get(value) is not None and r.get(key):
                statuses[r[key]] = statuses.get(r[key], 0) + 1
    return {"shipped": len(rows) + len(lacking), "both": len(both), "lacking": len(lacking),
            "zero": [r["id"] for r in zero], "byte_only": [r["id"] for r in byte_only],
            "flop_only": [r["id"] for r in flop_only],
            "statuses": dict(sorted(statuses.items(), key=lambda kv: -kv[1]))}


def _note(data: Mapping[str, Any]) -> str:
    c = counts(data)
    status = ", ".join(f"{n} {s}" for s, n in c["statuses"].items())
    text = (f"{c['both']} of {c['shipped']} shipped profiles state both a positive pJ/FLOP and pJ/B; "
            f"{c['lacking']} state neither and are left out")
    if c["byte_only"]:
        text += f"; {len(c['byte_only'])} state only main memory's pJ/B ({', '.join(c['byte_only'])})"
    if c["flop_only"]:
        text += f"; {len(c['flop_only'])} state only a pJ/FLOP ({', '.join(c['flop_only'])})"
    if c["zero"]:
        text += (f"; {', '.join(c['zero'])} state zero dynamic energy (all static: drawn at rated power ÷ peak "
                 "only)")
    return (text + f". The figures drawn, by status: {status}. pJ/FLOP: the primary dtype on the matrix units; "
            "pJ/B: main memory's transfer (DRAM access and I/O).")


def _footnote(data: Mapping[str, Any]) -> str:
    from ..data import data_version

    return (f"From the machine profiles of era_data {data_version()} (era_data/machines, each figure with its "
            f"provenance), no simulation. {_note(data)}")


def draw(data: Mapping[str, Any]):
    rows = data.get("machines") or []
    flop, byte, at_tdp = (_positive(rows, k) for k in ("pj_per_flop", "pj_per_byte", "pj_per_flop_at_tdp"))
    both = _positive(rows, "energy_balance")
    if not flop and not byte:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2))
    left.scatter([r["year"] for r in byte], [r["pj_per_byte"] for r in byte], color="#c44e52", marker="s", s=26,
                 zorder=3, label="pJ per byte of main memory")
    left.scatter([r["year"] for r in flop], [r["pj_per_flop"] for r in flop], color="#4c72b0", marker="o", s=26,
                 zorder=3, label="pJ per FLOP (primary dtype, matrix units)")
    left.scatter([r["year"] for r in at_tdp], [r["pj_per_flop_at_tdp"] for r in at_tdp], color="#8c8c8c",
                 marker="x", s=22, zorder=2, label="rated power ÷ peak (pJ per FLOP at TDP)")
    left.set_yscale("log")
    left.set_xlabel("year of introduction")
    left.set_ylabel("energy (pJ)")
    left.set_title("Energy per FLOP and per byte of main memory")
    left.grid(True, which="major", alpha=0.3)
    left.legend(fontsize=7, loc="upper right")
    for r in both:
        right.plot([r["year"], r["year"]], [r["energy_balance"], r["time_balance"]], color="#bbbbbb", lw=0.8,
                   zorder=1)
    for k, kind in enumerate(sorted({r["kind"] for r in both})):
        sub = [r for r in both if r["kind"] == kind]
        marker = KIND_MARKERS.get(kind, "o")
        right.scatter([r["year"] for r in sub], [r["energy_balance"] for r in sub], marker=marker, s=40,
                      color=COLOURS[k % 10], zorder=3, label=f"{kind}: energy balance")
        right.scatter([r["year"] for r in sub], [r["time_balance"] for r in sub], marker=marker, s=40,
                      facecolors="none", edgecolors=COLOURS[k % 10], zorder=3, label=f"{kind}: time balance")
    right.set_yscale("log")
    right.set_xlabel("year of introduction")
    right.set_ylabel("FLOP per byte of main memory")
    right.set_title("Energy balance (pJ/B ÷ pJ/FLOP, filled) beside time balance (FLOP/s ÷ B/s, open)",
                    fontsize=9)
    right.grid(True, which="major", alpha=0.3)
    right.legend(fontsize=6, loc="upper left", ncol=2)
    named = [(r["year"], r["energy_balance"], r["id"])
             for r in spaced(both, lambda r: (r["year"], math.log10(r["energy_balance"])), (3.0, 0.3))]
    dots = [(r["year"], r[k]) for r in both for k in ("energy_balance", "time_balance")]
    _finish(fig, _footnote(data), then=lambda: place_labels(right, named, avoid=dots, colour="#000000"))
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    rows = data.get("machines") or []
    flop, byte, at_tdp = (_positive(rows, k) for k in ("pj_per_flop", "pj_per_byte", "pj_per_flop_at_tdp"))
    both = _positive(rows, "energy_balance")
    if not flop and not byte:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    cols = ("name", "year", "flop_dtype", "pj_per_flop", "flop_status", "pj_per_byte", "byte_status",
            "energy_balance", "time_balance", "pj_per_flop_at_tdp")
    names = ("machine", "year", "dtype", "pJ/FLOP", "its status", "pJ/B", "its status", "energy balance FLOP/B",
             "time balance FLOP/B", "pJ/FLOP at TDP")
    traces: list[dict[str, Any]] = []
    for sub, key, label, colour, symbol in ((byte, "pj_per_byte", "pJ per byte of main memory", "#c44e52", "square"),
                                            (flop, "pj_per_flop", "pJ per FLOP (primary dtype)", "#4c72b0", "circle"),
                                            (at_tdp, "pj_per_flop_at_tdp", "rated power ÷ peak (pJ/FLOP)", "#8c8c8c",
                                             "x")):
        traces.append({"type": "scatter", "mode": "markers", "name": label, "x": [r["year"] for r in sub],
                       "y": [r[key] for r in sub], "marker": {"color": colour, "symbol": symbol, "size": 7},
                       "customdata": custom(sub, cols), "hovertemplate": hover(names)})
    for key, label, symbol in (("energy_balance", "energy balance (pJ/B ÷ pJ/FLOP)", "diamond"),
                               ("time_balance", "time balance (FLOP/s ÷ B/s)", "diamond-open")):
        traces.append({"type": "scatter", "mode": "markers", "name": label, "xaxis": "x2", "yaxis": "y2",
                       "x": [r["year"] for r in both], "y": [r[key] for r in both],
                       "marker": {"color": "#2ca02c" if key == "energy_balance" else "#444", "symbol": symbol,
                                  "size": 8},
                       "customdata": custom(both, cols), "hovertemplate": hover(names)})
    return spec(traces, xaxis=axis("year of introduction", domain=[0, 0.45]),
                yaxis=axis("energy (pJ)", True),
                xaxis2=axis("year of introduction", domain=[0.55, 1], anchor="y2"),
                yaxis2=axis("FLOP per byte of main memory", True, anchor="x2"))


def prose(data: Mapping[str, Any]) -> str:
    rows = data.get("machines") or []
    both = _positive(rows, "energy_balance")
    if not both:
        return ""
    c = counts(data)
    above = [r for r in both if r["energy_balance"] > r["time_balance"]]
    low = min(both, key=lambda r: r["energy_balance"])
    high = max(both, key=lambda r: r["energy_balance"])
    status = ", ".join(f"{n} {e(s)}" for s, n in c["statuses"].items())
    out = (f"{c['both']} of {c['shipped']} shipped profiles state both figures; {c['lacking']} state neither and "
           f"are left out")
    if c["byte_only"]:
        out += f", {len(c['byte_only'])} state main memory's pJ/B only"
    if c["flop_only"]:
        out += f", {len(c['flop_only'])} state a pJ/FLOP only"
    if c["zero"]:
        out += f", and {e(', '.join(c['zero']))} state zero dynamic energy (all static)"
    out += (f". Energy balance runs from {low['energy_balance']:.3g} FLOP/B ({e(low['name'])}, {low['year']}) to "
            f"{high['energy_balance']:.3g} ({e(high['name'])}, {high['year']}); it is above the time balance on "
            f"{len(above)} of {len(both)} machines. The figures drawn, by status: {status}.")
    for r in both:
        if r["id"] == "h100-sxm":
            out += (f" On the H100: {r['pj_per_flop']:.3g} pJ per {e(r['flop_dtype'])} FLOP, "
                    f"{r['pj_per_byte']:.3g} pJ per byte of HBM, energy balance {r['energy_balance']:.3g} against "
                    f"a time balance of {r['time_balance']:.3g} FLOP/B.")
    return out
