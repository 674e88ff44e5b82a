"""BLIS-like block sizes derived from the host's caches (:func:`blocking`).

Reads only what :mod:`memwall.host.probe` states about the caches (as they behave, see
:func:`memwall.host.measure.as_behaving`) and the ISA flags; :func:`memwall.host.measure.detect`
records the blocks in its :class:`~memwall.host.measure.Detected`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..units import format_bytes
from .probe import CacheInfo

__all__ = ["Blocking", "blocking", "simd_lanes"]


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


