"""Work done once: validation predictions in the per-user cache, reused exactly, never
trusted when damaged; progress said on stderr without touching --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from probes import measurement_text

from memwall.cli import main
from memwall.execute import validation as ev
from memwall.execute.cache import cache_root
from memwall.progress import Phase
from memwall.study.measurements import load_measurements
from memwall.study.validation import to_json


def test_the_cache_is_where_the_environment_says(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("MEMWALL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "memwall"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "memwall"
    monkeypatch.setenv("MEMWALL_CACHE", "off")
    assert cache_root() is None


@pytest.fixture
def measured(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a.toml").write_text("".join(measurement_text(m, 64, 1e9) for m in ("vax-11-780", "v100-sxm2")))
    return load_measurements(folder)


@pytest.fixture
def counting(monkeypatch):
    """The predictor the cache falls back on, counting its calls (one worker: in this process)."""
    from memwall.simulation import run_case

    calls = []

    def predictor():
        def run(case):
            calls.append(case)
            return run_case(case)
        return run

    monkeypatch.setattr(ev, "default_predictor", predictor)
    return calls


def test_a_second_validation_predicts_nothing_and_says_the_same(monkeypatch, tmp_path, measured, counting):
    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "cache"))
    first = to_json(ev.predict_measurements(measured, jobs=1, progress=False))
    assert len(counting) == 2
    second = to_json(ev.predict_measurements(measured, jobs=1, progress=False))
    assert len(counting) == 2  # every prediction came from the cache
    monkeypatch.setenv("MEMWALL_CACHE", "off")
    fresh = to_json(ev.predict_measurements(measured, jobs=1, progress=False))
    assert first == second == fresh  # a cache hit is the fresh prediction, bit for bit


def test_a_damaged_cache_entry_is_recomputed_not_trusted(monkeypatch, tmp_path, measured, counting, capsys):
    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "cache"))
    good = to_json(ev.predict_measurements(measured, jobs=1, progress=False))
    entries = sorted((tmp_path / "cache" / "validation" / "cases").glob("*.json"))
    assert len(entries) == 2
    text = entries[0].read_text()
    entries[0].write_text(text.replace('"seconds":', '"seconds":1e3,"x":', 1))  # the checksum no longer holds
    again = to_json(ev.predict_measurements(measured, jobs=1, progress=False))
    assert len(counting) == 3 and again == good
    assert "damaged" in capsys.readouterr().err


def test_progress_never_changes_the_json(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a.toml").write_text(measurement_text("vax-11-780", 64, 1e9))
    monkeypatch.setenv("MEMWALL_CACHE", "off")
    assert main(["validate", "--measurements", str(folder), "--json", "--jobs", "1"]) == 0
    said = capsys.readouterr()
    assert main(["validate", "--measurements", str(folder), "--json", "--jobs", "1", "--no-progress"]) == 0
    quiet = capsys.readouterr()
    assert json.loads(said.out) == json.loads(quiet.out) and said.out == quiet.out
    assert "memwall validate: predicting 1 measurements" in said.err and quiet.err == ""


def test_a_phase_off_a_terminal_says_its_start_its_progress_and_its_end():
    import time

    out = io.StringIO()
    with Phase("memwall x", "doing things", 4, unit="thing", stream=out, terminal=False, note_seconds=0.05) as p:
        p.update(1)
        time.sleep(0.2)
        p.update(3)
    lines = out.getvalue().splitlines()
    assert lines[0] == "memwall x: doing things (4 things)"
    assert any("1 of 4 things (25%)" in line and "left" in line for line in lines[1:-1])
    assert lines[-1].startswith("memwall x: doing things: done, 4 things in")


def test_time_left_follows_the_work_done_where_the_items_are_weighed():
    """The validation's first predictions are its longest: told by items, 1 of 10 done in 60 s
    would leave 9 minutes; told by work, 8 of its 10 units done leaves 15 s."""
    p = Phase("memwall x", "predicting", 10, unit="prediction", stream=io.StringIO(), terminal=False,
              note_seconds=3600)
    p.start -= 60.0
    p.update(1)
    assert "about 9:00 left" in p.status()
    p.weigh(10.0)
    p.update(0, work=8.0)
    assert "about 15 s left" in p.status()
    p.close()


def test_no_phase_says_anything_when_disabled():
    out = io.StringIO()
    with Phase("memwall x", "doing", 2, stream=out, enabled=False) as p:
        p.update(2)
    assert out.getvalue() == ""


def test_the_cache_folder_is_never_a_link(monkeypatch, tmp_path, measured, counting, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "validation").symlink_to(elsewhere)
    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "cache"))
    ev.predict_measurements(measured, jobs=1, progress=False)
    assert not any(elsewhere.iterdir())  # nothing written through the planted link
    assert "cannot be used" in capsys.readouterr().err
    assert Path(tmp_path / "cache" / "validation").is_symlink()


def test_a_sweep_off_a_terminal_says_each_phase_and_can_leave_out_the_validation(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", "--machines", "vax-11-780", "--networks", "encoder-8-3-8", "--updates", "per-example",
                 "--out", str(out), "--no-validation"]) == 0
    err = capsys.readouterr().err
    assert "memwall sweep: running cases (1 case)" in err and "running cases: done, 1 case in" in err
    assert not (out / "figures" / "validation.png").exists() and not (out / "validation.json").exists()
    assert (out / "figures" / "regime_flip.png").exists()


def test_a_second_sweep_folder_copies_the_cases_another_folder_ran(tmp_path, monkeypatch, capsys):
    from memwall.execute import sweep as sw
    from memwall.simulation import Case

    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "cache"))
    cases = [Case("vax-11-780", "encoder-8-3-8", updates="per-example"), Case("h100-sxm", "nettalk")]
    first = sw.run_sweep(cases, tmp_path / "a", jobs=1, progress=False)
    assert first.computed == 2 and first.from_cache == 0
    second = sw.run_sweep(cases, tmp_path / "b", jobs=1, progress=False)
    assert second.computed == 0 and second.from_cache == 2
    assert second.rows == first.rows  # the same rows, bit for bit
    # a damaged cached case is run again, never trusted
    (entry, *_) = sorted((tmp_path / "cache" / "sweep" / "cases").glob("*.json"))
    entry.write_text(entry.read_text().replace('"seconds":', '"seconds":9,"x":', 1))
    third = sw.run_sweep(cases, tmp_path / "c", jobs=1, progress=False)
    assert third.computed == 1 and third.from_cache == 1 and third.rows == first.rows
    monkeypatch.setenv("MEMWALL_CACHE", "off")
    assert sw.run_sweep(cases, tmp_path / "d", jobs=1, progress=False).computed == 2


def test_a_delayed_phase_says_nothing_when_quick_and_everything_when_slow():
    import time

    quick, slow = io.StringIO(), io.StringIO()
    with Phase("memwall x", "replaying", stream=quick, terminal=False, delay=0.3) as p:
        p.update(5)
    with Phase("memwall x", "replaying", stream=slow, terminal=False, delay=0.05, note_seconds=10) as p:
        time.sleep(0.2)
        p.update(5)
    assert quick.getvalue() == ""
    assert slow.getvalue().splitlines() == ["memwall x: replaying", slow.getvalue().splitlines()[-1]]
    assert slow.getvalue().splitlines()[-1].startswith("memwall x: replaying: done, 5 cases in")


def test_a_second_folder_copies_a_figure_drawn_from_the_same_data_and_redraws_a_damaged_one(tmp_path, monkeypatch):
    from memwall.figures import FIGURES
    from memwall.study.draw import write_figures

    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "cache"))
    first = write_figures(tmp_path / "a", [], only=["balance_drift"], progress=False)["balance_drift"]
    drawn = []
    real = FIGURES["balance_drift"].draw
    monkeypatch.setattr(FIGURES["balance_drift"], "draw", lambda data: drawn.append(1) or real(data))
    second = write_figures(tmp_path / "b", [], only=["balance_drift"], progress=False)["balance_drift"]
    assert not drawn  # copied from the per-user cache, not drawn again
    assert [p.read_bytes() for p in second] == [p.read_bytes() for p in first]
    (entry,) = (tmp_path / "cache" / "drawings" / "cases").glob("*.json")
    entry.write_text(entry.read_text().replace('"files":{', '"files":{"x":"", ', 1))
    third = write_figures(tmp_path / "c", [], only=["balance_drift"], progress=False)["balance_drift"]
    assert drawn == [1] and third[0].read_bytes() == first[0].read_bytes()


def test_figures_drawn_side_by_side_on_workers_are_the_files_one_process_draws(tmp_path, monkeypatch):
    from memwall.study.draw import write_figures

    monkeypatch.setenv("MEMWALL_CACHE", "off")  # every figure drawn, none copied
    names = ["balance_drift", "energy_balance"]
    alone = write_figures(tmp_path / "one", [], only=names, progress=False, jobs=1)
    pooled = write_figures(tmp_path / "two", [], only=names, progress=False, jobs=2)
    assert list(pooled) == names
    for name in names:
        assert [p.name for p in pooled[name]] == [f"{name}.png", f"{name}.svg"]
        assert [p.read_bytes() for p in pooled[name]] == [p.read_bytes() for p in alone[name]]
        for suffix in (".json", ".csv"):
            assert (tmp_path / "two" / "figures" / (name + suffix)).read_bytes() == \
                (tmp_path / "one" / "figures" / (name + suffix)).read_bytes()


def test_cases_that_replay_the_same_steps_are_predicted_together_each_as_alone(tmp_path):
    """The validation hands a worker the cases whose devices replay the same steps (other dp
    or ZeRO; a machine that replays alike), so their replays are made once; each stored
    prediction is still the one the case makes alone, bit for bit, and none is left over
    for the parent to predict again."""
    from memwall.execute.store import Store
    from memwall.simulation import Case, run_case
    from memwall.simulation.row import case_key

    small = {"network": "gpt2-small", "batch": 1, "seq_len": 128, "optimizer": "adam"}
    shard = [Case("h100-sxm", **small, dp=2, tp=2, pp=2, accumulate=4),
             Case("h100-sxm", **small, dp=4, tp=2, pp=2, accumulate=4, zero=1),
             Case("h200", **small, dp=2, tp=2, pp=2, accumulate=4)]
    alike = [Case("h100-sxm", "gpt2-small", 2), Case("h200", "gpt2-small", 2)]
    alone = [Case("v100-sxm2", "gpt2-small", 2), Case("h100-sxm", **small, dp=2, tp=2, pp=1)]
    groups = ev.replay_groups(shard + alike + alone)
    assert set(map(frozenset, groups)) == {frozenset(shard), frozenset(alike), frozenset(alone[:1]), frozenset(alone[1:])}
    assert groups[0] == tuple(shard)  # longest first: the pipeline's three stage kinds

    assert ev.prefetch(shard + alike + alone, tmp_path, jobs=2) == set(shard + alike + alone)
    store = Store(tmp_path, content="result")
    for case in shard + alike + alone:
        fresh = dict(run_case(case))
        fresh.pop("kernels")
        assert store.get(case_key(case))["result"] == json.loads(json.dumps(fresh)), case


def test_a_lazy_pool_starts_workers_only_when_handed_work_and_kills_them_on_an_error():
    from memwall.execute.pool import LazyPool

    with LazyPool(2) as idle:
        pass
    assert idle.pool is None  # nothing submitted: no process started (a warm folder draws nothing)
    with LazyPool(2) as pool:
        futures = [pool.submit(pow, 2, k) for k in range(5)]
    assert [f.result() for f in futures] == [1, 2, 4, 8, 16]
    import time

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), LazyPool(2) as pool:
        pool.submit(time.sleep, 60)  # a drawing that would take a minute
        procs = list(pool.pool._processes.values())
        raise KeyboardInterrupt
    assert time.monotonic() - start < 10  # killed, not waited for
    while any(p.is_alive() for p in procs) and time.monotonic() - start < 10:
        time.sleep(0.05)
    assert procs and not any(p.is_alive() for p in procs)
