"""Machine profiles: every shipped file loads and is plausible; every broken case is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memwall import profiles
from memwall.cli import main
from memwall.data import data_files, era_data_dir
from memwall.errors import InputError

FIXTURES = Path(__file__).parent / "data" / "profiles"
GOOD = (FIXTURES / "good.toml").read_text()
SHIPPED = data_files("machines")
REQUIRED_IDS = ["cray-1", "cray-x-mp", "vax-11-780", "vax-11-780-fpa", "sun-3-260", "a100-sxm",
                "h100-sxm", "h200", "b200", "tpu-v5p", "v100-sxm2", "gf11", "cm-2"]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_profile_validates(path: Path) -> None:
    assert profiles.validate_paths([path]) == []
    m = profiles.load_machine_file(path)
    assert m.id == path.stem, "a shipped file is named after its id"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", m.id)
    assert m.primary_dtype in m.peak_flops
    # Every headline figure carries a source and a status.
    for key in ("clock", f"compute.{m.primary_dtype}", "memory.bandwidth", "memory.capacity",
                "memory.latency"):
        fig = m.provenance[key]
        assert fig.source and fig.status, key
        assert m.citation(fig)
    json.dumps(m.as_dict())


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_balance_is_plausible_for_its_era(path: Path) -> None:
    """Catches a unit-prefix slip (MB for GB, k for M) in peaks or bandwidths."""
    m = profiles.load_machine_file(path)
    b = m.balance()
    assert 1e-4 < b < 2000, (m.id, b)
    if m.year < 1990:
        assert b < 1.0, f"{m.id}: a 1980s machine sits well under 1 FLOP/B, got {b:.3g}"
    if m.year >= 2020 and m.kind in ("gpu", "tpu") and "bf16" in m.peak_flops:
        assert 100 <= m.balance("bf16") <= 1000, f"{m.id}: bf16 balance {m.balance('bf16'):.3g}"
    if m.kind in ("gpu", "tpu") and m.year >= 2017:
        assert m.schedule.family == "tiled"


def test_catalogue_coverage() -> None:
    ids = profiles.machine_ids()
    for ident in REQUIRED_IDS:
        assert ident in ids
    assert len(ids) >= 40
    machines = profiles.all_machines()
    assert [(m.year, m.id) for m in machines] == sorted((m.year, m.id) for m in machines)
    kinds = {m.kind for m in machines}
    assert kinds == set(profiles.KINDS)


def test_template_validates_and_documents_every_key() -> None:
    template = era_data_dir() / "machines" / "TEMPLATE.toml"
    assert profiles.validate_paths([template]) == []
    readme = (era_data_dir() / "README.md").read_text()
    text = template.read_text()
    for section, keys in profiles.SCHEMA.items():
        for key in keys:
            assert key in readme, f"README does not document {section}.{key}"
            assert key in text, f"TEMPLATE does not show {section}.{key}"


# ---- inheritance -----------------------------------------------------------------------


def test_variant_inherits_from_base() -> None:
    h100, h200 = profiles.load_machine("h100-sxm"), profiles.load_machine("h200")
    assert h200.peak_flops == h100.peak_flops
    assert h200.levels == h100.levels
    assert h200.memory.bandwidth == pytest.approx(4.8e12)
    assert h200.memory.latency == h100.memory.latency
    assert h200.base == "h100-sxm"
    assert h200.sources["h200_sec"] and h200.sources["glenn_h100"]  # sources merge too


def test_file_outside_era_data_extends_a_shipped_base() -> None:
    m = profiles.load_machine(str(FIXTURES / "child_of_shipped.toml"))
    assert m.memory.bandwidth == pytest.approx(10e12)
    assert m.peak_flops == profiles.load_machine("h100-sxm").peak_flops


def test_a_profile_is_read_again_when_it_or_its_base_changes(tmp_path: Path) -> None:
    """Loaded profiles are kept while their files are unchanged: an edit to the file, or to
    the base it extends, is seen at the next load; an unchanged file gives the same Machine."""
    base = tmp_path / "mybase.toml"
    base.write_text((era_data_dir() / "machines" / "h100-sxm.toml").read_text().replace(
        'id = "h100-sxm"', 'id = "mybase"'))
    child = tmp_path / "child.toml"
    child.write_text('base = "mybase.toml"\nid = "child"\nname = "a child"\n')
    first = profiles.load_machine(str(child))
    assert profiles.load_machine(str(child)) is first
    base.write_text(base.read_text().replace('value = "3.35 TB/s"', 'value = "4.25 TB/s"'))
    assert profiles.load_machine(str(child)).memory.bandwidth == pytest.approx(4.25e12) != first.memory.bandwidth
    child.write_text(child.read_text() + 'notes = "edited"\n')
    assert profiles.load_machine(str(child)).notes == "edited"
    what_if = profiles.load_machine(str(child), sets={"memory.bandwidth": "2 TB/s"})
    assert what_if.memory.bandwidth == pytest.approx(2e12)
    assert profiles.load_machine(str(child)).memory.bandwidth == pytest.approx(4.25e12)


def test_cycle_of_bases_is_refused() -> None:
    errors = profiles.validate_paths([FIXTURES / "cycle_a.toml"])
    assert errors and errors[0].field == "base" and "cycle" in errors[0].reason


# ---- broken files: each refused, the field named -------------------------------------------


def _variant(tmp_path: Path, old: str, new: str, name: str = "case.toml") -> Path:
    assert old in GOOD, old
    path = tmp_path / name
    path.write_text(GOOD.replace(old, new, 1))
    return path


BROKEN = [
    # (what changes, replaced by, field named, words in the reason)
    ('fadd = { value', 'fadd = { value = "10 cycles" source', None, "syntax"),
    ('name = "Test machine"\n', "", "name", "missing"),
    ("year = 1986\n", "", "year", "missing"),
    ('[memory]\ncapacity', '[memory]\ncapacty', "memory.capacty", "did you mean 'capacity'"),
    ('kind = "scalar"', 'kind = "scalar"\nvendr = "x"', "vendr", "did you mean 'vendor'"),
    ('fp32 = { value', 'fp23 = { value', "compute.fp23", "unknown key"),
    ('"10 MB/s"', '"10 MB"', "memory.bandwidth", "bandwidth"),
    ('"4 MiB"', '"4 MHz"', "memory.capacity", "unknown byte unit"),
    ('"4 MiB"', '"4 KB"', "memory.capacity", "ambiguous"),
    ('"10 MHz"', '"10 MB"', "clock", "frequency"),
    ('"1 MFLOP/s"', '"1 MIPS"', "compute.fp32", "arithmetic rate"),
    ('"4 MiB"', '"-4 MiB"', "memory.capacity", "positive"),
    ('"8 KiB"', '"0 KiB"', "level[cache].size", "positive"),
    ('"8 KiB"', '"8200 B"', "level[cache].size", "sets x ways x line"),
    ('ways = 2', 'ways = 2\npolicy = "lfu"', "level[cache].policy", "unknown policy"),
    ('ways = 2', 'ways = "two"', "level[cache].ways", "integer"),
    ('model = "in_order"', 'model = "roofline"', "timing.model", "unknown timing model"),
    ('model = "in_order"', 'model = "throughput"', "timing.model", "does not fit"),
    ('family = "scalar"', 'family = "systolic"', "schedule.family", "unknown schedule family"),
    ('format_version = 1', 'format_version = 2', "format_version", "not understood"),
    ('format_version = 1\n', '', "format_version", "missing"),
    ('kind = "scalar"', 'kind = "mainframe"', "kind", "unknown kind"),
    ('id = "test-good"', 'id = "Test_Good"', "id", "kebab-case"),
    ('{ value = "10 MHz", source = "t", status = "estimate", derivation = "test" }', '"10 MHz"',
     "clock", "provenance"),
    ('fp32 = { value = "1 MFLOP/s", source = "t"', 'fp32 = { value = "1 MFLOP/s", source = "tt"',
     "compute.fp32", "not a key of [sources]"),
    ('fp32 = { value = "1 MFLOP/s", source = "t", status = "estimate"',
     'fp32 = { value = "1 MFLOP/s", source = "t", status = "guess"', "compute.fp32", "unknown status"),
    ('fp32 = { value = "1 MFLOP/s", source = "t", status = "estimate", derivation = "test" }',
     'fp32 = { value = "1 MFLOP/s", source = "t", status = "estimate" }', "compute.fp32", "derivation"),
    ('kind = "scalar"', 'kind = "scalar"\nbase = "no-such-machine"', "base", "does not exist"),
    ('[issue_costs]\nfadd', '[issue_costs]\nfsqrt = "1 cycles"\nfadd', "issue_costs.fsqrt", "unknown key"),
    ('[memory]\n', '[compute.achievable]\nfp32 = { value = "2 MFLOP/s", source = "t", status = "measured" }\n'
     '\n[memory]\n', "compute.achievable.fp32", "above the fp32 peak"),
    ('[memory]\n', '[compute.achievable]\nbf16 = { value = "1 MFLOP/s", source = "t", status = "measured" }\n'
     '\n[memory]\n', "compute.achievable.bf16", "no bf16 peak"),
    ('[memory]\n', '[compute.achievable]\nfp32 = { value = "0.5 MFLOP/s", source = "t", status = "measured" }\n'
     '\n[compute.sustained]\nfp32 = { value = "0.6 MFLOP/s", source = "t", status = "measured" }\n'
     '\n[memory]\n', "compute.sustained.fp32", "above the achievable"),
    ('[memory]\n', '[compute.sustained]\nfp32 = { value = "2 MFLOP/s", source = "t", status = "measured" }\n'
     '\n[memory]\n', "compute.sustained.fp32", "above the fp32 peak"),
]


@pytest.mark.parametrize("old,new,field,words", BROKEN, ids=[f"{b[2]}:{b[3]}" for b in BROKEN])
def test_broken_file_is_refused_with_field_named(tmp_path: Path, old: str, new: str, field: str | None,
                                                 words: str) -> None:
    path = _variant(tmp_path, old, new)
    errors = profiles.validate_paths([path])
    assert errors, "the broken file was accepted"
    match = [e for e in errors if (field is None or e.field == field) and words.lower() in str(e).lower()]
    assert match, [str(e) for e in errors]
    assert all(e.file == str(path) for e in errors)
    with pytest.raises(InputError):
        profiles.load_machine_file(path)


def test_syntax_error_names_its_line(tmp_path: Path) -> None:
    path = _variant(tmp_path, 'fadd = { value', 'fadd = { value = "10 cycles" source')
    (err,) = profiles.validate_paths([path])
    assert err.line == GOOD.splitlines().index(next(x for x in GOOD.splitlines() if x.startswith("fadd"))) + 1


def test_every_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    path = tmp_path / "many.toml"
    path.write_text(GOOD.replace('"8 KiB"', '"8200 B"').replace('model = "in_order"', 'model = "x"')
                    .replace("vendor =", "vendour ="))
    fields = {e.field for e in profiles.validate_paths([path])}
    assert {"level[cache].size", "timing.model", "vendour", "vendor"} <= fields


def test_tiled_staging_must_name_a_software_managed_level(tmp_path: Path) -> None:
    text = (era_data_dir() / "machines" / "h100-sxm.toml").read_text()
    path = tmp_path / "h.toml"
    path.write_text(text.replace('staging = "smem"', 'staging = "L2"'))
    (err,) = profiles.validate_paths([path])
    assert err.field == "schedule.staging" and "software_managed" in err.reason


def test_vector_timing_needs_its_parameters(tmp_path: Path) -> None:
    text = (era_data_dir() / "machines" / "cray-1.toml").read_text()
    path = tmp_path / "c.toml"
    path.write_text(text.replace("chaining = true\n", ""))
    (err,) = profiles.validate_paths([path])
    assert err.field == "timing.chaining"


# ---- the Machine value -------------------------------------------------------------------


def test_cray1_figures_in_si_units() -> None:
    m = profiles.load_machine("cray-1")
    assert m.clock_hz == 80e6
    assert m.peak_flops == {"fp64": pytest.approx(160e6)}
    assert m.memory.bandwidth == pytest.approx(640e6)
    assert m.memory.latency == pytest.approx(11 / 80e6)
    assert m.memory.capacity == 8 * 2**20
    assert m.balance() == pytest.approx(0.25)
    assert m.cache_levels == ()
    assert m.levels[0].software_managed and m.levels[0].size == 4096
    assert m.timing.model == "vector"
    assert m.timing.params == {"vector_length": 64, "memory_ports": 1.0, "word_bytes": 8,
                               "startup": 7.0, "chaining": True, "subword_float": False,
                               "banks": 16, "bank_busy": 4.0, "strip_loop": 15.0}
    assert m.schedule.params == {"vector_length": 64, "vector_registers": 8}
    assert m.provenance["memory.bandwidth"].status == "verified"


def test_scalar_issue_costs_are_seconds() -> None:
    m = profiles.load_machine("vax-11-780-fpa")
    assert m.issue_costs["fadd"] == pytest.approx(7 / 5e6)
    assert m.cache_levels[0].write == "through-noallocate"
    plain = profiles.load_machine("vax-11-780")
    assert plain.issue_costs["fadd"] > m.issue_costs["fadd"]


def test_gpu_levels_and_timing() -> None:
    m = profiles.load_machine("h100-sxm")
    assert [lv.name for lv in m.cache_levels] == ["L2"]
    assert m.dispatch is not None and m.dispatch.default == "eager"
    assert m.dispatch.mode("eager").host_issue == pytest.approx(7e-6)
    assert m.dispatch.mode("graph").device_gap == pytest.approx(1.25e-6)
    # Little's law at full occupancy: 132 SMs x their bytes in flight / the measured 375 ns
    # DRAM latency is the 25.8 GB/s per SM of the occupancy curve, 3.41 TB/s in all
    units, in_flight = m.schedule.params["units"], m.schedule.params["bytes_in_flight"]
    assert m.memory.latency == pytest.approx(375e-9)
    assert units * in_flight / m.memory.latency == pytest.approx(3.41e12, rel=0.01)
    assert m.vector_flops["fp64"] == pytest.approx(33.5e12)
    assert m.schedule.params["staging"] == "smem"
    assert m.balance("bf16") == pytest.approx(989.4e12 / 3.35e12)
    with pytest.raises(InputError):
        m.balance("fp4")


def test_unknown_machine_suggests_close_ids() -> None:
    with pytest.raises(InputError, match="h100-sxm"):
        profiles.load_machine("h100")


# ---- CLI ---------------------------------------------------------------------------------


def test_cli_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["machines", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(SHIPPED)
    row = next(r for r in rows if r["id"] == "cray-1")
    assert {"id", "name", "year", "kind", "peak_flops", "memory_bandwidth", "balance", "status"} <= set(row)
    assert row["balance"]["fp64"] == pytest.approx(0.25)


def test_cli_list_filters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["machines", "list", "--json", "--era", "1980s"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(1980 <= r["year"] <= 1989 for r in rows)
    assert main(["machines", "list", "--json", "--kind", "gpu"]) == 0
    assert {r["kind"] for r in json.loads(capsys.readouterr().out)} == {"gpu"}
    assert main(["machines", "list", "--era", "eighties"]) == 2
    assert main(["machines", "list"]) == 0
    assert "cray-1" in capsys.readouterr().out


def test_cli_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["machines", "show", "cray-1"]) == 0
    out = capsys.readouterr().out
    assert "Russell" in out and "640 MB/s" in out
    assert main(["machines", "show", "h200", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["provenance"]["memory.bandwidth"]["citation"].startswith("aiwiki")
    assert d["achievable_flops"]["fp8"] == pytest.approx(1453.4e12)  # its own, beside the H100's bf16
    assert main(["machines", "show", "a100-sxm"]) == 0
    out = capsys.readouterr().out
    ceiling = out.split("compute.achievable")[1].splitlines()
    assert "271.2 TFLOP/s  [measured; S. Bekman" in ceiling[1] and "compute.vector" in out
    # the figures the timing and the energy use beside the peaks, each with its provenance
    lines = out.splitlines()
    assert any(line.startswith("  sustained read 1.73 TB/s (85% of the peak)  [measured;") for line in lines)
    assert any(line.startswith("  node    sustained 231.6 GB/s per direction (77% of the peak") for line in lines)
    assert any(line.startswith("  fabric  87.3 pJ/B per main-memory byte  [estimate; D. Ernst") for line in lines)
    assert any(line.startswith("  static  62 W  [measured;") for line in lines)
    assert main(["machines", "show", "no-such"]) == 2


def test_cli_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["machines", "validate", str(FIXTURES / "good.toml"), *map(str, SHIPPED[:3])]) == 0
    bad = _variant(tmp_path, '"8 KiB"', '"8200 B"')
    assert main(["machines", "validate", str(FIXTURES / "good.toml"), str(bad)]) == 1
    out = capsys.readouterr().out
    assert str(bad) in out and "level[cache].size" in out and "sets x ways x line" in out


def test_machines_subcommand_can_be_extended() -> None:
    import argparse

    from memwall.cli import machines as cli_machines

    parser = argparse.ArgumentParser()
    cli_machines.register(parser.add_subparsers())
    extra = cli_machines.add_machines_command("test-extra", "an extra action (test)")
    extra.set_defaults(func=lambda args: 0)
    args = parser.parse_args(["machines", "test-extra"])
    assert args.func(args) == 0


def test_a_data_folder_listing_follows_files_added_and_removed(tmp_path: Path) -> None:
    from memwall.data import toml_files

    (tmp_path / "a.toml").write_text("")
    assert [p.name for p in toml_files(tmp_path)] == ["a.toml"]
    (tmp_path / "b.toml").write_text("")
    (tmp_path / "TEMPLATE.toml").write_text("")
    assert [p.name for p in toml_files(tmp_path)] == ["a.toml", "b.toml"]
    (tmp_path / "a.toml").unlink()
    assert [p.name for p in toml_files(tmp_path)] == ["b.toml"]


def _h100_variant(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    text = (era_data_dir() / "machines" / "h100-sxm.toml").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_files_real_problems_come_before_a_retired_key_and_its_shape_is_said_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A retired key, a staging level that does not exist and an L2 larger than main memory:
    # the staging level is the real problem (said first, and by inspect), the retired key
    # after it, and the level sizes as a warning although the file does not build.
    path = _h100_variant(tmp_path, "h100-sxm.toml", ("[timing]\n", '[timing]\nlaunch_overhead = "5 us"\n'),
                         ('staging = "smem"', 'staging = "nothere"'),
                         ('value = "80 GiB"', 'value = "10 MiB"'))
    _, errors, warnings = profiles.check_file(path)
    assert [e.field for e in errors] == ["schedule.staging", "timing.launch_overhead"]
    assert any(w.field == "level[L2].size" and "larger than main memory" in w.reason for w in warnings)
    assert main(["inspect", "--machine", str(path), "--network", "gpt2-small"]) == 2
    err = capsys.readouterr().err
    assert "schedule.staging" in err and "and 1 more" in err and "launch_overhead" not in err


def test_a_tile_that_cannot_fit_its_staging_level_is_refused(tmp_path: Path) -> None:
    path = _h100_variant(tmp_path, "h100-sxm.toml", ("tile_m = 128", "tile_m = 100000"))
    (err,) = profiles.validate_paths([path])
    assert err.field == "schedule.tile_m" and "staging level 'smem'" in err.reason


def test_a_result_of_a_misshapen_profile_carries_its_warnings(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # An id that is not the file's name, an L1 larger than its L2 and a memory of 2^62 B are
    # legal, so the step runs, but inspect says each (not only `machines validate`).
    path = _h100_variant(tmp_path, "mine.toml", ('value = "50 MiB"', 'value = "50 KiB"'),
                         ('value = "80 GiB"', 'value = "4194304 TiB"'))
    assert main(["inspect", "--machine", str(path), "--network", "gpt2-small", "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("'id'" in w and "differs from the file name 'mine'" in w for w in warnings)
    assert any("level[smem].size" in w and "larger than the cache below it" in w for w in warnings)
    assert any("memory.capacity" in w and "beyond any one device" in w for w in warnings)


def test_no_shipped_profile_result_carries_a_shape_warning() -> None:
    from memwall.plausibility import structure_warnings

    for path in data_files("machines"):
        if path.stem != "TEMPLATE":
            assert structure_warnings(profiles.load_machine(path.stem)) == [], path.stem


def test_a_work_in_flight_cap_below_a_measured_stream_is_warned_about() -> None:
    """Little's law: units x bytes_in_flight / latency is the least in flight a measured rate
    needs, so a cap below the part's own measured stream names the figure to fix (the H200's
    one-load occupancy curve gave 11.02 kB a unit, holding reads at 3.88 of its measured 4.48 TB/s)."""
    from dataclasses import replace

    from memwall.plausibility import plausibility
    from memwall.schema import Problems

    h200 = profiles.load_machine("h200")
    problems = Problems()
    plausibility(h200, problems)
    assert problems.warnings == []
    capped = replace(h200, schedule=replace(h200.schedule, params={**h200.schedule.params, "bytes_in_flight": 11020}))
    problems = Problems()
    plausibility(capped, problems)
    [warning] = problems.warnings
    assert warning.field == "schedule.bytes_in_flight"
    assert "below the 4.48e+12 B/s of memory.sustained_read" in warning.reason
