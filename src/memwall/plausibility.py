"""What a machine profile may legally say but almost surely should not: a unit slip, a
swapped level, a balance no machine of its era has.

Owns: :func:`plausibility` (the warnings ``machines validate`` prints, which ``--strict``
counts as problems), the bounds it checks (:data:`PLAUSIBLE` per figure, the era's
balance and the spread of a machine's peaks), and the figures to blame for a result
that is not finite (:func:`implausible_figures`, :func:`suspect_figures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .schema import Problems

if TYPE_CHECKING:
    from .levels import LevelSpec
    from .profiles import Machine

# Figures outside these are legal but almost surely a unit slip: warned about, not refused.
PLAUSIBLE = {"clock": (1e5, 1e10), "bandwidth": (1e3, 1e17), "latency": (1e-11, 1e-3), "cycles": (0.0, 1e4)}
# [timing] figures counted in clock cycles: no machine's start-up, bank busy time, strip
# loop or multiply-add holds its unit for ten thousand cycles (the Cray-2's vector
# start-up, the longest stated, is 85)
CYCLE_FIGURES = ("startup", "bank_busy", "strip_loop", "multiply_add_cycles")


def plausibility(m: Machine, problems: Problems) -> None:
    """Warnings for figures that are legal but almost surely wrong (a unit slip); the
    profile's shape is checked as it is read (:func:`structure`)."""
    lo, hi = PLAUSIBLE["clock"]
    if not lo <= m.clock_hz <= hi:
        problems.add(f"clock {m.clock_hz:g} Hz is outside {lo:g} .. {hi:g} Hz", "clock", warning=True)
    for where, key, value in _plausible_figures(m)[1:]:
        lo, hi = PLAUSIBLE[key]
        if value is not None and not lo <= value <= hi:
            problems.add(f"{key} {value:g} (SI) is outside the plausible {lo:g} .. {hi:g}", where, warning=True)
    _era_balance(m, problems)
    _energy_within_rating(m, problems)
    _in_flight_below_measured(m, problems)


def _in_flight_below_measured(m: Machine, problems: Problems) -> None:
    """A Little's-law cap (units x bytes_in_flight / memory latency) is the least work in
    flight that a rate measured on the part needs: a cap below one of the part's own
    measured streams contradicts that measurement (the figure was taken from a kernel that
    keeps less in flight than the part can)."""
    in_flight, units = m.schedule.params.get("bytes_in_flight"), m.schedule.params.get("units")
    if not (_positive(in_flight) and _positive(units) and m.memory.latency > 0):
        return
    cap = units * in_flight / m.memory.latency
    measured = {f"memory.{k}": v for k in ("sustained", "sustained_read", "sustained_copy")
                if (v := getattr(m.memory, k)) is not None}
    if not measured:
        return
    where = max(measured, key=measured.__getitem__)
    if cap < measured[where] * (1 - 1e-3):
        problems.add(f"{units:g} units x bytes_in_flight {in_flight:g} B / memory.latency {m.memory.latency:.3g} s "
                     f"caps main memory at {cap:.4g} B/s, below the {measured[where]:.4g} B/s of {where}: a unit keeps "
                     f"at least {measured[where] * m.memory.latency / units:.4g} B in flight to sustain it",
                     "schedule.bytes_in_flight", warning=True)


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x > 0


def _energy_within_rating(m: Machine, problems: Problems) -> None:
    """Static power plus one unit at full rate cannot exceed the rated power: a unit slip
    (pJ for nJ), or a peak rate or power of another part. A matrix dtype runs at most at
    its measured ceiling where the profile states one ([compute.achievable],
    [compute.sustained]): that must fit the rating. At a datasheet peak with no measured
    ceiling it may draw above it, as a power-limited part's does (its measured ceilings sit
    at 70-87 % of its peaks because the peak would), but not :data:`PEAK_OVER_RATING` times it."""
    e = m.energy
    if e is None:
        return
    if e.static > e.tdp:
        problems.add(f"static power {e.static:.4g} W is above the rated {e.tdp:.4g} W", "energy.static", warning=True)
        return  # every unit would then be over the rating too: one slip, one warning
    for d, joules in e.matrix.items():
        peak = m.peak_flops.get(d)
        if not peak:
            continue
        measured = [r for r in (m.achievable_flops.get(d), m.sustained_flops.get(d)) if r]
        rate, allowed, at = ((min(measured), e.tdp, "at its measured ceiling") if measured
                             else (peak, e.tdp * PEAK_OVER_RATING, "at its datasheet peak"))
        _within(problems, f"energy.{d}", at, rate * joules, e.static, e.tdp, allowed)
    if m.memory.energy is not None:
        _within(problems, "memory.energy", "at its peak", m.memory.bandwidth * m.memory.energy, e.static, e.tdp,
                e.tdp)


# How far above its rating a matrix unit may draw at a datasheet peak no measurement
# bounds: the measured H100/H200 and Blackwell tensor cores draw 1.14-1.22x (docs/energy.md);
# a unit slip is a factor of a thousand.
PEAK_OVER_RATING = 2.0


def _within(problems: Problems, where: str, at: str, watts: float, static: float, tdp: float,
            allowed: float) -> None:
    if static + watts > allowed * (1 + 1e-9):
        bound = "the rated" if allowed == tdp else f"{allowed / tdp:g}x the rated"
        problems.add(f"{at} this unit alone draws {watts:.4g} W; with the static {static:.4g} W that is "
                     f"above {bound} {tdp:.4g} W (a unit slip, or a peak or rating of another part?)", where,
                     warning=True)


# One device's main memory beyond this is a slip (a unit, a power of two): the largest
# today hold hundreds of GB (shared/research), and 2^62 B also overflows the engine's
# address space once the step's tensors are laid out in it.
LARGEST_MEMORY = 2**50


def structure(problems: Problems, path: Path | None, machine_id: object, capacity: object,
              levels: Sequence[LevelSpec]) -> None:
    """Warnings for a profile whose shape no machine has: an id that is not its file's
    name, a level larger than main memory or than the cache below it, a memory beyond
    :data:`LARGEST_MEMORY`. Checked as a file is read, even when it has errors (so all its
    problems are said at once), and on every result of such a profile
    (:func:`structure_warnings`): they hold for any bandwidth, unlike the era's bounds."""
    if path is not None and isinstance(machine_id, str) and path.stem not in (machine_id, "TEMPLATE"):
        problems.add(f"id {machine_id!r} differs from the file name {path.stem!r}", "id", warning=True)
    if not isinstance(capacity, int):
        return
    if capacity > LARGEST_MEMORY:
        problems.add(f"main memory of {capacity} B is beyond any one device's ({LARGEST_MEMORY} B = 1 PiB): "
                     "a unit slip?", "memory.capacity", warning=True)
    for i, lv in enumerate(levels):
        if lv.size > capacity:
            problems.add(f"level '{lv.name}' ({lv.size} B) is larger than main memory ({capacity} B)",
                         f"level[{lv.name}].size", warning=True)
        below = next((x for x in levels[i + 1:] if not x.software_managed), None)
        if below is not None and lv.size > below.size:
            problems.add(f"level '{lv.name}' ({lv.size} B) is larger than the cache below it, '{below.name}' "
                         f"({below.size} B)", f"level[{lv.name}].size", warning=True)


def structure_warnings(m: Machine) -> list[str]:
    """:func:`structure`'s warnings as one line each, naming the field (and the file)."""
    problems = Problems()
    structure(problems, m.path, m.id, m.memory.capacity, m.levels)
    if problems.warnings and m.path is not None:  # placed at their lines, as `machines validate` places them
        problems = Problems(str(m.path))
        try:
            problems.index(m.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeError):
            pass
        structure(problems, m.path, m.id, m.memory.capacity, m.levels)
    return [str(w) for w in problems.warnings]


# Machine balance by era, and the spread of one machine's peaks across its dtypes: a unit
# prefix slipped by 1000 (TB/s for GB/s, GFLOP/s for TFLOP/s) lands outside these, no
# shipped profile does (the 1980s sit well under 1 FLOP/B, today's accelerators at
# 100-1000 bf16 FLOP/B: shared/research; fp32 to fp8 on one chip spans at most ~100x. fp64
# is left out of the spread: Blackwell Ultra and Rubin cut it to ~1/4000 of their fp4).
BALANCE_BOUNDS = (1e-4, 2000.0)
MODERN_BF16_BALANCE = (100.0, 1000.0)  # a gpu or tpu from 2020 on, at its bf16 rate
PEAK_SPREAD = 1024.0  # the fastest dtype's peak over the slowest's, at most


def _era_balance(m: Machine, problems: Problems) -> None:
    b = m.balance()
    lo, hi = BALANCE_BOUNDS
    if not lo < b < hi:
        problems.add(f"balance {b:.3g} FLOP/B is outside {lo:g} .. {hi:g}: a unit slip in a peak or the memory "
                     "bandwidth?", "memory.bandwidth", warning=True)
    elif m.year < 1990 and b >= 1.0:
        problems.add(f"balance {b:.3g} FLOP/B: a machine of {m.year} sits well under 1 FLOP/B (a unit slip?)",
                     "memory.bandwidth", warning=True)
    if m.year >= 2020 and m.kind in ("gpu", "tpu") and m.peak_flops.get("bf16"):
        lo, hi = MODERN_BF16_BALANCE
        if not lo <= m.balance("bf16") <= hi:
            problems.add(f"bf16 balance {m.balance('bf16'):.3g} FLOP/B is outside {lo:g} .. {hi:g} for a "
                         f"{m.year} {m.kind} (a unit slip in its bf16 peak or memory bandwidth?)",
                         "memory.bandwidth", warning=True)
    peaks = {d: v for d, v in m.peak_flops.items() if v and d != "fp64"}
    if len(peaks) > 1 and max(peaks.values()) > PEAK_SPREAD * min(peaks.values()):
        slow = min(peaks, key=peaks.__getitem__)
        problems.add(f"peak {slow} {peaks[slow]:.3g} FLOP/s is more than {PEAK_SPREAD:g}x below its fastest "
                     f"dtype's {max(peaks.values()):.3g} (a unit slip?)", f"compute.peak.{slow}", warning=True)


def _plausible_figures(m: Machine) -> list[tuple[str, str, float | None]]:
    """(field, kind of figure, value in SI units) of each figure :data:`PLAUSIBLE` bounds, the clock first."""
    figures = [("clock", "clock", m.clock_hz), ("memory.bandwidth", "bandwidth", m.memory.bandwidth),
               ("memory.sustained", "bandwidth", m.memory.sustained),
               ("memory.sustained_read", "bandwidth", m.memory.sustained_read),
               ("memory.sustained_copy", "bandwidth", m.memory.sustained_copy),
               ("memory.latency", "latency", m.memory.latency)]
    cycles = [(f"timing.{key}", "cycles", float(m.timing.params[key])) for key in CYCLE_FIGURES
              if isinstance(m.timing.params.get(key), int | float)]
    return figures + [(f"level[{lv.name}].{key}", key, getattr(lv, key)) for lv in m.levels
                      for key in ("bandwidth", "latency")] + cycles


_SI = {"clock": "Hz", "bandwidth": "B/s", "latency": "s", "cycles": "cycles"}


def implausible_figures(m: Machine) -> list[tuple[str, str, str]]:
    """(field, ``'memory.bandwidth 1e-20 B/s'``, ``'1000 .. 1e+17 B/s'``) of each figure
    outside its plausible range (:data:`PLAUSIBLE`): legal, but no machine's; a shipped
    profile has none."""
    return [(where, f"{where} {value:g} {_SI[key]}", f"{PLAUSIBLE[key][0]:g} .. {PLAUSIBLE[key][1]:g} {_SI[key]}")
            for where, key, value in _plausible_figures(m)
            if value is not None and not PLAUSIBLE[key][0] <= value <= PLAUSIBLE[key][1]]


def suspect_figures(m: Machine) -> list[str]:
    """The figures to blame for a result that is not finite: each outside its plausible
    range, then each changed by ``--set`` (``'memory.bandwidth 1e-300 B/s'``)."""
    implausible = implausible_figures(m)
    named = {where for where, _, _ in implausible}
    return [shown for _, shown, _ in implausible] + [
        f"{where} (set by --set to {fig.value!r})" for where, fig in m.provenance.items()
        if "--set" in f"{fig.note} {fig.derivation}" and where not in named]
