"""Published measurements of training speed, as data: the strict loader of era_data/measurements.

Owns: :class:`Measurement` (one measured speed: the machine, the workload, the metric, the
value, where it was published and how far to trust it), :func:`load_measurement_file` and
:func:`load_measurements` (a folder of ``*.toml`` files, or the shipped set), and the
vocabularies they check against (``METRICS``, ``RELIABILITIES``, ``CHECKS``).

The files are the judge of the simulator, so they are read as strictly as the machine
profiles: an unknown key is named, a wrong type or a bad enum value is refused with the
file, the field and the reason, a TOML syntax error with its line, and an id that appears
twice (in one file or across files) is refused. The format is documented in
``era_data/measurements/README.md``.

This module knows nothing of the simulator: turning a measurement into a :class:`Case`
and comparing the prediction with it is :mod:`memwall.experiments.validate`'s job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..levels import load_toml
from ..vocabulary import DISPATCH_MODES

METRICS: dict[str, str] = {
    "cups": "connection updates per second (training: forward, backward and weight update)",
    "cps": "connections per second (forward pass only)",
    "flops": "achieved arithmetic rate, FLOP/s",
    "seconds": "seconds per step (a training step, a forward pass or one GEMM)",
    "samples_per_second": "examples (or sequences) per second",
}
# The unit a value written as a string must carry, per metric (with a decimal prefix).
METRIC_UNITS: dict[str, tuple[str, ...]] = {
    "cups": ("CUPS",),
    "cps": ("CPS",),
    "flops": ("FLOP/s", "FLOPS"),
    "seconds": ("s",),
    "samples_per_second": ("samples/s",),
}
RELIABILITIES = ("high", "medium", "low")
# How a measurement judges the prediction:
#   point                     - the prediction should equal the measurement (within the band);
#   lower-bound-on-prediction - the measurement is a floor: the prediction should be >= it
#                               (e.g. a multi-GPU run's per-device speed: a single-device
#                               model with no communication should predict at least this);
#   upper-bound-on-prediction - the measurement is a ceiling: the prediction should be <= it.
CHECKS = ("point", "lower-bound-on-prediction", "upper-bound-on-prediction")
UPDATES = ("per-example", "minibatch")
PHASES = ("train", "forward")
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int16")

MEASUREMENT_KEYS: dict[str, str] = {
    "id": "unique id across all measurement files (letters, digits, '.', '_', '-')",
    "machine": "machine profile id (memwall machines list)",
    "network": "network preset id (memwall networks list); or give 'gemm'",
    "batch": "examples (sequences) per step; needed with 'network'",
    "updates": "'per-example' or 'minibatch' (default 'minibatch')",
    "phase": "'train' (default) or 'forward'",
    "dtype": "arithmetic type: " + ", ".join(DTYPES) + " (needed with 'gemm')",
    "seq_len": "sequence length, for sequence models (default: the preset's)",
    "checkpoint": "activation checkpointing: none | sqrt | every:K | selective (default none)",
    "optimizer": "sgd | momentum | adam (default sgd)",
    "gemm": "a single matrix product 'M,N,K' (instead of 'network')",
    "metric": "one of " + ", ".join(METRICS),
    "value": "the measured value: a positive number in the metric's unit, or a string such as '4.88 TFLOP/s'",
    "check": "one of " + ", ".join(CHECKS) + " (default 'point')",
    "year": "year the measurement was published",
    "source": "full citation, with page, table or sheet",
    "reliability": "one of " + ", ".join(RELIABILITIES),
    "notes": "what was measured, what is uncertain, any derivation",
    "dispatch": "how the measured run issued its kernels: " + ", ".join(DISPATCH_MODES)
    + " (default: the machine profile's own)",
    "explanation": "why memwall's prediction misses this case, where it does (the model's missing effect, a counting difference)",
}
REQUIRED = ("id", "machine", "metric", "value", "source", "reliability", "notes")
TOP_LEVEL_KEYS = ("measurement", "note", "format_version")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VALUE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<prefix>[kMGTPE]?)(?P<unit>\S+)\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_SUBSECOND = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class Measurement:
    """One published, measured speed of one workload on one machine."""

    id: str
    machine: str
    metric: str  # one of METRICS
    value: float  # in the metric's SI unit (CUPS, CPS, FLOP/s, s, samples/s)
    source: str
    reliability: str  # one of RELIABILITIES
    notes: str
    network: str | None = None
    batch: int = 1
    updates: str = "minibatch"
    phase: str = "train"
    dtype: str | None = None
    seq_len: int | None = None
    checkpoint: str = "none"
    optimizer: str = "sgd"
    gemm: tuple[int, int, int] | None = None
    check: str = "point"
    year: int | None = None
    explanation: str | None = None
    dispatch: str | None = None  # eager | graph | compiled; None: the profile's default
    file: str | None = None  # where it was read from
    line: int | None = None  # the line of its id in that file

    @property
    def workload(self) -> str:
        """A short human description: 'nettalk b=1 per-example train' or 'gemm 4096x16x4096 fp16'."""
        if self.gemm is not None:
            m, n, k = self.gemm
            return f"gemm {m}x{n}x{k} {self.dtype}"
        parts = [str(self.network), f"b={self.batch}"]
        if self.phase == "train":
            parts.append(self.updates)
        parts.append(self.phase)
        if self.dtype:
            parts.append(self.dtype)
        if self.seq_len:
            parts.append(f"seq={self.seq_len}")
        if self.checkpoint != "none":
            parts.append(f"ckpt={self.checkpoint}")
        return " ".join(parts)


def parse_value(raw: Any, metric: str) -> float:
    """A measured value: a positive finite number, or a string with the metric's unit."""
    if isinstance(raw, bool):
        raise InputError(f"must be a number, got {raw!r}", field="value")
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        m = _VALUE.match(raw.replace("_", ""))
        units = METRIC_UNITS[metric]
        if not m:
            raise InputError(
                f"cannot read {raw!r}: expected a number and a unit ({' or '.join(units)})", field="value"
            )
        number, prefix, unit = float(m.group("num")), m.group("prefix"), m.group("unit")
        if metric == "seconds" and prefix + unit in _SUBSECOND:
            value = number * _SUBSECOND[prefix + unit]
        elif unit in units:
            value = number * _PREFIX[prefix]
        elif prefix + unit in units:  # e.g. 's' has no prefix to strip
            value = number
        else:
            raise InputError(
                f"unit {prefix + unit!r} does not fit metric {metric!r}; write {' or '.join(units)} "
                "with an optional decimal prefix (k, M, G, T, P)",
                field="value",
            )
    else:
        raise InputError(f"must be a number or a string with a unit, got {type(raw).__name__}", field="value")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"must be positive and finite, got {raw!r}", field="value")
    return value


def parse_gemm(raw: Any) -> tuple[int, int, int]:
    """``"M,N,K"`` (or a list of three integers) into positive integers."""
    if isinstance(raw, str):
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise InputError(f"expected 'M,N,K' with three positive integers, got {raw!r}", field="gemm")
        dims = tuple(int(p) for p in parts)
    elif isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        dims = tuple(raw)
    else:
        raise InputError(f"expected 'M,N,K', got {raw!r}", field="gemm")
    if min(dims) <= 0:
        raise InputError(f"M, N and K must be positive, got {raw!r}", field="gemm")
    return dims  # type: ignore[return-value]


def _string(table: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    if key not in table:
        if required:
            raise InputError(f"missing required field '{key}' ({MEASUREMENT_KEYS[key]})", field=key)
        return None
    value = table[key]
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__} {value!r}", field=key)
    if not value.strip():
        raise InputError("must not be empty", field=key)
    return value


def _enum(table: dict[str, Any], key: str, allowed: Sequence[str], default: str | None) -> str | None:
    value = _string(table, key, required=default is None and key in REQUIRED)
    if value is None:
        return default
    if value not in allowed:
        raise InputError(f"unknown value {value!r}; one of {', '.join(allowed)}", field=key)
    return value


def _int(table: dict[str, Any], key: str, *, minimum: int = 1) -> int | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"must be an integer, got {type(value).__name__} {value!r}", field=key)
    if value < minimum:
        raise InputError(f"must be at least {minimum}, got {value}", field=key)
    return value


def parse_measurement(table: Any) -> Measurement:
    """Check one ``[[measurement]]`` table; errors name the field (file and line are added by the caller)."""
    if not isinstance(table, dict):
        raise InputError("each [[measurement]] must be a table")
    unknown = sorted(set(table) - set(MEASUREMENT_KEYS))
    if unknown:
        raise InputError(
            f"unknown key(s) {', '.join(unknown)}; a measurement takes {', '.join(MEASUREMENT_KEYS)}",
            field=unknown[0],
        )
    for key in REQUIRED:
        if key not in table:
            raise InputError(f"missing required field '{key}' ({MEASUREMENT_KEYS[key]})", field=key)
    ident = _string(table, "id", required=True)
    assert ident is not None
    if not _ID.match(ident):
        raise InputError(f"id {ident!r} may hold only letters, digits, '.', '_' and '-'", field="id")
    machine = _string(table, "machine", required=True)
    metric = _enum(table, "metric", tuple(METRICS), None)
    reliability = _enum(table, "reliability", RELIABILITIES, None)
    check = _enum(table, "check", CHECKS, "point")
    source = _string(table, "source", required=True)
    notes = _string(table, "notes", required=True)
    explanation = _string(table, "explanation")
    dispatch = _enum(table, "dispatch", DISPATCH_MODES, "") or None
    assert metric is not None and machine and source and notes and reliability and check
    value = parse_value(table["value"], metric)
    year = _int(table, "year", minimum=1940)
    dtype = _enum(table, "dtype", DTYPES, "") or None

    network = _string(table, "network")
    has_gemm = "gemm" in table
    if (network is None) == (not has_gemm):
        raise InputError(
            "give exactly one workload: 'network' (with 'batch') or 'gemm' (with 'dtype')",
            field="gemm" if has_gemm else "network",
        )
    if has_gemm:
        gemm = parse_gemm(table["gemm"])
        for key in ("batch", "updates", "phase", "seq_len", "checkpoint", "optimizer"):
            if key in table:
                raise InputError(f"'{key}' does not apply to a single 'gemm'", field=key)
        if dtype is None:
            raise InputError("a 'gemm' measurement needs 'dtype'", field="dtype")
        if metric not in ("flops", "seconds"):
            raise InputError(f"a single GEMM is measured in 'flops' or 'seconds', not {metric!r}", field="metric")
        return Measurement(
            id=ident, machine=machine, metric=metric, value=value, source=source,
            reliability=reliability, notes=notes, gemm=gemm, dtype=dtype, check=check,
            year=year, explanation=explanation, dispatch=dispatch,
        )

    batch = _int(table, "batch")
    if batch is None:
        raise InputError("a 'network' measurement needs 'batch' (examples per step)", field="batch")
    updates = _enum(table, "updates", UPDATES, "minibatch")
    phase = _enum(table, "phase", PHASES, "train")
    assert updates and phase
    if metric == "cups" and phase != "train":
        raise InputError("'cups' counts connection updates: it needs phase = 'train'", field="metric")
    if metric == "cps" and phase != "forward":
        raise InputError("'cps' counts forward connections only: it needs phase = 'forward'", field="metric")
    if updates == "per-example" and batch != 1:
        # Per-example updates change the weights after every example: a step is one example.
        raise InputError(f"per-example updates take batch = 1, got {batch}", field="batch")
    checkpoint = _string(table, "checkpoint") or "none"
    if not re.fullmatch(r"none|sqrt|selective|every:[1-9]\d*", checkpoint):
        raise InputError(f"unknown checkpointing {checkpoint!r}; none, sqrt, every:K or selective", field="checkpoint")
    optimizer = _enum(table, "optimizer", ("sgd", "momentum", "adam"), "sgd")
    assert optimizer
    return Measurement(
        id=ident, machine=machine, metric=metric, value=value, source=source,
        reliability=reliability, notes=notes, network=network, batch=batch, updates=updates,
        phase=phase, dtype=dtype, seq_len=_int(table, "seq_len"), checkpoint=checkpoint,
        optimizer=optimizer, check=check, year=year, explanation=explanation, dispatch=dispatch,
    )


def _line_of_id(text: str, ident: Any) -> int | None:
    """The line where ``id = "<ident>"`` is written, so an error points at its table."""
    if not isinstance(ident, str):
        return None
    pattern = re.compile(r"^\s*id\s*=\s*([\"'])" + re.escape(ident) + r"\1", re.MULTILINE)
    m = pattern.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _line_of_table(text: str, index: int) -> int | None:
    """The line of the index-th ``[[measurement]]`` header (0-based)."""
    headers = [m.start() for m in re.finditer(r"^\s*\[\[\s*measurement\s*\]\]", text, re.MULTILINE)]
    if index < len(headers):
        return text.count("\n", 0, headers[index]) + 1
    return None


def load_measurement_file(path: str | Path) -> list[Measurement]:
    """Every ``[[measurement]]`` of one file, checked; duplicate ids inside the file refused."""
    path = Path(path)
    data = load_toml(path)
    text = path.read_text(encoding="utf-8")
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise InputError(
            f"unknown top-level key(s) {', '.join(unknown)}; expected [[measurement]] tables",
            file=str(path), field=unknown[0],
        )
    tables = data.get("measurement")
    if not isinstance(tables, list) or not tables:
        raise InputError("needs at least one [[measurement]] table", file=str(path), field="measurement")
    out: list[Measurement] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(tables):
        ident = table.get("id") if isinstance(table, dict) else None
        line = _line_of_id(text, ident) or _line_of_table(text, index)
        label = f"measurement[{ident}]" if isinstance(ident, str) and ident else f"measurement[{index}]"
        try:
            m = parse_measurement(table)
        except InputError as err:
            raise err.within(file=str(path), field_prefix=label, line=line) from None
        if m.id in seen:
            raise InputError(
                f"duplicate id {m.id!r} (also measurement {seen[m.id]} of this file)",
                file=str(path), line=line, field=f"{label}.id",
            )
        seen[m.id] = index
        out.append(_placed(m, str(path), line))
    return out


def _placed(m: Measurement, file: str, line: int | None) -> Measurement:
    from dataclasses import replace

    return replace(m, file=file, line=line)


def measurement_files(folder: str | Path | None = None) -> list[Path]:
    """The ``*.toml`` files of a folder (the shipped set when None), in name order."""
    from ..data import data_files, toml_files

    if folder is None:
        return data_files("measurements")
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        raise InputError("no such folder", file=str(folder))
    return toml_files(folder)


def load_measurements(source: str | Path | Iterable[str | Path] | None = None) -> list[Measurement]:
    """All measurements of a folder, a file, a list of files, or the shipped set (None).

    Ids must be unique across every file read: a repeated id is refused, naming both files.
    """
    if source is None or isinstance(source, str | Path):
        files = measurement_files(source)
    else:
        files = [Path(p) for p in source]
    out: list[Measurement] = []
    where: dict[str, str] = {}
    for path in files:
        for m in load_measurement_file(path):
            if m.id in where:
                raise InputError(
                    f"duplicate id {m.id!r}: already defined in {where[m.id]}",
                    file=str(path), line=m.line, field=f"measurement[{m.id}].id",
                )
            where[m.id] = str(path)
            out.append(m)
    return out
