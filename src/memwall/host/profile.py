"""The profile of the host, written from what was read and measured.

Owns the profile as a table that follows the machine-profile declaration
(:func:`profile_table`), its TOML text (:func:`profile_toml`, written by
:func:`memwall.schema.dumps` from that declaration, not by string concatenation),
:func:`write_profile` and :func:`summary`. It reads a :class:`~memwall.host.measure.Detected`;
measure imports nothing from here (the blocks are :mod:`memwall.host.blocking`'s).

Modelling choices, stated once here and again in the profile's notes:

* Peak FLOP/s is the best rate of square ``numpy.matmul`` products of order up to 4096
  with all BLAS threads, best of several (an achieved GEMM rate, not the datasheet's
  FMA-port count). ``efficiency_mn`` / ``efficiency_k`` are the fractions of it products
  with a small M or K reach; ``outer_product`` is numpy.matmul's own K = 1 loop.
* Dispatch is ``eager``: each kernel is a NumPy call, at the measured per-call cost, on
  the core that then runs it (``device_gap`` 0).
* The last level's size is what a chase finds it behaving as, where that is less than
  the OS states (a shared L3); the other levels' sizes are the OS's.
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

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..profiles import FORMAT_VERSION, PROFILE
from ..schema import dumps
from ..units import format_byte_rate, format_bytes, format_flop_rate, format_time
from .measure import Detected, EfficiencyCurve, as_behaving
from .probe import SYS_CPU, CacheInfo, level_geometry

DETECT_SOURCE = "detect"
_CHASE = "pointer chase, one thread, random order within 128 KiB windows (TLB-resident)"


def _fig(value: Any, source: str, status: str, derivation: str | None = None, note: str | None = None) -> dict[str, Any]:
    return {"value": value, "source": source, "status": status, "derivation": derivation, "note": note or None}


def _rate(value: float, unit: str) -> str:
    return f"{value / 1e9:.4g} G{unit}"


def _notes(d: Detected) -> str:
    return " ".join([
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
        *([f"Dispatch eager: every kernel is one NumPy call from Python, issued by the core that then runs "
           f"it, at the measured {format_time(d.per_call)} per call (a framework that issues several calls "
           f"for one kernel pays it several times)."] if d.per_call is not None else []),
        *([f"outer_product: numpy.matmul runs a K = 1 product (column @ row) in NumPy's own loop, not the "
           f"BLAS; {_outer_how(d)}."] if d.outer is not None else []),
    ])


def _efficiency_how(c: EfficiencyCurve) -> str:
    what = "M x {o} by {o} x {o} (C = A Bt, M the dimension)" if c.shape == "mn" else \
        "{o} x K by K x {o} (C = At B, K the dimension)"
    return (f"best of the repeats of float32 numpy.matmul {what.format(o=c.other)}, all BLAS threads, against "
            "the fp32 peak (the last point is the peak's own order): "
            + ", ".join(f"{d}: {format_flop_rate(r)}" for d, r, _ in c.points))


def _outer_how(d: Detected) -> str:
    o = d.outer
    assert o is not None
    return (f"best of {format_time(o.k1_seconds)} for a {o.m}x1 by 1x{o.n} float32 numpy.matmul, / {o.m * o.n} "
            f"output elements (K = 2, through the BLAS: {format_time(o.k2_seconds)}); NumPy sends column @ row "
            "to its own loop ('no blas needed')")


def _identity(d: Detected, ident: str) -> dict[str, Any]:
    if d.clock is not None:
        hz, where = d.clock
        clock = _fig(f"{hz / 1e6:.6g} MHz", where, "secondary", note="as the system states it")
    else:
        # The schema needs a clock to turn seconds into cycles; no prediction depends on it.
        clock = _fig("1 GHz", DETECT_SOURCE, "estimate",
                     derivation="the system states no clock: a nominal 1 GHz, used only to express seconds as cycles")
    return {
        "format_version": FORMAT_VERSION, "id": ident,
        "name": d.cpu.model + f" ({d.blas.threads} BLAS thread(s)), detected host", "vendor": d.cpu.vendor,
        "year": _fig(int(d.when[:4]), DETECT_SOURCE, "estimate",
                     derivation="the year of the measurement: the OS does not state when the part was first delivered"),
        "kind": "superscalar", "primary_dtype": "fp32", "clock": clock, "notes": _notes(d),
    }


def _compute(d: Detected) -> dict[str, Any]:
    out = {}
    for dtype, peak in d.peaks.items():
        median = 2.0 * peak.n**3 / float(np.median(peak.seconds))
        tried = ", ".join(f"{n}: {format_flop_rate(r)}" for n, r in zip(peak.sizes, peak.rates, strict=True))
        how = (f"best of {len(peak.seconds)} numpy.matmul of two {peak.n}x{peak.n} {dtype} matrices, "
               f"2n^3 FLOPs, {peak.threads} BLAS thread(s); median {format_flop_rate(median)}; "
               f"best by order: {tried or peak.n}")
        out[dtype] = _fig(_rate(peak.flops, "FLOP/s"), DETECT_SOURCE, "measured", derivation=how)
    return out


def _effective(d: Detected, cache: CacheInfo) -> tuple[CacheInfo, str]:
    """The level as it behaves (:func:`as_behaving`); the note says both sizes."""
    e = d.effective
    if e is None or cache is not d.caches[-1] or e.size >= cache.size:
        return cache, ""
    note = (f"the OS states {format_bytes(e.stated)}; a one-thread chase finds it behaving as "
            f"{format_bytes(e.size)} (latency past half-way from {format_time(e.inner)} to memory's "
            f"{format_time(e.memory)} beyond that: the level is shared with other cores and processes)")
    return as_behaving(d.caches, e)[-1], note


def _level(d: Detected, stated: CacheInfo) -> dict[str, Any]:
    cache, effective_note = _effective(d, stated)
    size, ways, geometry_note = level_geometry(cache)
    copy, triad = d.bandwidth[cache.name]
    first = cache is d.caches[0]
    counted = ("24 B per element (the bytes loads and stores touch)" if first
               else "32 B per element (lines filled + written back)")
    bw_how = (f"triad over {format_bytes(triad.working_set)} in {triad.threads} thread(s), {counted}; "
              f"copy: {format_byte_rate(copy.core if first else copy.traffic)}")
    lat = d.latency[cache.name]
    size_fig = (_fig(size, "sysfs", "secondary", note=geometry_note) if not effective_note else
                _fig(size, DETECT_SOURCE, "measured", derivation=effective_note, note=geometry_note))
    return {
        "name": cache.name, "size": size_fig, "line": cache.line,
        "ways": ways, "policy": "lru", "write": "back-allocate", "inclusion": "none", "shared_by": cache.shared_by,
        "latency": _fig(f"{lat.seconds * 1e9:.4g} ns", DETECT_SOURCE, "measured",
                        derivation=f"{_CHASE}, over {format_bytes(lat.working_set)}"),
        "bandwidth": _fig(_rate(triad.core if first else triad.traffic, "B/s"), DETECT_SOURCE, "measured",
                          derivation=bw_how),
    }


def _dispatch(d: Detected) -> dict[str, Any] | None:
    """[timing.dispatch]: the host issues every kernel itself, one NumPy call each, at the
    measured per-call cost. ``device_gap`` is left at its default 0: there is no device
    stream to gap (the core that issues a call also runs it), so nothing to measure."""
    if d.per_call is None:
        return None
    kinds = "; ".join(f"{c.name} {c.seconds * 1e9:.4g} ns" for c in d.calls)
    return {
        "default": "eager",
        "eager": {
            "host_issue": _fig(f"{d.per_call * 1e9:.4g} ns", DETECT_SOURCE, "measured",
                               derivation=f"median over kinds of call of the best of {d.calls[0].trials} loops of "
                                          f"{d.calls[0].calls} one-element NumPy calls each: {kinds}"),
        },
    }


def _memory_and_timing(d: Detected) -> dict[str, Any]:
    mem_copy, mem_triad = d.bandwidth["memory"]
    mem_lat = d.latency["memory"]
    if d.memory_bytes:
        capacity = _fig(d.memory_bytes, "meminfo", "secondary", note="MemTotal")
    else:
        capacity = _fig("1 GiB", DETECT_SOURCE, "estimate", derivation="not stated by the OS")
    bw_how = (f"triad over {format_bytes(mem_triad.working_set)} in {mem_triad.threads} thread(s), 32 B per "
              f"element (lines filled + written back); STREAM count {format_byte_rate(mem_triad.stream)}; copy "
              f"{format_byte_rate(mem_copy.traffic)} traffic, {format_byte_rate(mem_copy.stream)} STREAM count")
    mlp_how = (f"Little: {format_byte_rate(mem_triad.traffic)} x {format_time(mem_lat.seconds)} / "
               f"{d.caches[0].line} B")
    return {
        "memory": {
            "capacity": capacity,
            "latency": _fig(f"{mem_lat.seconds * 1e9:.4g} ns", DETECT_SOURCE, "measured",
                            derivation=f"{_CHASE}, over {format_bytes(mem_lat.working_set)} (4x the last level)"),
            "bandwidth": _fig(_rate(mem_triad.traffic, "B/s"), DETECT_SOURCE, "measured", derivation=bw_how),
        },
        "timing": {
            "model": "overlapped", "overlap": "max",
            "mlp": _fig(round(d.mlp, 2), DETECT_SOURCE, "measured", derivation=mlp_how), "cores": 1,
            **({"outer_product": _fig(f"{d.outer.per_element * 1e9:.4g} ns", DETECT_SOURCE, "measured",
                                      derivation=_outer_how(d))} if d.outer is not None else {}),
            **{f"efficiency_{c.shape}": _fig([[p[0], float(f"{p[2]:.4g}")] for p in c.points], DETECT_SOURCE, "measured",
                                             derivation=_efficiency_how(c)) for c in d.efficiency},
            **({"dispatch": _dispatch(d)} if d.calls else {}),
            "note": "overlap 'max' because each bandwidth was measured end to end; cores = 1 because mlp was "
                    "measured with every BLAS thread at once: it is the chip's already",
        },
    }


def profile_table(d: Detected, ident: str = "host") -> dict[str, Any]:
    """The detected host as a profile table (format 1), every figure with its provenance."""
    mode = "quick mode (small sizes)" if d.quick else "full mode"
    blocks_note = ("BLIS-like blocks for fp32 derived from the detected caches, the last level at its measured "
                   "size: "
                   + "; ".join(f"{k}: {v}" for k, v in d.blocks.derivation.items()))
    return {
        **_identity(d, ident),
        "compute": _compute(d),
        "level": [_level(d, cache) for cache in d.caches],
        **_memory_and_timing(d),
        "schedule": {"family": "blocked", "micro_tile": list(d.blocks.micro_tile), "kc": d.blocks.kc,
                     "mc": d.blocks.mc, "nc": d.blocks.nc, "note": blocks_note},
        "sources": {
            "sysfs": f"Linux sysfs {SYS_CPU}/cpu0/cache/index*/ (the kernel reports CPUID), read {d.when}",
            "cpufreq": f"Linux cpufreq {SYS_CPU}/cpu0/cpufreq/cpuinfo_max_freq, read {d.when}",
            "cpuinfo": f"/proc/cpuinfo, cpu MHz, read {d.when}",
            "meminfo": f"/proc/meminfo, read {d.when}",
            DETECT_SOURCE: f"memwall machines detect (memwall.host), {mode}, {d.when}",
        },
    }


def profile_toml(d: Detected, ident: str = "host") -> str:
    """The detected host as profile text, written from the profile declaration."""
    mode = "quick mode (small sizes)" if d.quick else "full mode"
    return dumps(profile_table(d, ident), PROFILE, comments=[
        f"Written by 'memwall machines detect' on {d.when} ({mode}, {d.seconds:.0f} s).",
        "Output, not a catalogue entry: it describes this host and these measurements only.",
    ])


def summary(d: Detected) -> str:
    """A few lines for a person: what was stated and what was measured."""
    out = [f"{d.cpu.model} ({d.cpu.vendor}), {d.cpu.logical_cpus} CPU(s); BLAS {d.blas.name}, kernel "
           f"{d.blas.core or '?'}, {d.blas.threads} thread(s) [{d.blas.how}]"]
    if d.clock:
        out.append(f"clock {d.clock[0] / 1e6:.6g} MHz ({d.clock[1]})")
    for dtype, p in d.peaks.items():
        out.append(f"peak {dtype} {format_flop_rate(p.flops)} (best at matmul {p.n}, {p.threads} thread(s); "
                   + ", ".join(f"{n}: {format_flop_rate(r)}" for n, r in zip(p.sizes, p.rates, strict=True)) + ")")
    if d.per_call is not None:
        out.append(f"per NumPy call {format_time(d.per_call)} (median; "
                   + ", ".join(f"{c.name.split('(')[0]} {format_time(c.seconds)}" for c in d.calls) + ")")
    if d.outer is not None:
        out.append(f"K=1 matmul (NumPy loop) {d.outer.per_element * 1e9:.3g} ns per output element")
    if d.effective is not None:
        out.append(f"{d.effective.level} behaves as {format_bytes(d.effective.size)} of the stated "
                   f"{format_bytes(d.effective.stated)} (chase: " + ", ".join(
                       f"{format_bytes(p.working_set)} {p.seconds * 1e9:.3g} ns" for p in d.effective.curve) + ")")
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
