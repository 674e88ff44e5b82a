"""One case's results row and its key.

Owns: the leading columns of ``results.csv`` (:data:`COLUMNS`), the key a stored result
is found by (:func:`case_key`: a hash of the machine profile, the network, the case and
the model version), turning one :func:`memwall.simulate.run_case` result into one flat
results row (:func:`make_row`), and the order rows are written in (:func:`row_order`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..experiments.store import dumps
from ..model_version import MODEL_VERSION
from ..study.identity import machine_info, network_info

if TYPE_CHECKING:
    from ..simulate import Case

# The leading columns of results.csv, in this order; per-level columns follow.
COLUMNS = (
    "machine", "name", "year", "kind", "synthetic", "bandwidth", "balance", "machine_balance",
    "network", "batch", "tokens", "checkpoint", "updates", "phase", "optimizer", "dtype",
    "seq_len", "status", "error", "seconds", "stall_fraction", "fraction_of_peak", "cups",
    "flops", "achieved_flops", "peak_flops", "bound", "cycles_total", "compute_fraction",
    "overhead_fraction", "dispatch", "bound_class", "memory_ratio", "dispatch_fraction",
    "accumulate", "fusion", "attention", "mfu", "hfu", "weights_on_chip", "seed_seconds", "seed_memory_ratio",
    "seed_fraction_of_peak", "a", "d_min",
)
# Case fields added after results were first stored: left out of a case's key at their
# default, so results stored before them are still found.
_LATER_DEFAULTS = {"accumulate": 1, "fusion": "none", "grad_dtype": None}


def case_key(case: Case) -> str:
    """What a stored result depends on: the profile, the network, the case and the model."""
    m = machine_info(case.machine)
    net = network_info(case.network).fingerprint if case.network else None
    fields = {k: v for k, v in case.as_dict().items() if k not in _LATER_DEFAULTS or v != _LATER_DEFAULTS[k]}
    payload = {"model": MODEL_VERSION, "case": fields, "machine": m.fingerprint, "network": net}
    return hashlib.sha256(dumps(payload).encode()).hexdigest()[:32]


def make_row(case: Case, result: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    """One results row: who ran what, then the timing (stall fractions per level of total cycles)."""
    m = machine_info(case.machine)
    net = network_info(case.network) if case.network else None
    seq = case.seq_len or (net.seq_len if net else None)
    if case.phase == "decode":
        seq = 1
    elif case.phase == "prefill":
        seq = case.context
    row: dict[str, Any] = {
        "machine": m.id, "name": m.name, "year": m.year, "kind": m.kind, "synthetic": m.synthetic,
        "bandwidth": m.bandwidth, "balance": m.balance(), "machine_balance": m.balance(),
        "network": case.network, "batch": case.batch, "tokens": case.batch * seq if seq else case.batch,
        "checkpoint": case.checkpoint, "updates": case.updates, "phase": case.phase,
        "optimizer": case.optimizer, "dtype": case.dtype, "seq_len": seq,
        "accumulate": case.accumulate, "fusion": case.fusion, "attention": case.attention,
        "status": "error" if error else "ok", "error": error, "dispatch": case.dispatch,
    }
    if case.parallel.devices > 1:  # multi-device rows only, so other tables keep their columns
        row.update({k: getattr(case, k) for k in ("dp", "tp", "pp", "ep", "zero")}, devices=case.parallel.devices)
    if error or result is None:
        return row
    # result is memwall.simulate.result_dict's: every key below is always there.
    cycles = result["cycles"]
    total = float(cycles["total"])
    row.update({
        "seconds": float(result["seconds"]),
        "stall_fraction": float(result["stall_fraction"]),
        "fraction_of_peak": float(result["fraction_of_peak"]),
        "cups": float(result["cups"]),
        "flops": float(result["flops"]),
        "achieved_flops": float(result["achieved_flops"]),
        "peak_flops": float(result["peak_flops"]),
        "bound": result["bound"],
        "mfu": result.get("mfu"),
        "hfu": result.get("hfu"),
        "cycles_total": total,
        "compute_fraction": _share(cycles["compute"], total),
        "overhead_fraction": _share(cycles["overhead"], total),
        "dtype": result["dtype"],
        "dispatch": result["dispatch"]["mode"] or case.dispatch,
        "bound_class": result["bound_class"],
        "memory_ratio": None if result["memory_ratio"] is None else float(result["memory_ratio"]),
        "dispatch_fraction": _share(result["time_by_component"].get("dispatch", 0.0), float(result["seconds"])),
        # Whether the step's weights fit in the machine's largest on-chip level: then a
        # step need not stream them from main memory (the flip figure marks these).
        "weights_on_chip": bool(m.on_chip and result["ledger"].get("weights", 0) <= m.on_chip),
        # The seed's back-of-the-envelope estimate of the same step (memwall.seed), and
        # its a and pole d_min (transformers).
        "a": result.get("a"), "d_min": result.get("d_min"),
        "seed_seconds": result["seed"]["seconds"],
        "seed_memory_ratio": result["seed"]["memory_ratio"],
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
        row.update({k: serving.get(k) for k in ("context", "weights", "kv_dtype", "weight_group", "weight_zero",
                                                "tokens_per_second",
                                                "seconds_per_token", "time_to_first_token", "max_batch_that_fits")})
        row["kv_cache_bytes"] = float(result["ledger"].get("kv_cache", 0))
    for level, c in cycles["stall"].items():
        row[f"stall_{level}"] = _share(c, total)
    for level, b in result["bytes"].items():
        row[f"bytes_{level}"] = float(b)
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
            tuple(row.get(k) or (0 if k == "zero" else 1) for k in ("dp", "tp", "pp", "ep", "zero")))
