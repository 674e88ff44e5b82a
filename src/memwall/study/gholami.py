"""Gholami et al.'s case study, simulated (figure 12): BERT-Base, BERT-Large and GPT-2 over
sequence length, on their CPU and beside it a modern machine and batched decode.

Owns: the cases (:data:`GHOLAMI_NETWORKS`, :data:`GHOLAMI_LENGTHS`, ...), the summed
decode (:func:`summed_decode`: generating L tokens as the sum of its decode steps, from a
few sampled contexts), the table (:func:`gholami_table`) and its summary
(:func:`gholami_summary`), and what the table is computed from (:func:`gholami_inputs`),
so stored data is reused while none of it changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..model_version import MODEL_VERSION

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


def _positions(networks: Iterable[str], longest: int) -> dict[str, int | None]:
    """The learned positions each preset needs for ``longest`` tokens (the case option
    ``max_positions``) where its own table is shorter (BERT has 512, GPT-2 1024); None
    where it needs none."""
    from ..networks import load_network

    return {net: longest if 0 < load_network(net).max_positions < longest else None for net in networks}


def gholami_table(lengths: Sequence[int] = GHOLAMI_LENGTHS,
                  machines: Sequence[str] = (GHOLAMI_MACHINE, GHOLAMI_COMPARE),
                  networks: Sequence[tuple[str, str]] = GHOLAMI_NETWORKS, decode_batch: int = GHOLAMI_BATCH,
                  dtype: str = GHOLAMI_DTYPE,
                  run: Callable[[Any], Mapping[str, Any]] | None = None,
                  run_many: Callable[[list[Any]], Sequence[Mapping[str, Any]]] | None = None,
                  ) -> list[dict[str, Any]]:
    """One row per machine, network, batch and sequence length L: FLOPs, main-memory bytes,
    seconds, arithmetic intensity (FLOPs per main-memory byte) and latency over BERT-Base's
    (the first network's) at the shortest length on the same machine.

    An encoder's row is one forward pass over L tokens at batch 1; a decoder's is L tokens
    generated one by one, the sum of its decode steps at contexts 0 ... L - 1, from the
    steps at :func:`gholami_contexts` (:func:`summed_decode`), at batch 1 and, per
    sequence, at ``decode_batch`` sequences together (0: none). Presets are given the
    learned positions the longest length needs (:func:`_positions`, the case option
    ``max_positions``). Every case is gathered first and run by ``run_many`` (a sweep's
    worker processes), else one by one by ``run`` (default: in this process)."""
    from ..simulation import Case, run_case

    lengths = sorted(lengths)
    contexts = gholami_contexts(lengths)
    positions = _positions([n for n, _ in networks], lengths[-1])
    batches = (1, decode_batch) if decode_batch > 1 else (1,)
    plan: list[tuple[str, str, str, int, int, Any]] = []  # machine, network, role, batch, length or context, case
    for machine in machines:
        for net, role in networks:
            common = {"machine": machine, "network": net, "dtype": dtype, "max_positions": positions[net]}
            if role == "encoder":
                plan += [(machine, net, role, 1, n, Case(**common, phase="forward", seq_len=n)) for n in lengths]
            else:
                plan += [(machine, net, role, b, c, Case(**common, phase="decode", context=c, batch=b))
                         for b in batches for c in contexts]
    cases = [case for *_, case in plan]
    results = run_many(cases) if run_many is not None else [(run or run_case)(case) for case in cases]
    metrics: dict[tuple[str, str, str, int], dict[int, dict[str, float]]] = {}
    for (machine, net, role, batch, at, _), result in zip(plan, results, strict=True):
        metrics.setdefault((machine, net, role, batch), {})[at] = _step_metrics(result)
    rows: list[dict[str, Any]] = []
    for (machine, net, role, batch), steps in metrics.items():
        common = {"machine": machine, "network": net, "role": role, "dtype": dtype, "batch": batch}
        if role == "encoder":
            rows += [{**common, "length": n, **steps[n], "sampled_contexts": None} for n in lengths]
        else:
            rows += [{**common, "length": n, **summed_decode(steps, n), "sampled_contexts": sum(c < n for c in contexts)}
                     for n in lengths]
    for machine in machines:
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



def gholami_data(options: Mapping[str, Any]) -> dict[str, Any]:
    """Figure 12's tables: the rows of :func:`gholami_table` (``options`` its keyword
    arguments) and their :func:`gholami_summary`."""
    from ..execute.pool import run_cases

    extra = {} if "run" in options or "run_many" in options else {"run_many": run_cases}  # on worker processes
    rows = gholami_table(**options, **extra)
    return {"rows": rows, "summary": gholami_summary(rows)}


def gholami_inputs(options: Mapping[str, Any]) -> dict[str, Any]:
    """What the figure's data is computed from: reused while none of it changes."""
    from ..canonical import dumps
    from .identity import machine_info, network_info

    machines = options.get("machines", (GHOLAMI_MACHINE, GHOLAMI_COMPARE))
    networks = options.get("networks", GHOLAMI_NETWORKS)

    inputs = {"model": MODEL_VERSION, "options": {k: v for k, v in options.items() if k != "run"},
              "machines": {m: machine_info(m).fingerprint for m in machines},
              "networks": {n: network_info(n).fingerprint for n, _ in networks}}
    return json.loads(dumps(inputs))  # as stored: tuples read back as lists

