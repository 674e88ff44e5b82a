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
