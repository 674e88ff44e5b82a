"""Small input files the tests write: one GEMM measurement of a machine."""

from __future__ import annotations


def measurement_text(machine: str, size: int = 64, value: float = 1e9) -> str:
    """A ``[[measurement]]`` of one size³ fp32 product on ``machine``, id ``probe-MACHINE``."""
    return f"""
[[measurement]]
id = "probe-{machine}"
machine = "{machine}"
gemm = [{size}, {size}, {size}]
dtype = "fp32"
metric = "flops"
value = {value:g}
source = "a test"
reliability = "low"
notes = "a probe"
"""
