"""Reuse inside a multi-device case (issue 31): the exact reuse changes no figure of the
result, bit for bit; the opt-in shape reuse is labelled and close."""

from __future__ import annotations

import json

import pytest

from memwall.profiles import load_machine
from memwall.simulation import Case, devices, replay, run_case
from memwall.simulation.plan import plan_replay
from memwall.simulation.step import case_config, case_network
from memwall.workloads.parallel import device_steps

# Three stage kinds (first, middle, last), tensor parallel, full checkpointing (the
# recomputed forward repeats the forward's shapes): small enough for a test.
CASE = Case(machine="a100-sxm", network="gpt2-small", batch=1, seq_len=64, tp=4, pp=3, dp=2, accumulate=3,
            checkpoint="every:1")


def _json(result) -> str:  # noqa: ANN001
    return json.dumps(result, sort_keys=True)


@pytest.fixture(scope="module")
def timed_afresh():
    """The case as a fresh process runs it with no reuse of stage timings or demand: the
    sensitivity times every stage on every machine it moves a figure of."""
    replay._REPLAYED.clear()
    replay._DEMAND.clear()
    kept = replay.DEMAND_KEPT
    devices.REUSE_TIMED, replay.DEMAND_KEPT = False, 0
    try:
        result = run_case(CASE)
        assert not replay._DEMAND
    finally:
        devices.REUSE_TIMED, replay.DEMAND_KEPT = True, kept
    return result


def test_shared_stage_timings_and_demand_equal_timing_every_machine_afresh_bit_for_bit(timed_afresh):
    # The sensitivity times the stages on ~40 machines; those that move only a link share
    # the steps timed before, and each kernel's demand is counted once. The result, its
    # elasticities and bound included, is the one computed without either.
    replay._REPLAYED.clear()
    replay._DEMAND.clear()
    reused = run_case(CASE)
    assert replay._DEMAND  # the demand was kept: the run above did reuse it
    assert _json(reused) == _json(timed_afresh)
    assert any(p.startswith("interconnect.") for p in reused["sensitivity"])  # link figures were among the retimes


def test_stage_kinds_replayed_side_by_side_equal_one_after_another_bit_for_bit(monkeypatch):
    """A multi-device case in a process of its own replays its stage kinds on threads (the
    engine runs without the GIL, each stage on its own caches): the same result, bit for
    bit, as one stage after another, and its progress counts up to the whole replay."""
    results, said = {}, {}
    for threads in (1, 3):
        monkeypatch.setattr(replay, "REPLAY_THREADS", threads)
        replay._REPLAYED.clear()
        said[threads] = ticks = []
        results[threads] = _json(run_case(CASE, progress=lambda done, total, out=ticks: out.append((done, total))))
    assert results[3] == results[1]
    for ticks in said.values():
        assert [d for d, _ in ticks] == sorted(d for d, _ in ticks)  # never backwards
        assert ticks[-1][0] == ticks[-1][1] and len({t for _, t in ticks}) == 1
    assert said[3][-1] == said[1][-1]


def test_an_interrupted_side_by_side_replay_stops_every_stage_and_keeps_none(monkeypatch):
    monkeypatch.setattr(replay, "REPLAY_THREADS", 3)
    replay._REPLAYED.clear()

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_case(CASE, progress=interrupt)
    assert not replay._REPLAYED  # no stage half replayed is kept for a later case


def test_a_worker_process_replays_its_stages_one_after_another(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    assert replay.replay_threads() == 1  # its pool's other workers keep the cores busy
    monkeypatch.setattr(replay, "REPLAY_THREADS", 4)
    assert replay.replay_threads() == 4


def test_the_demand_kept_is_the_demand_counted():
    machine = load_machine("a100-sxm")
    net = case_network(CASE)
    (_, step), *_ = device_steps(net, case_config(CASE, net), CASE.parallel)
    plan = plan_replay(machine, step)
    for low in plan.lowered:
        assert replay._demand_by_kind(low) == replay._count_demand(low)
        assert replay._demand_by_kind(low) is replay._demand_by_kind(low)  # kept, not recounted


def test_shape_reuse_is_off_by_default_and_labelled_when_asked(timed_afresh):
    assert not any("reuse_shapes" in w for w in timed_afresh["warnings"])
    replay._REPLAYED.clear()
    approx = devices.run_parallel(CASE, load_machine("a100-sxm"), reuse_shapes=True)
    assert not replay._REPLAYED  # an approximate replay is never kept where an exact case would find it
    said = [w for w in approx["warnings"] if "reuse_shapes" in w]
    assert len(said) == 1 and "kernels" in said[0]
    assert approx["seconds"] == pytest.approx(timed_afresh["seconds"], rel=0.02)
    assert approx["seconds"] != timed_afresh["seconds"]  # not exact: why it is opt-in and said


def test_shape_reuse_replays_each_shape_once_and_reuses_its_counters():
    machine = load_machine("a100-sxm")
    net = case_network(CASE)
    plans = [plan_replay(machine, st) for _, st in device_steps(net, case_config(CASE, net), CASE.parallel)]
    counters, reused = replay.replay_by_shape(machine, plans)
    shapes = [replay.shape_of(row) for p in plans for row in p.replays]
    assert reused == len(shapes) - len(set(shapes)) > 0
    flat = [c for stage in counters for c in stage]
    for i, s in enumerate(shapes):  # every kernel of one shape has the first one's counters
        assert flat[i] is flat[shapes.index(s)]
    # the first stage's kernels before any repeat are replayed as the full replay does
    full = replay.replay_step(machine, plans[0])
    first = shapes.index(shapes[0])
    assert counters[0][first].as_dict() == full[first].as_dict()


def test_jobs_1_keeps_this_process_to_one_thread_too(tmp_path, monkeypatch):
    import os

    from memwall.cli import main

    monkeypatch.setattr(replay, "REPLAY_THREADS", None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert replay.replay_threads() == 4  # a process of its own: a thread a core
    assert main(["sweep", "--machine", "vax-11-780", "--network", "nettalk", "--out", str(tmp_path / "r"),
                 "--no-figures", "--no-validation", "--no-progress", "--jobs", "1"]) == 0
    assert replay.replay_threads() == 1
