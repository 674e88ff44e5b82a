"""The memory-level schema shared by hierarchy files and machine profiles.

Owns: :class:`LevelSpec` (one cache or scratchpad level, validated), the reading of a
``[[level]]`` TOML table into it, figures with provenance (:class:`Figure`), and
:func:`load_hierarchy_file` for the stand-alone hierarchy files that ``memwall replay``
takes. Machine profiles (``memwall.profiles``) use the same level tables, so a level
means the same thing wherever it is written.

A figure may be written plain (``size = "32 KiB"``) or with its provenance as an
inline table (``size = { value = "32 KiB", source = "...", status = "verified" }``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .units import parse_byte_rate, parse_bytes, parse_time

POLICIES = ("lru", "fifo", "random", "plru")
WRITE_POLICIES = ("back-allocate", "through-noallocate")
INCLUSIONS = ("none", "inclusive", "exclusive")
STATUSES = ("verified", "secondary", "estimate", "announced", "measured")

LEVEL_KEYS = {
    "name": "level name, unique in the hierarchy (e.g. 'L1d')",
    "size": "capacity: '32 KiB' or an integer of bytes",
    "line": "line size: '64 B' or an integer of bytes; a power of two",
    "ways": "associativity: an integer, or 'full' for fully associative",
    "policy": "replacement: 'lru' (default), 'fifo', 'random' (seeded) or 'plru' (tree)",
    "write": "'back-allocate' (default) or 'through-noallocate'",
    "inclusion": "'none' (default), 'inclusive' (back-invalidation) or 'exclusive' (victim)",
    "seed": "seed of the random replacement policy (integer, default 0)",
    "latency": "load-to-use latency of a hit here: '4 cycles' or '1.2 ns'",
    "bandwidth": "sustained bandwidth into the level above: '64 B/cycle' or '3.35 TB/s'",
    "software_managed": "true for scratchpads (vector registers, shared memory, VMEM): not simulated as a cache",
    "shared_by": "how many cores share one instance (informational)",
    "note": "free text",
}
FIGURE_KEYS = ("value", "source", "status", "derivation", "note")


@dataclass(frozen=True)
class Figure:
    """A figure with where it came from."""

    value: Any
    source: str | None = None  # citation, URL, or a key of the file's [sources] table
    status: str | None = None  # one of STATUSES
    derivation: str | None = None  # how it was computed, where derived
    note: str | None = None


def split_figure(raw: Any, field_name: str) -> tuple[Any, Figure | None]:
    """Separate a figure's value from its provenance; plain values have none."""
    if not isinstance(raw, dict):
        return raw, None
    unknown = set(raw) - set(FIGURE_KEYS)
    if unknown:
        raise InputError(
            f"unknown key(s) {sorted(unknown)} in a figure; allowed: {', '.join(FIGURE_KEYS)}",
            field=field_name,
        )
    if "value" not in raw:
        raise InputError("a figure table needs 'value'", field=field_name)
    status = raw.get("status")
    if status is not None and status not in STATUSES:
        raise InputError(f"unknown status {status!r}; one of {', '.join(STATUSES)}", field=field_name)
    for key in ("source", "derivation", "note"):
        if key in raw and not isinstance(raw[key], str):
            raise InputError(f"'{key}' must be a string", field=field_name)
    fig = Figure(raw["value"], raw.get("source"), status, raw.get("derivation"), raw.get("note"))
    return raw["value"], fig


@dataclass(frozen=True)
class LevelSpec:
    """One level of a memory hierarchy, checked: ``size == sets * ways * line``."""

    name: str
    size: int  # bytes
    line: int  # bytes, a power of two
    ways: int  # lines per set; size // line when fully associative
    policy: str = "lru"
    write: str = "back-allocate"
    inclusion: str = "none"
    seed: int = 0
    latency: float | None = None  # seconds per hit served here
    bandwidth: float | None = None  # bytes per second into the level above
    software_managed: bool = False
    shared_by: int = 1
    provenance: dict[str, Figure] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_geometry(self.name, self.size, self.line, self.ways, self.policy)
        for key, allowed in (("policy", POLICIES), ("write", WRITE_POLICIES), ("inclusion", INCLUSIONS)):
            if getattr(self, key) not in allowed:
                raise InputError(
                    f"unknown {key} {getattr(self, key)!r}; one of {', '.join(allowed)}", field=key
                )

    @property
    def sets(self) -> int:
        return self.size // (self.ways * self.line)

    @property
    def lines(self) -> int:
        return self.size // self.line


def check_geometry(name: str, size: int, line: int, ways: int, policy: str) -> None:
    """Refuse a level whose geometry cannot be built, naming the field and the numbers."""
    if line <= 0 or line & (line - 1):
        raise InputError(f"line size {line} B of level '{name}' is not a power of two", field="line")
    if ways <= 0:
        raise InputError(f"ways of level '{name}' must be positive, got {ways}", field="ways")
    if size <= 0:
        raise InputError(f"size of level '{name}' must be positive, got {size}", field="size")
    if size % (ways * line):
        raise InputError(
            f"size {size} B of level '{name}' is not sets x ways x line: "
            f"{size} / ({ways} ways x {line} B) = {size / (ways * line):g} sets",
            field="size",
        )
    if policy == "plru" and ways & (ways - 1):
        raise InputError(
            f"tree-PLRU needs a power-of-two number of ways; level '{name}' has {ways}", field="policy"
        )


def parse_level(
    table: dict[str, Any],
    *,
    clock_hz: float | None = None,
    require_provenance: bool = False,
    extra_keys: tuple[str, ...] = (),
) -> LevelSpec:
    """Read one ``[[level]]`` table. Errors name the field (``level.size`` etc.)."""
    if not isinstance(table, dict):
        raise InputError("a level must be a table", field="level")
    unknown = set(table) - set(LEVEL_KEYS) - set(extra_keys)
    if unknown:
        raise InputError(
            f"unknown key(s) {', '.join(sorted(unknown))}; a level takes {', '.join(LEVEL_KEYS)}",
            field="level",
        )
    values: dict[str, Any] = {}
    provenance: dict[str, Figure] = {}
    for key in LEVEL_KEYS:
        if key in table:
            value, fig = split_figure(table[key], key)
            values[key] = value
            if fig is not None:
                provenance[key] = fig
    name = values.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("each level needs a non-empty string 'name'", field="name")
    try:
        for key in ("size", "line", "ways"):
            if key not in values:
                raise InputError(f"level '{name}' needs '{key}'", field=key)
        # Through _optional so a bad unit names the field ('level[L1].size'), not only the level.
        size = _optional(values, "size", parse_bytes)
        line = _optional(values, "line", parse_bytes)
        ways_raw = values["ways"]
        if ways_raw == "full":
            if line <= 0 or size % line:
                raise InputError(f"size {size} B is not a whole number of {line}-byte lines", field="size")
            ways = size // line
        elif isinstance(ways_raw, int) and not isinstance(ways_raw, bool):
            ways = ways_raw
        else:
            raise InputError(f"ways must be an integer or 'full', got {ways_raw!r}", field="ways")
        seed = values.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise InputError(f"seed must be a non-negative integer, got {seed!r}", field="seed")
        shared_by = values.get("shared_by", 1)
        if not isinstance(shared_by, int) or shared_by < 1:
            raise InputError(f"shared_by must be a positive integer, got {shared_by!r}", field="shared_by")
        software_managed = values.get("software_managed", False)
        if not isinstance(software_managed, bool):
            raise InputError("software_managed must be true or false", field="software_managed")
        for key in ("policy", "write", "inclusion"):
            if key in values and not isinstance(values[key], str):
                raise InputError(f"{key} must be a string", field=key)
        latency = _optional(values, "latency", lambda v: parse_time(v, clock_hz=clock_hz))
        bandwidth = _optional(values, "bandwidth", lambda v: parse_byte_rate(v, clock_hz=clock_hz))
        if require_provenance:
            for key in ("size", "latency", "bandwidth"):
                if key in values and key not in provenance:
                    raise InputError(
                        "needs its provenance: write it as { value = ..., source = ..., status = ... }",
                        field=key,
                    )
        return LevelSpec(
            name=name,
            size=size,
            line=line,
            ways=ways,
            policy=values.get("policy", "lru"),
            write=values.get("write", "back-allocate"),
            inclusion=values.get("inclusion", "none"),
            seed=seed,
            latency=latency,
            bandwidth=bandwidth,
            software_managed=software_managed,
            shared_by=shared_by,
            provenance=provenance,
        )
    except InputError as err:
        raise err.within(field_prefix=f"level[{name}]") from None


def _optional(values: dict[str, Any], key: str, parse: Any) -> Any:
    if key not in values:
        return None
    try:
        return parse(values[key])
    except InputError as err:
        raise InputError(err.reason, field=key) from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; a syntax error names the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read: {err}", file=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        line = getattr(err, "lineno", None)
        if line is None:
            import re

            m = re.search(r"line (\d+)", str(err))
            line = int(m.group(1)) if m else None
        raise InputError(f"TOML syntax error: {err}", file=str(path), line=line) from None


def parse_levels(tables: Any, *, clock_hz: float | None = None, require_provenance: bool = False,
                 extra_keys: tuple[str, ...] = ()) -> list[LevelSpec]:
    """Read a list of ``[[level]]`` tables, first level first; names must be unique."""
    if not isinstance(tables, list) or not tables:
        raise InputError("needs at least one [[level]] table", field="level")
    levels: list[LevelSpec] = []
    for index, table in enumerate(tables):
        try:
            levels.append(parse_level(table, clock_hz=clock_hz, require_provenance=require_provenance,
                                      extra_keys=extra_keys))
        except InputError as err:
            if err.field and err.field.startswith("level"):
                raise
            raise err.within(field_prefix=f"level[{index}]") from None
    names = [lv.name for lv in levels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"level names must be unique; repeated: {', '.join(dupes)}", field="level")
    return levels


def load_hierarchy_file(path: str | Path) -> list[LevelSpec]:
    """A hierarchy file: ``[[level]]`` tables (and an optional ``clock``), first level first."""
    data = load_toml(path)
    unknown = set(data) - {"level", "clock", "name", "note", "format_version"}
    try:
        if unknown:
            raise InputError(f"unknown top-level key(s) {', '.join(sorted(unknown))}; expected [[level]] tables")
        clock = None
        if "clock" in data:
            from .units import parse_frequency

            try:
                clock = parse_frequency(data["clock"])
            except InputError as err:
                raise InputError(err.reason, field="clock") from None
        return parse_levels(data.get("level"), clock_hz=clock)
    except InputError as err:
        raise err.within(file=str(path)) from None
