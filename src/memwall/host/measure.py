"""Measurements of the host: peak FLOP/s, bandwidth per level, latency per level.

Owns the kernels' drivers (:func:`measure_peak` by a NumPy matrix product,
:func:`measure_bandwidth` by STREAM-like copy and triad in every BLAS thread,
:func:`measure_latency` by a pointer chase over :func:`chase_array`) and
:func:`detect`, which reads the host (:mod:`memwall.host.probe`) and measures it into
one :class:`Detected`. The compiled kernels are ``memwall._probe``.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..units import format_byte_rate, format_flop_rate, format_time
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
from .profile import Blocking, blocking


def _probe() -> Any:
    try:
        from .. import _probe as probe
    except ImportError as err:  # reported, never replaced by slow Python loops
        raise InputError(f"the host probe memwall._probe is not built ({err}); "
                         "run 'python setup.py build_ext --inplace' or reinstall memwall") from None
    return probe


@dataclass(frozen=True)
class PeakResult:
    dtype: str
    n: int
    flops: float  # FLOP/s, best of the repeats
    seconds: list[float]


def measure_peak(dtype: str, n: int, repeats: int = 3) -> PeakResult:
    """Best FLOP/s of ``C = A @ B`` for n×n matrices (2n³ FLOPs), after one warm-up."""
    rng = np.random.default_rng(0)
    np_dtype = {"fp32": np.float32, "fp64": np.float64}[dtype]
    a = rng.standard_normal((n, n)).astype(np_dtype)
    b = rng.standard_normal((n, n)).astype(np_dtype)
    c = np.empty((n, n), dtype=np_dtype)
    np.matmul(a, b, out=c)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    return PeakResult(dtype, n, 2.0 * n**3 / min(times), times)


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

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cpu"]["flags"] = sorted(self.cpu.flags)
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
    for dtype in ("fp32", "fp64"):
        n = 768 if quick else 2048
        peaks[dtype] = measure_peak(dtype, n, repeats=3 if quick else 6)
        _log(verbose, f"peak {dtype}: {format_flop_rate(peaks[dtype].flops)} (matmul {n}x{n})")

    target = 0.02 if quick else 0.1
    bandwidth: dict[str, list[BandwidthResult]] = {}
    latency: dict[str, LatencyPoint] = {}
    line = caches[0].line
    last = caches[-1]
    for cache in caches:
        # Private levels: each thread its own half-capacity set; a shared level: half of
        # it split between the threads that share it.
        per_thread = cache.size // 2 if cache.shared_by == 1 else cache.size // 2 // max(threads, 1)
        bandwidth[cache.name] = [measure_bandwidth(k, per_thread, threads, cache.name, target,
                                                   trials=2 if quick else 3) for k in ("copy", "triad")]
        latency[cache.name] = measure_latency(cache.size // 2, line, target / 2)
        _log(verbose, f"{cache.name}: triad {format_byte_rate(bandwidth[cache.name][1].traffic)} (traffic), "
                      f"latency {format_time(latency[cache.name].seconds)}")
    # Main memory: arrays four times the last level (its whole size, not one instance's
    # share), so almost every line comes from DRAM.
    mem_set = 4 * last.size
    bandwidth["memory"] = [measure_bandwidth(k, mem_set // max(threads, 1), threads, "memory",
                                             0.1 if quick else 0.3, trials=2 if quick else 3)
                           for k in ("copy", "triad")]
    latency["memory"] = measure_latency(mem_set, line, target * 2)
    _log(verbose, f"memory: triad {format_byte_rate(bandwidth['memory'][1].traffic)} (traffic), "
                  f"latency {format_time(latency['memory'].seconds)}")

    curve = []
    size = 4096
    while size <= mem_set:
        curve.append(measure_latency(size, line, 0.005 if quick else 0.02, window=None))
        size *= 4 if quick else 2

    blocks = blocking(caches, cpu.flags, 4)
    mlp = bandwidth["memory"][1].traffic * latency["memory"].seconds / line
    return Detected(cpu, blas, caches, clock, memory_bytes, peaks, bandwidth, latency, curve, blocks, mlp,
                    quick, time.perf_counter() - start, _dt.datetime.now().strftime("%Y-%m-%d %H:%M"))
