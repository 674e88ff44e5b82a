"""One case in a worker: what a pool (local or Dask) runs for each case it is handed.

Owns: :func:`execute` (one case, its failure recorded as data, never raised),
:func:`default_runner` (:func:`memwall.simulation.run_case` with the sweep folder's replay cache)
and :func:`prepared` (the steps and plans this process keeps built).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..simulation import Case
from ..study.identity import load_machine_spec, parse_machine_spec
from .store import ReplayStore

Runner = Callable[..., Mapping[str, Any]]


def default_runner(case: Case, machine: Any = None, max_lookups: int | None = None,
                   allow_fallback: bool = False, replays: str | None = None,
                   shared: frozenset[str] | None = None) -> Mapping[str, Any]:
    """``replays``: the sweep folder whose replay cache the case reads and writes;
    ``shared``: the replay keys worth writing there (None: every one)."""
    from ..simulation import run_case

    replay_store = ReplayStore(replays, shared) if replays is not None else None
    return run_case(case, machine=machine, max_lookups=max_lookups, allow_fallback=allow_fallback,
                    replays=replay_store, prepared=process_prepared())


# Distinct steps (and plans) a process keeps built at once: the cost estimate builds every
# case's before any worker starts, and a forked worker inherits them, so a sweep's cases are
# lowered once, not once in the estimate and again in a worker. The default study's 320
# plans hold 148,000 loop-nest accesses (about 60 MB); Prepared's own bound on accesses
# (half a million, about 220 MB) keeps a sweep of huge steps from holding more.
_PLANNED_STEPS = 4096
_PREPARED: Any = None


def process_prepared() -> Any:
    """This process's :class:`memwall.simulation.plan.Prepared`: the cost estimate's steps and
    plans, and each worker's (a forked worker starts with the estimate's)."""
    global _PREPARED
    if _PREPARED is None:
        from ..simulation import Prepared

        _PREPARED = Prepared(_PLANNED_STEPS)
    return _PREPARED


def execute(case: Case, runner: Runner | None = None) -> dict[str, Any]:
    """Run one case (in a worker) and return ``{"case", "result"}`` or ``{"case", "error"}``.

    Never raises for a failing case: the reason goes into the row and the sweep goes on.
    """
    runner = runner or default_runner
    try:
        base, bw = parse_machine_spec(case.machine)
        if bw is None:
            result = runner(case)
        else:
            machine = load_machine_spec(case.machine)
            result = runner(replace(case, machine=base), machine=machine)
        return {"case": case.as_dict(), "result": dict(result)}
    except Exception as err:  # a case's failure is data, not a crash
        return {"case": case.as_dict(), "error": f"{type(err).__name__}: {err}"}
