"""The recency order an ``ordered`` level keeps per set (fast LRU or FIFO, no inclusion,
2..16 ways; below the first level, or a first level whose ways take 1 MiB or more) ranks the ways exactly as their stamps do, so the victim a miss takes from it
is the one the stamps name: checked after traffic through every path that reaches such a
level (explicit arrays through the power-of-two loop and the general one, multi-line
accesses, loop nests with the first level's memo, levels below the first, the flush, a
state copied from another engine)."""

from __future__ import annotations

import numpy as np
import pytest

from memwall.engine import Hierarchy
from memwall.levels import LevelSpec
from memwall.streams import Access, LoopNest


def stamp_ranks(stamps: list[int]) -> list[int]:
    """The ways from most to least recent by stamp; invalid ways (stamp 0) last, the lowest
    way last of all (it is the first an empty set fills)."""
    return sorted(range(len(stamps)), key=lambda w: (-stamps[w], -w))


def assert_orders_match_stamps(h: Hierarchy) -> int:
    """Every ordered level's every set: its order is the stamps' ranking. Returns the
    number of ordered levels seen (a test that checked none would prove nothing)."""
    engine = h._engine
    ordered = 0
    for lv, spec in enumerate(h.levels):
        if engine._test_set_order(lv, 0) is None:
            continue
        ordered += 1
        for s in range(spec.sets):
            order = engine._test_set_order(lv, s)
            stamps = engine._test_set_stamps(lv, s)
            assert order == stamp_ranks(stamps), f"level {spec.name} set {s}: {order} vs stamps {stamps}"
            assert engine._test_victim(lv, s) == order[-1]
    return ordered


def traffic(seed: int, n: int, span: int, way_span: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` accesses in ``span`` bytes; with ``way_span`` (a level's sets x line), at 48
    lines of one way's span and 40 such spans apart: 40 lines a set, so a large level's
    sets fill and evict."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, span, n, dtype=np.uint64)
    if way_span:
        addr = (rng.integers(0, 48, n) * 128 + rng.integers(0, 40, n) * way_span).astype(np.uint64)
    # a quarter of the accesses several lines long (the multi-line path), the rest 1-8 bytes
    size = np.where(rng.random(n) < 0.25, rng.integers(64, 700, n), rng.integers(1, 9, n)).astype(np.uint32)
    is_write = (rng.random(n) < 0.3).astype(np.uint8)
    return addr, size, is_write


# A first level is ordered from 1 MiB of ways (16 bytes a way): 8 MiB at 128 B lines.
BIG = 8 << 20

HIERARCHIES = {
    "pow2 first level, 16-way below": [LevelSpec("L1", 2048, 64, 4), LevelSpec("L2", 16384, 64, 16)],
    "non-pow2 sets, 12 ways, below": [LevelSpec("L1", 1024, 64, 2), LevelSpec("L2", 3 * 2048, 64, 12)],
    "fifo, 8 ways over 2 ways": [LevelSpec("L1", 1024, 32, 2, policy="fifo"), LevelSpec("L2", 8192, 32, 8, policy="fifo")],
    "a GPU's L2 alone, 16 ways, 128 B lines, non-pow2 sets": [LevelSpec("L2", 5 * BIG // 4, 128, 16)],
    "a large first level, pow2 sets, 8 ways": [LevelSpec("L1", BIG, 128, 8), LevelSpec("L2", 2 * BIG, 128, 16)],
    "a large fifo first level alone, non-pow2 sets": [LevelSpec("L1", 3 * BIG // 2, 128, 16, policy="fifo")],
    "lines differ between levels": [LevelSpec("L1", 2048, 32, 8), LevelSpec("L2", 16384, 64, 16)],
}


@pytest.mark.parametrize("name", list(HIERARCHIES))
def test_the_order_ranks_ways_as_their_stamps_after_arrays(name):
    h = Hierarchy(HIERARCHIES[name])
    assert assert_orders_match_stamps(h) >= 1  # empty: way 0 the victim
    way_span = max(spec.sets * spec.line for spec in h.levels)
    for seed in range(3):
        h.replay(*traffic(seed, 20_000, 1 << 16))
        assert_orders_match_stamps(h)
        h.replay(*traffic(seed, 20_000, 1 << 16, way_span))
        assert_orders_match_stamps(h)
    assert max(c.writebacks for c in h.counters().levels) > 0  # dirty victims left
    h.flush()
    assert_orders_match_stamps(h)


@pytest.mark.parametrize("name", list(HIERARCHIES))
def test_the_order_ranks_ways_as_their_stamps_after_loop_nests(name):
    h = Hierarchy(HIERARCHIES[name])
    a = Access(base=0, strides=(4096, 8), size=8)  # one row: the first level's memo
    b = Access(base=1 << 20, strides=(0, 256), size=300, is_write=True)  # several lines
    c = Access(base=1 << 21, strides=(512,), size=64, rows=5, row_stride=1024, after=True)  # blocks
    h.replay_nest(LoopNest((7, 40), (a, b, c)))
    assert assert_orders_match_stamps(h) >= 1


def test_a_copied_state_brings_its_order():
    spec = HIERARCHIES["pow2 first level, 16-way below"]
    src, dst = Hierarchy(spec), Hierarchy(spec)
    src.replay(*traffic(7, 20_000, 1 << 16))
    dst.replay(*traffic(8, 5_000, 1 << 17))
    dst.copy_state_from(src)
    assert_orders_match_stamps(dst)
    more = traffic(9, 20_000, 1 << 16)
    src.replay(*more)
    dst.replay(*more)
    assert src.state_digest() == dst.state_digest()
    assert_orders_match_stamps(dst)


def test_reset_restores_the_empty_order():
    h = Hierarchy(HIERARCHIES["non-pow2 sets, 12 ways, below"])
    h.replay(*traffic(3, 5_000, 1 << 15))
    h.reset()
    assert h._engine._test_set_order(1, 0) == list(range(11, -1, -1))
    assert_orders_match_stamps(h)


def test_levels_that_keep_no_order():
    """A small first level, direct-mapped, wider than 16 ways, inclusive, random or PLRU: no
    order (the stamps' scan chooses the victim there)."""
    for spec in (LevelSpec("small L1", 32 * 1024, 64, 8), LevelSpec("dm", 1024, 32, 1), LevelSpec("wide", 32 * 64 * 32, 64, 32),
                 LevelSpec("rand", 4096, 64, 8, policy="random"), LevelSpec("plru", 4096, 64, 8, policy="plru")):
        assert Hierarchy([spec])._engine._test_set_order(0, 0) is None, spec.name
    incl = Hierarchy([LevelSpec("L1", 1024, 64, 4), LevelSpec("L2", 8192, 64, 8, inclusion="inclusive")])
    assert incl._engine._test_set_order(0, 0) is None  # back-invalidated from below
    assert incl._engine._test_set_order(1, 0) is None
