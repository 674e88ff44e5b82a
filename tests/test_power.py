"""The power limit (docs/timing.md, "The power limit"): a training step that would average
more than its device's rated power at the burst rates runs its arithmetic slower, by one
factor, until it averages the rating; below the rating nothing moves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memwall.options import Case
from memwall.profiles import load_machine
from memwall.simulation import run_case
from memwall.simulation.power import power_held, power_seconds

# gpt2-small at batch 8 on one H100 averages about 530 W at the shipped figures, below its
# 700 W, and is arithmetic-bound.
STEP = {"network": "gpt2-small", "batch": 8, "seq_len": 1024, "phase": "train"}


def run(machine, **case):
    return run_case(Case(machine=machine.id, **{**STEP, **case}), machine=machine)


def hungry(machine, pj_per_flop: float = 3.0):
    """``machine`` whose products cost ``pj_per_flop``: a training step at its burst rates
    would then draw far more than its rating."""
    matrix = {d: pj_per_flop * 1e-12 for d in machine.energy.matrix}
    return replace(machine, energy=replace(machine.energy, matrix=matrix))


def dynamic(result) -> float:
    return sum(v for k, v in result["energy"]["joules_by_component"].items() if k not in ("static", "host"))


def test_a_held_step_takes_its_dynamic_joules_over_the_power_the_rating_leaves() -> None:
    h100 = hungry(load_machine("h100-sxm"))
    r = run(h100)
    spec = h100.energy
    assert r["power_scale"] < 1
    assert r["seconds"] == pytest.approx(dynamic(r) / (spec.tdp - spec.static), rel=1e-9)
    assert r["energy"]["watts_average"] == pytest.approx(spec.tdp, rel=1e-9)
    assert not [w for w in r["warnings"] if "above" in w and "energy.tdp" in w]
    # the arithmetic ran slower by that factor: the products' ceiling says so
    burst = run(replace(h100, energy=None))
    assert r["seconds"] > burst["seconds"]
    assert r["achievable_flops"] == pytest.approx(burst["achievable_flops"] * r["power_scale"], rel=1e-12)


def test_a_step_below_its_rating_is_not_moved() -> None:
    h100 = load_machine("h100-sxm")
    r, unpriced = run(h100), run(replace(h100, energy=None))
    assert r["power_scale"] == 1.0
    assert r["seconds"] == unpriced["seconds"]
    assert r["energy"]["watts_average"] < h100.energy.tdp


def test_more_rated_power_is_never_slower_and_enough_of_it_frees_the_step() -> None:
    h100 = hungry(load_machine("h100-sxm"))
    seconds = [run(replace(h100, energy=replace(h100.energy, tdp=w)))["seconds"] for w in (500.0, 700.0, 1400.0, 1e5)]
    assert seconds == sorted(seconds, reverse=True) and seconds[0] > seconds[-1]
    free = run(replace(h100, energy=None))["seconds"]
    assert seconds[-1] == free


def test_a_held_step_is_power_bound_with_the_ratings_elasticity() -> None:
    h100 = hungry(load_machine("h100-sxm"))
    r = run(h100)
    tdp, static = h100.energy.tdp, h100.energy.static
    assert r["bound_class"] == "power" and r["bound"] == "energy.tdp"
    assert r["sensitivity"]["energy.tdp"] == pytest.approx(-tdp / (tdp - static), abs=2e-3)
    assert r["sensitivity"]["energy.static"] == pytest.approx(static / (tdp - static), abs=2e-3)
    assert r["verdict"].startswith("power-bound (energy.tdp")
    assert f"{r['power_scale']:.3g} of its burst rates" in r["verdict"]
    # below the limit the step waits on neither figure: they are not among its figures
    free = run(load_machine("h100-sxm"))
    assert "energy.tdp" not in free["sensitivity"] and free["bound_class"] != "power"


def test_a_single_product_and_a_serving_step_keep_the_burst_rates() -> None:
    h100 = hungry(load_machine("h100-sxm"), pj_per_flop=30.0)
    gemm = run_case(Case(machine=h100.id, gemm=(8192, 8192, 8192), dtype="bf16"), machine=h100)
    assert gemm["power_scale"] == 1.0
    assert any("energy.tdp" in w for w in gemm["warnings"])  # the burst's power is said, not hidden
    decode = run_case(Case(machine=h100.id, network="gpt2-small", batch=64, phase="decode", context=512),
                      machine=h100)
    assert decode["power_scale"] == 1.0


def test_on_several_devices_the_busiest_device_holds_the_rating() -> None:
    h100 = hungry(load_machine("h100-sxm"))
    r = run(h100, dp=2)
    assert r["power_scale"] < 1
    # both replicas do the same work: each averages the rating
    assert r["energy"]["watts_average"] == pytest.approx(h100.energy.tdp, rel=1e-6)


def test_the_scale_solves_the_closed_form_on_its_own() -> None:
    """power_held on a step whose time is A/s + R: s = A / (need - R)."""
    m = replace(load_machine("h100-sxm"), power_saturated=True)
    a, rest = 2.0, 1.0

    def seconds_on(on):
        return a / on.power_scale + rest

    joules = 10.0 * (m.energy.tdp - m.energy.static)  # needs 10 s
    held = power_held(m, seconds_on, lambda _: joules, seconds_on(m))
    assert power_seconds(m, joules) == pytest.approx(10.0)
    assert held.power_scale == pytest.approx(a / (10.0 - rest), rel=1e-9)
    assert power_held(m, seconds_on, lambda _: 1.0, seconds_on(m)) is m  # 3 s already take longer than 1 J needs
    free = replace(m, power_saturated=False)
    assert power_held(free, seconds_on, lambda _: joules, seconds_on(free)).power_scale == 1.0



def test_a_held_request_blends_its_steps_clocks_and_says_it_is_power_bound() -> None:
    """A whole request (--phase generate) held at its rating: its verdict names the rating and
    the request's power scale, each step's clock weighted by its arithmetic time."""
    h100 = hungry(load_machine("h100-sxm"))
    case = Case(machine=h100.id, network="gpt2-small", batch=8, phase="generate", prompt=256, output=3,
                power="held")
    request = run_case(case, machine=h100)
    assert request["bound_class"] == "power"
    assert request["verdict"].startswith("power-bound (energy.tdp")
    assert f"held at the rated {h100.energy.tdp:.4g} W" in request["verdict"]
    def step(phase: str, context: int):
        return run_case(replace(case, phase=phase, context=context, prompt=None, output=None), machine=h100)

    serving = request["serving"]
    parts = [(1.0, step("prefill", 256)),
             *[(w, step("decode", c)) for c, w in zip(serving["decode_contexts"], serving["decode_weights"], strict=True)]]
    compute = [(w, r["time_by_component"]["compute"], r["power_scale"]) for w, r in parts]
    blend = sum(w * t * s for w, t, s in compute) / sum(w * t for w, t, _ in compute)
    assert parts[0][1]["power_scale"] < 1
    assert request["power_scale"] == pytest.approx(blend, rel=1e-12)
    assert f"{request['power_scale']:.3g} of its burst rates" in request["verdict"]
