"""``memwall replay``: JSON and table output, flags, and bad input as one line with exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memwall.cli import main
from memwall.engine import Hierarchy
from memwall.levels import load_hierarchy_file
from memwall.traces import write_trace

HIER = """
[[level]]
name = "L1"
size = "1 KiB"
line = "32 B"
ways = 2
[[level]]
name = "L2"
size = "8 KiB"
line = 64
ways = 4
policy = "fifo"
"""


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(8)
    n = 2000
    trace = (rng.integers(0, 1 << 15, n, dtype=np.uint64), rng.integers(1, 40, n).astype(np.uint32),
             (rng.random(n) < 0.3).astype(np.uint8))
    hier = tmp_path / "h.toml"
    hier.write_text(HIER)
    return hier, write_trace(tmp_path / "t.xdin.gz", *trace), trace


def test_json_matches_the_api(files, capsys):
    hier, path, trace = files
    assert main(["replay", str(path), "--hierarchy", str(hier), "--flush", "--classify", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    h = Hierarchy(load_hierarchy_file(hier), classify=True)
    h.replay(*trace)
    h.flush()
    want = h.counters().as_dict()
    assert out["levels"] == want["levels"]
    assert out["memory"]["bytes_read"] == want["memory"]["bytes_read"] > 0
    assert out["memory"]["bytes_written"] == want["memory"]["bytes_written"] > 0
    assert out["accesses"] == 2000 and out["seconds"] >= 0
    assert [lv["name"] for lv in out["levels"]] == ["L1", "L2"]


def test_classification_keys_only_with_classify(files, capsys):
    hier, path, _ = files
    assert main(["replay", str(path), "--hierarchy", str(hier), "--format", "xdin", "--json"]) == 0
    level = json.loads(capsys.readouterr().out)["levels"][0]
    assert "compulsory" not in level and "conflict" not in level
    for key in ("name", "reads", "writes", "read_misses", "write_misses", "writebacks", "bytes_in", "bytes_out"):
        assert key in level


def test_table_output(files, capsys):
    hier, path, _ = files
    assert main(["replay", str(path), "--hierarchy", str(hier), "--classify"]) == 0
    out = capsys.readouterr().out
    assert "L1" in out and "L2" in out and "compulsory" in out and "memory" in out and "accesses" in out


@pytest.mark.parametrize("setup,match", [
    (lambda d: (d / "t.din").write_text("0 10 4\n0 10\n1 q 4\n"), "t.din:3"),
    (lambda d: (d / "t.din").write_text("0 10 0\n"), "size 0"),
])
def test_bad_trace_is_one_line_and_exit_2(tmp_path, files, capsys, setup, match):
    hier, _, _ = files
    setup(tmp_path)
    assert main(["replay", str(tmp_path / "t.din"), "--hierarchy", str(hier)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0] and err[0].startswith("memwall replay: error:")


def test_bad_hierarchy_names_field(tmp_path, files, capsys):
    _, path, _ = files
    bad = tmp_path / "bad.toml"
    bad.write_text('[[level]]\nname = "L1"\nsize = 1000\nline = 64\nways = 2\n')
    assert main(["replay", str(path), "--hierarchy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "size" in err and "sets x ways x line" in err
    bad.write_text('[[level]]\nname = "L1"\nsize = 1024\nline = 48\nways = 2\n')
    assert main(["replay", str(path), "--hierarchy", str(bad)]) == 2
    assert "power of two" in capsys.readouterr().err
    bad.write_text('[[level]]\nname = "L1"\nsize = 1024\nline = 64\nways = 2\npolicy = "lfu"\n')
    assert main(["replay", str(path), "--hierarchy", str(bad)]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_machine_option(files, capsys):
    _, path, _ = files
    from memwall import profiles

    machine = next((i for i in profiles.machine_ids() if profiles.load_machine(i).cache_levels), None)
    assert machine is not None, "no shipped machine has cache levels"
    assert main(["replay", str(path), "--machine", machine, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [lv["name"] for lv in out["levels"]] == [lv.name for lv in profiles.load_machine(machine).cache_levels]


def test_unknown_machine_exit_2(files, capsys):
    _, path, _ = files
    assert main(["replay", str(path), "--machine", "no-such-machine"]) == 2
    assert "no-such-machine" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["din", "din.gz", "npz"])
def test_a_trace_streams_from_a_pipe(tmp_path, kind):
    """A trace read from a pipe (no seeking): din as text, gzipped, and an npz (a zip, which
    needs seeking, goes through a temporary file)."""
    import gzip as gz
    import subprocess
    import sys

    text = b"0 1000 4\n1 2000 4\n"
    if kind == "npz":
        np.savez(tmp_path / "t.npz", addr=np.array([0x1000, 0x2000], dtype=np.uint64),
                 size=np.array([4, 4], dtype=np.uint32), is_write=np.array([0, 1], dtype=np.uint8))
        data = (tmp_path / "t.npz").read_bytes()
    else:
        data = gz.compress(text) if kind.endswith(".gz") else text
    fmt = kind.split(".")[0]
    done = subprocess.run([sys.executable, "-m", "memwall", "replay", "/dev/stdin", "--format", fmt, "--machine",
                           "vax-11-780", "--json"], input=data, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()
    out = json.loads(done.stdout)
    assert out["accesses"] == 2 and out["memory"]["writes"] == 1
