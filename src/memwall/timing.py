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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .vocabulary import DISPATCH_MODES, DTYPE_BITS, DTYPE_BYTES

if TYPE_CHECKING:  # only for annotations: timing needs counters' values, not the engine
    from .engine import HierarchyCounters
    from .frameworks import Framework
    from .profiles import Machine

MEMORY = "memory"  # the name main memory goes by in every breakdown
MATRIX_OPS = ("gemm", "gemv", "attention")
# Machines whose kernels are issued by a separate host, asynchronously (docs/timing.md,
# "Dispatch"); on the others the core that computes also issues, so dispatch adds.
ASYNC_KINDS = ("gpu", "tpu", "wafer", "array")
# Machines whose schedule tiles are the hardware's unit of work (thread blocks, MXU
# passes), so a kernel runs in waves of them. A wafer's or an array's tiles only shape the
# traffic: their compilers spread each kernel over every PE (one connection per PE on
# the CM-2, one pattern per cell on Warp and GF11), so they keep every unit busy.
WAVE_KINDS = ("gpu", "tpu")
# The components a kernel's or a step's time is made of, besides the memory levels; a
# multi-device step adds the exposed communication and the pipeline bubble.
COMPUTE, DISPATCH, STARTUP, FRAMEWORK = "compute", "dispatch", "startup", "framework"
POWER = "power"  # a binding class only: the rated power holds the clock (memwall.simulation.power)
INTERCONNECT, BUBBLE = "interconnect", "bubble"
NAMED_COMPONENTS = (COMPUTE, DISPATCH, FRAMEWORK, STARTUP, INTERCONNECT, BUBBLE)
DTYPE_FALLBACK = {
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32", "fp64"),
    "fp64": ("fp64", "fp32"),
    # a machine with no 8-bit integer unit runs int8 products at its 16-bit rate
    "int8": ("int8", "fp16", "bf16", "fp32"),
    # fp6 and fp4 products: Blackwell runs fp6 at its fp8 rate; a machine without either
    # runs them at the next wider type's
    "fp6": ("fp6", "fp8", "bf16", "fp16", "fp32"),
    "fp4": ("fp4", "fp6", "fp8", "bf16", "fp16", "fp32"),
    # the block-scaled formats run at their elements' rate (memwall.vocabulary.BLOCK_FORMATS)
    "mxfp8": ("fp8", "bf16", "fp16", "fp32"),
    "mxfp6": ("fp6", "fp8", "bf16", "fp16", "fp32"),
    "mxfp4": ("fp4", "fp6", "fp8", "bf16", "fp16", "fp32"),
    "nvfp4": ("fp4", "fp6", "fp8", "bf16", "fp16", "fp32"),
}


@dataclass(frozen=True)
class LevelTraffic:
    """What one memory level served to the level above it, for one kernel run."""

    name: str
    bytes: int  # bytes moved between this level and the one above (both directions)
    fetches: int  # demand line fetches this level served (hits here that came from above)
    bandwidth: float | None  # bytes per second into the level above; None: no limit stated
    latency: float | None  # seconds per fetch served here
    scope: str = "chip"  # the bandwidth is the whole chip's ("chip") or one core's ("core")


@dataclass(frozen=True)
class KernelTraffic:
    """One kernel run's references: demand side from its streams, the rest from the engine."""

    demand_reads: int  # accesses issued by the core
    demand_writes: int
    inner_iterations: int  # iterations of innermost loops (loop-overhead issue cost)
    vector_instructions: int  # strips issued (vector machines' start-up cost)
    levels: tuple[LevelTraffic, ...]  # cache levels, first first, then main memory (named MEMORY)
    parallel_units: int = 0  # pieces of work cores can share; 0: as many as there are cores
    demand_read_bytes: int | None = None  # bytes of the demand reads; None: D x R / (R + W)
    strides: tuple[tuple[int, int], ...] = ()  # (stride in elements, elements) of strided vector loads
    tiling: Any = None  # a product's Tiling where the L2 charges its tiles (served_by_tiles), else None


def _read_bytes(demand_bytes: int, reads: int, writes: int, read_bytes: int | None) -> float:
    """Bytes of the demand that are read: ``read_bytes`` where the lowering counted them,
    else the demand split by access counts, D x R / (R + W)."""
    if read_bytes is not None:
        return read_bytes
    return demand_bytes * reads // (reads + writes) if reads + writes else 0


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
    demand_read_bytes: int | None = None,
    strides: tuple[tuple[int, int], ...] = (),
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
        levels.append(LevelTraffic(spec.name, above_bytes, fetches, spec.bandwidth, spec.latency,
                                   getattr(spec, "bandwidth_scope", "chip")))
        above_bytes = c.bytes_in + c.bytes_out
    mem = counters.memory
    moved = mem.bytes_read + mem.bytes_written if specs else demand_bytes
    written_bytes = mem.bytes_written if specs else moved - _read_bytes(moved, demand_reads, demand_writes,
                                                                       demand_read_bytes)
    written = written_bytes / moved if moved else 0.0
    levels.append(
        LevelTraffic(
            MEMORY,
            moved,
            mem.reads,
            # the rate a stream of this read/write mix sustains, else the peak (docs/timing.md)
            machine.memory.sustained_for(written),
            machine.memory.latency,
        )
    )
    return KernelTraffic(
        demand_reads, demand_writes, inner_iterations, vector_instructions, tuple(levels), parallel_units,
        demand_read_bytes, tuple(strides),
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
    overhead: float  # seconds: the model's own (a vector machine's start-up)
    stall: dict[str, float]  # seconds by level name (MEMORY for main memory)
    bytes: dict[str, int]  # bytes by level name, all repeats
    terms: dict[str, float] = field(default_factory=dict)  # ModelTimes.terms: one run, not scaled
    dispatch: float = 0.0  # seconds: this kernel's share of the step's dispatch (apply_dispatch)
    framework: float = 0.0  # seconds: its share of the framework's own exposed time (apply_dispatch)
    dtype: str = ""  # the kernel's arithmetic type (its energy per operation is this type's)

    def repeated(self, k: int) -> KernelTiming:
        """This kernel's run k times over (K micro-batches accumulated): its FLOPs, repeats,
        seconds and bytes times k, the rest as they are. Built field by field rather than by
        dataclasses.replace, which costs several times more and runs for every kernel of
        every stage on every machine a sensitivity times (tests/test_accumulation.py holds
        the two equal and the field list to this one)."""
        return KernelTiming(self.name, self.phase, self.op, self.flops * k, self.repeat * k, self.compute * k,
                            self.overhead * k, {n: v * k for n, v in self.stall.items()},
                            {n: v * k for n, v in self.bytes.items()}, self.terms, self.dispatch, self.framework,
                            self.dtype)

    @property
    def work_seconds(self) -> float:
        """The kernel's own time on the device, without dispatch (t_k in docs/timing.md)."""
        return self.compute + self.overhead + sum(self.stall.values())

    @property
    def seconds(self) -> float:
        return self.work_seconds + self.dispatch + self.framework

    @property
    def time_by_component(self) -> dict[str, float]:
        return {COMPUTE: self.compute, DISPATCH: self.dispatch, FRAMEWORK: self.framework, STARTUP: self.overhead,
                **self.stall}

    @property
    def bound(self) -> str:
        """The resource that sets the kernel's time: the longest of its components, each
        level counted at its own time term (all repeats) where that is longer than its
        exposed stall. Where overlap hides a level's transfers behind the arithmetic, the
        split charges the hidden part to compute, so a kernel whose memory time is 1.8x its
        arithmetic can show a larger compute share; it is still memory that binds it
        (docs/timing.md, "A kernel's bound")."""
        times = dict(self.time_by_component)
        for level, term in self.terms.items():
            times[level] = max(times.get(level, 0.0), term * self.repeat)
        return largest(times)

    @property
    def bound_class(self) -> str:
        return bound_class(self.bound)

    @property
    def memory_time(self) -> float:
        """max over levels of each level's time term, all repeats (the numerator of memory_ratio)."""
        return max(self.terms.values(), default=0.0) * self.repeat

    @property
    def memory_ratio(self) -> float | None:
        return self.memory_time / self.compute if self.compute > 0 else None


def largest(components: Mapping[str, float]) -> str:
    """The name with the most seconds (the first such, so compute wins a tie)."""
    return max(components, key=lambda k: components[k]) if components else COMPUTE


def bound_class(bound: str) -> str:
    """compute, dispatch, startup, interconnect or bubble as named; any memory level's name is 'memory'."""
    return bound if bound in NAMED_COMPONENTS else "memory"


def arithmetic_rate(machine: Machine, dtype: str, op: str, *, achievable: bool = True) -> float:
    """FLOP/s for an operation: matrix products run at the dtype's peak, or at its measured
    ceiling ([compute.achievable], the boost-clock burst) where that is lower and
    ``achievable`` holds, and on a machine held at its power limit (``power_saturated``: a
    training step) at its power-saturated ceiling ([compute.sustained]) where that is lower
    still; the rest at the vector units' rate ([compute.vector], by the dtype's fallback
    order) where the profile states one, else at fp32 where the machine states it, since
    tensor cores and MXUs do only products. Each at ``power_scale`` of that where the
    power limit holds the clock down (:func:`memwall.simulation.power.power_held`); the
    datasheet peak (``achievable`` False), which utilisation is quoted against, is not."""
    rate = _burst_rate(machine, dtype, op, achievable=achievable)
    return rate * machine.power_scale if achievable else rate


def _burst_rate(machine: Machine, dtype: str, op: str, *, achievable: bool) -> float:
    if op not in MATRIX_OPS and machine.vector_flops:
        for d in DTYPE_FALLBACK.get(dtype, (dtype,)):
            rate = machine.vector_flops.get(d)
            if rate:
                return rate
    if op not in MATRIX_OPS and machine.kind in ("gpu", "tpu", "wafer"):
        for d in ("fp32", dtype, machine.primary_dtype):
            if machine.peak_flops.get(d):
                return machine.peak_flops[d]
    rated = rate_dtype(machine, dtype)
    if not achievable or op not in MATRIX_OPS:
        return machine.peak_flops[rated]
    rate = _product_ceiling(machine, rated)
    if machine.power_saturated and rated in machine.sustained_flops:
        rate = min(rate, machine.sustained_flops[rated])
    return rate


def _product_ceiling(machine: Machine, rated: str) -> float:
    """A product's burst ceiling in the ``[compute]`` dtype ``rated``: its peak, or its
    measured ceiling ([compute.achievable]) where lower."""
    peak = machine.peak_flops[rated]
    return min(peak, machine.achievable_flops.get(rated, peak))


def instruction_rate(machine: Machine) -> float:
    """32-bit instructions a second the vector units issue, summed over lanes: the fp32
    vector rate ([compute.vector] fp32, else the fp32 peak: :func:`arithmetic_rate`) over
    the 2 FLOPs of one fused multiply-add. No profile states an integer rate, so integer,
    logic and shift instructions are taken at the FMA's rate: so they are on compute
    capability 8.0 (A100: 64 results a clock an SM for each, CUDA C++ Programming Guide,
    'Arithmetic Instructions'); where fp32 issues at twice the integer rate (9.0, H100:
    128 against 64) this is optimistic for the integer part."""
    return arithmetic_rate(machine, "fp32", "elementwise") / 2


def rate_dtype(machine: Machine, dtype: str) -> str:
    """The dtype whose ``[compute]`` rate runs a product in ``dtype``: itself where the
    machine states it, else the first of its fallbacks (:data:`DTYPE_FALLBACK`) that it
    does, else the machine's primary dtype."""
    for d in (*DTYPE_FALLBACK.get(dtype, (dtype,)), machine.primary_dtype):
        if machine.peak_flops.get(d):
            return d
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
    dims: tuple[int, int, int] | None = None  # a product's (M, N, K)
    instructions: float = 0.0  # vector-unit instructions at the 32-bit rate beyond the FLOPs (dequantization)


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
    """The chime model: strips of arithmetic against words through the memory ports, the
    ports slowed where a strided stream keeps returning to busy banks, and the scalar loop
    around the strips (section ``vector`` of docs/timing.md)."""
    compute = work.flops / arithmetic_rate(machine, work.dtype, work.op)
    word_bytes = float(_param(machine, "word_bytes", 8))
    ports = float(_param(machine, "memory_ports"))
    chaining = bool(_param(machine, "chaining", True))
    startup_cycles = float(_param(machine, "startup", 0.0))
    # An element narrower than a word still takes a whole word where the machine has no
    # sub-word floating point (the Crays): B_memory counts the dtype's bytes.
    words = traffic.levels[-1].bytes * word_widening(machine, work.dtype) / word_bytes / ports / machine.clock_hz
    words += bank_conflicts(machine, traffic.strides) / machine.clock_hz
    loop = float(machine.timing.params.get("strip_loop", 0.0) or 0.0)
    overhead = (traffic.vector_instructions * startup_cycles + traffic.inner_iterations * loop) / machine.clock_hz
    # Chained: each strip takes the larger of its arithmetic and its memory words;
    # unchained: the two run one after the other.
    terms = {lv.name: 0.0 for lv in traffic.levels}
    terms[MEMORY] = words
    stall = {k: 0.0 for k in terms}
    stall[MEMORY] = max(0.0, words - compute) if chaining else words
    return ModelTimes(compute, overhead, stall, terms)


def bank_conflicts(machine: Machine, strides: Sequence[tuple[int, int]]) -> float:
    """Cycles the memory ports lose to busy banks: a stream of stride s (in words) visits
    banks / gcd(s, banks) banks in turn, so each element waits until its bank, last used
    that many references before, is free: max(0, bank_busy x gcd / banks - 1 / ports)
    cycles per element beyond the port's own."""
    banks = int(machine.timing.params.get("banks", 0) or 0)
    busy = float(machine.timing.params.get("bank_busy", 0.0) or 0.0)
    if not banks or not busy:
        return 0.0
    per_port = 1.0 / float(_param(machine, "memory_ports"))
    return sum(n * max(0.0, busy * math.gcd(abs(s), banks) / banks - per_port) for s, n in strides if s)


def vector_streams(nests: Sequence[Any], word_bytes: int = 8) -> tuple[int, tuple[tuple[int, int], ...]]:
    """From a vector lowering's loop nests: the strip loop's iterations, and the strided
    vector loads as (stride in words, elements). A strided strip is lowered as its
    elements in an innermost loop (one element-sized read each, no wider read beside it);
    that element loop is the vector load itself, not an iteration of the strip loop."""
    iterations = 0
    strided: dict[int, int] = {}
    for nest in nests:
        counts = tuple(nest.counts)
        full = len(counts)
        deepest = [a for a in nest.accesses if a.depth == full and not a.is_write]
        total = math.prod(counts) if counts else 0
        if full and deepest and all(a.rows == 1 and a.strides[-1] not in (0, a.size) for a in deepest) \
                and not any(a.depth == full and a.size > deepest[0].size for a in nest.accesses):
            iterations += total // counts[-1] if counts[-1] else 0
            for a in deepest:
                stride = max(1, abs(a.strides[-1]) // max(1, min(a.size, word_bytes)))
                strided[stride] = strided.get(stride, 0) + nest.times(a)
        else:
            iterations += total
    return iterations, tuple(sorted(strided.items()))


def word_widening(machine: Machine, dtype: str) -> float:
    """How many times its dtype's bytes an element occupies: word / element where the
    machine has no floating point narrower than its word (``subword_float = false``), else 1."""
    if machine.timing.model != "vector" or machine.timing.params.get("subword_float", True):
        return 1.0
    word = float(machine.timing.params.get("word_bytes", 8))
    size = DTYPE_BYTES.get(dtype, word)
    return max(1.0, word / size)


def overlapped(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> ModelTimes:
    """Arithmetic overlaps the transfers, each level capped by Little's law; the core's
    multiply-add issue and its load/store ports where the profile states them (section
    ``overlapped`` of docs/timing.md)."""
    # A whole-chip profile's peak counts every core; a kernel with fewer pieces of
    # work than cores (a per-example product) keeps only that many busy.
    cores = int(_param(machine, "cores", 1))
    busy = min(cores, traffic.parallel_units) if traffic.parallel_units else cores
    rate = arithmetic_rate(machine, work.dtype, work.op) * busy / cores
    compute = work.flops / rate
    core_hz = machine.clock_hz * busy  # cycles per second of the busy cores together
    lanes = _lanes(machine, work.dtype)
    mac_cycles = machine.timing.params.get("multiply_add_cycles")
    fma = int(work.ops.get("fma", 0))
    if mac_cycles and fma:
        # Each multiply-add holds the FP issue for mac_cycles per `lanes` of them (the
        # P6's x87 FMUL holds port 0 two cycles, its FADD one); the rest at the rate.
        issue = fma / lanes * float(mac_cycles) / core_hz + max(0, work.flops - 2 * fma) / rate
        compute = max(compute, issue)
    outer = machine.timing.params.get("outer_product")
    if outer and work.op == "gemm" and work.dims is not None and work.dims[2] == 1:
        # A host whose library runs a K = 1 product in its own loop, not the BLAS
        # (numpy.matmul): one multiply-add an output element, at the measured time each;
        # what else the kernel does (a weight update fused into it) at the rate.
        outputs = fma or work.flops // 2
        compute = outputs * float(outer) + max(0, work.flops - 2 * outputs) / rate
    elif work.op == "gemm" and work.dims is not None:
        compute /= product_efficiency(machine, work.dims)
    terms = {lv.name: lv.bytes / (lv.bandwidth * (busy if lv.scope == "core" else 1)) if lv.bandwidth else 0.0
             for lv in traffic.levels}
    load_ports = machine.timing.params.get("load_ports")
    if load_ports and traffic.levels:
        # The first level serves the core through its load and store ports: one element
        # (x87), or up to a vector register of them, per instruction.
        first = traffic.levels[0].name
        terms[first] = max(terms[first], _port_time(machine, work.dtype, traffic, float(load_ports)) / core_hz)
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


def _lanes(machine: Machine, dtype: str) -> float:
    """Elements of ``dtype`` one FP instruction or one load works on: ``vector_bytes`` /
    element bytes, 1 where the profile states no vector width (x87) or the element is wider."""
    width = float(machine.timing.params.get("vector_bytes", 0) or 0)
    return max(1.0, width / DTYPE_BYTES.get(dtype, width or 1)) if width else 1.0


def _port_time(machine: Machine, dtype: str, traffic: KernelTraffic, load_ports: float) -> float:
    """Cycles (all busy cores together) the load and store ports take for the demand:
    max(loads / load_ports, stores / store_ports), each access at least one instruction
    and a wider one a register's width per instruction."""
    store_ports = float(machine.timing.params.get("store_ports", load_ports))
    demand = traffic.levels[0].bytes
    read_bytes = _read_bytes(demand, traffic.demand_reads, traffic.demand_writes, traffic.demand_read_bytes)
    width = _lanes(machine, dtype) * DTYPE_BYTES.get(dtype, 4)
    loads = max(traffic.demand_reads, read_bytes / width)
    stores = max(traffic.demand_writes, (demand - read_bytes) / width)
    return max(loads / load_ports, stores / store_ports)


def product_efficiency(machine: Machine, dims: tuple[int, int, int]) -> float:
    """The fraction of the peak an (M, N, K) product reaches, by the profile's measured
    ``efficiency_mn`` (at min(M, N)) and ``efficiency_k`` (at K), the smaller of the two;
    log2-linear between points, the end points' values beyond them; 1 where unstated."""
    out = 1.0
    for key, d in (("efficiency_mn", min(dims[0], dims[1])), ("efficiency_k", dims[2])):
        curve = machine.timing.params.get(key)
        if not curve or d < 1:
            continue
        x, (x0, f0) = math.log2(d), curve[0]
        f = f0 if x <= math.log2(x0) else curve[-1][1]
        for (a, fa), (b, fb) in zip(curve, curve[1:], strict=False):
            if math.log2(a) <= x <= math.log2(b):
                f = fa + (fb - fa) * (x - math.log2(a)) / (math.log2(b) - math.log2(a))
                break
        out = min(out, f)
    return out


def throughput(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> ModelTimes:
    """Arithmetic overlaps every transfer; the slowest level bounds the data; tiles run in
    waves over the units, and a level's bandwidth is capped by the bytes the busy units
    keep in flight (section ``throughput`` of docs/timing.md)."""
    compute = work.flops / arithmetic_rate(machine, work.dtype, work.op)
    units = int(machine.schedule.params.get("units", 0)) if machine.schedule.family == "tiled" else 0
    tiles = traffic.parallel_units if machine.kind in WAVE_KINDS else 0
    busy, workspace = units, 0
    if units and tiles:
        tiling = None
        if work.op in ("gemm", "gemv") and work.dims and min(work.dims) > 0:
            from .workloads.lowering import (  # lazy: lowering imports profiles
                params_of,
                product_tiling,
                split_bytes,
            )
            batch = _product_batch(work)
            params = params_of(machine.schedule)
            if traffic.tiling is not None:  # the L2 charges its tiles: the pick served_by_tiles made
                tiling = traffic.tiling
                tiles = tiling.tiles
            else:
                tiling = product_tiling(work.dims, batch, work.dtype, params)
        # ceil(tiles / units) waves, each as long as one tile on one unit.
        compute *= -(-tiles // units) * units / tiles
        busy = min(units, tiles)
        if tiling is not None:
            # Tile quantization: every tile computes its whole tm x tn x k_slice block,
            # padding included, in the tile shape the library picks (product_tiling).
            if params.get("tile_shapes") and work.op == "gemm":
                # only where the profile states its library's tiles: a lone tile_m x tile_n
                # is a modelling choice for the waves, not the only kernel the library has.
                # A product with one row or column (op gemv) is not padded to a tile: cuBLAS
                # runs an M = 1 product as a split-K dot kernel and a reduction (profiled
                # in microsoft/onnxruntime PR #28986, 2026), which the split-K below times.
                compute *= tiling.padding(work.dims)
            if tiling.splits > 1:
                # Parallel split-K: each K slice writes its fp32 partial output to a workspace
                # and a reduction kernel reads them all back (CUTLASS GemmSplitKParallel +
                # ReduceSplitK): traffic the replayed streams do not carry.
                workspace = split_bytes(tiling, work.dims, batch)
    if work.instructions:
        # A weight-only product widens its weights on the vector units, beside the matrix
        # units' products: the slower of the two bounds the arithmetic, in the same waves.
        vector = work.instructions / instruction_rate(machine)
        if units and tiles:
            vector *= -(-tiles // units) * units / tiles
        compute = max(compute, vector)
    in_flight = float(machine.schedule.params.get("bytes_in_flight", 0.0))
    into = _workspace_level(machine, workspace)
    if into not in {lv.name for lv in traffic.levels}:
        into = MEMORY
    terms = {}
    for lv in traffic.levels:
        moved = lv.bytes + (workspace if lv.name == into else 0)
        if in_flight and busy and lv.latency:
            terms[lv.name] = _capped_seconds(moved, lv.bandwidth, in_flight, lv.latency, busy, units, tiles)
        else:
            terms[lv.name] = moved / lv.bandwidth if lv.bandwidth else 0.0
    stall = _stall_over(max(terms.values()), compute, terms)
    return ModelTimes(compute, 0.0, stall, terms)


def tile_l2_cost(machine: Machine, dtype: str) -> Any:
    """What the L2 charges a product's tiles in ``dtype`` on ``machine``
    (:class:`memwall.workloads.lowering.L2Cost`), or None where it charges nothing: a
    profile without ``tile_shapes`` or without a bandwidth on its first cache level (the
    level tiles are staged from). The balance is the device's burst product rate (its
    peak, or its measured ceiling where lower) over that bandwidth: a library's kernel
    choice is fixed per device and shape, not per power state, so the lowering's trace and
    the timing pick the same tile for a step whatever clock it runs at."""
    from .workloads.lowering import L2Cost, for_dtype  # lazy: lowering imports profiles

    params = machine.schedule.params
    if machine.schedule.family != "tiled" or not params.get("tile_shapes") or not machine.cache_levels:
        return None
    first = machine.cache_levels[0]
    if not first.bandwidth:
        return None
    multicast = for_dtype(params.get("multicast"), dtype, 1)
    rate = _product_ceiling(machine, rate_dtype(machine, dtype))  # the burst ceiling, whatever the power state
    return L2Cost(rate / first.bandwidth, _element_bytes(dtype), int(multicast))


def served_by_tiles(machine: Machine, work: KernelWork, traffic: KernelTraffic) -> KernelTraffic:
    """``traffic`` with the tiling its product runs in (the one the L2's charge picks, as
    the lowering picked it) and its first cache level's bytes raised to what that level
    serves the tiles. The engine sees a wave's union of tile loads (what the L2 holds and
    main memory serves); every thread block reads its own tiles into its own shared
    memory, so the L2 serves their sum (:meth:`memwall.workloads.lowering.Tiling.l2_reads`)
    and the product's output (docs/timing.md, "The L2 serves every tile"). Unchanged where
    the L2 charges nothing (:func:`tile_l2_cost`) or the engine counted more."""
    if not traffic.levels or traffic.levels[0].name == MEMORY:
        return traffic  # no cache between the tiles and main memory
    from .workloads.lowering import (  # lazy: lowering imports profiles
        params_of,
        product_tiling,
        tiles_read_from_l2,
    )

    l2 = tile_l2_cost(machine, work.dtype) if tiles_read_from_l2(work.op, work.dims) else None
    if l2 is None:
        return traffic

    assert work.dims is not None
    batch = _product_batch(work)
    tiling = product_tiling(work.dims, batch, work.dtype, params_of(machine.schedule), l2)
    served = round(tiling.l2_reads(work.dims, batch, l2.operand_bytes, l2.multicast) + _output_bytes(work))
    first = traffic.levels[0]
    if served > first.bytes:
        first = replace(first, bytes=served)
    return replace(traffic, levels=(first, *traffic.levels[1:]), tiling=tiling)


def _product_batch(work: KernelWork) -> int:
    """The items of a batched product: its FLOPs are 2 x batch x M x N x K."""
    assert work.dims is not None
    m, n, k = work.dims
    return max(1, round(work.flops / (2 * m * n * k)))


def _output_bytes(work: KernelWork) -> float:
    """Bytes of a product's output at its dtype's width: batch x M x N = F / (2 K) elements."""
    assert work.dims is not None
    return work.flops / (2 * work.dims[2]) * _element_bytes(work.dtype)


def _element_bytes(dtype: str) -> float:
    """Bytes an element of a product's ``dtype`` takes (a block format's elements alone;
    16-bit for a type without a stated width)."""
    return DTYPE_BITS.get(dtype, 16) / 8


def _capped_seconds(moved: float, bandwidth: float, in_flight: float, latency: float, busy: int, units: int,
                    tiles: int) -> float:
    """Seconds a level takes to move ``moved`` bytes for ``tiles`` tiles run in waves over
    ``units`` units (``busy`` of them at once), each busy unit drawing at most its
    ``in_flight`` bytes a ``latency`` (Little's law), the level at most ``bandwidth`` (0: no
    bandwidth of its own). Each tile moves an equal share; a full wave's units draw
    together, and the last, partial wave of r tiles draws r units' worth: the waves that
    quantize the arithmetic quantize the transfer too."""
    def rate(units_drawing: int) -> float:
        cap = units_drawing * in_flight / latency
        return min(bandwidth, cap) if bandwidth else cap

    full, tail = divmod(tiles, units) if units else (0, 0)
    if not full or not tail:  # one wave, or whole waves: every busy unit draws throughout
        return moved / rate(busy)
    share = moved / tiles
    return full * units * share / rate(units) + tail * share / rate(tail)


def _workspace_level(machine: Machine, workspace: float) -> str:
    """Where a split-K workspace's traffic goes: the largest shared cache when the partials
    (written once, then read) fit in it, else main memory."""
    caches = [lv for lv in machine.levels if not lv.software_managed]
    if caches and workspace / 2 <= caches[-1].size:
        return caches[-1].name
    return MEMORY


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
    dims: tuple[int, int, int] | None = None,
    instructions: float = 0.0,
) -> KernelTiming:
    """Time one kernel run by the machine's model, then scale by ``repeat``; ``instructions``:
    the vector-unit instructions a run spends beyond its FLOPs (a weight-only product's
    dequantization), which the ``throughput`` model times (the others count the operations)."""
    model = MODELS.get(machine.timing.model)
    if model is None:
        raise InputError(f"unknown timing model {machine.timing.model!r}", field="timing.model")
    work = KernelWork(op, dtype, flops, ops, dims, instructions)
    traffic = served_by_tiles(machine, work, traffic)
    t = model(machine, work, traffic)
    widen = word_widening(machine, dtype)
    return KernelTiming(
        name=name,
        phase=phase,
        op=op,
        flops=flops * repeat,
        repeat=repeat,
        compute=t.compute * repeat,
        overhead=t.overhead * repeat,
        stall={k: v * repeat for k, v in t.stall.items()},
        bytes={lv.name: int(lv.bytes * widen) * repeat for lv in traffic.levels},
        terms=t.terms,
        dtype=dtype,
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
    dispatch: DispatchTimes | None = None  # set by apply_dispatch
    framework: Framework | None = None  # whose host time apply_dispatch added
    interconnect: float = 0.0  # seconds the device waits on communication (time_parallel)
    bubble: float = 0.0  # seconds the device idles in the pipeline's fill and drain

    def _sum(self, attr: str) -> float:
        return self.iterations * sum(getattr(k, attr) for k in self.kernels)

    @property
    def flops(self) -> int:
        return self.iterations * sum(k.flops for k in self.kernels)

    @property
    def compute(self) -> float:
        return self._sum("compute")

    @property
    def startup(self) -> float:
        return self._sum("overhead")

    @property
    def dispatch_seconds(self) -> float:
        return self._sum("dispatch")

    @property
    def framework_seconds(self) -> float:
        return self._sum("framework")

    @property
    def overhead(self) -> float:
        """Neither arithmetic nor memory: start-up, dispatch and the framework's own time."""
        return self.startup + self.dispatch_seconds + self.framework_seconds

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
        return self.compute + self.overhead + sum(self.stall.values()) + self.interconnect + self.bubble

    @property
    def time_by_component(self) -> dict[str, float]:
        """Seconds by component: compute, dispatch, startup, each memory level's stall, the
        exposed interconnect and the pipeline bubble."""
        return {COMPUTE: self.compute, DISPATCH: self.dispatch_seconds, FRAMEWORK: self.framework_seconds,
                STARTUP: self.startup, **self.stall, INTERCONNECT: self.interconnect, BUBBLE: self.bubble}

    @property
    def bound(self) -> str:
        """The component with the largest share of the step's time; dispatch whenever the
        host's stream is the longer one (the device then waits on the host, whatever its
        kernels' own split)."""
        if self.dispatch is not None and self.dispatch.host_bound:
            return FRAMEWORK if self.dispatch.framework_host > self.dispatch.machine_host else DISPATCH
        return largest(self.time_by_component)

    @property
    def bound_class(self) -> str:
        return bound_class(self.bound)

    @property
    def memory_ratio(self) -> float | None:
        """Sum over kernels of the largest level term, over the sum of their compute."""
        compute = self.compute
        memory = self.iterations * sum(k.memory_time for k in self.kernels)
        return memory / compute if compute > 0 else None


@dataclass(frozen=True)
class DispatchTimes:
    """The two streams of a step (docs/timing.md, "Dispatch" and "The framework"), in seconds."""

    mode: str
    host_seconds: float  # H: the host's issue time for the step, the framework's work included
    device_seconds: float  # D: the device's kernels and the gaps between them
    launches: int  # kernel runs issued in the step
    synchronous: bool  # the host is the computing core: the step is H + sum t_k
    framework: str = ""  # the framework's id
    framework_host: float = 0.0  # H_f: the framework's share of H
    synchronize: float = 0.0  # S: the step's synchronisation (and a host timer's first launch), never overlapped
    layer_passes: int = 0  # layer passes of one iteration (forward, backward, recompute)
    timing: str = "device"

    @property
    def machine_host(self) -> float:
        """H_m: issuing the kernels, as the machine's [timing.dispatch] states."""
        return self.host_seconds - self.framework_host

    @property
    def host_bound(self) -> bool:
        return not self.synchronous and self.host_seconds > self.device_seconds


def layer_passes(kernels: Sequence[Any]) -> int:
    """Layer passes of one iteration that call the layers' modules: the forward and the
    recomputed forward (autograd runs the backward without module calls), each counting the
    repeated layers its kernels run (a collapsed layer's kernel stands for ``repeat``)."""
    runs: dict[tuple[str, int], int] = {}
    for k in kernels:
        if k.layer >= 0 and k.phase in ("forward", "recompute"):
            key = (k.phase, k.layer)
            runs[key] = min(runs.get(key, k.repeat), k.repeat)
    return sum(runs.values())


def apply_dispatch(machine: Machine, kernels: Sequence[KernelTiming], iterations: int,
                   mode: str | None = None, framework: Framework | None = None, passes: int = 0,
                   timing: str = "device") -> DispatchTimes:
    """Set each kernel's share of the step's dispatch and framework time; return the streams.

    Host stream H = H_m + H_f, H_m = n h (+ step_issue per iteration), H_f = n o + I (P l +
    s) with the framework's per-operator o, per-layer-pass l and per-step s over P layer
    passes an iteration; device stream D = sum (g + t_k) over the n kernel runs. An
    accelerator's step takes max(H, D) + S, a CPU's H + sum t_k + S, where S is the
    synchronisation that ends each iteration (I y when the framework synchronises each
    step, or the step is timed from the host, which also waits for its first launch h).
    The host's excess over the device (all of H on a CPU) is shared out per kernel run,
    between dispatch and the framework as H_m : H_f; S is the framework's."""
    spec = machine.dispatch
    if mode is None:
        mode = framework.dispatch if framework is not None and framework.dispatch else (
            spec.default if spec is not None else "compiled")
    if mode not in DISPATCH_MODES:
        raise InputError(f"unknown dispatch mode {mode!r}; one of {', '.join(DISPATCH_MODES)}", field="dispatch")
    h = g = per_step = 0.0
    if spec is not None:
        figures = spec.mode(mode)
        h, g, per_step = figures.host_issue, figures.device_gap, figures.step_issue
    runs_per_pass = sum(k.repeat for k in kernels)
    launches = iterations * runs_per_pass
    machine_host = launches * h + iterations * per_step
    framework_host = sync = 0.0
    if framework is not None:
        framework_host = launches * framework.operator + iterations * (passes * framework.layer + framework.step)
        if framework.synchronizes or timing == "host":
            sync = iterations * framework.synchronize
    if timing == "host":
        sync += iterations * h
    host = machine_host + framework_host
    work = iterations * sum(k.work_seconds for k in kernels)
    device = launches * g + work
    synchronous = machine.kind not in ASYNC_KINDS
    # Host time charged per kernel run, beyond the gap: all of it on a synchronous
    # machine, only the excess over the device stream on an asynchronous one.
    extra = host if synchronous else max(0.0, host - device)
    ours = framework_host / host if host > 0 else 0.0
    per_run = extra / launches if launches else 0.0
    per_sync = sync / launches if launches else 0.0
    for k in kernels:
        k.dispatch = k.repeat * (g + per_run * (1.0 - ours))
        k.framework = k.repeat * (per_run * ours + per_sync)
    return DispatchTimes(mode, host, device, launches, synchronous, framework.id if framework is not None else "",
                         framework_host, sync, passes, timing)


# ---------------------------------------------------------------------------------
# Devices and the interconnect (docs/timing.md, "Devices and the interconnect")

# Gradients are reduced in buckets as the backward pass produces them (PyTorch DDP's
# bucket_cap_mb = 25); the last bucket cannot hide behind any backward work.
BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class CommTiming:
    """One collective of a device's step, timed: all its repeats in one optimizer step."""

    name: str
    kind: str
    group: int  # devices
    bytes: int  # S per collective
    count: int  # collectives per optimizer step
    seconds: float  # all of them, as if nothing overlapped
    exposed: float  # what the device waits for
    sent: float  # bytes this device sends, all of them (bus bytes)
    overlap: str  # critical | backward | compute | after
    per: str  # micro | step
    link_bytes: dict[str, float] = field(default_factory=dict)  # bytes this device sends per link class, all of them


def time_communication(ic: Any, comms: Sequence[Any], *, micro_batches: int, micro_seconds: float,
                       backward_seconds: float,
                       attention_seconds: Mapping[str, float] | None = None, base: float = 0.0,
                       sharding: Any = None, copy: tuple[float, float] = (0.0, 0.0),
                       recompute_seconds: float = 0.0, gradients: str = "overlapped",
                       weights: str = "after-update") -> list[CommTiming]:
    """Time each :class:`~memwall.workloads.parallel.Comm` of one device's optimizer step.

    ``critical`` and ``after``: exposed = all of it. ``backward`` (bucketed gradient
    reduction): exposed = max(t(bucket), T - T_backward) with T_backward the last
    micro-batch's backward kernels; all of it where the framework reduces its gradients
    after the backward (``gradients = 'after-backward'``, Megatron-LM's local DDP).
    ``after`` (ZeRO 1-2's updated weights all-gather) where the framework gathers them
    behind the next step's forward (``weights = 'overlapped'``, Megatron-Core's
    overlap_param_gather): exposed = max(t(bucket), T - T_forward), T_forward the first
    micro-batch's forward kernels (T_micro - T_backward), mirroring the gradients' buckets.
    ``compute`` (ZeRO-3's prefetched per-layer gathers):
    exposed = m (t_one + max(0, (c - 1) t_one - T_micro)), the first gather of each
    micro-batch waited for, the other c - 1 hidden behind its kernels as far as they last.
    ``attention`` / ``attention-backward`` (ring attention's blocks, a group of n): each of
    the c transfers of a micro-batch hides behind one block's attention,
    h = A (n - 1) / (c n) with A the micro-batch's attention kernels of that direction
    (``attention_seconds``: ``forward`` counts the recomputed ones too); exposed =
    m c max(0, t_one - h).

    Every collective call also pays the framework's ``base`` latency (alpha, NCCL's
    baseLat): t_one = t(S) + alpha per call, and a bucketed reduction is ceil(S / bucket)
    calls.

    ``prefetch`` (ZeRO-3's gathers and gradient reduce-scatters of one group): the
    framework's ``sharding`` policy (:class:`memwall.frameworks.Sharding`; None: the ideal
    one) is replayed unit by unit over one micro-batch (:func:`zero3_replay`); the device
    waits for what the replay's gathers and reduce-scatters leave exposed."""
    from .interconnect import Group, bus_bytes, collective, sent_by_link

    out = []
    sharded = _time_sharded(ic, [c for c in comms if c.overlap == "prefetch"], micro_batches,
                            micro_seconds - backward_seconds, backward_seconds, base, sharding, copy,
                            recompute_seconds)
    for c in comms:
        if c.overlap == "prefetch":
            out.append(sharded[id(c)])
            continue
        group = Group(c.size, c.stride)
        # buckets only where they are issued behind kernels; after them, one call on the flat buffer
        gathered_behind = c.overlap == "after" and c.kind == "all-gather" and weights == "overlapped"
        bucketed = (c.overlap == "backward" and gradients != "after-backward") or gathered_behind
        calls = -(-c.bytes // BUCKET_BYTES) if bucketed else 1
        one = collective(ic, c.kind, group, c.bytes) + calls * base if c.bytes and c.count else 0.0
        n = c.count * (micro_batches if c.per == "micro" else 1)
        total = one * n
        if c.overlap == "backward" and gradients == "after-backward":
            exposed = total  # one reduction of the whole buffer once the backward is done: nothing hides it
        elif (c.overlap == "backward" or gathered_behind) and total > 0:
            bucket = collective(ic, c.kind, group, min(c.bytes, BUCKET_BYTES)) + base
            behind = micro_seconds - backward_seconds if gathered_behind else backward_seconds
            exposed = max(bucket, total - behind)
        elif c.overlap == "compute":
            # prefetched: all but the first gather of a micro-batch can hide behind its kernels
            exposed = micro_batches * (one + max(0.0, one * (c.count - 1) - micro_seconds))
        elif c.overlap in ("attention", "attention-backward") and c.count:
            # ring attention: c transfers and c n / (n - 1) blocks of attention a micro-batch
            pool = (attention_seconds or {}).get("backward" if c.overlap == "attention-backward" else "forward", 0.0)
            hidden = pool * (c.size - 1) / (c.count * c.size)
            exposed = n * max(0.0, one - hidden)
        else:
            exposed = total
        links = sent_by_link(ic, c.kind, group, c.bytes) if c.bytes and c.count else {}
        out.append(CommTiming(c.name, c.kind, c.size, c.bytes, n, total, exposed,
                              n * bus_bytes(c.kind, c.size, c.bytes), c.overlap, c.per,
                              {link: n * b for link, b in links.items()}))
    return out


@dataclass(frozen=True)
class Unit:
    """One gather unit of ZeRO-3's replay: what one wait gathers and what runs after it."""

    elements: int  # gathered
    calls: int  # all-gather calls
    gather: float  # seconds of its gathers, alpha included
    compute: float  # seconds of the kernels that use it
    reduce_elements: int = 0  # backward: gradient elements it hands to the reduce-scatters
    reduce_calls: int = 0
    reduce: float = 0.0  # backward: seconds of those reduce-scatters, alpha included


class _Replay:
    """The two clocks of :func:`zero3_replay`: the kernels' (t) and the communication
    streams' (f: the gathers'; r: the reduce-scatters' unless ``serialized`` puts them on f)."""

    def __init__(self, units: Sequence[Unit], policy: Any) -> None:
        self.units, self.policy = list(units), policy
        self.done: dict[int, float] = {}  # unit -> when its gathers end
        self.ready: set[int] = set()  # units already waited for (DeepSpeed's AVAILABLE)
        self.issued: list[int] = []  # the units of done, in the order they were issued
        self.synced = 0  # how many of them a draining wait has made ready
        self.t = self.f = self.r = self.last = 0.0
        self.pending_e, self.pending_s = 0, 0.0

    def issue(self, k: int) -> None:
        self.issued.append(k)
        if self.units[k].calls == 0:  # nothing to gather (persisted, or a unit of kernels only)
            self.done[k] = 0.0
            return
        if self.policy.synchronize and self.policy.launch:
            # the host issues each call after draining the device: the kernels wait it out
            self.t += self.policy.launch * self.units[k].calls
        self.f = max(self.t, self.f) + self.units[k].gather
        self.done[k] = self.f

    def wait(self, i: int) -> bool:
        """Unit i's gathers before its kernels; True if it had to be waited for."""
        if i in self.ready:
            return False
        if i not in self.done:
            self.issue(i)
        if self.policy.synchronize:  # the wait drains the device: every issued gather is then ready
            self.t = max(self.t, self.f, self.r)
            self.ready.update(self.issued[self.synced:])  # (those issued since the last such wait)
            self.synced = len(self.issued)
        else:
            self.t = max(self.t, self.done[i])
        self.ready.add(i)
        return True

    def prefetch(self, i: int, waited: bool) -> None:
        p, units = self.policy, self.units
        if p.max_live and units[i].elements >= p.max_live:
            return  # DeepSpeed issues no prefetch while this many elements are gathered
        if p.prefetch_bucket:
            if not waited:  # a new prefetch only once the last one has been waited for
                return
            k, gathered, issued = i + 1, 0, []
            while k < len(units) and gathered < p.prefetch_bucket:
                if k not in self.done:
                    self.issue(k)
                    issued.append(k)
                    gathered += units[k].elements
                k += 1
            if p.synchronize and len(issued) > 1:
                # DeepSpeed synchronises the device before issuing each parameter's gather: the
                # unit's kernels start once all but the last gather of the prefetch are done
                self.t = max(self.t, self.done[issued[-2]])
            return
        for k in range(i + 1, min(len(units), i + 1 + max(1, int(p.prefetch_depth)))):
            if k not in self.done:
                self.issue(k)

    def hand_over(self, seconds: float) -> None:
        if self.policy.synchronize:
            self.t = max(self.t, self.last)  # DeepSpeed waits for the last reduce bucket before the next
        if self.policy.serialized:
            self.f = self.last = max(self.t, self.f) + seconds
        else:
            self.r = self.last = max(self.t, self.r) + seconds

    def reduce(self, u: Unit) -> None:
        bucket = self.policy.reduce_bucket
        if not bucket:
            self.hand_over(u.reduce)
            return
        if self.pending_e and self.pending_e + u.reduce_elements > bucket:
            self.hand_over(self.pending_s)
            self.pending_e, self.pending_s = 0, 0.0
        self.pending_e += u.reduce_elements
        self.pending_s += u.reduce


def zero3_replay(forward: Sequence[Unit], backward: Sequence[Unit], policy: Any) -> tuple[float, float]:
    """One micro-batch of ZeRO-3 as ``policy`` (:class:`memwall.frameworks.Sharding`) runs
    it: the forward's units in order, then the backward's. Two clocks: the kernels' (t) and
    the communication stream's (f; the reduce-scatters have their own, r, unless
    ``serialized`` puts them on f). Before unit i runs, unless an earlier wait made it ready,
    its gathers are issued (if no prefetch issued them) and waited for: t = max(t, done_i),
    or, with ``synchronize``, t = max(t, f, r) and every unit issued so far is ready. Then
    the prefetch (none while the unit has ``max_live`` elements or more): with
    ``prefetch_bucket`` B, only after a wait, the following units not yet issued until B
    elements (at least one); otherwise the next ``prefetch_depth`` units. A gather issued
    starts at max(t, f) and ends its seconds later; with ``synchronize`` and a ``launch``
    time, issuing it first moves t by launch x its calls (the host issues it while the
    drained device waits). Then the unit's kernels: t += c_i.
    Backward, its gradients go to the reduce-scatters: at once (``reduce_bucket`` 0) or,
    when the pending elements would pass the bucket, the pending ones (after waiting for
    the last bucket, with ``synchronize``); each starts at max(t, its stream). Returns
    (exposed, tail): exposed = max(t, f, r) at the end minus the kernels' sum, tail =
    max(t, f, r) - t."""
    units = list(forward) + list(backward)
    run = _Replay(units, policy)
    for i, u in enumerate(units):
        run.prefetch(i, run.wait(i))
        run.t += u.compute
        if i >= len(forward) and u.reduce_calls:
            run.reduce(u)
    if run.pending_s:
        run.hand_over(run.pending_s)
    end = max(run.t, run.f, run.r)
    return max(0.0, end - sum(u.compute for u in units)), max(0.0, end - run.t)


def zero3_units(tensors: Sequence[int], layers: int, extra: int, policy: Any, gather: Any, reduce: Any,
                forward_seconds: float, backward_seconds: float, *, recompute_seconds: float = 0.0,
                first: bool = True, recomputed: int | None = None) -> tuple[list[Unit], list[Unit]]:
    """One micro-batch's units (forward, backward) of a stage of ``layers`` layers of
    ``tensors`` (elements, in the order a layer runs them) and ``extra`` other elements.
    ``policy.gather == 'parameter'``: each tensor of at least ``persist_below`` elements is a
    unit of one call, with the small tensors before it in the ``first`` micro-batch's forward
    (later they stay gathered); ``'unit'``: a layer's tensors together, one call. The other
    parameters are one unit at each end. A unit's kernels: the pass's kernels times its share
    of the pass's elements. Backward (``backward_seconds``, the recomputed forward's
    ``recompute_seconds`` among them), each layer: with per-parameter units and a
    recomputation, its units again in forward order (the recompute's kernels), then in
    reverse (the rest), each gathered again unless fewer than ``max_reuse`` elements ran since
    its recompute (twice the modules after it); otherwise the units in reverse, once. Only
    the first ``recomputed`` layers (None: all) are re-run (block:N), the recompute's
    seconds shared among them; with none (selective) they stay with the backward. A unit
    kept since its forward (fewer than ``max_reuse`` elements since: the layers after it,
    both ways, and the other parameters) gathers nothing. Each layer's reduce-scatters (a call
    a tensor with ``reduce = 'parameter'``, one a layer otherwise) go with the last unit it
    computes.
    ``gather`` and ``reduce`` give the seconds of one call of so many elements."""
    persist = int(policy.persist_below)
    later: list[tuple[int, int, float]] = []
    firsts: list[tuple[int, int, float]] = []
    if policy.gather == "parameter":
        small = (0, 0, 0.0)
        for e in tensors:
            if e < persist:
                small = (small[0] + e, small[1] + 1, small[2] + gather(e))
                continue
            later.append((e, 1, gather(e)))
            firsts.append((e + small[0], 1 + small[1], gather(e) + small[2]))
            small = (0, 0, 0.0)
        if small[1]:  # small tensors after the last large one: a module of their own
            firsts.append(small)
    else:
        firsts = later = [(sum(tensors), 1, gather(sum(tensors)))]
    layer_e = max(1, sum(tensors))
    pass_e = layers * layer_e + extra
    r_calls = len(tensors) if policy.reduce == "parameter" else 1
    r_layer = sum(reduce(e) for e in tensors) if policy.reduce == "parameter" else reduce(sum(tensors))
    extra_gathered = bool(extra) and (first or extra >= persist)
    fwd = [Unit(extra if extra_gathered else 0, int(extra_gathered), gather(extra) if extra_gathered else 0.0,
                forward_seconds * extra / pass_e)] if extra else []
    for _ in range(layers):
        fwd.extend(Unit(e, n, s, forward_seconds * e / pass_e) for e, n, s in (firsts if first else later))
    bwd: list[Unit] = []
    back = later[::-1] or [(0, 0, 0.0)]
    # with per-parameter units a recomputed forward is its own pass of gathers, then each
    # module's backward gathers again unless it is kept over the reuse distance; a unit
    # (FSDP's) runs its recompute inside its backward, on one gather
    # (a recompute that re-runs no layer in full, selective's attention core, reads no
    # parameter: its seconds stay with the backward's, gathering nothing again)
    rerun_layers = layers if recomputed is None else min(recomputed, layers)
    redo = recompute_seconds if policy.gather == "parameter" and later and rerun_layers else 0.0
    for position in range(layers):
        # kept when fewer than max_reuse elements run between its forward and its next use:
        # the layers after it (the backward's first ``position``), both ways, and the others
        kept = bool(policy.max_reuse) and 2 * position * layer_e + extra < policy.max_reuse
        # the backward meets the layers last first: the re-run ones (the first) come last
        rerun = redo * layers / rerun_layers if redo and position >= layers - rerun_layers else 0.0
        if rerun:
            bwd.extend(Unit(0 if kept else e, 0 if kept else n, 0.0 if kept else s, rerun * e / pass_e)
                       for e, n, s in later)
        between = 0  # elements of the modules after this one: recomputed, then their backward
        for j, (e, n, s) in enumerate(back):
            share = layer_e if len(back) == 1 else e
            last = j == len(back) - 1
            again = not rerun or not policy.max_reuse or 2 * between >= policy.max_reuse
            gathered = again and not (kept and not rerun)
            bwd.append(Unit(e if gathered else 0, n if gathered else 0, s if gathered else 0.0,
                            (backward_seconds - redo) * share / pass_e, layer_e if last else 0,
                            r_calls if last else 0, r_layer if last else 0.0))
            between += e
    if extra:
        again = extra >= persist
        bwd.append(Unit(extra if again else 0, int(again), gather(extra) if again else 0.0,
                        backward_seconds * extra / pass_e, extra, 1, reduce(extra)))
    return fwd, bwd


def _time_sharded(ic: Any, comms: Sequence[Any], micro_batches: int, forward_seconds: float,
                  backward_seconds: float, base: float, policy: Any,
                  copy: tuple[float, float] = (0.0, 0.0), recompute_seconds: float = 0.0) -> dict[int, CommTiming]:
    """ZeRO-3's gathers and reduce-scatters (Comms with overlap ``prefetch``), each group's
    pair timed by :func:`zero3_replay` over the units of :func:`zero3_units`: the first
    micro-batch and, m - 1 times, the others. The exposed time is split between the group's
    gather and reduce-scatter in proportion to their seconds. One call of S bytes over a
    group of n: t(S) + alpha, and with ``list_copies`` n copies of S / n bytes on the
    group's stream, n max(g, 2 S / (n B)) with ``copy`` = (g, B): the machine's eager
    device gap between back-to-back kernels and its sustained memory bandwidth."""
    from .frameworks import IDEAL_SHARDING

    policy = policy or IDEAL_SHARDING
    pairs: dict[tuple[int, int, str], dict[str, Any]] = {}
    for c in comms:
        pairs.setdefault((c.size, c.stride, c.name.split(":")[0]), {})[c.kind] = c
    out: dict[int, CommTiming] = {}
    for pair in pairs.values():
        out.update(_time_pair(ic, pair.get("all-gather"), pair.get("reduce-scatter"), micro_batches,
                              forward_seconds, backward_seconds, base, policy, copy, recompute_seconds))
    return out


def _time_pair(ic: Any, gather: Any, scatter: Any, m: int, forward_seconds: float, backward_seconds: float,
               base: float, policy: Any, copy: tuple[float, float],
               recompute_seconds: float = 0.0) -> dict[int, CommTiming]:
    from .interconnect import Group, bus_bytes, collective, sent_by_link

    ref = gather or scatter
    group = Group(ref.size, ref.stride)
    w_esz = gather.elem_bytes if gather else 0
    g_esz = scatter.elem_bytes if scatter else 0

    n, (gap, bandwidth) = ref.size, copy

    def copies(nbytes: float) -> float:
        if not policy.list_copies:
            return 0.0
        return max(n * gap, 2 * nbytes / bandwidth if bandwidth > 0 else 0.0)

    def one(kind: str, esz: int) -> Any:
        return lambda e: collective(ic, kind, group, e * esz) + base + copies(e * esz) if e and esz else 0.0

    args = (ref.tensors, max(1, ref.layers), ref.extra, policy, one("all-gather", w_esz),
            one("reduce-scatter", g_esz), forward_seconds, backward_seconds)
    first = zero3_units(*args, recompute_seconds=recompute_seconds, first=True, recomputed=ref.recomputed)
    later = zero3_units(*args, recompute_seconds=recompute_seconds, first=False, recomputed=ref.recomputed)
    exposed = zero3_replay(*first, policy)[0] + (m - 1) * (zero3_replay(*later, policy)[0] if m > 1 else 0.0)
    every = [u for u in first[0] + first[1]] + [u for _ in range(m - 1) for u in later[0] + later[1]]
    g = (sum(u.calls for u in every), sum(u.gather for u in every), sum(u.elements for u in every))
    r = (sum(u.reduce_calls for u in every), sum(u.reduce for u in every), sum(u.reduce_elements for u in every))
    share = g[1] / (g[1] + r[1]) if g[1] + r[1] > 0 else 0.0
    out = {}
    for c, (calls, seconds, elements), part in ((gather, g, share), (scatter, r, 1.0 - share)):
        if c is None:
            continue
        total = elements * c.elem_bytes
        out[id(c)] = CommTiming(c.name, c.kind, c.size, int(total / calls) if calls else 0, calls, seconds,
                                exposed * part, bus_bytes(c.kind, c.size, total), c.overlap, c.per,
                                sent_by_link(ic, c.kind, group, total) if calls else {})
    return out


def sharded_update(timing: StepTiming, share: float) -> StepTiming:
    """The step with its update kernels scaled by ``share`` (ZeRO: each device updates 1/dp)."""
    if share == 1.0:
        return timing
    from dataclasses import replace

    kernels = [t if t.phase != "update" else replace(
        t, compute=t.compute * share, overhead=t.overhead * share, dispatch=t.dispatch * share,
        framework=t.framework * share,
        stall={n: v * share for n, v in t.stall.items()}, bytes={n: int(v * share) for n, v in t.bytes.items()},
        flops=int(t.flops * share)) for t in timing.kernels]
    return replace(timing, kernels=kernels)


@dataclass(frozen=True)
class StageTimes:
    """One kind of pipeline stage's device, per optimizer step (seconds)."""

    timing: StepTiming  # its kernels: m micro-batches and its (sharded) update
    comms: list[CommTiming]
    slot: float  # one micro-batch: kernels plus the communication on its critical path
    update: float  # the update's kernels
    exposed_step: float  # per-step communication the device waits for (gradients, gathers)


def time_stage(ic: Any, timing: StepTiming, comms: Sequence[Any], micro_batches: int) -> StageTimes:
    """A stage's micro-batch slot and its per-step communication."""
    it = timing.iterations
    update = it * sum(k.seconds for k in timing.kernels if k.phase == "update")
    micro = (timing.seconds - update) / micro_batches
    backward = it * sum(k.seconds for k in timing.kernels if k.phase in ("backward", "recompute")) / micro_batches
    recompute = it * sum(k.seconds for k in timing.kernels if k.phase == "recompute") / micro_batches
    attention = {d: it * sum(k.seconds for k in timing.kernels if k.op == "attention" and k.phase in phases)
                 / micro_batches for d, phases in (("forward", ("forward", "recompute")), ("backward", ("backward",)))}
    timed = time_communication(ic, comms, micro_batches=micro_batches, micro_seconds=micro,
                               backward_seconds=backward, attention_seconds=attention,
                               base=timing.framework.collective_base if timing.framework is not None else 0.0,
                               sharding=timing.framework.sharding if timing.framework is not None else None,
                               copy=_copy_figures(timing.machine), recompute_seconds=recompute,
                               gradients=timing.framework.gradient_reduction if timing.framework is not None
                               else "overlapped",
                               weights=timing.framework.weight_gather if timing.framework is not None
                               else "after-update")
    per_micro = sum(c.exposed for c in timed if c.per == "micro")
    per_step = sum(c.exposed for c in timed if c.per == "step")
    return StageTimes(timing, timed, micro + per_micro / micro_batches, update, per_step)


def _copy_figures(machine: Machine) -> tuple[float, float]:
    """(g, B) of a copy kernel a process group runs per list tensor: the eager device gap
    between back-to-back kernels (the copies are queued one after another) and the
    sustained memory bandwidth (each reads and writes its bytes)."""
    spec = machine.dispatch
    gap = spec.mode("eager").device_gap if spec is not None else 0.0
    return gap, machine.memory.sustained_for(0.5) if machine.memory is not None else 0.0


def time_pipeline(stages: Sequence[StageTimes], pp: int, micro_batches: int,
                  interleave: int = 1) -> tuple[int, StepTiming]:
    """1F1B over ``pp`` stages and m micro-batches: the slowest stage's slot t sets the pace;
    the device waits (p - 1) t in fill and drain (bubble = (p-1)/(m+p-1) of the pipeline).
    Interleaved over V virtual stages a device (Narayanan et al. 2021), fill and drain run
    chunks of t / V: the wait is (p - 1) t / V (bubble = (p-1)/(V m + p - 1)).
    Returns the index of the slowest stage and its device's timing with the exposed
    communication and the bubble set."""
    from dataclasses import replace

    b = max(range(len(stages)), key=lambda i: stages[i].slot)
    s = stages[b]
    comm = s.exposed_step + micro_batches * (s.slot - (s.timing.seconds - s.update) / micro_batches)
    bubble = (pp - 1) * s.slot if interleave == 1 else (pp - 1) * s.slot / interleave
    return b, replace(s.timing, interconnect=comm, bubble=bubble)
