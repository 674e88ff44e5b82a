"""The verdict: one line naming the largest component of a step's time, in its own phrase.

Owns: the phrase each bound (:data:`memwall.timing.NAMED_COMPONENTS`, or a memory level) gets
(compute, dispatch, start-up, interconnect, bubble, a memory level), and how memory
compares with arithmetic beside it.
"""

from __future__ import annotations

from ..timing import BUBBLE, COMPUTE, DISPATCH, INTERCONNECT, STARTUP, StepTiming
from ..units import format_time


def verdict(timing: StepTiming) -> str:
    """One line: the largest component of the step's time, and how memory compares with arithmetic."""
    seconds, bound = timing.seconds, timing.bound
    if seconds <= 0:
        return "empty step"
    parts = timing.time_by_component
    share = f"{parts[bound] / seconds:.0%} of the step"
    ratio = timing.memory_ratio
    memory = f"memory time is {ratio:.3g}x arithmetic" if ratio is not None else "no arithmetic"
    d = timing.dispatch
    if bound == COMPUTE:
        return f"arithmetic-bound: {memory} (arithmetic is {share})"
    if bound == DISPATCH and d is not None:
        if d.host_bound:
            return (f"dispatch-bound: the host issues {d.launches} kernels in {format_time(d.host_seconds)} "
                    f"while the device works {format_time(d.device_seconds)} ({d.mode}; {memory})")
        if d.synchronous:
            return (f"dispatch-bound: issuing {d.launches} kernels takes {format_time(d.host_seconds)}, "
                    f"{share} ({d.mode}; {memory})")
        return (f"dispatch-bound: the device's gaps between {d.launches} kernels take "
                f"{format_time(parts[DISPATCH])} of its {format_time(d.device_seconds)} ({d.mode}; {memory})")
    if bound == STARTUP:
        return f"startup-bound: vector start-up is {share} ({memory})"
    if bound == INTERCONNECT:
        return f"interconnect-bound: the device waits on its links for {share} ({memory})"
    if bound == BUBBLE:
        return f"bubble-bound: the pipeline's fill and drain idle the device for {share} ({memory})"
    return f"memory-bound ({bound}): {memory}; {bound} stalls are {share}"
