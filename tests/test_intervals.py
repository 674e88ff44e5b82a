"""Every prediction carries an interval: on the seconds in the JSON and the results row,
converted to a measurement's metric by ``memwall validate`` (a rate's inverted), calibrated
by ``memwall validate --write-intervals`` as docs/intervals.md says."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from memwall.cli import main
from memwall.simulation import intervals as iv
from memwall.simulation.row import BY_COLUMN, make_row
from memwall.study import intervals as cal
from memwall.study.measurements import Measurement
from memwall.study.validation import CaseResult, metric_interval, summarize, validate, with_intervals


def _inspect(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["inspect", *args, "--json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


def _case(ratio: float, *, kind: str = "gpu", regime: str = "gemm", metric: str = "flops",
          check: str = "point", measured: float = 1.0) -> CaseResult:
    """A judged case: measured ``measured``, predicted ratio x measured, its prediction 1 s."""
    return CaseResult(id="x", machine="m", workload="w", metric=metric, measured=measured,
                      predicted=ratio * measured, ratio=ratio, status="ok", check=check, bound=None,
                      reliability="high", notes="", explanation=None, source="", year=2022, kind=kind,
                      regime=regime, seconds=1.0)


def test_inspect_json_carries_an_interval_around_the_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    assert iv.load_calibration() is not None, "era_data/intervals.toml ships with memwall"
    out = _inspect(capsys, "--machine", "h100-sxm", "--gemm", "256,256,256", "--dtype", "bf16")
    interval = out["interval"]
    assert set(interval) == {"low", "high", "coverage"}
    assert 0 < interval["low"] <= out["seconds"] <= interval["high"]
    assert 0 < interval["coverage"] < 1


def test_every_kind_of_result_has_an_interval_and_rows_carry_its_columns() -> None:
    from memwall.options import make_case
    from memwall.simulation import run_case

    case = make_case(machine="vax-11-780", network="nettalk", batch=1)
    result = run_case(case)
    assert result.time.interval == result["interval"]
    row = make_row(case, result, None)
    assert (row["interval_low"], row["interval_high"], row["interval_coverage"]) == (
        result["interval"]["low"], result["interval"]["high"], result["interval"]["coverage"])
    assert all(BY_COLUMN[c].type == "number" for c in ("interval_low", "interval_high", "interval_coverage"))
    # a failed case's row has no interval, and a result kind the calibration lacks falls back to the pool
    assert "interval_low" not in make_row(case, None, "boom")
    assert iv.regime({"phase": "train", "devices": 8}) == "train-multi"
    assert iv.regime({"phase": "prefill"}) == "forward" and iv.regime({"gemm": [1, 1, 1], "phase": "forward"}) == "gemm"
    assert iv.regime({"phase": "generate"}) == "generate" and iv.regime({"phase": "decode"}) == "decode"


def test_a_rate_interval_is_the_seconds_interval_inverted() -> None:
    seconds = {"low": 1.0, "high": 3.0, "coverage": 0.8}  # around a prediction of 2 s
    rate = metric_interval("flops", 100.0, 2.0, seconds)  # 100 FLOP/s in 2 s: 200 FLOP
    assert rate == {"low": pytest.approx(200 / 3), "high": pytest.approx(200.0), "coverage": 0.8}  # slow: low rate
    time = metric_interval("seconds_per_token", 0.5, 2.0, seconds)
    assert time == {"low": pytest.approx(0.25), "high": pytest.approx(0.75), "coverage": 0.8}
    assert metric_interval("joules", 3.0, 2.0, seconds) is None  # the interval is on time, not energy


def test_validate_reports_the_interval_in_the_metric_and_its_coverage(tmp_path) -> None:
    # one group, gpu/gemm: residuals ln(measured s / predicted s) from ratios (predicted / measured FLOP/s)
    ratios = [1.0, 1.2, 1.5, 2.0, 3.0, 0.9, 1.1, 1.3]
    calibration = cal.calibrate([_case(r) for r in ratios], coverage=0.8, min_count=4)

    def predict(case: Any) -> dict[str, Any]:
        return {"seconds": 2.0, "achieved_flops": 10.0, "gemm": list(case.gemm), "phase": "forward", "bound": "x"}

    m = Measurement(id="g", machine="h100-sxm", gemm=(8, 8, 8), dtype="bf16", metric="flops", value=5.0,
                    source="s", reliability="high", notes="n")
    (r,) = with_intervals(validate([m], predict, check_ids=False), calibration)
    group = calibration.group_for("gpu", "gemm")
    assert group is not None and r.regime == "gemm" and r.kind == "gpu"
    lo, hi = group.factors
    assert r.interval == {"low": pytest.approx(10.0 / hi), "high": pytest.approx(10.0 / lo), "coverage": 0.8}
    assert r.as_dict()["in_interval"] == (r.interval["low"] <= 5.0 <= r.interval["high"])
    s = summarize([r], calibration)["interval_coverage"]
    assert s["checks"] == 1 and s["covered"] == int(bool(r.in_interval)) and s["nominal"] == 0.8


def test_a_tail_is_the_split_conformal_order_statistic() -> None:
    """Of n sorted residuals the upper tail at p is the ⌈(n + 1) p⌉-th and the lower the
    ⌊(n + 1) p⌋-th (clamped to 1..n): a new exchangeable residual lies at or inside each
    with probability at least p, which the plain rank p (n - 1) is one place short of."""
    xs = [float(i) for i in range(54, 0, -1)]  # 1..54, unsorted (the shipped gemm group's size)
    assert (cal.quantile(xs, 0.1), cal.quantile(xs, 0.9)) == (5.0, 50.0)  # the plain ranks: 6 and 49
    assert (cal.quantile(xs[:8], 0.1), cal.quantile(xs[:8], 0.9)) == (47.0, 54.0)  # 47..54: the ends
    assert cal.quantile([5.0], 0.9) == cal.quantile([5.0], 0.1) == 5.0


def test_calibration_reproduces_the_quantiles_of_a_synthetic_set(tmp_path) -> None:
    gemm = [0.5, 0.8, 1.0, 1.25, 1.6, 2.0, 2.5, 4.0, 1.1, 0.9]  # flops: predicted / measured
    decode = [1.3, 1.4, 1.5]  # too few for a group of its own: gpu/* then serves decode
    cases = [_case(r) for r in gemm] + [_case(r, regime="decode", metric="tokens_per_second") for r in decode]
    cases.append(_case(2.0, check="lower-bound-on-prediction"))  # a bound check calibrates nothing
    cases.append(_case(9.0, metric="joules"))  # nor does energy
    path, written, stats = cal.write_calibration(cases, tmp_path / "intervals.toml", coverage=0.8, min_count=5)
    e = np.log(gemm)
    group = written.group_for("gpu", "gemm")
    assert group is not None and group.count == 10
    # split-conformal ranks: n = 10, the ⌊11 x 0.1⌋ = 1st and ⌈11 x 0.9⌉ = 10th of the sorted residuals
    assert (group.low, group.high) == (pytest.approx(min(e)), pytest.approx(max(e)))
    pooled = written.group_for("gpu", "decode")
    assert pooled is not None and (pooled.kind, pooled.regime, pooled.count) == ("gpu", "*", 13)
    assert pooled.low == pytest.approx(np.log(0.5))
    assert written.coverage == 0.8 and written.command == "memwall validate --write-intervals"
    assert stats["point_checks"] == 13 and stats["in_sample_checks"] == 13
    # the file's in-sample figure is what its groups give
    inside = sum(1 for c in cal.calibrating(cases) if cal.covers(c, written))
    assert stats["in_sample_covered"] == inside == cal.coverage_of(cases, written)[0]
    assert 0 < stats["leave_one_out_covered"] <= stats["leave_one_out_checks"] == 13
    # every metric a measurement may state is speed or energy, never both
    from memwall.study.measurements import METRICS
    from memwall.study.validation import ENERGY_METRICS

    assert set(cal.SPEED) | set(ENERGY_METRICS) == set(METRICS) and not set(cal.SPEED) & set(ENERGY_METRICS)
    # a time's residual is ln(measured / predicted), a rate's ln(predicted / measured)
    assert cal.residual(_case(2.0, metric="seconds")) == pytest.approx(-math.log(2.0))
    assert cal.residual(_case(2.0, metric="cups")) == pytest.approx(math.log(2.0))
    # the interval always holds the prediction, even where every measurement is slower
    slow = cal.calibrate([_case(r) for r in (2.0, 3.0, 4.0, 5.0)], min_count=2)  # predicted FLOP/s above measured
    assert slow.group_for("gpu", "gemm").factors[0] == 1.0
    # a machine whose profile did not load calibrates only the groups over every kind
    nokind = cal.calibrate([_case(r, kind=None) for r in (1.0, 2.0, 3.0)], min_count=2)  # type: ignore[arg-type]
    assert {(g.kind, g.regime) for g in nokind.groups} == {("*", "gemm"), ("*", "*")}


def test_a_calibration_at_another_model_version_warns_but_applies(tmp_path, monkeypatch, capsys) -> None:
    from memwall.model_version import MODEL_SOURCE_VERSION as MODEL_VERSION

    calibration = cal.calibrate([_case(r, kind="scalar", regime="train", metric="cups")
                                 for r in (0.5, 1.0, 2.0, 1.5)], min_count=2, model_version="0ld")
    path = tmp_path / "intervals.toml"
    path.write_text(cal.calibration_text(calibration, {}))
    monkeypatch.setattr(iv, "default_path", lambda: path)
    loaded = iv.load_calibration()
    assert loaded is not None and "0ld" in (cal.stale(loaded) or "") and MODEL_VERSION in (cal.stale(loaded) or "")
    meas = tmp_path / "m.toml"
    meas.write_text('[[measurement]]\nid = "vax-nettalk"\nmachine = "vax-11-780"\nnetwork = "nettalk"\nbatch = 1\n'
                    'metric = "cups"\nvalue = 1e3\nsource = "a test"\nreliability = "low"\nnotes = "n"\n')
    assert main(["validate", "--measurements", str(meas), "--json", "--no-progress"]) == 0
    out = capsys.readouterr()
    assert "warning" in out.err and "memwall validate --write-intervals" in out.err
    data = json.loads(out.out)
    assert data["summary"]["interval_coverage"]["stale"] is True
    case = data["cases"][0]
    assert case["interval"]["low"] <= case["predicted"] <= case["interval"]["high"]  # still applied
    # a bad file is one line naming the field, not a traceback
    path.write_text('[calibration]\ncoverage = 2\nmodel_version = "x"\n')
    iv._LOADED.clear()
    with pytest.raises(Exception, match="coverage"):
        iv.load_calibration(path)
