"""Cases on a Dask cluster: a local one the sweep starts, or a scheduler it joins.

Owns: :func:`run_dask` (the feeder's cases submitted a window at a time; a case the
cluster loses is recorded as failed with the reason), the checks of a scheduler address
(:func:`check_scheduler_address`, :func:`scheduler_is_local`) and the timeouts that keep a
sweep from waiting silently: a scheduler that accepts and never answers
(:func:`probe_scheduler`, ``--scheduler-timeout``), and a cluster with cases waiting and no
live worker (:data:`STALL_SECONDS`), which also says every :data:`NOTE_SECONDS` that it
is waiting.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InputError
from ..simulation import Case
from .feeder import POLL, WAIT, Feeder
from .worker import Runner, execute

SCHEDULER_TIMEOUT = 10.0  # seconds a scheduler has to answer (--scheduler-timeout)
STALL_SECONDS = 60.0  # cases waiting, no live worker and nothing finished for this long: the sweep stops
NOTE_SECONDS = 10.0  # while nothing finishes, a line on stderr this often

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


def check_scheduler_address(address: str) -> None:
    """An InputError naming ``--scheduler`` unless ``address`` is [PROTOCOL://]HOST:PORT with a
    port from 1 to 65535 (Dask would otherwise fail deep inside with a traceback)."""
    rest = address.strip().split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if rest.startswith("[") and "]" in rest:  # [::1]:8786
        host, sep, port = rest[: rest.find("]") + 1], ":", rest[rest.find("]") + 2:]
    if not sep or not host or not port.isdecimal() or not port.isascii() or not 1 <= int(port) <= 65535:
        raise InputError(f"--scheduler takes HOST:PORT (e.g. tcp://127.0.0.1:8786), got {address!r}",
                         field="scheduler")


def probe_scheduler(address: str, timeout: float = SCHEDULER_TIMEOUT) -> None:
    """An InputError naming ``--scheduler`` unless a TCP scheduler at ``address`` accepts a
    connection and speaks (a Dask scheduler sends its handshake first) within ``timeout``
    seconds: Dask's own client waits past any timeout on a port that accepts and never
    answers. Other protocols (tls://, inproc://) are left to Dask."""
    protocol, _, rest = address.strip().rpartition("://")
    if protocol not in ("", "tcp"):
        return
    host, _, port = rest.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            conn.settimeout(timeout)
            if not conn.recv(1):
                raise OSError("it closed the connection")
    except TimeoutError:
        raise InputError(f"the Dask scheduler at {address} did not answer within {timeout:g} s (--scheduler; "
                         "--scheduler-timeout sets the wait)", field="scheduler") from None
    except OSError as err:
        raise InputError(f"cannot reach the Dask scheduler at {address}: {err}", field="scheduler") from None


def run_dask(feeder: Feeder, runner: Runner | None, jobs: int, scheduler: str | None,
             finish: Callable[[Case, Mapping[str, Any]], None], *,
             scheduler_timeout: float = SCHEDULER_TIMEOUT) -> None:
    import logging

    from dask.distributed import Client, LocalCluster
    from dask.distributed import wait as dask_wait

    cluster = None
    if scheduler:
        probe_scheduler(scheduler, scheduler_timeout)
        try:
            client = Client(scheduler, timeout=scheduler_timeout)
        except OSError as err:
            raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {err}", field="scheduler") from None
    else:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
    try:
        window = 2 * max(jobs, sum(client.nthreads().values()))
        pending: dict[Any, Case] = {}
        watch = _Watch(scheduler or "the local cluster")
        while True:
            while len(pending) < window and (case := feeder.take()) not in (None, WAIT):
                pending[client.submit(execute, case, runner, pure=False)] = case
            if not pending:
                if feeder.done:
                    break
                time.sleep(POLL)
                continue
            try:
                done = dask_wait(list(pending), timeout=POLL, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                watch.waiting(len(pending), len(client.nthreads()))
                continue
            watch.progressed()
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


class _Watch:
    """Says, while nothing finishes, that the sweep waits and on how many workers; stops it
    (one line naming --scheduler) when cases wait with no live worker for STALL_SECONDS."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.since = self.noted = time.monotonic()

    def progressed(self) -> None:
        self.since = self.noted = time.monotonic()

    def waiting(self, pending: int, workers: int) -> None:
        now = time.monotonic()
        if workers == 0 and now - self.since >= STALL_SECONDS:
            raise InputError(f"{pending} cases waiting and no live Dask worker at {self.where} for "
                             f"{now - self.since:.0f} s: start workers or check --scheduler", field="scheduler")
        if now - self.noted >= NOTE_SECONDS:
            self.noted = now
            print(f"memwall sweep: waiting on {self.where}: {pending} cases submitted, {workers} live workers, "
                  f"nothing finished for {now - self.since:.0f} s", file=sys.stderr, flush=True)
