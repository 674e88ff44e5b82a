"""The process pool: the one place memwall starts worker processes.

Owns: :func:`run_local` (a sweep's cases on a pool of worker processes, a worker that dies
costing only its case), :func:`run_here` (one at a time in this process),
:func:`map_cases` (any function over many cases on a pool: validation's predictions),
:class:`LazyPool` (calls handed to a pool as they are ready: the figures' drawings) and
:func:`default_jobs`. Every worker dies with the process that started it, however that
process dies, and Ctrl-C kills the workers rather than waiting for them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from ..simulation import Case
from .feeder import POLL, WAIT, Feeder
from .worker import Runner, execute

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run_here(feeder: Feeder, runner: Runner | None,
             finish: Callable[[Case, Mapping[str, Any]], None]) -> None:
    """One case at a time in this process (``--jobs 1``): nothing to orphan."""
    while (case := feeder.take()) is not None:
        if case is WAIT:
            time.sleep(POLL)
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
            time.sleep(POLL)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=poll, name="memwall-watch-parent", daemon=True).start()


def _new_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes that die with this one (:func:`_watch_parent`)."""
    return ProcessPoolExecutor(max_workers=jobs, initializer=_watch_parent, initargs=(os.getpid(),))


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
                feeder: Feeder, runner: Runner | None,
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
            if case is None or case is WAIT:
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
                time.sleep(POLL)
                continue
            done, _ = wait(pending, timeout=POLL, return_when=FIRST_COMPLETED)
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


def run_local(feeder: Feeder, runner: Runner | None, jobs: int,
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
        pool = _new_pool(1 if solo else jobs)
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


class LazyPool:
    """Calls submitted to a pool of ``jobs`` worker processes, started at the first
    submission (none when nothing is submitted), so that work can be handed out while the
    caller is still preparing the rest. On leaving: waits for the workers; on an error or
    Ctrl-C, kills them, as :func:`map_cases` does."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.pool: ProcessPoolExecutor | None = None

    def _started(self) -> ProcessPoolExecutor:
        if self.pool is None:
            self.pool = _new_pool(self.jobs)
        return self.pool

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        return self._started().submit(fn, *args)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """``fn`` of each item, the results in the items' order as they come."""
        return self._started().map(fn, items)

    def __enter__(self) -> LazyPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: Any) -> None:
        if self.pool is None:
            return
        if kind is None:
            self.pool.shutdown(wait=True)
        else:
            _stop_workers(self.pool)


def map_cases(fn: Callable[[T], R], items: Iterable[T], jobs: int) -> Iterator[R]:
    """``fn`` of each item on a pool of ``jobs`` worker processes, the results in the items'
    order as they come. The workers die with this process; if the caller stops early, or
    Ctrl-C or a dead worker ends the loop, the workers are killed, not waited for, and what
    was already yielded is kept."""
    with LazyPool(jobs) as pool:
        yield from pool.map(fn, items)


def run_cases(cases: Sequence[Any], jobs: int | None = None) -> list[Any]:
    """Each case's :func:`memwall.simulation.run_case` result, in order, on up to ``jobs``
    worker processes (default: the cores): how the figures' and tables' own cases run."""
    from ..simulation.case import run_case

    width = min(jobs or default_jobs(), len(cases))
    if width <= 1:
        return [run_case(case) for case in cases]
    return list(map_cases(run_case, cases, width))
