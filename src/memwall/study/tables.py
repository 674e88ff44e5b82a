"""The tables the figures draw, computed from a sweep's rows, the machine profiles and the
training steps (some by replaying steps of their own).

Owns: which rows each figure selects from a sweep (:func:`per_example_rows`,
:func:`window_rows`, ...), the machine table and its drift fits, the step tables (capacity
ledger, activation high-water, bytes per token, last-level capacity), the batch window's
model (:func:`window_model`), the roofline's points and roofs, and the tricks' ladders.
Every function returns plain rows (lists of dicts); nothing here draws. The model
(profiles, steps, the engine) is imported inside the functions that run it, so the
figures may import this module's selectors and constants without loading the model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..model_version import MODEL_VERSION

Row = Mapping[str, Any]

# Gholami et al., "AI and Memory Wall", IEEE Micro 44(3), 2024: over the last two decades
# server peak FLOP/s grew 3.0x and DRAM bandwidth 1.6x every two years.
GHOLAMI = {"peak": 3.0, "bandwidth": 1.6, "interconnect": 1.4}
GHOLAMI_REF = 'Gholami et al., "AI and Memory Wall", IEEE Micro 2024'


def ok_rows(rows: Iterable[Row]) -> list[Row]:
    """The rows of cases that ran and were timed."""
    return [r for r in rows if r.get("status") == "ok" and r.get("seconds") is not None]


# --------------------------------------------------------------------------------------
# 1. Balance drift


def machine_table(roofs: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """One dict per shipped machine, and per machine of ``roofs`` (a sweep's ``machines.json``)
    given as a file of its own: id, name, year, kind, peak (FLOP/s), bandwidth (B/s), balance."""
    from ..profiles import all_machines

    out = []
    for m in all_machines():
        peak = m.peak_flops[m.primary_dtype]
        bw = m.memory.bandwidth
        link = m.interconnect.node.bandwidth if m.interconnect is not None else None
        out.append({"id": m.id, "name": m.name, "year": m.year, "kind": m.kind,
                    "dtype": m.primary_dtype, "peak": peak, "bandwidth": bw, "balance": peak / bw,
                    "link": link})
    shipped = {r["id"] for r in out}
    for roof in roofs:
        if roof.get("synthetic") or roof["machine"] in shipped:
            continue
        shipped.add(roof["machine"])
        dtype = roof["primary_dtype"]
        peak, bw = roof["peak_flops"][dtype], roof["memory_bandwidth"]
        out.append({"id": roof["machine"], "name": roof["name"], "year": roof["year"], "kind": roof["kind"],
                    "dtype": dtype, "peak": peak, "bandwidth": bw, "balance": peak / bw, "link": None})
    return sorted(out, key=lambda r: (r["year"], r["id"]))


def balance_drift_data(table: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
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


# --------------------------------------------------------------------------------------
# 2. Regime flip, 3. stall breakdown, 6. synthetic sweep: the per-example rows


def per_example_rows(rows: Iterable[Row], synthetic: bool = False) -> list[Row]:
    return [r for r in ok_rows(rows) if bool(r.get("synthetic")) == synthetic and r["batch"] == 1
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


# Figure 2's finding: one network per-example on the machines of its own era.
FLIP_NETWORK = "nettalk"
FLIP_ERA_END = 1989


def flip_finding(rows: Iterable[Row], network: str = FLIP_NETWORK, until: int = FLIP_ERA_END) -> list[dict[str, Any]]:
    """Per machine of ``until`` or earlier, ``network``'s per-example step: its
    memory_ratio, bound and balance, oldest first; for a vector machine also what its
    memory ports deliver against its pipes (``flops_per_element``: FLOP a clock at the
    step's dtype over the elements the ports carry a clock, each in a whole word where
    the machine has no narrower float), the figures behind a flip at batch 1."""
    from ..profiles import load_machine
    from ..vocabulary import DTYPE_BYTES
    from .identity import parse_machine_spec

    out = []
    for r in sorted(per_example_rows(rows), key=lambda r: (r["year"], r["machine"])):
        if r["network"] != network or r["year"] > until or r.get("memory_ratio") is None:
            continue
        row = {k: r.get(k) for k in ("machine", "name", "year", "kind", "dtype", "balance", "memory_ratio",
                                     "memory_ratio_micro", "bound", "bound_class")}
        if r.get("kind") == "vector":
            m = load_machine(parse_machine_spec(r["machine"])[0])
            params = m.timing.params
            word = float(params.get("word_bytes", 8))
            element = word if not params.get("subword_float", True) else DTYPE_BYTES.get(r["dtype"], word)
            ports = float(params["memory_ports"])
            flops_per_clock = float(r["peak_flops"]) / m.clock_hz
            row.update(memory_ports=ports, word_bytes=word, flops_per_clock=flops_per_clock,
                       flops_per_element=flops_per_clock / (ports * word / element))
        out.append(row)
    return out


def stall_levels(rows: Iterable[Row]) -> list[str]:
    """Level names with a stall column, in order of first appearance (nearest level first)."""
    out: dict[str, None] = {}
    for r in rows:
        for k in r:
            if k.startswith("stall_") and k != "stall_fraction" and r[k] is not None:
                out.setdefault(k[len("stall_"):], None)
    return list(out)


# --------------------------------------------------------------------------------------
# 4. Batch window


def _window_candidates(rows: Iterable[Row]) -> list[Row]:
    return [r for r in ok_rows(rows) if not r.get("synthetic") and r.get("kind") in ("gpu", "tpu", "wafer")
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

            net = load_network(r["network"])
            # Only transformers have a width d to set against d_min (a chain of affine
            # layers at a few batches, the checkpointing study's, is no window series).
            dims[r["network"]] = float(net.d_model) if net.is_sequence and net.d_model else 0.0
    return [{**r, "d_model": dims[r["network"]]} for r in out if dims[r["network"]] > 0]


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


# --------------------------------------------------------------------------------------
# 14. What each trick buys (opt-in: it simulates its own ladders of cases)


def tricks_ladder() -> list[dict[str, Any]]:
    """Figure 14's ladders (:func:`memwall.study.tricks.tricks_table`)."""
    from ..execute.pool import run_cases
    from .tricks import tricks_table

    return tricks_table(run_many=run_cases)  # the ladders' cases on the sweep's worker processes


def tricks_inputs() -> dict[str, Any]:
    """What the ladders are computed from: reused while the model, profiles and presets are unchanged."""
    import json

    from ..canonical import dumps
    from .identity import machine_info, network_info
    from .tricks import TRICK_CASES, TRICKS

    return json.loads(dumps({"model": MODEL_VERSION, "tricks": TRICKS, "cases": TRICK_CASES,
                             "machines": {m: machine_info(m).fingerprint for m, _, _, _ in TRICK_CASES},
                             "networks": {n: network_info(n).fingerprint for _, n, _, _ in TRICK_CASES}}))


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
    from ..simulation import Case, build_case_step
    from ..simulation.plan import lower_on

    out = []
    for machine_id, network in cases:
        machine = load_machine(machine_id)
        levels = list(machine.cache_levels)
        llc = levels[-1]
        step = build_case_step(Case(machine=machine_id, network=network, batch=batch))
        sweep = CapacitySweep(levels, llc.name, llc.ways * factor)
        lowered = [lower_on(machine, kernel) for kernel in step.kernels]
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
    from ..execute.store import Store
    from ..execute.sweep import read_machine_roofs

    wanted = {(r["machine"], r["network"], r["batch"], r.get("checkpoint"), r.get("updates"), r.get("phase"),
               r.get("seq_len")) for r in ok_rows(rows) if not r.get("synthetic")}
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

