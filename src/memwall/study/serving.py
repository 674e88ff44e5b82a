"""Where batching decode turns it compute-bound, and where the KV cache overtakes the weights.

Owns: :func:`decode_crossovers`. A decode step reads every weight once whatever the
batch (matrix-vector at batch 1, matrix-matrix at batch B), while its KV cache reads grow
with batch x context. So, on one machine at one context:

* the compute-bound batch is found by simulation: the batch doubles from 1 until the
  step's bound is ``compute``, or until the batch no longer fits in memory (then it is
  None: decode stays memory-bound at this context on this machine, or does not fit at
  batch 1); the runs' warnings come with the answer;
* the batch where cache reads overtake weight reads follows from the step itself: the
  bytes of the cache that attention reads a sequence, against the weight bytes the
  products read (both per step, from the declared kernels; no cache effects).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..simulation import Case, build_case_step, run_case

MAX_BATCH = 1 << 16


def _reads_by_class(case: Case) -> dict[str, int]:
    """Bytes a step's kernels read, per tensor class, every repeat counted once a run."""
    step = build_case_step(case)
    out: dict[str, int] = {}
    for k in step.kernels:
        seen = {}
        for r in k.reads:
            seen[(r.name, r.addr)] = r
        for r in seen.values():
            out[r.cls] = out.get(r.cls, 0) + r.bytes * k.repeat * step.iterations
    return out


def decode_crossovers(case: Case, *, run: Callable[[Case], Mapping[str, Any]] = run_case,
                      max_batch: int = MAX_BATCH) -> dict[str, Any]:
    """For a decode ``case`` (its batch ignored): the rows of a batch doubling, the first
    compute-bound batch (None if none fits), and the batch where cache reads pass weights."""
    one = replace(case, batch=1)
    reads = _reads_by_class(one)
    weight_bytes, cache_bytes = reads.get("weights", 0), reads.get("kv_cache", 0)
    takeover = -(-weight_bytes // cache_bytes) if cache_bytes else None
    rows = []
    warnings: dict[str, None] = {}
    compute_batch = None
    batch = 1
    while batch <= max_batch:
        r = run(replace(case, batch=batch))
        sv = r["serving"]
        fits = r["capacity"]["fits"]
        rows.append({"batch": batch, "bound": r["bound"], "bound_class": r["bound_class"],
                     "memory_ratio": r["memory_ratio"], "seconds": r["seconds"],
                     "tokens_per_second": sv["tokens_per_second"], "fits": fits})
        # a batch that does not fit ends the doubling, and is no answer: its memory is not there
        warnings.update(dict.fromkeys(w for w in r.get("warnings", ()) if fits or "at its peak" not in w))
        if not fits:
            break
        if r["bound_class"] == "compute":  # the binding resource's rule: never at memory_ratio > 1.05
            compute_batch = batch
            break
        batch *= 2
    return {
        "machine": case.machine,
        "network": case.network,
        "context": case.context,
        "weights_read_per_step": weight_bytes,
        "kv_cache_read_per_sequence": cache_bytes,
        "kv_overtakes_weights_at_batch": takeover,
        "compute_bound_at_batch": compute_batch,
        "rows": rows,
        "warnings": list(warnings),
    }
