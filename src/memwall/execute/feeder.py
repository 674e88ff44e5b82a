"""The feeder: which case a sweep computes next, each claimed in the store before it runs.

Owns: :class:`Feeder`, :data:`WAIT` (nothing to hand out now: every case left is claimed
by another sweep) and :data:`POLL` (how often a pool looks again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..simulation import Case
from .store import Store

POLL = 0.2  # seconds between looks at cases another sweep holds, and at a parent's life
WAIT = object()  # the feeder has nothing now: every case left is claimed by another sweep


class Feeder:
    """Hands out the cases this sweep computes, each claimed in the store first.

    A case another live process has claimed is left to it: it is handed out only if that
    process dies (its lock goes) without writing the record. A record that appears while a
    case was claimed elsewhere is the other sweep's answer and is used as it is.
    """

    def __init__(self, todo: Sequence[Case], store: Store, keys: Mapping[Case, str],
                 on_shared: Callable[[], Any] | None = None, replay_keys: Mapping[Case, str] | None = None) -> None:
        self.waiting = list(todo)
        self.replay_keys = dict(replay_keys or {})
        self.replaying: dict[Case, str] = {}  # case in flight -> the replay it computes
        self.on_shared = on_shared
        self.store = store
        self.keys = keys
        self.others: set[Case] = set()
        self.shared = 0

    @property
    def done(self) -> bool:
        return not self.waiting

    def take(self) -> Any:
        """A claimed case to compute, :data:`WAIT`, or None when nothing is left.

        A case whose replay another case in flight is computing waits for it, so the
        replay is stored before the case asks for it and runs once."""
        busy = set(self.replaying.values())
        i = 0
        # A loop, not a recursion: a folder another sweep has nearly finished hands back
        # thousands of stored cases in one call.
        while i < len(self.waiting):
            case = self.waiting[i]
            if self.replay_keys.get(case) in busy:
                i += 1
                continue
            key = self.keys[case]
            if not self.store.claim(key):
                self.others.add(case)
                i += 1
                continue
            rec = self.store.get(key)
            if rec is not None and (rec.get("status") == "ok" or case in self.others):
                self.store.release(key)
                del self.waiting[i]
                self.shared += 1
                if self.on_shared is not None:
                    self.on_shared()
                continue
            del self.waiting[i]
            if case in self.replay_keys:
                self.replaying[case] = self.replay_keys[case]
            return case
        return WAIT if self.waiting else None

    def finished(self, case: Case) -> None:
        """``case`` is done: the cases waiting for its replay may go."""
        self.replaying.pop(case, None)
