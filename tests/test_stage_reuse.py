"""Exact reuse across a pipeline's stages (issue 31): the stages' common layout and
sampling, and the stage replay that shares their runs, equal to each stage replayed on its
own, bit for bit (the engine's state digest and copy: tests/test_engine_state.py)."""

from __future__ import annotations

import pytest

from memwall.engine import Hierarchy
from memwall.profiles import load_machine
from memwall.simulation import Case, replay, reuse
from memwall.simulation.plan import plan_stages
from memwall.simulation.step import case_config, case_network
from memwall.workloads.parallel import device_steps

# Three stage kinds whose steps overflow the A100's L2 (one pass each), so the edges'
# traces wash out of the caches within the layers' first kernels.
CASE = Case(machine="a100-sxm", network="gpt2-small", batch=4, seq_len=512, pp=3, dp=2, accumulate=3,
            checkpoint="every:1")


@pytest.fixture(scope="module")
def stage_plans():
    machine = load_machine(CASE.machine)
    net = case_network(CASE)
    steps = device_steps(net, case_config(CASE, net), CASE.parallel)
    return machine, steps, plan_stages(machine, [st for _, st in steps])


def test_every_stage_lays_out_and_samples_the_layers_alike(stage_plans):
    _, steps, plans = stage_plans
    assert [(st.embed, st.head) for st, _ in steps] == [(True, False), (False, False), (False, True)]
    middle = {repr(row) for row in plans[1].replays}
    for k in (0, 2):  # the first and last stages run every kernel of the middle at its addresses
        assert middle <= {repr(row) for row in plans[k].replays}


def test_stages_sharing_their_runs_count_as_each_replayed_alone(stage_plans, monkeypatch):
    machine, _, plans = stage_plans
    assert reuse.reusable(machine, plans)
    alone = [replay.replay_step(machine, p) for p in plans]
    copied = []
    real_copy = Hierarchy.copy_state_from
    monkeypatch.setattr(Hierarchy, "copy_state_from", lambda self, other: (copied.append(1), real_copy(self, other)))
    ticks: list[int] = []
    shared, taken = reuse.replay_stages(machine, plans, replay.replay_kernel, ticks.append)
    assert taken > sum(len(p.replays) for p in plans) // 3  # most of the edge stages' kernels
    assert copied  # a run ended before its stage did, which went on from the reference's caches
    for got, want in zip(shared, alone, strict=True):
        assert [c.as_dict() for c in got] == [c.as_dict() for c in want]
    assert sum(ticks) == sum(p.lookups for p in plans)  # progress counts taken kernels as done


def test_a_case_replays_its_stages_alike_with_and_without_sharing(monkeypatch):
    results = {}
    for share in (False, True):
        monkeypatch.setattr(replay, "REUSE_STAGES", share)
        replay._REPLAYED.clear()
        results[share] = replay.replay_plans(*_plans())
    for got, want in zip(results[True], results[False], strict=True):
        assert [c.as_dict() for c in got] == [c.as_dict() for c in want]


def _plans():
    machine = load_machine(CASE.machine)
    net = case_network(CASE)
    return machine, plan_stages(machine, [st for _, st in device_steps(net, case_config(CASE, net), CASE.parallel)])


def test_a_step_that_warms_its_caches_first_is_replayed_alone():
    machine, plans = _plans()
    from dataclasses import replace

    assert not reuse.reusable(machine, [replace(plans[0], passes=2), *plans[1:]])
    assert not reuse.reusable(machine, plans[:1])


def test_stages_beside_the_reference_on_threads_count_alike(stage_plans):
    machine, _, plans = stage_plans
    alone, _ = reuse.replay_stages(machine, plans, replay.replay_kernel)
    beside, taken = reuse.replay_stages(machine, plans, replay.replay_kernel, threads=3)
    assert taken > 0
    for got, want in zip(beside, alone, strict=True):
        assert [c.as_dict() for c in got] == [c.as_dict() for c in want]


@pytest.mark.parametrize("when", [1, 40])
def test_an_interrupted_shared_replay_stops_every_stage_says_why_and_keeps_none(monkeypatch, when):
    # Ctrl-C (here: the progress callback's) lands in whichever stage ticks then, early or
    # late; it propagates as itself, every thread stops, and no stage is kept
    monkeypatch.setattr(replay, "REPLAY_THREADS", 3)
    replay._REPLAYED.clear()
    calls = []

    def interrupt(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) >= when:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replay.replay_plans(*_plans(), interrupt)
    assert not replay._REPLAYED
