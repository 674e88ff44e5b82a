"""The machine memwall runs on: what the operating system states, what we measure, and
the profile that says both.

Owns: reading the host's caches, clock, memory size and CPU identity from Linux
(:func:`read_caches`, :func:`read_clock`, :func:`read_cpu`, :func:`read_memory_size`),
the BLAS NumPy uses and its thread count (:func:`blas_info`), the measurements (peak
FLOP/s by a NumPy matrix product, :func:`measure_peak`; bandwidth by STREAM-like
kernels, :func:`measure_bandwidth`; latency by a pointer chase, :func:`measure_latency`),
the BLIS-like block sizes derived from the caches (:func:`blocking`), and the profile
written from all of it (:func:`detect`, :func:`profile_toml`). ``memwall machines
detect`` (``memwall.cli.detect``) is a thin wrapper.

Modelling choices, stated once here and again in the profile's notes:

* Peak FLOP/s is the best rate of a large square ``numpy.matmul`` with all BLAS threads
  (an achieved GEMM rate, not the datasheet's FMA-port count).
* Bandwidths are machine-wide (every BLAS thread streaming at once), so they match the
  machine-wide peak. Each is the bytes the cache model counts at that level per second:
  into the first level, the bytes the core's loads and stores touch (24 per triad
  element); below it, lines filled plus lines written back (32 per triad element: the
  store's write-allocate fill and its write-back are real traffic, and the engine counts
  them).
* Latencies are single-thread pointer chases over a random cyclic permutation of lines
  (one load per line, so no prefetcher helps) at half of each level's capacity, and at
  four times the last level's for main memory.
* Cache sizes, lines, ways and sharing are the kernel's (CPUID's); replacement (LRU) and
  inclusion (none) are not stated by the OS, so they are assumptions.
* The timing model is ``overlapped`` with ``overlap = "max"``: each measured bandwidth is
  already end to end (a triad from L3 includes the L3→L2→L1 transfers), so adding the
  levels' times (``"sum"``) would count the inner transfers twice. ``mlp`` comes from
  Little's law on measured figures: memory bandwidth × memory latency ÷ line.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import json
import os
import platform
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .units import format_byte_rate, format_bytes, format_flop_rate, format_time

SYS_CPU = "/sys/devices/system/cpu"
DETECT_SOURCE = "detect"


# ---------------------------------------------------------------------------------
# What the operating system states


@dataclass(frozen=True)
class CacheInfo:
    """One data (or unified) cache level as the kernel reports it for cpu0."""

    level: int
    type: str  # Data | Unified
    size: int  # bytes
    line: int  # bytes
    ways: int  # 0 means fully associative
    sets: int
    shared_by: int  # logical CPUs sharing one instance

    @property
    def name(self) -> str:
        return f"L{self.level}d" if self.type == "Data" else f"L{self.level}"


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace").strip()


def _cpu_list_count(text: str) -> int:
    """Number of CPUs in a kernel CPU list such as '0-3,8,10-11'."""
    count = 0
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            count += int(hi) - int(lo) + 1
        else:
            count += 1
    return count


def read_caches(root: str | Path = SYS_CPU) -> list[CacheInfo]:
    """The data and unified caches of cpu0, nearest first, from sysfs.

    Raises InputError when the system states no caches (not Linux, or a container that
    hides sysfs): detection cannot invent a hierarchy.
    """
    base = Path(root) / "cpu0" / "cache"
    caches: list[CacheInfo] = []
    for index in sorted(base.glob("index*"), key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else 0):
        try:
            kind = _read(index / "type")
            if kind not in ("Data", "Unified"):
                continue
            level = int(_read(index / "level"))
            size = _parse_sysfs_size(_read(index / "size"))
            line = int(_read(index / "coherency_line_size"))
            ways = int(_read(index / "ways_of_associativity"))
            sets_path = index / "number_of_sets"
            sets = int(_read(sets_path)) if sets_path.exists() else 0
            shared_path = index / "shared_cpu_list"
            shared = _cpu_list_count(_read(shared_path)) if shared_path.exists() else 1
        except (OSError, ValueError):
            continue
        caches.append(CacheInfo(level, kind, size, line, ways, sets, max(shared, 1)))
    if not caches:
        raise InputError(f"the system states no caches under {base} (Linux sysfs is needed to detect the host)")
    caches.sort(key=lambda c: c.level)
    return caches


def _parse_sysfs_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)", text.strip())
    if not m:
        raise ValueError(f"cannot read cache size {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def level_geometry(cache: CacheInfo) -> tuple[int, int | str, str]:
    """(size, ways, note) that the profile's level schema accepts (size = sets × ways × line).

    A sysfs report whose size is not sets × ways × line (some hypervisors) keeps the
    stated size and ways and drops the stated sets; ways 0 means fully associative.
    """
    if cache.ways <= 0:
        return cache.size, "full", "the kernel states no associativity: taken as fully associative"
    if cache.size % (cache.ways * cache.line) == 0:
        sets = cache.size // (cache.ways * cache.line)
        note = "" if cache.sets in (0, sets) else f"the kernel states {cache.sets} sets; size / (ways × line) = {sets}"
        return cache.size, cache.ways, note
    # Round down to whole sets so the engine can build it, and say so.
    sets = max(cache.size // (cache.ways * cache.line), 1)
    size = sets * cache.ways * cache.line
    return size, cache.ways, f"the kernel states {cache.size} B, not a whole number of sets; rounded to {size} B"


def read_clock(root: str | Path = SYS_CPU, cpuinfo: str | Path = "/proc/cpuinfo") -> tuple[float, str] | None:
    """The clock the system states, in Hz, and where it says so; None if it states none.

    cpufreq's maximum frequency first (the clock a busy core runs at, boost included
    where the driver reports it), else /proc/cpuinfo's 'cpu MHz' (on a virtual machine
    often the TSC rate the hypervisor passes through).
    """
    max_freq = Path(root) / "cpu0" / "cpufreq" / "cpuinfo_max_freq"
    try:
        return int(_read(max_freq)) * 1e3, "cpufreq"
    except (OSError, ValueError):
        pass
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            m = re.match(r"cpu MHz\s*:\s*([\d.]+)", line)
            if m and float(m.group(1)) > 0:
                return float(m.group(1)) * 1e6, "cpuinfo"
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str
    flags: frozenset[str]
    logical_cpus: int


def read_cpu(cpuinfo: str | Path = "/proc/cpuinfo") -> CpuInfo:
    """Model name, vendor and ISA flags of the host (platform module as a fallback)."""
    model, vendor, flags = "", "", frozenset()
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name" and not model:
                model = value
            elif key == "vendor_id" and not vendor:
                vendor = value
            elif key == "flags" and not flags:
                flags = frozenset(value.split())
    except OSError:
        pass
    vendor = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(vendor, vendor) or "unknown"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return CpuInfo(model or platform.processor() or platform.machine() or "unknown CPU", vendor, flags, cpus)


def read_memory_size(meminfo: str | Path = "/proc/meminfo") -> int | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            m = re.match(r"MemTotal:\s*(\d+)\s*kB", line)
            if m:
                return int(m.group(1)) * 1024
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class BlasInfo:
    """The BLAS behind numpy.matmul, as far as it tells."""

    name: str  # e.g. "scipy-openblas 0.3.31"
    core: str | None  # OpenBLAS's kernel family (e.g. "Haswell"), if it says
    threads: int  # threads it uses for a large product
    how: str  # how threads was found


def blas_info() -> BlasInfo:
    """Which BLAS NumPy calls and how many threads it runs (OpenBLAS is asked directly)."""
    name = "unknown BLAS"
    try:
        config = np.show_config(mode="dicts")  # type: ignore[call-arg]
        blas = config.get("Build Dependencies", {}).get("blas", {})
        name = f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 - show_config's shape differs between NumPy versions
        pass
    for lib in _loaded_blas_libraries():
        for prefix in ("scipy_openblas_", "openblas_", ""):
            for suffix in ("64_", ""):
                getter = getattr(lib, f"{prefix}get_num_threads{suffix}" if prefix else "openblas_get_num_threads",
                                 None)
                if getter is None:
                    continue
                getter.restype = ctypes.c_int
                threads = int(getter())
                core = None
                corename = getattr(lib, f"{prefix}get_corename{suffix}", None)
                if corename is not None:
                    corename.restype = ctypes.c_char_p
                    core = (corename() or b"").decode(errors="replace") or None
                return BlasInfo(name, core, max(threads, 1), "asked OpenBLAS (get_num_threads)")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return BlasInfo(name, None, cpus, "not stated by the BLAS: assumed one thread per available CPU")


def _loaded_blas_libraries() -> list[ctypes.CDLL]:
    """OpenBLAS libraries already loaded into this process (NumPy's bundled one first)."""
    found: list[ctypes.CDLL] = []
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return found
    paths = sorted({line.split()[-1] for line in maps.splitlines() if "openblas" in line.lower() and "/" in line})
    for path in paths:
        try:
            # RTLD_NOLOAD would be ideal; dlopen of a loaded path returns the same handle.
            found.append(ctypes.CDLL(path))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------------------------
# Measurements


def _probe() -> Any:
    try:
        from . import _probe as probe
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


# ---------------------------------------------------------------------------------
# Block sizes


@dataclass(frozen=True)
class Blocking:
    micro_tile: tuple[int, int]  # (mr, nr) elements
    kc: int
    mc: int
    nc: int
    derivation: dict[str, str]


def simd_lanes(flags: frozenset[str], element_bytes: int = 4) -> tuple[int, int]:
    """(elements per vector register, vector registers) from the ISA flags."""
    if "avx512f" in flags:
        return 64 // element_bytes, 32
    if "avx" in flags or "avx2" in flags:
        return 32 // element_bytes, 16
    return 16 // element_bytes, 16


def blocking(caches: Sequence[CacheInfo], flags: frozenset[str], element_bytes: int = 4) -> Blocking:
    """BLIS-like blocks from the caches, after Low, Igual, Smith and Quintana-Ortí,
    'Analytical modeling is enough for high-performance BLIS' (ACM TOMS 43(2), 2016).

    Register tile: mr = two vectors, nr = what the remaining registers hold as
    accumulators (mr/lanes × nr accumulators, plus the A vectors and one B broadcast).
    kc: the kc×nr panel of B stays in L1 with two mr×kc slivers of A streaming through:
    C_A = ⌊(W₁−1)/(1+nr/mr)⌋ ways of A, kc = C_A·sets₁·line₁/(mr·S).
    mc: the mc×kc block of A fills the L2 minus one way (kept for B and C), mc a multiple
    of mr. nc: the kc×nc panel of B fills the L3 minus one way, nc a multiple of nr.
    """
    lanes, registers = simd_lanes(flags, element_bytes)
    mr = 2 * lanes
    nr = max((registers - 4) // 2, 1)  # 2 vectors of C per column, 4 registers for A and B
    by_level = {c.level: c for c in caches}
    l1 = by_level.get(1)
    derivation = {
        "micro_tile": f"mr = 2 vectors of {lanes} elements; nr = ({registers} registers − 4) / 2 "
                      f"accumulator pairs (ISA flags from /proc/cpuinfo)",
    }
    if l1 is not None and l1.ways > 1:
        sets1 = l1.size // (l1.ways * l1.line)
        ways_a = max(int((l1.ways - 1) // (1 + nr / mr)), 1)
        kc = max(ways_a * sets1 * l1.line // (mr * element_bytes), 8)
        derivation["kc"] = (f"C_A = ⌊({l1.ways}−1)/(1+{nr}/{mr})⌋ = {ways_a} ways of L1; "
                            f"kc = {ways_a}·{sets1} sets·{l1.line} B/({mr}·{element_bytes} B) = {kc}")
    else:
        kc = 256
        derivation["kc"] = "no set-associative L1 stated: BLIS's common 256"

    def fill(level: int, per: int, multiple: int, fallback: int, what: str) -> int:
        cache = by_level.get(level)
        if cache is None:
            derivation[what] = f"no L{level} stated: {fallback}"
            return fallback
        usable = cache.size * (cache.ways - 1) // cache.ways if cache.ways > 1 else cache.size // 2
        value = max(usable // (per * element_bytes) // multiple * multiple, multiple)
        derivation[what] = (f"{format_bytes(cache.size)} L{level} less one of {cache.ways} ways = "
                            f"{usable} B, / (kc·{element_bytes} B) rounded down to a multiple of {multiple}")
        return value

    mc = fill(2, kc, mr, 16 * mr, "mc")
    nc = fill(3, kc, nr, 4096 // nr * nr, "nc")
    return Blocking((mr, nr), kc, mc, nc, derivation)


# ---------------------------------------------------------------------------------
# Detection


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


# ---------------------------------------------------------------------------------
# The profile


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def _fig(value: Any, source: str, status: str, derivation: str | None = None, note: str | None = None) -> str:
    parts = [f"value = {value if isinstance(value, int | float) and not isinstance(value, bool) else _q(value)}",
             f"source = {_q(source)}", f"status = {_q(status)}"]
    if derivation:
        parts.append(f"derivation = {_q(derivation)}")
    if note:
        parts.append(f"note = {_q(note)}")
    return "{ " + ", ".join(parts) + " }"


def _rate(value: float, unit: str) -> str:
    return f"{value / 1e9:.4g} G{unit}"


def profile_toml(d: Detected, ident: str = "host") -> str:
    """The detected host as a profile (format 1), every figure with its provenance."""
    mode = "quick mode (small sizes)" if d.quick else "full mode"
    year = _fig(int(d.when[:4]), DETECT_SOURCE, "estimate",
                derivation="the year of the measurement: the OS does not state when the part was first delivered")
    if d.clock is not None:
        hz, where = d.clock
        clock = _fig(f"{hz / 1e6:.6g} MHz", where, "secondary", note="as the system states it")
    else:
        # The schema needs a clock to turn seconds into cycles; no prediction depends on it.
        clock = _fig("1 GHz", DETECT_SOURCE, "estimate",
                     derivation="the system states no clock: a nominal 1 GHz, used only to express seconds as cycles")
    notes = [
        f"Cores: {d.blas.threads} = the threads {d.blas.name} uses for a large product "
        f"({d.blas.how}; {d.cpu.logical_cpus} CPU(s) available; OpenBLAS kernel family "
        f"{d.blas.core or 'not stated'}).",
        "Peaks and bandwidths are machine-wide (all those threads); latencies are one thread's.",
        "Cache levels are one instance each, as the OS states them; replacement LRU and "
        "inclusion 'none' are assumptions (the OS states neither).",
        "Bandwidth below L1 counts lines filled plus written back (32 B per triad element, "
        "the write-allocate fill included), as the engine counts traffic; L1's counts the bytes "
        "loads and stores touch (24 B per triad element).",
        "Timing overlapped/max: each measured bandwidth is end to end, so the levels' times are "
        "not added. mlp = memory bandwidth x memory latency / line (Little's law).",
    ]
    lines = [
        f"# Written by 'memwall machines detect' on {d.when} ({mode}, {d.seconds:.0f} s).",
        "# Output, not a catalogue entry: it describes this host and these measurements only.",
        "format_version = 1",
        f"id = {_q(ident)}",
        f"name = {_q(d.cpu.model + f' ({d.blas.threads} BLAS thread(s)), detected host')}",
        f"vendor = {_q(d.cpu.vendor)}",
        f"year = {year}",
        'kind = "superscalar"',
        'primary_dtype = "fp32"',
        f"clock = {clock}",
        f"notes = {_q(' '.join(notes))}",
        "",
        "[compute]",
    ]
    for dtype, peak in d.peaks.items():
        median = 2.0 * peak.n**3 / float(np.median(peak.seconds))
        how = (f"best of {len(peak.seconds)} numpy.matmul of two {peak.n}x{peak.n} {dtype} matrices, "
               f"2n^3 FLOPs, {d.blas.threads} BLAS thread(s); median {format_flop_rate(median)}")
        lines.append(f"{dtype} = " + _fig(_rate(peak.flops, "FLOP/s"), DETECT_SOURCE, "measured", derivation=how))
    for cache in d.caches:
        size, ways, geometry_note = level_geometry(cache)
        copy, triad = d.bandwidth[cache.name]
        first = cache is d.caches[0]
        bw = triad.core if first else triad.traffic
        counted = ("24 B per element (the bytes loads and stores touch)" if first
                   else "32 B per element (lines filled + written back)")
        bw_how = (f"triad over {format_bytes(triad.working_set)} in {triad.threads} thread(s), {counted}; "
                  f"copy: {format_byte_rate(copy.core if first else copy.traffic)}")
        lat = d.latency[cache.name]
        lat_how = f"pointer chase, one thread, random order within 128 KiB windows (TLB-resident), over {format_bytes(lat.working_set)}"
        ways_text = str(ways) if isinstance(ways, int) else _q(ways)
        lines += [
            "",
            "[[level]]",
            f"name = {_q(cache.name)}",
            "size = " + _fig(size, "sysfs", "secondary", note=geometry_note or None),
            f"line = {cache.line}",
            f"ways = {ways_text}",
            'policy = "lru"',
            'write = "back-allocate"',
            'inclusion = "none"',
            f"shared_by = {cache.shared_by}",
            "latency = " + _fig(f"{lat.seconds * 1e9:.4g} ns", DETECT_SOURCE, "measured", derivation=lat_how),
            "bandwidth = " + _fig(_rate(bw, "B/s"), DETECT_SOURCE, "measured", derivation=bw_how),
        ]
    mem_copy, mem_triad = d.bandwidth["memory"]
    mem_lat = d.latency["memory"]
    if d.memory_bytes:
        capacity = _fig(d.memory_bytes, "meminfo", "secondary", note="MemTotal")
    else:
        capacity = _fig("1 GiB", DETECT_SOURCE, "estimate", derivation="not stated by the OS")
    lat_how = (f"pointer chase, one thread, random order within 128 KiB windows (TLB-resident), over {format_bytes(mem_lat.working_set)} "
               f"(4x the last level)")
    bw_how = (f"triad over {format_bytes(mem_triad.working_set)} in {mem_triad.threads} thread(s), 32 B per "
              f"element (lines filled + written back); STREAM count {format_byte_rate(mem_triad.stream)}; copy "
              f"{format_byte_rate(mem_copy.traffic)} traffic, {format_byte_rate(mem_copy.stream)} STREAM count")
    mlp_how = (f"Little: {format_byte_rate(mem_triad.traffic)} x {format_time(mem_lat.seconds)} / "
               f"{d.caches[0].line} B")
    blocks_note = ("BLIS-like blocks for fp32 derived from the detected caches: "
                   + "; ".join(f"{k}: {v}" for k, v in d.blocks.derivation.items()))
    lines += [
        "",
        "[memory]",
        f"capacity = {capacity}",
        "latency = " + _fig(f"{mem_lat.seconds * 1e9:.4g} ns", DETECT_SOURCE, "measured", derivation=lat_how),
        "bandwidth = " + _fig(_rate(mem_triad.traffic, "B/s"), DETECT_SOURCE, "measured", derivation=bw_how),
        "",
        "[timing]",
        'model = "overlapped"',
        'overlap = "max"',
        "mlp = " + _fig(round(d.mlp, 2), DETECT_SOURCE, "measured", derivation=mlp_how),
        "cores = 1  # mlp was measured with every BLAS thread at once: it is the chip's already",
        "note = " + _q("overlap 'max' because each bandwidth was measured end to end"),
        "",
        "[schedule]",
        'family = "blocked"',
        f"micro_tile = {list(d.blocks.micro_tile)}",
        f"kc = {d.blocks.kc}",
        f"mc = {d.blocks.mc}",
        f"nc = {d.blocks.nc}",
        "note = " + _q(blocks_note),
        "",
        "[sources]",
        "sysfs = " + _q(f"Linux sysfs {SYS_CPU}/cpu0/cache/index*/ (the kernel reports CPUID), read {d.when}"),
        "cpufreq = " + _q(f"Linux cpufreq {SYS_CPU}/cpu0/cpufreq/cpuinfo_max_freq, read {d.when}"),
        "cpuinfo = " + _q(f"/proc/cpuinfo, cpu MHz, read {d.when}"),
        "meminfo = " + _q(f"/proc/meminfo, read {d.when}"),
        f"{DETECT_SOURCE} = " + _q(f"memwall machines detect (memwall.host), {mode}, {d.when}"),
        "",
    ]
    return "\n".join(lines)


def summary(d: Detected) -> str:
    """A few lines for a person: what was stated and what was measured."""
    out = [f"{d.cpu.model} ({d.cpu.vendor}), {d.cpu.logical_cpus} CPU(s); BLAS {d.blas.name}, kernel "
           f"{d.blas.core or '?'}, {d.blas.threads} thread(s) [{d.blas.how}]"]
    if d.clock:
        out.append(f"clock {d.clock[0] / 1e6:.6g} MHz ({d.clock[1]})")
    for dtype, p in d.peaks.items():
        out.append(f"peak {dtype} {format_flop_rate(p.flops)} (matmul {p.n})")
    for cache in d.caches:
        copy, triad = d.bandwidth[cache.name]
        out.append(f"{cache.name}: {format_bytes(cache.size)}, {cache.line} B lines, {cache.ways} ways, "
                   f"shared by {cache.shared_by}; latency {format_time(d.latency[cache.name].seconds)}; "
                   f"triad {format_byte_rate(triad.core)} core / {format_byte_rate(triad.traffic)} traffic; "
                   f"copy {format_byte_rate(copy.core)} core")
    mc, mt = d.bandwidth["memory"]
    out.append(f"memory: {format_bytes(d.memory_bytes or 0)}; latency {format_time(d.latency['memory'].seconds)}; "
               f"triad {format_byte_rate(mt.traffic)} traffic ({format_byte_rate(mt.stream)} STREAM); "
               f"copy {format_byte_rate(mc.traffic)} traffic ({format_byte_rate(mc.stream)} STREAM)")
    out.append(f"mlp (Little) {d.mlp:.3g}; blocks mr x nr = {d.blocks.micro_tile[0]} x {d.blocks.micro_tile[1]}, "
               f"kc {d.blocks.kc}, mc {d.blocks.mc}, nc {d.blocks.nc}")
    out.append("latency curve: " + ", ".join(f"{format_bytes(p.working_set)} {p.seconds * 1e9:.3g} ns"
                                             for p in d.latency_curve))
    out.append(f"took {d.seconds:.1f} s")
    return "\n".join(out)


def write_profile(d: Detected, out: str | Path, ident: str = "host") -> Path:
    """Write the profile and, beside it, the raw measurements as JSON (``<out>.json``)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_toml(d, ident), encoding="utf-8")
    path.with_suffix(path.suffix + ".json").write_text(json.dumps(d.as_dict(), indent=1, default=str) + "\n")
    return path


# ---------------------------------------------------------------------------------
# Real training steps, timed


@dataclass(frozen=True)
class MLPSpec:
    """The part of a network preset a NumPy MLP step needs."""

    layers: tuple[int, ...]  # units, input first
    bias: bool
    activation: str  # sigmoid | tanh | relu | identity
    loss: str  # mse | none (the output gradient supplied as an input)


class NumpyMLP:
    """Forward, backward and an SGD update of a fully connected net in fp32 NumPy.

    Written the way memwall's step lowers it (``y = x Wᵀ``, bias and activation as one
    epilogue, ``dX = dZ W``, ``dW = dZᵀ X``, no input gradient for the first layer, then
    ``W -= lr·dW``), into buffers allocated once, so that the time is the arithmetic and
    traffic of the step and not the allocator's. Per-example updates run the same step
    on one example at a time.
    """

    def __init__(self, spec: MLPSpec, batch: int, seed: int = 0) -> None:
        if spec.activation not in ("sigmoid", "tanh", "relu", "identity"):
            raise InputError(f"the NumPy step does not implement activation {spec.activation!r}")
        rng = np.random.default_rng(seed)
        f32 = np.float32
        self.spec, self.batch, self.lr = spec, batch, f32(1e-4)
        dims = spec.layers
        self.w = [(rng.standard_normal((o, i)) / np.sqrt(i)).astype(f32) for i, o in zip(dims, dims[1:], strict=False)]
        self.b = [np.zeros(o, f32) for o in dims[1:]] if spec.bias else []
        self.gw = [np.zeros_like(w) for w in self.w]
        self.gb = [np.zeros_like(b) for b in self.b]
        self.x = rng.random((batch, dims[0]), dtype=f32)
        self.y = [np.zeros((batch, o), f32) for o in dims[1:]]
        self.d = [np.zeros((batch, n), f32) for n in dims[1:]]  # gradient w.r.t. each layer's output
        self.tmp = [np.zeros((batch, o), f32) for o in dims[1:]]
        self.target = rng.random((batch, dims[-1]), dtype=f32)

    def step(self, rows: slice | None = None) -> None:
        """One step on the batch (or on ``rows`` of it, for per-example updates)."""
        s = rows or slice(None)
        act = self.spec.activation
        x = self.x[s]
        nl = len(self.w)
        for i in range(nl):
            y = self.y[i][s]
            np.matmul(x, self.w[i].T, out=y)
            if self.b:
                np.add(y, self.b[i], out=y)
            if act == "sigmoid":
                np.negative(y, out=y)
                np.exp(y, out=y)
                np.add(y, 1.0, out=y)
                np.reciprocal(y, out=y)
            elif act == "tanh":
                np.tanh(y, out=y)
            elif act == "relu":
                np.maximum(y, 0.0, out=y)
            x = y
        d = self.d[-1][s]
        if self.spec.loss == "mse":
            np.subtract(self.y[-1][s], self.target[s], out=d)
        # loss "none": d (the supplied output gradient) is already in self.d[-1]
        for i in reversed(range(nl)):
            d = self.d[i][s]
            y = self.y[i][s]
            if act == "sigmoid":  # dz = d * y * (1 - y)
                t = self.tmp[i][s]
                np.subtract(1.0, y, out=t)
                np.multiply(t, y, out=t)
                np.multiply(d, t, out=d)
            elif act == "tanh":
                t = self.tmp[i][s]
                np.multiply(y, y, out=t)
                np.subtract(1.0, t, out=t)
                np.multiply(d, t, out=d)
            elif act == "relu":
                np.multiply(d, y > 0, out=d)
            x_in = self.x[s] if i == 0 else self.y[i - 1][s]
            if i > 0:
                np.matmul(d, self.w[i], out=self.d[i - 1][s])
            # The learning rate goes into dZ (B×n) so the update is one pass over the
            # weights, as memwall's update kernel models it: w -= g reads w and g, writes w.
            np.multiply(d, self.lr, out=d)
            np.matmul(d.T, x_in, out=self.gw[i])
            if self.b:
                np.sum(d, axis=0, out=self.gb[i])
        for params, grads in ((self.w, self.gw), (self.b, self.gb)):
            for p, g in zip(params, grads, strict=True):
                np.subtract(p, g, out=p)

    def run(self, per_example: bool) -> None:
        if per_example:
            for r in range(self.batch):
                self.step(slice(r, r + 1))
        else:
            self.step()


@dataclass(frozen=True)
class StepTime:
    median: float  # seconds per step
    best: float
    repeats: int
    warmup: int


def time_step(fn: Callable[[], None], min_repeats: int = 3, max_repeats: int = 15, budget: float = 1.0,
              warmup: int = 1) -> StepTime:
    """Median seconds of ``fn()`` after ``warmup`` calls; repeats until ``budget`` seconds or
    ``max_repeats``, at least ``min_repeats``."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < min_repeats or (spent < budget and len(times) < max_repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
    return StepTime(float(np.median(times)), min(times), len(times), warmup)
