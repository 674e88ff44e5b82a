"""Trace files: every format gives the counters of the same accesses as arrays; bad files fail clearly."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from memwall.engine import Hierarchy
from memwall.errors import InputError
from memwall.levels import LevelSpec
from memwall.traces import guess_format, read_trace, write_trace

LEVELS = [LevelSpec("L1", 1024, 32, 2), LevelSpec("L2", 8192, 64, 4, policy="plru")]


@pytest.fixture(scope="module")
def trace():
    rng = np.random.default_rng(4)
    n = 3000
    addr = rng.integers(0, 1 << 16, n, dtype=np.uint64)
    addr[:3] = [(1 << 64) - 8, (1 << 63), 0]
    size = rng.integers(1, 70, n).astype(np.uint32)
    size[0] = 8
    return addr, size, (rng.random(n) < 0.3).astype(np.uint8)


def counters_from_arrays(trace):
    h = Hierarchy(LEVELS, classify=True)
    h.replay(*trace)
    h.flush()
    return h.counters()


@pytest.mark.parametrize("name", ["t.din", "t.xdin", "t.lackey", "t.npz", "t.din.gz", "t.xdin.gz",
                                  "t.lackey.gz", "t.npz.gz"])
@pytest.mark.parametrize("chunk", [1, 1000, 1 << 20])
def test_format_and_chunk_agnosticism(tmp_path, trace, name, chunk):
    if chunk == 1 and "din" not in name:
        pytest.skip("chunk 1 checked on din/xdin only (slow)")
    path = write_trace(tmp_path / name, *trace)
    h = Hierarchy(LEVELS, classify=True)
    h.replay_file(path, chunk=chunk)
    h.flush()
    assert h.counters() == counters_from_arrays(trace)


def test_round_trip_arrays(tmp_path, trace):
    for name in ("a.din", "a.xdin", "a.lackey", "a.npz.gz"):
        chunks = list(read_trace(write_trace(tmp_path / name, *trace), chunk=700))
        for got, want in zip((np.concatenate(c) for c in zip(*chunks, strict=True)), trace, strict=True):
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_din_labels_default_size_and_lackey_kinds(tmp_path):
    (tmp_path / "a.din").write_text("0 10\n1 0x20 8\n2 40 2\n\n")
    a, s, w = next(read_trace(tmp_path / "a.din"))
    assert a.tolist() == [0x10, 0x20, 0x40] and s.tolist() == [4, 8, 2] and w.tolist() == [0, 1, 0]
    (tmp_path / "b.lackey").write_text("==12== Lackey\nI  0400,3\n L 0ff0,8\n S 1000,4\n M 2000,2\n")
    a, s, w = next(read_trace(tmp_path / "b.lackey"))
    assert a.tolist() == [0xFF0, 0x1000, 0x2000, 0x2000] and w.tolist() == [0, 1, 0, 1]
    (tmp_path / "c.xdin").write_text("r 10 10\nw ffffffffffffffff 1\n")
    a, s, w = next(read_trace(tmp_path / "c.xdin"))
    assert a.tolist() == [0x10, (1 << 64) - 1] and s.tolist() == [16, 1]


@pytest.mark.parametrize("name,text,match", [
    ("a.din", "0 10 4\n0 zz 4\n", r"a.din:2: malformed din"),
    ("a.din", "0 10 4\n5 10 4\n", r"a.din:2: din label '5'"),
    ("a.din", "0 10 0\n", r"a.din:1: size 0"),
    ("a.din", "0 10 -4\n", r"a.din:1: size -4"),
    ("a.din", "0 10 4 7\n", r"a.din:1: a din line"),
    ("a.din", "1 fffffffffffffffc 8\n", r"a.din:1: .*wraps past 2\*\*64"),
    ("a.din", "1 1ffffffffffffffff 1\n", r"a.din:1: .*64 bits"),
    ("a.xdin", "x 10 4\n", r"a.xdin:1: an xdin line"),
    ("a.xdin", "r -10 4\n", r"a.xdin:1"),
    ("a.lackey", " L 10\n", r"a.lackey:1: a lackey line"),
])
def test_malformed_text_lines_name_file_and_line(tmp_path, name, text, match):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=match):
        list(read_trace(tmp_path / name))


def test_truncated_gzip_and_npz(tmp_path, trace):
    full = write_trace(tmp_path / "t.din.gz", *trace).read_bytes()
    (tmp_path / "cut.din.gz").write_bytes(full[: len(full) // 2])
    with pytest.raises(InputError, match=r"cut.din.gz: truncated or corrupt gzip"):
        list(read_trace(tmp_path / "cut.din.gz"))
    npz = write_trace(tmp_path / "t.npz", *trace).read_bytes()
    (tmp_path / "cut.npz").write_bytes(npz[: len(npz) - 40])
    with pytest.raises(InputError, match=r"cut.npz: truncated or corrupt npz"):
        list(read_trace(tmp_path / "cut.npz"))
    (tmp_path / "cut.npz.gz").write_bytes(gzip.compress(npz)[:-30])
    with pytest.raises(InputError, match=r"cut.npz.gz: truncated or corrupt"):
        list(read_trace(tmp_path / "cut.npz.gz"))


def test_npz_missing_array_and_bad_values(tmp_path):
    np.savez(tmp_path / "a.npz", addr=np.zeros(2, np.uint64), size=np.ones(2, np.uint32))
    with pytest.raises(InputError, match="missing is_write"):
        list(read_trace(tmp_path / "a.npz"))
    np.savez(tmp_path / "b.npz", addr=np.zeros(2, np.int64), size=np.array([1, -1]), is_write=np.zeros(2))
    with pytest.raises(InputError, match=r"b.npz: field 'size'"):
        list(read_trace(tmp_path / "b.npz"))
    np.savez(tmp_path / "c.npz", addr=np.array([2**64 - 4], np.uint64), size=np.array([8], np.uint32),
             is_write=np.zeros(1, np.uint8))
    with pytest.raises(InputError, match="wraps past"):
        Hierarchy(LEVELS).replay_file(tmp_path / "c.npz")


def test_format_guess_and_missing_file(tmp_path):
    assert guess_format("x/y.lk.gz") == "lackey" and guess_format("a.XDIN") == "xdin"
    with pytest.raises(InputError, match="cannot tell the trace format"):
        guess_format("trace.txt")
    with pytest.raises(InputError, match="no such file"):
        list(read_trace(tmp_path / "none.din"))
    (tmp_path / "bin.din").write_bytes(b"\x00\xff\xfe")
    with pytest.raises(InputError, match="not a text trace"):
        list(read_trace(tmp_path / "bin.din"))
