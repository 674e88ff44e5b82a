"""The machine memwall runs on: what the operating system states, what we measure, and
the profile that says both; ``memwall machines detect`` (:mod:`memwall.cli.detect`) is a
thin wrapper.

Three jobs, three modules: :mod:`.probe` reads the OS (caches, clock, memory, CPU, BLAS),
:mod:`.measure` runs the measurement kernels and gathers everything into a
:class:`Detected` (with the BLIS-like blocks that :mod:`.blocking` derives from the
caches), and :mod:`.profile` writes the profile through the machine-profile declaration.
The imports run one way: profile -> measure -> blocking -> probe. The NumPy training
step that the host check times lives with that experiment
(``experiments/host_check.py``), not here.
"""

from .blocking import Blocking, blocking, simd_lanes
from .measure import (
    EFFICIENCY_DIMS,
    KERNEL_BYTES,
    PEAK_SIZES,
    TLB_WINDOW,
    BandwidthResult,
    CallCost,
    Detected,
    EffectiveSize,
    EfficiencyCurve,
    LatencyPoint,
    OuterResult,
    PeakResult,
    as_behaving,
    chase_array,
    detect,
    measure_bandwidth,
    measure_call_costs,
    measure_effective_size,
    measure_efficiency,
    measure_latency,
    measure_outer,
    measure_peak,
    per_call_seconds,
)
from .probe import (
    SYS_CPU,
    BlasInfo,
    CacheInfo,
    CpuInfo,
    blas_info,
    level_geometry,
    read_caches,
    read_clock,
    read_cpu,
    read_memory_size,
    set_blas_threads,
)
from .profile import DETECT_SOURCE, profile_table, profile_toml, summary, write_profile

__all__ = [
    "DETECT_SOURCE", "EFFICIENCY_DIMS", "KERNEL_BYTES", "PEAK_SIZES", "SYS_CPU", "TLB_WINDOW", "BandwidthResult", "BlasInfo", "Blocking",
    "CacheInfo", "CallCost", "CpuInfo", "Detected", "EffectiveSize", "EfficiencyCurve", "LatencyPoint", "OuterResult", "PeakResult",
    "as_behaving", "blas_info", "blocking", "chase_array", "detect", "level_geometry", "measure_bandwidth", "measure_call_costs",
    "measure_effective_size", "measure_efficiency", "measure_latency", "measure_outer", "measure_peak", "per_call_seconds",
    "profile_table", "profile_toml", "read_caches", "read_clock", "read_cpu", "read_memory_size", "set_blas_threads",
    "simd_lanes", "summary", "write_profile",
]
