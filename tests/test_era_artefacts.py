"""Issue 27, part 3: model artefacts a reviewer would catch, on the timing side.

An out-of-order CPU no longer runs a per-example (matrix-vector) step at its peak: its
multiply-add issue, its load ports and its L2 bandwidth are charged; a per-core bandwidth
serves the cores a kernel keeps busy; a vector machine's strided loads wait on busy banks
and its strip-mined loop pays its scalar overhead (docs/timing.md, "overlapped", "vector").
"""

from __future__ import annotations

import dataclasses

import pytest

from memwall.api import run as run_case
from memwall.levels import LevelSpec
from memwall.profiles import Machine, MainMemory, ScheduleSpec, TimingSpec, load_machine
from memwall.streams import Access, LoopNest
from memwall.timing import MEMORY, KernelTraffic, LevelTraffic, bank_conflicts, time_kernel, vector_streams

GB = 1e9


def _machine(model: str, params: dict, levels=(), kind: str | None = None, peak=None) -> Machine:
    kind = kind or {"vector": "vector", "overlapped": "superscalar"}[model]
    return Machine(
        id=f"test-{model}", name="test", vendor="test", year=2000, kind=kind, clock_hz=1e9,
        peak_flops=peak or {"fp32": 4e9, "fp64": 4e9}, issue_costs={}, levels=tuple(levels),
        memory=MainMemory(capacity=1 << 34, latency=100e-9, bandwidth=100 * GB),
        timing=TimingSpec(model, dict(params)), schedule=ScheduleSpec("scalar", {}), primary_dtype="fp32",
    )


def _time(machine, traffic, flops, ops, op="gemv", dtype="fp32"):
    return time_kernel(machine, name="k", phase="forward", op=op, dtype=dtype, flops=flops, ops=ops,
                       traffic=traffic)


# ---- 1. overlapped: per-example NETtalk below 90 % of peak on every CPU of 1976-2006 ----------

ERA_CPUS = [m for m in ("vax-11-780", "vax-11-780-fpa", "vax-8600", "microvax-ii", "sun-3-260", "sun-4-260",
                        "i386-387", "decstation-3100", "i860-xr", "rs6000-530", "pentium", "pentium-pro",
                        "core2-e6600")]


def test_every_era_cpu_runs_per_example_nettalk_below_90_percent_of_peak():
    for m in ERA_CPUS:
        machine = load_machine(m)
        assert machine.kind in ("scalar", "superscalar") and 1976 <= machine.year <= 2006
        r = run_case(m, "nettalk", updates="per-example")
        assert r["fraction_of_peak"] < 0.9, (m, r["fraction_of_peak"])


def test_pentium_pro_multiply_add_holds_port_0_three_cycles():
    """x87 has no multiply-add: FMUL takes port 0 two cycles, FADD one (gcc ppro.md), so a
    product of multiply-adds runs at 2/3 of the one-operation-per-clock peak."""
    ppro = load_machine("pentium-pro")
    assert ppro.timing.params["multiply_add_cycles"] == 3
    levels = (LevelTraffic("L1d", 0, 0, None, None),)
    t = _time(ppro, KernelTraffic(0, 0, 0, 0, levels), flops=2 * 10 ** 6, ops={"fma": 10 ** 6}, op="gemm")
    assert t.compute == pytest.approx(3 * 10 ** 6 / ppro.clock_hz)
    r = run_case("pentium-pro", "nettalk", updates="per-example")
    assert r["fraction_of_peak"] < 0.8


def test_matrix_vector_step_is_bound_by_the_load_ports():
    """A gemv loads a weight per multiply-add: with one 16-B load a cycle and 4 fp32 lanes
    multiplying and adding in one cycle, the ports, not the pipes, set the time."""
    params = {"cores": 1, "mlp": 8, "vector_bytes": 16, "multiply_add_cycles": 1, "load_ports": 1}
    m = _machine("overlapped", params, peak={"fp32": 8e9})  # 4 lanes x 2 FLOPs a cycle at 1 GHz
    n = 4096  # multiply-adds, each with its own 4-B weight; plus a re-read x of as many bytes
    levels = (LevelTraffic("L1d", 8 * n, 0, None, None), LevelTraffic(MEMORY, 0, 0, 100 * GB, 100e-9))
    tr = KernelTraffic(2 * n // 16, 0, 0, 0, levels, demand_read_bytes=8 * n)
    t = _time(m, tr, flops=2 * n, ops={"fma": n})
    assert t.compute == pytest.approx(n / 4 / 1e9)  # 4 lanes, one cycle per multiply-add instruction
    assert t.terms["L1d"] == pytest.approx(8 * n / 16 / 1e9)  # twice as many loads as multiply-adds
    assert t.seconds == pytest.approx(t.terms["L1d"])
    assert t.stall["L1d"] == pytest.approx(t.terms["L1d"] - t.compute)
    # without load_ports (the old model) the same kernel ran at its peak
    old = _time(_machine("overlapped", {"cores": 1, "mlp": 8}, peak={"fp32": 8e9}), tr, flops=2 * n,
                ops={"fma": n})
    assert old.seconds == pytest.approx(2 * n / 8e9)


def test_core2_per_example_nettalk_waits_on_its_l2_and_ports():
    r = run_case("core2-e6600", "nettalk", updates="per-example")
    assert r["fraction_of_peak"] < 0.7
    assert r["memory_ratio"] > 1
    l1 = next(k for k in r["kernels"] if k["name"] == "L1.fwd")
    assert l1["bound"] in ("compute", "L1d", "L2")


def test_big_gemm_stays_near_the_peak_where_the_pipes_set_it():
    r = run_case("core2-e6600", gemm=(1024, 1024, 1024))
    assert r["fraction_of_peak"] > 0.8
    for m in ("skylake-sp", "xeon-gold-6242", "epyc-9654", "sapphire-rapids", "grace", "a64fx"):
        r = run_case(m, gemm=(2048, 2048, 2048))
        assert r["fraction_of_peak"] > 0.5, (m, r["fraction_of_peak"])


# ---- 3. per-core versus per-chip bandwidth -----------------------------------------------------

def test_a_per_core_bandwidth_serves_the_busy_cores():
    spec = LevelSpec("L2", 1 << 20, 64, 16, bandwidth=64e9, bandwidth_scope="core")
    assert spec.bandwidth_scope == "core"
    m = _machine("overlapped", {"cores": 4, "mlp": 8}, peak={"fp32": 4e15})
    levels = lambda scope, units: (  # noqa: E731
        LevelTraffic("L1d", 0, 0, None, None), LevelTraffic("L2", 64e9, 0, 64e9, None, scope),
        LevelTraffic(MEMORY, 0, 0, 100 * GB, 100e-9))
    chip = _time(m, KernelTraffic(0, 0, 0, 0, levels("chip", 4)), flops=1, ops={}, op="elementwise")
    assert chip.terms["L2"] == pytest.approx(1.0)
    four = _time(m, KernelTraffic(0, 0, 0, 0, levels("core", 4)), flops=1, ops={}, op="elementwise")
    assert four.terms["L2"] == pytest.approx(0.25)
    one = _time(m, KernelTraffic(0, 0, 0, 0, levels("core", 4), parallel_units=1), flops=1, ops={},
                op="elementwise")
    assert one.terms["L2"] == pytest.approx(1.0)


def test_profiles_state_whose_bandwidth_a_level_has():
    for m in ("pentium-pro", "core2-e6600", "skylake-sp", "xeon-gold-6242"):
        l2 = next(lv for lv in load_machine(m).levels if lv.name == "L2")
        assert l2.bandwidth and l2.bandwidth_scope == "core"


# ---- 2. vector: bank conflicts and the strip loop ----------------------------------------------

def test_cray1_bank_conflicts_only_for_strides_sharing_factors_with_16_banks():
    cray = load_machine("cray-1")
    assert cray.timing.params["banks"] == 16 and cray.timing.params["bank_busy"] == 4
    assert bank_conflicts(cray, [(1, 64), (3, 64), (7, 64)]) == 0
    assert bank_conflicts(cray, [(8, 64)]) == pytest.approx(64)  # 2 banks: 2 cycles a word
    assert bank_conflicts(cray, [(16, 64)]) == pytest.approx(3 * 64)  # 1 bank: 4 cycles a word
    assert bank_conflicts(cray, [(32, 10)]) == pytest.approx(30)


def test_vector_streams_finds_strided_strips_and_the_strip_loop():
    e = 8
    strided = LoopNest((3, 5, 64), (Access(0, (0, e), e, tensor="A"),
                                    Access(1 << 20, (0, 64 * 16 * e, 16 * e), e, tensor="B")))
    unit = LoopNest((3, 5), (Access(0, (0, e), e, tensor="A"), Access(1 << 20, (0, 64 * e), 64 * e, tensor="B")))
    loops, strides = vector_streams([strided, unit])
    assert loops == 15 + 15
    assert strides == ((16, 3 * 5 * 64),)


def test_vector_model_charges_conflicts_and_the_strip_loop():
    params = {"memory_ports": 1, "startup": 0, "chaining": True, "banks": 16, "bank_busy": 4, "strip_loop": 15}
    m = _machine("vector", params)
    levels = (LevelTraffic(MEMORY, 64 * 8, 64, 8e9, None),)
    plain = _time(m, KernelTraffic(64, 0, 0, 0, levels), flops=0, ops={})
    conflicted = _time(m, KernelTraffic(64, 0, 2, 0, levels, strides=((16, 64),)), flops=0, ops={})
    assert plain.terms[MEMORY] == pytest.approx(64 / 1e9)
    assert conflicted.terms[MEMORY] == pytest.approx(4 * 64 / 1e9)
    assert conflicted.overhead == pytest.approx(2 * 15 / 1e9)


def test_transposed_products_on_the_cray1_pay_bank_conflicts():
    """A strip of a transposed B strides by its row length: 256 words, a multiple of 16,
    so every element of it returns to the same bank."""
    cray = load_machine("cray-1")
    no_banks = dataclasses.replace(cray, timing=TimingSpec(cray.timing.model, {
        k: v for k, v in cray.timing.params.items() if k not in ("banks", "bank_busy")}))
    base = dict(updates="per-example")
    with_banks = run_case(cray, gemm=(64, 256, 256), trans_b=True, **base) if _has_trans_b() else None
    if with_banks is None:
        pytest.skip("no transposed-B case option")
    without = run_case(no_banks, gemm=(64, 256, 256), trans_b=True, **base)
    assert with_banks["seconds"] > 1.5 * without["seconds"]


def _has_trans_b() -> bool:
    try:
        run_case("cray-1", gemm=(8, 8, 8), trans_b=True)
    except Exception:  # noqa: BLE001 - an unknown option
        return False
    return True


def test_vector_machines_pay_their_strip_loop_on_per_example_nettalk():
    for m in ("cray-1", "cray-x-mp", "cray-2", "convex-c1", "cyber-205"):
        assert load_machine(m).timing.params["strip_loop"] == 15
        r = run_case(m, "nettalk", updates="per-example")
        assert r["time_by_component"]["startup"] > 0, m
