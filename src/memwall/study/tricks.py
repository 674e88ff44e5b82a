"""What each trick buys: a training setup with none of modern training's tricks, then each
added in turn, timed and sized by the simulation (figure 14).

Owns: :data:`TRICKS` (the tricks, in the order the figure adds them, each as the case
fields it sets), :data:`TRICK_CASES` (a network and machine of each era, with the tricks
that apply to it) and :func:`tricks_table`, which runs the cumulative cases with
:func:`memwall.simulation.run_case` and reports, per step of the ladder, the seconds per
token of one device and the bytes one device holds at its peak, beside its memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..simulation import Case, run_case

# The ladder: each trick as the case fields it changes, added to all those before it.
TRICKS: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("none", {}),
    ("batching", {"batch": 8}),
    ("accumulation", {"accumulate": 8}),
    ("mixed precision", {"dtype": "bf16"}),
    ("fusion", {"fusion": "full"}),
    ("FlashAttention", {"attention": "flash"}),
    ("checkpointing", {"checkpoint": "every:1"}),
    ("ZeRO", {"dp": 8, "zero": 3}),
    ("pipeline", {"dp": 2, "pp": 4, "zero": 1}),
)

# (machine, network, the starting case's fields, the tricks that apply there). The 1980s
# had batching (Rumelhart et al.'s "epoch" updates) and nothing else; a 2017 GPU has fp16
# (not bf16) and no links for ZeRO across eight devices in this profile set's sense.
TRICK_CASES: tuple[tuple[str, str, Mapping[str, Any], tuple[str, ...]], ...] = (
    ("vax-11-780", "nettalk", {"updates": "per-example", "batch": 1}, ("none", "batching")),
    ("v100-sxm2", "bert-large", {"batch": 1, "dtype": "fp32", "seq_len": 512, "optimizer": "adam"},
     ("none", "batching", "accumulation", "mixed precision", "fusion", "FlashAttention", "checkpointing")),
    ("h100-sxm", "llama3-8b", {"batch": 1, "dtype": "fp32", "seq_len": 2048, "optimizer": "adam"},
     tuple(name for name, _ in TRICKS)),
)
# V100s have no bf16: their mixed precision is fp16.
_DTYPE_ON = {"v100-sxm2": "fp16"}


def ladder(machine: str, network: str, start: Mapping[str, Any], tricks: Sequence[str]) -> list[tuple[str, Case]]:
    """The cumulative cases: the start, then each trick of ``tricks`` added in TRICKS' order."""
    fields = {"machine": machine, "network": network, **start}
    out = []
    for name, change in TRICKS:
        if name not in tricks:
            continue
        fields.update(change)
        if name == "mixed precision" and machine in _DTYPE_ON:
            fields["dtype"] = _DTYPE_ON[machine]
        if name == "batching" and fields.get("updates") == "per-example":
            fields["updates"] = "minibatch"
        out.append((name, Case(**fields)))
    return out


def tricks_table(cases: Sequence[tuple[str, str, Mapping[str, Any], tuple[str, ...]]] = TRICK_CASES,
                 run: Callable[[Case], Mapping[str, Any]] = run_case,
                 run_many: Callable[[list[Case]], Sequence[Mapping[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """One row per step of each case's ladder: seconds per token (or example) on one device
    (a multi-device step's seconds times its devices over its global tokens) and the bytes
    one device holds at its peak against its memory. Every step is gathered first and run
    by ``run_many`` (a sweep's worker processes), else one by one by ``run``."""
    plan = [(machine, network, i, name, case) for machine, network, start, tricks in cases
            for i, (name, case) in enumerate(ladder(machine, network, start, tricks))]
    steps = [case for *_, case in plan]
    results = run_many(steps) if run_many is not None else [run(case) for case in steps]
    out = []
    for (machine, network, i, name, case), r in zip(plan, results, strict=True):
        step = r.get("global_step") or r.get("optimizer_step") or {}
        devices = r.get("devices", 1)
        tokens = step.get("tokens") or step.get("examples") or case.batch
        out.append({"machine": machine, "network": network, "index": i, "trick": name,
                    "case": case.as_dict(), "devices": devices,
                    "seconds_per_token": r["seconds"] * devices / tokens,
                    "device_bytes": r["ledger"]["peak"], "capacity": r["capacity"]["memory"],
                    "fits": r["capacity"]["fits"],
                    "bound": r["bound"], "bound_class": r["bound_class"], "mfu": r.get("mfu")})
    return out
