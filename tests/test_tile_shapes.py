"""The library tile sets the GPU profiles state ([schedule] tile_shapes, issue 26 item 3):
each loads, is what the product tiling picks from, and passes down to the profiles that
inherit it (docs/timing.md, tile quantization)."""

import pytest

from memwall.profiles import load_machine
from memwall.timing import KernelTraffic, KernelWork, LevelTraffic, throughput
from memwall.workloads.lowering import params_of, product_tiling, tile_shapes

STATED = ("p100-sxm2", "v100-sxm2", "a100-sxm", "h100-sxm", "b200")


def _params(machine_id):
    return params_of(load_machine(machine_id).schedule)


@pytest.mark.parametrize("machine_id", STATED)
def test_each_stated_tile_set_loads_with_its_source(machine_id):
    machine = load_machine(machine_id)
    assert isinstance(machine.schedule.params["tile_shapes"], dict)
    figure = machine.provenance["schedule.tile_shapes"]
    assert figure.source in machine.sources and figure.status in ("verified", "secondary")
    for dtype in ("fp16", "bf16", "fp32", "fp64"):
        shapes = tile_shapes(_params(machine_id), dtype)
        assert shapes and all(tm > 0 and tn > 0 for tm, tn in shapes)


def test_a100_bf16_n136_pads_past_the_first_tile_column():
    # MMBG's example on the A100: N = 128 fills one 128-wide column of 256 x 128 tiles,
    # one wave on the 108 SMs; N = 136 needs more columns than its width, none of
    # CUTLASS's SM80 tiles fits it exactly, so the busiest SM computes more
    p = _params("a100-sxm")
    at = product_tiling((27648, 128, 4096), 1, "bf16", p)
    past = product_tiling((27648, 136, 4096), 1, "bf16", p)
    assert (at.tm, at.tn, at.tiles, at.padding((27648, 128, 4096))) == (256, 128, 108, 1)
    assert -(-136 // past.tn) * past.tn > 136  # a second (or third) column, partly padding
    assert past.padding((27648, 136, 4096)) > 1.3
    assert past.waves * past.tm * past.tn > at.waves * at.tm * at.tn


def test_the_stated_tiles_decide_the_product_time():
    # MMBG's wave-quantization example on the A100: M = 2304, N = 1536 is 9 x 12 = 108
    # tiles of 256 x 128, one wave on 108 SMs; N = 1544 has no tiling as good
    a100 = load_machine("a100-sxm")
    free = (LevelTraffic("memory", 0, 0, None, None),)

    def compute(n):
        dims = (2304, n, 4096)
        traffic = KernelTraffic(0, 0, 0, 0, free, parallel_units=product_tiling(dims, 1, "bf16", params_of(a100.schedule)).tiles)
        return throughput(a100, KernelWork("gemm", "bf16", 2 * 2304 * n * 4096, {}, dims), traffic).compute

    one_wave = product_tiling((2304, 1536, 4096), 1, "bf16", params_of(a100.schedule))
    assert (one_wave.tm, one_wave.tn, one_wave.tiles) == (256, 128, 108)
    # 8 more columns: the library's best shape still computes >= 1/8 more on the busiest SM
    assert compute(1544) > compute(1536) * 1.1


def test_dtype_picks_its_own_list():
    # fp32 products on the A100 run CUTLASS's SIMT kernels (128 x 32 exists), fp16 the
    # tensor-core ones (64 x 64 smallest): a 16-wide product pads less in fp32
    p = _params("a100-sxm")
    assert (128, 32) in tile_shapes(p, "fp32") and (128, 32) not in tile_shapes(p, "bf16")
    assert product_tiling((4096, 16, 4096), 1, "fp32", p).tn == 32
    assert product_tiling((4096, 16, 4096), 1, "bf16", p).tn == 64
    h100 = _params("h100-sxm")
    assert min(tm * tn for tm, tn in tile_shapes(h100, "bf16")) == 128 * 128  # 64 x 128 pruned for 16-bit
    assert (64, 128) in tile_shapes(h100, "fp8")


@pytest.mark.parametrize("child, base", [("h200", "h100-sxm"), ("gb300", "b200")])
def test_a_profile_that_inherits_inherits_the_tiles(child, base):
    for dtype in ("bf16", "fp8", "fp32"):
        assert tile_shapes(_params(child), dtype) == tile_shapes(_params(base), dtype)
    assert _params(child)["tile_shapes"] == _params(base)["tile_shapes"]


def test_a_product_of_one_row_is_not_padded_to_a_tile():
    """cuBLAS runs an M = 1 product as a split-K dot and a reduction (onnxruntime PR #28986):
    the A100's smallest tensor-op tile would make batch-1 decode compute-bound otherwise."""
    from memwall.simulation import Case, run_case

    one = run_case(Case(machine="a100-sxm", gemm=(1, 4096, 4096), dtype="bf16"))
    assert one["bound_class"] == "memory"


def test_a_tile_set_for_an_unknown_dtype_is_refused_naming_the_field(tmp_path):
    from memwall.data import era_data_dir
    from memwall.errors import InputError
    from memwall.profiles import load_machine_file

    text = (era_data_dir() / "machines" / "h100-sxm.toml").read_text()
    start = text.index("tile_shapes = ")
    end = text.index("\n", start)
    bad = text[:start] + 'tile_shapes = { value = { default = [[64, 64]], fp99 = [[64, 64]] }, source = "a b", ' \
        'status = "estimate", derivation = "d" }' + text[end:]
    path = tmp_path / "m.toml"
    path.write_text(bad.replace('id = "h100-sxm"', 'id = "m"'))
    with pytest.raises(InputError) as err:
        load_machine_file(path)
    assert err.value.field == "schedule.tile_shapes" and "fp99" in err.value.reason


def test_equal_arithmetic_goes_to_the_tiling_without_a_reduction():
    # 1024^3 fp8 on the H100 (Azure's cuBLASLt row): 64 x 128 tiles unsplit and 256 x 256
    # tiles in 8 K slices both give 128 tiles of 8.4 M multiply-adds; the split one also
    # writes and reads back 8 fp32 partial outputs (64 MiB), so the unsplit one is picked
    from memwall.workloads.lowering import Tiling, split_bytes

    dims = (1024, 1024, 1024)
    picked = product_tiling(dims, 1, "fp8", _params("h100-sxm"))
    assert (picked.tm, picked.tn, picked.splits, picked.tiles) == (64, 128, 1, 128)
    split = Tiling(256, 256, 8, 128, 1, 128)
    assert picked.waves * 64 * 128 * picked.k_slice == split.waves * 256 * 256 * split.k_slice  # a tie
    assert (split_bytes(picked, dims, 1), split_bytes(split, dims, 1)) == (0, 64 << 20)
    # with no split among the tied, the larger tile (fewer operand loads) still wins
    unsplit = product_tiling((4096, 4096, 4096), 1, "fp8", _params("h100-sxm"))
    assert unsplit.splits == 1 and unsplit.tm * unsplit.tn == 256 * 256


@pytest.mark.parametrize("machine_id, dtype, dims", [
    ("v100-sxm2", "bf16", (1, 12288, 4096)), ("v100-sxm2", "bf16", (1, 6144, 4096)),
    ("a100-sxm", "fp8", (1, 8192, 28672)), ("h100-sxm", "bf16", (1, 4096, 14336)),
])
def test_a_product_of_one_row_picks_the_tiling_its_time_is_shortest_with(machine_id, dtype, dims):
    # An M = 1 product is not padded to a tile, so its arithmetic takes ceil(tiles / units)
    # waves of its real work shared over the tiles (timing.throughput); the tiling picked
    # is the one that time is shortest with. On the V100 a 32 x 128 tile (96 tiles on 80
    # SMs: a second wave of 16) was picked by its padded tile, where 128 x 32's 384 tiles
    # take 5 waves: 1.6x the arithmetic time
    a = load_machine(machine_id)
    free = (LevelTraffic("memory", 0, 0, None, None),)

    def compute(tiling):
        traffic = KernelTraffic(0, 0, 0, 0, free, parallel_units=tiling.tiles)
        return throughput(a, KernelWork("gemv", dtype, 2 * dims[0] * dims[1] * dims[2], {}, dims), traffic).compute

    p = params_of(a.schedule)
    picked = product_tiling(dims, 1, dtype, p)
    alone = [product_tiling(dims, 1, dtype, {**p, "tile_shapes": {dtype: [shape]}}) for shape in tile_shapes(p, dtype)]
    assert compute(picked) == pytest.approx(min(map(compute, alone)))
