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
