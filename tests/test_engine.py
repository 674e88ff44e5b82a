"""The Cython engine against the reference model, the worked example, and bad input.

CI reruns this file against a debug build (MEMWALL_CYTHON_DEBUG=1: bounds checks on).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_model import ReferenceHierarchy

from memwall import _csim
from memwall.engine import Hierarchy, HierarchyCounters, LevelCounters, MemoryCounters
from memwall.errors import InputError
from memwall.levels import LevelSpec
from memwall.streams import Access, LoopNest

HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lv(name, size, line, ways, **kw):
    return LevelSpec(name, size, line, ways, **kw)


def run_both(levels, addr, size, is_write, classify=True, flush=True):
    ref = ReferenceHierarchy(levels, classify=classify)
    ref.replay(addr, size, is_write)
    eng = Hierarchy(levels, classify=classify)
    eng.replay(np.asarray(addr, np.uint64), np.asarray(size, np.uint32), np.asarray(is_write, np.uint8))
    if flush:
        ref.flush()
        eng.flush()
    return ref.counters(), eng.counters()


def assert_same(ref: HierarchyCounters, got: HierarchyCounters) -> None:
    # Compare everything and report every differing field, not only the first.
    diffs = [
        f"{a.name}.{k}: reference {v} engine {getattr(b, k)}"
        for a, b in zip(ref.levels, got.levels, strict=True)
        for k, v in a.__dict__.items()
        if getattr(b, k) != v
    ]
    diffs += [f"memory.{k}: reference {v} engine {getattr(got.memory, k)}"
              for k, v in ref.memory.__dict__.items() if getattr(got.memory, k) != v]
    if ref.accesses != got.accesses:
        diffs.append(f"accesses: {ref.accesses} vs {got.accesses}")
    assert not diffs, "\n".join(diffs)


def random_trace(rng, n, span, max_size=24, write_frac=0.3, base=0):
    addr = (base + rng.integers(0, span, n, dtype=np.uint64)).astype(np.uint64)
    size = rng.integers(1, max_size + 1, n).astype(np.uint32)
    w = (rng.random(n) < write_frac).astype(np.uint8)
    return addr, size, w


def adversarial_trace(rng, n, line, sets):
    """Few lines, all mapping to a handful of sets, with repeats and straddles."""
    stride = line * sets
    lines = rng.integers(0, 12, n) * stride + rng.integers(0, 2, n) * line
    addr = (lines + rng.integers(0, line, n)).astype(np.uint64)
    size = np.where(rng.random(n) < 0.2, line, rng.integers(1, line + 1, n)).astype(np.uint32)
    w = (rng.random(n) < 0.4).astype(np.uint8)
    return addr, size, w


# ------------------------------------------------------------------ the worked example
def test_worked_example_of_engine_semantics():
    levels = [lv("L1", 32, 16, 1)]
    h = Hierarchy(levels, classify=True)
    h.replay(np.array([0x00, 0x20, 0x0E], np.uint64), np.array([4, 4, 4], np.uint32),
             np.array([0, 1, 0], np.uint8))
    h.flush()
    c = h.counters().levels[0]
    assert (c.reads, c.writes, c.read_misses, c.write_misses) == (3, 1, 3, 1)
    assert (c.compulsory, c.capacity, c.conflict) == (3, 0, 1)
    assert (c.bytes_in, c.bytes_out, c.writebacks) == (64, 16, 1)
    m = h.counters().memory
    assert (m.bytes_read, m.bytes_written) == (64, 16)
    ref, got = run_both(levels, [0x00, 0x20, 0x0E], [4, 4, 4], [0, 1, 0])
    assert_same(ref, got)


def test_worked_example_fixture_file():
    import tomllib
    from pathlib import Path

    data = tomllib.loads((Path(__file__).parent / "data/engine/worked_example.toml").read_text())
    h = Hierarchy([lv(**data["level"])], classify=True)
    t = data["trace"]
    h.replay(np.array(t["addr"], np.uint64), np.array(t["size"], np.uint32), np.array(t["is_write"], np.uint8))
    h.flush()
    got = h.counters().levels[0]
    for key, value in data["expected"].items():
        assert getattr(got, key) == value, key


def test_read_fetch_reaches_next_level_before_writeback():
    # L1 direct-mapped 1 line; L2 1 line: the fetch of line 1 evicts line 0 from L2 first,
    # then L1's dirty line 0 is written back and allocates again in L2 (a write miss there).
    levels = [lv("L1", 16, 16, 1), lv("L2", 16, 16, 1)]
    ref, got = run_both(levels, [0, 16], [16, 4], [1, 0], flush=False)
    assert_same(ref, got)
    l2 = got.levels[1]
    assert (l2.reads, l2.read_misses, l2.writes, l2.write_misses) == (1, 1, 1, 1)


# ------------------------------------------------------------ engine vs reference model
POLICIES = ["lru", "fifo", "random", "plru"]
WRITES = ["back-allocate", "through-noallocate"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("write", WRITES)
def test_single_level_matches_reference(policy, write):
    rng = np.random.default_rng(7)
    levels = [lv("L1", 1024, 32, 4, policy=policy, write=write, seed=3)]
    for trace in (random_trace(rng, 600, 4096), adversarial_trace(rng, 600, 32, 8)):
        assert_same(*run_both(levels, *trace))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("inclusion", ["none", "inclusive", "exclusive"])
def test_three_levels_match_reference(policy, inclusion):
    rng = np.random.default_rng(11)
    levels = [
        lv("L1", 512, 32, 2, policy=policy, seed=1),
        lv("L2", 2048, 32, 4, policy=policy, inclusion=inclusion, seed=2),
        lv("L3", 8192, 32, 8, policy=policy, inclusion=inclusion, seed=5),
    ]
    for trace in (random_trace(rng, 1500, 16384), adversarial_trace(rng, 1500, 32, 16)):
        assert_same(*run_both(levels, *trace))


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("l1_sets", [8, 6])
@pytest.mark.parametrize("l1_ways", [4, 1])
def test_plain_first_level_loop_matches_reference(policy, l1_sets, l1_ways):
    # Without 3C a plain LRU/FIFO write-back first level runs in its own loop (its state in
    # locals), and a 1 MiB level below it is prefetched: 10,000 accesses cross the loop's
    # 4096-access chunks; whole-line writes, straddles and dirty victims all occur.
    rng = np.random.default_rng(21)
    levels = [lv("L1", l1_sets * l1_ways * 64, 64, l1_ways, policy=policy), lv("L2", 1 << 20, 64, 16, policy=policy)]
    addr, size, w = random_trace(rng, 10_000, 1 << 15, max_size=130, write_frac=0.4)
    size[rng.random(10_000) < 0.2] = 64
    addr[size == 64] &= ~np.uint64(63)
    assert_same(*run_both(levels, addr, size, w, classify=False))
    assert_same(*run_both(levels, addr, size, w, classify=False, flush=False))


@pytest.mark.parametrize("sets", [3, 25600, 114688])
@pytest.mark.parametrize("fast", [True, False])
def test_set_counts_not_a_power_of_two_around_line_two_to_the_32(sets, fast):
    # Below line 2^32 the set of a line is found without a division (memwall_mod32), above
    # it by one: a trace that crosses line 2^32 lands in the same sets as the reference.
    rng = np.random.default_rng(sets)
    line = 64
    levels = [lv("L1", 4 * 2 * line, line, 2), lv("L2", sets * 4 * line, line, 4)]
    if not fast:  # the general lookup (FIFO at the second level keeps it fast: PLRU does not)
        levels[1] = lv("L2", sets * 4 * line, line, 4, policy="plru")
    n = 3000
    # 16 lines in each of 4 neighbouring sets, half of them past line 2^32: their sets
    # conflict only if both sides find the same sets
    lines = ((1 << 32) + rng.integers(-8, 8, n) * sets + rng.integers(0, 4, n)).astype(np.uint64)
    addr = lines * np.uint64(line) + rng.integers(0, 32, n).astype(np.uint64)
    size = rng.integers(1, 33, n).astype(np.uint32)
    writes = (rng.random(n) < 0.3).astype(np.uint8)
    assert_same(*run_both(levels, addr, size, writes, classify=False))


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("ways", [1, 3, 4])
@pytest.mark.parametrize("where", ["first", "second", "both"])
def test_write_through_levels_without_3c_match_reference(policy, ways, where):
    # Without 3C a write-through LRU/FIFO level runs its own lookup (one pass for the line
    # and the victim, no write-backs): first, below a write-back level, and both, with
    # lines that differ between the levels, partial and straddling writes, and line 0.
    rng = np.random.default_rng(31)
    through = "through-noallocate"
    levels = [lv("L1", 6 * ways * 16, 16, ways, policy=policy, write=through if where != "second" else "back-allocate"),
              lv("L2", 16 * 4 * 32, 32, 4, policy=policy, write=through if where != "first" else "back-allocate")]
    for trace in (random_trace(rng, 4000, 1 << 13, max_size=40, write_frac=0.4),
                  adversarial_trace(rng, 4000, 16, 6)):
        assert_same(*run_both(levels, *trace, classify=False))
        assert_same(*run_both(levels, *trace, classify=False, flush=False))


@pytest.mark.parametrize("ways", [1, 2, 4])
@pytest.mark.parametrize("policy", POLICIES)
def test_line_zero_misses_in_an_empty_set(ways, policy):
    # An invalid way's tag is 0, itself a line number: line 0 must still miss there.
    levels = [lv("L1", 4 * ways * 64, 64, ways, policy=policy), lv("L2", 8 * 64, 64, 8)]
    for classify in (False, True):
        ref, got = run_both(levels, [0, 0, 8], [8, 8, 8], [0, 1, 0], classify=classify)
        assert got.levels[0].read_misses == 1 and got.levels[1].read_misses == 1
        assert_same(ref, got)


def test_inclusive_back_invalidates_dirty_line_once():
    # L2 (inclusive, 1 line) evicts line 0 while L1 holds it dirty: L1 loses it, and the
    # data leaves with L2's victim in one write-back.
    levels = [lv("L1", 64, 16, 4), lv("L2", 16, 16, 1, inclusion="inclusive")]
    ref, got = run_both(levels, [0, 0, 16], [4, 4, 4], [0, 1, 0], flush=False)
    assert_same(ref, got)
    assert got.levels[0].back_invalidations == 1
    assert got.levels[1].writebacks == 1 and got.memory.bytes_written == 16
    assert got.levels[0].writebacks == 0


def test_exclusive_moves_lines_between_levels():
    levels = [lv("L1", 16, 16, 1), lv("L2", 32, 16, 2, inclusion="exclusive")]
    # 0 miss -> L1; 16 miss evicts 0 (clean) into L2; 0 hits in L2 and moves up, 16 goes down.
    ref, got = run_both(levels, [0, 16, 0], [4, 4, 4], [0, 0, 0], flush=False)
    assert_same(ref, got)
    l2 = got.levels[1]
    assert (l2.reads, l2.read_misses) == (3, 2)
    assert got.levels[0].bytes_out == 32 and got.levels[0].writebacks == 0
    assert got.memory.reads == 2


@pytest.mark.parametrize("line_l1,line_l2", [(16, 64), (32, 32), (64, 16)])
def test_mixed_line_sizes_match_reference(line_l1, line_l2):
    rng = np.random.default_rng(5)
    levels = [lv("L1", 256, line_l1, 2), lv("L2", 1024, line_l2, 4, write="through-noallocate")]
    assert_same(*run_both(levels, *random_trace(rng, 800, 4096, max_size=100)))


def test_mixed_inclusive_write_through_hierarchy():
    rng = np.random.default_rng(9)
    levels = [
        lv("L1", 256, 16, 2, write="through-noallocate"),
        lv("L2", 1024, 32, 4, policy="plru", inclusion="inclusive"),
        lv("L3", 3 * 1024, 64, 3, policy="random", inclusion="inclusive", seed=4),
    ]
    assert_same(*run_both(levels, *random_trace(rng, 1500, 8192, max_size=70)))


level_strategy = st.builds(
    lambda sets, ways, line, policy, write, seed: dict(
        size=sets * ways * line, line=line, ways=ways, policy=policy, write=write, seed=seed),
    st.sampled_from([1, 2, 3, 4]), st.sampled_from([1, 2, 3, 4, 8]), st.sampled_from([8, 16, 32]),
    st.sampled_from(POLICIES), st.sampled_from(WRITES), st.integers(0, 2**64 - 1),
)


@HYP
@given(
    raw=st.lists(level_strategy, min_size=1, max_size=3),
    inclusion=st.sampled_from(["none", "inclusive", "exclusive"]),
    seed=st.integers(0, 2**32 - 1),
    classify=st.booleans(),
)
def test_hypothesis_hierarchies_match_reference(raw, inclusion, seed, classify):
    levels = []
    for i, d in enumerate(raw):
        if d["policy"] == "plru" and d["ways"] & (d["ways"] - 1):
            d["policy"] = "lru"
        kw = dict(d)
        if i and inclusion != "none":
            kw["inclusion"] = inclusion
            if inclusion == "exclusive":
                kw["line"] = levels[-1].line
                kw["size"] = d["size"] // d["line"] * kw["line"]
                kw["write"] = "back-allocate"
                levels[-1] = LevelSpec(**{**levels[-1].__dict__, "write": "back-allocate",
                                          "provenance": {}})
            else:
                kw["line"] = max(d["line"], max(x.line for x in levels))
                kw["size"] = d["size"] // d["line"] * kw["line"]
        levels.append(lv(f"L{i + 1}", **kw))
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 300, 2048) if seed % 2 else adversarial_trace(rng, 300, 16, 4)
    assert_same(*run_both(levels, *trace, classify=classify))


def test_random_policy_any_ways_deterministic_with_seed():
    rng = np.random.default_rng(3)
    trace = random_trace(rng, 4000, 1 << 16)
    for ways in (3, 11, 12, 20):
        levels = [lv("L1", 4 * ways * 64, 64, ways, policy="random", seed=42)]
        ref, a = run_both(levels, *trace)
        assert_same(ref, a)
        _, b = run_both(levels, *trace)
        assert a == b
        other = [lv("L1", 4 * ways * 64, 64, ways, policy="random", seed=43)]
        _, c = run_both(other, *trace)
        assert c.levels[0].read_misses != a.levels[0].read_misses or ways == 3


def test_plru_rejects_non_power_of_two_ways():
    with pytest.raises(InputError, match="power-of-two"):
        lv("L1", 3 * 64 * 4, 64, 3, policy="plru")


def test_plru_victim_order_by_hand():
    # 4 ways, one set: fill 0..3, touch 0, then a new line evicts way 2 (bits: root->right,
    # right node -> left after the touches of 2 then 3).
    h = Hierarchy([lv("L1", 256, 64, 4, policy="plru")])
    for line in (0, 1, 2, 3, 0, 4):
        h.replay(np.array([line * 64], np.uint64), np.array([1], np.uint32), np.array([0], np.uint8))
    assert [x[0] for x in h._engine._test_set_snapshot(0, 0)] == [0, 1, 4, 3]


def test_non_power_of_two_sets_use_modulo():
    # 20-way, 64 B lines, 30 MiB-like shape scaled down: 3 sets.
    h = Hierarchy([lv("L3", 3 * 20 * 64, 64, 20)])
    assert [h._engine._test_set_index(0, a * 64) for a in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    rng = np.random.default_rng(1)
    assert_same(*run_both([lv("L3", 3 * 20 * 64, 64, 20)], *random_trace(rng, 2000, 1 << 14)))


# ---------------------------------------------------------------------- agnosticism
def test_chunk_size_agnosticism():
    rng = np.random.default_rng(2)
    levels = [lv("L1", 1024, 32, 2), lv("L2", 4096, 64, 4, policy="fifo")]
    a, s, w = random_trace(rng, 5000, 1 << 15)
    whole = Hierarchy(levels, classify=True)
    whole.replay(a, s, w)
    for chunk in (1, 7, 1000):
        h = Hierarchy(levels, classify=True)
        for i in range(0, len(a), chunk):
            h.replay(a[i:i + chunk], s[i:i + chunk], w[i:i + chunk])
        assert h.counters() == whole.counters()


def gemm_nest(m=5, n=6, k=7, elem=4, base_a=0, base_b=1 << 20, base_c=1 << 21):
    return LoopNest(
        (m, n, k),
        (
            Access(base_c, (n * elem, elem), elem, tensor="C"),
            Access(base_a, (k * elem, 0, elem), elem, tensor="A"),
            Access(base_b, (0, elem, n * elem), elem, tensor="B"),
            Access(base_c, (n * elem, elem), elem, is_write=True, after=True, tensor="C"),
            Access(base_c + 4096, (), 8, tensor="pre"),
            Access(base_c + 8192, (), 8, is_write=True, after=True, tensor="post"),
            Access(base_a + 77, (3,), 9, is_write=True, after=True, tensor="row"),
        ),
    )


@pytest.mark.parametrize("nest", [
    gemm_nest(),
    gemm_nest(1, 1, 1),
    LoopNest((4, 0, 3), (Access(0, (64, 8, 1), 4), Access(100, (8,), 4, is_write=True))),
    LoopNest((), (Access(5, (), 3), Access(9, (), 200, is_write=True))),
    LoopNest((3, 4), (Access(1 << 40, (-64, 4096), 8, is_write=True),)),
    LoopNest((2, 2), ()),
    # two-dimensional blocks (tiles loaded row by row), in the innermost and an outer loop,
    # with negative and line-straddling row strides
    LoopNest((3, 2), (Access(0, (8192, 100), 96, tensor="A", rows=5, row_stride=1000),
                      Access(1 << 30, (256,), 64, is_write=True, after=True, tensor="C", rows=3,
                             row_stride=-40),
                      Access(1 << 20, (0, 0), 24, tensor="B", rows=2, row_stride=24))),
    # interleaved streams that mostly re-touch their own last line, in a two-way first
    # level where a third stream evicts those lines now and then (the per-access memo
    # of a first-level hit must notice the eviction, and keep the LRU order exact)
    LoopNest((6, 40), (Access(0, (0, 4), 4, tensor="A"),
                       Access(1 << 20, (512, 8), 8, tensor="B"),
                       Access(2 << 20, (64, 128), 16, is_write=True, tensor="C"),
                       Access(3 << 20, (256, 2), 2, tensor="D"),
                       Access(4 << 20, (8,), 8, is_write=True, after=True, tensor="E"))),
    # read-modify-write: each store re-touches the line its load just made most recent,
    # clean until the store (the store alone must make it dirty)
    LoopNest((3, 50), (Access(0, (4096, 8), 8, tensor="x"), Access(0, (4096, 8), 8, is_write=True, tensor="x"))),
])
@pytest.mark.parametrize("first", ["lru-3c", "lru", "fifo", "through", "none"])
def test_nest_matches_expanded_arrays(nest, first):
    # "lru" and "fifo" first levels are the engine's fast kind (the nest loop's per-access
    # memo of first-level hits applies); with 3C classification every lookup is general,
    # and a write-through first level has its own lookup (with either, an innermost body
    # of one-row accesses runs as streams in locals); with no level every access goes to
    # memory.
    policy = first.removesuffix("-3c").replace("through", "lru")
    write = "through-noallocate" if first == "through" else "back-allocate"
    levels = [] if first == "none" else [lv("L1", 512, 32, 2, policy=policy, write=write),
                                         lv("L2", 4096, 64, 8, policy="plru")]
    a, s, w = nest.expand()
    arrays = Hierarchy(levels, classify=first.endswith("3c"))
    arrays.replay(a, s, w)
    stream = Hierarchy(levels, classify=first.endswith("3c"))
    stream.replay_nest(nest)
    assert stream.counters() == arrays.counters()
    assert stream.counters().accesses == nest.n_accesses
    # and both are the reference model's (a fast first level replays an access of several
    # lines in replay_first_fast's loop, a one-line access through the nest's own path)
    reference = ReferenceHierarchy(levels, classify=first.endswith("3c"))
    reference.replay(a, s, w)
    assert_same(reference.counters(), stream.counters())
    # the caches are left in the same state: the same trace again counts the same
    arrays.replay(a, s, w)
    stream.replay_nest(nest)
    assert stream.counters() == arrays.counters()


# ------------------------------------------------------------------- address extremes
def test_addresses_near_two_to_the_64():
    top = (1 << 64) - 1
    addr = [top - 63, top - 8, top, top - 200, (1 << 63) + 5, 0]
    size = [64, 9, 1, 201, 300, 8]
    for levels in ([lv("L1", 256, 64, 2)], [lv("L1", 16, 1, 4), lv("L2", 256, 64, 2)]):
        ref, got = run_both(levels, addr, size, [0, 1, 0, 1, 0, 1])
        assert_same(ref, got)
    assert got.memory.bytes_read > 0


def test_last_byte_with_one_byte_lines_is_cached():
    h = Hierarchy([lv("L1", 4, 1, 4)])
    top = np.array([(1 << 64) - 1] * 3, np.uint64)
    h.replay(top, np.ones(3, np.uint32), np.zeros(3, np.uint8))
    c = h.counters().levels[0]
    assert (c.reads, c.read_misses) == (3, 1)


# ---------------------------------------------------------------------- bad inputs
def test_zero_levels_go_to_memory():
    h = Hierarchy([])
    h.replay(np.array([0, 100], np.uint64), np.array([8, 300], np.uint32), np.array([0, 1], np.uint8))
    m = h.counters().memory
    assert (m.reads, m.writes, m.bytes_read, m.bytes_written) == (1, 1, 8, 300)


def test_bad_sizes_and_wrapping_are_refused_before_counting():
    h = Hierarchy([lv("L1", 256, 64, 2)])
    with pytest.raises(InputError, match="access 1: size"):
        h.replay(np.array([0, 8], np.uint64), np.array([8, 0], np.uint32), np.zeros(2, np.uint8))
    with pytest.raises(InputError, match="wraps past"):
        h.replay(np.array([0, (1 << 64) - 4], np.uint64), np.array([8, 8], np.uint32), np.zeros(2, np.uint8))
    with pytest.raises(InputError, match="size"):
        h.replay([0], [-4], [0])
    with pytest.raises(InputError, match="addr"):
        h.replay([-1], [4], [0])
    with pytest.raises(InputError, match="is_write"):
        h.replay([0], [4], [2])
    with pytest.raises(InputError, match="length"):
        h.replay([0, 1], [4], [0])
    with pytest.raises(InputError, match="integers"):
        h.replay([0.5], [4], [0])
    assert h.counters().accesses == 0


def test_other_integer_dtypes_are_converted():
    a = Hierarchy([lv("L1", 256, 64, 2)])
    b = Hierarchy([lv("L1", 256, 64, 2)])
    a.replay(np.array([0, 64, 0], np.uint64), np.array([8, 8, 8], np.uint32), np.array([0, 1, 0], np.uint8))
    b.replay([0, 64, 0], np.array([8, 8, 8], np.int64), [False, True, False])
    assert a.counters() == b.counters()


@pytest.mark.parametrize("kw,match", [
    (dict(size=1000, line=64, ways=2), "not sets x ways x line"),
    (dict(size=960, line=48, ways=2), "power of two"),
    (dict(size=1024, line=64, ways=2, policy="mru"), "unknown policy"),
    (dict(size=1024, line=64, ways=2, write="back-noallocate"), "unknown write"),
])
def test_bad_levels_are_refused(kw, match):
    with pytest.raises(InputError, match=match):
        Hierarchy([dict(name="L1", **kw)])


def test_software_managed_and_misplaced_inclusion_are_refused():
    with pytest.raises(InputError, match="software-managed"):
        Hierarchy([lv("VMEM", 1024, 64, 16, software_managed=True)])
    with pytest.raises(InputError, match="first level"):
        Hierarchy([lv("L1", 1024, 64, 2, inclusion="inclusive")])
    with pytest.raises(InputError, match="line size"):
        Hierarchy([lv("L1", 1024, 32, 2), lv("L2", 4096, 64, 2, inclusion="exclusive")])
    with pytest.raises(InputError, match="write-back"):
        Hierarchy([lv("L1", 1024, 64, 2, write="through-noallocate"),
                   lv("L2", 4096, 64, 2, inclusion="exclusive")])


# ---------------------------------------------------------------------- API details
def test_counters_subtract_and_reset():
    h = Hierarchy([lv("L1", 256, 64, 2)])
    h.replay([0, 64], [8, 8], [0, 0])
    before = h.counters()
    h.replay([0, 128, 256], [8, 8, 8], [1, 0, 0])
    delta = h.counters() - before
    assert delta.accesses == 3
    assert delta.levels[0] == LevelCounters("L1", reads=2, writes=1, read_misses=2, bytes_in=128,
                                           writebacks=1, bytes_out=64)  # line 4 evicts dirty line 0
    assert isinstance(delta.as_dict()["levels"][0]["reads"], int)
    h.reset()
    assert h.counters().accesses == 0 and h.counters().levels[0].reads == 0


def test_from_file_and_level_dicts(tmp_path):
    p = tmp_path / "h.toml"
    p.write_text('[[level]]\nname = "L1"\nsize = "32 KiB"\nline = "64 B"\nways = 8\n'
                 '[[level]]\nname = "L2"\nsize = "1 MiB"\nline = 64\nways = 16\ninclusion = "inclusive"\n')
    h = Hierarchy.from_file(p)
    assert [x.name for x in h.levels] == ["L1", "L2"]
    assert h.levels[1].sets == 1024


def test_typedefs_match_numpy_dtypes():
    sizes = _csim._test_typedefs()
    assert sizes == {"addr_t": np.dtype(np.uint64).itemsize, "size_t32": np.dtype(np.uint32).itemsize,
                     "flag_t": np.dtype(np.uint8).itemsize, "index_t": np.dtype(np.int64).itemsize}


def test_engine_name_is_real():
    # The name comes from the compiled extension the hierarchy runs on, and --version says it.
    import importlib.machinery

    from memwall import engine
    from memwall.cli import _version_text

    assert _csim.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert isinstance(Hierarchy([lv("L1", 256, 64, 2)])._engine, _csim.Engine)
    assert engine.ENGINE_NAME == _csim.ENGINE_NAME
    assert _csim.ENGINE_NAME.startswith("csim ") and "Cython" in _csim.ENGINE_NAME
    assert f"memwall._csim ({_csim.ENGINE_NAME})" in _version_text()


# ------------------------------------------------------------------ the contract
def test_engine_counters_are_keyed_by_the_struct_fields():
    # Counters cross from C by field name (Cython's struct-to-dict), never by position.
    raw = Hierarchy([lv("L1", 256, 64, 2)], classify=True)._engine.counters()
    assert set(raw) == {"levels", "memory", "accesses"}
    assert set(raw["levels"][0]) == {f.name for f in dataclasses.fields(LevelCounters)}
    assert set(raw["memory"]) == {f.name for f in dataclasses.fields(MemoryCounters)}


def test_every_counter_reaches_its_own_field():
    # A trace on which the eleven L1 counters and the four memory counters all differ, so a
    # field read from the wrong place (a reordered struct, a positional copy) cannot agree
    # with the reference model, which counts by name.
    levels = [lv("L1", 512, 32, 2), lv("L2", 1024, 32, 2, inclusion="inclusive")]
    rng = np.random.default_rng(0)
    trace = (rng.integers(0, 8192, 400, dtype=np.uint64), rng.integers(1, 40, 400).astype(np.uint32),
             (rng.random(400) < 0.3).astype(np.uint8))
    ref, got = run_both(levels, *trace)
    l1 = [v for k, v in got.levels[0].__dict__.items() if k != "name"]
    assert len(set(l1)) == len(l1) and 0 not in l1
    assert len(set(got.memory.__dict__.values())) == 4
    assert_same(ref, got)


def test_level_codes_come_from_the_extension():
    from memwall.levels import INCLUSIONS
    from memwall.levels import POLICIES as LEVEL_POLICIES

    assert set(_csim.POLICY_CODES) == set(LEVEL_POLICIES)
    assert set(_csim.INCLUSION_CODES) == set(INCLUSIONS)
    assert len(set(_csim.POLICY_CODES.values())) == len(_csim.POLICY_CODES)
    good = {"name": "L1", "size": 256, "line": 64, "ways": 2, "policy": _csim.POLICY_CODES["lru"],
            "write_through": False, "inclusion": _csim.INCLUSION_CODES["none"], "seed": 0, "stack": False}
    _csim.Engine([good])
    with pytest.raises(ValueError, match="keys"):
        _csim.Engine([{**good, "extra": 1}])
    with pytest.raises(ValueError, match="keys"):
        _csim.Engine([{k: v for k, v in good.items() if k != "seed"}])
    with pytest.raises(ValueError, match="code"):
        _csim.Engine([{**good, "policy": 99}])


def test_engine_and_traces_import_without_a_cycle():
    # traces owns the array contract; engine imports traces, never the other way round.
    import ast
    from pathlib import Path

    import memwall.traces

    tree = ast.parse(Path(memwall.traces.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "engine" not in imported and "memwall.engine" not in imported


def test_write_through_write_hit_then_read_goes_through_the_3c_shadow():
    # Found by the hypothesis test above (seed 10000): a write hit at a write-through level
    # leaves the shadow without the line; the read after it, at the same line, must still
    # install it in the shadow, so the first-level MRU shortcut may not skip it.
    levels = [lv("L1", 3 * 3 * 16, 16, 3, policy="fifo", write="through-noallocate")]
    rng = np.random.default_rng(10000)
    assert_same(*run_both(levels, *adversarial_trace(rng, 300, 16, 4), classify=True))


def test_a_snapshot_attributes_what_ran_since_it_as_counters_do():
    # Hierarchy.since (flat snapshots, kernel by kernel in a sweep) against the counters'
    # own difference, every field: 3C on, an inclusive level (back-invalidations), and
    # write-backs and bytes of every kind in between.
    rng = np.random.default_rng(41)
    levels = [lv("L1", 512, 32, 2), lv("L2", 2048, 32, 4, inclusion="inclusive"), lv("L3", 8192, 64, 4)]
    h = Hierarchy(levels, classify=True)
    h.replay(*random_trace(rng, 3000, 1 << 15, write_frac=0.4))
    mark, before = h.snapshot(), h.counters()
    h.replay(*random_trace(rng, 3000, 1 << 15, write_frac=0.4))
    got, want = h.since(mark), h.counters() - before
    assert got == want
    assert all(getattr(lv, f) > 0 for lv in got.levels[:2] for f in ("compulsory", "capacity", "writebacks"))
    assert got.levels[0].back_invalidations > 0 and got.memory.bytes_written > 0


@pytest.mark.parametrize("make, words", [
    (lambda: LoopNest((float("nan"),), (Access(0, (8,), 8),)), "loop count must be a whole number"),
    (lambda: LoopNest((float("inf"),), (Access(0, (8,), 8),)), "loop count must be a whole number"),
    (lambda: LoopNest((2.5,), (Access(0, (8,), 8),)), "loop count must be a whole number"),
    (lambda: LoopNest((-1,), (Access(0, (8,), 8),)), "non-negative"),
    (lambda: LoopNest((1 << 70,), (Access(0, (0,), 8),)), r"below 2\^63"),
    (lambda: LoopNest((2,), (Access(0, (8,), float("nan")),)), "size must be a whole number"),
    (lambda: LoopNest((2,), (Access(0, (8,), 0),)), "size must be in 1"),
    (lambda: LoopNest((2,), (Access(0, (8.5,), 8),)), "stride must be a whole number"),
    (lambda: LoopNest((1,), (Access(0, (1 << 70,), 8, tensor="W"),)), "strides of W must be within"),
    (lambda: LoopNest((2,), (Access(0, (8,), 8, row_stride=-(1 << 70)),)), "must be within"),
    (lambda: LoopNest((2,), (Access(float("inf"), (8,), 8),)), "base must be a whole number"),
    (lambda: LoopNest((2,), (Access(0, (8,), 8, rows=True),)), "rows must be a whole number"),
])
def test_a_loop_nest_refuses_numbers_the_engine_cannot_take(make, words):
    # A nest's numbers reach the engine as 64-bit words: a float would be truncated, NaN,
    # infinity or a number past 2^63 would fail inside it. Each is refused when the nest
    # is made, naming what is wrong.
    with pytest.raises(InputError, match=words):
        make()
