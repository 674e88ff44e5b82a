"""The Python face of the cache engine: build a hierarchy, replay, read counters.

Owns: :class:`Hierarchy` (levels checked and handed to ``memwall._csim.Engine``, the
conversion and validation of arrays and loop nests before they reach C) and the
counter dataclasses :class:`LevelCounters`, :class:`MemoryCounters` and
:class:`HierarchyCounters`. The rules of a reference are /ENGINE_SEMANTICS.md; the
inclusion options are defined in ``tests/reference_model.py``'s docstring.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

import memwall._csim as _csim  # the module, not through memwall/__init__ (tests/test_imports.py)

from .errors import InputError
from .levels import LevelSpec, load_hierarchy_file, parse_level
from .streams import LoopNest
from .traces import as_trace_arrays, read_trace

__all__ = ["CapacitySweep", "Hierarchy", "HierarchyCounters", "LevelCounters", "MemoryCounters", "ENGINE_NAME"]

ENGINE_NAME: str = _csim.ENGINE_NAME


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _names(a: Any) -> tuple[str, ...]:
    # dataclasses.fields() per call was a visible share of a sweep's Python time
    cls = type(a)
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = tuple(f.name for f in fields(a))
    return _FIELD_NAMES[cls]


def _combine(a: Any, b: Any, op: Any) -> dict[str, Any]:
    """Field-wise ``op`` of two counters of the same thing (names must agree)."""
    if type(a) is not type(b):
        return NotImplemented
    out = {}
    for name in _names(a):
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            out[name] = op(x, y)
        elif x != y:
            raise ValueError(f"cannot combine counters of different things: {name} {x!r} vs {y!r}")
        else:
            out[name] = x
    return out


def _subtract(a: Any, b: Any) -> dict[str, Any]:
    return _combine(a, b, operator.sub)


def _scale(a: Any, factor: float) -> dict[str, Any]:
    """Every count times ``factor`` (floats: a sampled replay stands for a larger one)."""
    return {
        name: getattr(a, name) * factor if isinstance(getattr(a, name), (int, float)) else getattr(a, name)
        for name in _names(a)
    }


class _Counts:
    """Field-wise arithmetic shared by the counter dataclasses: ``a - b`` attributes counts
    to what ran between two snapshots, ``a + b`` sums them, ``scaled`` stands a sample for
    a longer replay."""

    def __sub__(self, other: Any) -> Any:
        out = _subtract(self, other)
        return out if out is NotImplemented else type(self)(**out)

    def __add__(self, other: Any) -> Any:
        out = _combine(self, other, operator.add)
        return out if out is NotImplemented else type(self)(**out)

    def scaled(self, factor: float) -> Any:
        return type(self)(**_scale(self, factor))


@dataclass(frozen=True)
class LevelCounters(_Counts):
    """One level's counts; a read or a write is one line lookup."""

    name: str
    reads: int = 0
    writes: int = 0
    read_misses: int = 0
    write_misses: int = 0
    compulsory: int = 0  # 3C split of the misses, when the hierarchy classifies
    capacity: int = 0
    conflict: int = 0
    writebacks: int = 0  # dirty lines written to the next level
    bytes_in: int = 0  # bytes fetched from the next level
    bytes_out: int = 0  # bytes written to the next level
    back_invalidations: int = 0  # lines removed because an inclusive level below evicted them

    @property
    def misses(self) -> int:
        return self.read_misses + self.write_misses

    @property
    def lookups(self) -> int:
        return self.reads + self.writes


@dataclass(frozen=True)
class MemoryCounters(_Counts):
    """References reaching main memory, and their bytes."""

    reads: int = 0
    writes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


@dataclass(frozen=True)
class HierarchyCounters:
    """Counters of every level (first first) and of main memory; subtract to attribute."""

    levels: list[LevelCounters] = field(default_factory=list)
    memory: MemoryCounters = field(default_factory=MemoryCounters)
    accesses: int = 0  # demand accesses replayed

    def __sub__(self, other: HierarchyCounters) -> HierarchyCounters:
        if not isinstance(other, HierarchyCounters):
            return NotImplemented
        if [lv.name for lv in self.levels] != [lv.name for lv in other.levels]:
            raise ValueError("cannot subtract counters of different hierarchies")
        return HierarchyCounters(
            [a - b for a, b in zip(self.levels, other.levels, strict=True)],
            self.memory - other.memory,
            self.accesses - other.accesses,
        )

    def __add__(self, other: HierarchyCounters) -> HierarchyCounters:
        if not isinstance(other, HierarchyCounters):
            return NotImplemented
        if [lv.name for lv in self.levels] != [lv.name for lv in other.levels]:
            raise ValueError("cannot add counters of different hierarchies")
        return HierarchyCounters(
            [a + b for a, b in zip(self.levels, other.levels, strict=True)],
            self.memory + other.memory,
            self.accesses + other.accesses,
        )

    def scaled(self, factor: float) -> HierarchyCounters:
        """The counts of a replay ``factor`` times as long (sampling); the values become floats."""
        return HierarchyCounters(
            [lv.scaled(factor) for lv in self.levels], self.memory.scaled(factor), self.accesses * factor
        )

    def level(self, name: str) -> LevelCounters:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "levels": [dataclasses.asdict(lv) for lv in self.levels],
            "memory": dataclasses.asdict(self.memory),
            "accesses": self.accesses,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HierarchyCounters:
        """The inverse of :meth:`as_dict` (a stored replay read back)."""
        return cls([LevelCounters(**lv) for lv in data["levels"]], MemoryCounters(**data["memory"]),
                   data["accesses"])


# Hierarchy.since builds the counters positionally from the engine's flat order.
assert tuple(f.name for f in fields(LevelCounters)) == ("name", *_csim.LEVEL_COUNTS)
assert tuple(f.name for f in fields(MemoryCounters)) == _csim.MEMORY_COUNTS


def _as_level(item: LevelSpec | Mapping[str, Any]) -> LevelSpec:
    if isinstance(item, LevelSpec):
        return item
    if isinstance(item, Mapping):
        return parse_level(dict(item))
    raise InputError(f"a level must be a LevelSpec or a mapping, got {type(item).__name__}", field="level")


def check_levels(levels: Sequence[LevelSpec]) -> None:
    """Refuse what the engine cannot simulate, naming the level and the field."""
    names = [lv.name for lv in levels]
    for i, lv in enumerate(levels):
        where = f"level[{lv.name}]"
        if lv.software_managed:
            raise InputError(
                f"level '{lv.name}' is software-managed (a scratchpad); pass only cache levels "
                "(e.g. Machine.cache_levels)",
                field=f"{where}.software_managed",
            )
        if names.count(lv.name) > 1:
            raise InputError(f"level names must be unique; '{lv.name}' repeats", field=where)
        if lv.inclusion != "none" and i == 0:
            raise InputError(
                f"inclusion '{lv.inclusion}' describes a level relative to the levels above it; "
                f"the first level '{lv.name}' has none",
                field=f"{where}.inclusion",
            )
        if lv.inclusion == "inclusive":
            for up in levels[:i]:
                if up.line > lv.line:
                    raise InputError(
                        f"inclusive level '{lv.name}' has {lv.line}-byte lines, smaller than the "
                        f"{up.line}-byte lines of '{up.name}' above it",
                        field=f"{where}.inclusion",
                    )
        if lv.inclusion == "exclusive":
            up = levels[i - 1]
            if up.line != lv.line:
                raise InputError(
                    f"exclusive level '{lv.name}' needs the line size of '{up.name}' above it "
                    f"({up.line} B), has {lv.line} B",
                    field=f"{where}.inclusion",
                )
            if up.write != "back-allocate" or lv.write != "back-allocate":
                raise InputError(
                    f"an exclusive (victim) level and the level above it must be write-back; "
                    f"'{up.name}' is {up.write}, '{lv.name}' is {lv.write}",
                    field=f"{where}.inclusion",
                )


class Hierarchy:
    """A cache hierarchy in the engine, first level first, and its counters.

    >>> from memwall.levels import LevelSpec
    >>> h = Hierarchy([LevelSpec("L1", 32 * 1024, 64, 8)])
    >>> h.replay(np.array([0, 8, 64], np.uint64), np.array([8, 8, 8], np.uint32), np.zeros(3, np.uint8))
    >>> h.counters().levels[0].read_misses
    2
    """

    def __init__(self, levels: Iterable[LevelSpec | Mapping[str, Any]], classify: bool = False) -> None:
        specs = [_as_level(lv) for lv in levels]
        check_levels(specs)
        self.levels: tuple[LevelSpec, ...] = tuple(specs)
        self.classify = bool(classify)
        self._engine = _new_engine([_engine_level(lv) for lv in specs], self.classify)

    @classmethod
    def from_file(cls, path: str | Path, classify: bool = False) -> Hierarchy:
        """Build from a hierarchy file of ``[[level]]`` tables."""
        return cls(load_hierarchy_file(path), classify=classify)

    def __repr__(self) -> str:
        desc = ", ".join(f"{lv.name} {lv.size}B/{lv.ways}w/{lv.line}B {lv.policy}" for lv in self.levels)
        return f"Hierarchy([{desc}], classify={self.classify})"

    # ---- replay
    def replay(self, addr: Any, size: Any, is_write: Any) -> None:
        """Replay explicit accesses (whole or one chunk of a longer trace).

        ``addr`` uint64, ``size`` uint32 (1 .. 2**32-1), ``is_write`` uint8 or bool;
        other integer dtypes are converted after a range check.
        """
        self._replay(*as_trace_arrays(addr, size, is_write))

    def _replay(self, a: np.ndarray, s: np.ndarray, w: np.ndarray, first: int = 0) -> None:
        """Replay the engine's arrays, refusing a bad access before any is counted; errors
        name the access as ``first`` + its index."""
        bad = self._engine.validate(a, s)
        if bad >= 0:
            if s[bad] == 0:
                raise InputError(f"access {first + bad}: size must be at least 1 byte", field="size")
            raise InputError(
                f"access {first + bad}: address {int(a[bad]):#x} + size {int(s[bad])} wraps past 2**64",
                field="addr",
            )
        self._engine.replay(a, s, w)

    def replay_nest(self, nest: LoopNest) -> None:
        """Replay a loop nest, expanded inside C without the GIL (no trace memory)."""
        if not isinstance(nest, LoopNest):
            raise InputError(f"replay_nest takes a LoopNest, got {type(nest).__name__}")
        self._engine.replay_nest(nest.counts, nest.accesses)

    def replay_file(self, path: str | Path, format: str | None = None, *, chunk: int = 1 << 18,
                    progress: Any = None) -> None:
        """Replay a trace file (din, xdin, lackey or npz; gzip accepted), in chunks; an
        error names the file and the access's index in it."""
        first = 0
        for a, s, w in read_trace(path, format, chunk=chunk):
            try:
                self._replay(a, s, w, first)
            except InputError as err:
                raise err.within(file=str(path)) from None
            first += len(a)
            if progress is not None:
                progress(len(a))

    def flush(self) -> None:
        """Write back every dirty line, first level first (ENGINE_SEMANTICS 'Flush')."""
        self._engine.flush()

    def reset(self) -> None:
        """Empty every level and zero the counters."""
        self._engine.reset()

    def counters(self) -> HierarchyCounters:
        raw = self._engine.counters()  # dicts keyed by the C structs' field names
        return HierarchyCounters(
            [LevelCounters(**row) for row in raw["levels"]], MemoryCounters(**raw["memory"]),
            int(raw["accesses"]),
        )

    def snapshot(self) -> tuple[int, ...]:
        """Every counter now, as a flat tuple: a cheap mark for :meth:`since` (a sweep
        attributes counts kernel by kernel, tens of thousands of times)."""
        return self._engine.counts_flat()

    def since(self, mark: tuple[int, ...]) -> HierarchyCounters:
        """The counters added since :meth:`snapshot` gave ``mark`` (``counters() - then``)."""
        now = self._engine.counts_flat()
        diff = [a - b for a, b in zip(now, mark, strict=True)]
        width = len(_csim.LEVEL_COUNTS)
        levels = [LevelCounters(lv.name, *diff[i * width:(i + 1) * width]) for i, lv in enumerate(self.levels)]
        tail = len(levels) * width
        return HierarchyCounters(levels, MemoryCounters(*diff[tail:tail + 4]), diff[tail + 4])


    def state_digest(self) -> bytes | None:
        """What every later replay's counters depend on (each set's lines, dirty bits and
        ages), hashed to 128 bits a level: two hierarchies with equal digests count any later
        trace alike. None where replacement is random or PLRU, or with 3C shadows (their
        state is more than the ways)."""
        return self._engine.state_digest()

    def copy_state_from(self, other: Hierarchy) -> None:
        """Take ``other``'s cache contents, keeping these counters (the same levels only)."""
        if self.levels != other.levels:
            raise InputError("copy_state_from: the hierarchies' levels differ")
        self._engine.copy_state_from(other._engine)


class CapacitySweep(Hierarchy):
    """One replay that counts a level at every capacity of its line size and set count.

    ``level`` (a name in ``levels``) is replayed as an LRU stack (Mattson et al. 1970)
    ``max_ways`` deep; the levels above it run as usual and the levels below are dropped
    (their traffic depends on the size swept). :meth:`sweep` then gives the level's exact
    counters, write-backs included, at ``sets * W * line`` bytes for every W in
    1 .. max_ways. Only where the stack property holds: an LRU, write-back write-allocate
    level without inclusion, no exclusive or inclusive level below it, no 3C split;
    anything else is refused with the reason.
    """

    def __init__(self, levels: Iterable[LevelSpec | Mapping[str, Any]], level: str, max_ways: int) -> None:
        specs = [_as_level(lv) for lv in levels]
        check_levels(specs)
        names = [lv.name for lv in specs]
        if level not in names:
            raise InputError(f"no level '{level}' to sweep; levels are {', '.join(names)}", field="level")
        i = names.index(level)
        target = specs[i]
        _check_sweepable(target, specs[i + 1:])
        if not isinstance(max_ways, int) or max_ways < 1:
            raise InputError(f"max_ways must be a whole number >= 1, got {max_ways!r}", field="max_ways")
        self.level_name = level
        self.sets = target.sets
        self.max_ways = max_ways
        self.line = target.line
        self.is_last = i == len(specs) - 1
        self.levels = tuple(specs[: i + 1])
        self.classify = False
        deepest = dataclasses.replace(target, size=target.sets * max_ways * target.line, ways=max_ways)
        self._engine = _new_engine([_engine_level(lv) for lv in specs[:i]] + [{**_engine_level(deepest), "stack": True}])

    def __repr__(self) -> str:
        return (f"CapacitySweep({self.level_name}: {self.sets} sets x 1..{self.max_ways} ways x {self.line} B, "
                f"above: {', '.join(lv.name for lv in self.levels[:-1]) or 'none'})")

    def sweep(self) -> dict[int, LevelCounters]:
        """The swept level's counters at each capacity in bytes (``sets * W * line``, W = 1 ..
        max_ways), smallest first; as a replay of a hierarchy ending at that level (with the
        level of W ways) would count them. The 3C fields stay 0."""
        level = len(self.levels) - 1
        raw = self._engine.counters()["levels"][level]
        h = self._engine.stack_counts(level)
        # misses at W ways: lookups whose stack distance is W or more
        read_miss = np.cumsum(h["read"][::-1])[::-1]
        write_miss = np.cumsum(h["write"][::-1])[::-1]
        full_miss = np.cumsum(h["full_write"][::-1])[::-1]
        out = {}
        for w in range(1, self.max_ways + 1):
            wb = int(h["writebacks"][w])
            out[self.sets * w * self.line] = LevelCounters(
                self.level_name, reads=raw["reads"], writes=raw["writes"], read_misses=int(read_miss[w]),
                write_misses=int(write_miss[w]), writebacks=wb,
                bytes_in=self.line * int(read_miss[w] + write_miss[w] - full_miss[w]), bytes_out=self.line * wb,
            )
        return out

    def counters(self) -> HierarchyCounters:
        """The levels above the swept one (the swept level's own counts: :meth:`sweep`)."""
        full = super().counters()
        return HierarchyCounters(full.levels[:-1], MemoryCounters(), full.accesses)


def _check_sweepable(lv: LevelSpec, below: Sequence[LevelSpec]) -> None:
    """Refuse, with the reason, a level whose misses one stack pass cannot count."""
    where = f"level[{lv.name}]"
    if lv.policy != "lru":
        raise InputError(
            f"cannot sweep '{lv.name}' in one pass: {lv.policy} replacement has no stack property "
            "(a larger cache need not hold what a smaller one holds), so each size needs its own replay",
            field=f"{where}.policy",
        )
    if lv.write != "back-allocate":
        raise InputError(
            f"cannot sweep '{lv.name}' in one pass: with no-write-allocate a write that misses a "
            "smaller cache but hits a larger one reorders only the larger, so the sizes stop "
            "sharing one LRU stack",
            field=f"{where}.write",
        )
    if lv.inclusion != "none":
        raise InputError(
            f"cannot sweep '{lv.name}' in one pass: it is {lv.inclusion}, so what it evicts (or "
            "takes from the level above) changes the levels above, differently at each size",
            field=f"{where}.inclusion",
        )
    for b in below:
        if b.inclusion != "none":
            raise InputError(
                f"cannot sweep '{lv.name}' in one pass: '{b.name}' below it is {b.inclusion}, so its "
                f"traffic back into '{lv.name}' depends on the size swept",
                field=f"level[{b.name}].inclusion",
            )


def _new_engine(levels: list[dict[str, Any]], classify: bool = False) -> Any:
    """The C engine, or an InputError naming the level whose tag store the host cannot hold."""
    try:
        return _csim.Engine(levels, classify)
    except MemoryError as err:
        lines = ", ".join(f"{lv['name']} {lv['size'] // lv['line']:.3g} lines" for lv in levels)
        raise InputError(f"{err}: the engine keeps about 16 B of host memory per simulated line ({lines})",
                         field="size") from None


def _engine_level(lv: LevelSpec) -> dict[str, Any]:
    """One level as ``_csim.Engine`` takes it: its ``LEVEL_KEYS``, codes from the extension."""
    return {
        "name": lv.name, "size": lv.size, "line": lv.line, "ways": lv.ways,
        "policy": _csim.POLICY_CODES[lv.policy], "write_through": lv.write == "through-noallocate",
        "inclusion": _csim.INCLUSION_CODES[lv.inclusion], "seed": lv.seed, "stack": False,
    }
