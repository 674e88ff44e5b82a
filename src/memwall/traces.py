"""Trace files: reading (and writing) the explicit accesses the engine replays.

Owns the array contract of a trace (:func:`as_trace_arrays`: contiguous ``uint64`` addresses,
``uint32`` sizes, ``uint8`` read/write flags, checked) and the four on-disk forms and their
errors (:mod:`memwall.engine` imports this module, never the other way round):

* ``din``: DineroIV text, one reference a line: ``label hexaddr [size]`` with label 0
  (read), 1 (write) or 2 (instruction fetch, replayed as a read); size in decimal bytes,
  ``default_size`` (4) when absent. Labels 3 and 4 (DineroIV escapes) are refused.
* ``xdin``: the extended form ``r|w hexaddr hexsize``.
* ``lackey``: valgrind ``--tool=lackey --trace-mem=yes`` output: `` L addr,size``,
  `` S addr,size``, `` M addr,size`` (a read then a write of the same bytes). Data
  references only: instruction lines (``I``) are skipped, as are ``==pid==`` lines.
* ``npz``: NumPy arrays ``addr`` (uint64), ``size`` (uint32), ``is_write`` (uint8).

Any of them may be gzip-compressed (recognised by its magic bytes). Files stream through
in chunks, so a trace larger than memory can be replayed: din and xdin are scanned in C
(``memwall._textparse``) a 4 MiB block at a time; an npz's stored members are
memory-mapped and its deflated ones read chunk by chunk, and a gzipped npz is first
decompressed to a temporary file. Bad input raises :class:`InputError` naming the file
and the line, or for an npz the array and the access's index in the file.
"""

from __future__ import annotations

import gzip
import io
import mmap
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

import memwall._textparse as _textparse  # the module, not through memwall/__init__ (tests/test_imports.py)

from .errors import InputError

FORMATS = ("din", "xdin", "lackey", "npz")
_LIMIT = 1 << 64
_SIZE_LIMIT = 1 << 32
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]


def guess_format(path: str | Path) -> str:
    """The format named by the suffix (``.din``, ``.xdin``, ``.lackey``/``.lk``, ``.npz``; ``.gz`` ignored)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    aliases = {"din": "din", "xdin": "xdin", "lackey": "lackey", "lk": "lackey", "npz": "npz"}
    if suffix not in aliases:
        raise InputError(
            f"cannot tell the trace format from the name; give one of {', '.join(FORMATS)}",
            file=str(path),
        )
    return aliases[suffix]


def _open_binary(path: Path) -> IO[bytes]:
    try:
        raw = path.open("rb")
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except OSError as err:
        raise InputError(f"cannot read: {err}", file=str(path)) from None
    magic = raw.peek(2)[:2]  # peeked, not read and sought back: a pipe cannot seek
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def read_trace(path: str | Path, format: str | None = None, *, chunk: int = 1 << 18,
               default_size: int = 4) -> Iterator[Chunk]:
    """Yield ``(addr uint64, size uint32, is_write uint8)`` chunks of a trace file.

    din and xdin are scanned in C, a block of ``_BLOCK`` bytes at a time; lackey line by
    line in Python; npz member by member, ``chunk`` accesses at a time, straight from the
    zip (a gzipped npz is first decompressed to a temporary file).
    """
    path = Path(path)
    fmt = format or guess_format(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown trace format {fmt!r}; one of {', '.join(FORMATS)}", field="format")
    if chunk < 1:
        raise InputError(f"chunk must be at least 1 access, got {chunk}", field="chunk")
    if not 1 <= default_size < _SIZE_LIMIT:
        raise InputError(f"default_size must be in 1 .. 2**32-1 bytes, got {default_size}", field="default_size")
    if fmt == "npz":
        yield from _read_npz(path, chunk)
        return
    stream = _open_binary(path)
    try:
        if fmt == "lackey":
            text = io.TextIOWrapper(stream, encoding="ascii", errors="strict")
            yield from _read_text(text, fmt, str(path), chunk, default_size)
        else:
            yield from _scan_text(stream, fmt, str(path), chunk, default_size)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"truncated or corrupt gzip data: {err or 'unexpected end of file'}",
                         file=str(path)) from None
    except UnicodeDecodeError as err:
        raise InputError(f"not a text trace (byte {err.start} of a chunk is not ASCII)",
                         file=str(path)) from None
    finally:
        stream.close()


_BLOCK = 1 << 22  # bytes of text scanned per call into C


def _scan_text(stream: IO[bytes], fmt: str, name: str, chunk: int, default_size: int) -> Iterator[Chunk]:
    """din/xdin through ``_textparse.scan_lines``: no Python work per line. A line the
    scanner refuses is diagnosed by the Python parser of its format, for the message."""
    code = _textparse.FORMATS[fmt]
    out = _empty(chunk)
    fill = 0
    line_no = 1  # of the first line not yet scanned
    buf = bytearray(_BLOCK)  # unscanned text first (the tail of a cut line), then new text
    have = 0
    final = False
    while not final:
        if have == len(buf):  # one line longer than the buffer
            buf.extend(bytes(len(buf)))
        got = stream.readinto(memoryview(buf)[have:])  # type: ignore[attr-defined]
        final = not got
        have += got or 0
        data = np.frombuffer(buf, np.uint8, count=have)
        pos = 0
        while True:
            pos, fill, lines, bad = _textparse.scan_lines(data, pos, final, code, default_size, *out, fill)
            line_no += lines
            if bad:
                end = buf.find(b"\n", pos, have)
                _refuse_line(bytes(buf[pos:end if end >= 0 else have]), fmt, name, line_no, default_size)
            if fill < chunk:
                break
            yield out
            out = _empty(chunk)
            fill = 0
        del data  # (a live view would forbid resizing buf)
        buf[:have - pos] = buf[pos:have]
        have -= pos
    if fill:
        yield out[0][:fill], out[1][:fill], out[2][:fill]


def _empty(n: int) -> Chunk:
    return np.empty(n, np.uint64), np.empty(n, np.uint32), np.empty(n, np.uint8)


def _refuse_line(raw: bytes, fmt: str, name: str, number: int, default_size: int) -> None:
    """Raise the InputError for one line the C scanner did not accept."""
    try:
        line = raw.decode("ascii")
    except UnicodeDecodeError:
        raise InputError("not a text trace (a byte of this line is not ASCII)", file=name, line=number) from None
    refs = _parse_line(line, fmt, name, number, default_size)
    for addr, size, _ in refs:
        _check_ref(addr, size, name, number)
    # The Python parser took what the scanner refused (other whitespace, say): refuse it too.
    raise InputError(f"malformed {fmt} line: {line.strip()[:60]!r}", file=name, line=number)


def _parse_line(line: str, fmt: str, name: str, number: int, default_size: int) -> list[tuple[int, int, int]]:
    parse = {"din": _din, "xdin": _xdin, "lackey": _lackey}[fmt]
    try:
        return parse(line, default_size)
    except InputError as err:
        raise InputError(f"{err.reason}: {line.strip()[:60]!r}", file=name, line=number) from None
    except ValueError:
        raise InputError(f"malformed {fmt} line: {line.strip()[:60]!r}", file=name, line=number) from None


def _check_ref(addr: int, size: int, name: str, number: int) -> None:
    if addr >= _LIMIT:
        raise InputError(f"address {addr:#x} does not fit in 64 bits", file=name, line=number)
    if size <= 0 or size >= _SIZE_LIMIT:
        raise InputError(f"size {size} must be in 1 .. 2**32-1 bytes", file=name, line=number)
    if addr + size > _LIMIT:
        raise InputError(f"address {addr:#x} + size {size} wraps past 2**64", file=name, line=number)


def _read_text(text: IO[str], fmt: str, name: str, chunk: int, default_size: int) -> Iterator[Chunk]:
    addrs: list[int] = []
    sizes: list[int] = []
    writes: list[int] = []
    for number, line in enumerate(text, start=1):
        for addr, size, is_write in _parse_line(line, fmt, name, number, default_size):
            _check_ref(addr, size, name, number)
            addrs.append(addr)
            sizes.append(size)
            writes.append(is_write)
        if len(addrs) >= chunk:
            yield _arrays(addrs, sizes, writes)
            addrs, sizes, writes = [], [], []
    if addrs:
        yield _arrays(addrs, sizes, writes)


def _arrays(addrs: list[int], sizes: list[int], writes: list[int]) -> Chunk:
    return (np.array(addrs, dtype=np.uint64), np.array(sizes, dtype=np.uint32),
            np.array(writes, dtype=np.uint8))


def _int(text: str, base: int) -> int:
    """``int(text, base)`` without Python's extras the trace formats do not have (``_``)."""
    if "_" in text:
        raise InputError("digit separators ('_') are not allowed")
    return int(text, base)


def _hex(text: str) -> int:
    value = _int(text, 16)
    if value < 0 or text.strip().startswith(("-", "+")):
        raise InputError("negative address")
    return value


def _din(line: str, default_size: int) -> list[tuple[int, int, int]]:
    parts = line.split()
    if not parts:
        return []
    if len(parts) not in (2, 3):
        raise InputError("a din line is 'label hexaddr [size]'")
    label = parts[0]
    if label not in ("0", "1", "2"):
        raise InputError(f"din label {label!r} is not 0 (read), 1 (write) or 2 (fetch)")
    size = _int(parts[2], 10) if len(parts) == 3 else default_size
    return [(_hex(parts[1]), size, int(label == "1"))]


def _xdin(line: str, default_size: int) -> list[tuple[int, int, int]]:
    parts = line.split()
    if not parts:
        return []
    if len(parts) != 3 or parts[0] not in ("r", "w"):
        raise InputError("an xdin line is 'r|w hexaddr hexsize'")
    size = _int(parts[2], 16)
    if parts[2].strip().startswith("-"):
        raise InputError("negative size")
    return [(_hex(parts[1]), size, int(parts[0] == "w"))]


def _lackey(line: str, default_size: int) -> list[tuple[int, int, int]]:
    stripped = line.strip()
    if not stripped or stripped.startswith("=="):
        return []
    kind, _, rest = stripped.partition(" ")
    addr_text, comma, size_text = rest.strip().partition(",")
    if not comma or kind not in ("I", "L", "S", "M"):
        raise InputError("a lackey line is ' L|S|M hexaddr,size' or 'I  hexaddr,size'")
    addr, size = _hex(addr_text), _int(size_text, 10)
    if kind == "I":
        return []
    if kind == "M":
        return [(addr, size, 0), (addr, size, 1)]
    return [(addr, size, int(kind == "S"))]


_NPZ_ARRAYS = ("addr", "size", "is_write")


def _read_npz(path: Path, chunk: int) -> Iterator[Chunk]:
    """The three arrays read side by side from their zip members, ``chunk`` accesses at a
    time (a member, stored or deflated, is read incrementally); nothing is loaded whole."""
    name = str(path)
    stream = _open_binary(path)
    try:
        if isinstance(stream, gzip.GzipFile) or not stream.seekable():
            # zip needs to seek: a gzipped npz or one from a pipe goes to a temporary file, never into memory
            tmp = tempfile.TemporaryFile()
            try:
                shutil.copyfileobj(stream, tmp, 1 << 20)
            except BaseException:
                tmp.close()
                raise
            stream.close()
            stream = tmp  # type: ignore[assignment]
            tmp.seek(0)
        with zipfile.ZipFile(stream) as zf:
            members = {n[:-4]: n for n in zf.namelist() if n.endswith(".npy")}
            missing = [k for k in _NPZ_ARRAYS if k not in members]
            if missing:
                raise InputError(f"an npz trace needs arrays addr, size, is_write; missing {', '.join(missing)}",
                                 file=name)
            names = [members[k] for k in _NPZ_ARRAYS]
            mapped = _map_stored(stream, zf, names, name)
            files = [] if mapped is not None else [zf.open(n) for n in names]
            try:
                if mapped is not None:
                    lengths = [len(m) for m in mapped]
                else:
                    heads = [_npy_header(f, k, name) for f, k in zip(files, _NPZ_ARRAYS, strict=True)]
                    lengths = [n for n, _ in heads]
                if len(set(lengths)) != 1:
                    raise InputError(f"addr, size and is_write differ in length: {', '.join(map(str, lengths))}",
                                     file=name)
                for start in range(0, lengths[0], chunk):
                    count = min(chunk, lengths[0] - start)
                    if mapped is not None:
                        parts = [m[start:start + count] for m in mapped]
                    else:
                        parts = [_npy_read(f, dtype, count, k, name) for f, (_, dtype), k
                                 in zip(files, heads, _NPZ_ARRAYS, strict=True)]
                    try:
                        yield as_trace_arrays(*parts, first=start)
                    except InputError as err:
                        raise err.within(file=name) from None
            finally:
                for f in files:
                    f.close()
    except InputError:
        raise
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError, zlib.error) as err:
        raise InputError(f"truncated or corrupt npz: {err}", file=name) from None
    finally:
        stream.close()


def _map_stored(stream: IO[bytes], zf: zipfile.ZipFile, names: list[str], name: str) -> list[np.ndarray] | None:
    """Views of the three arrays in one read-only mapping of the file when their members
    are stored uncompressed (np.savez): the pages are read from the file as the replay
    reaches them, and no copy is made. None when a member is compressed or big-endian
    (those are read chunk by chunk instead)."""
    try:
        fileno = stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
    infos = [zf.getinfo(member) for member in names]
    if any(info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 for info in infos):
        return None
    file_size = os.fstat(fileno).st_size
    spans = []
    for member, info in zip(names, infos, strict=True):
        stream.seek(info.header_offset)
        local = stream.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise InputError(f"truncated or corrupt npz: bad local header of {member!r}", file=name)
        data_start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
        # A stored member is the .npy file itself: its header is read from the file, not
        # through zipfile's member reader, which costs twice as much.
        stream.seek(data_start)
        length, dtype = _npy_header(stream, member[:-4], name)
        if dtype.byteorder == ">":
            return None
        offset = stream.tell()
        if offset + length * dtype.itemsize > file_size or info.file_size < offset - data_start + length * dtype.itemsize:
            raise InputError(f"truncated or corrupt npz: array {member[:-4]!r} ends early", file=name)
        spans.append((offset, length, dtype))
    if not any(length for _, length, _ in spans):
        return [np.empty(0, dtype) for _, _, dtype in spans]
    # One mapping, not an np.memmap per array: three np.memmaps cost 0.6-0.8 ms in a
    # fresh process (their Python, and mmap's import on first use), a tenth of replaying
    # a 1 M-access trace through one level. The views keep the mapping alive; it
    # outlives the file's closing.
    whole = mmap.mmap(fileno, 0, access=mmap.ACCESS_READ)
    return [np.frombuffer(whole, dtype, length, offset) for offset, length, dtype in spans]


def _npy_header(f: IO[bytes], key: str, name: str) -> tuple[int, np.dtype]:
    """Length and dtype of a one-dimensional .npy member of plain numbers, from its header."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    except ValueError as err:
        raise InputError(f"array {key!r} is not a readable .npy array: {err}", file=name) from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise InputError(f"array {key!r} must hold plain integers, its dtype is {dtype}", file=name)
    if len(shape) != 1:
        raise InputError(f"array {key!r} must be one-dimensional, got shape {shape}", file=name)
    return int(shape[0]), dtype


def _npy_read(f: IO[bytes], dtype: np.dtype, count: int, key: str, name: str) -> np.ndarray:
    nbytes = count * dtype.itemsize
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise InputError(f"truncated or corrupt npz: array {key!r} ends early", file=name)
    return np.frombuffer(data, dtype)


def as_trace_arrays(addr: Any, size: Any, is_write: Any, *, first: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The engine's contiguous ``uint64, uint32, uint8`` arrays, or an InputError saying why
    not, naming the first bad access (counted from ``first``, the index of the arrays' first
    access in a longer trace)."""
    out = []
    for name, value, dtype, high in (
        ("addr", addr, np.uint64, 1 << 64),
        ("size", size, np.uint32, _SIZE_LIMIT),
        ("is_write", is_write, np.uint8, 2),
    ):
        arr = np.asarray(value)
        if arr.ndim != 1:
            raise InputError(f"must be one-dimensional, got shape {arr.shape}", field=name)
        if arr.dtype == np.bool_:
            arr = arr.astype(dtype)
        elif not np.issubdtype(arr.dtype, np.integer):
            if arr.size:
                raise InputError(f"must be integers, got dtype {arr.dtype}", field=name)
            arr = arr.astype(dtype)
        elif arr.size and (arr.dtype != dtype or name == "is_write"):
            # (a uint8 is_write may still hold 2 .. 255; a uint64 addr always fits)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= high:
                bad = int(np.flatnonzero((arr < 0) | (arr >= high) if lo < 0 else arr >= high)[0])
                raise InputError(f"access {first + bad}: value {int(arr[bad])} outside 0 .. {high - 1}",
                                 field=name)
        out.append(np.ascontiguousarray(arr, dtype=dtype))
    if not (len(out[0]) == len(out[1]) == len(out[2])):
        raise InputError(f"addr, size and is_write differ in length: {len(out[0])}, {len(out[1])}, {len(out[2])}")
    return out[0], out[1], out[2]


def write_trace(path: str | Path, addr: np.ndarray, size: np.ndarray, is_write: np.ndarray,
                format: str | None = None, *, compress: bool | None = None) -> Path:
    """Write accesses in one of the formats (gzip when the name ends in .gz or ``compress``)."""
    path = Path(path)
    fmt = format or guess_format(path)
    gz = path.name.endswith(".gz") if compress is None else compress
    if fmt == "npz":
        buf = io.BytesIO()
        np.savez(buf, addr=np.asarray(addr, np.uint64), size=np.asarray(size, np.uint32),
                 is_write=np.asarray(is_write, np.uint8))
        data = buf.getvalue()
    else:
        rows = []
        for a, s, w in zip(addr.tolist(), size.tolist(), is_write.tolist(), strict=True):
            if fmt == "din":
                rows.append(f"{int(bool(w))} {a:x} {s}\n")
            elif fmt == "xdin":
                rows.append(f"{'w' if w else 'r'} {a:x} {s:x}\n")
            elif fmt == "lackey":
                rows.append(f" {'S' if w else 'L'} {a:08x},{s}\n")
            else:
                raise InputError(f"unknown trace format {fmt!r}", field="format")
        data = "".join(rows).encode("ascii")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
