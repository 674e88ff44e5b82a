"""What each trick buys (figure 14): the ladder of cumulative cases and its arithmetic."""

from __future__ import annotations

import pytest

from memwall.study.tricks import TRICK_CASES, TRICKS, ladder, tricks_table


def test_each_trick_adds_to_all_those_before_it():
    machine, network, start, tricks = TRICK_CASES[-1]
    steps = ladder(machine, network, start, tricks)
    assert [name for name, _ in steps] == [name for name, _ in TRICKS]
    last = steps[-1][1]
    assert (last.batch, last.accumulate, last.dtype, last.fusion, last.attention, last.checkpoint) == \
        (8, 8, "bf16", "full", "flash", "every:1")
    assert (last.dp, last.pp, last.zero) == (2, 4, 1)  # the pipeline replaces ZeRO-3's eight replicas
    assert steps[0][1].dtype == "fp32" and steps[0][1].batch == 1


def test_a_machine_without_bf16_gets_fp16_and_the_1980s_only_batching():
    v100 = dict(ladder(*TRICK_CASES[1]))
    assert v100["mixed precision"].dtype == "fp16"
    vax = ladder(*TRICK_CASES[0])
    assert [n for n, _ in vax] == ["none", "batching"]
    assert vax[0][1].updates == "per-example" and vax[1][1].updates == "minibatch"


def test_time_per_token_counts_every_device():
    def fake(case):
        devices = case.dp * case.pp
        return {"seconds": 2.0, "devices": devices, "bound": "compute.bf16", "bound_class": "compute",
                "global_step": {"tokens": 1000 * case.batch * case.dp} if devices > 1 else None,
                "optimizer_step": {"tokens": 1000 * case.batch}, "ledger": {"peak": 10}, "capacity":
                {"memory": 100, "fits": True}}

    rows = tricks_table([TRICK_CASES[-1]], run=fake)
    by = {r["trick"]: r for r in rows}
    assert by["none"]["seconds_per_token"] == pytest.approx(2.0 / 1000)
    assert by["ZeRO"]["devices"] == 8
    assert by["ZeRO"]["seconds_per_token"] == pytest.approx(2.0 * 8 / (1000 * 8 * 8))
