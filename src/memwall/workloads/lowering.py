"""Lowering: each kernel of a step becomes the compact affine access streams the engine replays.

Owns: :class:`Lowered` and :func:`lower`, one loop shape per schedule family (the
machine profile's ``ScheduleSpec``). Every access names its tensor, so per-tensor
bytes can be checked against closed forms; ``LoopNest.expand()`` gives the explicit
accesses. Operand layouts follow :mod:`memwall.workloads.step`: ``C[M x N] = A . B``
row-major, ``trans`` marks an operand stored transposed, ``batch`` products laid one
after another.

Families:

* ``scalar`` - plain loops as 1980s C or Fortran wrote them, in the order the reference
  BLAS (netlib sgemv.f, sgemm.f) picks from B's layout, so the inner loop walks the matrix
  along its rows: dot products (``for i, for j: for k: load A, load B; store C``) when B
  is contiguous along K (the forward product with a transposed weight, SGEMV TRANS = 'T'),
  axpy passes (``for i: zero C[i, :]; for k: a = A[i, k]; for j: load B, load C; store C``)
  when B is contiguous along N (the input gradient dY . W, the matrix-vector W**T . delta
  of a per-example step, SGEMV TRANS = 'N' on column-major storage), an outer product
  (ger) when K = 1; at batch 1 the product is a matrix-vector loop (the M loop
  disappears). A product that accumulates (``beta``) reads C in its loops. Elementwise
  kernels touch one element per access.
* ``vector`` - strip-mined along N to ``vector_length`` (default 64, the Cray-1); up to
  ``vector_registers - 2`` (default 8 - 2) result strips stay in registers while K runs,
  so each scalar A element is loaded once per group of strips (the axpy form of a vector
  SGEMV, whatever B's layout: the Cray's vector loads take a stride, and a memory without
  a cache moves the same words either way). A strip of a transposed B is a strided vector
  load: it appears as its elements, one access each.
  ``vector_instructions`` counts strips issued: per K step, each strip's load, multiply
  and add (chained or not), plus its store.
* ``blocked`` - BLIS-style: loops jc (``nc``), pc (``kc``), ic (``mc``), jr (``nr``), ir
  (``mr``), p; B panels and A blocks are packed into a scratch region (zero-padded to
  whole micro-panels, as BLIS does); the micro-kernel loads an mr- and an nr-wide sliver
  per p and loads and stores its C micro-tile once per kc panel. Defaults:
  ``micro_tile = [4, 4], kc = 256, mc = 128, nc = 4096``. Remainder blocks are separate
  nests issued after the full blocks. A product with a dimension of one is level-2 BLAS
  and is not packed: a gemv (M = 1 or N = 1) runs as OpenBLAS's fused kernels,
  ``GEMV_FUSE`` outputs at a time as dot products when the matrix is contiguous along K
  (gemv_t) or ``GEMV_FUSE`` reduction steps at a time as axpy passes over a block of y
  otherwise (gemv_n), the re-read vector in blocks of ``GEMV_BLOCK_BYTES``; a K = 1
  product (a per-example weight gradient) runs as ger, row by row. The matrix (for K = 1,
  the output) is streamed once, a line per access, as elementwise kernels are.
* ``tiled`` - thread-block / systolic tiles staged in a software-managed level. The
  engine sees only the L2 / main-memory traffic of tile loads. Tiles run ``units`` at a
  time (default 132) in waves shaped as near-square groups of output tiles (the
  rasterisation swizzle GPU libraries use for L2 locality). Approximation: within a
  wave, staging absorbs reuse inside a tile and the L2 absorbs reuse across the wave's
  tiles, so a wave loads the union of its tiles' A rows and B columns once per K chunk
  (``tile_k`` rounded up to 32 KiB of K: coarse enough to keep a GPT-3 layer to a few million accesses), then writes its C block. Edge waves (ragged M,
  N, batch) run after the full ones. The union is what the L2 holds and main memory
  serves; the L2 itself serves every tile its own loads, which the timing counts in
  closed form (:meth:`Tiling.l2_reads`, ``timing.served_by_tiles``), and the tile is the
  one :func:`product_tiling` picks given the L2's charge (``lower``'s ``l2``). Elementwise kernels stream every tensor in 64 KiB
  chunks in lockstep. Fused attention streams, per head, Q once and K, V once in
  chunks (a head's query tiles run in one wave and share K, V through the L2; GQA heads
  of a group re-read their K, V); its backward streams K, V once and Q, dO, O, dQ per
  chunk.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ..errors import InputError
from ..profiles import ScheduleSpec
from ..streams import Access, LoopNest
from ..vocabulary import DTYPE_BITS
from .allocator import SCRATCH_BASE, TensorRef
from .config import DTYPE_BYTES
from .step import Kernel

DEFAULTS: dict[str, dict[str, Any]] = {
    "scalar": {},
    "vector": {"vector_length": 64, "vector_registers": 8},
    "blocked": {"micro_tile": [4, 4], "kc": 256, "mc": 128, "nc": 4096},
    "tiled": {"tile_m": 128, "tile_n": 128, "tile_k": 64, "units": 132, "staging": None},
}
TILED_CHUNK = 64 * 1024  # bytes per tensor per access of tiled elementwise streams
TILED_K_BYTES = 32 * 1024  # a K chunk of a tiled product covers at least this many bytes of a row


@dataclass(frozen=True)
class Lowered:
    """The streams of one kernel run (``kernel.repeat`` is applied by the caller)."""

    nests: list[LoopNest]
    vector_instructions: int
    notes: str
    parallel_units: int = 0  # independent pieces of work cores can share (0: not limited)

    @property
    def n_accesses(self) -> int:
        return sum(n.n_accesses for n in self.nests)

    def bytes_by_tensor(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nests:
            for k, v in n.bytes_by_tensor().items():
                out[k] = out.get(k, 0) + v
        return out

    def accesses_by_tensor(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nests:
            for a in n.accesses:
                out[a.tensor] = out.get(a.tensor, 0) + n.times(a)
        return out

    def line_lookups(self, line_bytes: int) -> int:
        """Lines touched, access by access (what the engine looks up), analytically."""
        return sum(n.line_lookups(line_bytes) for n in self.nests)


def params_of(schedule: ScheduleSpec) -> dict[str, Any]:
    if schedule.family not in DEFAULTS:
        raise InputError(f"unknown schedule family {schedule.family!r}; one of {', '.join(DEFAULTS)}", field="schedule.family")
    p = dict(DEFAULTS[schedule.family])
    p.update({k: v for k, v in dict(schedule.params).items() if v is not None})
    return p


ELEMENTWISE_GRAIN = 1024  # elements per thread's chunk of an elementwise kernel (blocked family)


def lower(kernel: Kernel, schedule: ScheduleSpec, *, line_bytes: int = 64, l2: L2Cost | None = None) -> Lowered:
    """The access streams of one run of ``kernel`` on a machine with this schedule; ``l2``:
    what the machine's L2 charges a product's tiles in the kernel's dtype
    (:func:`memwall.timing.tile_l2_cost`), so that the trace runs the tile the timing times."""
    p = params_of(schedule)
    if l2 is not None:
        p["l2_cost"] = l2
    fam = schedule.family
    if kernel.op in ("gemm", "gemv"):
        if fam == "blocked" and _is_level2(kernel):
            out = _level2_blocked(kernel, line_bytes)
        else:
            out = {"scalar": _gemm_scalar, "vector": _gemm_vector, "blocked": _gemm_blocked,
                   "tiled": _gemm_tiled}[fam](kernel, p)
        out = _with_epilogue(kernel, out, p, fam, line_bytes)
    elif kernel.op == "update" and "parts" in kernel.params:
        out = _multi_tensor(kernel, p, fam, line_bytes)
    elif kernel.op == "attention":
        out = _attention(kernel, p, fam)
    else:
        out = _elementwise(kernel, p, fam, line_bytes)
    if fam == "blocked":
        out = replace(out, parallel_units=_blocked_parallelism(kernel, p))
    elif fam == "tiled":
        out = replace(out, parallel_units=_tiled_parallelism(kernel, p))
    return out


# Bytes of one partial-sum element a parallel split-K product writes to its workspace and
# reads back: the fp32 accumulator (CUTLASS's GemmSplitKParallel keeps ElementAccumulator).
SPLIT_K_ACCUMULATOR_BYTES = 4


@dataclass(frozen=True)
class Tiling:
    """How a library runs one product on a tiled machine: its tile shape (``tm x tn``,
    picked from the profile's ``tile_shapes``), its K slices (split-K), and what that
    costs the units: ``tiles`` = batch x ceil(M / tm) x ceil(N / tn) x ``splits``, run in
    ``waves`` = ceil(tiles / units), every tile computing a whole ``tm x tn x k_slice``
    block (its padding included: tile quantization)."""

    tm: int
    tn: int
    splits: int
    tiles: int
    waves: int
    k_slice: int

    def padding(self, dims: tuple[int, int, int]) -> float:
        """Multiply-adds the tiles compute / the product's (>= 1): tile quantization."""
        m, n, k = dims
        return (-(-m // self.tm) * self.tm * -(-n // self.tn) * self.tn * self.splits * self.k_slice) / (m * n * k)

    def l2_reads(self, dims: tuple[int, int, int], batch: int, operand_bytes: float, multicast: int = 1) -> float:
        """Bytes the units read from the L2 for their operand tiles. Every tile loads its
        own rows of A and columns of B over its K slice into its own shared memory, so
        each A row is read once per tile column (ceil(N / tn) times) and each B column
        once per tile row (ceil(M / tm)); edge tiles read only the real rows (TMA and
        cp.async fill the rest with zeros). Where ``multicast`` units share one read (a
        2-CTA cluster's TMA multicast, a 2-SM MMA pair: ``[schedule] multicast``), the
        operand the cluster shares is read once for that many tiles along its side: the
        orientation that saves more, as the library would launch it."""
        m, n, k = dims
        tiles_m, tiles_n = -(-m // self.tm), -(-n // self.tn)
        a = batch * m * k * operand_bytes * tiles_n
        b = batch * n * k * operand_bytes * tiles_m
        if multicast <= 1:
            return a + b
        return min(a / min(multicast, tiles_n) + b, a + b / min(multicast, tiles_m))


def for_dtype(value: Any, dtype: str, default: Any = None) -> Any:
    """A schedule figure stated once or as a table by dtype (``tile_shapes``,
    ``multicast``): its value for ``dtype``, else the table's ``default``, else ``default``."""
    if isinstance(value, Mapping):
        return value.get(dtype, value.get("default", default))
    return default if value is None else value


def tile_shapes(p: Mapping[str, Any], dtype: str) -> list[tuple[int, int]]:
    """The tile shapes the machine's library has for ``dtype``: the schedule's
    ``tile_shapes`` (a list, or a table by dtype with an optional ``default``), else the
    one ``tile_m x tile_n``."""
    shapes = for_dtype(p.get("tile_shapes"), dtype)
    if not shapes:
        return [(int(p["tile_m"]), int(p["tile_n"]))]
    return [(int(a), int(b)) for a, b in shapes]


@dataclass(frozen=True)
class L2Cost:
    """What the L2 charges a tiling, for :func:`product_tiling`'s pick: ``balance`` FLOPs
    the units do in the time the L2 serves one byte (their arithmetic rate / the L2's
    bandwidth), operands of ``operand_bytes`` each, read once for ``multicast`` units."""

    balance: float
    operand_bytes: float
    multicast: int = 1


def product_tiling(dims: tuple[int, int, int], batch: int, dtype: str, p: Mapping[str, Any],
                   l2: L2Cost | None = None) -> Tiling:
    """The tiling a library picks for a (M, N, K) product of ``batch`` items.

    Split-K: while a shape's output tiles are fewer than the units, K is cut into
    ``min(ceil(K / tile_k), units // tiles)`` slices (CUTLASS's GemmSplitKParallel, cuBLAS
    for small outputs), so more units share the work. Shape: among ``tile_shapes``, the
    one whose busiest unit computes the fewest multiply-adds, waves x tm x tn x k_slice
    (tile and wave quantization: what the library's heuristic aims at; a product of one
    row or column, which is not padded to a tile, waves x its multiply-adds / tiles), ties to the one
    whose split along K writes the fewest partial bytes (:func:`split_bytes`: a reduction
    that buys no arithmetic is traffic a library avoids), then to the larger tile (fewer
    operand loads per multiply-add), then to the earlier listed. Given ``l2`` (the timing's
    pick), the busiest unit's time is the longer of its arithmetic and the L2's time to
    serve every unit's tile reads (:meth:`Tiling.l2_reads`), so a small tile that evens
    the waves but reads its operands many times over loses to a larger one where the L2
    is the slower: the fastest kernel, which is what a library's heuristic is tuned to find."""
    return _best_tiling(tuple(dims), batch, int(p["units"]), int(p["tile_k"]), tuple(tile_shapes(p, dtype)), l2)


def split_bytes(t: Tiling, dims: tuple[int, int, int], batch: int) -> int:
    """Bytes a parallel split-K moves beyond its operands: every K slice's partial output
    written to the workspace and read back by the reduction (fp32,
    :data:`SPLIT_K_ACCUMULATOR_BYTES`); none unsplit."""
    m, n, _ = dims
    return 2 * SPLIT_K_ACCUMULATOR_BYTES * t.splits * batch * m * n if t.splits > 1 else 0


# A step's products are timed on its machine and on every machine its sensitivity moves a
# figure of (about 40), with the same shapes and schedule: the choice is made once.
@lru_cache(maxsize=4096)
def _best_tiling(dims: tuple[int, int, int], batch: int, units: int, tk: int,
                 shapes: tuple[tuple[int, int], ...], l2: L2Cost | None = None) -> Tiling:
    m, n, k = dims
    best: tuple[tuple[int, int, int], Tiling] | None = None
    for tm, tn in shapes:
        out = batch * -(-m // tm) * -(-n // tn)
        splits = min(-(-k // tk), max(1, units // out)) if out < units else 1
        tiles = out * splits
        t = Tiling(tm, tn, splits, tiles, -(-tiles // units), -(-k // splits))
        # The busiest unit's multiply-adds as the timing charges them: a whole padded tile
        # each wave, but a product of one row or column is not padded (its real work
        # shared over the tiles: timing.throughput)
        busiest = t.waves * tm * tn * t.k_slice if min(m, n) > 1 else Fraction(t.waves * batch * m * n * k, tiles)
        if l2 is not None:  # in FLOPs of one unit: its arithmetic, or its share of the L2's time
            reads = t.l2_reads(dims, batch, l2.operand_bytes, l2.multicast)
            busiest = max(2 * busiest, reads * l2.balance / units)
        key = (busiest, split_bytes(t, dims, batch), -tm * tn)
        if best is None or key < best[0]:
            best = (key, t)
    assert best is not None
    return best[1]


def tiles_read_from_l2(op: str, dims: tuple[int, int, int] | None) -> bool:
    """Whether a kernel's product tiles each read their own operands from the L2 (the
    charge of :meth:`Tiling.l2_reads`; ``timing.served_by_tiles`` asks the same): a product
    of more than one row and column. A product of one row or column runs as a split-K dot
    kernel, not in tiles."""
    return op == "gemm" and dims is not None and min(dims[0], dims[1]) > 1


def _l2_of(kernel: Kernel, p: Mapping[str, Any]) -> L2Cost | None:
    """The L2's charge for this kernel's tiles, on a machine whose lowering was given one."""
    return p.get("l2_cost") if tiles_read_from_l2(kernel.op, kernel.dims) else None


def _tiled_parallelism(kernel: Kernel, p: Mapping[str, Any]) -> int:
    """Tiles a tiled kernel runs as, for its waves over the units: a product's tiles as
    :func:`product_tiling` picks them (output tiles, split along K while they are fewer
    than the units); an attention's query tiles per head; else thread blocks of
    ``ELEMENTWISE_GRAIN`` elements."""
    if kernel.op in ("gemm", "gemv") and kernel.dims is not None:
        return product_tiling(kernel.dims, kernel.batch, kernel.dtype, p, _l2_of(kernel, p)).tiles
    if kernel.op == "attention":
        return max(1, kernel.batch * -(-int(kernel.params.get("seq", 1)) // int(p["tile_m"])))
    return max(1, -(-kernel.elements // ELEMENTWISE_GRAIN)) if kernel.elements else 0


def _blocked_parallelism(kernel: Kernel, p: Mapping[str, Any]) -> int:
    """How many cores a multi-threaded BLAS-style kernel can keep busy: its output
    micro-tiles for a product, its chunks of ``ELEMENTWISE_GRAIN`` elements otherwise."""
    if kernel.op in ("gemm", "gemv") and kernel.dims is not None:
        m, n, _ = kernel.dims
        mr, nr = (int(x) for x in p["micro_tile"])
        return kernel.batch * -(-m // mr) * -(-n // nr)
    if kernel.op == "attention":
        if kernel.params.get("decode"):  # one query a head: the heads of every sequence share out
            return max(1, kernel.batch // int(kernel.params["kv_group"]))
        return max(1, kernel.batch * int(kernel.params.get("seq", 1)) // 64)
    return max(1, -(-kernel.elements // ELEMENTWISE_GRAIN)) if kernel.elements else 0


def _with_epilogue(kernel: Kernel, out: Lowered, p: Mapping[str, Any], fam: str, line_bytes: int) -> Lowered:
    """A product's epilogue: reads beyond its operands, writes beyond its output, and its
    output itself when it accumulates (``beta``), each streamed once over the output's
    rows as an elementwise pass would. The blocked family reads C in its micro-kernel
    already (C += A.B per K panel), and the scalar family in its loops, so ``beta`` adds
    nothing there."""
    reads, writes = kernel.reads[2:], kernel.writes[1:]
    if kernel.params.get("beta") and fam not in ("blocked", "scalar"):
        reads += kernel.writes[:1]
    if not reads and not writes:
        return out
    assert kernel.dims is not None
    m, n, _ = kernel.dims
    rows = kernel.batch * m
    # no broadcast: a bias (or its gradient) stays on chip across the output tiles, so it is streamed once
    epi = replace(kernel, op="elementwise", reads=reads, writes=writes, elements=rows * n, dims=(rows, n, 0),
                  broadcast=(), params={})
    low = _elementwise(epi, p, fam, line_bytes)
    return Lowered(out.nests + low.nests, out.vector_instructions + low.vector_instructions,
                   out.notes + f"; epilogue streams {', '.join(t.name for t in (*reads, *writes))}", out.parallel_units)


def _multi_tensor(kernel: Kernel, p: Mapping[str, Any], fam: str, line_bytes: int) -> Lowered:
    """One launch updating many tensors: each tensor's update streamed as its own kernel would be."""
    nests: list[LoopNest] = []
    instr = r0 = w0 = 0
    for n_reads, n_writes, elements in kernel.params["parts"]:
        part = replace(kernel, reads=kernel.reads[r0:r0 + n_reads], writes=kernel.writes[w0:w0 + n_writes],
                       elements=elements, dims=(1, elements, 0), params={})
        low = _elementwise(part, p, fam, line_bytes)
        nests += low.nests
        instr += low.vector_instructions
        r0, w0 = r0 + n_reads, w0 + n_writes
    return Lowered(nests, instr, f"multi-tensor update of {len(kernel.params['parts'])} tensors")


# ---- operand geometry -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Operands:
    e: int
    ce: int  # bytes per element of C (4 for fp32 main gradients of a 16-bit product)
    m: int
    n: int
    k: int
    a: TensorRef
    b: TensorRef
    c: TensorRef
    # byte strides: A along m and k, B along k and n, C along m and n, and per batch item
    am: int
    ak: int
    bk: int
    bn: int
    cm: int
    cn: int
    ab: int
    bb: int
    cb: int
    eb: Any = 0  # bytes of a B element when B is stored narrow (half a byte for int4); else e


def _ops(kernel: Kernel) -> _Operands:
    assert kernel.dims is not None
    m, n, k = kernel.dims
    # a product in a type narrower than a byte (fp4, fp6 block formats) reads fractional bytes an element
    e = _element_bytes(kernel.dtype)
    ce = int(kernel.params.get("c_bytes", e))
    a, b = kernel.reads[0], kernel.reads[1]
    c = kernel.writes[0]
    ta, tb = kernel.trans
    stored = kernel.params.get("b_dtype")
    eb = _element_bytes(stored) if stored else e
    am, ak = (e, m * e) if ta else (k * e, e)
    bk, bn = (eb, k * eb) if tb else (n * eb, eb)
    return _Operands(e, ce, m, n, k, a, b, c, am, ak, bk, bn, n * ce, ce, _whole(m * k * e, kernel.dtype, "dtype"),
                     _whole(k * n * eb, stored or kernel.dtype, "weights" if stored else "dtype"), m * n * ce, eb)


def _element_bytes(dtype: str) -> Any:
    """Bytes of one element: an int where whole, a Fraction for types narrower than a byte."""
    e = Fraction(DTYPE_BITS[dtype], 8)
    return int(e) if e == int(e) else e


def _whole(x: Any, dtype: str | None = None, field: str = "weights") -> int:
    """Bytes of a narrow operand's piece: whole bytes, or the product cannot be lowered
    (``dtype`` and ``field`` name the operand where the caller knows it: the whole operand
    is checked first, so a piece's check is reached only for the stored-narrow weights)."""
    if x != int(x):
        what = f"{dtype} elements are" if dtype else "elements narrower than a byte are"
        raise InputError(f"{what} packed more than one to a byte: the product's operand of {x} bytes needs dimensions "
                         "that make it whole bytes (even ones)", field=field)
    return int(x)


def _byte_elements(kernel: Kernel, family: str) -> None:
    """Refuse a product whose elements are narrower than a byte where its loops address bytes."""
    if DTYPE_BITS[kernel.dtype] % 8:
        raise InputError(f"{kernel.dtype} products (elements narrower than a byte) are lowered on the tiled "
                         f"schedule, not {family}", field="dtype")


def _wide_b(kernel: Kernel, family: str) -> None:
    _byte_elements(kernel, family)
    if kernel.params.get("b_dtype"):
        raise InputError(f"narrow weights (--weights) are lowered on tiled and blocked schedules, not {family}",
                         field="weights")


def _drop_unit_loops(counts: list[int], accesses: list[Access], label: str) -> LoopNest:
    """Remove loops of count 1 (their index is always 0), keeping addresses the same."""
    keep = [i for i, c in enumerate(counts) if c != 1]
    out = []
    for a in accesses:
        out.append(replace(a, strides=tuple(a.strides[i] for i in keep if i < a.depth)))
    return LoopNest(tuple(counts[i] for i in keep), tuple(out), label)


# ---- scalar ---------------------------------------------------------------------------------------
# The loop order a scalar product runs in is the one the reference BLAS picks from the
# layout of its matrix operand (netlib reference BLAS, Dongarra et al., ACM TOMS 14(1) and
# 16(1), sgemv.f and sgemm.f): the innermost loop walks that operand along its contiguous
# direction, never across it. In column-major Fortran, SGEMV with TRANS = 'T' (and SGEMM's
# A**T * B) runs dot products down the stored columns, TRANS = 'N' (A * B) runs axpy passes
# "y := y + temp * A(:, j)" over them. memwall's products are row-major C = A . B, which is
# column-major C**T = B**T . A**T: B plays netlib's A. So a B stored transposed (contiguous
# along K: the forward product x . W**T with W stored [out x in]) runs as dot products along
# W's rows, and a B stored as it is used (contiguous along N: the input gradient dY . W, the
# matrix-vector W**T . delta) runs as axpy passes along W's rows, the output row re-read
# and re-written for every K step. Neither walks W down its columns (a stride of a whole
# row per multiply-add, a cache line per element).
def _gemm_scalar(kernel: Kernel, p: Mapping[str, Any]) -> Lowered:
    """Plain loops in the order the reference BLAS runs them (above): an outer product when
    K = 1 (SGER), dot products when B is contiguous along K (or N = 1), axpy passes when B
    is contiguous along N. An accumulating product (``beta``) reads C in its own loops, as
    a Fortran loop ``C(I, J) = C(I, J) + ...`` does."""
    _wide_b(kernel, "scalar")
    o = _ops(kernel)
    na, nb, nc = o.a.name, o.b.name, o.c.name
    beta = bool(kernel.params.get("beta"))
    if o.k == 1:  # outer product: a[i] held in a register across the j loop (SGER)
        counts = [kernel.batch, o.m, o.n]
        acc = [
            Access(o.a.addr, (o.ab, o.am), o.e, tensor=na),
            Access(o.b.addr, (o.bb, 0, o.bn), o.e, tensor=nb),
        ]
        if beta:  # C(I, J) = C(I, J) + X(I) * TEMP
            acc.append(Access(o.c.addr, (o.cb, o.cm, o.cn), o.ce, tensor=nc))
        acc.append(Access(o.c.addr, (o.cb, o.cm, o.cn), o.ce, is_write=True, tensor=nc))
        note = "scalar outer product (ger)"
    elif o.bk == o.e or o.n == 1:  # dot form: B contiguous along K (netlib's TRANS = 'T')
        counts = [kernel.batch, o.m, o.n, o.k]
        acc = [
            Access(o.a.addr, (o.ab, o.am, 0, o.ak), o.e, tensor=na),
            Access(o.b.addr, (o.bb, 0, o.bn, o.bk), o.e, tensor=nb),
        ]
        if beta:  # C(I, J) = ALPHA * TEMP + BETA * C(I, J), after the dot product
            acc.append(Access(o.c.addr, (o.cb, o.cm, o.cn), o.ce, after=True, tensor=nc))
        acc.append(Access(o.c.addr, (o.cb, o.cm, o.cn), o.ce, is_write=True, after=True, tensor=nc))
        note = ("scalar matrix-vector loop (a dot product per output, gemv_t)" if o.m == 1
                else "scalar dot product per output")
    else:  # axpy form: B contiguous along N (netlib's TRANS = 'N'); a[i, l] held in a register
        counts = [kernel.batch, o.m, o.k, o.n]
        acc = [
            Access(o.a.addr, (o.ab, o.am, o.ak), o.e, tensor=na),
            Access(o.b.addr, (o.bb, 0, o.bk, o.bn), o.e, tensor=nb),
            Access(o.c.addr, (o.cb, o.cm, 0, o.cn), o.ce, tensor=nc),
            Access(o.c.addr, (o.cb, o.cm, 0, o.cn), o.ce, is_write=True, tensor=nc),
        ]
        note = ("scalar matrix-vector loop (axpy passes along the matrix's rows, gemv_n)" if o.m == 1
                else "scalar axpy passes per output row")
        if not beta:  # BETA = 0: each output row zeroed first (N stores), then K axpy passes over it
            acc.insert(0, Access(o.c.addr, (o.cb, o.cm), o.ce, is_write=True, tensor=nc, rows=o.n, row_stride=o.cn))
    return Lowered([_drop_unit_loops(counts, acc, kernel.name)], 0, note)


# ---- vector ---------------------------------------------------------------------------------------
def _gemm_vector(kernel: Kernel, p: Mapping[str, Any]) -> Lowered:
    _wide_b(kernel, "vector")
    o = _ops(kernel)
    vl, regs = int(p["vector_length"]), int(p["vector_registers"])
    u_max = max(1, regs - 2)  # two registers stream the B strip and the product
    full, rem = divmod(o.n, vl)
    groups, left = divmod(full, u_max)
    nests: list[LoopNest] = []
    instr = 0
    plans = []
    if groups:
        plans.append((groups, [vl] * u_max, 0))
    widths = [vl] * left + ([rem] if rem else [])
    if widths:
        plans.append((1, widths, groups * u_max * vl))
    for count, ws, col0 in plans:
        step = sum(ws)
        counts = [kernel.batch, o.m, count, o.k]
        acc = [Access(o.a.addr, (o.ab, o.am, 0, o.ak), o.e, tensor=o.a.name)]
        stores = []
        off = 0
        for w in ws:
            base_b = o.b.addr + (col0 + off) * o.bn
            if o.bn == o.e:  # unit stride: one vector load
                acc.append(Access(base_b, (o.bb, 0, step * o.bn, o.bk), w * o.e, tensor=o.b.name))
            stores.append(Access(o.c.addr + (col0 + off) * o.cn, (o.cb, o.cm, step * o.cn), w * o.ce, is_write=True,
                                 after=True, tensor=o.c.name))
            off += w
        nest_acc = acc + stores
        if o.bn != o.e:  # strided B strips: their elements, one access each, in an inner loop
            counts_s = counts + [max(ws)]
            strided = []
            off = 0
            for w in ws:
                if w == max(ws):
                    strided.append(Access(o.b.addr + (col0 + off) * o.bn, (o.bb, 0, step * o.bn, o.bk, o.bn), o.e,
                                          tensor=o.b.name))
                else:  # a short strip: an unrolled run of its own elements
                    strided.extend(Access(o.b.addr + (col0 + off + t) * o.bn, (o.bb, 0, step * o.bn, o.bk), o.e,
                                          tensor=o.b.name) for t in range(w))
                off += w
            nest_acc = acc + strided + stores
            nests.append(_drop_unit_loops(counts_s, nest_acc, kernel.name))
        else:
            nests.append(_drop_unit_loops(counts, nest_acc, kernel.name))
        runs = kernel.batch * o.m * count
        instr += runs * (o.k * 3 * len(ws) + len(ws))
    note = f"vector: strips of {vl}, {u_max} result strips held in registers"
    if o.m == 1:
        note += "; batch 1: a matrix-vector product"
    return Lowered(nests, instr, note)


# ---- blocked --------------------------------------------------------------------------------------
def _splits(n: int, block: int) -> list[tuple[int, int, int]]:
    """(count, size, start) of the full blocks and the remainder block of a dimension."""
    full, rem = divmod(n, block)
    out = []
    if full:
        out.append((full, block, 0))
    if rem:
        out.append((1, rem, full * block))
    return out


def _gemm_blocked(kernel: Kernel, p: Mapping[str, Any]) -> Lowered:
    _byte_elements(kernel, "blocked")
    o = _ops(kernel)
    mr, nr = (int(x) for x in p["micro_tile"])
    kc, mc, nc = int(p["kc"]), int(p["mc"]), int(p["nc"])
    e = o.e
    bp_base = SCRATCH_BASE  # packed B panel (kc x nc), then the packed A block (mc x kc)
    ap_base = SCRATCH_BASE + kc * (-(-nc // nr) * nr) * e + 4096
    nests = []
    for (jn, jw, j0), (pn, pw, p0), (iN, iw, i0) in itertools.product(
        _splits(o.n, nc), _splits(o.k, kc), _splits(o.m, mc)
    ):
        # a block whose width is not a multiple of the micro-tile uses the largest one dividing it,
        # so no micro-tile reaches past C (at batch 1 this makes mr = 1: a matrix-vector loop)
        mr_, nr_ = _divisor_at_most(iw, mr), _divisor_at_most(jw, nr)
        nr_count, mr_count = jw // nr_, iw // mr_
        counts = [kernel.batch, jn, pn, iN, nr_count, mr_count, pw]
        base_a = o.a.addr + i0 * o.am + p0 * o.ak
        base_b = o.b.addr + _whole(p0 * o.bk + j0 * o.bn)
        base_c = o.c.addr + i0 * o.cm + j0 * o.cn
        acc: list[Access] = []
        # pack B: kc x nc panel, row by row along its contiguous direction
        # a narrow B is read narrow and packed dequantized (the packed panel is in e)
        b_size, pack_b_loop = (_whole(jw * o.eb), pw) if o.bn == o.eb else (_whole(pw * o.eb), jw)
        acc.append(Access(base_b, (o.bb, _whole(nc * o.bn), _whole(kc * o.bk)), b_size, tensor=o.b.name))
        acc.append(Access(bp_base, (0, 0, 0), pw * jw * e, is_write=True, tensor="pack.B"))
        # pack A: mc x kc block
        if o.ak == e:
            a_size, a_loop = pw * e, iw
        else:
            a_size, a_loop = iw * e, pw
        acc.append(Access(base_a, (o.ab, 0, kc * o.ak, mc * o.am), a_size, tensor=o.a.name))
        acc.append(Access(ap_base, (0, 0, 0, 0), pw * iw * e, is_write=True, tensor="pack.A"))
        # micro-kernel
        acc.append(Access(ap_base, (0, 0, 0, 0, 0, mr_ * pw * e, mr_ * e), mr_ * e, tensor="pack.A"))
        acc.append(Access(bp_base, (0, 0, 0, 0, nr_ * pw * e, 0, nr_ * e), nr_ * e, tensor="pack.B"))
        for r in range(mr_):
            acc.append(Access(base_c + r * o.cm, (o.cb, nc * o.cn, 0, mc * o.cm, nr_ * o.cn, mr_ * o.cm), nr_ * o.ce,
                              tensor=o.c.name, after=True))
        for r in range(mr_):
            acc.append(Access(base_c + r * o.cm, (o.cb, nc * o.cn, 0, mc * o.cm, nr_ * o.cn, mr_ * o.cm), nr_ * o.ce,
                              is_write=True, after=True, tensor=o.c.name))
        nest = LoopNest(tuple(counts), tuple(acc), kernel.name)
        # the packing copies are rows of a panel: spread them over an extra loop of their own
        nests.extend(_split_packing(nest, pack_b_loop, a_loop, o, e, nc, kc, mc))
    note = f"blocked: micro-tile {mr}x{nr}, kc {kc}, mc {mc}, nc {nc}; packed panels zero-padded"
    if o.m == 1:
        note += "; batch 1: a matrix-vector product (mc holds one row)"
    return Lowered(nests, 0, note)


def _divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def _split_packing(nest: LoopNest, b_rows: int, a_rows: int, o: _Operands, e: int, nc: int, kc: int,
                   mc: int) -> list[LoopNest]:
    """Give the packing copies their row loops: the copy of a panel is ``rows`` accesses.

    A LoopNest has one loop per depth, so the B panel copy (at the pc depth) and the A
    block copy (at the ic depth) become nests of their own, issued before the
    micro-kernel nest of the same blocks: the order inside a block is kept, the
    interleaving across blocks is not (the packed buffers are reused, so this only moves
    when the operand panels are read).
    """
    counts = list(nest.counts)
    acc = list(nest.accesses)
    rb, wb, ra, wa = acc[0], acc[1], acc[2], acc[3]
    b_row_stride = _whole(o.bk if o.bn == o.eb else o.bn)
    a_row_stride = o.am if o.ak == e else o.ak
    pack_b = LoopNest(
        tuple(counts[:3]) + (b_rows,),
        (
            Access(rb.base, rb.strides + (b_row_stride,), rb.size, tensor=rb.tensor),
            Access(wb.base, (0, 0, 0, wb.size // b_rows), wb.size // b_rows, is_write=True, tensor=wb.tensor),
        ),
        nest.label + ".packB",
    )
    pack_a = LoopNest(
        tuple(counts[:4]) + (a_rows,),
        (
            Access(ra.base, ra.strides + (a_row_stride,), ra.size, tensor=ra.tensor),
            Access(wa.base, (0, 0, 0, 0, wa.size // a_rows), wa.size // a_rows, is_write=True, tensor=wa.tensor),
        ),
        nest.label + ".packA",
    )
    micro = LoopNest(nest.counts, tuple(acc[4:]), nest.label)
    return [pack_b, pack_a, micro]


# ---- blocked, level 2 -----------------------------------------------------------------------------
# A product with a dimension of one uses each element of its matrix operand (or, when K = 1,
# writes each element of its output) exactly once: there is no reuse for packing to buy, so no
# BLAS packs it. OpenBLAS forwards such a gemm to gemv (interface/gemm.c, GEMM_GEMV_FORWARD,
# OpenBLAS PR 4814, 2024) and runs gemv as fused level-2 kernels: ?gemv_n works on GEMV_FUSE
# columns at a time against a block of y, ?gemv_t on GEMV_FUSE dot products at a time against
# a block of x (kernel/x86_64/sgemv_n_4.c, sgemv_t_4.c: sgemv_kernel_4x4, NBMAX 4096 fp32 /
# dgemv 2048 fp64, i.e. 16 KiB of the vector); ?ger is an axpy per column. numpy.matmul sends
# a vector-matrix product to gemv and a K = 1 product to its own loop over the output's rows.
GEMV_FUSE = 4  # matrix rows (outputs, or reduction steps) one pass of a level-2 kernel works on
GEMV_BLOCK_BYTES = 16 * 1024  # the block of the re-read vector a level-2 kernel keeps in the first level


def _is_level2(kernel: Kernel) -> bool:
    """A product BLAS runs as gemv (M = 1 or N = 1) or ger (K = 1)."""
    assert kernel.dims is not None
    return 1 in kernel.dims


@dataclass(frozen=True)
class _Vector:
    """An operand of a level-2 product as one vector per batch item: ``length`` elements of
    ``e`` bytes, ``step`` bytes apart, ``batch`` bytes between items."""

    ref: TensorRef
    step: Any
    e: Any
    batch: Any

    def chunk(self, start: int, width: int, strides: tuple[Any, ...], **kw: Any) -> Access:
        """``width`` elements from element ``start``, the loops moving it by ``strides``
        (in elements of this vector, after the batch loop's own stride)."""
        return Access(_whole(self.ref.addr + start * self.step), (_whole(self.batch),)
                      + tuple(_whole(s * self.step) for s in strides), _whole(width * self.e), tensor=self.ref.name, **kw)


def _level2_blocked(kernel: Kernel, line_bytes: int) -> Lowered:
    """A gemv or ger as level-2 BLAS runs it: no packing; the matrix (the output, for K = 1)
    streamed once in its storage order, one line of it per access, as the blocked family
    streams elementwise kernels; the vectors re-read from the first level."""
    _byte_elements(kernel, "blocked")
    o = _ops(kernel)
    if o.k == 1:
        return _ger_blocked(kernel, o, line_bytes)
    if o.m == 1:  # y[1 x N] = x[1 x K] . W[K x N]: outputs along N
        w = _Matrix(o.b, o.bn, o.bk, o.eb, o.bb)
        x, y, outputs = _Vector(o.a, o.ak, o.e, o.ab), _Vector(o.c, o.cn, o.ce, o.cb), o.n
    else:  # y[M x 1] = W[M x K] . x[K x 1]: outputs along M
        w = _Matrix(o.a, o.am, o.ak, o.e, o.ab)
        x, y, outputs = _Vector(o.b, o.bk, o.eb, o.bb), _Vector(o.c, o.cm, o.ce, o.cb), o.m
    shape = (kernel.batch, w, x, y, outputs, o.k, line_bytes, kernel.name)
    if w.along_k == w.e or outputs == 1:
        nests, how = _gemv_dot(*shape), "dot products (gemv_t)"
    else:
        nests, how = _gemv_axpy(*shape), "axpy passes (gemv_n)"
    return Lowered(nests, 0, f"blocked level 2: a matrix-vector product as {how}, {GEMV_FUSE} at a time, "
                   "the matrix streamed once, unpacked")


@dataclass(frozen=True)
class _Matrix:
    """The matrix operand of a gemv: byte strides between outputs and along the reduction."""

    ref: TensorRef
    along_out: Any
    along_k: Any
    e: Any
    batch: Any

    def rows(self, first: int, count: int, start: int, width: int, loops: tuple[Any, ...],
             along_rows: Any, along_run: Any, after: bool = False) -> list[Access]:
        """``count`` runs of ``width`` elements, rows ``first`` on (``along_rows`` bytes
        apart), each from element ``start`` of its row (``along_run`` bytes apart); the
        enclosing loops (after the batch loop) move them by ``loops`` bytes."""
        return [Access(_whole(self.ref.addr + (first + t) * along_rows + start * along_run),
                       tuple(_whole(s) for s in (self.batch, *loops)), _whole(width * self.e), after=after,
                       tensor=self.ref.name) for t in range(count)]


def _line_chunk(e: Any, line_bytes: int) -> int:
    """Elements of ``e`` bytes in one line (at least one)."""
    return max(1, int(line_bytes // e))


def _chunks(width: int, chunk: int) -> tuple[int, int, int]:
    """(full chunks, their width, the remainder's width) of a run of ``width`` elements;
    a run shorter than a chunk is one chunk of its own width."""
    if width < chunk:
        return 1, width, 0
    full, rem = divmod(width, chunk)
    return full, chunk, rem


def _gemv_loops(run: int, grouped: int, block_e: Any, w_e: Any, line_bytes: int) -> Iterator[tuple[Any, ...]]:
    """The loops both gemv forms share: blocks of ``run`` (the re-read vector's dimension,
    ``GEMV_BLOCK_BYTES`` of its ``block_e``-byte elements), groups of ``GEMV_FUSE`` along
    ``grouped``, and each block's chunks of one line of the matrix. Yields the block size,
    ``(count, width, start)`` of the blocks and of the groups (full ones, then the
    remainder: :func:`_splits`), and the block's ``(full chunks, chunk width, remainder)``."""
    ch = _line_chunk(w_e, line_bytes)
    nb = max(ch, GEMV_BLOCK_BYTES // block_e // ch * ch)
    for blocks, groups in itertools.product(_splits(run, nb), _splits(grouped, GEMV_FUSE)):
        yield nb, blocks, groups, _chunks(blocks[1], ch)


def _gemv_dot(batch: int, w: _Matrix, x: _Vector, y: _Vector, outputs: int, k: int, line_bytes: int,
              label: str) -> list[LoopNest]:
    """Dot form (the matrix contiguous along K): for each block of x, for each group of
    outputs, the group's rows and x chunk by chunk; then the group's y read and written
    (OpenBLAS's gemv_t adds each block's sums into y)."""
    nests = []
    for nb, (kn, _, k0), (gn, gw, j0), (full, cw, rem) in _gemv_loops(k, outputs, x.e, w.e, line_bytes):
        loops = (nb * w.along_k, GEMV_FUSE * w.along_out)
        acc = [x.chunk(k0, cw, (nb, 0, cw))]
        acc += w.rows(j0, gw, k0, cw, (*loops, cw * w.along_k), w.along_out, w.along_k)
        if rem:  # the block's last, shorter chunk
            acc.append(x.chunk(k0 + full * cw, rem, (nb, 0), after=True))
            acc += w.rows(j0, gw, k0 + full * cw, rem, loops, w.along_out, w.along_k, after=True)
        for write in (False, True):
            acc.append(y.chunk(j0, gw, (0, GEMV_FUSE), is_write=write, after=True))
        nests.append(_drop_unit_loops([batch, kn, gn, full], acc, label))
    return nests


def _gemv_axpy(batch: int, w: _Matrix, x: _Vector, y: _Vector, outputs: int, k: int, line_bytes: int,
               label: str) -> list[LoopNest]:
    """Axpy form (the matrix contiguous along the outputs): for each block of y, for each
    group of reduction steps, x's group once, then chunk by chunk the group's rows with y's
    chunk read and written (OpenBLAS's gemv_n)."""
    nests = []
    for nb, (jn, _, j0), (gn, gw, k0), (full, cw, rem) in _gemv_loops(outputs, k, y.e, w.e, line_bytes):
        loops = (nb * w.along_out, GEMV_FUSE * w.along_k)
        acc = [x.chunk(k0, gw, (0, GEMV_FUSE))]
        for start, width, chunk_loop in ((0, cw, True), (full * cw, rem, False)):
            if not width:
                continue
            acc += w.rows(k0, gw, j0 + start, width, (*loops, cw * w.along_out) if chunk_loop else loops,
                          w.along_k, w.along_out, after=not chunk_loop)
            acc += [y.chunk(j0 + start, width, (nb, 0, cw) if chunk_loop else (nb, 0), is_write=write,
                            after=not chunk_loop) for write in (False, True)]
        nests.append(_drop_unit_loops([batch, jn, gn, full], acc, label))
    return nests


def _ger_blocked(kernel: Kernel, o: _Operands, line_bytes: int) -> Lowered:
    """K = 1 (an outer product, the weight gradient of one example): row by row, a[i] once,
    then b and the row of C chunk by chunk (C read first when the product accumulates)."""
    full, cw, rem = _chunks(o.n, _line_chunk(o.ce, line_bytes))
    a, b, c = _Vector(o.a, o.am, o.e, o.ab), _Vector(o.b, o.bn, o.eb, o.bb), _Vector(o.c, o.cn, o.ce, o.cb)
    row = o.cm // o.cn  # C's row stride in elements
    acc = [a.chunk(0, 1, (1,))]
    for start, width, chunk_loop in ((0, cw, True), (full * cw, rem, False)):
        if not width:
            continue
        run = (cw,) if chunk_loop else ()
        acc.append(b.chunk(start, width, (0, *run), after=not chunk_loop))
        if kernel.params.get("beta"):
            acc.append(c.chunk(start, width, (row, *run), after=not chunk_loop))
        acc.append(c.chunk(start, width, (row, *run), is_write=True, after=not chunk_loop))
    nests = [_drop_unit_loops([kernel.batch, o.m, full], acc, kernel.name)]
    return Lowered(nests, 0, "blocked level 2: an outer product as ger runs it, row by row, unpacked")


# ---- tiled --------------------------------------------------------------------------------------
def _wave_shape(tiles_m: int, tiles_n: int, batch: int, units: int) -> tuple[int, int, int]:
    """(batch items, tile rows, tile columns) of a wave: near square, at most ``units`` tiles."""
    per = tiles_m * tiles_n
    if per <= units:
        return min(batch, max(1, units // per)), tiles_m, tiles_n
    wm = min(tiles_m, max(1, math.isqrt(units)))
    wn = min(tiles_n, max(1, units // wm))
    wm = min(tiles_m, max(1, units // wn))
    return 1, wm, wn


def _operand_block(ref: TensorRef, base: Any, rows: int, chunk: int, row_stride: Any, k_stride: Any,
                   e: Any, strides: tuple[int, ...], after: bool) -> Access:
    """The block loading ``rows`` output-side rows by a K chunk of ``chunk`` (base at k = 0),
    as one two-dimensional access: row by row along the operand's contiguous direction,
    moved by ``strides`` with the loops around it."""
    if k_stride == e:  # rows contiguous along K: one run per row
        return Access(_whole(base), strides, _whole(chunk * e), False, after, ref.name, rows, _whole(row_stride))
    # K-major: one run per K step, covering the block's rows
    return Access(_whole(base), strides, _whole(rows * e), False, after, ref.name, chunk, _whole(k_stride))


def _gemm_tiled(kernel: Kernel, p: Mapping[str, Any]) -> Lowered:
    o = _ops(kernel)
    tk, units = int(p["tile_k"]), int(p["units"])
    assert kernel.dims is not None
    tiling = product_tiling(kernel.dims, kernel.batch, kernel.dtype, p, _l2_of(kernel, p))
    tm, tn = tiling.tm, tiling.tn  # the library's tile for this shape
    e = o.e
    kch = tk * max(1, -(-TILED_K_BYTES // (tk * e)))
    tiles_m, tiles_n = -(-o.m // tm), -(-o.n // tn)
    wb, wm, wn = _wave_shape(tiles_m, tiles_n, kernel.batch, units)
    nests = []
    for (bn_, bw, b0), (rn, rw, r0), (cn, cw, c0) in itertools.product(
        _splits(kernel.batch, wb), _splits(o.m, wm * tm), _splits(o.n, wn * tn)
    ):
        kfull, krem = divmod(o.k, kch)
        counts = [bn_, rn, cn, kfull]
        acc: list[Access] = []
        tail: list[Access] = []
        for bi in range(bw):
            a0 = o.a.addr + (b0 + bi) * o.ab + r0 * o.am
            b_0 = o.b.addr + (b0 + bi) * o.bb + c0 * o.bn
            for chunk, into, k0, depth in ((kch, acc, 0, 4), (krem, tail, kfull * kch, 3)):
                if not chunk or (depth == 4 and not kfull):
                    continue
                s = tuple(_whole(x) for x in (bw * o.ab, wm * tm * o.am, 0) + ((kch * o.ak,) if depth == 4 else ()))
                into.append(_operand_block(o.a, a0 + k0 * o.ak, rw, chunk, o.am, o.ak, e, s, depth == 3))
                s = (bw * o.bb, 0, _whole(wn * tn * o.bn)) + ((_whole(kch * o.bk),) if depth == 4 else ())
                into.append(_operand_block(o.b, b_0 + k0 * o.bk, cw, chunk, o.bn, o.bk, o.eb, s, depth == 3))
        stores = []
        for bi in range(bw):
            c_0 = o.c.addr + (b0 + bi) * o.cb + r0 * o.cm + c0 * o.cn
            stores.append(Access(c_0, (bw * o.cb, wm * tm * o.cm, wn * tn * o.cn), cw * o.ce, is_write=True,
                                 after=True, tensor=o.c.name, rows=rw, row_stride=o.cm))
        nests.append(LoopNest(tuple(counts), tuple(acc + tail + stores), kernel.name))
    note = (f"tiled: {tm}x{tn} tiles, waves of {wb}x{wm}x{wn} tiles (of {units} units), K chunks of {kch}; "
            "the engine sees each wave's union of tile loads")
    if o.m == 1:
        note += "; batch 1: a matrix-vector product"
    return Lowered(nests, 0, note)


# ---- attention (fused) ---------------------------------------------------------------------------
def _decode_attention(kernel: Kernel, chunk: int) -> Lowered:
    """Decode over a cache: per KV head of each sequence, its group's queries once, the
    cached K and V rows streamed in chunks once (the group shares them), the outputs."""
    pr = kernel.params
    e = DTYPE_BYTES[kernel.dtype]
    group, s, dk, dv, bits = (int(pr[k]) for k in ("kv_group", "context", "dk", "dv", "kv_bits"))
    outer = kernel.batch // group
    q, k = kernel.reads[0], kernel.reads[1]
    v = kernel.reads[2] if len(kernel.reads) > 2 else None
    o = kernel.writes[0]
    kfull, krem = divmod(s, chunk)
    qs, os_ = group * dk * e, o.bytes // outer  # one KV head's queries, and its outputs
    acc = [Access(q.addr, (qs,), qs, tensor=q.name)]
    tail: list[Access] = []
    for ref, row in ((k, dk), (v, dv)):
        if ref is None:
            continue
        per, rb = s * row * bits // 8, row * bits // 8
        if kfull:
            acc.append(Access(ref.addr, (per, chunk * rb), chunk * rb, tensor=ref.name))
        if krem:
            tail.append(Access(ref.addr + kfull * chunk * rb, (per,), krem * rb, after=True, tensor=ref.name))
    tail.append(Access(o.addr, (os_,), os_, is_write=True, after=True, tensor=o.name))
    depth1 = [a for a in acc if a.depth <= 1]
    depth2 = [a for a in acc if a.depth == 2]
    nest = LoopNest((outer, kfull) if kfull else (outer,), tuple(depth1 + depth2 + (tail if kfull else
                    [replace(a, after=False) for a in tail])), kernel.name)
    note = f"decode attention: {kernel.batch} query heads against {s} cached tokens in chunks of {chunk}; " \
        f"K, V shared by {group} heads"
    return Lowered([nest], 0, note)


def _attention(kernel: Kernel, p: Mapping[str, Any], fam: str) -> Lowered:
    pr = kernel.params
    e = DTYPE_BYTES[kernel.dtype]
    heads = kernel.batch
    group = int(pr["kv_group"])
    s, dk, dv = int(pr["seq"]), int(pr["dk"]), int(pr["dv"])
    outer = heads // group
    if fam == "tiled":
        chunk = max(1, int(p["tile_n"]))
    elif fam == "vector":
        chunk = int(p["vector_length"])
    elif fam == "blocked":
        chunk = max(1, int(p["kc"]))
    else:
        chunk = 1
    if pr.get("decode"):
        return _decode_attention(kernel, chunk)
    if int(pr.get("blocks", 1)) > 1:
        return _ring_attention(kernel, chunk, fam)
    kfull, krem = divmod(s, chunk)
    if pr.get("backward"):
        q, k, v, o, do, lse = kernel.reads
        dq, dk_, dv_ = kernel.writes
    else:
        q, k, v = kernel.reads
        o, lse = kernel.writes
    qs, ks, vs = s * dk * e, s * dk * e, s * dv * e  # bytes of one head's Q, K, V
    counts = [outer, group, kfull]
    acc: list[Access] = []
    tail: list[Access] = []

    if not pr.get("backward"):
        acc.append(Access(q.addr, (qs * group, qs), qs, tensor=q.name))
        for ref, row, per in ((k, dk, ks), (v, dv, vs)):
            hs = (per, 0, chunk * row * e)
            acc.append(Access(ref.addr, hs, chunk * row * e, tensor=ref.name))
            if krem:
                tail.append(Access(ref.addr + kfull * chunk * row * e, hs[:2], krem * row * e, after=True, tensor=ref.name))
        tail.append(Access(o.addr, (s * dv * e * group, s * dv * e), s * dv * e, is_write=True, after=True, tensor=o.name))
        tail.append(Access(lse.addr, (s * 4 * group, s * 4), s * 4, is_write=True, after=True, tensor=lse.name))
    else:
        # K, V of the head stay staged; Q, dO, O and dQ stream by chunks of rows
        acc_pre = [Access(k.addr, (ks, 0), ks, tensor=k.name), Access(v.addr, (vs, 0), vs, tensor=v.name)]
        acc.extend(acc_pre)
        for ref, row, wr in ((q, dk, False), (do, dv, False), (o, dv, False), (dq, dk, False), (dq, dk, True)):
            acc.append(Access(ref.addr, (s * row * e * group, s * row * e, chunk * row * e), chunk * row * e,
                              is_write=wr, tensor=ref.name))
            if krem:
                tail.append(Access(ref.addr + kfull * chunk * row * e, (s * row * e * group, s * row * e), krem * row * e,
                                   is_write=wr, after=True, tensor=ref.name))
        acc.append(Access(lse.addr, (s * 4 * group, s * 4), s * 4, tensor=lse.name))
        tail.append(Access(dk_.addr, (ks * group, ks), ks, is_write=True, after=True, tensor=dk_.name))
        tail.append(Access(dv_.addr, (vs * group, vs), vs, is_write=True, after=True, tensor=dv_.name))
        # K and V are per KV head (stride 0 across the group); the dK, dV written per query head
        acc[0] = Access(k.addr, (ks, 0), ks, tensor=k.name)
        acc[1] = Access(v.addr, (vs, 0), vs, tensor=v.name)
    depth2 = [a for a in acc if a.depth <= 2]
    depth3 = [a for a in acc if a.depth == 3]
    if kfull == 0:
        depth3 = []
    nest = LoopNest(tuple(counts), tuple(depth2 + depth3 + tail), kernel.name)
    note = f"fused attention, {heads} heads of {s} tokens in chunks of {chunk}; K, V shared by {group} heads"
    vec = 0
    if fam == "vector":
        vec = heads * -(-s // chunk) * 6
    return Lowered([nest], vec, note)


def _ring_attention(kernel: Kernel, chunk: int, fam: str) -> Lowered:
    """Ring attention's core on one device: ``blocks`` fused calls of the local queries (``seq``
    rows a head) against a block of ``keys / blocks`` keys, the first the device's own K, V,
    the others read from the receive buffer (its first block's range each time: the engine
    sees one range re-read where two alternate). Forward: per head, Q read, K, V streamed in
    chunks, O and the softmax statistics written, once per block (each call's output is merged
    into the running one). Backward: per head and block, K, V staged; Q, dO, O and dQ (read
    and written) streamed by chunks of rows; the statistics read; the block's dK, dV written."""
    pr = kernel.params
    e = DTYPE_BYTES[kernel.dtype]
    group, sq, dk, dv = int(pr["kv_group"]), int(pr["seq"]), int(pr["dk"]), int(pr["dv"])
    blocks = int(pr["blocks"])
    sb = int(pr["keys"]) // blocks  # keys a block
    outer = kernel.batch // group
    backward = bool(pr.get("backward"))
    if backward:
        q, k, v, o, do, lse, kbuf, vbuf = kernel.reads
        dq, dkb, dvb = kernel.writes
    else:
        q, k, v, kbuf, vbuf = kernel.reads
        o, lse = kernel.writes
    qs, ks, vs = sq * dk * e, sb * dk * e, sb * dv * e  # one head's Q (local), one block's K, V

    def nest(kk: Any, vv: Any, count: int) -> LoopNest:
        counts = (outer, group, count)
        rows = sq if backward else sb  # what streams in chunks: the queries backward, the keys forward
        full, rem = divmod(rows, chunk)
        acc: list[Access] = []
        tail: list[Access] = []
        if not backward:
            acc.append(Access(q.addr, (qs * group, qs, 0), qs, tensor=q.name))
            for ref, per in ((kk, ks), (vv, vs)):
                row = per // sb
                acc.append(Access(ref.addr, (per, 0, 0, chunk * row), chunk * row, tensor=ref.name))
                if rem:
                    tail.append(Access(ref.addr + full * chunk * row, (per, 0, 0), rem * row, after=True,
                                       tensor=ref.name))
            tail.append(Access(o.addr, (sq * dv * e * group, sq * dv * e, 0), sq * dv * e, is_write=True,
                               after=True, tensor=o.name))
            tail.append(Access(lse.addr, (sq * 4 * group, sq * 4, 0), sq * 4, is_write=True, after=True,
                               tensor=lse.name))
        else:
            acc += [Access(kk.addr, (ks, 0, 0), ks, tensor=kk.name), Access(vv.addr, (vs, 0, 0), vs, tensor=vv.name)]
            for ref, row, wr in ((q, dk, False), (do, dv, False), (o, dv, False), (dq, dk, False), (dq, dk, True)):
                st = (sq * row * e * group, sq * row * e, 0)
                acc.append(Access(ref.addr, st + (chunk * row * e,), chunk * row * e, is_write=wr, tensor=ref.name))
                if rem:
                    tail.append(Access(ref.addr + full * chunk * row * e, st, rem * row * e, is_write=wr, after=True,
                                       tensor=ref.name))
            acc.append(Access(lse.addr, (sq * 4 * group, sq * 4, 0), sq * 4, tensor=lse.name))
            tail.append(Access(dkb.addr, (ks, 0, 0), ks, is_write=True, after=True, tensor=dkb.name))
            tail.append(Access(dvb.addr, (vs, 0, 0), vs, is_write=True, after=True, tensor=dvb.name))
        shallow = [a for a in acc if a.depth <= 3]
        deep = [a for a in acc if a.depth == 4] if full else []
        return LoopNest(counts + ((full,) if full else ()), tuple(shallow + deep + tail), kernel.name)

    # block 0 from the device's own K, V; the other blocks from the receive buffer
    nests = [nest(k, v, 1), nest(kbuf, vbuf, blocks - 1)]
    note = (f"ring attention, {kernel.batch} heads of {sq} local queries against {blocks} blocks of {sb} keys in "
            f"chunks of {chunk}; K, V shared by {group} heads")
    vec = kernel.batch * blocks * -(-(sq if backward else sb) // chunk) * 6 if fam == "vector" else 0
    return Lowered(nests, vec, note)


# ---- elementwise, softmax, reductions, updates --------------------------------------------------
def _elementwise(kernel: Kernel, p: Mapping[str, Any], fam: str, line_bytes: int) -> Lowered:
    n = kernel.elements
    rows = kernel.dims[0] if kernel.dims else 1
    cols = n // rows if rows else n
    refs = [(r, False) for r in kernel.reads] + [(w, True) for w in kernel.writes]
    main, bcast, other = [], [], []
    for r, wr in refs:
        if r.name in kernel.broadcast and r.bytes % cols == 0:
            bcast.append((r, wr, r.bytes // cols))
        elif r.bytes % n == 0 and r.bytes >= n:
            main.append((r, wr, r.bytes // n))
        else:
            other.append((r, wr))
    esz = max([x[2] for x in main + bcast] or [1])
    if fam == "scalar":
        ce = 1
    elif fam == "vector":
        ce = int(p["vector_length"])
    elif fam == "blocked":
        ce = max(1, line_bytes // esz)
    else:
        ce = max(1, TILED_CHUNK // esz)
    nests: list[LoopNest] = []
    instr = 0
    per_elem_ops = max(1, len([k for k, v in kernel.ops.items() if v]))
    if main or bcast:
        r_loop = rows if bcast else 1
        width = cols if bcast else n
        for count, size, start in _splits(width, ce):
            acc = []
            for r, wr, es in main:
                row_stride = cols * es if bcast else 0
                acc.append(Access(r.addr + start * es, (row_stride, size * es), size * es, is_write=wr, tensor=r.name))
            for r, wr, es in bcast:
                acc.append(Access(r.addr + start * es, (0, size * es), size * es, is_write=wr, tensor=r.name))
            # reads before writes, as a loop body issues them
            acc.sort(key=lambda a: a.is_write)
            nests.append(_drop_unit_loops([r_loop, count], acc, kernel.name))
            if fam == "vector":
                instr += r_loop * count * (len(acc) + per_elem_ops)
    for r, wr in other:  # a tensor of another size (gathers, im2col sources): streamed on its own
        for count, size, start in _splits(r.bytes, ce * esz):
            nests.append(LoopNest((count,), (Access(r.addr + start, (size,), size, is_write=wr, tensor=r.name),),
                                  f"{kernel.name}:{r.name}"))
            if fam == "vector":
                instr += count
    note = f"{kernel.op}: {n} elements in runs of {ce}"
    return Lowered(nests, instr, note)
