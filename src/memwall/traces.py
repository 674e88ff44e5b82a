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

Any of them may be gzip-compressed (recognised by its magic bytes). Files are read in
chunks, so a trace larger than memory streams through. Bad input raises
:class:`InputError` naming the file and line (or array).
"""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

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
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def read_trace(path: str | Path, format: str | None = None, *, chunk: int = 1 << 18,
               default_size: int = 4) -> Iterator[Chunk]:
    """Yield ``(addr uint64, size uint32, is_write uint8)`` chunks of a trace file."""
    path = Path(path)
    fmt = format or guess_format(path)
    if fmt not in FORMATS:
        raise InputError(f"unknown trace format {fmt!r}; one of {', '.join(FORMATS)}", field="format")
    if fmt == "npz":
        yield from _read_npz(path, chunk)
        return
    stream = _open_binary(path)
    try:
        text = io.TextIOWrapper(stream, encoding="ascii", errors="strict")
        yield from _read_text(text, fmt, str(path), chunk, default_size)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"truncated or corrupt gzip data: {err or 'unexpected end of file'}",
                         file=str(path)) from None
    except UnicodeDecodeError as err:
        raise InputError(f"not a text trace (byte {err.start} of a chunk is not ASCII)",
                         file=str(path)) from None
    finally:
        stream.close()


def _read_text(text: IO[str], fmt: str, name: str, chunk: int, default_size: int) -> Iterator[Chunk]:
    addrs: list[int] = []
    sizes: list[int] = []
    writes: list[int] = []
    parse = {"din": _din, "xdin": _xdin, "lackey": _lackey}[fmt]
    for number, line in enumerate(text, start=1):
        try:
            refs = parse(line, default_size)
        except InputError as err:
            raise InputError(f"{err.reason}: {line.strip()[:60]!r}", file=name, line=number) from None
        except ValueError:
            raise InputError(f"malformed {fmt} line: {line.strip()[:60]!r}", file=name, line=number) from None
        for addr, size, is_write in refs:
            if addr >= _LIMIT:
                raise InputError(f"address {addr:#x} does not fit in 64 bits", file=name, line=number)
            if size <= 0 or size >= _SIZE_LIMIT:
                raise InputError(f"size {size} must be in 1 .. 2**32-1 bytes", file=name, line=number)
            if addr + size > _LIMIT:
                raise InputError(f"address {addr:#x} + size {size} wraps past 2**64", file=name, line=number)
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


def _hex(text: str) -> int:
    value = int(text, 16)
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
    size = int(parts[2]) if len(parts) == 3 else default_size
    return [(_hex(parts[1]), size, int(label == "1"))]


def _xdin(line: str, default_size: int) -> list[tuple[int, int, int]]:
    parts = line.split()
    if not parts:
        return []
    if len(parts) != 3 or parts[0] not in ("r", "w"):
        raise InputError("an xdin line is 'r|w hexaddr hexsize'")
    size = int(parts[2], 16)
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
    addr, size = _hex(addr_text), int(size_text)
    if kind == "I":
        return []
    if kind == "M":
        return [(addr, size, 0), (addr, size, 1)]
    return [(addr, size, int(kind == "S"))]


def _read_npz(path: Path, chunk: int) -> Iterator[Chunk]:
    stream = _open_binary(path)
    try:
        if isinstance(stream, gzip.GzipFile):
            stream = io.BytesIO(stream.read())  # zip needs to seek
        with np.load(stream, allow_pickle=False) as data:
            missing = [k for k in ("addr", "size", "is_write") if k not in data.files]
            if missing:
                raise InputError(f"an npz trace needs arrays addr, size, is_write; missing {', '.join(missing)}",
                                 file=str(path))
            arrays = [data["addr"], data["size"], data["is_write"]]
    except InputError:
        raise
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError, zlib.error) as err:
        raise InputError(f"truncated or corrupt npz: {err}", file=str(path)) from None
    finally:
        stream.close()
    try:
        addr, size, is_write = as_trace_arrays(*arrays)
    except InputError as err:
        raise err.within(file=str(path)) from None
    for start in range(0, len(addr), chunk):
        yield addr[start:start + chunk], size[start:start + chunk], is_write[start:start + chunk]


def as_trace_arrays(addr: Any, size: Any, is_write: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The engine's contiguous ``uint64, uint32, uint8`` arrays, or an InputError saying why not."""
    out = []
    for name, value, dtype, high in (
        ("addr", addr, np.uint64, 1 << 64),
        ("size", size, np.uint32, _SIZE_LIMIT),
        ("is_write", is_write, np.uint8, 2),
    ):
        arr = np.asarray(value)
        if arr.ndim != 1:
            raise InputError(f"must be one-dimensional, got shape {arr.shape}", field=name)
        if arr.dtype != dtype:
            if arr.dtype == np.bool_:
                arr = arr.astype(dtype)
            elif not np.issubdtype(arr.dtype, np.integer):
                if arr.size == 0:
                    arr = arr.astype(dtype)
                else:
                    raise InputError(f"must be integers, got dtype {arr.dtype}", field=name)
            elif arr.size:
                lo, hi = int(arr.min()), int(arr.max())
                if lo < 0 or hi >= high:
                    raise InputError(f"values must lie in 0 .. {high - 1}, found {lo} .. {hi}", field=name)
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
