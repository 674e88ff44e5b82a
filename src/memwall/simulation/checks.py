"""A case checked before any work starts: every argument, with the error naming it.

Owns: :func:`validate` (every case of a sweep: its machine and network known, each option's
value as memwall.options declares it, the step's options together as the step checks
them, its profiles and presets loaded once, so a broken file fails here, not in a worker).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..options import OPTIONS
from ..study.identity import machine_ids, machine_info, network_ids, network_info, parse_machine_spec
from ..vocabulary import GENERATE

if TYPE_CHECKING:
    from ..options import Case


def _is_file(spec: str) -> bool:
    """A profile or preset given as a path to its .toml file, as ``inspect`` accepts."""
    return spec.endswith(".toml") and Path(spec).is_file()


def validate(cases: Sequence[Case]) -> None:
    """Raise InputError for the first unusable case; called before anything runs."""
    if not cases:
        raise InputError("no cases to run", field="cases")
    known_m = set(machine_ids())
    known_n = set(network_ids())
    for case in cases:
        base, _ = parse_machine_spec(case.machine)
        if base not in known_m and not _is_file(base):
            raise InputError(f"unknown machine '{base}' (see `memwall machines list`)", field="machines")
        if case.network is None and case.gemm is None:
            raise InputError("a case needs a network or a GEMM", field="networks")
        if case.network is not None and case.network not in known_n and not _is_file(case.network):
            raise InputError(f"unknown network '{case.network}' (see `memwall networks list`)",
                             field="networks")
        for option in OPTIONS:  # each value as its declaration reads it: one rule, one message
            value = getattr(case, option.name)
            if value != option.default:
                option.parse(value)
        _check_options(case)
    for spec in dict.fromkeys(c.machine for c in cases):
        # Loads every profile once, so a broken file fails here, not in a worker.
        machine_info(spec)
    for net in dict.fromkeys(c.network for c in cases if c.network):
        network_info(net)


def _check_options(case: Case) -> None:
    """The step's options, checked as the step will check them (the network aside: bf16
    stands for a network's own dtype, which needs its preset loaded)."""
    from ..workloads.config import TrainingConfig
    from .step import config_values

    if case.network is None:
        return
    steps = [case]
    if case.phase == GENERATE:  # a whole request: its prefill and a decode step, as they will run
        from .generate import request_parts

        prefill, decode = request_parts(case)
        steps = [prefill, decode(case.prompt)]
    for step in steps:
        TrainingConfig(**{**config_values(step), "dtype": step.dtype or "bf16"})
