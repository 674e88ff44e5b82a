"""Each replacement policy's verbs (touch, victim, reset), one invariant per test.

The policies are the engine's four-verb interface (gem5's touch / getVictim / reset,
ChampSim's update_replacement_state / find_victim): these tests call the verbs on one
set through the engine's ``_test_*`` hooks and through ordinary replays, and each is
named after what it protects. The whole-hierarchy comparison with the reference model
is in test_engine.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference_model import splitmix64

from memwall.engine import Hierarchy
from memwall.levels import LevelSpec

LINE = 64
POLICIES = ["lru", "fifo", "random", "plru"]


def one_set(ways: int, policy: str, seed: int = 1) -> Hierarchy:
    """A single-set level: line k of the trace is address k * LINE, all in set 0."""
    return Hierarchy([LevelSpec("L1", ways * LINE, LINE, ways, policy=policy, seed=seed)])


def read(h: Hierarchy, *lines: int) -> None:
    for line in lines:
        h.replay(np.array([line * LINE], np.uint64), np.array([1], np.uint32), np.array([0], np.uint8))


def write(h: Hierarchy, *lines: int) -> None:
    for line in lines:
        h.replay(np.array([line * LINE], np.uint64), np.array([1], np.uint32), np.array([1], np.uint8))


def lines_of(h: Hierarchy, s: int = 0) -> list[int | None]:
    return [line for line, _ in h._engine._test_set_snapshot(0, s)]


def victim(h: Hierarchy, s: int = 0) -> int:
    return h._engine._test_victim(0, s)


# ------------------------------------------------------------------ every policy
@pytest.mark.parametrize("policy", POLICIES)
def test_victim_is_lowest_invalid_way_while_set_not_full(policy):
    h = one_set(8, policy)
    for k in range(8):
        assert victim(h) == k
        read(h, 100 + k)
    assert lines_of(h) == [100 + k for k in range(8)]


@pytest.mark.parametrize("policy", POLICIES)
def test_miss_installs_in_the_victim_way(policy):
    # The victim is asked of a twin with the same history (asking the random policy draws).
    h = one_set(4, policy, seed=9)
    for line in range(40):
        twin = one_set(4, policy, seed=9)
        read(twin, *range(line))
        way = victim(twin)
        read(h, line)
        assert lines_of(h)[way] == line


@pytest.mark.parametrize("policy", POLICIES)
def test_reset_empties_every_set(policy):
    def build() -> Hierarchy:
        return Hierarchy([LevelSpec("L1", 4 * 4 * LINE, LINE, 4, policy=policy, seed=5)])

    rng = np.random.default_rng(0)
    trace = (rng.integers(0, 64 * LINE, 500, dtype=np.uint64), np.full(500, 8, np.uint32),
             (rng.random(500) < 0.5).astype(np.uint8))
    h = build()
    h.replay(*trace)
    assert any(line is not None for s in range(4) for line in lines_of(h, s))
    h.reset()
    assert all(h._engine._test_set_snapshot(0, s) == [(None, False)] * 4 for s in range(4))
    assert h.counters() == build().counters()
    # Reset also restarts the clock and the generator: the trace counts as on a new engine.
    h.replay(*trace)
    fresh = build()
    fresh.replay(*trace)
    assert h.counters() == fresh.counters()
    assert all(lines_of(h, s) == lines_of(fresh, s) for s in range(4))


# ------------------------------------------------------------------------- LRU
def test_lru_victim_is_least_recently_touched():
    rng = np.random.default_rng(3)
    h = one_set(6, "lru")
    read(h, *range(6))
    recency = list(range(6))  # least recent first
    for line in rng.integers(0, 6, 200):
        read(h, int(line))
        recency.remove(int(line))
        recency.append(int(line))
        assert lines_of(h)[victim(h)] == recency[0]


def test_lru_hit_makes_line_most_recent():
    h = one_set(4, "lru")
    read(h, 0, 1, 2, 3)
    h._engine._test_touch(0, 0, 0)  # line 0 in way 0
    assert victim(h) == 1
    for way in (1, 2, 3):
        h._engine._test_touch(0, 0, way)
    assert victim(h) == 0


def test_lru_write_hit_refreshes_like_a_read():
    h = one_set(4, "lru")
    read(h, 0, 1, 2, 3)
    write(h, 0)
    assert victim(h) == 1
    assert h._engine._test_set_snapshot(0, 0)[0] == (0, True)


# ------------------------------------------------------------------------ FIFO
def test_fifo_victim_is_oldest_install():
    h = one_set(4, "fifo")
    read(h, 0, 1, 2, 3)
    for k, line in enumerate(range(4, 20)):
        assert victim(h) == k % 4
        read(h, line)


def test_fifo_hit_changes_nothing():
    h = one_set(4, "fifo")
    read(h, 0, 1, 2, 3)
    before = victim(h)
    for _ in range(3):
        read(h, 3, 2, 1, 0)
        write(h, 0)
        for way in range(4):
            h._engine._test_touch(0, 0, way)
    assert victim(h) == before == 0
    assert lines_of(h) == [0, 1, 2, 3]


# ---------------------------------------------------------------------- random
def test_random_victim_is_uniform_over_ways_for_12_way():
    h = one_set(12, "random", seed=2024)
    read(h, *range(12))
    n = 12_000
    counts = np.bincount([victim(h) for _ in range(n)], minlength=12)
    assert len(counts) == 12
    # Each way's count is binomial(n, 1/12): mean 1000, sd about 30; allow 5 sd.
    assert np.all(np.abs(counts - n / 12) < 5 * np.sqrt(n * (1 / 12) * (11 / 12))), counts


def test_random_victim_is_splitmix64_mod_ways():
    for ways in (3, 11, 12, 20):
        h = one_set(ways, "random", seed=77)
        read(h, *range(ways))
        state = 77
        for _ in range(50):
            state, out = splitmix64(state)
            assert victim(h) == out % ways


def test_random_hit_changes_nothing():
    a = one_set(5, "random", seed=8)
    b = one_set(5, "random", seed=8)
    read(a, *range(5))
    read(b, *range(5))
    read(a, 4, 3, 2, 1, 0, 0, 1)  # hits: no draw, no state change
    for way in range(5):
        a._engine._test_touch(0, 0, way)
    assert [victim(a) for _ in range(20)] == [victim(b) for _ in range(20)]
    assert lines_of(a) == lines_of(b)


def test_random_misses_evict_every_way():
    # A full 3-way set, then conflicting fills: over 200 misses each way must be a victim.
    h = one_set(3, "random", seed=1)
    read(h, 0, 1, 2)
    evicted = set()
    for line in range(3, 203):
        before = lines_of(h)
        read(h, line)
        after = lines_of(h)
        changed = [w for w in range(3) if before[w] != after[w]]
        assert changed == [after.index(line)]
        evicted.update(changed)
    assert evicted == {0, 1, 2}


# ------------------------------------------------------------------ tree-PLRU
def test_plru_victim_is_opposite_of_last_touch():
    h = one_set(8, "plru")
    read(h, *range(8))
    rng = np.random.default_rng(4)
    for way in rng.integers(0, 8, 100):
        h._engine._test_touch(0, 0, int(way))
        v = victim(h)
        # The root points away from the touched half, the next node away from its quarter...
        assert (v >= 4) != (way >= 4)
        assert v != way


def test_plru_two_ways_victim_is_the_other_way():
    h = one_set(2, "plru")
    read(h, 0, 1)
    for way in (0, 1, 1, 0, 1):
        h._engine._test_touch(0, 0, way)
        assert victim(h) == 1 - way


def test_plru_victim_follows_the_tree_bits():
    # The tree of ways-1 bits, a touch pointing every node of its path away (1 = right).
    rng = np.random.default_rng(6)
    h = one_set(8, "plru")
    read(h, *range(8))
    bits = [0] * 7
    for w in range(8):  # the fills touched ways 0..7 in order
        plru_touch(bits, 8, w)
    for way in rng.integers(0, 8, 200):
        h._engine._test_touch(0, 0, int(way))
        plru_touch(bits, 8, int(way))
        assert victim(h) == plru_victim(bits, 8)


def plru_touch(bits: list[int], ways: int, w: int) -> None:
    node, lo, n = 0, 0, ways
    while n > 1:
        half = n // 2
        if w < lo + half:
            bits[node], node = 1, 2 * node + 1
        else:
            bits[node], node, lo = 0, 2 * node + 2, lo + half
        n = half


def plru_victim(bits: list[int], ways: int) -> int:
    node, lo, n = 0, 0, ways
    while n > 1:
        half = n // 2
        if bits[node] == 0:
            node = 2 * node + 1
        else:
            node, lo = 2 * node + 2, lo + half
        n = half
    return lo
