"""Energy: a timed step's counts to joules by component, and the energy table of a result.

Owns: which figure prices a kernel's arithmetic (:func:`arithmetic_figure`), the bytes
each level of a machine moves in a step (:func:`level_bytes`: a scratchpad is charged for
the bytes staged through it), one device's joules by component (:func:`device_joules`)
and per kernel (:func:`kernel_joules`), the joules of a device's communication
(:func:`link_joules`), and :func:`energy_table`, the ``energy`` group of every result.
Each function computes exactly the equations of ``docs/energy.md``; keep the two in step.

The model is a sum of counts times energies: joules = sum over dtypes of operations x
joules per operation + sum over levels of bytes x joules per byte + main memory's bytes
x the fabric's joules per byte + bits sent x joules
per bit on each link + static watts x seconds x devices + host watts x the host's issue
seconds. The counts are the engine's and the timing's, unchanged: energy asks nothing
the time did not already answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .timing import ASYNC_KINDS, DTYPE_FALLBACK, MATRIX_OPS, MEMORY, KernelTiming, StepTiming, rate_dtype

if TYPE_CHECKING:
    from .profiles import Machine
    from .timing import CommTiming

ARITHMETIC, INTERCONNECT, STATIC, HOST, FABRIC = "arithmetic", "interconnect", "static", "host", "fabric"
POWER_WARNING = "average power"  # how the warning above the rated power begins


@dataclass(frozen=True)
class EnergyTable:
    """A result's ``energy``: every device of the step, by component."""

    joules: float  # every device of the step
    joules_by_component: dict[str, float]  # arithmetic.<dtype>, each level, memory, interconnect, static, host
    data_movement_share: float  # (levels + memory + interconnect) / joules
    watts_average: float  # per device: joules / seconds / devices
    tdp: float  # the profile's rated power per device
    tokens_per_joule: float | None  # a step with tokens (every device's)
    cups_per_joule: float | None  # a training step with connections: connection updates per joule
    unstated: list[str] = field(default_factory=list)  # figures the step needed that the profile does not state


def arithmetic_figure(machine: Machine, dtype: str, op: str) -> tuple[str, float] | None:
    """(dtype, joules per operation) that prices one operation of ``op`` in ``dtype``: a
    product at the energy of the dtype whose rate ran it (:func:`memwall.timing.rate_dtype`),
    other kernels on the vector units ([energy.vector], by the dtype's fallback order)
    where the profile states them, else as products; None where no figure applies."""
    spec = machine.energy
    if spec is None:
        return None
    order = DTYPE_FALLBACK.get(dtype, (dtype,))
    if op not in MATRIX_OPS:
        for d in order:
            if d in spec.vector:
                return d, spec.vector[d]
    try:
        rated = (rate_dtype(machine, dtype),)
    except InputError:  # a dtype with no rate: the fallbacks below still price it
        rated = ()
    for d in (*rated, *order, machine.primary_dtype):
        if d in spec.matrix:
            return d, spec.matrix[d]
    return None


def level_bytes(machine: Machine, moved: Mapping[str, float]) -> dict[str, float]:
    """Bytes each level of ``machine`` moved (``moved``: bytes by level name, as a
    timing's ``bytes``), main memory last: a cache's are the engine's; a scratchpad
    (software-managed) is charged for the bytes staged through it, those the level
    below it delivered."""
    names = [lv.name for lv in machine.levels] + [MEMORY]
    out: dict[str, float] = {}
    for i, lv in enumerate(machine.levels):
        if lv.software_managed:
            below = next((n for n in names[i + 1:] if n in moved), None)
            out[lv.name] = float(moved.get(below, 0.0)) if below else 0.0
        else:
            out[lv.name] = float(moved.get(lv.name, 0.0))
    out[MEMORY] = float(moved.get(MEMORY, 0.0))
    return out


def _byte_figures(machine: Machine) -> dict[str, float | None]:
    return {**{lv.name: lv.energy for lv in machine.levels}, MEMORY: machine.memory.energy}


def kernel_joules(machine: Machine, kernel: KernelTiming, iterations: int = 1,
                  unstated: set[str] | None = None) -> dict[str, float]:
    """One kernel's dynamic joules by component (all its repeats, ``iterations`` passes):
    its operations at :func:`arithmetic_figure`'s energy and its bytes at each level's.
    Figures the kernel needed and the profile lacks are added to ``unstated``."""
    out: dict[str, float] = {}
    if kernel.flops:
        priced = arithmetic_figure(machine, kernel.dtype, kernel.op)
        if priced is None:
            if unstated is not None:
                unstated.add(f"energy.{kernel.dtype}")
        else:
            d, joules = priced
            out[f"{ARITHMETIC}.{d}"] = kernel.flops * iterations * joules
    figures = _byte_figures(machine)
    for name, nbytes in level_bytes(machine, kernel.bytes).items():
        if not nbytes:
            continue
        if figures[name] is None:
            if unstated is not None:
                unstated.add("memory.energy" if name == MEMORY else f"level.{name}.energy")
            continue
        out[name] = nbytes * iterations * figures[name]
    fabric = machine.energy.fabric if machine.energy is not None else None
    memory_bytes = float(kernel.bytes.get(MEMORY, 0.0))
    if fabric is not None and memory_bytes:
        out[FABRIC] = memory_bytes * iterations * fabric
    return out


def link_joules(machine: Machine, comms: Sequence[CommTiming], unstated: set[str] | None = None) -> float:
    """Joules of the bits one device sends: each link class's bytes x 8 x its energy per bit."""
    total = 0.0
    for c in comms:
        for link_name, nbytes in c.link_bytes.items():
            if not nbytes:
                continue
            # bytes on a class of link only where the profile states it (the collectives refuse otherwise)
            link = getattr(machine.interconnect, link_name, None)
            if link is None or link.energy is None:
                if unstated is not None:
                    unstated.add(f"interconnect.{link_name}.energy")
                continue
            total += nbytes * 8 * link.energy
    return total


def _add(into: dict[str, float], more: Mapping[str, float], times: float = 1.0) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + v * times


def device_joules(timing: StepTiming, comms: Sequence[CommTiming] = (),
                  unstated: set[str] | None = None) -> dict[str, float]:
    """One device's dynamic joules by component over its step: its kernels' and its
    communication's (``interconnect``), and the host's issue time at ``[energy] host``
    (an accelerator's host; a CPU issues its own work). Static power is the step's, not a
    device's: :func:`energy_table` adds it."""
    machine = timing.machine
    out: dict[str, float] = {}
    for k in timing.kernels:
        _add(out, kernel_joules(machine, k, timing.iterations, unstated))
    out[INTERCONNECT] = link_joules(machine, comms, unstated)
    spec = machine.energy
    host = spec.host if spec is not None else None
    issuing = timing.dispatch.host_seconds if timing.dispatch is not None else 0.0
    out[HOST] = host * issuing if host and machine.kind in ASYNC_KINDS else 0.0
    return out


def kernel_total_joules(machine: Machine, kernel: KernelTiming, iterations: int) -> float | None:
    """A kernel row's ``joules``: its dynamic joules and the static power over its seconds
    (on one device, the step's joules are the sum of its kernels', the host's excepted)."""
    if machine.energy is None:
        return None
    dynamic = sum(kernel_joules(machine, kernel, iterations).values())
    return dynamic + machine.energy.static * kernel.seconds * iterations


def energy_table(machine: Machine, devices: Iterable[tuple[float, Mapping[str, float]]], seconds: float,
                 device_count: int, *, tokens: float = 0.0, connection_updates: float = 0.0,
                 unstated: Iterable[str] = ()) -> EnergyTable | None:
    """The step's energy: ``devices`` is (how many devices, one device's dynamic joules by
    component) for each kind of device, every one of the ``device_count`` devices draws
    the static power for the step's ``seconds``. None where the profile states no
    [energy]."""
    spec = machine.energy
    if spec is None:
        return None
    components: dict[str, float] = {}
    for count, joules in devices:
        _add(components, joules, count)
    arithmetic = sorted(k for k in components if k.startswith(ARITHMETIC + "."))
    order = [*arithmetic, *(lv.name for lv in machine.levels), MEMORY,
             *([FABRIC] if spec.fabric is not None else []), INTERCONNECT]
    by_component = {k: components.get(k, 0.0) for k in order}
    by_component[STATIC] = spec.static * seconds * device_count
    by_component[HOST] = components.get(HOST, 0.0)
    return _table(by_component, spec.tdp, seconds, device_count, tokens, connection_updates, unstated)


def _table(by_component: dict[str, float], tdp: float, seconds: float, device_count: int, tokens: float,
           connection_updates: float, unstated: Iterable[str]) -> EnergyTable:
    """The table of joules by component: the total, the share moving data, the average
    power per device and the work per joule (None where there is no such work)."""
    total = sum(by_component.values())
    moving = sum(v for k, v in by_component.items() if k not in (STATIC, HOST) and not k.startswith(ARITHMETIC))

    def per_joule(n: float) -> float | None:
        return n / total if n > 0 and total > 0 else None

    return EnergyTable(
        joules=total, joules_by_component=by_component,
        data_movement_share=moving / total if total > 0 else 0.0,
        watts_average=total / seconds / device_count if seconds > 0 else 0.0, tdp=tdp,
        tokens_per_joule=per_joule(tokens), cups_per_joule=per_joule(connection_updates),
        unstated=sorted(set(unstated)))


def summed_table(tables: Sequence[tuple[float, EnergyTable | None]], seconds: float, device_count: int, *,
                 tokens: float = 0.0) -> EnergyTable | None:
    """The energy of several steps run one after another (a whole request: its prefill and
    its decode steps), each table counted ``w`` times: joules by component added, the
    shares and rates recomputed over the steps' ``seconds``, ``device_count`` devices and
    ``tokens``. None where a table is None (the profile states no [energy])."""
    if not tables or any(t is None for _, t in tables):
        return None
    steps = [(w, t) for w, t in tables if t is not None]
    components: dict[str, float] = {}
    for w, t in steps:
        _add(components, t.joules_by_component, w)
    return _table(components, steps[0][1].tdp, seconds, device_count, tokens, 0.0,
                  (u for _, t in steps for u in t.unstated))


def energy_warnings(machine: Machine, table: EnergyTable | None) -> list[str]:
    """A step whose average power per device is above the profile's rated power: the
    figures, or the step, describe no real run of that machine."""
    if table is None or table.joules <= 0:
        return []
    # the device's own power: the host's share is the host CPUs', which the device's rating does not bound
    watts = {k: v / table.joules * table.watts_average for k, v in table.joules_by_component.items() if k != HOST}
    device = sum(watts.values())
    # a relative margin: a profile whose static power is its rating (an ECL machine) sums to it
    if device <= table.tdp * (1 + 1e-9):
        return []
    top = max(watts, key=lambda k: watts[k])
    return [f"{POWER_WARNING} {device:.4g} W per device is above {machine.id}'s energy.tdp "
            f"{table.tdp:.4g} W: the energy figures overstate it (the largest share: {top}, {watts[top]:.4g} W)"]


def with_power_warning(machine: Machine, warnings: Sequence[str], table: EnergyTable | None) -> list[str]:
    """``warnings`` with the power warning of an earlier table replaced by ``table``'s
    (a multi-device step or a whole request, whose energy is not its first step's)."""
    return [w for w in warnings if not w.startswith(POWER_WARNING)] + energy_warnings(machine, table)


def as_json(table: EnergyTable | None) -> dict[str, Any] | None:
    return None if table is None else asdict(table)
