"""Cases that differ only in what the engine never sees share one replay (issue 16, item 2).

The engine sees a profile's cache levels and its schedule; bandwidths, latencies, peak
rates, dispatch costs and the word size act only in the timing. A synthetic bandwidth
sweep, an H200 beside an H100, or one case in eager and graph dispatch therefore replay
a step identically, and memwall replays it once: in one process through any cache
given to ``run_case``, and across a sweep's workers and reruns through the sweep
folder's replay store.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import memwall.simulation.case as running
import memwall.simulation.plan as planning
from memwall.execute import sweep as sw
from memwall.execute import worker
from memwall.execute.feeder import WAIT, Feeder
from memwall.execute.store import REPLAYS_DIR, ReplayStore
from memwall.profiles import load_machine
from memwall.simulation import Case, engine_fields, replay_key, run_case
from memwall.simulation.row import case_key
from memwall.study import design
from memwall.study.identity import load_machine_spec, synthetic_spec


class DictReplays:
    def __init__(self) -> None:
        self.kept: dict = {}

    def get(self, key):
        return self.kept.get(key)

    def put(self, key, counters):
        self.kept[key] = counters


def _count_replays(monkeypatch) -> list:
    calls: list = []
    real = running.replay_step
    monkeypatch.setattr(running, "replay_step", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


def test_only_engine_visible_fields_change_the_replay_key():
    h100, case = load_machine("h100-sxm"), Case("h100-sxm", "gpt2-small", 2)
    faster = load_machine("h100-sxm", sets={"memory.bandwidth": "30 TB/s", "memory.latency": "100 ns",
                                            "compute.bf16": "5 PFLOP/s"})
    assert engine_fields(faster) == engine_fields(h100)
    assert replay_key(faster, case) == replay_key(h100, case)
    assert replay_key(h100, Case("h100-sxm", "gpt2-small", 2, dispatch="graph")) == replay_key(h100, case)
    assert replay_key(load_machine("h200"), case) == replay_key(h100, case)  # the same GH100 L2 and tiles
    smaller_l2 = dataclasses.replace(h100, levels=tuple(
        dataclasses.replace(lv, size=lv.size // 2) if lv.name == "L2" else lv for lv in h100.levels))
    other_tiles = load_machine("h100-sxm", sets={"schedule.tile_n": "64"})
    assert len({replay_key(m, case) for m in (h100, smaller_l2, other_tiles)}) == 3
    assert replay_key(h100, Case("h100-sxm", "gpt2-small", 4)) != replay_key(h100, case)


def test_a_shared_replay_gives_exactly_the_numbers_of_its_own(monkeypatch):
    case = Case("h100-sxm", "gpt2-small", 2)
    faster = load_machine("h100-sxm", sets={"memory.bandwidth": "30 TB/s"})
    alone = run_case(case, machine=faster)
    calls = _count_replays(monkeypatch)
    cache = DictReplays()
    run_case(case, replays=cache)
    shared = run_case(case, machine=faster, replays=cache)
    assert len(calls) == 1  # the second case replayed nothing
    assert json.dumps(shared, sort_keys=True) == json.dumps(alone, sort_keys=True)
    assert shared["seconds"] < run_case(case)["seconds"]  # and it is timed with its own bandwidth


def test_a_sweep_replays_each_engine_key_once_and_rows_match_separate_runs(tmp_path, monkeypatch):
    machines = [synthetic_spec("h100-sxm", bw) for bw in (1e12, 3e12, 1e13)]
    cases = design.product(machines, ["nettalk", "encoder-8-3-8"], [1])
    result = sw.run_sweep(cases, tmp_path / "s", jobs=1, progress=False)
    stored = ReplayStore(tmp_path / "s")
    keys = {replay_key(load_machine_spec(c.machine), c) for c in cases}
    assert len(keys) == 2 and all(stored.get(k) is not None for k in keys)
    assert len(list((tmp_path / "s" / REPLAYS_DIR / "cases").glob("*.json"))) == 2
    # The same rows as cases run each on its own, with no replay shared.
    alone = sw.run_sweep(cases, tmp_path / "alone", jobs=1, progress=False,
                         runner=lambda case, machine=None: run_case(case, machine=machine))
    strip = [{k: v for k, v in r.items() if k != "key"} for r in result.rows]
    assert strip == [{k: v for k, v in r.items() if k != "key"} for r in alone.rows]


def test_a_sweep_keeps_on_disk_only_the_replays_its_cases_share(tmp_path, monkeypatch):
    cases = [Case("h100-sxm", "nettalk"), Case(synthetic_spec("h100-sxm", 1e12), "nettalk"),
             Case("vax-11-780", "nettalk")]
    calls = _count_replays(monkeypatch)
    sw.run_sweep(cases, tmp_path / "s", jobs=1, progress=False)
    assert len(calls) == 2  # the H100's replay once for both of its cases
    (path,) = (tmp_path / "s" / REPLAYS_DIR / "cases").glob("*.json")
    assert path.stem == replay_key(load_machine("h100-sxm"), cases[0])  # not the VAX's, which no case shares


def test_cases_waiting_for_a_replay_in_flight_are_held_back(tmp_path):
    a, b, c = (Case(m, "nettalk") for m in ("h100-sxm", "h200", "vax-11-780"))
    store = sw.Store(tmp_path)
    keys = {x: case_key(x) for x in (a, b, c)}
    feeder = Feeder([a, b, c], store, keys, replay_keys={a: "k1", b: "k1", c: "k2"})
    assert feeder.take() == a
    assert feeder.take() == c  # b waits: a is computing its replay
    assert feeder.take() is WAIT
    feeder.finished(a)
    assert feeder.take() == b
    store.release_all()


@pytest.mark.parametrize("damage", ["not json", "edited"])
def test_a_damaged_stored_replay_is_recomputed(tmp_path, damage):
    case = Case("h100-sxm", "nettalk")
    twin = Case(synthetic_spec("h100-sxm", 1e12), "nettalk")  # shares the replay, so it is kept
    sw.run_sweep([case, twin], tmp_path / "s", jobs=1, progress=False)
    (path,) = (tmp_path / "s" / REPLAYS_DIR / "cases").glob("*.json")
    if damage == "not json":
        path.write_text("{")
    else:
        record = json.loads(path.read_text())
        record["replay"]["kernels"][0]["accesses"] += 1
        path.write_text(json.dumps(record))
    assert ReplayStore(tmp_path / "s").get(path.stem) is None
    again = sw.run_sweep([case], tmp_path / "t", jobs=1, progress=False)
    assert again.rows[0]["status"] == "ok"


def test_prepared_steps_and_plans_are_built_once_and_give_the_same_numbers(monkeypatch):
    # A sweep's worker keeps the steps and plans it built: the next machine that runs the
    # same step, or shares the engine's view of an earlier one, reuses them.
    builds, plans = [], []
    real_build, real_plan = planning.build_case_step, planning.plan_replay
    monkeypatch.setattr(planning, "build_case_step", lambda c: (builds.append(c), real_build(c))[1])
    monkeypatch.setattr(planning, "plan_replay", lambda *a, **k: (plans.append(1), real_plan(*a, **k))[1])
    prepared = planning.Prepared()
    h100 = Case("h100-sxm", "gpt2-small", 2)
    got = [run_case(c, prepared=prepared) for c in (h100, Case("h200", "gpt2-small", 2),
                                                    dataclasses.replace(h100, dispatch="graph"),
                                                    Case("a100-sxm", "gpt2-small", 2))]
    assert len(builds) == 1  # one step for four cases
    assert len(plans) == 2  # the H200 and the graph-mode case share the H100's plan; the A100 has its own
    monkeypatch.setattr(planning, "build_case_step", real_build)
    monkeypatch.setattr(planning, "plan_replay", real_plan)
    for case, result in zip((h100, Case("h200", "gpt2-small", 2), dataclasses.replace(h100, dispatch="graph"),
                             Case("a100-sxm", "gpt2-small", 2)), got, strict=True):
        assert result == run_case(case)


def test_prepared_keeps_only_its_most_recent_entries():
    prepared = planning.Prepared(size=2)
    first = prepared.step(Case("h100-sxm", "nettalk", 1))
    prepared.step(Case("h100-sxm", "nettalk", 2))
    prepared.step(Case("h100-sxm", "nettalk", 3))
    assert prepared.step(Case("h100-sxm", "nettalk", 1)) is not first  # evicted, built again
    assert prepared.step(Case("vax-11-780", "nettalk", 3)) is prepared.step(Case("h100-sxm", "nettalk", 3))



def test_prepared_holds_plans_up_to_its_bound_on_accesses():
    """A sweep keeps every plan its cost estimate built (its forked workers then lower
    nothing), but no more loop-nest accesses than Prepared's bound: the oldest plans go."""
    h100, a100, vax = (load_machine(m) for m in ("h100-sxm", "a100-sxm", "vax-11-780"))
    prepared = planning.Prepared(size=100)
    cases = [Case(m.id, "gpt2-small", 2) for m in (h100, a100, vax)]
    plans = [prepared.plan(m, prepared.step(c), replay_key(m, c)) for m, c in zip((h100, a100, vax), cases,
                                                                                    strict=True)]
    sizes = [planning._accesses(p) for p in plans]
    assert all(s > 0 for s in sizes) and prepared._accesses == sum(sizes)
    small = planning.Prepared(size=100, max_accesses=sizes[1] + sizes[2])
    for m, c in zip((h100, a100, vax), cases, strict=True):
        small.plan(m, small.step(c), replay_key(m, c))
    assert list(small._plans) == [replay_key(a100, cases[1]), replay_key(vax, cases[2])]  # the H100's went
    assert small._accesses == sizes[1] + sizes[2]
    assert small.plan(a100, small.step(cases[1]), replay_key(a100, cases[1])) is not None


def test_the_cost_estimate_leaves_every_plan_for_the_workers():
    from memwall.profiles import machine_ids

    cases = design.product([m for m in machine_ids() if m != "TEMPLATE"], ["nettalk"], [1, 2, 4])
    monkey = worker._PREPARED
    try:
        worker._PREPARED = None
        plan = sw.plan_costs(cases, None)
        assert len(worker.process_prepared()._plans) == len(set(plan.replay_keys.values())) > 100
    finally:
        worker._PREPARED = monkey
