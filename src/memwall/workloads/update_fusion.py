"""Update fusion: the weight update folded into the kernel that makes the gradient.

Owns: :func:`apply`, a pass over the declared kernels. The
back-propagation codes of 1986 updated each weight where its gradient was made: the
per-example step ``W += eta . delta . x^T`` is one sweep over W (each weight read once
and written once) and no gradient tensor is ever stored. ``fused`` declares that: for each
trained parameter whose gradient one backward kernel writes (and nothing but its update
kernel reads), that kernel and the update become one kernel (named ``<kernel>+update``),
which reads the kernel's operands and what the update reads besides the gradient, and
writes what the update writes. The gradient is no tensor of the step, so it is neither
allocated nor in the ledger (the liveness pass derives both from the kernels). The fused
kernel runs where the update may: after the last kernel that reads the weights it
changes (the input-gradient product dX = dY . W reads the weights before the update).

A fused weight-gradient product writes the weights as its output with ``beta = 1``
(``W = W + (-eta) . dY^T . X``: BLAS's xGER, or xGEMM with ``beta = 1`` in a mini-batch),
with ``c_bytes`` the element size of what it updates (the fp32 master under mixed
precision); the optimizer's other tensors (momentum, Adam's moments; the 16-bit copy of
the weights under mixed precision) are its epilogue's reads and writes. Its operations are
the two kernels' together (the comparison with ``separate`` isolates the traffic).

A parameter whose gradient is made by several kernels (tied weights, the rows of an
embedding), through a view (a part of a fused tensor, an expert), or read and written by
one (gradient accumulation) keeps its separate update. ``separate`` changes nothing.
"""

from __future__ import annotations

from dataclasses import replace

from .config import FUSED, SEPARATE, UPDATE_FUSIONS
from .graph import Graph, Op
from .ops import plus

__all__ = ["FUSED", "ROLE", "SEPARATE", "UPDATE_FUSIONS", "apply"]
ROLE = "fused-update"  # the fused kernels' role: no later pass (kernel fusion) merges them again


def _touching(graph: Graph, tensor: str) -> list[int]:
    """Positions of the kernels that touch ``tensor`` (through any view of it)."""
    return [j for j, op in enumerate(graph.ops) if any(graph.root(t)[0] == tensor for t in op.touches)]


def _fused(graph: Graph, maker: Op, update: Op, grad: str) -> Op:
    """``maker`` (which writes ``grad``) and ``update`` (which reads it) as one kernel."""
    extra_reads = tuple(t for t in update.reads if t != grad)
    if maker.op in ("gemm", "gemv"):
        assert maker.dims is not None
        m, n, _ = maker.dims
        # the tensor updated in place: the weights, or their fp32 master under mixed precision
        c = next(t for t in update.writes if t in update.reads)
        reads = maker.reads[:2] + tuple(t for t in (*maker.reads[2:], *extra_reads) if t != c)
        writes = (c, *(t for t in (*maker.writes, *update.writes) if t not in (grad, c)))
        params = {**maker.params, "beta": 1, "c_bytes": graph.tensors[c].bytes // (maker.batch * m * n)}
        broadcast = maker.broadcast
    else:
        reads = maker.reads + tuple(t for t in extra_reads if t not in maker.reads)
        writes = tuple(t for t in maker.writes if t != grad) + tuple(t for t in update.writes if t not in maker.writes)
        params = dict(maker.params)
        # what replaces the gradient is as wide as it: broadcast where the gradient was
        broadcast = tuple(t for t in maker.broadcast if t != grad)
        if grad in maker.broadcast:
            broadcast += tuple(t for t in (*extra_reads, *update.writes) if t not in broadcast)
    return replace(maker, name=f"{maker.name}+update", flops=maker.flops + update.flops,
                   ops=plus(maker.ops, update.ops), reads=reads, writes=writes, params=params, broadcast=broadcast,
                   role=ROLE)


def apply(graph: Graph, mode: str) -> None:
    """Rewrite ``graph.ops`` for update fusion ``mode`` (``separate``: unchanged)."""
    if mode != FUSED:
        return
    for p in graph.params:
        if p.g is None or p.g not in graph.tensors:
            continue
        users = _touching(graph, p.g)
        updates = [j for j in users if graph.ops[j].phase == "update"]
        makers = [j for j in users if graph.ops[j].phase == "backward"]
        if len(updates) != 1 or len(makers) != 1 or len(users) != 2:
            continue
        i, u = makers[0], updates[0]
        maker, update = graph.ops[i], graph.ops[u]
        if (p.g not in maker.writes or any(graph.root(t)[0] == p.g for t in maker.reads)
                or list(update.reads).count(p.g) != 1 or any(t != p.g and graph.root(t)[0] == p.g
                                                            for t in (*maker.touches, *update.touches))):
            continue
        if any(x.parent == p.g for x in graph.tensors.values()):
            continue  # the gradient has views: a part of it is made elsewhere
        changed = {graph.root(t)[0] for t in update.writes}
        # after the last kernel before the update that reads what the update changes (the old weights)
        at = max([i] + [j for j, op in enumerate(graph.ops[:u])
                        if j != i and any(graph.root(t)[0] in changed for t in op.reads)])
        fused = _fused(graph, maker, update, p.g)
        ops = list(graph.ops)
        ops.insert(at + 1, fused)  # at < u: the update moves to u + 1
        graph.ops = [op for j, op in enumerate(ops) if j not in (i, u + 1)]
        del graph.tensors[p.g]
