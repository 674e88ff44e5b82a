"""Figure 1, balance drift: machine balance against year, by kind, with the fitted growth
of peak FLOP/s, memory and link bandwidth per era beside Gholami et al.'s."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..study.tables import ERA_FITS, GHOLAMI, GHOLAMI_REF, drift_fits, link_fit
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

NUMBER = 1
NAME = "balance_drift"
TITLE = "Balance drift: machine balance against year"
CAPTION = ("Machine balance (peak FLOP/s ÷ main-memory bytes/s) by year and kind, with the "
           "fitted growth of peak arithmetic and of memory bandwidth per two years beside Gholami et al.'s "
           "3.0× and 1.6×. Higher balance means more arithmetic per byte is needed to keep the machine busy.")
TABLES = ("machines", "fits", "links")
NEEDS = "two or more machine profiles"
OPT_IN = False

FIT_STYLES = {"all": ":", "scalar-vector": "--", "accelerator": "-", "gholami-window": "-."}


def _era_lines(ax, table: Sequence[Mapping[str, Any]], fits: Mapping[str, Mapping[str, Any]]) -> None:
    for key, colour, label in (("peak", "#4c72b0", "peak FLOP/s"), ("bandwidth", "#c44e52", "memory B/s")):
        ax.scatter([r["year"] for r in table], [r[key] for r in table], color=colour, s=22, label=label, zorder=3)
        for fit, _, keep in ERA_FITS:
            if fit not in fits:
                continue
            sub = [r for r in table if keep(r)]
            ys, yrs = [r[key] for r in sub], [r["year"] for r in sub]
            coef = np.polyfit(yrs, np.log10(ys), 1)
            xs = np.linspace(min(yrs), max(yrs), 20)
            ax.plot(xs, 10 ** np.polyval(coef, xs), color=colour, lw=1, ls=FIT_STYLES[fit],
                    label=f"{label}, {fit}: ×{fits[fit][key + '_growth']:.2f}/2 yr")


def draw(data: Mapping[str, Any]):
    table = data.get("machines") or []
    if len(table) < 2:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2))
    fits = {f["fit"]: f for f in drift_fits(table)}
    _era_lines(left, table, fits)
    links = link_fit(table)
    if links:
        sub = [r for r in table if r.get("link")]
        yrs, ys = [r["year"] for r in sub], [r["link"] for r in sub]
        left.scatter(yrs, ys, color="#55a868", marker="D", s=20, zorder=3, label="link B/s per device (node, one way)")
        coef = np.polyfit(yrs, np.log10(ys), 1)
        xs = np.linspace(min(yrs), max(yrs), 20)
        left.plot(xs, 10 ** np.polyval(coef, xs), color="#55a868", lw=1,
                  label=f"links: ×{links['link_growth']:.2f}/2 yr (Gholami ×{GHOLAMI['interconnect']:.1f})")
    left.set_yscale("log")
    left.set_xlabel("year of introduction")
    left.set_ylabel("peak FLOP/s (FLOP/s)  ·  memory and link bandwidth (B/s)")
    left.set_title("Peak arithmetic, memory and link bandwidth, fitted by era")
    left.legend(fontsize=6, loc="upper left", ncol=1)
    for kind in sorted({r["kind"] for r in table}):
        sub = [r for r in table if r["kind"] == kind]
        right.scatter([r["year"] for r in sub], [r["balance"] for r in sub],
                      marker=KIND_MARKERS.get(kind, "o"), s=40, label=kind, zorder=3)
    # Names where they fit: spaced first (one a neighbourhood), then placed clear of each other.
    named = [(r["year"], r["balance"], r["name"])
             for r in spaced(table, lambda r: (r["year"], math.log10(r["balance"])), (4.0, 0.25))]
    dots = [(r["year"], r["balance"]) for r in table]
    right.set_yscale("log")
    right.set_xlabel("year of introduction")
    right.set_ylabel("machine balance (FLOP per byte of main memory)")
    acc, win = fits.get("accelerator"), fits.get("gholami-window")
    parts = [f"{name}: ×{f['balance_growth']:.2f}" for name, f in (("accelerators", acc), ("1998–2020", win)) if f]
    right.set_title("Balance drift per 2 years\n" + ", ".join(parts)
                    + f" (Gholami: ×{GHOLAMI['peak'] / GHOLAMI['bandwidth']:.2f})", fontsize=9)
    right.legend(title="kind", fontsize=7)
    right.grid(True, which="major", alpha=0.3)
    _finish(fig, "Peak at each machine's primary dtype over main-memory bandwidth, from era_data/machines. Growth: "
            "least-squares fit of log10 value against year, per fit: " + "; ".join(
                f"{f['fit']} = {f['label']} ({f['machines']} machines, {f['first_year']}–{f['last_year']})"
                for f in fits.values()) + f". Beside {GHOLAMI_REF} (3.0× and 1.6× per 2 years, and 1.4× for "
            "interconnect). Links: the per-device bandwidth within a node, one direction, of the profiles that "
            "state an [interconnect]" + (f" ({links['machines']} machines, {links['first_year']}–{links['last_year']})"
                                         if links else "") + ".",
            then=lambda: place_labels(right, named, avoid=dots, colour="#000000"))
    return fig


def _through_mean(rows: Sequence[Mapping[str, Any]], value: str, growth: float, years: Sequence[int]) -> list[float]:
    """A fitted growth drawn through the rows' geometric-mean point: v0 · g^((year - y0)/2)."""
    my = sum(r["year"] for r in rows) / len(rows)
    ml = sum(math.log10(r[value]) for r in rows) / len(rows)
    return [10 ** (ml + math.log10(growth) * (x - my) / 2) for x in years]


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    table = data.get("machines") or []
    if len(table) < 2:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    traces: list[dict[str, Any]] = []
    for k, kind in enumerate(dict.fromkeys(r["kind"] for r in table)):
        s = [r for r in table if r["kind"] == kind]
        traces.append({"type": "scatter", "mode": "markers", "name": kind, "x": [r["year"] for r in s],
                       "y": [r["balance"] for r in s], "marker": {"size": 8, "color": COLOURS[k % 10]},
                       "customdata": custom(s, ("name", "year", "peak", "bandwidth", "balance", "dtype")),
                       "hovertemplate": hover(("machine", "year", "peak FLOP/s", "memory B/s", "balance FLOP/B",
                                               "dtype"))})
    rules = {fit: keep for fit, _, keep in ERA_FITS}
    for k, f in enumerate(data.get("fits") or []):
        s = [r for r in table if f["fit"] in rules and rules[f["fit"]](r)]
        if not s:
            continue
        xs = [f["first_year"], f["last_year"]]
        traces.append({"type": "scatter", "mode": "lines", "name": f"fit, {f['label']}: ×{f['balance_growth']:.4g}/2 yr",
                       "x": xs, "y": _through_mean(s, "balance", f["balance_growth"], xs),
                       "line": {"dash": ["dot", "dash", "solid", "dashdot"][k % 4], "color": "#444"},
                       "hoverinfo": "name"})
    linked = [{**r, "link_gb": r["link"] / 1e9} for r in table if r.get("link")]
    if linked:
        traces.append({"type": "scatter", "mode": "markers", "yaxis": "y2",
                       "name": "link B/s per device ÷ 1e9 (node, one way; right axis)",
                       "x": [r["year"] for r in linked], "y": [r["link_gb"] for r in linked],
                       "marker": {"symbol": "diamond", "size": 7, "color": "#55a868"},
                       "customdata": custom(linked, ("name", "year", "link")),
                       "hovertemplate": hover(("machine", "year", "link B/s per device, one way"))})
    for f in data.get("links") or []:
        xs = [f["first_year"], f["last_year"]]
        traces.append({"type": "scatter", "mode": "lines", "yaxis": "y2", "x": xs,
                       "name": f"links: ×{f['link_growth']:.4g}/2 yr (Gholami ×{GHOLAMI['interconnect']:.1f})",
                       "y": _through_mean(linked, "link_gb", f["link_growth"], xs) if linked else [],
                       "line": {"color": "#55a868"}, "hoverinfo": "name"})
    return spec(traces, xaxis=axis("year of introduction"),
                yaxis=axis("machine balance (FLOP per byte of main memory)", True),
                yaxis2=axis("link GB/s per device", True, overlaying="y", side="right"))


def prose(data: Mapping[str, Any]) -> str:
    fits = data.get("fits") or []
    if not fits:
        return ""
    bits = [f"{e(f['label'])} ({f['machines']} machines, {f['first_year']}–{f['last_year']}): peak "
            f"×{f['peak_growth']:.2f}, bandwidth ×{f['bandwidth_growth']:.2f}, balance "
            f"×{f['balance_growth']:.2f}" for f in fits]
    out = ("Growth per two years, each number from the fit named: " + "; ".join(bits)
           + f". Gholami et al. give ×{GHOLAMI['peak']:.1f} and ×{GHOLAMI['bandwidth']:.1f} "
           "(balance ×1.88) for server hardware of the last two decades.")
    for link in data.get("links") or []:
        out += (f" Per-device link bandwidth within a node grows ×{link['link_growth']:.2f} per "
                f"two years over the {link['machines']} profiles that state links "
                f"({link['first_year']}–{link['last_year']}; their peak ×{link['peak_growth']:.2f}, "
                f"memory ×{link['bandwidth_growth']:.2f}), against Gholami et al.'s "
                f"×{GHOLAMI['interconnect']:.1f}: the third wall.")
    return out
