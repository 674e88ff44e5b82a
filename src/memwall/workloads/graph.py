"""What a step computes, declared: named tensors and the kernels over them, no addresses.

Owns: :class:`TensorDecl` (a tensor by name: bytes, and its class where the class is
intrinsic; or a view into a parent at a byte offset), :class:`Op` (a declared kernel:
phase, operation, FLOPs and operation counts, shape, and the tensors it reads and writes,
by name), :class:`Param` (a trained tensor with its gradient and optimizer state) and
:class:`Graph`, the list builders append to. Builders only declare; when each tensor is
allocated and freed, and the class of every tensor whose class is a matter of lifetime
(saved activations or workspace), is derived by :mod:`memwall.workloads.liveness`.

An ``Op`` is plain data so that passes over the declared list (checkpointing today;
fusion, accumulation, sharding later) rewrite it with :func:`dataclasses.replace`. Its
``role`` names what the kernel is for (``"attention-core"``, ``"bias"``, ``"norm"``,
``"optimizer"``, ...) so a pass can key on it; ``block`` is the checkpointable unit (a
layer of a chain or a transformer block; -1 outside them), which for a chain is not the
``layer`` a kernel reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ..vocabulary import BLOCK_FORMATS, DTYPE_BITS, WEIGHT_GROUP_SCALES, group_format
from .config import DTYPE_BYTES, OPTIMIZER_STATES
from .ops import OPTIMIZER_OPS, flops_of, plus, scale

# what a trained parameter holds; they live the whole step (the batch may too: ``whole_step``)
PARAMETER_CLASSES = ("weights", "gradients", "optimizer")
# Transformer Engine's DelayedScaling default: each fp8 tensor's scale comes from the
# largest of its last 1024 amax values (amax_history_len = 1024, amax_compute_algo "max").
AMAX_HISTORY = 1024
# Operations a cast to a narrow type costs an element: its absolute value into the amax
# (a max), and the scale multiply that rounds it to the narrow type (a mul).
CAST_OPS = {"max": 1, "mul": 1}


@dataclass(frozen=True)
class TensorDecl:
    """A declared tensor. ``cls`` None: derived from its use. ``parent``: a view into it."""

    id: str  # unique within a graph
    name: str  # as printed (several tensors may share one, e.g. every layer's "ln1.out")
    bytes: int
    cls: str | None = None
    parent: str | None = None
    offset: int = 0  # bytes into the parent
    whole_step: bool = False  # live from the first kernel to the end (parameters, the batch)
    recompute_name: str | None = None  # how a recomputed copy is printed (the name when None)


@dataclass(frozen=True)
class Op:
    """A declared kernel: exact FLOPs of one run over tensors named by id."""

    name: str
    phase: str
    op: str
    dtype: str
    flops: int
    ops: dict[str, int]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    dims: tuple[int, int, int] | None = None
    repeat: int = 1
    batch: int = 1
    trans: tuple[bool, bool] = (False, False)
    elements: int = 0
    broadcast: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    layer: int = -1
    group: str = ""
    role: str = ""
    block: int = -1

    @property
    def touches(self) -> tuple[str, ...]:
        return self.reads + self.writes


def _placed(op: Op, layer: int, group: str, block: int) -> Op:
    """A copy of ``op`` in this layer, group and block: ``replace`` without its per-field
    ``getattr`` and ``__init__`` (an Op checks nothing when built), for the hundreds of
    thousands of kernels the validation's steps declare."""
    placed = object.__new__(Op)
    placed.__dict__.update(op.__dict__, layer=layer, group=group, block=block)
    return placed


@dataclass(frozen=True)
class Param:
    """A trained tensor: its weights, gradient (training only) and optimizer state, by id."""

    name: str
    w: str
    g: str | None
    state: tuple[str, ...]
    values: int
    layer: int
    group: str
    update: bool = True  # False: allocated, but no update kernel (no gradient reaches it)
    stored: str | None = None  # weight-only quantization: the narrow type the weights are stored in


class Graph:
    """The declared step: tensors by id, kernels in program order, the trained parameters.

    ``blocks`` lists, per checkpointable block, the tensor that is its output (the next
    block's input); ``branched`` says a block reads other than its predecessor's output.
    """

    def __init__(self, dtype: str, grad_dtype: str | None = None,
                 group_format: tuple[int, int] | None = None, product: str | None = None) -> None:
        self.dtype = dtype
        # products of role "linear" inside a block run in this narrow type, their operands cast
        # to it first (None: every kernel in ``dtype``)
        self.product = product
        self.casts: dict[str, int] = {}  # tensor -> position in ops of the kernel that casts it
        self.narrow: dict[tuple[str, bool], str] = {}  # (tensor, transposed) -> its narrow copy
        self.cast_roots: dict[str, set[str]] = {}  # owning tensor -> the cast tensors in it
        self.cast_count = 0  # tensors cast over the step (each has its own scale)
        self.esz = DTYPE_BYTES[dtype]
        self.grad_esz = DTYPE_BYTES[grad_dtype or dtype]  # fp32 main gradients under mixed precision: 4
        self.tensors: dict[str, TensorDecl] = {}
        self.ops: list[Op] = []
        self.params: list[Param] = []
        self.scales: dict[str, str] = {}  # narrow weights (or a part of them) -> their group scales
        # (weights a group, bits a group's scale and zero point take), as TrainingConfig.group_format
        self.group_format = group_format
        self.blocks: list[str] = []
        self.branched = False
        # a pipeline stage: its layers are laid out alike in every stage (liveness.derive)
        self.stage = False
        self.layer, self.group, self.block = -1, "", -1

    # ---- tensors --------------------------------------------------------------------------
    def add_tensor(self, decl: TensorDecl) -> str:
        tid, n = decl.id, 1
        while tid in self.tensors:
            n += 1
            tid = f"{decl.id}#{n}"
        self.tensors[tid] = decl if tid == decl.id else replace(decl, id=tid)
        return tid

    def tensor(self, name: str, elements: int, esz: int | None = None, *, cls: str | None = None,
               whole_step: bool = False, recompute_name: str | None = None, bits: int | None = None) -> str:
        """``bits``: elements narrower than a byte (int4), packed; rounds up to whole bytes."""
        nbytes = -(-elements * bits // 8) if bits else elements * (self.esz if esz is None else esz)
        scope = f"{self.block}/" if self.block >= 0 else ""
        return self.add_tensor(TensorDecl(scope + name, name, nbytes, cls, whole_step=whole_step,
                                          recompute_name=recompute_name))

    def view(self, parent: str, name: str, offset: int, nbytes: int) -> str:
        """Part of ``parent``: ``nbytes`` from byte ``offset``; it keeps the parent alive."""
        return self.add_tensor(TensorDecl(f"{parent}:{name}", name, nbytes, parent=parent, offset=offset))

    def root(self, tid: str) -> tuple[str, int]:
        """The tensor that owns ``tid``'s memory, and ``tid``'s byte offset into it."""
        off = 0
        d = self.tensors[tid]
        while d.parent is not None:
            off += d.offset
            d = self.tensors[d.parent]
        return d.id, off

    def param(self, name: str, values: int, *, training: bool, optimizer: str, update: bool = True,
              stored: str | None = None) -> Param:
        """``stored``: the weights kept in this narrow type (inference only), dequantized where used."""
        bits = DTYPE_BITS[stored] if stored else None
        w = self.tensor(name, values, cls="weights", whole_step=True, bits=bits)
        if stored in WEIGHT_GROUP_SCALES:
            group, bits_a_group = self._groups(stored)
            self.scales[w] = self.tensor(f"scales.{name}", -(-values // group), cls="weights", whole_step=True,
                                         bits=bits_a_group)
        elif stored in BLOCK_FORMATS:  # a scale a block, and the tensor's own scale (NVFP4)
            self.scales[w] = self.tensor(f"scales.{name}", BLOCK_FORMATS[stored].scale_bytes(values), 1,
                                         cls="weights", whole_step=True)
        g = None
        state: list[str] = []
        if training:
            g = self.tensor(f"grad.{name}", values, self.grad_esz, cls="gradients", whole_step=True)
            if self.dtype != "fp32":
                state.append(self.tensor(f"master.{name}", values, 4, cls="optimizer", whole_step=True))
            for i in range(OPTIMIZER_STATES[optimizer]):
                state.append(self.tensor(f"{('m', 'v')[i]}.{name}", values, 4, cls="optimizer", whole_step=True))
        p = Param(name, w, g, tuple(state), values, self.layer, self.group, update, stored)
        self.params.append(p)
        return p

    def part(self, p: Param, i: int, offset_values: int, values: int) -> Param:
        """A consecutive slice of a parameter (one expert, one matrix of a fused tensor)."""
        bits = DTYPE_BITS[p.stored] if p.stored else 8 * self.esz

        def cut(t: str, b: int) -> str:
            return self.view(t, f"{self.tensors[t].name}[{i}]", offset_values * b // 8, -(-values * b // 8))

        # gradients may be wider than the weights (fp32 main gradients of a 16-bit step)
        grad_bits = 8 * (self.tensors[p.g].bytes // p.values) if p.g else 0
        w = cut(p.w, bits)
        if p.w in self.scales:  # the part's groups of the scales (parts start on a group)
            group, bits_a_group = self._groups(p.stored or "")
            parent = self.scales[p.w]
            groups = -(-values // group)
            self.scales[w] = self.view(parent, f"{self.tensors[parent].name}[{i}]",
                                       offset_values // group * bits_a_group // 8, -(-groups * bits_a_group // 8))
        return Param(f"{p.name}[{i}]", w, cut(p.g, grad_bits) if p.g else None, (), values, p.layer,
                     p.group, False, p.stored)

    def _groups(self, stored: str) -> tuple[int, int]:
        """The step's group format where it gives one, else the type's default; a block
        format's block and scale bits."""
        if stored in BLOCK_FORMATS:
            f = BLOCK_FORMATS[stored]
            return f.block, f.scale_bits
        fmt = self.group_format or group_format(stored)
        assert fmt is not None, stored  # asked for the grouped types only
        return fmt

    # ---- kernels --------------------------------------------------------------------------
    @contextmanager
    def at(self, layer: int = -1, group: str = "", block: int = -1) -> Iterator[None]:
        """Kernels and tensors declared inside belong to this layer, group and block."""
        old = self.layer, self.group, self.block
        self.layer, self.group, self.block = layer, group, block
        try:
            yield
        finally:
            self.layer, self.group, self.block = old

    def add(self, op: Op) -> Op:
        op = _placed(op, self.layer, self.group, self.block)
        for w in op.writes if self.cast_roots else ():  # a tensor written again (summed in place) needs a new cast
            for t in self.cast_roots.pop(self.root(w)[0], ()):
                self.casts.pop(t, None)
                self.narrow.pop((t, False), None)
                self.narrow.pop((t, True), None)
        self.ops.append(op)
        return op

    def gemm(self, name: str, phase: str, a: str, b: str, c: str, m: int, n: int, k: int, *,
             trans: tuple[bool, bool] = (False, False), batch: int = 1, repeat: int = 1, role: str = "",
             stored: str | None = None, c_bytes: int | None = None) -> None:
        """``C[M x N] = A[M x K] . B[K x N]``, ``batch`` times: 2.M.N.K FLOPs each.

        ``stored``: B is held in this narrow type and dequantized in the product's prologue,
        once per element per run: a scale multiply, and for the integer types the zero
        point's subtraction (as AWQ and GPTQ kernels do); those operations are counted, and
        the weights widened (``ops['dequant']``), whose instructions the timing charges.
        Where the type has group scales (WEIGHT_GROUP_SCALES), the product reads B's
        scales too, once a run (lowered with the epilogue's operands, after the product).
        ``c_bytes``: C's element size where it differs from the dtype's (a product that
        writes its result wider or narrower than its inputs).
        """
        if self.product and role == "linear" and self.block >= 0:
            self._narrow_gemm(name, phase, a, b, c, m, n, k, trans, batch, repeat, stored)
            return
        fma = batch * m * n * k
        ops: dict[str, int] = {"fma": fma}
        params: dict[str, Any] = {}
        if stored:
            dq = batch * n * k
            # "dequant": the weights widened a run (no FLOPs): the timing charges the vector
            # instructions the framework's kernel spends on each (docs/timing.md, 'throughput')
            ops = plus(ops, {"mul": dq, **({"add": dq} if stored.startswith("int") else {}), "dequant": dq})
            params = {"b_dtype": stored}
        if c_bytes is not None:
            params["c_bytes"] = c_bytes
        reads = (a, b, self.scales[b]) if stored and b in self.scales else (a, b)
        self.add(Op(name, phase, "gemv" if m == 1 or n == 1 else "gemm", self.dtype, flops_of(ops), ops, reads,
                    (c,), (m, n, k), repeat=repeat, batch=batch, trans=trans, params=params, role=role))

    def _narrow_gemm(self, name: str, phase: str, a: str, b: str, c: str, m: int, n: int, k: int,
                     trans: tuple[bool, bool], batch: int, repeat: int, stored: str | None) -> None:
        """A product in :attr:`product`: its operands' narrow copies (cast once, :meth:`cast`)
        and their scales read, its output written in its own type (bf16; a gradient's type)."""
        fmt = self.product
        assert fmt is not None
        # Tensor cores take both operands contiguous along K (Hopper's fp8 products take only
        # that layout; a block format's scales run along K): A as stored unless transposed,
        # B (stored N x K when transposed) the other way round.
        a8 = self.cast(a, phase, transposed=trans[0])
        b8 = b if stored == fmt else self.cast(b, phase, transposed=not trans[1])
        reads = (a8, b8) + tuple(self.scales[t] for t in (a8, b8) if t in self.scales)
        fma = batch * m * n * k
        ops = {"fma": fma}
        c_bytes = self.tensors[c].bytes // (batch * m * n)
        self.add(Op(name, phase, "gemv" if m == 1 or n == 1 else "gemm", fmt, flops_of(ops), ops, reads, (c,),
                    (m, n, k), repeat=repeat, batch=batch, trans=trans, params={"c_bytes": c_bytes}, role="linear"))

    def cast(self, t: str, phase: str, *, transposed: bool = False) -> str:
        """``t``'s copy in :attr:`product` (with its scales, for a block format), laid along
        the other dimension when ``transposed``: one cast kernel a tensor, declared where the
        first product needs it; a later product that needs the other layout adds that copy
        to the same kernel (Transformer Engine's cast-transpose)."""
        fmt = self.product
        assert fmt is not None
        key = (t, transposed)
        if key in self.narrow:
            return self.narrow[key]
        src = self.tensors[t]
        elements = src.bytes // self.esz
        # a weight's narrow copy is counted with the weights (it lives from its cast to the backward)
        cls = "weights" if self.tensors[self.root(t)[0]].cls == "weights" else None
        label = f"{src.name}.{fmt}" + (".T" if transposed else "")
        out = self.tensor(label, elements, cls=cls, bits=DTYPE_BITS[fmt])
        writes = [out]
        if fmt in BLOCK_FORMATS:
            self.scales[out] = self.tensor(f"scales.{label}", BLOCK_FORMATS[fmt].scale_bytes(elements), 1, cls=cls)
            writes.append(self.scales[out])
        self.narrow[key] = out
        if t in self.casts:  # the other layout: the same kernel writes it too
            i = self.casts[t]
            op = self.ops[i]
            self.ops[i] = replace(op, writes=op.writes + tuple(writes))
            return out
        self.casts[t] = len(self.ops)
        self.cast_count += 1
        self.ew(f"{src.name}.cast.{fmt}", phase, (t,), tuple(writes), elements, CAST_OPS, role="cast")
        self.cast_roots.setdefault(self.root(t)[0], set()).add(t)
        return out

    def scaling_update(self) -> None:
        """fp8 delayed scaling: once a step, every cast tensor's amax appended to its
        history and its next scale taken from the history's largest (Transformer Engine's
        amax-and-scale update, one kernel over all of them)."""
        if self.product != "fp8" or not self.cast_count:
            return
        n = self.cast_count * AMAX_HISTORY
        hist = self.tensor("fp8.amax_history", n, 4, cls="optimizer", whole_step=True)
        scale = self.tensor("fp8.scales", self.cast_count, 4, cls="optimizer", whole_step=True)
        self.ew("fp8.amax_and_scale_update", "backward", (hist,), (hist, scale), n, {"max": 1}, op="reduction",
                role="scaling")

    def ew(self, name: str, phase: str, reads: tuple[str, ...], writes: tuple[str, ...], elements: int,
           per_elem: dict[str, int], *, rows: int = 1, broadcast: tuple[str, ...] = (), op: str = "elementwise",
           extra: dict[str, int] | None = None, repeat: int = 1, role: str = "") -> None:
        """An elementwise (or reduction, softmax) kernel: ``per_elem`` operations an element."""
        ops = plus(scale(per_elem, elements), extra or {})
        self.add(Op(name, phase, op, self.dtype, flops_of(ops), ops, reads, writes,
                    (rows, elements // max(rows, 1), 0), repeat=repeat, elements=elements, broadcast=broadcast,
                    role=role))

    def updates(self, optimizer: str) -> None:
        """One update kernel per trained parameter, in the order they were declared; before
        them, fp8's scaling update (:meth:`scaling_update`)."""
        self.scaling_update()
        per = OPTIMIZER_OPS[optimizer]
        for p in self.params:
            if not p.update or p.g is None:
                continue
            with self.at(p.layer, p.group):
                # mixed precision: the fp32 master is updated and copied back to the 16-bit weights
                reads = (p.g, *p.state) if self.dtype != "fp32" else (p.w, p.g, *p.state)
                self.ew(f"update.{p.name}", "update", reads, (p.w, *p.state), p.values, per, op="update",
                        role="optimizer")
