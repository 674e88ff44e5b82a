"""Published measurements of training speed, as data: the strict loader of era_data/measurements.

Owns: :class:`Measurement` (one measured speed: the machine, the workload, the metric, the
value, where it was published and how far to trust it), :func:`load_measurement_file` and
:func:`load_measurements` (a folder of ``*.toml`` files, or the shipped set), and the
vocabularies they check against (``RELIABILITIES``, ``CHECKS``; the metrics, ``METRICS`` and
their units, are declared in :mod:`memwall.vocabulary`, so that a figure names them without
loading the model).

The files are the judge of the simulator, so they are read as strictly as the machine
profiles: an unknown key is named, a wrong type or a bad enum value is refused with the
file, the line, the field and the reason (every problem of a file at once, through the one
walker of :mod:`memwall.schema`), a TOML syntax error with its line, and an id that appears
twice (in one file or across files) is refused. The fields are declared once
(:data:`MEASUREMENT`); the table in ``era_data/measurements/README.md`` is generated from
that declaration.

This module knows nothing of the simulator: turning a measurement into a :class:`Case`
and comparing the prediction with it is :mod:`memwall.study.validation`'s job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import field, make_dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..frameworks import framework_ids
from ..options import GEMM, NETWORK, OPTION_FIELDS, OPTIONS, inapplicable
from ..options import names as option_names
from ..schema import Field, Problems, Table, read_toml, walk
from ..vocabulary import (
    GENERATE,
    METRIC_UNITS,
    METRICS,
    SERVING_PHASES,
    parse_checkpoint,
)
from .identity import is_path

RELIABILITIES = ("high", "medium", "low")
# The software that ran a measured step: a shipped framework file's id or hand-written (the
# case option `framework` declares the key; a vendor library called alone is `library`).
FRAMEWORKS = framework_ids()
# How a measurement judges the prediction:
#   point                     - the prediction should equal the measurement (within the band);
#   lower-bound-on-prediction - the measurement is a floor: the prediction should be >= it
#                               (e.g. a multi-GPU run's per-device speed: a single-device
#                               model with no communication should predict at least this);
#   upper-bound-on-prediction - the measurement is a ceiling: the prediction should be <= it.
CHECKS = ("point", "lower-bound-on-prediction", "upper-bound-on-prediction")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VALUE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<prefix>[kMGTPE]?)(?P<unit>\S+)\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_SUBSECOND = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# Metrics whose unit takes a sub-unit prefix (the decimal prefixes above are k and up).
_SUBUNITS = {"seconds": _SUBSECOND, "seconds_per_token": _SUBSECOND,
             "joules": {"mJ": 1e-3, "uJ": 1e-6, "µJ": 1e-6}, "watts": {"mW": 1e-3}}


def _ident(value: str, context: dict[str, Any]) -> str:
    if not _ID.match(value):
        raise InputError(f"id {value!r} may hold only letters, digits, '.', '_' and '-'")
    return value


def _checkpoint(value: str, context: dict[str, Any]) -> str:
    return parse_checkpoint(value).text


def _value(value: Any, context: dict[str, Any]) -> float:
    metric = context.get("metric")
    return _measured(value, metric) if metric else value  # no metric: the file is refused for that


def _gemm(value: Any, context: dict[str, Any]) -> tuple[int, int, int]:
    return _dims(value)


MEASUREMENT = Table("[[measurement]]", (
    Field("id", "text", "unique id across all measurement files (letters, digits, '.', '_', '-')", required=True,
          parse=_ident),
    Field("machine", "text", "machine profile id (memwall machines list)", required=True),
    Field("network", "text", "network preset id (memwall networks list), or a path, relative to this file, to a "
          "network TOML in the `networks/` folder beside the measurement files (it must stay inside the "
          "measurement folder); or give 'gemm'"),
    *OPTION_FIELDS,  # the case options, as memwall.options declares them
    Field("gemm", "any", "a single matrix product C[MxN] = A[MxK] B[KxN], 2 M N K FLOPs (instead of 'network')",
          parse=_gemm, unit="`\"M,N,K\"`"),
    Field("metric", "word", "what 'value' measures (see below)", required=True, choices=tuple(METRICS),
          sets="metric"),
    Field("value", "any", "the measured value, in the metric's unit", required=True, parse=_value,
          unit="positive number, or a string with the unit: `'4.88 TFLOP/s'`, `'900 MCUPS'`, `'0.275 s'`"),
    Field("check", "word", "how the measurement judges the prediction (see below)", choices=CHECKS,
          default="point"),
    Field("year", "int", "year the measurement was published (default: the machine's)", minimum=1940,
          maximum=2100),
    Field("source", "text", "full citation, with page, table or sheet", required=True),
    Field("reliability", "word", "high (primary source, figure read), medium (workload partly assumed, or a "
          "faithful transcription), low (secondary source or an interpretation)", required=True,
          choices=RELIABILITIES),
    Field("notes", "text", "what was measured, what is uncertain, any derivation", required=True),
    Field("explanation", "text", "why memwall's prediction misses this case, where it does (the model's missing "
          "effect, a counting difference)"),
), label="id")
OPTION_NAMES = frozenset(option_names())
MEASUREMENT_KEYS: dict[str, str] = {f.key: f.doc for f in MEASUREMENT.fields}
FILE = Table("measurement file", (
    Field("format_version", "int", "the format this file is written in (1)", minimum=1, maximum=1),
    Field("note", "str", "free text about the file"),
    Field("measurement", "tables", "the measurements", required=True, table=MEASUREMENT),
), doc="A file of `[[measurement]]` tables.")


class _Measured:
    """What a :class:`Measurement` does; its option fields come from memwall.options."""

    gemm: tuple[int, int, int] | None
    network: str | None
    dtype: str | None

    def options(self) -> dict[str, Any]:
        """The case options the file states (those not at their default), in declared order."""
        return {o.name: getattr(self, o.name) for o in OPTIONS if getattr(self, o.name) != o.default}

    @property
    def workload(self) -> str:
        """A short human description: 'nettalk b=1 per-example train' or 'gemm 4096x16x4096 fp16'."""
        if self.gemm is not None:
            m, n, k = self.gemm
            return f"gemm {m}x{n}x{k} {self.dtype}" + (f" out {self.out_dtype}" if self.out_dtype else "")
        given = self.options()
        phase = self.phase
        parts = [str(self.network), f"b={self.batch}"]
        if phase == "train":
            parts.append(self.updates)
        parts.append(phase)
        if self.dtype:
            parts.append(self.dtype)
        shown = ("batch", "updates", "phase", "dtype")
        return " ".join(parts + [f"{k}={v}" for k, v in given.items() if k not in shown])


Measurement = make_dataclass(
    "Measurement",
    [("id", str), ("machine", str),
     ("metric", str),  # one of METRICS
     ("value", float),  # in the metric's SI unit (CUPS, CPS, FLOP/s, s, samples/s)
     ("source", str), ("reliability", str), ("notes", str),
     ("network", "str | None", field(default=None)),
     ("gemm", "tuple[int, int, int] | None", field(default=None)),
     *[(o.name, o.python_type, field(default=o.default)) for o in OPTIONS],  # the case options
     ("check", str, field(default="point")),
     ("year", "int | None", field(default=None)),
     ("explanation", "str | None", field(default=None)),
     ("network_file", "str | None", field(default=None)),  # 'network' given as a path: the file, resolved
     ("file", "str | None", field(default=None)),  # where it was read from
     ("line", "int | None", field(default=None))],  # the line of its id in that file
    bases=(_Measured,),
    frozen=True,
)
Measurement.__module__ = __name__
Measurement.__doc__ = "One published, measured speed of one workload on one machine."


def _measured(raw: Any, metric: str) -> float:
    if isinstance(raw, bool):
        raise InputError(f"must be a number, got {raw!r}")
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        value = _with_unit(raw, metric)
    else:
        raise InputError(f"must be a number or a string with a unit, got {type(raw).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"must be positive and finite, got {raw!r}")
    return value


def _with_unit(raw: str, metric: str) -> float:
    m = _VALUE.match(raw.replace("_", ""))
    units = METRIC_UNITS[metric]
    if not m:
        raise InputError(f"cannot read {raw!r}: expected a number and a unit ({' or '.join(units)})")
    number, prefix, unit = float(m.group("num")), m.group("prefix"), m.group("unit")
    sub = _SUBUNITS.get(metric, {})
    if prefix + unit in sub:
        return number * sub[prefix + unit]
    if unit in units:
        return number * _PREFIX[prefix]
    if prefix + unit in units:  # e.g. 's' has no prefix to strip
        return number
    raise InputError(f"unit {prefix + unit!r} does not fit metric {metric!r}; write {' or '.join(units)} "
                     "with an optional decimal prefix (k, M, G, T, P)")


def parse_value(raw: Any, metric: str) -> float:
    """A measured value: a positive finite number, or a string with the metric's unit."""
    try:
        return _measured(raw, metric)
    except InputError as err:
        raise InputError(err.reason, field="value") from None


def _dims(raw: Any) -> tuple[int, int, int]:
    if isinstance(raw, str):
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise InputError(f"expected 'M,N,K' with three positive integers, got {raw!r}")
        dims = tuple(int(p) for p in parts)
    elif isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        dims = tuple(raw)
    else:
        raise InputError(f"expected 'M,N,K', got {raw!r}")
    if min(dims) <= 0:
        raise InputError(f"M, N and K must be positive, got {raw!r}")
    return dims  # type: ignore[return-value]


def parse_gemm(raw: Any) -> tuple[int, int, int]:
    """``"M,N,K"`` (or a list of three integers) into positive integers."""
    try:
        return _dims(raw)
    except InputError as err:
        raise InputError(err.reason, field="gemm") from None


def _refuse_inapplicable(raw: dict[str, Any], values: dict[str, Any], workload: str, add: Any) -> None:
    """Each case option the file gives that does not apply to its workload or phase (memwall.options)."""
    given = {k: values.get(k) for k in raw if k in OPTION_NAMES}
    for key, why in inapplicable(given, workload):
        add(f"'{key}' {why}", key)


def _check_gemm(raw: dict[str, Any], values: dict[str, Any], add: Any) -> None:
    _refuse_inapplicable(raw, values, GEMM, add)
    if "dtype" not in raw:
        add("a 'gemm' measurement needs 'dtype'", "dtype")
    if values.get("metric", "flops") not in ("flops", "seconds"):
        add(f"a single GEMM is measured in 'flops' or 'seconds', not {values['metric']!r}", "metric")


def _check_step(raw: dict[str, Any], values: dict[str, Any], add: Any) -> None:
    metric, phase = values.get("metric"), values.get("phase")
    if "batch" not in raw:
        add("a 'network' measurement needs 'batch' (examples per step)", "batch")
    if metric == "cups" and phase != "train":
        add("'cups' counts connection updates: it needs phase = 'train'", "metric")
    if metric == "cps" and phase != "forward":
        add("'cps' counts forward connections only: it needs phase = 'forward'", "metric")
    if metric == "seconds_per_token" and phase not in ("decode", GENERATE):
        add("'seconds_per_token' is a decode step's time: it needs phase = 'decode' or 'generate' (the mean "
            "decode step of a request)", "metric")
    if phase == GENERATE:  # a whole request: its prompt and output, not a context
        for key, what in (("prompt", "tokens in each request's prompt"), ("output", "tokens each request generates")):
            if key not in raw:
                add(f"a generate measurement needs '{key}' ({what})", key)
    elif phase in SERVING_PHASES and "context" not in raw:
        add(f"a {phase} measurement needs 'context' (tokens in the cache, or the prompt)", "context")
    _refuse_inapplicable(raw, values, NETWORK, add)
    if values.get("updates") == "per-example" and values.get("batch", 1) != 1:
        # Per-example updates change the weights after every example: a step is one example.
        add(f"per-example updates take batch = 1, got {values['batch']}", "batch")


def _check_workload(raw: dict[str, Any], values: dict[str, Any], problems: Problems, where: str) -> None:
    """Exactly one workload, and the keys and metrics that fit it."""
    def add(reason: str, key: str) -> None:
        problems.add(reason, f"{where}.{key}")

    if ("network" in raw) == ("gemm" in raw):
        add("give exactly one workload: 'network' (with 'batch') or 'gemm' (with 'dtype')",
            "gemm" if "gemm" in raw else "network")
    elif "gemm" in raw:
        _check_gemm(raw, values, add)
    else:
        _check_step(raw, values, add)


def resolve_network(value: str, file: str | Path | None) -> str:
    """A ``network`` path, relative to the measurement file, as an absolute path inside the
    measurement folder tree (the file's own folder and its subfolders); an id unchanged."""
    if not is_path(value):
        return value
    if file is None:
        raise InputError(f"network {value!r} is a path, but the measurement was not read from a file",
                         field="network")
    rel = Path(value)
    if rel.is_absolute() or ".." in rel.parts:
        raise InputError(f"network {value!r} must be a path inside the measurement folder, relative to this file "
                         "(no absolute path, no '..')", file=str(file), field="network")
    root = Path(file).resolve().parent
    path = (root / rel).resolve()
    if not path.is_relative_to(root):  # a link out of the folder
        raise InputError(f"network {value!r} leads outside the measurement folder", file=str(file), field="network")
    if not path.is_file():
        raise InputError(f"network {value!r}: no such file beside the measurements", file=str(file), field="network")
    return str(path)


def _measurements(raw: list[Any], values: list[dict[str, Any]], problems: Problems) -> list[Measurement]:
    """The measurements of a file's checked tables; none if any problem was found."""
    seen: dict[str, int] = {}
    for index, (table, checked) in enumerate(zip(raw, values, strict=True)):
        ident = checked.get("id")
        where = f"measurement[{ident}]" if ident else f"measurement[{index}]"
        _check_workload(table, checked, problems, where)
        if isinstance(checked.get("network"), str) and is_path(checked["network"]):
            try:
                checked["network_file"] = resolve_network(checked["network"], problems.file)
            except InputError as err:
                problems.add(err.reason, f"{where}.network")
        if ident in seen:
            problems.add(f"duplicate id {ident!r} (also measurement {seen[ident]} of this file)", f"{where}.id")
        seen.setdefault(ident, index)
    if problems.errors:
        return []
    fields = Measurement.__dataclass_fields__
    return [Measurement(**{k: v for k, v in checked.items() if k in fields}, file=problems.file,
                        line=problems.line_of(f"measurement[{checked['id']}].id")) for checked in values]


def check_measurement_file(path: str | Path) -> tuple[list[Measurement], list[InputError]]:
    """Every measurement of one file and every problem in it (an empty list: valid)."""
    path = Path(path)
    try:
        data, text = read_toml(path)
    except InputError as err:
        return [], [err]
    problems = Problems(str(path), text)
    values = walk(data, FILE, problems)
    raw = data.get("measurement")
    found = _measurements(raw, values["measurement"], problems) if "measurement" in values else []
    return found, problems.errors


def load_measurement_file(path: str | Path) -> list[Measurement]:
    """Every ``[[measurement]]`` of one file, checked; duplicate ids inside the file refused."""
    found, errors = check_measurement_file(path)
    problems = Problems()
    problems.errors = errors
    problems.raise_first()
    return found


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
