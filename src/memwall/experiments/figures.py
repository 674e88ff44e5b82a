"""The era sweep's six figures, drawn from results rows, machine profiles and step ledgers.

Owns: what each figure selects from a sweep's rows, how it is drawn (labelled axes with
units, the data's sources in a footnote), and writing it as PNG and SVG to
``DIR/figures``. Figures 1 (balance drift) and 5 (capacity ledger) need no simulation:
they read the machine profiles and the training steps' capacity ledgers directly.

A figure whose data the sweep does not hold is still written, as a panel saying which
cases it needs, so a report never has a hole where a figure should be.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import MODEL_VERSION

Row = Mapping[str, Any]

# Gholami et al., "AI and Memory Wall", IEEE Micro 44(3), 2024: over the last two decades
# server peak FLOP/s grew 3.0x and DRAM bandwidth 1.6x every two years.
GHOLAMI = {"peak": 3.0, "bandwidth": 1.6, "interconnect": 1.4}
GHOLAMI_REF = 'Gholami et al., "AI and Memory Wall", IEEE Micro 2024'

NAMES = ("balance_drift", "regime_flip", "stall_breakdown", "batch_window", "capacity_ledger",
         "synthetic_balance", "validation", "roofline", "activation_highwater", "decode", "llc_capacity", "bytes_per_token")
TITLES = {
    "balance_drift": "1. Balance drift: machine balance against year",
    "regime_flip": "2. The regime flip: stall fraction against machine balance",
    "stall_breakdown": "3. Stall breakdown per machine",
    "batch_window": "4. The batch window: fraction of peak against batch",
    "capacity_ledger": "5. The capacity ledger: saved activations against parameters",
    "synthetic_balance": "6. Synthetic balance sweep: one engine, memory bandwidth over four decades",
    "validation": "7. Validation: memwall's predictions against published measurements",
    "roofline": "8. Roofline explorer: every kernel of a step under the machine's roofs",
    "activation_highwater": "9. Activation high-water: live bytes by tensor class over the step",
    "decode": "10. Decode: tokens per second against batch, at a short and a long context",
    "llc_capacity": "11. Cache each network needs: main-memory bytes against last-level capacity",
    "bytes_per_token": "13. Bytes per token: weights, optimizer, communication and activations against batch",
    "tricks": "14. What each trick buys: time per token and memory per device, the tricks added in turn",
    "gholami": "12. Gholami's case study, simulated: encoders against a decoder over sequence length",
}
# Figures drawn only when named (``write_figures(..., only=[...])``): they simulate cases
# of their own rather than read a sweep's, so a sweep does not pay for them unasked.
OPT_IN = ("gholami", "tricks")
KIND_MARKERS = {"vector": "s", "scalar": "o", "superscalar": "D", "gpu": "^", "tpu": "v", "wafer": "*",
                "array": "P"}
STALL_COLOURS = ["#c44e52", "#dd8452", "#937860", "#8172b3", "#da8bc3", "#8c8c8c", "#ccb974"]


def _plt():
    import matplotlib

    # Deterministic SVG ids, so the same data gives the same file.
    matplotlib.rcParams["svg.hashsalt"] = "memwall"
    import matplotlib.pyplot as plt

    return plt


def _sources(extra: str = "") -> str:
    from ..data import data_version

    text = (f"Simulated by memwall {MODEL_VERSION} (era_data {data_version()}); machine figures from "
            "era_data/machines, each with its provenance.")
    return f"{text} {extra}".strip()


def _finish(fig, note: str) -> None:
    fig.text(0.01, 0.005, note, fontsize=6.5, color="#555555", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 1))


def _log_log(ax, xlabel: str, ylabel: str, title: str, legend: str = "best") -> None:
    """Log-log axes with their labels, title, grid and a small legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc=legend)


def _empty(name: str, needs: str):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.text(0.5, 0.6, TITLES[name], ha="center", fontsize=11, weight="bold")
    ax.text(0.5, 0.35, f"No data for this figure in this sweep.\nIt needs: {needs}", ha="center", fontsize=9)
    return fig


def _ok(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.get("status") == "ok" and r.get("seconds") is not None]


def _label(row: Row) -> str:
    return f"{row.get('name') or row['machine']} ({row['year']})"


# --------------------------------------------------------------------------------------
# 1. Balance drift


def machine_table() -> list[dict[str, Any]]:
    """One dict per shipped machine: id, name, year, kind, peak (FLOP/s), bandwidth (B/s), balance."""
    from ..profiles import all_machines

    out = []
    for m in all_machines():
        peak = m.peak_flops[m.primary_dtype]
        bw = m.memory.bandwidth
        link = m.interconnect.node.bandwidth if m.interconnect is not None else None
        out.append({"id": m.id, "name": m.name, "year": m.year, "kind": m.kind,
                    "dtype": m.primary_dtype, "peak": peak, "bandwidth": bw, "balance": peak / bw,
                    "link": link})
    return sorted(out, key=lambda r: (r["year"], r["id"]))


def _balance_drift_data(table: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Figure 1's data: the machines, the era fits and the link fit, from one machine table."""
    links = link_fit(table)
    return {"machines": list(table), "fits": drift_fits(table), "links": [links] if links else []}


def link_fit(table: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Growth per two years of the per-device link bandwidth within a node (one direction,
    the profiles' [interconnect.node]) over the machines that state one, beside their peak
    and memory bandwidth over the same machines (Gholami et al.'s third trend)."""
    sub = [r for r in table if r.get("link")]
    years = [r["year"] for r in sub]
    if len(set(years)) < 2:
        return None
    return {"machines": len(sub), "first_year": min(years), "last_year": max(years),
            "link_growth": growth_per_two_years(years, [r["link"] for r in sub]),
            "peak_growth": growth_per_two_years(years, [r["peak"] for r in sub]),
            "bandwidth_growth": growth_per_two_years(years, [r["bandwidth"] for r in sub])}


def growth_per_two_years(years: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares exponential growth factor of ``values`` per two years."""
    if len(set(years)) < 2:
        return math.nan
    slope = np.polyfit(np.asarray(years, float), np.log10(np.asarray(values, float)), 1)[0]
    return float(10 ** (2 * slope))


# The fits of figure 1, each over its own machines: the scalar and vector era (every
# machine before 2000, the SIMD arrays of the 1980s included), the accelerator era (GPUs,
# TPUs, wafer-scale engines), and Gholami et al.'s window, server hardware of the two
# decades their figure covers (1998-2020), whatever the kind.
SCALAR_ERA_END = 1999
ACCELERATOR_KINDS = ("gpu", "tpu", "wafer")
GHOLAMI_WINDOW = (1998, 2020)
ERA_FITS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], bool]], ...] = (
    ("all", "every shipped machine", lambda r: True),
    ("scalar-vector", f"scalar and vector era (every machine to {SCALAR_ERA_END})",
     lambda r: r["year"] <= SCALAR_ERA_END),
    ("accelerator", "accelerator era (GPUs, TPUs, wafer-scale)", lambda r: r["kind"] in ACCELERATOR_KINDS),
    ("gholami-window", f"Gholami's window ({GHOLAMI_WINDOW[0]}-{GHOLAMI_WINDOW[1]}, every kind)",
     lambda r: GHOLAMI_WINDOW[0] <= r["year"] <= GHOLAMI_WINDOW[1]),
)


def drift_fits(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Growth per two years of peak, bandwidth and balance, fitted over each era of ERA_FITS."""
    out = []
    for fit, label, keep in ERA_FITS:
        sub = [r for r in table if keep(r)]
        years = [r["year"] for r in sub]
        if len(set(years)) < 2:
            continue
        peak = growth_per_two_years(years, [r["peak"] for r in sub])
        bw = growth_per_two_years(years, [r["bandwidth"] for r in sub])
        out.append({"fit": fit, "label": label, "machines": len(sub), "first_year": min(years),
                    "last_year": max(years), "peak_growth": peak, "bandwidth_growth": bw,
                    "balance_growth": peak / bw})
    return out


def fig_balance_drift(table: Sequence[Mapping[str, Any]]):
    if len(table) < 2:
        return _empty("balance_drift", "two or more machine profiles")
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2))
    fits = {f["fit"]: f for f in drift_fits(table)}
    styles = {"all": ":", "scalar-vector": "--", "accelerator": "-", "gholami-window": "-."}
    for key, colour, label in (("peak", "#4c72b0", "peak FLOP/s"), ("bandwidth", "#c44e52", "memory B/s")):
        left.scatter([r["year"] for r in table], [r[key] for r in table], color=colour, s=22, label=label, zorder=3)
        for fit, _, keep in ERA_FITS:
            if fit not in fits:
                continue
            sub = [r for r in table if keep(r)]
            ys, yrs = [r[key] for r in sub], [r["year"] for r in sub]
            coef = np.polyfit(yrs, np.log10(ys), 1)
            xs = np.linspace(min(yrs), max(yrs), 20)
            left.plot(xs, 10 ** np.polyval(coef, xs), color=colour, lw=1, ls=styles[fit],
                      label=f"{label}, {fit}: ×{fits[fit][key + '_growth']:.2f}/2 yr")
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
    for r in _spaced(table, lambda r: (r["year"], math.log10(r["balance"])), (4.0, 0.25)):
        right.annotate(r["name"], (r["year"], r["balance"]), fontsize=6, xytext=(3, 3),
                       textcoords="offset points")
    right.set_yscale("log")
    right.set_xlabel("year of introduction")
    right.set_ylabel("machine balance (FLOP per byte of main memory)")
    acc, win = fits.get("accelerator"), fits.get("gholami-window")
    parts = [f"{name}: ×{f['balance_growth']:.2f}" for name, f in (("accelerators", acc), ("1998–2020", win)) if f]
    right.set_title("Balance drift per 2 years — " + ", ".join(parts)
                    + f" (Gholami: ×{GHOLAMI['peak'] / GHOLAMI['bandwidth']:.2f})", fontsize=9)
    right.legend(title="kind", fontsize=7)
    right.grid(True, which="major", alpha=0.3)
    _finish(fig, "Peak at each machine's primary dtype over main-memory bandwidth, from era_data/machines. Growth: "
            "least-squares fit of log10 value against year, per fit: " + "; ".join(
                f"{f['fit']} = {f['label']} ({f['machines']} machines, {f['first_year']}–{f['last_year']})"
                for f in fits.values()) + f". Beside {GHOLAMI_REF} (3.0× and 1.6× per 2 years, and 1.4× for "
            "interconnect). Links: the per-device bandwidth within a node, one direction, of the profiles that "
            "state an [interconnect]" + (f" ({links['machines']} machines, {links['first_year']}–{links['last_year']})"
                                         if links else "") + ".")
    return fig


def _spaced(rows: Sequence[Mapping[str, Any]], at: Callable[[Mapping[str, Any]], tuple[float, float]],
            gap: tuple[float, float]) -> list[Mapping[str, Any]]:
    """The rows whose labels can be drawn without overprinting: greedily, each label kept
    only if no kept label lies within ``gap`` (in the axes' own units, log10 where log)."""
    kept: list[tuple[float, float]] = []
    out = []
    for r in rows:
        x, y = at(r)
        if all(abs(x - kx) >= gap[0] or abs(y - ky) >= gap[1] for kx, ky in kept):
            kept.append((x, y))
            out.append(r)
    return out


# --------------------------------------------------------------------------------------
# 2. Regime flip, 3. stall breakdown, 6. synthetic sweep


def per_example_rows(rows: Iterable[Row], synthetic: bool = False) -> list[Row]:
    return [r for r in _ok(rows) if bool(r.get("synthetic")) == synthetic and r["batch"] == 1
            and r.get("updates") == "per-example" and r.get("phase") == "train"
            and r.get("checkpoint") == "none"]


def no_reuse_intensity(rows: Iterable[Row]) -> dict[str, float]:
    """Per network: FLOPs per byte of main-memory traffic on the machine that moves the most.

    That machine keeps nothing between uses (registers only, or caches too small), so
    its traffic is the workload's own: a machine whose balance exceeds this intensity
    is expected to wait on memory.
    """
    best: dict[str, float] = {}
    for r in rows:
        mem = r.get("bytes_memory")
        if mem and r.get("flops"):
            i = float(r["flops"]) / float(mem)
            best[r["network"]] = min(best.get(r["network"], math.inf), i)
    return best


def _stall_vs_balance(ax, rows: Sequence[Row], intensity: Mapping[str, float], connect: bool) -> None:
    # Lines only where the points are one machine varied (synthetic); real machines differ
    # in more than balance, so they are drawn as points.
    nets = list(dict.fromkeys(r["network"] for r in rows))
    cmap = _plt().get_cmap("tab10")
    for k, net in enumerate(nets):
        sub = sorted((r for r in rows if r["network"] == net), key=lambda r: r["balance"])
        colour = cmap(k % 10)
        ax.plot([r["balance"] for r in sub], [r["stall_fraction"] for r in sub], marker="o", ms=4,
                lw=1 if connect else 0, color=colour, label=net, alpha=0.85)
        if net in intensity:
            ax.axvline(intensity[net], color=colour, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("machine balance (FLOP/s ÷ memory B/s, FLOP/B) at the workload's dtype")
    ax.set_ylabel("stall fraction (cycles waiting on memory ÷ total)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, title="network (dotted: its no-reuse intensity)", title_fontsize=7)


def fig_regime_flip(rows: Sequence[Row]):
    sel = per_example_rows(rows)
    if not sel:
        return _empty("regime_flip", "per-example (batch 1) training cases on real machines")
    if any(r.get("memory_ratio") is not None for r in sel):
        return _memory_ratio_flip(sel)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    intensity = no_reuse_intensity(sel)
    _stall_vs_balance(ax, sel, intensity, connect=False)
    first = [r for r in sel if r["network"] == sel[0]["network"]]
    for r in _spaced(sorted(first, key=lambda r: r["balance"]),
                     lambda r: (math.log10(r["balance"]), r["stall_fraction"]), (0.12, 0.05)):
        ax.annotate(r.get("name") or r["machine"], (r["balance"], r["stall_fraction"]), fontsize=6,
                    xytext=(3, -8), textcoords="offset points", color="#444444")
    ax.set_title("Per-example training: stall fraction against machine balance")
    _finish(fig, _sources("Dotted lines: FLOPs per byte of main-memory traffic on the machine that moves "
                          "the most for that network (no reuse); the flip is expected where balance "
                          "passes it."))
    return fig


def _memory_ratio_flip(sel: Sequence[Row]):
    """The flip on its own axis: memory time ÷ arithmetic time (1 is the flip), and beside
    it the time the step spends on dispatch and start-up, per unit of arithmetic time."""
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5))
    intensity = no_reuse_intensity(sel)
    cmap = plt.get_cmap("tab10")
    drawn = {ax: False, ax2: False}  # a log axis with nothing on it cannot be drawn
    for k, net in enumerate(dict.fromkeys(r["network"] for r in sel)):
        sub = sorted((r for r in sel if r["network"] == net and r.get("memory_ratio")), key=lambda r: r["balance"])
        colour = cmap(k % 10)
        streamed = [r for r in sub if not r.get("weights_on_chip")]
        on_chip = [r for r in sub if r.get("weights_on_chip")]
        ax.scatter([r["balance"] for r in streamed], [r["memory_ratio"] for r in streamed], s=18, color=colour,
                   label=net)
        ax.scatter([r["balance"] for r in on_chip], [r["memory_ratio"] for r in on_chip], s=30, facecolors="none",
                   edgecolors=colour, label=None if streamed else net)
        ov = [(r["balance"], r["overhead_fraction"] / r["compute_fraction"]) for r in sub
              if r.get("compute_fraction") and r.get("overhead_fraction")]
        ax2.scatter([x for x, _ in ov], [y for _, y in ov], s=18, color=colour, marker="s", label=net)
        drawn[ax] = drawn[ax] or bool(sub)
        drawn[ax2] = drawn[ax2] or bool(ov)
        if net in intensity:
            ax.axvline(intensity[net], color=colour, ls=":", lw=1)
        seed = sorted((r["balance"], r["seed_memory_ratio"]) for r in sub if r.get("seed_memory_ratio"))
        if seed:  # the seed's β / I(T): a straight line through (I, 1) for each network
            ax.plot([x for x, _ in seed], [y for _, y in seed], color=colour, ls="--", lw=0.8, alpha=0.7)
    first = sorted((r for r in sel if r["network"] == sel[0]["network"] and r.get("memory_ratio")),
                   key=lambda r: r["balance"])
    for r in _spaced(first, lambda r: (math.log10(r["balance"]), math.log10(r["memory_ratio"])), (0.15, 0.25)):
        ax.annotate(r.get("name") or r["machine"], (r["balance"], r["memory_ratio"]), fontsize=6,
                    xytext=(3, -8), textcoords="offset points", color="#444444")
    ax.axhline(1.0, color="#555555", lw=1)
    for a, label in ((ax, "memory time ÷ arithmetic time"), (ax2, "dispatch and start-up time ÷ arithmetic time")):
        if not drawn[a]:
            a.text(0.5, 0.5, "no case has any", transform=a.transAxes, ha="center", color="#777777")
            a.set_ylabel(label)
            continue
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("machine balance (FLOP/B) at the workload's dtype")
        a.set_ylabel(label)
        a.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, title="network (dotted: no-reuse intensity)", title_fontsize=7)
    ax.set_title("Per-example training: the flip is where the ratio crosses 1")
    ax2.set_title("What the ratio leaves out: launch and vector start-up")
    _finish(fig, _sources("memory_ratio from each case's result; dotted lines: each network's no-reuse "
                          "intensity, the predicted crossing. Hollow: the weights fit in the machine's largest "
                          "on-chip level, so the step need not stream them from memory. Dashed: the seed model's "
                          "β / I (every operand from main memory once, no cache): points below it reuse data "
                          "in cache, points above it miss more than once or wait on latency."))
    return fig


def fig_stall_breakdown(rows: Sequence[Row]):
    sel = per_example_rows(rows)
    nets = list(dict.fromkeys(r["network"] for r in sel))
    network = "nettalk" if "nettalk" in nets else (nets[0] if nets else None)
    sel = sorted((r for r in sel if r["network"] == network), key=lambda r: (r["year"], r["machine"]))
    if not sel:
        return _empty("stall_breakdown", "per-example training cases of one network on several machines")
    levels = stall_levels(sel)
    plt = _plt()
    # One horizontal bar per machine, oldest at the top, so fifty names stay readable.
    fig, ax = plt.subplots(figsize=(9, max(3.5, 0.24 * len(sel) + 1.6)))
    y = np.arange(len(sel))
    left = np.zeros(len(sel))
    parts = [("compute", "compute_fraction", "#55a868")]
    parts += [(f"stall: {lv}", f"stall_{lv}", STALL_COLOURS[k % len(STALL_COLOURS)]) for k, lv in enumerate(levels)]
    parts += [("overhead (launch, vector start-up)", "overhead_fraction", "#4c72b0")]
    for label, col, colour in parts:
        vals = np.array([float(r.get(col) or 0.0) for r in sel])
        if not vals.any():
            continue
        ax.barh(y, vals, left=left, color=colour, label=label, height=0.75)
        left += vals
    ax.set_yticks(y, [_label(r) for r in sel], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the step's cycles")
    ax.set_xlim(0, 1.0)
    ax.set_title(f"{network}, batch 1, per-example updates: where the cycles go")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.04), ncol=3)
    _finish(fig, _sources())
    return fig


def stall_levels(rows: Iterable[Row]) -> list[str]:
    """Level names with a stall column, in order of first appearance (nearest level first)."""
    out: dict[str, None] = {}
    for r in rows:
        for k in r:
            if k.startswith("stall_") and k != "stall_fraction" and r[k] is not None:
                out.setdefault(k[len("stall_"):], None)
    return list(out)


def fig_synthetic_balance(rows: Sequence[Row]):
    sel = per_example_rows(rows, synthetic=True)
    if not sel:
        return _empty("synthetic_balance", "cases on synthetic machines (BASE@bw=X) at batch 1")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    _stall_vs_balance(ax, sel, no_reuse_intensity(sel), connect=True)
    base = sel[0]["machine"].split("@")[0]
    ax.set_title(f"One compute engine ({base}), its memory bandwidth swept")
    _finish(fig, _sources(f"Machines: the {base} profile with its main-memory bandwidth replaced; "
                          "compute rates and caches unchanged."))
    return fig


# --------------------------------------------------------------------------------------
# 4. Batch window


def _window_candidates(rows: Iterable[Row]) -> list[Row]:
    return [r for r in _ok(rows) if not r.get("synthetic") and r.get("kind") in ("gpu", "tpu", "wafer")
            and r.get("updates") == "minibatch" and r.get("phase") == "train" and r.get("checkpoint") == "none"
            and (r.get("devices") or 1) == 1]


def window_rows(rows: Iterable[Row]) -> list[Row]:
    """The batch window's main series: the unfused network run at the most machine ×
    batch points (one line a machine)."""
    ok = [r for r in _window_candidates(rows) if r.get("fusion", "none") == "none"]
    counts: dict[str, set] = {}
    for r in ok:
        counts.setdefault(r["network"], set()).add((r["machine"], r["batch"]))
    if not counts:
        return []
    net = max(counts, key=lambda n: (len(counts[n]), n))
    return [r for r in ok if r["network"] == net]


def wide_window_rows(rows: Iterable[Row]) -> list[Row]:
    """The batch window's second series: the other networks at several batches (the
    sweep's one wider than d_min, unfused and fused), each with the seed's ceiling
    d / (d + d_min) on its fraction of peak."""
    main = {r["network"] for r in window_rows(rows)}
    out = [r for r in _window_candidates(rows) if r["network"] not in main]
    dims: dict[str, float] = {}
    for r in out:
        if r["network"] not in dims:
            from ..networks import load_network

            dims[r["network"]] = load_network(r["network"]).d_model
    return [{**r, "d_model": dims[r["network"]]} for r in out]


def weight_bytes(network: str, seq_len: int | None, dtype: str | None = None) -> dict[str, Any]:
    """What the step memwall builds moves per parameter: ``b_w``, bytes of weights and
    gradients per micro-batch (forward, recompute, backward kernels), ``b_update``, bytes
    of weights, gradients and optimizer state per optimizer step, and ``flops_per_token``
    over the parameter count (about 6), so the turn is T_min = β · b_w / (F/P)
    (:func:`memwall.seed.seed_model`'s quantities)."""
    from ..networks import load_network
    from ..seed import seed_model
    from ..workloads.config import TrainingConfig
    from ..workloads.step import build_step

    net = load_network(network)
    step = build_step(net, TrainingConfig(batch=1, dtype=dtype or net.dtype, seq_len=seq_len))
    seed = seed_model(step, 1.0, 1.0)  # the per-parameter figures do not depend on the machine
    return {"network": network, "seq_len": seq_len, "parameters": step.network.parameters, "b_w": seed["b_w"],
            "b_update": seed["b_update"], "flops_per_token": seed["flops_per_token_per_parameter"]}


# Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (arXiv:2001.08361):
# eq. 1.1, the loss a model of N non-embedding parameters converges to, L(N) = (N_c/N)^α_N
# with N_c = 8.8e13 and α_N = 0.076 (nats, WebText2); eq. 1.4, the critical batch
# (McCandlish et al. 2018's, fitted to language models) at loss L, B_crit = B*/L^(1/α_B)
# with B* = 2e8 tokens and α_B = 0.21.
KAPLAN = {"n_c": 8.8e13, "alpha_n": 0.076, "b_star": 2e8, "alpha_b": 0.21}


def critical_batch(network: str) -> dict[str, float] | None:
    """Kaplan et al.'s critical batch (tokens) at the loss their fit gives the network's
    non-embedding parameter count: the batch beyond which more of it stops buying
    optimisation progress (McCandlish et al. 2018). None for networks without tokens."""
    from ..networks import load_network

    net = load_network(network)
    if not net.is_sequence:
        return None
    embedding = (net.vocab + net.max_positions + net.token_types) * net.d_model
    n = net.parameters - embedding - (0 if net.tied_embeddings else net.vocab * net.d_model)
    loss = (KAPLAN["n_c"] / n) ** KAPLAN["alpha_n"]
    return {"non_embedding": n, "loss": loss, "b_crit": KAPLAN["b_star"] / loss ** (1 / KAPLAN["alpha_b"])}


def window_model(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per machine of the batch window: the turn T_min = β · b_w / (F/P) from the step's own
    bytes per parameter (see :func:`weight_bytes`); the seed's second floor, per optimizer
    step, T_step = β · (b_update + b_comm) / (F/P), with b_comm the ring all-reduce of
    16-bit gradients over BYTES_PER_TOKEN_DP replicas, 2 (N-1)/N · 2 B; the critical batch
    as the ceiling (:func:`critical_batch`); and between them the time-optimal batch the
    seed takes, their geometric mean."""
    if not rows:
        return []
    first = rows[0]
    wb = weight_bytes(first["network"], first.get("seq_len"), first.get("dtype"))
    crit = critical_batch(first["network"])
    comm = 2 * (BYTES_PER_TOKEN_DP - 1) / BYTES_PER_TOKEN_DP * 2
    out = []
    for m in dict.fromkeys(r["machine"] for r in rows):
        r = next(x for x in rows if x["machine"] == m)
        t_step = r["balance"] * (wb["b_update"] + comm) / wb["flops_per_token"]
        row = {"machine": m, "name": r["name"], "balance": r["balance"], **wb, "b_comm": comm,
               "t_min": r["balance"] * wb["b_w"] / wb["flops_per_token"], "t_step": t_step}
        if crit:
            row.update(b_crit=crit["b_crit"], loss=crit["loss"], t_opt=math.sqrt(t_step * crit["b_crit"]))
        out.append(row)
    return out


def fig_batch_window(rows: Sequence[Row], model: Sequence[Mapping[str, Any]] = (),
                     wide: Sequence[Row] = ()):
    sel = window_rows(rows)
    if len({r["batch"] for r in sel}) < 2:
        return _empty("batch_window", "mini-batch training at several batch sizes on modern machines")
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(8, 5))
    machines = list(dict.fromkeys(r["machine"] for r in sorted(sel, key=lambda r: (r["year"], r["machine"]))))
    for k, m in enumerate(machines):
        sub = sorted((r for r in sel if r["machine"] == m), key=lambda r: r["tokens"])
        colour = cmap(k % 10)
        turn = next((t["t_min"] for t in model if t["machine"] == m), 2 * sub[0]["balance"])
        ax.plot([r["tokens"] for r in sub], [r["fraction_of_peak"] for r in sub], marker="o", ms=4,
                color=colour, label=f"{_label(sub[0])}: turn at ≈{turn:.0f} tokens")
        seed = [(r["tokens"], r["seed_fraction_of_peak"]) for r in sub if r.get("seed_fraction_of_peak")]
        ax.plot([x for x, _ in seed], [y for _, y in seed], color=colour, ls="--", lw=0.8, alpha=0.7)
        ax.axvline(turn, color=colour, ls=":", lw=1)
        opt = next((t for t in model if t["machine"] == m and t.get("t_opt")), None)
        if opt:
            ax.axvline(opt["t_step"], color=colour, ls="-.", lw=0.8)
            ax.plot([opt["t_opt"]], [0.02], marker="^", ms=8, color=colour, clip_on=False)
    for (net, fusion), style in zip(dict.fromkeys((r["network"], r.get("fusion", "none")) for r in wide),
                                    ("-", "--", "-.", ":"), strict=False):
        sub = sorted((r for r in wide if (r["network"], r.get("fusion", "none")) == (net, fusion)),
                     key=lambda r: r["tokens"])
        ceiling = sub[0]["d_model"] / (sub[0]["d_model"] + sub[0]["d_min"]) if sub[0].get("d_min") else None
        ax.plot([r["tokens"] for r in sub], [r["fraction_of_peak"] for r in sub], color="k", ls=style, marker="s",
                ms=3, label=f"{net} (d = {sub[0]['d_model']:.0f}) on {sub[0]['name']}, fusion {fusion}"
                + (f": ceiling d/(d+d_min) = {ceiling:.2f}" if ceiling else ""))
        if ceiling:
            ax.axhline(ceiling, color="k", ls=style, lw=0.6, alpha=0.5)
    crit = next((t for t in model if t.get("b_crit")), None)
    if crit:
        ax.axvline(crit["b_crit"], color="k", lw=1.2)
        ax.annotate(f"critical batch ≈{crit['b_crit']:.3g} tokens", (crit["b_crit"], 0.95), fontsize=7,
                    xytext=(-4, 0), textcoords="offset points", ha="right")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("batch (tokens per weight visit: sequences × sequence length)")
    ax.set_ylabel("fraction of peak FLOP/s")
    ax.set_title(f"{sel[0]['network']}: the batch where the step turns compute-bound")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    crit_note = ""
    if crit:
        crit_note = (f" Dash-dot: the seed's floor per optimizer step, T_step = β · (b_update + b_comm) / (F/P), "
                     f"with the gradient all-reduce of {BYTES_PER_TOKEN_DP} replicas (b_comm = "
                     f"{crit['b_comm']:.1f} B/param). Black: the critical batch at the loss Kaplan et al.'s fit "
                     f"gives this network ({crit['loss']:.2f} nats; B_crit = B*/L^(1/α_B), their eq. 1.4); "
                     "triangles: the time-optimal batch between them, √(T_step · B_crit), as the seed takes it. "
                     "These cases run one micro-batch per optimizer step, so tokens per micro-batch are "
                     "tokens per optimizer step.")
    seed_note = crit_note + (" Dashed: the seed model's fraction of peak (compute or memory, whichever is longer, each "
                 "operand moved once); the simulation falls below it by the dispatch, waves and cache misses "
                 "it leaves out.")
    if model:
        wb = model[0]
        note = (f"Dotted: T_min = β · b_w / (F/P), with the step's own b_w = {wb['b_w']:.1f} B of weights and "
                f"gradients per parameter per micro-batch and F/P = {wb['flops_per_token']:.2f} FLOP per "
                f"parameter per token ({wb['b_update']:.1f} B/param more per optimizer step). These cases run "
                "one micro-batch per optimizer step, unfused (memwall inspect --accumulate K --fusion full "
                "shows what each changes).")
    else:
        note = "Dotted: 2 × balance tokens (the step's own bytes per parameter were not available)."
    _finish(fig, _sources(note + seed_note))
    return fig


# --------------------------------------------------------------------------------------
# 8. Decode


def fig_decode(rows: Sequence[Row]):
    """Tokens/s (all sequences) against batch, one panel a context, one line a machine;
    a star where the step is compute-bound, a cross where batch x context no longer fits."""
    sel = [r for r in _ok(rows) if r.get("phase") == "decode" and r.get("tokens_per_second")]
    contexts = sorted({int(r["context"]) for r in sel})
    if not sel or len({r["batch"] for r in sel}) < 2:
        return _empty("decode", "decode cases at several batch sizes")
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(contexts), figsize=(5 * len(contexts), 4.5), squeeze=False, sharey=True)
    machines = list(dict.fromkeys(r["machine"] for r in sorted(sel, key=lambda r: (r["year"], r["machine"]))))
    for ax, ctx in zip(axes[0], contexts, strict=True):
        for k, m in enumerate(machines):
            sub = sorted((r for r in sel if r["machine"] == m and int(r["context"]) == ctx), key=lambda r: r["batch"])
            if not sub:
                continue
            colour = cmap(k % 10)
            ax.plot([r["batch"] for r in sub], [r["tokens_per_second"] for r in sub], color=colour, marker="o", ms=3,
                    label=_label(sub[0]))
            for r in sub:
                if r["bound"] == "compute":
                    ax.plot(r["batch"], r["tokens_per_second"], "*", color=colour, ms=11)
                if r.get("max_batch_that_fits") is not None and r["batch"] > int(r["max_batch_that_fits"]):
                    ax.plot(r["batch"], r["tokens_per_second"], "x", color="k", ms=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences decoding together)")
        ax.set_title(f"{sel[0]['network']}, context {ctx}")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("tokens per second (all sequences)")
    axes[0][0].legend(fontsize=7)
    _finish(fig, _sources("Star: compute-bound step. Cross: batch x context does not fit in the machine's memory "
                          "beside the weights (simulated as if it did)."))
    return fig


# --------------------------------------------------------------------------------------
# 5. Capacity ledger


# A chain of 48 square layers of width 1024: its activations equal its parameters at
# batch = width, so the crossover is where the figure says it should be.
LEDGER_NETWORK = "affine-48x1024"
LEDGER_WIDTH = 1024


def ledger_table(batches: Sequence[int] = tuple(2 ** k for k in range(15))) -> list[dict[str, Any]]:
    """The capacity ledger (bytes per tensor class) of LEDGER_NETWORK's training step per
    batch, with no checkpointing and with √L checkpointing."""
    from ..networks import load_network
    from ..workloads.config import TrainingConfig
    from ..workloads.step import build_step

    net = load_network(LEDGER_NETWORK)
    out = []
    for ck in ("none", "sqrt"):
        for b in batches:
            step = build_step(net, TrainingConfig(batch=b, dtype=net.dtype, checkpoint=ck))
            led = step.ledger.as_dict()
            out.append({"network": LEDGER_NETWORK, "batch": b, "checkpoint": ck,
                        **{k: float(v) for k, v in led.items()}})
    return out


def fig_capacity_ledger(table: Sequence[Mapping[str, Any]]):
    if not table:
        return _empty("capacity_ledger", "a network whose training step builds")
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


# --------------------------------------------------------------------------------------
# 13. Bytes per token


BYTES_PER_TOKEN_NETWORK = "gpt2-small"
# Short sequences, so the batch spans the crossing (at 1024 tokens a sequence the
# materialised attention's activations already outweigh the weights at batch 1).
BYTES_PER_TOKEN_SEQ = 128
# Data-parallel replicas whose gradient all-reduce the figure adds per optimizer step
# (ring: 2 (N-1)/N of the gradient bytes leave and enter each device).
BYTES_PER_TOKEN_DP = 8


def bytes_per_token_table(network: str = BYTES_PER_TOKEN_NETWORK,
                          batches: Sequence[int] = tuple(2 ** k for k in range(11)),
                          dp: int = BYTES_PER_TOKEN_DP, seq_len: int = BYTES_PER_TOKEN_SEQ) -> list[dict[str, Any]]:
    """Bytes per token of one training step (Adam, the network's dtype, one micro-batch per
    optimizer step) by what they are, against batch: weights and gradients (every
    micro-batch), optimizer state (once per optimizer step), activations (every operand
    that is not a parameter), and the gradient all-reduce of ``dp`` replicas, as the
    step's kernels name their operands (:func:`memwall.seed.bytes_by_class`)."""
    from ..networks import load_network
    from ..seed import bytes_by_class
    from ..workloads.config import TrainingConfig
    from ..workloads.graph import PARAMETER_CLASSES
    from ..workloads.step import build_step

    net = load_network(network)
    out = []
    for b in batches:
        step = build_step(net, TrainingConfig(batch=b, dtype=net.dtype, optimizer="adam", seq_len=seq_len))
        by = bytes_by_class(step)
        tokens = step.tokens or step.examples
        gradient = step.ledger.as_dict().get("gradients", 0)
        out.append({
            "network": network, "batch": b, "seq_len": seq_len, "tokens": tokens, "dp": dp,
            "weights": sum(v for c, v in by["micro"].items() if c in PARAMETER_CLASSES) / tokens,
            "optimizer": sum(by["update"].values()) / tokens,
            "activations": sum(v for c, v in by["micro"].items() if c not in PARAMETER_CLASSES) / tokens,
            "communication": 2 * (dp - 1) / dp * gradient / tokens,
        })
    return out


BYTES_PER_TOKEN_PARTS = ("weights", "optimizer", "communication", "activations")


def fig_bytes_per_token(table: Sequence[Mapping[str, Any]]):
    if not table:
        return _empty("bytes_per_token", "a network whose training step builds")
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


# --------------------------------------------------------------------------------------
# 14. What each trick buys (opt-in: it simulates its own ladders of cases)


def _tricks_table() -> list[dict[str, Any]]:
    from ..study.tricks import tricks_table

    return tricks_table()


def _tricks_inputs() -> dict[str, Any]:
    """What the ladders are computed from: reused while the model, profiles and presets are unchanged."""
    import json

    from ..study.identity import machine_info, network_info
    from ..study.tricks import TRICK_CASES, TRICKS
    from .store import dumps

    return json.loads(dumps({"model": MODEL_VERSION, "tricks": TRICKS, "cases": TRICK_CASES,
                             "machines": {m: machine_info(m).fingerprint for m, _, _, _ in TRICK_CASES},
                             "networks": {n: network_info(n).fingerprint for _, n, _, _ in TRICK_CASES}}))


def fig_tricks(table: Sequence[Mapping[str, Any]]):
    """Per case (a network on a machine of its era), bars left to right: seconds per token of
    one device and bytes one device holds, with none of the tricks and then each added."""
    if not table:
        return _empty("tricks", "the ladders of memwall.study.tricks")
    plt = _plt()
    cases = list(dict.fromkeys((r["machine"], r["network"]) for r in table))
    fig, axes = plt.subplots(2, len(cases), figsize=(5.2 * len(cases), 7.5), squeeze=False)
    for col, (machine, network) in enumerate(cases):
        rows = sorted((r for r in table if (r["machine"], r["network"]) == (machine, network)), key=lambda r: r["index"])
        names = [r["trick"] if r["index"] == 0 else "+ " + r["trick"] for r in rows]
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
    _finish(fig, _sources("Each bar adds one trick to all those left of it (memwall.study.tricks.TRICKS): batch 8, "
                          "8 micro-batches per optimizer step, 16-bit arithmetic with fp32 main gradients, full "
                          "fusion, fused attention, checkpointing every layer, ZeRO-3 over 8 data-parallel devices, "
                          "then 4 pipeline stages (x 2 replicas, ZeRO-1). Time per token of one device: a "
                          "multi-device step's seconds x its devices / its tokens. Grey: the device's share does "
                          "not fit its memory (dashed); the 1980s had only batching."))
    return fig


# --------------------------------------------------------------------------------------
# 11. Last-level capacity: one pass of the capacity sweep per network and machine

LLC_CASES = (("sun-3-260", "nettalk"), ("v100-sxm2", "lecun-1989"), ("h100-sxm", "affine-48x1024"))


def llc_capacity_table(cases: Sequence[tuple[str, str]] = LLC_CASES, batch: int = 1,
                       factor: int = 4, warm: bool = True) -> list[dict[str, Any]]:
    """Main-memory bytes (read + written) of one training step against the capacity of the
    machine's last cache level, at its line size and set count from 1 way to ``factor``
    times its ways, each curve from one pass of :class:`memwall.engine.CapacitySweep`.

    With ``warm`` the step is replayed once to warm the caches and counted on a second
    pass (a training run repeats its steps); no sampling, no final flush; every kernel's
    counts times its repeats.
    """
    from ..engine import CapacitySweep
    from ..profiles import load_machine
    from ..simulate import Case, build_case_step
    from ..workloads.lowering import lower

    out = []
    for machine_id, network in cases:
        machine = load_machine(machine_id)
        levels = list(machine.cache_levels)
        llc = levels[-1]
        step = build_case_step(Case(machine=machine_id, network=network, batch=batch))
        sweep = CapacitySweep(levels, llc.name, llc.ways * factor)
        lowered = [lower(kernel, machine.schedule, line_bytes=levels[0].line) for kernel in step.kernels]
        for low in lowered if warm else ():
            for nest in low.nests:
                sweep.replay_nest(nest)
        totals: dict[int, float] = {}
        before = sweep.sweep()
        for kernel, low in zip(step.kernels, lowered, strict=True):
            for nest in low.nests:
                sweep.replay_nest(nest)
            after = sweep.sweep()
            for cap, c in after.items():
                moved = (c.bytes_in + c.bytes_out) - (before[cap].bytes_in + before[cap].bytes_out)
                totals[cap] = totals.get(cap, 0.0) + moved * kernel.repeat
            before = after
        for cap, nbytes in totals.items():
            out.append({"machine": machine_id, "network": network, "batch": batch, "capacity": cap,
                        "memory_bytes": nbytes, "actual": cap == llc.size, "level": llc.name})
    return out


def fig_llc_capacity(table: Sequence[Mapping[str, Any]]):
    if not table:
        return _empty("llc_capacity", "a machine with a sweepable (LRU, write-back) last cache level")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for (machine, network), colour in zip(dict.fromkeys((r["machine"], r["network"]) for r in table),
                                          STALL_COLOURS * 4, strict=False):
        rows = sorted((r for r in table if (r["machine"], r["network"]) == (machine, network)),
                      key=lambda r: r["capacity"])
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
    _finish(fig, _sources("Each curve is one pass of the capacity sweep (LRU stack distances, exact for "
                          "every associativity); circles mark each machine's actual capacity. The step's "
                          "second pass, after one to warm the caches; no sampling."))
    return fig


# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# 8. Roofline explorer


ROOFLINE_MACHINES = ("h100-sxm", "a100-sxm", "v100-sxm2")


def roofline_data(out: str | os.PathLike[str], rows: Sequence[Row]) -> dict[str, list[dict[str, Any]]]:
    """Every kernel of every stored case of this sweep on a real machine, as a point
    (intensity, achieved FLOP/s), and each of those machines' roofs.

    The points come from the case records under ``out/cases`` (the sweep keeps each
    kernel's FLOPs, seconds and bytes per level), the roofs from ``out/machines.json``,
    which the sweep writes beside its cases. Intensity is FLOPs per byte of main-memory
    traffic; a kernel that moves none is placed at its intensity against the level that
    served it (named in ``intensity_level``).
    """
    from .store import Store
    from .sweep import read_machine_roofs

    wanted = {(r["machine"], r["network"], r["batch"], r.get("checkpoint"), r.get("updates"), r.get("phase"),
               r.get("seq_len")) for r in _ok(rows) if not r.get("synthetic")}
    store = Store(out)
    points: list[dict[str, Any]] = []
    for key in store.keys():
        rec = store.get(key)
        if not rec or rec.get("status") != "ok" or rec.get("model") != MODEL_VERSION or not rec.get("result"):
            continue
        row = rec["row"]
        ident = (row["machine"], row["network"], row["batch"], row.get("checkpoint"), row.get("updates"),
                 row.get("phase"), row.get("seq_len"))
        if ident not in wanted:
            continue
        for k in rec["result"].get("kernels", ()):
            if not k["flops"] or not k["seconds"]:
                continue
            level, moved = "memory", k["bytes"].get("memory", 0)
            if not moved:
                inner = [(n, b) for n, b in k["bytes"].items() if b]
                level, moved = inner[-1] if inner else ("none", 0)
            points.append({"machine": row["machine"], "name": row["name"], "network": row["network"],
                           "batch": row["batch"], "checkpoint": row.get("checkpoint"), "kernel": k["name"],
                           "phase": k["phase"], "op": k["op"], "flops": k["flops"], "seconds": k["seconds"],
                           "intensity": k["flops"] / moved if moved else None, "intensity_level": level,
                           "achieved_flops": k["achieved_flops"], "bound": k["bound"]})
    machines = {p["machine"] for p in points}
    roofs = [r for r in read_machine_roofs(out) if r["machine"] in machines]
    return {"points": sorted(points, key=lambda p: (p["machine"], p["network"], p["batch"])), "roofs": roofs}


def roof_lines(roof: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(level, bytes/s) for main memory and each level with a bandwidth, outermost first."""
    out = [("memory", float(roof["memory_bandwidth"]))]
    out += [(lv["name"], float(lv["bandwidth"])) for lv in reversed(roof["levels"]) if lv.get("bandwidth")]
    return out


def roof_peak(roof: Mapping[str, Any], dtype: str | None = None) -> float:
    peaks = roof["peak_flops"]
    return float(peaks.get(dtype or roof["primary_dtype"]) or peaks[roof["primary_dtype"]])


def fig_roofline(data: Mapping[str, Any]):
    points = [p for p in data.get("points", ()) if p.get("intensity")]
    if not points or not data.get("roofs"):
        return _empty("roofline", "a sweep's stored cases on real machines, and its machines.json")
    machines = [p["machine"] for p in points]
    machine = next((m for m in ROOFLINE_MACHINES if m in machines), max(set(machines), key=machines.count))
    pts = [p for p in points if p["machine"] == machine]
    roof = next(r for r in data["roofs"] if r["machine"] == machine)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    cmap = plt.get_cmap("tab10")
    for k, net in enumerate(dict.fromkeys(p["network"] for p in pts)):
        sub = [p for p in pts if p["network"] == net]
        label: str | None = net
        for hollow in (False, True):
            part = [p for p in sub if (p["intensity_level"] != "memory") == hollow]
            if part:
                ax.scatter([p["intensity"] for p in part], [p["achieved_flops"] for p in part], s=16,
                           color="none" if hollow else cmap(k % 10), edgecolors=cmap(k % 10), label=label)
                label = None
    xs = np.logspace(math.log10(min(p["intensity"] for p in pts)) - 1,
                     math.log10(max(p["intensity"] for p in pts)) + 1, 100)
    peak = roof_peak(roof)
    ax.axhline(peak, color="#222222", lw=1.2, label=f"peak {peak:.3g} FLOP/s ({roof['primary_dtype']})")
    ceiling = (roof.get("achievable_flops") or {}).get(roof["primary_dtype"])
    if ceiling and ceiling < peak:
        ax.axhline(ceiling, color="#222222", lw=1, ls=":",
                   label=f"products' measured ceiling {ceiling:.3g} FLOP/s ([compute.achievable])")
    for j, (level, bw) in enumerate(roof_lines(roof)):
        ax.plot(xs, np.minimum(bw * xs, peak), color="#222222" if j == 0 else "#888888",
                ls="-" if j == 0 else "--", lw=1, label=f"{level} ceiling: {bw:.3g} B/s × intensity")
    _log_log(ax, "arithmetic intensity (FLOP per byte of main-memory traffic)", "achieved FLOP/s of the kernel",
             f"{roof['name']}: every kernel of each stored step under its roofs", "lower right")
    _finish(fig, _sources("Hollow: kernels that move no main-memory bytes, placed at their intensity against "
                          "the level that served them. Ceilings: each level's bandwidth from the profile."))
    return fig


# --------------------------------------------------------------------------------------
# 9. Activation high-water


HIGHWATER_BATCH = LEDGER_WIDTH
HIGHWATER_CLASSES = ("weights", "gradients", "optimizer", "activations", "workspace", "input")


def highwater_table(network: str = LEDGER_NETWORK, batch: int = HIGHWATER_BATCH,
                    checkpoints: Sequence[str] = ("none", "sqrt")) -> list[dict[str, Any]]:
    """Live bytes by tensor class after each kernel of the training step, per checkpointing."""
    from ..networks import load_network
    from ..workloads.config import TrainingConfig
    from ..workloads.liveness import live_bytes
    from ..workloads.step import declare

    net = load_network(network)
    out = []
    for ck in checkpoints:
        graph = declare(net, TrainingConfig(batch=batch, dtype=net.dtype, checkpoint=ck))
        for i, r in enumerate(live_bytes(graph)):
            out.append({"network": network, "batch": batch, "checkpoint": ck, "index": i, **r})
    return out


def fig_activation_highwater(table: Sequence[Mapping[str, Any]]):
    if not table:
        return _empty("activation_highwater", "a network whose training step builds")
    plt = _plt()
    cks = list(dict.fromkeys(r["checkpoint"] for r in table))
    fig, axes = plt.subplots(1, len(cks), figsize=(6 * len(cks), 4.6), sharey=True, squeeze=False)
    colours = {"weights": "#4c72b0", "gradients": "#8172b3", "optimizer": "#937860", "activations": "#c44e52",
               "workspace": "#dd8452", "input": "#8c8c8c"}
    for ax, ck in zip(axes[0], cks, strict=True):
        sub = [r for r in table if r["checkpoint"] == ck]
        xs = [r["index"] for r in sub]
        classes = [c for c in HIGHWATER_CLASSES if any(r.get(c) for r in sub)]
        ax.stackplot(xs, [[r[c] / 2 ** 20 for r in sub] for c in classes], labels=classes,
                     colors=[colours[c] for c in classes], alpha=0.85)
        peak = max(sub, key=lambda r: r["activations"])
        ax.set_title(f"checkpoint {ck}: activations peak at {peak['activations'] / 2 ** 20:.0f} MiB "
                     f"({peak['kernel']})", fontsize=9)
        ax.set_xlabel("kernel of the step, in order (forward, then backward and update)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("live bytes (MiB)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    _finish(fig, f"{table[0]['network']} at batch {table[0]['batch']}: live bytes per tensor class while each "
            f"kernel runs, from the lifetimes memwall {MODEL_VERSION} derives (workloads/liveness.py); no "
            "simulation needed.")
    return fig


# --------------------------------------------------------------------------------------
# 12. Gholami's figure, simulated (opt-in: it replays its own cases, see OPT_IN)

# Gholami et al. profiled BERT-Base, BERT-Large and GPT-2 on an Intel Xeon Gold 6242 at
# batch 1 with 8-bit parameters and activations, over sequence lengths from 128 up.
GHOLAMI_MACHINE = "xeon-gold-6242"
GHOLAMI_COMPARE = "h100-sxm"  # one modern machine, beyond their single profile
GHOLAMI_NETWORKS = (("bert-base", "encoder"), ("bert-large", "encoder"), ("gpt2-small", "decoder"))
GHOLAMI_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
GHOLAMI_BATCH = 16  # batched decode: sequences generated together, which their profile did not run
GHOLAMI_DTYPE = "int8"
GHOLAMI_METRICS = ("flops", "bytes", "seconds")
# Tested bound (tests/test_gholami.py) of the summed-decode approximation against the exact
# sum over every context, per metric, as a fraction of the exact sum.
GHOLAMI_SUM_BOUND = 0.02


def gholami_contexts(lengths: Iterable[int]) -> list[int]:
    """The decode contexts sampled to sum the steps of generating each length L: 0, and
    L/2 - 1, 3L/4 - 1 and L - 1 of every L (so every sum has its own end points)."""
    out = {0}
    for n in lengths:
        out |= {c for c in (n // 2 - 1, 3 * n // 4 - 1, n - 1) if c >= 0}
    return sorted(out)


def summed_decode(per_context: Mapping[int, Mapping[str, float]], length: int) -> dict[str, float]:
    """FLOPs, main-memory bytes and seconds of generating ``length`` tokens one by one: the
    sum of the decode steps at contexts 0 ... length - 1. A context not in ``per_context``
    (one step's results, by context) is interpolated linearly between the sampled ones
    below ``length`` (exact where a step's cost is linear in its context, as its attention
    FLOPs and cache bytes are); 0 and ``length - 1`` must be sampled."""
    sampled = sorted(c for c in per_context if c < length)
    if not sampled or sampled[0] != 0 or sampled[-1] != length - 1:
        raise ValueError(f"summing {length} decode steps needs contexts 0 and {length - 1} sampled, got {sampled}")
    every = np.arange(length)
    return {m: float(np.interp(every, sampled, [per_context[c][m] for c in sampled]).sum())
            for m in GHOLAMI_METRICS}


def _step_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    return {"flops": float(result["flops"]), "bytes": float(result["bytes"]["memory"]),
            "seconds": float(result["seconds"])}


def _long_presets(networks: Iterable[str], longest: int, folder: Path) -> dict[str, str]:
    """Each preset as a file whose learned position table holds ``longest`` rows where its
    own is shorter (BERT has 512, GPT-2 1024); the others as they are, by id."""
    from ..data import data_files
    from ..networks import load_network

    files = {p.stem: p for p in data_files("networks")}
    out = {}
    for net in networks:
        if 0 < load_network(net).max_positions < longest:
            text = files[net].read_text(encoding="utf-8")
            path = folder / f"{net}.toml"
            path.write_text(text.replace("[transformer]\n", f"[transformer]\nmax_positions = {longest}\n", 1),
                            encoding="utf-8")
            out[net] = str(path)
        else:
            out[net] = net
    return out


def gholami_table(lengths: Sequence[int] = GHOLAMI_LENGTHS,
                  machines: Sequence[str] = (GHOLAMI_MACHINE, GHOLAMI_COMPARE),
                  networks: Sequence[tuple[str, str]] = GHOLAMI_NETWORKS, decode_batch: int = GHOLAMI_BATCH,
                  dtype: str = GHOLAMI_DTYPE,
                  run: Callable[[Any], Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per machine, network, batch and sequence length L: FLOPs, main-memory bytes,
    seconds, arithmetic intensity (FLOPs per main-memory byte) and latency over BERT-Base's
    (the first network's) at the shortest length on the same machine.

    An encoder's row is one forward pass over L tokens at batch 1; a decoder's is L tokens
    generated one by one, the sum of its decode steps at contexts 0 ... L - 1, from the
    steps at :func:`gholami_contexts` (:func:`summed_decode`), at batch 1 and, per
    sequence, at ``decode_batch`` sequences together (0: none). Presets are given the
    learned positions the longest length needs (:func:`_long_presets`)."""
    import tempfile

    from ..simulate import Case, run_case

    run = run or run_case
    lengths = sorted(lengths)
    contexts = gholami_contexts(lengths)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        files = _long_presets([n for n, _ in networks], lengths[-1], Path(tmp))
        for machine in machines:
            for net, role in networks:
                common = {"machine": machine, "network": net, "role": role, "dtype": dtype}
                if role == "encoder":
                    for n in lengths:
                        r = run(Case(machine=machine, network=files[net], phase="forward", seq_len=n, dtype=dtype))
                        rows.append({**common, "batch": 1, "length": n, **_step_metrics(r), "sampled_contexts": None})
                    continue
                for batch in (1, decode_batch) if decode_batch > 1 else (1,):
                    steps = {c: _step_metrics(run(Case(machine=machine, network=files[net], phase="decode", context=c,
                                                       batch=batch, dtype=dtype)))
                             for c in contexts}
                    for n in lengths:
                        rows.append({**common, "batch": batch, "length": n, **summed_decode(steps, n),
                                     "sampled_contexts": sum(c < n for c in contexts)})
            mine = [r for r in rows if r["machine"] == machine]
            base = next(r for r in mine if r["network"] == networks[0][0] and r["batch"] == 1)["seconds"]
            for r in mine:
                r["intensity"] = r["flops"] / r["bytes"] if r["bytes"] else None
                r["seconds_per_sequence"] = r["seconds"] / r["batch"]
                r["latency_norm"] = r["seconds_per_sequence"] / base
    return rows


def gholami_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per machine and length: each encoder's intensity over the batch-1 decoder's, and the
    decoder's latency over each encoder's; per machine and network, latency growth from the
    shortest length to the longest."""
    out: list[dict[str, Any]] = []
    for machine in dict.fromkeys(r["machine"] for r in rows):
        sub = [r for r in rows if r["machine"] == machine and r["batch"] == 1]
        dec = {r["length"]: r for r in sub if r["role"] == "decoder"}
        for r in sub:
            if r["role"] == "encoder" and r["length"] in dec:
                d = dec[r["length"]]
                out.append({"machine": machine, "what": "encoder/decoder", "network": r["network"],
                            "decoder": d["network"], "length": r["length"],
                            "intensity_ratio": r["intensity"] / d["intensity"],
                            "latency_ratio": d["seconds"] / r["seconds"]})
        for net in dict.fromkeys(r["network"] for r in sub):
            line = sorted((r for r in sub if r["network"] == net), key=lambda r: r["length"])
            out.append({"machine": machine, "what": "latency growth", "network": net,
                        "length": f"{line[0]['length']}-{line[-1]['length']}",
                        "latency_growth": line[-1]["seconds"] / line[0]["seconds"]})
    return out


GHOLAMI_COLOURS = {"bert-base": "#4c72b0", "bert-large": "#55a868", "gpt2-small": "#c44e52"}


def _gholami_lines(ax, rows: Sequence[Mapping[str, Any]], key: str, *, styles: Mapping[tuple[str, int], str]) -> None:
    for (machine, batch), ls in styles.items():
        for net in dict.fromkeys(r["network"] for r in rows):
            line = sorted((r for r in rows if r["machine"] == machine and r["batch"] == batch and r["network"] == net
                           and r.get(key)), key=lambda r: r["length"])
            if not line:
                continue
            tag = "" if len(styles) == 1 else f", {machine}" + (f", batch {batch}" if batch > 1 else "")
            ax.plot([r["length"] for r in line], [r[key] for r in line], ls=ls, marker="o", ms=3,
                    color=GHOLAMI_COLOURS.get(net, "#8172b3"), label=f"{net}{tag}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _gholami_data(options: Mapping[str, Any]) -> dict[str, Any]:
    rows = gholami_table(**options)
    return {"rows": rows, "summary": gholami_summary(rows)}


def _gholami_inputs(options: Mapping[str, Any]) -> dict[str, Any]:
    """What the figure's data is computed from: reused while none of it changes."""
    from ..study.identity import machine_info, network_info

    machines = options.get("machines", (GHOLAMI_MACHINE, GHOLAMI_COMPARE))
    networks = options.get("networks", GHOLAMI_NETWORKS)
    import json

    from .store import dumps

    inputs = {"model": MODEL_VERSION, "options": {k: v for k, v in options.items() if k != "run"},
              "machines": {m: machine_info(m).fingerprint for m in machines},
              "networks": {n: network_info(n).fingerprint for n, _ in networks}}
    return json.loads(dumps(inputs))  # as stored: tuples read back as lists


def fig_gholami(rows: Sequence[Mapping[str, Any]]):
    """Gholami's four panels on their CPU (FLOPs, memory bytes, intensity, latency against
    sequence length) and, beside them, intensity and latency on a modern machine and with
    batched decode."""
    if not rows:
        return _empty("gholami", "BERT-Base, BERT-Large and GPT-2 simulated at several sequence lengths")
    plt = _plt()
    home = rows[0]["machine"]
    others = [m for m in dict.fromkeys(r["machine"] for r in rows) if m != home]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    solo = {(home, 1): "-"}
    panels = (("flops", "(a) FLOPs", "FLOPs of the pass (forward; GPT-2: every generated token)"),
              ("bytes", "(b) Memory operations", "main-memory bytes (read + written)"),
              ("intensity", "(c) Arithmetic intensity", "FLOPs per main-memory byte"),
              ("latency_norm", "(d) Latency", "latency ÷ BERT-Base's at the shortest length"))
    grid = axes.ravel()  # reading order: (a) (b) (c) / (d) (e) (f)
    for ax, (key, title, ylabel) in zip(grid[:4], panels, strict=True):
        _gholami_lines(ax, rows, key, styles=solo)
        ax.set_title(f"{title}, {home}, batch 1, {rows[0]['dtype']}", fontsize=9)
        ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=7)
    beyond = {**solo, **{(m, 1): "--" for m in others}}
    batches = sorted({r["batch"] for r in rows if r["batch"] > 1})
    beyond.update({(m, b): ":" for m in (home, *others) for b in batches})
    for ax, key, title, ylabel in (
            (grid[4], "intensity", "(e) Arithmetic intensity", panels[2][2]),
            (grid[5], "latency_norm", "(f) Latency", "latency per sequence ÷ BERT-Base's at the shortest length")):
        _gholami_lines(ax, rows, key, styles=beyond)
        ax.set_title(f"{title}: other machines, batched decode", fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
    low, high = grid[4].get_ylim()
    grid[4].set_ylim(low, high * 30)  # headroom: the legend goes above the lines
    grid[4].legend(fontsize=5.5, ncol=2, loc="upper right")
    summary = gholami_summary(rows)
    ratios = [s for s in summary if s["machine"] == home and s["what"] == "encoder/decoder"]
    span = (f"encoder/decoder intensity {min(s['intensity_ratio'] for s in ratios):.0f}–"
            f"{max(s['intensity_ratio'] for s in ratios):.0f}x on {home}") if ratios else ""
    fig.suptitle(f"12. Gholami's case study, simulated: encoders against a decoder ({span})", fontsize=11)
    n_ctx = max((r["sampled_contexts"] or 0) for r in rows)
    _finish(fig, _sources(
        f"Beside {GHOLAMI_REF}: at batch 1 on this CPU with 8-bit weights and activations, GPT-2's arithmetic intensity "
        "is orders of magnitude below BERT's and its latency grows faster with the sequence, at similar FLOPs. "
        "Here: encoders = one forward pass over the sequence; GPT-2 = the sequence generated token by token, the "
        f"sum of its decode steps at contexts 0 ... L-1, from at most {n_ctx} sampled contexts interpolated linearly "
        f"(within {GHOLAMI_SUM_BOUND:.0%} of the exact sum where tested, tests/test_gholami.py). Learned position "
        "tables extended past the presets' 512 (BERT) and 1024 (GPT-2). Right column, what one profile could not "
        "show: the same on another machine (dashed) and decode batched (dotted; per sequence)."))
    fig.subplots_adjust(top=0.92)
    return fig


# --------------------------------------------------------------------------------------
# Writing, redrawn only when a figure's data changed


def save(fig, folder: str | os.PathLike[str], name: str) -> list[Path]:
    """Write ``name.png`` and ``name.svg`` and close the figure."""
    plt = _plt()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    fig.savefig(paths[0], dpi=150, metadata={"Software": None})
    fig.savefig(paths[1], metadata={"Date": None})
    plt.close(fig)
    return paths


def _network_inputs(network: str, **params: Any) -> dict[str, Any]:
    from ..study.identity import network_info

    return {"model": MODEL_VERSION, "network": network_info(network).fingerprint, **params}


def _llc_inputs(cases: Sequence[tuple[str, str]]) -> dict[str, Any]:
    from ..study.identity import machine_info, network_info

    return {"model": MODEL_VERSION, "cases": [[machine_info(m).fingerprint, network_info(n).fingerprint]
                                              for m, n in cases]}


def figure_data(folder: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """What figure ``name`` was last drawn from (``figures/name.json``): ``data`` (table
    name -> records), ``inputs`` and ``digest``; None if it was never drawn."""
    import json

    path = Path(folder) / "figures" / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def write_figures(out: str | os.PathLike[str], rows: Sequence[Row], *,
                  machines: Sequence[Mapping[str, Any]] | None = None,
                  ledger: Sequence[Mapping[str, Any]] | None = None,
                  only: Iterable[str] | None = None,
                  measurements: str | os.PathLike[str] | None = None,
                  gholami: Mapping[str, Any] | None = None, quick: bool = False) -> dict[str, list[Path]]:
    """Draw every figure (or those in ``only``) into ``out/figures``; returns name -> [PNG, SVG].

    Beside each PNG and SVG go ``name.csv`` (the figure's data, one table) and
    ``name.json`` (all its tables, what they were computed from, and their digest). A
    figure whose data has the digest it was last drawn with is not drawn again; data that
    needs no sweep (the ledger, the high-water) is reused while the model and the network
    are unchanged. ``machines`` (see :func:`machine_table`) and ``ledger`` (see
    :func:`ledger_table`) default to the shipped profiles and the affine-48x1024 network's
    steps; the validation figure predicts the shipped measurements, or those in
    ``measurements`` (file or folder). Figures in OPT_IN are drawn only when named in
    ``only``; ``gholami`` holds keyword arguments of :func:`gholami_table`. ``quick`` (a
    quick sweep's) validates the one-device measurements only.
    """
    import hashlib

    from .store import atomic_write, dumps, write_csv

    names = list(only) if only else list(NAMES)
    folder = Path(out) / "figures"
    tables: dict[str, tuple[Callable[[], Any] | None, Callable[[], dict[str, Any]], Callable[[Any], Any]]] = {
        # name: (inputs that make the data reusable or None, the data, its drawing)
        "balance_drift": (None, lambda: _balance_drift_data(machines if machines is not None else machine_table()),
                          lambda d: fig_balance_drift(d["machines"])),
        "regime_flip": (None, lambda: {"rows": per_example_rows(rows)}, lambda d: fig_regime_flip(d["rows"])),
        "stall_breakdown": (None, lambda: {"rows": per_example_rows(rows)},
                            lambda d: fig_stall_breakdown(d["rows"])),
        "batch_window": (None, lambda: {"rows": window_rows(rows), "model": window_model(window_rows(rows)),
                                        "wide": wide_window_rows(rows)},
                         lambda d: fig_batch_window(d["rows"], d.get("model", ()), d.get("wide", ()))),
        "capacity_ledger": ((lambda: _network_inputs(LEDGER_NETWORK, kind="ledger")) if ledger is None else None,
                            lambda: {"ledger": list(ledger if ledger is not None else ledger_table())},
                            lambda d: fig_capacity_ledger(d["ledger"])),
        "synthetic_balance": (None, lambda: {"rows": per_example_rows(rows, synthetic=True)},
                              lambda d: fig_synthetic_balance(d["rows"])),
        "roofline": (None, lambda: roofline_data(out, rows), fig_roofline),
        "activation_highwater": (lambda: _network_inputs(LEDGER_NETWORK, batch=HIGHWATER_BATCH),
                                 lambda: {"live": highwater_table()}, lambda d: fig_activation_highwater(d["live"])),
        "decode": (None, lambda: {"rows": [r for r in rows if r.get("phase") == "decode"]},
                   lambda d: fig_decode(d["rows"])),
        # Replays three steps (seconds); kept while the model, the networks and the
        # machines' profiles are unchanged.
        "llc_capacity": (lambda: _llc_inputs(LLC_CASES), lambda: {"capacity": llc_capacity_table()},
                         lambda d: fig_llc_capacity(d["capacity"])),
        "bytes_per_token": (lambda: _network_inputs(BYTES_PER_TOKEN_NETWORK, dp=BYTES_PER_TOKEN_DP,
                                                    seq_len=BYTES_PER_TOKEN_SEQ),
                            lambda: {"bytes": bytes_per_token_table()}, lambda d: fig_bytes_per_token(d["bytes"])),
        "tricks": (lambda: _tricks_inputs(), lambda: {"ladder": _tricks_table()}, lambda d: fig_tricks(d["ladder"])),
        "gholami": (lambda: _gholami_inputs(gholami or {}), lambda: _gholami_data(gholami or {}),
                    lambda d: fig_gholami(d["rows"])),
    }
    written: dict[str, list[Path]] = {}
    for name in names:
        if name not in tables:
            continue
        inputs_of, data_of, draw = tables[name]
        stored = figure_data(out, name)
        inputs = inputs_of() if inputs_of else None
        if inputs is not None and stored and stored.get("inputs") == inputs:
            data = stored["data"]
        else:
            data = data_of()
        digest = hashlib.sha256(dumps({"model": MODEL_VERSION, "data": data}).encode()).hexdigest()
        paths = [folder / f"{name}.png", folder / f"{name}.svg"]
        if stored and stored.get("digest") == digest and all(p.is_file() for p in paths):
            written[name] = paths
            continue
        written[name] = save(draw(data), folder, name)
        first = next(iter(data))
        write_csv(folder / f"{name}.csv", data[first])
        for extra in list(data)[1:]:
            write_csv(folder / f"{name}-{extra}.csv", data[extra])
        atomic_write(folder / f"{name}.json", dumps({"inputs": inputs, "digest": digest, "data": data}))
    if "validation" in names:
        # Predictions of the shipped measurements, independent of the sweep's own cases.
        from .validate import write_validation

        written["validation"] = write_validation(out, measurements, one_device=quick)
    return {n: written[n] for n in (*NAMES, *OPT_IN) if n in written}
