"""memwall.units: every prefix of both tables, the per-cycle forms, and every refusal."""

from __future__ import annotations

import pytest

from memwall import units
from memwall.errors import InputError


@pytest.mark.parametrize("prefix,scale", sorted(units.BINARY_PREFIXES.items()))
def test_binary_byte_prefixes(prefix: str, scale: int) -> None:
    assert units.parse_bytes(f"3 {prefix}B") == 3 * scale
    assert units.parse_bytes(f"1.5{prefix}B") == 3 * scale // 2


@pytest.mark.parametrize("prefix,scale", sorted(units.DECIMAL_PREFIXES.items()))
def test_decimal_prefixes_for_bytes_rates_frequencies_flops(prefix: str, scale: float) -> None:
    assert units.parse_bytes(f"2 {prefix}B") == round(2 * scale)
    assert units.parse_byte_rate(f"2 {prefix}B/s") == pytest.approx(2 * scale)
    assert units.parse_frequency(f"2 {prefix}Hz") == pytest.approx(2 * scale)
    assert units.parse_flop_rate(f"2 {prefix}FLOP/s") == pytest.approx(2 * scale)


def test_binary_and_decimal_are_kept_apart() -> None:
    assert units.parse_bytes("32 KiB") == 32768
    assert units.parse_bytes("32 kB") == 32000
    assert units.parse_bytes("1 MiB") != units.parse_bytes("1 MB")
    assert units.parse_byte_rate("1 GiB/s") == 2**30
    assert units.parse_byte_rate("3.35 TB/s") == pytest.approx(3.35e12)


@pytest.mark.parametrize("prefix,scale", sorted(units.SUBUNIT_PREFIXES.items()))
def test_time_prefixes(prefix: str, scale: float) -> None:
    assert units.parse_time(f"5 {prefix}s") == pytest.approx(5 * scale)


def test_per_cycle_forms_use_the_clock() -> None:
    clock = units.parse_frequency("80 MHz")
    assert units.parse_time("11 cycles", clock_hz=clock) == pytest.approx(137.5e-9)
    assert units.parse_byte_rate("8 B/cycle", clock_hz=clock) == pytest.approx(640e6)
    assert units.parse_byte_rate("8 B/clk", clock_hz=clock) == pytest.approx(640e6)
    assert units.parse_flop_rate("2 FLOP/cycle", clock_hz=clock) == pytest.approx(160e6)
    assert units.parse_flop_rate("160 MFLOPS") == pytest.approx(160e6)
    for parse, text in ((units.parse_time, "11 cycles"), (units.parse_byte_rate, "8 B/cycle"),
                        (units.parse_flop_rate, "2 FLOP/cycle")):
        with pytest.raises(InputError, match="clock"):
            parse(text)


def test_bare_integers_are_bytes_and_underscores_are_allowed() -> None:
    assert units.parse_bytes(64) == 64
    assert units.parse_bytes("1_048_576 B") == 2**20
    assert units.parse_bytes("0 B", allow_zero=True) == 0


@pytest.mark.parametrize("parse,text,words", [
    (units.parse_bytes, "32 KB", "ambiguous"),
    (units.parse_bytes, "32", "needs a unit"),
    (units.parse_bytes, "32 Kib", "unknown byte unit"),
    (units.parse_bytes, "32 MHz", "unknown byte unit"),
    (units.parse_bytes, "0 B", "positive"),
    (units.parse_bytes, "-1 KiB", "positive"),
    (units.parse_bytes, "0.3 B", "whole number"),
    (units.parse_bytes, True, "expected a size"),
    (units.parse_bytes, "lots", "expected a number"),
    (units.parse_bytes, "inf B", "expected a number"),
    (units.parse_frequency, "80 MB", "frequency"),
    (units.parse_frequency, "0 Hz", "positive"),
    (units.parse_frequency, "80 KiHz", "frequency"),
    (units.parse_byte_rate, "3 TB", "bandwidth"),
    (units.parse_byte_rate, "3 TKB/s", "unknown byte unit"),
    (units.parse_byte_rate, "0 GB/s", "positive"),
    (units.parse_time, "5 weeks", "time"),
    (units.parse_time, "-5 ns", "non-negative"),
    (units.parse_flop_rate, "5 MIPS", "arithmetic rate"),
    (units.parse_flop_rate, "5 KFLOP/s", "arithmetic rate"),
    (units.parse_flop_rate, "0 FLOP/s", "positive"),
    (units.parse_time, 5, "string"),
])
def test_refusals(parse, text, words: str) -> None:
    with pytest.raises(InputError) as err:
        parse(text)
    assert words.lower() in str(err.value).lower()


@pytest.mark.parametrize("n", [1, 64, 1000, 4096, 32768, 3 * 2**20, 80 * 2**30, 141_000_000_000])
def test_bytes_round_trip(n: int) -> None:
    assert units.parse_bytes(units.format_bytes(n)) == pytest.approx(n, rel=1e-3)


@pytest.mark.parametrize("x", [640e6, 3.35e12, 2.527e9, 20e6, 21e15])
def test_rates_round_trip(x: float) -> None:
    assert units.parse_byte_rate(units.format_byte_rate(x)) == pytest.approx(x, rel=1e-3)
    assert units.parse_flop_rate(units.format_flop_rate(x)) == pytest.approx(x, rel=1e-3)
    assert units.parse_frequency(units.format_frequency(x)) == pytest.approx(x, rel=1e-3)


@pytest.mark.parametrize("t", [137.5e-9, 4e-6, 1.5e-3, 2.0, 5e-12])
def test_times_round_trip(t: float) -> None:
    assert units.parse_time(units.format_time(t)) == pytest.approx(t, rel=1e-3)


@pytest.mark.parametrize("parse,text", [
    (units.parse_bytes, "1e308 MiB"),
    (units.parse_bytes, "1e400 B"),
    (units.parse_frequency, "1e400 Hz"),
])
def test_overflow_and_nan_are_refused_not_raised_as_other_errors(parse, text: str) -> None:
    with pytest.raises(InputError, match="finite|infinity"):
        parse(text)
