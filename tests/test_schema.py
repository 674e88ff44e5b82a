"""The one declaration and walker behind every data file: each format refuses what it
must, every problem of a file at once with file, line, field and reason; the docs, the
writer and the CLI come from the same declarations."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

from memwall import levels, networks, profiles, schema, schema_docs
from memwall.cli import build_parser, main
from memwall.data import era_data_dir
from memwall.errors import InputError
from memwall.options import BY_NAME
from memwall.schema import Field, Problems, Table, key_lines, walk
from memwall.study import measurements
from memwall.vocabulary import (
    ATTENTIONS,
    DISPATCH_MODES,
    FUSIONS,
    KV_DTYPES,
    OPTIMIZERS,
    PHASES,
    UPDATES,
    WEIGHT_DTYPES,
)

FIXTURES = Path(__file__).parent / "data"
GOOD_PROFILE = (FIXTURES / "profiles" / "good.toml").read_text()
GOOD_NETWORK = (FIXTURES / "networks" / "tiny_mlp.toml").read_text()
GOOD_CONV = """id = "tiny-conv"
name = "tiny conv"
kind = "conv"
year = 1989
source = "test"
status = "synthetic"

[conv]
input = [1, 8, 8]

[[conv.layer]]
type = "conv"
out = 4
kernel = 3

[[conv.layer]]
type = "fc"
out = 2
"""
GOOD_HIERARCHY = """clock = "1 GHz"

[[level]]
name = "L1"
size = "32 KiB"
line = 64
ways = 8
latency = "4 cycles"

[[level]]
name = "L2"
size = "1 MiB"
line = 64
ways = 16
"""
GOOD_MEASUREMENT = (FIXTURES / "measurements" / "good_gemm.toml").read_text()


def _write(tmp_path: Path, text: str, name: str = "case.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _line(text: str, start: str, nth: int = 0) -> int:
    """The 1-based line of the nth line that starts with ``start``."""
    return [i for i, x in enumerate(text.splitlines(), 1) if x.startswith(start)][nth]


def _assert_placed(e: InputError, path: Path, text: str, field: str, words: str, at: str | None) -> None:
    """``e`` names ``path``, ``field`` and ``words``, and the line that starts with ``at``."""
    assert (e.file, e.field) == (str(path), field) and words in e.reason, str(e)
    if at is not None:
        assert e.line == _line(text, at)


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# ---- where keys are written ------------------------------------------------------------


def test_key_lines_index_arrays_nested_tables_and_skip_multiline_strings() -> None:
    text = ('a = 1\nnotes = """\nb = 2\n"""\n[t]\nc = { value = 1 }\n[[x]]\nd = 1\n[[x]]\nd = 2\n'
            '[[x.y]]\ne = 3\n[s.u]\nf = 4\n')
    lines = key_lines(text)
    assert lines["a"] == 1 and "b" not in lines  # b is inside a multi-line string
    assert lines["t"] == 5 and lines["t.c"] == 6
    assert lines["x[0].d"] == 8 and lines["x[1].d"] == 10
    assert lines["x[1].y[0].e"] == 12
    assert lines["s.u.f"] == 14


def test_problems_place_named_elements_at_their_index() -> None:
    p = Problems("f.toml", "[[level]]\nname = 'a'\n[[level]]\nname = 'b'\nsize = 1\n")
    p.alias("level[b]", "level[1]")
    assert p.line_of("level[b].size") == 5
    assert p.line_of("level[b].ways") == 3  # a missing key: the line of its table


# ---- the walker on a small declaration ----------------------------------------------------

DECL = Table("test", (
    Field("mode", "word", "a mode", required=True, choices=("a", "b"), noun="mode"),
    Field("count", "int", "a count", required=True, minimum=1, maximum=10),
    Field("rate", "number", "a rate", above=0),
    Field("only_a", "int", "for mode a", when=("mode", ("a",)), required=True),
    Field("size", "any", "a size", parse=lambda v, c: levels.parse_bytes(v)),
))


@pytest.mark.parametrize(("raw", "field", "words"), [
    ({"mode": "a", "count": 1, "only_a": 1, "cuont": 2}, "cuont", "did you mean 'count'"),
    ({"mode": "a", "only_a": 1}, "count", "missing required field 'count'"),
    ({"mode": "a", "count": "3", "only_a": 1}, "count", "must be an integer"),
    ({"mode": "a", "count": 11, "only_a": 1}, "count", "at most 10"),
    ({"mode": "a", "count": 0, "only_a": 1}, "count", "at least 1"),
    ({"mode": "a", "count": 1, "only_a": 1, "rate": -1.0}, "rate", "positive"),
    ({"mode": "a", "count": 1, "only_a": 1, "rate": math.nan}, "rate", "finite"),
    ({"mode": "a", "count": 1, "only_a": 1, "rate": math.inf}, "rate", "finite"),
    ({"mode": "a", "count": 1}, "only_a", "mode 'a' needs 'only_a'"),
    ({"mode": "b", "count": 1, "only_a": 1}, "only_a", "does not apply to mode 'b'"),
    ({"mode": "c", "count": 1}, "mode", "unknown mode 'c'"),
    ({"mode": "b", "count": 1, "size": "1e400 KiB"}, "size", "not a finite number"),
])
def test_walker_refuses_by_field(raw: dict, field: str, words: str) -> None:
    problems = Problems("f.toml")
    walk(raw, DECL, problems, "t")
    assert [e.field for e in problems.errors] == [f"t.{field}"], [str(e) for e in problems.errors]
    assert words in problems.errors[0].reason
    assert problems.errors[0].file == "f.toml"


def test_walker_keeps_good_values_in_declaration_order() -> None:
    problems = Problems()
    out = walk({"size": "1 KiB", "count": 3, "mode": "a", "only_a": 2}, DECL, problems)
    assert problems.errors == []
    assert list(out) == ["mode", "count", "only_a", "size"] and out["size"] == 1024


def test_a_declaration_refuses_a_table_field_without_its_table() -> None:
    with pytest.raises(ValueError):
        Field("x", "table", "no table")
    with pytest.raises(ValueError):
        Table("t", (Field("a", "int", ""), Field("a", "int", "")))


# ---- machine profiles ---------------------------------------------------------------------

PROFILE_CASES = [
    # (old, new, field, words, the line the error must name: the text that starts it)
    ("model = \"in_order\"", "model = \"vector\"\nvector_length = { value = 64, source = \"t\", status = "
     "\"verified\" }\nmemory_ports = nan\nword_bytes = 8\nstartup = 1\nchaining = true", "timing.memory_ports",
     "finite", "memory_ports"),
    ("kind = \"scalar\"", "kind = \"vector\"", "timing.model", "does not fit", "model ="),
    ('"10 MHz"', '"1e300 THz"', "clock", "overflows to infinity", "clock ="),
    ("year = 1986", "year = inf", "year", "finite", "year ="),
    ("year = 1986", "year = 1800", "year", "at least 1940", "year ="),
    ("year = 1986", "year = \"1986\"", "year", "must be an integer", "year ="),
    ("ways = 2", "ways = 2\nseed = -1", "level[cache].seed", "at least 0", "seed ="),
    ("ways = 2", "ways = 2\nshared_by = 0", "level[cache].shared_by", "at least 1", "shared_by ="),
    ("[memory]\ncapacity", "[memory]\ncapacty", "memory.capacty", "did you mean 'capacity'", "capacty ="),
]


@pytest.mark.parametrize(("old", "new", "field", "words", "at"), PROFILE_CASES,
                         ids=[f"{c[2]}:{c[3]}" for c in PROFILE_CASES])
def test_profile_problem_names_file_line_and_field(tmp_path: Path, old: str, new: str, field: str, words: str,
                                                   at: str) -> None:
    text = _edit(GOOD_PROFILE, old, new)
    path = _write(tmp_path, text)
    errors = profiles.validate_paths([path])
    match = [e for e in errors if e.field == field and words in e.reason]
    assert match, [str(e) for e in errors]
    assert match[0].file == str(path) and match[0].line == _line(text, at)


def test_profile_reports_every_problem_at_once_with_lines(tmp_path: Path) -> None:
    text = (GOOD_PROFILE.replace("year = 1986", "year = nan").replace('"8 KiB"', '"8200 B"')
            .replace("vendor =", "vendour =").replace('"500 ns"', '"-5 ns"'))
    path = _write(tmp_path, text)
    errors = {e.field: e for e in profiles.validate_paths([path])}
    assert {"year", "level[cache].size", "vendour", "vendor", "memory.latency"} <= set(errors)
    assert errors["year"].line == _line(text, "year")
    assert errors["level[cache].size"].line == _line(text, "size")
    assert errors["memory.latency"].line == _line(text, "latency")
    with pytest.raises(InputError, match="more"):
        profiles.load_machine_file(path)


def test_plausibility_warnings_and_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _edit(GOOD_PROFILE, "ways = 2\n", "ways = 2\n\n[[level]]\nname = \"L2\"\nsize = { value = \"4 KiB\", "
                 "source = \"t\", status = \"estimate\", derivation = \"test\" }\nline = 16\nways = 2\n")
    path = _write(tmp_path, text, "test-good.toml")
    machine, errors, warnings = profiles.check_file(path)
    assert machine is not None and errors == []
    assert [w.field for w in warnings] == ["level[cache].size"] and "larger than the cache below" in warnings[0].reason
    assert main(["machines", "validate", str(path)]) == 0
    assert "warning:" in capsys.readouterr().out
    assert main(["machines", "validate", "--strict", str(path)]) == 1
    renamed = _write(tmp_path, GOOD_PROFILE, "other-name.toml")
    assert [w.field for w in profiles.check_file(renamed)[2]] == ["id"]


@pytest.mark.parametrize("path", profiles._shipped_paths().values(), ids=lambda p: p.stem)
def test_shipped_profiles_raise_no_warnings(path: Path) -> None:
    assert profiles.check_file(path)[2] == []


# ---- network presets ----------------------------------------------------------------------

NETWORK_CASES = [
    (GOOD_NETWORK, "bias = true", "bias = true\nwidth = 3", "mlp.width", "unknown key", "width ="),
    (GOOD_NETWORK, "year = 1986\n", "", "year", "missing required field 'year'", None),
    (GOOD_NETWORK, "year = 1986", "year = nan", "year", "finite", "year ="),
    (GOOD_NETWORK, "layers = [4, 3, 2]", "layers = [4, 0, 2]", "mlp.layers", "positive integers", "layers ="),
    (GOOD_NETWORK, "layers = [4, 3, 2]", "layers = [4, inf]", "mlp.layers", "finite", "layers ="),
    (GOOD_NETWORK, "layers = [4, 3, 2]", "layers = [4]", "mlp.layers", "at least an input", "layers ="),
    (GOOD_NETWORK, 'kind = "mlp"', 'kind = "conv"', "mlp", "does not apply to kind 'conv'", "[mlp]"),
    (GOOD_CONV, "out = 2\n", "out = 2\nkernel = 5\n", "conv.layer[1].kernel", "does not apply to type 'fc'",
     "kernel = 5"),
    (GOOD_CONV, "kernel = 3", "kernel = 30", "conv.layer[0].kernel", "no output pixels", None),
    (GOOD_CONV, "kernel = 3", "kernel = 3\nconnected = 2", "conv.layer[0].connected", "cannot exceed", "connected"),
]


def test_network_reports_every_problem_at_once(tmp_path: Path) -> None:
    text = GOOD_NETWORK.replace("year = 1986", "year = -1").replace('"sigmoid"', '"softplus"') + "colour = 1\n"
    path = _write(tmp_path, text)
    errors = {e.field: e for e in networks.validate_paths([path])}
    assert set(errors) == {"year", "mlp.activation", "mlp.colour"}
    assert errors["mlp.activation"].line == _line(text, "activation")


def test_conv_layers_load_from_the_declaration(tmp_path: Path) -> None:
    net = networks.load_network(_write(tmp_path, GOOD_CONV))
    conv, fc = net.conv_layers
    assert (conv.out_hw, conv.stride, conv.pad, conv.connected, conv.bias) == ((6, 6), 1, 0, 1, "shared")
    assert (fc.in_channels, fc.name) == (4 * 6 * 6, "L2")


def test_cli_networks_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shipped = [str(p) for p in sorted((era_data_dir() / "networks").glob("*.toml"))]
    assert main(["networks", "validate", *shipped]) == 0
    assert f"{len(shipped)} of {len(shipped)} file(s) valid" in capsys.readouterr().err
    bad = _write(tmp_path, GOOD_NETWORK.replace("year = 1986", "year = nan") + "colour = 1\n")
    assert main(["networks", "validate", shipped[0], str(bad)]) == 1
    out = capsys.readouterr()
    assert out.out.count(str(bad)) == 2 and "1 of 2 file(s) valid" in out.err


# ---- stand-alone hierarchy files ------------------------------------------------------------

HIERARCHY_CASES = [
    ("ways = 8", "ways = 8\nassoc = 2", "level[L1].assoc", "unknown key", "assoc ="),
    ("ways = 8", "ways = nan", "level[L1].ways", "finite", "ways ="),
    ('size = "1 MiB"', 'size = "1 MB"', "level[L2].size", "sets x ways x line", None),
    ('size = "1 MiB"\n', "", "level[L2].size", "missing required field 'size'", None),
    ('clock = "1 GHz"', 'clock = "1 GB"', "clock", "frequency", "clock ="),
    ('latency = "4 cycles"', 'latency = "-4 cycles"', "level[L1].latency", "non-negative", "latency ="),
]


LOADERS = {"network": networks.load_network, "hierarchy": levels.load_hierarchy_file}
RAISING_CASES = [("network", *c) for c in NETWORK_CASES] + [("hierarchy", GOOD_HIERARCHY, *c) for c in HIERARCHY_CASES]


@pytest.mark.parametrize(("fmt", "good", "old", "new", "field", "words", "at"), RAISING_CASES,
                         ids=[f"{c[0]}:{c[4]}:{c[5]}" for c in RAISING_CASES])
def test_first_problem_names_file_line_and_field(tmp_path: Path, fmt: str, good: str, old: str, new: str,
                                                  field: str, words: str, at: str | None) -> None:
    text = _edit(good, old, new)
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        LOADERS[fmt](path)
    _assert_placed(err.value, path, text, field, words, at)


def test_hierarchy_levels_and_every_problem_at_once(tmp_path: Path) -> None:
    l1, l2 = levels.load_hierarchy_file(_write(tmp_path, GOOD_HIERARCHY))
    assert (l1.sets, l1.latency, l2.ways) == (64, pytest.approx(4e-9), 16)
    text = GOOD_HIERARCHY.replace("ways = 8", "ways = 0").replace("ways = 16", 'ways = "many"')
    with pytest.raises(InputError, match=r"and 1 more"):
        levels.load_hierarchy_file(_write(tmp_path, text, "two.toml"))


# ---- measurement files ----------------------------------------------------------------------

MEASUREMENT_CASES = [
    ('value = "4.88 TFLOP/s"', "value = nan", "value", "finite", "value ="),
    ('value = "4.88 TFLOP/s"', "value = inf", "value", "finite", "value ="),
    ('value = "4.88 TFLOP/s"', 'value = "1e400 TFLOP/s"', "value", "positive and finite", "value ="),
    ('notes = "a note"', 'notes = "a note"\nyear = 1800', "year", "at least 1940", "year ="),
    ('notes = "a note"', 'notes = "a note"\nvalu = 1', "valu", "did you mean 'value'", "valu ="),
    ('machine = "v100-sxm2"\n', "", "machine", "missing required field 'machine'", None),
]


@pytest.mark.parametrize(("old", "new", "field", "words", "at"), MEASUREMENT_CASES,
                         ids=[f"{c[2]}:{c[3]}" for c in MEASUREMENT_CASES])
def test_measurement_problem_names_file_line_and_field(tmp_path: Path, old: str, new: str, field: str, words: str,
                                                       at: str | None) -> None:
    text = _edit(GOOD_MEASUREMENT, old, new)
    path = _write(tmp_path, text)
    _, errors = measurements.check_measurement_file(path)
    match = [e for e in errors if e.field == f"measurement[g].{field}" and words in e.reason]
    assert match, [str(e) for e in errors]
    _assert_placed(match[0], path, text, f"measurement[g].{field}", words, at)


def test_measurement_file_reports_every_problem_at_once(tmp_path: Path) -> None:
    second = GOOD_MEASUREMENT.replace('id = "g"', 'id = "h"').replace('metric = "flops"', 'metric = "speed"')
    text = GOOD_MEASUREMENT.replace('reliability = "high"', 'reliability = "sure"') + "\n" + second
    _, errors = measurements.check_measurement_file(_write(tmp_path, text))
    assert {(e.field, e.line) for e in errors} == {
        ("measurement[g].reliability", _line(text, "reliability")),
        ("measurement[h].metric", _line(text, "metric", 1)),
    }


# ---- docs, writer and CLI from the declarations ---------------------------------------------


def test_generated_docs_are_current() -> None:
    assert schema_docs.stale_docs() == [], "run: python -m memwall.schema_docs --update"
    readme = (era_data_dir() / "README.md").read_text()
    for table in (profiles.PROFILE, profiles.TIMING, levels.LEVEL, networks.TRANSFORMER, networks.CONV_LAYER):
        for f in table.fields:
            assert f"| `{f.key}` |" in readme, f.key


def test_generated_docs_notice_a_new_field(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = Field("bytes_in_flight", "int", "a field the docs do not have yet", minimum=1)
    monkeypatch.setattr(profiles, "MEMORY", Table("[memory]", (*profiles.MEMORY.fields, extra)))
    changed = Table(profiles.PROFILE.title, tuple(
        Field(f.key, f.type, f.doc, required=f.required, table=profiles.MEMORY) if f.key == "memory" else f
        for f in profiles.PROFILE.fields), doc=profiles.PROFILE.doc)
    monkeypatch.setattr(profiles, "PROFILE", changed)
    assert era_data_dir() / "README.md" in schema_docs.stale_docs()


def test_writer_round_trips_through_the_declaration(tmp_path: Path) -> None:
    data = {"format_version": 1, "id": "w", "name": "written", "vendor": "v",
            "year": {"value": 2000, "source": "s", "status": "estimate", "derivation": "d"},
            "kind": "scalar", "clock": {"value": "1 GHz", "source": "s", "status": "verified"},
            "compute": {"fp32": {"value": "2 FLOP/cycle", "source": "s", "status": "verified"}},
            "issue_costs": {k: {"value": "1 cycles", "source": "s", "status": "verified"} for k in ("fadd", "fmul")},
            "level": [{"name": "L1", "size": {"value": "1 KiB", "source": "s", "status": "verified"}, "line": 64,
                       "ways": "full"}],
            "memory": {k: {"value": v, "source": "s", "status": "verified"}
                       for k, v in (("capacity", "1 GiB"), ("latency", "100 ns"), ("bandwidth", "1 GB/s"))},
            "timing": {"model": "in_order", "note": 'quotes " and \\ escaped'}, "schedule": {"family": "scalar"},
            "sources": {"s": "a source"}}
    text = schema.dumps(data, profiles.PROFILE, comments=["written by a test"])
    assert tomllib.loads(text) == data and text.startswith("# written by a test\n")
    m = profiles.load_machine_file(_write(tmp_path, text, "w.toml"))
    assert m.levels[0].ways == 16 and m.clock_hz == 1e9
    with pytest.raises(ValueError, match="not declared"):
        schema.dumps({**data, "colour": 1}, profiles.PROFILE)
    with pytest.raises(ValueError, match="finite"):
        schema.dumps({**data, "timing": {"model": "overlapped", "mlp": math.nan}}, profiles.PROFILE)


@pytest.mark.parametrize(("option", "words"), [
    ("updates", UPDATES), ("phase", PHASES), ("optimizer", OPTIMIZERS), ("weights", WEIGHT_DTYPES),
    ("kv_dtype", KV_DTYPES), ("fusion", FUSIONS), ("dispatch", DISPATCH_MODES), ("attention", ATTENTIONS),
])
def test_cli_choices_are_the_vocabulary(option: str, words: tuple[str, ...], capsys) -> None:
    """The options' declarations take their words from the vocabulary, and the command line
    refuses another word with one line listing them, for inspect and step alike."""
    assert BY_NAME[option].field.choices == words
    commands = [["inspect", "--machine", "h100-sxm", "--network", "gpt2-small"]]
    if BY_NAME[option].stage == "step":
        commands.append(["step", "--network", "gpt2-small"])
    for command in commands:
        assert main([*command, f"--{option.replace('_', '-')}", "nope"]) == 2
        err = capsys.readouterr().err
        assert f"must be one of {', '.join(words)}, got 'nope'" in err and err.count("\n") == 1


@pytest.mark.parametrize(("option", "word"), [("updates", "per_example"), ("phase", "decod"),
                                               ("weights", "int3"), ("kv_dtype", "int2")])
def test_sweep_lists_are_checked_against_the_vocabulary(option: str, word: str) -> None:
    """The sweep's case options take comma lists, so argparse cannot check them; validate does."""
    from memwall.cli.sweep import build_cases
    from memwall.simulation.checks import validate

    value = f"decode,{word}" if option == "phase" else word  # a good word beside the bad one
    argv = ["sweep", "--machines", "h100-sxm", "--networks", "gpt2-small", "--phase", "decode",
            "--context", "16", f"--{option.replace('_', '-')}", value]
    args = build_parser().parse_args(argv)
    with pytest.raises(InputError):
        validate(build_cases(args))


@pytest.mark.parametrize("argv", [
    ["machines", "show", "cray-1", "--json"], ["machines", "list", "--json"], ["networks", "show", "nettalk", "--json"],
    ["networks", "list", "--json"], ["step", "--network", "encoder-8-3-8", "--json"],
])
def test_every_json_document_carries_the_schema_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    for item in doc if isinstance(doc, list) else [doc]:
        assert item["schema_version"] == schema.SCHEMA_VERSION
