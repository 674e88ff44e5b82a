"""Issue 12: the dispatch pipeline, waves and the work-in-flight cap, the bound label,
the word size of vector machines and [compute.vector] (docs/timing.md)."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from memwall.errors import InputError
from memwall.levels import LevelSpec
from memwall.profiles import (
    DispatchMode,
    DispatchSpec,
    Machine,
    MainMemory,
    ScheduleSpec,
    TimingSpec,
    load_machine,
)
from memwall.simulation import Case, run_case
from memwall.timing import MEMORY, KernelTraffic, LevelTraffic, apply_dispatch, time_kernel

GB = 1e9


def gpu(*, units=100, tiles_m=128, tiles_n=128, in_flight=None, latency=100e-9, bandwidth=1000 * GB,
        dispatch=None, kind="gpu") -> Machine:
    params = {"tile_m": tiles_m, "tile_n": tiles_n, "tile_k": 32, "units": units, "staging": None}
    if in_flight is not None:
        params["bytes_in_flight"] = in_flight
    return Machine(
        id="test-gpu", name="test", vendor="test", year=2020, kind=kind, clock_hz=1e9,
        peak_flops={"fp32": 1e12}, issue_costs={}, levels=(),
        memory=MainMemory(capacity=1 << 34, latency=latency, bandwidth=bandwidth),
        timing=TimingSpec("throughput", {}), schedule=ScheduleSpec("tiled", params),
        primary_dtype="fp32", dispatch=dispatch,
    )


def kernel(machine, *, nbytes=0, flops=0, tiles=0, op="gemm", repeat=1, dtype="fp32"):
    lv = LevelTraffic(MEMORY, nbytes, 0, machine.memory.bandwidth, machine.memory.latency)
    tr = KernelTraffic(0, 0, 0, 0, (lv,), parallel_units=tiles)
    return time_kernel(machine, name="k", phase="forward", op=op, dtype=dtype, flops=flops, ops={},
                       traffic=tr, repeat=repeat)


SPEC = DispatchSpec("eager", {
    "eager": DispatchMode(host_issue=7e-6, device_gap=2.5e-6),
    "graph": DispatchMode(host_issue=0.05e-6, device_gap=1.3e-6),
    "compiled": DispatchMode(host_issue=0.0, device_gap=1.3e-6, step_issue=7e-6),
})


# ---- the dispatch pipeline ---------------------------------------------------------------


@pytest.mark.parametrize("work", [1e-7, 1e-6, 1e-5, 1e-4])
def test_n_identical_kernels_take_the_longer_stream(work):
    """n identical kernels: max(n h, n (g + t)) on an asynchronous machine."""
    m = gpu(dispatch=SPEC)
    n, h, g = 37, 7e-6, 2.5e-6
    ks = [kernel(m, flops=int(work * 1e12)) for _ in range(n)]
    d = apply_dispatch(m, ks, iterations=1, mode="eager")
    assert d.host_seconds == pytest.approx(n * h)
    assert d.device_seconds == pytest.approx(n * (g + work))
    assert sum(k.seconds for k in ks) == pytest.approx(max(n * h, n * (g + work)))
    assert d.host_bound == (n * h > n * (g + work))


def test_repeat_and_iterations_count_as_launches():
    m = gpu(dispatch=SPEC)
    ks = [kernel(m, flops=10 ** 6, repeat=4), kernel(m, flops=10 ** 6)]
    d = apply_dispatch(m, ks, iterations=3, mode="eager")
    assert d.launches == 3 * 5
    assert 3 * sum(k.seconds for k in ks) == pytest.approx(max(15 * 7e-6, 15 * (2.5e-6 + 1e-6)))


def test_compiled_pays_its_step_issue_once_per_step():
    m = gpu(dispatch=SPEC)
    ks = [kernel(m, flops=10) for _ in range(10)]
    d = apply_dispatch(m, ks, iterations=2, mode="compiled")
    assert d.host_seconds == pytest.approx(2 * 7e-6)
    assert d.device_seconds == pytest.approx(2 * 10 * (1.3e-6 + 1e-11))


def test_a_synchronous_host_adds_its_cost():
    m = gpu(dispatch=SPEC, kind="superscalar")
    ks = [kernel(m, flops=10 ** 7) for _ in range(5)]
    apply_dispatch(m, ks, iterations=1, mode="eager")
    assert sum(k.seconds for k in ks) == pytest.approx(5 * (7e-6 + 2.5e-6 + 1e-5))


def test_no_dispatch_table_costs_nothing():
    m = gpu()
    ks = [kernel(m, flops=10 ** 6) for _ in range(5)]
    d = apply_dispatch(m, ks, iterations=1)
    assert d.mode == "compiled" and sum(k.seconds for k in ks) == pytest.approx(5e-6)


def test_a_mode_not_stated_runs_as_the_next_one_up():
    spec = DispatchSpec("eager", {"eager": DispatchMode(1e-6, 2e-6)})
    assert spec.mode("graph") == spec.mode("compiled") == spec.mode("eager")
    m = gpu(dispatch=spec)
    with pytest.raises(InputError, match="unknown dispatch mode"):
        apply_dispatch(m, [kernel(m, flops=1)], 1, "lazy")


@pytest.mark.parametrize("machine", ["h100-sxm", "a100-sxm", "mi250x", "tpu-v4", "g80", "cm-2"])
def test_compiled_never_slower_than_graph_never_slower_than_eager(machine):
    seconds = [run_case(Case(machine=machine, network="affine-48x1024", batch=4, dispatch=mode))["seconds"]
               for mode in ("compiled", "graph", "eager")]
    assert seconds[0] <= seconds[1] * (1 + 1e-12) and seconds[1] <= seconds[2] * (1 + 1e-12)


# ---- waves and the work-in-flight cap -----------------------------------------------------


def test_compute_takes_whole_waves():
    m = gpu(units=100)
    full = kernel(m, flops=10 ** 9, tiles=100).compute
    assert full == pytest.approx(1e-3)
    assert kernel(m, flops=10 ** 9, tiles=101).compute == pytest.approx(1e-3 * 2 * 100 / 101)
    assert kernel(m, flops=10 ** 9, tiles=1).compute == pytest.approx(1e-3 * 100)
    assert kernel(m, flops=10 ** 9, tiles=300).compute == pytest.approx(1e-3)


def test_one_tile_draws_one_units_bandwidth_and_enough_tiles_the_peak():
    b_u, lat = 5000.0, 100e-9  # 50 GB/s per unit; 100 units could draw 5 TB/s of a 1 TB/s peak
    m = gpu(units=100, in_flight=b_u, latency=lat, bandwidth=1000 * GB)
    nbytes = 10 ** 9
    one = kernel(m, nbytes=nbytes, tiles=1, op="elementwise")
    assert one.terms[MEMORY] == pytest.approx(nbytes / (b_u / lat))
    for tiles in (100, 1000):
        assert kernel(m, nbytes=nbytes, tiles=tiles, op="elementwise").terms[MEMORY] == pytest.approx(1e-3)
    ten = kernel(m, nbytes=nbytes, tiles=10, op="elementwise")
    assert ten.terms[MEMORY] == pytest.approx(nbytes / (10 * b_u / lat))


def test_a_last_partial_wave_streams_with_its_own_units_bytes_in_flight():
    """120 tiles on 100 units: the first wave's 100 tiles move 100/120 of the bytes at the
    peak; the last wave's 20 tiles move the rest with 20 units' bytes in flight."""
    b_u, lat = 5000.0, 100e-9  # 50 GB/s a unit: 20 units draw 1 TB/s, 10 units 0.5 TB/s
    m = gpu(units=100, in_flight=b_u, latency=lat, bandwidth=1000 * GB)
    nbytes = 1.2e9
    assert kernel(m, nbytes=nbytes, tiles=120, op="elementwise").terms[MEMORY] == pytest.approx(
        1e9 / (1000 * GB) + 0.2e9 / (1000 * GB))  # 20 units reach the peak: no slower than one wave
    assert kernel(m, nbytes=nbytes, tiles=110, op="elementwise").terms[MEMORY] == pytest.approx(
        (100 / 110) * nbytes / (1000 * GB) + (10 / 110) * nbytes / (10 * b_u / lat))
    # whole waves stream at the peak throughout; the same tail on a machine whose units
    # keep the peak alone costs nothing
    assert kernel(m, nbytes=nbytes, tiles=200, op="elementwise").terms[MEMORY] == pytest.approx(1.2e-3)
    wide = gpu(units=100, in_flight=10 ** 6, latency=lat, bandwidth=1000 * GB)
    assert kernel(wide, nbytes=nbytes, tiles=110, op="elementwise").terms[MEMORY] == pytest.approx(1.2e-3)


@pytest.mark.parametrize("tiles", [1, 3, 40, 99, 100, 250])
def test_more_units_or_more_bytes_in_flight_is_never_slower(tiles):
    previous = None
    for units, b_u in ((10, 1000.0), (10, 4000.0), (50, 4000.0), (100, 4000.0), (100, 10 ** 6)):
        # More units means more machine: each unit keeps its rate, the peak grows with them.
        m = dataclasses.replace(gpu(units=units, in_flight=b_u), peak_flops={"fp32": units * 1e10})
        t = kernel(m, nbytes=10 ** 8, flops=10 ** 9, tiles=tiles).seconds
        if previous is not None:
            assert t <= previous * (1 + 1e-12)
        previous = t


def test_the_lowering_counts_a_products_tiles_split_along_k_while_they_are_few():
    from memwall.workloads.lowering import lower
    from memwall.workloads.step import gemm_step

    h100 = load_machine("h100-sxm")  # 128 x 256 x 64 tiles, 132 SMs
    # the profile's one tile, without the library's tile set (tests/test_tile_shapes.py picks among those)
    lone = {k: v for k, v in h100.schedule.params.items() if k != "tile_shapes"}
    h100 = dataclasses.replace(h100, schedule=dataclasses.replace(h100.schedule, params=lone))
    (k,) = gemm_step(4096, 4096, 4096, "fp32").kernels
    assert lower(k, h100.schedule).parallel_units == 32 * 16  # enough output tiles: no split
    (k,) = gemm_step(4096, 16, 4096, "fp32").kernels
    assert lower(k, h100.schedule).parallel_units == 32 * (132 // 32)  # 32 output tiles, 4 K slices
    (k,) = gemm_step(1, 256, 128, "fp32").kernels
    assert lower(k, h100.schedule).parallel_units == 1 * 2  # K has only 2 slices of 64


def test_a_measurement_may_name_its_dispatch_mode(tmp_path):
    from memwall.study.measurements import load_measurement_file
    from memwall.study.validation import case_for

    table = ('[[measurement]]\nid = "x"\nmachine = "h100-sxm"\nmetric = "flops"\nvalue = 1e12\nsource = "s"\n'
             'reliability = "low"\nnotes = "n"\ngemm = "64,64,64"\ndtype = "fp32"\n')
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(table + 'dispatch = "graph"\n')
    bad.write_text(table + 'dispatch = "lazy"\n')
    (m,) = load_measurement_file(good)
    assert case_for(m).dispatch == "graph"
    with pytest.raises(InputError, match="dispatch"):
        load_measurement_file(bad)


# ---- bound, memory_ratio, verdict, JSON -------------------------------------------------------


def test_sun3_nettalk_per_example_reads_arithmetic_bound():
    r = run_case(Case(machine="sun-3-260", network="nettalk", updates="per-example"))
    assert r["bound"].startswith(("compute.", "issue_costs.")) and r["bound_class"] == "compute"
    assert r["memory_ratio"] < 1
    assert r["verdict"].startswith(f"arithmetic-bound ({r['bound']}, elasticity ")


@pytest.mark.parametrize("mode", ["eager", "graph", "compiled"])
def test_h100_batch_1_is_dispatch_or_memory_bound_by_the_longer_stream(mode):
    r = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=1, dispatch=mode))
    assert r["bound_class"] in ("dispatch", "memory")
    d = r["dispatch"]
    assert d["mode"] == mode
    if d["host_seconds"] > d["device_seconds"]:
        assert r["bound_class"] == "dispatch" and r["bound"] == f"timing.dispatch.{mode}.host_issue"
        assert r["verdict"].startswith("dispatch-bound (") and "the host issues" in r["verdict"]
    assert r["memory_ratio"] > 10
    # the framework's synchronisation ends the step (docs/timing.md, "The framework")
    sync = d["framework"]["synchronize_seconds"]
    assert r["seconds"] == pytest.approx(max(d["host_seconds"], d["device_seconds"]) + sync)


def test_a_host_bound_step_is_dispatch_bound_even_when_a_kernel_part_is_larger():
    from memwall.timing import StepTiming

    m = gpu(units=100, dispatch=DispatchSpec("eager", {"eager": DispatchMode(host_issue=1.2e-3)}))
    ks = [kernel(m, flops=10 ** 9, tiles=100)]  # 1 ms of compute, 1.2 ms of host
    st = StepTiming(m, ks, iterations=1, examples=1, connections=1, phase="forward", peak=1e12,
                    dispatch=apply_dispatch(m, ks, 1))
    assert st.time_by_component["compute"] > st.time_by_component["dispatch"]
    assert st.bound == "dispatch" and st.seconds == pytest.approx(1.2e-3)


def test_host_stream_longer_reads_dispatch_bound():
    slow_host = {"timing.dispatch.eager.host_issue": "1 ms"}
    r = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=1),
                 machine=load_machine("h100-sxm", sets=slow_host))
    assert r["bound_class"] == "dispatch" and r["dispatch"]["host_seconds"] > r["dispatch"]["device_seconds"]
    assert r["bound"] == "timing.dispatch.eager.host_issue" and r["sensitivity"][r["bound"]] == pytest.approx(1, abs=0.01)
    assert "the host issues 192 kernels in" in r["verdict"]


def test_h100_batch_16384_in_graph_mode_is_compute_bound():
    r = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=16384, dispatch="graph"))
    assert r["bound_class"] == "compute" and r["bound"].startswith("compute.")


def test_json_keeps_its_keys_and_adds_the_new_ones():
    r = run_case(Case(machine="h100-sxm", network="nettalk", batch=2))
    for key in ("stall_fraction", "cycles", "bytes", "bound", "memory_ratio", "bound_class", "dispatch",
                "time_by_component"):
        assert key in r
    assert set(r["dispatch"]) >= {"mode", "host_seconds", "device_seconds"}
    assert sum(r["time_by_component"].values()) == pytest.approx(r["seconds"])
    assert r["bound"] in r["sensitivity"] and r["bound_class"] in r["bound_shares"]
    c = r["cycles"]
    assert c["total"] == pytest.approx(c["compute"] + c["overhead"] + sum(c["stall"].values()))
    for k in r["kernels"]:
        assert {"bound_class", "memory_ratio", "time_by_component"} <= set(k)


def test_memory_ratio_is_the_sum_of_largest_terms_over_compute():
    m = gpu(units=100)
    ks = [kernel(m, nbytes=2 * 10 ** 6, flops=10 ** 6, tiles=100), kernel(m, nbytes=0, flops=3 * 10 ** 6, tiles=100)]
    from memwall.timing import StepTiming

    st = StepTiming(m, ks, iterations=1, examples=1, connections=1, phase="forward", peak=1e12)
    assert st.memory_ratio == pytest.approx((2e-6 + 0.0) / (1e-6 + 3e-6))


# ---- --set --------------------------------------------------------------------------------------


def test_set_changes_one_figure_through_the_file_parser():
    m = load_machine("h100-sxm", sets={"memory.bandwidth": "1 TB/s", "schedule.units": "66"})
    assert m.memory.bandwidth == pytest.approx(1e12)
    assert m.schedule.params["units"] == 66
    assert "what-if" in (m.provenance["memory.bandwidth"].note or "")
    with pytest.raises(InputError, match="memory.bandwidth"):
        load_machine("h100-sxm", sets={"memory.bandwidth": "fast"})
    with pytest.raises(InputError, match="bandwith"):
        load_machine("h100-sxm", sets={"memory.bandwith": "1 TB/s"})


def test_inspect_set_is_a_what_if(capsys):
    from memwall.cli import main

    assert main(["inspect", "--machine", "h100-sxm", "--network", "nettalk", "--json",
                 "--set", "level.L2.bandwidth=1 GB/s", "--dispatch", "compiled"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    base = run_case(Case(machine="h100-sxm", network="nettalk", dispatch="compiled"))
    assert out["dispatch"]["mode"] == "compiled"
    assert out["seconds"] > base["seconds"]


# ---- profiles -------------------------------------------------------------------------------


def test_launch_overhead_is_refused_naming_the_new_table(tmp_path):
    p = tmp_path / "old.toml"
    p.write_text(textwrap.dedent("""
        format_version = 1
        base = "h100-sxm"
        id = "old"
        name = "old"
        [timing]
        launch_overhead = { value = "4 us", source = "x y", status = "estimate", derivation = "old" }
    """))
    with pytest.raises(InputError, match=r"\[timing.dispatch\]"):
        load_machine(str(p))


def test_every_accelerator_states_its_dispatch_and_in_flight_figures():
    from memwall.profiles import all_machines

    for m in all_machines():
        if m.kind in ("gpu", "tpu", "wafer"):
            assert m.dispatch is not None, m.id
            assert m.schedule.params.get("bytes_in_flight"), m.id
            e, g, c = (m.dispatch.mode(x) for x in ("eager", "graph", "compiled"))
            assert c.host_issue <= g.host_issue <= e.host_issue, m.id
            assert c.device_gap <= g.device_gap <= e.device_gap, m.id


# ---- word size and vector rates -----------------------------------------------------------------


def test_cray1_moves_fp32_elements_as_64_bit_words():
    fp32 = run_case(Case(machine="cray-1", network="nettalk", updates="per-example"))
    fp64_bytes = run_case(Case(machine="cray-1", network="nettalk", updates="per-example"),
                          machine=load_machine("cray-1", sets={"timing.subword_float": "true"}))
    # Without sub-word floating point each 4-byte element takes a whole 8-byte word.
    assert fp32["bytes"][MEMORY] == pytest.approx(2 * fp64_bytes["bytes"][MEMORY])
    assert fp32["seconds"] > fp64_bytes["seconds"]
    assert any("whole word" in w for w in fp32["warnings"])
    # The Cyber 205 has 32-bit floating point: no widening.
    assert not any("whole word" in w for w in
                   run_case(Case(machine="cyber-205", network="nettalk", updates="per-example"))["warnings"])


def test_vector_rates_serve_kernels_that_are_not_products():
    from memwall.timing import arithmetic_rate

    mi = load_machine("mi250x")
    assert arithmetic_rate(mi, "fp32", "gemm") == pytest.approx(95.7e12)
    assert arithmetic_rate(mi, "fp32", "elementwise") == pytest.approx(47.9e12)
    assert arithmetic_rate(mi, "bf16", "elementwise") == pytest.approx(47.9e12)
    h = load_machine("h100-sxm")
    assert arithmetic_rate(h, "fp64", "elementwise") == pytest.approx(33.5e12)
    assert arithmetic_rate(h, "fp64", "gemm") == pytest.approx(66.9e12)
    plain = dataclasses.replace(mi, vector_flops={})
    assert arithmetic_rate(plain, "fp32", "elementwise") == pytest.approx(95.7e12)


def test_l2_with_a_latency_is_capped_too():
    l2 = LevelSpec("L2", 1 << 20, 128, 16, latency=50e-9, bandwidth=4000 * GB)
    m = dataclasses.replace(gpu(units=10, in_flight=1000.0), levels=(l2,))
    tr = KernelTraffic(0, 0, 0, 0, (LevelTraffic("L2", 10 ** 6, 0, 4000 * GB, 50e-9),
                                    LevelTraffic(MEMORY, 0, 0, 1000 * GB, 100e-9)), parallel_units=1)
    t = time_kernel(m, name="k", phase="forward", op="elementwise", dtype="fp32", flops=0, ops={}, traffic=tr)
    assert t.terms["L2"] == pytest.approx(10 ** 6 / (1000 / 50e-9))


def test_sweep_runs_each_case_in_each_dispatch_mode():
    from memwall.cli import build_parser
    from memwall.cli.sweep import build_cases
    from memwall.simulation.row import make_row

    args = build_parser().parse_args(["sweep", "--machines", "h100-sxm", "--networks", "nettalk",
                                      "--dispatch", "eager,compiled"])
    cases = build_cases(args).cases
    assert [c.dispatch for c in cases] == ["eager", "compiled"]
    row = make_row(cases[1], run_case(cases[1]), None)
    assert row["dispatch"] == "compiled" and row["bound_class"] and row["memory_ratio"] > 0
    bad = build_parser().parse_args(["sweep", "--machines", "h100-sxm", "--dispatch", "lazy"])
    with pytest.raises(InputError, match="dispatch"):
        build_cases(bad)
