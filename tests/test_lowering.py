"""Lowering: access counts and bytes per tensor against closed forms, expansion, scaling, engine."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from memwall.engine import Hierarchy
from memwall.levels import LevelSpec
from memwall.networks import load_network
from memwall.profiles import ScheduleSpec
from memwall.workloads.config import TrainingConfig
from memwall.workloads.lowering import lower
from memwall.workloads.step import build_step, gemm_step

FAMILIES = {
    "scalar": ScheduleSpec("scalar", {}),
    "vector": ScheduleSpec("vector", {"vector_length": 8, "vector_registers": 4}),
    "blocked": ScheduleSpec("blocked", {"micro_tile": [2, 4], "kc": 16, "mc": 8, "nc": 32}),
    "tiled": ScheduleSpec("tiled", {"tile_m": 8, "tile_n": 16, "tile_k": 4, "units": 6}),
}


def _explicit(nest):
    """The accesses a nest stands for, by the order rule of memwall.streams, in plain Python."""
    out = []

    def run(depth, idx):
        here = [a for a in nest.accesses if a.depth == depth]
        def issue(a):  # a block issues its rows one after the other
            start = a.base + sum(i * s for i, s in zip(idx, a.strides, strict=False))
            out.extend((start + r * a.row_stride, a.size, a.is_write) for r in range(a.rows))

        for a in here:
            if not a.after:
                issue(a)
        if depth < len(nest.counts):
            for i in range(nest.counts[depth]):
                run(depth + 1, idx + [i])
        for a in here:
            if a.after:
                issue(a)

    run(0, [])
    return out


def test_nettalk_per_example_scalar_counts_each_weight_as_1986_code_did():
    net = load_network("nettalk")
    step = build_step(net, TrainingConfig(batch=1, updates="per-example", update_fusion="separate"))
    per: dict[str, dict[str, int]] = {}
    for k in step.kernels:
        lo = lower(k, FAMILIES["scalar"])
        assert "matrix-vector" in lo.notes or k.op not in ("gemm", "gemv") or k.dims[2] == 1 or k.dims[0] > 1
        for nest in lo.nests:
            for a in nest.accesses:
                d = per.setdefault(a.tensor, {"read": 0, "write": 0})
                d["write" if a.is_write else "read"] += nest.times(a)
                assert a.size == 4
    for name, n_in, n_out in (("L1.w", 203, 80), ("L2.w", 80, 26)):
        w = n_in * n_out
        # read in the forward pass, read in the backward pass, read and written by the update
        assert per[name] == {"read": 3 * w, "write": w}
        assert per["grad." + name] == {"read": w, "write": w}
    # a gemv: one multiply-add per weight, the input vector re-read for every output
    fwd = next(k for k in step.kernels if k.name == "L1.fwd")
    lo = lower(fwd, FAMILIES["scalar"])
    assert lo.nests[0].counts == (80, 203)
    assert lo.accesses_by_tensor() == {"x0": 80 * 203, "L1.w": 80 * 203, "L1.y": 80}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("dims", [(1, 20, 13), (9, 20, 13), (16, 32, 32), (7, 1, 5)])
def test_gemm_streams_expand_to_what_they_stand_for(family, dims):
    m, n, k = dims
    step = gemm_step(m, n, k)
    (kern,) = step.kernels
    lo = lower(kern, FAMILIES[family])
    a, b, c = kern.reads[0], kern.reads[1], kern.writes[0]
    touched = {a.name: set(), b.name: set(), c.name: set()}
    written = 0
    for nest in lo.nests:
        addr, size, wr = nest.expand()
        assert len(addr) == nest.n_accesses
        assert list(zip(addr.tolist(), size.tolist(), wr.astype(bool).tolist(), strict=True)) == _explicit(nest)
        for x, sz, w in zip(addr.tolist(), size.tolist(), wr.tolist(), strict=True):
            for ref in (a, b, c):
                if ref.addr <= x < ref.addr + ref.bytes:
                    assert x + sz <= ref.addr + ref.bytes, "an access runs past its tensor"
                    touched[ref.name].update(range(x, x + sz, 4))
                    if ref is c and w:
                        written += sz
    # every element of every operand is touched; C is written at least once
    for ref in (a, b, c):
        assert len(touched[ref.name]) == ref.bytes // 4, (family, ref.name)
    assert written >= c.bytes
    # B is stored as used (contiguous along N): the scalar family runs axpy passes over each
    # output row (zeroed, then read and written once per K step) unless N = 1 (dot products)
    axpy = family == "scalar" and k > 1 and n > 1
    if family == "tiled" or (family == "scalar" and not axpy):
        assert written == c.bytes  # each output stored once
    if family == "scalar" and k > 1 and not axpy:
        assert lo.bytes_by_tensor() == {"A": m * n * k * 4, "B": m * n * k * 4, "C": m * n * 4}
    if axpy:
        assert written == (k + 1) * c.bytes
        assert lo.bytes_by_tensor() == {"A": m * k * 4, "B": m * n * k * 4, "C": (2 * k + 1) * m * n * 4}


LEVEL2_SHAPES = [(1, 20, 13), (1, 37, 9), (11, 1, 30), (1, 1, 9), (6, 10, 1), (7, 45, 1), (1, 45, 1)]


@pytest.mark.parametrize("dims", LEVEL2_SHAPES)
@pytest.mark.parametrize("trans", [(False, False), (True, True)])
@pytest.mark.parametrize("block", [16 * 1024, 48])  # 48 bytes: x or y in blocks of 12, with remainders
def test_blocked_level2_products_stream_the_matrix_once_unpacked(dims, trans, block, monkeypatch):
    """A product with a dimension of one runs as BLAS gemv or ger: nothing is packed, the
    matrix (for K = 1, the output) is touched once, and the streams stand for exactly
    the accesses of the order rule, whatever the blocks, groups and remainders."""
    from memwall.workloads import lowering

    monkeypatch.setattr(lowering, "GEMV_BLOCK_BYTES", block)
    m, n, k = dims
    kern = replace(gemm_step(m, n, k).kernels[0], trans=trans)
    lo = lower(kern, FAMILIES["blocked"], line_bytes=16)
    assert "blocked level 2" in lo.notes and lo.vector_instructions == 0
    got = lo.bytes_by_tensor()
    assert set(got) == {"A", "B", "C"}  # no pack.A, pack.B scratch
    a, b, c = (4 * m * k, 4 * k * n, 4 * m * n)
    refs = {r.name: r for r in (*kern.reads, *kern.writes)}
    touched: dict[str, set] = {name: set() for name in refs}
    written: set = set()
    for nest in lo.nests:
        addr, size, wr = (x.tolist() for x in nest.expand())
        assert list(zip(addr, size, wr, strict=True)) == [(x, sz, int(w)) for x, sz, w in _explicit(nest)]
        assert len(addr) == nest.n_accesses
        for x, sz, w in zip(addr, size, wr, strict=True):
            (name,) = [t for t, r in refs.items() if r.addr <= x and x + sz <= r.addr + r.bytes]
            touched[name].update(range(x, x + sz, 4))
            if w:
                written.update(range(x, x + sz, 4))
    # every element of every operand is read or written, every output element written
    assert all(len(touched[t]) == refs[t].bytes // 4 for t in refs)
    assert written == set(range(refs["C"].addr, refs["C"].addr + refs["C"].bytes, 4))
    if k == 1:  # ger: C written once, a[i] once a row, b once a row; C read first when accumulating
        assert got == {"A": a, "B": m * b, "C": c}
        accumulating = lower(replace(kern, params={"beta": 1}), FAMILIES["blocked"], line_bytes=16)
        assert accumulating.bytes_by_tensor() == {"A": a, "B": m * b, "C": 2 * c}
        return
    # the matrix, x and y: (name, outputs) of the product as gemv sees it
    matrix, vector, outputs = ("B", "A", n) if m == 1 else ("A", "B", m)
    dot = n == 1 if m == 1 and not trans[1] else (trans[1] if m == 1 else not trans[0])
    block_elements = max(4, block // 4 // 4 * 4)  # the vector's block: whole 16-byte lines of fp32
    assert got[matrix] == 4 * k * outputs  # every matrix element once
    if dot:  # x once per group of outputs and block; y read and written per group and block of x
        assert got[vector] == 4 * k * -(-outputs // lowering.GEMV_FUSE)
        assert got["C"] == 2 * 4 * outputs * -(-k // block_elements)
    else:  # x once per block of y; y read and written once per group of reduction steps
        assert got[vector] == 4 * k * -(-outputs // block_elements)
        assert got["C"] == 2 * 4 * outputs * -(-k // lowering.GEMV_FUSE)


def test_blocked_level2_forms_follow_the_layout():
    """The matrix contiguous along the reduction gives dot products (gemv_t); contiguous
    along the outputs, axpy passes (gemv_n); K = 1, an outer product (ger)."""
    fwd = gemm_step(1, 64, 32).kernels[0]  # y = x . W, W stored K x N: contiguous along the outputs
    assert "axpy" in lower(fwd, FAMILIES["blocked"]).notes
    assert "dot products" in lower(replace(fwd, trans=(False, True)), FAMILIES["blocked"]).notes
    assert "outer product" in lower(gemm_step(64, 32, 1).kernels[0], FAMILIES["blocked"]).notes
    assert "level 2" not in lower(gemm_step(2, 64, 32).kernels[0], FAMILIES["blocked"]).notes


def test_blocked_per_example_affine_layer_moves_its_weights_not_packed_copies():
    """Per-example training of a 1024-wide layer on a blocked CPU: the forward and input
    gradient read W once each, the weight gradient writes dW once: no packed panels."""
    step = build_step(load_network("affine-48x1024"), TrainingConfig(batch=1, updates="per-example",
                                                                      update_fusion="separate"))
    w = 1024 * 1024 * 4
    by = {k.name: lower(k, FAMILIES["blocked"]).bytes_by_tensor() for k in step.kernels
          if k.name in ("L7.fwd", "L7.dX", "L7.dW")}
    assert by["L7.fwd"]["L7.w"] == by["L7.dX"]["L7.w"] == w
    assert by["L7.dW"]["grad.L7.w"] == w
    assert not any(t.startswith("pack.") for d in by.values() for t in d)


def test_tiled_waves_load_the_union_of_their_tiles():
    kern = gemm_step(64, 64, 64).kernels[0]
    lo = lower(kern, ScheduleSpec("tiled", {"tile_m": 16, "tile_n": 16, "tile_k": 16, "units": 4}))
    # 4x4 tiles in waves of 2x2: each wave loads 32 rows of A and 32 columns of B over all of K
    waves = 4
    assert lo.bytes_by_tensor() == {"A": waves * 32 * 64 * 4, "B": waves * 32 * 64 * 4, "C": 64 * 64 * 4}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_elementwise_and_update_bytes_are_exact(family):
    step = build_step(load_network("sonar"), TrainingConfig(batch=5, optimizer="adam"))
    for k in step.kernels:
        lo = lower(k, FAMILIES[family])
        got = lo.bytes_by_tensor()
        if k.op in ("gemm", "gemv"):
            continue
        for ref in k.reads + k.writes:
            times = (ref in k.reads) + (ref in k.writes)
            if ref.name in k.broadcast:
                assert got[ref.name] == times * ref.bytes * k.dims[0], k.name
            else:
                assert got[ref.name] == times * ref.bytes, (k.name, ref.name)
        for nest in lo.nests:
            addr, _, _ = nest.expand()
            assert len(addr) == nest.n_accesses




@pytest.mark.parametrize("family", ["tiled", "blocked"])
def test_scaled_layers_give_the_stream_statistics_of_the_full_simulation(tiny_gpt, family):
    net = tiny_gpt(3, 32, 128, 50, 16)
    cfg = TrainingConfig(batch=2, optimizer="momentum")

    def stats(step):
        out: dict[str, list[int]] = {}
        for k in step.kernels:
            lo = lower(k, FAMILIES[family])
            name = re.sub(r"\bL\d+\.", "L*.", k.name)
            s = out.setdefault(name, [0, 0, 0])
            s[0] += lo.n_accesses * k.repeat
            s[1] += sum(lo.bytes_by_tensor().values()) * k.repeat
            s[2] += k.flops * k.repeat
        return out

    assert stats(build_step(net, cfg)) == stats(build_step(net, cfg, expand_repeats=True))


def test_flash_attention_streams(tmp_path):
    net = load_network("llama3-8b")
    step = build_step(net, TrainingConfig(batch=1, dtype="bf16", seq_len=256))
    k = next(k for k in step.kernels if k.name == "attn.flash")
    lo = lower(k, ScheduleSpec("tiled", {"tile_m": 128, "tile_n": 128, "tile_k": 64, "units": 132}))
    got = lo.bytes_by_tensor()
    q, kk, v = k.reads
    # Q read once; K and V re-read by each of the 4 query heads of a KV group; O written once
    assert got[q.name] == q.bytes and got[kk.name] == 4 * kk.bytes and got[v.name] == 4 * v.bytes
    assert got["attn.ctx"] == k.writes[0].bytes
    (nest,) = lo.nests
    assert len(nest.expand()[0]) == nest.n_accesses


def test_engine_counters_of_a_stream_equal_those_of_its_expansion():
    levels = [LevelSpec("L1", 1024, 64, 2), LevelSpec("L2", 8192, 64, 4)]
    step = build_step(load_network("encoder-8-3-8"), TrainingConfig(batch=8, optimizer="momentum"))
    for fam in ("scalar", "blocked", "tiled"):
        a, b = Hierarchy(levels), Hierarchy(levels)
        for k in step.kernels:
            for nest in lower(k, FAMILIES[fam]).nests:
                a.replay_nest(nest)
                addr, size, wr = nest.expand()
                b.replay(addr, size, wr)
        ca, cb = a.counters(), b.counters()
        assert ca == cb
        assert ca.accesses > 0 and np.isfinite(ca.accesses)


def test_memwall_trace_writes_npz_and_din(tmp_path):
    from memwall.cli import main

    npz, din = tmp_path / "t.npz", tmp_path / "t.din"
    args = ["--machine", "vax-11-780", "--network", "encoder-8-3-8", "--batch", "1", "--updates", "per-example"]
    assert main(["trace", *args, "--out", str(npz)]) == 0
    assert main(["trace", *args, "--out", str(din)]) == 0
    d = np.load(npz)
    assert (d["addr"].dtype, d["size"].dtype, d["is_write"].dtype) == (np.uint64, np.uint32, np.uint8)
    lines = din.read_text().splitlines()
    assert len(lines) == len(d["addr"])
    label, addr, size = lines[0].split()
    assert (int(label), int(addr, 16), int(size)) == (int(d["is_write"][0]), int(d["addr"][0]), int(d["size"][0]))
