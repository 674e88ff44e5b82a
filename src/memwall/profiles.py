"""Machine profiles: loading, checking and inheriting the TOML files of era_data/machines.

Owns: :class:`Machine` and its parts (:class:`MainMemory`, :class:`TimingSpec`,
:class:`ScheduleSpec`), the strict loader, and the catalogue of shipped machines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TIMING_MODELS = ("in_order", "vector", "overlapped", "throughput")
SCHEDULE_FAMILIES = ("scalar", "vector", "blocked", "tiled")


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
