"""Kernel fusion: a pass over the declared kernels, keyed on their ``role``.

Owns: :func:`apply` and the roles each mode fuses. The traffic of a fused kernel is what
the fused kernel reads and writes: a tensor one part writes and the next reads is passed
on chip, and disappears from memory when nothing after the fused kernel reads it (it is
still written when a later kernel - the backward pass, say - needs it).

* ``epilogue`` (cuBLASLt epilogues: ``BIAS``, ``GELU``/``GELU_AUX``, ``DGELU_BGRAD``,
  ``BGRADB``): a bias, activation or chain-layer epilogue kernel that reads what the
  product before it wrote is folded into that product; a bias-gradient reduction that
  reads the operand of the product after it is folded into that product. A fused product
  keeps its operands first (``reads[:2]``, ``writes[0]``); the rest of its reads and
  writes are its epilogue's, streamed once over its output
  (:mod:`memwall.workloads.lowering`). Batch normalisation needs whole-batch statistics
  and is not an epilogue.
* ``full`` also merges chains of elementwise kernels of role ``residual``, ``dropout``,
  ``norm`` and ``cast`` (and what an epilogue pass left of ``bias`` and ``activation``) in which each
  reads what the one before wrote, over the same elements - Megatron-LM's fused
  bias-dropout-add and fused layer norm, as a compiler emits them - and turns the
  optimizer's per-parameter update kernels of each layer into one multi-tensor kernel
  (apex ``multi_tensor_apply``: the same bytes, one launch per layer instead of one per
  tensor); its ``params["parts"]`` say which reads and writes each tensor's update has.
"""

from __future__ import annotations

from dataclasses import replace

from ..vocabulary import FUSIONS, check_word
from .graph import Graph, Op
from .ops import plus

EPILOGUE_ROLES = ("bias", "activation", "epilogue")
# a cast to a narrow product type joins the chain that writes its input (Transformer Engine's
# LayerNormLinear and fused activations write their fp8 output directly)
CHAIN_ROLES = ("residual", "dropout", "norm", "bias", "activation", "epilogue", "cast")
ELEMENTWISE = ("elementwise", "reduction")
PRODUCTS = ("gemm", "gemv")


class _Uses:
    """Which kernels (by position in the declared list) read each owning tensor."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        # fusion adds no tensor, so the tensors that have views are known once
        self.parents = {x.parent for x in graph.tensors.values() if x.parent is not None}
        self.readers: dict[str, list[int]] = {}
        for j, op in enumerate(graph.ops):
            for t in op.reads:
                self.readers.setdefault(graph.root(t)[0], []).append(j)

    def dead_after(self, t: str, j: int) -> bool:
        """Whether nothing after kernel ``j`` reads ``t`` and ``t`` is a plain tensor of the step."""
        d = self.graph.tensors[t]
        if d.parent is not None or d.cls is not None or d.whole_step:
            return False
        if t in self.parents:
            return False
        return all(i <= j for i in self.readers.get(t, ()))


def _same_run(a: Op, b: Op) -> bool:
    return (a.phase, a.layer, a.group, a.block, a.repeat) == (b.phase, b.layer, b.group, b.block, b.repeat)


def _output_elements(op: Op) -> int:
    if op.op in PRODUCTS:
        assert op.dims is not None
        return op.batch * op.dims[0] * op.dims[1]
    return op.elements


def _merge(uses: _Uses, first: Op, then: Op, j: int, *, keep_first_write: bool = False) -> Op:
    """``first`` and then ``then`` (declared at position ``j``) as one kernel."""
    passed = [t for t in then.reads if t in first.writes]
    reads = first.reads + tuple(t for t in then.reads if t not in first.writes and t not in first.reads)
    writes = list(first.writes) + [t for t in then.writes if t not in first.writes]
    for t in passed:
        if t in then.writes or not uses.dead_after(t, j):
            continue
        if writes.index(t) == 0 and keep_first_write:
            # a product's output stays its first write: the epilogue's same-sized output takes its place
            size = uses.graph.tensors[t].bytes
            sub = next((w for w in writes[1:] if uses.graph.tensors[w].bytes == size), None)
            if sub is None:
                continue
            writes.remove(sub)
            writes[0] = sub
        else:
            writes.remove(t)
    ops = plus(first.ops, then.ops)
    common = 0
    while common < min(len(first.name), len(then.name)) and first.name[common] == then.name[common]:
        common += 1
    common = then.name.rfind(".", 0, common) + 1  # whole dotted parts only
    suffix = then.name[common:] or then.name
    broadcast = first.broadcast + tuple(t for t in then.broadcast if t not in first.broadcast)
    out = replace(first, name=f"{first.name}+{suffix}", flops=first.flops + then.flops, ops=ops, reads=reads,
                  writes=tuple(writes), broadcast=broadcast)
    if first.op not in PRODUCTS:
        rows = max(first.dims[0] if first.dims else 1, then.dims[0] if then.dims else 1)
        out = replace(out, dims=(rows, out.elements // max(rows, 1), 0))
    return out


def _rows(op: Op) -> int:
    return op.dims[0] if op.dims else 1


def _into_product(prev: Op, op: Op) -> bool:
    """``op`` is an epilogue of the product ``prev``: it reads what ``prev`` wrote, over its output."""
    return (prev.op in PRODUCTS and prev.role == "linear" and op.role in EPILOGUE_ROLES and op.op in ELEMENTWISE
            and _same_run(prev, op) and any(t in prev.writes for t in op.reads)
            and op.elements == _output_elements(prev))


def _before_product(op: Op, nxt: Op) -> bool:
    """``op`` is a bias-gradient reduction of the operand the product ``nxt`` reads (BGRAD)."""
    return (op.role == "bias" and op.op == "reduction" and nxt.op in PRODUCTS and nxt.role == "linear"
            and _same_run(op, nxt) and all(t in nxt.reads for t in op.reads if t not in op.broadcast))


def _epilogues(graph: Graph) -> list[Op]:
    uses = _Uses(graph)
    out: list[Op] = []
    pending: tuple[int, Op] | None = None
    for j, op in enumerate(graph.ops):
        if pending is not None:
            i, bias = pending
            pending = None
            if _before_product(bias, op):
                merged = replace(op, writes=op.writes + tuple(t for t in bias.writes if t not in op.writes),
                                 broadcast=op.broadcast + bias.broadcast, flops=op.flops + bias.flops,
                                 ops=plus(op.ops, bias.ops), name=f"{op.name}+bias.bwd")
                out.append(merged)
                continue
            out.append(bias)
        if out and _into_product(out[-1], op):
            out[-1] = _merge(uses, out[-1], op, j, keep_first_write=True)
        elif op.role == "bias" and op.op == "reduction":
            pending = (j, op)
        else:
            out.append(op)
    if pending is not None:
        out.append(pending[1])
    return out


def _chains(graph: Graph, ops: list[Op]) -> list[Op]:
    uses = _Uses(graph)
    index = {id(op): j for j, op in enumerate(graph.ops)}
    out: list[Op] = []
    for op in ops:
        prev = out[-1] if out else None
        if (prev is not None and prev.op in ELEMENTWISE and op.op in ELEMENTWISE and prev.role in CHAIN_ROLES
                and op.role in CHAIN_ROLES and _same_run(prev, op) and prev.elements == op.elements
                and (_rows(prev) == 1 or _rows(op) == 1 or _rows(prev) == _rows(op))
                and any(t in prev.writes for t in op.reads)):
            # the last declared position of the merged kernel: its readers after it keep a tensor written
            out[-1] = _merge(uses, prev, op, index.get(id(op), len(graph.ops)))
        else:
            out.append(op)
    return out


def _multi_tensor(ops: list[Op]) -> list[Op]:
    out: list[Op] = []
    for op in ops:
        prev = out[-1] if out else None
        if op.op != "update":
            out.append(op)
            continue
        part = [len(op.reads), len(op.writes), op.elements]
        if prev is not None and prev.op == "update" and (prev.layer, prev.group) == (op.layer, op.group):
            out[-1] = replace(prev, name=f"update.multi-tensor.L{op.layer}" if op.layer >= 0 else "update.multi-tensor",
                              flops=prev.flops + op.flops, ops=plus(prev.ops, op.ops), reads=prev.reads + op.reads,
                              writes=prev.writes + op.writes, elements=prev.elements + op.elements,
                              dims=(1, prev.elements + op.elements, 0),
                              params={"parts": [*prev.params.get("parts", []), part]})
        else:
            out.append(replace(op, params={"parts": [part]}))
    return out


def apply(graph: Graph, mode: str) -> None:
    """Rewrite ``graph.ops`` for fusion ``mode`` (``none``: unchanged)."""
    check_word(mode, FUSIONS, "fusion")
    if mode == "none":
        return
    ops = _epilogues(graph)
    if mode == "full":
        graph.ops = ops
        ops = _multi_tensor(_chains(graph, ops))
    graph.ops = ops
