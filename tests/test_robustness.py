"""Bad input, damaged files and hostile conditions: a clear error or a defined behaviour.

Each test here is a finding of issue 17 that once gave a traceback, a hang, an orphaned
process or a silently wrong result: the damaged case store, workers outliving their
sweep, output paths, a damaged results.json, replay on a machine without caches, the
validate exit status, work that would take days, and the Dask scheduler's trust boundary.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from probes import measurement_text

from memwall.cli import main
from memwall.data import era_data_dir
from memwall.execute import sweep as sw
from memwall.execute.store import Store
from memwall.simulation import Case
from memwall.simulation.row import case_key
from memwall.study import design

OLD = "vax-11-780"
CASES = design.product([OLD], ["encoder-8-3-8", "nettalk"], [1], updates="per-example")
TESTS = Path(__file__).parent


def sweep(out, cases=CASES, **kw):
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
def test_a_damaged_record_is_reported_once_moved_aside_and_recomputed(tmp_path, capsys, damage, monkeypatch):
    monkeypatch.setenv("MEMWALL_CACHE", "off")  # the folder's own store recomputes (the cache: test_cache.py)
    clean = sweep(tmp_path / "clean")
    out = tmp_path / "s"
    sweep(out)
    store = Store(out)
    key = case_key(CASES[1])
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
    key = case_key(CASES[0])
    store.path(key).write_bytes(b"\xff\xfe")
    assert store.get(key) is None
    assert store.keys() == [case_key(CASES[1])]


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
    from memwall.execute import sweep as sw
    from memwall.simulation import Case
    cases = [Case(**d) for d in json.loads({cases!r})]
    log = {log!r}
    def slow(case, machine=None):
        with open(log, "a") as f:
            f.write(f"{tag} {{case.network}} {{case.batch}}\\n")
        time.sleep({delay})
        return sw.default_runner(case, machine)
    res = sw.run_sweep(cases, {out!r}, jobs={jobs}, runner=slow, progress=False)
    print(json.dumps({{"computed": res.computed, "shared": res.shared, "rows": len(res.rows)}}))
""")


def _sweeper(out, cases, log, jobs=1, delay=0.3):
    script = SHARED_SCRIPT.format(tests=str(TESTS), cases=json.dumps([c.as_dict() for c in cases]),
                                  log=str(log), out=str(out), jobs=jobs, delay=delay,
                                  tag=f"sweep{jobs}")
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def test_two_sweeps_sharing_a_folder_compute_each_case_once(tmp_path):
    cases = design.product([OLD], ["encoder-8-3-8"], [1, 2, 3, 4, 5, 6], updates="per-example")
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
    key = case_key(CASES[0])
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from memwall.execute.store import Store
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


# --------------------------------------------------------------------------------------
# Output paths are checked before any work (items 5 and 13)


def _readonly_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").write_text("x")
    except PermissionError:
        return folder
    (folder / "probe").unlink()
    pytest.skip("running as a user who may write into a read-only folder (root)")


@pytest.mark.parametrize("make_out, message", [
    (lambda t: "", "an empty path"),
    (lambda t: str(t / "file"), "is not a folder"),
    (lambda t: "/proc/memwall-test/out", "cannot write into /proc"),
    (lambda t: str(t / "file" / "below"), "is not a folder"),
])
def test_sweep_out_is_checked_before_any_work(tmp_path, capsys, monkeypatch, make_out, message):
    monkeypatch.chdir(tmp_path)  # `--out ''` once wrote into the current folder
    (tmp_path / "file").write_text("not a folder")
    out = make_out(tmp_path)
    before = sorted(os.listdir(tmp_path))
    assert main(["sweep", "--machines", OLD, "--networks", "encoder-8-3-8", "--out", out, "--no-progress",
                 "--no-figures"]) == 2
    assert message in one_line_error(capsys, "sweep")
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("squatter", ["cases", "results.csv"])
def test_sweep_into_a_folder_whose_parts_are_the_wrong_kind(tmp_path, capsys, squatter):
    out = tmp_path / "s"
    out.mkdir()
    if squatter == "cases":
        (out / "cases").write_text("a file")
    else:
        (out / "results.csv").mkdir()
    assert main(["sweep", "--machines", OLD, "--networks", "encoder-8-3-8", "--out", str(out), "--no-progress"]) == 2
    assert "not a sweep folder" in one_line_error(capsys, "sweep")


def test_an_unreachable_scheduler_is_one_line(tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pytest.importorskip("dask.distributed")
    assert main(["sweep", "--machines", OLD, "--networks", "encoder-8-3-8", "--executor", "dask",
                 "--scheduler", f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "s"), "--no-progress"]) == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err


def test_sweep_into_a_read_only_folder(tmp_path, capsys):
    ro = _readonly_dir(tmp_path)
    assert main(["sweep", "--machines", OLD, "--networks", "encoder-8-3-8", "--out", str(ro / "s"),
                 "--no-progress"]) == 2
    assert "is not writable" in one_line_error(capsys, "sweep")


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("robust-sweep")
    sweep(out, CASES[:1])
    return out


@pytest.mark.parametrize("make_target, message", [
    (lambda t: t, "is a folder"),
    (lambda t: t / "missing" / "parent" / "x.html", "does not exist"),
    (lambda t: "", "an empty path"),
])
def test_report_output_is_checked_before_any_work(small_sweep, tmp_path, capsys, make_target, message):
    assert main(["report", str(small_sweep), "-o", str(make_target(tmp_path))]) == 2
    assert message in one_line_error(capsys, "report")
    assert not (small_sweep / "figures").exists()


def test_report_to_a_full_device(small_sweep, capsys, monkeypatch):
    from memwall.study import draw

    monkeypatch.setattr(draw, "write_figures", lambda *a, **k: {})  # the figures are not what is tested
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    assert main(["report", str(small_sweep), "-o", "/dev/full"]) == 2
    assert "No space left on device" in one_line_error(capsys, "report")


@pytest.mark.parametrize("out, message", [
    ("nodir/x.npz", "does not exist"),
    ("", "an empty path"),
    (".", "is a folder"),
    ("/dev/full", "No space left on device"),
])
def test_trace_out(tmp_path, capsys, monkeypatch, out, message):
    monkeypatch.chdir(tmp_path)
    if out == "/dev/full" and not Path(out).exists():
        pytest.skip("no /dev/full here")
    assert main(["trace", "--machine", "cray-1", "--network", "encoder-8-3-8", "--out", out]) == 2
    assert message in one_line_error(capsys, "trace")
    assert os.listdir(tmp_path) == []


def test_detect_refuses_a_bad_id_or_out_before_measuring(tmp_path, capsys, monkeypatch):
    from memwall import host

    monkeypatch.setattr(host, "detect", lambda **k: pytest.fail("measured before checking its arguments"))
    out = tmp_path / "host.toml"
    assert main(["machines", "detect", "--quick", "--id", "Bad ID!", "--out", str(out)]) == 2
    assert "kebab-case" in one_line_error(capsys, "machines")
    assert main(["machines", "detect", "--quick", "--out", str(tmp_path)]) == 2
    assert "is a folder" in one_line_error(capsys, "machines")
    assert main(["machines", "detect", "--quick", "--out", str(tmp_path / "no" / "x.toml")]) == 2
    assert "does not exist" in one_line_error(capsys, "machines")
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------
# `report` on a damaged results.json (item 6)


def _rows_file(small_sweep, tmp_path, text: bytes) -> Path:
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "results.json").write_bytes(text)
    return folder


GOOD_ROW = {"machine": OLD, "year": 1977, "kind": "scalar", "status": "ok", "batch": 1, "network": "nettalk",
            "checkpoint": "none", "updates": "minibatch", "phase": "train", "seconds": 1.5, "synthetic": False}


@pytest.mark.parametrize("text, message", [
    (b'{"columns": ["machine"], "rows": [{"mach', "not valid JSON"),
    (bytes(range(256)), "not UTF-8"),
    (b"[1, 2, 3]", "expected a table"),
    (b'{"columns": [], "rows": null}', "expected a table"),
    (b'{"columns": [], "rows": [3]}', "row 0 is a JSON int"),
    (json.dumps({"rows": [{k: v for k, v in GOOD_ROW.items() if k != "machine"}]}).encode(),
     "'machine' is missing"),
    (json.dumps({"rows": [{**GOOD_ROW, "year": "1977"}]}).encode(), "'year' is str"),
    (json.dumps({"rows": [{k: v for k, v in GOOD_ROW.items() if k != "checkpoint"}]}).encode(),
     "'checkpoint' is missing"),
    (json.dumps({"rows": [{**GOOD_ROW, "seconds": [1]}]}).encode(), "'seconds' is list"),
    (json.dumps({"rows": [{**GOOD_ROW, "stall_fraction": "x"}]}).encode(), "'stall_fraction' is str"),
    (b'{"rows": [{"machine": "vax-11-780", "year": 1977, "kind": "scalar", "status": "ok", "batch": 1, '
     b'"network": null, "checkpoint": "none", "updates": "minibatch", "phase": "train", "seconds": NaN}]}',
     "'seconds' is float nan"),
    (json.dumps({"rows": [{**GOOD_ROW, "status": "fine"}]}).encode(), "neither 'ok' nor 'error'"),
])
def test_report_on_a_damaged_results_json(small_sweep, tmp_path, capsys, text, message):
    folder = _rows_file(small_sweep, tmp_path, text)
    assert main(["report", str(folder)]) == 2
    line = one_line_error(capsys, "report")
    assert message in line and "results.json" in line
    assert not (folder / "report.html").exists() and not (folder / "figures").exists()


def test_report_shows_a_user_profile_by_name_and_does_not_open_it(tmp_path, capsys, pyplot, fast_measurements):
    from memwall.report.page import build_report
    from memwall.study.draw import write_figures

    profile = tmp_path / "private" / "my-vax.toml"
    profile.parent.mkdir()
    profile.write_text((era_data_dir() / "machines" / f"{OLD}.toml").read_text()
                       .replace(f'id = "{OLD}"', 'id = "my-vax"'))
    out = tmp_path / "s"
    result = sweep(out, [Case(machine=str(profile), network="encoder-8-3-8", batch=1, updates="per-example")])
    # the validation figure of a few published GEMMs (the shipped set's would take minutes)
    write_figures(out, result.rows, only=["validation"], measurements=fast_measurements, progress=False)
    profile.unlink()  # the report must not need it
    text = build_report(out).read_text()
    assert str(profile.parent) not in text and "my-vax" in text  # by its id, as rows name it


# --------------------------------------------------------------------------------------
# Smaller ones: replay without caches, validate's exit status, machine specs, network paths


def test_replay_through_a_machine_without_cache_levels(tmp_path, capsys):
    trace = tmp_path / "t.din"
    trace.write_text("0 1000 4\n1 2000 4\n")
    assert main(["replay", str(trace), "--machine", "cray-1"]) == 2
    assert "no cache levels" in one_line_error(capsys, "replay")


def test_validate_exits_non_zero_unless_every_case_was_predicted(tmp_path, capsys):
    d = tmp_path / "m"
    d.mkdir()
    assert main(["validate", "--measurements", str(d)]) == 2
    assert "no measurement" in one_line_error(capsys, "validate")
    (d / "a.toml").write_text(measurement_text("no-such-machine"))
    assert main(["validate", "--measurements", str(d)]) == 1
    err = capsys.readouterr().err
    assert "probe-no-such-machine (unknown machine)" in err and "1 of 1 cases not predicted" in err
    (d / "a.toml").write_text(measurement_text("h100-sxm"))
    assert main(["validate", "--measurements", str(d)]) == 0


def test_validate_reports_a_case_that_raises(monkeypatch, tmp_path, capsys):
    import memwall.study.validation as v

    def boom(case):
        raise OverflowError("int too large to convert")

    import memwall.execute.validation as ev

    monkeypatch.setattr(v, "default_predictor", lambda: boom)
    monkeypatch.setattr(ev, "default_predictor", lambda: boom)  # what validate's cache falls back on
    monkeypatch.setenv("MEMWALL_CACHE", "off")  # no stored prediction of this case answers instead
    d = tmp_path / "m"
    d.mkdir()
    (d / "a.toml").write_text(measurement_text("h100-sxm"))
    assert main(["validate", "--measurements", str(d)]) == 1
    assert "probe-h100-sxm (error): OverflowError" in capsys.readouterr().err


@pytest.mark.parametrize("spec, message", [
    ("h100-sxm@bw=nan", "bandwidth must be a positive, finite"),
    ("h100-sxm@bw=inf", "bandwidth must be a positive, finite"),
    ("h100-sxm@bw=", "is not a number"),
    ("h100-sxm@bw=1_000", "is not a number"),
    ("h100-sxm@clock=1e9", "the only setting after '@' is bw"),
    ("h100-sxm@bw=1e-300", "within 1e-30 .. 1e+30 B/s"),  # refused before any case runs
])
def test_a_bad_synthetic_machine_is_a_bad_bandwidth(tmp_path, capsys, spec, message):
    assert main(["sweep", "--machines", spec, "--out", str(tmp_path / "s"), "--no-progress"]) == 2
    line = one_line_error(capsys, "sweep")
    assert message in line and "unknown machine" not in line


def test_sweep_accepts_a_network_preset_path(tmp_path, capsys):
    preset = era_data_dir() / "networks" / "encoder-8-3-8.toml"
    local = tmp_path / "enc.toml"
    local.write_text(preset.read_text())
    assert main(["sweep", "--machines", OLD, "--networks", str(local), "--updates", "per-example",
                 "--out", str(tmp_path / "s"), "--no-progress", "--no-figures"]) == 0
    rows = json.loads((tmp_path / "s" / "results.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["status"] == "ok"


@pytest.mark.parametrize("address, local", [
    ("tcp://127.0.0.1:8786", True), ("localhost:8786", True), ("tcp://[::1]:8786", True),
    ("127.0.0.2:1", True), ("tcp://10.0.0.5:8786", False), ("scheduler.example.org:8786", False),
    ("tls://192.168.1.1:8786", False),
])
def test_a_remote_scheduler_needs_explicit_permission(tmp_path, capsys, address, local):
    assert sw.scheduler_is_local(address) is local
    if local:
        return
    argv = ["sweep", "--machines", OLD, "--executor", "dask", "--scheduler", address,
            "--out", str(tmp_path / "s"), "--no-progress"]
    assert main(argv) == 2
    assert "--allow-remote-scheduler" in one_line_error(capsys, "sweep")
    assert not (tmp_path / "s").exists()


def test_sweep_help_says_what_joining_a_scheduler_means(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "pickled" in text and "--allow-remote-scheduler" in text


# --------------------------------------------------------------------------------------
# Workers die with their sweep (item 8)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has died: only its exit status is left


def dying_runner(case, machine=None):
    """The real runner, except that batch 3 kills its own worker, as the OOM killer would."""
    if case.batch == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return sw.default_runner(case, machine)


def test_a_worker_that_dies_fails_its_case_and_the_sweep_goes_on(tmp_path):
    cases = design.product([OLD], ["encoder-8-3-8"], [1, 2, 3, 4, 5], updates="per-example")
    res = sweep(tmp_path / "s", cases, jobs=2, runner=dying_runner)
    assert len(res.rows) == len(cases)
    assert [r["batch"] for r in res.failed] == [3]
    assert "worker process running this case died" in res.failed[0]["error"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"])
def test_killing_a_sweep_leaves_no_worker_behind(tmp_path, sig):
    cmd = [sys.executable, "-m", "memwall", "sweep", "--machines", OLD, "decstation-3100", "--networks", "affine-48x1024",
           "--batches", "1", "2", "--updates", "per-example", "--jobs", "2", "--out", str(tmp_path / "s"),
           "--no-progress", "--no-figures"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            workers = _children(proc.pid)
        assert len(workers) >= 2, "the sweep should have started its two workers"
        time.sleep(0.5)  # into the cases
        assert proc.poll() is None, "the sweep ended before the kill"
        sent = time.monotonic()
        os.kill(proc.pid, sig)
        proc.wait(timeout=10)
        assert time.monotonic() - sent < 2.0, "the sweep should stop at once, not finish its running cases"
        if sig == signal.SIGTERM:
            assert proc.returncode == 143 and "terminated" in proc.stderr.read()
        if sig == signal.SIGINT:
            assert proc.returncode == 130 and "interrupted" in proc.stderr.read()
        deadline = time.monotonic() + 5
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their sweep"
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    assert not list((tmp_path / "s" / "cases").glob("*.claim")) or sig == signal.SIGKILL


# --------------------------------------------------------------------------------------
# Ctrl-C stops a long replay within a second (item 2)


@pytest.mark.parametrize("machine", ["decstation-3100", "vax-11-780"])
def test_ctrl_c_stops_a_long_inspect_within_a_second(tmp_path, machine):
    # (a machine without caches is counted from its streams, not replayed: nothing to stop)
    wide = tmp_path / "wide.toml"
    wide.write_text((era_data_dir() / "networks" / "nettalk.toml").read_text()
                    .replace("layers = [203, 80, 26]", "layers = [203, 1000000000, 26]")
                    .replace('id = "nettalk"', 'id = "wide"'))
    proc = subprocess.Popen([sys.executable, "-m", "memwall", "inspect", "--machine", machine, "--network", str(wide),
                             "--max-lookups", "1e13", "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # well into the replay (the refusal check and the set-up take well under 1 s)
        assert proc.poll() is None
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        assert time.monotonic() - sent < 1.0
        assert proc.returncode == 130 and "interrupted" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sweep_max_lookups_fails_the_case_with_the_estimate(tmp_path, capsys):
    argv = ["sweep", "--machines", OLD, "--networks", "nettalk", "--batches", "64", "--out", str(tmp_path / "s"),
            "--no-progress", "--no-figures", "--jobs", "1"]
    assert main([*argv, "--max-lookups", "1000"]) == 1
    rows = json.loads((tmp_path / "s" / "results.json").read_text())["rows"]
    assert rows[0]["status"] == "error" and "line lookups" in rows[0]["error"] and "--max-lookups" in rows[0]["error"]
    capsys.readouterr()
    assert main(argv) == 0  # the default limit lets it run, and the failed case is run again


# --------------------------------------------------------------------------------------
# A dtype the machine lacks (item 11), bases outside the profile's folders (item 12),
# geometry the engine cannot build (item 4), heads that do not divide d_model (item 11)


def test_a_dtype_the_machine_lacks_is_refused_naming_its_dtypes(capsys):
    argv = ["inspect", "--machine", OLD, "--network", "nettalk", "--dtype", "bf16"]
    assert main(argv) == 2
    line = one_line_error(capsys, "inspect")
    assert "--dtype" in line and "fp32, fp64" in line and "--allow-fallback" in line
    assert main([*argv, "--allow-fallback", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["dtype_fallback"] == {"requested": "bf16", "used": "fp32"}
    assert any("no bf16 arithmetic" in w for w in result["warnings"])


def test_a_network_s_own_dtype_falls_back_with_a_warning(capsys):
    # nettalk trains in fp32; the Cray-1 has only 64-bit floating point. Nobody asked for
    # fp32, so this is no error, but the result says what ran.
    assert main(["inspect", "--machine", "cray-1", "--network", "nettalk", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["dtype_fallback"] == {"requested": "fp32", "used": "fp64"}
    assert main(["inspect", "--machine", "h100-sxm", "--network", "nettalk", "--json"]) == 0
    assert "dtype_fallback" not in json.loads(capsys.readouterr().out)


def test_sweep_fails_a_case_whose_dtype_the_machine_lacks_unless_allowed(tmp_path, capsys):
    argv = ["sweep", "--machines", f"{OLD},h100-sxm", "--networks", "nettalk", "--batches", "1",
            "--dtype", "bf16", "--no-progress", "--no-figures", "--jobs", "1", "--out", str(tmp_path / "s")]
    assert main(argv) == 1
    rows = {r["machine"]: r for r in json.loads((tmp_path / "s" / "results.json").read_text())["rows"]}
    assert rows[OLD]["status"] == "error" and "--allow-fallback" in rows[OLD]["error"]
    assert rows["h100-sxm"]["status"] == "ok"
    capsys.readouterr()
    assert main([*argv, "--allow-fallback"]) == 0


def _child_profile(folder: Path, base: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "child.toml"
    path.write_text(f'format_version = 1\nid = "child"\nname = "Child"\nyear = 2022\nkind = "gpu"\nbase = "{base}"\n')
    return path


@pytest.mark.parametrize("where", ["absolute", "above", "not toml"])
def test_a_base_outside_the_profile_s_folders_is_not_opened(tmp_path, capsys, monkeypatch, where):
    shipped = (era_data_dir() / "machines" / "h100-sxm.toml").read_text()
    outside = tmp_path / "outside.toml"
    outside.write_text(shipped.replace('id = "h100-sxm"', 'id = "outside"'))
    base = {"absolute": str(outside), "above": "../outside.toml", "not toml": "../../../../etc/passwd"}[where]
    child = _child_profile(tmp_path / "mine", base)
    monkeypatch.delenv("MEMWALL_PROFILE_PATH", raising=False)
    opened = []
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (opened.append(self), real_read(self, *a, **k))[1])
    assert main(["machines", "validate", str(child)]) == 1
    said = "".join(capsys.readouterr())
    assert "field 'base'" in said and "read only from there" in said and "does not exist" not in said
    assert outside not in opened
    if where != "not toml":  # a folder named in $MEMWALL_PROFILE_PATH is trusted
        monkeypatch.setenv("MEMWALL_PROFILE_PATH", str(tmp_path))
        assert main(["machines", "validate", str(child)]) == 0


def test_a_base_inside_the_profile_s_folder_tree_is_read(tmp_path, capsys):
    shipped = (era_data_dir() / "machines" / "h100-sxm.toml").read_text()
    (tmp_path / "mine" / "common").mkdir(parents=True)
    (tmp_path / "mine" / "common" / "gpu.toml").write_text(shipped.replace('id = "h100-sxm"', 'id = "gpu"'))
    child = _child_profile(tmp_path / "mine", "common/gpu.toml")
    assert main(["machines", "validate", str(child)]) == 0


@pytest.mark.parametrize("edit, field", [
    (('value = "50 MiB"', 'value = "1e30 B"'), "level[L2].size"),
    (("tile_m = 128", "tile_m = 9223372036854775807"), "schedule.tile_m"),
    (("units = { value = 132,", "units = { value = 4611686018427387904,"), "schedule.units"),
])
def test_geometry_the_engine_cannot_build_is_refused_by_validate(tmp_path, capsys, edit, field):
    text = (era_data_dir() / "machines" / "h100-sxm.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "odd.toml"
    path.write_text(text.replace('id = "h100-sxm"', 'id = "odd"').replace(*edit))
    assert main(["machines", "validate", str(path)]) == 1
    assert f"field '{field}'" in "".join(capsys.readouterr())
    assert main(["inspect", "--machine", str(path), "--network", "nettalk"]) == 2
    assert f"field '{field}'" in one_line_error(capsys, "inspect")


def test_a_level_the_host_cannot_hold_is_an_input_error_naming_it(monkeypatch):
    from memwall import _csim, engine
    from memwall.errors import InputError
    from memwall.levels import LevelSpec

    def refuse(levels, classify=False):
        raise MemoryError(f"cannot allocate level {levels[-1]['name']!r}")

    monkeypatch.setattr(_csim, "Engine", refuse)
    with pytest.raises(InputError, match=r"cannot allocate level 'L2'.*16 B of host memory per simulated line"):
        engine.Hierarchy([LevelSpec("L1", 32 << 10, 64, 8), LevelSpec("L2", 160 << 30, 128, 16)])


def test_a_head_width_that_would_be_truncated_is_refused(tmp_path, capsys):
    text = (era_data_dir() / "networks" / "gpt2-small.toml").read_text()
    assert "heads = 12" in text
    bad = tmp_path / "odd-heads.toml"
    bad.write_text(text.replace('id = "gpt2-small"', 'id = "odd-heads"').replace("heads = 12", "heads = 7"))
    assert main(["networks", "validate", str(bad)]) == 1
    said = "".join(capsys.readouterr())
    assert "transformer.heads" in said and "not a multiple of heads 7" in said
    bad.write_text(bad.read_text().replace("heads = 7", "heads = 7\nd_head = 64"))  # said outright: fine
    assert main(["networks", "validate", str(bad)]) == 0


def test_the_sweep_refuses_a_case_over_the_limit_before_any_worker_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(sw, "run_here", lambda feeder, *a, **k: ran.append(feeder))
    monkeypatch.setattr(sw, "run_local", lambda feeder, *a, **k: ran.append(feeder))
    result = sweep(tmp_path / "s", design.product([OLD], ["nettalk"], [64]), max_lookups=1000)
    assert not ran
    (row,) = result.rows
    assert row["status"] == "error" and "line lookups" in row["error"] and "--max-lookups" in row["error"]


def test_a_killed_figure_writers_temp_files_are_removed_by_the_next_draw(small_sweep):
    from memwall.execute.store import read_rows
    from memwall.study import draw

    figures = small_sweep / "figures"
    figures.mkdir(exist_ok=True)
    stale = figures / ".regime_flip.json.abcd1234.tmp"
    stale.write_text("{half")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    draw.write_figures(small_sweep, read_rows(small_sweep), only=["regime_flip"])
    assert not stale.exists()
