"""Measurements of the host: peak FLOP/s, product efficiency, per-call cost, bandwidth,
latency and the last level's effective size.

Owns the kernels' drivers (:func:`measure_peak`, the best of large NumPy matrix products
in every BLAS thread; :func:`measure_efficiency`, products with one small dimension;
:func:`measure_outer`, numpy.matmul's K = 1 loop; :func:`measure_call_costs`, one-element
NumPy calls; :func:`measure_bandwidth` by STREAM-like copy and triad in every BLAS
thread; :func:`measure_latency` by a pointer chase over :func:`chase_array`;
:func:`measure_effective_size`, a chase sweep over the last level, and :func:`as_behaving`,
the caches with the last level at that size) and :func:`detect`, which reads the host (:mod:`memwall.host.probe`) and measures it into one
:class:`Detected`. The compiled kernels are ``memwall._probe``.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..units import format_byte_rate, format_bytes, format_flop_rate, format_time
from .blocking import Blocking, blocking
from .probe import (
    SYS_CPU,
    BlasInfo,
    CacheInfo,
    CpuInfo,
    blas_info,
    read_caches,
    read_clock,
    read_cpu,
    read_memory_size,
)


def _probe() -> Any:
    try:
        import memwall._probe as probe  # the module, not through memwall/__init__
    except ImportError as err:  # reported, never replaced by slow Python loops
        raise InputError(f"the host probe memwall._probe is not built ({err}); "
                         "run 'python setup.py build_ext --inplace' or reinstall memwall") from None
    return probe


@dataclass(frozen=True)
class PeakResult:
    dtype: str
    n: int  # the order of the product that gave the best rate
    flops: float  # FLOP/s, best of every repeat of every size
    seconds: list[float]  # the repeats at size n
    threads: int = 1  # BLAS threads the products ran with
    sizes: tuple[int, ...] = ()  # every order tried, smallest first
    rates: tuple[float, ...] = ()  # the best FLOP/s at each of them


# Orders of the square products the peak is the best of: the largest that a run affords,
# since a BLAS reaches its rate only once packing and edge tiles are small beside the
# arithmetic (a 2048² fp32 product on two cores is ~0.1 s and below the rate of the
# host check's own large steps).
PEAK_SIZES = {"quick": (512, 1024), "full": (2048, 3072, 4096)}


def _matmul_rounds(operands: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], repeats: int) -> list[list[float]]:
    """Seconds of ``np.matmul(a, b, out=c)`` for each operand triple, ``repeats`` of each,
    after one warm-up of each. The repeats are rounds over every product, so that a burst
    of other work on the host (a BLAS thread descheduled for a scheduler tick) spoils one
    repeat of many products, not every repeat of one."""
    for a, b, c in operands:
        np.matmul(a, b, out=c)
    times: list[list[float]] = [[] for _ in operands]
    for _ in range(repeats):
        for (a, b, c), out in zip(operands, times, strict=True):
            t0 = time.perf_counter()
            np.matmul(a, b, out=c)
            out.append(time.perf_counter() - t0)
    return times


def measure_peak(dtype: str, n: int | Sequence[int], repeats: int = 3, threads: int | None = None) -> PeakResult:
    """Best FLOP/s of ``C = A @ B`` for n×n matrices (2n³ FLOPs), after one warm-up per
    size; ``n`` may list several orders, and the best rate of any is the peak. The repeats
    are rounds over the orders, so that a burst of other work spoils one repeat of each
    rather than every repeat of one. ``threads`` is recorded (the BLAS's own count,
    :func:`memwall.host.blas_info`, by default): the products run in every thread the BLAS
    uses, as the host check's steps do."""
    sizes = tuple(sorted({n} if isinstance(n, int) else set(n)))
    if not sizes or sizes[0] < 1 or repeats < 1:
        raise InputError(f"measure_peak needs orders >= 1 and repeats >= 1, got {sizes} and {repeats}")
    np_dtype = {"fp32": np.float32, "fp64": np.float64}[dtype]
    rng = np.random.default_rng(0)
    operands = [(rng.standard_normal((size, size)).astype(np_dtype), rng.standard_normal((size, size)).astype(np_dtype),
                 np.empty((size, size), dtype=np_dtype)) for size in sizes]
    times = _matmul_rounds(operands, repeats)
    rates = tuple(2.0 * size**3 / min(t) for size, t in zip(sizes, times, strict=True))
    i = rates.index(max(rates))
    if threads is None:
        threads = blas_info().threads
    return PeakResult(dtype, sizes[i], rates[i], times[i], threads, sizes, rates)


@dataclass(frozen=True)
class EfficiencyCurve:
    """A product's rate against the peak as one dimension shrinks, the other two held at
    ``other`` (operands in cache: the memory levels are timed apart)."""

    shape: str  # "mn": C = A·Bᵀ with M small (a forward product's batch); "k": Aᵀ·B with K small
    other: int
    points: list[tuple[int, float, float]]  # (dimension, FLOP/s best of the repeats, fraction of the peak)


# The small dimensions the efficiency curves sample (a training step's batch sizes).
EFFICIENCY_DIMS = {"quick": (4, 16, 64), "full": (2, 4, 8, 16, 32, 64, 128, 256, 512)}


def measure_efficiency(peak: PeakResult, dims: Sequence[int], other: int = 512,
                       repeats: int = 5) -> list[EfficiencyCurve]:
    """Best FLOP/s of fp32 products whose M (then K) is each of ``dims``, the other two
    ``other``, as fractions of ``peak`` (at most 1); each curve ends at the peak's own
    order with 1, where that is beyond ``dims``. The repeats are rounds over every
    product (:func:`_matmul_rounds`)."""
    if not dims or min(dims) < 1 or other < 1 or repeats < 1:
        raise InputError(f"measure_efficiency needs dimensions >= 1 and repeats >= 1, got {list(dims)}, "
                         f"{other} and {repeats}")
    rng = np.random.default_rng(0)
    f32 = np.float32
    w = rng.random((other, other), dtype=f32)
    products = []  # (shape, d, a, b, out)
    for shape in ("mn", "k"):
        for d in sorted(set(dims)):
            x = rng.random((d, other), dtype=f32)
            if shape == "mn":
                products.append((shape, d, x, w.T, np.empty((d, other), f32)))
            else:
                products.append((shape, d, x.T, rng.random((d, other), dtype=f32), np.empty((other, other), f32)))
    best = [min(t) for t in _matmul_rounds([(a, b, out) for _, _, a, b, out in products], repeats)]
    curves = []
    for shape in ("mn", "k"):
        points = [(d, 2.0 * d * other * other / t, min(1.0, 2.0 * d * other * other / t / peak.flops))
                  for (s, d, *_), t in zip(products, best, strict=True) if s == shape]
        if peak.n > points[-1][0]:
            points.append((peak.n, peak.flops, 1.0))
        curves.append(EfficiencyCurve(shape, other, points))
    return curves


@dataclass(frozen=True)
class CallCost:
    """Seconds one NumPy call costs when it has (almost) nothing to compute."""

    name: str  # what was called, e.g. "np.add(a, b, out=c), 1 element"
    seconds: float  # per call, best of the trials
    calls: int  # calls per trial
    trials: int  # loops of ``calls`` calls, the best kept


def _call_kernels() -> dict[str, Callable[[], Any]]:
    """One-element (1×1, 8×8 for the products) NumPy calls of every kind a training step
    issues: binary and unary ufuncs, a ufunc with a scalar, a reduction, products."""
    f32 = np.float32
    a, b, c = np.ones(1, f32), np.ones(1, f32), np.ones(1, f32)
    m, mo, s = np.ones((1, 1), f32), np.ones((1, 1), f32), np.zeros(1, f32)
    m8, m8o, r, ro = np.ones((8, 8), f32), np.ones((8, 8), f32), np.ones((1, 8), f32), np.ones((1, 8), f32)
    return {
        "np.add(a, b, out=c), 1 element": lambda: np.add(a, b, out=c),
        "np.negative(a, out=a), 1 element": lambda: np.negative(a, out=a),
        "np.multiply(a, scalar, out=a), 1 element": lambda: np.multiply(a, f32(1.0), out=a),
        "np.sum(m, axis=0, out=s), 1x1": lambda: np.sum(m, axis=0, out=s),
        "np.matmul(m, m, out=o), 1x1": lambda: np.matmul(m, m, out=mo),
        "np.matmul(r, m.T, out=o), 1x8 by 8x8 (gemv)": lambda: np.matmul(r, m8.T, out=ro),
        "np.matmul(m.T, m, out=o), 8x8 (gemm)": lambda: np.matmul(m8.T, m8, out=m8o),
    }


def measure_call_costs(calls: int = 200, trials: int = 25) -> list[CallCost]:
    """The fixed cost of one NumPy call, per kind of call: ``calls`` calls in a Python loop
    on one-element operands, best of ``trials`` rounds over the kinds (as bandwidth is the
    best of its trials: other work on the host only ever adds). The loop's own cost is
    included: a framework's step pays it too."""
    if calls < 1 or trials < 1:
        raise InputError(f"measure_call_costs needs calls >= 1 and trials >= 1, got {calls} and {trials}")
    kernels = _call_kernels()
    best = dict.fromkeys(kernels, float("inf"))
    for fn in kernels.values():
        fn()
    for _ in range(trials):  # rounds over the kinds, as the other measurements run
        for name, fn in kernels.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / calls)
    return [CallCost(name, best[name], calls, trials) for name in kernels]


def per_call_seconds(costs: Sequence[CallCost]) -> float:
    """The host's per-call cost: the median over the kinds of call (a step mixes them)."""
    if not costs:
        raise InputError("no call costs measured")
    return float(np.median([c.seconds for c in costs]))


@dataclass(frozen=True)
class OuterResult:
    """A K = 1 product (column @ row) through numpy.matmul, which NumPy runs in its own
    scalar loop rather than the BLAS (its matmul: 'column @ row, 2d output, no blas
    needed'), against a K = 2 product of the same output."""

    m: int
    n: int
    k1_seconds: float  # best of the repeats, K = 1
    k2_seconds: float  # best of the repeats, K = 2 (the BLAS)

    @property
    def per_element(self) -> float:
        return self.k1_seconds / (self.m * self.n)


def measure_outer(m: int = 1024, n: int = 1024, repeats: int = 5) -> OuterResult:
    """Best seconds of numpy.matmul for an m×1 by 1×n product and an m×2 by 2×n one."""
    rng = np.random.default_rng(0)
    operands = [(rng.random((k, m), dtype=np.float32).T, rng.random((k, n), dtype=np.float32),
                 np.empty((m, n), np.float32)) for k in (1, 2)]
    one, two = (min(t) for t in _matmul_rounds(operands, repeats))
    return OuterResult(m, n, one, two)


# Bytes per element each kernel moves, as the program states them (STREAM's convention)
# and as a write-allocate cache moves them below the first level (what the engine counts).
KERNEL_BYTES = {
    "copy": {"stream": 16, "core": 16, "traffic": 24},
    "triad": {"stream": 24, "core": 24, "traffic": 32},
}


@dataclass(frozen=True)
class BandwidthResult:
    kernel: str  # copy | triad
    level: str  # the level the working set lives in
    working_set: int  # bytes, all threads together
    threads: int
    seconds: float  # best wall time of one timed run
    elements: int  # element-operations in that run, all threads together
    stream: float  # B/s, STREAM's count
    core: float  # B/s, the bytes loads and stores touch (the first level's traffic)
    traffic: float  # B/s, lines filled + written back (a lower level's traffic)


def _run_threads(fns: Sequence[Callable[[], None]]) -> float:
    """Run each callable in its own thread from a common start; wall seconds of all."""
    barrier = threading.Barrier(len(fns) + 1)

    def body(fn: Callable[[], None]) -> None:
        barrier.wait()
        fn()

    threads = [threading.Thread(target=body, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def measure_bandwidth(kernel: str, per_thread_bytes: int, threads: int, level: str,
                      target_seconds: float = 0.1, trials: int = 3) -> BandwidthResult:
    """Aggregate bandwidth of ``threads`` threads, each running ``kernel`` over its own
    arrays of ``per_thread_bytes`` in all; repeats chosen so one run lasts about
    ``target_seconds``; the best of ``trials`` runs."""
    probe = _probe()
    arrays = 3 if kernel == "triad" else 2
    n = max(per_thread_bytes // (8 * arrays), 64)
    data = [[np.full(n, 1.0 + i) for i in range(arrays)] for _ in range(threads)]

    def make(reps: int) -> list[Callable[[], None]]:
        if kernel == "triad":
            return [lambda a=a, reps=reps: probe.triad(a[0], a[1], a[2], 0.5, reps) for a in data]
        return [lambda a=a, reps=reps: probe.copy(a[0], a[1], reps) for a in data]

    # Calibrate: one repeat (also the warm-up that faults the pages in), then scale.
    once = _run_threads(make(1))
    reps = 1
    while once * reps < target_seconds / 4 and reps < 1 << 30:
        reps *= 2
    once = _run_threads(make(reps)) / reps
    reps = max(1, int(target_seconds / max(once, 1e-9)))
    best = min(_run_threads(make(reps)) for _ in range(trials))
    elements = n * reps * threads
    per = KERNEL_BYTES[kernel]
    return BandwidthResult(kernel, level, n * arrays * 8 * threads, threads, best, elements,
                           per["stream"] * elements / best, per["core"] * elements / best,
                           per["traffic"] * elements / best)


@dataclass(frozen=True)
class LatencyPoint:
    working_set: int  # bytes
    seconds: float  # per dependent load


def chase_array(working_set: int, line: int, seed: int = 0, window: int | None = None) -> np.ndarray:
    """A random cyclic permutation over the lines of ``working_set`` bytes: entry i holds
    the index of the next line's first word, one visited word per line.

    With ``window`` (bytes), the lines of each window are visited in random order, one
    window after another (the windows themselves in random order): the pages in use at a
    time fit the TLB, so the chase times the cache level rather than page walks, which a
    virtual machine's nested paging makes several times dearer than an L3 hit.
    """
    stride = max(line // 8, 1)
    lines = max(working_set // (stride * 8), 2)
    rng = np.random.default_rng(seed)
    if window is None or window >= working_set:
        order = rng.permutation(lines)
    else:
        per = max(window // (stride * 8), 2)
        blocks = -(-lines // per)
        order = np.concatenate([b * per + rng.permutation(min(per, lines - b * per))
                                for b in rng.permutation(blocks)])
    order = order.astype(np.intp) * stride
    nxt = np.zeros(lines * stride, dtype=np.intp)
    nxt[order[:-1]] = order[1:]
    nxt[order[-1]] = order[0]
    return nxt


# Pages a chase may have in use at once: 32 pages of 4 KiB, half a typical first-level TLB.
TLB_WINDOW = 32 * 4096


def measure_latency(working_set: int, line: int, target_seconds: float = 0.05,
                    window: int | None = TLB_WINDOW) -> LatencyPoint:
    """Seconds per load of a single-thread chase over ``working_set`` bytes (after one
    pass to warm the caches and TLBs); ``window`` as in :func:`chase_array` (None: random
    over the whole set, page walks included)."""
    probe = _probe()
    nxt = chase_array(working_set, line, window=window)
    lines = len(nxt) // max(line // 8, 1)
    probe.chase(nxt, 0, lines)  # warm-up: one full cycle
    steps = max(lines, 100_000)
    t0 = time.perf_counter()
    probe.chase(nxt, 0, steps)
    first = time.perf_counter() - t0
    steps = max(steps, int(steps * target_seconds / max(first, 1e-9)))
    best = first / max(lines, 100_000)
    for _ in range(2):
        t0 = time.perf_counter()
        probe.chase(nxt, 0, steps)
        best = min(best, (time.perf_counter() - t0) / steps)
    return LatencyPoint(working_set, best)


@dataclass(frozen=True)
class EffectiveSize:
    """The capacity a cache level behaves as having: the largest working set that a
    one-thread chase still finds mostly in it, against the size the OS states."""

    level: str
    stated: int  # bytes, as the OS states it
    size: int  # bytes: the largest working set at or below the half-way latency
    inner: float  # seconds: the chase's latency just beyond the level above
    memory: float  # seconds: the chase's latency from main memory
    curve: list[LatencyPoint]  # the sweep, smallest first

    @property
    def threshold(self) -> float:
        """Half-way between the level's own latency and memory's: half the loads hit."""
        return (self.inner + self.memory) / 2


def as_behaving(caches: Sequence[CacheInfo], effective: EffectiveSize | None) -> list[CacheInfo]:
    """The caches as they behave: the last level at its measured effective size where that
    is below what the OS states (the profile's levels and the blocks both use these)."""
    out = list(caches)
    if effective is not None and out and effective.size < out[-1].size:
        last = out[-1]
        out[-1] = replace(last, size=effective.size, sets=effective.size // (max(last.ways, 1) * last.line))
    return out


def measure_effective_size(cache: CacheInfo, inner_size: int, line: int, memory_latency: float,
                           target_seconds: float = 0.02, step: float = 2**0.5, trials: int = 1) -> EffectiveSize:
    """Chase working sets from twice the level above (``inner_size``) up to the stated
    size, growing by ``step``, ``trials`` sweeps with each point's best kept; the effective
    size is the last one before the latency first passes half-way from the first point's to
    ``memory_latency``. On a shared last level (other cores, other processes, other guests
    of a virtual machine) that is less than the OS states, and it is what a step's working
    set meets."""
    if step <= 1 or trials < 1:
        raise InputError(f"the sweep's step must exceed 1 and trials be >= 1, got {step} and {trials}")
    granule = max(cache.ways, 1) * cache.line
    sizes, ws = [], 2 * inner_size
    while ws <= cache.size:
        sizes.append(max(int(ws) // granule, 1) * granule)
        ws *= step
    if not sizes:
        return EffectiveSize(cache.name, cache.size, cache.size, memory_latency, memory_latency, [])
    best = [float("inf")] * len(sizes)
    for _ in range(trials):  # whole sweeps, so that a burst of other work spoils one point of each at most
        for i, size in enumerate(sizes):
            best[i] = min(best[i], measure_latency(size, line, target_seconds).seconds)
    curve = [LatencyPoint(size, t) for size, t in zip(sizes, best, strict=True)]
    inner = curve[0].seconds
    threshold = (inner + memory_latency) / 2
    size = curve[0].working_set
    for point in curve:
        if point.seconds > threshold:
            break
        size = point.working_set
    return EffectiveSize(cache.name, cache.size, size, inner, memory_latency, curve)


@dataclass
class Detected:
    """Everything detect found: stated and measured, with the settings it ran with."""

    cpu: CpuInfo
    blas: BlasInfo
    caches: list[CacheInfo]
    clock: tuple[float, str] | None
    memory_bytes: int | None
    peaks: dict[str, PeakResult]
    bandwidth: dict[str, list[BandwidthResult]]  # level name -> copy, triad
    latency: dict[str, LatencyPoint]  # level name (and 'memory') -> its point
    latency_curve: list[LatencyPoint]  # random over the whole set: page walks included
    blocks: Blocking
    mlp: float
    quick: bool
    seconds: float
    when: str
    notes: list[str] = field(default_factory=list)
    calls: list[CallCost] = field(default_factory=list)  # the per-call cost, by kind of call
    outer: OuterResult | None = None  # numpy.matmul's K = 1 product
    effective: EffectiveSize | None = None  # the last level's behaviour against its stated size
    efficiency: list[EfficiencyCurve] = field(default_factory=list)  # fp32 products by their small dimension

    @property
    def per_call(self) -> float | None:
        """Seconds one NumPy call costs the host (the profile's eager host_issue)."""
        return per_call_seconds(self.calls) if self.calls else None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cpu"]["flags"] = sorted(self.cpu.flags)
        out["per_call"] = self.per_call
        return out


def _log(verbose: bool, text: str) -> None:
    if verbose:
        print(text, flush=True)


def detect(quick: bool = False, verbose: bool = False, root: str | Path = SYS_CPU) -> Detected:
    """Read the host and measure it. ``quick`` keeps every measurement but with smaller
    matrices and shorter runs (seconds, for tests); the full run takes well under a minute."""
    start = time.perf_counter()
    cpu = read_cpu()
    blas = blas_info()
    caches = read_caches(root)
    clock = read_clock(root)
    memory_bytes = read_memory_size()
    threads = blas.threads
    _log(verbose, f"{cpu.model}: {cpu.logical_cpus} CPU(s); BLAS {blas.name} ({blas.core or '?'}), "
                  f"{threads} thread(s)")

    peaks = {}
    sizes = PEAK_SIZES["quick" if quick else "full"]
    for dtype in ("fp32", "fp64"):
        # fp64 runs at half the rate: its largest product would take twice as long.
        orders = sizes if dtype == "fp32" else sizes[:-1] or sizes
        peaks[dtype] = measure_peak(dtype, orders, repeats=2 if quick else 5, threads=threads)
        _log(verbose, f"peak {dtype}: {format_flop_rate(peaks[dtype].flops)} (best of matmul "
                      f"{', '.join(f'{n}x{n}' for n in orders)}; {threads} thread(s))")

    efficiency = measure_efficiency(peaks["fp32"], EFFICIENCY_DIMS["quick" if quick else "full"],
                                    256 if quick else 512, 3 if quick else 15)
    for curve in efficiency:
        _log(verbose, f"fp32 product, small {curve.shape.upper()}: "
                      + ", ".join(f"{d}: {f:.2f}" for d, _, f in curve.points) + " of the peak")
    # Short loops, many of them: a loop that the scheduler interrupts is simply not the best.
    calls = measure_call_costs(200, 5 if quick else 25)
    _log(verbose, f"per call: {format_time(per_call_seconds(calls))} (median of "
                  + ", ".join(f"{format_time(c.seconds)}" for c in calls) + ")")
    outer = measure_outer(*((256, 256) if quick else (1024, 1024)), repeats=3 if quick else 5)
    _log(verbose, f"K=1 product (NumPy's own loop): {outer.per_element * 1e9:.3g} ns per output element; "
                  f"K=2 (BLAS) {format_time(outer.k2_seconds)} against {format_time(outer.k1_seconds)}")

    target = 0.02 if quick else 0.1
    line = caches[0].line
    last = caches[-1]
    # Main memory first: its latency is the far end of the last level's effective-size sweep.
    # Arrays four times the last level (its whole size, not one instance's share), so
    # almost every line comes from DRAM.
    mem_set = 4 * last.size
    latency: dict[str, LatencyPoint] = {"memory": measure_latency(mem_set, line, target * 2)}
    effective = None
    if len(caches) > 1:
        effective = measure_effective_size(last, caches[-2].size, line, latency["memory"].seconds,
                                           0.005 if quick else 0.02, trials=1 if quick else 3)
        _log(verbose, f"{last.name}: behaves as {format_bytes(effective.size)} (the OS states "
                      f"{format_bytes(last.size)})")
    bandwidth: dict[str, list[BandwidthResult]] = {}
    for cache in caches:
        size = effective.size if effective is not None and cache is last else cache.size
        # Private levels: each thread its own half-capacity set; a shared level: half of
        # it split between the threads that share it.
        per_thread = size // 2 if cache.shared_by == 1 else size // 2 // max(threads, 1)
        bandwidth[cache.name] = [measure_bandwidth(k, per_thread, threads, cache.name, target,
                                                   trials=2 if quick else 3) for k in ("copy", "triad")]
        latency[cache.name] = measure_latency(size // 2, line, target / 2)
        _log(verbose, f"{cache.name}: triad {format_byte_rate(bandwidth[cache.name][1].traffic)} (traffic), "
                      f"latency {format_time(latency[cache.name].seconds)}")
    bandwidth["memory"] = [measure_bandwidth(k, mem_set // max(threads, 1), threads, "memory",
                                             0.1 if quick else 0.3, trials=2 if quick else 3)
                           for k in ("copy", "triad")]
    latency["memory"] = latency.pop("memory")  # keep the levels' order: caches, then memory
    _log(verbose, f"memory: triad {format_byte_rate(bandwidth['memory'][1].traffic)} (traffic), "
                  f"latency {format_time(latency['memory'].seconds)}")

    curve = []
    size = 4096
    while size <= mem_set:
        curve.append(measure_latency(size, line, 0.005 if quick else 0.02, window=None))
        size *= 4 if quick else 2

    # Blocks for the caches as they behave: a panel sized for the stated L3 would spill.
    blocks = blocking(as_behaving(caches, effective), cpu.flags, 4)
    mlp = bandwidth["memory"][1].traffic * latency["memory"].seconds / line
    return Detected(cpu, blas, caches, clock, memory_bytes, peaks, bandwidth, latency, curve, blocks, mlp,
                    quick, time.perf_counter() - start, _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    calls=calls, outer=outer, effective=effective, efficiency=efficiency)
