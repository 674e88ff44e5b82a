"""The seed's back-of-the-envelope model, computed for a step beside its simulation.

Owns: :func:`seed_model`, the roofline estimate the project is measured against
(restated in ``docs/timing.md``, "The seed model"): a micro-batch of T tokens moves
b_w · P bytes of weights and gradients and A(T) bytes of activations between kernels
(A = a · d · L · T for a transformer), does F · T FLOPs, and takes

    t_micro = max(F·T / peak, (b_w·P + A) / B)

with the optimizer's b_update · P bytes once per optimizer step at the memory's rate; so
I(T) = F·T / (b_w·P + A), T_min = β · b_w / (F/P) and d_min = a · β / 72, β = peak ÷ B.
Every quantity is read off the step memwall builds (its declared kernels' operands, each
counted once, as an ideal kernel moves them), never fitted: where the simulation parts
from it, caches (reuse the seed ignores, misses it does not see), dispatch and vector
start-up, waves and the bytes a unit keeps in flight are what it leaves out.
"""

from __future__ import annotations

from typing import Any

from .workloads.graph import PARAMETER_CLASSES
from .workloads.step import Step, activation_traffic

# The phases of one micro-batch (the update runs once per optimizer step).
MICRO_PHASES = ("forward", "recompute", "backward")


def bytes_by_class(step: Step) -> dict[str, dict[str, float]]:
    """Bytes each tensor class moves as the step's kernels name their operands (each once):
    ``micro`` per micro-batch (forward, recompute, backward) and ``update`` per optimizer
    step, class -> bytes."""
    out: dict[str, dict[str, float]] = {"micro": {}, "update": {}}
    for k in step.kernels:
        # A product accumulating into its output (beta = 1: gradients into fp32 main
        # gradients) reads that output in its own loops, not among its declared reads.
        accumulated = k.writes if k.params.get("beta") else ()
        part = out["micro" if k.phase in MICRO_PHASES else "update"]
        for t in (*k.reads, *k.writes, *accumulated):
            part[t.cls] = part.get(t.cls, 0.0) + t.bytes * k.repeat * step.iterations
    return out


def parameter_bytes(step: Step) -> dict[str, float]:
    """Bytes of weights, gradients and optimizer state the step's kernels move: ``micro``
    per micro-batch and ``update`` per optimizer step, and the non-parameter (activation,
    workspace, cache) bytes of a micro-batch, ``activations`` (:func:`bytes_by_class`)."""
    by = bytes_by_class(step)
    return {"micro": sum(v for c, v in by["micro"].items() if c in PARAMETER_CLASSES),
            "update": sum(v for c, v in by["update"].items() if c in PARAMETER_CLASSES),
            "activations": sum(v for c, v in by["micro"].items() if c not in PARAMETER_CLASSES)}


def seed_model(step: Step, peak: float, bandwidth: float) -> dict[str, Any]:
    """The seed's estimate for ``step`` on a machine of ``peak`` FLOP/s (the step's dtype)
    and ``bandwidth`` B/s of main memory (see the module docstring for the equations)."""
    params = step.network.parameters
    tokens = step.tokens or step.examples
    moved = parameter_bytes(step)
    flops = float(sum(step.flops.get(p, 0) for p in MICRO_PHASES))
    micro_bytes = moved["micro"] + moved["activations"]
    k = step.config.accumulate
    t_micro = max(flops / peak, micro_bytes / bandwidth)
    seconds = k * t_micro + moved["update"] / bandwidth
    balance = peak / bandwidth
    traffic = activation_traffic(step)
    b_w = moved["micro"] / params if params else None
    per_param = flops / tokens / params if params and tokens else None
    return {
        "b_w": b_w,
        "b_update": moved["update"] / params if params else None,
        "a": traffic["a"] if traffic else None,
        "flops_per_token_per_parameter": per_param,
        "intensity": flops / micro_bytes if micro_bytes else None,
        "memory_ratio": (micro_bytes / bandwidth) / (flops / peak) if flops else None,
        "seconds": seconds,
        "fraction_of_peak": (k * flops / peak) / seconds if seconds else None,
        "t_min": balance * b_w / per_param if b_w and per_param else None,
        "d_min": traffic["a"] * balance / 72 if traffic else None,
    }
