"""The seed's back-of-the-envelope model, computed beside every simulated step (issue 15, item 4)."""

from __future__ import annotations

import pytest

from memwall.networks import load_network
from memwall.seed import seed_model
from memwall.simulation import Case, run_case
from memwall.workloads.config import TrainingConfig
from memwall.workloads.step import build_step, gemm_step


def test_a_single_product_is_its_closed_form():
    m, n, k = 512, 256, 128
    seed = seed_model(gemm_step(m, n, k, "fp32"), peak=1e12, bandwidth=1e11)
    flops, moved = 2 * m * n * k, 4 * (m * k + k * n + m * n)  # each operand once
    assert seed["intensity"] == pytest.approx(flops / moved)
    assert seed["seconds"] == pytest.approx(max(flops / 1e12, moved / 1e11))
    assert seed["memory_ratio"] == pytest.approx((moved / 1e11) / (flops / 1e12))


def test_the_turn_is_balance_times_bytes_per_parameter_over_flops_per_parameter():
    net = load_network("affine-48x1024")
    step = build_step(net, TrainingConfig(batch=1, dtype="bf16"))
    seed = seed_model(step, peak=989.4e12, bandwidth=3.35e12)
    # bf16, no accumulation: two reads of every weight and one write of its gradient, 2 B each
    assert seed["b_w"] == pytest.approx(6.0)
    assert seed["flops_per_token_per_parameter"] == pytest.approx(6.0, rel=0.01)
    assert seed["t_min"] == pytest.approx(989.4 / 3.35 * 6.0 / seed["flops_per_token_per_parameter"])
    # fp32 main gradients accumulated over micro-batches: the gradient is read and written (4 B each)
    accum = seed_model(build_step(net, TrainingConfig(batch=1, dtype="bf16", accumulate=4)), 989.4e12, 3.35e12)
    assert accum["b_w"] == pytest.approx(12.0)


def test_every_result_and_row_carries_the_seed_beside_the_simulation():
    from memwall.simulation.row import make_row

    case = Case("h100-sxm", "gpt2-small", 4)
    result = run_case(case)
    seed = result["seed"]
    assert seed["d_min"] == pytest.approx(seed["a"] * 989.4 / 3.35 / 72)
    assert 0 < seed["seconds"] < result["seconds"]  # the seed leaves out dispatch, waves and misses
    row = make_row(case, result, None)
    assert row["seed_seconds"] == seed["seconds"] and row["seed_memory_ratio"] == seed["memory_ratio"]


@pytest.mark.parametrize("machine, network, extra", [
    ("cray-1", "nettalk", {"updates": "per-example"}),
    ("vax-11-780", "nettalk", {"updates": "per-example"}),
    ("h100-sxm", "gpt2-small", {"batch": 8, "accumulate": 2}),
])
def test_the_seed_gap_multiplies_the_seeds_ratio_into_the_simulations_on_the_same_quantity(machine, network, extra):
    from memwall.options import make_case
    from memwall.simulation import run_case

    r = run_case(make_case(machine=machine, network=network, **extra))
    gap = r["seed_gap"]
    assert r["memory_ratio_micro"] == pytest.approx(
        r["seed"]["memory_ratio"] * gap["traffic"] * gap["memory_term"] * gap["arithmetic"], rel=1e-9)
    assert r["memory_ratio_micro"] > 0 and gap["traffic"] > 0


def test_memory_ratio_micro_leaves_out_the_update_and_the_word_widening():
    from memwall.options import make_case
    from memwall.profiles import load_machine
    from memwall.simulation import run_case

    case = make_case(machine="cray-1", network="nettalk", updates="per-example")
    words = run_case(case)
    # The same machine with 32-bit floating point: each element moves at its own width.
    narrow = run_case(case, machine=load_machine("cray-1", sets={"timing.subword_float": "true"}))
    assert narrow["memory_ratio"] < words["memory_ratio"]  # the whole step's ratio counts words
    # Equal where memory time is proportional to bytes; the vector model's bank conflicts
    # are charged per element, whatever its width, so dividing by the widening leaves them
    # a little short (docs/timing.md, "The seed model, beside the simulation").
    assert narrow["memory_ratio_micro"] == pytest.approx(words["memory_ratio_micro"], rel=0.1)
    assert words["memory_ratio_micro"] < words["memory_ratio"]  # the per-example update is left out
