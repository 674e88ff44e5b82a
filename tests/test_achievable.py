"""[compute.achievable]: a product runs at min(peak, the measured ceiling); nothing else
does, and MFU, HFU and fraction_of_peak stay quoted against the datasheet peak."""

from __future__ import annotations

import dataclasses

import pytest

from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.timing import arithmetic_rate


def test_products_run_at_the_measured_ceiling_and_nothing_else_does() -> None:
    a100 = load_machine("a100-sxm")
    assert arithmetic_rate(a100, "bf16", "gemm") == pytest.approx(271.2e12)
    assert arithmetic_rate(a100, "bf16", "gemm", achievable=False) == pytest.approx(312e12)
    # elementwise kernels run on the vector units, whose rate has no ceiling stated
    assert arithmetic_rate(a100, "bf16", "elementwise") == pytest.approx(19.5e12)
    # a dtype without a ceiling keeps its peak (fp32 is not a tensor-core product on the A100)
    assert arithmetic_rate(a100, "fp32", "gemm") == pytest.approx(19.5e12)
    # the H200 inherits the H100's bf16 ceiling and states its own fp8 one
    h200 = load_machine("h200")
    assert arithmetic_rate(h200, "bf16", "gemm") == pytest.approx(794.5e12)
    assert arithmetic_rate(h200, "fp8", "gemm") == pytest.approx(1453.4e12)


def test_a_compute_bound_product_slows_by_peak_over_ceiling() -> None:
    case = Case(machine="a100-sxm", gemm=(8192, 8192, 8192), dtype="bf16")
    capped = run_case(case)
    a100 = load_machine("a100-sxm")
    free = run_case(case, machine=dataclasses.replace(a100, achievable_flops={}))
    assert capped["bound_class"] == free["bound_class"] == "compute"
    assert capped["seconds"] / free["seconds"] == pytest.approx(312 / 271.2, rel=1e-3)
    # utilisation is quoted against the datasheet peak, as MFU is
    assert capped["peak_flops"] == pytest.approx(312e12)
    assert capped["achievable_flops"] == pytest.approx(271.2e12)
    assert capped["fraction_of_peak"] < 271.2 / 312


@pytest.mark.parametrize("machine, drawn", [
    ("a100-sxm", ["measured ceiling 2.71e+14"]),
    # the B200 also states the ceiling at its power limit, which training steps meet
    ("b200", ["measured ceiling 1.74e+15", "power limit (training steps) 1.43e+15"])])
def test_the_roofline_draws_the_measured_ceilings_under_the_peak(machine: str, drawn: list[str]) -> None:
    from memwall.execute.sweep import machine_roofs
    from memwall.figures import roofline

    (roof,) = machine_roofs([machine])
    point = {"machine": machine, "network": "gpt2-small", "batch": 8, "intensity": 300.0,
             "intensity_level": "memory", "achieved_flops": 2e14}
    fig = roofline.draw({"points": [point], "roofs": [roof]})
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    for words in drawn:
        assert any(words in label for label in labels), labels
    assert ("power limit" in " ".join(labels)) == bool(roof["sustained_flops"])


def test_a_what_if_may_add_a_ceiling_a_profile_lacks_and_is_filed_as_one() -> None:
    # the P100 states no measured ceiling (the V100 has had one since its measured torch.mm figures)
    p100 = load_machine("p100-sxm2", sets={"compute.achievable.fp16": "'15 TFLOP/s'"})
    assert arithmetic_rate(p100, "fp16", "gemm") == pytest.approx(15e12)
    fig = p100.provenance["compute.achievable.fp16"]
    assert fig.status == "estimate" and "--set" in fig.derivation
    assert not load_machine("p100-sxm2").achievable_flops  # the shipped profile is untouched
