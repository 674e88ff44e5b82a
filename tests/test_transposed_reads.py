"""Transposed operands as the era's BLAS read them (issue 27, part 3).

A product with a weight stored ``[out x in]`` reads it transposed in one of the two
backward products (dX = dY . W, the per-example W**T . delta). The reference BLAS
(netlib sgemv.f, sgemm.f) never walks a matrix across its storage order: it swaps the
loop order instead (dot products when the matrix is contiguous along the reduction, axpy
passes when it is contiguous along the outputs). The scalar lowering does the same, so
the weights are read along their rows, whatever the cache holds.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from memwall.engine import Hierarchy
from memwall.networks import load_network
from memwall.profiles import ScheduleSpec, load_machine
from memwall.workloads.config import TrainingConfig
from memwall.workloads.lowering import lower
from memwall.workloads.step import build_step

SCALAR = ScheduleSpec("scalar", {})


def _nettalk(**config):
    return build_step(load_network("nettalk"), TrainingConfig(**config))


def _inner_strides(kernel, tensor):
    """The innermost-loop stride of every access to ``tensor`` in the kernel's scalar nests."""
    out = set()
    for nest in lower(kernel, SCALAR).nests:
        for a in nest.accesses:
            if a.tensor == tensor and a.depth == len(nest.counts):
                out.add(a.strides[-1])
    return out


@pytest.mark.parametrize("config", [dict(batch=1, updates="per-example"), dict(batch=4)])
def test_scalar_products_walk_the_weights_along_their_rows(config):
    step = _nettalk(**config)
    products = [k for k in step.kernels if k.op in ("gemm", "gemv") and k.dims[2] > 1]
    assert {k.name for k in products} >= {"L1.fwd", "L1.dX", "L2.fwd", "L2.dX"}
    for k in products:
        for t in (*k.reads, *k.writes):
            if t.cls in ("weights", "gradients"):
                # the old lowering read dX's weights (and a mini-batch's dW) down their columns:
                # a stride of a whole row (812 B for L1) per multiply-add
                assert _inner_strides(k, t.name) == {4}, (k.name, t.name)
    dx = next(k for k in step.kernels if k.name == "L1.dX")
    assert "axpy" in lower(dx, SCALAR).notes
    assert "dot product" in lower(next(k for k in step.kernels if k.name == "L1.fwd"), SCALAR).notes


def _memory_bytes_read(levels, kernel):
    h = Hierarchy(levels)
    for nest in lower(kernel, SCALAR).nests:
        h.replay_nest(nest)
    return h.counters().memory.bytes_read


@pytest.mark.parametrize("dcache", [None, 8 * 1024])
def test_rs6000_per_example_input_gradient_reads_its_weights_once(dcache):
    # The RS/6000 530's dcache (128 B lines, 64 KiB) holds NETtalk's 63.4 KiB W1, so a column
    # walk is rescued there (the old lowering read 1.03x the weights); with a cache smaller
    # than a column's 80 lines (8 KiB) a weight read down a column fetches its line again for
    # nearly every element: the old lowering read 24x the weights (at most 128 / 4 = 32x).
    # Read along the rows, the weights come from memory once either way.
    machine = load_machine("rs6000-530")
    levels = list(machine.cache_levels)
    if dcache is not None:
        levels[0] = replace(levels[0], size=dcache, provenance={})
    step = _nettalk(batch=1, updates="per-example")
    dx = next(k for k in step.kernels if k.name == "L1.dX")
    w = next(t for t in dx.reads if t.cls == "weights")
    others = sum(t.bytes for t in dx.reads if t is not w) + dx.writes[0].bytes
    got = _memory_bytes_read(levels, dx)
    assert w.bytes <= got <= w.bytes + others + 2 * levels[0].line  # about 1x the weights, not 32x
