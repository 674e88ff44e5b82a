"""Machine profiles: loading, checking and inheriting the TOML files of era_data/machines.

Owns: :class:`Machine` and its parts (:class:`MainMemory`, :class:`TimingSpec`,
:class:`ScheduleSpec`), the schema of a profile (:data:`SCHEMA`, one table that the
loader, ``memwall machines validate`` and the docs all read), the strict loader with
inheritance (``base = "h100-sxm"``), and the catalogue of shipped machines.

A profile is refused, with file, field and reason, for anything the loader does not
understand: unknown or misspelled keys, wrong types or units, a figure without its
provenance, a level whose size is not sets x ways x line, an unknown policy, timing
model or schedule family, a missing base or a cycle of bases. :func:`validate_paths`
reports every problem of every file, not only the first.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .levels import STATUSES, Figure, LevelSpec, load_toml, parse_levels, split_figure
from .units import parse_byte_rate, parse_bytes, parse_flop_rate, parse_frequency, parse_time
from .vocabulary import DISPATCH_MODES

FORMAT_VERSION = 1
# What changed in each format version, printed when a file names another version.
FORMAT_CHANGES = {1: "first format"}

TIMING_MODELS = ("in_order", "vector", "overlapped", "throughput")
SCHEDULE_FAMILIES = ("scalar", "vector", "blocked", "tiled")
KINDS = ("vector", "scalar", "superscalar", "gpu", "tpu", "wafer", "array")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
ISSUE_OPS = ("fadd", "fmul", "fdiv", "exp", "load", "store", "loop")

# Which timing models suit which kind of machine. An out-of-order superscalar may be
# approximated in order (the research notes model the Pentium Pro that way).
MODELS_FOR_KIND = {
    "scalar": ("in_order",),
    "vector": ("vector",),
    "superscalar": ("overlapped", "in_order"),
    "gpu": ("throughput",),
    "tpu": ("throughput",),
    "wafer": ("throughput",),
    "array": ("throughput",),
}

# The schema, section by section: key -> (what it means, with its unit). The loader
# refuses keys not listed here; the template and era_data/README.md document the same
# keys (a test checks that they do).
SCHEMA: dict[str, dict[str, str]] = {
    "": {
        "format_version": f"integer, the profile format this file is written in (now {FORMAT_VERSION})",
        "base": "optional: id of a shipped profile, or a path to a .toml file, that this file extends",
        "id": "lowercase kebab-case identifier, unique in the catalogue (the file name without .toml)",
        "name": "full name of the machine",
        "vendor": "maker",
        "year": "year of first delivery (integer)",
        "kind": "one of " + ", ".join(KINDS),
        "clock": "clock the cycle counts refer to, e.g. '80 MHz' (a figure)",
        "primary_dtype": "dtype the machine's era trained in (default: fp64 on vector machines, "
        "bf16 on accelerators that have it, else fp32)",
        "notes": "free text: what SKU is modelled, what is simplified",
        "compute": "table: peak dense FLOP/s per dtype (matrix products); [compute.vector] for the rest",
        "issue_costs": "table: time per operation of a scalar machine",
        "level": "array of tables, first (nearest the core) first: registers, scratchpads, caches",
        "memory": "table: main memory",
        "timing": "table: timing model and its parameters",
        "schedule": "table: schedule family and its parameters",
        "sources": "table: key -> full citation or URL; a figure's source may name a key",
    },
    "compute": {
        **{dtype: f"peak dense {dtype} rate, e.g. '19.5 TFLOP/s' or '2 FLOP/cycle' (a figure)" for dtype in DTYPES},
        "vector": "optional table: dtype -> the rate of the vector (SIMT/SIMD) units, for every kernel "
        "that is not a product (elementwise, reductions, updates) where it differs from [compute]",
    },
    "issue_costs": {
        "fadd": "time of one floating add, e.g. '6 cycles' or '4.2 us' (a figure)",
        "fmul": "time of one floating multiply (a figure)",
        "fdiv": "time of one floating divide (a figure)",
        "exp": "time of one exponential (library call) (a figure)",
        "load": "time of one load that hits the first level (a figure)",
        "store": "time of one store (a figure)",
        "loop": "loop overhead per inner iteration: index, compare, branch (a figure)",
    },
    "memory": {
        "capacity": "main-memory capacity, e.g. '80 GiB' (a figure)",
        "latency": "load-to-use latency of a main-memory access, e.g. '11 cycles' or '90 ns' (a figure)",
        "bandwidth": "peak main-memory bandwidth, e.g. '3.35 TB/s' or '8 B/cycle' (a figure)",
        "note": "free text",
    },
    "timing": {
        "model": "one of " + ", ".join(TIMING_MODELS),
        "vector_length": "vector: elements per vector register (a figure)",
        "memory_ports": "vector: words per clock between memory and vector registers (a figure)",
        "word_bytes": "vector: bytes per word",
        "subword_float": "vector: true if the machine has floating point narrower than its word (a 32-bit "
        "format); false: every element occupies a whole word (a figure: true or false with its source)",
        "startup": "vector: start-up cycles per vector instruction, e.g. 7 or '7 cycles' (a figure)",
        "chaining": "vector: true if a dependent vector instruction may start on partial results",
        "overlap": "overlapped: 'sum' or 'max' of the inter-level transfer times",
        "mlp": "overlapped: misses in flight to memory per core (a figure)",
        "cores": "overlapped: cores the peak counts, whose misses are in flight together (integer)",
        "dispatch": "table [timing.dispatch]: default = 'eager' | 'graph' | 'compiled', and per mode a table "
        "{ host_issue, device_gap, step_issue }: the host's time to issue one kernel, the device's gap "
        "between back-to-back kernels, the host's time per step (each a figure; default 0 s)",
        "note": "free text",
    },
    "schedule": {
        "family": "one of " + ", ".join(SCHEDULE_FAMILIES),
        "vector_length": "vector: strip length in elements",
        "vector_registers": "vector: vector registers available (0 for memory-to-memory machines)",
        "micro_tile": "blocked: register micro-tile [mr, nr] in elements",
        "kc": "blocked: depth of the L1 panel in elements",
        "mc": "blocked: rows of the L2 block in elements",
        "nc": "blocked: columns of the L3 block in elements",
        "tile_m": "tiled: rows of a tile in elements",
        "tile_n": "tiled: columns of a tile in elements",
        "tile_k": "tiled: depth of a tile in elements",
        "units": "tiled: SMs / TensorCores / cores running tiles concurrently",
        "staging": "tiled: name of the software-managed level tiles are staged in",
        "bytes_in_flight": "tiled, optional: bytes one unit keeps outstanding to memory, e.g. '6.45 kB' "
        "(a figure); caps a level's bandwidth at busy units x this / the level's latency",
        "note": "free text",
    },
}

# Parameters each timing model and schedule family needs, and what type each is.
TIMING_PARAMS: dict[str, tuple[str, ...]] = {
    "in_order": (),
    "vector": ("vector_length", "memory_ports", "word_bytes", "startup", "chaining", "subword_float"),
    "overlapped": ("overlap", "mlp", "cores"),
    "throughput": (),
}
SCHEDULE_PARAMS: dict[str, tuple[str, ...]] = {
    "scalar": (),
    "vector": ("vector_length", "vector_registers"),
    "blocked": ("micro_tile", "kc", "mc", "nc"),
    "tiled": ("tile_m", "tile_n", "tile_k", "units", "staging"),
}
# Order of trust, strongest first: a machine's summary status is its weakest headline figure.
STATUS_ORDER = ("verified", "measured", "secondary", "announced", "estimate")


@dataclass(frozen=True)
class TimingSpec:
    """Which timing model the machine uses, and its parameters (see docs/interfaces.md)."""

    model: str  # one of TIMING_MODELS
    params: Mapping[str, Any] = field(default_factory=dict)  # numbers in SI units (seconds, not "4 us")


@dataclass(frozen=True)
class ScheduleSpec:
    """How kernels are lowered to loops on this machine (see docs/interfaces.md)."""

    family: str  # one of SCHEDULE_FAMILIES
    params: Mapping[str, Any] = field(default_factory=dict)  # element counts, lists of ints, level names


@dataclass(frozen=True)
class DispatchMode:
    """One way of issuing a step's kernels (seconds; see docs/timing.md, "Dispatch")."""

    host_issue: float = 0.0  # host time to issue one kernel
    device_gap: float = 0.0  # device time between back-to-back kernels
    step_issue: float = 0.0  # host time once per step (a compiled program's launch)


@dataclass(frozen=True)
class DispatchSpec:
    """A profile's [timing.dispatch]: its default mode and the modes it states."""

    default: str  # one of DISPATCH_MODES
    modes: Mapping[str, DispatchMode]

    def mode(self, name: str) -> DispatchMode:
        """A mode's figures; a mode the profile does not state runs as the next one up
        (compiled -> graph -> eager): a machine without graph capture replays nothing."""
        order = DISPATCH_MODES[: DISPATCH_MODES.index(name) + 1][::-1]
        for candidate in order:
            if candidate in self.modes:
                return self.modes[candidate]
        return self.modes[self.default]


@dataclass(frozen=True)
class MainMemory:
    """Main memory as the cores see it."""

    capacity: int  # bytes
    latency: float  # seconds, load to use
    bandwidth: float  # bytes per second, peak


@dataclass(frozen=True)
class Machine:
    """One machine profile, loaded, checked and with its bases resolved."""

    id: str
    name: str
    vendor: str
    year: int
    kind: str  # one of KINDS
    clock_hz: float
    peak_flops: dict[str, float]  # dtype -> FLOP/s
    issue_costs: dict[str, float]  # operation -> seconds
    levels: tuple[LevelSpec, ...]  # first (nearest the core) first
    memory: MainMemory
    timing: TimingSpec
    schedule: ScheduleSpec
    primary_dtype: str
    provenance: dict[str, Figure] = field(default_factory=dict, compare=False, repr=False)
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    notes: str = ""
    base: str | None = None
    path: Path | None = None
    dispatch: DispatchSpec | None = None  # None: no per-kernel dispatch cost (a CPU's compiled loops)
    vector_flops: dict[str, float] = field(default_factory=dict)  # [compute.vector]: dtype -> FLOP/s

    @property
    def cache_levels(self) -> tuple[LevelSpec, ...]:
        """The levels the cache engine simulates: every level not managed by software."""
        return tuple(level for level in self.levels if not level.software_managed)

    def balance(self, dtype: str | None = None) -> float:
        """Peak FLOP/s of ``dtype`` (default: the primary dtype) per byte/s of main memory."""
        dtype = dtype or self.primary_dtype
        if dtype not in self.peak_flops:
            raise InputError(
                f"machine {self.id} has no {dtype} peak; it has {', '.join(self.peak_flops)}",
                field=f"compute.{dtype}",
            )
        return self.peak_flops[dtype] / self.memory.bandwidth

    def balances(self) -> dict[str, float]:
        return {dtype: self.balance(dtype) for dtype in self.peak_flops}

    def citation(self, fig: Figure) -> str | None:
        """A figure's source in full: a key of [sources] resolved, else the text as written."""
        if fig.source is None:
            return None
        return self.sources.get(fig.source, fig.source)

    @property
    def status(self) -> str:
        """The weakest status among the headline figures: clock, primary peak, memory bandwidth."""
        keys = ("clock", f"compute.{self.primary_dtype}", "memory.bandwidth")
        found = [self.provenance[k].status for k in keys if k in self.provenance and self.provenance[k].status]
        return max(found, key=STATUS_ORDER.index) if found else "estimate"

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for fig in self.provenance.values():
            if fig.status:
                counts[fig.status] = counts.get(fig.status, 0) + 1
        return {s: counts[s] for s in STATUS_ORDER if s in counts}

    def as_dict(self) -> dict[str, Any]:
        """Everything, JSON-able, with each figure's provenance and resolved citation."""

        def level_dict(lv: LevelSpec) -> dict[str, Any]:
            return {
                "name": lv.name, "size": lv.size, "line": lv.line, "ways": lv.ways, "sets": lv.sets,
                "policy": lv.policy, "write": lv.write, "inclusion": lv.inclusion,
                "latency": lv.latency, "bandwidth": lv.bandwidth,
                "software_managed": lv.software_managed, "shared_by": lv.shared_by,
            }

        return {
            "id": self.id, "name": self.name, "vendor": self.vendor, "year": self.year,
            "kind": self.kind, "clock_hz": self.clock_hz, "primary_dtype": self.primary_dtype,
            "peak_flops": dict(self.peak_flops), "issue_costs": dict(self.issue_costs),
            "levels": [level_dict(lv) for lv in self.levels],
            "memory": {"capacity": self.memory.capacity, "latency": self.memory.latency,
                       "bandwidth": self.memory.bandwidth},
            "memory_bandwidth": self.memory.bandwidth,
            "balance": self.balances(),
            "timing": {"model": self.timing.model, "params": dict(self.timing.params)},
            "dispatch": None if self.dispatch is None else {
                "default": self.dispatch.default,
                **{m: vars(d) for m, d in self.dispatch.modes.items()},
            },
            "vector_flops": dict(self.vector_flops),
            "schedule": {"family": self.schedule.family, "params": dict(self.schedule.params)},
            "status": self.status, "status_counts": self.status_counts(),
            "provenance": {
                key: {"value": fig.value, "source": fig.source, "citation": self.citation(fig),
                      "status": fig.status, "derivation": fig.derivation, "note": fig.note}
                for key, fig in self.provenance.items()
            },
            "sources": dict(self.sources), "notes": self.notes, "base": self.base,
            "path": str(self.path) if self.path else None,
        }


# ---------------------------------------------------------------------------------
# Loading


class _Problems:
    """Collects every problem of one file instead of stopping at the first."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.errors: list[InputError] = []

    def add(self, reason: str, field: str | None = None) -> None:
        self.errors.append(InputError(reason, file=self.file, field=field))

    def run(self, fn: Callable[[], Any], field: str | None = None) -> Any:
        """``fn()``, or None with its InputError recorded under ``field``."""
        try:
            return fn()
        except InputError as err:
            self.errors.append(err.within(file=self.file, field_prefix=field))
            return None


def _unknown_keys(problems: _Problems, table: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    for key in table:
        if key in allowed:
            continue
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; allowed: {', '.join(allowed)}"
        problems.add(f"unknown key '{key}'{hint}", f"{where}.{key}" if where else key)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _resolve_base(base: str, child: Path) -> Path:
    """A base names a shipped id, a sibling file's id, or a path to a .toml file."""
    if base.endswith(".toml") or "/" in base:
        candidate = (child.parent / base).resolve()
        if not candidate.is_file():
            raise InputError(f"base profile file {base!r} does not exist", field="base")
        return candidate
    sibling = child.parent / f"{base}.toml"
    if sibling.is_file():
        return sibling.resolve()
    shipped = _shipped_paths()
    if base in shipped:
        return shipped[base].resolve()
    close = difflib.get_close_matches(base, list(shipped), n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise InputError(f"base profile {base!r} does not exist{hint}", field="base")


def _merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Child over base: tables merge key by key, anything else (including [[level]]) replaces."""
    out = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not _is_figure(value):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _is_figure(value: dict[str, Any]) -> bool:
    return "value" in value


def _read_chain(path: Path, problems: _Problems) -> dict[str, Any] | None:
    """The file's table with its bases merged in, base first; None if it cannot be read."""
    chain: list[Path] = []
    tables: list[dict[str, Any]] = []
    current = path.resolve()
    while True:
        if current in chain:
            cycle = " -> ".join(p.name for p in [*chain, current])
            problems.add(f"cycle of base profiles: {cycle}", "base")
            return None
        chain.append(current)
        try:
            data = load_toml(current)
        except InputError as err:
            # The syntax error of a base is reported against that base's file and line.
            problems.errors.append(err if current != path.resolve() else err.within(file=problems.file))
            return None
        tables.append(data)
        base = data.get("base")
        if base is None:
            break
        if not isinstance(base, str) or not base:
            problems.add(f"base must be a profile id or a path, got {base!r}", "base")
            return None
        try:
            current = _resolve_base(base, current)
        except InputError as err:
            problems.errors.append(err.within(file=str(chain[-1]) if len(chain) > 1 else problems.file))
            return None
    merged: dict[str, Any] = {}
    for data in reversed(tables):
        merged = _merge(merged, data)
    own = tables[0]
    # Identity is never inherited: a variant is a different machine.
    for key in ("id", "name"):
        if key not in own:
            problems.add(f"missing required field '{key}' (identity is not inherited from a base)", key)
    merged["_own"] = own
    return merged


def _figure(problems: _Problems, raw: Any, key: str, parse: Callable[[Any], Any],
            provenance: dict[str, Figure], required: bool = True) -> Any:
    """Parse one figure, record its provenance, and check that the provenance is complete."""
    try:
        value, fig = split_figure(raw, key)
    except InputError as err:
        problems.errors.append(InputError(err.reason, file=problems.file, field=key))
        return None
    if fig is not None:
        provenance[key] = fig
    elif required:
        problems.add("needs its provenance: write { value = ..., source = ..., status = ... }", key)
    try:
        return parse(value)
    except InputError as err:
        problems.errors.append(InputError(err.reason, file=problems.file, field=key))
        return None


def _check_provenance(problems: _Problems, provenance: Mapping[str, Figure], sources: Mapping[str, str]) -> None:
    for key, fig in provenance.items():
        if not fig.source:
            problems.add("a figure needs 'source' (a citation, URL, or a key of [sources])", key)
        elif fig.source not in sources and " " not in fig.source and "://" not in fig.source:
            close = difflib.get_close_matches(fig.source, list(sources), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.add(f"source {fig.source!r} is not a key of [sources]{hint}", key)
        if not fig.status:
            problems.add(f"a figure needs 'status' ({', '.join(STATUSES)})", key)
        if fig.status == "estimate" and not fig.derivation:
            problems.add("an estimate needs its 'derivation'", key)


def _positive_int(value: Any, what: str, allow_zero: bool = False) -> int:
    if not _is_int(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{what} must be a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")
    return value


def _positive_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InputError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def _build(path: Path, problems: _Problems, sets: Mapping[str, str] | None = None) -> Machine | None:
    data = _read_chain(path, problems)
    if data is None:
        return None
    if sets:
        data = _apply_sets(data, sets, problems)
    own = data.pop("_own")
    _unknown_keys(problems, own, SCHEMA[""], "")
    for section in ("compute", "issue_costs", "memory", "timing", "schedule"):
        if section in own and not isinstance(own[section], dict):
            problems.add(f"'{section}' must be a table [{section}]", section)
    if "level" in own and not isinstance(own["level"], list):
        problems.add("'level' must be an array of tables [[level]]", "level")

    version = data.get("format_version")
    if version is None:
        problems.add(f"missing required field 'format_version' (write format_version = {FORMAT_VERSION})",
                     "format_version")
    elif version != FORMAT_VERSION:
        changes = "; ".join(f"{v}: {c}" for v, c in sorted(FORMAT_CHANGES.items()))
        problems.add(f"format_version {version!r} is not understood; this memwall reads {FORMAT_VERSION} "
                     f"(changes: {changes})", "format_version")

    sources = data.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        problems.add("[sources] must map keys to citation strings", "sources")
        sources = {}
    provenance: dict[str, Figure] = {}

    def text(key: str) -> str | None:
        value = data.get(key)
        if value is None:
            problems.add(f"missing required field '{key}'", key)
            return None
        if not isinstance(value, str) or not value.strip():
            problems.add(f"'{key}' must be a non-empty string, got {value!r}", key)
            return None
        return value

    ident, name, vendor = text("id"), text("name"), text("vendor")
    if ident is not None and (ident != ident.lower() or not all(c.isalnum() or c == "-" for c in ident)
                              or ident.startswith("-") or ident.endswith("-") or "--" in ident):
        problems.add(f"id {ident!r} must be lowercase kebab-case (letters, digits, single hyphens)", "id")
    year = None
    if "year" not in data:
        problems.add("missing required field 'year'", "year")
    else:
        year = _figure(problems, data["year"], "year", lambda v: _positive_int(v, "year"), provenance,
                       required=False)
    kind = data.get("kind")
    if kind is None:
        problems.add("missing required field 'kind'", "kind")
    elif kind not in KINDS:
        problems.add(f"unknown kind {kind!r}; one of {', '.join(KINDS)}", "kind")
        kind = None

    clock = None
    if "clock" not in data:
        problems.add("missing required field 'clock'", "clock")
    else:
        clock = _figure(problems, data["clock"], "clock", parse_frequency, provenance)

    peak: dict[str, float] = {}
    compute = data.get("compute")
    if not isinstance(compute, dict) or not compute:
        problems.add("missing required table [compute] with at least one dtype", "compute")
    else:
        _unknown_keys(problems, compute, (*DTYPES, "vector"), "compute")
        for dtype in DTYPES:
            if dtype in compute:
                rate = _figure(problems, compute[dtype], f"compute.{dtype}",
                               lambda v: parse_flop_rate(v, clock_hz=clock), provenance)
                if rate is not None:
                    peak[dtype] = rate

    vector_flops = _vector_rates(problems, compute, clock, provenance)

    issue: dict[str, float] = {}
    costs = data.get("issue_costs", {})
    if isinstance(costs, dict):
        _unknown_keys(problems, costs, ISSUE_OPS, "issue_costs")
        for op in ISSUE_OPS:
            if op in costs:
                seconds = _figure(problems, costs[op], f"issue_costs.{op}",
                                  lambda v: parse_time(v, clock_hz=clock, allow_zero=False), provenance)
                if seconds is not None:
                    issue[op] = seconds
    if kind == "scalar" and not {"fadd", "fmul"} <= set(issue):
        problems.add("a scalar machine needs issue_costs fadd and fmul", "issue_costs")

    levels: list[LevelSpec] = []
    if data.get("level"):
        parsed = problems.run(lambda: parse_levels(data["level"], clock_hz=clock, require_provenance=True))
        if parsed is not None:
            levels = parsed
            for level in levels:
                for key, fig in level.provenance.items():
                    provenance[f"level[{level.name}].{key}"] = fig

    memory = None
    mem = data.get("memory")
    if not isinstance(mem, dict):
        problems.add("missing required table [memory] (capacity, latency, bandwidth)", "memory")
    else:
        _unknown_keys(problems, mem, SCHEMA["memory"], "memory")
        parts = {}
        for key, parse in (("capacity", parse_bytes),
                           ("latency", lambda v: parse_time(v, clock_hz=clock, allow_zero=False)),
                           ("bandwidth", lambda v: parse_byte_rate(v, clock_hz=clock))):
            if key not in mem:
                problems.add(f"missing required field 'memory.{key}'", f"memory.{key}")
            else:
                parts[key] = _figure(problems, mem[key], f"memory.{key}", parse, provenance)
        if len(parts) == 3 and None not in parts.values():
            memory = MainMemory(**parts)

    timing = _timing(problems, data.get("timing"), kind, clock, provenance)
    dispatch = _dispatch(problems, data.get("timing"), clock, provenance)
    schedule = _schedule(problems, data.get("schedule"), levels, provenance)
    schedule = _bytes_in_flight(problems, data.get("schedule"), schedule, clock, provenance)
    if timing and schedule and "vector_length" in schedule.params and "vector_length" in timing.params:
        if schedule.params["vector_length"] > timing.params["vector_length"]:
            problems.add(f"schedule.vector_length {schedule.params['vector_length']} exceeds the machine's "
                         f"timing.vector_length {timing.params['vector_length']}", "schedule.vector_length")

    primary = data.get("primary_dtype")
    if primary is None:
        if kind == "vector" and "fp64" in peak:
            primary = "fp64"
        elif kind in ("gpu", "tpu", "wafer") and "bf16" in peak:
            primary = "bf16"
        elif "fp32" in peak:
            primary = "fp32"
        else:
            primary = next(iter(peak), None)
    elif primary not in peak:
        problems.add(f"primary_dtype {primary!r} has no peak in [compute] ({', '.join(peak) or 'none'})",
                     "primary_dtype")
    notes = own.get("notes", "")  # notes describe one file's machine: never inherited
    if not isinstance(notes, str):
        problems.add("notes must be a string", "notes")
        notes = ""

    _check_provenance(problems, provenance, sources)
    if problems.errors:
        return None
    assert ident and name and vendor and kind and clock and memory and timing and schedule and primary
    return Machine(
        id=ident, name=name, vendor=vendor, year=year, kind=kind, clock_hz=clock, peak_flops=peak,
        issue_costs=issue, levels=tuple(levels), memory=memory, timing=timing, schedule=schedule,
        primary_dtype=primary, provenance=provenance, sources=dict(sources), notes=notes,
        base=own.get("base"), path=path, dispatch=dispatch, vector_flops=vector_flops,
    )


def _timing(problems: _Problems, table: Any, kind: str | None, clock: float | None,
            provenance: dict[str, Figure]) -> TimingSpec | None:
    if not isinstance(table, dict):
        problems.add("missing required table [timing] with its 'model'", "timing")
        return None
    model = table.get("model")
    if model not in TIMING_MODELS:
        problems.add(f"unknown timing model {model!r}; one of {', '.join(TIMING_MODELS)}", "timing.model")
        return None
    if kind and model not in MODELS_FOR_KIND[kind]:
        problems.add(f"timing model {model!r} does not fit a {kind} machine; use "
                     f"{' or '.join(MODELS_FOR_KIND[kind])}", "timing.model")
    wanted = TIMING_PARAMS[model]
    own_tables = ("model", "note", "dispatch", "launch_overhead")  # the last two: see _dispatch
    _unknown_keys(problems, {k: v for k, v in table.items() if k not in own_tables}, wanted, "timing")
    parsers: dict[str, tuple[Callable[[Any], Any], bool]] = {
        "vector_length": (lambda v: _positive_int(v, "vector_length"), True),
        "memory_ports": (lambda v: _positive_number(v, "memory_ports"), True),
        "word_bytes": (lambda v: _positive_int(v, "word_bytes"), False),
        "startup": (lambda v: _cycles(v, clock), True),
        "chaining": (_boolean, False),
        "subword_float": (_boolean, True),
        "overlap": (_overlap, False),
        "mlp": (lambda v: _positive_number(v, "mlp"), True),
        "cores": (lambda v: _positive_int(v, "cores"), False),
    }
    params: dict[str, Any] = {}
    for key in wanted:
        if key not in table:
            problems.add(f"timing model {model!r} needs '{key}'", f"timing.{key}")
            continue
        parse, needs_provenance = parsers[key]
        value = _figure(problems, table[key], f"timing.{key}", parse, provenance, required=needs_provenance)
        if value is not None:
            params[key] = value
    return TimingSpec(model, params)


def _cycles(value: Any, clock: float | None) -> float:
    """Start-up in cycles: a number of cycles, '7 cycles', or a time converted with the clock."""
    if _is_int(value) or isinstance(value, float):
        if value < 0:
            raise InputError(f"startup must be non-negative, got {value!r}")
        return float(value)
    seconds = parse_time(value, clock_hz=clock)
    if clock is None:
        raise InputError("startup as a time needs the machine's clock")
    return seconds * clock


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"must be true or false, got {value!r}")
    return value


def _overlap(value: Any) -> str:
    if value not in ("sum", "max"):
        raise InputError(f"overlap must be 'sum' or 'max', got {value!r}")
    return value


def _schedule(problems: _Problems, table: Any, levels: list[LevelSpec],
              provenance: dict[str, Figure]) -> ScheduleSpec | None:
    if not isinstance(table, dict):
        problems.add("missing required table [schedule] with its 'family'", "schedule")
        return None
    family = table.get("family")
    if family not in SCHEDULE_FAMILIES:
        problems.add(f"unknown schedule family {family!r}; one of {', '.join(SCHEDULE_FAMILIES)}",
                     "schedule.family")
        return None
    wanted = SCHEDULE_PARAMS[family]
    own_keys = ("family", "note", "bytes_in_flight")  # bytes_in_flight: see _bytes_in_flight
    _unknown_keys(problems, {k: v for k, v in table.items() if k not in own_keys}, wanted, "schedule")

    def micro_tile(v: Any) -> list[int]:
        if not (isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x > 0 for x in v)):
            raise InputError(f"micro_tile must be [mr, nr], two positive integers, got {v!r}")
        return list(v)

    def staging(v: Any) -> str:
        names = {lv.name: lv for lv in levels}
        if v not in names:
            raise InputError(f"staging names level {v!r}, which is not one of this machine's levels "
                             f"({', '.join(names) or 'none'})")
        if not names[v].software_managed:
            raise InputError(f"staging level {v!r} must be software_managed (a scratchpad)")
        return v

    params: dict[str, Any] = {}
    for key in wanted:
        if key not in table:
            problems.add(f"schedule family {family!r} needs '{key}'", f"schedule.{key}")
            continue
        if key == "micro_tile":
            parse: Callable[[Any], Any] = micro_tile
        elif key == "staging":
            parse = staging
        elif key == "vector_registers":
            parse = lambda v: _positive_int(v, "vector_registers", allow_zero=True)  # noqa: E731
        else:
            parse = lambda v, k=key: _positive_int(v, k)  # noqa: E731
        value = _figure(problems, table[key], f"schedule.{key}", parse, provenance, required=False)
        if value is not None:
            params[key] = value
    return ScheduleSpec(family, params)


def _vector_rates(problems: _Problems, compute: Any, clock: float | None,
                  provenance: dict[str, Figure]) -> dict[str, float]:
    """[compute.vector]: the vector units' rate per dtype, for kernels that are not products."""
    table = compute.get("vector") if isinstance(compute, dict) else None
    if table is None:
        return {}
    if not isinstance(table, dict) or _is_figure(table):
        problems.add("'compute.vector' must be a table [compute.vector] of dtype = rate", "compute.vector")
        return {}
    _unknown_keys(problems, table, DTYPES, "compute.vector")
    rates: dict[str, float] = {}
    for dtype in DTYPES:
        if dtype in table:
            rate = _figure(problems, table[dtype], f"compute.vector.{dtype}",
                           lambda v: parse_flop_rate(v, clock_hz=clock), provenance)
            if rate is not None:
                rates[dtype] = rate
    return rates


DISPATCH_KEYS = ("host_issue", "device_gap", "step_issue")


def _dispatch(problems: _Problems, timing: Any, clock: float | None,
              provenance: dict[str, Figure]) -> DispatchSpec | None:
    """[timing.dispatch]: the default mode and each stated mode's per-kernel and per-step costs."""
    if not isinstance(timing, dict):
        return None
    if "launch_overhead" in timing:
        # A flat charge per kernel has no faithful translation into the asynchronous
        # pipeline (is it the host's cost or the device's?), so it is refused, not guessed.
        problems.add("launch_overhead is no longer read: state [timing.dispatch] instead, with "
                     "default = 'eager' and eager = { host_issue = ..., device_gap = ... } (and graph, "
                     "compiled); see docs/timing.md, 'Dispatch'", "timing.launch_overhead")
    table = timing.get("dispatch")
    if table is None:
        return None
    if not isinstance(table, dict):
        problems.add("'timing.dispatch' must be a table [timing.dispatch]", "timing.dispatch")
        return None
    _unknown_keys(problems, table, ("default", *DISPATCH_MODES), "timing.dispatch")
    modes: dict[str, DispatchMode] = {}
    for name in DISPATCH_MODES:
        mode = table.get(name)
        if mode is None:
            continue
        where = f"timing.dispatch.{name}"
        if not isinstance(mode, dict) or _is_figure(mode):
            problems.add(f"'{where}' must be a table {{ host_issue = ..., device_gap = ... }}", where)
            continue
        _unknown_keys(problems, mode, DISPATCH_KEYS, where)
        values = {}
        for key in DISPATCH_KEYS:
            if key in mode:
                seconds = _figure(problems, mode[key], f"{where}.{key}",
                                  lambda v: parse_time(v, clock_hz=clock), provenance)
                if seconds is not None:
                    values[key] = seconds
        modes[name] = DispatchMode(**values)
    default = table.get("default")
    if default not in DISPATCH_MODES:
        problems.add(f"timing.dispatch needs default = one of {', '.join(DISPATCH_MODES)}, got {default!r}",
                     "timing.dispatch.default")
        return None
    if default not in modes:
        problems.add(f"the default dispatch mode {default!r} is not stated in [timing.dispatch.{default}]",
                     "timing.dispatch.default")
        return None
    return DispatchSpec(default, modes)


def _bytes_in_flight(problems: _Problems, table: Any, schedule: ScheduleSpec | None, clock: float | None,
                     provenance: dict[str, Figure]) -> ScheduleSpec | None:
    """[schedule] bytes_in_flight (tiled only): bytes one unit keeps outstanding, for the
    Little's-law cap on a level's bandwidth (docs/timing.md, ``throughput``)."""
    if schedule is None or not isinstance(table, dict) or "bytes_in_flight" not in table:
        return schedule
    if schedule.family != "tiled":
        problems.add("bytes_in_flight belongs to a tiled schedule (cores' misses in flight are "
                     "timing.mlp)", "schedule.bytes_in_flight")
        return schedule
    value = _figure(problems, table["bytes_in_flight"], "schedule.bytes_in_flight", _mean_bytes, provenance)
    if value is None:
        return schedule
    if value <= 0:
        problems.add(f"bytes_in_flight must be positive, got {value!r}", "schedule.bytes_in_flight")
        return schedule
    return ScheduleSpec(schedule.family, {**schedule.params, "bytes_in_flight": float(value)})


def _apply_sets(data: dict[str, Any], sets: Mapping[str, str], problems: _Problems) -> dict[str, Any]:
    """The merged profile with each ``FIELD=VALUE`` of ``memwall inspect --set`` applied.

    FIELD is a dotted path (``memory.bandwidth``, ``timing.dispatch.eager.host_issue``,
    ``level.L2.bandwidth``); VALUE is read as a TOML value, else as a string, and then goes
    through the same checks as the file's own figure. A figure keeps its provenance, with
    a note that says it was changed."""
    import copy
    import tomllib

    data = copy.deepcopy(data)
    for dotted, text in sets.items():
        try:
            value: Any = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        keys = dotted.split(".")
        table: Any = data
        for i, key in enumerate(keys[:-1]):
            if isinstance(table, list):  # [[level]]: by name
                table = next((t for t in table if isinstance(t, dict) and t.get("name") == key), None)
            else:
                table = table.setdefault(key, {}) if isinstance(table, dict) else None
            if not isinstance(table, dict | list):
                problems.add(f"--set {dotted}: '{'.'.join(keys[: i + 1])}' is not a table of this profile",
                             dotted)
                break
        else:
            if not isinstance(table, dict):
                problems.add(f"--set {dotted}: not a field of this profile", dotted)
                continue
            old = table.get(keys[-1])
            if isinstance(old, dict) and _is_figure(old):
                table[keys[-1]] = {**old, "value": value, "note": f"what-if: set to {text!r} by --set"}
            else:
                table[keys[-1]] = value
    return data


def _mean_bytes(value: Any) -> float:
    """A size that may be fractional ('23.3 B'): bytes in flight are an average, not a buffer."""
    from .units import _byte_multiplier, _split

    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    number, unit = _split(value, "size")
    if not unit:
        raise InputError(f"{value!r}: a size needs a unit (for example '6.45 kB')")
    return number * _byte_multiplier(unit, value)


def _check_file(path: str | Path, sets: Mapping[str, str] | None = None) -> tuple[Machine | None, list[InputError]]:
    path = Path(path)
    problems = _Problems(str(path))
    machine = _build(path, problems, sets)
    return machine, problems.errors


def load_machine_file(path: str | Path, sets: Mapping[str, str] | None = None) -> Machine:
    """Load and check one profile file (and its bases), with ``sets`` (FIELD -> VALUE, as
    ``memwall inspect --set``) applied. Raises the first problem found."""
    machine, errors = _check_file(path, sets)
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more; run 'memwall machines validate')" if len(errors) > 1 else ""
        raise InputError(first.reason + more, file=first.file, line=first.line, field=first.field)
    assert machine is not None
    return machine


def validate_paths(paths: Iterable[str | Path]) -> list[InputError]:
    """Every problem of every file, in file order (an empty list: all valid)."""
    errors: list[InputError] = []
    for path in paths:
        errors.extend(_check_file(path)[1])
    return errors


# ---------------------------------------------------------------------------------
# The catalogue


def _shipped_paths() -> dict[str, Path]:
    from .data import data_files

    return {p.stem: p for p in data_files("machines")}


def machine_ids() -> list[str]:
    """Ids of the shipped machines, sorted."""
    return sorted(_shipped_paths())


def load_machine(id_or_path: str | Path, sets: Mapping[str, str] | None = None) -> Machine:
    """A shipped machine by id, or any profile file by path (``sets``: see :func:`load_machine_file`)."""
    text = str(id_or_path)
    shipped = _shipped_paths()
    if text in shipped:
        return load_machine_file(shipped[text], sets)
    if text.endswith(".toml") or Path(text).is_file():
        return load_machine_file(text, sets)
    close = difflib.get_close_matches(text, list(shipped), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see 'memwall machines list'"
    raise InputError(f"no machine {text!r}{hint}")


def all_machines() -> list[Machine]:
    """Every shipped machine, sorted by year, then id."""
    return sorted((load_machine_file(p) for p in _shipped_paths().values()), key=lambda m: (m.year, m.id))
