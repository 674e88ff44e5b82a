"""Cases on a Dask cluster: a local one the sweep starts, or a scheduler it joins.

Owns: :func:`run_dask` (the feeder's cases submitted a window at a time; a case the
cluster loses is recorded as failed with the reason) and :func:`scheduler_is_local`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InputError
from ..simulation import Case
from .feeder import POLL, WAIT, Feeder
from .worker import Runner, execute

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


def run_dask(feeder: Feeder, runner: Runner | None, jobs: int, scheduler: str | None,
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
