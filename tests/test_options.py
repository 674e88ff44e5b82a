"""The case options, declared once (memwall.options): every entry point takes exactly the
declared options, refuses one that does not apply with one line naming it, and counts the
sweep's combinations an option value was left off."""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from pathlib import Path

import pytest

import memwall
from memwall.cli import build_parser, main
from memwall.errors import InputError
from memwall.options import BY_NAME, DEVICES, OPTIONS, STEP, TIMING, Case, combine, make_case
from memwall.simulation.row import ROW, row_problem
from memwall.study.measurements import MEASUREMENT_KEYS, load_measurement_file


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices[name]


def _dests(name: str) -> set[str]:
    return {a.dest for a in _subparser(name)._actions}


def test_every_option_is_a_case_field_an_inspect_and_sweep_argument_and_a_measurement_key():
    fields = [f.name for f in dataclasses.fields(Case)]
    assert fields == ["machine", "network", *(o.name for o in OPTIONS), "gemm"]
    for option in OPTIONS:
        assert option.name in _dests("inspect") and option.name in _dests("sweep")
        assert option.name in MEASUREMENT_KEYS
        assert (option.name in _dests("step")) == (option.stage == STEP)
    sweep = {a.dest: a for a in _subparser("sweep")._actions}
    assert all(sweep[o.name].nargs == "+" for o in OPTIONS)  # a list everywhere in the sweep


def test_defaults_never_count_as_given_and_the_timing_never_shapes_a_replay():
    case = Case("h100-sxm", "gpt2-small", batch=8, dispatch="graph")
    assert case.given() == {"batch": 8, "dispatch": "graph"}
    assert case.as_dict() == {"machine": "h100-sxm", "network": "gpt2-small", "gemm": None, "batch": 8,
                              "dispatch": "graph"}
    assert "dispatch" not in case.key(STEP, DEVICES) and case.key(STEP, DEVICES)["batch"] == 8
    assert BY_NAME["dispatch"].stage == TIMING
    assert Case("h100-sxm", "gpt2-small").key(STEP, DEVICES) == Case("h200", "gpt2-small", batch=1).key(STEP)


@pytest.mark.parametrize(("argv", "named"), [
    (["--gemm", "64,64,64", "--phase", "decode", "--context", "8"], "--phase"),
    (["--gemm", "64,64,64", "--weights", "int4"], "--weights"),
    (["--gemm", "64,64,64", "--accumulate", "2"], "--accumulate"),
    (["--gemm", "64,64,64", "--checkpoint", "sqrt"], "--checkpoint"),
    (["--gemm", "64,64,64", "--fusion", "full"], "--fusion"),
    (["--gemm", "64,64,64", "--batch", "4"], "--batch"),
    (["--network", "gpt2-small", "--context", "512"], "--context"),
    (["--network", "gpt2-small", "--phase", "decode", "--context", "5", "--optimizer", "adam"], "--optimizer"),
    (["--network", "llama3-8b", "--phase", "decode", "--context", "5", "--weight-group", "32"], "--weight-group"),
    (["--gemm", "64,64,64", "--crossover"], "--crossover"),
    (["--network", "llama3-8b", "--crossover"], "--crossover"),
    (["--network", "gpt2-small", "--out-dtype", "fp16"], "--out-dtype"),
])
def test_an_option_that_does_not_apply_is_refused_in_one_line_naming_it(argv, named, capsys):
    assert main(["inspect", "--machine", "h100-sxm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err


def test_step_refuses_what_does_not_apply_too(capsys):
    assert main(["step", "--network", "gpt2-small", "--kv-dtype", "fp8"]) == 2
    assert "--kv-dtype does not apply to phase train" in capsys.readouterr().err


def test_the_sweep_applies_a_value_where_it_applies_and_counts_the_rest_in_one_line():
    from memwall.cli.sweep import build_cases

    args = build_parser().parse_args(["sweep", "--machines", "h100-sxm", "--networks", "gpt2-small",
                                      "--phase", "train,decode", "--context", "512", "--batches", "1,8"])
    combined = build_cases(args)
    assert sorted((c.phase, c.context, c.batch) for c in combined.cases) == [
        ("decode", 512, 1), ("decode", 512, 8), ("train", None, 1), ("train", None, 8)]
    assert combined.skipped == {"context": 2}
    assert combined.note().count("\n") == 0 and "--context on 2 cases" in combined.note()


def test_combine_runs_a_case_once_when_only_left_off_values_differ():
    base = [Case("h100-sxm", "gpt2-small")]
    combined = combine(base, {"weights": ["int8", "int4"]})  # train: weights do not apply
    assert combined.cases == base and combined.skipped == {"weights": 2}


def test_make_case_reads_values_as_a_person_writes_them_and_names_a_bad_one():
    case = make_case("h100-sxm", "llama3-8b", phase="decode", context="512", dp=2, kv_dtype="fp8")
    assert (case.context, case.dp, case.kv_dtype) == (512, 2, "fp8")
    with pytest.raises(InputError) as err:
        make_case("h100-sxm", "gpt2-small", batch="0")
    assert err.value.field == "batch" and ">= 1" in err.value.reason
    with pytest.raises(InputError, match="unknown option 'bacth'"):
        make_case("h100-sxm", "gpt2-small", bacth=4)


def test_a_measurement_key_that_does_not_apply_is_refused_with_file_line_and_key(tmp_path: Path):
    path = tmp_path / "m.toml"
    path.write_text('[[measurement]]\nid = "x"\nmachine = "h100-sxm"\nnetwork = "gpt2-small"\nbatch = 8\n'
                    'phase = "forward"\noptimizer = "adam"\nmetric = "flops"\nvalue = 1e12\n'
                    'source = "s"\nreliability = "low"\nnotes = "n"\n')
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    assert err.value.file == str(path) and err.value.line == 7 and err.value.field.endswith("optimizer")
    assert "does not apply to phase forward" in err.value.reason


def test_the_python_api_takes_the_measurement_keys():
    r = memwall.run("vax-11-780", "nettalk", updates="per-example")
    assert r.time.seconds == r["seconds"] > 0 and r.identity.machine == "vax-11-780"
    assert r.to_json()["updates"] == "per-example"
    with pytest.raises(InputError, match="--batch does not apply to a single GEMM"):
        memwall.run("h100-sxm", gemm=(64, 64, 64), batch=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = memwall.sweep(machine=["vax-11-780", "sun-3-260"], network="nettalk", batch=[1, 2],
                             context=128)
    assert [(r["machine"], r["batch"]) for r in rows] == [
        ("vax-11-780", 1), ("vax-11-780", 2), ("sun-3-260", 1), ("sun-3-260", 2)] or len(rows) == 4
    assert all(r["status"] == "ok" and row_problem(r) is None for r in rows)
    assert any("--context on 4 cases" in str(w.message) for w in caught)


def test_the_row_declaration_checks_rows():
    assert len({c.name for c in ROW}) == len(ROW)
    good = {"machine": "m", "year": 1986, "kind": "scalar", "status": "ok", "batch": 1, "network": None,
            "checkpoint": "none", "updates": "minibatch", "phase": "train", "seconds": 1.0, "synthetic": False}
    assert row_problem(good) is None
    assert row_problem({**good, "seconds": float("nan")}) == ("seconds", "float nan")
    assert row_problem({**good, "synthetic": 1}) == ("synthetic", "int 1")
    assert row_problem({**good, "year": "1986"})[0] == "year"


def test_several_devices_serve_every_replicas_tokens_and_say_the_rate_per_device():
    one = memwall.run("h100-sxm", "llama3-8b", phase="decode", context=512, batch=4, tp=2)
    two = memwall.run("h100-sxm", "llama3-8b", phase="decode", context=512, batch=4, dp=2, tp=2)
    s = two["serving"]
    assert s["tokens_per_second"] == pytest.approx(4 * s["tokens_per_second_per_device"], rel=1e-12)
    assert s["tokens_per_second"] == pytest.approx(2 * one["serving"]["tokens_per_second"], rel=1e-9)
    assert s["tokens_per_second"] == pytest.approx(2 * 4 / two.time.seconds, rel=1e-12)


def test_crossover_takes_the_what_if_the_limit_and_gives_the_warnings(capsys):
    base = ["inspect", "--machine", "h100-sxm", "--network", "llama3-8b", "--phase", "decode", "--context", "512",
            "--crossover", "--json"]
    import json

    assert main(base) == 0
    fast = json.loads(capsys.readouterr().out)
    assert main([*base, "--set", "memory.bandwidth=1 TB/s"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert slow["rows"][0]["seconds"] > 2 * fast["rows"][0]["seconds"]  # the what-if reached the runs
    assert main([*base, "--max-lookups", "10"]) == 2
    assert "--max-lookups" in capsys.readouterr().err
    assert main(["inspect", "--machine", "v100-sxm2", "--network", "llama3-70b", "--phase", "decode", "--context",
                 "512", "--crossover", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compute_bound_at_batch"] is None and not out["rows"][0]["fits"] and len(out["rows"]) == 1


def test_inputs_that_used_to_raise_are_one_line_errors(capsys, tmp_path):
    out = str(tmp_path / "out")
    assert main(["sweep", "--machines", "cray-1", "--accumulate", "²", "--out", out]) == 2
    assert "must be a whole number" in capsys.readouterr().err
    assert main(["sweep", "--machines", "cray-1", "--executor", "dask", "--scheduler", "127.0.0.1",
                 "--out", out]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    big = "1000000000000000000000"
    assert main(["inspect", "--machine", "h100-sxm", "--gemm", f"{big},{big},{big}"]) == 2
    assert "field 'gemm'" in capsys.readouterr().err
    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--batch", str(10**17)]) == 2
    assert "field 'batch'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "1e3", "two"])
def test_a_bad_max_positions_is_one_line_naming_it(value, capsys):
    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--max-positions", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "field 'max_positions': must be a whole number >= 1" in err


def test_a_position_table_too_large_to_address_names_max_positions_not_batch(capsys):
    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--max-positions", str(10**23)]) == 2
    assert "field 'max_positions'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "1e99"])
def test_a_bad_scheduler_timeout_says_its_bounds(value, tmp_path):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--scheduler-timeout", value, "--out", str(tmp_path)])


def test_a_single_gemm_takes_every_arithmetic_type_a_network_step_does_not(tmp_path):
    # fp64 and tf32 products (the Cray's library matrix multiply, a TF32 GEMM) are checks a
    # measurement file or inspect may ask for; a network's inference step may not.
    from memwall.cli import main
    from memwall.simulation import run_case

    assert run_case(make_case(machine="cray-1", gemm=(256, 256, 256), dtype="fp64"))["flops"] == 2 * 256**3
    assert run_case(make_case(machine="h100-sxm", gemm=(64, 64, 64), dtype="tf32"))["dtype"] == "tf32"
    with pytest.raises(InputError, match="dtype"):
        run_case(make_case(machine="cray-1", network="nettalk", phase="forward", dtype="fp64"))
    path = tmp_path / "m.toml"
    path.write_text('[[measurement]]\nid = "mm"\nmachine = "cray-1"\ngemm = "64,64,64"\ndtype = "fp64"\n'
                    'metric = "flops"\nvalue = "100 MFLOP/s"\nsource = "s"\nreliability = "low"\nnotes = "n"\n')
    assert main(["validate", "--measurements", str(path)]) == 0
