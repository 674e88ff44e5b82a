"""The energy table (issue 29): joules are counts times energies plus static power times
seconds, summed over kernels and devices; a profile without [energy] still runs; bad
energy figures are refused naming the field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from memwall.cli import main
from memwall.energy import arithmetic_figure, level_bytes
from memwall.errors import InputError
from memwall.interconnect import Group, Interconnect, Link, bus_bytes, sent_by_link
from memwall.options import Case
from memwall.profiles import load_machine, load_machine_file
from memwall.simulation import run_case

GOOD = Path(__file__).parent / "data" / "profiles" / "good.toml"
# A small scalar machine's energy, every figure stated, so the closed form is exact.
SCALAR_ENERGY = {"energy.tdp": "100 W", "energy.static": "10 W", "energy.fp32": "1 nJ/FLOP",
                 "level.cache.energy": "50 pJ/B", "memory.energy": "1 nJ/B"}
# The H100's energy for the tests, stated here, not read from the shipped profile, so a
# change of a sourced figure there does not move these tests.
GPU_ENERGY = {"energy.tdp": "700 W", "energy.static": "80 W", "energy.bf16": "0.3 pJ/FLOP",
              "energy.fp32": "0.6 pJ/FLOP", "energy.vector.fp32": "1.5 pJ/FLOP", "energy.vector.bf16": "0.9 pJ/FLOP", "level.smem.energy": "1 pJ/B",
              "level.L2.energy": "5 pJ/B", "memory.energy": "3.9 pJ/bit", "interconnect.node.energy": "1.3 pJ/bit",
              "interconnect.cluster.energy": "10 pJ/bit", "energy.fabric": "50 pJ/B"}


def scalar(**more: str):
    return load_machine_file(GOOD, sets={**SCALAR_ENERGY, **more})


def run(machine, **case):
    return run_case(Case(machine=machine.id, **case), machine=machine)


def test_joules_are_counts_times_energies_plus_static_power() -> None:
    m = scalar()
    r = run(m, network="encoder-8-3-8", batch=1, updates="per-example")
    flops = sum(k["flops"] for k in r["kernels"])
    expected = {"arithmetic.fp32": flops * 1e-9, "cache": r["bytes"]["cache"] * 50e-12,
                "memory": r["bytes"]["memory"] * 1e-9, "interconnect": 0.0, "static": 10 * r["seconds"], "host": 0.0}
    e = r["energy"]
    assert e["joules_by_component"] == pytest.approx(expected, rel=1e-12)
    assert e["joules"] == pytest.approx(sum(expected.values()), rel=1e-12)
    assert e["watts_average"] == pytest.approx(e["joules"] / r["seconds"])
    moved = expected["cache"] + expected["memory"]
    assert e["data_movement_share"] == pytest.approx(moved / e["joules"])
    assert e["tdp"] == 100.0 and e["unstated"] == []
    assert e["cups_per_joule"] == pytest.approx(r["cups"] * r["seconds"] / e["joules"])
    assert e["tokens_per_joule"] is None  # an MLP has no tokens


def test_a_step_is_the_sum_of_its_kernels() -> None:
    for m, case in ((scalar(), {"network": "nettalk", "batch": 4}),
                    (load_machine("h100-sxm", sets=GPU_ENERGY), {"network": "gpt2-small", "batch": 2})):
        r = run(m, **case)
        assert sum(k["joules"] for k in r["kernels"]) == pytest.approx(r["energy"]["joules"], rel=1e-9)


def test_more_bytes_never_fewer_joules() -> None:
    base = run(scalar(), network="nettalk", batch=4)["energy"]["joules"]
    dearer = run(scalar(**{"memory.energy": "2 nJ/B"}), network="nettalk", batch=4)["energy"]["joules"]
    assert dearer > base
    h100 = load_machine("h100-sxm", sets=GPU_ENERGY)
    short, long = (run(h100, network="llama3-8b", phase="decode", context=c, batch=8)["energy"]
                   for c in (256, 4096))
    assert long["joules_by_component"]["memory"] > short["joules_by_component"]["memory"]
    assert long["joules"] > short["joules"]


def test_decode_energy_per_token_falls_with_batch_and_movement_dominates_batch_one() -> None:
    h100 = load_machine("h100-sxm", sets=GPU_ENERGY)
    one, many = (run(h100, network="llama3-8b", phase="decode", context=512, batch=b)["energy"] for b in (1, 64))
    assert many["tokens_per_joule"] > 10 * one["tokens_per_joule"]
    by = one["joules_by_component"]
    assert by["memory"] > 10 * sum(v for k, v in by.items() if k.startswith("arithmetic."))


def test_several_devices_sum_their_energy() -> None:
    h100 = load_machine("h100-sxm", sets=GPU_ENERGY)
    one = run(h100, network="gpt2-small", batch=2, seq_len=256)
    two = run(h100, network="gpt2-small", batch=2, seq_len=256, dp=2)
    e1, e2 = one["energy"], two["energy"]
    assert e2["joules_by_component"]["static"] == pytest.approx(80 * two["seconds"] * 2)
    # two replicas do twice the kernels' work, and send the gradients over NVLink
    assert e2["joules_by_component"]["memory"] == pytest.approx(2 * e1["joules_by_component"]["memory"], rel=1e-9)
    sent = two["interconnect_bytes"]
    assert e2["joules_by_component"]["interconnect"] == pytest.approx(2 * sent * 8 * 1.3e-12, rel=1e-9)
    assert e2["watts_average"] == pytest.approx(e2["joules"] / two["seconds"] / 2)
    assert e2["tokens_per_joule"] == pytest.approx(2 * 2 * 256 / e2["joules"])


def test_links_carry_what_the_collectives_send() -> None:
    ic = Interconnect("t", 8, Link(1e11, 1e-6), Link(1e10, 1e-5))
    within = sent_by_link(ic, "all-reduce", Group(8), 1e6)
    assert within == {"node": pytest.approx(bus_bytes("all-reduce", 8, 1e6)), "cluster": 0.0}
    # 4 nodes of 8: one ring through all 32, each device the NIC exit of one of 8 channels
    across = sent_by_link(ic, "all-reduce", Group(32), 1e6)
    assert across["node"] == pytest.approx(2 * 31 / 32 * 1e6 * 7 / 8)
    assert across["cluster"] == pytest.approx(2 * 31 / 32 * 1e6 / 8)
    assert across["node"] + across["cluster"] == pytest.approx(bus_bytes("all-reduce", 32, 1e6))
    assert sent_by_link(ic, "p2p", Group(2, 8), 5.0) == {"node": 0.0, "cluster": 5.0}
    a2a = sent_by_link(ic, "all-to-all", Group(16), 1600.0)
    assert a2a == {"node": pytest.approx(7 / 16 * 1600), "cluster": pytest.approx(8 / 16 * 1600)}


def test_arithmetic_is_priced_at_the_units_that_run_it() -> None:
    h100 = load_machine("h100-sxm", sets=GPU_ENERGY)
    assert arithmetic_figure(h100, "bf16", "gemm") == ("bf16", pytest.approx(0.3e-12))
    assert arithmetic_figure(h100, "bf16", "elementwise") == ("bf16", pytest.approx(0.9e-12))
    assert arithmetic_figure(h100, "fp32", "softmax") == ("fp32", pytest.approx(1.5e-12))
    # a product in a dtype the machine has no rate for is priced as the dtype whose rate runs it
    assert arithmetic_figure(scalar(), "bf16", "gemm") == ("fp32", pytest.approx(1e-9))
    # a scratchpad is charged the bytes staged through it: those the level below delivered
    assert level_bytes(h100, {"L2": 100.0, "memory": 40.0}) == {"smem": 100.0, "L2": 100.0, "memory": 40.0}


def test_a_profile_without_energy_runs_with_energy_null_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    m = load_machine_file(GOOD)
    assert m.energy is None
    r = run(m, network="encoder-8-3-8", batch=1, updates="per-example")
    assert r["energy"] is None and r["seconds"] > 0
    assert all(k["joules"] is None for k in r["kernels"])
    assert main(["inspect", "--machine", str(GOOD), "--network", "encoder-8-3-8", "--batch", "1", "--updates",
                 "per-example", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "energy: not counted (test-good states no [energy] figures" in out


def test_a_missing_figure_is_named_not_silently_zero() -> None:
    m = load_machine_file(GOOD, sets={k: v for k, v in SCALAR_ENERGY.items() if k != "memory.energy"})
    e = run(m, network="nettalk", batch=1)["energy"]
    assert e["unstated"] == ["memory.energy"]
    assert e["joules_by_component"]["memory"] == 0.0


def test_average_power_above_the_rated_power_is_warned_naming_both() -> None:
    r = run(scalar(**{"energy.tdp": "1 W"}), network="nettalk", batch=4)
    assert any("above test-good's energy.tdp 1 W" in w for w in r["warnings"])
    assert not any("energy.tdp" in w for w in run(scalar(), network="nettalk", batch=4)["warnings"])


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("energy.fp32", "-1 pJ/FLOP", "non-negative"),
    ("energy.fp32", "nan pJ/FLOP", "number and a unit"),
    ("energy.fp32", "3 pJ/B", "pJ/FLOP"),
    ("memory.energy", "3 pJ/FLOP", "pJ/B"),
    ("level.cache.energy", "3 W", "pJ/B"),
    ("energy.static", "-5 W", "non-negative"),
    ("energy.tdp", "0 W", "positive"),
    ("energy.tdp", "700 J", "W, kW"),
])
def test_bad_energy_figures_are_refused_naming_the_field(field: str, value: str, reason: str) -> None:
    with pytest.raises(InputError, match=reason) as err:
        load_machine_file(GOOD, sets={**SCALAR_ENERGY, field: value})
    assert field in str(err.value)


def test_energy_needs_its_rated_and_static_power(tmp_path: Path) -> None:
    text = GOOD.read_text().replace("[sources]", '[energy]\nfp32 = { value = "1 nJ/FLOP", source = "t", '
                                                 'status = "estimate", derivation = "test" }\n\n[sources]')
    path = tmp_path / "test-good.toml"
    path.write_text(text)
    with pytest.raises(InputError, match="energy.tdp|energy.static"):
        load_machine_file(path)


def test_a_unit_that_would_draw_more_than_the_rating_is_warned() -> None:
    from memwall.plausibility import plausibility
    from memwall.schema import Problems

    problems = Problems("t")
    plausibility(scalar(**{"energy.fp32": "1 mJ/FLOP"}), problems)  # 1 MFLOP/s x 1 mJ = 1 kW > 100 W
    assert [w.field for w in problems.warnings] == ["energy.fp32"]
    assert "draws 1000 W" in problems.warnings[0].reason
    quiet = Problems("t")
    plausibility(scalar(), quiet)
    assert not [w for w in quiet.warnings if w.field.startswith(("energy", "memory.energy"))]


def test_the_fabric_prices_each_main_memory_byte_on_top_of_the_memorys_own_figure() -> None:
    plain = run(scalar(), network="encoder-8-3-8", batch=1, updates="per-example")
    m = scalar(**{"energy.fabric": "2 nJ/B"})
    r = run(m, network="encoder-8-3-8", batch=1, updates="per-example")
    e = r["energy"]["joules_by_component"]
    assert e["fabric"] == pytest.approx(r["bytes"]["memory"] * 2e-9, rel=1e-12)
    # every other component as without it; the share moving data counts it
    assert {k: v for k, v in e.items() if k != "fabric"} == pytest.approx(plain["energy"]["joules_by_component"])
    moved = e["cache"] + e["memory"] + e["fabric"]
    assert r["energy"]["data_movement_share"] == pytest.approx(moved / r["energy"]["joules"])
    assert "fabric" not in plain["energy"]["joules_by_component"]  # unstated: no component, as before


def test_the_h200s_fabric_reproduces_the_stream_power_it_was_derived_from() -> None:
    """gpu-roofline's H200 stream: 572 W reading two fp64 arrays at 3759 GB/s (0.25 FLOP/B).
    Priced by the profile (static, the stream's fp64 on the vector units, each byte at the
    memory's, every level's and the fabric's figures), the stream draws what was measured."""
    h200 = load_machine("h200")
    rate, flops = 3759e9, 940e9
    per_byte = h200.memory.energy + sum(lv.energy for lv in h200.levels) + h200.energy.fabric
    watts = h200.energy.static + flops * h200.energy.vector["fp64"] + rate * per_byte
    assert watts == pytest.approx(572, rel=0.002)
    assert h200.provenance["energy.fabric"].status == "measured"


def test_a_memory_bound_decode_step_draws_most_of_its_dynamic_power_in_the_fabric() -> None:
    h100 = load_machine("h100-sxm")
    r = run(h100, network="llama3-8b", batch=1, phase="decode", context=512)
    e = r["energy"]["joules_by_component"]
    assert e["fabric"] > e["memory"] > e["arithmetic.bf16"]
    assert r["energy"]["watts_average"] < h100.energy.tdp


def test_the_h200s_figures_reproduce_its_measured_roofline_sweep() -> None:
    """gpu-roofline's H200 sweep (h200.txt): N fp64 multiply-adds per element of a stream
    read far beyond the L2. The profile's static power, per-byte figures (the fabric's among
    them) and fp64 vector energy, solved at the sweep's two ends, give every point's power."""
    h200 = load_machine("h200")
    per_byte = h200.memory.energy + sum(lv.energy for lv in h200.levels) + h200.energy.fabric
    for watts, gbs, gflops in ((572, 3759, 940), (675, 3629, 22683), (519, 1578, 38276), (467, 989, 39827),
                               (398, 425, 42558)):
        priced = h200.energy.static + gbs * 1e9 * per_byte + gflops * 1e9 * h200.energy.vector["fp64"]
        assert priced == pytest.approx(watts, rel=0.03), watts
    assert h200.provenance["energy.vector.fp64"].status == "measured"


@pytest.mark.parametrize(("machine", "dims"), [("h200", "2048,2048,13312"), ("b200", "1792,16128,3072"),
                                              ("a100-sxm", "8192,8192,8192")])
def test_the_tensor_cores_figure_holds_the_rating_at_the_power_saturated_rate(machine: str, dims: str) -> None:
    """Bekman's MSMF is the product rate at the power-saturated clock, so the board draws its
    rated power there. The MAMF search's best shape, priced by the profile (static power, its
    data movement, its FLOPs at [energy] bf16) at the MSMF rate, draws the rating."""
    m = load_machine(machine)
    shape = tuple(int(x) for x in dims.split(","))
    r = run(m, gemm=shape, dtype="bf16")
    flops = 2 * math.prod(shape)
    e = r["energy"]["joules_by_component"]
    moving = sum(v for k, v in e.items() if not k.startswith("arithmetic") and k not in ("static", "host"))
    seconds = flops / m.sustained_flops["bf16"]
    watts = m.energy.static + (moving + flops * m.energy.matrix["bf16"]) / seconds
    assert watts == pytest.approx(m.energy.tdp, rel=0.002)
    assert m.provenance["energy.bf16"].status == "measured"
    # the burst ceiling is above the rating: why the sustained rate is lower
    burst = m.energy.static + (moving + flops * m.energy.matrix["bf16"]) * m.achievable_flops["bf16"] / flops
    assert burst > m.energy.tdp


def test_a_matrix_unit_is_held_to_the_rating_at_its_measured_ceiling_and_to_twice_it_at_a_bare_peak() -> None:
    from memwall.plausibility import plausibility
    from memwall.schema import Problems

    h100 = load_machine("h100-sxm")
    quiet = Problems("t")
    plausibility(h100, quiet)  # bf16 at its peak draws above 700 W; at its measured ceilings it does not
    assert h100.peak_flops["bf16"] * h100.energy.matrix["bf16"] + h100.energy.static > h100.energy.tdp
    assert not quiet.warnings
    over = Problems("t")
    plausibility(load_machine_file(GOOD, sets={**SCALAR_ENERGY, "energy.fp32": "0.15 mJ/FLOP"}), over)
    assert not over.warnings  # 1 MFLOP/s x 0.15 mJ = 150 W + 10 W static: above the 100 W rating, within twice it
    slipped = Problems("t")
    plausibility(load_machine_file(GOOD, sets={**SCALAR_ENERGY, "energy.fp32": "0.2 mJ/FLOP"}), slipped)
    assert [w.field for w in slipped.warnings] == ["energy.fp32"]
    assert "2x the rated 100 W" in slipped.warnings[0].reason
