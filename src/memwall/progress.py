"""Saying what long work is doing, so that no phase runs silent.

Owns: :class:`Phase`, one phase of work (cases, predictions, figures, a batch doubling)
said on stderr: on a terminal a bar with the time left (tqdm); elsewhere (a pipe, a CI
log, a file) a line as it starts, a line at least every :data:`NOTE_SECONDS` while it runs
(from a timer, so one long item does not silence it) and a line when it ends. Progress
goes to stderr only: ``--json`` output and stored results never see it.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import IO, Any

NOTE_SECONDS = 10.0  # off a terminal, a progress line at least this often


def _count(n: int, unit: str) -> str:
    """``1 case``, ``2 cases``, ``3 batches``."""
    return f"{n} {unit if n == 1 else unit + ('es' if unit.endswith(('s', 'sh', 'ch', 'x')) else 's')}"


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


class Phase:
    """One phase of ``total`` items (None: unknown), said on ``stream`` (default stderr).

    ``command`` prefixes each line (``memwall validate``), ``what`` says the phase
    (``predicting 56 measurements``), ``unit`` names an item. ``enabled`` False says
    nothing (``--no-progress``); ``terminal`` None asks the stream. Off a terminal, a phase
    with a ``delay`` says nothing unless it is still running after that many seconds (a
    command whose output is usually instant stays quiet)."""

    def __init__(self, command: str, what: str, total: int | None = None, *, unit: str = "case",
                 enabled: bool = True, stream: IO[str] | None = None, terminal: bool | None = None,
                 note_seconds: float = NOTE_SECONDS, initial: int = 0, delay: float = 0.0) -> None:
        self.command, self.what, self.total, self.unit = command, what, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = self.initial = initial  # ``initial`` items were done before (stored): no rate from them
        self.work = self.work_done = 0.0  # see weigh()
        self.postfix = ""
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar: Any = None
        self._timer: threading.Thread | None = None
        if not enabled:
            return
        isatty = getattr(self.stream, "isatty", lambda: False)
        if terminal if terminal is not None else isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=f"{command}: {what}", unit=unit, file=self.stream,
                             dynamic_ncols=True, smoothing=0.1, leave=False)
            return
        self._said = False
        if not delay:
            self._start()
        self._timer = threading.Thread(target=self._tick, args=(note_seconds, delay), daemon=True)
        self._timer.start()

    def _start(self) -> None:
        self._said = True
        self._say(f"{self.what}" + (f" ({_count(self.total, self.unit)})" if self.total is not None else ""))

    def _say(self, text: str) -> None:
        try:
            print(f"{self.command}: {text}", file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed or broken stream: progress is never worth a failure
            pass

    def _tick(self, every: float, delay: float) -> None:
        if delay:  # a phase over before ``delay`` seconds says nothing at all
            if self._stop.wait(delay):
                return
            with self._lock:
                if self._stop.is_set():  # closed between the wait and the lock: it said nothing, and stays so
                    return
                self._start()
        while not self._stop.wait(every):
            with self._lock:
                self._say(self.status())

    def status(self) -> str:
        """``12 of 56 predictions (21%), 34 s, about 2:10 left`` (what is known of it)."""
        elapsed = time.monotonic() - self.start
        note = f", {self.postfix}" if self.postfix else ""
        if self.total:
            left = self._left(elapsed)
            return (f"{self.what}: {self.done} of {_count(self.total, self.unit)} ({self.done / self.total:.0%}), "
                    f"{_clock(elapsed)}" + (f", about {_clock(left)} left" if left is not None else "") + note)
        return f"{self.what}: {_count(self.done, self.unit)}, {_clock(elapsed)}{note}"

    def _left(self, elapsed: float) -> float | None:
        """Seconds left at the rate so far: of the work (:meth:`weigh`) where it is weighed,
        else of the items."""
        if self.work:
            return elapsed / self.work_done * max(0.0, self.work - self.work_done) if self.work_done > 0 else None
        here = self.done - self.initial
        return elapsed / here * (self.total - self.done) if here > 0 and self.total else None

    def weigh(self, work: float) -> None:
        """The work the items to come take in all, in any unit (each :meth:`update` says its
        share): time left is then told from the work done, not the items, so items of very
        unequal cost (a validation's multi-device predictions, run first) do not make the
        first estimates several times too long."""
        self.work, self.work_done = work, 0.0
        if self._bar is not None:  # tqdm's own estimate counts items: ours goes beside the count
            self._bar.bar_format = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"

    def update(self, n: int = 1, work: float = 0.0) -> None:
        with self._lock:
            self.done += n
            self.work_done += work
        if self._bar is not None:
            if self.work:
                left = self._left(time.monotonic() - self.start)
                self._bar.set_postfix_str(f"about {_clock(left)} left" if left is not None else "", refresh=False)
            self._bar.update(n)

    def set_total(self, total: int) -> None:
        """The number of items, learnt once the work has started (a replay's line lookups)."""
        self.total = total
        if self._bar is not None and self._bar.total != total:
            self._bar.total = total
            self._bar.refresh()

    def note(self, text: str) -> None:
        """A short state shown beside the count (``failed 2``)."""
        self.postfix = text
        if self._bar is not None:
            self._bar.set_postfix_str(text)

    def close(self, summary: str | None = None) -> None:
        """End the phase; off a terminal, a closing line (``summary`` if given)."""
        if not self.enabled or self._stop.is_set():
            return
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
            return
        with self._lock:
            if not self._said:
                return
            self._say(summary or f"{self.what}: done, {_count(self.done, self.unit)} in "
                                 f"{_clock(time.monotonic() - self.start)}")

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self._stop.set()
            if self._bar is not None:
                self._bar.close()
