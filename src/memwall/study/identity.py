"""Which machine and which network a case names: the facts rows, keys and figures use.

Owns: the shipped machine and network ids, machine specs (an id, a path, or a synthetic
``BASE@bw=X``: the shipped profile ``BASE`` with its main-memory bandwidth replaced by
``X`` bytes/s, same compute engine, same caches, different balance; ``BASE@hier=X``: its
whole memory system scaled by one factor so that main memory gives ``X`` bytes/s, every
level's bandwidth multiplied and every latency divided by it; the synthetic balance sweep
of figure 6 is made of these), and each profile's and preset's
fingerprint (a hash of the whole file: any edit changes every key that uses it).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from ..canonical import dumps
from ..errors import InputError
from ..units import LARGEST, SMALLEST

if TYPE_CHECKING:
    from ..profiles import Machine

_SYNTH = re.compile(r"^(?P<base>[^@]+)@bw=(?P<bw>[0-9.eE+\-]+)$")
HIERARCHY = "hier"  # BASE@hier=X: the whole memory system scaled so main memory gives X B/s
SCOPES = ("bw", HIERARCHY)


@dataclass(frozen=True)
class MachineInfo:
    """The facts about one machine that rows, keys and figures use."""

    id: str
    name: str
    year: int
    kind: str
    primary_dtype: str
    peak_flops: Mapping[str, float]  # FLOP/s per dtype
    bandwidth: float  # main memory, B/s
    fingerprint: str  # hash of the whole profile: any edit changes every key that uses it
    synthetic: bool = False
    on_chip: int = 0  # bytes of its largest on-chip level (cache or scratchpad): what weights could stay in

    def balance(self) -> float:
        """Peak FLOP/s of the primary dtype per byte/s of main memory."""
        return self.peak_flops[self.primary_dtype] / self.bandwidth


@dataclass(frozen=True)
class NetworkInfo:
    id: str
    fingerprint: str
    seq_len: int | None = None  # tokens per example for sequence models, else None


def machine_ids() -> list[str]:
    """The shipped machines, by year, then id."""
    from ..profiles import all_machines

    return [m.id for m in all_machines()]


def network_ids() -> list[str]:
    from ..networks import network_ids as shipped

    return shipped()


def load_machine_spec(spec: str) -> Machine:
    """The profile for an id, a path, or a synthetic ``BASE@bw=X`` or ``BASE@hier=X`` spec."""
    from ..profiles import load_machine, with_memory_bandwidth

    base, bw = parse_machine_spec(spec)
    machine = load_machine(base)
    if bw is None:
        return machine
    if synthetic_scope(spec) != HIERARCHY:
        # main memory's alone: a stated sustained rate moves with the peak it was measured
        # against; the bytes in flight and every latency stay the base's
        return with_memory_bandwidth(machine, bw, in_flight=False)
    # Every level k times faster: bandwidths times k and, so that Little's law (bytes in
    # flight / latency) scales with them, latencies over k.
    k = bw / machine.memory.bandwidth
    levels = tuple(replace(lv, bandwidth=None if lv.bandwidth is None else lv.bandwidth * k,
                           latency=None if lv.latency is None else lv.latency / k) for lv in machine.levels)
    memory = with_memory_bandwidth(machine, bw, in_flight=False).memory  # the sustained rate with the peak
    return replace(machine, levels=levels, memory=replace(memory, latency=machine.memory.latency / k))


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(dumps(value).encode()).hexdigest()


def _content(described: Mapping[str, Any]) -> dict[str, Any]:
    # Where a file was read from is not what it says: keys must match across checkouts.
    return {k: v for k, v in described.items() if k != "path"}


# Each profile and preset is read once per process: the sweep asks for the same few
# thousands of times (every key, every row), and a sweep's files do not change under it.
@cache
def machine_info(spec: str) -> MachineInfo:
    """The facts the sweep uses about a machine spec (see :func:`load_machine_spec`)."""
    from ..profiles import load_machine

    base, bw = parse_machine_spec(spec)
    m = load_machine(base)
    bandwidth = m.memory.bandwidth if bw is None else bw
    hierarchy = synthetic_scope(spec) == HIERARCHY
    name = (m.name if bw is None else f"{m.name}, memory at {bandwidth:.3g} B/s"
            + (f", every level x{bandwidth / m.memory.bandwidth:.3g}" if hierarchy else ""))
    # A profile given as a file is named by its id, as a shipped one is (the row, the
    # tables and the figures show ids; the spec stays the case's, for its key).
    shown = spec if not is_path(base) else m.id + spec[len(base):]
    return MachineInfo(
        id=shown, name=name, year=m.year, kind=m.kind, primary_dtype=m.primary_dtype,
        peak_flops=dict(m.peak_flops), bandwidth=bandwidth,
        fingerprint=_fingerprint({"profile": _content(m.as_dict()), "bandwidth": bw,
                                  **({"scope": HIERARCHY} if hierarchy else {})}),
        synthetic=bw is not None, on_chip=max((lv.size for lv in m.levels), default=0),
    )


@cache
def network_info(net_id: str) -> NetworkInfo:
    from ..networks import load_network

    net = load_network(net_id)
    return NetworkInfo(id=net_id, fingerprint=_fingerprint(_content(net.as_dict())), seq_len=net.seq_len)


def is_path(spec: str) -> bool:
    """Whether a machine or network spec names a file rather than a shipped id."""
    return spec.endswith(".toml") or "/" in spec or "\\" in spec


def parse_machine_spec(spec: str) -> tuple[str, float | None]:
    """``"cray-1"`` -> ("cray-1", None); ``"h100@bw=1e12"`` -> ("h100", 1e12).

    Anything after the last ``@`` (outside a path) must be ``bw=`` and a finite positive
    number: ``h100@bw=nan`` is a bad bandwidth, not an unknown machine.
    """
    base, at, rest = spec.rpartition("@")
    if not at or "/" in rest or "\\" in rest:
        return spec, None
    if not base:
        raise InputError(f"synthetic machine '{spec}' names no base machine (use BASE@bw=B/s)", field="machines")
    name, eq, value = rest.partition("=")
    if name.strip() not in SCOPES or not eq:
        raise InputError(f"synthetic machine '{spec}': the only setting after '@' is bw=B/s (main memory) or "
                         "hier=B/s (the whole memory system scaled with it)", field="machines")
    try:
        bw = float(value.replace("_", "x"))  # float() takes 1_000; a spec should not
    except ValueError:
        raise InputError(f"bad bandwidth in synthetic machine '{spec}': {value!r} is not a number",
                         field="machines") from None
    if not (bw > 0 and math.isfinite(bw)):
        raise InputError(f"synthetic machine '{spec}': bandwidth must be a positive, finite number of B/s, "
                         f"got {value!r}", field="machines")
    if not SMALLEST <= bw <= LARGEST:  # the bounds --set and the profiles' files obey
        raise InputError(f"synthetic machine '{spec}': bandwidth must be within {SMALLEST:g} .. {LARGEST:g} B/s "
                         "(no machine is beyond, and the step's numbers would not be finite)", field="machines")
    return base, bw


def synthetic_scope(spec: str) -> str | None:
    """What a synthetic spec scales: ``"bw"`` (main memory's bandwidth alone), ``"hier"``
    (the whole memory system), None for a plain machine."""
    base, at, rest = spec.rpartition("@")
    if not at or "/" in rest or "\\" in rest:
        return None
    scope = rest.partition("=")[0].strip()
    return scope if scope in SCOPES else None


def synthetic_spec(base: str, bandwidth: float, hierarchy: bool = False) -> str:
    # repr keeps the exact double, so the spec (and the key) is the same on every run.
    return f"{base}@{HIERARCHY if hierarchy else 'bw'}={float(bandwidth)!r}"
