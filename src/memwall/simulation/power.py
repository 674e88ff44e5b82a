"""The power limit: the clock a step that would draw more than its device's rating runs at.

Owns :func:`at_power_limit` (a step timed as its device's limit allows, with the retimer
the sensitivity uses), built on :func:`power_held` (the machine a power-held step is timed
on) and :func:`held_seconds` (a step's seconds under the limit on any machine), and what
the limit weighs (:func:`dynamic_joules_of`). A run that keeps a device busy for longer than its
power controller's window (a training step: ``Machine.power_saturated``) cannot average
more than the rated power: where it would at the burst rates, the controller lowers the
SM clock until it does not. Every operation costs the energy its profile states whatever
the clock ([energy]; the tensor cores' figure is the one measured at the power-saturated
clock), so the step's dynamic joules ``J`` are fixed by its counts, and a device of rated
power ``P_tdp`` and idle ``P_static`` needs at least ``J / (P_tdp - P_static)`` seconds.
The arithmetic (matrix and vector units) slows by one factor ``s`` until the step takes
that long; main memory, the caches and the links keep their rates (docs/timing.md, "The
power limit").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from ..energy import HOST, device_joules
from ..profiles import Machine

if TYPE_CHECKING:
    from ..timing import CommTiming, StepTiming

# The scale is found to this relative error of the step's seconds: far below any figure's.
TOLERANCE = 1e-12
ITERATIONS = 200
# The slowest clock tried: a step still faster than the limit allows at this share of its
# burst rates is not one its arithmetic paces (its time is in cycles, or it has none), and
# no clock the controller picks holds it.
SLOWEST = 1e-3


T = TypeVar("T")


def at_power_limit(machine: Machine, timed: Callable[[Machine], T], seconds_of: Callable[[T], float],
                   joules_of: Callable[[T, Machine], float]) -> tuple[T, Callable[[Machine], float]]:
    """A step timed on ``machine`` as its power limit allows, and its seconds on any other
    machine (the sensitivity's retimer, :func:`held_seconds`). ``timed(on)`` times the step's
    counts on a machine (one device's step, or a pipeline of stages), ``seconds_of`` reads
    its seconds, and ``joules_of(burst, on)`` prices the step timed at the burst rates at
    another machine's energy figures (the busiest device's, on several). The step is timed
    again at the held clock only where :func:`power_held` lowers it."""
    burst = timed(machine)

    def seconds_on(on: Machine) -> float:
        return seconds_of(timed(on))

    def joules_on(on: Machine) -> float:
        return joules_of(burst, on)

    held = power_held(machine, seconds_on, joules_on, seconds_of(burst))
    return (burst if held is machine else timed(held)), held_seconds(seconds_on, joules_on)


def _limited(machine: Machine) -> bool:
    """The run is held to its device's rating: a power-saturated step on a profile that
    states its rated power above its idle power."""
    spec = machine.energy
    return machine.power_saturated and spec is not None and spec.tdp > spec.static


def power_seconds(machine: Machine, joules: float) -> float:
    """The least seconds a power-saturated step of ``joules`` dynamic joules (one device's)
    can take on ``machine``: joules / (tdp - static); 0 where the limit does not apply."""
    if not _limited(machine) or joules <= 0:
        return 0.0
    assert machine.energy is not None
    return joules / (machine.energy.tdp - machine.energy.static)


def power_held(machine: Machine, seconds_on: Callable[[Machine], float], joules_on: Callable[[Machine], float],
               burst: float) -> Machine:
    """``machine``, or ``machine`` with ``power_scale`` s < 1 where a power-saturated step
    of ``joules_on(machine)`` dynamic joules (one device's, the busiest device's on several)
    would average more than the rating over its ``burst`` seconds (``seconds_on(machine)``,
    timed already): s is the one at which the step takes :func:`power_seconds`. The joules
    are priced only where the limit applies."""
    if not _limited(machine):
        return machine
    need = power_seconds(machine, joules_on(machine))
    if not _holdable(machine, seconds_on, burst, need):
        return machine
    # The arithmetic's time goes as 1/s and the rest does not: T(s) = A/s + R, piecewise
    # (a kernel's bound may change on the way). s <- s T(s) / need moves s by the step's own
    # shortfall, a contraction (slope R / need < 1) where T has that form; the bracket
    # [lo, hi] (T(lo) >= need > T(hi)) keeps the search safe where it has not.
    lo, hi = SLOWEST, 1.0
    s = max(lo, min(hi, burst / need))
    for _ in range(ITERATIONS):
        t = seconds_on(replace(machine, power_scale=s))
        if abs(t / need - 1) <= TOLERANCE:
            break
        if t < need:
            hi = s
        else:
            lo = s
        guess = s * t / need
        s = guess if lo < guess < hi else (lo + hi) / 2
    return replace(machine, power_scale=s)


def held_seconds(seconds_on: Callable[[Machine], float],
                 joules_on: Callable[[Machine], float]) -> Callable[[Machine], float]:
    """A step's seconds on any machine with the power limit applied, as :func:`power_held`
    times it: the seconds at the burst rates, or :func:`power_seconds` where that is longer
    and the arithmetic can be slowed to it. For the sensitivity, whose machines move one
    figure of the power-held one: their own limit is found again, not the held clock kept."""
    joules: dict[tuple, float] = {}

    def priced(on: Machine) -> float:
        # the joules move only with the energy figures: the sensitivity's retimes of a rate
        # or a latency price the same counts at the same figures
        ic, e = on.interconnect, on.energy
        key = (None if e is None else (tuple(e.matrix.items()), tuple(e.vector.items()), e.fabric),
               on.memory.energy, tuple(lv.energy for lv in on.levels),
               None if ic is None else tuple(getattr(getattr(ic, n, None), "energy", None) for n in ("node", "cluster")))
        if key not in joules:
            joules[key] = joules_on(on)
        return joules[key]

    def seconds(on: Machine) -> float:
        burst = replace(on, power_scale=1.0) if on.power_scale != 1.0 else on
        t = seconds_on(burst)
        if not _limited(burst):  # no joules to price
            return t
        need = power_seconds(burst, priced(burst))
        return need if _holdable(burst, seconds_on, t, need) else t
    return seconds


def _holdable(machine: Machine, seconds_on: Callable[[Machine], float], burst: float, need: float) -> bool:
    """The step at the burst rates (``burst`` seconds) is faster than the limit allows
    (``need``), and slowing its arithmetic can make it that slow."""
    return burst < need and seconds_on(replace(machine, power_scale=SLOWEST)) >= need


def dynamic_joules_of(timing: StepTiming, comms: Sequence[CommTiming] = ()) -> float:
    """One device's dynamic joules over its step, the host's issue excepted (the host's CPUs
    are not held to the device's rating): what the power limit weighs."""
    return sum(v for k, v in device_joules(timing, comms).items() if k != HOST)
