"""The measurement loader: the shipped set loads, and malformed files are refused by field."""

from __future__ import annotations

from pathlib import Path

import pytest

from memwall.data import era_data_dir
from memwall.errors import InputError
from memwall.study.measurements import (
    CHECKS,
    METRICS,
    RELIABILITIES,
    load_measurement_file,
    load_measurements,
    parse_value,
)

FIXTURES = Path(__file__).parent / "data" / "measurements"

GOOD_GEMM = (FIXTURES / "good_gemm.toml").read_text()

GOOD_NET = """
[[measurement]]
id = "n"
machine = "cm-2"
network = "nettalk"
batch = 1
updates = "per-example"
metric = "cups"
value = 4e7
source = "a source, p. 1"
reliability = "medium"
notes = "a note"
"""


def write(tmp_path: Path, text: str, name: str = "m.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_set_loads_with_unique_ids_and_full_provenance() -> None:
    ms = load_measurements()
    assert len(ms) >= 15
    assert len({m.id for m in ms}) == len(ms)
    for m in ms:
        assert m.metric in METRICS and m.reliability in RELIABILITIES and m.check in CHECKS
        assert m.value > 0 and len(m.source) > 20 and len(m.notes) > 20
        assert m.file and m.line, "each measurement knows where it was written"
    ids = {m.id for m in ms}
    for required in ("witbrock-zagha-1989-gf11-nettalk", "zhang-1989-cm2-64k-train",
                     "narayanan-2021-table1-gpt-1008b-a100", "deepbench-v100-fp16tc-4096x7000x4096"):
        assert required in ids
    # Narayanan et al. 2021, Table 1: one point check per row, each on the devices it ran on
    table1 = [m for m in ms if m.id.startswith("narayanan-2021-table1-")]
    assert len(table1) == 10
    assert all(m.check == "point" and m.dp * m.tp * m.pp >= 32 for m in table1)


def test_deepbench_values_recorded_exactly() -> None:
    ms = {m.id: m for m in load_measurements()}
    expected = {16: (4.88, 10.5), 32: (9.76, 20.6), 64: (12.34, 39.8), 128: (12.94, 64.1), 7000: (14.78, 112.3)}
    for n, (fp32, fp16) in expected.items():
        a = ms[f"deepbench-v100-fp32-4096x{n}x4096"]
        b = ms[f"deepbench-v100-fp16tc-4096x{n}x4096"]
        assert a.gemm == (4096, n, 4096) and a.dtype == "fp32"
        assert a.value == pytest.approx(fp32 * 1e12, rel=1e-12)
        assert b.value == pytest.approx(fp16 * 1e12, rel=1e-12) and b.dtype == "fp16"


def test_good_tables_parse(tmp_path: Path) -> None:
    (g,) = load_measurement_file(write(tmp_path, GOOD_GEMM))
    assert g.gemm == (4096, 16, 4096) and g.value == pytest.approx(4.88e12)
    assert g.workload == "gemm 4096x16x4096 fp32" and g.line == 3
    (n,) = load_measurement_file(write(tmp_path, GOOD_NET, "n.toml"))
    assert n.network == "nettalk" and n.batch == 1 and n.phase == "train" and n.check == "point"


@pytest.mark.parametrize(
    ("raw", "metric", "expected"),
    [
        (4.88e12, "flops", 4.88e12),
        ("4.88 TFLOP/s", "flops", 4.88e12),
        ("900 MCUPS", "cups", 9e8),
        ("180 MCPS", "cps", 1.8e8),
        ("0.275 s", "seconds", 0.275),
        ("5 us", "seconds", 5e-6),
        ("12 ms", "seconds", 0.012),
        ("3.5 ksamples/s", "samples_per_second", 3500.0),
        (7, "cups", 7.0),
    ],
)
def test_value_units(raw: object, metric: str, expected: float) -> None:
    assert parse_value(raw, metric) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("raw", "metric"),
    [("4.88 TFLOP/s", "cups"), ("900 MCUPS", "flops"), (-1, "flops"), (0, "seconds"), (True, "cups"),
     ("fast", "flops"), ([1], "flops"), (float("inf"), "flops")],
)
def test_value_refused(raw: object, metric: str) -> None:
    with pytest.raises(InputError) as err:
        parse_value(raw, metric)
    assert err.value.field == "value"


def _refused(tmp_path: Path, good: str, edit: tuple[str, str]) -> tuple[Path, InputError]:
    """The file ``good`` with ``edit`` applied, and the error its loading raises."""
    old, new = edit
    assert old in good
    path = write(tmp_path, good.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    return path, err.value


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (('metric = "flops"', 'metric = "tflops"'), "metric", "unknown value 'tflops'"),
        (('reliability = "high"', 'reliability = "sure"'), "reliability", "one of high, medium, low"),
        (('value = "4.88 TFLOP/s"', 'value = "4.88 MCUPS"'), "value", "does not fit metric"),
        (('gemm = "4096,16,4096"', 'gemm = "4096,16"'), "gemm", "M,N,K"),
        (('gemm = "4096,16,4096"', 'gemm = "4096,0,4096"'), "gemm", "positive"),
        (('dtype = "fp32"\n', ""), "dtype", "needs 'dtype'"),
        (('dtype = "fp32"', 'dtype = "fp31"'), "dtype", "unknown value"),
        (('id = "g"', 'id = "has space"'), "id", "letters, digits"),
        (('id = "g"', "id = 7"), "id", "must be a string"),
        (('source = "a source, table 1"', 'source = ""'), "source", "must not be empty"),
        (('notes = "a note"', "notes = 3"), "notes", "must be a string"),
        (('metric = "flops"', 'metric = "cups"\nvalue2 = 1'), "value2", "unknown key"),
        (('notes = "a note"', 'notes = "a note"\ncheck = "maybe"'), "check", "unknown value 'maybe'"),
        (('notes = "a note"', 'notes = "a note"\nbatch = 4'), "batch", "does not apply to a single GEMM"),
        (('notes = "a note"', 'notes = "a note"\nnetwork = "nettalk"'), "gemm", "exactly one workload"),
        (('metric = "flops"\nvalue = "4.88 TFLOP/s"', 'metric = "cups"\nvalue = 5'), "metric", "'flops' or 'seconds'"),
        (('notes = "a note"', 'notes = "a note"\nyear = "1989"'), "year", "must be an integer"),
    ],
)
def test_gemm_table_refused_by_field(tmp_path: Path, edit: tuple[str, str], field: str, words: str) -> None:
    path, e = _refused(tmp_path, GOOD_GEMM, edit)
    assert e.file == str(path)
    assert e.field is not None and e.field.endswith(field), e.field
    assert e.field.startswith("measurement[")
    assert words in e.reason, e.reason
    assert e.line is not None
    assert str(path) in str(e) and field in str(e)


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (("batch = 1\n", ""), "batch", "needs 'batch'"),
        (("batch = 1", "batch = 0"), "batch", "at least 1"),
        (("batch = 1", "batch = 1.5"), "batch", "must be an integer"),
        (("batch = 1", "batch = 8"), "batch", "per-example updates take batch = 1"),
        (('updates = "per-example"', 'updates = "online"'), "updates", "unknown value 'online'"),
        (('metric = "cups"', 'metric = "cups"\nphase = "forward"'), "metric", "needs phase = 'train'"),
        (('metric = "cups"', 'metric = "cps"'), "metric", "needs phase = 'forward'"),
        (('metric = "cups"', 'metric = "cups"\ncheckpoint = "half"'), "checkpoint", "unknown checkpointing"),
        (('metric = "cups"', 'metric = "cups"\noptimizer = "lbfgs"'), "optimizer", "unknown value 'lbfgs'"),
        (('machine = "cm-2"\n', ""), "machine", "missing required field 'machine'"),
        (('network = "nettalk"\n', ""), "network", "exactly one workload"),
        (('metric = "cups"', 'metric = "cups"\nweight_group = 32'), "weight_group", "does not apply to phase train"),
        (('metric = "cups"', 'metric = "cups"\nweight_group = 0'), "weight_group", "at least 1"),
        (('metric = "cups"', 'metric = "cups"\nweight_zero = "int3"'), "weight_zero", "unknown value 'int3'"),
    ],
)
def test_network_table_refused_by_field(tmp_path: Path, edit: tuple[str, str], field: str, words: str) -> None:
    _, e = _refused(tmp_path, GOOD_NET, edit)
    assert e.field is not None and e.field.endswith(field), e.field
    assert words in e.reason, e.reason


def test_fixture_syntax_error_names_line() -> None:
    path = FIXTURES / "syntax_error.toml"
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    assert err.value.file == str(path) and err.value.line == 3
    assert "TOML syntax error" in err.value.reason


@pytest.mark.parametrize(
    ("name", "field", "words"),
    [
        ("unknown_key.toml", "measurement[typo-in-key].relability", "unknown key 'relability'; did you mean"),
        ("bad_enum.toml", "measurement[bad-metric].metric", "unknown value 'tflops'"),
        ("missing_field.toml", "measurement[no-source].source", "missing required field 'source'"),
        ("wrong_type.toml", "measurement[batch-as-string].batch", "must be an integer"),
    ],
)
def test_fixture_files_refused(name: str, field: str, words: str) -> None:
    path = FIXTURES / name
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert words in err.value.reason
    # The line of the offending key, or of its table's header where the key is missing.
    key = field.rpartition(".")[2]
    lines = path.read_text().splitlines()
    expected = next((i for i, x in enumerate(lines, 1) if x.startswith(f"{key} =")), 1)
    assert err.value.line == expected


def test_duplicate_ids_across_files_refused() -> None:
    with pytest.raises(InputError) as err:
        load_measurements(FIXTURES / "duplicate")
    assert "duplicate id 'same-id'" in err.value.reason
    assert err.value.file.endswith("b.toml") and "a.toml" in err.value.reason


def test_duplicate_ids_within_a_file_refused(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_GEMM + GOOD_GEMM)
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    assert "duplicate id 'g'" in err.value.reason and err.value.field == "measurement[g].id"


def test_file_shape_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no \\[\\[measurement\\]\\]|at least one"):
        load_measurement_file(write(tmp_path, 'note = "empty"\n'))
    with pytest.raises(InputError) as err:
        load_measurement_file(write(tmp_path, "[measurements]\nid = 1\n", "t.toml"))
    assert err.value.field == "measurements"
    with pytest.raises(InputError, match="no such folder"):
        load_measurements(tmp_path / "nowhere")


def test_a_training_throughput_in_tokens_per_second_is_judged_per_device(tmp_path):
    # Published training tables give tokens/s per GPU: accepted with phase train, and
    # predicted as the whole step's tokens over its seconds over its devices.
    from memwall.simulation import run_case
    from memwall.study.validation import case_for, predicted_metric

    path = tmp_path / "t.toml"
    path.write_text('[[measurement]]\nid = "tp"\nmachine = "a100-sxm"\nnetwork = "gpt2-small"\nbatch = 2\n'
                    'dp = 2\ntp = 2\nphase = "train"\nmetric = "tokens_per_second"\nvalue = "5000 tokens/s"\n'
                    'source = "s"\nreliability = "low"\nnotes = "n"\n')
    (m,) = load_measurements(path)
    r = run_case(case_for(m))
    whole = r["global_step"]
    assert predicted_metric(m.metric, r) == pytest.approx(whole["tokens"] / r["seconds"] / 4)
    assert predicted_metric("samples_per_second", r) == pytest.approx(whole["examples"] / r["seconds"] / 4)
    one = run_case(case_for(m).__class__(machine="a100-sxm", network="gpt2-small", batch=2))
    assert predicted_metric("tokens_per_second", one) == pytest.approx(2 * 1024 / one["seconds"])


def test_a_network_id_may_hold_a_version_dot(tmp_path):
    from memwall.networks import load_network

    text = (era_data_dir() / "networks" / "gpt2-small.toml").read_text().replace(
        'id = "gpt2-small"', 'id = "llama3.1-8b"')
    path = tmp_path / "llama3.1-8b.toml"
    path.write_text(text)
    assert load_network(str(path)).id == "llama3.1-8b"
    for bad in ("llama3..1", ".llama", "llama-", "Llama3.1"):
        path.write_text(text.replace('id = "llama3.1-8b"', f'id = "{bad}"'))
        with pytest.raises(InputError, match="kebab-case"):
            load_network(str(path))


def test_a_measurement_names_its_framework_from_the_declared_list(tmp_path) -> None:
    from memwall.errors import InputError
    from memwall.study.measurements import load_measurement_file

    text = (Path(__file__).parent / "data" / "measurements" / "good_gemm.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text.replace("[[measurement]]\n", '[[measurement]]\nframework = "library"\n', 1))
    assert load_measurement_file(good)[0].framework == "library"
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[[measurement]]\n", '[[measurement]]\nframework = "pytorch"\n', 1))
    with pytest.raises(InputError, match="framework") as err:
        load_measurement_file(bad)
    assert "pytorch-eager" in str(err.value)  # the choices are named
