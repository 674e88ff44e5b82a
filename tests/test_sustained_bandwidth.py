"""Achievable bandwidth from sources (issue 26, part 2): ``memory.bandwidth`` is the
datasheet peak, the timing charges main memory at ``[memory] sustained`` where a profile
states it, and a what-if on the peak moves the figures stated against it (the sustained
rate and the bytes in flight) by new ÷ old peak unless the what-if sets them too, listing
every figure it moved (docs/timing.md, "Sustained bandwidth")."""

from __future__ import annotations

import tomllib

import pytest

from memwall.errors import InputError
from memwall.profiles import all_machines, load_machine
from memwall.simulation import Case, run_case

# a decode-sized product: one token through an 8192 x 8192 bf16 weight, 128 MiB read from HBM (beyond any L2)
GEMV = {"gemm": (1, 8192, 8192), "dtype": "bf16", "dispatch": "compiled"}


def _seconds(machine_id: str, sets: dict[str, str] | None = None) -> float:
    m = load_machine(machine_id, sets=sets) if sets else None
    return run_case(Case(machine=machine_id, **GEMV), machine=m)["seconds"]


def test_the_timing_charges_memory_at_the_sustained_rate_not_the_peak() -> None:
    h200 = load_machine("h200")
    assert h200.memory.bandwidth == pytest.approx(4.8e12)  # the datasheet's, unchanged
    assert h200.memory.sustained == pytest.approx(3.89e12)
    assert h200.memory.sustained_bandwidth == pytest.approx(3.89e12)
    # a profile stating none runs at its peak
    h100 = load_machine("h100-sxm")
    assert h100.memory.sustained is None and h100.memory.sustained_bandwidth == h100.memory.bandwidth
    # halving the sustained rates alone (the cap lifted) doubles a streaming product's memory time
    lifted = {"schedule.bytes_in_flight": "'1 GB'"}
    full = _seconds("h200", lifted)
    half = _seconds("h200", {**lifted, "memory.sustained": "'1.945 TB/s'", "memory.sustained_read": "'2.24 TB/s'",
                             "memory.sustained_copy": "'2.005 TB/s'"})
    assert half / full == pytest.approx(2.0, rel=0.05)


def test_the_h200_states_its_own_work_in_flight_and_is_faster_than_the_h100() -> None:
    h100, h200 = load_machine("h100-sxm"), load_machine("h200")
    assert h200.schedule.params["bytes_in_flight"] != h100.schedule.params["bytes_in_flight"]
    assert h200.provenance["schedule.bytes_in_flight"].source == "az_h200"
    # Little's law over all 132 SMs: no lower than its measured read stream needs
    cap = h200.schedule.params["units"] * h200.schedule.params["bytes_in_flight"] / h200.memory.latency
    assert cap >= h200.memory.sustained_read
    assert cap == pytest.approx(4.48e12, rel=0.01)
    # on a memory-bound product the H200 gains what its measured streams say it reads faster
    assert _seconds("h100-sxm") / _seconds("h200") > 1.2


def test_every_accelerator_states_its_work_in_flight_in_its_own_file() -> None:
    """Not inherited through ``base``: an H200 that takes the H100's figure decodes at the
    H100's speed whatever its memory."""
    for m in all_machines():
        if m.kind in ("gpu", "tpu"):
            assert m.path is not None
            own = tomllib.loads(m.path.read_text()).get("schedule", {})
            assert "bytes_in_flight" in own, m.id
            fig = m.provenance["schedule.bytes_in_flight"]
            assert fig.source and fig.status and fig.derivation, m.id


def test_a_sustained_rate_is_sourced_and_never_above_the_peak() -> None:
    for m in all_machines():
        if m.memory.sustained is not None:
            assert m.memory.sustained <= m.memory.bandwidth, m.id
            fig = m.provenance["memory.sustained"]
            assert fig.source and fig.status and fig.derivation, m.id
    with pytest.raises(InputError, match="memory.sustained"):
        load_machine("h200", sets={"memory.sustained": "'5 TB/s'"})


@pytest.mark.parametrize("machine", ["h100-sxm", "h200"])
def test_more_bandwidth_is_never_slower(machine: str) -> None:
    peak = load_machine(machine).memory.bandwidth
    times = [_seconds(machine, {"memory.bandwidth": f"'{peak * k:.6g} B/s'"}) for k in (0.5, 1.0, 2.0, 4.0)]
    # (to rounding: past 2x the L2 binds, and the same seconds may differ in the last bit)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:], strict=False)), times
    assert times[2] < times[1]  # and doubling it helps a memory-bound product


def test_a_what_if_on_the_peak_moves_the_sustained_rate_and_the_cap_and_lists_them() -> None:
    base = load_machine("h200")
    m = load_machine("h200", sets={"memory.bandwidth": "'9.6 TB/s'"})
    assert m.memory.bandwidth == pytest.approx(9.6e12)
    assert m.memory.sustained == pytest.approx(2 * base.memory.sustained)
    assert m.schedule.params["bytes_in_flight"] == pytest.approx(2 * base.schedule.params["bytes_in_flight"])
    assert "what-if" in (m.provenance["memory.sustained"].note or "")
    moved = m.what_if["moved"]
    assert set(moved) == {"memory.bandwidth", "memory.sustained", "memory.sustained_read", "memory.sustained_copy",
                          "schedule.bytes_in_flight"}
    assert moved["memory.sustained"]["from"] == pytest.approx(base.memory.sustained)
    assert moved["memory.sustained"]["to"] == pytest.approx(2 * base.memory.sustained)
    assert moved["memory.bandwidth"]["by"] == "set"
    assert m.what_if["set"] == {"memory.bandwidth": "'9.6 TB/s'"}
    # the result carries the what-if; a plain run has none
    r = run_case(Case(machine="h200", **GEMV), machine=m)
    assert r["what_if"] == m.what_if
    assert "what_if" not in run_case(Case(machine="h200", **GEMV))
    # the H100 states no sustained rate: its read and copy rates and its cap move, nothing else is listed
    h100 = load_machine("h100-sxm", sets={"memory.bandwidth": "'6.7 TB/s'"})
    assert set(h100.what_if["moved"]) == {"memory.bandwidth", "memory.sustained_read", "memory.sustained_copy",
                                          "schedule.bytes_in_flight"}
    assert h100.schedule.params["bytes_in_flight"] == pytest.approx(2 * 9.69e3)


def test_figures_the_what_if_sets_win_over_the_scaling() -> None:
    m = load_machine("h200", sets={"memory.bandwidth": "'9.6 TB/s'", "memory.sustained": "'4 TB/s'",
                                   "schedule.bytes_in_flight": "'12 kB'"})
    assert m.memory.sustained == pytest.approx(4e12)
    assert m.schedule.params["bytes_in_flight"] == pytest.approx(12e3)
    assert {k: v["by"] for k, v in m.what_if["moved"].items()} == {
        "memory.bandwidth": "set", "memory.sustained": "set", "schedule.bytes_in_flight": "set",
        "memory.sustained_read": "memory.bandwidth x 2 (new peak / old peak)",
        "memory.sustained_copy": "memory.bandwidth x 2 (new peak / old peak)"}


def test_the_memory_bandwidth_elasticity_is_that_of_the_memory() -> None:
    """The sensitivity moves the peak as --set does, so a step waiting on HBM reads about -1
    on memory.bandwidth whether the sustained rate or the Little's-law cap binds it."""
    r = run_case(Case(machine="h200", **GEMV))
    assert r["bound"] == "memory.bandwidth"
    assert r["sensitivity"]["memory.bandwidth"] < -0.8


# ---- the read/write mix (docs/timing.md, "Sustained bandwidth") ---------------------------


def test_the_mix_of_reads_and_writes_sets_the_rate_between_the_measured_streams() -> None:
    v100 = load_machine("v100-sxm2").memory
    read, copy, store = v100.sustained_read, v100.sustained_copy, v100.sustained
    assert (read, copy, store) == (pytest.approx(866e9), pytest.approx(802e9), pytest.approx(895e9))
    assert v100.sustained_for(0.0) == pytest.approx(read)
    assert v100.sustained_for(0.5) == pytest.approx(copy)
    assert v100.sustained_for(1.0) == pytest.approx(store)
    # 1/B linear in the written share: STREAM's triad (w = 1/3) lands within 1 % of gpu-benches' 814 GB/s
    assert 1 / v100.sustained_for(1 / 3) == pytest.approx((1 / 3) / read + (2 / 3) / copy)
    assert v100.sustained_for(1 / 3) == pytest.approx(814e9, rel=0.011)
    # a profile that states only sustained is charged it at every mix; none at all: the peak
    mi250x, b200 = load_machine("mi250x").memory, load_machine("b200").memory
    assert mi250x.sustained_read is None and mi250x.sustained_copy is None and mi250x.sustained is not None
    assert all(mi250x.sustained_for(w) == pytest.approx(mi250x.sustained) for w in (0, 0.2, 0.5, 0.9, 1))
    assert b200.sustained is None and b200.sustained_read is None and b200.sustained_copy is None
    assert b200.sustained_for(0.3) == pytest.approx(b200.bandwidth)


def test_a_read_only_product_on_the_a100_is_charged_its_read_stream_not_its_store_stream() -> None:
    lifted = {"schedule.bytes_in_flight": "'1 GB'"}  # the Little's-law cap out of the way
    read = _seconds("a100-sxm", lifted)
    as_store = _seconds("a100-sxm", {**lifted, "memory.sustained_read": "'1.89 TB/s'",
                                     "memory.sustained_copy": "'1.89 TB/s'"})
    assert read / as_store == pytest.approx(1.89 / 1.73, rel=0.03)


def test_the_mix_rates_are_sourced_never_above_the_peak_and_follow_a_what_if() -> None:
    for m in all_machines():
        for name in ("sustained_read", "sustained_copy"):
            rate = getattr(m.memory, name)
            if rate is not None:
                assert rate <= m.memory.bandwidth, m.id
                fig = m.provenance[f"memory.{name}"]
                assert fig.source and fig.status and fig.derivation, m.id
    with pytest.raises(InputError, match="memory.sustained_copy"):
        load_machine("v100-sxm2", sets={"memory.sustained_copy": "'1 TB/s'"})
    doubled = load_machine("a100-sxm", sets={"memory.bandwidth": "'4078 GB/s'"})
    assert doubled.memory.sustained_read == pytest.approx(2 * 1.73e12)
    assert doubled.memory.sustained_copy == pytest.approx(2 * 1.73e12)
