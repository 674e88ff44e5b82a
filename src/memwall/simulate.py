"""One case, end to end: a machine and a workload in, the timed stall breakdown out.

Owns: :class:`Case` (what to run: machine, network or GEMM, batch, configuration) and
:func:`run_case`, which builds the step, lowers each kernel by the machine's schedule,
replays the streams through the machine's cache levels, and times the counts with the
machine's timing model. The result is the JSON-able dict that ``memwall inspect``
prints and each row of a sweep is made from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .engine import Hierarchy, HierarchyCounters
from .errors import InputError
from .networks import load_network
from .profiles import Machine, load_machine
from .timing import KernelTiming, StepTiming, arithmetic_rate, time_kernel, traffic_from_counters
from .workloads.config import TrainingConfig
from .workloads.lowering import Lowered, lower
from .workloads.step import Kernel, Step, build_step, gemm_step


@dataclass(frozen=True)
class Case:
    """What to simulate. Exactly one of ``network`` and ``gemm`` is given."""

    machine: str  # profile id (or path to a profile file)
    network: str | None = None  # network preset id
    batch: int = 1  # examples, or sequences for sequence models
    checkpoint: str = "none"  # none | sqrt | every:K | selective
    updates: str = "minibatch"  # per-example | minibatch
    phase: str = "train"  # train | forward
    optimizer: str = "sgd"  # sgd | momentum | adam
    dtype: str | None = None  # None: the network's own (fp32 classics, bf16 modern)
    seq_len: int | None = None  # None: the preset's
    gemm: tuple[int, int, int] | None = None  # (M, N, K) for a single product
    context: int | None = None  # decode, prefill: tokens in each sequence's KV cache
    weights: str | None = None  # int8 | int4 | fp8: weight-only quantization (None: in dtype)
    kv_dtype: str | None = None  # the KV cache's type (None: in dtype)

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in SERVING_OPTIONS:  # absent unless given, so other cases keep their keys
            if d[k] is None:
                del d[k]
        return d


SERVING_OPTIONS = ("context", "weights", "kv_dtype")


def _demand(lowered: Lowered) -> tuple[int, int, int, int]:
    """Reads, writes, bytes and innermost iterations the core issues, from the streams alone."""
    reads = writes = nbytes = inner = 0
    for nest in lowered.nests:
        for access in nest.accesses:
            times = nest.times(access)
            nbytes += times * access.size
            if access.is_write:
                writes += times
            else:
                reads += times
        iterations = 1
        for count in nest.counts:
            iterations *= count
        inner += iterations if nest.counts else 0
    return reads, writes, nbytes, inner


def build_case_step(case: Case) -> Step:
    """The step a case runs: a single product, or a network's training or inference step."""
    if (case.gemm is None) == (case.network is None):
        raise InputError("a case names exactly one of a network and a GEMM", field="network")
    if case.batch < 1:
        raise InputError(f"batch must be a positive integer, got {case.batch}", field="batch")
    if case.gemm is not None:
        m, n, k = case.gemm
        return gemm_step(m, n, k, case.dtype or "fp32")
    network = load_network(case.network)
    config = TrainingConfig(
        batch=case.batch,
        updates=case.updates,
        optimizer=case.optimizer,
        dtype=case.dtype or network.dtype,
        checkpoint=case.checkpoint,
        seq_len=case.seq_len,
        phase=case.phase,
        context=case.context,
        weights=case.weights,
        kv_dtype=case.kv_dtype,
    )
    return build_step(network, config)


# Line lookups a step may replay in full; above it, large nests are sampled in proportion
# to their size, none below SAMPLE_FLOOR lookups (so each sample still spans the caches).
STEP_BUDGET = 40_000_000
SAMPLE_FLOOR = 1_000_000


def simulate_step(machine: Machine, step: Step, *, exact: bool = False) -> StepTiming:
    """Replay every kernel of a step through the machine's caches and time it.

    When the step's peak live bytes are at most twice the caches' total size, the kernel
    list is replayed once to warm them and counted on the second pass: a training run
    repeats its steps, so the steady state is what a measured step shows. When the step
    needs more than ``STEP_BUDGET`` line lookups, each large nest of a kernel whose data
    takes at least twice the caches gets its share of the budget (at least
    ``SAMPLE_FLOOR``) and is sampled (``LoopNest.sample``), unless ``exact``.
    """
    levels = machine.cache_levels
    hierarchy = Hierarchy(levels)
    line = levels[0].line if levels else 64
    lowered = [lower(kernel, machine.schedule, line_bytes=line) for kernel in step.kernels]
    cache_bytes = sum(level.size for level in levels)
    passes = 2 if levels and step.ledger.peak <= 2 * cache_bytes else 1
    sizes = [[nest.line_lookups(line) for nest in low.nests] for low in lowered]
    total = sum(map(sum, sizes))
    share = 0.0 if exact or total <= STEP_BUDGET else STEP_BUDGET / total
    timings: list[KernelTiming] = []
    for last in [p == passes - 1 for p in range(passes)]:
        for kernel, low, nest_sizes in zip(step.kernels, lowered, sizes, strict=True):
            # Sampling replays the start of a nest, so the cache state a kernel inherits
            # and leaves is only approximated: kept to kernels that overflow the caches.
            sample = share and _footprint(kernel) >= 2 * cache_bytes
            budgets = [max(SAMPLE_FLOOR, int(n * share)) if sample else 0 for n in nest_sizes]
            counts = _replay(hierarchy, low, budgets, line)
            if not last:
                continue
            reads, writes, nbytes, inner = _demand(low)
            traffic = traffic_from_counters(
                machine,
                counts,
                demand_reads=reads,
                demand_writes=writes,
                demand_bytes=nbytes,
                inner_iterations=inner,
                vector_instructions=low.vector_instructions,
                parallel_units=low.parallel_units,
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
                )
            )
    return StepTiming(
        machine=machine,
        kernels=timings,
        iterations=step.iterations,
        examples=step.examples,
        connections=step.connections,
        phase=step.config.phase,
        peak=arithmetic_rate(machine, step.config.dtype, "gemm"),
    )


def _footprint(kernel: Kernel) -> int:
    """Bytes of the distinct tensors a kernel touches."""
    return sum({t.name: t.bytes for t in (*kernel.reads, *kernel.writes)}.values())


def _replay(hierarchy: Hierarchy, lowered: Lowered, budgets: list[int], line: int) -> HierarchyCounters:
    """The counters one kernel run adds, each nest replayed whole or (budget > 0) sampled."""
    start = hierarchy.counters()
    total = start - start
    for nest, budget in zip(lowered.nests, budgets, strict=True):
        warm, counted, scale = nest.sample(budget, line) if budget else (None, nest, 1.0)
        if warm is not None:
            hierarchy.replay_nest(warm)
        before = hierarchy.counters()
        hierarchy.replay_nest(counted)
        delta = hierarchy.counters() - before
        total = total + (delta.scaled(scale) if scale != 1.0 else delta)
    return total


def _breakdown(compute: float, overhead: float, stall: dict[str, float], clock: float) -> dict:
    total = compute + overhead + sum(stall.values())
    return {
        "total": total * clock,
        "compute": compute * clock,
        "overhead": overhead * clock,
        "stall": {k: v * clock for k, v in stall.items()},
    }


def _verdict(timing: StepTiming) -> str:
    """One line: what bounds the step, and by how much."""
    seconds, compute, bound = timing.seconds, timing.compute, timing.bound
    if seconds <= 0:
        return "empty step"
    share: dict[str, float] = {}
    for k in timing.kernels:
        share[k.bound] = share.get(k.bound, 0.0) + k.seconds * timing.iterations
    kernels = f"{share.get(bound, 0.0) / seconds:.0%} of it in kernels bound so"
    if bound == "compute":
        return f"compute-bound: arithmetic is {compute / seconds:.0%} of the step's time ({kernels})"
    if bound == "overhead":
        return f"bound by launch and start-up overhead ({kernels})"
    return f"bound by {bound}: the step takes {seconds / compute:.3g}x its arithmetic time ({kernels})"


def result_dict(case: Case, step: Step, timing: StepTiming) -> dict:
    """The JSON of ``memwall inspect`` (and the raw material of a sweep row)."""
    machine = timing.machine
    clock = machine.clock_hz
    seconds = timing.seconds
    stall_total = sum(timing.stall.values())
    achieved = timing.flops / seconds if seconds > 0 else 0.0
    per_example_work = timing.connections * timing.examples
    kernels = []
    for k in timing.kernels:
        ks = k.seconds * timing.iterations
        kernels.append(
            {
                "name": k.name,
                "phase": k.phase,
                "op": k.op,
                "repeat": k.repeat,
                "flops": k.flops * timing.iterations,
                "seconds": ks,
                "stall_fraction": (sum(k.stall.values()) / k.seconds) if k.seconds > 0 else 0.0,
                "fraction_of_peak": (k.flops / k.seconds / timing.peak) if k.seconds > 0 else 0.0,
                "achieved_flops": k.flops / k.seconds if k.seconds > 0 else 0.0,
                "bound": k.bound,
                "cycles": _breakdown(
                    k.compute * timing.iterations,
                    k.overhead * timing.iterations,
                    {n: v * timing.iterations for n, v in k.stall.items()},
                    clock,
                ),
                "bytes": {n: v * timing.iterations for n, v in k.bytes.items()},
            }
        )
    capacity = machine.memory.capacity
    ledger = step.ledger.as_dict()
    fits = ledger["peak"] <= capacity
    return {
        "machine": machine.id,
        "machine_name": machine.name,
        "year": machine.year,
        "kind": machine.kind,
        "balance": machine.balance(),
        "network": case.network,
        "gemm": list(case.gemm) if case.gemm else None,
        "batch": case.batch,
        "checkpoint": case.checkpoint,
        "updates": case.updates,
        "phase": timing.phase,  # a single GEMM is a forward product whatever the case says
        "dtype": step.kernels[0].dtype if step.kernels else case.dtype,
        "flops": timing.flops,
        "seconds": seconds,
        "stall_fraction": stall_total / seconds if seconds > 0 else 0.0,
        "fraction_of_peak": achieved / timing.peak,
        "achieved_flops": achieved,
        "peak_flops": timing.peak,
        "cups": per_example_work / seconds if seconds > 0 and timing.phase == "train" else 0.0,
        "cps": per_example_work / seconds if seconds > 0 and timing.phase == "forward" else 0.0,
        "bound": timing.bound,
        "verdict": _verdict(timing),
        "cycles": _breakdown(timing.compute, timing.overhead, timing.stall, clock),
        "bytes": timing.bytes,
        "ledger": ledger,
        "capacity": {"memory": capacity, "fits": fits},
        "warnings": []
        if fits
        else [
            f"the step needs {ledger['peak']} bytes at its peak but {machine.id} has "
            f"{capacity} bytes of main memory; simulated as if it fitted"
        ],
        "kernels": kernels,
    }


def serving_dict(step: Step, seconds: float, capacity: int) -> dict:
    """Decode and prefill: tokens per second (all sequences), seconds per output token, time
    to first token, and the largest batch at this context whose weights and cache fit."""
    cfg = step.config
    tokens = step.tokens  # decode: one a sequence; prefill: the prompts
    led = step.ledger
    per_seq = led.kv_cache / cfg.batch
    rest = led.peak - led.kv_cache  # weights, the step's workspace (held at their peak)
    fit = int((capacity - rest) // per_seq) if per_seq and capacity > rest else 0
    out = {
        "context": cfg.context,
        "weights": cfg.weights or cfg.dtype,
        "kv_dtype": cfg.kv_dtype or cfg.dtype,
        "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
        "kv_cache_bytes_per_sequence": per_seq,
        "max_batch_that_fits": fit,
    }
    if cfg.phase == "decode":
        out["seconds_per_token"] = seconds  # each sequence gets one token per step
    else:
        out["time_to_first_token"] = seconds  # the prompt's pass ends with the first token's logits
    return out


def run_case(case: Case, *, machine: Machine | None = None, exact: bool = False) -> dict:
    """Simulate one case; ``machine`` overrides the profile named by ``case.machine``
    (for synthetic machines such as a bandwidth sweep); ``exact`` replays every access
    of every nest instead of sampling the large ones."""
    if machine is None:
        machine = load_machine(case.machine)
    step = build_case_step(case)
    timing = simulate_step(machine, step, exact=exact)
    out = result_dict(case, step, timing)
    if step.config.serving:
        out["serving"] = serving_dict(step, timing.seconds, machine.memory.capacity)
    return out
