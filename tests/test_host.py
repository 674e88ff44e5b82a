"""memwall.host and `memwall machines detect`: the host's profile validates; the host
check runs end to end on a tiny set of cases."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from memwall import host, profiles
from memwall.cli import main
from memwall.errors import InputError
from memwall.simulation import Case, run_case

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path(host.SYS_CPU, "cpu0", "cache").is_dir(),
                                reason="needs Linux sysfs cache information")


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("detect") / "host.toml"
    assert main(["machines", "detect", "--quick", "--out", str(out)]) == 0
    return out


def test_detect_profile_validates(profile: Path) -> None:
    assert profiles.validate_paths([profile]) == []
    assert main(["machines", "validate", str(profile)]) == 0
    m = profiles.load_machine_file(profile)
    assert m.kind == "superscalar" and m.timing.model == "overlapped" and m.schedule.family == "blocked"
    assert {"fp32", "fp64"} <= set(m.peak_flops)
    for key in ("compute.fp32", "compute.fp64", "memory.bandwidth", "memory.latency", "timing.mlp"):
        assert m.provenance[key].status == "measured", key
    for level in m.levels:
        assert level.provenance["latency"].status == "measured"
        assert level.provenance["bandwidth"].status == "measured"
    raw = json.loads(Path(str(profile) + ".json").read_text())
    assert raw["quick"] is True and raw["latency_curve"]


def test_detect_writes_the_per_call_cost_as_eager_dispatch(profile: Path) -> None:
    """The host is a dispatching machine: its profile says what one NumPy call costs."""
    m = profiles.load_machine_file(profile)
    assert m.dispatch is not None and m.dispatch.default == "eager"
    eager = m.dispatch.mode("eager")
    raw = json.loads(Path(str(profile) + ".json").read_text())
    assert eager.host_issue == pytest.approx(raw["per_call"], rel=1e-3) and eager.host_issue > 0
    assert eager.device_gap == 0.0  # the core that issues also computes: no device stream
    assert m.provenance["timing.dispatch.eager.host_issue"].status == "measured"
    # the median over the kinds of call measured
    assert raw["per_call"] == pytest.approx(float(np.median([c["seconds"] for c in raw["calls"]])))


def test_prediction_grows_by_kernels_times_host_issue(profile: Path) -> None:
    """On a host (the core that issues also computes) every kernel run adds host_issue."""
    case = Case(machine=str(profile), network="nettalk", batch=2, updates="per-example", dtype="fp32",
                update_fusion="separate")  # the updates as four kernels of their own
    base = profiles.load_machine_file(profile, sets={"timing.dispatch.eager.host_issue": "1 us"})
    more = profiles.load_machine_file(profile, sets={"timing.dispatch.eager.host_issue": "11 us"})
    a, b = run_case(case, machine=base), run_case(case, machine=more)
    n = a["dispatch"]["launches"]
    assert n == 2 * 17  # NETtalk's 17 kernels, once per example
    assert a["dispatch"]["synchronous"] is True
    assert b["seconds"] - a["seconds"] == pytest.approx(n * 10e-6, rel=1e-6)
    assert a["dispatch"]["host_seconds"] == pytest.approx(n * 1e-6)


def test_k1_products_run_at_the_measured_outer_product_time(profile: Path) -> None:
    """numpy.matmul runs column @ row in its own loop: a K = 1 product on a profile stating
    outer_product takes its output elements times that, and nothing else changes."""
    m = profiles.load_machine_file(profile)
    assert m.provenance["timing.outer_product"].status == "measured" and m.timing.params["outer_product"] > 0
    case = Case(machine=str(profile), network="nettalk", batch=1, updates="per-example", dtype="fp32")
    slow = {"timing.outer_product": "10 us"}
    a = run_case(case, machine=profiles.load_machine_file(profile, sets={"timing.outer_product": "5 us"}))
    b = run_case(case, machine=profiles.load_machine_file(profile, sets=slow))
    outer = 80 * 203 + 26 * 80  # NETtalk's two dW products over one example
    assert b["seconds"] - a["seconds"] == pytest.approx(outer * 5e-6, rel=1e-6)
    by_name = {k["name"]: k for k in b["kernels"]}
    assert by_name["L1.dW+update"]["bound"] == "compute"  # per-example: the update fused into it


def test_product_efficiency_interpolates_the_measured_curves(profile: Path) -> None:
    """A product runs at the smaller of its two measured efficiencies (log2-linear between
    points, the end points' values beyond them); a profile without curves runs at the peak."""
    from memwall.timing import product_efficiency

    sets = {"timing.efficiency_mn": "[[4, 0.2], [16, 0.6], [256, 1.0]]",
            "timing.efficiency_k": "[[4, 0.1], [64, 0.9], [4096, 1.0]]"}
    m = profiles.load_machine_file(profile, sets=sets)
    assert product_efficiency(m, (8, 1024, 1024)) == pytest.approx(0.4)  # half-way from 4 to 16
    assert product_efficiency(m, (1024, 2, 1024)) == pytest.approx(0.2)  # below the first point
    assert product_efficiency(m, (1024, 1024, 16)) == pytest.approx(0.1 + 0.8 * 2 / 4)  # by K
    assert product_efficiency(m, (4096, 4096, 4096)) == 1.0
    assert product_efficiency(m, (4096, 4096, 128)) == pytest.approx(0.9 + 0.1 / 6)  # one sixth of 64 to 4096
    plain = profiles.load_machine_file(ROOT / "era_data" / "machines" / "h100-sxm.toml")
    assert product_efficiency(plain, (1, 1, 1)) == 1.0
    case = Case(machine=str(profile), network="nettalk", batch=64, updates="minibatch", dtype="fp32")
    whole = {"timing.efficiency_mn": "[[1, 1.0]]", "timing.efficiency_k": "[[1, 1.0]]"}
    half = {"timing.efficiency_mn": "[[1, 0.5]]", "timing.efficiency_k": "[[1, 0.5]]"}
    fast = run_case(case, machine=profiles.load_machine_file(profile, sets=whole))
    slow = run_case(case, machine=profiles.load_machine_file(profile, sets=half))
    for a, b in zip(fast["kernels"], slow["kernels"], strict=True):
        if a["op"] == "gemm":
            assert b["cycles"]["compute"] == pytest.approx(2 * a["cycles"]["compute"]), a["name"]
        else:
            assert b["cycles"]["compute"] == pytest.approx(a["cycles"]["compute"]), a["name"]
    for bad in ("[[4, 0.5], [2, 0.6]]", "[[4, 1.5]]", "[[0.5, 0.5]]", "0.5"):
        with pytest.raises(InputError, match="efficiency_mn"):
            profiles.load_machine_file(profile, sets={"timing.efficiency_mn": bad})


def test_detect_writes_the_efficiency_curves(profile: Path) -> None:
    raw = json.loads(Path(str(profile) + ".json").read_text())
    m = profiles.load_machine_file(profile)
    shapes = {c["shape"]: c for c in raw["efficiency"]}
    assert set(shapes) == {"mn", "k"}
    for shape, c in shapes.items():
        written = m.timing.params[f"efficiency_{shape}"]
        assert [p[0] for p in written] == [p[0] for p in c["points"]]
        assert [d for d, _, _ in c["points"]][:-1] == list(host.EFFICIENCY_DIMS["quick"])
        assert m.provenance[f"timing.efficiency_{shape}"].status == "measured"


def test_detect_peak_is_the_best_of_its_largest_products_in_every_thread(profile: Path) -> None:
    raw = json.loads(Path(str(profile) + ".json").read_text())
    threads = host.blas_info().threads
    for dtype, peak in raw["peaks"].items():
        assert peak["threads"] == threads, dtype
        assert peak["flops"] == max(peak["rates"]) and peak["n"] in peak["sizes"]
        assert max(peak["sizes"]) == max(host.PEAK_SIZES["quick"]) or dtype == "fp64"
    assert tuple(raw["peaks"]["fp32"]["sizes"]) == host.PEAK_SIZES["quick"]
    assert max(host.PEAK_SIZES["full"]) >= 4096  # a 2048² product is below the rate large steps reach


def test_measure_peak_keeps_the_best_order() -> None:
    p = host.measure_peak("fp32", (32, 16), repeats=1, threads=3)
    assert p.sizes == (16, 32) and len(p.rates) == 2 and p.threads == 3
    assert p.flops == max(p.rates) and p.n == p.sizes[p.rates.index(p.flops)]
    with pytest.raises(InputError, match="orders >= 1"):
        host.measure_peak("fp32", (), repeats=1)
    with pytest.raises(InputError, match="repeats >= 1"):
        host.measure_peak("fp32", 16, repeats=0)


def test_call_costs_cover_every_kind_and_errors_are_clear() -> None:
    costs = host.measure_call_costs(calls=3, trials=1)
    assert {c.name.split("(")[0] for c in costs} >= {"np.add", "np.sum", "np.matmul"}
    assert all(c.seconds > 0 and c.calls == 3 and c.trials == 1 for c in costs)
    assert host.per_call_seconds(costs) == pytest.approx(float(np.median([c.seconds for c in costs])))
    with pytest.raises(InputError, match="calls >= 1"):
        host.measure_call_costs(calls=0)
    with pytest.raises(InputError, match="no call costs"):
        host.per_call_seconds([])


def test_effective_size_is_the_last_set_below_half_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 32 MiB level whose chase latency jumps to memory's past 4 MiB behaves as 4 MiB."""
    from memwall.host import measure

    def fake(ws: int, line: int, target: float = 0.0, window: int | None = None) -> host.LatencyPoint:
        return host.LatencyPoint(ws, 14e-9 if ws <= 4 << 20 else 200e-9)

    monkeypatch.setattr(measure, "measure_latency", fake)
    l3 = host.CacheInfo(3, "Unified", 32 << 20, 64, 16, 32768, 2)
    e = host.measure_effective_size(l3, 512 << 10, 64, 180e-9, step=2)
    assert (e.stated, e.size) == (32 << 20, 4 << 20)
    assert [p.working_set for p in e.curve] == [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20]
    assert e.threshold == pytest.approx(97e-9)
    # every point kept: the whole stated size
    monkeypatch.setattr(measure, "measure_latency", lambda ws, line, target=0.0, window=None:
                        host.LatencyPoint(ws, 14e-9))
    assert host.measure_effective_size(l3, 512 << 10, 64, 180e-9, step=2).size == 32 << 20
    with pytest.raises(InputError, match="step must exceed 1"):
        host.measure_effective_size(l3, 512 << 10, 64, 180e-9, step=1)
    with pytest.raises(InputError, match="trials be >= 1"):
        host.measure_effective_size(l3, 512 << 10, 64, 180e-9, trials=0)
    # each point keeps its best sweep: a burst that slows one sweep at 8 MiB does not shrink it
    slow = iter([14e-9] * 4 + [300e-9] * 2 + [14e-9] * 6 + [300e-9] * 6)
    monkeypatch.setattr(measure, "measure_latency", lambda ws, line, target=0.0, window=None:
                        host.LatencyPoint(ws, next(slow)))
    assert host.measure_effective_size(l3, 512 << 10, 64, 180e-9, step=2, trials=3).size == 32 << 20


def test_detect_writes_the_last_level_as_it_behaves(profile: Path) -> None:
    raw = json.loads(Path(str(profile) + ".json").read_text())
    m = profiles.load_machine_file(profile)
    e, last = raw["effective"], m.levels[-1]
    assert e is not None and e["stated"] == raw["caches"][-1]["size"]
    if e["size"] < e["stated"]:
        assert last.size == e["size"] and last.provenance["size"].status == "measured"
    else:
        assert last.size == e["stated"] and last.provenance["size"].status == "secondary"
    # the blocks are derived from the level as written: the packed kc x nc panel fits it
    kc, nc = m.schedule.params["kc"], m.schedule.params["nc"]
    assert kc * nc * 4 <= last.size


def test_blocks_follow_the_last_level_as_it_behaves() -> None:
    caches = [host.CacheInfo(1, "Data", 32768, 64, 8, 64, 1), host.CacheInfo(2, "Unified", 524288, 64, 8, 1024, 1),
              host.CacheInfo(3, "Unified", 32 << 20, 64, 16, 32768, 2)]
    e = host.EffectiveSize("L3", 32 << 20, 4 << 20, 14e-9, 180e-9, [])
    behaving = host.as_behaving(caches, e)
    assert behaving[-1].size == 4 << 20 and behaving[-1].sets == 4096 and behaving[:2] == caches[:2]
    assert host.blocking(behaving, frozenset({"avx2"}), 4).nc == 3072  # 4 MiB less a way / (320 x 4 B)
    assert host.as_behaving(caches, None) == caches
    assert host.as_behaving(caches, host.EffectiveSize("L3", 32 << 20, 64 << 20, 0, 0, [])) == caches


def test_caches_match_sysfs(tmp_path: Path) -> None:
    index = tmp_path / "cpu0" / "cache" / "index0"
    index.mkdir(parents=True)
    for name, value in {"type": "Data", "level": "1", "size": "48K", "coherency_line_size": "64",
                        "ways_of_associativity": "12", "number_of_sets": "64", "shared_cpu_list": "0,4"}.items():
        (index / name).write_text(value + "\n")
    (caches,) = [host.read_caches(tmp_path)]
    assert caches == [host.CacheInfo(1, "Data", 48 * 1024, 64, 12, 64, 2)]
    assert host.level_geometry(caches[0])[:2] == (48 * 1024, 12)


def test_blocking_from_caches() -> None:
    caches = [host.CacheInfo(1, "Data", 32768, 64, 8, 64, 1), host.CacheInfo(2, "Unified", 524288, 64, 8, 1024, 1),
              host.CacheInfo(3, "Unified", 32 << 20, 64, 16, 32768, 8)]
    b = host.blocking(caches, frozenset({"avx2", "fma"}), 4)
    assert b.micro_tile == (16, 6)
    assert b.kc == 320  # Low et al.: 5 ways of 64 sets x 64 B for A, / (16 x 4 B)
    assert b.mc % 16 == 0 and b.mc * b.kc * 4 <= 524288
    assert b.nc % 6 == 0 and b.nc * b.kc * 4 <= 32 << 20


def test_chase_visits_every_line_once() -> None:
    for window in (None, 4096):
        nxt = host.chase_array(64 * 1024, 64, window=window)
        seen, p = set(), 0
        for _ in range(len(nxt) // 8):
            seen.add(p)
            p = int(nxt[p])
        assert p == 0 and len(seen) == len(nxt) // 8


def test_numpy_step_learns() -> None:
    hc = _host_check()
    spec = hc.MLPSpec((6, 5, 3), True, "sigmoid", "mse")
    model = hc.NumpyMLP(spec, 8)
    model.lr = np.float32(0.5)
    model.run(False)
    before = float(np.mean((model.y[-1] - model.target) ** 2))
    for _ in range(200):
        model.run(False)
    assert float(np.mean((model.y[-1] - model.target) ** 2)) < before


def test_numpy_step_does_memwall_s_work_and_counts_its_calls() -> None:
    """The NumPy step computes the first layer's dX, as memwall's lowering does (L1.dX),
    and counts the NumPy calls it issues (30 for NETtalk: 31 with the dX)."""
    hc = _host_check()
    spec = hc.MLPSpec((6, 5, 3), True, "sigmoid", "mse")
    model = hc.NumpyMLP(spec, 4)
    model.run(False)
    assert np.any(model.dx_in != 0)
    # forward 2 x (matmul, bias, 4 sigmoid ufuncs); loss 1; backward 2 x (3 sigmoid, dX, lr, dW, db); update 4
    assert model.calls_per_step(False) == 12 + 1 + 14 + 4
    assert model.calls_per_step(True) == 4 * 31 and model.xp is np
    per = hc.HostCase("x", "nettalk", spec, 4, "per-example")
    assert hc.outer_products(per) == 4 * (6 * 5 + 5 * 3)
    assert hc.outer_products(hc.HostCase("x", "nettalk", spec, 4, "minibatch")) == 0


def test_summary_reports_both_knees_and_the_top_rate() -> None:
    hc = _host_check()
    rows = [{"series": "affine width 8", "batch": b, "ratio": r, "ratio_best": r, "measured_flops": f,
             "measured_best_flops": f, "predicted_flops": p, "predicted_bound": "compute"}
            for b, r, f, p in ((1, 0.5, 1.0, 1.0), (4, 1.0, 3.0, 6.0), (16, 2.0, 8.0, 9.0))]
    s = hc.summarize(rows, peak=10.0)
    assert (s["median_ratio"], s["worst_ratio"]) == (1.0, 0.5)
    assert (s["measured_knee"], s["predicted_knee"]) == (16, 4)
    assert s["top_measured_flops"] == 8.0 and s["top_over_peak"] == 0.8


def _host_check():  # the experiment script, imported by path (experiments/ is not a package)
    spec = importlib.util.spec_from_file_location("host_check", ROOT / "experiments" / "host_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["host_check"] = module
    spec.loader.exec_module(module)
    return module


def test_host_check_end_to_end(profile: Path, tmp_path: Path) -> None:
    hc = _host_check()
    result = hc.run(tmp_path, quick=True, profile=str(profile))
    assert (tmp_path / "host_check.csv").is_file() and (tmp_path / "host_check.json").is_file()
    rows = result["rows"]
    assert rows and all(r["measured_s"] > 0 for r in rows)
    if result["summary"]["prediction_error"] is None:
        assert all(r["predicted_s"] > 0 for r in rows)
        assert (tmp_path / "host_check.png").is_file() and (tmp_path / "host_check.svg").is_file()


def test_every_memwall_package_is_listed_for_the_wheel() -> None:
    """pyproject lists packages by hand: a new one (memwall.host) left out would be missing
    from every installed copy while the checkout's tests still pass."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"memwall." + ".".join(p.parent.relative_to(ROOT / "src" / "memwall").parts)
             for p in (ROOT / "src" / "memwall").rglob("__init__.py")}
    found = {name.rstrip(".") for name in found}
    assert found <= listed, sorted(found - listed)
