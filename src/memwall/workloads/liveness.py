"""Lifetimes derived from the declared kernels: classes, addresses and the capacity ledger.

Owns: :func:`derive`, the one place that decides when a tensor lives. Given a
:class:`~memwall.workloads.graph.Graph`, it

* gives each tensor without an intrinsic class its class from its use: **activations**
  when a block's forward (or recompute) kernel touches it and a backward kernel reads it
  (what the layers save for the backward pass, Korthikanti's accounting), else
  **workspace** (the head's and the loss's buffers, gradients, scratch);
* allocates each tensor just before the first kernel that touches it (tensors first
  touched by the same kernel in the order they were declared) and frees it just after the
  last, running the first-fit :class:`~memwall.workloads.allocator.Allocator` in that
  order so addresses are deterministic; parameters and tensors declared ``whole_step``
  (the batch) are allocated before the first kernel and never freed; a view lives as long
  as its parent, and every use of a view is a use of its parent;
* returns the kernels at addresses and the ledger: the allocator's peak live bytes per
  class and in total.

Nothing stays live at the end but what lives the whole step, so a step cannot leak.
"""

from __future__ import annotations

from dataclasses import dataclass

from .allocator import CLASSES, EDGE, Allocator, TensorRef
from .graph import Graph, Op
from .kernel import Kernel, Ledger

SAVING_PHASES = ("forward", "recompute")


@dataclass(frozen=True)
class Layout:
    """Where and when each tensor lives (by tensor id), and the ledger it adds up to."""

    refs: dict[str, TensorRef]  # every tensor a kernel touches, views included
    alloc_before: dict[str, int]  # owning tensor -> the kernel it is allocated just before
    free_after: dict[str, int | None]  # owning tensor -> the kernel it is freed after (None: never)
    ledger: Ledger
    live_at_end: tuple[str, ...]  # tensors still allocated after the last kernel


def _spans(graph: Graph) -> tuple[dict[str, int], dict[str, int]]:
    """First and last kernel touching each owning tensor (through any of its views)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for j, op in enumerate(graph.ops):
        for t in op.touches:
            r = graph.root(t)[0]
            first.setdefault(r, j)
            last[r] = j
    return first, last


def classes(graph: Graph) -> dict[str, str]:
    """The class of every owning tensor: intrinsic, or activations / workspace by use."""
    saved_by_block: set[str] = set()
    read_in_backward: set[str] = set()
    for op in graph.ops:
        if op.phase in SAVING_PHASES and op.block >= 0:
            saved_by_block.update(graph.root(t)[0] for t in op.touches)
        elif op.phase == "backward":
            read_in_backward.update(graph.root(t)[0] for t in op.reads)
    out = {}
    for tid, d in graph.tensors.items():
        if d.parent is None:
            derived = "activations" if tid in saved_by_block and tid in read_in_backward else "workspace"
            out[tid] = d.cls or derived
    return out


def _kernel(op: Op, refs: dict[str, TensorRef]) -> Kernel:
    return Kernel(op.name, op.phase, op.op, op.dtype, op.flops, op.ops, tuple(refs[t] for t in op.reads),
                  tuple(refs[t] for t in op.writes), op.dims, op.repeat, op.batch, op.trans, op.elements,
                  tuple(refs[t].name for t in op.broadcast), op.params, op.layer, op.group)


def lifetimes(graph: Graph) -> tuple[dict[str, int], dict[str, int | None]]:
    """Per owning tensor: the kernel it is allocated before, the kernel it is freed after."""
    first, last = _spans(graph)
    alloc_before: dict[str, int] = {}
    free_after: dict[str, int | None] = {}
    for tid, d in graph.tensors.items():
        if d.parent is not None:
            continue
        if d.whole_step:
            alloc_before[tid], free_after[tid] = 0, None
        elif tid in first:
            alloc_before[tid], free_after[tid] = first[tid], last[tid]
    return alloc_before, free_after


# Kernels outside every layer that still belong to the step as a whole, not to an edge of
# the network: fp8's amax-and-scale update runs over every stage's cast tensors alike.
STEP_ROLES = ("scaling",)


def edge_tensors(graph: Graph) -> set[str]:
    """The owning tensors of a pipeline stage (``graph.stage``) that only the network's
    edges touch (kernels outside every layer: the embedding's, the head's, the loss's; and
    what no kernel touches): they go to the allocator's
    :data:`~memwall.workloads.allocator.EDGE` region, so that a stage's layers sit at the
    same addresses whether or not it also runs an edge of the network. A step on one device
    (or one pipeline stage of one) keeps one region, as it always did."""
    if not graph.stage:
        return set()
    inner = {graph.root(t)[0] for op in graph.ops if op.layer >= 0 or op.role in STEP_ROLES for t in op.touches}
    return {tid for tid, d in graph.tensors.items() if d.parent is None and tid not in inner}


def derive(graph: Graph) -> tuple[list[Kernel], Layout]:
    """The declared kernels at addresses, and the layout that put them there."""
    cls = classes(graph)
    edge = edge_tensors(graph)
    alloc_before, free_after = lifetimes(graph)
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    # Declaration order within a kernel; in a pipeline stage, what lives the whole step
    # first, so the tensors its layers share sit alike whichever edge kernels run before them.
    order = list(alloc_before)
    if graph.stage:
        order.sort(key=lambda tid: not graph.tensors[tid].whole_step)  # stable: declaration order kept
    for tid in order:
        starts.setdefault(alloc_before[tid], []).append(tid)
        end = free_after[tid]
        if end is not None:
            ends.setdefault(end, []).append(tid)
    al = Allocator()
    owned: dict[str, TensorRef] = {}
    refs: dict[str, TensorRef] = {}
    kernels: list[Kernel] = []
    for j in range(max(len(graph.ops), 1)):
        for tid in starts.get(j, ()):
            d = graph.tensors[tid]
            owned[tid] = refs[tid] = al.alloc(d.name, cls[tid], d.bytes, EDGE if tid in edge else 0)
        if j < len(graph.ops):
            op = graph.ops[j]
            for t in op.touches:
                if t not in refs:  # a view: at its offset into the tensor that owns it
                    r, off = graph.root(t)
                    refs[t] = TensorRef(graph.tensors[t].name, owned[r].cls, owned[r].addr + off, graph.tensors[t].bytes)
            kernels.append(_kernel(op, refs))
        for tid in ends.get(j, ()):
            al.free(owned[tid])
    ledger = Ledger(**{c: al.peak[c] for c in CLASSES}, peak=al.peak_total)
    live = tuple(t for t, r in owned.items() if al.is_live(r))
    return kernels, Layout(refs, alloc_before, free_after, ledger, live)


def live_bytes(graph: Graph) -> list[dict[str, int | str]]:
    """Live bytes per tensor class after each kernel, by the lifetimes :func:`derive` uses.

    One dict per kernel, in step order: ``kernel``, ``phase`` and, for each class of
    :data:`~memwall.workloads.allocator.CLASSES`, the bytes allocated while the kernel runs (the activation high-water curve: rising through the
    forward pass, falling through the backward). Sizes are the tensors' own bytes, not
    the allocator's rounded blocks.
    """
    cls = classes(graph)
    alloc_before, free_after = lifetimes(graph)
    size = {tid: graph.tensors[tid].bytes for tid in alloc_before}
    born: dict[int, list[str]] = {}
    dies: dict[int, list[str]] = {}
    for tid, j in alloc_before.items():
        born.setdefault(j, []).append(tid)
        end = free_after[tid]
        if end is not None:
            dies.setdefault(end, []).append(tid)
    live = dict.fromkeys(CLASSES, 0)
    out: list[dict[str, int | str]] = []
    for j, op in enumerate(graph.ops):
        for tid in born.get(j, ()):
            live[cls[tid]] += size[tid]
        # The peak is while the kernel runs: report it before this kernel's last uses go.
        out.append({"kernel": op.name, "phase": op.phase, **live, "total": sum(live.values())})
        for tid in dies.get(j, ()):
            live[cls[tid]] -= size[tid]
    return out
