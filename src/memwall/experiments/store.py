"""The sweep's result store: one JSON file per finished case, written atomically.

Owns: the layout of a sweep folder (``DIR/cases/<key>.json``, ``DIR/results.csv``,
``DIR/results.json``), writing one case's record so that a kill at any moment leaves
either the whole file or none of it, reading records back, and rebuilding the results
tables from the records in a fixed order, so the same cases always give the same bytes.

A record is a plain dict: ``key``, ``status`` (``"ok"`` or ``"error"``), ``row`` (the
flat results row) and, for a failed case, ``error`` (the reason). What a key hashes is
the sweep's business (:mod:`memwall.experiments.sweep`); the store only trusts it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CASES_DIR = "cases"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"


class Store:
    """The records of one sweep folder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.cases = self.root / CASES_DIR

    def path(self, key: str) -> Path:
        return self.cases / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored record for ``key``, or None if absent or unreadable."""
        try:
            text = self.path(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            # Only a file written by hand can be torn (ours are renamed into place);
            # treat it as missing so the case is simply run again.
            return None
        return record if isinstance(record, dict) and record.get("key") == key else None

    def put(self, record: Mapping[str, Any]) -> Path:
        """Write one record atomically: temp file in the same folder, fsync, rename."""
        key = record["key"]
        self.cases.mkdir(parents=True, exist_ok=True)
        final = self.path(key)
        _atomic_write(final, dumps(record))
        return final

    def keys(self) -> list[str]:
        if not self.cases.is_dir():
            return []
        return sorted(p.stem for p in self.cases.glob("*.json"))


def dumps(value: Any) -> str:
    """JSON with sorted keys and no NaN literals, so equal values give equal bytes."""
    return json.dumps(_finite(value), sort_keys=True, indent=1, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    # JSON has no NaN or infinity; None is the honest "not a number" in a table.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _atomic_write(final: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
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
    root.mkdir(parents=True, exist_ok=True)
    cols = columns_of(rows, leading)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(cols)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in cols])
    csv_path = root / RESULTS_CSV
    json_path = root / RESULTS_JSON
    _atomic_write(csv_path, buf.getvalue())
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
    """The rows of a sweep folder's ``results.json``."""
    path = Path(root) / RESULTS_JSON
    data = json.loads(path.read_text(encoding="utf-8"))
    return list(data["rows"])

