"""The engine's cache state as a whole (issue 31's exact reuse): its digest says when two
hierarchies will count any later trace alike, and a copy counts as the original."""

from __future__ import annotations

import numpy as np
import pytest

from memwall.engine import Hierarchy
from memwall.errors import InputError
from memwall.levels import LevelSpec

LEVELS = [LevelSpec("L1", 4096, 64, 4), LevelSpec("L2", 32768, 64, 8)]


def _trace(seed: int, n: int = 20_000, span: int = 1 << 17, writes: float = 0.3):
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, span // 8, n).astype(np.uint64) * 8
    return addr, np.full(n, 8, np.uint32), (rng.random(n) < writes).astype(np.uint8)


def _delta(h: Hierarchy, trace) -> dict:  # noqa: ANN001
    mark = h.snapshot()
    h.replay(*trace)
    return h.since(mark).as_dict()


def test_equal_digests_mean_equal_counts_from_then_on_whatever_came_before():
    a, b = Hierarchy(LEVELS), Hierarchy(LEVELS)
    b.replay(*_trace(1))  # a history of its own
    common = _trace(2, n=50_000)
    a.replay(*common)
    b.replay(*common)
    assert a.state_digest() == b.state_digest()  # the common trace washed out b's history
    later = _trace(3)
    assert _delta(a, later) == _delta(b, later)


def test_a_digest_tells_apart_what_later_counts_would_see():
    a, b = Hierarchy(LEVELS), Hierarchy(LEVELS)
    assert a.state_digest() == b.state_digest()  # both empty
    a.replay(np.array([64], np.uint64), np.array([8], np.uint32), np.array([0], np.uint8))
    b.replay(np.array([64], np.uint64), np.array([8], np.uint32), np.array([1], np.uint8))
    assert a.state_digest() != b.state_digest()  # the same line, dirty in b: a write-back to come
    c, d = Hierarchy(LEVELS), Hierarchy(LEVELS)
    lines = np.array([0, 4096, 8192], np.uint64)  # one L1 set
    size, read = np.full(3, 8, np.uint32), np.zeros(3, np.uint8)
    c.replay(lines, size, read)
    d.replay(lines[[1, 0, 2]], size, read)
    assert c.state_digest() != d.state_digest()  # the same lines in another LRU order


def test_a_copied_state_counts_as_the_original_and_keeps_its_own_counters():
    a, b = Hierarchy(LEVELS), Hierarchy(LEVELS)
    a.replay(*_trace(4))
    b.copy_state_from(a)
    assert b.state_digest() == a.state_digest()
    assert b.counters().as_dict() != a.counters().as_dict()  # b replayed nothing itself
    later = _trace(5)
    assert _delta(a, later) == _delta(b, later)


def test_state_digest_and_copy_refuse_what_they_cannot_cover():
    assert Hierarchy([LevelSpec("L1", 4096, 64, 4, policy="random")]).state_digest() is None
    assert Hierarchy(LEVELS, classify=True).state_digest() is None
    with pytest.raises(InputError):
        Hierarchy(LEVELS).copy_state_from(Hierarchy(LEVELS[:1]))
