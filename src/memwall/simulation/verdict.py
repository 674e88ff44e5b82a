"""The verdict: one line naming what binds a step, in its own phrase, with the numbers that say so.

Owns: the phrase each binding class gets (compute, memory, dispatch, framework, start-up,
interconnect, power, mixed; :mod:`memwall.simulation.sensitivity` decides the class), and how
memory compares with arithmetic beside it. A verdict starts ``arithmetic-bound`` only
when the class is compute, and ``mixed:`` where the class and ``memory_ratio`` disagree.
"""

from __future__ import annotations

from ..timing import COMPUTE, DISPATCH, FRAMEWORK, INTERCONNECT, POWER, STARTUP, StepTiming
from ..units import format_time
from .sensitivity import MEMORY, MIXED, Binding


def verdict(timing: StepTiming, binding: Binding, elasticities: dict[str, float]) -> str:
    """One line: what binds the step (by its figures' elasticities), and how memory
    compares with arithmetic."""
    seconds = timing.seconds
    if seconds <= 0:
        return "empty step"
    parts = timing.time_by_component
    ratio = timing.memory_ratio
    memory = f"memory time is {ratio:.3g}x arithmetic" if ratio is not None else "no arithmetic"
    cls = binding.bound_class
    top, figure = _figure(binding, elasticities)
    if cls == MIXED:
        other = MEMORY if binding.resource == COMPUTE else COMPUTE
        word = {COMPUTE: "arithmetic", MEMORY: "memory"}
        return (f"mixed: the {word[binding.resource]} figures move the step most (summed |elasticity| "
                f"{binding.shares.get(binding.resource, 0.0):.2f} against {word[other]}'s "
                f"{binding.shares.get(other, 0.0):.2f}; {figure}) yet {memory}: some kernels wait on one, "
                "the rest on the other")
    if cls == COMPUTE:
        return f"arithmetic-bound ({figure}): {memory} (arithmetic is {parts[COMPUTE] / seconds:.0%} of the step)"
    d = timing.dispatch
    if cls == DISPATCH and d is not None:
        if d.host_bound:
            return (f"dispatch-bound ({figure}): the host issues {d.launches} kernels in "
                    f"{format_time(d.host_seconds)} while the device works {format_time(d.device_seconds)} "
                    f"({d.mode}; {memory})")
        if d.synchronous:
            return (f"dispatch-bound ({figure}): issuing {d.launches} kernels takes {format_time(d.host_seconds)}, "
                    f"{d.host_seconds / seconds:.0%} of the step ({d.mode}; {memory})")
        return (f"dispatch-bound ({figure}): the device's gaps between {d.launches} kernels take "
                f"{format_time(parts[DISPATCH])} of its {format_time(d.device_seconds)} ({d.mode}; {memory})")
    if cls == FRAMEWORK and d is not None:
        issue = f" and the kernels' issue {format_time(d.machine_host)}" if d.machine_host > 0 else ""
        return (f"framework-bound ({d.framework}): its own host work ({format_time(d.framework_host)}){issue} take "
                f"the host {format_time(d.host_seconds)} while the device works {format_time(d.device_seconds)} "
                f"({d.mode}; {memory})")
    if cls == STARTUP:
        return f"startup-bound ({figure}): vector start-up is {parts[STARTUP] / seconds:.0%} of the step ({memory})"
    if cls == POWER and timing.machine.energy is not None:
        return (f"power-bound ({figure}): held at the rated {timing.machine.energy.tdp:.4g} W, the arithmetic runs "
                f"at {timing.machine.power_scale:.3g} of its burst rates ({memory})")
    if cls == INTERCONNECT:
        return (f"interconnect-bound ({figure}): the device waits on its links for "
                f"{parts[INTERCONNECT] / seconds:.0%} of the step ({memory})")
    level = level_of(top)
    stalls = f"; {level} stalls are {parts[level] / seconds:.0%} of the step" if level in parts else ""
    return f"memory-bound ({figure}): {memory}{stalls}"


def level_of(path: str) -> str:
    """The memory level a memory figure belongs to: ``level.L2.bandwidth`` -> ``L2``; the
    main memory's figures (and the bytes in flight to it, the memory-level parallelism,
    the ports) -> ``memory``."""
    head, _, rest = path.partition(".")
    return rest.rpartition(".")[0] if head == "level" else MEMORY


def _figure(binding: Binding, elasticities: dict[str, float]) -> tuple[str, str]:
    """The figure a verdict names: the binding class's own largest, and the single largest
    beside it where that belongs to another class (a class binds by its figures' sum, not
    by its largest one)."""
    top = binding.named or binding.bound
    said = f"{top}, elasticity {elasticities.get(top, 0.0):+.2f}"
    if top != binding.bound and binding.bound in elasticities:
        said += f"; the largest single figure is {binding.bound}, {elasticities[binding.bound]:+.2f}"
    return top, said
