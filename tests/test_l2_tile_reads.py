"""The L2 serves every tile its own operand reads (docs/timing.md, 'The L2 serves every
tile'; issue 26 item 3): the closed form of the reads, the multicast that halves the shared
operand, the pick that trades even waves for fewer reads, and what a product then takes."""

from dataclasses import replace

import pytest

from memwall.profiles import load_machine
from memwall.timing import KernelTraffic, KernelWork, LevelTraffic, served_by_tiles, throughput, tile_l2_cost
from memwall.workloads.lowering import L2Cost, Tiling, params_of, product_tiling


def test_reads_are_every_tile_its_own_rows_and_columns():
    # 4096^3 fp16 in 128 x 64 tiles: 32 tile rows, 64 tile columns; every A row is read
    # once a tile column, every B column once a tile row
    t = Tiling(128, 64, 1, 2048, 19, 4096)
    dims, e = (4096, 4096, 4096), 2
    a, b = 4096 * 4096 * e * 64, 4096 * 4096 * e * 32
    assert t.l2_reads(dims, 1, e) == a + b
    # a cluster of 2 reads the operand it shares once: the orientation that saves more
    assert t.l2_reads(dims, 1, e, multicast=2) == a / 2 + b
    # edge tiles read only the real rows: one row of tiles over M = 100 reads A once a column
    assert Tiling(128, 64, 1, 64, 1, 4096).l2_reads((100, 4096, 4096), 1, e) == 100 * 4096 * e * 64 + 4096 * 4096 * e
    # a shared operand with a single tile along its side has nobody to share with
    one_row = Tiling(128, 64, 1, 64, 1, 4096)
    assert one_row.l2_reads((100, 4096, 4096), 1, e, multicast=2) < one_row.l2_reads((100, 4096, 4096), 1, e)
    assert Tiling(128, 4096, 1, 1, 1, 64).l2_reads((128, 4096, 64), 1, e, multicast=2) == \
        Tiling(128, 4096, 1, 1, 1, 64).l2_reads((128, 4096, 64), 1, e)


def test_the_pick_trades_even_waves_for_fewer_reads_where_the_l2_is_slower():
    p = params_of(load_machine("a100-sxm").schedule)
    dims = (4096, 4096, 4096)
    work_only = product_tiling(dims, 1, "fp16", p)
    # the multiply-adds alone: the small tile that evens the waves (19 of 128 x 64)
    assert (work_only.tm * work_only.tn) <= 128 * 64
    # the A100's 271.2 TFLOP/s over its 5.4 TB/s L2: 50 FLOPs a byte
    timed = product_tiling(dims, 1, "fp16", p, L2Cost(271.2e12 / 5.4e12, 2))
    assert timed.tm * timed.tn > work_only.tm * work_only.tn
    assert timed.l2_reads(dims, 1, 2) < work_only.l2_reads(dims, 1, 2)
    # an L2 that serves any tile's reads in no time leaves the multiply-adds to decide
    free = product_tiling(dims, 1, "fp16", p, L2Cost(1e-9, 2))
    assert (free.tm, free.tn) == (work_only.tm, work_only.tn)


def _product(machine, dims, dtype="fp16"):
    m, n, k = dims
    levels = tuple(LevelTraffic(lv.name, 0, 0, lv.bandwidth, None) for lv in machine.levels if not lv.software_managed)
    levels += (LevelTraffic("memory", 0, 0, None, None),)
    tiles = product_tiling(dims, 1, dtype, params_of(machine.schedule), tile_l2_cost(machine, dtype)).tiles
    work = KernelWork("gemm", dtype, 2 * m * n * k, {}, dims)
    return throughput(machine, work, served_by_tiles(machine, work, KernelTraffic(0, 0, 0, 0, levels,
                                                                                 parallel_units=tiles)))


def test_an_a100_2048_cube_is_held_by_its_l2():
    # every tile's reads at 5.4 TB/s take longer than the arithmetic at 271.2 TFLOP/s:
    # Azure's cuBLASLt measured 221.8 TFLOP/s, the union of the waves' loads alone said 248
    a100 = load_machine("a100-sxm")
    t = _product(a100, (2048, 2048, 2048))
    assert t.terms["L2"] > t.compute
    rate = 2 * 2048**3 / max(t.compute, t.terms["L2"])
    assert 200e12 < rate < 230e12
    # a faster L2 gives the arithmetic back; the L2's rate never makes it slower
    fast = replace(a100, levels=tuple(replace(lv, bandwidth=lv.bandwidth * 10) if lv.name == "L2" else lv
                                      for lv in a100.levels))
    t_fast = _product(fast, (2048, 2048, 2048))
    assert max(t_fast.compute, t_fast.terms["L2"]) < max(t.compute, t.terms["L2"])
    assert t_fast.terms["L2"] <= t_fast.compute


@pytest.mark.parametrize("dims", [(16384, 16384, 16384), (8192, 8192, 8192)])
def test_large_products_stay_arithmetic_bound(dims):
    # a large product picks tiles big enough that the L2 keeps up
    t = _product(load_machine("a100-sxm"), dims)
    assert t.terms["L2"] < t.compute


def test_multicast_halves_the_shared_operand_on_the_h100():
    h100 = load_machine("h100-sxm")
    stated = h100.schedule.params["multicast"]
    assert stated["bf16"] == stated["fp8"] == 2 and stated["default"] == 1  # SM90 clusters; fp32 runs SM80 kernels
    assert h100.provenance["schedule.multicast"].source in h100.sources
    alone = replace(h100, schedule=replace(h100.schedule, params={**h100.schedule.params, "multicast": 1}))
    dims = (4096, 4096, 4096)
    assert _product(h100, dims, "bf16").terms["L2"] < _product(alone, dims, "bf16").terms["L2"]
    assert _product(h100, dims, "fp32").terms["L2"] == _product(alone, dims, "fp32").terms["L2"]


@pytest.mark.parametrize("bad", [0, 17, 1.5, True, {"bf17": 2}, {"bf16": 0}])
def test_a_bad_multicast_is_refused_by_name(bad, tmp_path):
    from memwall.errors import InputError
    from memwall.profiles import _multicast
    with pytest.raises(InputError, match="multicast"):
        _multicast(bad, {})


def test_the_trace_runs_the_tile_the_timing_times_and_the_replay_key_knows_it():
    from memwall.options import Case
    from memwall.simulation import run_case
    from memwall.simulation.replay import replay_key

    # the A100's 4096^3 product: the trace's tiles are the timing's (256 x 128, not the
    # 128 x 64 that evens the waves), so main memory serves that tiling's waves
    a100 = load_machine("a100-sxm")
    r = run_case(Case("a100-sxm", gemm=(4096, 4096, 4096), dtype="fp16", framework="library"), machine=a100)
    pinned = replace(a100, schedule=replace(a100.schedule, params={**a100.schedule.params, "tile_shapes": [[256, 128]]}))
    alone = run_case(Case("a100-sxm", gemm=(4096, 4096, 4096), dtype="fp16", framework="library"), machine=pinned)
    assert r["bytes"]["memory"] == alone["bytes"]["memory"] and r["seconds"] == alone["seconds"]
    # the L2's bandwidth now picks tiles, so it reaches the replay key; an H200 beside an
    # H100 still shares a bf16 step's replay, not an fp8 one (their fp8 ceilings differ)
    h100, case = load_machine("h100-sxm"), Case("h100-sxm", "gpt2-small", 2)
    assert replay_key(load_machine("h100-sxm", sets={"level.L2.bandwidth": "2 TB/s"}), case) != replay_key(h100, case)
    assert replay_key(load_machine("h200"), case) == replay_key(h100, case)
    fp8 = Case("h100-sxm", "gpt2-small", 2, dtype="fp8")
    assert replay_key(load_machine("h200"), fp8) != replay_key(h100, fp8)
