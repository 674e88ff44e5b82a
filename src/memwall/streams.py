"""Compact access streams: affine loop nests that the engine expands inside C.

Owns: :class:`Access` and :class:`LoopNest` (the description), their checks, their
analytic counts, and :meth:`LoopNest.expand` (the explicit accesses they stand for,
in NumPy, for tests and for ``memwall trace``).

The order of a nest is the order a program would issue it::

    depth-0 'before' accesses
    for i0 in range(counts[0]):
        depth-1 'before' accesses
        for i1 in range(counts[1]):
            ...                       # the innermost loop body: depth-L accesses
        depth-1 'after' accesses
    depth-0 'after' accesses

An access at depth ``d`` runs inside the ``d`` outermost loops; its address is
``base + sum(i_l * strides[l] for l < d)``; it touches ``size`` bytes. An access with
``rows > 1`` is a two-dimensional block (a tile row by row, as a DMA or TMA engine loads
it): ``rows`` demand accesses of ``size`` bytes, ``row_stride`` bytes apart, one after
the other. Accesses at the same depth and place run in the order given. (Example: a GEMM ``for i, for j: load
C[i,j]; for k: load A[i,k], load B[k,j]; store C[i,j]`` is a nest of counts (M, N, K)
with C's load 'before' at depth 2, A and B at depth 3, and C's store 'after' at depth 2.)
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from .errors import InputError

ADDRESS_LIMIT = 1 << 64
MAX_LOOPS = 16
INT64_LIMIT = 1 << 63  # loop counts and strides go to the engine as signed 64-bit words


def _whole(value: object, what: str) -> int:
    """``value`` as an int (a Python or NumPy integer), or an InputError naming ``what``:
    a nest's numbers are counts, bytes and byte strides, and a float, NaN or infinity
    there would be truncated silently or fail deep in the engine."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise InputError(f"{what} must be a whole number, got {value!r}")


@dataclass(frozen=True)
class Access:
    """One reference in a loop nest's body."""

    base: int  # byte address at all loop indices zero
    strides: tuple[int, ...]  # bytes per iteration of each enclosing loop, outermost first
    size: int  # bytes touched
    is_write: bool = False
    after: bool = False  # issued after the inner loops of its depth instead of before
    tensor: str = ""  # which tensor it belongs to (for per-tensor accounting)
    rows: int = 1  # demand accesses per issue: a block of `rows` runs of `size` bytes
    row_stride: int = 0  # bytes between the rows of a block

    @property
    def depth(self) -> int:
        return len(self.strides)


@dataclass(frozen=True)
class LoopNest:
    """Loop counts (outermost first) and the accesses of the body, in program order."""

    counts: tuple[int, ...]
    accesses: tuple[Access, ...]
    label: str = ""
    # After this nest the replay writes back every dirty line (a sampled product's tile
    # stores: what the streaming the sample leaves out would have written back)
    write_back: bool = False

    def __post_init__(self) -> None:
        counts = tuple(c if type(c) is int else _whole(c, "a loop count") for c in self.counts)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "accesses", tuple(self.accesses))
        n_loops = len(counts)
        if n_loops > MAX_LOOPS:
            raise InputError(f"a loop nest has at most {MAX_LOOPS} loops, got {n_loops}")
        if counts and min(counts) < 0:
            raise InputError(f"loop counts must be non-negative, got {counts}")
        if counts and max(counts) >= INT64_LIMIT:
            raise InputError(f"loop counts must be below 2^63, got {counts}")
        for a in self.accesses:  # (a lowering builds tens of thousands of nests: kept lean)
            if not (type(a.base) is int and type(a.size) is int and type(a.rows) is int
                    and type(a.row_stride) is int and all(type(s) is int for s in a.strides)):
                for value, what in ((a.base, "an access's base"), (a.size, "an access's size"),
                                    (a.rows, "an access's rows"), (a.row_stride, "an access's row_stride"),
                                    *((s, "an access's stride") for s in a.strides)):
                    _whole(value, what)
            depth, size, rows = len(a.strides), a.size, a.rows
            if depth > n_loops:
                raise InputError(
                    f"access at depth {depth} in a nest of {n_loops} loops ({self.label or 'unnamed'})"
                )
            if not 0 < size < 1 << 32:
                raise InputError(f"access size must be in 1 .. 2^32-1 bytes, got {size}")
            if a.base < 0:
                raise InputError(f"access base must be non-negative, got {a.base}")
            if not 0 < rows < 1 << 32:
                raise InputError(f"access rows must be in 1 .. 2^32-1, got {rows}")
            low, high = self._extent(a)
            if low < 0 or high + a.size > ADDRESS_LIMIT:
                raise InputError(
                    f"access {a.tensor or ''} at base {a.base:#x} leaves the 64-bit address space "
                    f"(addresses {low:#x} .. {high + a.size:#x})"
                )

    def _extent(self, a: Access) -> tuple[int, int]:
        low = high = a.base
        counts = self.counts
        for stride in (*a.strides, a.row_stride):
            if not -INT64_LIMIT <= stride < INT64_LIMIT:
                name = f" of {a.tensor}" if a.tensor else ""
                raise InputError(f"an access's strides{name} must be within +-2^63 bytes, got {stride}")
        for i, stride in enumerate(a.strides):
            count = counts[i]
            if count == 0:
                return a.base, a.base  # never issued
            span = (count - 1) * stride
            if span < 0:
                low += span
            else:
                high += span
        span = (a.rows - 1) * a.row_stride  # rows >= 1 (checked first)
        if span < 0:
            low += span
        else:
            high += span
        return low, high

    def times(self, access: Access) -> int:
        """How many demand accesses one access of the body issues (iterations x rows)."""
        n = access.rows
        for c in self.counts[: access.depth]:
            n *= c
        return n

    @property
    def n_accesses(self) -> int:
        return sum(self.times(a) for a in self.accesses)

    def line_lookups(self, line_bytes: int) -> int:
        """Lines the engine looks up for this nest (first level), analytically: exact when
        strides keep each access's alignment to the line, otherwise a bound."""
        total = 0
        for a in self.accesses:
            size = a.size
            if size >= line_bytes * 4 or (a.row_stride % line_bytes == 0
                                          and all(s % line_bytes == 0 for s in a.strides)):
                lines = (a.base + size - 1) // line_bytes - a.base // line_bytes + 1
            else:  # misaligned strides: the count varies from issue to issue; bound it
                lines = -(-size // line_bytes) + 1 if size > 1 else 1
            total += self.times(a) * lines
        return total

    def sample(self, budget: int, line_bytes: int) -> tuple[LoopNest | None, LoopNest, float]:
        """A shorter replay that stands for this nest: ``(warm_up, counted, scale)``.

        When the nest needs more than ``budget`` line lookups, the iterations of one loop
        ``d`` are sampled: the outer loops are held at their first iteration, ``k``
        iterations of loop ``d`` are replayed after ``w`` iterations of warm-up (replayed,
        not counted), and the counts are multiplied by ``scale`` = (iterations of loop d in
        the whole nest) / k. Loop ``d`` is the outermost one whose iterations contain every
        access (so each access scales alike) and are small enough to sample. This assumes
        the iterations are alike in their misses, as the waves of a GEMM or the chunks of a
        streaming update are; a nest within budget is returned whole with scale 1.
        """
        total = self.line_lookups(line_bytes)
        if total <= budget or not self.accesses:
            return None, self, 1.0
        shallowest = min(a.depth for a in self.accesses)
        outer = 1
        coarse: tuple[int, int] | None = None  # (loop, iterations outside it) of the finest loop that halves the work
        for d, count in enumerate(self.counts):
            if d >= shallowest:
                break  # loop d would leave some access outside the sample
            per_iteration = total / (outer * count)
            if count > 1 and 2 * per_iteration <= budget:
                k = max(1, -(-budget // (2 * max(1, int(per_iteration)))))
                return self._sampled(d, min(k, count), outer)
            if count > 1 and 4 * per_iteration <= total:
                coarse = (d, outer)
            outer *= count
        if coarse is not None:
            # A nest of few, large iterations (a product whose tiles each move megabytes):
            # no iteration fits the budget, but one warm and one counted iteration of the
            # finest loop that allows it still replay at most half the nest.
            return self._sampled(coarse[0], 1, coarse[1])
        return None, self, 1.0

    def sample_parts(self, budget: int, line_bytes: int, span: int = 0) -> list[tuple[LoopNest | None, LoopNest, float]]:
        """The replays that stand for this nest, in order, each ``(warm_up, counted, scale)``:
        :meth:`sample`'s one or, where ``span`` (lookups that sweep the caches twice) is
        given and it replays fewer lookups, :meth:`_sample_inner`'s two."""
        part = self.sample(budget, line_bytes)
        inner = self._sample_inner(budget, span, line_bytes) if span > 0 else None
        if inner is None:
            return [part]
        return inner if replay_lookups(inner, line_bytes) < replay_lookups([part], line_bytes) else [part]

    def _sample_inner(self, target: int, span: int, line_bytes: int) -> list[tuple[LoopNest | None, LoopNest, float]] | None:
        """A nest whose every pass of its innermost loop (a product's wave of tiles along
        K) streams at least twice ``span`` lookups, sampled along that loop: the outer
        loops held at their first iteration, ``kk`` iterations of the innermost replayed to
        warm the caches and the next ``kk`` counted (at least ``target`` lookups) and
        scaled by (passes x iterations) / kk; then the pass's accesses after the loop (the
        tile stores) counted, with the write-back of the lines they dirtied, and scaled by
        the passes.

        Only where one pass streams at least twice ``span`` (``span``: two sweeps of the
        caches) and the sampled iterations at least ``span``: there every line a pass
        reads was last touched a pass or more ago, further back than the caches hold, so
        it misses in the whole nest as in the sample; the warm-up, reads only, has pushed
        out what the nest inherited, so the write-back is the stores' alone; and the
        streaming that follows a pass's stores in the whole nest writes them back. Only a
        nest whose accesses all lie in the innermost loop or just after it."""
        depth = len(self.counts)
        if depth == 0 or span <= 0:
            return None
        body = tuple(a for a in self.accesses if a.depth == depth)
        tail = tuple(a for a in self.accesses if a.depth != depth)
        if not body or any(a.is_write for a in body) or any(a.depth != depth - 1 or not a.after for a in tail):
            return None
        chunks = self.counts[-1]
        passes = 1
        for c in self.counts[:-1]:
            passes *= c
        if chunks < 2 or passes == 0:
            return None
        per_chunk = LoopNest(self.counts, body).line_lookups(line_bytes) / (passes * chunks)
        kk = max(1, -(-max(target, span) // max(1, int(per_chunk))))  # counted: the share, at least span
        if 2 * kk > chunks or per_chunk * chunks < 2 * span:
            return None
        head = (1,) * (depth - 1)
        shifted = tuple(replace(a, base=a.base + kk * a.strides[-1]) for a in body)
        parts: list[tuple[LoopNest | None, LoopNest, float]] = [
            (LoopNest(head + (kk,), body, self.label + ".warm"), LoopNest(head + (kk,), shifted, self.label + ".sample"),
             passes * chunks / kk)]
        if tail:
            stores = tuple(replace(a, after=False) for a in tail)
            parts.append((None, LoopNest(head, stores, self.label + ".after", write_back=True), float(passes)))
        return parts

    def _sampled(self, d: int, k: int, outer: int) -> tuple[LoopNest | None, LoopNest, float]:
        """``k`` iterations of loop ``d`` after as many of warm-up, the loops outside it held
        at their first iteration (``outer`` of them in the whole nest), and the scale."""
        count = self.counts[d]
        w = min(k, count - k)
        head = (1,) * d
        rest = self.counts[d + 1 :]
        warm = LoopNest(head + (w,) + rest, self.accesses, self.label + ".warm") if w else None
        shifted = tuple(replace(a, base=a.base + w * a.strides[d]) for a in self.accesses)
        counted = LoopNest(head + (k,) + rest, shifted, self.label + ".sample")
        return warm, counted, outer * count / k

    def bytes_by_tensor(self) -> dict[str, int]:
        """Bytes referenced per tensor (accesses x size), analytically."""
        out: dict[str, int] = {}
        for a in self.accesses:
            out[a.tensor] = out.get(a.tensor, 0) + self.times(a) * a.size
        return out

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The explicit accesses, in order: ``(addr uint64, size uint32, is_write uint8)``."""
        ids, offsets = self._body(0)
        before = [i for i, a in enumerate(self.accesses) if a.depth == 0 and not a.after]
        after = [i for i, a in enumerate(self.accesses) if a.depth == 0 and a.after]
        ids = np.concatenate([np.asarray(before, dtype=np.int64), ids, np.asarray(after, dtype=np.int64)])
        offsets = np.concatenate([np.zeros(len(before), np.int64), offsets, np.zeros(len(after), np.int64)])
        bases = np.asarray([a.base for a in self.accesses], dtype=np.uint64)
        sizes = np.asarray([a.size for a in self.accesses], dtype=np.uint32)
        writes = np.asarray([a.is_write for a in self.accesses], dtype=np.uint8)
        if len(ids) == 0:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint32), np.zeros(0, np.uint8)
        rows = np.asarray([a.rows for a in self.accesses], dtype=np.int64)
        if (rows > 1).any():  # blocks: each issue becomes its rows, in order
            row_stride = np.asarray([a.row_stride for a in self.accesses], dtype=np.int64)
            per = rows[ids]
            starts = np.cumsum(per) - per
            row_index = np.arange(int(per.sum()), dtype=np.int64) - np.repeat(starts, per)
            ids = np.repeat(ids, per)
            offsets = np.repeat(offsets, per) + row_index * row_stride[ids]
        addr = bases[ids] + offsets.astype(np.uint64)  # two's complement: exact while in range
        return addr, sizes[ids], writes[ids]

    def _body(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Access ids and address offsets of all iterations of loop ``d``."""
        if d >= len(self.counts):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        before = [i for i, a in enumerate(self.accesses) if a.depth == d + 1 and not a.after]
        after = [i for i, a in enumerate(self.accesses) if a.depth == d + 1 and a.after]
        inner_ids, inner_off = self._body(d + 1)
        body_ids = np.concatenate(
            [np.asarray(before, np.int64), inner_ids, np.asarray(after, np.int64)]
        )
        body_off = np.concatenate(
            [np.zeros(len(before), np.int64), inner_off, np.zeros(len(after), np.int64)]
        )
        count = self.counts[d]
        stride_d = np.asarray(
            [a.strides[d] if a.depth > d else 0 for a in self.accesses] or [0], dtype=np.int64
        )
        ids = np.tile(body_ids, count)
        iteration = np.repeat(np.arange(count, dtype=np.int64), len(body_ids))
        offsets = np.tile(body_off, count) + iteration * stride_d[ids] if len(ids) else ids
        return ids, offsets


def replay_lookups(parts: Sequence[tuple[LoopNest | None, LoopNest, float]], line_bytes: int) -> int:
    """First-level line lookups of a planned replay, ``(warm_up, counted, scale)`` parts
    (:meth:`LoopNest.sample_parts`), their warm-ups included."""
    return sum(counted.line_lookups(line_bytes) + (warm.line_lookups(line_bytes) if warm is not None else 0)
               for warm, counted, _ in parts)


def nest(counts: Sequence[int], *accesses: Access, label: str = "") -> LoopNest:
    """Shorthand: ``nest((M, N), Access(...), ...)``."""
    return LoopNest(tuple(counts), tuple(accesses), label)
