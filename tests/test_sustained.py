"""[compute.sustained]: a training step holds the device at its power limit, so its products
run at min(peak, achievable, sustained); a serving step and a single product (a benchmark's
burst) keep the burst ceiling unless the case says it is held (--power held: a benchmark loop
of seconds), and a profile without the table trains as before."""

from __future__ import annotations

import dataclasses

import pytest

from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.timing import arithmetic_rate


def test_a_training_step_meets_the_power_saturated_ceiling_and_nothing_else_does() -> None:
    b200 = load_machine("b200")
    held = dataclasses.replace(b200, power_saturated=True)
    assert arithmetic_rate(b200, "bf16", "gemm") == pytest.approx(1745e12)  # the burst (MAMF)
    assert arithmetic_rate(held, "bf16", "gemm") == pytest.approx(1426.4e12)  # at the power limit (MSMF)
    assert arithmetic_rate(held, "fp8", "gemm") == pytest.approx(3432.5e12)  # no fp8 MSMF: the burst
    assert arithmetic_rate(held, "bf16", "elementwise") == arithmetic_rate(b200, "bf16", "elementwise")
    v100 = load_machine("v100-sxm2")  # states no sustained ceiling: unchanged
    assert arithmetic_rate(dataclasses.replace(v100, power_saturated=True), "fp16", "gemm") == pytest.approx(97.36e12)


@pytest.mark.parametrize("phase, power, ceiling", [("train", None, 1426.4e12), ("decode", None, 1745e12),
                                                   ("prefill", None, 1745e12), ("train", "burst", 1745e12),
                                                   ("prefill", "held", 1426.4e12)])
def test_training_steps_are_held_at_the_power_limit_unless_the_case_says(phase: str, power: str | None,
                                                                        ceiling: float) -> None:
    case = Case(machine="b200", network="gpt2-small", batch=8, phase=phase, context=128 if phase != "train" else None,
                dtype="bf16", power=power)
    assert case.held == (ceiling < 1745e12)
    assert run_case(case)["achievable_flops"] == pytest.approx(ceiling)


def test_a_single_product_is_a_burst_unless_its_loop_holds_the_device() -> None:
    r = run_case(Case(machine="b200", gemm=(8192, 8192, 8192), dtype="bf16"))
    assert r["achievable_flops"] == pytest.approx(1745e12)
    held = run_case(Case(machine="b200", gemm=(8192, 8192, 8192), dtype="bf16", power="held"))
    # at most the power-saturated ceiling, and lower where the loop's own power holds it
    assert held["achievable_flops"] <= 1426.4e12 * (1 + 1e-12)
    assert held["seconds"] > r["seconds"]


def test_a_held_product_loop_averages_the_rating_where_its_burst_would_draw_more() -> None:
    """An A100 product loop held at its 400 W limit (Azure's 10,000 warm-up calls): at its
    burst rates the skinny 802816 x 192 x 768 product's memory traffic and arithmetic draw
    above the rating, so its arithmetic slows until the device draws exactly 400 W; the
    memory's bytes are the burst's."""
    case = dict(machine="a100-sxm", gemm=(802816, 192, 768), dtype="fp16")
    burst = run_case(Case(**case))
    held = run_case(Case(**case, power="held"))
    assert burst["energy"]["watts_average"] > 400
    assert held["energy"]["watts_average"] == pytest.approx(400, rel=1e-6)
    assert held["power_scale"] < 1 and held["seconds"] > burst["seconds"]
    assert held["bytes"] == burst["bytes"]


def test_a_compute_bound_training_product_slows_by_burst_over_sustained_and_never_speeds_up() -> None:
    case = Case(machine="h200", network="gpt2-small", batch=64, dtype="bf16")
    h200 = load_machine("h200")
    held = run_case(case)
    # no energy figures: no power limit either (docs/timing.md, "The power limit")
    burst = run_case(case, machine=dataclasses.replace(h200, sustained_flops={}, energy=None))
    assert held["seconds"] >= burst["seconds"]
    # the products' arithmetic alone: exactly the ratio of the two ceilings
    assert held["time_by_component"]["compute"] > burst["time_by_component"]["compute"]
    assert burst["achievable_flops"] / held["achievable_flops"] == pytest.approx(794.5 / 698.6)
    # without the measured ceiling the step's own power holds it below the burst rates
    limited = run_case(case, machine=dataclasses.replace(h200, sustained_flops={}))
    assert limited["power_scale"] < 1 and limited["seconds"] > burst["seconds"]


def test_the_children_state_their_own_estimate_not_the_b200s_measurement() -> None:
    for child in ("gb200", "gb300"):
        m = load_machine(child)
        fig = m.provenance["compute.sustained.bf16"]
        assert m.sustained_flops["bf16"] == pytest.approx(1484e12)
        assert fig.status == "estimate" and "B200" in fig.derivation

