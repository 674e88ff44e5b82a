"""Bad input, damaged files and hostile conditions: a clear error or a defined behaviour.

Each test here is a finding of issue 17 that once gave a traceback, a hang, an orphaned
process or a silently wrong result: the damaged case store, workers outliving their
sweep, output paths, a damaged results.json, replay on a machine without caches, the
validate exit status, work that would take days, and the Dask scheduler's trust boundary.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from memwall.experiments import sweep as sw
from memwall.experiments.store import Store

OLD = "vax-11-780"
CASES = sw.product([OLD], ["encoder-8-3-8", "nettalk"], [1], updates="per-example")
CAT = sw.Catalogue()
TESTS = Path(__file__).parent


def sweep(out, cases=CASES, **kw):
    kw.setdefault("catalogue", CAT)
    kw.setdefault("progress", False)
    kw.setdefault("jobs", 1)
    return sw.run_sweep(cases, out, **kw)


def one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"memwall {command}: error:"), err[0]
    return err[0]


# --------------------------------------------------------------------------------------
# The case store checks itself (item 3)


def _edit_number(path: Path) -> None:
    record = json.loads(path.read_text())
    record["row"]["seconds"] = record["row"]["seconds"] * 2  # a plausible, wrong number
    path.write_text(json.dumps(record))


DAMAGE = {
    "random bytes": lambda p: p.write_bytes(bytes(range(256)) * 4),
    "truncated": lambda p: p.write_text(p.read_text()[:40]),
    "no row": lambda p: p.write_text(json.dumps({k: v for k, v in json.loads(p.read_text()).items() if k != "row"})),
    "row null": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "row": None})),
    "a folder": lambda p: (p.unlink(), p.mkdir(), (p / "x").write_text("x")),
    "a list": lambda p: p.write_text("[1, 2]"),
    "edited number": _edit_number,
    "no checksum": lambda p: p.write_text(json.dumps({k: v for k, v in json.loads(p.read_text()).items()
                                                      if k != "checksum"})),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_record_is_reported_once_moved_aside_and_recomputed(tmp_path, capsys, damage):
    clean = sweep(tmp_path / "clean")
    out = tmp_path / "s"
    sweep(out)
    store = Store(out)
    key = sw.case_key(CASES[1], CAT)
    DAMAGE[damage](store.path(key))
    capsys.readouterr()

    again = sweep(out)
    assert again.computed == 1 and again.reused == len(CASES) - 1
    assert [k for k, _ in again.damaged] == [key]
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and key in err and "computed again" in err
    assert list((out / "cases" / "quarantine").iterdir())
    assert again.rows == clean.rows  # the edited number is not what the table says
    assert (out / "results.csv").read_bytes() == (tmp_path / "clean" / "results.csv").read_bytes()

    third = sweep(out)  # reported once: the record is whole again
    assert third.computed == 0 and third.damaged == []
    assert key not in capsys.readouterr().err


def test_store_keys_ignore_the_quarantine_and_claims(tmp_path):
    out = tmp_path / "s"
    sweep(out)
    store = Store(out)
    key = sw.case_key(CASES[0], CAT)
    store.path(key).write_bytes(b"\xff\xfe")
    assert store.get(key) is None
    assert store.keys() == [sw.case_key(CASES[1], CAT)]


def test_sweep_outputs_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        sweep(tmp_path / "s", CASES[:1])
    finally:
        os.umask(old)
    for path in [tmp_path / "s" / "results.csv", tmp_path / "s" / "results.json",
                 *(tmp_path / "s" / "cases").glob("*.json")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


SHARED_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {tests!r})
    from memwall.experiments import sweep as sw
    from memwall.simulate import Case
    cases = [Case(**d) for d in json.loads({cases!r})]
    log = {log!r}
    def slow(case, machine=None):
        with open(log, "a") as f:
            f.write(f"{tag} {{case.network}} {{case.batch}}\\n")
        time.sleep({delay})
        return sw._default_runner(case, machine)
    res = sw.run_sweep(cases, {out!r}, jobs={jobs}, runner=slow, progress=False)
    print(json.dumps({{"computed": res.computed, "shared": res.shared, "rows": len(res.rows)}}))
""")


def _sweeper(out, cases, log, jobs=1, delay=0.3):
    script = SHARED_SCRIPT.format(tests=str(TESTS), cases=json.dumps([c.as_dict() for c in cases]),
                                  log=str(log), out=str(out), jobs=jobs, delay=delay,
                                  tag=f"sweep{jobs}")
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def test_two_sweeps_sharing_a_folder_compute_each_case_once(tmp_path):
    cases = sw.product([OLD], ["encoder-8-3-8"], [1, 2, 3, 4, 5, 6], updates="per-example")
    log = tmp_path / "log"
    out = tmp_path / "s"
    procs = [_sweeper(out, cases, log, jobs=j) for j in (1, 2)]
    results = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    runs = log.read_text().splitlines()
    assert len(runs) == len(cases), runs  # no case computed twice
    assert sum(r["computed"] for r in results) == len(cases)
    assert all(r["rows"] == len(cases) for r in results)
    assert len({line.split()[0] for line in runs}) == 2, "both sweeps should have done part of the work"
    assert not list((out / "cases").glob("*.claim"))


def test_a_claim_of_a_killed_process_is_taken_over(tmp_path):
    out = tmp_path / "s"
    key = sw.case_key(CASES[0], CAT)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from memwall.experiments.store import Store
        store = Store({str(out)!r})
        assert store.claim({key!r})
        print("claimed", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        result = {}
        thread = threading.Thread(target=lambda: result.update(r=sweep(out)), daemon=True)
        thread.start()
        thread.join(3)
        assert thread.is_alive(), "the sweep should wait while a live process holds the case"
        assert not Store(out).has(key)
    finally:
        holder.kill()
        holder.wait()
    thread.join(60)
    assert not thread.is_alive()
    assert result["r"].computed == len(CASES) and len(result["r"].rows) == len(CASES)
