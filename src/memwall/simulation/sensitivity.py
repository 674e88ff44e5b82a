"""Which machine figure binds a step, measured: d ln(seconds) / d ln(figure) for each timing
figure of the profile, by timing the same counts again on a machine with that figure moved.

Owns: the timing figures and the resource class each belongs to (:func:`figure_class`),
a machine with one figure scaled (:func:`scaled`), the elasticities
(:func:`sensitivity`) and the binding resource read from them (:func:`binding`: the
figure with the largest elasticity, the class whose figures' elasticities sum highest,
and ``mixed`` where that class disagrees with ``memory_ratio``). docs/timing.md,
"The binding resource", states the rule.

No replay is repeated: the engine's counts depend on the caches' geometry, never on a
bandwidth, latency, peak or dispatch cost (memwall.simulation.replay.replay_key), so a
step is re-timed, not re-simulated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..interconnect import Link
from ..profiles import Machine, with_memory_bandwidth
from ..timing import COMPUTE, DISPATCH, FRAMEWORK, INTERCONNECT, POWER, STARTUP

MEMORY, MIXED = "memory", "mixed"
Retime = Callable[[Machine], float]  # the step's seconds, its counts timed on another machine
STEP = 0.01  # each figure is moved by 1 % each way: a central difference of ln(seconds)
# memory_ratio beyond these disagrees with a compute (above) or memory (below) class: mixed
MIXED_ABOVE, MIXED_BELOW = 1.05, 0.95
# Figures that set other figures' scale (the clock times every rate stated in cycles) are
# listed but neither name the bound nor count in a class: the figures they scale do.
SCALE_ONLY = ("clock",)

_CLASSES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), c) for p, c in (
    (r"compute\.[^.]+|compute\.(vector|achievable|sustained)\.[^.]+|issue_costs\.[^.]+"
     r"|timing\.(outer_product|multiply_add_cycles|vector_bytes)", COMPUTE),
    (r"memory\.(bandwidth|sustained(_read|_copy)?|latency)|level\.[^.]+\.(bandwidth|latency)|schedule\.bytes_in_flight"
     r"|timing\.(mlp|memory_ports|load_ports|store_ports|bank_busy)", MEMORY),
    (r"timing\.dispatch\.[^.]+\.(host_issue|device_gap|step_issue)", DISPATCH),
    (r"timing\.(startup|strip_loop)", STARTUP),
    (r"interconnect\.(node|cluster)\.(bandwidth|latency)", INTERCONNECT),
    (r"energy\.(tdp|static)", POWER),
    (r"clock", "scale"),
))


# Timing parameters that are counts, flags or choices, not continuous figures: moving them
# 1 % means nothing (a bank count, a word size, whether pipes chain), so they have no
# elasticity. Every other [timing] parameter must have a class (a test holds it).
STRUCTURAL_TIMING = ("banks", "word_bytes", "vector_length", "subword_float", "chaining", "overlap", "cores",
                     "efficiency_mn", "efficiency_k")


def figure_class(path: str) -> str | None:
    """The resource a timing figure belongs to (compute, memory, dispatch, startup,
    interconnect; ``scale`` for the clock), or None for a figure that is not a rate,
    latency or cost (a size, a count of units, a flag)."""
    return next((c for pattern, c in _CLASSES if pattern.fullmatch(path)), None)


def timing_figures(machine: Machine, dispatch: str | None = None, links: bool = True) -> list[str]:
    """The ``--set`` paths of the machine's timing figures that it states (a positive
    number), in a fixed order: clock, arithmetic, memory, dispatch, start-up, links, and the
    rated and idle power where the step is held at its power limit (memwall.simulation.power;
    a step below it waits on neither).
    ``dispatch`` (a mode) keeps only the figures of the mode the step is issued in;
    ``links`` False leaves out the interconnect (a step on one device never uses it)."""
    paths = ["clock"]
    paths += [f"compute.{d}" for d in machine.peak_flops]
    paths += [f"compute.vector.{d}" for d in machine.vector_flops]
    paths += [f"compute.achievable.{d}" for d in machine.achievable_flops]
    paths += [f"compute.sustained.{d}" for d in machine.sustained_flops]
    paths += [f"issue_costs.{op}" for op in machine.issue_costs]
    paths += [f"level.{lv.name}.{key}" for lv in machine.levels for key in ("bandwidth", "latency")]
    paths += ["memory.bandwidth", "memory.latency", "schedule.bytes_in_flight"]
    paths += [f"timing.{key}" for key in machine.timing.params]
    if machine.dispatch is not None:
        used = machine.dispatch.stated(dispatch) if dispatch is not None else None
        paths += [f"timing.dispatch.{mode}.{key}" for mode in machine.dispatch.modes if used in (None, mode)
                  for key in ("host_issue", "device_gap", "step_issue")]
    if machine.interconnect is not None and links:
        paths += [f"interconnect.{link}.{key}" for link in ("node", "cluster") for key in ("bandwidth", "latency")]
    if machine.power_scale < 1 and machine.energy is not None:  # the rating holds the clock (simulation.power)
        paths += ["energy.tdp", "energy.static"]
    return [p for p in paths if figure_class(p) is not None and _value(machine, p) is not None]


def _value(machine: Machine, path: str) -> float | None:
    try:
        value = _get(machine, path)
    except (KeyError, AttributeError, StopIteration, TypeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _get(machine: Machine, path: str) -> object:
    """The figure at ``path``, read by the same walk that replaces it (:func:`_changed`)."""
    seen: list[object] = []
    _changed(machine, path, lambda value: seen.append(value) or value)
    return seen[0]


def scaled(machine: Machine, path: str, factor: float) -> Machine:
    """``machine`` with the figure at ``path`` (a ``--set`` path) multiplied by ``factor``;
    memory.bandwidth moves the figures stated against it too, as ``--set`` does
    (:func:`memwall.profiles.with_memory_bandwidth`): a faster memory sustains more and
    keeps more in flight, so the elasticity is that of the memory, not of a label."""
    if path == "memory.bandwidth":
        return with_memory_bandwidth(machine, machine.memory.bandwidth * factor)
    return _changed(machine, path, lambda value: value * factor)


def _changed(machine: Machine, path: str, change: Callable[[Any], Any]) -> Machine:
    """``machine`` with the figure at ``path`` replaced by ``change(figure)``; a KeyError,
    AttributeError or StopIteration where the machine states no such figure."""
    head, _, rest = path.partition(".")
    if path == "clock":
        return replace(machine, clock_hz=change(machine.clock_hz))
    if head == "compute":
        table, _, dtype = rest.rpartition(".")
        attr = {"": "peak_flops", "vector": "vector_flops", "achievable": "achievable_flops",
                "sustained": "sustained_flops"}[table]
        return replace(machine, **{attr: _with(getattr(machine, attr), dtype, change)})
    if head == "issue_costs":
        return replace(machine, issue_costs=_with(machine.issue_costs, rest, change))
    if head == "memory":
        return replace(machine, memory=replace(machine.memory, **{rest: change(getattr(machine.memory, rest))}))
    if head == "level":
        name, _, key = rest.rpartition(".")
        level = next(lv for lv in machine.levels if lv.name == name)
        new = replace(level, **{key: change(getattr(level, key))})
        return replace(machine, levels=tuple(new if lv is level else lv for lv in machine.levels))
    if head == "schedule":
        return replace(machine, schedule=replace(machine.schedule, params=_with(machine.schedule.params, rest, change)))
    if head == "timing" and rest.startswith("dispatch."):
        _, mode, key = rest.split(".")
        spec = machine.dispatch
        if spec is None:
            raise KeyError(path)
        modes = dict(spec.modes)
        modes[mode] = replace(modes[mode], **{key: change(getattr(modes[mode], key))})
        return replace(machine, dispatch=replace(spec, modes=modes))
    if head == "timing":
        return replace(machine, timing=replace(machine.timing, params=_with(machine.timing.params, rest, change)))
    if head == "energy" and machine.energy is not None and rest in ("tdp", "static"):
        return replace(machine, energy=replace(machine.energy, **{rest: change(getattr(machine.energy, rest))}))
    if head == "interconnect":
        ic = machine.interconnect
        name, _, key = rest.partition(".")
        link: Link = getattr(ic, name)
        if key == "bandwidth":  # the measured rate moves with its peak, as a --set moves it
            moved = link.scaled(change(link.bandwidth) / link.bandwidth)
        else:
            moved = replace(link, **{key: change(getattr(link, key))})
        return replace(machine, interconnect=replace(ic, **{name: moved}))
    raise KeyError(path)


def _with(table: Mapping[str, Any], key: str, change: Callable[[Any], Any]) -> dict:
    return {**table, key: change(table[key])}


class _Reads(Mapping[str, Any]):
    """A machine's table of figures by key (its peaks, its issue costs) that records which
    keys the timing reads; any walk over the whole table (iteration, its length) counts
    as reading them all."""

    def __init__(self, table: Mapping[str, Any]) -> None:
        self._table = table
        self.read: set[str] = set()
        self.all = False

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._table[key]

    def __iter__(self) -> Iterator[str]:
        self.all = True
        return iter(self._table)

    def __len__(self) -> int:
        self.all = True
        return len(self._table)


# The tables of figures a step reads by key, and the --set prefix of their paths.
_KEYED = (("peak_flops", "compute."), ("vector_flops", "compute.vector."),
          ("achievable_flops", "compute.achievable."), ("sustained_flops", "compute.sustained."),
          ("issue_costs", "issue_costs."))


def unread_figures(machine: Machine, retime: Retime) -> set[str]:
    """The ``--set`` paths of the keyed figures (peaks, vector rates, product ceilings,
    issue costs) that timing the step on ``machine`` never reads: retiming with one of
    them moved runs the same code on the same numbers up to the same result, so its
    elasticity is exactly 0 and needs no retiming (a bf16 step never reads the fp64 peak)."""
    tables = {attr: _Reads(getattr(machine, attr)) for attr, _ in _KEYED}
    retime(replace(machine, **tables))
    return {prefix + key for attr, prefix in _KEYED if not tables[attr].all
            for key in getattr(machine, attr) if key not in tables[attr].read}


def sensitivity(machine: Machine, retime: Retime, dispatch: str | None = None,
                links: bool = True) -> dict[str, float]:
    """Each timing figure's ``--set`` path -> d ln(seconds) / d ln(figure), from
    ``retime`` (the step's seconds on a machine) with the figure moved :data:`STEP` each
    way. Negative for a rate (more bandwidth, less time), positive for a latency or a
    cost, 0 for a figure the step never waits on; rounded to 4 places. ``dispatch`` and
    ``links`` leave out figures the step cannot use (:func:`timing_figures`); a keyed
    figure the step never reads (:func:`unread_figures`) is 0 without retiming."""
    out: dict[str, float] = {}
    up, down = 1.0 + STEP, 1.0 / (1.0 + STEP)
    paths = timing_figures(machine, dispatch, links)
    keyed = [p for p in paths if p.startswith(tuple(prefix for _, prefix in _KEYED))]
    # one timing to find them, worth it where it can spare two retimes of each of several
    unread = unread_figures(machine, retime) if len(keyed) > 1 else set()
    for path in paths:
        if path in unread:
            out[path] = 0.0
            continue
        faster, slower = retime(scaled(machine, path, up)), retime(scaled(machine, path, down))
        e = math.log(faster / slower) / (2 * math.log(up)) if faster > 0 and slower > 0 else 0.0
        out[path] = round(e, 4) + 0.0  # + 0.0: no -0.0 in the JSON
    return out


@dataclass(frozen=True)
class Binding:
    """What binds a step: the figure, its class, and the class by the rule with memory_ratio."""

    bound: str  # the --set path of the figure with the largest |elasticity|
    resource: str  # the class whose figures' |elasticities| sum highest
    bound_class: str  # resource, or mixed where it contradicts memory_ratio
    shares: dict[str, float]  # each class's summed |elasticity|
    named: str = ""  # the resource's own figure with the largest |elasticity| (what a verdict names)


def binding(elasticities: Mapping[str, float], memory_ratio: float | None, fallback: str = COMPUTE,
            framework_bound: bool = False) -> Binding:
    """The binding figure and class of a step from its :func:`sensitivity`. ``fallback``
    names the class when no figure moves the step (an empty step). ``framework_bound``: the
    device waits on a host stream that is mostly the framework's own work, which no machine
    figure's elasticity can name (the framework's figures are not the machine's)."""
    classed = {p: abs(e) for p, e in elasticities.items() if figure_class(p) not in (None, "scale")}
    shares: dict[str, float] = {}
    for p, e in classed.items():
        cls = figure_class(p)
        assert cls is not None
        shares[cls] = shares.get(cls, 0.0) + e
    if framework_bound:
        return Binding(FRAMEWORK, FRAMEWORK, FRAMEWORK, {c: round(v, 4) for c, v in shares.items()}, FRAMEWORK)
    if not classed or max(classed.values()) == 0:
        return Binding(fallback, fallback, fallback, shares, fallback)
    bound = max(classed, key=lambda p: classed[p])  # the first such: the profile's order breaks a tie
    resource = max(shares, key=lambda c: shares[c])
    cls = resource
    if memory_ratio is not None and ((resource == COMPUTE and memory_ratio > MIXED_ABOVE)
                                     or (resource == MEMORY and memory_ratio < MIXED_BELOW)):
        cls = MIXED
    named = max((p for p in classed if figure_class(p) == resource), key=lambda p: classed[p])
    return Binding(bound, resource, cls, {c: round(v, 4) for c, v in shares.items()}, named)
