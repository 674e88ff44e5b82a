"""A case checked before any work starts: every argument, with the error naming it.

Owns: :func:`validate` (every case of a sweep, its profiles and presets loaded once, so a
broken file fails here, not in a worker) and the checks of single options the CLI uses
too (:func:`check_checkpoint`, :func:`check_dispatch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..study.identity import machine_ids, machine_info, network_ids, network_info, parse_machine_spec
from ..vocabulary import ATTENTIONS, FUSIONS, PHASES, UPDATES, check_word, parse_checkpoint

if TYPE_CHECKING:
    from ..options import Case


def check_checkpoint(value: str) -> str:
    parse_checkpoint(value)
    return value


def _is_file(spec: str) -> bool:
    """A profile or preset given as a path to its .toml file, as ``inspect`` accepts."""
    return spec.endswith(".toml") and Path(spec).is_file()


def check_dispatch(value: str | None) -> str | None:
    """A dispatch mode (None: each profile's default), or an InputError naming the choices."""
    from ..vocabulary import DISPATCH_MODES

    if value is None or value in DISPATCH_MODES:
        return value
    raise InputError(f"unknown dispatch mode '{value}' (use {', '.join(DISPATCH_MODES)})", field="dispatch")


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
        if isinstance(case.batch, bool) or not isinstance(case.batch, int) or case.batch < 1:
            raise InputError(f"batch must be a whole number >= 1, got {case.batch!r}", field="batches")
        if case.seq_len is not None and case.seq_len < 1:
            raise InputError(f"seq_len must be >= 1, got {case.seq_len!r}", field="seq_len")
        check_checkpoint(case.checkpoint)
        check_dispatch(case.dispatch)
        if case.updates not in UPDATES:
            raise InputError(f"unknown updates '{case.updates}' (use {' or '.join(UPDATES)})", field="updates")
        if isinstance(case.accumulate, bool) or not isinstance(case.accumulate, int) or case.accumulate < 1:
            raise InputError(f"accumulate must be a whole number >= 1, got {case.accumulate!r}", field="accumulate")
        check_word(case.fusion, FUSIONS, "fusion")
        if case.attention is not None:
            check_word(case.attention, ATTENTIONS, "attention")
        if case.phase not in PHASES:
            raise InputError(f"unknown phase '{case.phase}' (use {' or '.join(PHASES)})", field="phase")
        _check_options(case)
    for spec in dict.fromkeys(c.machine for c in cases):
        # Loads every profile once, so a broken file fails here, not in a worker.
        machine_info(spec)
    for net in dict.fromkeys(c.network for c in cases if c.network):
        network_info(net)


def _check_options(case: Case) -> None:
    """The step's options, checked as the step will check them (the network aside: bf16
    stands for a network's own dtype, which needs its preset loaded)."""
    from dataclasses import fields

    from ..workloads.config import TrainingConfig

    if case.network is None:
        return
    values = {f.name: getattr(case, f.name) for f in fields(TrainingConfig)}
    TrainingConfig(**{**values, "dtype": case.dtype or "bf16"})
