"""Strict parsing and formatting of quantities with units.

Owns: byte sizes (``"32 KiB"``, ``"8 MB"``), rates of bytes (``"3.35 TB/s"``,
``"64 B/cycle"``), frequencies (``"80 MHz"``), times (``"50 ns"``, ``"11 cycles"``) and
arithmetic rates (``"160 MFLOP/s"``, ``"2 FLOP/cycle"``), energies per unit of work
(``"0.4 pJ/FLOP"``, ``"31 pJ/B"``, ``"3.9 pJ/bit"``) and powers (``"700 W"``, ``"115 kW"``).

Binary prefixes (Ki, Mi, Gi, Ti, Pi: powers of 1024) and decimal prefixes (k, M, G, T,
P: powers of 1000) are kept apart. ``KB`` is refused as ambiguous: write ``KiB`` or
``kB``. A bare integer where a size is expected means bytes. Per-cycle forms need the
clock, passed by the caller (a machine profile knows its clock).
"""

from __future__ import annotations

import math
import re

from .errors import InputError

DECIMAL_PREFIXES: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
BINARY_PREFIXES: dict[str, int] = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
}
SUBUNIT_PREFIXES: dict[str, float] = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12}

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(r"^\s*" + _NUMBER + r"\s*(?P<unit>\S.*?)?\s*$")


def _article(what: str) -> str:
    """``what`` with its indefinite article ("an arithmetic rate", "a bandwidth")."""
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def _split(text: str, what: str) -> tuple[float, str]:
    if not isinstance(text, str):
        raise InputError(f"expected {_article(what)} as a string with a unit, got {text!r}")
    m = _QUANTITY.match(text.replace("_", ""))
    if not m:
        raise InputError(f"cannot read {text!r} as {_article(what)}: expected a number and a unit")
    value = float(m.group("num"))
    if not math.isfinite(value):
        raise InputError(f"{text!r} is not a finite number")
    return value, (m.group("unit") or "").strip()


# No machine's rate, clock or time comes near these (in SI units: B/s, FLOP/s, Hz, s). A
# figure beyond them is a slip, not a machine, and it makes the step's numbers stop being
# numbers: a subnormal clock gives zero cycles for a real step, a subnormal bandwidth an
# infinite time. Refused as impossible; `memwall machines validate` warns long before
# them, at the era bounds of memwall.plausibility.PLAUSIBLE.
SMALLEST = 1e-30
LARGEST = 1e30


def _positive(value: float, text: object, what: str, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {text!r}")


def _possible(value: float, text: object, what: str, unit: str, allow_zero: bool = False) -> None:
    """A rate, clock or time: positive (or zero, if allowed) and within what a machine can have."""
    _positive(value, text, what, allow_zero)
    if not math.isfinite(value):
        raise InputError(f"{text!r} overflows to infinity")
    if value != 0 and not SMALLEST <= value <= LARGEST:
        raise InputError(f"{what} must be within {SMALLEST:g} .. {LARGEST:g} {unit} (no machine is beyond, and "
                         f"the step's numbers would not be finite), got {text!r}")


def _byte_multiplier(unit: str, original: str) -> float:
    """Multiplier for a byte unit such as ``KiB``, ``MB`` or ``B``."""
    if unit in ("B", "byte", "bytes"):
        return 1.0
    if unit.endswith("B") and unit[:-1] in BINARY_PREFIXES:
        return float(BINARY_PREFIXES[unit[:-1]])
    if unit == "KB":
        raise InputError(f"{original!r}: 'KB' is ambiguous; write 'KiB' (1024 B) or 'kB' (1000 B)")
    if unit.endswith("B") and unit[:-1] in DECIMAL_PREFIXES:
        return DECIMAL_PREFIXES[unit[:-1]]
    raise InputError(
        f"{original!r}: unknown byte unit {unit!r} (use B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    )


def parse_bytes(value: str | int, *, allow_zero: bool = False) -> int:
    """A size in bytes: ``"32 KiB"`` -> 32768; an integer is taken as bytes.

    >>> parse_bytes("32 KiB"), parse_bytes("8 MB"), parse_bytes(64)
    (32768, 8000000, 64)
    """
    if isinstance(value, bool):
        raise InputError(f"expected a size, got {value!r}")
    if isinstance(value, int):
        _positive(value, value, "a size", allow_zero)
        return value
    number, unit = _split(value, "size")
    if not unit:
        raise InputError(f"{value!r}: a size needs a unit (for example '32 KiB' or '64 B')")
    total = number * _byte_multiplier(unit, value)
    if not math.isfinite(total):
        raise InputError(f"{value!r} overflows to infinity")
    _positive(total, value, "a size", allow_zero)
    if abs(total - round(total)) > 1e-6 * max(1.0, total):
        raise InputError(f"{value!r} is not a whole number of bytes")
    return int(round(total))


def parse_frequency(value: str) -> float:
    """A frequency in Hz: ``"80 MHz"`` -> 8e7."""
    number, unit = _split(value, "frequency")
    if not unit.endswith("Hz") or unit[:-2] not in DECIMAL_PREFIXES:
        raise InputError(f"{value!r}: a frequency needs a unit Hz, kHz, MHz or GHz")
    hz = number * DECIMAL_PREFIXES[unit[:-2]]
    _possible(hz, value, "a frequency", "Hz")
    return hz


def parse_byte_rate(value: str, *, clock_hz: float | None = None) -> float:
    """A bandwidth in bytes per second: ``"3.35 TB/s"``, ``"16 GiB/s"``, ``"64 B/cycle"``."""
    number, unit = _split(value, "bandwidth")
    if unit.endswith("/s"):
        rate = number * _byte_multiplier(unit[:-2], value)
    elif unit.endswith("/cycle") or unit.endswith("/clk"):
        if clock_hz is None:
            raise InputError(f"{value!r}: a per-cycle bandwidth needs the machine's clock")
        rate = number * _byte_multiplier(unit.rsplit("/", 1)[0], value) * clock_hz
    else:
        raise InputError(f"{value!r}: a bandwidth needs a unit such as 'GB/s', 'GiB/s' or 'B/cycle'")
    _possible(rate, value, "a bandwidth", "B/s")
    return rate


def parse_time(value: str, *, clock_hz: float | None = None, allow_zero: bool = True) -> float:
    """A time in seconds: ``"50 ns"``, ``"1.2 us"``, ``"11 cycles"`` (needs the clock)."""
    number, unit = _split(value, "time")
    if unit in ("cycle", "cycles", "clk", "clocks"):
        if clock_hz is None:
            raise InputError(f"{value!r}: a time in cycles needs the machine's clock")
        seconds = number / clock_hz
    elif unit.endswith("s") and unit[:-1] in SUBUNIT_PREFIXES:
        seconds = number * SUBUNIT_PREFIXES[unit[:-1]]
    else:
        raise InputError(f"{value!r}: a time needs a unit s, ms, us, ns, ps or cycles")
    _possible(seconds, value, "a time", "s", allow_zero)
    return seconds


def parse_flop_rate(value: str, *, clock_hz: float | None = None) -> float:
    """An arithmetic rate in FLOP/s: ``"160 MFLOP/s"``, ``"989 TFLOP/s"``, ``"2 FLOP/cycle"``."""
    number, unit = _split(value, "arithmetic rate")
    unit = unit.replace("FLOPS", "FLOP/s")
    # integer rates (int8, int4) are stated in operations: a multiply-add is two, as for FLOPs
    unit = unit.replace("TOPS", "TOP/s")
    m = re.fullmatch(r"(?P<prefix>[kMGTPE]?)(?:FL)?OP/(?P<per>s|cycle|clk)", unit)
    if not m:
        raise InputError(
            f"{value!r}: an arithmetic rate needs a unit such as 'MFLOP/s', 'TFLOP/s' or 'FLOP/cycle'"
        )
    rate = number * DECIMAL_PREFIXES[m.group("prefix")]
    if m.group("per") != "s":
        if clock_hz is None:
            raise InputError(f"{value!r}: a per-cycle rate needs the machine's clock")
        rate *= clock_hz
    _possible(rate, value, "an arithmetic rate", "FLOP/s")
    return rate


ENERGY_PREFIXES: dict[str, float] = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15}
# What an energy figure is per, and the units it may be written per: a byte figure may be
# written per bit (x 8), as HBM and link datasheets state it, and a bit figure per byte.
ENERGY_PER: dict[str, dict[str, float]] = {
    "FLOP": {"FLOP": 1.0, "OP": 1.0, "op": 1.0},
    "B": {"B": 1.0, "byte": 1.0, "bit": 8.0},
    "bit": {"bit": 1.0, "B": 0.125, "byte": 0.125},
}


def parse_energy(value: str, per: str) -> float:
    """An energy per unit of work in joules per ``per`` (``FLOP``, ``B`` or ``bit``):
    ``"0.4 pJ/FLOP"`` -> 4e-13; ``"3.9 pJ/bit"`` as ``per="B"`` -> 3.12e-11. Zero is
    allowed (logic whose power does not depend on its activity has no energy per
    operation: its power is static)."""
    number, unit = _split(value, "figure of energy")
    units = ENERGY_PER[per]
    m = re.fullmatch(r"(?P<prefix>[munpfµ]?)J/(?P<per>\w+)", unit)
    if not m or m.group("per") not in units:
        raise InputError(f"{value!r}: an energy here needs a unit such as "
                         f"{' or '.join(repr('pJ/' + u) for u in units if u != 'byte')}")
    joules = number * ENERGY_PREFIXES[m.group("prefix")] * units[m.group("per")]
    _possible(joules, value, "an energy", f"J/{per}", allow_zero=True)
    return joules


def parse_power(value: str, *, allow_zero: bool = True) -> float:
    """A power in watts: ``"700 W"``, ``"115 kW"``, ``"350 mW"``."""
    number, unit = _split(value, "power")
    prefixes = {**SUBUNIT_PREFIXES, "k": 1e3, "M": 1e6}
    if not unit.endswith("W") or unit[:-1] not in prefixes:
        raise InputError(f"{value!r}: a power needs a unit W, kW, MW or mW")
    watts = number * prefixes[unit[:-1]]
    _possible(watts, value, "a power", "W", allow_zero)
    return watts


def _format(value: float, unit: str, prefixes: dict[str, float], digits: int) -> str:
    for prefix, scale in sorted(prefixes.items(), key=lambda kv: -kv[1]):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def format_bytes(n: int | float) -> str:
    """Bytes for a person: a binary prefix where the size is a whole number of it
    (capacities: '32 KiB', '80 GiB'), otherwise a decimal prefix and four digits
    (traffic: '6.758 TB')."""
    n_int = int(round(n))
    for prefix, scale in sorted(BINARY_PREFIXES.items(), key=lambda kv: -kv[1]):
        if n_int >= scale and n_int % scale == 0 and n_int // scale < 10_000:
            return f"{n_int // scale} {prefix}B"
    if n_int >= 1000:
        return _format(float(n), "B", DECIMAL_PREFIXES, 4)
    return f"{n_int} B"


def format_byte_rate(bps: float) -> str:
    return _format(bps, "B/s", DECIMAL_PREFIXES, 4)


def format_flop_rate(flops: float) -> str:
    return _format(flops, "FLOP/s", DECIMAL_PREFIXES, 4)


def format_frequency(hz: float) -> str:
    return _format(hz, "Hz", DECIMAL_PREFIXES, 4)


def format_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-12:.4g} ps"
