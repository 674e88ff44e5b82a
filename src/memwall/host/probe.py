"""What the operating system states about the host: caches, clock, memory, CPU and BLAS.

Owns the readers of Linux sysfs and procfs (:func:`read_caches`, :func:`read_clock`,
:func:`read_cpu`, :func:`read_memory_size`), the BLAS NumPy uses and its thread count
(:func:`blas_info`), and the level geometry the profile schema accepts
(:func:`level_geometry`). Nothing here measures or writes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

SYS_CPU = "/sys/devices/system/cpu"


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
    getter = _openblas_function("get_num_threads")
    if getter is not None:
        getter.restype = ctypes.c_int
        threads = int(getter())
        core = None
        corename = _openblas_function("get_corename")
        if corename is not None:
            corename.restype = ctypes.c_char_p
            core = (corename() or b"").decode(errors="replace") or None
        return BlasInfo(name, core, max(threads, 1), "asked OpenBLAS (get_num_threads)")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return BlasInfo(name, None, cpus, "not stated by the BLAS: assumed one thread per available CPU")


def set_blas_threads(threads: int) -> int:
    """Make the OpenBLAS NumPy calls run ``threads`` threads; returns the count it reports
    after. InputError where no OpenBLAS is loaded (another BLAS: set its own variable)."""
    if threads < 1:
        raise InputError(f"BLAS threads must be at least 1, got {threads}")
    setter = _openblas_function("set_num_threads")
    if setter is None:
        raise InputError("no OpenBLAS is loaded into this process, so its threads cannot be set "
                         "(set OMP_NUM_THREADS or the BLAS's own variable before starting)")
    setter.argtypes = [ctypes.c_int]
    setter(int(threads))
    return blas_info().threads


def _openblas_function(name: str) -> Any:
    """OpenBLAS's ``name`` (get_num_threads, ...) in the first loaded library that has it,
    under any of the prefixes and suffixes its builds use; None if none has it."""
    for lib in _loaded_blas_libraries():
        for prefix in ("scipy_openblas_", "openblas_"):
            for suffix in ("64_", ""):
                fn = getattr(lib, f"{prefix}{name}{suffix}", None)
                if fn is not None:
                    return fn
    return None


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
