"""The engine's part of a case: a planned step replayed through the machine's caches.

Owns: :func:`replay_step` (the counters each kernel adds on the plan's last pass), the
counts of a machine without caches (:func:`uncached_counters`, from the streams alone),
the cutting of long nests into pieces (progress and Ctrl-C between them), and what a
replay depends on (:func:`engine_fields`, :func:`replay_key`), so cases that differ only
in what the engine never sees share one replay; :func:`replay_once`, a planned step
replayed once per process whatever case asks for it (a device's share that repeats
across the stages and cases of a multi-device study); and :func:`replay_plans`, a
multi-device step's stage kinds replayed side by side on threads.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, replace
from typing import Any, Protocol

from ..engine import Hierarchy, HierarchyCounters, MemoryCounters
from ..model_version import MODEL_VERSION
from ..options import DEVICES, STEP, Case
from ..profiles import Machine
from ..streams import LoopNest
from ..timing import tile_l2_cost
from ..vocabulary import DTYPES, WIDE_DTYPES
from ..workloads.lowering import Lowered
from .plan import CHUNK_LOOKUPS, ReplayPlan
from .reuse import replay_stages, reusable

# :func:`_demand_by_kind` by the identity of the kernel's lowering: a multi-device case
# times each stage's kernels on its machine and on every machine its sensitivity moves a
# figure of (about 40), and the demand is the streams' alone. A Lowered is frozen, so the
# figure kept is the figure computed; the object is kept beside it so its id is not reused.
_DEMAND: OrderedDict[int, tuple[Lowered, tuple[int, int, int, int, int]]] = OrderedDict()
DEMAND_KEPT = 1024  # kernels: the stages of a few of the largest multi-device steps (a few MB)


def _demand_by_kind(lowered: Lowered) -> tuple[int, int, int, int, int]:
    """Reads, writes, bytes read, bytes written and innermost iterations the core issues,
    from the streams alone (counted once per lowering object)."""
    kept = _DEMAND.get(id(lowered))
    if kept is not None and kept[0] is lowered:
        return kept[1]
    out = _count_demand(lowered)
    _DEMAND[id(lowered)] = (lowered, out)
    while len(_DEMAND) > DEMAND_KEPT:
        _DEMAND.popitem(last=False)
    return out


def _count_demand(lowered: Lowered) -> tuple[int, int, int, int, int]:
    reads = writes = bytes_read = bytes_written = inner = 0
    for nest in lowered.nests:
        for access in nest.accesses:
            times = nest.times(access)
            if access.is_write:
                writes += times
                bytes_written += times * access.size
            else:
                reads += times
                bytes_read += times * access.size
        iterations = 1
        for count in nest.counts:
            iterations *= count
        inner += iterations if nest.counts else 0
    return reads, writes, bytes_read, bytes_written, inner


def _demand(lowered: Lowered) -> tuple[int, int, int, int]:
    """Reads, writes, bytes and innermost iterations the core issues, from the streams alone."""
    reads, writes, bytes_read, bytes_written, inner = _demand_by_kind(lowered)
    return reads, writes, bytes_read + bytes_written, inner


def uncached_counters(lowered: Lowered) -> HierarchyCounters:
    """What the engine counts for one run of a kernel on a machine with no cache levels,
    from the streams alone: each demand access is one reference to main memory of its
    own size (ENGINE_SEMANTICS, main memory), so nothing needs replaying and the counts
    are exact at any size, where a replay of a large step would be sampled."""
    reads, writes, bytes_read, bytes_written, _ = _demand_by_kind(lowered)
    return HierarchyCounters([], MemoryCounters(reads, writes, bytes_read, bytes_written), reads + writes)


def _pieces(nest: LoopNest, limit: int, line: int) -> Iterator[LoopNest]:
    """``nest`` as consecutive nests that replay the same accesses in the same order.

    Cut along the outermost loop ``d`` that runs more than once (the loops around it run
    once): iterations ``[i, j)`` of loop ``d`` are the nest with that loop's count ``j - i``
    and the bases of the accesses inside it moved by ``i`` strides. The accesses outside
    loop ``d`` (issued once, before or after it) go with the first or the last piece. A
    piece of one iteration that is still too long is cut again one loop further in.
    """
    total = nest.line_lookups(line)
    d = next((i for i, c in enumerate(nest.counts) if c != 1), None)
    if total <= limit or d is None or nest.counts[d] == 0 or not any(a.depth > d for a in nest.accesses):
        yield nest
        return
    count = nest.counts[d]
    step = max(1, count * limit // total)
    if step >= count:
        yield nest
        return
    head, rest = nest.counts[:d], nest.counts[d + 1:]
    for i in range(0, count, step):
        k = min(step, count - i)
        first, last = i == 0, i + k >= count
        accesses = tuple(replace(a, base=a.base + i * a.strides[d]) if a.depth > d else a
                         for a in nest.accesses
                         if a.depth > d or (first and not a.after) or (last and a.after))
        piece = LoopNest(head + (k,) + rest, accesses, nest.label)
        if k == 1:
            yield from _pieces(piece, limit, line)
        else:
            yield piece


def replay_step(machine: Machine, plan: ReplayPlan,
                progress: Callable[[int], Any] | None = None) -> list[HierarchyCounters]:
    """The counters each kernel adds on the plan's last pass (the earlier ones warm the
    caches): the engine's whole answer for a step, which depends on the machine only
    through :func:`engine_fields`."""
    if not machine.cache_levels:
        return [uncached_counters(low) for low in plan.lowered]
    hierarchy = Hierarchy(machine.cache_levels)
    counters: list[HierarchyCounters] = []
    for p in range(plan.passes):
        counts = [replay_kernel(hierarchy, replays, plan.line, progress) for replays in plan.replays]
        if p == plan.passes - 1:
            counters = counts
    return counters


# Replays this process made, by :func:`plan_digest`: the engine is deterministic, so the same
# plan on the same engine fields gives the same counters, bit for bit.
_REPLAYED: OrderedDict[str, list[HierarchyCounters]] = OrderedDict()
REPLAYED_KEPT = 64  # a stage's counters are kilobytes a kernel: a few MB at most


def plan_digest(machine: Machine, plan: ReplayPlan) -> str:
    """What a planned replay depends on, hashed: the engine's fields of the machine and the
    plan itself (its passes, line size and every nest it replays, whole or sampled)."""
    text = repr((MODEL_VERSION, engine_fields(machine), plan.passes, plan.line, plan.replays))
    return hashlib.sha256(text.encode()).hexdigest()


def replay_once(machine: Machine, plan: ReplayPlan,
                progress: Callable[[int], Any] | None = None) -> list[HierarchyCounters]:
    """:func:`replay_step`'s answer, computed once per process for each :func:`plan_digest`
    (a stage that repeats across a pipeline's stages, or a device's share that several
    cases run with other dp, ZeRO or link figures, is replayed once)."""
    if not machine.cache_levels:  # counted from the streams alone: nothing worth keeping
        return replay_step(machine, plan, progress)
    key = plan_digest(machine, plan)
    kept = _REPLAYED.get(key)
    if kept is not None:
        _REPLAYED.move_to_end(key)
        if progress is not None:
            progress(plan.lookups)
        return kept
    counters = replay_step(machine, plan, progress)
    _keep(key, counters)
    return counters


def _keep(key: str, counters: list[HierarchyCounters]) -> None:
    """Keep a replay for this process, the least recently used going past :data:`REPLAYED_KEPT`."""
    _REPLAYED[key] = counters
    while len(_REPLAYED) > REPLAYED_KEPT:
        _REPLAYED.popitem(last=False)


def replay_threads() -> int:
    """How many stage replays :func:`replay_plans` runs at once: the cores this process may
    use, in a process of its own; one in a worker process of a pool (a sweep's or the
    validation's), whose siblings already keep the cores busy. :data:`REPLAY_THREADS`, when
    set, overrides it."""
    if REPLAY_THREADS is not None:
        return REPLAY_THREADS
    import multiprocessing
    import os

    if multiprocessing.parent_process() is not None:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


# None: replay_threads() decides; a number forces it (1: one stage after another).
REPLAY_THREADS: int | None = None


def limit_replay_threads(jobs: int | None) -> None:
    """``--jobs N``: the cores a user gives a command; this process's stage replays keep to
    them too (None: :func:`replay_threads` decides)."""
    global REPLAY_THREADS
    if jobs is not None:
        REPLAY_THREADS = jobs


class _Stopped(Exception):
    """A stage replay on a thread told to stop (another failed, or Ctrl-C)."""


def replay_plans(machine: Machine, plans: list[ReplayPlan],
                 progress: Callable[[int, int], Any] | None = None) -> list[list[HierarchyCounters]]:
    """:func:`replay_once` of each plan (a multi-device step's stage kinds). The plans not
    yet replayed in this process share what they run alike
    (:func:`memwall.simulation.reuse.replay_stages`: exact, so the counters are those of
    the plans replayed one after another, bit for bit); either way they run side by side
    when :func:`replay_threads` allows two or more, each on its own caches, the engine
    without the GIL. ``progress(done, total)`` counts the line lookups of all of them."""
    total = sum(p.lookups for p in plans)
    keys = [plan_digest(machine, p) if machine.cache_levels else "" for p in plans]
    todo = list(dict.fromkeys(k for k in keys if k and k not in _REPLAYED))
    first = {k: plans[keys.index(k)] for k in todo}
    stages = REUSE_STAGES and reusable(machine, list(first.values()))
    width = min(replay_threads(), len(todo))
    if width < 2 and not stages:
        out, done = [], 0
        for plan in plans:
            out.append(replay_once(machine, plan, _ticker(progress, total, done)))
            done += plan.lookups
        return out
    import threading
    from concurrent.futures import ThreadPoolExecutor

    kept = {k: _REPLAYED[k] for k in keys if k in _REPLAYED}  # before a new one can push it out
    lock, stop = threading.Lock(), threading.Event()
    done = [total - sum(p.lookups for p in first.values())]  # what is kept, or repeats a plan, replays nothing

    def tick(n: int) -> None:  # between pieces of a quarter second: where a stop is seen
        if stop.is_set():
            raise _Stopped
        if progress is not None:
            with lock:
                done[0] += n
                progress(done[0], total)

    if stages:
        shared, _ = replay_stages(machine, [first[k] for k in todo], replay_kernel, tick, threads=width, stop=stop)
        made = dict(zip(todo, shared, strict=True))
    else:
        with ThreadPoolExecutor(max_workers=width) as pool:
            try:
                made = dict(zip(todo, pool.map(lambda k: replay_step(machine, first[k], tick), todo), strict=True))
            except BaseException:  # Ctrl-C, or a stage that failed: the others stop at their next piece
                stop.set()
                raise
    for k in kept:
        _REPLAYED.move_to_end(k)
    for k, counters in made.items():
        _keep(k, counters)
    return [made[k] if k in made else kept[k] for k in keys]


# False: the stages of a pipeline are replayed each on its own (the benchmark's "before",
# and the proof that sharing their runs changes no count).
REUSE_STAGES = True


def shape_of(row: list[tuple[LoopNest | None, LoopNest, float]]) -> tuple:
    """A kernel's planned replay with its addresses left out: the loop counts, each
    access's strides, size, kind and rows, and the sampling scale. Two kernels of one
    shape move the same bytes in the same pattern, at other addresses."""
    return tuple((warm.counts if warm is not None else None, counted.counts, scale,
                  tuple((a.strides, a.size, a.is_write, a.after, a.rows, a.row_stride) for a in counted.accesses))
                 for warm, counted, scale in row)


def replay_by_shape(machine: Machine, plans: list[ReplayPlan],
                    progress: Callable[[int], Any] | None = None) -> tuple[list[list[HierarchyCounters]], int]:
    """An approximation of :func:`replay_step` over the stages of a multi-device step
    (``reuse_shapes``, opt-in): a kernel whose :func:`shape_of` an earlier kernel of these
    plans had (the same layer in another pipeline stage, a recomputed forward) takes that
    kernel's counters instead of being replayed; the others are replayed in order, each
    plan on its own caches. Not exact: the reused kernel ran at other addresses after other
    kernels, and the kernels replayed after a skipped one see caches it did not touch.
    Returns each plan's counters and how many kernels took another's."""
    if not machine.cache_levels:
        return [replay_step(machine, plan, progress) for plan in plans], 0
    seen: dict[tuple, HierarchyCounters] = {}
    out: list[list[HierarchyCounters]] = []
    reused = 0
    for plan in plans:
        shapes = [shape_of(row) for row in plan.replays]
        first: dict[tuple, int] = {}
        for i, s in enumerate(shapes):
            first.setdefault(s, i)
        todo = [i for i, s in enumerate(shapes) if s not in seen and first[s] == i]
        sub = ReplayPlan([plan.lowered[i] for i in todo], plan.passes, [plan.replays[i] for i in todo], 0, plan.line)
        for i, counts in zip(todo, replay_step(machine, sub, progress), strict=True):
            seen[shapes[i]] = counts
        out.append([seen[s] for s in shapes])
        reused += len(shapes) - len(todo)
    return out, reused


def replay_kernel(hierarchy: Hierarchy, replays: list[tuple[LoopNest | None, LoopNest, float]], line: int,
                  progress: Callable[[int], Any] | None) -> HierarchyCounters:
    """The counters one kernel run adds, each nest replayed whole or sampled, as planned."""
    start = hierarchy.snapshot()
    if all(warm is None and scale == 1.0 for warm, _, scale in replays):  # nothing sampled: one difference
        for _, counted, _ in replays:
            _run(hierarchy, counted, line, progress)
        return hierarchy.since(start)
    total = hierarchy.since(start)  # zeros
    for warm, counted, scale in replays:
        if warm is not None:
            _run(hierarchy, warm, line, progress)
        before = hierarchy.snapshot()
        _run(hierarchy, counted, line, progress)
        delta = hierarchy.since(before)
        total = total + (delta.scaled(scale) if scale != 1.0 else delta)
    return total


def _run(hierarchy: Hierarchy, nest: LoopNest, line: int, progress: Callable[[int], Any] | None) -> None:
    for piece in _pieces(nest, CHUNK_LOOKUPS, line):
        hierarchy.replay_nest(piece)
        if progress is not None:
            progress(piece.line_lookups(line))
    if nest.write_back:
        hierarchy.flush()


def engine_fields(machine: Machine, dtypes: Iterable[str] = DTYPES) -> dict[str, Any]:
    """The parts of a profile that reach the engine: each simulated level's geometry
    and policies, the schedule that lowers kernels to streams, and the tile each product
    dtype's L2 charge picks (:func:`memwall.timing.tile_l2_cost`: the first cache level's
    bandwidth over the product rate, where the profile states its tiles; for ``dtypes``,
    every dtype unless a case names the ones its products run in). Main memory's
    bandwidth, latencies, dispatch costs and the word size act only in the timing, so
    machines that differ only in those (a synthetic bandwidth sweep; an H200 beside an
    H100) replay a step identically and may share one replay."""
    return {
        "levels": [[lv.name, lv.size, lv.line, lv.ways, lv.policy, lv.write, lv.inclusion, lv.seed]
                   for lv in machine.cache_levels],
        "schedule": [machine.schedule.family,
                     {k: v for k, v in sorted(machine.schedule.params.items()) if k not in TIMING_ONLY_SCHEDULE}],
        # the tile a product runs in weighs the L2's bandwidth against the product rate
        # (lowering.product_tiling): those two figures reach the engine through it
        "tile_l2": {d: astuple(c) for d in dtypes if (c := tile_l2_cost(machine, d)) is not None},
    }


# Schedule fields read by the timing only, never by lowering.
TIMING_ONLY_SCHEDULE = ("bytes_in_flight", "note")


def case_engine_fields(machine: Machine, case: Case) -> dict[str, Any]:
    """:func:`engine_fields` for the dtypes ``case``'s products run in: the wide ones and
    the one it asks for, so that an H200 beside an H100 shares a bf16 step's replay though
    their fp8 ceilings differ."""
    narrow = (case.dtype,) if case.dtype and case.dtype not in WIDE_DTYPES else ()  # fp8, int8, a block format
    return engine_fields(machine, WIDE_DTYPES + narrow)


def replay_key(machine: Machine, case: Case, *, exact: bool = False) -> str:
    """What a case's replay depends on, hashed: the model version (engine, lowering and
    workload code), the machine's :func:`engine_fields` and every given case option that
    shapes the step (:meth:`Case.key`: the options the timing alone reads are left out)."""
    text = json.dumps({"model": MODEL_VERSION, "engine": case_engine_fields(machine, case),
                       "case": case.key(STEP, DEVICES),
                       "exact": exact},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ReplayCache(Protocol):
    """Replays kept by :func:`replay_key` (a dict, or the sweep's store of them)."""

    def get(self, key: str) -> list[HierarchyCounters] | None: ...

    def put(self, key: str, counters: list[HierarchyCounters]) -> None: ...


def _ticker(progress: Callable[[int, int], Any] | None, total: int, done: int = 0) -> Callable[[int], None] | None:
    """``progress(done, total)`` as a per-piece callback, counting on from ``done``."""
    if progress is None:
        return None

    def tick(n: int) -> None:
        nonlocal done
        done += n
        progress(done, total)

    return tick
