"""The sweep: many cases, run in parallel, stored as they finish, resumable.

Owns: :func:`run_sweep` (check every case, estimate the replays and refuse those over
the budget before any work, run the rest on local processes or a Dask cluster, store
each as it finishes, rebuild the results tables), its arguments' checks
(:func:`check_executor`, :func:`check_out_dir`) and the machines' roofs beside the
results (``machines.json``). The pools are :mod:`memwall.execute.pool`'s and
:mod:`memwall.execute.dask`'s, the store :mod:`memwall.execute.store`'s; which cases the
default study runs is :mod:`memwall.study.design`'s, a case's checks, key and row
:mod:`memwall.simulation`'s.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..canonical import canonical, dumps
from ..errors import InputError
from ..model_version import MODEL_VERSION
from ..progress import Phase
from ..simulation import Case
from ..simulation.checks import validate
from ..simulation.plan import ENGINE_RATE, TYPICAL_RATE, duration
from ..simulation.row import COLUMNS, case_key, make_row, row_order
from ..study.identity import load_machine_spec, machine_info
from ..vocabulary import GENERATE
from .cache import cases_cache
from .dask import SCHEDULER_TIMEOUT, check_scheduler_address, run_dask, scheduler_is_local
from .feeder import Feeder
from .pool import default_jobs, run_here, run_local
from .store import (
    MACHINES_JSON,
    MAX_TABLE_BYTES,
    ReplayStore,
    Store,
    Unsafe,
    atomic_write,
    read_regular,
    write_tables,
)
from .worker import Runner, default_runner, process_prepared

if TYPE_CHECKING:
    from ..profiles import Machine

EXECUTORS = ("local", "dask")


@dataclass
class SweepPlan:
    """What :func:`plan_costs` found before any case ran."""

    lookups: int = 0  # line lookups the cases will replay, shared replays counted once
    refused: dict[Case, str] = field(default_factory=dict)  # case -> why (over --max-lookups)
    replay_keys: dict[Case, str] = field(default_factory=dict)  # case -> memwall.simulation.replay.replay_key

    @property
    def shared(self) -> frozenset[str]:
        """The replay keys more than one case uses: the replays worth keeping on disk."""
        seen: set[str] = set()
        twice: set[str] = set()
        for key in self.replay_keys.values():
            (twice if key in seen else seen).add(key)
        return frozenset(twice)


def plan_costs(cases: Sequence[Case], max_lookups: int | None) -> SweepPlan:
    """The line lookups ``cases`` will replay, the refusal of each case over
    ``max_lookups``, and each case's replay key: worked out here, in the sweep's own
    process, from the streams' analytic counts (:func:`memwall.simulation.plan.plan_replay`)
    before any worker starts, so a case that would run for days is refused without
    occupying one, and cases that share a replay are known. A case that cannot be
    planned (an unknown network, say) is left to its worker, which records why."""
    from ..simulation import check_cost, replay_key

    prepared = process_prepared()
    machines: dict[str, Machine] = {}
    plan = SweepPlan()
    planned: set[str] = set()  # replay keys already costed (each is replayed once)
    for case in cases:
        if case.phase == GENERATE:
            _plan_request(case, plan, prepared, machines, max_lookups)
            continue
        try:
            step = prepared.step(case)
            if case.machine not in machines:
                machines[case.machine] = load_machine_spec(case.machine)
            key = replay_key(machines[case.machine], case)
            if key in planned:
                plan.replay_keys[case] = key
                continue
            replay = prepared.plan(machines[case.machine], step, key)
            check_cost(replay, max_lookups)
        except InputError as err:
            if err.field == "--max-lookups":
                plan.refused[case] = f"{type(err).__name__}: {err}"  # what the worker would have written
            continue
        plan.replay_keys[case] = key
        planned.add(key)
        plan.lookups += replay.lookups
    return plan


def _plan_request(case: Case, plan: SweepPlan, prepared: Any, machines: dict[str, Machine],
                  max_lookups: int | None) -> None:
    """A whole request's cost: its prefill and its decode steps at the contexts the
    integration simulates first (:func:`memwall.simulation.generate.sampled_contexts`,
    the last and largest among them), each refused on its own as
    :func:`memwall.simulation.run_case` would refuse it. Its replays are not shared with
    other cases (a request's steps are its own)."""
    from ..simulation import check_cost
    from ..simulation.generate import request_parts, sampled_contexts
    from ..simulation.plan import plan_replay

    try:
        prefill, decode = request_parts(case)
        if case.machine not in machines:
            machines[case.machine] = load_machine_spec(case.machine)
        for part in (prefill, *(decode(c) for c in sampled_contexts(case.prompt, case.output))):
            replay = plan_replay(machines[case.machine], prepared.step(part))
            check_cost(replay, max_lookups)
            plan.lookups += replay.lookups
    except InputError as err:
        if err.field == "--max-lookups":
            plan.refused[case] = f"{type(err).__name__}: {err}"


@dataclass
class SweepResult:
    out: Path
    rows: list[dict[str, Any]]
    computed: int  # cases run this time
    reused: int  # cases found in the store
    failed: list[dict[str, Any]] = field(default_factory=list)  # rows with status "error"
    damaged: list[tuple[str, str]] = field(default_factory=list)  # (key, reason): records moved aside
    shared: int = 0  # cases another sweep sharing the folder computed while this one ran
    from_cache: int = 0  # of the reused, those copied from the per-user cache (another folder ran them)


def check_executor(executor: str, jobs: int | None, scheduler: str | None,
                   allow_remote: bool = False) -> None:
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor '{executor}' (use local or dask)", field="executor")
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {jobs}", field="jobs")
    if scheduler is not None and executor != "dask":
        raise InputError("--scheduler needs --executor dask", field="scheduler")
    if scheduler is not None and not scheduler.strip():
        raise InputError("--scheduler is empty (give HOST:PORT, e.g. tcp://127.0.0.1:8786)", field="scheduler")
    if scheduler:
        check_scheduler_address(scheduler)
    if scheduler and not allow_remote and not scheduler_is_local(scheduler):
        raise InputError(
            f"'{scheduler}' is not on this machine's loopback address; joining a Dask scheduler means "
            "exchanging pickled tasks (code) with it and every worker it has, so a remote one needs "
            "--allow-remote-scheduler", field="scheduler")
    if executor == "dask":
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise InputError("--executor dask needs Dask: pip install 'memwall[dask]'",
                             field="executor") from None


def check_out_dir(out: str | os.PathLike[str]) -> Path:
    """The sweep folder, checked before any work: it can be created and written to."""
    from ..paths import writable_dir
    from .store import CASES_DIR, REPLAYS_DIR, RESULTS_CSV, RESULTS_JSON

    folder = writable_dir(out, field="--out")
    cases = folder / CASES_DIR
    for own in (cases, folder / REPLAYS_DIR, folder / REPLAYS_DIR / CASES_DIR):
        if own.is_symlink():  # the store follows no link: records and claims stay in the sweep folder
            raise InputError(f"{own} is a symbolic link, not a folder: a sweep keeps its records in "
                             f"{folder} itself", field="--out")
    if cases.exists() and not cases.is_dir():
        raise InputError(f"{cases} is not a folder: {folder} is not a sweep folder", field="--out")
    if cases.is_dir():
        writable_dir(cases, field="--out")
    for name in (RESULTS_CSV, RESULTS_JSON):
        if (folder / name).is_dir():
            raise InputError(f"{folder / name} is a folder: {folder} is not a sweep folder", field="--out")
    return folder


def run_sweep(
    cases: Sequence[Case],
    out: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    executor: str = "local",
    scheduler: str | None = None,
    allow_remote_scheduler: bool = False,
    runner: Runner | None = None,
    progress: bool = True,
    max_lookups: int | None = None,
    allow_fallback: bool = False,
    scheduler_timeout: float | None = None,
) -> SweepResult:
    """Run every case not already stored under ``out``; rebuild the results tables.

    Each finished case is written to ``out/cases/<key>.json`` the moment it arrives, so
    a sweep killed at any point resumes with only the running cases lost. Failed cases
    are stored with their reason and run again by the next sweep. Damaged records are
    moved aside and recomputed (:class:`~memwall.execute.store.Store`); a case that
    another sweep sharing ``out`` is computing is waited for, not computed twice. A case
    whose replay would need more than ``max_lookups`` line lookups (None: the default of
    :func:`memwall.simulation.run_case`) fails with the estimate as its reason, estimated
    before any case runs (:func:`plan_costs`); ``allow_fallback`` runs a ``dtype`` a
    machine lacks at its nearest dtype's rate instead of failing the case.
    """
    planned = runner is None  # a caller's own runner may replay nothing: its cost is its own
    check_executor(executor, jobs, scheduler, allow_remote_scheduler)
    validate(cases)
    check_out_dir(out)
    cases = list(dict.fromkeys(cases))  # each case once, in order
    jobs = jobs or default_jobs()
    store = Store(out)
    store.clean_temps()  # what a writer killed mid-write left, here or in the replay cache
    ReplayStore(out).store.clean_temps()
    keys = {case: case_key(case) for case in cases}
    todo = []
    # The per-user cache (memwall.execute.cache) of cases any sweep folder finished with
    # memwall's own runner: a case another folder ran with the same model is copied, not run.
    shared_cases = cases_cache() if runner is None else None
    from_cache = 0
    for case in cases:
        rec = store.get(keys[case])
        if rec is None or rec.get("status") != "ok":
            cached = shared_cases.get(keys[case]) if shared_cases is not None else None
            # a result another folder got by --allow-fallback is not this sweep's unless it allows it too
            fallback = cached is not None and (cached.get("result") or {}).get("dtype_fallback") is not None
            if cached is not None and cached.get("status") == "ok" and (allow_fallback or not fallback):
                store.put(cached)
                from_cache += 1
                continue
            todo.append(case)
    reused = len(cases) - len(todo)
    plan = plan_costs(todo, max_lookups) if planned else SweepPlan()
    if runner is None:
        runner = partial(default_runner, max_lookups=max_lookups, allow_fallback=allow_fallback,
                         replays=str(out), shared=plan.shared)
    if progress and plan.lookups:
        workers = min(jobs, len(todo))
        print(f"{len(todo)} cases to run: about {plan.lookups:.3g} line lookups, about "
              f"{duration(plan.lookups / TYPICAL_RATE / workers)} (at most "
              f"{duration(plan.lookups / ENGINE_RATE / workers)}) on {workers} worker(s)", file=sys.stderr)

    refused = plan.refused
    todo = [c for c in todo if c not in refused]
    bar = Phase("memwall sweep", "running cases", len(cases), initial=reused, enabled=progress)
    failures = 0
    computed = 0
    rows_here: dict[Case, dict[str, Any]] = {}  # the rows this sweep wrote: not read back
    feeder = Feeder(todo, store, keys, on_shared=bar.update,
                     replay_keys=plan.replay_keys)
    try:
        def finish(case: Case, outcome: Mapping[str, Any]) -> None:
            nonlocal failures, computed
            err = outcome.get("error")
            row = make_row(case, outcome.get("result"), err)
            record = {"key": keys[case], "status": row["status"], "error": err, "case": case.as_dict(),
                      "model": MODEL_VERSION, "row": row, "result": outcome.get("result")}
            store.put(record)
            if shared_cases is not None and not err and (outcome.get("result") or {}).get("dtype_fallback") is None:
                try:
                    shared_cases.put(record)
                except OSError:  # a cache that cannot be written costs the reuse, never the case
                    pass
            store.release(keys[case])
            rows_here[case] = json.loads(canonical(row))  # as reading the record back gives it
            feeder.finished(case)
            computed += 1
            bar.update(1)
            if err:
                failures += 1
                bar.note(f"failed {failures}")

        for case, reason in refused.items():
            finish(case, {"error": reason})
        if todo:
            if executor == "dask":
                run_dask(feeder, runner, jobs, scheduler, finish,
                         scheduler_timeout=scheduler_timeout or SCHEDULER_TIMEOUT)
            elif jobs == 1 or len(todo) == 1:
                run_here(feeder, runner, finish)
            else:
                run_local(feeder, runner, min(jobs, len(todo)), finish)
    finally:
        store.release_all()
        bar.close()

    stored = (rows_here.get(c) or (rec["row"] if (rec := store.get(keys[c])) is not None else None) for c in cases)
    rows = [row for row in stored if row is not None]
    rows.sort(key=row_order)
    write_tables(out, rows, COLUMNS)
    write_machine_roofs(out, dict.fromkeys(c.machine for c in cases))
    failed = [r for r in rows if r["status"] != "ok"]
    return SweepResult(out=Path(out), rows=rows, computed=computed, reused=reused, from_cache=from_cache,
                       failed=failed,
                       damaged=list(store.damaged), shared=feeder.shared)


def machine_roofs(specs: Iterable[str]) -> list[dict[str, Any]]:
    """Each machine's roofs, for the report's roofline: peak FLOP/s per dtype (and the
    products' measured ceilings, burst and power-saturated, where the profile states them), main-memory
    bandwidth and capacity, and each level's size and bandwidth (None where the profile
    gives none)."""
    out = []
    for spec in specs:
        m = load_machine_spec(spec)
        info = machine_info(spec)
        out.append({"machine": info.id, "name": info.name, "synthetic": info.synthetic, "year": m.year, "kind": m.kind,
                    "primary_dtype": m.primary_dtype, "peak_flops": dict(m.peak_flops),
                    "achievable_flops": dict(m.achievable_flops), "sustained_flops": dict(m.sustained_flops),
                    "memory_bandwidth": m.memory.bandwidth, "memory_capacity": m.memory.capacity,
                    "levels": [{"name": lv.name, "size": lv.size, "bandwidth": lv.bandwidth} for lv in m.levels]})
    return out


def write_machine_roofs(out: str | os.PathLike[str], specs: Iterable[str]) -> Path:
    """``out/machines.json``: :func:`machine_roofs` of the sweep's machines, beside its cases."""
    path = Path(out) / MACHINES_JSON
    atomic_write(path, dumps({"machines": machine_roofs(specs)}))
    return path


def read_machine_roofs(out: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The roofs a sweep stored (empty if it stored none)."""
    try:
        return list(json.loads(read_regular(Path(out) / MACHINES_JSON, MAX_TABLE_BYTES).decode("utf-8"))["machines"])
    except (OSError, Unsafe, ValueError, KeyError, TypeError):
        return []

