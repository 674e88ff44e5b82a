"""A pure-Python model of ENGINE_SEMANTICS.md: the oracle the Cython engine is held to.

Slow and plain on purpose: one list of ways per set, one function per rule. Counters
come back as the same :class:`memwall.engine.HierarchyCounters` the engine gives.

Rules beyond ENGINE_SEMANTICS.md, which the engine implements identically:

* Splitting. A reference of ``n`` bytes at ``addr`` reaching a level is split into that
  level's lines; each piece is one lookup carrying its own bytes. A fetch from level
  l+1 is a read of l's whole line (``line * line_bytes``, ``line_bytes`` bytes); a
  write-back a write of it. Main memory counts each reference it receives once, with
  its bytes; with no cache levels the demand accesses reach it unsplit.
* Victim choice happens after the fetch (which may back-invalidate ways here). The
  victim is invalidated before its write-back is sent down, then the new line is
  installed in its way.
* Policies. LRU: stamp on install and on every hit, victim = smallest stamp. FIFO:
  stamp on install only. Random: ``splitmix64(state) % ways`` with the state starting
  at the level's seed, drawn only when no way is invalid. Tree-PLRU: ways-1 bits per
  set, node i has children 2i+1 and 2i+2; a touch (hit or install) sets every bit on
  the way's path to point away from it (1 = go right); the victim follows the bits
  (0 = left). Every policy fills the lowest-numbered invalid way first.
* Write-through + no-write-allocate: every write lookup (hit or miss) sends its own
  bytes to l+1 as a write and adds them to ``bytes_out``; a hit refreshes the
  replacement state and leaves the line clean; a miss allocates nothing.
* Inclusive (``inclusion = "inclusive"`` on level l >= 1): when l evicts a line V (as a
  victim of a fill, of a victim install or of a write-back allocation), every level
  above l invalidates all of its lines inside V's bytes; each line removed counts
  ``back_invalidations += 1`` at the level it was removed from. A removed dirty line is
  not written back on its own: its data leaves with V, which is then written back to
  l+1 as dirty (one ``writebacks``, ``line_bytes`` of ``bytes_out``, at level l).
  Inclusion is enforced by eviction only: a line that enters a level above without
  a fetch (a full-line write) is not copied into l. Upper line sizes must not exceed
  l's.
* Exclusive (``inclusion = "exclusive"`` on level l+1 >= 1; l and l+1 write-back, same
  line size): a line lives in at most one of l and l+1. A miss at l that fetches looks
  the line up at l+1 as a read (counted as a read there): on a hit the line leaves l+1
  and goes up, dirty if it was dirty at l+1 (no write-back is counted for that move);
  on a miss l+1 counts a read miss and ``bytes_in``, fetches the line from l+2 and
  does not keep it. A full-line write miss at l (no fetch) drops any stale copy at
  l+1 without a write-back. Every victim of l, clean or dirty, is installed at l+1:
  at l it counts ``bytes_out += line_bytes`` always and ``writebacks += 1`` only when
  dirty; at l+1 the install is not a lookup (no reads, writes, misses or 3C update);
  it chooses a victim by l+1's policy (whose eviction follows these same rules) and
  keeps the line's dirtiness. The end-of-run flush writes dirty lines of l to l+1 as
  ordinary full-line writes, so after a flush a line may sit in both.
* 3C. At each level every lookup (demand, fetch, write-back, write-through) feeds the
  "seen" set and the fully associative LRU shadow of the same number of lines. The
  shadow allocates on a miss unless the lookup is a write at a write-through level;
  victim installs and invalidations do not touch it. Only misses are classified.
* Flush: levels first to last, each in set order then way order; a dirty line is
  cleaned (it stays valid), counted as a write-back and sent to l+1 as a full-line
  write, which may in turn dirty, allocate and evict there.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from memwall.engine import HierarchyCounters, LevelCounters, MemoryCounters
from memwall.levels import LevelSpec

MASK64 = (1 << 64) - 1
COUNTERS = ("reads", "writes", "read_misses", "write_misses", "compulsory", "capacity", "conflict",
            "writebacks", "bytes_in", "bytes_out", "back_invalidations")


def splitmix64(state: int) -> tuple[int, int]:
    """(next state, output) of splitmix64."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


class Way:
    __slots__ = ("line", "dirty", "stamp")

    def __init__(self) -> None:
        self.line: int | None = None  # None = invalid
        self.dirty = False
        self.stamp = 0


class Level:
    def __init__(self, spec: LevelSpec, classify: bool) -> None:
        self.spec = spec
        self.lb = spec.line
        self.sets = [[Way() for _ in range(spec.ways)] for _ in range(spec.sets)]
        self.bits = [[0] * max(spec.ways - 1, 0) for _ in range(spec.sets)]
        self.clock = 0
        self.rng = spec.seed
        self.wt = spec.write == "through-noallocate"
        self.classify = classify
        self.seen: set[int] = set()
        self.shadow: OrderedDict[int, None] = OrderedDict()  # last = most recent
        self.c = dict.fromkeys(COUNTERS, 0)

    def set_of(self, line: int) -> int:
        return line % len(self.sets)

    def find(self, line: int) -> Way | None:
        for way in self.sets[self.set_of(line)]:
            if way.line == line:
                return way
        return None

    def plru_touch(self, s: int, w: int) -> None:
        node, lo, n = 0, 0, self.spec.ways
        while n > 1:
            half = n // 2
            if w < lo + half:
                self.bits[s][node] = 1
                node = 2 * node + 1
            else:
                self.bits[s][node] = 0
                node, lo = 2 * node + 2, lo + half
            n = half

    def touch(self, line: int) -> None:
        s = self.set_of(line)
        w = next(i for i, way in enumerate(self.sets[s]) if way.line == line)
        if self.spec.policy == "lru":
            self.clock += 1
            self.sets[s][w].stamp = self.clock
        elif self.spec.policy == "plru":
            self.plru_touch(s, w)

    def victim(self, s: int) -> int:
        ways = self.sets[s]
        for i, way in enumerate(ways):
            if way.line is None:
                return i
        policy = self.spec.policy
        if policy in ("lru", "fifo"):
            return min(range(len(ways)), key=lambda i: (ways[i].stamp, i))
        if policy == "random":
            self.rng, out = splitmix64(self.rng)
            return out % len(ways)
        node, lo, n = 0, 0, len(ways)
        while n > 1:
            half = n // 2
            if self.bits[s][node] == 0:
                node = 2 * node + 1
            else:
                node, lo = 2 * node + 2, lo + half
            n = half
        return lo

    def install(self, s: int, w: int, line: int, dirty: bool) -> None:
        way = self.sets[s][w]
        self.clock += 1
        way.line, way.dirty, way.stamp = line, dirty, self.clock
        if self.spec.policy == "plru":
            self.plru_touch(s, w)

    def classify_ref(self, line: int, hit: bool, allocate: bool) -> None:
        if not self.classify:
            return
        seen = line in self.seen
        self.seen.add(line)
        fa_hit = line in self.shadow
        if fa_hit:
            self.shadow.move_to_end(line)
        elif allocate:
            if len(self.shadow) >= self.spec.lines:
                self.shadow.popitem(last=False)
            self.shadow[line] = None
        if not hit:
            key = "compulsory" if not seen else ("capacity" if not fa_hit else "conflict")
            self.c[key] += 1


class ReferenceHierarchy:
    """Same constructor and methods as :class:`memwall.engine.Hierarchy`, in plain Python."""

    def __init__(self, levels: Sequence[LevelSpec], classify: bool = False) -> None:
        self.specs = list(levels)
        self.classify = classify
        self.reset()

    def reset(self) -> None:
        self.levels = [Level(s, self.classify) for s in self.specs]
        self.mem = dict.fromkeys(("reads", "writes", "bytes_read", "bytes_written"), 0)
        self.accesses = 0

    # ---- inputs
    def replay(self, addr: Iterable[int], size: Iterable[int], is_write: Iterable[int]) -> None:
        for a, s, w in zip(addr, size, is_write, strict=True):
            a, s = int(a), int(s)
            assert s >= 1 and a + s <= 1 << 64
            self.accesses += 1
            self.ref(0, a, s, bool(w))

    def flush(self) -> None:
        for i, lv in enumerate(self.levels):
            for ways in lv.sets:
                for way in ways:
                    if way.line is not None and way.dirty:
                        way.dirty = False
                        lv.c["writebacks"] += 1
                        lv.c["bytes_out"] += lv.lb
                        self.ref(i + 1, way.line * lv.lb, lv.lb, True)

    def counters(self) -> HierarchyCounters:
        return HierarchyCounters(
            [LevelCounters(lv.spec.name, **lv.c) for lv in self.levels],
            MemoryCounters(**self.mem),
            self.accesses,
        )

    # ---- the rules
    def exclusive_below(self, i: int) -> bool:
        return i + 1 < len(self.levels) and self.levels[i + 1].spec.inclusion == "exclusive"

    def ref(self, i: int, addr: int, n: int, write: bool) -> None:
        if i == len(self.levels):
            self.mem["writes" if write else "reads"] += 1
            self.mem["bytes_written" if write else "bytes_read"] += n
            return
        lb = self.levels[i].lb
        end = addr + n
        for line in range(addr // lb, (end - 1) // lb + 1):
            lo, hi = max(addr, line * lb), min(end, (line + 1) * lb)
            self.lookup(i, line, lo, hi - lo, write)

    def lookup(self, i: int, line: int, lo: int, n: int, write: bool) -> None:
        lv = self.levels[i]
        lv.c["writes" if write else "reads"] += 1
        way = lv.find(line)
        lv.classify_ref(line, way is not None, not (write and lv.wt))
        if way is not None:
            lv.touch(line)
            if write and lv.wt:
                lv.c["bytes_out"] += n
                self.ref(i + 1, lo, n, True)
            elif write:
                way.dirty = True
            return
        lv.c["write_misses" if write else "read_misses"] += 1
        if write and lv.wt:
            lv.c["bytes_out"] += n
            self.ref(i + 1, lo, n, True)
            return
        fill_dirty = False
        if not (write and n == lv.lb):
            lv.c["bytes_in"] += lv.lb
            if self.exclusive_below(i):
                fill_dirty = self.fetch_exclusive(i + 1, line)
            else:
                self.ref(i + 1, line * lv.lb, lv.lb, False)
        elif self.exclusive_below(i):
            stale = self.levels[i + 1].find(line)
            if stale is not None:
                stale.line, stale.dirty = None, False
        s = lv.set_of(line)
        w = lv.victim(s)
        self.evict_way(i, lv.sets[s][w])
        lv.install(s, w, line, write or fill_dirty)

    def evict_way(self, i: int, way: Way) -> None:
        if way.line is None:
            return
        line, dirty = way.line, way.dirty
        way.line, way.dirty = None, False
        lv = self.levels[i]
        if lv.spec.inclusion == "inclusive":
            for j in range(i):
                dirty |= self.back_invalidate(j, line * lv.lb, lv.lb)
        if self.exclusive_below(i):
            lv.c["bytes_out"] += lv.lb
            lv.c["writebacks"] += int(dirty)
            self.victim_install(i + 1, line, dirty)
        elif dirty:
            lv.c["writebacks"] += 1
            lv.c["bytes_out"] += lv.lb
            self.ref(i + 1, line * lv.lb, lv.lb, True)

    def back_invalidate(self, j: int, addr: int, n: int) -> bool:
        up = self.levels[j]
        dirty = False
        for line in range(addr // up.lb, (addr + n - 1) // up.lb + 1):
            way = up.find(line)
            if way is not None:
                dirty |= way.dirty
                up.c["back_invalidations"] += 1
                way.line, way.dirty = None, False
        return dirty

    def victim_install(self, i: int, line: int, dirty: bool) -> None:
        lv = self.levels[i]
        way = lv.find(line)
        if way is not None:
            way.dirty |= dirty
            lv.touch(line)
            return
        s = lv.set_of(line)
        w = lv.victim(s)
        self.evict_way(i, lv.sets[s][w])
        lv.install(s, w, line, dirty)

    def fetch_exclusive(self, i: int, line: int) -> bool:
        lv = self.levels[i]
        lv.c["reads"] += 1
        way = lv.find(line)
        lv.classify_ref(line, way is not None, True)
        if way is not None:
            dirty = way.dirty
            way.line, way.dirty = None, False
            return dirty
        lv.c["read_misses"] += 1
        lv.c["bytes_in"] += lv.lb
        self.ref(i + 1, line * lv.lb, lv.lb, False)
        return False
