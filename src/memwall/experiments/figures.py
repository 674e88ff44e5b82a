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
GHOLAMI = {"peak": 3.0, "bandwidth": 1.6}
GHOLAMI_REF = 'Gholami et al., "AI and Memory Wall", IEEE Micro 2024'

NAMES = ("balance_drift", "regime_flip", "stall_breakdown", "batch_window", "capacity_ledger",
         "synthetic_balance", "validation", "decode")
TITLES = {
    "balance_drift": "1. Balance drift: machine balance against year",
    "regime_flip": "2. The regime flip: stall fraction against machine balance",
    "stall_breakdown": "3. Stall breakdown per machine",
    "batch_window": "4. The batch window: fraction of peak against batch",
    "capacity_ledger": "5. The capacity ledger: saved activations against parameters",
    "synthetic_balance": "6. Synthetic balance sweep: one engine, memory bandwidth over four decades",
    "validation": "7. Validation: memwall's predictions against published measurements",
    "decode": "8. Decode: tokens per second against batch, at a short and a long context",
}
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
        out.append({"id": m.id, "name": m.name, "year": m.year, "kind": m.kind,
                    "dtype": m.primary_dtype, "peak": peak, "bandwidth": bw, "balance": peak / bw})
    return sorted(out, key=lambda r: (r["year"], r["id"]))


def growth_per_two_years(years: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares exponential growth factor of ``values`` per two years."""
    if len(set(years)) < 2:
        return math.nan
    slope = np.polyfit(np.asarray(years, float), np.log10(np.asarray(values, float)), 1)[0]
    return float(10 ** (2 * slope))


def fig_balance_drift(table: Sequence[Mapping[str, Any]]):
    if len(table) < 2:
        return _empty("balance_drift", "two or more machine profiles")
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    years = [r["year"] for r in table]
    g_peak = growth_per_two_years(years, [r["peak"] for r in table])
    g_bw = growth_per_two_years(years, [r["bandwidth"] for r in table])
    xs = np.linspace(min(years), max(years), 50)
    for key, colour, label, g in (("peak", "#4c72b0", "peak FLOP/s", g_peak),
                                  ("bandwidth", "#c44e52", "memory bandwidth (B/s)", g_bw)):
        ys = [r[key] for r in table]
        left.scatter(years, ys, color=colour, s=22, label=label, zorder=3)
        fit = np.polyfit(years, np.log10(ys), 1)
        left.plot(xs, 10 ** np.polyval(fit, xs), color=colour, lw=1, ls="--",
                  label=f"fit: ×{g:.2f} per 2 years (Gholami: ×{GHOLAMI[key]:.1f})")
    left.set_yscale("log")
    left.set_xlabel("year of introduction")
    left.set_ylabel("peak FLOP/s (FLOP/s)  ·  memory bandwidth (B/s)")
    left.set_title("Peak arithmetic and memory bandwidth")
    left.legend(fontsize=7, loc="upper left")
    for kind in sorted({r["kind"] for r in table}):
        sub = [r for r in table if r["kind"] == kind]
        right.scatter([r["year"] for r in sub], [r["balance"] for r in sub],
                      marker=KIND_MARKERS.get(kind, "o"), s=40, label=kind, zorder=3)
    for r in table:
        right.annotate(r["name"], (r["year"], r["balance"]), fontsize=6, xytext=(3, 3),
                       textcoords="offset points")
    right.set_yscale("log")
    right.set_xlabel("year of introduction")
    right.set_ylabel("machine balance (FLOP per byte of main memory)")
    right.set_title(f"Balance drifts ×{g_peak / g_bw:.2f} per 2 years "
                    f"(Gholami: ×{GHOLAMI['peak'] / GHOLAMI['bandwidth']:.2f})")
    right.legend(title="kind", fontsize=7)
    right.grid(True, which="major", alpha=0.3)
    _finish(fig, "Peak at each machine's primary dtype over main-memory bandwidth, from era_data/machines "
            f"(provenance per figure in each profile). Growth rates: least-squares fit of log10 value against "
            f"year over {len(table)} machines, {min(years)}–{max(years)}, beside {GHOLAMI_REF} (3.0× and 1.6× per "
            "2 years, server hardware of the last two decades).")
    return fig


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
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    intensity = no_reuse_intensity(sel)
    _stall_vs_balance(ax, sel, intensity, connect=False)
    for r in sel:
        if r["network"] == sel[0]["network"]:
            ax.annotate(r.get("name") or r["machine"], (r["balance"], r["stall_fraction"]), fontsize=6,
                        xytext=(3, -8), textcoords="offset points", color="#444444")
    ax.set_title("Per-example training: stall fraction against machine balance")
    _finish(fig, _sources("Dotted lines: FLOPs per byte of main-memory traffic on the machine that moves "
                          "the most for that network (no reuse); the flip is expected where balance "
                          "passes it."))
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


def window_rows(rows: Iterable[Row]) -> list[Row]:
    ok = [r for r in _ok(rows) if not r.get("synthetic") and r.get("kind") in ("gpu", "tpu", "wafer")
          and r.get("updates") == "minibatch" and r.get("phase") == "train" and r.get("checkpoint") == "none"]
    counts: dict[str, set] = {}
    for r in ok:
        counts.setdefault(r["network"], set()).add(r["batch"])
    if not counts:
        return []
    net = max(counts, key=lambda n: (len(counts[n]), n))
    return [r for r in ok if r["network"] == net]


def fig_batch_window(rows: Sequence[Row]):
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
        ax.plot([r["tokens"] for r in sub], [r["fraction_of_peak"] for r in sub], marker="o", ms=4,
                color=colour, label=f"{_label(sub[0])}: turn at ≈{2 * sub[0]['balance']:.0f} tokens")
        ax.axvline(2 * sub[0]["balance"], color=colour, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("batch (tokens per weight visit: sequences × sequence length)")
    ax.set_ylabel("fraction of peak FLOP/s")
    ax.set_title(f"{sel[0]['network']}: the batch where the step turns compute-bound")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    _finish(fig, _sources("Dotted: 2 × balance tokens, where a step with bf16 weights and fp32 gradients "
                          "is expected to turn compute-bound (each weight byte pair serves 2 FLOPs per token)."))
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


def write_figures(out: str | os.PathLike[str], rows: Sequence[Row], *,
                  machines: Sequence[Mapping[str, Any]] | None = None,
                  ledger: Sequence[Mapping[str, Any]] | None = None,
                  only: Iterable[str] | None = None,
                  measurements: str | os.PathLike[str] | None = None) -> dict[str, list[Path]]:
    """Draw every figure (or those in ``only``) into ``out/figures``; returns name -> paths.

    ``machines`` (see :func:`machine_table`) and ``ledger`` (see :func:`ledger_table`)
    default to the shipped profiles and the affine-48x1024 network's steps; the validation
    figure predicts the shipped measurements, or those in ``measurements`` (file or folder).
    """
    names = list(only) if only else list(NAMES)
    folder = Path(out) / "figures"
    makers: dict[str, Callable[[], Any]] = {
        "balance_drift": lambda: fig_balance_drift(machines if machines is not None else machine_table()),
        "regime_flip": lambda: fig_regime_flip(rows),
        "stall_breakdown": lambda: fig_stall_breakdown(rows),
        "batch_window": lambda: fig_batch_window(rows),
        "capacity_ledger": lambda: fig_capacity_ledger(ledger if ledger is not None else ledger_table()),
        "synthetic_balance": lambda: fig_synthetic_balance(rows),
        "decode": lambda: fig_decode(rows),
    }
    written = {name: save(makers[name](), folder, name) for name in names if name in makers}
    if "validation" in names:
        # Predictions of the shipped measurements, independent of the sweep's own cases.
        from .validate import write_validation

        written["validation"] = write_validation(out, measurements)
    return written
