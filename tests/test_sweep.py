"""The era sweep: identical reruns, resuming after a kill, Dask = local, early errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from memwall.errors import InputError
from memwall.execute import sweep as sw
from memwall.execute.store import Store, read_rows
from memwall.simulation import Case
from memwall.simulation.row import case_key, make_row
from memwall.study import design
from memwall.study.identity import machine_ids, machine_info

# A few cheap real cases for the tests that need a fresh folder: 1980s machines, classic
# networks, per-example updates (all of them among the session sweep's cases).
OLD = "vax-11-780"
CASES = design.product([OLD, "cray-1"], ["nettalk", "encoder-8-3-8"], [1, 2], updates="per-example")


def run(out, cases=CASES, **kw):
    kw.setdefault("progress", False)
    return sw.run_sweep(cases, out, **kw)


# --------------------------------------------------------------------------------------


def test_rerun_gives_identical_rows_and_recomputes_nothing(tmp_path, quick_sweep, sweep_cases):
    assert quick_sweep.computed == len(sweep_cases) and quick_sweep.reused == 0
    csv1 = (quick_sweep.out / "results.csv").read_bytes()
    json1 = (quick_sweep.out / "results.json").read_bytes()
    again = tmp_path / "again"
    shutil.copytree(quick_sweep.out / "cases", again / "cases")
    second = run(again, sweep_cases, jobs=2)
    assert second.computed == 0 and second.reused == len(sweep_cases)
    assert (again / "results.csv").read_bytes() == csv1
    assert (again / "results.json").read_bytes() == json1
    # A fresh folder, run in one process, gives the same bytes: parallelism changes nothing.
    run(tmp_path / "serial", sweep_cases, jobs=1)
    assert (tmp_path / "serial" / "results.csv").read_bytes() == csv1
    header = csv1.decode().splitlines()[0].split(",")
    for col in ("machine", "year", "kind", "balance", "network", "batch", "checkpoint", "updates",
                "seconds", "stall_fraction", "fraction_of_peak", "cups"):
        assert col in header
    assert any(c.startswith("stall_") and c != "stall_fraction" for c in header)
    rows = read_rows(quick_sweep.out)
    assert len(rows) == len(sweep_cases)
    assert len({(r["machine"], r["network"], r["batch"], r["phase"]) for r in rows}) == len(sweep_cases)


def test_killed_halfway_resumes_with_every_case_once(tmp_path, quick_sweep, sweep_cases):
    out = tmp_path / "sweep"
    cases_json = json.dumps([c.as_dict() for c in CASES])
    script = textwrap.dedent(f"""
        import json, sys
        from memwall.execute import sweep as sw
        from memwall.simulation import Case
        cases = [Case(**d) for d in json.loads({cases_json!r})]
        def slow(case, machine=None):
            import time
            time.sleep(0.4)
            return sw.default_runner(case, machine)
        sw.run_sweep(cases, {str(out)!r}, jobs=1, runner=slow, progress=False)
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
    # ... and the resumed sweep equals one that was never interrupted, case by case.
    assert set(CASES) <= set(sweep_cases)
    clean = Store(quick_sweep.out)
    for key in store.keys():
        assert store.get(key)["row"] == clean.get(key)["row"]


def test_dask_gives_the_same_rows_as_local(tmp_path, quick_sweep, sweep_cases):
    pytest.importorskip("dask.distributed")  # an optional extra: memwall[dask]
    res = run(tmp_path / "dask", sweep_cases, jobs=2, executor="dask")
    assert res.computed == len(sweep_cases)
    assert (tmp_path / "dask" / "results.csv").read_bytes() == (quick_sweep.out / "results.csv").read_bytes()


def failing_runner(case: Case, machine=None):
    """The real runner, except that batch 3 fails, as a broken case would."""
    if case.batch == 3:
        raise ValueError("batch 3 is the designated failure")
    return sw.default_runner(case, machine)


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
        (Case(machine=OLD, network="nettalk", batch=0), "'batch': must be a whole number >= 1"),
        (Case(machine=OLD, network="nettalk", checkpoint="often"), "unknown checkpointing"),
        (Case(machine=OLD, network="nettalk", phase="sideways"), "must be one of train, forward"),
        (Case(machine=OLD + "@bw=-3", network="nettalk"), "bandwidth must be a positive"),
    ],
)
def test_bad_arguments_fail_before_any_work(tmp_path, case, message):
    calls = []

    def spy(c, machine=None):
        calls.append(c)
        return sw.default_runner(c, machine)

    with pytest.raises(InputError, match=message):
        run(tmp_path, CASES[:1] + [case], runner=spy, jobs=1)
    assert calls == [] and not (tmp_path / "cases").exists()


def test_bad_executor_arguments(tmp_path):
    with pytest.raises(InputError, match="jobs"):
        run(tmp_path, jobs=0)
    with pytest.raises(InputError, match="executor"):
        run(tmp_path, executor="slurm")


def test_keys_follow_the_profile_and_the_configuration():
    a = Case(machine=OLD, network="nettalk", batch=1)
    assert case_key(a) == case_key(Case(machine=OLD, network="nettalk", batch=1))
    assert case_key(a) != case_key(Case(machine=OLD, network="nettalk", batch=2))
    assert case_key(a) != case_key(Case(machine=OLD + "@bw=1e9", network="nettalk"))


def test_fingerprint_is_what_a_profile_says_not_where_it_lies(tmp_path):
    from memwall.profiles import load_machine

    text = load_machine(OLD).path.read_text()
    (tmp_path / "copy").mkdir()
    (tmp_path / "edit").mkdir()
    copy, edit = tmp_path / "copy" / f"{OLD}.toml", tmp_path / "edit" / f"{OLD}.toml"
    copy.write_text(text)
    edit.write_text(text.replace('name = "', 'name = "edited ', 1))
    assert machine_info(str(copy)).fingerprint == machine_info(OLD).fingerprint
    assert machine_info(str(edit)).fingerprint != machine_info(OLD).fingerprint


def test_synthetic_machines_span_four_decades_of_balance():
    base = design._synthetic_base(design._modern(machine_ids()))
    specs = design.synthetic_machines(base, decades=4, per_decade=1)
    balances = [machine_info(s).balance() for s in specs]
    assert len(specs) == 5
    assert balances[0] == pytest.approx(1.0, rel=1e-5)
    assert balances[-1] == pytest.approx(1e4, rel=1e-5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--machines", "no-such-machine"], "unknown machine 'no-such-machine'"),
        (["--machines", "cray-1", "--batches", "0"], "'batch': must be a whole number >= 1"),
        (["--machines", "cray-1", "--batches", "two"], "'batch': must be a whole number >= 1, got 'two'"),
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


def test_rows_say_whether_the_weights_fit_on_chip():
    from memwall.simulation import run_case

    small = Case("h100-sxm", "nettalk")  # 74 kB of weights against a 50 MiB L2
    large = Case("h100-sxm", "gpt2-small", seq_len=8, phase="forward")  # 249 MB of them
    cray = Case("cray-1", "nettalk")  # 8 x 64 words of vector registers: nothing stays on chip
    rows = [make_row(c, run_case(c), None) for c in (small, large, cray)]
    assert [r["weights_on_chip"] for r in rows] == [True, False, False]


def test_a_sweep_over_power_gives_rows_that_say_which_they_are(tmp_path):
    """--power burst,held: two rows of one case, each naming its power state (the default
    resolved: a training step is held) and the held one no faster."""
    from memwall.cli import main

    out = tmp_path / "out"
    assert main(["sweep", "--out", str(out), "--no-progress", "--no-figures", "--machines", "a100-sxm",
                 "--networks", "gpt2-small", "--batches", "8", "--power", "burst,held", "--grad-reduce",
                 "overlapped"]) == 0
    rows = {r["power"]: r for r in read_rows(out)}
    assert set(rows) == {"burst", "held"}
    assert rows["held"]["seconds"] >= rows["burst"]["seconds"]
    assert {r["grad_reduce"] for r in rows.values()} == {"overlapped"}
    default = make_row(Case("a100-sxm", "gpt2-small"), None, "not run")
    assert default["power"] == "held" and default["grad_reduce"] is None


def test_records_round_trip_compact_nan_and_the_indented_form_of_earlier_versions(tmp_path):
    from memwall.execute import store as st

    s = Store(tmp_path)
    record = {"key": "k1", "status": "ok", "row": {"seconds": 1.5, "ratio": float("nan"), "dims": (1, 2)},
              "result": {"by_size": {4096: 2, 512: 1}, "inf": float("inf")}}
    path = s.put(record)
    assert path.read_text().count("\n") == 1  # one line: the C encoder's form
    back = s.get("k1")
    assert back["row"] == {"seconds": 1.5, "ratio": None, "dims": [1, 2]}
    assert back["result"] == {"by_size": {"4096": 2, "512": 1}, "inf": None}
    assert s.get("k1") is not None  # its checksum holds when read again
    # a record as an earlier memwall wrote it (indented text, that text's checksum) still reads
    old = {"key": "k2", "status": "ok", "row": {"seconds": 2.0}}
    old["checksum"] = st.hashlib.sha256(st.dumps(old).encode()).hexdigest()
    s.path("k2").write_text(st.dumps(old))
    assert s.get("k2")["row"] == {"seconds": 2.0}
    # an edited one does not, in either form
    edited = json.loads(path.read_text())
    edited["row"]["seconds"] = 9.0
    path.write_text(json.dumps(edited))
    assert s.get("k1") is None and s.damaged[-1][0] == "k1"


def test_a_record_as_written_is_checked_from_its_bytes_and_an_edited_one_is_not_passed(tmp_path, monkeypatch):
    """A record in the form Store.put writes is verified by hashing its bytes (a sweep reads
    back hundreds of records of tens of kilobytes); a record whose bytes were changed is
    checked the slow way, and refused when its content changed."""
    from memwall.execute import store as st

    s = Store(tmp_path)
    path = s.put({"key": "k1", "status": "ok", "row": {"seconds": 1.5}})
    monkeypatch.setattr(st, "checksum", lambda *a, **k: pytest.fail("re-encoded a sealed record"))
    assert s.get("k1")["row"] == {"seconds": 1.5}
    monkeypatch.undo()
    text = path.read_text()
    path.write_text(text.replace('"seconds":1.5', '"seconds": 1.5'))  # the same content, other bytes
    assert s.get("k1")["row"] == {"seconds": 1.5}
    path.write_text(text.replace('"seconds":1.5', '"seconds":2.5'))  # other content
    assert s.get("k1") is None and s.damaged[-1][0] == "k1"


def test_a_machine_given_as_a_file_is_named_by_its_id_and_joins_the_balance_drift(tmp_path):
    from memwall.data import data_files
    from memwall.execute.sweep import read_machine_roofs
    from memwall.report.page import label
    from memwall.study.tables import machine_table

    shipped = next(p for p in data_files("machines") if p.stem == "vax-11-780")
    mine = tmp_path / "profiles" / "my-vax.toml"
    mine.parent.mkdir()
    mine.write_text(shipped.read_text(encoding="utf-8").replace('id = "vax-11-780"', 'id = "my-vax"', 1),
                    encoding="utf-8")
    result = run(tmp_path / "out", [Case(machine=str(mine), network="nettalk", updates="per-example")])
    assert [r["machine"] for r in result.rows] == ["my-vax"]
    table = machine_table(read_machine_roofs(tmp_path / "out"))
    assert [r["id"] for r in table].count("my-vax") == 1 and "vax-11-780" in {r["id"] for r in table}
    assert label("h100-sxm@bw=98940000000.0") == "h100-sxm @ 98.94 GB/s"


def test_the_docs_state_the_studys_true_case_counts():
    import re
    from pathlib import Path

    from memwall.study.design import study

    root = Path(__file__).resolve().parent.parent
    text = (root / "experiments" / "README.md").read_text()
    full, quick = map(int, re.search(r"The default study is (\d+) cases, `--quick` (\d+)", text).groups())
    assert (full, quick) == (len(study()), len(study(quick=True)))
    about = int(re.search(r"runs about (\d+) such cases", (root / "README.md").read_text()).group(1))
    assert abs(about - full) <= 0.05 * full  # "about": within 5 %
