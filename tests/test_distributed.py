"""A real distributed sweep: a Dask scheduler and two workers as separate processes.

The test starts ``dask scheduler`` and two ``dask worker`` processes (no nanny, so a
killed worker stays dead) on the loopback address, runs ``memwall sweep --executor dask
--scheduler ADDRESS`` as its own process, kills one worker while cases are running, and
checks that the sweep still finishes with every case, and that its tables are the same
bytes as a local run's. It needs ``dask[distributed]`` (installed by ``.[dev]`` and by
CI's ``.[test,dask]``); CI runs it with the rest of tests/.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memwall.execute import sweep as sw
from memwall.study import design

pytest.importorskip("dask.distributed")

# 12 cases of 0.1 to 1.5 s: both workers are busy when one is killed, and the whole test
# (a local run, the cluster's start, the distributed run) stays within about 30 s.
MACHINES = ["vax-11-780"]
NETWORKS = ["nettalk", "lecun-1989", "alvinn", "sonar"]
BATCHES = [64, 128, 256]


def _dask(*args: str, log: Path) -> subprocess.Popen:
    # The scheduler and the workers are separate processes, in their own session so that
    # nothing they start outlives the test; they are stopped by their ids below.
    return subprocess.Popen([sys.executable, "-m", *args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_sweep_on_a_dask_cluster_survives_a_killed_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWALL_CACHE", "off")  # the cluster runs every case, none copied from the reference's
    cases = design.product(MACHINES, NETWORKS, BATCHES)  # what the command line below asks for
    local = sw.run_sweep(cases, tmp_path / "local", jobs=1, progress=False)  # the reference, here
    assert not local.failed

    sched_file = tmp_path / "scheduler.json"
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_dask("distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                           "--no-dashboard", "--scheduler-file", str(sched_file), log=tmp_path / "scheduler.log"))
        deadline = time.monotonic() + 30
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sched_file.exists(), (tmp_path / "scheduler.log").read_text()
        address = None
        while address is None and time.monotonic() < deadline:
            try:  # the scheduler may still be writing it
                address = json.loads(sched_file.read_text())["address"]
            except (ValueError, KeyError):
                time.sleep(0.1)
        assert address.startswith("tcp://127.0.0.1:")
        workers = [_dask("distributed.cli.dask_worker", "--scheduler-file", str(sched_file), "--host", "127.0.0.1",
                         "--nthreads", "1", "--no-nanny", "--no-dashboard", log=tmp_path / f"worker{i}.log")
                   for i in range(2)]
        procs += workers

        out = tmp_path / "dask"
        sweep = subprocess.Popen(
            [sys.executable, "-m", "memwall", "sweep", "--executor", "dask", "--scheduler", address,
             "--machines", *MACHINES, "--networks", *NETWORKS, "--batches", *map(str, BATCHES),
             "--out", str(out), "--no-progress", "--no-figures"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(sweep)
        # Kill one worker as soon as the first case is stored: the rest are queued or running.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sweep.poll() is None and not list((out / "cases").glob("*.json")):
            time.sleep(0.05)
        done_at_kill = len(list((out / "cases").glob("*.json")))
        assert sweep.poll() is None, sweep.communicate()
        os.killpg(workers[0].pid, signal.SIGKILL)
        workers[0].wait()
        stdout, stderr = sweep.communicate(timeout=120)
        assert sweep.returncode == 0, stderr
    finally:
        for proc in reversed(procs):
            _stop(proc)
    assert done_at_kill < len(cases), "the kill should land mid-sweep"
    assert f"{len(cases)} cases: {len(cases)} run" in stdout
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert len(rows) == len(cases) and all(r["status"] == "ok" for r in rows)  # no case lost
    assert rows == local.rows
    assert (out / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()


def test_a_scheduler_that_accepts_and_never_answers_is_one_line_naming_it(tmp_path, capsys):
    """Dask's own client waits past its timeout on such a port; the sweep gives up after
    --scheduler-timeout seconds, naming --scheduler."""
    import socket

    from memwall.cli import main

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        assert main(["sweep", "--machines", "vax-11-780", "--networks", "nettalk", "--executor", "dask",
                     "--scheduler", address, "--scheduler-timeout", "1", "--no-progress", "--no-figures",
                     "--out", str(tmp_path / "out")]) == 2
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err
    assert "did not answer within 1 s" in err and "--scheduler" in err


def test_a_cluster_without_workers_is_said_while_waiting_and_then_stops_the_sweep(tmp_path, capsys, monkeypatch):
    import logging

    from dask.distributed import LocalCluster

    from memwall.errors import InputError
    from memwall.execute import dask as mdask
    from memwall.simulation import Case

    monkeypatch.setattr(mdask, "STALL_SECONDS", 3.0)
    monkeypatch.setattr(mdask, "NOTE_SECONDS", 1.0)
    cluster = LocalCluster(n_workers=0, processes=True, host="127.0.0.1", dashboard_address=None,
                           silence_logs=logging.ERROR)
    try:
        with pytest.raises(InputError, match="no live Dask worker") as err:
            sw.run_sweep([Case("vax-11-780", "nettalk")], tmp_path / "out", executor="dask",
                         scheduler=cluster.scheduler_address, progress=False)
        assert err.value.field == "scheduler"
    finally:
        cluster.close()
    assert "waiting on" in capsys.readouterr().err
