"""One case's results row and its key.

Owns: the results row declared once (:data:`ROW`: each column's type, unit, label and
doc), from which ``results.csv``'s leading columns (:data:`COLUMNS`), the store's row
check (:func:`row_problem`) and the report's table follow; the key a stored result
is found by (:func:`case_key`: a hash of the machine profile, the network, the case and
the model version), turning one :func:`memwall.simulation.run_case` result into one flat
results row (:func:`make_row`), and the order rows are written in (:func:`row_order`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..model_version import MODEL_VERSION
from ..study.identity import machine_info, network_info
from ..vocabulary import BURST, HELD
from .columns import TYPES, Column
from .intervals import row_interval
from .result import SERVING_COLUMNS, SERVING_EVERY_ROW

if TYPE_CHECKING:
    from ..options import Case

ROW: tuple[Column, ...] = (
    Column("machine", "text", "", "machine", "profile id (BASE@bw=B/s for a synthetic bandwidth)", required=True),
    Column("name", "text", "", "name", "the machine's name"),
    Column("year", "int", "", "year", "the machine's year", required=True),
    Column("kind", "text", "", "kind", "scalar, superscalar, vector, gpu, tpu, wafer", required=True),
    Column("synthetic", "flag", "", "synthetic", "a machine of the synthetic bandwidth sweep"),
    Column("bandwidth", "number", "B/s", "bandwidth", "main memory bandwidth"),
    Column("balance", "number", "FLOP/B", "balance", "peak FLOP/s of the case's dtype per main-memory byte/s"),
    Column("machine_balance", "number", "FLOP/B", "machine balance", "the primary dtype's balance"),
    Column("network", "text", "", "network", "network preset (null for a GEMM)", required=True),
    Column("batch", "int", "", "batch", "examples (sequences) per step", required=True),
    Column("tokens", "int", "", "tokens", "tokens per step (examples for non-sequence networks)"),
    Column("checkpoint", "text", "", "checkpoint", "activation checkpointing", required=True),
    Column("updates", "text", "", "updates", "per-example or minibatch", required=True),
    Column("phase", "text", "", "phase", "train, forward, decode, prefill, generate", required=True),
    Column("optimizer", "text", "", "optimizer", "the optimizer"),
    Column("dtype", "text", "", "dtype", "the arithmetic type"),
    Column("seq_len", "int", "tokens", "seq", "tokens per sequence (1 for decode, the prompt for prefill, the output "
           "for generate)"),
    Column("status", "text", "", "status", "ok or error", required=True),
    Column("error", "text", "", "error", "why the case failed"),
    Column("seconds", "number", "s", "time", "one step (one optimizer step with accumulation)"),
    # the prediction's interval (memwall.simulation.intervals; null without a calibration)
    Column("interval_low", "number", "s", "time low", "the interval's low end: seconds measurements of this kind "
           "of step reach at the fast tail (docs/intervals.md)"),
    Column("interval_high", "number", "s", "time high", "the interval's high end: seconds at the slow tail"),
    Column("interval_coverage", "number", "", "coverage", "the share of measurements the interval is calibrated "
           "to hold"),
    Column("stall_fraction", "number", "", "stall", "stall cycles / total cycles"),
    Column("fraction_of_peak", "number", "", "of peak", "achieved FLOP/s / datasheet peak"),
    Column("cups", "number", "CUPS", "CUPS", "connection updates per second (training only)"),
    Column("flops", "number", "FLOP", "FLOPs", "FLOPs per step"),
    Column("achieved_flops", "number", "FLOP/s", "FLOP/s", "FLOPs / seconds"),
    Column("peak_flops", "number", "FLOP/s", "peak", "the datasheet peak of the case's dtype"),
    Column("bound", "text", "", "bound", "the machine figure whose elasticity is largest (its --set path)"),
    Column("cycles_total", "number", "cycles", "cycles", "the step's cycles"),
    Column("compute_fraction", "number", "", "compute", "compute cycles / total"),
    Column("overhead_fraction", "number", "", "overhead", "overhead cycles / total"),
    Column("dispatch", "text", "", "dispatch", "eager, graph or compiled"),
    Column("bound_class", "text", "", "bound class", "what binds: compute, memory, dispatch, framework, startup, interconnect, "
           "power, or mixed where that contradicts memory_ratio"),
    Column("power_scale", "number", "", "power scale", "the share of their burst rates the arithmetic ran at: below 1 "
           "where a held run (--power; a training step by default) would draw more than the rated power at them "
           "(docs/timing.md)"),
    Column("memory_ratio", "number", "", "mem/arith", "memory time / arithmetic time (1 is the flip)"),
    Column("dispatch_fraction", "number", "", "dispatch share", "dispatch time / step time"),
    Column("framework", "text", "", "framework", "the framework or runtime the step ran with (hand-written: the "
           "kernels alone)"),
    Column("timing", "text", "", "timing", "device (the device's stream) or host (a host timer around the step)"),
    Column("power", "text", "", "power", "burst (the boost clock's product ceilings) or held (at the power limit: "
           "[compute.sustained] and the rating; --power, default held for training)"),
    Column("grad_reduce", "text", "", "grad reduce", "training: when the data-parallel gradients are reduced, as "
           "asked (null: the framework's own)"),
    Column("framework_fraction", "number", "", "framework share", "the framework's own exposed time (host work the "
           "device waits for, and the step's synchronisation) / step time"),
    Column("accumulate", "int", "", "accumulate", "micro-batches per optimizer step"),
    Column("fusion", "text", "", "fusion", "kernel fusion"),
    Column("attention", "text", "", "attention", "attention kernels asked for (null: the network's own)"),
    Column("update_fusion", "text", "", "update", "training: the weight update fused into the gradient's kernel "
           "or separate (the default resolved); null for inference"),
    Column("mfu", "number", "", "MFU", "model FLOPs utilisation"),
    Column("hfu", "number", "", "HFU", "hardware FLOPs utilisation"),
    Column("weights_on_chip", "flag", "", "weights on chip", "the weights fit in the largest on-chip level"),
    Column("seed_seconds", "number", "s", "seed time", "the seed model's estimate of the step"),
    Column("seed_memory_ratio", "number", "", "seed mem/arith", "the seed model's memory ratio"),
    Column("memory_ratio_micro", "number", "", "micro mem/arith", "the simulation's memory ratio on the seed's "
           "quantity: the micro-batch's kernels, bytes at the dtype's width"),
    Column("seed_fraction_of_peak", "number", "", "seed of peak", "the seed model's fraction of peak"),
    Column("a", "number", "B", "a", "the seed's activation traffic a, B per d per token per layer"),
    Column("d_min", "number", "", "d_min", "the seed's pole d_min = a.beta/72"),
    # Energy (null where the profile states no [energy]; docs/energy.md)
    Column("joules", "number", "J", "energy", "joules of the step, every device"),
    Column("watts_average", "number", "W", "power", "average power per device (joules / seconds / devices)"),
    Column("data_movement_share", "number", "", "movement share", "the share of the joules spent moving data "
           "(every level, main memory and the links)"),
    Column("tokens_per_joule", "number", "tokens/J", "tokens/J", "tokens of the step (every device's) per joule"),
    Column("cups_per_joule", "number", "CUP/J", "CUP/J", "training: connection updates per joule"),
    # Multi-device rows only
    Column("dp", "int", "", "dp", "data-parallel replicas", leading=False),
    Column("tp", "int", "", "tp", "tensor-parallel devices", leading=False),
    Column("pp", "int", "", "pp", "pipeline stages", leading=False),
    Column("ep", "int", "", "ep", "expert-parallel group", leading=False),
    Column("zero", "int", "", "zero", "ZeRO stage", leading=False),
    Column("cp", "int", "", "cp", "context-parallel devices", leading=False),
    Column("cp_kind", "text", "", "cp kind", "context parallelism: ring or ulysses", leading=False),
    Column("sequence_parallel", "flag", "", "seq. parallel", "Megatron sequence parallelism", leading=False),
    Column("interleave", "int", "", "interleave", "virtual pipeline stages a device", leading=False),
    Column("devices", "int", "", "devices", "dp x tp x cp x pp", leading=False),
    Column("interconnect_fraction", "number", "", "interconnect", "exposed link time / step", leading=False),
    Column("bubble_fraction", "number", "", "bubble", "pipeline bubble / step", leading=False),
    Column("interconnect_bytes", "number", "B", "sent", "bytes a device sends a step", leading=False),
    *SERVING_COLUMNS,  # serving rows only (memwall.simulation.result)
    Column("kv_cache_bytes", "number", "B", "KV cache", "the KV cache's bytes", leading=False),
)
BY_COLUMN: dict[str, Column] = {c.name: c for c in ROW}
# a multi-device row's case options (memwall.options' DEVICES options)
PARALLEL_KEYS = ("dp", "tp", "pp", "ep", "zero", "cp", "cp_kind", "sequence_parallel", "interleave")
# Per memory level: stall_<level> (stall cycles / total) and bytes_<level> (bytes moved).
LEVEL_COLUMNS = {"stall_": Column("stall_", "number", "", "stall", "stall cycles at the level / total"),
                 "bytes_": Column("bytes_", "number", "B", "bytes", "bytes moved at the level"),
                 "joules_": Column("joules_", "number", "J", "joules", "joules of one component (arithmetic.<dtype>, "
                                   "a level, memory, interconnect, static, host)")}
# The leading columns of results.csv, in this order; the others follow as rows have them.
COLUMNS = tuple(c.name for c in ROW if c.leading)


def column(name: str) -> Column | None:
    """The declaration of a row's column (a level's stall or bytes column included)."""
    if name in BY_COLUMN:
        return BY_COLUMN[name]
    return next((c for prefix, c in LEVEL_COLUMNS.items() if name.startswith(prefix)), None)


def row_problem(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, reason) for the first field of a row a sweep could not have written: a
    required column missing or of another type, or any column neither null nor its type
    (numbers finite)."""
    for c in ROW:
        if c.required:
            value = row.get(c.name)
            allowed = TYPES[c.type] + ((type(None),) if c.name == "network" else ())
            if c.name not in row or isinstance(value, bool) != (c.type == "flag") or not isinstance(value, allowed):
                return c.name, "missing" if c.name not in row else f"{type(value).__name__} {value!r}"
    if row["status"] not in ("ok", "error"):
        return "status", f"{row['status']!r}, neither 'ok' nor 'error'"
    for name, value in row.items():
        c = column(name)
        if value is None or (c is not None and c.required):
            continue
        kind = c.type if c is not None else "number"
        ok = isinstance(value, TYPES[kind]) and (kind == "flag") == isinstance(value, bool)
        if ok and kind == "number":
            ok = math.isfinite(value)
        if not ok:
            return name, f"{type(value).__name__} {value!r}"
    return None


def case_key(case: Case) -> str:
    """What a stored result depends on: the profile, the network, the case and the model."""
    m = machine_info(case.machine)
    net = network_info(case.network).fingerprint if case.network else None
    # as_dict leaves out every option at its default, so a new option keeps every stored key
    payload = {"model": MODEL_VERSION, "case": case.as_dict(), "machine": m.fingerprint, "network": net}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def make_row(case: Case, result: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    """One results row: who ran what, then the timing (stall fractions per level of total cycles)."""
    m = machine_info(case.machine)
    net = network_info(case.network) if case.network else None
    seq = case.seq_len or (net.seq_len if net else None)
    if case.phase == "decode":
        seq = 1
    elif case.phase == "prefill":
        seq = case.context
    elif case.phase == "generate":  # a request's tokens are its output (tokens_per_second counts them)
        seq = case.output
    row: dict[str, Any] = {
        "machine": m.id, "name": m.name, "year": m.year, "kind": m.kind, "synthetic": m.synthetic,
        "bandwidth": m.bandwidth, "balance": m.balance(), "machine_balance": m.balance(),
        "network": case.network, "batch": case.batch, "tokens": case.batch * seq if seq else case.batch,
        "checkpoint": case.checkpoint, "updates": case.updates, "phase": case.phase,
        "optimizer": case.optimizer, "dtype": case.dtype, "seq_len": seq,
        "accumulate": case.accumulate, "fusion": case.fusion, "attention": case.attention,
        "update_fusion": case.update_fusion, "power": HELD if case.held else BURST, "grad_reduce": case.grad_reduce,
        "status": "error" if error else "ok", "error": error, "dispatch": case.dispatch,
    }
    if case.parallel.devices > 1:  # multi-device rows only, so other tables keep their columns
        row.update({k: getattr(case, k) for k in PARALLEL_KEYS}, devices=case.parallel.devices)
    if error or result is None:
        return row
    # result is memwall.simulation.result.Result's: every key below is always there.
    cycles = result["cycles"]
    total = float(cycles["total"])
    row.update({
        "seconds": float(result["seconds"]),
        # from the calibration shipped now, not a stored result's: a recalibration moves no case key
        **row_interval(result),
        "stall_fraction": float(result["stall_fraction"]),
        "fraction_of_peak": float(result["fraction_of_peak"]),
        "cups": float(result["cups"]) if case.phase == "train" else None,  # CUPS count training updates
        "flops": float(result["flops"]),
        "achieved_flops": float(result["achieved_flops"]),
        "peak_flops": float(result["peak_flops"]),
        "bound": result["bound"],
        "update_fusion": result.get("update_fusion"),
        "mfu": result.get("mfu"),
        "hfu": result.get("hfu"),
        "cycles_total": total,
        "compute_fraction": _share(cycles["compute"], total),
        "overhead_fraction": _share(cycles["overhead"], total),
        "dtype": result["dtype"],
        "dispatch": result["dispatch"]["mode"] or case.dispatch,
        "bound_class": result["bound_class"],
        "power_scale": float(result["power_scale"]),
        "memory_ratio": None if result["memory_ratio"] is None else float(result["memory_ratio"]),
        "dispatch_fraction": _share(result["time_by_component"].get("dispatch", 0.0), float(result["seconds"])),
        "framework": (result["dispatch"].get("framework") or {}).get("id", case.framework),
        "timing": result["dispatch"].get("timing", case.timing),
        "framework_fraction": _share(result["time_by_component"].get("framework", 0.0), float(result["seconds"])),
        # Whether the step's weights fit in the machine's largest on-chip level: then a
        # step need not stream them from main memory (the flip figure marks these).
        "weights_on_chip": bool(m.on_chip and result["ledger"].get("weights", 0) <= m.on_chip),
        # The seed's back-of-the-envelope estimate of the same step (memwall.seed), and
        # its a and pole d_min (transformers).
        "a": result.get("a"), "d_min": result.get("d_min"),
        "seed_seconds": result["seed"]["seconds"],
        "seed_memory_ratio": result["seed"]["memory_ratio"],
        "memory_ratio_micro": result.get("memory_ratio_micro"),
        "seed_fraction_of_peak": result["seed"]["fraction_of_peak"],
        # Balance for the dtype this case computes in (the peak run_case timed against).
        "balance": float(result["peak_flops"]) / m.bandwidth,
    })
    if result.get("devices", 1) > 1:
        seconds = float(result["seconds"])
        parts = result["time_by_component"]
        row.update(interconnect_fraction=_share(parts.get("interconnect", 0.0), seconds),
                   bubble_fraction=_share(parts.get("bubble", 0.0), seconds),
                   interconnect_bytes=float(result["interconnect_bytes"]))
    serving = result.get("serving")
    if serving:  # decode and prefill rows only, so other tables keep their columns
        row.update({c.name: serving.get(c.name) for c in SERVING_COLUMNS
                    if c.name in serving or c.name in SERVING_EVERY_ROW})
        row["kv_cache_bytes"] = float(result["ledger"].get("kv_cache", 0))
    for level, c in cycles["stall"].items():
        row[f"stall_{level}"] = _share(c, total)
    for level, b in result["bytes"].items():
        row[f"bytes_{level}"] = float(b)
    energy = result.get("energy")
    # every row has the energy columns (null without [energy]), as the stored rows do
    row.update({k: None if energy is None else energy[k]
                for k in ("joules", "watts_average", "data_movement_share", "tokens_per_joule", "cups_per_joule")})
    if energy is not None:
        row.update({f"joules_{k}": float(v) for k, v in energy["joules_by_component"].items()})
    return row


def _share(part: float, total: float) -> float | None:
    return float(part) / total if total else None


def row_order(row: Mapping[str, Any]) -> tuple:
    """Rows sort by machine (year, id), then network and configuration, then batch."""
    def s(v: Any) -> str:
        return "" if v is None else str(v)
    return (row["year"], s(row["machine"]).split("@")[0], row.get("bandwidth") or 0.0, s(row["machine"]),
            s(row["network"]), s(row["phase"]), s(row["updates"]), s(row["checkpoint"]),
            s(row["optimizer"]), s(row["dtype"]), row.get("seq_len") or 0, row["batch"],
            row.get("accumulate") or 1, s(row.get("fusion")),
            tuple(row.get(k) or (0 if k == "zero" else 1) for k in ("dp", "tp", "pp", "ep", "zero")),
            (row.get("cp") or 1, s(row.get("cp_kind")), bool(row.get("sequence_parallel")), row.get("interleave") or 1),
            s(row.get("power")), s(row.get("grad_reduce")))
