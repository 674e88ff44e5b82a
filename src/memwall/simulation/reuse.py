"""Exact reuse across the stages of a pipeline: a kernel that two stages run at the same
addresses, from caches in the same state, counts alike, so it is replayed once.

Owns: :func:`replay_stages`. The stages of a pipeline run the same layers, and every stage
lays its layers out alike (:func:`memwall.workloads.liveness.edge_tensors`) and samples
them alike (:func:`memwall.simulation.plan.plan_stages`); they differ in the edges (the
first stage's embedding, the last one's head) and in the cache state those leave behind.
One stage, the reference, is replayed whole. Another replays its own kernels until, at
the start of a run of kernels it shares with the reference, its caches are in the state
the reference's were at the same point of the run (:meth:`memwall.engine.Hierarchy.state_digest`:
each set's lines, dirty bits and ages); from there the run's counters are the
reference's, bit for bit, and where the run ends before the stage does, the stage goes on
from a copy of the reference's caches at that point. A stage whose caches never come to
the reference's state is replayed whole: the reuse changes no count, only the work.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from difflib import SequenceMatcher
from typing import Any

from ..engine import Hierarchy, HierarchyCounters
from ..profiles import Machine
from .plan import ReplayPlan, row_lookups

# One kernel's planned row replayed on a hierarchy: what it counted.
KernelReplay = Callable[[Hierarchy, list, int, Any], HierarchyCounters]

# Offsets into a shared run at which the stage's caches are compared with the reference's
# (a comparison costs one pass over the ways: a few ms for a GPU's L2). The edges' traces
# wash out of the caches within a few kernels of a run (two, on the shipped 405B stages).
CHECKS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)

# Shared runs shorter than this are replayed (a comparison would cost more than it saves).
MIN_RUN = 2

# Replacement policies whose future depends on a set's lines in stamp order only (the
# digest's premise).
ORDERED_POLICIES = ("lru", "fifo")


def reusable(machine: Machine, plans: list[ReplayPlan]) -> bool:
    """Whether :func:`replay_stages` applies: several plans, each replayed in one pass (a
    warm-up pass would carry one stage's state into its own count), on caches whose
    replacement the digest covers."""
    levels = machine.cache_levels
    return (len(plans) > 1 and bool(levels) and all(lv.policy in ORDERED_POLICIES for lv in levels)
            and all(p.passes == 1 for p in plans))


def _keys(plan: ReplayPlan) -> list[str]:
    """Each kernel's planned replay (its nests, addresses, sampling), hashed."""
    return [hashlib.sha256(repr(row).encode()).hexdigest() for row in plan.replays]


def _runs(keys: list[str], ref: list[str]) -> list[tuple[int, int, int]]:
    """``(start in keys, start in ref, length)`` of the runs of kernels both run in order."""
    blocks = SequenceMatcher(None, keys, ref, autojunk=False).get_matching_blocks()
    return [(i, j, n) for i, j, n in blocks if n >= MIN_RUN]


class _ReferenceFailed(Exception):
    """The reference stage's replay stopped (an error, or Ctrl-C): its followers stop too."""


class _Reference:
    """The reference stage replayed whole, with what the others need of it: its counters
    kernel by kernel, its caches' digests where another stage will compare (the first
    offsets of each shared run), and copies of its caches where a run ends before the
    other stage does. :meth:`run` replays it; :meth:`wait` holds a follower (on another
    thread) until the replay has passed a boundary, so the followers run beside it."""

    def __init__(self, machine: Machine, plan: ReplayPlan, runs: dict[int, list[tuple[int, int, int]]],
                 lengths: dict[int, int], kernel: KernelReplay, tick: Callable[[int], Any] | None) -> None:
        self.machine, self.plan, self.kernel, self.tick = machine, plan, kernel, tick
        self.digest_at = {j + c for rs in runs.values() for _, j, n in rs for c in CHECKS if c < n}
        self.copy_at = {j + n for k, rs in runs.items() for i, j, n in rs if i + n < lengths[k]}
        self.digests: dict[int, bytes | None] = {}
        self.copies: dict[int, Hierarchy] = {}
        self.counts: list[HierarchyCounters] = []
        self._reached = -1  # the last boundary whose digest, copy and counters before it are kept
        self._failed = False
        self._cond = threading.Condition()

    def run(self) -> None:
        levels, rows = self.machine.cache_levels, self.plan.replays
        h = Hierarchy(levels)
        try:
            for b in range(len(rows) + 1):
                if b in self.digest_at:
                    self.digests[b] = h.state_digest()
                if b in self.copy_at:
                    self.copies[b] = Hierarchy(levels)
                    self.copies[b].copy_state_from(h)
                with self._cond:
                    self._reached = b
                    self._cond.notify_all()
                if b < len(rows):
                    self.counts.append(self.kernel(h, rows[b], self.plan.line, self.tick))
        except BaseException:
            with self._cond:
                self._failed = True
                self._cond.notify_all()
            raise

    def wait(self, boundary: int) -> None:
        """Return once the replay has passed ``boundary`` (at once, after :meth:`run`)."""
        with self._cond:
            while self._reached < boundary and not self._failed:
                self._cond.wait()
            if self._failed:
                raise _ReferenceFailed


def _follow(machine: Machine, plan: ReplayPlan, runs: list[tuple[int, int, int]], ref: _Reference,
            kernel: KernelReplay, tick: Callable[[int], Any] | None) -> tuple[list[HierarchyCounters], int]:
    """A stage's counters, each run it shares with the reference taken from the point where
    its caches come to the reference's state; and how many kernels it took."""
    rows, line = plan.replays, plan.line
    run_of = {i + c: (i, j, n) for i, j, n in runs for c in range(n)}
    h = Hierarchy(machine.cache_levels)
    counts: list[HierarchyCounters] = []
    taken = i = 0
    while i < len(rows):
        start, j, n = run_of.get(i, (i, 0, 0))
        c = i - start
        if n and c in CHECKS:
            ref.wait(j + c)
            want = ref.digests.get(j + c)
            if want is not None and h.state_digest() == want:
                ref.wait(j + n)
                counts.extend(ref.counts[j + c:j + n])
                taken += n - c
                if tick is not None:
                    tick(sum(row_lookups(rows[x], line) for x in range(i, start + n)))
                i = start + n
                if i < len(rows):
                    h.copy_state_from(ref.copies[j + n])
                continue
        counts.append(kernel(h, rows[i], line, tick))
        i += 1
    return counts, taken


def replay_stages(machine: Machine, plans: list[ReplayPlan], kernel: KernelReplay,
                  tick: Callable[[int], Any] | None = None, threads: int = 1,
                  stop: threading.Event | None = None) -> tuple[list[list[HierarchyCounters]], int]:
    """Each plan's counters per kernel, as :func:`memwall.simulation.replay.replay_step`
    gives them (plans of one pass: :func:`reusable`), the shared runs replayed once;
    ``kernel(hierarchy, row, line, tick)`` replays one kernel's planned row and returns
    what it counted (:func:`memwall.simulation.replay.replay_kernel`).
    ``tick(n)`` counts line lookups as they are replayed or taken. With ``threads`` > 1
    every stage has a thread of its own (each on its own caches, the engine without the
    GIL), the others replaying their own kernels beside the reference and waiting for it
    only where they take from it; ``stop`` is set when one of them fails or Ctrl-C comes,
    and ``tick`` is where the others see it. Returns the counters and how many kernels
    took the reference's."""
    keys = [_keys(p) for p in plans]
    # The reference: the stage that shares the most kernels with the others (a middle stage).
    shared = [sum(n for other in range(len(plans)) if other != k for _, _, n in _runs(keys[other], keys[k]))
              for k in range(len(plans))]
    ref = max(range(len(plans)), key=lambda k: (shared[k], -k))
    runs = {k: _runs(keys[k], keys[ref]) for k in range(len(plans)) if k != ref}
    reference = _Reference(machine, plans[ref], runs, {k: len(plans[k].replays) for k in runs}, kernel, tick)
    others = list(runs)

    def follow(k: int) -> tuple[list[HierarchyCounters], int]:
        return _follow(machine, plans[k], runs[k], reference, kernel, tick)

    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(plans)) as pool:
            try:
                leader = pool.submit(reference.run)
                try:
                    followed = list(pool.map(follow, others))
                except _ReferenceFailed:
                    leader.result()  # the reference's own error, not its followers' echo of it
                    raise
                leader.result()
            except BaseException:
                if stop is not None:
                    stop.set()
                raise
    else:
        reference.run()
        followed = [follow(k) for k in others]
    out: list[list[HierarchyCounters]] = [[] for _ in plans]
    out[ref] = reference.counts
    for k, (counts, _) in zip(others, followed, strict=True):
        out[k] = counts
    return out, sum(taken for _, taken in followed)
