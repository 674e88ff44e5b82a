"""One case, end to end: case -> step -> plan -> replay -> time -> result.

Named simulation, not run: ``memwall.run`` is the Python API's function (:mod:`memwall.api`).
The layer writes no files, starts no process and draws nothing: :func:`run_case`
takes a :class:`memwall.options.Case` and gives a :class:`Result`. Its modules, in the
order a case passes through them: ``step`` (the step the case's options build),
``plan`` (what to replay, the cost guard, the steps and plans a process keeps),
``replay`` (the engine; ``reuse``: a pipeline's stages sharing their layers' runs),
``timed`` (the timing), ``result`` (the typed result) and
``verdict`` (its one line), ``devices`` (the same road over dp x tp x pp devices),
``case`` (:func:`run_case`); ``row`` and ``checks`` turn cases and results into a sweep's
rows and check a sweep's cases before any runs.
"""

from ..options import Case
from .case import run_case
from .plan import ENGINE_RATE, MAX_LOOKUPS, Prepared, ReplayPlan, check_cost, plan_replay
from .replay import ReplayCache, engine_fields, replay_key, replay_step, uncached_counters
from .result import Groups, Result, build_result
from .step import build_case_step, case_config, case_network
from .timed import accumulated, dtype_fallback, simulate_step

__all__ = ["Case", "ENGINE_RATE", "MAX_LOOKUPS", "Groups", "Prepared", "ReplayCache", "ReplayPlan", "Result", "accumulated",
           "build_case_step", "build_result", "case_config", "case_network", "check_cost", "dtype_fallback",
           "engine_fields", "plan_replay", "replay_key", "replay_step", "run_case", "simulate_step",
           "uncached_counters"]
