"""The sweep store and the feeder under attack: planted links, FIFOs, devices, huge
records, a planted quarantine, leftover temp files and a folder shared with a sweep that
finished most of the cases (issue 30).

Every path the store opens is opened without following a link and only if it is a
regular file of a record's size; anything else in a record's place is damaged: set aside
and the case computed again, with one warning line. Every victim below is a file of the
test's own ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import contextmanager

import pytest

from memwall.errors import InputError
from memwall.execute import sweep as sw
from memwall.execute.feeder import Feeder
from memwall.execute.pool import run_here
from memwall.execute.store import MAX_RECORD_BYTES, ReplayStore, Store, read_rows, write_tables
from memwall.simulation import Case
from memwall.simulation.row import case_key, make_row

VICTIM_TEXT = "the victim's own text\n"
CASE = Case(machine="vax-11-780", network="nettalk", batch=1, updates="per-example")


class Blocked(Exception):
    """Not an OSError: the store must not take it for a file it could not read."""


@contextmanager
def deadline(seconds: int = 10):
    """Fail (not hang) where the store would block: a FIFO opened for reading waits for a writer."""
    def expire(signum, frame):
        raise Blocked(f"the store blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def record(key: str) -> dict:
    return {"key": key, "status": "ok", "row": {"machine": "m", "network": "n"}}


def failing_runner(case, machine=None):
    raise RuntimeError("a cheap fake runner: every case it runs fails at once")


# --------------------------------------------------------------------------------------
# Claims


def test_a_claim_linked_to_a_victim_leaves_the_victim_whole(tmp_path):
    target = victim(tmp_path)
    store = Store(tmp_path / "out", on_damaged=None)
    store.cases.mkdir(parents=True)
    (store.cases / "k1.claim").symlink_to("../../victim.txt")
    try:
        assert store.claim("k1")
        assert not (store.cases / "k1.claim").is_symlink()
    finally:
        store.release_all()
    assert target.read_text() == VICTIM_TEXT


def test_a_claim_linked_to_a_missing_path_creates_nothing_outside_the_folder(tmp_path):
    store = Store(tmp_path / "out", on_damaged=None)
    store.cases.mkdir(parents=True)
    (store.cases / "k1.claim").symlink_to("../../made-by-the-sweep.txt")
    try:
        assert store.claim("k1")
    finally:
        store.release_all()
    assert not (tmp_path / "made-by-the-sweep.txt").exists()
    assert not os.path.lexists(tmp_path / "made-by-the-sweep.txt")


def test_a_claim_hard_linked_to_a_victim_leaves_the_victim_whole(tmp_path):
    target = victim(tmp_path)
    store = Store(tmp_path / "out", on_damaged=None)
    store.cases.mkdir(parents=True)
    os.link(target, store.cases / "k1.claim")
    try:
        assert store.claim("k1")
    finally:
        store.release_all()
    assert target.read_text() == VICTIM_TEXT


def test_a_fifo_in_a_claims_place_does_not_hang(tmp_path):
    store = Store(tmp_path / "out", on_damaged=None)
    store.cases.mkdir(parents=True)
    os.mkfifo(store.cases / "k1.claim")
    with deadline():
        try:
            assert store.claim("k1")
        finally:
            store.release_all()


# --------------------------------------------------------------------------------------
# Records that are not regular files of a record's size


def sparse(path, size):
    with open(path, "wb") as handle:
        handle.truncate(size)  # a hole: no disk, but a size


def _link_to_victim(path, tmp_path):
    target = victim(tmp_path)
    path.symlink_to(target)
    return target


def _link_to_a_copy_of_a_record(path, tmp_path):
    """A link to a valid record elsewhere: the store must not read through it either."""
    elsewhere = Store(tmp_path / "elsewhere", on_damaged=None)
    path.symlink_to(elsewhere.put(record(path.stem)))


def _padded_record(path, tmp_path):
    """A record whose checksum holds, padded with blanks to one byte over the cap."""
    text = Store(tmp_path / "elsewhere", on_damaged=None).put(record(path.stem)).read_bytes()
    path.write_bytes(text + b" " * (MAX_RECORD_BYTES + 1 - len(text)))


def _link_to_a_results_table(path, tmp_path):
    write_tables(tmp_path / "elsewhere", [], ["machine"])
    path.symlink_to(tmp_path / "elsewhere" / "results.json")


def _link_to_a_replay(path, tmp_path):
    elsewhere = ReplayStore(tmp_path / "elsewhere")
    elsewhere.put(path.stem, [])
    path.symlink_to(elsewhere.store.path(path.stem))


ATTACKS = {
    "fifo": lambda path, tmp_path: os.mkfifo(path),
    "link to /dev/zero": lambda path, tmp_path: path.symlink_to("/dev/zero"),
    "7 GB sparse": lambda path, tmp_path: sparse(path, 7 * 2**30),
    "link to a victim": _link_to_victim,
    "link to a record elsewhere": _link_to_a_copy_of_a_record,
    "dangling link": lambda path, tmp_path: path.symlink_to(tmp_path / "nothing-here"),
    "a valid record padded past the size cap": _padded_record,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_record_that_is_not_a_regular_file_of_a_records_size_is_set_aside(tmp_path, attack):
    warnings = []
    store = Store(tmp_path / "out", on_damaged=warnings.append)
    store.cases.mkdir(parents=True)
    path = store.path("k1")
    ATTACKS[attack](path, tmp_path)
    with deadline():
        assert store.get("k1") is None
    assert [k for k, _ in store.damaged] == ["k1"] and len(warnings) == 1
    assert not os.path.lexists(path)  # set aside: the case is computed again
    assert len(list((store.cases / "quarantine").iterdir())) == 1
    if (tmp_path / "victim.txt").exists():
        assert (tmp_path / "victim.txt").read_text() == VICTIM_TEXT
    store.put(record("k1"))  # and written again as a regular file
    assert store.get("k1") == {**record("k1"), "checksum": store.get("k1")["checksum"]}


@pytest.mark.parametrize("attack", ["fifo", "link to /dev/zero", "7 GB sparse"])
def test_a_sweep_sets_a_hostile_record_aside_and_computes_the_case_again(tmp_path, capsys, attack):
    out = tmp_path / "out"
    first = sw.run_sweep([CASE], out, jobs=1, runner=failing_runner, progress=False)
    assert first.computed == 1
    path = Store(out).path(case_key(CASE))
    path.unlink()
    ATTACKS[attack](path, tmp_path)
    capsys.readouterr()
    with deadline(60):
        again = sw.run_sweep([CASE], out, jobs=1, runner=failing_runner, progress=False)
    assert again.computed == 1 and [k for k, _ in again.damaged] == [case_key(CASE)]
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "computed again" in err
    assert path.is_file() and not path.is_symlink() and path.stat().st_size < 2**20


# --------------------------------------------------------------------------------------
# The quarantine folder


def test_a_planted_quarantine_link_moves_nothing_out_of_the_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    warnings = []
    store = Store(tmp_path / "out", on_damaged=warnings.append)
    store.cases.mkdir(parents=True)
    (store.cases / "quarantine").symlink_to(outside)
    store.path("k1").write_bytes(b"\xff\xfe not a record")
    assert store.get("k1") is None
    assert list(outside.iterdir()) == []
    assert (store.cases / "quarantine").is_symlink()  # not ours to remove: left, and not used
    assert len(warnings) == 1 and str(outside) not in warnings[0]
    store.put(record("k1"))
    assert store.get("k1") is not None


def test_a_file_named_quarantine_does_not_stop_the_store(tmp_path):
    warnings = []
    store = Store(tmp_path / "out", on_damaged=warnings.append)
    store.cases.mkdir(parents=True)
    (store.cases / "quarantine").write_text("someone's notes\n")
    store.path("k1").write_bytes(b"\xff\xfe not a record")
    assert store.get("k1") is None  # no FileExistsError
    assert (store.cases / "quarantine").read_text() == "someone's notes\n"
    assert len(warnings) == 1 and [k for k, _ in store.damaged] == ["k1"]
    assert store.get("k1") is None and len(warnings) == 1  # left in place, and reported once
    store.put(record("k1"))
    assert store.get("k1") is not None


@pytest.mark.parametrize("folder", ["cases", "replays"])
def test_a_sweep_refuses_its_record_folders_as_links(tmp_path, folder):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / folder).symlink_to(elsewhere)
    with pytest.raises(InputError, match="symbolic link"):
        sw.run_sweep([CASE], out, jobs=1, runner=failing_runner, progress=False)
    assert list(elsewhere.iterdir()) == []


# --------------------------------------------------------------------------------------
# The tables and the roofs beside the records


def test_results_and_machines_written_over_planted_links_leave_the_victims_whole(tmp_path):
    """The rename of an atomic write replaces a link rather than writing through it (a guard:
    this held before issue 30 too)."""
    out = tmp_path / "out"
    out.mkdir()
    target = victim(tmp_path)
    for name in ("results.csv", "results.json", "machines.json"):
        (out / name).symlink_to(target)
    res = sw.run_sweep([CASE], out, jobs=1, runner=failing_runner, progress=False)
    assert res.computed == 1
    assert target.read_text() == VICTIM_TEXT
    for name in ("results.csv", "results.json", "machines.json"):
        assert (out / name).is_file() and not (out / name).is_symlink()


@pytest.mark.parametrize("attack", ["fifo", "link to /dev/zero", "7 GB sparse", "link to a results table elsewhere"])
def test_reading_a_hostile_results_table_is_one_error(tmp_path, attack):
    out = tmp_path / "out"
    out.mkdir()
    {**ATTACKS, "link to a results table elsewhere": _link_to_a_results_table}[attack](out / "results.json", tmp_path)
    with deadline(), pytest.raises(InputError) as err:
        read_rows(out)
    assert "results.json" in str(err.value.file)


@pytest.mark.parametrize("attack", ["fifo", "link to /dev/zero", "7 GB sparse"])
def test_reading_hostile_machine_roofs_gives_none(tmp_path, attack):
    out = tmp_path / "out"
    out.mkdir()
    ATTACKS[attack](out / "machines.json", tmp_path)
    with deadline():
        assert sw.read_machine_roofs(out) == []


# --------------------------------------------------------------------------------------
# The replay store


@pytest.mark.parametrize("attack", ["fifo", "link to /dev/zero", "7 GB sparse", "link to a replay elsewhere"])
def test_a_hostile_stored_replay_is_a_miss(tmp_path, attack):
    replays = ReplayStore(tmp_path / "out")
    replays.store.cases.mkdir(parents=True)
    {**ATTACKS, "link to a replay elsewhere": _link_to_a_replay}[attack](replays.store.path("r1"), tmp_path)
    with deadline():
        assert replays.get("r1") is None
    assert not os.path.lexists(replays.store.path("r1"))
    if (tmp_path / "victim.txt").exists():
        assert (tmp_path / "victim.txt").read_text() == VICTIM_TEXT


# --------------------------------------------------------------------------------------
# Leftover temp files


def test_the_next_run_removes_the_stores_own_leftover_temp_files_and_nothing_else(tmp_path):
    out = tmp_path / "out"
    sw.run_sweep([CASE], out, jobs=1, runner=failing_runner, progress=False)
    cases = out / "cases"
    key = case_key(CASE)
    old = time.time() - 3600
    leftovers = [cases / f".{key}.json.k7_x0q2z.tmp", out / ".results.json.a1b2c3d4.tmp",
                 out / "replays" / "cases" / ".r1.json.zz9_ab12.tmp"]
    for path in leftovers:  # what a SIGKILL between the temp file and its rename leaves
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"checksum":"half a rec')
        os.utime(path, (old, old))
    target = victim(tmp_path)
    planted = cases / f".{key}.json.plant123.tmp"
    planted.symlink_to(target)
    os.utime(planted, (old, old), follow_symlinks=False)
    kept = [cases / "notes.tmp", cases / ".notes.txt", out / ".my-editor.tmp"]
    for path in kept:
        path.write_text("mine")
        os.utime(path, (old, old))
    fresh = cases / f".{key}.json.fresh123.tmp"  # perhaps a live sweep's, sharing the folder
    fresh.write_text("being written")

    sw.run_sweep([CASE], out, jobs=1, runner=failing_runner, progress=False)
    assert [p for p in leftovers if os.path.lexists(p)] == []
    assert planted.is_symlink() and target.read_text() == VICTIM_TEXT
    assert all(p.read_text() == "mine" for p in kept)
    assert fresh.exists()


# --------------------------------------------------------------------------------------
# The feeder, in a folder another sweep has nearly finished


def test_the_feeder_skips_thousands_of_cases_another_sweep_finished(tmp_path):
    store = Store(tmp_path / "out", on_damaged=None, durable=False)
    n = 1600
    cases = [Case(machine="vax-11-780", network="nettalk", batch=b) for b in range(1, n + 1)]
    keys = {c: f"k{i:05d}" for i, c in enumerate(cases)}  # the feeder trusts the keys it is given
    for c in cases[:-2]:  # the other sweep's records, all but the last two
        store.put(record(keys[c]))
    shared = []
    feeder = Feeder(cases, store, keys, on_shared=lambda: shared.append(1))
    ran = []

    def finish(case, outcome):
        ran.append(case)
        store.put(record(keys[case]))
        store.release(keys[case])
        feeder.finished(case)

    run_here(feeder, lambda case, machine=None: {}, finish)
    assert ran == cases[-2:]
    assert feeder.shared == len(shared) == n - 2 and feeder.done
    assert store.claimed() == []


def test_a_sweep_sharing_its_folder_with_one_that_finished_its_cases_finishes(tmp_path, monkeypatch):
    out = tmp_path / "out"
    cases = [Case(machine="vax-11-780", network="nettalk", batch=b, updates="per-example") for b in range(1, 1502)]
    store = Store(out, durable=False)
    # The other sweep finishes every case after this one has listed what it must do.
    real_get = Store.get
    calls = {"n": 0}

    def get_after_listing(self, key):
        calls["n"] += 1
        if calls["n"] == len(cases) + 1:  # the listing is done: the other sweep's records appear
            for c in cases:
                store.put({"key": case_key(c), "status": "ok", "row": make_row(c, None, "the other sweep's")})
        return real_get(self, key)

    monkeypatch.setattr(Store, "get", get_after_listing)
    res = sw.run_sweep(cases, out, jobs=1, runner=failing_runner, progress=False)
    assert res.computed == 0 and res.shared == len(cases)
    assert json.loads((out / "results.json").read_text())["rows"]
