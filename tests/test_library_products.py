"""Products as libraries run them (issue 26, item 3): tile quantization, the library's tile
shapes, split-K and its workspace, on small shapes (docs/timing.md, "throughput")."""

from memwall.profiles import load_machine
from memwall.timing import KernelTraffic, KernelWork, LevelTraffic, served_by_tiles, throughput
from memwall.workloads.lowering import L2Cost, product_tiling

P = {"tile_m": 128, "tile_n": 128, "tile_k": 32, "units": 80}


def test_tile_quantization_n136_costs_a_second_tile_column():
    # MMBG's example: N = 128 fits one tile column; N = 136 needs a second, 6.25 % useful
    at = product_tiling((27648, 128, 4096), 1, "fp16", P)
    past = product_tiling((27648, 136, 4096), 1, "fp16", P)
    assert (at.tiles, past.tiles) == (216, 432)
    assert at.padding((27648, 128, 4096)) == 1
    assert abs(past.padding((27648, 136, 4096)) - 256 / 136) < 1e-12


def test_library_picks_the_tile_that_wastes_least():
    # N = 16 in a 128-wide tile computes 8x the product; a 128x32 tile (CUTLASS SIMT) 2x
    p = {**P, "tile_shapes": {"default": [[128, 128], [128, 32]], "fp16": [[128, 128]]}}
    assert (product_tiling((4096, 16, 4096), 1, "fp32", p).tn) == 32
    assert (product_tiling((4096, 16, 4096), 1, "fp16", p).tn) == 128  # no narrower tile for fp16


def test_decode_sized_m_splits_k_to_busy_more_units():
    # M = 8, N = 1024: 8 output tiles on 80 units; split-K cuts K so 80 units share it
    t = product_tiling((8, 1024, 4096), 1, "fp16", P)
    assert (t.tiles // t.splits, t.splits, t.tiles) == (8, 10, 80)
    assert 16 <= t.padding((8, 1024, 4096)) < 16.1  # an 8-row product computes whole 128-row tiles
    big = product_tiling((4096, 4096, 4096), 1, "fp16", P)
    assert big.splits == 1


def _time(machine, dims, levels, dtype="fp16"):
    m, n, k = dims
    traffic = KernelTraffic(0, 0, 0, 0, levels, parallel_units=product_tiling(
        dims, 1, dtype, dict(machine.schedule.params)).tiles)
    work = KernelWork("gemm", dtype, 2 * m * n * k, {}, dims)
    return throughput(machine, work, served_by_tiles(machine, work, traffic))  # as time_kernel does


def test_padded_tiles_cost_compute_time_on_the_machine():
    v100 = load_machine("v100-sxm2")
    free = (LevelTraffic("memory", 0, 0, None, None),)
    # 1280 x 1024 is 80 tiles of 128 x 128, one wave on the 80 SMs; 8 more columns need
    # a ninth tile column (or narrower tiles): at least 5/4 of the busiest SM's work
    at = _time(v100, (1280, 1024, 4096), free, "fp32").compute
    past = _time(v100, (1280, 1032, 4096), free, "fp32").compute
    assert past > at * 1.2


def test_split_k_workspace_is_traffic():
    v100 = load_machine("v100-sxm2")
    levels = (LevelTraffic("L2", 1 << 20, 0, 2e12, None), LevelTraffic("memory", 1 << 20, 0, 900e9, None))
    tiling = product_tiling((64, 64, 8192), 1, "fp16", dict(v100.schedule.params))
    assert tiling.splits == 80  # one 64x64 tile: K cut over the 80 SMs
    t = _time(v100, (64, 64, 8192), levels)
    # 80 fp32 partials of 64 x 64 written and read back (2.6 MB) fit the 6 MiB L2: its traffic,
    # beside the one tile's reads of A and B (each once: one tile row, one tile column) and C
    served = 64 * 8192 * 2 + 8192 * 64 * 2 + 64 * 64 * 2
    assert abs(t.terms["L2"] - (served + 2 * 4 * 80 * 64 * 64) / 2e12) < 1e-15
    assert t.terms["memory"] == (1 << 20) / 900e9
    big = _time(v100, (4096, 4096, 64), levels)  # hundreds of tiles: no split, no workspace
    # its L2 serves every tile's own reads and the output (docs/timing.md), nothing more
    assert product_tiling((4096, 4096, 64), 1, "fp16", dict(v100.schedule.params)).splits == 1
    tiles = [product_tiling((4096, 4096, 64), 1, "fp16", dict(v100.schedule.params), L2Cost(b, 2)) for b in (1e-9, 1e9)]
    served = [t.l2_reads((4096, 4096, 64), 1, 2) + 4096 * 4096 * 2 for t in tiles]
    assert min(served) / 2e12 <= big.terms["L2"] <= max(served) / 2e12
