"""A 16-way ordered level compares its tags with AVX-512 where the host has it
(csim/_csim.pyx, memwall_find16): the same counts and the same cache state as the scalar
loop, bit for bit, on every path that reaches such a level; a tag that matches only an
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

# Ordered 16-way levels: below the first, or a first level whose ways take 1 MiB or more.
HIERARCHIES = {
    "a GPU's L2 alone, non-pow2 sets": [LevelSpec("L2", 5 * (2 << 20), 128, 16)],
    "16 ways below a small first level": [LevelSpec("L1", 2048, 64, 4), LevelSpec("L2", 16384, 64, 16)],
    "a large fifo first level alone": [LevelSpec("L1", 3 << 20, 128, 16, policy="fifo")],
    "three levels, 16 ways at the two below": [LevelSpec("L1", 4096, 64, 8), LevelSpec("L2", 32768, 64, 16),
                                               LevelSpec("L3", 262144, 64, 16)],
}


@pytest.fixture
def simd_restored():
    yield
    _csim._test_simd16(True)


def traffic(seed: int, n: int, lines: int, line: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` accesses over the first ``lines`` lines: small line numbers, so that a lookup's
    line equals some way's stamp (stamps count up by 2 per touch from 2) or 0."""
    rng = np.random.default_rng(seed)
    addr = (rng.integers(0, lines, n) * line + rng.integers(0, line, n)).astype(np.uint64)
    size = np.where(rng.random(n) < 0.2, rng.integers(64, 600, n), rng.integers(1, 9, n)).astype(np.uint32)
    is_write = (rng.random(n) < 0.3).astype(np.uint8)
    return addr, size, is_write


def run(levels: list[LevelSpec], simd: bool) -> tuple[list, int | None]:
    assert _csim._test_simd16(simd) == (simd and HAS_SIMD)
    h = Hierarchy(levels)
    line = levels[0].line
    sets = max(spec.sets for spec in levels)
    for seed in range(3):
        h.replay(*traffic(seed, 30_000, 4 * sets, line))
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
    assert sum(c["writebacks"] for c in scalar[0]) > 0 and sum(c["read_misses"] for c in scalar[0]) > 0


@pytest.mark.parametrize("simd", [False, True])
def test_line_zero_in_an_empty_set_misses(simd, simd_restored):
    """Every invalid way's tag is 0: line 0 matches all 16 of them and must still miss."""
    _csim._test_simd16(simd)
    h = Hierarchy([LevelSpec("L2", 5 * (2 << 20), 128, 16)])
    h.replay(np.array([0, 0, 128 * h.levels[0].sets], dtype=np.uint64), np.array([8, 8, 8], dtype=np.uint32),
             np.zeros(3, dtype=np.uint8))
    c = h.counters().levels[0]
    assert (c.reads, c.read_misses) == (3, 2)
