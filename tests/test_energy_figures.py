"""The energy figures (issue 29): each data function gives what its drawing reads, and a
machine whose profile states no energy figures is left out (named), never drawn as zero."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from memwall.figures import NAMES, energy_balance, energy_per_token, energy_share
from memwall.simulation import run_case  # bound before any test patches profiles.load_machine
from memwall.study import energy as study_energy


def _no_energy(machine):
    """``machine`` with every energy figure removed, as a profile without [energy] loads."""
    return replace(machine, energy=None, memory=replace(machine.memory, energy=None),
                   levels=tuple(replace(lv, energy=None) for lv in machine.levels))


def _plotted(spec) -> list[str]:
    """Every machine or step named in a plotly spec's hovers and bar labels."""
    return [str(cell) for t in spec["data"] for row in t.get("customdata", []) for cell in row] + \
        [str(y) for t in spec["data"] if t.get("type") == "bar" for y in t["y"]]


def test_the_energy_figures_are_registered_and_drawn_by_every_sweep():
    assert {"energy_balance", "energy_share", "energy_per_token"} <= set(NAMES)
    for module in (energy_balance, energy_share, energy_per_token):
        assert "estimate" in module.CAPTION and "left out" in module.CAPTION


# --------------------------------------------------------------------------------------
# Figure 15: energy balance, from the profiles


def test_energy_balance_rows_are_the_profiles_figures():
    from memwall.profiles import load_machine

    m = load_machine("h100-sxm")
    row = study_energy.machine_row(m)
    assert row["flop_dtype"] == m.primary_dtype
    assert row["pj_per_flop"] == pytest.approx(m.energy.matrix[m.primary_dtype] * 1e12)
    assert row["pj_per_byte"] == pytest.approx(m.memory.energy * 1e12)
    assert row["energy_balance"] == pytest.approx(row["pj_per_byte"] / row["pj_per_flop"])
    assert row["time_balance"] == pytest.approx(m.peak_flops[m.primary_dtype] / m.memory.bandwidth)
    assert row["pj_per_flop_at_tdp"] == pytest.approx(m.energy.tdp / m.peak_flops[m.primary_dtype] * 1e12)
    assert row["flop_status"] == m.provenance[f"energy.{m.primary_dtype}"].status
    assert row["byte_status"] == m.provenance["memory.energy"].status


def test_a_machine_without_energy_is_left_out_of_the_energy_balance(pyplot, monkeypatch):
    from memwall import profiles

    assert study_energy.machine_row(_no_energy(profiles.load_machine("h100-sxm"))) is None
    shipped = profiles.all_machines()
    monkeypatch.setattr(profiles, "all_machines",
                        lambda: [_no_energy(m) if m.id == "h100-sxm" else m for m in shipped])
    data = study_energy.balance_data(["h100-sxm", "b200"])
    assert [r["id"] for r in data["machines"]] == ["b200"]
    assert [r["id"] for r in data["lacking"]] == ["h100-sxm"]
    spec = energy_balance.plotly(data)
    assert "NVIDIA H100 SXM5 80GB" not in _plotted(spec)
    assert all(y > 0 for t in spec["data"] for y in t["y"])  # nothing drawn at zero on a log axis
    counts = energy_balance.counts(data)
    assert counts["lacking"] == 1 and counts["shipped"] == 2 and counts["both"] == 1
    assert "1 state neither and are left out" in energy_balance.prose(data)
    energy_balance.draw(data)


def test_the_energy_balance_draws_the_shipped_profiles(pyplot):
    data = study_energy.balance_data()
    rows = data["machines"]
    assert rows and all(r["pj_per_flop"] is not None or r["pj_per_byte"] is not None for r in rows)
    # a machine stating zero dynamic energy (all static) has no energy balance, not an infinite one
    assert all(r["energy_balance"] is None or r["energy_balance"] > 0 for r in rows)
    assert energy_balance.counts(data)["shipped"] == len(rows) + len(data["lacking"])
    fig = energy_balance.draw(data)
    assert len(fig.axes) == 2
    json.dumps(energy_balance.plotly(data))
    assert study_energy.balance_data([]) == {"machines": [], "lacking": []}
    assert "No data" in json.dumps(energy_balance.plotly({}))


# --------------------------------------------------------------------------------------
# Figure 16: the share of a step's energy that moves data


def test_energy_share_runs_only_machines_with_energy(monkeypatch):
    from memwall import profiles

    real = profiles.load_machine

    def load(machine_id, *args, **kwargs):
        m = real(machine_id, *args, **kwargs)
        return _no_energy(m) if m.id == "h100-sxm" else m

    ran = []

    def run(case):
        ran.append(case.machine)
        return run_case(case)

    monkeypatch.setattr(profiles, "load_machine", load)
    data = study_energy.share_data(run=run)
    assert "h100-sxm" not in ran and "h100-sxm" not in {r["machine"] for r in data["steps"]}
    assert {r["machine"] for r in data["lacking"]} >= {"h100-sxm"}
    assert len(data["steps"]) + len(data["lacking"]) == len(study_energy.cases())
    for r in data["steps"]:
        groups = sum(r[f"joules_{g}"] for g, _ in study_energy.GROUPS)
        assert groups == pytest.approx(r["joules"], rel=1e-9)
        moving = r["joules_levels"] + r["joules_memory"] + r["joules_fabric"] + r["joules_interconnect"]
        assert moving / r["joules"] == pytest.approx(r["data_movement_share"], rel=1e-9, abs=1e-15)
        parts = [c for c in data["components"] if (c["workload"], c["machine"]) == (r["workload"], r["machine"])]
        assert sum(c["joules"] for c in parts) == pytest.approx(r["joules"], rel=1e-9)
        assert r["joules_per_unit"] is None or r["joules_per_unit"] > 0
    decode = [r for r in data["steps"] if r["phase"] == "decode"]
    assert decode and all(r["unit"] == "token" and r["joules_per_unit"] == pytest.approx(r["joules"])
                          for r in decode)  # batch 1: one token a step
    spec = energy_share.plotly(data)
    assert not any("h100-sxm" in y for y in _plotted(spec))
    assert "h100-sxm" in energy_share.prose(data)  # named as left out


def test_energy_share_draws_its_steps(pyplot):
    steps = [{"workload": "w", "machine": m, "name": m, "year": 2020, "joules": 2.0, "data_movement_share": 0.25,
              "dynamic_movement_share": d, "joules_per_unit": 0.5, "unit": "token",
              "joules_arithmetic": a, "joules_levels": 0.25, "joules_memory": 0.25, "joules_fabric": 0.0,
              "joules_interconnect": 0.0,
              "joules_static": 1.5 - a, "joules_host": 0.0}
             for m, a, d in (("x", 0.0, 1.0), ("y", 0.5, 0.5))]
    data = {"steps": steps, "components": [], "lacking": [{"workload": "w", "machine": "z", "name": "z",
                                                             "year": 1978}]}
    fig = energy_share.draw(data)
    assert len(fig.axes) == 2
    assert "Left out" in energy_share._lacking_note(data) and "z" in energy_share._lacking_note(data)
    bars = [t for t in energy_share.plotly(data)["data"] if t["name"] == "main memory"]
    assert [t["x"] for t in bars] == [[0.125, 0.125], [0.5, 0.25]]  # all joules; dynamic joules
    assert "No data" in json.dumps(energy_share.plotly({}))


def test_a_component_the_figure_does_not_know_is_refused():
    assert study_energy.group_of("arithmetic.bf16", ["L2"]) == "arithmetic"
    assert study_energy.group_of("L2", ["L2"]) == "levels"
    with pytest.raises(ValueError, match="unknown energy component"):
        study_energy.group_of("L3", ["L2"])


# --------------------------------------------------------------------------------------
# Figure 17: joules per token against batch


def _decode_row(machine, batch, tokens_per_joule, **more):
    return {"status": "ok", "seconds": 0.01 / batch, "phase": "decode", "machine": machine, "name": machine,
            "year": 2022, "network": "llama3-8b", "batch": batch, "context": 512, "tokens_per_second": 100.0 * batch,
            "tokens_per_joule": tokens_per_joule,
            "joules": batch / tokens_per_joule if tokens_per_joule else None, **more}


def test_joules_per_token_leaves_out_a_machine_without_energy(pyplot):
    rows = [_decode_row("a", b, 1.0 * b, **{"joules_arithmetic.bf16": 0.01 * b * b, "joules_memory": 0.5,
                                             "joules_static": 0.4})
            for b in (1, 64, 256)]
    rows += [_decode_row("n", b, None) for b in (1, 64)]  # a profile with no [energy]: joules null
    rows.append({**_decode_row("a", 8, 8.0), "phase": "train"})  # not decode
    data = energy_per_token.from_rows(rows)
    assert {r["machine"] for r in data["tokens"]} == {"a"}
    assert [r["machine"] for r in data["lacking"]] == ["n"]
    by_batch = {r["batch"]: r for r in data["tokens"]}
    assert sorted(by_batch) == [1, 64, 256]
    for b, r in by_batch.items():
        assert r["joules_per_token"] == pytest.approx(1 / b)
        assert r["seconds_per_token"] == pytest.approx(1 / (100.0 * b))
        assert r["memory_per_token"] == pytest.approx(0.5 / b)
        assert r["arithmetic_per_token"] == pytest.approx(0.01 * b)
    assert [energy_per_token.energy_knee(by_batch[b]) for b in (1, 64, 256)] == [False, True, True]
    spec = energy_per_token.plotly(data)
    assert {t["name"] for t in spec["data"]} == {"a, context 512"}
    assert "arithmetic joules pass main memory's at batch 64" in energy_per_token.prose(data)
    assert "Left out" in energy_per_token.prose(data)
    assert len(energy_per_token.draw(data).axes) == 2


def test_joules_per_token_from_a_real_sweep(quick_sweep):
    data = energy_per_token.from_rows(quick_sweep.rows)
    decode = [r for r in quick_sweep.rows if r.get("phase") == "decode" and r.get("status") == "ok"]
    assert len(data["tokens"]) + sum(1 for r in decode if not r.get("tokens_per_joule")) == len(decode)
    for t in data["tokens"]:
        row = next(r for r in decode if (r["machine"], r["batch"], r["context"]) ==
                   (t["machine"], t["batch"], t["context"]))
        assert t["joules_per_token"] == pytest.approx(1 / row["tokens_per_joule"])
        assert t["joules_per_token"] * row["batch"] == pytest.approx(row["joules"])  # one token a sequence
