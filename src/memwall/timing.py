"""Timing models: from reference counts to cycles of arithmetic and cycles stalled.

Owns: :class:`KernelTraffic` (what one kernel did to each memory level, derived from
the engine's counters and the kernel's streams), :class:`KernelTiming` and
:class:`StepTiming` (cycles: compute, overhead, stall by level), and the four models
:func:`in_order`, :func:`vector`, :func:`overlapped` and :func:`throughput`: one
function each, all with one signature (machine, :class:`KernelWork`,
:class:`KernelTraffic`) -> :class:`ModelTimes`, found by name in :data:`MODELS`. Each
function computes exactly the equations of its section of ``docs/timing.md``; keep the
two in step.

Everything here is in seconds internally; cycles are seconds x the machine's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import InputError

if TYPE_CHECKING:  # only for annotations: timing needs counters' values, not the engine
    from .engine import HierarchyCounters
    from .profiles import Machine

MEMORY = "memory"  # the name main memory goes by in every breakdown
MATRIX_OPS = ("gemm", "gemv", "attention")
DTYPE_FALLBACK = {
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32", "fp64"),
    "fp64": ("fp64", "fp32"),
    # a machine with no 8-bit integer unit runs int8 products at its 16-bit rate
    "int8": ("int8", "fp16", "bf16", "fp32"),
}


@dataclass(frozen=True)
class LevelTraffic:
    """What one memory level served to the level above it, for one kernel run."""

    name: str
    bytes: int  # bytes moved between this level and the one above (both directions)
    fetches: int  # demand line fetches this level served (hits here that came from above)
    bandwidth: float | None  # bytes per second into the level above; None: no limit stated
    latency: float | None  # seconds per fetch served here


@dataclass(frozen=True)
class KernelTraffic:
    """One kernel run's references: demand side from its streams, the rest from the engine."""

    demand_reads: int  # accesses issued by the core
    demand_writes: int
    inner_iterations: int  # iterations of innermost loops (loop-overhead issue cost)
    vector_instructions: int  # strips issued (vector machines' start-up cost)
    levels: tuple[LevelTraffic, ...]  # cache levels, first first, then main memory (named MEMORY)
    parallel_units: int = 0  # pieces of work cores can share; 0: as many as there are cores


def traffic_from_counters(
    machine: Machine,
    counters: HierarchyCounters,
    *,
    demand_reads: int,
    demand_writes: int,
    demand_bytes: int,
    inner_iterations: int = 0,
    vector_instructions: int = 0,
    parallel_units: int = 0,
) -> KernelTraffic:
    """Turn engine counters (for one kernel run) into per-level traffic."""
    levels: list[LevelTraffic] = []
    specs = machine.cache_levels
    above_bytes = demand_bytes
    for spec, c in zip(specs, counters.levels, strict=True):
        if not levels:
            # The first level serves every demand access; its hits are the fetches it served.
            fetches = (c.reads + c.writes) - (c.read_misses + c.write_misses)
        else:
            # Below the first level, reads are fetches from above; writes are write-backs.
            fetches = c.reads - c.read_misses
        levels.append(LevelTraffic(spec.name, above_bytes, fetches, spec.bandwidth, spec.latency))
        above_bytes = c.bytes_in + c.bytes_out
    mem = counters.memory
    levels.append(
        LevelTraffic(
            MEMORY,
            mem.bytes_read + mem.bytes_written if specs else demand_bytes,
            mem.reads,
            machine.memory.bandwidth,
            machine.memory.latency,
        )
    )
    return KernelTraffic(
        demand_reads, demand_writes, inner_iterations, vector_instructions, tuple(levels), parallel_units
    )


@dataclass
class KernelTiming:
    """Seconds of one kernel (all its repeats), split into compute, overhead and stall by level."""

    name: str
    phase: str
    op: str
    flops: int  # all repeats
    repeat: int
    compute: float  # seconds
    overhead: float  # seconds: launch, vector start-up
    stall: dict[str, float]  # seconds by level name (MEMORY for main memory)
    bytes: dict[str, int]  # bytes by level name, all repeats
    terms: dict[str, float] = field(default_factory=dict)  # ModelTimes.terms: one run, not scaled

    @property
    def seconds(self) -> float:
        return self.compute + self.overhead + sum(self.stall.values())

    @property
    def bound(self) -> str:
        """The level that stalls most (a kernel whose data term exceeds its arithmetic is
        bound by memory, however small the excess); else 'overhead' where launch or
        start-up outweighs the arithmetic; else 'compute'."""
        if self.stall and max(self.stall.values()) > 0:
            return max(self.stall, key=lambda k: self.stall[k])
        return "overhead" if self.overhead > self.compute else "compute"


def arithmetic_rate(machine: Machine, dtype: str, op: str) -> float:
    """FLOP/s for an operation: matrix products run at the dtype's peak; the rest at fp32
    (vector units) where the machine states it, since tensor cores and MXUs do only products."""
    if op not in MATRIX_OPS and machine.kind in ("gpu", "tpu", "wafer"):
        order: Sequence[str] = ("fp32", dtype, machine.primary_dtype)
    else:
        order = (*DTYPE_FALLBACK.get(dtype, (dtype,)), machine.primary_dtype)
    for d in order:
        rate = machine.peak_flops.get(d)
        if rate:
            return rate
    raise InputError(f"machine '{machine.id}' states no arithmetic rate for {dtype}")


def _param(machine: Machine, name: str, default: float | str | bool | None = None) -> float | str | bool:
    value = machine.timing.params.get(name, default)
    if value is None:
        raise InputError(
            f"timing model '{machine.timing.model}' needs parameter '{name}'",
            file=str(machine.path or machine.id),
            field=f"timing.{name}",
        )
    return value


@dataclass(frozen=True)
class KernelWork:
    """What one kernel run computes: the model's inputs besides its traffic."""

    op: str  # gemm, gemv, attention, elementwise, ...
    dtype: str
    flops: int
    ops: Mapping[str, int]  # itemised operations (fma, add, sub, mul, div, exp)


@dataclass(frozen=True)
class ModelTimes:
    """One kernel run as a timing model sees it (seconds). ``stall`` and ``terms`` have
    a key for every level of the traffic, in its order; ``terms`` is each level's own
    time term, the time that level alone needs to serve the run's traffic (T_l in
    docs/timing.md)."""

    compute: float
    overhead: float
    stall: dict[str, float]
    terms: dict[str, float]


TimingModel = Callable[["Machine", KernelWork, KernelTraffic], ModelTimes]


def _transfers(traffic: KernelTraffic) -> dict[str, float]:
    """X_l = B_l / beta_l for every level; 0 where the level states no bandwidth."""
    return {lv.name: lv.bytes / lv.bandwidth if lv.bandwidth else 0.0 for lv in traffic.levels}


def _stall_sum(data: float, compute: float, terms: dict[str, float]) -> dict[str, float]:
    """Split ``data - compute`` over the levels in proportion to their terms."""
    if data > compute and data > 0:
        return {k: (data - compute) * t / data for k, t in terms.items()}
    return {k: 0.0 for k in terms}


def _stall_over(data: float, compute: float, terms: dict[str, float]) -> dict[str, float]:
    """Split ``data - compute`` over the levels whose terms exceed ``compute``, in
    proportion to how far each exceeds it."""
    over = {k: t - compute for k, t in terms.items() if t > compute}
    total = sum(over.values())
    if data - compute <= 0 or total <= 0:
        return {k: 0.0 for k in terms}
    return {k: (data - compute) * over.get(k, 0.0) / total for k in terms}


def in_order(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> ModelTimes:
    """Nothing overlaps: issue, then every wait on a level below the first (section
    ``in_order`` of docs/timing.md)."""
    compute = _in_order_compute(machine, work, traffic)
    # With no cache levels, memory (the only level) serves every access and is waited on.
    waited = traffic.levels[1:] or traffic.levels
    latency = {lv.name: lv.fetches * (lv.latency or 0.0) for lv in waited}
    transfer = _transfers(traffic)
    serial = compute + sum(latency.values())
    stall = {k: latency.get(k, 0.0) for k in transfer}
    floor = max(transfer, key=lambda k: transfer[k])
    if transfer[floor] > serial:
        # A bandwidth is a floor: the level it belongs to stalls for the difference too.
        stall[floor] += transfer[floor] - serial
    terms = {k: max(latency.get(k, 0.0), x) for k, x in transfer.items()}
    return ModelTimes(compute, 0.0, stall, terms)


def vector(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> ModelTimes:
    """The chime model: strips of arithmetic against words through the memory ports
    (section ``vector`` of docs/timing.md)."""
    compute = work.flops / arithmetic_rate(machine, work.dtype, work.op)
    word_bytes = float(_param(machine, "word_bytes", 8))
    ports = float(_param(machine, "memory_ports"))
    chaining = bool(_param(machine, "chaining", True))
    startup_cycles = float(_param(machine, "startup", 0.0))
    words = traffic.levels[-1].bytes / word_bytes / ports / machine.clock_hz
    overhead = traffic.vector_instructions * startup_cycles / machine.clock_hz
    # Chained: each strip takes the larger of its arithmetic and its memory words;
    # unchained: the two run one after the other.
    terms = {lv.name: 0.0 for lv in traffic.levels}
    terms[MEMORY] = words
    stall = {k: 0.0 for k in terms}
    stall[MEMORY] = max(0.0, words - compute) if chaining else words
    return ModelTimes(compute, overhead, stall, terms)


def overlapped(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> ModelTimes:
    """Arithmetic overlaps the transfers, each level capped by Little's law (section
    ``overlapped`` of docs/timing.md)."""
    # A whole-chip profile's peak counts every core; a kernel with fewer pieces of
    # work than cores (a per-example product) keeps only that many busy.
    cores = int(_param(machine, "cores", 1))
    busy = min(cores, traffic.parallel_units) if traffic.parallel_units else cores
    compute = work.flops / (arithmetic_rate(machine, work.dtype, work.op) * busy / cores)
    terms = _transfers(traffic)
    # Little's law: with mlp misses in flight on each busy core, a level serves at most
    # mlp x busy fetches per latency, whatever its bandwidth.
    mlp = float(_param(machine, "mlp", 1)) * busy
    for lv in traffic.levels[1:]:
        if lv.latency:
            terms[lv.name] = max(terms[lv.name], lv.fetches * lv.latency / mlp)
    how = _param(machine, "overlap", "sum")
    if how == "sum":
        stall = _stall_sum(sum(terms.values()), compute, terms)
    elif how == "max":
        stall = _stall_over(max(terms.values()), compute, terms)
    else:
        raise InputError(f"overlap must be 'sum' or 'max', got {how!r}", field="timing.overlap")
    return ModelTimes(compute, 0.0, stall, terms)


def throughput(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> ModelTimes:
    """Arithmetic overlaps every transfer; the slowest level bounds the data; a flat
    launch overhead per kernel (section ``throughput`` of docs/timing.md)."""
    compute = work.flops / arithmetic_rate(machine, work.dtype, work.op)
    overhead = float(_param(machine, "launch_overhead", 0.0))
    terms = _transfers(traffic)
    stall = _stall_over(max(terms.values()), compute, terms)
    return ModelTimes(compute, overhead, stall, terms)


# The timing models by the name a profile's [timing] model gives.
MODELS: dict[str, TimingModel] = {
    "in_order": in_order,
    "vector": vector,
    "overlapped": overlapped,
    "throughput": throughput,
}


def time_kernel(
    machine: Machine,
    *,
    name: str,
    phase: str,
    op: str,
    dtype: str,
    flops: int,
    ops: Mapping[str, int],
    traffic: KernelTraffic,
    repeat: int = 1,
) -> KernelTiming:
    """Time one kernel run by the machine's model, then scale by ``repeat``."""
    model = MODELS.get(machine.timing.model)
    if model is None:
        raise InputError(f"unknown timing model {machine.timing.model!r}", field="timing.model")
    t = model(machine, KernelWork(op, dtype, flops, ops), traffic)
    return KernelTiming(
        name=name,
        phase=phase,
        op=op,
        flops=flops * repeat,
        repeat=repeat,
        compute=t.compute * repeat,
        overhead=t.overhead * repeat,
        stall={k: v * repeat for k, v in t.stall.items()},
        bytes={lv.name: lv.bytes * repeat for lv in traffic.levels},
        terms=t.terms,
    )


def _in_order_compute(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> float:
    """Issue time with a perfect memory: every operation, load, store and loop pays its cost."""
    costs = machine.issue_costs
    if not costs:
        return work.flops / arithmetic_rate(machine, work.dtype, work.op)
    seconds = 0.0
    counted_flops = 0
    for kind, count in work.ops.items():
        if kind == "fma":
            if "fma" in costs:
                seconds += count * costs["fma"]
            else:
                seconds += count * (_cost(machine, "fmul") + _cost(machine, "fadd"))
            counted_flops += 2 * count
        elif kind in ("add", "sub"):
            seconds += count * _cost(machine, "fadd")
            counted_flops += count
        elif kind == "mul":
            seconds += count * _cost(machine, "fmul")
            counted_flops += count
        elif kind == "div":
            seconds += count * _cost(machine, "fdiv")
            counted_flops += count
        elif kind == "exp":
            seconds += count * _cost(machine, "exp")
            counted_flops += count
    if counted_flops < work.flops:
        # Operations the kernel did not itemise run at the machine's stated rate.
        seconds += (work.flops - counted_flops) / arithmetic_rate(machine, work.dtype, work.op)
    seconds += traffic.demand_reads * costs.get("load", 0.0)
    seconds += traffic.demand_writes * costs.get("store", 0.0)
    seconds += traffic.inner_iterations * costs.get("loop", 0.0)
    return seconds


def _cost(machine: Machine, op: str) -> float:
    costs = machine.issue_costs
    if op in costs:
        return costs[op]
    if op == "exp" and "fdiv" in costs:
        return 10 * costs["fdiv"]  # no stated cost: an exponential as ten divides (documented)
    rate = arithmetic_rate(machine, machine.primary_dtype, "gemm")
    return 1.0 / rate


@dataclass
class StepTiming:
    """A whole step: its kernels' timings summed, with the headline figures."""

    machine: Machine
    kernels: list[KernelTiming]
    iterations: int  # the kernel list runs this many times (per-example updates)
    examples: int
    connections: int
    phase: str
    peak: float  # FLOP/s the fraction of peak is taken against

    def _sum(self, attr: str) -> float:
        return self.iterations * sum(getattr(k, attr) for k in self.kernels)

    @property
    def flops(self) -> int:
        return self.iterations * sum(k.flops for k in self.kernels)

    @property
    def compute(self) -> float:
        return self._sum("compute")

    @property
    def overhead(self) -> float:
        return self._sum("overhead")

    def _by_level(self, attr: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for k in self.kernels:
            for name, v in getattr(k, attr).items():
                out[name] = out.get(name, 0) + self.iterations * v
        return out

    @property
    def stall(self) -> dict[str, float]:
        return self._by_level("stall")

    @property
    def bytes(self) -> dict[str, float]:
        return self._by_level("bytes")

    @property
    def seconds(self) -> float:
        return self.compute + self.overhead + sum(self.stall.values())

    @property
    def bound(self) -> str:
        """What most of the step's time is bound by: each kernel's seconds count for its own bound."""
        seconds: dict[str, float] = {}
        for k in self.kernels:
            seconds[k.bound] = seconds.get(k.bound, 0.0) + k.seconds
        return max(seconds, key=lambda b: seconds[b]) if seconds else "compute"
