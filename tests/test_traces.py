"""Trace files: every format gives the counters of the same accesses as arrays; bad files fail clearly."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# ------------------------------------------------------------ the C scanner and streaming
@pytest.mark.parametrize("block", [1, 7, 64, 1 << 22])
@pytest.mark.parametrize("name", ["t.din", "t.xdin", "t.din.gz"])
def test_block_size_agnosticism(tmp_path, trace, monkeypatch, name, block):
    # Lines cut anywhere by the scanner's blocks read the same, and errors keep their line.
    import memwall.traces

    monkeypatch.setattr(memwall.traces, "_BLOCK", block)
    path = write_trace(tmp_path / name, *trace)
    chunks = list(read_trace(path, chunk=999))
    for got, want in zip((np.concatenate(c) for c in zip(*chunks, strict=True)), trace, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    bad = tmp_path / "bad.din"
    bad.write_text("0 10 4\n" * 40 + "0 1_0 4\n")
    with pytest.raises(InputError, match=r"bad.din:41: digit separators"):
        list(read_trace(bad))


@pytest.mark.parametrize("name,text,match", [
    ("a.din", "0 10 1_000\n", r"a.din:1: digit separators"),
    ("a.din", "0 1_0 4\n", r"a.din:1: digit separators"),
    ("a.xdin", "r 10 1_0\n", r"a.xdin:1: digit separators"),
    ("a.din", "0 10 +4\n", r"a.din:1: malformed din line"),
    ("a.din", "0 10\x0c4\n", r"a.din:1: malformed din line"),
    ("a.din", "0 10 4\n0 \xe9\n", r"a.din:2: not a text trace"),
    ("a.din", "0\n", r"a.din:1: a din line"),
    ("a.xdin", "r 10\n", r"a.xdin:1: an xdin line"),
    ("a.xdin", "w 10 100000000\n", r"a.xdin:1: size 4294967296"),
])
def test_scanner_refuses_what_the_formats_do_not_have(tmp_path, name, text, match):
    (tmp_path / name).write_bytes(text.encode("latin-1"))
    with pytest.raises(InputError, match=match):
        list(read_trace(tmp_path / name))


def test_scanner_accepts_tabs_crlf_hex_prefix_and_blank_lines(tmp_path):
    (tmp_path / "a.din").write_bytes(b"\t0\t0X10 \r\n\n   \r\n1 0x20\t8\r\n2 ffffffffffffffff 1")
    a, s, w = next(read_trace(tmp_path / "a.din"))
    assert a.tolist() == [0x10, 0x20, (1 << 64) - 1] and s.tolist() == [4, 8, 1] and w.tolist() == [0, 1, 0]
    (tmp_path / "b.xdin").write_bytes(b"w 0x10 0x40\nr 0000000000000000000000010 1f\n")
    a, s, w = next(read_trace(tmp_path / "b.xdin"))
    assert a.tolist() == [0x10, 0x10] and s.tolist() == [64, 31] and w.tolist() == [1, 0]


def test_is_write_of_two_is_refused_even_as_uint8(tmp_path):
    h = Hierarchy(LEVELS)
    with pytest.raises(InputError, match=r"field 'is_write': access 1: value 2"):
        h.replay(np.array([0, 8], np.uint64), np.array([8, 8], np.uint32), np.array([0, 2], np.uint8))
    np.savez(tmp_path / "w.npz", addr=np.zeros(3000, np.uint64), size=np.ones(3000, np.uint32),
             is_write=np.r_[np.zeros(2500, np.uint8), np.full(500, 2, np.uint8)])
    with pytest.raises(InputError, match=r"w.npz: field 'is_write': access 2500: value 2"):
        h.replay_file(tmp_path / "w.npz", chunk=1000)
    assert h.counters().accesses == 2000


def test_npz_errors_name_the_file_and_the_index_in_the_file(tmp_path):
    addr = np.zeros(5000, np.uint64)
    size = np.ones(5000, np.uint32)
    size[3210] = 0
    np.savez(tmp_path / "z.npz", addr=addr, size=size, is_write=np.zeros(5000, np.uint8))
    with pytest.raises(InputError, match=r"z.npz: field 'size': access 3210: size must be at least"):
        Hierarchy(LEVELS).replay_file(tmp_path / "z.npz", chunk=1000)
    addr[4321] = (1 << 64) - 4
    size[3210] = 1
    np.savez(tmp_path / "y.npz", addr=addr, size=size * 8, is_write=np.zeros(5000, np.uint8))
    with pytest.raises(InputError, match=r"y.npz: field 'addr': access 4321: .*wraps past"):
        Hierarchy(LEVELS).replay_file(tmp_path / "y.npz", chunk=1000)
    (tmp_path / "t.din").write_text("0 10 4\n" * 2000 + "1 fffffffffffffffc 8\n")
    with pytest.raises(InputError, match=r"t.din:2001: .*wraps past"):
        Hierarchy(LEVELS).replay_file(tmp_path / "t.din", chunk=300)


def test_garbage_npz_is_refused_without_pickle_advice(tmp_path):
    for name, data in (("g.npz", b"garbage, not a zip" * 10), ("g.npz.gz", gzip.compress(b"x" * 100))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError, match=rf"{name}: truncated or corrupt npz") as err:
            list(read_trace(tmp_path / name))
        assert "pickle" not in str(err.value)
    np.savez(tmp_path / "o.npz", addr=np.array([object()] * 2), size=np.ones(2, np.uint32),
             is_write=np.zeros(2, np.uint8))
    with pytest.raises(InputError, match=r"o.npz: array 'addr' must hold plain integers") as err:
        list(read_trace(tmp_path / "o.npz"))
    assert "pickle" not in str(err.value)


@pytest.mark.parametrize("compression", ["stored", "deflated"])
def test_npz_bad_members_are_refused_naming_the_file_and_the_array(tmp_path, compression):
    # A stored member's .npy header is read straight from the file, a deflated one's
    # through zipfile: both refuse the same bad members the same way.
    import io
    import zipfile

    def npz(name, members):
        mode = zipfile.ZIP_STORED if compression == "stored" else zipfile.ZIP_DEFLATED
        with zipfile.ZipFile(tmp_path / name, "w", mode) as zf:
            for key, data in members.items():
                zf.writestr(key + ".npy", data)
        return tmp_path / name

    def npy(arr):
        buf = io.BytesIO()
        np.save(buf, arr)
        return buf.getvalue()

    good = {"addr": npy(np.zeros(10, np.uint64)), "size": npy(np.ones(10, np.uint32)),
            "is_write": npy(np.zeros(10, np.uint8))}
    cases = [
        ("magic.npz", dict(good, size=b"\x93NUMPX" + good["size"][6:]), r"array 'size' is not a readable .npy"),
        ("shape.npz", dict(good, addr=npy(np.zeros((2, 5), np.uint64))), r"array 'addr' must be one-dimensional"),
        ("short.npz", dict(good, is_write=npy(np.zeros(10, np.uint8))[:-4]), r"truncated or corrupt npz"),
        ("length.npz", dict(good, size=npy(np.ones(9, np.uint32))), r"addr, size and is_write differ in length: 10, 9, 10"),
    ]
    for name, members, message in cases:
        with pytest.raises(InputError, match=rf"{name}: {message}"):
            list(read_trace(npz(name, members)))
    chunks = list(read_trace(npz("good.npz", good), chunk=4))
    assert [len(c[0]) for c in chunks] == [4, 4, 2]


@pytest.mark.parametrize("name", ["big.npz", "big.npz.gz", "big.din"])
def test_traces_stream_in_chunks_not_whole(tmp_path, name):
    # 1 M accesses (13 MB of npz arrays): read 64 Ki accesses at a time, the peak of memory
    # allocated while reading stays a small multiple of one chunk (the gzipped npz is
    # decompressed to a temporary file, not into memory).
    import tracemalloc

    n = 1 << 20
    addr = np.arange(n, dtype=np.uint64) * 8
    path = write_trace(tmp_path / name, addr, np.full(n, 8, np.uint32), (addr % 3 == 0).astype(np.uint8))
    tracemalloc.start()
    try:
        total = 0
        for a, _, _ in read_trace(path, chunk=1 << 16):
            total += len(a)
            del a
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == n
    assert peak < 8 << 20, peak  # the din scanner's block is 4 MiB


@pytest.mark.parametrize("save", ["savez", "savez_compressed", "big-endian", "empty"])
def test_npz_stored_compressed_foreign_byte_order_and_empty(tmp_path, trace, save):
    # Stored members are memory-mapped, deflated ones read chunk by chunk, others converted.
    addr, size, w = trace
    if save == "empty":
        addr, size, w = addr[:0], size[:0], w[:0]
    arrays = dict(addr=addr, size=size, is_write=w)
    if save == "big-endian":
        arrays = {k: v.astype(v.dtype.newbyteorder(">")) for k, v in arrays.items()}
    getattr(np, "savez_compressed" if save == "savez_compressed" else "savez")(tmp_path / "t.npz", **arrays)
    chunks = list(read_trace(tmp_path / "t.npz", chunk=700))
    got = [np.concatenate(c) for c in zip(*chunks, strict=True)] if chunks else [addr, size, w]
    for g, want in zip(got, (addr, size, w), strict=True):
        assert np.array_equal(g, want)
    assert len(chunks) == -(-len(addr) // 700)


din_token = st.sampled_from(["0", "1", "2", "3", "r", "w", "10", "0x1f", "0X", "ff", "-4", "+4", "1_0", "00",
                             "ffffffffffffffff", "10000000000000000", "4294967295", "4294967296", "\t", " ",
                             "\x0c", "z", ""])


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(din_token, max_size=5), fmt=st.sampled_from(["din", "xdin"]),
       sep=st.sampled_from([" ", "\t", "  ", " \t"]), crlf=st.booleans())
def test_scanner_agrees_with_the_python_parser_or_refuses(tmp_path_factory, tokens, fmt, sep, crlf):
    # Any line the C scanner reads gives the values the Python parser gives; any line it
    # refuses raises InputError naming the file and line 2, never another exception.
    from memwall.traces import _check_ref, _parse_line

    line = sep.join(tokens)
    path = tmp_path_factory.mktemp("fuzz") / f"f.{fmt}"
    good = "0 10 4" if fmt == "din" else "r 10 4"
    path.write_bytes(f"{good}\n{line}{chr(13) if crlf else ''}\n".encode("latin-1"))
    try:
        chunks = list(read_trace(path))
    except InputError as err:
        assert str(err).startswith(f"{path}:2: "), str(err)
        return
    got = [(int(a), int(s), int(w)) for c in chunks for a, s, w in zip(*c, strict=True)][1:]
    want = _parse_line(line, fmt, str(path), 2, 4)
    for addr, size, _ in want:
        _check_ref(addr, size, str(path), 2)
    assert got == want
