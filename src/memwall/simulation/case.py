"""One case, end to end: case -> step -> plan -> replay -> time -> result.

Owns: :func:`run_case`, which reads nothing from files but the profiles and presets,
writes nothing, starts no process and draws nothing; and the rule for a dtype the
machine has no arithmetic for is :func:`memwall.simulation.timed.dtype_fallback`'s. A case on more than one device
takes the same road in :mod:`memwall.simulation.devices`; a whole request (``--phase
generate``) runs its prefill and decode steps as cases of their own and adds them up
(:mod:`memwall.simulation.generate`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..options import Case
from ..profiles import Machine, load_machine
from ..timing import StepTiming
from ..vocabulary import GENERATE
from .devices import run_parallel
from .generate import run_generate
from .intervals import with_interval
from .plan import Prepared, check_cost, plan_replay
from .power import at_power_limit, dynamic_joules_of
from .replay import ReplayCache, _ticker, replay_key, replay_step
from .result import Result, build_result
from .step import build_case_step
from .timed import accumulated, dtype_fallback, simulate_step, stack_of


def run_case(case: Case, *, machine: Machine | None = None, exact: bool = False,
             max_lookups: int | None = None, progress: Callable[[int, int], Any] | None = None,
             allow_fallback: bool = False, replays: ReplayCache | None = None,
             prepared: Prepared | None = None) -> Result:
    """Simulate one case; ``machine`` overrides the profile named by ``case.machine``
    (for synthetic machines such as a bandwidth sweep); ``exact`` replays every access
    of every nest instead of sampling the large ones.

    Before any replay the cost is estimated (:func:`plan_replay`) and a case over
    ``max_lookups`` line lookups (None: :data:`MAX_LOOKUPS`) is refused with an
    InputError giving the estimate. ``progress(done, total)``, if given, is called as
    pieces of the replay finish, in line lookups.

    A ``case.dtype`` the machine states no rate for is refused, naming the machine's
    dtypes, unless ``allow_fallback``; then, as for a network's own dtype (which is not
    asked for), the products run at the fallback's rate with a warning and
    ``dtype_fallback`` in the result.

    ``replays``, if given, is asked for this case's replay (:func:`replay_key`) before
    the engine runs and given it after: cases that differ only in what the engine never
    sees (bandwidths, latencies, peaks, dispatch) replay once. ``prepared``, if given,
    supplies the step and the plan when an earlier case built them.

    The result's ``interval`` is the shipped calibration's (:mod:`memwall.simulation.intervals`),
    set on the finished prediction: it never moves the seconds."""
    return with_interval(_run(case, machine=machine, exact=exact, max_lookups=max_lookups, progress=progress,
                              allow_fallback=allow_fallback, replays=replays, prepared=prepared))


def _run(case: Case, *, machine: Machine | None, exact: bool, max_lookups: int | None,
         progress: Callable[[int, int], Any] | None, allow_fallback: bool, replays: ReplayCache | None,
         prepared: Prepared | None) -> Result:
    """:func:`run_case`'s prediction, before its interval."""
    if machine is None:
        machine = load_machine(case.machine)
    if case.held != machine.power_saturated:
        # A training run keeps the device at its power limit for hours, and so does a
        # benchmark loop of seconds (--power held): its products meet the power-saturated
        # ceiling where a profile states one ([compute.sustained]); a short run (a single
        # product as most benchmarks time it, an inference step) keeps the burst ceiling
        machine = replace(machine, power_saturated=case.held)
    if case.phase == GENERATE:  # whole requests: a prefill and decode steps, each run here as a case of its own
        on = machine

        def part(c: Case, tick: Callable[[int, int], Any] | None) -> Result:
            return run_case(c, machine=on, exact=exact, max_lookups=max_lookups, progress=tick,
                            allow_fallback=allow_fallback, replays=replays, prepared=prepared)

        return run_generate(case, part, machine, progress=progress)
    if case.parallel.devices > 1:
        return run_parallel(case, machine, exact=exact, max_lookups=max_lookups, progress=progress,
                            allow_fallback=allow_fallback)
    step = prepared.step(case) if prepared is not None else build_case_step(case)
    fallback = dtype_fallback(machine, step, asked=case.dtype is not None, allow=allow_fallback)
    key = replay_key(machine, case, exact=exact) if replays is not None or prepared is not None else ""
    plan = prepared.plan(machine, step, key, exact=exact) if prepared is not None else plan_replay(
        machine, step, exact=exact)
    counters = replays.get(key) if replays is not None else None
    if counters is None:
        check_cost(plan, max_lookups, exact=exact)
        counters = replay_step(machine, plan, _ticker(progress, plan.lookups))
        if replays is not None:
            replays.put(key, counters)
    k = step.config.accumulate

    def timed(on: Machine) -> StepTiming:  # the same counts on a machine with other timing figures
        return accumulated(simulate_step(on, step, plan=plan, dispatch=case.dispatch, counters=counters,
                                         **stack_of(case, on)), k)

    timing, retime = at_power_limit(machine, timed, lambda t: t.seconds,
                                    lambda burst, on: dynamic_joules_of(replace(burst, machine=on)))
    return build_result(case, step, timing, fallback, retime)
