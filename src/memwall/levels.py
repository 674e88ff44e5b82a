"""The memory-level schema shared by hierarchy files and machine profiles.

Owns: :class:`LevelSpec` (one cache or scratchpad level, validated), the declaration of
a ``[[level]]`` table (:data:`LEVEL`) and of a stand-alone hierarchy file
(:data:`HIERARCHY`), building levels from their checked values (:func:`levels_from`),
and :func:`load_hierarchy_file` for the files that ``memwall replay`` takes. Machine
profiles (``memwall.profiles``) use the same level tables, so a level means the same
thing wherever it is written.

A figure may be written plain (``size = "32 KiB"``) or with its provenance as an
inline table (``size = { value = "32 KiB", source = "...", status = "verified" }``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .schema import FIGURE_STATUSES, Field, Figure, Problems, Table, read_toml, walk
from .units import parse_byte_rate, parse_bytes, parse_energy, parse_frequency, parse_time

POLICIES = ("lru", "fifo", "random", "plru")
WRITE_POLICIES = ("back-allocate", "through-noallocate")
INCLUSIONS = ("none", "inclusive", "exclusive")
STATUSES = FIGURE_STATUSES
# The largest level the engine simulates: it keeps a tag for every line, touched lazily,
# and indexes lines with 64-bit counters. 256 TiB is about 4000x the largest cache built
# (a wafer's SRAM is tens of GB); beyond it a size is a typing error, not a machine.
MAX_LEVEL_BYTES = 1 << 48


def _ways(value: Any, context: dict[str, Any]) -> int | str:
    if value == "full" or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InputError(f"ways must be an integer or 'full', got {value!r}")


def _time(value: Any, context: dict[str, Any]) -> float:
    return parse_time(value, clock_hz=context.get("clock_hz"))


def _byte_rate(value: Any, context: dict[str, Any]) -> float:
    return parse_byte_rate(value, clock_hz=context.get("clock_hz"))


def _bytes(value: Any, context: dict[str, Any]) -> int:
    return parse_bytes(value)


def _frequency(value: Any, context: dict[str, Any]) -> float:
    return parse_frequency(value)


def energy_per_byte(value: Any, context: dict[str, Any]) -> float:
    return parse_energy(value, "B")


ENERGY_PER_BYTE = "energy per byte (`'0.5 pJ/B'`, `'3.9 pJ/bit'`)"


LEVEL = Table("[[level]]", (
    Field("name", "text", "level name, unique in the hierarchy (e.g. 'L1d')", required=True),
    Field("size", "any", "capacity; must equal sets x ways x line", required=True, parse=_bytes,
          unit="size (`'32 KiB'`, or bytes)", figure="required"),
    Field("line", "any", "line size, a power of two", required=True, parse=_bytes,
          unit="size (`'64 B'`, or bytes)", figure="optional"),
    Field("ways", "any", "associativity", required=True, parse=_ways, unit="integer or `'full'`",
          figure="optional"),
    Field("policy", "word", "replacement: tree-PLRU needs a power-of-two number of ways; random is seeded",
          default="lru", choices=POLICIES, noun="policy", figure="optional"),
    Field("write", "word", "write policy", default="back-allocate", choices=WRITE_POLICIES,
          noun="write policy", figure="optional"),
    Field("inclusion", "word", "inclusion with the level below: inclusive back-invalidates, exclusive "
          "is a victim cache", default="none", choices=INCLUSIONS, noun="inclusion", figure="optional"),
    Field("seed", "int", "seed of the random replacement policy", default=0, minimum=0, figure="optional"),
    Field("latency", "any", "load-to-use latency of a hit here", parse=_time,
          unit="time (`'4 cycles'`, `'1.2 ns'`)", figure="required"),
    Field("bandwidth", "any", "sustained bandwidth into the level above", parse=_byte_rate,
          unit="rate (`'64 B/cycle'`, `'3.35 TB/s'`)", figure="required"),
    Field("bandwidth_scope", "word", "whose the bandwidth is: `core`, one core's (the timing multiplies it by "
          "the cores a kernel keeps busy), or `chip`, the whole chip's", default="chip", choices=("core", "chip"),
          noun="bandwidth scope", figure="optional"),
    Field("energy", "any", "energy per byte moved between this level and the level above (the first level: "
          "per byte the core reads or writes here; a scratchpad: per byte staged through it), the array's "
          "access and the wires; memwall's energy table (docs/energy.md)", parse=energy_per_byte,
          unit=ENERGY_PER_BYTE, figure="required"),
    Field("software_managed", "bool", "true for scratchpads (vector registers, shared memory, VMEM): "
          "not simulated as a cache", default=False, figure="optional"),
    Field("shared_by", "int", "how many cores share one instance (informational)", default=1, minimum=1,
          figure="optional"),
    Field("note", "str", "free text", figure="optional"),
), doc="One level of a memory hierarchy, first (nearest the core) first.", label="name")
LEVEL_KEYS = {f.key: f.doc for f in LEVEL.fields}

HIERARCHY = Table("hierarchy file", (
    Field("format_version", "int", "the format this file is written in (1)", minimum=1, maximum=1),
    Field("name", "str", "what the hierarchy is"),
    Field("note", "str", "free text"),
    Field("clock", "any", "the clock per-cycle figures refer to", parse=_frequency,
          unit="frequency (`'3 GHz'`)", sets="clock_hz", figure="optional"),
    Field("level", "tables", "the levels, first (nearest the core) first", required=True, table=LEVEL),
), doc="A file of `[[level]]` tables for `memwall replay --hierarchy`.")


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
    bandwidth_scope: str = "chip"  # "core": bandwidth is one core's; "chip": the whole chip's
    energy: float | None = None  # joules per byte moved between this level and the one above
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
    if size > MAX_LEVEL_BYTES:
        raise InputError(f"size {size:.3g} B of level '{name}' is beyond what the engine simulates "
                         f"(at most {MAX_LEVEL_BYTES} B = 256 TiB)", field="size")
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


def _level(values: dict[str, Any], problems: Problems, where: str) -> LevelSpec | None:
    """The level of one checked ``[[level]]`` table, or None (its problems recorded)."""
    if not all(key in values for key in ("name", "size", "line", "ways")):
        return None
    size, line, ways = values["size"], values["line"], values["ways"]
    if ways == "full":
        if line <= 0 or size % line:
            problems.add(f"size {size} B is not a whole number of {line}-byte lines", f"{where}.size")
            return None
        ways = size // line
    prefix = where + "."
    provenance = {k[len(prefix):]: fig for k, fig in problems.provenance.items() if k.startswith(prefix)}
    try:
        return LevelSpec(**{k: v for k, v in values.items() if k not in ("note", "ways")}, ways=ways,
                         provenance=provenance)
    except InputError as err:
        problems.take(err, where)
        return None


def levels_from(tables: list[dict[str, Any]], problems: Problems, path: str = "level") -> list[LevelSpec]:
    """The levels of checked ``[[level]]`` tables, first first; names must be unique."""
    levels = []
    for index, values in enumerate(tables):
        name = values.get("name")
        level = _level(values, problems, f"{path}[{name}]" if isinstance(name, str) else f"{path}[{index}]")
        if level is not None:
            levels.append(level)
    names = [lv.name for lv in levels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.add(f"level names must be unique; repeated: {', '.join(dupes)}", path)
    return levels


def parse_level(table: Any, *, clock_hz: float | None = None, require_provenance: bool = False) -> LevelSpec:
    """Read one ``[[level]]`` table. Errors name the field (``level[L1].size`` etc.)."""
    if not isinstance(table, dict):
        raise InputError("a level must be a table", field="level")
    name = table.get("name")
    where = f"level[{name}]" if isinstance(name, str) and name else "level"
    problems = Problems()
    values = walk(table, LEVEL, problems, where, {"clock_hz": clock_hz, "provenance": require_provenance})
    level = _level(values, problems, where)
    problems.raise_first()
    assert level is not None
    return level


def load_hierarchy_file(path: str | Path) -> list[LevelSpec]:
    """A hierarchy file: ``[[level]]`` tables (and an optional ``clock``), first level first."""
    data, text = read_toml(path)
    problems = Problems(str(path), text)
    values = walk(data, HIERARCHY, problems, "", {"provenance": False})
    levels = levels_from(values.get("level", []), problems)
    problems.raise_first()
    return levels


__all__ = ["HIERARCHY", "LEVEL", "Figure", "LevelSpec", "check_geometry", "levels_from", "load_hierarchy_file",
           "parse_level"]
