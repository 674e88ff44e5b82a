"""`memwall validate`: metric conversions against closed forms, the summary, the bound
checks, unknown machines reported (never dropped), the CLI and the figure.

Every test but the last injects a predictor, so the comparison is tested without the
simulator; the last runs the real :func:`memwall.simulation.run_case` on the fast shipped
cases (single GEMMs and small networks) when the simulator can be imported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from memwall.errors import InputError
from memwall.execute.validation import validation_figure
from memwall.study.measurements import Measurement, load_measurements
from memwall.study.validation import (
    CaseResult,
    case_for,
    format_table,
    predicted_metric,
    summarize,
    to_json,
    validate,
)

FIXTURES = Path(__file__).parent / "data" / "measurements"
SHIPPED_DIR = Path(__file__).parent.parent / "era_data" / "measurements"

CONNECTIONS = {"nettalk": 18_629, "tiny": 100, "gpt3-175b": 175e9}


def meas(**kw: Any) -> Measurement:
    base: dict[str, Any] = dict(id="m", machine="mach", metric="flops", value=1.0, source="s",
                                reliability="high", notes="n")
    base.update(kw)
    return Measurement(**base)


class FakePredictor:
    """A closed-form machine: every case takes `seconds`; FLOPs = 6 x connections x batch."""

    def __init__(self, seconds: float = 0.5, bound: str = "compute") -> None:
        self.seconds = seconds
        self.bound = bound
        self.cases: list[Any] = []

    def __call__(self, case: Any) -> Mapping[str, Any]:
        self.cases.append(case)
        if case.gemm is not None:
            m, n, k = case.gemm
            flops = 2.0 * m * n * k
            return {"seconds": self.seconds, "flops": flops, "achieved_flops": flops / self.seconds,
                    "bound": self.bound, "batch": 1}
        c = CONNECTIONS[case.network]
        per = 2 if case.phase == "forward" else 6
        flops = per * c * case.batch
        # run_case's figures: C x examples / seconds for the phase it ran, 0 for the other
        cups = c * case.batch / self.seconds if case.phase == "train" else 0.0
        cps = c * case.batch / self.seconds if case.phase == "forward" else 0.0
        return {"seconds": self.seconds, "flops": flops, "achieved_flops": flops / self.seconds,
                "cups": cups, "cps": cps, "batch": case.batch, "bound": self.bound}


# --- conversions: each metric against its closed form --------------------------------------


def _result(ratio: float, metric: str = "flops", *, check: str = "point", year: int | None = 2022,
            kind: str | None = "gpu", framework: str | None = None) -> CaseResult:
    """A judged case of measured 1.0 and predicted ``ratio``, for the summary's tests."""
    return CaseResult(id="x", machine="m", workload="w", metric=metric, measured=1.0, predicted=ratio, ratio=ratio,
                      status="ok", check=check, bound=None, reliability="high", notes="", explanation=None,
                      source="", year=year, kind=kind, framework=framework)

def test_conversions_closed_forms() -> None:
    s, c, b = 0.25, 18_629, 32
    pred = {"seconds": s, "flops": 6 * c * b, "achieved_flops": 6 * c * b / s, "cups": c * b / s, "cps": 0.0,
            "batch": b}
    assert predicted_metric("seconds", pred) == s
    assert predicted_metric("flops", pred) == pytest.approx(6 * c * b / s)
    assert predicted_metric("samples_per_second", pred) == pytest.approx(b / s)
    assert predicted_metric("cups", pred) == pytest.approx(c * b / s)


def test_the_other_phases_figure_comes_from_the_preset() -> None:
    from memwall.networks import load_network

    c = load_network("nettalk").connections
    pred = {"seconds": 2.0, "cups": 123.0, "cps": 0.0, "batch": 3}
    assert predicted_metric("cups", pred) == 123.0
    assert predicted_metric("cps", pred, network="nettalk") == pytest.approx(c * 3 / 2.0)


def test_conversion_refuses_what_it_cannot_compute() -> None:
    with pytest.raises(InputError, match="seconds"):
        predicted_metric("flops", {"seconds": 0.0, "achieved_flops": 1.0})
    with pytest.raises(InputError, match="connections"):
        predicted_metric("cps", {"seconds": 1.0, "cps": 0.0})
    with pytest.raises(InputError, match="unknown metric"):
        predicted_metric("furlongs", {"seconds": 1.0})
    with pytest.raises(InputError, match=r"no energy: machine 'vax' states no \[energy\]"):
        predicted_metric("joules", {"seconds": 1.0, "machine": "vax", "energy": None})
    with pytest.raises(InputError, match="no 'tokens_per_joule'"):
        predicted_metric("tokens_per_joule", {"seconds": 1.0, "energy": {"tokens_per_joule": None}})


def test_energy_metrics_read_the_energy_table() -> None:
    energy = {"joules": 12.0, "watts_average": 400.0, "tokens_per_joule": 3.5}
    pred = {"seconds": 0.03, "energy": energy}
    assert predicted_metric("joules", pred) == 12.0
    assert predicted_metric("watts", pred) == 400.0
    assert predicted_metric("tokens_per_joule", pred) == 3.5


def test_predicted_cps_uses_forward_seconds_and_cups_training_seconds() -> None:
    fake = FakePredictor(seconds=0.1)
    ms = [meas(id="f", network="nettalk", batch=4, phase="forward", metric="cps", value=1e6),
          meas(id="t", network="nettalk", batch=4, phase="train", metric="cups", value=1e6)]
    results = validate(ms, fake, check_ids=False)
    assert [c.phase for c in fake.cases] == ["forward", "train"]
    for r in results:
        assert r.predicted == pytest.approx(18_629 * 4 / 0.1)
        assert r.ratio == pytest.approx(18_629 * 4 / 0.1 / 1e6)


def test_case_for_carries_the_workload() -> None:
    c = case_for(meas(gemm=(4096, 16, 4096), dtype="fp16"))
    assert c.gemm == (4096, 16, 4096) and c.dtype == "fp16" and c.network is None
    c = case_for(meas(network="gpt3-175b", batch=2, seq_len=2048, dtype="bf16", optimizer="adam",
                      checkpoint="selective", updates="minibatch"))
    assert (c.network, c.batch, c.seq_len, c.dtype, c.optimizer, c.checkpoint) == (
        "gpt3-175b", 2, 2048, "bf16", "adam", "selective")


# --- comparison, bounds, summary ------------------------------------------------------------

def test_ratio_bound_and_within_band() -> None:
    fake = FakePredictor(seconds=1.0, bound="HBM")
    m = meas(gemm=(10, 10, 10), dtype="fp32", value=1000.0)  # predicted 2000 FLOP/s
    (r,) = validate([m], fake, check_ids=False)
    assert r.status == "ok" and r.predicted == 2000.0 and r.ratio == 2.0 and r.log2_ratio == 1.0
    assert r.bound == "HBM" and r.within_band is True


def test_bound_checks() -> None:
    def result(ratio: float, check: str) -> CaseResult:
        return _result(ratio, check=check, year=None, kind=None)

    assert result(5.0, "lower-bound-on-prediction").within_band is True
    assert result(0.9, "lower-bound-on-prediction").within_band is False
    assert result(0.1, "upper-bound-on-prediction").within_band is True
    assert result(1.1, "upper-bound-on-prediction").within_band is False
    assert result(2.5, "point").within_band is False and result(0.5, "point").within_band is True


def test_summary_median_worst_share_and_bounds_apart() -> None:
    fake = FakePredictor(seconds=1.0)
    # gemm 1x1x1: predicted 2 FLOP/s. Measured values give ratios 1, 2, 4, 0.125 (point), and a floor.
    ms = [meas(id=f"p{i}", gemm=(1, 1, 1), dtype="fp32", value=v) for i, v in enumerate([2.0, 1.0, 0.5, 16.0])]
    ms.append(meas(id="floor", gemm=(1, 1, 1), dtype="fp32", value=100.0, check="lower-bound-on-prediction"))
    results = validate(ms, fake, check_ids=False)
    s = summarize(results)
    assert s["cases"] == 5 and s["point_cases"] == 4 and s["predicted"] == 5
    assert s["median_abs_log2_ratio"] == pytest.approx(1.5)  # |log2|: 0, 1, 2, 3
    assert s["worst_abs_log2_ratio"] == pytest.approx(3.0) and s["worst_case"] == "p3"
    assert s["share_within_2x"] == pytest.approx(0.5)
    assert s["bound_cases"] == 1 and s["bounds_held"] == 0  # 2 < 100: the floor is missed
    text = format_table(results, s)
    assert "MISS" in text and "median |log2 ratio| 1.5" in text and "within 2x: 50%" in text


def test_summary_groups_point_checks_by_era_and_by_machine_kind() -> None:
    def result(ratio: float, year: int, kind: str, check: str = "point") -> CaseResult:
        return _result(ratio, check=check, year=year, kind=kind)

    rs = [result(1.0, 1986, "scalar"), result(4.0, 1989, "array"), result(2.0, 2021, "gpu"),
          result(0.5, 2022, "gpu"), result(8.0, 2022, "gpu"), result(9.0, 2022, "gpu", "lower-bound-on-prediction")]
    s = summarize(rs)
    old, new = s["by_era"]["1976-1995: vector and scalar machines"], s["by_era"]["2013-: GPUs and TPUs"]
    assert old["point_cases"] == 2 and old["median_abs_log2_ratio"] == pytest.approx(1.0)
    assert new["point_cases"] == 3 and new["median_abs_log2_ratio"] == pytest.approx(1.0)  # |log2|: 1, 1, 3
    assert new["share_within_2x"] == pytest.approx(2 / 3)  # the bound check is not counted
    assert s["by_kind"]["gpu"]["point_cases"] == 3 and s["by_kind"]["array"]["share_within_2x"] == 0.0
    text = format_table(rs, s)
    assert "by machine kind" in text and "array" in text.split("by machine kind")[1]


def test_summary_judges_speed_and_energy_apart() -> None:
    def result(ratio: float, metric: str) -> CaseResult:
        return _result(ratio, metric)

    s = summarize([result(1.0, "flops"), result(1.5, "seconds"), result(4.0, "tokens_per_joule"),
                   result(0.25, "watts"), result(1.2, "joules")])
    assert s["by_quantity"]["speed"]["point_cases"] == 2 and s["by_quantity"]["speed"]["share_within_2x"] == 1.0
    assert s["by_quantity"]["energy"]["point_cases"] == 3
    assert s["by_quantity"]["energy"]["median_abs_log2_ratio"] == pytest.approx(2.0)
    assert "by quantity" in format_table([result(1.0, "flops")], None)


def test_unknown_machine_and_network_are_reported_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import memwall.study.validation as v

    monkeypatch.setattr(v, "known_ids", lambda kind: {"mach"} if kind == "machine" else {"nettalk"})
    fake = FakePredictor()
    ms = [meas(id="a", machine="transputer-t800", gemm=(1, 1, 1), dtype="fp32"),
          meas(id="b", network="no-such-net", batch=1, metric="cups"),
          meas(id="c", gemm=(1, 1, 1), dtype="fp32")]
    results = validate(ms, fake)
    assert [r.status for r in results] == ["unknown machine", "unknown network", "ok"]
    assert results[0].predicted is None and "transputer-t800" in (results[0].error or "")
    s = summarize(results)
    assert s["cases"] == 3 and s["not_predicted"] == {"unknown machine": ["a"], "unknown network": ["b"]}
    text = format_table(results)
    assert "unknown machine" in text and "transputer-t800" in text


def test_predictor_input_error_is_reported_per_case() -> None:
    def predictor(case: Any) -> Mapping[str, Any]:
        if case.machine == "bad":
            raise InputError("unknown machine 'bad'", field="machine")
        if case.machine == "broken":
            raise InputError("the step does not fit in memory")
        return {"seconds": 1.0, "flops": 2.0, "achieved_flops": 2.0}

    ms = [meas(id="a", machine="bad", gemm=(1, 1, 1), dtype="fp32"),
          meas(id="b", machine="broken", gemm=(1, 1, 1), dtype="fp32"),
          meas(id="c", gemm=(1, 1, 1), dtype="fp32", value=2.0)]
    results = validate(ms, predictor, check_ids=False)
    assert [r.status for r in results] == ["unknown machine", "error", "ok"]
    assert results[2].ratio == 1.0


def test_json_shape() -> None:
    results = validate([meas(gemm=(2, 2, 2), dtype="fp32", value=8.0)], FakePredictor(seconds=2.0),
                       check_ids=False)
    out = json.loads(json.dumps(to_json(results)))
    (case,) = out["cases"]
    for key in ("id", "machine", "metric", "measured", "predicted", "ratio", "bound", "status", "notes"):
        assert key in case
    assert case["ratio"] == pytest.approx(16 / 2 / 8.0)
    assert out["summary"]["cases"] == 1


def test_shipped_set_with_injected_predictor() -> None:
    ms = load_measurements()
    fake = FakePredictor(seconds=1e-3)
    results = validate([m for m in ms if m.network in (None, *CONNECTIONS)], fake, check_ids=False)
    assert len(results) >= 15
    assert all(r.status == "ok" and r.ratio and math.isfinite(r.ratio) for r in results)


# --- CLI and figure ----------------------------------------------------------------------------

def test_cli_json_and_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import memwall.study.validation as v
    from memwall.cli import main

    monkeypatch.setattr(v, "default_predictor", lambda: FakePredictor(seconds=1e-3))
    monkeypatch.setattr(v, "known_ids", lambda kind: None)
    d = tmp_path / "m"
    d.mkdir()
    (d / "one.toml").write_text((SHIPPED_DIR / "deepbench_v100.toml").read_text())
    assert main(["validate", "--measurements", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["cases"]) == 13 and out["summary"]["point_cases"] == 13
    assert main(["validate", "--measurements", str(d), "--figure", str(tmp_path / "fig")]) == 0
    text = capsys.readouterr().out
    assert "deepbench-v100-fp32-4096x16x4096" in text and "within 2x" in text
    assert (tmp_path / "fig" / "validation.png").stat().st_size > 0


def test_cli_bad_file_exits_2(capsys: pytest.CaptureFixture) -> None:
    from memwall.cli import main

    assert main(["validate", "--measurements", str(FIXTURES / "bad_enum.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad_enum.toml" in err[0] and "metric" in err[0]


def test_validation_figure(tmp_path: Path) -> None:
    fake = FakePredictor(seconds=1e-3)
    ms = [meas(id="a", gemm=(64, 64, 64), dtype="fp32", value=1e8, year=2019),
          meas(id="b", network="nettalk", batch=1, metric="cups", value=1e6, year=1988),
          meas(id="c", gemm=(64, 64, 64), dtype="fp32", value=1e7, check="lower-bound-on-prediction")]
    results = validate(ms, fake, check_ids=False)
    paths = validation_figure(results, tmp_path / "out")
    assert [p.name for p in paths] == ["validation.png", "validation.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)


# --- the real simulator, on the fast shipped cases ------------------------------------------

FAST_NETWORKS = {"nettalk", "family-trees", "encoder-8-3-8", "sonar", "alvinn", "lecun-1989", "affine-48x1024"}


def test_real_simulator_on_fast_shipped_cases() -> None:
    from memwall.simulation import run_case

    ms = [m for m in load_measurements() if m.gemm is not None or m.network in FAST_NETWORKS]
    results = validate(ms, run_case)
    assert len(results) == len(ms)
    for r in results:
        assert r.status in ("ok", "unknown machine", "unknown network"), (r.id, r.error)
        if r.status == "ok":
            assert r.predicted and r.predicted > 0 and r.bound
    summarize(results)


def test_predictions_made_side_by_side_give_the_same_table(tmp_path: Path, monkeypatch) -> None:
    from probes import measurement_text

    monkeypatch.setenv("MEMWALL_CACHE", "off")  # each folder predicts for itself

    from memwall.execute.validation import write_validation

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "two.toml").write_text("".join(measurement_text(m, 256, 1e10) for m in ("v100-sxm2", "a100-sxm", "vax-11-780")))
    write_validation(tmp_path / "one", folder, jobs=1)
    write_validation(tmp_path / "two", folder, jobs=2)
    assert len(list((tmp_path / "two" / "validation" / "cases").glob("*.json"))) == 3
    one, two = ((tmp_path / d / "validation.json").read_text() for d in ("one", "two"))
    assert one == two and json.loads(two)["summary"]["cases"] == 3


def test_a_quick_sweep_validates_the_one_device_measurements_only(tmp_path: Path) -> None:
    from probes import measurement_text

    from memwall.execute.validation import write_validation

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "m.toml").write_text(measurement_text("a100-sxm") + """
[[measurement]]
id = "probe-eight-a100s"
machine = "a100-sxm"
network = "gpt2-small"
batch = 1
seq_len = 64
dp = 8
metric = "flops"
value = 1e12
source = "a test"
reliability = "low"
notes = "a probe on eight devices"
""")
    write_validation(tmp_path / "quick", folder, jobs=1, one_device=True)
    ids = [c["id"] for c in json.loads((tmp_path / "quick" / "validation.json").read_text())["cases"]]
    assert ids == ["probe-a100-sxm"]


def test_calibration_groups_by_era_kind_and_framework_and_knows_which_side_is_optimistic() -> None:
    def result(ratio: float, metric: str, framework: str | None, year: int = 2022) -> CaseResult:
        return _result(ratio, metric, year=year, framework=framework)

    # a rate above the measurement is optimistic; a time, joules or watts below it is
    assert result(1.5, "flops", None).optimistic and not result(0.5, "tokens_per_second", None).optimistic
    assert result(0.5, "seconds", None).optimistic and result(0.3, "watts", None).optimistic
    assert not result(3.0, "joules", None).optimistic and result(4.0, "tokens_per_joule", None).optimistic
    rs = [result(1.5, "flops", "megatron"), result(0.5, "seconds", "megatron"), result(3.0, "seconds", "megatron"),
          result(1.1, "tokens_per_second", "vllm"), result(1.0, "flops", None, year=1986)]
    s = summarize(rs)
    rows = {(r["era"], r["framework"]): r for r in s["calibration"]}
    megatron = rows[("2013-: GPUs and TPUs", "megatron")]
    assert megatron["count"] == 3 and megatron["median_ratio"] == 1.5 and megatron["kind"] == "gpu"
    assert megatron["within_2x"] == pytest.approx(2 / 3) and megatron["optimistic_share"] == pytest.approx(2 / 3)
    assert rows[("1976-1995: vector and scalar machines", "unstated")]["optimistic_share"] == 0.0
    assert s["optimistic_share"] == pytest.approx(3 / 5)
    text = format_table(rs, s)
    assert "calibration: era, machine kind, framework" in text and "optimistic (faster or cheaper" in text
