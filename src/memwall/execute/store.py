"""The sweep's result store: one self-checking JSON file per finished case, written atomically.

Owns: the layout of a sweep folder (``DIR/cases/<key>.json``, ``DIR/results.csv``,
``DIR/results.json``), writing one case's record so that a kill at any moment leaves
either the whole file or none of it, reading records back, and rebuilding the results
tables from the records in a fixed order, so the same cases always give the same bytes.

A record is a plain dict: ``key``, ``status`` (``"ok"`` or ``"error"``), ``row`` (the
flat results row), for a failed case ``error`` (the reason), and ``checksum``: the
SHA-256 of the record's canonical JSON without it. What a key hashes is the sweep's
business (:func:`memwall.simulation.row.case_key`); the store only trusts it.

Damage. A record that cannot be read (not UTF-8, not JSON, a folder in its place), has
the wrong shape (no ``row``, another key) or fails its checksum (edited by hand) is
never used: it is reported once through ``on_damaged``, moved to ``DIR/cases/quarantine/``
and treated as missing, so the case is computed again. Where the quarantine is not a
folder of the store's own (a link, a file of that name), the damaged entry is left where
it is, ignored until a record is written over it.

Hostile folders. Two sweeps may share a folder and keys are predictable, so the store
follows no link: it reads only what ``lstat`` calls a regular file of at most
:data:`MAX_RECORD_BYTES`, opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO
cannot hold it), and anything else in a record's place (a link, a FIFO, a device, a
sparse file of gigabytes) is damaged. Writes go to a new temp file and are renamed into
place, which replaces a planted link rather than writing through it; a claim file is
opened with ``O_NOFOLLOW`` and something else in its place is removed first. Temp files
a killed writer left (``.<name>.<8 characters>.tmp``, the only names the store creates
besides records and claims) are removed by the next run (:meth:`Store.clean_temps`) once
no writer holds them.

Claims. Two sweeps may share a folder: before running a case a sweep takes its claim,
an exclusive ``flock`` on ``DIR/cases/<key>.claim``, held until the record is written.
The kernel drops the lock when its holder dies, however it dies, so a claim of a dead
process is free again at once. Where ``fcntl`` is missing (Windows), claims always
succeed and two sweeps sharing a folder may compute a case twice.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..canonical import canonical, dumps
from ..simulation.row import row_problem

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

CASES_DIR = "cases"
REPLAYS_DIR = "replays"
QUARANTINE_DIR = "quarantine"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
MACHINES_JSON = "machines.json"

MAX_RECORD_BYTES = 16 * 2**20  # bytes; a record is kilobytes, a stored replay tens of them
MAX_TABLE_BYTES = 2**30  # bytes; results.json of the era sweep is about a megabyte
TEMP_AGE = 60.0  # seconds; an unlocked temp file this old is a killed writer's
# What _atomic_write's mkstemp makes of FINAL: ".FINAL." + 8 of [a-z0-9_] + ".tmp".
_TEMP_NAME = re.compile(r"\.(?P<final>[^/]+)\.[a-z0-9_]{8}\.tmp\Z")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _warn(message: str) -> None:
    print(f"memwall: warning: {message}", file=sys.stderr)


class Unsafe(Exception):
    """A path the store will not read or use: a link, not a regular file, or too large.
    ``kind``: what stands there (:func:`_kind`), or "too large"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def read_regular(path: str | os.PathLike[str], limit: int = MAX_RECORD_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file (no link followed) of at most ``limit``
    bytes; :class:`Unsafe` naming what stands there otherwise, FileNotFoundError if nothing.

    ``lstat`` first, so a FIFO or a device is never opened; then ``O_NOFOLLOW`` and
    ``O_NONBLOCK`` and ``fstat`` on what was opened, so a swap between the two is caught;
    then at most ``limit + 1`` bytes are read, so a file that grows is not read forever."""
    def refuse(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            kind = _kind(st.st_mode)
            raise Unsafe(kind, f"{kind}, not a regular file")
        if st.st_size > limit:
            raise Unsafe("too large", f"{_size(st.st_size)}, more than the {_size(limit)} such a file can be")

    refuse(os.lstat(path))
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise Unsafe("a symbolic link", "a symbolic link, not a regular file") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        refuse(os.fstat(fd))
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise Unsafe("too large", f"more than the {_size(limit)} such a file can be")
    return data


def _open_dir(path: Path) -> int:
    """A descriptor of the folder ``path`` itself, never of a link's target (OSError otherwise)."""
    return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)


def remove_stale_temps(folder: str | os.PathLike[str], finals: Callable[[str], bool],
                       age: float = TEMP_AGE) -> list[str]:
    """Remove the temp files :func:`atomic_write` left in ``folder`` for files whose names
    ``finals`` accepts (a kill between the temp file and its rename); the names removed.

    Only regular files named as ``mkstemp`` names the store's temp files, unchanged for
    ``age`` seconds and locked by no writer (a writer holds an exclusive ``flock`` on its
    temp file until it is renamed), are removed; a link is never followed or removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match is None or not finals(match["final"]):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < age:
                continue
            fd = os.open(entry.path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
        except OSError:
            continue
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: a writer holds it
            if os.fstat(fd).st_ino == st.st_ino and os.lstat(entry.path).st_ino == st.st_ino:
                os.unlink(entry.path)
                removed.append(entry.name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


class Store:
    """The records of one sweep folder."""

    def __init__(self, root: str | os.PathLike[str],
                 on_damaged: Callable[[str], None] | None = _warn, content: str = "row",
                 durable: bool = True) -> None:
        self.root = Path(root)
        self.durable = durable  # records reach the disk before they are renamed into place (fsync)
        self.content = content  # the table every record must hold: a sweep's "row", a prediction's "result"
        self.cases = self.root / CASES_DIR
        self.quarantine = self.cases / QUARANTINE_DIR
        self.on_damaged = on_damaged
        self.damaged: list[tuple[str, str]] = []  # (key, reason), in the order found
        self._claims: dict[str, IO[bytes]] = {}
        self._ignored: dict[str, tuple[int, int, int] | None] = {}  # key -> the damaged entry left in place

    def path(self, key: str) -> Path:
        return self.cases / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored record for ``key``; None if absent or damaged (then moved aside)."""
        path = self.path(key)
        try:
            data = read_regular(path)
        except FileNotFoundError:
            return None
        except Unsafe as err:
            return self._damaged(key, "a folder stands where the record should be" if err.kind == "a folder"
                                 else str(err))
        except OSError as err:
            return self._damaged(key, f"cannot be read ({err.strerror or err})")
        try:
            record = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError:
            return self._damaged(key, "not UTF-8 text")
        except json.JSONDecodeError as err:
            return self._damaged(key, f"not JSON ({err.msg} at line {err.lineno})")
        reason = _check(record, key, self.content, sealed=_sealed(data))
        return self._damaged(key, reason) if reason else record

    def _damaged(self, key: str, reason: str) -> None:
        path = self.path(key)
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # another sweep sharing the folder moved it first
            return None
        except OSError:
            st = None
        mark = None if st is None else (st.st_dev, st.st_ino, st.st_mtime_ns)
        if mark is not None and self._ignored.get(key) == mark:
            return None  # reported already, and still in place: nothing new to say
        where = self._set_aside(key, path)
        if where is None:
            return None
        if where.startswith("left"):
            self._ignored[key] = mark
        self.damaged.append((key, reason))
        if self.on_damaged is not None:
            self.on_damaged(f"stored case {path}: {reason}; {where}, the case is computed again")
        return None

    def _set_aside(self, key: str, path: Path) -> str | None:
        """Move the damaged entry at ``path`` into the quarantine; what became of it, or None
        if it was gone already. The quarantine is used only if it is a folder itself (opened
        with ``O_NOFOLLOW``), and the entry is renamed (never followed) into it by descriptor,
        so a link planted as the quarantine, or swapped in meanwhile, moves nothing out."""
        try:
            os.mkdir(self.quarantine)
        except OSError:  # there already (a folder, or what _open_dir refuses), or cannot be made
            pass
        try:
            qfd = _open_dir(self.quarantine)
        except OSError:
            try:
                what = _kind(os.lstat(self.quarantine).st_mode)
            except OSError:
                what = "not usable"
            return _drop(path, f"{self.quarantine} is {what}, not a folder")
        try:
            name, n = path.name, 1
            while True:
                try:
                    os.lstat(name, dir_fd=qfd)
                except FileNotFoundError:
                    break
                n += 1
                name = f"{key}.{n}.json"
            try:
                os.replace(path, name, dst_dir_fd=qfd)
            except FileNotFoundError:
                return None
            except OSError as err:
                return _drop(path, f"cannot be moved: {err.strerror or err}")
            return f"moved to {self.quarantine / name}"
        finally:
            os.close(qfd)

    def put(self, record: Mapping[str, Any]) -> Path:
        """Write one record, with its checksum, atomically: temp file, fsync, rename."""
        key = record["key"]
        self.cases.mkdir(parents=True, exist_ok=True)
        final = self.path(key)
        text = canonical({k: v for k, v in record.items() if k != "checksum"})
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        # The checksum goes in front of the text it hashes (a record is never empty: it
        # has its key), so the record is encoded once.
        _atomic_write(final, f'{{"checksum":"{digest}",{text[1:]}\n', durable=self.durable)
        return final

    def clean_temps(self) -> list[str]:
        """Remove the temp files killed writers left in the cases folder and beside the
        results tables (:func:`remove_stale_temps`); the names removed."""
        removed = remove_stale_temps(self.cases, lambda final: final.endswith(".json"))
        tables = {RESULTS_CSV, RESULTS_JSON, MACHINES_JSON}
        return removed + remove_stale_temps(self.root, tables.__contains__)

    def keys(self) -> list[str]:
        if not self.cases.is_dir():
            return []
        return sorted(p.stem for p in self.cases.glob("*.json"))

    # ----------------------------------------------------------------------------------
    # Claims: which sweep computes which case

    def claim(self, key: str) -> bool:
        """Take the claim on ``key``; False if a live process holds it."""
        if key in self._claims:
            return True
        if fcntl is None:  # pragma: no cover - not POSIX
            self._claims[key] = None  # type: ignore[assignment]
            return True
        self.cases.mkdir(parents=True, exist_ok=True)
        path = self.cases / f"{key}.claim"
        for _ in range(100):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o666)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EOPNOTSUPP):
                    raise
                self._clear(path)
                continue
            st = os.fstat(fd)
            # A FIFO opened read-write does not block; a hard link would let the pid below
            # overwrite another name's file: both are removed (the name only) and replaced.
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                os.close(fd)
                self._clear(path)
                continue
            handle = os.fdopen(fd, "r+b", buffering=0)  # held open while the claim lasts
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False
            # The holder before us may have unlinked the file between our open and lock:
            # then we locked a file nobody else sees, and must lock the one at the path.
            try:
                ours, there = os.fstat(fd), os.lstat(path)
                same = (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._claims[key] = handle
                return True
            handle.close()
        raise OSError(errno.EAGAIN, f"cannot take the claim {path}: something keeps replacing it")

    def _clear(self, path: Path) -> None:
        """Remove what stands at a claim's path and is no claim file: a link (never followed),
        a FIFO, a socket, a device node, an empty folder; one warning line."""
        from ..errors import InputError

        try:
            st = os.lstat(path)
            what = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} names"
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as err:
            raise InputError(f"{what} stands where a sweep's claim file goes and cannot be removed "
                             f"({err.strerror or err}); remove it", file=str(path)) from None
        if self.on_damaged is not None:
            self.on_damaged(f"{path}: {what} stood where a claim file goes; removed")

    def release(self, key: str) -> None:
        """Give up the claim on ``key`` (after its record is written, or on the way out)."""
        handle = self._claims.pop(key, None)
        if handle is None:
            return
        try:
            os.unlink(self.cases / f"{key}.claim")
        except FileNotFoundError:
            pass
        handle.close()  # closing drops the lock

    def release_all(self) -> None:
        for key in list(self._claims):
            self.release(key)

    def claimed(self) -> list[str]:
        return sorted(self._claims)


def _drop(path: Path, why: str) -> str:
    """What becomes of a damaged entry that cannot be quarantined: a folder (no record can be
    renamed over one) is removed, never through a link; anything else is left for the next
    record to replace, and ignored until then."""
    try:
        folder = stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        folder = False
    if folder:
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return f"removed ({why})"
    return f"left in place ({why})"


def checksum(record: Mapping[str, Any], encode: Callable[[Any], str] | None = None) -> str:
    """SHA-256 of a record's :func:`canonical` JSON (or ``encode``'s), its own ``checksum``
    field left out. Records written before the compact form hashed :func:`dumps`'s text."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256((encode or canonical)(body).encode("utf-8")).hexdigest()


_SEAL = b'{"checksum":"'
_SEAL_END = len(_SEAL) + 64 + 2  # the digest's 64 hex digits, then '",'


def _sealed(data: bytes) -> bool:
    """Whether ``data`` is a record exactly as :meth:`Store.put` writes it: its checksum in
    front of the canonical text it hashes. Then the bytes themselves are checked, without
    encoding the parsed record again (three passes of the json module over a record of
    tens of kilobytes, for every case a sweep reads back); any other form of a valid record
    (the earlier indented one, a NaN literal typed where null stood) is checked by
    re-encoding it."""
    if not data.startswith(_SEAL) or data[_SEAL_END - 2:_SEAL_END] != b'",':
        return False
    body = b"{" + data[_SEAL_END:].rstrip(b"\n")
    return hashlib.sha256(body).hexdigest().encode("ascii") == data[len(_SEAL):_SEAL_END - 2]


def _check(record: Any, key: str, content: str = "row", sealed: bool = False) -> str | None:
    """Why ``record`` is not a usable record for ``key`` holding a ``content`` table, or None;
    ``sealed``: its bytes already matched its checksum (:func:`_sealed`)."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a record"
    if record.get("key") != key:
        return f"holds key {record.get('key')!r}, not its file name's"
    if not isinstance(record.get(content), dict):
        return (f"no '{content}' table" if content not in record
                else f"'{content}' is {type(record[content]).__name__}, not a table")
    if record.get("status") not in ("ok", "error"):
        return f"status {record.get('status')!r} is neither 'ok' nor 'error'"
    if "checksum" not in record:
        return "no checksum (written by hand or by an older memwall)"
    if sealed:
        return None
    try:
        if record["checksum"] == checksum(record) or record["checksum"] == checksum(record, dumps):
            return None
    except (TypeError, ValueError) as err:
        return f"cannot be re-encoded ({err})"
    return "its checksum does not match its content (edited after it was written)"


def _file_mode() -> int:
    """0666 less the umask: what ``open`` would give, where mkstemp gives 0600."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no other way to read it; set back at once
    os.umask(mask)
    return 0o666 & ~mask


def _atomic_write(final: Path, text: str | bytes, durable: bool = True) -> None:
    # mkstemp creates the temp file (O_EXCL: never through a link) and the rename replaces
    # whatever stands at ``final`` (a planted link included) rather than writing through it.
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until renamed: remove_stale_temps leaves it
        if hasattr(os, "fchmod"):
            os.fchmod(fd, _file_mode())
        binary = isinstance(text, bytes)
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as handle:
            handle.write(text)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
            os.replace(tmp, final)
    except BaseException:
        # A kill between mkstemp and replace leaves only a dot-file the glob skips, and the
        # next run removes (Store.clean_temps).
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def columns_of(rows: Sequence[Mapping[str, Any]], leading: Sequence[str]) -> list[str]:
    """``leading`` first, then every other key in order of first appearance."""
    cols = list(leading)
    seen = set(cols)
    for row in rows:
        for name in row:
            if name not in seen:
                seen.add(name)
                cols.append(name)
    return cols


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        # repr is the shortest text that reads back to the same double: bit for bit.
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def write_tables(root: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]],
                 leading: Sequence[str]) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``results.json`` (atomically) from rows in their given order."""
    root = Path(root)
    cols = columns_of(rows, leading)
    csv_path = write_csv(root / RESULTS_CSV, rows, cols)
    json_path = root / RESULTS_JSON
    full = [{c: row.get(c) for c in cols} for row in rows]
    _atomic_write(json_path, dumps({"columns": cols, "rows": full}))
    return csv_path, json_path


def write_csv(path: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]],
              leading: Sequence[str] = ()) -> Path:
    """Write ``rows`` as CSV (columns: ``leading``, then first appearance), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = columns_of(rows, leading)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(cols)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in cols])
    _atomic_write(path, buf.getvalue())
    return path


def atomic_write(path: str | os.PathLike[str], text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` so that a reader sees the old file or the new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, text)


def read_rows(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a sweep folder's ``results.json``; InputError if it is not one a sweep wrote."""
    from ..errors import InputError

    path = Path(root) / RESULTS_JSON
    try:
        data = json.loads(read_regular(path, MAX_TABLE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"no {RESULTS_JSON}; run `memwall sweep --out {root}` first", file=str(root)) from None
    except Unsafe as err:
        if err.kind == "a folder":
            raise InputError("a folder, not the sweep's results table", file=str(path)) from None
        raise InputError(f"{err}: not a results table a sweep wrote", file=str(path)) from None
    except OSError as err:
        raise InputError(f"cannot be read: {err.strerror or err}", file=str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text: not a results table a sweep wrote", file=str(path)) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON ({err.msg}); damaged or truncated: run the sweep again",
                         file=str(path), line=err.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise InputError("expected a table {\"columns\": [...], \"rows\": [...]} as `memwall sweep` writes",
                         file=str(path), field="rows")
    rows = data["rows"]
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"row {i} is a JSON {type(row).__name__}, not a table", file=str(path),
                             field=f"rows[{i}]")
        problem = row_problem(row)
        if problem is not None:
            name, what = problem
            raise InputError(f"row {i}: '{name}' is {what}", file=str(path), field=f"rows[{i}].{name}")
    return list(rows)


class ReplayStore:
    """Replays kept in a sweep folder (``DIR/replays/cases/<key>.json``, self-checking like
    case records) under :func:`memwall.simulation.replay.replay_key`, so that cases differing only
    in what the engine never sees replay once, across workers and reruns.

    A cache, not a record: a replay that cannot be read is recomputed, and one that
    cannot be written (a worker on another machine, a full disk) is simply not kept. So it
    is written without waiting for the disk (no fsync): after a power cut a torn replay
    fails its checksum and is recomputed. ``keep``, if given, names the only keys worth
    writing (the replays that more than one case of the sweep shares); None keeps every
    one.
    """

    def __init__(self, root: str | os.PathLike[str], keep: frozenset[str] | None = None) -> None:
        self.store = Store(Path(root) / REPLAYS_DIR, on_damaged=None, content="replay", durable=False)
        self.keep = keep

    def get(self, key: str) -> list[Any] | None:
        from ..engine import HierarchyCounters

        try:
            record = self.store.get(key)
            return None if record is None else [HierarchyCounters.from_dict(c) for c in record["replay"]["kernels"]]
        except (OSError, KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, counters: Sequence[Any]) -> None:
        if self.keep is not None and key not in self.keep:
            return
        try:
            self.store.put({"key": key, "status": "ok", "replay": {"kernels": [c.as_dict() for c in counters]}})
        except OSError:
            pass
