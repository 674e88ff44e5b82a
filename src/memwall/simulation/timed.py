"""A replayed step timed: the engine's counters through the machine's timing model.

Owns: :func:`simulate_step` (each kernel's counters, with the demand its streams issue,
to a :class:`memwall.timing.KernelTiming`; the dispatch streams over them) and
:func:`accumulated` (one optimizer step from one replayed micro-batch step), and what
runs when the machine has no arithmetic of the step's dtype (:func:`dtype_fallback`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..engine import HierarchyCounters
from ..errors import InputError
from ..frameworks import BARE, Framework, framework_for
from ..profiles import Machine
from ..timing import (
    KernelTiming,
    StepTiming,
    apply_dispatch,
    arithmetic_rate,
    layer_passes,
    rate_dtype,
    time_kernel,
    traffic_from_counters,
    vector_streams,
    word_widening,
)
from ..vocabulary import rate_key
from ..workloads.step import Step
from .plan import ReplayPlan, plan_replay
from .replay import _demand, _demand_by_kind, replay_step


def simulate_step(machine: Machine, step: Step, *, exact: bool = False, plan: ReplayPlan | None = None,
                  progress: Callable[[int], Any] | None = None, dispatch: str | None = None,
                  counters: list[HierarchyCounters] | None = None, framework: Framework | None = None,
                  timing: str = "device") -> StepTiming:
    """Replay every kernel of a step through the machine's caches and time it.

    What is replayed (warm-up pass, sampling) is :func:`plan_replay`'s; ``progress``, if
    given, is called with the line lookups of each piece as it finishes. ``dispatch``
    names the mode kernels are issued in (None: the framework's, else the profile's
    default); ``framework`` adds its host time and ``timing`` how the step is timed
    (:func:`memwall.timing.apply_dispatch`). ``counters``,
    if given, are a replay of this step on a machine with the same :func:`engine_fields`
    (:func:`replay_step`'s answer), used instead of replaying again.
    """
    plan = plan or plan_replay(machine, step, exact=exact)
    if counters is None:
        counters = replay_step(machine, plan, progress)
    timings: list[KernelTiming] = []
    for kernel, low, counts in zip(step.kernels, plan.lowered, counters, strict=True):
        reads, writes, nbytes, inner = _demand(low)
        strides: tuple[tuple[int, int], ...] = ()
        if machine.timing.model == "vector":  # the strip loop's iterations and strided loads
            inner, strides = vector_streams(low.nests, int(machine.timing.params.get("word_bytes", 8)))
        traffic = traffic_from_counters(
            machine,
            counts,
            demand_reads=reads,
            demand_writes=writes,
            demand_bytes=nbytes,
            inner_iterations=inner,
            vector_instructions=low.vector_instructions,
            parallel_units=low.parallel_units,
            demand_read_bytes=_demand_by_kind(low)[2],
            strides=strides,
        )
        timings.append(
            time_kernel(
                machine,
                name=kernel.name,
                phase=kernel.phase,
                op=kernel.op,
                dtype=kernel.dtype,
                flops=kernel.flops,
                ops=dict(kernel.ops),
                traffic=traffic,
                repeat=kernel.repeat,
                dims=kernel.dims,
                instructions=_dequant_instructions(kernel, framework),
            )
        )
    return StepTiming(
        machine=machine,
        kernels=timings,
        iterations=step.iterations,
        examples=step.examples,
        connections=step.connections,
        phase=step.config.phase,
        # the datasheet peak: MFU, HFU and fraction_of_peak are quoted against it
        peak=arithmetic_rate(machine, step.config.dtype, "gemm", achievable=False),
        framework=framework,
        dispatch=apply_dispatch(machine, timings, step.iterations, dispatch, framework, layer_passes(step.kernels),
                                timing),
    )


def _dequant_instructions(kernel: Any, framework: Framework | None) -> float:
    """The vector instructions a weight-only product spends widening its weights: the weights
    it widens a run times what the framework's kernel spends on each (docs/timing.md)."""
    weights = kernel.ops.get("dequant", 0)
    if not weights:
        return 0.0
    return weights * (framework or BARE).dequant_instructions(kernel.params.get("b_dtype", ""))


def stack_of(case: Any, machine: Machine) -> dict[str, Any]:
    """The software stack a case's step is timed with: its framework (the case's, else the
    machine's default, else hand-written; its gradient reduction as the case's ``grad_reduce``
    says, where it says) and how the step is timed, as :func:`simulate_step` takes them. A
    single GEMM is a benchmark loop's call: never synchronised on its own."""
    framework = framework_for(case.framework, machine.framework)
    if case.gemm is not None and framework.synchronizes:
        # a single product is timed as a benchmark loop times it: the device's stream, call
        # after call, with no synchronisation per call (--timing host adds one)
        framework = replace(framework, synchronizes=False)
    if case.grad_reduce is not None:  # the case says how its data-parallel gradients are reduced
        framework = replace(framework, gradients=case.grad_reduce)
    return {"framework": framework, "timing": case.timing}


def accumulated(timing: StepTiming, k: int) -> StepTiming:
    """One optimizer step from one replayed micro-batch step: every kernel but the update K times.

    The micro-batch kernels and the update were replayed once each; repeating the
    micro-batch K times is a count, not K more replays (the caches see the same kernels
    again)."""
    if k == 1:
        return timing
    kernels = [t if t.phase == "update" else t.repeated(k) for t in timing.kernels]
    out = replace(timing, kernels=kernels, examples=timing.examples * k)
    # K micro-batches issue K times the kernels and run K times the layers: the dispatch
    # streams follow the counts; the step's own costs and its synchronisation stay once.
    d = timing.dispatch
    out.dispatch = apply_dispatch(timing.machine, kernels, timing.iterations, d.mode if d is not None else None,
                                  timing.framework, k * d.layer_passes if d is not None else 0,
                                  d.timing if d is not None else "device")
    return out


def dtype_fallback(machine: Machine, step: Step, *, asked: bool, allow: bool) -> dict | None:
    """None if the machine runs the step's products in their own dtype; else what runs
    instead, with the warning to show. A dtype the user ``asked`` for is refused unless
    ``allow``: a machine without bf16 does not silently become an fp32 run."""
    # a step whose products run narrow (fp8 training, the block formats) is judged by them
    dtype = step.config.product_dtype or (step.kernels[0].dtype if step.kernels else None)
    if dtype is None or machine.peak_flops.get(rate_key(dtype)):
        return None
    used = rate_dtype(machine, dtype)
    needs = dtype if rate_key(dtype) == dtype else f"{rate_key(dtype)} (for {dtype})"
    said = (f"{machine.id} has no {needs} arithmetic (it states {', '.join(sorted(machine.peak_flops))})")
    if asked and not allow:
        raise InputError(f"{said}; choose one of those, or pass --allow-fallback to run the products at "
                         f"its {used} rate", field="--dtype")
    return {"requested": dtype, "used": used,
            "warning": f"{said}: the products run at its {used} rate"
                       + ("" if word_widening(machine, dtype) > 1 else f"; the data move as {dtype}")}
