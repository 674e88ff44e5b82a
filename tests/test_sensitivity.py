"""The binding resource is measured: each timing figure's elasticity, the bound figure, its
class, and labels that never contradict memory_ratio (docs/timing.md, "The binding resource")."""

from __future__ import annotations

import math

import pytest

from memwall.options import make_case
from memwall.profiles import load_machine
from memwall.simulation import run_case
from memwall.simulation.sensitivity import MIXED, binding, figure_class, scaled, timing_figures

CASES = [
    dict(machine="h100-sxm", network="gpt2-small", batch=8),  # the label read arithmetic-bound at 1.71x
    dict(machine="cray-1", network="nettalk", updates="per-example"),  # and here at 1.77x
    dict(machine="convex-c1", network="nettalk", updates="per-example"),
    dict(machine="vax-11-780-fpa", network="nettalk", updates="per-example"),
    dict(machine="h100-sxm", network="affine-48x1024", batch=16384),
    dict(machine="h100-sxm", network="affine-48x1024", batch=1),
    dict(machine="a100-sxm", network="gpt2-small", batch=4, dp=2, tp=2),
]


@pytest.fixture(scope="module", params=range(len(CASES)), ids=[f"{c['machine']}-{c['network']}" for c in CASES])
def result(request):
    return run_case(make_case(**CASES[request.param]))


def test_no_label_contradicts_memory_ratio(result):
    ratio, cls, verdict = result["memory_ratio"], result["bound_class"], result["verdict"]
    if ratio is not None and ratio > 1.05:
        assert cls != "compute" and not verdict.startswith("arithmetic")
    if ratio is not None and ratio < 0.95:
        assert cls != "memory"
    assert verdict.startswith("arithmetic-bound") == (cls == "compute")
    assert verdict.startswith("mixed:") == (cls == MIXED)


def test_the_bound_is_the_figure_with_the_largest_elasticity_and_its_class_sums_highest(result):
    e = result["sensitivity"]
    classed = {p: abs(v) for p, v in e.items() if figure_class(p) != "scale"}
    assert result["bound"] == max(classed, key=classed.get)
    shares = result["bound_shares"]
    top = max(shares, key=shares.get)
    assert result["bound_class"] in (top, MIXED)
    assert shares[figure_class(result["bound"])] > 0


def test_the_examples_of_the_issue_are_memory_bound():
    for case in CASES[:3]:
        r = run_case(make_case(**case))
        assert r["memory_ratio"] > 1.05 and r["bound_class"] == "memory", (case, r["verdict"])


# (a training step: its bf16 products meet the H100's power-saturated ceiling, compute.sustained)
@pytest.mark.parametrize("figure", ["memory.bandwidth", "compute.sustained.bf16", "timing.dispatch.eager.device_gap"])
def test_an_elasticity_is_what_two_full_runs_with_the_figure_set_give(figure):
    # Re-timing the same counts (no replay) must equal simulating machines whose figure was
    # set by --set: the counts do not depend on rates, latencies or costs.
    case = make_case(machine="h100-sxm", network="gpt2-small", batch=8)
    base = load_machine("h100-sxm")
    r = run_case(case, machine=base)
    up = run_case(case, machine=scaled(base, figure, 1.01))["seconds"]
    down = run_case(case, machine=scaled(base, figure, 1 / 1.01))["seconds"]
    assert r["sensitivity"][figure] == pytest.approx(math.log(up / down) / (2 * math.log(1.01)), abs=1e-4)
    assert r["sensitivity"][figure] != 0
    value = {"memory.bandwidth": base.memory.bandwidth, "compute.sustained.bf16": base.sustained_flops["bf16"],
             "timing.dispatch.eager.device_gap": base.dispatch.mode("eager").device_gap}[figure]
    unit = {"memory.bandwidth": "B/s", "compute.sustained.bf16": "FLOP/s", "timing.dispatch.eager.device_gap": "s"}
    set_up = load_machine("h100-sxm", sets={figure: f"'{value * 1.01!r} {unit[figure]}'"})
    assert run_case(case, machine=set_up)["seconds"] == pytest.approx(up, rel=1e-12)


def test_signs_rates_negative_costs_positive_and_unused_figures_zero():
    r = run_case(make_case(machine="h100-sxm", network="affine-48x1024", batch=1))  # host-bound, eager
    e = r["sensitivity"]
    # host-bound: the step is the host's issue, plus the framework's work and its
    # synchronisation, which host_issue does not move
    d = r["dispatch"]
    issue = d["host_seconds"] - d["framework"]["host_seconds"]
    assert e["timing.dispatch.eager.host_issue"] == pytest.approx(issue / r["seconds"], abs=1e-3)
    assert e["timing.dispatch.eager.host_issue"] > 0.95
    assert e["compute.fp64"] == 0.0 and e["memory.bandwidth"] == 0.0
    assert not any(p.startswith(("timing.dispatch.graph", "interconnect.")) for p in e)  # not this step's
    big = run_case(make_case(machine="h100-sxm", network="affine-48x1024", batch=16384))
    assert big["sensitivity"]["compute.fp32"] < -0.9 and big["bound"] == "compute.fp32"


def test_a_class_that_contradicts_memory_ratio_is_mixed():
    e = {"compute.bf16": -0.6, "memory.bandwidth": -0.4}
    assert binding(e, 1.5).bound_class == MIXED and binding(e, 1.5).resource == "compute"
    assert binding(e, 1.0).bound_class == "compute"
    assert binding({"compute.bf16": -0.3, "memory.bandwidth": -0.7}, 0.5).bound_class == MIXED
    assert binding({"clock": -1.0, "memory.bandwidth": -0.2}, None).bound == "memory.bandwidth"


def test_every_timing_figure_of_every_profile_can_be_scaled():
    from memwall.data import data_files

    for path in data_files("machines"):
        if path.stem == "TEMPLATE":
            continue
        m = load_machine(path.stem)
        for figure in timing_figures(m):
            assert scaled(m, figure, 2.0) != m, (path.stem, figure)


def test_every_timing_parameter_a_profile_states_has_a_class_or_is_declared_structural():
    # A new [timing] figure the timing reads must say which resource it is, or the binding
    # resource silently ignores it (the vector model's bank busy time once did).
    from memwall.data import data_files
    from memwall.simulation.sensitivity import STRUCTURAL_TIMING

    for path in data_files("machines"):
        if path.stem == "TEMPLATE":
            continue
        m = load_machine(path.stem)
        for key in m.timing.params:
            assert key in STRUCTURAL_TIMING or figure_class(f"timing.{key}") is not None, (path.stem, key)


def test_a_verdict_names_its_own_classs_figure_and_the_largest_single_one_beside_it():
    # A class binds by the sum of its figures: where one figure of another class is the
    # largest, the verdict says so rather than naming it as the class's own.
    r = run_case(make_case(machine="h100-sxm", network="gpt2-small", batch=1))
    e, cls = r["sensitivity"], r["bound_class"]
    own = max((p for p in e if figure_class(p) == cls), key=lambda p: abs(e[p]))
    assert f"({own}, elasticity" in r["verdict"]
    if figure_class(r["bound"]) != cls:
        assert f"the largest single figure is {r['bound']}" in r["verdict"]


def test_a_figure_the_step_never_reads_is_zero_without_retiming_and_the_answer_is_exact(monkeypatch):
    import memwall.simulation.sensitivity as sens
    from memwall.simulation import Case

    case = Case(machine="h100-sxm", network="gpt2-small", batch=2, seq_len=64, dtype="bf16")
    found: dict[str, set[str]] = {}
    real = sens.unread_figures
    monkeypatch.setattr(sens, "unread_figures", lambda machine, retime: found.setdefault("u", real(machine, retime)))
    skipped = run_case(case)["sensitivity"]
    unread = found["u"]
    assert "compute.fp64" in unread and "compute.int8" in unread  # a bf16 step reads neither
    assert "compute.achievable.bf16" not in unread  # its products read it
    monkeypatch.setattr(sens, "unread_figures", lambda machine, retime: set())
    full = run_case(case)["sensitivity"]
    assert skipped == full  # bit for bit: an unread figure's elasticity is exactly 0
    assert all(full[p] == 0.0 for p in unread if p in full)
