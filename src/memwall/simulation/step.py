"""The step a case runs: the network and configuration its options name, built.

Owns: :func:`build_case_step` (a single product, or a network's training or inference
step), the network a case runs (its preset with the case's attention kernels) and the
training configuration its step options make.
"""

from __future__ import annotations

from dataclasses import fields

from ..errors import InputError
from ..networks import Network, load_network, with_attention, with_positions
from ..options import Case
from ..profiles import case_framework
from ..workloads.config import TrainingConfig
from ..workloads.step import Step, build_step, gemm_step


def build_case_step(case: Case) -> Step:
    """The step a case runs: a single product, or a network's training or inference step."""
    if (case.gemm is None) == (case.network is None):
        raise InputError("a case names exactly one of a network and a GEMM", field="network")
    if case.gemm is not None:
        m, n, k = case.gemm
        step = gemm_step(m, n, k, case.dtype or "fp32", case.out_dtype)
    else:
        network = case_network(case)
        step = build_step(network, case_config(case, network))
    return _addressable(step, case)


# A step's data must fit in a 64-bit address space with room for its strides (the engine
# takes addresses and strides below 2^63): refused here, naming what the person gave,
# rather than by the access whose strides overflow.
MAX_STEP_BYTES = 1 << 62


def _addressable(step: Step, case: Case) -> Step:
    peak = step.ledger.peak
    if peak <= MAX_STEP_BYTES:
        return step
    weights = step.ledger.as_dict().get("weights", 0)
    if case.gemm is not None:
        what, field = "--gemm " + ",".join(map(str, case.gemm)), "gemm"
    elif weights > MAX_STEP_BYTES and case.max_positions is not None:  # the position table alone is too large
        what, field = f"network {case.network} with --max-positions {case.max_positions}", "max_positions"
    elif weights > MAX_STEP_BYTES:
        what, field = f"network {case.network}", "network"
    elif case.cache_length is not None and step.ledger.as_dict().get("kv_cache", 0) > MAX_STEP_BYTES:
        what, field = f"network {case.network} with --cache-length {case.cache_length}", "cache_length"
    else:
        what, field = f"network {case.network} at --batch {case.batch}", "batch"
    raise InputError(f"{what} needs {peak:.3g} bytes of operands at its peak, beyond the 2^62 bytes a 64-bit "
                     "machine can address with room for its strides", field=field)


def case_network(case: Case) -> Network:
    """The network a case runs: its preset, with the case's attention kernels (else those
    its framework runs, else the network's own) and learned positions where it names them."""
    network = load_network(case.network)
    attention = case.attention
    if attention is None and network.is_sequence:
        attention = case_framework(case.framework, case.machine).attention
    return with_positions(with_attention(network, attention), case.max_positions)


def case_config(case: Case, network: Network) -> TrainingConfig:
    """The training configuration a network case runs: every step option the configuration
    declares, the network's own dtype unless the case names one."""
    extra = {}
    if case.cache_length is not None:  # what decode reads of the preallocated cache is the framework's
        from ..frameworks import framework_for
        from ..profiles import load_machine

        extra["cache_read"] = framework_for(case.framework, load_machine(case.machine).framework).decode_attention
    return TrainingConfig(**{**config_values(case), "dtype": case.dtype or network.dtype, **extra})


def config_values(case: Case) -> dict:
    """The case's value of each step option :class:`TrainingConfig` declares (a network's
    step: ``single_product`` is the GEMM builder's own)."""
    return {f.name: getattr(case, f.name) for f in fields(TrainingConfig) if f.name not in ("single_product", "cache_read")}
