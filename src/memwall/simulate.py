"""One case, end to end: a machine and a workload in, the timed stall breakdown out.

Owns: :class:`Case` (what to run: machine, network or GEMM, batch, configuration) and
:func:`run_case`, which builds the step, lowers each kernel by the machine's schedule,
replays the streams through the machine's cache levels, and times the counts with the
machine's timing model. The result is the JSON-able dict that ``memwall inspect``
prints and each row of a sweep is made from. With gradient accumulation the micro-batch
is replayed once and counted K times beside one update (:func:`accumulated`); the result
then gives per micro-batch and per optimizer step figures, MFU (model FLOPs, no
recomputation) and HFU (every FLOP run), and the seed model's ``a`` and ``d_min``.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from .engine import Hierarchy, HierarchyCounters, MemoryCounters
from .errors import InputError
from .interconnect import bubble_fraction
from .networks import Network, load_network, with_attention
from .profiles import Machine, load_machine
from .seed import seed_model
from .streams import LoopNest
from .timing import (
    BUBBLE,
    COMPUTE,
    DISPATCH,
    INTERCONNECT,
    STARTUP,
    KernelTiming,
    StepTiming,
    apply_dispatch,
    arithmetic_rate,
    rate_dtype,
    sharded_update,
    time_kernel,
    time_pipeline,
    time_stage,
    traffic_from_counters,
    word_widening,
)
from .units import format_time
from .workloads.config import TrainingConfig
from .workloads.lowering import Lowered, lower
from .workloads.parallel import Parallel, communication, device_steps, shard_ledger
from .workloads.step import Kernel, Step, activation_traffic, build_step, d_min, gemm_step


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
    dispatch: str | None = None  # eager | graph | compiled; None: the profile's default
    accumulate: int = 1  # micro-batches of ``batch`` per optimizer step
    fusion: str = "none"  # none | epilogue | full
    grad_dtype: str | None = None  # None: fp32 main gradients when mixed precision accumulates, else the dtype
    context: int | None = None  # decode, prefill: tokens in each sequence's KV cache
    weights: str | None = None  # int8 | int4 | fp8: weight-only quantization (None: in dtype)
    kv_dtype: str | None = None  # the KV cache's type (None: in dtype)
    weight_group: int | None = None  # weights a group scale covers (None: the type's default)
    weight_zero: str | None = None  # none | int4 | fp16 | bf16: the groups' zero points (None: none)
    dp: int = 1  # data-parallel replicas
    tp: int = 1  # tensor-parallel devices per replica
    pp: int = 1  # pipeline stages
    ep: int = 1  # expert-parallel group (drawn from the dp replicas)
    zero: int = 0  # ZeRO stage 0-3
    attention: str | None = None  # materialized | flash; None: the network's own

    def __post_init__(self) -> None:
        Parallel(self.dp, self.tp, self.pp, self.ep, self.zero)  # refuses bad device counts before any work

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in (*SERVING_OPTIONS, "attention"):  # absent unless given, so other cases keep their keys
            if d[k] is None:
                del d[k]
        for k, default in PARALLEL_DEFAULTS.items():  # likewise the devices, unless more than one
            if d[k] == default:
                del d[k]
        return d

    @property
    def parallel(self) -> Parallel:
        return Parallel(self.dp, self.tp, self.pp, self.ep, self.zero)


SERVING_OPTIONS = ("context", "weights", "kv_dtype", "weight_group", "weight_zero")
PARALLEL_DEFAULTS = {"dp": 1, "tp": 1, "pp": 1, "ep": 1, "zero": 0}


def _demand_by_kind(lowered: Lowered) -> tuple[int, int, int, int, int]:
    """Reads, writes, bytes read, bytes written and innermost iterations the core issues,
    from the streams alone."""
    reads = writes = bytes_read = bytes_written = inner = 0
    for nest in lowered.nests:
        for access in nest.accesses:
            times = nest.times(access)
            if access.is_write:
                writes += times
                bytes_written += times * access.size
            else:
                reads += times
                bytes_read += times * access.size
        iterations = 1
        for count in nest.counts:
            iterations *= count
        inner += iterations if nest.counts else 0
    return reads, writes, bytes_read, bytes_written, inner


def _demand(lowered: Lowered) -> tuple[int, int, int, int]:
    """Reads, writes, bytes and innermost iterations the core issues, from the streams alone."""
    reads, writes, bytes_read, bytes_written, inner = _demand_by_kind(lowered)
    return reads, writes, bytes_read + bytes_written, inner


def uncached_counters(lowered: Lowered) -> HierarchyCounters:
    """What the engine counts for one run of a kernel on a machine with no cache levels,
    from the streams alone: each demand access is one reference to main memory of its
    own size (ENGINE_SEMANTICS, main memory), so nothing needs replaying and the counts
    are exact at any size, where a replay of a large step would be sampled."""
    reads, writes, bytes_read, bytes_written, _ = _demand_by_kind(lowered)
    return HierarchyCounters([], MemoryCounters(reads, writes, bytes_read, bytes_written), reads + writes)


def build_case_step(case: Case) -> Step:
    """The step a case runs: a single product, or a network's training or inference step."""
    if (case.gemm is None) == (case.network is None):
        raise InputError("a case names exactly one of a network and a GEMM", field="network")
    if case.batch < 1:
        raise InputError(f"batch must be a positive integer, got {case.batch}", field="batch")
    if case.gemm is not None:
        m, n, k = case.gemm
        return gemm_step(m, n, k, case.dtype or "fp32")
    network = case_network(case)
    return build_step(network, case_config(case, network))


def case_network(case: Case) -> Network:
    """The network a case runs: its preset, with the case's attention kernels if it names them."""
    return with_attention(load_network(case.network), case.attention)


def case_config(case: Case, network: Network) -> TrainingConfig:
    """The training configuration a network case runs."""
    return TrainingConfig(
        batch=case.batch,
        updates=case.updates,
        optimizer=case.optimizer,
        dtype=case.dtype or network.dtype,
        checkpoint=case.checkpoint,
        seq_len=case.seq_len,
        phase=case.phase,
        accumulate=case.accumulate,
        grad_dtype=case.grad_dtype,
        fusion=case.fusion,
        context=case.context,
        weights=case.weights,
        kv_dtype=case.kv_dtype,
        weight_group=case.weight_group,
        weight_zero=case.weight_zero,
    )


# Line lookups a step may replay in full; above it, large nests are sampled in proportion
# to their size, none below SAMPLE_FLOOR lookups (so each sample still spans the caches)
STEP_BUDGET = 40_000_000
SAMPLE_FLOOR = 1_000_000
# ... or, on a machine with small caches, CACHE_SPANS times its cache lines (at least
# SAMPLE_FLOOR_MIN): what "spans the caches" needs there, not a GPU's million.
CACHE_SPANS = 64
SAMPLE_FLOOR_MIN = 65_536

# The cost guard. The engine replays between about 17 M (a GPU's tiled step through three
# levels) and 250 M (a machine without caches) first-level line lookups a second on one
# core of the machine this was measured on; ENGINE_RATE is the slow end, so an estimate
# errs long. MAX_LOOKUPS is ten minutes at that rate: a case that would replay more is
# refused before any work unless the caller raises the limit (``--max-lookups``).
ENGINE_RATE = 17e6  # line lookups per second
MAX_LOOKUPS = int(ENGINE_RATE * 600)
# A replay is cut into pieces of about this many lookups where the nest allows it
# (quarter-second pieces: the progress bar moves, and Ctrl-C is seen between pieces).
CHUNK_LOOKUPS = int(ENGINE_RATE / 4)


@dataclass(frozen=True)
class ReplayPlan:
    """What :func:`simulate_step` will replay, worked out before any of it runs.

    ``replays[k][i]`` is ``(warm_up, counted, scale)`` for nest ``i`` of kernel ``k``
    (``LoopNest.sample``; ``(None, nest, 1.0)`` when the nest is replayed whole), and
    ``lookups`` the first-level line lookups of all of it, every pass included: the
    engine's work, counted from the streams alone.
    """

    lowered: list[Lowered]
    passes: int
    replays: list[list[tuple[LoopNest | None, LoopNest, float]]]
    lookups: int
    line: int

    @property
    def seconds(self) -> float:
        """The estimated replay time at :data:`ENGINE_RATE`."""
        return self.lookups / ENGINE_RATE


def plan_replay(machine: Machine, step: Step, *, exact: bool = False) -> ReplayPlan:
    """Lower every kernel and decide what to replay (sampled, or whole when ``exact``).

    When the step's peak live bytes are at most twice the caches' total size, the kernel
    list is replayed once to warm them and counted on the second pass: a training run
    repeats its steps, so the steady state is what a measured step shows. When the step
    needs more than ``STEP_BUDGET`` line lookups, each large nest of a kernel whose data
    takes at least twice the caches gets its share of the budget (at least
    ``SAMPLE_FLOOR``) and is sampled (``LoopNest.sample``), unless ``exact``.
    """
    levels = machine.cache_levels
    line = levels[0].line if levels else 64
    lowered = [lower(kernel, machine.schedule, line_bytes=line) for kernel in step.kernels]
    if not levels:  # nothing to replay: replay_step counts the streams (exact, never sampled)
        return ReplayPlan(lowered=lowered, passes=1, replays=[[(None, nest, 1.0) for nest in low.nests]
                                                              for low in lowered], lookups=0, line=line)
    cache_bytes = sum(level.size for level in levels)
    lines = sum(level.size // level.line for level in levels)
    floor = min(SAMPLE_FLOOR, max(SAMPLE_FLOOR_MIN, CACHE_SPANS * lines))
    passes = 2 if levels and step.ledger.peak <= 2 * cache_bytes else 1
    sizes = [[nest.line_lookups(line) for nest in low.nests] for low in lowered]
    total = sum(map(sum, sizes))
    share = 0.0 if exact or total <= STEP_BUDGET else STEP_BUDGET / total
    replays = []
    lookups = 0
    for kernel, low, nest_sizes in zip(step.kernels, lowered, sizes, strict=True):
        # Sampling replays the start of a nest, so the cache state a kernel inherits
        # and leaves is only approximated: kept to kernels that overflow the caches.
        sample = share and _footprint(kernel) >= 2 * cache_bytes
        row = []
        for nest, n in zip(low.nests, nest_sizes, strict=True):
            budget = max(floor, int(n * share)) if sample else 0
            warm, counted, scale = nest.sample(budget, line) if budget else (None, nest, 1.0)
            row.append((warm, counted, scale))
            lookups += n if counted is nest else (
                counted.line_lookups(line) + (warm.line_lookups(line) if warm is not None else 0))
        replays.append(row)
    return ReplayPlan(lowered=lowered, passes=passes, replays=replays, lookups=lookups * passes, line=line)


class Prepared:
    """Steps and replay plans built in this process, kept for the cases after it that
    share them: the ``size`` most recent of each, and of the plans no more than hold
    ``max_accesses`` loop-nest accesses in all (a plan's memory goes with its accesses:
    about half a kilobyte each, lowered nests and samples included).

    Building a step and lowering its kernels is Python work that a sweep would otherwise
    redo case after case, for a step that many machines run and a plan that every machine
    with the same :func:`engine_fields` shares (the plan is a function of what
    :func:`replay_key` hashes, as the replay is). A case's step is keyed by every option
    but the machine and the dispatch mode, which act in the timing."""

    def __init__(self, size: int = 64, max_accesses: int = 500_000) -> None:
        self.size = size
        self.max_accesses = max_accesses
        self._steps: OrderedDict[Case, Step] = OrderedDict()
        self._plans: OrderedDict[str, ReplayPlan] = OrderedDict()
        self._weights: dict[str, int] = {}  # each kept plan's accesses
        self._accesses = 0  # of the plans kept

    def _keep(self, table: OrderedDict, key: Any, make: Callable[[], Any]) -> Any:
        if key in table:
            table.move_to_end(key)
            return table[key]
        value = table[key] = make()
        if table is self._plans:
            self._weights[key] = _accesses(value)
            self._accesses += self._weights[key]
        while len(table) > self.size or (table is self._plans and self._accesses > self.max_accesses
                                         and len(table) > 1):
            old, _ = table.popitem(last=False)
            if table is self._plans:
                self._accesses -= self._weights.pop(old)
        return value

    def step(self, case: Case) -> Step:
        return self._keep(self._steps, replace(case, machine="", dispatch=None), lambda: build_case_step(case))

    def plan(self, machine: Machine, step: Step, key: str, *, exact: bool = False) -> ReplayPlan:
        """The plan of ``step`` on ``machine``; ``key`` is the case's :func:`replay_key`."""
        return self._keep(self._plans, key, lambda: plan_replay(machine, step, exact=exact))


def _accesses(plan: ReplayPlan) -> int:
    """The loop-nest accesses a plan holds (lowered, and sampled where it samples)."""
    lowered = sum(len(nest.accesses) for low in plan.lowered for nest in low.nests)
    sampled = sum(len(counted.accesses) + (len(warm.accesses) if warm is not None else 0)
                  for row in plan.replays for warm, counted, scale in row if scale != 1.0)
    return lowered + sampled


def check_cost(plan: ReplayPlan, max_lookups: int | None, *, exact: bool = False) -> None:
    """Refuse, with the estimate, a replay over ``max_lookups`` (None: :data:`MAX_LOOKUPS`)."""
    limit = MAX_LOOKUPS if max_lookups is None else max_lookups
    if plan.lookups <= limit:
        return
    hint = "" if exact else " (already sampled: see docs/timing.md)"
    raise InputError(
        f"this step would replay {plan.lookups:.3g} line lookups{hint}, about {duration(plan.seconds)} "
        f"at ~{ENGINE_RATE / 1e6:.0f} M lookups/s; the limit is {limit:.3g}: pass --max-lookups "
        f"{_round_up(plan.lookups)} to run it anyway", field="--max-lookups")


def duration(seconds: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _round_up(n: int) -> int:
    """``n`` rounded up to two significant digits, as a limit a person types."""
    digits = max(0, len(str(n)) - 2)
    return -(-n // 10**digits) * 10**digits


def _pieces(nest: LoopNest, limit: int, line: int) -> Iterator[LoopNest]:
    """``nest`` as consecutive nests that replay the same accesses in the same order.

    Cut along the outermost loop ``d`` that runs more than once (the loops around it run
    once): iterations ``[i, j)`` of loop ``d`` are the nest with that loop's count ``j - i``
    and the bases of the accesses inside it moved by ``i`` strides. The accesses outside
    loop ``d`` (issued once, before or after it) go with the first or the last piece. A
    piece of one iteration that is still too long is cut again one loop further in.
    """
    total = nest.line_lookups(line)
    d = next((i for i, c in enumerate(nest.counts) if c != 1), None)
    if total <= limit or d is None or nest.counts[d] == 0 or not any(a.depth > d for a in nest.accesses):
        yield nest
        return
    count = nest.counts[d]
    step = max(1, count * limit // total)
    if step >= count:
        yield nest
        return
    head, rest = nest.counts[:d], nest.counts[d + 1:]
    for i in range(0, count, step):
        k = min(step, count - i)
        first, last = i == 0, i + k >= count
        accesses = tuple(replace(a, base=a.base + i * a.strides[d]) if a.depth > d else a
                         for a in nest.accesses
                         if a.depth > d or (first and not a.after) or (last and a.after))
        piece = LoopNest(head + (k,) + rest, accesses, nest.label)
        if k == 1:
            yield from _pieces(piece, limit, line)
        else:
            yield piece


def simulate_step(machine: Machine, step: Step, *, exact: bool = False, plan: ReplayPlan | None = None,
                  progress: Callable[[int], Any] | None = None, dispatch: str | None = None,
                  counters: list[HierarchyCounters] | None = None) -> StepTiming:
    """Replay every kernel of a step through the machine's caches and time it.

    What is replayed (warm-up pass, sampling) is :func:`plan_replay`'s; ``progress``, if
    given, is called with the line lookups of each piece as it finishes. ``dispatch``
    names the mode kernels are issued in (None: the profile's default). ``counters``,
    if given, are a replay of this step on a machine with the same :func:`engine_fields`
    (:func:`replay_step`'s answer), used instead of replaying again.
    """
    plan = plan or plan_replay(machine, step, exact=exact)
    if counters is None:
        counters = replay_step(machine, plan, progress)
    timings: list[KernelTiming] = []
    for kernel, low, counts in zip(step.kernels, plan.lowered, counters, strict=True):
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
                dims=kernel.dims,
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
        dispatch=apply_dispatch(machine, timings, step.iterations, dispatch),
    )


def replay_step(machine: Machine, plan: ReplayPlan,
                progress: Callable[[int], Any] | None = None) -> list[HierarchyCounters]:
    """The counters each kernel adds on the plan's last pass (the earlier ones warm the
    caches): the engine's whole answer for a step, which depends on the machine only
    through :func:`engine_fields`."""
    if not machine.cache_levels:
        return [uncached_counters(low) for low in plan.lowered]
    hierarchy = Hierarchy(machine.cache_levels)
    counters: list[HierarchyCounters] = []
    for p in range(plan.passes):
        counts = [_replay(hierarchy, replays, plan.line, progress) for replays in plan.replays]
        if p == plan.passes - 1:
            counters = counts
    return counters


def engine_fields(machine: Machine) -> dict[str, Any]:
    """The parts of a profile that reach the engine: each simulated level's geometry
    and policies, and the schedule that lowers kernels to streams. Bandwidths,
    latencies, peak rates, dispatch costs and the word size act only in the timing, so
    machines that differ only in those (a synthetic bandwidth sweep; an H200 beside an
    H100) replay a step identically and may share one replay."""
    return {
        "levels": [[lv.name, lv.size, lv.line, lv.ways, lv.policy, lv.write, lv.inclusion, lv.seed]
                   for lv in machine.cache_levels],
        "schedule": [machine.schedule.family,
                     {k: v for k, v in sorted(machine.schedule.params.items()) if k not in TIMING_ONLY_SCHEDULE}],
    }


# Schedule fields read by the timing only, never by lowering.
TIMING_ONLY_SCHEDULE = ("bytes_in_flight", "note")


def replay_key(machine: Machine, case: Case, *, exact: bool = False) -> str:
    """What a case's replay depends on, hashed: the model version (engine, lowering and
    workload code), the machine's :func:`engine_fields` and every case option that shapes
    the step (all but the machine and the dispatch mode, which acts in the timing)."""
    from . import MODEL_VERSION

    shape = {k: v for k, v in case.as_dict().items() if k not in ("machine", "dispatch")}
    text = json.dumps({"model": MODEL_VERSION, "engine": engine_fields(machine), "case": shape, "exact": exact},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ReplayCache(Protocol):
    """Replays kept by :func:`replay_key` (a dict, or the sweep's store of them)."""

    def get(self, key: str) -> list[HierarchyCounters] | None: ...

    def put(self, key: str, counters: list[HierarchyCounters]) -> None: ...


def _footprint(kernel: Kernel) -> int:
    """Bytes of the distinct tensors a kernel touches."""
    return sum({t.name: t.bytes for t in (*kernel.reads, *kernel.writes)}.values())


def _replay(hierarchy: Hierarchy, replays: list[tuple[LoopNest | None, LoopNest, float]], line: int,
            progress: Callable[[int], Any] | None) -> HierarchyCounters:
    """The counters one kernel run adds, each nest replayed whole or sampled, as planned."""
    start = hierarchy.snapshot()
    if all(warm is None and scale == 1.0 for warm, _, scale in replays):  # nothing sampled: one difference
        for _, counted, _ in replays:
            _run(hierarchy, counted, line, progress)
        return hierarchy.since(start)
    total = hierarchy.since(start)  # zeros
    for warm, counted, scale in replays:
        if warm is not None:
            _run(hierarchy, warm, line, progress)
        before = hierarchy.snapshot()
        _run(hierarchy, counted, line, progress)
        delta = hierarchy.since(before)
        total = total + (delta.scaled(scale) if scale != 1.0 else delta)
    return total


def _run(hierarchy: Hierarchy, nest: LoopNest, line: int, progress: Callable[[int], Any] | None) -> None:
    for piece in _pieces(nest, CHUNK_LOOKUPS, line):
        hierarchy.replay_nest(piece)
        if progress is not None:
            progress(piece.line_lookups(line))


def _breakdown(compute: float, overhead: float, stall: dict[str, float], clock: float) -> dict:
    total = compute + overhead + sum(stall.values())
    return {
        "total": total * clock,
        "compute": compute * clock,
        "overhead": overhead * clock,
        "stall": {k: v * clock for k, v in stall.items()},
    }


def _verdict(timing: StepTiming) -> str:
    """One line: the largest component of the step's time, and how memory compares with arithmetic."""
    seconds, bound = timing.seconds, timing.bound
    if seconds <= 0:
        return "empty step"
    parts = timing.time_by_component
    share = f"{parts[bound] / seconds:.0%} of the step"
    ratio = timing.memory_ratio
    memory = f"memory time is {ratio:.3g}x arithmetic" if ratio is not None else "no arithmetic"
    d = timing.dispatch
    if bound == COMPUTE:
        return f"arithmetic-bound: {memory} (arithmetic is {share})"
    if bound == DISPATCH and d is not None:
        if d.host_bound:
            return (f"dispatch-bound: the host issues {d.launches} kernels in {format_time(d.host_seconds)} "
                    f"while the device works {format_time(d.device_seconds)} ({d.mode}; {memory})")
        if d.synchronous:
            return (f"dispatch-bound: issuing {d.launches} kernels takes {format_time(d.host_seconds)}, "
                    f"{share} ({d.mode}; {memory})")
        return (f"dispatch-bound: the device's gaps between {d.launches} kernels take "
                f"{format_time(parts[DISPATCH])} of its {format_time(d.device_seconds)} ({d.mode}; {memory})")
    if bound == STARTUP:
        return f"startup-bound: vector start-up is {share} ({memory})"
    if bound == INTERCONNECT:
        return f"interconnect-bound: the device waits on its links for {share} ({memory})"
    if bound == BUBBLE:
        return f"bubble-bound: the pipeline's fill and drain idle the device for {share} ({memory})"
    return f"memory-bound ({bound}): {memory}; {bound} stalls are {share}"


def result_dict(case: Case, step: Step, timing: StepTiming) -> dict:
    """The JSON of ``memwall inspect`` (and the raw material of a sweep row)."""
    machine = timing.machine
    clock = machine.clock_hz
    seconds = timing.seconds
    stall_total = sum(timing.stall.values())
    achieved = timing.flops / seconds if seconds > 0 else 0.0
    per_example_work = timing.connections * timing.examples
    dtype = step.kernels[0].dtype if step.kernels else case.dtype
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
                "bound_class": k.bound_class,
                "memory_ratio": None if k.memory_ratio is None else k.memory_ratio,
                "time_by_component": {n: v * timing.iterations for n, v in k.time_by_component.items()},
                "cycles": _breakdown(
                    k.compute * timing.iterations,
                    (k.overhead + k.dispatch) * timing.iterations,
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
        "dtype": dtype,
        "flops": timing.flops,
        "seconds": seconds,
        "stall_fraction": stall_total / seconds if seconds > 0 else 0.0,
        "fraction_of_peak": achieved / timing.peak,
        "achieved_flops": achieved,
        "peak_flops": timing.peak,
        # the products' measured ceiling ([compute.achievable]), the rate their time is taken at
        "achievable_flops": arithmetic_rate(machine, dtype, "gemm"),
        "cups": per_example_work / seconds if seconds > 0 and timing.phase == "train" else 0.0,
        "cps": per_example_work / seconds if seconds > 0 and timing.phase == "forward" else 0.0,
        "bound": timing.bound,
        "bound_class": timing.bound_class,
        "memory_ratio": timing.memory_ratio,
        "verdict": _verdict(timing),
        "dispatch": _dispatch_dict(timing),
        "time_by_component": timing.time_by_component,
        "cycles": _breakdown(timing.compute, timing.overhead, timing.stall, clock),
        "bytes": timing.bytes,
        "ledger": ledger,
        "capacity": {"memory": capacity, "fits": fits},
        "warnings": _warnings(machine, step, ledger, fits),
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
        # int4's groups: weights a scale covers and the zero points' type (None for other weights)
        "weight_group": cfg.group_format[0] if cfg.group_format else None,
        "weight_zero": (cfg.weight_zero or "none") if cfg.group_format else None,
        "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
        "kv_cache_bytes_per_sequence": per_seq,
        "max_batch_that_fits": fit,
    }
    if cfg.phase == "decode":
        out["seconds_per_token"] = seconds  # each sequence gets one token per step
    else:
        out["time_to_first_token"] = seconds  # the prompt's pass ends with the first token's logits
    return out




def accumulated(timing: StepTiming, k: int) -> StepTiming:
    """One optimizer step from one replayed micro-batch step: every kernel but the update K times.

    The micro-batch kernels and the update were replayed once each; repeating the
    micro-batch K times is a count, not K more replays (the caches see the same kernels
    again)."""
    if k == 1:
        return timing
    kernels = [t if t.phase == "update" else replace(
        t, flops=t.flops * k, repeat=t.repeat * k, compute=t.compute * k, overhead=t.overhead * k,
        stall={n: v * k for n, v in t.stall.items()}, bytes={n: v * k for n, v in t.bytes.items()})
        for t in timing.kernels]
    out = replace(timing, kernels=kernels, examples=timing.examples * k)
    # K micro-batches issue K times the kernels: the dispatch streams follow the counts.
    out.dispatch = apply_dispatch(timing.machine, kernels, timing.iterations,
                                  timing.dispatch.mode if timing.dispatch is not None else None)
    return out


def _per_step(case: Case, step: Step, timing: StepTiming) -> dict:
    """Per micro-batch and per optimizer step: seconds, throughput, MFU and HFU."""
    k = step.config.accumulate
    seconds = timing.seconds
    update = timing.iterations * sum(t.seconds for t in timing.kernels if t.phase == "update")
    micro = (seconds - update) / k
    recompute = timing.iterations * sum(t.flops for t in timing.kernels if t.phase == "recompute")
    model_flops = timing.flops - recompute
    tokens, examples = step.tokens, step.examples

    def rates(s: float, n: int) -> float:
        return n / s if s > 0 else 0.0

    return {
        "accumulate": k,
        "fusion": step.config.fusion,
        "attention": step.network.attention if step.network.is_sequence else None,
        "grad_dtype": step.config.gradient_dtype if step.config.training else None,
        "model_flops": model_flops,
        "mfu": model_flops / seconds / timing.peak if seconds > 0 else 0.0,
        "hfu": timing.flops / seconds / timing.peak if seconds > 0 else 0.0,
        "micro_batch": {"seconds": micro, "examples": examples, "tokens": tokens,
                        "examples_per_second": rates(micro, examples), "tokens_per_second": rates(micro, tokens)},
        "optimizer_step": {"seconds": seconds, "optimizer_seconds": update,
                           "optimizer_share": update / seconds if seconds > 0 else 0.0,
                           "examples": k * examples, "tokens": k * tokens,
                           "examples_per_second": rates(seconds, k * examples),
                           "tokens_per_second": rates(seconds, k * tokens)},
    }


def _seed(step: Step, machine: Machine) -> dict:
    """The seed model's ``a`` of this step and its pole d_min = a.beta/72 on this machine
    (at its primary dtype's balance), and under ``seed`` the whole back-of-the-envelope
    estimate of the step at the step's own dtype (:mod:`memwall.seed`)."""
    traffic = activation_traffic(step)
    out = {"seed": seed_model(step, arithmetic_rate(machine, step.config.dtype, "gemm", achievable=False),
                              machine.memory.bandwidth)}
    if traffic is None:
        return {"a": None, "d_min": None, **out}
    return {"a": traffic["a"], "d_min": d_min(traffic["a"], machine.balance()), **out}




def _dispatch_dict(timing: StepTiming) -> dict:
    d = timing.dispatch
    if d is None:
        return {"mode": None, "host_seconds": 0.0, "device_seconds": timing.seconds}
    return {"mode": d.mode, "host_seconds": d.host_seconds, "device_seconds": d.device_seconds,
            "launches": d.launches, "synchronous": d.synchronous}


def _warnings(machine: Machine, step: Step, ledger: dict, fits: bool) -> list[str]:
    out = []
    if not fits:
        out.append(f"the step needs {ledger['peak']} bytes at its peak but {machine.id} has "
                   f"{machine.memory.capacity} bytes of main memory; simulated as if it fitted")
    dtype = step.kernels[0].dtype if step.kernels else None
    if dtype and word_widening(machine, dtype) > 1:
        out.append(f"{machine.id} has no floating point narrower than its {machine.timing.params.get('word_bytes', 8)}"
                   f"-byte word: each {dtype} element moves as a whole word (bytes and memory time count words; "
                   f"the ledger counts {dtype})")
    return out


def dtype_fallback(machine: Machine, step: Step, *, asked: bool, allow: bool) -> dict | None:
    """None if the machine runs the step's products in their own dtype; else what runs
    instead, with the warning to show. A dtype the user ``asked`` for is refused unless
    ``allow``: a machine without bf16 does not silently become an fp32 run."""
    dtype = step.kernels[0].dtype if step.kernels else None
    if dtype is None or machine.peak_flops.get(dtype):
        return None
    used = rate_dtype(machine, dtype)
    said = (f"{machine.id} has no {dtype} arithmetic (it states {', '.join(sorted(machine.peak_flops))})")
    if asked and not allow:
        raise InputError(f"{said}; choose one of those, or pass --allow-fallback to run the products at "
                         f"its {used} rate", field="--dtype")
    return {"requested": dtype, "used": used,
            "warning": f"{said}: the products run at its {used} rate"
                       + ("" if word_widening(machine, dtype) > 1 else f"; the data move as {dtype}")}


def run_case(case: Case, *, machine: Machine | None = None, exact: bool = False,
             max_lookups: int | None = None, progress: Callable[[int, int], Any] | None = None,
             allow_fallback: bool = False, replays: ReplayCache | None = None,
             prepared: Prepared | None = None) -> dict:
    """Simulate one case; ``machine`` overrides the profile named by ``case.machine``
    (for synthetic machines such as a bandwidth sweep); ``exact`` replays every access
    of every nest instead of sampling the large ones.

    Before any replay the cost is estimated (:func:`plan_replay`) and a case over
    ``max_lookups`` line lookups (None: :data:`MAX_LOOKUPS`) is refused with an
    InputError giving the estimate. ``progress(done, total)``, if given, is called as
    pieces of the replay finish, in line lookups.

    A ``case.dtype`` the machine states no rate for is refused, naming the machine's
    dtypes, unless ``allow_fallback``; then, as for a network's own dtype (which is not
    asked for), the products run at the fallback's rate with a warning and
    ``dtype_fallback`` in the result.

    ``replays``, if given, is asked for this case's replay (:func:`replay_key`) before
    the engine runs and given it after: cases that differ only in what the engine never
    sees (bandwidths, latencies, peaks, dispatch) replay once. ``prepared``, if given,
    supplies the step and the plan when an earlier case built them."""
    if machine is None:
        machine = load_machine(case.machine)
    if case.parallel.devices > 1:
        return run_parallel(case, machine, exact=exact, max_lookups=max_lookups, progress=progress,
                            allow_fallback=allow_fallback)
    step = prepared.step(case) if prepared is not None else build_case_step(case)
    fallback = dtype_fallback(machine, step, asked=case.dtype is not None, allow=allow_fallback)
    key = replay_key(machine, case, exact=exact) if replays is not None or prepared is not None else ""
    plan = prepared.plan(machine, step, key, exact=exact) if prepared is not None else plan_replay(
        machine, step, exact=exact)
    counters = replays.get(key) if replays is not None else None
    if counters is None:
        check_cost(plan, max_lookups, exact=exact)
        counters = replay_step(machine, plan, _ticker(progress, plan.lookups))
        if replays is not None:
            replays.put(key, counters)
    timing = simulate_step(machine, step, plan=plan, dispatch=case.dispatch, counters=counters)
    timing = accumulated(timing, step.config.accumulate)
    result = result_dict(case, step, timing)
    if fallback is not None:
        result["warnings"].append(fallback.pop("warning"))
        result["dtype_fallback"] = fallback
    result.update(_per_step(case, step, timing))
    result.update(_seed(step, machine))
    result.update(devices=1, parallel=case.parallel.as_dict(), interconnect_bytes=0)
    if step.config.serving:
        result["serving"] = serving_dict(step, timing.seconds, machine.memory.capacity)
    return result


def _ticker(progress: Callable[[int, int], Any] | None, total: int, done: int = 0) -> Callable[[int], None] | None:
    """``progress(done, total)`` as a per-piece callback, counting on from ``done``."""
    if progress is None:
        return None

    def tick(n: int) -> None:
        nonlocal done
        done += n
        progress(done, total)

    return tick


def run_parallel(case: Case, machine: Machine, *, exact: bool = False, max_lookups: int | None = None,
                 progress: Callable[[int, int], Any] | None = None, allow_fallback: bool = False) -> dict:
    """A step on dp x tp x pp devices: each distinct device's share replayed once, its
    communication timed by the link model, the pipeline paced by its slowest stage
    (docs/timing.md, "Devices and the interconnect"). The result is the slowest stage's
    device, with the whole step's FLOPs and throughput per device. A dtype the machine
    has no rate for is treated as :func:`run_case` treats it."""
    par = case.parallel
    if case.gemm is not None:
        raise InputError("a single GEMM runs on one device: --dp, --tp and --pp apply to networks", field="dp")
    ic = machine.interconnect
    if ic is None:
        raise InputError(f"machine {machine.id!r} has no [interconnect] table: a {par.devices}-device step "
                         f"(dp {par.dp}, tp {par.tp}, pp {par.pp}) needs its links; run it on one device, or add "
                         "the table (era_data/README.md)", file=str(machine.path or machine.id), field="interconnect")
    network = case_network(case)
    config = case_config(case, network)
    if par.dp > 1 and not config.training and par.zero:
        raise InputError("ZeRO shards training state: it needs phase train", field="zero")
    k = config.accumulate
    steps = device_steps(network, config, par)
    fallback = dtype_fallback(machine, steps[0][1], asked=case.dtype is not None, allow=allow_fallback)
    plans = [plan_replay(machine, st, exact=exact) for _, st in steps]
    total = sum(p.lookups for p in plans)
    check_cost(replace(plans[0], lookups=total), max_lookups, exact=exact)
    share = 1.0 / par.dp if par.zero >= 1 and config.training else 1.0
    times = []
    done = 0
    for (stage, st), plan in zip(steps, plans, strict=True):
        timing = simulate_step(machine, st, plan=plan, progress=_ticker(progress, total, done), dispatch=case.dispatch)
        done += plan.lookups
        timing = sharded_update(accumulated(timing, k), share)
        times.append(time_stage(ic, timing, communication(network, config, par, stage, st.ledger, st.tokens), k))
    b, device = time_pipeline(times, par.pp, k)
    step = steps[b][1]
    result = result_dict(case, step, device)
    result.update(_per_step(case, step, device))
    result.update(_seed(step, machine))
    _whole_step(result, par, steps, times, b, device)
    if fallback is not None:
        result["warnings"].append(fallback.pop("warning"))
        result["dtype_fallback"] = fallback
    if config.serving:  # the replicas' tokens, per device
        serving = serving_dict(step, device.seconds, machine.memory.capacity)
        serving["tokens_per_second"] *= par.dp / par.devices
        result["serving"] = serving
    return result


def _whole_step(result: dict, par: Parallel, steps: list, times: list, b: int, device: StepTiming) -> None:
    """Turn the slowest device's result (stage ``b``'s, as :func:`time_pipeline` chose it)
    into the step's: FLOPs and throughput over every device, its communication, each
    stage's slot and ledger, ZeRO's per-device ledger."""
    machine = device.machine
    seconds = device.seconds
    replicas = par.tp * par.dp
    flops = sum(st.count * replicas * t.timing.flops for (st, _), t in zip(steps, times, strict=True))
    recompute = sum(st.count * replicas * t.timing.iterations * sum(x.flops for x in t.timing.kernels
                                                                    if x.phase == "recompute")
                    for (st, _), t in zip(steps, times, strict=True))
    per_device = flops / seconds / par.devices if seconds > 0 else 0.0
    model = (flops - recompute) / seconds / par.devices if seconds > 0 else 0.0
    stage_rows = []
    for (st, step), t in zip(steps, times, strict=True):
        ledger = shard_ledger(step.ledger, par).as_dict()
        stage_rows.append({"stage": st.name, "count": st.count, "layers": st.layers,
                           "slot_seconds": t.slot, "update_seconds": t.update,
                           "communication_seconds": t.exposed_step, "ledger": ledger,
                           "fits": ledger["peak"] <= machine.memory.capacity})
    ledger = stage_rows[b]["ledger"]
    fits = all(r["fits"] for r in stage_rows)
    cfg = steps[b][1].config
    tokens = par.dp * cfg.accumulate * steps[b][1].tokens
    examples = par.dp * cfg.accumulate * cfg.batch
    comms = [{"name": c.name, "kind": c.kind, "group": c.group, "bytes": c.bytes, "count": c.count,
              "seconds": c.seconds, "exposed": c.exposed, "sent_bytes": c.sent, "overlap": c.overlap}
             for c in times[b].comms]
    result.update(
        devices=par.devices, parallel=par.as_dict(), flops=flops, achieved_flops=per_device,
        fraction_of_peak=per_device / device.peak, mfu=model / device.peak, hfu=per_device / device.peak,
        model_flops=flops - recompute, interconnect_bytes=sum(c.sent for c in times[b].comms),
        communication=comms, stages=stage_rows, ledger=ledger,
        capacity={"memory": machine.memory.capacity, "fits": fits},
        bubble_fraction=bubble_fraction(par.pp, cfg.accumulate),
        global_step={"devices": par.devices, "examples": examples, "tokens": tokens, "seconds": seconds,
                     "examples_per_second": examples / seconds if seconds > 0 else 0.0,
                     "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
                     "tokens_per_second_per_device": tokens / seconds / par.devices if seconds > 0 else 0.0},
    )
    result["warnings"] = [w for w in result["warnings"] if "at its peak" not in w]
    if not fits:
        worst = max(stage_rows, key=lambda r: r["ledger"]["peak"])
        result["warnings"].insert(0, f"a device of stage {worst['stage']} needs {worst['ledger']['peak']} bytes at "
                                     f"its peak but {machine.id} has {machine.memory.capacity} bytes of main memory; "
                                     "simulated as if it fitted")
