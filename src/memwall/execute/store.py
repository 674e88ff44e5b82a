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
and treated as missing, so the case is computed again.

Claims. Two sweeps may share a folder: before running a case a sweep takes its claim,
an exclusive ``flock`` on ``DIR/cases/<key>.claim``, held until the record is written.
The kernel drops the lock when its holder dies, however it dies, so a claim of a dead
process is free again at once. Where ``fcntl`` is missing (Windows), claims always
succeed and two sweeps sharing a folder may compute a case twice.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import shutil
import sys
import tempfile
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


def _warn(message: str) -> None:
    print(f"memwall: warning: {message}", file=sys.stderr)


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

    def path(self, key: str) -> Path:
        return self.cases / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored record for ``key``; None if absent or damaged (then moved aside)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return self._damaged(key, "a folder stands where the record should be")
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
        self.quarantine.mkdir(parents=True, exist_ok=True)
        target = self.quarantine / path.name
        n = 1
        while target.exists():
            n += 1
            target = self.quarantine / f"{key}.{n}.json"
        try:
            os.replace(path, target)
            where = f"moved to {target}"
        except FileNotFoundError:  # another sweep sharing the folder moved it first
            return None
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            where = "removed"
        self.damaged.append((key, reason))
        if self.on_damaged is not None:
            self.on_damaged(f"stored case {path}: {reason}; {where}, the case is computed again")
        return None

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
        while True:
            handle = open(path, "ab+")  # noqa: SIM115 - held open while the claim lasts
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False
            # The holder before us may have unlinked the file between our open and lock:
            # then we locked a file nobody else sees, and must lock the one at the path.
            try:
                same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                handle.truncate(0)
                handle.write(f"{os.getpid()}\n".encode())
                handle.flush()
                self._claims[key] = handle
                return True
            handle.close()

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


def _atomic_write(final: Path, text: str, durable: bool = True) -> None:
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        # A kill between mkstemp and replace leaves only a dot-file the glob skips.
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


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, text)


def read_rows(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a sweep folder's ``results.json``; InputError if it is not one a sweep wrote."""
    from ..errors import InputError

    path = Path(root) / RESULTS_JSON
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"no {RESULTS_JSON}; run `memwall sweep --out {root}` first", file=str(root)) from None
    except IsADirectoryError:
        raise InputError("a folder, not the sweep's results table", file=str(path)) from None
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
