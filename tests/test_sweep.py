"""The era sweep: identical reruns, resuming after a kill, Dask = local, early errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memwall.errors import InputError
from memwall.experiments import sweep as sw
from memwall.experiments.store import Store, read_rows
from memwall.simulate import Case

# --------------------------------------------------------------------------------------
# Until the profile, network and simulation stages land, a small fake catalogue and runner
# stand in for them (REAL is switched on when memwall.simulate.run_case exists).


def _have_real() -> bool:
    import importlib

    try:
        names = ("networks", "profiles", "engine", "workloads.step", "workloads.lowering", "simulate")
        modules = [importlib.import_module(f"memwall.{m}") for m in names]
    except ImportError:
        return False
    return all(getattr(m, "__file__", None) for m in modules) and hasattr(modules[-1], "run_case")


REAL = _have_real()


@dataclass(frozen=True)
class FakeMemory:
    bandwidth: float


@dataclass(frozen=True)
class FakeMachine:
    id: str
    name: str
    year: int
    kind: str
    peak_flops: dict = field(default_factory=dict)
    memory: FakeMemory = FakeMemory(1.0)
    primary_dtype: str = "fp32"

    def as_dict(self) -> dict:
        return {"id": self.id, "year": self.year, "peak": self.peak_flops, "bw": self.memory.bandwidth}


@dataclass(frozen=True)
class FakeNetwork:
    id: str
    seq_len: int | None = None

    def as_dict(self) -> dict:
        return {"id": self.id, "seq_len": self.seq_len}


MACHINES = {
    m.id: m
    for m in (
        FakeMachine("vax-780", "VAX-11/780", 1978, "scalar", {"fp32": 2e5}, FakeMemory(1.3e7)),
        FakeMachine("cray-1", "Cray-1", 1976, "vector", {"fp64": 1.6e8}, FakeMemory(6.4e8), "fp64"),
        FakeMachine("h100", "H100", 2022, "gpu", {"bf16": 9.9e14, "fp32": 6.7e13}, FakeMemory(3.35e12), "bf16"),
    )
}
NETWORKS = {n.id: n for n in (FakeNetwork("nettalk"), FakeNetwork("sonar"), FakeNetwork("gpt2-small", 1024))}


class FakeCatalogue(sw.Catalogue):
    def machine_ids(self):
        return list(MACHINES)

    def network_ids(self):
        return list(NETWORKS)

    def load_machine(self, spec):
        base, bw = sw.parse_machine_spec(spec)
        m = MACHINES[base]
        return m if bw is None else FakeMachine(m.id, m.name, m.year, m.kind, m.peak_flops, FakeMemory(bw),
                                                m.primary_dtype)

    def load_network(self, net_id):
        return NETWORKS[net_id]


def fake_runner(case: Case, machine=None):
    """A roofline with an intensity of 0.4 FLOP/B per example, like the real result's shape."""
    m = machine or FakeCatalogue().load_machine(case.machine)
    peak = m.peak_flops[m.primary_dtype]
    flops = 1e6 * case.batch
    compute = flops / peak
    memory = flops / (0.4 * case.batch) / m.memory.bandwidth
    total = max(compute, memory)
    return {
        "machine": m.id, "network": case.network, "batch": case.batch, "flops": flops, "seconds": total,
        "stall_fraction": 1 - compute / total, "fraction_of_peak": compute / total,
        "achieved_flops": flops / total, "cups": flops / 6 / total,
        "cycles": {"total": total * 1e9, "compute": compute * 1e9, "overhead": 0.0,
                   "stall": {"L1": 0.0, "memory": (total - compute) * 1e9}},
        "bytes": {"L1": flops, "memory": flops / (0.4 * case.batch)},
        "bound": "memory" if memory > compute else "compute", "kernels": [],
    }


def slow_runner(case: Case, machine=None):
    time.sleep(0.3)
    return fake_runner(case, machine)


if REAL:
    CAT = None
    RUNNER = None
    OLD = "vax-11-780"
    CASES = sw.product([OLD, "cray-1"], ["nettalk", "encoder-8-3-8"], [1, 2], updates="per-example")
else:
    CAT = FakeCatalogue()
    RUNNER = fake_runner
    OLD = "vax-780"
    CASES = sw.product([OLD, "cray-1", "h100"], ["nettalk", "sonar"], [1, 2])


def run(out, cases=CASES, **kw):
    kw.setdefault("runner", RUNNER)
    kw.setdefault("catalogue", CAT)
    kw.setdefault("progress", False)
    return sw.run_sweep(cases, out, **kw)


# --------------------------------------------------------------------------------------


def test_rerun_gives_identical_rows_and_recomputes_nothing(tmp_path):
    first = run(tmp_path / "a", jobs=2)
    assert first.computed == len(CASES) and first.reused == 0 and not first.failed
    csv1 = (tmp_path / "a" / "results.csv").read_bytes()
    json1 = (tmp_path / "a" / "results.json").read_bytes()
    second = run(tmp_path / "a", jobs=2)
    assert second.computed == 0 and second.reused == len(CASES)
    assert (tmp_path / "a" / "results.csv").read_bytes() == csv1
    assert (tmp_path / "a" / "results.json").read_bytes() == json1
    # A fresh folder, run in one process, gives the same bytes: parallelism changes nothing.
    run(tmp_path / "b", jobs=1)
    assert (tmp_path / "b" / "results.csv").read_bytes() == csv1
    header = csv1.decode().splitlines()[0].split(",")
    for col in ("machine", "year", "kind", "balance", "network", "batch", "checkpoint", "updates",
                "seconds", "stall_fraction", "fraction_of_peak", "cups"):
        assert col in header
    assert any(c.startswith("stall_") and c != "stall_fraction" for c in header)
    rows = read_rows(tmp_path / "a")
    assert len(rows) == len(CASES)
    assert len({(r["machine"], r["network"], r["batch"]) for r in rows}) == len(CASES)


def test_killed_halfway_resumes_with_every_case_once(tmp_path):
    out = tmp_path / "sweep"
    cases_json = json.dumps([c.as_dict() for c in CASES])
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_sweep as t
        from memwall.experiments import sweep as sw
        from memwall.simulate import Case
        cases = [Case(**d) for d in json.loads({cases_json!r})]
        def slow(case, machine=None):
            import time
            time.sleep(0.4)
            return (t.RUNNER or sw._default_runner)(case, machine) if machine else (t.RUNNER or sw._default_runner)(case)
        sw.run_sweep(cases, {str(out)!r}, jobs=1, runner=slow, catalogue=t.CAT, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    store = Store(out)
    deadline = time.monotonic() + 60
    try:
        while len(store.keys()) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's group, and only it
        proc.wait()
    stored = store.keys()
    assert 2 <= len(stored) < len(CASES), "the kill should land half-way"
    assert not (out / "results.csv").exists()
    before = {k: store.path(k).read_bytes() for k in stored}

    result = run(out, jobs=2)
    assert result.reused == len(stored)
    assert result.computed == len(CASES) - len(stored)
    rows = read_rows(out)
    assert len(rows) == len(CASES)
    keys = [(r["machine"], r["network"], r["batch"]) for r in rows]
    assert len(set(keys)) == len(keys)
    assert len(store.keys()) == len(CASES)
    for k, data in before.items():  # what survived the kill was reused, not rewritten
        assert store.path(k).read_bytes() == data
    # ... and the resumed sweep equals one that was never interrupted.
    run(tmp_path / "clean", jobs=1)
    assert (out / "results.csv").read_bytes() == (tmp_path / "clean" / "results.csv").read_bytes()


def test_dask_gives_the_same_rows_as_local(tmp_path):
    pytest.importorskip("dask.distributed")
    run(tmp_path / "local", jobs=2)
    res = run(tmp_path / "dask", jobs=2, executor="dask")
    assert res.computed == len(CASES)
    assert (tmp_path / "dask" / "results.csv").read_bytes() == (tmp_path / "local" / "results.csv").read_bytes()


def failing_runner(case: Case, machine=None):
    """The real (or stand-in) runner, except that batch 3 fails, as a broken case would."""
    if case.batch == 3:
        raise ValueError("batch 3 is the designated failure")
    run = RUNNER or sw._default_runner
    return run(case, machine=machine) if machine is not None else run(case)


def test_a_failing_case_is_recorded_and_the_rest_finish(tmp_path):
    cases = CASES + [Case(machine=OLD, network="nettalk", batch=3)]
    res = run(tmp_path, cases, jobs=1, runner=failing_runner)
    assert len(res.rows) == len(cases)
    assert [r["batch"] for r in res.failed] == [3]
    assert "designated failure" in res.failed[0]["error"]
    assert "batch 3" in (tmp_path / "results.csv").read_text()
    # The failure is retried next time; the good cases are not.
    again = run(tmp_path, cases, jobs=1, runner=failing_runner)
    assert again.computed == 1 and again.reused == len(CASES)


@pytest.mark.parametrize(
    "case, message",
    [
        (Case(machine="no-such-machine", network="nettalk"), "unknown machine 'no-such-machine'"),
        (Case(machine=OLD, network="no-such-net"), "unknown network 'no-such-net'"),
        (Case(machine=OLD, network="nettalk", batch=0), "batch must be a whole number >= 1"),
        (Case(machine=OLD, network="nettalk", checkpoint="often"), "unknown checkpointing"),
        (Case(machine=OLD, network="nettalk", phase="sideways"), "unknown phase"),
        (Case(machine=OLD + "@bw=-3", network="nettalk"), "bandwidth must be a positive"),
    ],
)
def test_bad_arguments_fail_before_any_work(tmp_path, case, message):
    calls = []

    def spy(c, machine=None):
        calls.append(c)
        return fake_runner(c, machine)

    with pytest.raises(InputError, match=message):
        run(tmp_path, CASES[:1] + [case], runner=spy, jobs=1)
    assert calls == [] and not (tmp_path / "cases").exists()


def test_bad_executor_arguments(tmp_path):
    with pytest.raises(InputError, match="jobs"):
        run(tmp_path, jobs=0)
    with pytest.raises(InputError, match="executor"):
        run(tmp_path, executor="slurm")


def test_keys_follow_the_profile_and_the_configuration():
    cat = CAT or sw.Catalogue()
    a = Case(machine=OLD, network="nettalk", batch=1)
    assert sw.case_key(a, cat) == sw.case_key(Case(machine=OLD, network="nettalk", batch=1), cat)
    assert sw.case_key(a, cat) != sw.case_key(Case(machine=OLD, network="nettalk", batch=2), cat)
    assert sw.case_key(a, cat) != sw.case_key(Case(machine=OLD + "@bw=1e9", network="nettalk"), cat)


def test_synthetic_machines_span_four_decades_of_balance():
    cat = CAT or sw.Catalogue()
    base = "h100" if CAT else sw._synthetic_base(cat, sw._modern(cat, cat.machine_ids()))
    specs = sw.synthetic_machines(cat, base, decades=4, per_decade=1)
    balances = [cat.machine(s).balance() for s in specs]
    assert len(specs) == 5
    assert balances[0] == pytest.approx(1.0, rel=1e-5)
    assert balances[-1] == pytest.approx(1e4, rel=1e-5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--machines", "no-such-machine"], "unknown machine 'no-such-machine'"),
        (["--machines", "cray-1", "--batches", "0"], "batch must be a whole number >= 1"),
        (["--machines", "cray-1", "--batches", "two"], "batch must be a whole number >= 1, got 'two'"),
        (["--machines", "cray-1", "--networks", "nettalk", "--checkpoint", "often"], "unknown checkpointing"),
        (["--machines", "cray-1", "--jobs", "0"], "--jobs must be >= 1"),
        (["--machines", "cray-1", "--executor", "slurm"], "unknown executor"),
    ],
)
def test_cli_rejects_bad_arguments_before_any_work(tmp_path, capsys, argv, message):
    from memwall.cli import main

    out = tmp_path / "out"
    assert main(["sweep", "--out", str(out), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memwall sweep: error:") and message in err[0]
    assert not out.exists()
