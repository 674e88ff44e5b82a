"""Gradient accumulation: the kernels that write a gradient add into it instead.

Owns: :func:`apply`, a pass over the declared kernels of one micro-batch. With K
micro-batches per optimizer step (or fp32 main gradients, which every micro-batch adds
into), every backward kernel that writes a tensor of class ``gradients`` also reads it: a
read-modify-write. In a weight-gradient product this is the GEMM's ``beta = 1``
(``C = A.B + C``), which every GEMM library memwall's schedule families stand for can
fuse - BLAS ``xGEMM``'s ``beta``, cuBLAS / cuBLASLt (and rocBLAS), XLA's dot with an
output fusion on TPUs - so no profile needs a separate accumulate kernel. The product's
``params`` carry ``beta`` and ``c_bytes`` (the element size of its output: 4 for fp32 main
gradients of a 16-bit product), which the lowering reads. Bias, norm-gain and embedding
gradients are elementwise kernels; they simply read what they add into.

The optimizer kernels are not touched here: a step is one micro-batch and one update,
and the caller (:func:`memwall.simulation.run_case`) counts the micro-batch K times. The
zeroing of the gradients once per optimizer step is not modelled (4 B per parameter per
optimizer step with fp32 main gradients, against K read-modify-writes).
"""

from __future__ import annotations

from dataclasses import replace

from .graph import Graph, Op


def _adds_into(graph: Graph, op: Op) -> tuple[str, ...]:
    if op.phase != "backward":
        return ()
    return tuple(t for t in op.writes if graph.tensors[graph.root(t)[0]].cls == "gradients")


def apply(graph: Graph) -> None:
    """Rewrite ``graph.ops`` so that every gradient is read-modify-written."""
    ops = []
    for op in graph.ops:
        grads = _adds_into(graph, op)
        if grads:
            reads = op.reads + tuple(t for t in grads if t not in op.reads)
            params = dict(op.params)
            if op.op in ("gemm", "gemv"):
                assert op.dims is not None
                m, n, _ = op.dims
                params.update(beta=1, c_bytes=graph.tensors[op.writes[0]].bytes // (op.batch * m * n))
                reads = op.reads  # the product reads its output through beta, in its own loops
            op = replace(op, reads=reads, params=params)
        ops.append(op)
    graph.ops = ops
