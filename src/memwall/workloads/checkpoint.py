"""Activation checkpointing: one transform over the declared forward and backward kernels.

Owns: :func:`segment_length`, :func:`segments`, :func:`recomputed_layers` and :func:`apply`.

* ``every:K`` and ``sqrt`` (K = ceil(sqrt L)) cut the L blocks into segments of K; the
  short segment comes first, so the last segment - recomputed while every boundary is
  live - is a full one and the peak is (segments) boundaries + (K - 1) recomputed block
  outputs. Before each segment's backward, all of its blocks' forward kernels are
  declared again with phase ``recompute`` (as torch.utils.checkpoint reruns them, so
  recompute FLOPs are one more forward pass of the blocks); what they write gets a fresh
  tensor, and the segment's backward kernels read those instead. The forward copies
  then have no backward reader, so the liveness pass frees them in the forward pass and
  files them as workspace; the segment inputs (boundaries) are still read by the
  recompute and the backward, and stay saved. The recomputed output of a segment's last
  block is a copy of the next segment's boundary, already counted there: it is
  workspace.
* ``block:N`` makes each of the first N blocks a segment of its own and leaves the rest
  as they are (their activations saved, nothing recomputed): Megatron-LM's
  ``recompute_granularity full``, ``recompute_method block``, ``recompute_num_layers N``,
  which checkpoints the inputs of that many individual layers of a pipeline stage and
  runs the others without recomputation (memwall counts the N over a device's layers,
  its interleaved chunks together). N at or above L is every:1.
* ``selective`` (Korthikanti et al. 2022) reruns only the kernels of role
  ``attention-core`` (QK^T, softmax, dropout) of each block, just before that block's
  attention backward. A fused (flash) attention kernel has no such kernels: it already
  recomputes its scores, and selective recomputation is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InputError
from ..vocabulary import Checkpointing, parse_checkpoint
from .graph import Graph, Op, TensorDecl


def segment_length(n_layers: int, checkpoint: str | Checkpointing) -> int | None:
    """Blocks per checkpointed segment (block:N: 1); None when nothing is recomputed by segments."""
    c = parse_checkpoint(checkpoint) if isinstance(checkpoint, str) else checkpoint
    if c.mode == "sqrt":
        k = 1
        while k * k < n_layers:
            k += 1
        return k
    return c.count if c.mode == "every" else 1 if c.mode == "block" else None


def segments(n_layers: int, checkpoint: str | Checkpointing) -> list[tuple[int, int]]:
    """The checkpointed segments ``[start, end)`` of ``n_layers`` blocks, the short one first;
    block:N, the first N blocks one a segment.

    Empty without segment checkpointing (none, selective).
    """
    c = parse_checkpoint(checkpoint) if isinstance(checkpoint, str) else checkpoint
    if c.mode == "block":
        return [(i, i + 1) for i in range(min(c.count, n_layers))]
    k = segment_length(n_layers, c)
    if not k:
        return []
    first = n_layers - (-(-n_layers // k) - 1) * k
    bounds = [0, *range(first, n_layers, k)]
    return [(s, bounds[i + 1] if i + 1 < len(bounds) else n_layers) for i, s in enumerate(bounds)]


def recomputed_layers(n_layers: int, checkpoint: str | Checkpointing) -> int:
    """How many of ``n_layers`` blocks run their forward a second time (in full)."""
    return sum(e - s for s, e in segments(n_layers, checkpoint))


@dataclass
class _Rerun:
    """Forward kernels to declare again, before the backward kernel ``before``."""

    ops: list[Op]
    before: int
    blocks: range  # whose backward kernels read the recomputed copies
    transient: frozenset[str] = frozenset()  # whose copies are not saved


def _groups(graph: Graph, c: Checkpointing) -> list[_Rerun]:
    backward = [(j, op) for j, op in enumerate(graph.ops) if op.phase == "backward"]
    forward = [op for op in graph.ops if op.phase == "forward"]
    out = []
    if c.mode == "selective":
        for b in range(len(graph.blocks)):
            core = [op for op in forward if op.block == b and op.role == "attention-core"]
            anchor = next((j for j, op in backward if op.block == b and op.role.startswith("attention")), None)
            if core and anchor is not None:
                out.append(_Rerun(core, anchor, range(b, b + 1)))
        return out
    for s, e in segments(len(graph.blocks), c):
        anchor = next(j for j, op in backward if s <= op.block < e)
        out.append(_Rerun([op for op in forward if s <= op.block < e], anchor, range(s, e),
                          frozenset({graph.blocks[e - 1]})))
    return out


class _Copies:
    """Fresh tensors for what a rerun writes; views follow their parent."""

    def __init__(self, graph: Graph, transient: frozenset[str]) -> None:
        self.graph, self.transient = graph, transient
        self.renamed: dict[str, str] = {}

    def map(self, t: str) -> str:
        if t in self.renamed:
            return self.renamed[t]
        d = self.graph.tensors[t]
        if d.parent is None or self.map(d.parent) == d.parent:
            return t
        self.renamed[t] = self.graph.add_tensor(replace(d, id=f"{t}'", parent=self.map(d.parent)))
        return self.renamed[t]

    def claim(self, t: str) -> str:
        r = self.graph.root(t)[0]
        d = self.graph.tensors[r]
        if r not in self.renamed and d.cls is None:  # parameters and the batch are never recomputed
            self.renamed[r] = self.graph.add_tensor(TensorDecl(
                f"{r}'", d.recompute_name or d.name, d.bytes, "workspace" if r in self.transient else None))
        return self.map(t)

    def redirect(self, op: Op) -> Op:
        return replace(op, reads=tuple(map(self.map, op.reads)), writes=tuple(map(self.map, op.writes)),
                       broadcast=tuple(map(self.map, op.broadcast)))

    def rerun(self, op: Op) -> Op:
        reads = tuple(map(self.map, op.reads))
        writes = tuple(map(self.claim, op.writes))
        return replace(op, phase="recompute", reads=reads, writes=writes, broadcast=tuple(map(self.map, op.broadcast)))


def apply(graph: Graph, checkpoint: str | Checkpointing) -> None:
    """Rewrite ``graph.ops`` for ``checkpoint`` (a training step's graph; none: unchanged)."""
    c = parse_checkpoint(checkpoint) if isinstance(checkpoint, str) else checkpoint
    if c.mode == "none":
        return
    if c.mode == "selective" and not any(op.role.startswith("attention") for op in graph.ops):
        raise InputError("selective recomputation applies to transformers only", field="checkpoint")
    if c.mode != "selective" and graph.branched:
        raise InputError("checkpointing is modelled for chains of layers; this net has branches", field="checkpoint")
    inserts: dict[int, list[Op]] = {}
    by_block: dict[int, _Copies] = {}
    for g in _groups(graph, c):
        copies = _Copies(graph, g.transient)
        inserts[g.before] = [copies.rerun(op) for op in g.ops]
        by_block.update(dict.fromkeys(g.blocks, copies))
    ops: list[Op] = []
    for j, op in enumerate(graph.ops):
        ops.extend(inserts.get(j, ()))
        copies = by_block.get(op.block)
        ops.append(copies.redirect(op) if copies and op.phase == "backward" else op)
    graph.ops = ops
