"""The era sweep: many cases, run in parallel, stored as they finish, resumable.

Owns: running the cases on local processes or a Dask cluster. Which cases the default
study runs is :mod:`memwall.study.design`'s. Checking the cases is
:mod:`memwall.run.checks`'s, their keys and rows :mod:`memwall.run.row`'s, and which
machine a spec names (synthetic ``BASE@bw=X`` ones too) :mod:`memwall.study.identity`'s.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..model_version import MODEL_VERSION
from ..run import Case
from ..run.checks import validate
from ..run.plan import ENGINE_RATE, duration
from ..run.row import COLUMNS, case_key, make_row, row_order
from ..study.identity import load_machine_spec, machine_info, parse_machine_spec
from .store import ReplayStore, Store, atomic_write, canonical, dumps, write_tables

if TYPE_CHECKING:
    from ..profiles import Machine

Runner = Callable[..., Mapping[str, Any]]

EXECUTORS = ("local", "dask")


# --------------------------------------------------------------------------------------
# Running


def _default_runner(case: Case, machine: Any = None, max_lookups: int | None = None,
                    allow_fallback: bool = False, replays: str | None = None,
                    shared: frozenset[str] | None = None) -> Mapping[str, Any]:
    """``replays``: the sweep folder whose replay cache the case reads and writes;
    ``shared``: the replay keys worth writing there (None: every one)."""
    from ..run import run_case

    return run_case(case, machine=machine, max_lookups=max_lookups, allow_fallback=allow_fallback,
                    replays=ReplayStore(replays, shared) if replays is not None else None, prepared=_prepared())


# Distinct steps (and plans) a process keeps built at once: the cost estimate builds every
# case's before any worker starts, and a forked worker inherits them, so a sweep's cases are
# lowered once, not once in the estimate and again in a worker. The default study's 320
# plans hold 148,000 loop-nest accesses (about 60 MB); Prepared's own bound on accesses
# (half a million, about 220 MB) keeps a sweep of huge steps from holding more.
_PLANNED_STEPS = 4096
_PREPARED: Any = None


def _prepared() -> Any:
    """This process's :class:`memwall.run.plan.Prepared`: the cost estimate's steps and
    plans, and each worker's (a forked worker starts with the estimate's)."""
    global _PREPARED
    if _PREPARED is None:
        from ..run import Prepared

        _PREPARED = Prepared(_PLANNED_STEPS)
    return _PREPARED


@dataclass
class SweepPlan:
    """What :func:`plan_costs` found before any case ran."""

    lookups: int = 0  # line lookups the cases will replay, shared replays counted once
    refused: dict[Case, str] = field(default_factory=dict)  # case -> why (over --max-lookups)
    replay_keys: dict[Case, str] = field(default_factory=dict)  # case -> memwall.run.replay.replay_key

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
    process, from the streams' analytic counts (:func:`memwall.run.plan.plan_replay`)
    before any worker starts, so a case that would run for days is refused without
    occupying one, and cases that share a replay are known. A case that cannot be
    planned (an unknown network, say) is left to its worker, which records why."""
    from ..run import check_cost, replay_key

    prepared = _prepared()
    machines: dict[str, Machine] = {}
    plan = SweepPlan()
    planned: set[str] = set()  # replay keys already costed (each is replayed once)
    for case in cases:
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


def execute(case: Case, runner: Runner | None = None) -> dict[str, Any]:
    """Run one case (in a worker) and return ``{"case", "result"}`` or ``{"case", "error"}``.

    Never raises for a failing case: the reason goes into the row and the sweep goes on.
    """
    runner = runner or _default_runner
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


@dataclass
class SweepResult:
    out: Path
    rows: list[dict[str, Any]]
    computed: int  # cases run this time
    reused: int  # cases found in the store
    failed: list[dict[str, Any]] = field(default_factory=list)  # rows with status "error"
    damaged: list[tuple[str, str]] = field(default_factory=list)  # (key, reason): records moved aside
    shared: int = 0  # cases another sweep sharing the folder computed while this one ran


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost")


def scheduler_is_local(address: str) -> bool:
    """Whether a Dask scheduler address names this machine's loopback interface."""
    rest = address.split("://", 1)[-1]
    if rest.startswith("["):  # [::1]:8786
        host = rest[: rest.find("]") + 1]
    else:
        host = rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest
    if host in _LOOPBACK_HOSTS:
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    from .store import CASES_DIR, RESULTS_CSV, RESULTS_JSON

    folder = writable_dir(out, field="--out")
    cases = folder / CASES_DIR
    if cases.exists() and not cases.is_dir():
        raise InputError(f"{cases} is not a folder: {folder} is not a sweep folder", field="--out")
    if cases.is_dir():
        writable_dir(cases, field="--out")
    for name in (RESULTS_CSV, RESULTS_JSON):
        if (folder / name).is_dir():
            raise InputError(f"{folder / name} is a folder: {folder} is not a sweep folder", field="--out")
    return folder


_WAIT = object()  # the feeder has nothing now: every case left is claimed by another sweep


class _Feeder:
    """Hands out the cases this sweep computes, each claimed in the store first.

    A case another live process has claimed is left to it: it is handed out only if that
    process dies (its lock goes) without writing the record. A record that appears while a
    case was claimed elsewhere is the other sweep's answer and is used as it is.
    """

    def __init__(self, todo: Sequence[Case], store: Store, keys: Mapping[Case, str],
                 on_shared: Callable[[], Any] | None = None, replay_keys: Mapping[Case, str] | None = None) -> None:
        self.waiting = list(todo)
        self.replay_keys = dict(replay_keys or {})
        self.replaying: dict[Case, str] = {}  # case in flight -> the replay it computes
        self.on_shared = on_shared
        self.store = store
        self.keys = keys
        self.others: set[Case] = set()
        self.shared = 0

    @property
    def done(self) -> bool:
        return not self.waiting

    def take(self) -> Any:
        """A claimed case to compute, ``_WAIT``, or None when nothing is left.

        A case whose replay another case in flight is computing waits for it, so the
        replay is stored before the case asks for it and runs once."""
        busy = set(self.replaying.values())
        for i, case in enumerate(self.waiting):
            if self.replay_keys.get(case) in busy:
                continue
            key = self.keys[case]
            if not self.store.claim(key):
                self.others.add(case)
                continue
            rec = self.store.get(key)
            if rec is not None and (rec.get("status") == "ok" or case in self.others):
                self.store.release(key)
                del self.waiting[i]
                self.shared += 1
                if self.on_shared is not None:
                    self.on_shared()
                return self.take()
            del self.waiting[i]
            if case in self.replay_keys:
                self.replaying[case] = self.replay_keys[case]
            return case
        return _WAIT if self.waiting else None

    def finished(self, case: Case) -> None:
        """``case`` is done: the cases waiting for its replay may go."""
        self.replaying.pop(case, None)


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
) -> SweepResult:
    """Run every case not already stored under ``out``; rebuild the results tables.

    Each finished case is written to ``out/cases/<key>.json`` the moment it arrives, so
    a sweep killed at any point resumes with only the running cases lost. Failed cases
    are stored with their reason and run again by the next sweep. Damaged records are
    moved aside and recomputed (:class:`~memwall.experiments.store.Store`); a case that
    another sweep sharing ``out`` is computing is waited for, not computed twice. A case
    whose replay would need more than ``max_lookups`` line lookups (None: the default of
    :func:`memwall.run.run_case`) fails with the estimate as its reason, estimated
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
    keys = {case: case_key(case) for case in cases}
    todo = []
    for case in cases:
        rec = store.get(keys[case])
        if rec is None or rec.get("status") != "ok":
            todo.append(case)
    reused = len(cases) - len(todo)
    plan = plan_costs(todo, max_lookups) if planned else SweepPlan()
    if runner is None:
        runner = partial(_default_runner, max_lookups=max_lookups, allow_fallback=allow_fallback,
                         replays=str(out), shared=plan.shared)
    if progress and plan.lookups:
        print(f"{len(todo)} cases to run: about {plan.lookups:.3g} line lookups, at most "
              f"{duration(plan.lookups / ENGINE_RATE / min(jobs, len(todo)))} on {min(jobs, len(todo))} "
              f"worker(s)", file=sys.stderr)

    refused = plan.refused
    todo = [c for c in todo if c not in refused]
    bar = _progress(len(cases), reused, progress)
    failures = 0
    computed = 0
    rows_here: dict[Case, dict[str, Any]] = {}  # the rows this sweep wrote: not read back
    feeder = _Feeder(todo, store, keys, on_shared=bar.update if bar is not None else None,
                     replay_keys=plan.replay_keys)
    try:
        def finish(case: Case, outcome: Mapping[str, Any]) -> None:
            nonlocal failures, computed
            err = outcome.get("error")
            row = make_row(case, outcome.get("result"), err)
            store.put({"key": keys[case], "status": row["status"], "error": err,
                       "case": case.as_dict(), "model": MODEL_VERSION, "row": row,
                       "result": outcome.get("result")})
            store.release(keys[case])
            rows_here[case] = json.loads(canonical(row))  # as reading the record back gives it
            feeder.finished(case)
            computed += 1
            if bar is not None:
                bar.update(1)
                if err:
                    failures += 1
                    bar.set_postfix_str(f"failed {failures}")

        for case, reason in refused.items():
            finish(case, {"error": reason})
        if todo:
            if executor == "dask":
                _run_dask(feeder, runner, jobs, scheduler, finish)
            elif jobs == 1 or len(todo) == 1:
                _run_here(feeder, runner, finish)
            else:
                _run_local(feeder, runner, min(jobs, len(todo)), finish)
    finally:
        store.release_all()
        if bar is not None:
            bar.close()

    stored = (rows_here.get(c) or (rec["row"] if (rec := store.get(keys[c])) is not None else None) for c in cases)
    rows = [row for row in stored if row is not None]
    rows.sort(key=row_order)
    write_tables(out, rows, COLUMNS)
    write_machine_roofs(out, dict.fromkeys(c.machine for c in cases))
    failed = [r for r in rows if r["status"] != "ok"]
    return SweepResult(out=Path(out), rows=rows, computed=computed, reused=reused, failed=failed,
                       damaged=list(store.damaged), shared=feeder.shared)


MACHINES_JSON = "machines.json"


def machine_roofs(specs: Iterable[str]) -> list[dict[str, Any]]:
    """Each machine's roofs, for the report's roofline: peak FLOP/s per dtype (and the
    products' measured ceilings where the profile states them), main-memory
    bandwidth and capacity, and each level's size and bandwidth (None where the profile
    gives none)."""
    out = []
    for spec in specs:
        m = load_machine_spec(spec)
        out.append({"machine": spec, "name": machine_info(spec).name, "year": m.year, "kind": m.kind,
                    "primary_dtype": m.primary_dtype, "peak_flops": dict(m.peak_flops),
                    "achievable_flops": dict(m.achievable_flops),
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
        return list(json.loads((Path(out) / MACHINES_JSON).read_text(encoding="utf-8"))["machines"])
    except (FileNotFoundError, ValueError, KeyError):
        return []


def _progress(total: int, done: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="memwall sweep", unit="case", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)


_POLL = 0.2  # seconds between looks at cases another sweep holds, and at a parent's life


def _run_here(feeder: _Feeder, runner: Runner | None,
              finish: Callable[[Case, Mapping[str, Any]], None]) -> None:
    """One case at a time in this process (``--jobs 1``): nothing to orphan."""
    while (case := feeder.take()) is not None:
        if case is _WAIT:
            time.sleep(_POLL)
            continue
        finish(case, execute(case, runner))


def _watch_parent(parent: int) -> None:
    """Pool worker initializer: die with the sweep, however the sweep dies.

    On Linux the kernel sends SIGKILL when the parent exits (``PR_SET_PDEATHSIG``); on any
    POSIX system a daemon thread also polls ``getppid`` and exits when the worker has been
    reparented. Ctrl-C is the parent's to handle: it stops the workers itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the prctl took effect
        os._exit(1)

    def poll() -> None:
        while True:
            time.sleep(_POLL)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=poll, name="memwall-watch-parent", daemon=True).start()


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's workers now (Ctrl-C, SIGTERM, an error): running cases are lost, not waited for."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.join(timeout=5)


def _drain_pool(pool: ProcessPoolExecutor, next_case: Callable[[], Any], width: int, solo: bool,
                feeder: _Feeder, runner: Runner | None,
                finish: Callable[[Case, Mapping[str, Any]], None]) -> list[Case]:
    """Feed ``pool`` at most ``width`` cases at a time until there are no more; the cases
    lost with the pool when one of its workers died (empty when none did)."""
    pending: dict[Any, Case] = {}
    lost: list[Case] = []
    while True:
        # A short queue, not every case at once: claims are taken as cases start, so a
        # second sweep in the same folder gets the rest.
        while len(pending) < width:
            case = next_case()
            if case is None or case is _WAIT:
                break
            try:
                pending[pool.submit(execute, case, runner)] = case
            except BrokenProcessPool:  # a worker died since the last look
                lost.append(case)
                break
        if not lost:
            if not pending:
                if solo or feeder.done:
                    return lost
                time.sleep(_POLL)
                continue
            done, _ = wait(pending, timeout=_POLL, return_when=FIRST_COMPLETED)
            for fut in done:
                case = pending.pop(fut)
                try:
                    outcome = fut.result()
                except BrokenProcessPool:
                    lost.append(case)
                    continue
                finish(case, outcome)
        if lost:
            return lost + list(pending.values())


def _run_local(feeder: _Feeder, runner: Runner | None, jobs: int,
               finish: Callable[[Case, Mapping[str, Any]], None]) -> None:
    """Cases on a pool of ``jobs`` worker processes.

    A worker that dies (killed, out of memory) breaks the pool, and every case in flight
    with it. Those cases are run again in a new pool one at a time, so that a case that
    breaks that pool too is known to be the culprit: it is recorded as failed with that
    reason, and the sweep goes on.
    """
    retry: list[Case] = []
    while True:
        solo = bool(retry)
        pool = ProcessPoolExecutor(max_workers=1 if solo else jobs, initializer=_watch_parent,
                                   initargs=(os.getpid(),))
        lost: list[Case] = []
        ended = False
        try:
            next_case = (lambda queue=retry: queue.pop(0) if queue else None) if solo else feeder.take
            lost = _drain_pool(pool, next_case, 1 if solo else 2 * jobs, solo, feeder, runner, finish)
            ended = True
        finally:
            if lost or not ended:  # a broken pool, or Ctrl-C, SIGTERM, an error: kill, don't wait
                _stop_workers(pool)
        if not lost:
            pool.shutdown(wait=True)
            if solo:
                continue  # the retried cases are done: back to the full pool
            return
        if solo:
            finish(lost[0], {"case": lost[0].as_dict(),
                             "error": "the worker process running this case died (killed, or out of memory)"})
            retry = lost[1:] + retry
        else:
            retry = lost + retry


def _run_dask(feeder: _Feeder, runner: Runner | None, jobs: int, scheduler: str | None,
              finish: Callable[[Case, Mapping[str, Any]], None]) -> None:
    import logging

    from dask.distributed import Client, LocalCluster
    from dask.distributed import wait as dask_wait

    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout=10)
        except OSError as err:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {err}", field="scheduler") from None
    else:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
    try:
        window = 2 * max(jobs, sum(client.nthreads().values()))
        pending: dict[Any, Case] = {}
        while True:
            while len(pending) < window and (case := feeder.take()) not in (None, _WAIT):
                pending[client.submit(execute, case, runner, pure=False)] = case
            if not pending:
                if feeder.done:
                    break
                time.sleep(_POLL)
                continue
            try:
                done = dask_wait(list(pending), timeout=_POLL, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                continue
            for fut in done:
                case = pending.pop(fut)
                try:
                    outcome = fut.result()
                except Exception as err:  # the cluster lost it (a worker died too often): data, not a crash
                    outcome = {"case": case.as_dict(), "error": f"{type(err).__name__}: {err}"}
                finish(case, outcome)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
