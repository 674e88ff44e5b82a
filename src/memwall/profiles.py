"""Machine profiles: loading, checking and inheriting the TOML files of era_data/machines.

Owns: :class:`Machine` and its parts (:class:`MainMemory`, :class:`TimingSpec`,
:class:`ScheduleSpec`), the declaration of a profile's fields (:data:`PROFILE`, read by
the loader, ``memwall machines validate`` and the generated docs), the loader with
inheritance (``base = "h100-sxm"``), the plausibility warnings, and the catalogue of
shipped machines.

A profile is refused, with file, line, field and reason, for anything the loader does
not understand: unknown or misspelled keys, wrong types or units, numbers that are not
finite or out of range, a figure without its provenance, a level whose size is not sets
x ways x line, an unknown policy, timing model or schedule family, a missing base or a
cycle of bases. :func:`validate_paths` reports every problem of every file, not only
the first; :func:`check_file` adds the warnings (figures that are legal but implausible).
``--set`` figures (:func:`load_machine`'s ``sets``) pass the same checks, and a problem of
one names ``--set FIELD``, not the profile's file and line.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, RetiredField, real_first
from .frameworks import Framework, framework_for, framework_ids
from .interconnect import Interconnect, Link
from .levels import ENERGY_PER_BYTE, LEVEL, Figure, LevelSpec, energy_per_byte, levels_from
from .plausibility import plausibility, structure
from .schema import Field, Problems, Table, check_provenance, read_toml, walk
from .units import (
    parse_byte_rate,
    parse_bytes,
    parse_energy,
    parse_flop_rate,
    parse_frequency,
    parse_power,
    parse_time,
)
from .vocabulary import DISPATCH_MODES
from .vocabulary import DTYPES as STEP_DTYPES

FORMAT_VERSION = 1
# What changed in each format version, printed when a file names another version.
FORMAT_CHANGES = {1: "first format"}

TIMING_MODELS = ("in_order", "vector", "overlapped", "throughput")
SCHEDULE_FAMILIES = ("scalar", "vector", "blocked", "tiled")
KINDS = ("vector", "scalar", "superscalar", "gpu", "tpu", "wafer", "array")
# fp6 and fp4: the element rates of the block-scaled formats (memwall.vocabulary.BLOCK_FORMATS)
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4")
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
# Order of trust, strongest first: a machine's summary status is its weakest headline figure.
STATUS_ORDER = ("verified", "measured", "secondary", "announced", "estimate")


# ---- unit parsers: (value, context) -> SI; per-cycle forms use the clock read first ------
def _frequency(value: Any, context: dict[str, Any]) -> float:
    return parse_frequency(value)


def _flop_rate(value: Any, context: dict[str, Any]) -> float:
    return parse_flop_rate(value, clock_hz=context.get("clock_hz"))


def _op_time(value: Any, context: dict[str, Any]) -> float:
    return parse_time(value, clock_hz=context.get("clock_hz"), allow_zero=False)


def _time(value: Any, context: dict[str, Any]) -> float:
    return parse_time(value, clock_hz=context.get("clock_hz"))


def _bytes(value: Any, context: dict[str, Any]) -> int:
    return parse_bytes(value)


def _byte_rate(value: Any, context: dict[str, Any]) -> float:
    return parse_byte_rate(value, clock_hz=context.get("clock_hz"))


def _cycles(value: Any, context: dict[str, Any]) -> float:
    """Start-up in cycles: a number of cycles, '7 cycles', or a time converted with the clock."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise InputError(f"must be a non-negative number of cycles, got {value!r}")
        return float(value)
    clock = context.get("clock_hz")
    seconds = parse_time(value, clock_hz=clock)
    if clock is None:
        raise InputError("startup as a time needs the machine's clock")
    return seconds * clock


def check_id(value: str) -> str:
    """``value`` if it is a valid profile id (lowercase kebab-case), else an InputError."""
    if (value != value.lower() or not all(c.isalnum() or c == "-" for c in value) or value.startswith("-")
            or value.endswith("-") or "--" in value):
        raise InputError(f"id {value!r} must be lowercase kebab-case (letters, digits, single hyphens)")
    return value


def _kebab(value: str, context: dict[str, Any]) -> str:
    return check_id(value)


def _format_version(value: int, context: dict[str, Any]) -> int:
    if value != FORMAT_VERSION:
        changes = "; ".join(f"{v}: {c}" for v, c in sorted(FORMAT_CHANGES.items()))
        raise InputError(f"format_version {value!r} is not understood; this memwall reads {FORMAT_VERSION} "
                         f"(changes: {changes})")
    return value


def _mean_bytes(value: Any, context: dict[str, Any]) -> float:
    """A size that may be fractional ('23.3 B'): bytes in flight are an average, not a buffer."""
    from .units import _byte_multiplier, _split

    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    number, unit = _split(value, "size")
    if not unit:
        raise InputError(f"{value!r}: a size needs a unit (for example '6.45 kB')")
    total = number * _byte_multiplier(unit, value)
    if not total > 0:
        raise InputError(f"must be positive, got {value!r}")
    return total


def _no_launch_overhead(value: Any, context: dict[str, Any]) -> Any:
    # A flat charge per kernel has no faithful translation into the asynchronous pipeline
    # (is it the host's cost or the device's?), so it is refused, not guessed.
    raise RetiredField("launch_overhead is no longer read: state [timing.dispatch] instead, with default = "
                     "'eager' and eager = { host_issue = ..., device_gap = ... } (and graph, compiled); see "
                     "docs/timing.md, 'Dispatch'")


def _curve(value: Any, context: dict[str, Any]) -> list[list[float]]:
    """[[dimension, fraction], ...]: dimensions whole and >= 1, increasing; fractions in (0, 1]."""
    pairs = list(value) if isinstance(value, list | tuple) else None
    if not pairs or any(not isinstance(p, list | tuple) or len(p) != 2 for p in pairs):
        raise InputError(f"expected [[dimension, fraction], ...], got {value!r}")
    out = [[float(d), float(f)] for d, f in pairs]
    if any(d < 1 or d != int(d) or not 0 < f <= 1 for d, f in out):
        raise InputError(f"dimensions must be whole numbers >= 1 and fractions in (0, 1], got {value!r}")
    if any(a[0] >= b[0] for a, b in zip(out, out[1:], strict=False)):
        raise InputError(f"dimensions must increase, got {value!r}")
    return out


def _by_dtype(name: str, one: Callable[[Any], Any]) -> Callable[[Any, dict[str, Any]], Any]:
    """A parser for a schedule figure given once or as a table by dtype (``default`` for
    the others): ``one`` parses each value; a table naming an unknown dtype is refused
    with the closest name."""
    def parse(value: Any, context: dict[str, Any]) -> Any:
        if not isinstance(value, dict):
            return one(value)
        unknown = [k for k in value if k != "default" and k not in STEP_DTYPES]
        if unknown:
            close = difflib.get_close_matches(unknown[0], [*STEP_DTYPES, "default"], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; one of default, {', '.join(STEP_DTYPES)}"
            raise InputError(f"{name} names an unknown dtype {unknown[0]!r}{hint}")
        return {k: one(v) for k, v in value.items()}
    return parse


def _shapes(v: Any) -> list[list[int]]:
    """[[tile_m, tile_n], ...] of positive integers."""
    pairs = list(v) if isinstance(v, list | tuple) else None
    if not pairs or any(not isinstance(p, list | tuple) or len(p) != 2 or not all(isinstance(x, int)
                        and not isinstance(x, bool) and 0 < x <= MAX_TILE for x in p) for p in pairs):
        raise InputError(f"tile_shapes must be [[tile_m, tile_n], ...] of positive integers, got {v!r}")
    return [list(p) for p in pairs]


def _units(v: Any) -> int:
    """Units one L2 read feeds: a whole number from 1 to 16."""
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 16:
        raise InputError(f"multicast must be a whole number of units from 1 to 16, got {v!r}")
    return v


_tile_shapes = _by_dtype("tile_shapes", _shapes)
_multicast = _by_dtype("multicast", _units)


def _pair(value: tuple[int, ...], context: dict[str, Any]) -> list[int]:
    if len(value) != 2:
        raise InputError(f"micro_tile must be [mr, nr], two positive integers, got {list(value)!r}")
    return list(value)


# ---- the declaration ------------------------------------------------------------------
_RATE = "rate (`'19.5 TFLOP/s'`, `'2 FLOP/cycle'`)"
_OP = "time (`'6 cycles'`, `'4.2 us'`)"
_VECTOR, _OVERLAPPED, _THROUGHPUT = ("model", ("vector",)), ("model", ("overlapped",)), ("model", ("throughput",))

def _rates_table(name: str, what: str, doc: str) -> Table:
    """A table of FLOP/s by dtype, every dtype optional, each a sourced figure."""
    return Table(name, tuple(Field(dtype, "any", what.format(dtype=dtype), parse=_flop_rate, unit=_RATE,
                                   figure="required") for dtype in DTYPES), doc=doc)


COMPUTE_VECTOR = _rates_table(
    "[compute.vector]", "{dtype} FLOP/s of the vector (SIMT/SIMD) units",
    "The vector units' rates, for every kernel that is not a product (elementwise, reductions, updates), "
    "where they differ from [compute].")

COMPUTE_ACHIEVABLE = _rates_table(
    "[compute.achievable]", "the highest {dtype} rate a matrix product was measured to reach",
    "Measured ceilings of the matrix products, where a microbenchmark found the datasheet peak out of "
    "reach (a chip at its power limit holds a clock below the one its peak is quoted at): the best rate "
    "of a search over product shapes, such as Bekman's maximum achievable matmul FLOPS. Products run "
    "at min(peak, achievable); each figure at most its dtype's [compute] peak.")

COMPUTE_SUSTAINED = _rates_table(
    "[compute.sustained]", "the {dtype} rate a matrix product holds at the power-saturated clock",
    "Measured ceilings of the matrix products once the chip has settled at its power limit: the best "
    "rate of a shape search after a thermal soak, such as Bekman's maximum sustainable matmul FLOPS "
    "(MSMF), where [compute.achievable] is the boost-clock burst (MAMF). A held run (a training step, "
    "or any run with --power held) keeps the device at that limit, so its products run at min(peak, "
    "achievable, sustained); a burst at min(peak, achievable). Each figure at most its dtype's achievable ceiling, "
    "else its peak.")

COMPUTE = Table("[compute]", (
    *(Field(dtype, "any", f"peak dense {dtype} {'OP/s' if dtype.startswith('int') else 'FLOP/s'}",
            parse=_flop_rate, unit=_RATE, figure="required") for dtype in DTYPES),
    Field("vector", "table", "the vector units' rates where they differ (non-product kernels)",
          table=COMPUTE_VECTOR),
    Field("achievable", "table", "measured ceilings of the matrix products below their peak",
          table=COMPUTE_ACHIEVABLE),
    Field("sustained", "table", "measured ceilings of the matrix products at the power-saturated clock",
          table=COMPUTE_SUSTAINED),
), doc="Peak dense FLOP/s per dtype of the matrix products, at least one. No sparsity. Where a vector unit "
       "runs a dtype at another rate, state it in [compute.vector]; where a measured product never "
       "reaches the peak, its ceiling in [compute.achievable].")

ISSUE_COSTS = Table("[issue_costs]", (
    Field("fadd", "any", "one floating add", parse=_op_time, unit=_OP, figure="required"),
    Field("fmul", "any", "one floating multiply", parse=_op_time, unit=_OP, figure="required"),
    Field("fdiv", "any", "one floating divide", parse=_op_time, unit=_OP, figure="required"),
    Field("exp", "any", "one exponential (library call)", parse=_op_time, unit=_OP, figure="required"),
    Field("load", "any", "one load that hits the first level", parse=_op_time, unit=_OP, figure="required"),
    Field("store", "any", "one store", parse=_op_time, unit=_OP, figure="required"),
    Field("loop", "any", "loop overhead per inner iteration: index, compare, branch", parse=_op_time, unit=_OP,
          figure="required"),
), doc="Time per operation of a scalar machine, stored in seconds; `fadd` and `fmul` are required for "
       "`kind = \"scalar\"`.")

def _energy_per_flop(value: Any, context: dict[str, Any]) -> float:
    return parse_energy(value, "FLOP")


def _energy_per_bit(value: Any, context: dict[str, Any]) -> float:
    return parse_energy(value, "bit")


def _power(value: Any, context: dict[str, Any]) -> float:
    return parse_power(value)


def _positive_power(value: Any, context: dict[str, Any]) -> float:
    return parse_power(value, allow_zero=False)


_PJ_FLOP = "energy per FLOP (`'0.4 pJ/FLOP'`; integer dtypes per operation)"
_W = "power (`'700 W'`, `'115 kW'`)"
ENERGY_VECTOR = Table("[energy.vector]", tuple(
    Field(dtype, "any", f"energy of one {dtype} operation in the vector (SIMT/SIMD) units", parse=_energy_per_flop,
          unit=_PJ_FLOP, figure="required")
    for dtype in DTYPES
), doc="The vector units' energy per operation, for every kernel that is not a product, where it differs "
       "from [energy].")
ENERGY = Table("[energy]", (
    Field("tdp", "any", "the device's rated power (a board's TDP; an old machine's rated power): a step whose "
          "average power is above it is warned", required=True, parse=_positive_power, unit=_W, figure="required"),
    Field("static", "any", "power the device and its memory draw idle (leakage, clocks, refresh; logic whose "
          "power does not follow its activity), charged for every second of the step", required=True,
          parse=_power, unit=_W, figure="required"),
    Field("host", "any", "power of the host's share per device while it issues kernels (an accelerator's host "
          "CPUs); absent: not counted", parse=_power, unit=_W, figure="required"),
    Field("fabric", "any", "energy per byte main memory moves that no array figure prices: the on-chip network "
          "between memory, the last level and the cores, and the clocking of the active chip; derived from a "
          "streaming kernel's measured board power, less the static power, the stream's arithmetic and the "
          "memory's and levels' own figures (docs/energy.md); absent: not counted", parse=energy_per_byte,
          unit=ENERGY_PER_BYTE, figure="required"),
    *(Field(dtype, "any", f"energy of one {dtype} {'operation' if dtype.startswith('int') else 'FLOP'} in the "
            "matrix units (arithmetic only: operands are charged at the levels they move through)",
            parse=_energy_per_flop, unit=_PJ_FLOP, figure="required") for dtype in DTYPES),
    Field("vector", "table", "the vector units' energy per operation where it differs (non-product kernels)",
          table=ENERGY_VECTOR),
    Field("note", "str", "free text"),
), doc="Energy per operation and power, for the energy table of every result (docs/energy.md). Per byte "
       "figures are `energy` on each [[level]], on [memory] and on each [interconnect] link. A profile "
       "without [energy] runs, with `energy` null.")

MEMORY = Table("[memory]", (
    Field("capacity", "any", "main-memory capacity", required=True, parse=_bytes, unit="size (`'80 GiB'`)",
          figure="required"),
    Field("latency", "any", "load-to-use latency of a main-memory access", required=True, parse=_op_time,
          unit="time (`'11 cycles'`, `'90 ns'`)", figure="required"),
    Field("bandwidth", "any", "peak main-memory bandwidth (the datasheet's)", required=True, parse=_byte_rate,
          unit="rate (`'3.35 TB/s'`, `'8 B/cycle'`)", figure="required"),
    Field("sustained", "any", "the bandwidth a streaming kernel is measured to sustain (STREAM, BabelStream, "
          "gpu-benches), at most the peak; the timing uses it in place of the peak (docs/timing.md, 'Sustained "
          "bandwidth'); absent: the peak", parse=_byte_rate, unit="rate (`'3.89 TB/s'`)", figure="required"),
    Field("sustained_read", "any", "the bandwidth a read-only streaming kernel is measured to sustain, at most "
          "the peak: the rate of a kernel that only reads main memory (docs/timing.md, 'Sustained bandwidth'); "
          "absent: sustained", parse=_byte_rate, unit="rate (`'1.73 TB/s'`)", figure="required"),
    Field("sustained_copy", "any", "the bandwidth a streaming kernel that reads and writes equal bytes (STREAM's "
          "copy or scale) is measured to sustain, at most the peak: DRAM turns its bus around between reads and "
          "writes, so a mixed stream sustains less than either alone; absent: between sustained_read and "
          "sustained", parse=_byte_rate, unit="rate (`'802 GB/s'`)", figure="required"),
    Field("energy", "any", "energy per byte moved between main memory and the last level (the DRAM's "
          "access and its I/O)", parse=energy_per_byte, unit=ENERGY_PER_BYTE, figure="required"),
    Field("note", "str", "free text"),
), doc="Main memory as the cores see it.")

_T = "time (`'2.5 us'`, `'300 cycles'`)"
DISPATCH_MODE = Table("[timing.dispatch.<mode>]", (
    Field("host_issue", "any", "host time to issue one kernel", parse=_time, unit=_T, figure="required",
          default=0.0),
    Field("device_gap", "any", "device time between back-to-back kernels", parse=_time, unit=_T,
          figure="required", default=0.0),
    Field("step_issue", "any", "host time once per step (a compiled program's launch)", parse=_time, unit=_T,
          figure="required", default=0.0),
), doc="One way of issuing a step's kernels (docs/timing.md, 'Dispatch').")
DISPATCH = Table("[timing.dispatch]", (
    Field("default", "word", "the mode a case runs in unless told (`--dispatch`)", required=True,
          choices=DISPATCH_MODES, noun="dispatch mode"),
    *(Field(mode, "table", f"the costs of {mode} dispatch", table=DISPATCH_MODE) for mode in DISPATCH_MODES),
), doc="A mode the profile does not state runs as the next one up (compiled -> graph -> eager).")

TIMING = Table("[timing]", (
    Field("model", "word", "the timing model. Models allowed per kind: scalar in_order; vector vector; "
          "superscalar overlapped or in_order; gpu/tpu/wafer/array throughput", required=True,
          choices=TIMING_MODELS, noun="timing model"),
    Field("vector_length", "int", "elements per vector register", required=True, minimum=1, figure="required",
          when=_VECTOR),
    Field("memory_ports", "number", "words per clock between memory and vector registers (Cray-1 1, X-MP 3)",
          required=True, above=0, figure="required", when=_VECTOR),
    Field("word_bytes", "int", "bytes per word", required=True, minimum=1, figure="optional", when=_VECTOR),
    Field("startup", "any", "start-up cycles per vector instruction", required=True, parse=_cycles,
          unit="cycles (`7`, `'7 cycles'`) or a time", figure="required", when=_VECTOR),
    Field("chaining", "bool", "true if a dependent vector instruction may start on partial results",
          required=True, figure="optional", when=_VECTOR),
    Field("overlap", "word", "how the inter-level transfer times combine", required=True, choices=("sum", "max"),
          noun="overlap", figure="optional", when=_OVERLAPPED),
    Field("mlp", "number", "misses in flight to memory per core", required=True, above=0, figure="required",
          when=_OVERLAPPED),
    Field("cores", "int", "cores the peak counts, whose misses are in flight together (a level serves at most "
          "mlp x cores fetches per latency)", required=True, minimum=1, figure="optional", when=_OVERLAPPED),
    Field("outer_product", "any", "time per output element of a K = 1 product (column @ row) where the library "
          "runs it outside its BLAS, as numpy.matmul does; unstated: such products run as any other",
          parse=_time, unit=_T, figure="required", when=_OVERLAPPED),
    Field("efficiency_mn", "any", "fraction of the peak a product reaches by its smaller of M and N, "
          "[[dimension, fraction], ...], interpolated in log2(dimension); unstated: 1", parse=_curve,
          unit="pairs", figure="required", when=_OVERLAPPED),
    Field("efficiency_k", "any", "the same by K (the batch of a weight-gradient product)", parse=_curve,
          unit="pairs", figure="required", when=_OVERLAPPED),
    Field("banks", "int", "memory banks the words are interleaved over; a stride sharing a factor g with "
          "them visits banks / g of them (docs/timing.md, 'vector'); unstated: no bank conflicts",
          minimum=1, figure="required", when=_VECTOR),
    Field("bank_busy", "any", "cycles a bank stays busy after a reference (the bank cycle)", parse=_cycles,
          unit="cycles (`4`, `'4 cycles'`) or a time", figure="required", when=_VECTOR),
    Field("strip_loop", "any", "scalar cycles of the strip-mined loop per iteration (address updates, vector "
          "length, branch); unstated: 0", parse=_cycles, unit="cycles (`15`) or a time", figure="required",
          when=_VECTOR),
    Field("vector_bytes", "int", "bytes of the widest FP register one instruction (arithmetic, load or store) "
          "works on: 16 SSE, 32 AVX2, 64 AVX-512 or 512-bit SVE; 0: one element (x87)", minimum=0,
          figure="required", when=_OVERLAPPED),
    Field("multiply_add_cycles", "number", "cycles of one core's FP issue a multiply-add of vector_bytes "
          "takes (an FMA pipe 1, two FMA pipes 0.5, x87 FMUL + FADD on one port 3); unstated: at the peak",
          above=0, figure="required", when=_OVERLAPPED),
    Field("load_ports", "number", "loads one core issues per cycle, each up to vector_bytes; unstated: the "
          "first level's ports are not a limit", above=0, figure="required", when=_OVERLAPPED),
    Field("store_ports", "number", "stores one core issues per cycle; unstated: as load_ports", above=0,
          figure="required", when=_OVERLAPPED),
    Field("subword_float", "bool", "true if the machine has floating point narrower than its word (a 32-bit "
          "format); false: every element moves as a whole word", required=True, figure="required", when=_VECTOR),
    Field("dispatch", "table", "how kernels are issued: the default mode and each mode's costs",
          table=DISPATCH),
    Field("framework", "word", "the framework or runtime a case runs with unless told (`--framework`; "
          "era_data/frameworks/<id>.toml); unstated: hand-written, the kernels alone", choices=framework_ids(),
          noun="framework"),
    Field("launch_overhead", "any", "refused: the flat per-kernel charge of format 1's first release; write "
          "[timing.dispatch]", parse=_no_launch_overhead),
    Field("note", "str", "free text"),
), doc="The timing model and its parameters (each applies to one model).")

_BLOCKED, _TILED = ("family", ("blocked",)), ("family", ("tiled",))
# Bounds the loop nests can index (element counts are 64-bit products of these): far
# above any machine's (a tile side of 256, a million cores on a wafer), so only a typing
# error meets them.
MAX_TILE = 1 << 20
MAX_UNITS = 1 << 32
SCHEDULE = Table("[schedule]", (
    Field("family", "word", "how kernels are lowered to loops", required=True, choices=SCHEDULE_FAMILIES,
          noun="schedule family"),
    Field("vector_length", "int", "strip length in elements", required=True, minimum=1, figure="optional",
          when=("family", ("vector",))),
    Field("vector_registers", "int", "vector registers available (0 for memory-to-memory machines)",
          required=True, minimum=0, figure="optional", when=("family", ("vector",))),
    Field("micro_tile", "ints", "register micro-tile `[mr, nr]` in elements", required=True, parse=_pair,
          figure="optional", when=_BLOCKED),
    Field("kc", "int", "depth of the L1 panel in elements", required=True, minimum=1, maximum=MAX_TILE, figure="optional",
          when=_BLOCKED),
    Field("mc", "int", "rows of the L2 block in elements", required=True, minimum=1, maximum=MAX_TILE, figure="optional",
          when=_BLOCKED),
    Field("nc", "int", "columns of the L3 block in elements", required=True, minimum=1, maximum=MAX_TILE, figure="optional",
          when=_BLOCKED),
    Field("tile_m", "int", "rows of a tile in elements", required=True, minimum=1, maximum=MAX_TILE, figure="optional", when=_TILED),
    Field("tile_n", "int", "columns of a tile in elements", required=True, minimum=1, maximum=MAX_TILE, figure="optional",
          when=_TILED),
    Field("tile_k", "int", "depth of a tile in elements", required=True, minimum=1, maximum=MAX_TILE, figure="optional", when=_TILED),
    Field("units", "int", "SMs / TensorCores / cores / FPAs running tiles concurrently", required=True, minimum=1, maximum=MAX_UNITS,
          figure="optional", when=_TILED),
    Field("staging", "text", "name of the software-managed level tiles are staged in", required=True,
          figure="optional", when=_TILED),
    Field("tile_shapes", "any", "the `[tile_m, tile_n]` shapes the machine's library has for products, a list or a "
          "table by dtype (`default` for the others); the tiling picks one per product (docs/timing.md, tile "
          "quantization); unstated: `[[tile_m, tile_n]]`", parse=_tile_shapes, figure="optional", when=_TILED),
    Field("multicast", "any", "units one L2 read of an operand tile feeds: a thread-block cluster's TMA "
          "multicast or an SM pair's shared MMA operand (the operand the cluster shares is read once for this "
          "many tiles), a whole number or a table by dtype (`default` for the others); unstated: 1, every unit "
          "loads its own tiles (docs/timing.md, 'The L2 serves every tile')", parse=_multicast,
          figure="optional", when=_TILED),
    Field("bytes_in_flight", "any", "bytes one unit keeps outstanding to memory; caps a level's bandwidth at "
          "busy units x this / the level's latency (tied to the profile's latencies)", parse=_mean_bytes,
          unit="size, may be fractional (`'6.45 kB'`)", figure="required", when=_TILED),
    Field("note", "str", "free text"),
), doc="The schedule family and its parameters: modelling choices, provenance optional.")

_BW = "rate per device, one direction (`'450 GB/s'`, `'400 Gb/s'`)"
LINK = Table("[interconnect.<node|cluster>]", (
    Field("bandwidth", "any", "bandwidth one device sends with, in one direction (all its links of this class "
          "together; the node's share of a NIC across nodes)", required=True, parse=_byte_rate, unit=_BW,
          figure="required"),
    Field("latency", "any", "latency of one step of a collective's algorithm (alpha)", required=True,
          parse=_time, unit=_T, figure="required"),
    Field("sustained", "any", "the bandwidth NCCL's collectives are measured to reach on this link (nccl-tests' "
          "bus bandwidth at large messages, turned into the per-device rate of the link model), at most "
          "`bandwidth`; every collective's bandwidth term is charged at it (docs/timing.md, 'Devices and the "
          "interconnect'); absent: the peak", parse=_byte_rate, unit=_BW, figure="required"),
    Field("sustained_all_reduce", "any", "the bus bandwidth NCCL's all-reduce is measured to reach among the "
          "devices of one node, where it differs from `sustained` (NVLink SHARP, NVLS: the switch reduces, so it "
          "can exceed the wire's peak, at most twice it); absent: `sustained`", parse=_byte_rate, unit=_BW,
          figure="required"),
    Field("energy", "any", "energy per bit one device sends over this link (SerDes, switch, NIC where "
          "sourced)", parse=_energy_per_bit, unit="energy per bit (`'1.3 pJ/bit'`)", figure="required"),
    Field("note", "str", "free text"),
), doc="One class of link (docs/timing.md, 'Devices and the interconnect').")
INTERCONNECT = Table("[interconnect]", (
    Field("devices_per_node", "int", "devices joined by the node link (a server's GPUs, a TPU slice's chips)",
          required=True, minimum=1, figure="required"),
    Field("node", "table", "the link between devices of one node (NVLink, Infinity Fabric, ICI)", required=True,
          table=LINK),
    Field("cluster", "table", "the link between nodes (InfiniBand, RoCE, a data-centre network); absent: the "
          "profile describes one node", table=LINK),
    Field("note", "str", "free text"),
), doc="How devices talk: a profile without it runs on one device only.")

PROFILE = Table("machine profile", (
    Field("format_version", "int", f"the profile format this file is written in (write format_version = "
          f"{FORMAT_VERSION}); another version is refused with the list of changes", required=True,
          parse=_format_version),
    Field("base", "text", "id of a shipped profile (or a sibling file's id, or a path to a `.toml` in this file's "
          "folder tree, the shipped profiles' folder or a folder of `$MEMWALL_PROFILE_PATH`) this file "
          "extends. Tables merge key by key; `[[level]]` replaces the whole list; `id`, `name` and `notes` are "
          "never inherited. A missing base or a cycle of bases is refused"),
    Field("id", "text", "lowercase kebab-case, unique; the file name without `.toml`", required=True, parse=_kebab),
    Field("name", "text", "full name of the machine", required=True),
    Field("vendor", "text", "maker", required=True),
    Field("year", "int", "year of first delivery", required=True, minimum=1940, maximum=2100, figure="optional"),
    Field("kind", "word", "the kind of machine; it decides which timing models fit", required=True,
          choices=KINDS, noun="kind"),
    Field("clock", "any", "the clock cycle counts refer to", required=True, parse=_frequency,
          unit="frequency (`'80 MHz'`)", figure="required", sets="clock_hz"),
    Field("primary_dtype", "word", "the dtype the machine's era trained in; `balance()` uses it", choices=DTYPES,
          noun="primary_dtype", default_doc="fp64 (vector), bf16 (gpu/tpu/wafer that have it), else fp32"),
    Field("notes", "str", "free text: which SKU is modelled, what is simplified"),
    Field("compute", "table", "peak dense FLOP/s per dtype", required=True, table=COMPUTE),
    Field("issue_costs", "table", "time per operation of a scalar machine", table=ISSUE_COSTS),
    Field("level", "tables", "registers, scratchpads, caches, first (nearest the core) first; may be absent for "
          "cacheless machines", table=LEVEL),
    Field("memory", "table", "main memory", required=True, table=MEMORY),
    Field("timing", "table", "timing model and its parameters", required=True, table=TIMING),
    Field("schedule", "table", "schedule family and its parameters", required=True, table=SCHEDULE),
    Field("interconnect", "table", "the links between devices, for multi-device steps (--dp, --tp, --pp, --ep)",
          table=INTERCONNECT),
    Field("energy", "table", "energy per operation, static power and rated power, for the energy table",
          table=ENERGY),
    Field("sources", "mapping", "key -> full citation or URL; a figure's source that looks like a key (no "
          "spaces) must be one"),
), doc="Every figure (marked *figure*) may be written `{ value = ..., source = ..., status = ..., derivation "
       "= ..., note = ... }`; those marked *provenance required* must be.")

# Section -> key -> meaning, as the template test and older callers read it.
SCHEMA: dict[str, dict[str, str]] = {
    "": {f.key: f.doc for f in PROFILE.fields},
    **{f.key: {g.key: g.doc for g in f.table.fields} for f in PROFILE.fields if f.type == "table" and f.table},
}


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
        return self.modes[self.stated(name)]

    def stated(self, name: str) -> str:
        """The mode whose figures ``name`` runs with (:meth:`mode`)."""
        order = DISPATCH_MODES[: DISPATCH_MODES.index(name) + 1][::-1]
        return next((candidate for candidate in order if candidate in self.modes), self.default)


@dataclass(frozen=True)
class MainMemory:
    """Main memory as the cores see it."""

    capacity: int  # bytes
    latency: float  # seconds, load to use
    bandwidth: float  # bytes per second, peak
    energy: float | None = None  # joules per byte moved to or from the last level
    sustained: float | None = None  # bytes per second a streaming kernel sustains; None: not published
    sustained_read: float | None = None  # ... a read-only stream; None: sustained
    sustained_copy: float | None = None  # ... equal bytes read and written; None: between read and sustained

    @property
    def sustained_bandwidth(self) -> float:
        """The bandwidth a streaming kernel sustains: the sourced sustained figure, else the
        peak (docs/timing.md, "Sustained bandwidth")."""
        return self.bandwidth if self.sustained is None else self.sustained

    def sustained_for(self, written: float) -> float:
        """The bandwidth the timing charges main memory at for traffic of which the share
        ``written`` (0..1) is written: 1/B is linear in that share between the read-only
        stream (0), the copy stream (1/2) and the sustained figure (1); an unstated point
        lies on the line between its neighbours, so a profile that states only
        ``sustained`` is charged it whatever the mix (docs/timing.md, "Sustained
        bandwidth")."""
        full = self.sustained_bandwidth
        if self.sustained_read is None and self.sustained_copy is None:
            return full  # one rate at every mix, bit for bit
        read = self.sustained_read or full
        half = 2.0 / (1.0 / read + 1.0 / full) if self.sustained_copy is None else self.sustained_copy
        w = min(1.0, max(0.0, written))
        inverse = (1 - 2 * w) / read + 2 * w / half if w <= 0.5 else (2 - 2 * w) / half + (2 * w - 1) / full
        return 1.0 / inverse


@dataclass(frozen=True)
class EnergySpec:
    """A profile's [energy]: power and energy per operation (docs/energy.md); the energy per
    byte is on each level, on main memory and on each link."""

    tdp: float  # watts, rated
    static: float  # watts drawn idle, every second of the step
    host: float | None  # watts of the host's share while it issues; None: not counted
    matrix: Mapping[str, float]  # dtype -> joules per operation in the matrix units
    vector: Mapping[str, float]  # dtype -> joules per operation in the vector units ([energy.vector])
    fabric: float | None = None  # joules per main-memory byte outside the arrays; None: not counted


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
    framework: str | None = None  # [timing] framework: the default framework id (None: hand-written)
    vector_flops: dict[str, float] = field(default_factory=dict)  # [compute.vector]: dtype -> FLOP/s
    achievable_flops: dict[str, float] = field(default_factory=dict)  # [compute.achievable]: dtype -> FLOP/s
    sustained_flops: dict[str, float] = field(default_factory=dict)  # [compute.sustained]: dtype -> FLOP/s
    # the run keeps the device at its power limit (a training step: memwall.simulation.case),
    # so its products meet [compute.sustained] as well (memwall.timing.arithmetic_rate)
    power_saturated: bool = False
    # the share of their burst rates the SMs run at where a power-saturated step would draw
    # more than the rating at them (memwall.simulation.power.power_held): the clock the
    # power limit allows; 1.0 below the limit
    power_scale: float = 1.0
    interconnect: Interconnect | None = None  # [interconnect]; None: one device only
    energy: EnergySpec | None = None  # [energy]; None: the results' energy is null
    # a --set what-if: {"set": FIELD -> VALUE as given, "moved": every figure it changed}
    # (:func:`_what_if`); None: the profile as shipped
    what_if: dict[str, Any] | None = field(default=None, compare=False, repr=False)

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
                "software_managed": lv.software_managed, "shared_by": lv.shared_by, "energy": lv.energy,
            }

        return {
            "id": self.id, "name": self.name, "vendor": self.vendor, "year": self.year,
            "kind": self.kind, "clock_hz": self.clock_hz, "primary_dtype": self.primary_dtype,
            "peak_flops": dict(self.peak_flops), "issue_costs": dict(self.issue_costs),
            "levels": [level_dict(lv) for lv in self.levels],
            "memory": {"capacity": self.memory.capacity, "latency": self.memory.latency,
                       "bandwidth": self.memory.bandwidth, "energy": self.memory.energy,
                       # only where stated, so a profile without it describes itself as before
                       **{k: getattr(self.memory, k) for k in SUSTAINED if getattr(self.memory, k) is not None}},
            "energy": None if self.energy is None else {
                "tdp": self.energy.tdp, "static": self.energy.static, "host": self.energy.host,
                "matrix": dict(self.energy.matrix), "vector": dict(self.energy.vector)},
            "memory_bandwidth": self.memory.bandwidth,
            "balance": self.balances(),
            "timing": {"model": self.timing.model, "params": dict(self.timing.params)},
            "framework": self.framework,
            "dispatch": None if self.dispatch is None else {
                "default": self.dispatch.default,
                **{m: vars(d) for m, d in self.dispatch.modes.items()},
            },
            "vector_flops": dict(self.vector_flops),
            "achievable_flops": dict(self.achievable_flops),
            "sustained_flops": dict(self.sustained_flops),
            "schedule": {"family": self.schedule.family, "params": dict(self.schedule.params)},
            "status": self.status, "status_counts": self.status_counts(),
            "provenance": {
                key: {"value": fig.value, "source": fig.source, "citation": self.citation(fig),
                      "status": fig.status, "derivation": fig.derivation, "note": fig.note}
                for key, fig in self.provenance.items()
            },
            "sources": dict(self.sources), "notes": self.notes, "base": self.base,
            "path": str(self.path) if self.path else None,
            # only where the profile has links, so the others describe themselves as before
            **({} if self.interconnect is None else {"interconnect": {
                "devices_per_node": self.interconnect.devices_per_node,
                **{k: None if v is None else vars(v) for k, v in (("node", self.interconnect.node),
                                                                  ("cluster", self.interconnect.cluster))}}}),
        }


# ---------------------------------------------------------------------------------
# Loading


# Folders (os.pathsep-separated) besides a profile's own folder tree and the shipped
# profiles' from which a ``base`` path may be read.
PROFILE_PATH_ENV = "MEMWALL_PROFILE_PATH"


def base_folders(child: Path) -> list[Path]:
    """Where a ``base`` given as a path may lie: the child profile's own folder and those
    below it, the shipped profiles' folder, and each folder in ``$MEMWALL_PROFILE_PATH``.
    Nothing else is opened, so a profile cannot make memwall read (or confirm the
    existence of) an arbitrary file."""
    from .data import era_data_dir

    extra = [Path(p) for p in os.environ.get(PROFILE_PATH_ENV, "").split(os.pathsep) if p]
    return [p.resolve() for p in (child.parent, era_data_dir() / "machines", *extra)]


def _resolve_base(base: str, child: Path) -> Path:
    """A base names a shipped id, a sibling file's id, or a path to a .toml file inside
    :func:`base_folders`."""
    if base.endswith(".toml") or "/" in base or os.sep in base:
        candidate = (child.parent / base).resolve()
        folders = base_folders(child)
        if candidate.suffix != ".toml" or not any(candidate.is_relative_to(f) for f in folders):
            raise InputError(
                f"base {base!r} is not a .toml file in this profile's folder tree, the shipped profiles or "
                f"${PROFILE_PATH_ENV}; a base is read only from there ({', '.join(map(str, folders))})",
                field="base")
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
        if isinstance(value, dict) and isinstance(out.get(key), dict) and "value" not in value:
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_chain(path: Path, problems: Problems, chain: list[Path] | None = None,
                ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The file's table with its bases merged in (base first), and the file's own table;
    ``chain``, if given, receives the files read, the file itself first."""
    chain = [] if chain is None else chain
    tables: list[dict[str, Any]] = []
    current = path.resolve()
    while True:
        if current in chain:
            problems.add(f"cycle of base profiles: {' -> '.join(p.name for p in [*chain, current])}", "base")
            return None
        chain.append(current)
        try:
            data, text = read_toml(current)
        except InputError as err:
            # The syntax error of a base is reported against that base's file and line.
            problems.errors.append(err if current != path.resolve() else err.within(file=problems.file))
            return None
        if len(chain) == 1:
            problems.index(text)
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
            problems.take(err.within(file=str(chain[-1]) if len(chain) > 1 else problems.file))
            return None
    merged: dict[str, Any] = {}
    for data in reversed(tables):
        merged = _merge(merged, data)
    # Identity is never inherited: a variant is a different machine.
    for key in ("id", "name"):
        if key not in tables[0]:
            problems.add(f"missing required field '{key}' (identity is not inherited from a base)", key)
    return merged, tables[0]


def _check_kind(values: Mapping[str, Any], problems: Problems) -> None:
    """What the kind of machine asks of the timing model and the issue costs."""
    kind, model = values.get("kind"), values.get("timing", {}).get("model")
    if kind and model and model not in MODELS_FOR_KIND[kind]:
        problems.add(f"timing model {model!r} does not fit a {kind} machine; use "
                     f"{' or '.join(MODELS_FOR_KIND[kind])}", "timing.model")
    if kind == "scalar" and not {"fadd", "fmul"} <= set(values.get("issue_costs", {})):
        problems.add("a scalar machine needs issue_costs fadd and fmul", "issue_costs")
    if "compute" in values and not values["compute"]:
        problems.add("[compute] needs at least one dtype", "compute")
    _check_ceilings(values.get("compute", {}), problems)


def _check_ceilings(compute: Mapping[str, Any], problems: Problems) -> None:
    """A measured ceiling is of a dtype the machine states a peak for, and not above it: a
    ceiling over the peak would be a unit slip or a figure of another part. A sustained
    ceiling (the power-saturated clock) is not above the burst one where both are stated."""
    for table in ("achievable", "sustained"):
        for dtype, rate in compute.get(table, {}).items():
            peak = compute.get(dtype)
            burst = compute.get("achievable", {}).get(dtype) if table == "sustained" else None
            if not isinstance(peak, (int, float)):
                problems.add(f"{table} {dtype} has no {dtype} peak in [compute] to sit under",
                             f"compute.{table}.{dtype}")
            elif rate > peak:
                problems.add(f"{table} {dtype} {rate / 1e12:.4g} TFLOP/s is above the {dtype} peak "
                             f"{peak / 1e12:.4g} TFLOP/s", f"compute.{table}.{dtype}")
            elif isinstance(burst, (int, float)) and rate > burst:
                problems.add(f"sustained {dtype} {rate / 1e12:.4g} TFLOP/s is above the achievable "
                             f"{burst / 1e12:.4g} TFLOP/s: a chip at its power limit holds no more than "
                             f"its burst", f"compute.sustained.{dtype}")


def _check_schedule(values: Mapping[str, Any], levels: list[LevelSpec], problems: Problems) -> None:
    """A schedule's references to the levels and the timing model."""
    schedule, timing = values.get("schedule", {}), values.get("timing", {})
    names = {lv.name: lv for lv in levels}
    staging = schedule.get("staging")
    if staging is not None and staging not in names:
        problems.add(f"staging names level {staging!r}, which is not one of this machine's levels "
                     f"({', '.join(names) or 'none'})", "schedule.staging")
    elif staging is not None and not names[staging].software_managed:
        problems.add(f"staging level {staging!r} must be software_managed (a scratchpad)", "schedule.staging")
    elif staging is not None and all(isinstance(schedule.get(k), int) for k in ("tile_m", "tile_n", "tile_k")):
        # A tile stages its A and B blocks together; even at one byte an element (fp8,
        # the narrowest whole-byte dtype) they must fit the scratchpad they are staged in.
        need = (schedule["tile_m"] + schedule["tile_n"]) * schedule["tile_k"]
        if need > names[staging].size:
            problems.add(f"a {schedule['tile_m']}x{schedule['tile_n']}x{schedule['tile_k']} tile stages "
                         f"({schedule['tile_m']} + {schedule['tile_n']}) x {schedule['tile_k']} = {need} elements, "
                         f"more bytes than its staging level {staging!r} holds ({names[staging].size} B)",
                         "schedule.tile_m")
    if schedule.get("vector_length", 0) > timing.get("vector_length", float("inf")):
        problems.add(f"schedule.vector_length {schedule['vector_length']} exceeds the machine's "
                     f"timing.vector_length {timing['vector_length']}", "schedule.vector_length")


def _primary_dtype(values: Mapping[str, Any], problems: Problems) -> str | None:
    peak, kind = values.get("compute", {}), values.get("kind")
    primary = values.get("primary_dtype")
    if primary is not None:
        if primary not in peak:
            problems.add(f"primary_dtype {primary!r} has no peak in [compute] ({', '.join(peak) or 'none'})",
                         "primary_dtype")
        return primary
    if kind == "vector" and "fp64" in peak:
        return "fp64"
    if kind in ("gpu", "tpu", "wafer") and "bf16" in peak:
        return "bf16"
    return "fp32" if "fp32" in peak else next(iter(peak), None)


def _params(table: Mapping[str, Any], discriminator: str) -> dict[str, Any]:
    return {k: v for k, v in table.items() if k not in (discriminator, "note", "dispatch", "framework", "vector")}


def _dispatch(values: Mapping[str, Any], problems: Problems) -> DispatchSpec | None:
    """[timing.dispatch] as a spec; its default must be one of the modes it states."""
    table = values.get("timing", {}).get("dispatch")
    if table is None or "default" not in table:
        return None
    modes = {m: DispatchMode(**table[m]) for m in DISPATCH_MODES if m in table}
    if table["default"] not in modes:
        problems.add(f"the default dispatch mode {table['default']!r} is not stated in "
                     f"[timing.dispatch.{table['default']}]", "timing.dispatch.default")
        return None
    return DispatchSpec(table["default"], modes)


def _interconnect(values: Mapping[str, Any]) -> Interconnect | None:
    """[interconnect] as the link model's value (figures already in bytes/s and seconds)."""
    table = values.get("interconnect")
    if table is None:
        return None

    def link(t: Mapping[str, Any] | None) -> Link | None:
        return None if t is None else Link(t["bandwidth"], t["latency"], t.get("energy"), t.get("sustained"),
                                           t.get("sustained_all_reduce"))

    node = link(table["node"])
    assert node is not None
    return Interconnect(values["id"], table["devices_per_node"], node, link(table.get("cluster")))


def _energy(values: Mapping[str, Any]) -> EnergySpec | None:
    """[energy] as the energy model's value (watts and joules per operation)."""
    table = values.get("energy")
    if table is None:
        return None
    return EnergySpec(table["tdp"], table["static"], table.get("host"),
                      {d: table[d] for d in DTYPES if d in table}, dict(table.get("vector", {})), table.get("fabric"))


def _apply_sets(data: dict[str, Any], sets: Mapping[str, str], problems: Problems) -> dict[str, Any]:
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
                problems.add(f"--set {dotted}: '{'.'.join(keys[: i + 1])}' is not a table of this profile", dotted)
                break
        else:
            if not isinstance(table, dict):
                problems.add(f"--set {dotted}: not a field of this profile", dotted)
                continue
            old = table.get(keys[-1])
            if isinstance(old, dict) and "value" in old:
                table[keys[-1]] = {**old, "value": value, "note": f"what-if: set to {text!r} by --set"}
            elif old is None and getattr(PROFILE.field_at(keys), "figure", "") == "required":
                # a figure the profile lacks (a ceiling, a latency): it needs provenance, so it
                # is filed as the what-if it is
                data.setdefault("sources", {})[WHAT_IF_SOURCE] = "memwall inspect --set: a what-if, no source"
                table[keys[-1]] = {"value": value, "source": WHAT_IF_SOURCE, "status": "estimate",
                                   "derivation": f"what-if: set to {text!r} by --set"}
            else:
                table[keys[-1]] = value
    return data


WHAT_IF_SOURCE = "what_if"

# Figures stated against the peak memory bandwidth (a measured sustained rate; the bytes a
# unit keeps in flight, whose Little's-law cap was derived from a measured rate): a what-if
# on memory.bandwidth moves each by new peak ÷ old peak unless the what-if sets it too
# (docs/timing.md, "Sustained bandwidth"). --set paths.
FOLLOW_BANDWIDTH = ("memory.sustained", "memory.sustained_read", "memory.sustained_copy", "schedule.bytes_in_flight")
SUSTAINED = ("sustained", "sustained_read", "sustained_copy")  # [memory]'s measured stream rates
# A link's measured rates against its peak: (key, at most this many times the peak, what
# the figure is, why the limit).
LINK_RATE_LIMITS = (
    ("sustained", 1, "sustained bandwidth", "a measured rate cannot exceed the datasheet's"),
    ("sustained_all_reduce", 2, "all-reduce bus bandwidth",
     "even a reduction in the switch sends and receives each byte once"),
)
# Each peak a what-if may move, and the figures stated against it (a link's measured
# collective rate follows its peak as memory's sustained rates follow theirs).
FOLLOWS = {"memory.bandwidth": FOLLOW_BANDWIDTH,
           **{f"interconnect.{link}.bandwidth": (f"interconnect.{link}.sustained",
                                                 f"interconnect.{link}.sustained_all_reduce")
              for link in ("node", "cluster")}}


def _at(values: Any, dotted: str) -> Any:
    """The walked value at a --set path (``level.L2.bandwidth``: the level by name); None
    where there is none."""
    node = values
    for key in dotted.split("."):
        if isinstance(node, list):
            node = next((t for t in node if isinstance(t, dict) and t.get("name") == key), None)
        elif isinstance(node, dict):
            node = node.get(key)
        else:
            return None
    return node


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _what_if(before: Mapping[str, Any], values: dict[str, Any], sets: Mapping[str, str],
             problems: Problems) -> dict[str, Any]:
    """Follow a what-if through: where ``sets`` moves a peak of :data:`FOLLOWS`
    (memory.bandwidth, a link's bandwidth), each figure stated against it that the profile
    states and ``sets`` does not name is multiplied by new ÷ old peak in ``values``
    (changed in place; its provenance says so). Returns the record a result shows: ``set``
    (each FIELD -> VALUE as given) and ``moved`` (every figure whose value changed, in SI
    units: ``from``, ``to`` and ``by``, "set" or the scaling)."""
    moved: dict[str, dict[str, Any]] = {}
    for dotted in sets:
        old, new = _at(before, dotted), _at(values, dotted)
        if old != new:
            moved[dotted] = {"from": old, "to": new, "by": "set"}
    for peak, followers in FOLLOWS.items():
        old_peak, new_peak = _at(before, peak), _at(values, peak)
        if peak not in sets or not (_number(old_peak) and _number(new_peak) and old_peak > 0):
            continue
        k = new_peak / old_peak
        for dotted in followers:
            *path, key = dotted.split(".")
            table = _at(values, ".".join(path))
            value = table.get(key) if isinstance(table, dict) else None
            if dotted in sets or not _number(value) or k == 1:
                continue
            table[key] = value * k
            rule = f"{peak} x {k:.6g} (new peak / old peak)"
            fig = problems.provenance.get(dotted)
            if fig is not None:
                unit = "B" if key == "bytes_in_flight" else "B/s"
                problems.provenance[dotted] = Figure(f"{value * k:.6g} {unit}", fig.source, fig.status,
                                                     fig.derivation, f"what-if: scaled with {rule} by --set")
            moved[dotted] = {"from": value, "to": value * k, "by": rule}
    return {"set": dict(sets), "moved": moved}


def with_memory_bandwidth(machine: Machine, bandwidth: float, *, in_flight: bool = True) -> Machine:
    """``machine`` with peak memory bandwidth ``bandwidth`` and, as a ``--set`` moves them,
    its sustained bandwidth and (``in_flight``) its bytes in flight scaled by new ÷ old peak:
    the rule of :func:`_what_if` on a loaded machine (the sensitivity's 1 % moves; a
    synthetic ``BASE@bw=X``)."""
    from dataclasses import replace

    k = bandwidth / machine.memory.bandwidth
    rates = {name: getattr(machine.memory, name) for name in SUSTAINED}
    memory = replace(machine.memory, bandwidth=bandwidth,
                     **{name: None if rate is None else rate * k for name, rate in rates.items()})
    params = machine.schedule.params
    if in_flight and _number(params.get("bytes_in_flight")):
        params = {**params, "bytes_in_flight": params["bytes_in_flight"] * k}
    return replace(machine, memory=memory, schedule=replace(machine.schedule, params=params))


def _blame_sets(problems: Problems, sets: Mapping[str, str]) -> None:
    """Put each problem of a ``--set`` field on the command line: ``--set FIELD: reason``,
    with no file or line (the installed profile is not at fault), before the profile's
    own problems; those say the what-if was applied, since a set clock moves every figure
    given per cycle."""
    ours: list[InputError] = []
    theirs: list[InputError] = []
    for err in problems.errors:
        dotted = re.sub(r"\[([^\]]*)\]", r".\1", err.field or "")  # level[L2].bandwidth: level.L2.bandwidth
        # the field set, a part of it (a figure's value), or a table the set made (an unknown one)
        key = next((k for k in sets if dotted == k or dotted.startswith(k + ".") or k.startswith(dotted + ".")),
                   None)
        if key is None:
            theirs.append(InputError(f"{err.reason} (with --set {', '.join(sets)})", file=err.file, line=err.line,
                                     field=err.field))
        else:
            reason = err.reason if err.reason.startswith(f"--set {key}") else f"--set {key}: {err.reason}"
            ours.append(InputError(reason))
    problems.errors[:] = ours + theirs


def _build(path: Path, problems: Problems, sets: Mapping[str, str] | None = None,
           files: list[Path] | None = None) -> Machine | None:
    chain = _read_chain(path, problems, files)
    if chain is None:
        return None
    data, own = chain
    before: dict[str, Any] = {}
    if sets:
        # the profile as shipped, to say what the what-if moved (its problems are the file's own)
        before = walk(data, PROFILE, Problems(str(path)), "", {"provenance": True})
        data = _apply_sets(data, sets, problems)
    values = walk(data, PROFILE, problems, "", {"provenance": True})
    what_if = _what_if(before, values, sets, problems) if sets else None
    memory = values.get("memory", {})
    for name in SUSTAINED:
        if _number(memory.get(name)) and _number(memory.get("bandwidth")) \
                and memory[name] > memory["bandwidth"] * (1 + 1e-9):
            slip = " (a unit slip in one of them?)" if memory[name] > 100 * memory["bandwidth"] else ""
            problems.add(f"{name.replace('_', ' ')} bandwidth {memory[name]:.4g} B/s is above the peak "
                         f"{memory['bandwidth']:.4g} B/s: a measured rate cannot exceed the datasheet's{slip}",
                         f"memory.{name}")
    for name, link in values.get("interconnect", {}).items():
        if not isinstance(link, dict) or not _number(link.get("bandwidth")):
            continue
        for key, times, what, why in LINK_RATE_LIMITS:
            if _number(link.get(key)) and link[key] > times * link["bandwidth"] * (1 + 1e-9):
                problems.add(f"{what} {link[key]:.4g} B/s is above {'twice ' if times == 2 else ''}the link's peak "
                             f"{link['bandwidth']:.4g} B/s: {why}", f"interconnect.{name}.{key}")
    levels = levels_from(values.get("level", []), problems)
    _check_kind(values, problems)
    _check_schedule(values, levels, problems)
    structure(problems, path, values.get("id"), values.get("memory", {}).get("capacity"), levels)
    primary = _primary_dtype(values, problems)
    check_provenance(problems, values.get("sources", {}))
    if sets:
        _blame_sets(problems, sets)
    if problems.errors:
        return None
    timing, schedule = values["timing"], values["schedule"]
    dispatch = _dispatch(values, problems)
    if problems.errors:
        return None
    compute = dict(values["compute"])
    vector_flops = compute.pop("vector", {})
    achievable_flops = compute.pop("achievable", {})
    sustained_flops = compute.pop("sustained", {})
    return Machine(
        id=values["id"], name=values["name"], vendor=values["vendor"], year=values["year"], kind=values["kind"],
        clock_hz=values["clock"], peak_flops=compute, issue_costs=values.get("issue_costs", {}),
        levels=tuple(levels), memory=MainMemory(**_params(values["memory"], "")),
        timing=TimingSpec(timing["model"], _params(timing, "model")),
        schedule=ScheduleSpec(schedule["family"], _params(schedule, "family")),
        primary_dtype=primary or "", provenance=dict(problems.provenance), sources=values.get("sources", {}),
        notes=own.get("notes", "") if isinstance(own.get("notes", ""), str) else "", base=own.get("base"),
        path=path, dispatch=dispatch, framework=timing.get("framework"), vector_flops=vector_flops, achievable_flops=achievable_flops,
        sustained_flops=sustained_flops,
        interconnect=_interconnect(values), energy=_energy(values), what_if=what_if,
    )


def check_file(path: str | Path) -> tuple[Machine | None, list[InputError], list[InputError]]:
    """One profile file: the machine (None if invalid), its problems and its warnings."""
    path = Path(path)
    problems = Problems(str(path))
    machine = _build(path, problems)
    if machine is not None:
        plausibility(machine, problems)
    return machine, real_first(problems.errors), problems.warnings


def load_machine_file(path: str | Path, sets: Mapping[str, str] | None = None) -> Machine:
    """Load and check one profile file (and its bases), with ``sets`` (FIELD -> VALUE, as
    ``memwall inspect --set``) applied. Raises the first problem found.

    A profile loaded before is returned again while none of the files it was read from
    has changed (size, modification time, inode): a sweep loads each of its machines for
    every case, in the estimate, the worker and the row, and parsing and checking a
    profile costs a few milliseconds each time. Nothing mutates a loaded Machine."""
    path = Path(path)
    key = (str(path.resolve()), tuple(sorted((sets or {}).items())))
    kept = _LOADED.get(key)
    if kept is not None and all(_file_stamp(f) == stamp for f, stamp in kept[0]):
        return kept[1]
    problems = Problems(str(path))
    files: list[Path] = []
    machine = _build(path, problems, sets, files)
    problems.raise_first("; run 'memwall machines validate'")
    assert machine is not None
    if len(_LOADED) >= _LOADED_MAX:
        _LOADED.clear()
    _LOADED[key] = (tuple((f, _file_stamp(f)) for f in files), machine)
    return machine


_LOADED: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[tuple[tuple[Path, Any], ...], Machine]] = {}
_LOADED_MAX = 512  # profiles (with their --set variants) kept loaded


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def validate_paths(paths: Iterable[str | Path], strict: bool = False) -> list[InputError]:
    """Every problem of every file, in file order (an empty list: all valid); ``strict``
    counts the warnings as problems."""
    errors: list[InputError] = []
    for path in paths:
        _, errs, warnings = check_file(path)
        errors.extend(errs + (warnings if strict else []))
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


def case_framework(framework: str | None, machine: str | None) -> Framework:
    """The framework a case runs with (:func:`memwall.frameworks.framework_for`), for a case
    that names its machine by id or path (none, as ``memwall step``: no machine, no default)."""
    return framework_for(framework, load_machine(machine).framework if machine else None)
