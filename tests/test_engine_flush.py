"""The engine's shortcuts that a small hierarchy never exercises, held to the reference model.

* The flush of a level below the first visits only the sets marked as possibly dirty
  (the level's dirty-set bitmap): every path that dirties a way there must mark its set.
  With a handful of sets, nearly every set is marked by some other reference, so a missed
  mark goes unseen; these hierarchies have hundreds of sets below the first level, and
  traces of aligned accesses (no straddles) whose write-backs reach them only through the
  miss path of the first level's loop.
* Engine.validate checks blocks of 4,096 accesses at once: a bad access deep in a long
  trace, and addresses in the top 4 GiB that do not wrap, are told apart exactly.
"""

import numpy as np
import pytest
from reference_model import ReferenceHierarchy

from memwall.engine import Hierarchy
from memwall.errors import InputError
from memwall.levels import LevelSpec


def counts(h) -> list:
    c = h.counters()
    return [lv.__dict__ for lv in c.levels] + [c.memory.__dict__, c.accesses]


def aligned_trace(seed: int, n: int, span: int, write_frac: float):
    rng = np.random.default_rng(seed)
    addr = (rng.integers(0, span // 8, n, dtype=np.uint64) * np.uint64(8)).astype(np.uint64)
    size = np.full(n, 8, np.uint32)
    w = (rng.random(n) < write_frac).astype(np.uint8)
    return addr, size, w


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("l1_ways", [1, 2, 8])
def test_flush_of_levels_with_many_sets_matches_reference(policy, l1_ways):
    levels = [
        LevelSpec("L1", 8 * l1_ways * 64, 64, l1_ways, policy=policy),
        LevelSpec("L2", 64 * 1024, 64, 4, policy=policy),      # 256 sets
        LevelSpec("L3", 256 * 1024, 64, 16, policy=policy),    # 256 sets of 16 ways
    ]
    addr, size, w = aligned_trace(5, 6000, 1 << 20, 0.4)
    ref = ReferenceHierarchy(levels)
    ref.replay(addr, size, w)
    ref.flush()
    eng = Hierarchy(levels)
    eng.replay(addr, size, w)
    eng.flush()
    want, got = ref.counters(), eng.counters()
    for a, b in zip(want.levels, got.levels, strict=True):
        assert a.__dict__ == b.__dict__, a.name
    assert want.memory.__dict__ == got.memory.__dict__
    # a second flush writes nothing back: the first cleared every dirty way and every mark
    before = counts(eng)
    eng.flush()
    assert counts(eng) == before
    # and after a reset the same replay counts the same again (the marks were cleared)
    eng.reset()
    eng.replay(addr, size, w)
    eng.flush()
    assert [lv.__dict__ for lv in eng.counters().levels] == [lv.__dict__ for lv in want.levels]


def test_flush_by_chunks_equals_flush_at_once():
    # write-backs into the levels below arrive over several replays; one flush at the end
    levels = [LevelSpec("L1", 1024, 64, 2), LevelSpec("L2", 128 * 1024, 64, 8)]
    addr, size, w = aligned_trace(9, 8000, 1 << 19, 0.5)
    whole, parts = Hierarchy(levels), Hierarchy(levels)
    whole.replay(addr, size, w)
    for i in range(0, len(addr), 1000):
        parts.replay(addr[i:i + 1000], size[i:i + 1000], w[i:i + 1000])
    whole.flush()
    parts.flush()
    assert counts(whole) == counts(parts)
    assert whole.counters().levels[1].writebacks > 0


@pytest.mark.parametrize("bad", [0, 4095, 4096, 9999])
def test_a_bad_access_anywhere_in_a_long_trace_is_refused_before_counting(bad):
    n = 10_000
    addr = np.arange(n, dtype=np.uint64) * np.uint64(8)
    size = np.full(n, 8, np.uint32)
    w = np.zeros(n, np.uint8)
    h = Hierarchy([LevelSpec("L1", 1024, 64, 2)])
    size[bad] = 0
    with pytest.raises(InputError, match=f"access {bad}: size"):
        h.replay(addr, size, w)
    size[bad] = 8
    addr[bad] = np.uint64((1 << 64) - 4)  # 8 bytes from here wrap past 2**64
    with pytest.raises(InputError, match=f"access {bad}: address"):
        h.replay(addr, size, w)
    assert h.counters().accesses == 0
    # the top 4 GiB without a wrap is no error: the block is scanned and passes
    addr[bad] = np.uint64((1 << 64) - 8)
    h.replay(addr, size, w)
    assert h.counters().accesses == n
