"""The one-pass capacity sweep (an LRU stack per set) against one replay per capacity."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine import random_trace

from memwall.engine import CapacitySweep, Hierarchy
from memwall.errors import InputError
from memwall.levels import LevelSpec
from memwall.streams import Access, LoopNest


def separate(levels, name, ways, sets, trace, flush, nest=None):
    """The swept level's counters from a replay of the hierarchy cut below it, at ``ways``."""
    i = [lv.name for lv in levels].index(name)
    lv = levels[i]
    cut = levels[:i] + [LevelSpec(lv.name, sets * ways * lv.line, lv.line, ways)]
    h = Hierarchy(cut)
    if nest is not None:
        h.replay_nest(nest)
    else:
        h.replay(*trace)
    if flush:
        h.flush()
    return h.counters()


@pytest.mark.parametrize("flush", [False, True])
@pytest.mark.parametrize("case", ["first", "middle", "last-mixed-lines", "odd-sets"])
def test_sweep_matches_one_replay_per_capacity(case, flush):
    rng = np.random.default_rng(8)
    levels = {
        "first": [LevelSpec("L1", 8 * 2 * 32, 32, 2)],
        "middle": [LevelSpec("L1", 512, 32, 2), LevelSpec("L2", 16 * 4 * 32, 32, 4),
                   LevelSpec("L3", 8192, 32, 8)],
        "last-mixed-lines": [LevelSpec("L1", 512, 16, 2, policy="fifo"), LevelSpec("L2", 16 * 4 * 64, 64, 4)],
        "odd-sets": [LevelSpec("L1", 256, 32, 2, policy="plru"), LevelSpec("L2", 6 * 3 * 32, 32, 3)],
    }[case]
    name = levels[0].name if case == "first" else "L2"
    swept = next(lv for lv in levels if lv.name == name)
    addr, size, w = random_trace(rng, 6000, 1 << 14, max_size=70, write_frac=0.35)
    size[rng.random(6000) < 0.2] = 64
    trace = (addr, size, w)
    sweep = CapacitySweep(levels, name, 10)
    sweep.replay(addr[:2500], size[:2500], w[:2500])
    sweep.sweep()  # asking midway changes nothing
    sweep.replay(addr[2500:], size[2500:], w[2500:])
    if flush:
        sweep.flush()
    got = sweep.sweep()
    assert list(got) == [swept.sets * k * swept.line for k in range(1, 11)]
    for k in range(1, 11):
        want = separate(levels, name, k, swept.sets, trace, flush)
        assert got[swept.sets * k * swept.line] == want.levels[-1], k
        assert sweep.counters().levels == want.levels[:-1]  # the levels above, unchanged


def test_sweep_of_the_last_level_gives_main_memory_traffic():
    rng = np.random.default_rng(3)
    levels = [LevelSpec("L1", 1024, 64, 2), LevelSpec("LLC", 64 * 16 * 64, 64, 16)]
    trace = random_trace(rng, 8000, 1 << 17, max_size=64, write_frac=0.3)
    sweep = CapacitySweep(levels, "LLC", 16)
    sweep.replay(*trace)
    sweep.flush()
    for cap, c in sweep.sweep().items():
        h = Hierarchy([levels[0], LevelSpec("LLC", cap, 64, cap // (64 * 64))])
        h.replay(*trace)
        h.flush()
        m = h.counters().memory
        assert (c.bytes_in, c.bytes_out) == (m.bytes_read, m.bytes_written)


def test_sweep_through_a_loop_nest():
    nest = LoopNest((40, 30), (Access(0, (4096, 8), 8), Access(1 << 20, (0, 64), 64, is_write=True)))
    levels = [LevelSpec("L1", 1024, 64, 2), LevelSpec("L2", 8 * 8 * 64, 64, 8)]
    sweep = CapacitySweep(levels, "L2", 8)
    sweep.replay_nest(nest)
    for k, (cap, c) in enumerate(sweep.sweep().items(), start=1):
        assert c == separate(levels, "L2", k, 8, None, False, nest=nest).levels[-1]
        assert cap == 8 * k * 64


@pytest.mark.parametrize("kw,below,match", [
    (dict(policy="fifo"), None, "fifo replacement has no stack property"),
    (dict(policy="random"), None, "random replacement has no stack property"),
    (dict(policy="plru"), None, "plru replacement has no stack property"),
    (dict(write="through-noallocate"), None, "no-write-allocate"),
    (dict(inclusion="inclusive"), None, "it is inclusive"),
    (dict(inclusion="exclusive"), None, "it is exclusive"),
    ({}, "inclusive", "'L3' below it is inclusive"),
    ({}, "exclusive", "'L3' below it is exclusive"),
])
def test_sweep_refuses_where_the_stack_property_fails(kw, below, match):
    levels = [LevelSpec("L1", 512, 32, 2), LevelSpec("L2", 2048, 32, 4, **kw)]
    if below:
        levels.append(LevelSpec("L3", 8192, 32, 8, inclusion=below))
    with pytest.raises(InputError, match=match):
        CapacitySweep(levels, "L2", 8)


def test_sweep_refuses_unknown_level_and_bad_depth():
    levels = [LevelSpec("L1", 512, 32, 2)]
    with pytest.raises(InputError, match="no level 'L9'"):
        CapacitySweep(levels, "L9", 4)
    with pytest.raises(InputError, match="max_ways"):
        CapacitySweep(levels, "L1", 0)


def test_llc_capacity_figure_matches_a_replay_at_the_actual_capacity(tmp_path):
    # The figure's data: one sweep per case; at the machine's own capacity it equals a
    # replay of the same step (warm pass, then counted pass) through the machine's levels.
    from memwall.figures import llc_capacity
    from memwall.figures._style import save
    from memwall.profiles import load_machine
    from memwall.simulation import Case, build_case_step
    from memwall.study.tables import llc_capacity_table
    from memwall.workloads.lowering import lower

    table = llc_capacity_table((("sun-3-260", "nettalk"),), factor=2)
    machine = load_machine("sun-3-260")
    levels = list(machine.cache_levels)
    assert [r["capacity"] for r in table] == [levels[-1].size // levels[-1].ways * k for k in (1, 2)]
    step = build_case_step(Case(machine="sun-3-260", network="nettalk"))
    lowered = [lower(k, machine.schedule, line_bytes=levels[0].line) for k in step.kernels]
    h = Hierarchy(levels)
    for low in lowered:
        for nest in low.nests:
            h.replay_nest(nest)
    total = 0
    for kernel, low in zip(step.kernels, lowered, strict=True):
        before = h.counters().memory
        for nest in low.nests:
            h.replay_nest(nest)
        m = h.counters().memory - before
        total += (m.bytes_read + m.bytes_written) * kernel.repeat
    actual = [r for r in table if r["actual"]]
    assert len(actual) == 1 and actual[0]["memory_bytes"] == total > 0
    paths = save(llc_capacity.draw({"capacity": table}), tmp_path, "llc_capacity")
    assert all(p.stat().st_size > 0 for p in paths)
    import matplotlib.pyplot as plt

    plt.close("all")
