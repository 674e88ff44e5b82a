"""A 16-way ordered level whose ways outgrow the host's caches compares its tags with
AVX-512 where the host has it (csim/_csim.pyx, memwall_find16_avx512), and such a level
alone (a GPU's L2) replays its runs of accesses in memwall_replay_o16: the same counts and
the same cache state as the scalar loop, bit for bit, on every path that reaches such a level; a tag that matches only an
invalid way (line 0 in an empty set: every invalid way's tag is 0) or only a stamp's bits
is a miss."""

from __future__ import annotations

import numpy as np
import pytest

from memwall import _csim
from memwall.engine import Hierarchy
from memwall.levels import LevelSpec
from memwall.streams import Access, LoopNest

HAS_SIMD = _csim.SIMD_TAG_COMPARE

# Ordered 16-way levels whose ways take 1 MiB or more (16 bytes a way: 64 Ki lines), where
# the vector compare runs: a first level alone, or below the first.
HIERARCHIES = {
    "a GPU's L2 alone, non-pow2 sets": [LevelSpec("L2", 10 << 20, 128, 16)],
    "a level alone, pow2 sets": [LevelSpec("L2", 8 << 20, 128, 16)],
    "16 ways below a small first level": [LevelSpec("L1", 2048, 64, 4), LevelSpec("L2", 4 << 20, 64, 16)],
    "a large fifo first level alone": [LevelSpec("L1", 12 << 20, 128, 16, policy="fifo")],
    "three levels, the vector compare at the last": [LevelSpec("L1", 4096, 64, 8), LevelSpec("L2", 32768, 64, 16),
                                                     LevelSpec("L3", 6 << 20, 64, 16)],
}


@pytest.fixture
def simd_restored():
    yield
    _csim._test_simd16(True)


def traffic(seed: int, n: int, sets: int, line: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` accesses: half to 40 lines in each of 64 sets (so those sets fill and evict),
    half to the first 2 x ``sets`` lines (small line numbers: a lookup's line then equals
    some way's stamp, which counts up by 2 per touch from 2, or is 0)."""
    rng = np.random.default_rng(seed)
    crowded = rng.integers(0, 64, n) + sets * rng.integers(0, 40, n)
    small = rng.integers(0, 2 * sets, n)
    lines = np.where(rng.random(n) < 0.5, crowded, small)
    addr = (lines * line + rng.integers(0, line, n)).astype(np.uint64)
    size = np.where(rng.random(n) < 0.2, rng.integers(64, 600, n), rng.integers(1, 9, n)).astype(np.uint32)
    is_write = (rng.random(n) < 0.3).astype(np.uint8)
    return addr, size, is_write


def run(levels: list[LevelSpec], simd: bool) -> tuple[list, int | None]:
    assert _csim._test_simd16(simd) == (simd and HAS_SIMD)
    h = Hierarchy(levels)
    assert h._engine._test_simd_tags(len(levels) - 1) == (simd and HAS_SIMD)
    line = levels[-1].line
    sets = levels[-1].sets
    for seed in range(3):
        h.replay(*traffic(seed, 30_000, sets, line))
    # whole lines written from their first byte (allocated without a fetch), and runs of lines
    rng = np.random.default_rng(7)
    lines = rng.integers(0, 3 * sets, 20_000)
    h.replay((lines * line).astype(np.uint64), rng.choice([line, 2 * line, 5 * line], 20_000).astype(np.uint32),
             (rng.random(20_000) < 0.6).astype(np.uint8))
    # a loop nest: the first level's memo and the multi-line runs
    h.replay_nest(LoopNest((40, 64), (Access(0, (line * 37, line), 3 * line, tensor="a"),
                                     Access(1 << 20, (0, line), 8, is_write=True, tensor="b"))))
    digest = h.state_digest()
    h.flush()
    return [vars(c) for c in h.counters().levels], digest


@pytest.mark.skipif(not HAS_SIMD, reason="this host has no AVX-512F: only the scalar loop runs here")
@pytest.mark.parametrize("name", list(HIERARCHIES))
def test_simd_and_scalar_lookups_count_and_leave_the_same(name, simd_restored):
    scalar = run(HIERARCHIES[name], simd=False)
    assert scalar == run(HIERARCHIES[name], simd=True)
    last = scalar[0][-1]
    assert last["read_misses"] > 1000 and last["writebacks"] > 100 and last["reads"] > last["read_misses"]


@pytest.mark.parametrize("simd", [False, True])
def test_line_zero_in_an_empty_set_misses(simd, simd_restored):
    """Every invalid way's tag is 0: line 0 matches all 16 of them and must still miss."""
    _csim._test_simd16(simd)
    h = Hierarchy([LevelSpec("L2", 10 << 20, 128, 16)])
    assert h._engine._test_simd_tags(0) == (simd and HAS_SIMD)
    h.replay(np.array([0, 0, 128 * h.levels[0].sets], dtype=np.uint64), np.array([8, 8, 8], dtype=np.uint32),
             np.zeros(3, dtype=np.uint8))
    c = h.counters().levels[0]
    assert (c.reads, c.read_misses) == (3, 2)


def test_the_vector_compare_is_kept_to_levels_the_host_cannot_hold(simd_restored):
    """A 16-way level of 256 KiB of ways (a 1 MiB cache of 64 B lines) scans; 8 ways never
    take the vector compare."""
    _csim._test_simd16(True)
    h = Hierarchy([LevelSpec("L1", 32768, 64, 8), LevelSpec("L2", 1 << 20, 64, 16), LevelSpec("L3", 8 << 20, 128, 8)])
    assert [h._engine._test_simd_tags(lv) for lv in range(3)] == [False, False, False]
