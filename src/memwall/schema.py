"""One declaration per data file, and one walker that checks a parsed TOML table against it.

Owns: :class:`Field` and :class:`Table` (what a key of a data file is: its type, unit
parser, required or default, allowed values, numeric range and description),
:func:`walk` (checks a table against its declaration and collects *every* problem),
:class:`Problems` (the problems and warnings of one file, each placed at the line of its
key), :func:`key_lines` (where each key is written: ``tomllib`` gives no lines for
values), :func:`read_toml`, a declaration as a Markdown table (:func:`markdown`; the
docs' generated blocks are :mod:`memwall.schema_docs`'s, which imports the loaders), a
small TOML writer driven by a declaration (:func:`dumps`), and :data:`SCHEMA_VERSION`,
the version of every JSON document the CLI prints. It imports no loader: they import it.

The declarations themselves live beside the objects they build: the machine profile in
:mod:`memwall.profiles`, the ``[[level]]`` table and the hierarchy file in
:mod:`memwall.levels`, network presets in :mod:`memwall.networks`, measurements in
:mod:`memwall.study.measurements`. Adding a field to a file is one ``Field(...)``
line there, plus the code that uses it.

Why hand-written rather than pydantic/msgspec/cattrs: the files need TOML line numbers,
did-you-mean on unknown keys, figures that may carry provenance inline, unit strings
parsed against a clock read earlier in the same file, and fields that apply only to one
value of a sibling (``timing.model``). Each library would need most of this written
around it, and its messages rewritten to be as precise as these.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError, real_first
from .units import SMALLEST

# Version of the JSON documents the CLI prints (``"schema_version"`` in each). Raise it
# when a key is renamed or removed or changes meaning; adding a key keeps it.
SCHEMA_VERSION = 1

TYPES = ("text", "str", "int", "number", "bool", "word", "any", "ints", "list", "mapping", "table", "tables")
_BAD = object()  # a value that failed its check (its problem is recorded)


@dataclass(frozen=True)
class Field:
    """One key of a data file.

    ``type`` is one of :data:`TYPES`: ``text`` a non-empty string, ``str`` any string,
    ``int``/``number``/``bool``, ``word`` one of ``choices``, ``any`` (a unit string or a
    number, read by ``parse``), ``ints`` a list of positive integers, ``list``,
    ``mapping`` (string -> string), ``table`` (a sub-table declared by ``table``) and
    ``tables`` (an array of them).
    """

    key: str
    type: str
    doc: str
    required: bool = False
    default: Any = None  # put in the result when the key is absent (None: left out)
    default_doc: str = ""  # a default computed by the loader, for the docs
    choices: tuple[str, ...] = ()
    minimum: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    maximum: float | None = None  # inclusive
    parse: Callable[[Any, dict[str, Any]], Any] | None = None  # (value, context) -> value in SI units
    unit: str = ""  # how the value is written, for the docs ("a frequency: '80 MHz'")
    figure: str = ""  # "" | "optional" | "required": may / must carry its provenance
    when: tuple[str, tuple[str, ...]] | None = None  # (sibling key, values this field applies to)
    noun: str = ""  # names the field in "unknown <noun> 'x'"
    sets: str = ""  # a context key the parsed value is stored under (e.g. the clock)
    table: Table | None = None  # the declaration of a table / tables field

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"field {self.key!r}: unknown type {self.type!r}")
        if (self.table is None) == (self.type in ("table", "tables")):
            raise ValueError(f"field {self.key!r}: a table field, and only it, declares its table")


@dataclass(frozen=True)
class Table:
    """The fields of one table, in the order they are read (the order results keep)."""

    title: str
    fields: tuple[Field, ...]
    doc: str = ""
    label: str = ""  # in an array of tables, the key whose value names an element ('name', 'id')
    flat: bool = False  # problems are reported at the table's own field (a figure's parts)

    def __post_init__(self) -> None:
        keys = [f.key for f in self.fields]
        if len(keys) != len(set(keys)):
            raise ValueError(f"table {self.title!r} declares a key twice")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f.key for f in self.fields)

    def field(self, key: str) -> Field:
        return next(f for f in self.fields if f.key == key)

    def field_at(self, keys: Sequence[str]) -> Field | None:
        """The field a dotted path names (``compute.achievable.bf16``; an array of tables
        takes its element's name next, as ``level.L2.latency``), or None if undeclared."""
        table: Table | None = self
        found = None
        names = iter(keys)
        for key in names:
            if table is None or key not in table.keys:
                return None
            found = table.field(key)
            table = found.table
            if found.type == "tables":
                next(names, None)
        return found


@dataclass(frozen=True)
class Figure:
    """A figure with where it came from."""

    value: Any
    source: str | None = None  # citation, URL, or a key of the file's [sources] table
    status: str | None = None  # one of FIGURE_STATUSES
    derivation: str | None = None  # how it was computed, where derived
    note: str | None = None


FIGURE_STATUSES = ("verified", "secondary", "estimate", "announced", "measured")
FIGURE = Table("figure", (
    Field("value", "any", "the figure itself", required=True),
    Field("source", "str", "a citation, a URL, or a key of [sources]"),
    Field("status", "word", "how far to trust it", choices=FIGURE_STATUSES, noun="status"),
    Field("derivation", "str", "how it was computed (required for an estimate)"),
    Field("note", "str", "free text"),
), flat=True)


def check_provenance(problems: Problems, sources: Mapping[str, str]) -> None:
    """Every figure of a file names its source (a citation, a URL, or a key of its
    ``[sources]``) and its status; an estimate says how it was derived."""
    for key, fig in problems.provenance.items():
        if not fig.source:
            problems.add("a figure needs 'source' (a citation, URL, or a key of [sources])", key)
        elif fig.source not in sources and " " not in fig.source and "://" not in fig.source:
            close = difflib.get_close_matches(fig.source, list(sources), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.add(f"source {fig.source!r} is not a key of [sources]{hint}", key)
        if not fig.status:
            problems.add(f"a figure needs 'status' ({', '.join(FIGURE_STATUSES)})", key)
        if fig.status == "estimate" and not fig.derivation:
            problems.add("an estimate needs its 'derivation'", key)


# ---------------------------------------------------------------------------------
# Where keys are written


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*([A-Za-z0-9_\-]+|"[^"]*"|'[^']*')\s*=""")


def _unquote(name: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in name.split("."))


def key_lines(text: str) -> dict[str, int]:
    """Line of every table header and ``key =`` in TOML source, by dotted path.

    Arrays of tables are indexed: the second ``[[level]]``'s ``size`` is ``level[1].size``.
    Lines inside multi-line strings are skipped. Best effort: a path it cannot place is
    simply absent.
    """
    lines: dict[str, int] = {}
    counts: dict[str, int] = {}
    prefix = ""
    in_string = False
    for number, line in enumerate(text.splitlines(), 1):
        quotes = line.count('"""') + line.count("'''")
        if in_string:
            in_string = quotes % 2 == 0
            continue
        header = _HEADER.match(line)
        if header:
            prefix = _header_path(_unquote(header.group(2)), header.group(1) == "[[", counts)
            lines.setdefault(prefix, number)
        else:
            key = _KEY.match(line)
            if key:
                lines.setdefault(_join(prefix, _unquote(key.group(1))), number)
        in_string = in_string != (quotes % 2 == 1)
    return lines


def _header_path(name: str, array: bool, counts: dict[str, int]) -> str:
    """The indexed path of a header: enclosing parts that are arrays take their current index."""
    parts = name.split(".")
    path = ""
    for part in parts[:-1]:
        path = _join(path, part)
        if path in counts:
            path = f"{path}[{counts[path] - 1}]"
    path = _join(path, parts[-1])
    if array:
        counts[path] = counts.get(path, 0) + 1
        path = f"{path}[{counts[path] - 1}]"
    return path


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _parent(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rindex("[")]
    return path.rpartition(".")[0]


# ---------------------------------------------------------------------------------
# Problems of one file


class Problems:
    """Every problem (and warning) of one file, each with the line of its key."""

    def __init__(self, file: str | None = None, text: str | None = None) -> None:
        self.file = file
        self.errors: list[InputError] = []
        self.warnings: list[InputError] = []
        self.provenance: dict[str, Figure] = {}
        self._lines = key_lines(text) if text else {}
        self._alias: dict[str, str] = {}

    def index(self, text: str) -> None:
        """Place problems at the lines of ``text`` (the file's source)."""
        self._lines = key_lines(text)

    def alias(self, shown: str, indexed: str) -> None:
        """``shown`` (``level[L1]``) is written at ``indexed`` (``level[0]``) in the source."""
        self._alias.setdefault(shown, indexed)

    def line_of(self, path: str | None) -> int | None:
        if not path:
            return None
        for shown, indexed in self._alias.items():
            if path == shown or path.startswith((shown + ".", shown + "[")):
                path = indexed + path[len(shown):]
                break
        while path:
            if path in self._lines:
                return self._lines[path]
            path = _parent(path)
        return None

    def add(self, reason: str, field: str | None = None, *, warning: bool = False) -> None:
        err = InputError(reason, file=self.file, line=self.line_of(field), field=field)
        (self.warnings if warning else self.errors).append(err)

    def take(self, err: InputError, prefix: str | None = None) -> None:
        """An error a parser raised, placed under ``prefix`` (its own field, if any, appended)."""
        field = prefix
        if err.field:
            field = (prefix + err.field if err.field.startswith("[") else _join(prefix, err.field)) if prefix \
                else err.field
        line = err.line if err.line is not None else self.line_of(field)
        self.errors.append(type(err)(err.reason, file=err.file or self.file, line=line, field=field))

    def raise_first(self, hint: str = "") -> None:
        """Raise the first problem, saying how many more there are."""
        if not self.errors:
            return
        first = real_first(self.errors)[0]
        more = f" (and {len(self.errors) - 1} more{hint})" if len(self.errors) > 1 else ""
        raise InputError(first.reason + more, file=first.file, line=first.line, field=first.field)


def read_toml(path: str | Path) -> tuple[dict[str, Any], str]:
    """A TOML file's table and its text; a syntax error names the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read: {err}", file=str(path)) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as err:
        line = getattr(err, "lineno", None)
        if line is None:
            m = re.search(r"line (\d+)", str(err))
            line = int(m.group(1)) if m else None
        raise InputError(f"TOML syntax error: {err}", file=str(path), line=line) from None


# ---------------------------------------------------------------------------------
# The walker


def walk(raw: Mapping[str, Any], table: Table, problems: Problems, path: str = "",
         context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values of ``raw`` checked against ``table``, in declaration order.

    Every problem goes to ``problems`` (the walk never stops at the first); a key whose
    value is refused is left out of the result. Figures' provenance goes to
    ``problems.provenance`` by field path. ``context`` carries values other fields'
    parsers need (``clock_hz``) and ``provenance`` (True: figures marked required must
    carry it).
    """
    context = {} if context is None else context
    out: dict[str, Any] = {}
    _refuse_unknown(raw, table, problems, path)
    for f in table.fields:
        where = path if table.flat else _join(path, f.key)
        if not _applies(f, raw, out, table, problems, where):
            continue
        if f.key in raw:
            value = _value(f, raw[f.key], problems, where, context)
            if value is not _BAD:
                out[f.key] = value
                if f.sets:
                    context[f.sets] = value
        elif f.required:
            problems.add(_missing(f, out, table, where), where)
        elif f.default is not None:
            out[f.key] = f.default
    return out


def _refuse_unknown(raw: Mapping[str, Any], table: Table, problems: Problems, path: str) -> None:
    allowed = table.keys
    for key in raw:
        if key in allowed:
            continue
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; allowed here: {', '.join(allowed)}"
        where = f" in a {table.title}" if table.flat else ""
        problems.add(f"unknown key '{key}'{where}{hint}", path if table.flat else _join(path, key))


def _applies(f: Field, raw: Mapping[str, Any], out: Mapping[str, Any], table: Table, problems: Problems,
             where: str) -> bool:
    """Whether ``f`` applies, given the sibling it depends on; a key given where it does not is refused."""
    if f.when is None:
        return True
    sibling, values = f.when
    if sibling not in out:  # the sibling is itself missing or refused: nothing more to say
        return False
    if out[sibling] in values:
        return True
    if f.key in raw:
        noun = table.field(sibling).noun or sibling
        problems.add(f"'{f.key}' does not apply to {noun} {out[sibling]!r} (only to {', '.join(values)})", where)
    return False


def _missing(f: Field, out: Mapping[str, Any], table: Table, where: str) -> str:
    if f.type == "tables":
        return f"needs at least one [[{where}]] table"
    if f.when is not None:
        sibling = f.when[0]
        return f"{table.field(sibling).noun or sibling} {out[sibling]!r} needs '{f.key}'"
    return f"missing required field '{f.key}' ({f.doc})"


def _value(f: Field, raw: Any, problems: Problems, where: str, context: dict[str, Any]) -> Any:
    raw = _provenance(f, raw, problems, where, context)
    if raw is _BAD:
        return _BAD
    if f.table is not None:
        return _nested(f, raw, problems, where, context)
    try:
        _finite(raw)
        value = _CHECKS[f.type](raw, f)
        if f.parse is not None:
            value = f.parse(value, context)
        _bounds(f, value, raw)
    except InputError as err:
        # A parser that names the field it was given adds nothing to `where`.
        problems.take(err if err.field != f.key else InputError(err.reason), where)
        return _BAD
    return value


def _provenance(f: Field, raw: Any, problems: Problems, where: str, context: Mapping[str, Any]) -> Any:
    """A figure's value, its provenance recorded; a plain value as it is."""
    if f.figure and isinstance(raw, dict):
        parts = walk(raw, FIGURE, problems, where)
        if "value" not in parts:
            return _BAD
        problems.provenance[where] = Figure(parts["value"], parts.get("source"), parts.get("status"),
                                            parts.get("derivation"), parts.get("note"))
        return parts["value"]
    if f.figure == "required" and context.get("provenance"):
        problems.add("needs its provenance: write { value = ..., source = ..., status = ... }", where)
    return raw


def _nested(f: Field, raw: Any, problems: Problems, where: str, context: dict[str, Any]) -> Any:
    assert f.table is not None
    if f.type == "table":
        if not isinstance(raw, dict):
            problems.add(f"must be a table [{where}], got {_show(raw)}", where)
            return _BAD
        return walk(raw, f.table, problems, where, context)
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        problems.add(f"must be an array of tables [[{where}]], got {_show(raw)}", where)
        return _BAD
    if not raw and f.required:
        problems.add(_missing(f, {}, f.table, where), where)
    return [walk(t, f.table, problems, _label(f.table, t, i, where, problems), context) for i, t in enumerate(raw)]


def _label(table: Table, raw: Mapping[str, Any], index: int, where: str, problems: Problems) -> str:
    """``level[L1]`` for an element that names itself, else ``level[0]``."""
    indexed = f"{where}[{index}]"
    name = raw.get(table.label) if table.label else None
    if isinstance(name, dict):
        name = name.get("value")
    if not isinstance(name, str) or not name:
        return indexed
    shown = f"{where}[{name}]"
    problems.alias(shown, indexed)
    return shown


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _finite(raw: Any) -> None:
    if isinstance(raw, float) and not math.isfinite(raw):
        raise InputError(f"must be a finite number, got {raw!r}")
    if isinstance(raw, list):
        for item in raw:
            _finite(item)


def _bounds(f: Field, value: Any, raw: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if not math.isfinite(value):
        raise InputError(f"{raw!r} overflows to infinity")
    if f.minimum is not None and value < f.minimum:
        raise InputError(f"must be at least {_bound(f.minimum)}, got {value!r}")
    if f.above is not None and value <= f.above:
        raise InputError(f"must be {'positive' if f.above == 0 else f'above {f.above:g}'}, got {value!r}")
    if f.above == 0 and value < SMALLEST:  # a subnormal divisor: the step's numbers would not be finite
        raise InputError(f"must be at least {SMALLEST:g} (a positive figure no machine goes below), got {value!r}")
    if f.maximum is not None and value > f.maximum:
        raise InputError(f"must be at most {_bound(f.maximum)}, got {value!r}")


def _bound(x: float) -> str:
    """A bound as a person reads it: 1048576, not 1.04858e+06."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_text(value: Any, f: Field) -> str:
    value = _check_str(value, f)
    if not value.strip():
        raise InputError("must not be empty")
    return value


def _check_str(value: Any, f: Field) -> str:
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {_show(value)}")
    return value


def _check_int(value: Any, f: Field) -> int:
    if not _is_int(value):
        raise InputError(f"must be an integer, got {_show(value)}")
    return value


def _check_number(value: Any, f: Field) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"must be a number, got {_show(value)}")
    return float(value)


def _check_bool(value: Any, f: Field) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"must be true or false, got {_show(value)}")
    return value


def _check_word(value: Any, f: Field) -> str:
    if isinstance(value, str) and value in f.choices:
        return value
    raise InputError(f"unknown {f.noun or 'value'} {value!r}; one of {', '.join(f.choices)}")


def _check_ints(value: Any, f: Field) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(x) and x > 0 for x in value):
        raise InputError(f"must be a list of positive integers, got {value!r}")
    return tuple(value)


def _check_list(value: Any, f: Field) -> list[Any]:
    if not isinstance(value, list):
        raise InputError(f"must be a list, got {_show(value)}")
    return value


def _check_mapping(value: Any, f: Field) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InputError(f"must be a table of key = \"text\", got {_show(value)}")
    for key, text in value.items():
        if not isinstance(text, str):
            raise InputError(f"must be a string, got {_show(text)}", field=key)
    return dict(value)


_CHECKS: dict[str, Callable[[Any, Field], Any]] = {
    "text": _check_text, "str": _check_str, "int": _check_int, "number": _check_number,
    "bool": _check_bool, "word": _check_word, "any": lambda v, f: v, "ints": _check_ints,
    "list": _check_list, "mapping": _check_mapping,
}


# ---------------------------------------------------------------------------------
# Documentation


def _type_doc(f: Field) -> str:
    if f.unit:
        text = f.unit
    elif f.type == "word":
        text = " / ".join(f"`{c}`" for c in f.choices)
    elif f.type in ("table", "tables"):
        text = f"[{'[' if f.type == 'tables' else ''}{f.key}{']' if f.type == 'tables' else ''}]"
        text = f"table `{text}`"
    else:
        text = {"text": "string", "str": "string", "number": "number", "ints": "list of integers",
                "mapping": "key = \"text\""}.get(f.type, f.type)
    extra = [f"≥ {f.minimum:g}" if f.minimum is not None else "", "> 0" if f.above == 0 else "",
             f"≤ {_bound(f.maximum)}" if f.maximum is not None else "",
             {"optional": "figure", "required": "figure, provenance required"}.get(f.figure, "")]
    shown = ", ".join(x for x in extra if x)
    return text + (f" ({shown})" if shown else "")


def _literal(value: Any) -> str:
    return _toml_value(value)


def _need_doc(f: Field) -> str:
    if f.when is not None:
        applies = f"{f.when[0]} = {' / '.join(f.when[1])}"
        return (f"yes, with {applies}" if f.required and f.default is None else
                f"with {applies}" + (f"; default `{_literal(f.default)}`" if f.default is not None else ""))
    if f.required:
        return "yes"
    if f.default is not None:
        return f"default `{_literal(f.default)}`"
    return f"default: {f.default_doc}" if f.default_doc else "no"


def markdown(table: Table, heading: str = "", shown: set[str] | None = None) -> str:
    """A Markdown table of ``table``'s fields and, after it, of each sub-table's; a
    sub-table already in ``shown`` (rendered earlier in the same document) is referred to."""
    shown = set() if shown is None else shown
    shown.add(table.title)
    out = [heading or f"`{table.title}`", ""]
    if table.doc:
        out += [table.doc, ""]
    out += ["| key | type | required | meaning |", "|---|---|---|---|"]
    subs: list[Table] = []
    for f in table.fields:
        doc = f.doc + (f" (default: {f.default_doc})" if f.default_doc and f.when else "")
        if f.table is not None and f.table.title in shown:
            doc += f" (`{f.table.title}` as above)"
        elif f.table is not None:
            subs.append(f.table)
        out.append(f"| `{f.key}` | {_type_doc(f)} | {_need_doc(f)} | {doc.replace('|', '/')} |")
    for sub in subs:
        if sub.title not in shown:
            out += ["", markdown(sub, f"`{sub.title}`", shown)]
    return "\n".join(out)


# ---------------------------------------------------------------------------------
# Writing


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r}: TOML data files take finite numbers only")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML's
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items() if v is not None) + " }"
    raise ValueError(f"cannot write a {type(value).__name__} as TOML")


def dumps(data: Mapping[str, Any], table: Table, comments: Iterable[str] = ()) -> str:
    """``data`` as TOML, keys in declaration order; a key the declaration lacks is refused.

    Figures are written inline (``{ value = ..., source = ... }``), sub-tables as
    ``[name]`` and arrays of tables as ``[[name]]``, after the plain keys.
    """
    lines = [f"# {c}" if c else "#" for c in comments]
    _dump_table(data, table, "", lines)
    return "\n".join(lines).strip("\n") + "\n"


def _dump_table(data: Mapping[str, Any], table: Table, path: str, lines: list[str]) -> None:
    unknown = set(data) - set(table.keys)
    if unknown:
        raise ValueError(f"{path or 'top level'}: keys {sorted(unknown)} are not declared")
    nested = []
    for f in table.fields:
        if f.key not in data:
            continue
        if f.type in ("table", "tables", "mapping"):
            nested.append(f)
        else:
            lines.append(f"{f.key} = {_toml_value(data[f.key])}")
    for f in nested:
        name = _join(path, f.key)
        if f.type == "mapping":
            lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in data[f.key].items()]
            continue
        assert f.table is not None
        for item in data[f.key] if f.type == "tables" else [data[f.key]]:
            lines += ["", f"[[{name}]]" if f.type == "tables" else f"[{name}]"]
            _dump_table(item, f.table, name, lines)


__all__ = ["FIGURE", "Field", "Figure", "Problems", "SCHEMA_VERSION", "Table", "dumps", "key_lines",
           "markdown", "read_toml", "walk"]
