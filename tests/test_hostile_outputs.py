"""Hostile figures and strings cannot make an output lie, break or take over the terminal.

Three defences, each tested where it stands:

- finite outputs: a figure that is impossible (zero, negative, not finite, or so small or
  large that the step's numbers stop being numbers) is refused where it is read, with the
  field named and, for ``--set``, the command line blamed; a result that is not finite
  anyway is refused where it is built; the JSON printer writes no NaN or Infinity token;
- the report's embedded data escapes ``<``, ``>`` and ``&``, so a name holding
  ``<!--<script>`` leaves the page's script elements as they were;
- every text printer replaces control characters (C0 but newline and tab, DEL, C1, ESC
  sequences, bidirectional overrides, lone surrogates) with a visible escape.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from memwall import api
from memwall.cli import main
from memwall.cli._output import print_json
from memwall.errors import InputError
from memwall.profiles import load_machine
from memwall.text import printable

ESC = "\x1b"
HOSTILE = "evil\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\r"  # clear screen, set title, CSI, RTL override, CR


def _child_profile(tmp_path, body: str, name: str = "child") -> str:
    """A profile extending h100-sxm with ``body`` added (a file of tmp_path)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f'base = "h100-sxm"\nid = "{name}"\nname = "a child"\n{body}\n', encoding="utf-8")
    return str(path)


def _no_controls(text: str) -> None:
    bad = [c for c in text if c not in "\n\t" and (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f
                                                  or 0x202a <= ord(c) <= 0x202e or 0xd800 <= ord(c) <= 0xdfff)]
    assert not bad, f"control characters reached the output: {bad!r}"


# ---------------------------------------------------------------------------------------
# 1. finite outputs: impossible figures refused where read, with the right culprit


@pytest.mark.parametrize("setting, field", [
    ("memory.bandwidth=1e-300 B/s", "memory.bandwidth"),      # subnormal rate: the step's time overflows
    ("clock=5e-324Hz", "clock"),                              # subnormal clock: zero cycles for a real step
    ("clock=1e300 Hz", "clock"),                              # absurd clock: cycles overflow
    ("memory.latency=1e300 s", "memory.latency"),             # absurd time
    ("compute.fp32=1e-300 FLOP/s", "compute.fp32"),           # subnormal arithmetic rate
    ("level.L2.bandwidth=1e-300 B/s", "level.L2.bandwidth"),  # a level's figure, by the level's name
    ("memory.bandwidth=0 B/s", "memory.bandwidth"),           # zero
    ("memory.bandwidth=-1 B/s", "memory.bandwidth"),          # negative
    ("memory.bandwidth=1e400 B/s", "memory.bandwidth"),       # not finite
    ("memory.bandwdth=1 TB/s", "memory.bandwdth"),            # a typo
])
def test_an_impossible_set_is_refused_naming_the_command_line(setting, field, capsys):
    code = main(["inspect", "--machine", "h100-sxm", "--network", "nettalk", "--set", setting, "--json",
                 "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert f"--set {field}" in err, err
    assert "h100-sxm.toml" not in err, f"a --set problem blames the installed profile: {err}"
    assert err.count("\n") == 1


def test_an_implausible_set_runs_with_a_warning_naming_the_field(capsys):
    assert main(["inspect", "--machine", "h100-sxm", "--network", "nettalk", "--set", "memory.bandwidth=1e-20 B/s",
                 "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "warning: memory.bandwidth 1e-20 B/s is outside the plausible 1000 .. 1e+17 B/s" in err
    assert json.loads(out)["warnings"]


@pytest.mark.parametrize("machine, setting, field", [
    ("cray-1", "timing.memory_ports=1e-300", "timing.memory_ports"),  # a plain positive number, subnormal
    ("core2-e6600", "timing.mlp=5e-324", "timing.mlp"),
])
def test_an_impossible_plain_number_is_refused(machine, setting, field, capsys):
    assert main(["inspect", "--machine", machine, "--network", "nettalk", "--set", setting, "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"--set {field}" in err and ".toml" not in err


@pytest.mark.parametrize("body, field", [
    ('[memory]\nbandwidth = { value = "1e-300 B/s", source = "a test", status = "estimate", derivation = "a test" }',
     "memory.bandwidth"),
    ('clock = { value = "5e-324 Hz", source = "a test", status = "estimate", derivation = "a test" }', "clock"),
    ('[timing.dispatch.eager]\nhost_issue = { value = "1e300 s", source = "a test", status = "estimate", '
     'derivation = "a test" }', "timing.dispatch.eager.host_issue"),
])
def test_an_impossible_profile_figure_is_refused_with_its_file_and_field(tmp_path, body, field, capsys):
    path = _child_profile(tmp_path, body)
    assert main(["machines", "validate", path]) == 1
    out = capsys.readouterr().out
    assert path in out and f"field '{field}'" in out
    assert main(["inspect", "--machine", path, "--network", "nettalk", "--json", "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and path in err and field in err


def _tiny(machine, **changes):
    """``machine`` with figures changed behind the loader's back (as a script may build one)."""
    memory = dataclasses.replace(machine.memory, **{k: v for k, v in changes.items() if k != "clock_hz"})
    return dataclasses.replace(machine, memory=memory, clock_hz=changes.get("clock_hz", machine.clock_hz))


@pytest.mark.parametrize("changes, named", [
    ({"bandwidth": 1e-300}, "memory.bandwidth"),
    ({"clock_hz": 5e-324}, "clock"),
    ({"latency": 1e305}, "memory.latency"),
])
def test_a_result_that_is_not_finite_is_refused_where_it_is_built(changes, named):
    machine = _tiny(load_machine("h100-sxm"), **changes)
    with pytest.raises(InputError) as caught:
        api.run(machine, "affine-48x1024", batch=4)
    assert named in str(caught.value) and "h100-sxm" in str(caught.value)


def test_a_multi_device_result_that_is_not_finite_is_refused():
    machine = _tiny(load_machine("h100-sxm"), bandwidth=1e-300)
    with pytest.raises(InputError, match="memory.bandwidth"):
        api.run(machine, "affine-48x1024", batch=4, dp=2)


def test_print_json_writes_no_nan_and_names_the_key(capsys):
    with pytest.raises(InputError) as caught:
        print_json({"a": {"b": [1.0, float("nan")]}, "c": float("inf")})
    assert "a.b[1]" in str(caught.value)
    assert capsys.readouterr().out == ""  # nothing half-written
    print_json({"a": 1.5})  # a finite document is printed as before
    assert json.loads(capsys.readouterr().out) == {"schema_version": 1, "a": 1.5}


# ---------------------------------------------------------------------------------------
# 2. the report's embedded data


def _report_rows(machine_name: str) -> list[dict]:
    from memwall.options import make_case
    from memwall.simulation.row import make_row

    case = make_case("h100-sxm", "nettalk", None)
    row = make_row(case, api.run("h100-sxm", "nettalk"), None)
    failed = make_row(case, None, f"error text {machine_name}")
    return [{**row, "machine": machine_name, "name": machine_name},
            {**failed, "machine": machine_name, "network": f"{machine_name}.toml"}]


def _blob(text: str) -> str:
    return re.search(r"<script type='application/json' id='memwall-data'>(.*?)</script>", text, re.S).group(1)


def test_the_reports_data_cannot_open_a_script_element(tmp_path):
    from memwall.report.page import render

    hostile = "m<!--<script>&<b>"  # no '/': the page names a path by its last part
    plain = render(_report_rows("plain-machine"), tmp_path)
    page = render(_report_rows(hostile), tmp_path)
    for tag in ("<script", "</script", "<!--"):
        assert page.count(tag) == plain.count(tag), tag
    blob = _blob(page)
    assert not set("<>&") & set(blob)
    data = json.loads(blob)
    assert hostile in data["machines"]
    assert data == json.loads(_blob(page))  # and parses back to the same data
    assert json.loads(_blob(plain))["figures"] == data["figures"]


# ---------------------------------------------------------------------------------------
# 3. terminal control characters


def test_printable_replaces_controls_with_visible_escapes():
    shown = printable("a\tb\nc" + HOSTILE + "\x7f\udcff")
    _no_controls(shown)
    assert shown.startswith("a\tb\nc") and "\\x1b[2J" in shown and "\\x7f" in shown and "\\u202e" in shown
    assert printable("plain text, µ and 日本") == "plain text, µ and 日本"


def _hostile_profile(tmp_path) -> str:
    path = tmp_path / "hostile.toml"
    path.write_text(f'base = "h100-sxm"\nid = "hostile"\nname = {json.dumps(HOSTILE)}\n'
                    f'notes = {json.dumps("notes " + HOSTILE)}\n', encoding="utf-8")
    return str(path)


def test_machines_show_prints_no_control_characters(tmp_path, capsys):
    assert main(["machines", "show", _hostile_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "evil\\x1b[2J" in out


def test_machines_list_prints_no_control_characters(tmp_path, capsys, monkeypatch):
    from memwall import profiles

    hostile = load_machine(_hostile_profile(tmp_path))
    monkeypatch.setattr(profiles, "all_machines", lambda: [hostile])
    assert main(["machines", "list"]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "evil\\x1b" in out


def test_inspect_prints_no_control_characters(tmp_path, capsys):
    assert main(["inspect", "--machine", _hostile_profile(tmp_path), "--network", "nettalk", "--no-progress"]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "evil\\x1b" in out


def test_validate_table_prints_no_control_characters(tmp_path, capsys):
    (tmp_path / "m.toml").write_text(
        '[[measurement]]\nid = "hostile-case"\nmachine = "h100-sxm"\ngemm = "256,256,256"\ndtype = "fp32"\n'
        'metric = "flops"\nvalue = "10 TFLOP/s"\nsource = "a test"\nreliability = "low"\n'
        f'notes = {json.dumps("notes " + HOSTILE)}\n', encoding="utf-8")
    main(["validate", "--measurements", str(tmp_path)])
    out, err = capsys.readouterr()
    _no_controls(out)
    _no_controls(err)
    assert "hostile-case" in out


def test_machines_validate_prints_no_control_characters(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('base = "h100-sxm"\nid = "bad"\nname = "bad"\n"key\\u001b[2J" = 1\n', encoding="utf-8")
    assert main(["machines", "validate", str(path)]) == 1
    out = capsys.readouterr().out
    _no_controls(out)
    assert "key\\x1b[2J" in out


def test_the_error_line_prints_no_control_characters(tmp_path, capsys):
    missing = str(tmp_path / f"machine{ESC}[2J\x9b\udcff.toml")
    assert main(["inspect", "--machine", missing, "--network", "nettalk", "--no-progress"]) == 2
    err = capsys.readouterr().err
    _no_controls(err)
    assert "machine\\x1b[2J" in err and err.count("\n") == 1


def test_networks_show_and_list_print_no_control_characters(tmp_path, capsys, monkeypatch):
    from memwall import networks
    from memwall.cli import networks as cli_networks
    from memwall.data import data_files

    text = next(p for p in data_files("networks") if p.stem == "nettalk").read_text(encoding="utf-8")
    path = tmp_path / "evil.toml"
    path.write_text(text.replace('id = "nettalk"', 'id = "evil"').replace(
        'name = "NETtalk (Sejnowski & Rosenberg)"', 'name = "evil\\u001b[2J"'), encoding="utf-8")
    assert main(["networks", "show", str(path)]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "evil\\x1b[2J" in out
    hostile = networks.load_network(str(path))
    monkeypatch.setattr(cli_networks, "all_networks", lambda: [hostile])
    assert main(["networks", "list"]) == 0
    out = capsys.readouterr().out
    _no_controls(out)
    assert "evil\\x1b" in out


def test_a_full_disk_is_one_line_naming_the_path(tmp_path, capsys, monkeypatch):
    import errno

    import memwall.report.page as page

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "report.html"))

    monkeypatch.setattr(page, "build_report", full)
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the disk is full writing" in err and "report.html" in err


@pytest.mark.parametrize(("machine", "old", "new"), [
    ("h100-sxm", 'value = "3.35 TB/s"', 'value = "3350 TB/s"'),  # memory bandwidth x1000
    ("h100-sxm", 'value = "3.35 TB/s"', 'value = "3.35 MB/s"'),  # ... and /1e6
    ("a100-sxm", 'fp32 = { value = "19.5 TFLOP/s"', 'fp32 = { value = "19.5 GFLOP/s"'),  # a peak /1000
])
def test_machines_validate_strict_catches_unit_prefix_slips(tmp_path, capsys, machine, old, new):
    from memwall.data import data_files

    text = next(p for p in data_files("machines") if p.stem == machine).read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / f"{machine}.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    assert main(["machines", "validate", "--strict", str(path)]) == 1
    out = capsys.readouterr()
    assert "unit slip" in out.out + out.err


def test_every_shipped_profile_passes_strict_validation(capsys):
    from memwall.data import data_files

    paths = [str(p) for p in data_files("machines") if p.stem != "TEMPLATE"]
    assert main(["machines", "validate", "--strict", *paths]) == 0, capsys.readouterr()


def test_a_cycle_count_beyond_any_machines_is_warned_naming_the_field(capsys):
    from memwall.cli import main

    assert main(["inspect", "--machine", "cray-1", "--network", "nettalk", "--updates", "per-example",
                 "--set", "timing.bank_busy=1e6"]) == 0
    err = capsys.readouterr().err
    assert "timing.bank_busy 1e+06 cycles is outside the plausible 0 .. 10000 cycles" in err
