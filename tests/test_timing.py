"""The timing models against their closed forms and invariants (docs/timing.md)."""

from __future__ import annotations

import dataclasses

import pytest

from memwall.errors import InputError
from memwall.levels import LevelSpec
from memwall.profiles import Machine, MainMemory, ScheduleSpec, TimingSpec
from memwall.timing import MEMORY, KernelTraffic, LevelTraffic, time_kernel

GB = 1e9


def make_machine(model: str, *, params=None, issue=None, levels=(), bandwidth=100 * GB, latency=100e-9,
                 peak=None, kind=None) -> Machine:
    kind = kind or {"in_order": "scalar", "vector": "vector", "overlapped": "superscalar",
                    "throughput": "gpu"}[model]
    return Machine(
        id=f"test-{model}", name="test", vendor="test", year=2000, kind=kind, clock_hz=1e9,
        peak_flops=peak or {"fp32": 1e12, "bf16": 4e12}, issue_costs=dict(issue or {}),
        levels=tuple(levels), memory=MainMemory(capacity=1 << 34, latency=latency, bandwidth=bandwidth),
        timing=TimingSpec(model, dict(params or {})), schedule=ScheduleSpec("scalar", {}),
        primary_dtype="fp32",
    )


def traffic(levels, *, reads=0, writes=0, nbytes=0, inner=0, vector=0) -> KernelTraffic:
    return KernelTraffic(reads, writes, inner, vector, tuple(levels))


def mem(nbytes, fetches, machine) -> LevelTraffic:
    return LevelTraffic(MEMORY, nbytes, fetches, machine.memory.bandwidth, machine.memory.latency)


def run(machine, tr, flops=0, ops=None, op="gemm", dtype="fp32", repeat=1):
    return time_kernel(machine, name="k", phase="forward", op=op, dtype=dtype, flops=flops,
                       ops=ops or {}, traffic=tr, repeat=repeat)


def test_streaming_kernel_on_throughput_takes_bytes_over_bandwidth():
    m = make_machine("throughput", params={})
    t = run(m, traffic([mem(10 ** 9, 0, m)]), flops=1000, op="elementwise")
    assert t.seconds == pytest.approx(10 ** 9 / (100 * GB))
    assert t.bound == MEMORY
    assert t.compute + sum(t.stall.values()) == pytest.approx(t.seconds)


def test_arithmetic_only_kernel_takes_flops_over_rate():
    m = make_machine("throughput", params={})
    t = run(m, traffic([mem(0, 0, m)]), flops=4 * 10 ** 12, dtype="bf16")
    assert t.compute == pytest.approx(1.0)
    assert t.seconds == pytest.approx(1.0)  # dispatch is the step's (tests/test_dispatch.py)
    assert t.bound == "compute"
    assert sum(t.stall.values()) == 0


def test_in_order_cycles_are_the_sum_of_their_terms():
    issue = {"fadd": 4e-9, "fmul": 6e-9, "load": 2e-9, "store": 3e-9, "loop": 1e-9}
    l1 = LevelSpec("L1", 8192, 16, 2, latency=2e-9, bandwidth=None)
    m = make_machine("in_order", issue=issue, levels=[l1], latency=300e-9, bandwidth=1e12)
    tr = traffic([LevelTraffic("L1", 4000, 900, None, 2e-9), mem(1600, 100, m)],
                 reads=800, writes=200, nbytes=4000, inner=500)
    t = run(m, tr, flops=1000, ops={"fma": 400, "add": 200})
    compute = 400 * (6e-9 + 4e-9) + 200 * 4e-9 + 800 * 2e-9 + 200 * 3e-9 + 500 * 1e-9
    assert t.compute == pytest.approx(compute)
    assert t.stall[MEMORY] == pytest.approx(100 * 300e-9)
    assert t.seconds == pytest.approx(compute + 100 * 300e-9)


def test_in_order_bandwidth_is_a_floor():
    m = make_machine("in_order", issue={"fadd": 1e-9}, bandwidth=1e6, latency=0.0)
    t = run(m, traffic([mem(10 ** 6, 0, m)]), flops=10, ops={"add": 10})
    assert t.seconds == pytest.approx(1.0)
    assert t.stall[MEMORY] == pytest.approx(1.0 - 10e-9)


def test_vector_chime_with_and_without_chaining():
    params = {"memory_ports": 1, "word_bytes": 8, "startup": 10, "chaining": True}
    m = make_machine("vector", params=params, peak={"fp64": 2e9}, bandwidth=8e9)
    tr = traffic([mem(8 * 3000, 0, m)], vector=5)
    t = run(m, tr, flops=4000, dtype="fp64")  # 2000 ns arithmetic, 3000 ns of words
    assert t.compute == pytest.approx(2e-6)
    assert t.overhead == pytest.approx(50e-9)
    assert t.stall[MEMORY] == pytest.approx(1e-6)
    unchained = dataclasses.replace(m, timing=TimingSpec("vector", {**params, "chaining": False}))
    t2 = run(unchained, tr, flops=4000, dtype="fp64")
    assert t2.stall[MEMORY] == pytest.approx(3e-6)
    assert t2.seconds > t.seconds


def test_overlapped_sum_and_littles_law():
    l1 = LevelSpec("L1", 32768, 64, 8, latency=1e-9, bandwidth=64e9)
    m = make_machine("overlapped", params={"overlap": "sum", "mlp": 10}, levels=[l1],
                     bandwidth=10e9, latency=100e-9)
    tr = traffic([LevelTraffic("L1", 64e9 * 1e-3, 0, 64e9, 1e-9), mem(10 ** 7, 10 ** 6, m)])
    t = run(m, tr, flops=10 ** 6)
    # memory: max(1e7 / 1e10, 1e6 * 100 ns / 10) = max(1 ms, 10 ms) = 10 ms; L1 1 ms; sum 11 ms
    assert t.seconds == pytest.approx(11e-3, rel=1e-9)
    assert t.stall[MEMORY] / t.stall["L1"] == pytest.approx(10.0)
    assert t.compute + sum(t.stall.values()) == pytest.approx(t.seconds)


@pytest.mark.parametrize("model", ["in_order", "overlapped", "throughput", "vector"])
def test_more_bandwidth_or_less_latency_is_never_slower(model):
    params = {"memory_ports": 1, "startup": 4, "overlap": "max", "mlp": 4}
    base = make_machine(model, params=params, issue={"fadd": 1e-9, "fmul": 1e-9, "load": 1e-9},
                        peak={"fp32": 1e10, "fp64": 1e10})
    tr_of = lambda m: traffic([mem(10 ** 7, 10 ** 5, m)], reads=10 ** 5, nbytes=10 ** 7, vector=100)  # noqa: E731
    previous = None
    for factor in (0.1, 1, 10, 100):
        m = dataclasses.replace(base, memory=MainMemory(1 << 34, 100e-9 / factor, 1e9 * factor))
        t = run(m, tr_of(m), flops=10 ** 6, ops={"fma": 5 * 10 ** 5}, dtype="fp32")
        assert t.compute + t.overhead + sum(t.stall.values()) == pytest.approx(t.seconds)
        if previous is not None:
            assert t.seconds <= previous * (1 + 1e-12)
        previous = t.seconds


def test_repeat_scales_every_term():
    m = make_machine("throughput", params={})
    one = run(m, traffic([mem(10 ** 6, 0, m)]), flops=10 ** 9)
    many = run(m, traffic([mem(10 ** 6, 0, m)]), flops=10 ** 9, repeat=96)
    assert many.seconds == pytest.approx(96 * one.seconds)
    assert many.bytes[MEMORY] == 96 * 10 ** 6
    assert many.flops == 96 * 10 ** 9


def test_missing_parameter_is_named():
    m = make_machine("vector", params={})
    with pytest.raises(InputError, match="memory_ports"):
        run(m, traffic([mem(8, 0, m)]), flops=2, dtype="fp32")


def test_every_model_a_profile_may_name_has_a_function():
    from memwall.profiles import TIMING_MODELS
    from memwall.timing import MODELS

    assert sorted(MODELS) == sorted(TIMING_MODELS)


@pytest.mark.parametrize("model", ["in_order", "overlapped", "throughput", "vector"])
def test_terms_and_stall_name_every_level_in_order(model):
    params = {"memory_ports": 1, "overlap": "sum", "mlp": 2}
    l1 = LevelSpec("L1", 8192, 64, 2, latency=2e-9, bandwidth=50e9)
    m = make_machine(model, params=params, issue={"fadd": 1e-9}, levels=[l1])
    tr = traffic([LevelTraffic("L1", 10 ** 6, 10 ** 4, 50e9, 2e-9), mem(10 ** 5, 10 ** 3, m)],
                 reads=10 ** 4, nbytes=10 ** 6, vector=10)
    t = run(m, tr, flops=10 ** 5, ops={"add": 10 ** 5}, repeat=3)
    assert list(t.terms) == list(t.stall) == ["L1", MEMORY]
    assert all(v >= 0 for v in (*t.terms.values(), *t.stall.values()))
    # terms are one run's; stall, compute and overhead are scaled by repeat
    one = run(m, tr, flops=10 ** 5, ops={"add": 10 ** 5})
    assert t.terms == one.terms
    assert t.seconds == pytest.approx(3 * one.seconds)


def test_in_order_terms_are_each_levels_latency_or_its_floor():
    l1 = LevelSpec("L1", 8192, 16, 2, latency=2e-9, bandwidth=None)
    l2 = LevelSpec("L2", 65536, 16, 4, latency=20e-9, bandwidth=1e9)
    m = make_machine("in_order", issue={"fadd": 1e-9}, levels=[l1, l2], latency=300e-9, bandwidth=1e6)
    tr = traffic([LevelTraffic("L1", 4000, 900, None, 2e-9), LevelTraffic("L2", 1600, 50, 1e9, 20e-9),
                  mem(1000, 10, m)], reads=1000, nbytes=4000)
    t = run(m, tr, flops=100, ops={"add": 100})
    # L1's hits are in the issue cost; L2 waits its latency; memory's bandwidth floor binds
    assert t.terms == pytest.approx({"L1": 0.0, "L2": max(50 * 20e-9, 1600 / 1e9), MEMORY: 1000 / 1e6})
    serial = 100e-9 + 50 * 20e-9 + 10 * 300e-9
    assert t.stall["L2"] == pytest.approx(50 * 20e-9)
    assert t.stall[MEMORY] == pytest.approx(10 * 300e-9 + (1000 / 1e6 - serial))
    assert t.seconds == pytest.approx(1000 / 1e6)


def test_throughput_splits_the_excess_over_the_levels_above_compute():
    l2 = LevelSpec("L2", 1 << 20, 128, 16, latency=200e-9, bandwidth=2e12)
    m = make_machine("throughput", params={}, levels=[l2], bandwidth=1e12)
    # compute 1 ms; L2 3 ms; memory 5 ms: data 5 ms, excess 4 ms split 2:4
    tr = traffic([LevelTraffic("L2", 6e9, 0, 2e12, 200e-9), mem(5e9, 0, m)])
    t = run(m, tr, flops=10 ** 9)
    assert t.compute == pytest.approx(1e-3)
    assert t.stall["L2"] == pytest.approx(4e-3 * 2 / 6)
    assert t.stall[MEMORY] == pytest.approx(4e-3 * 4 / 6)
    assert t.seconds == pytest.approx(5e-3)
    assert t.bound == MEMORY


def test_unknown_model_and_overlap_are_input_errors():
    m = make_machine("throughput")
    bad = dataclasses.replace(m, timing=TimingSpec("quantum", {}))
    with pytest.raises(InputError, match="unknown timing model 'quantum'"):
        run(bad, traffic([mem(8, 0, m)]), flops=2)
    odd = make_machine("overlapped", params={"overlap": "min"})
    with pytest.raises(InputError, match="overlap must be 'sum' or 'max'"):
        run(odd, traffic([mem(8, 0, odd)]), flops=2)


def test_a_kernel_is_labelled_by_the_resource_that_binds_it_not_by_the_larger_share():
    """A skinny product on the V100: its memory term is 1.77x its arithmetic, but overlap
    leaves an exposed stall smaller than the compute share; the label follows the terms, as
    the step's verdict does (docs/timing.md, "A kernel's bound")."""
    from memwall.simulation import Case, run_case

    r = run_case(Case(machine="v100-sxm2", gemm=(4096, 16, 4096), dtype="fp16"))
    (k,) = r["kernels"]
    split = k["time_by_component"]
    assert split["compute"] > split["memory"]  # the split alone would say compute
    assert k["memory_ratio"] > 1
    assert k["bound"] == "memory" and k["bound_class"] == "memory" == r["bound_class"]
