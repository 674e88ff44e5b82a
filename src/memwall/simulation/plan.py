"""What a step's replay will be, worked out before any of it runs, and what it costs.

Owns: the replay budget and the sampling of large nests (:func:`plan_replay`), the cost
guard (:func:`check_cost`: a case over its line-lookup limit is refused with the
estimate), and :class:`Prepared`, the steps and plans a process keeps for the cases that
share them.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..options import DEVICES, STEP, Case
from ..profiles import Machine
from ..streams import LoopNest
from ..streams import replay_lookups as row_lookups  # one kernel's planned replay
from ..timing import tile_l2_cost
from ..workloads.lowering import Lowered, lower
from ..workloads.step import Kernel, Step
from .step import build_case_step

# Line lookups a step may replay in full; above it, large nests are sampled in proportion
# to their size, each sample at least the floor of sample_floor().
STEP_BUDGET = 40_000_000


# The floor: SAMPLE_SPANS times the caches' lines, so that a sample sweeps them twice over,
# and no less than SAMPLE_FLOOR; on a machine with small caches, CACHE_SPANS times its
# lines (at least SAMPLE_FLOOR_MIN) is enough. Measured on the validation's 121
# predictions against samples of 4 M lookups (benchmarks/README.md, "Sampling floor"): one
# span (A100 328 K lookups) moves step times by up to 1.9 %, two spans by up to 0.8 %,
# and the flat million this replaced (one span of a B200's 126 MiB L2) by up to 1.9 %.
SAMPLE_SPANS = 2


SAMPLE_FLOOR = 500_000


CACHE_SPANS = 64


SAMPLE_FLOOR_MIN = 65_536


# The cost guard. The engine replays between about 17 M (a GPU's tiled step through three
# levels) and 250 M (a machine without caches) first-level line lookups a second on one
# core of the machine this was measured on; ENGINE_RATE is the slow end, so an estimate
# errs long. MAX_LOOKUPS is ten minutes at that rate: a case that would replay more is
# refused before any work unless the caller raises the limit (``--max-lookups``).
ENGINE_RATE = 17e6  # line lookups per second


MAX_LOOKUPS = int(ENGINE_RATE * 600)


# What a sweep's estimate says beside the bound: the README's main job replayed 4.66e9 line
# lookups in 28 s on 2 workers of a 2-core machine at load 0.9 (83 M a second a worker,
# with shared replays), and drew its 14 figures in 9 s; its 121 validation predictions
# took 35 s on 2 workers (0.58 s a prediction a worker; benchmarks/README.md, "Measured
# after the recency order").
TYPICAL_RATE = 80e6  # line lookups per second a worker
FIGURE_SECONDS = 0.65
PREDICTION_SECONDS = 0.6


# A replay is cut into pieces of about this many lookups where the nest allows it
# (quarter-second pieces: the progress bar moves, and Ctrl-C is seen between pieces).
CHUNK_LOOKUPS = int(ENGINE_RATE / 4)


@dataclass(frozen=True)
class ReplayPlan:
    """What :func:`simulate_step` will replay, worked out before any of it runs.

    ``replays[k]`` is kernel ``k``'s replays in order, each ``(warm_up, counted, scale)``:
    one a nest (``LoopNest.sample``; ``(None, nest, 1.0)`` when the nest is replayed
    whole), or two where a nest is sampled along its innermost loop
    (``LoopNest.sample_parts``: its iterations, then the stores after them), and
    ``lookups`` the first-level line lookups of all of it, every pass included: the
    engine's work, counted from the streams alone.
    """

    lowered: list[Lowered]
    passes: int
    replays: list[list[tuple[LoopNest | None, LoopNest, float]]]
    lookups: int
    line: int

    @property
    def seconds(self) -> float:
        """The estimated replay time at :data:`ENGINE_RATE`."""
        return self.lookups / ENGINE_RATE


def plan_replay(machine: Machine, step: Step, *, exact: bool = False, whole: int | None = None,
                lowered: list[Lowered] | None = None) -> ReplayPlan:
    """Lower every kernel and decide what to replay (sampled, or whole when ``exact``).

    When the step's peak live bytes are at most twice the caches' total size, the kernel
    list is replayed once to warm them and counted on the second pass: a training run
    repeats its steps, so the steady state is what a measured step shows. When the step
    needs more than ``STEP_BUDGET`` line lookups, each large nest of a kernel whose data
    takes at least twice the caches gets its share of the budget (at least
    :func:`sample_floor`) and is sampled (``LoopNest.sample``), unless ``exact``.

    ``whole`` (default: this step's own) is the step size the budget is shared over: the
    stages of one pipeline are given their largest, so a kernel that two stages run is
    sampled alike in both (:func:`memwall.simulation.reuse.replay_stages` may then reuse
    its counters). ``lowered``: the kernels already lowered for this machine.
    """
    levels = machine.cache_levels
    line = _line(machine)
    if lowered is None:
        lowered = _lowered(machine, step)
    if not levels:  # nothing to replay: replay_step counts the streams (exact, never sampled)
        return ReplayPlan(lowered=lowered, passes=1, replays=[[(None, nest, 1.0) for nest in low.nests]
                                                              for low in lowered], lookups=0, line=line)
    cache_bytes = sum(level.size for level in levels)
    lines = sum(level.size // level.line for level in levels)
    floor = sample_floor(lines)
    passes = 2 if levels and step.ledger.peak <= 2 * cache_bytes else 1
    sizes = [[nest.line_lookups(line) for nest in low.nests] for low in lowered]
    total = sum(map(sum, sizes))
    shared = max(total, whole or 0)
    share = 0.0 if exact or shared <= STEP_BUDGET else STEP_BUDGET / shared
    replays = []
    lookups = 0
    for kernel, low, nest_sizes in zip(step.kernels, lowered, sizes, strict=True):
        # Sampling replays the start of a nest, so the cache state a kernel inherits
        # and leaves is only approximated: kept to kernels that overflow the caches.
        sample = share and _footprint(kernel) >= 2 * cache_bytes
        row = []
        for nest, n in zip(low.nests, nest_sizes, strict=True):
            budget = max(floor, int(n * share)) if sample else 0
            parts = nest.sample_parts(budget, line, span=floor) if budget else [(None, nest, 1.0)]
            row.extend(parts)
            lookups += n if parts[0][1] is nest else row_lookups(parts, line)
        replays.append(row)
    return ReplayPlan(lowered=lowered, passes=passes, replays=replays, lookups=lookups * passes, line=line)


def sample_floor(lines: int, spans: float = SAMPLE_SPANS, least: int = SAMPLE_FLOOR) -> int:
    """The fewest counted line lookups a sampled nest replays, on caches of ``lines`` lines
    in all (its warm-up replays as many again): ``spans`` sweeps of them, at least
    ``least`` (benchmarks/bench_sampling.py measures other choices)."""
    return max(SAMPLE_FLOOR_MIN, min(CACHE_SPANS * lines, max(least, int(spans * lines))))


def _line(machine: Machine) -> int:
    """The line size the lowering and the lookup counts use: the first cache level's."""
    levels = machine.cache_levels
    return levels[0].line if levels else 64


def lower_on(machine: Machine, kernel: Kernel) -> Lowered:
    """``kernel`` lowered to the machine's streams, its products in the tile the timing
    times them in (the L2's charge for their dtype: :func:`memwall.timing.tile_l2_cost`)."""
    return lower(kernel, machine.schedule, line_bytes=_line(machine), l2=tile_l2_cost(machine, kernel.dtype))


def _lowered(machine: Machine, step: Step) -> list[Lowered]:
    """Every kernel of ``step`` lowered to the machine's streams."""
    return [lower_on(machine, kernel) for kernel in step.kernels]


def plan_stages(machine: Machine, steps: list[Step], *, exact: bool = False) -> list[ReplayPlan]:
    """:func:`plan_replay` of each stage of a pipeline, the budget shared over the largest
    stage's size, so that every stage samples a kernel they share alike."""
    line = _line(machine)
    lowered = [_lowered(machine, st) for st in steps]
    largest = max((sum(nest.line_lookups(line) for low in lows for nest in low.nests) for lows in lowered), default=0)
    return [plan_replay(machine, st, exact=exact, whole=largest, lowered=lows)
            for st, lows in zip(steps, lowered, strict=True)]


class Prepared:
    """Steps and replay plans built in this process, kept for the cases after it that
    share them: the ``size`` most recent of each, and of the plans no more than hold
    ``max_accesses`` loop-nest accesses in all (a plan's memory goes with its accesses:
    about half a kilobyte each, lowered nests and samples included).

    Building a step and lowering its kernels is Python work that a sweep would otherwise
    redo case after case, for a step that many machines run and a plan that every machine
    with the same :func:`engine_fields` shares (the plan is a function of what
    :func:`replay_key` hashes, as the replay is). A case's step is keyed by every option
    but the machine and the dispatch mode, which act in the timing."""

    def __init__(self, size: int = 64, max_accesses: int = 500_000) -> None:
        self.size = size
        self.max_accesses = max_accesses
        self._steps: OrderedDict[Case, Step] = OrderedDict()
        self._plans: OrderedDict[str, ReplayPlan] = OrderedDict()
        self._weights: dict[str, int] = {}  # each kept plan's accesses
        self._accesses = 0  # of the plans kept

    def _keep(self, table: OrderedDict, key: Any, make: Callable[[], Any]) -> Any:
        if key in table:
            table.move_to_end(key)
            return table[key]
        value = table[key] = make()
        if table is self._plans:
            self._weights[key] = _accesses(value)
            self._accesses += self._weights[key]
        while len(table) > self.size or (table is self._plans and self._accesses > self.max_accesses
                                         and len(table) > 1):
            old, _ = table.popitem(last=False)
            if table is self._plans:
                self._accesses -= self._weights.pop(old)
        return value

    def step(self, case: Case) -> Step:
        key = json.dumps(case.key(STEP, DEVICES), sort_keys=True)  # all but the machine and the timing's options
        return self._keep(self._steps, key, lambda: build_case_step(case))

    def plan(self, machine: Machine, step: Step, key: str, *, exact: bool = False) -> ReplayPlan:
        """The plan of ``step`` on ``machine``; ``key`` is the case's :func:`replay_key`."""
        return self._keep(self._plans, key, lambda: plan_replay(machine, step, exact=exact))


def _accesses(plan: ReplayPlan) -> int:
    """The loop-nest accesses a plan holds (lowered, and sampled where it samples)."""
    lowered = sum(len(nest.accesses) for low in plan.lowered for nest in low.nests)
    sampled = sum(len(counted.accesses) + (len(warm.accesses) if warm is not None else 0)
                  for row in plan.replays for warm, counted, scale in row if scale != 1.0)
    return lowered + sampled


def check_cost(plan: ReplayPlan, max_lookups: int | None, *, exact: bool = False) -> None:
    """Refuse, with the estimate, a replay over ``max_lookups`` (None: :data:`MAX_LOOKUPS`)."""
    limit = MAX_LOOKUPS if max_lookups is None else max_lookups
    if plan.lookups <= limit:
        return
    hint = "" if exact else " (already sampled: see docs/timing.md)"
    raise InputError(
        f"this step would replay {plan.lookups:.3g} line lookups{hint}, about {duration(plan.seconds)} "
        f"at ~{ENGINE_RATE / 1e6:.0f} M lookups/s; the limit is {limit:.3g}: pass --max-lookups "
        f"{_round_up(plan.lookups)} to run it anyway", field="--max-lookups")


def duration(seconds: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _round_up(n: int) -> int:
    """``n`` rounded up to two significant digits, as a limit a person types."""
    digits = max(0, len(str(n)) - 2)
    return -(-n // 10**digits) * 10**digits


def _footprint(kernel: Kernel) -> int:
    """Bytes of the distinct tensors a kernel touches."""
    return sum({t.name: t.bytes for t in (*kernel.reads, *kernel.writes)}.values())
