"""The checkpointing transform: segments, what is kept, what is recomputed, and the ledger."""

from __future__ import annotations

import pytest

from memwall.errors import InputError
from memwall.networks import load_network
from memwall.workloads.checkpoint import recomputed_layers, segments
from memwall.workloads.config import TrainingConfig
from memwall.workloads.graph import Graph
from memwall.workloads.liveness import classes
from memwall.workloads.step import build_step, declare

L_MLP = 9


@pytest.fixture
def tiny_mlp(tmp_path):
    path = tmp_path / "tiny-mlp.toml"
    widths = ", ".join(["32"] * (L_MLP + 1))
    path.write_text('id = "tiny-mlp"\nname = "tiny"\nkind = "mlp"\nyear = 2024\nsource = "test"\nstatus = "synthetic"\n'
                    f'[mlp]\nlayers = [{widths}]\nbias = true\nactivation = "sigmoid"\nloss = "mse"\n')
    return load_network(path)


@pytest.fixture
def tiny_flash(tmp_path):
    path = tmp_path / "tiny-flash.toml"
    path.write_text('id = "tiny-flash"\nname = "tiny"\nkind = "transformer"\nyear = 2024\nsource = "test"\n'
                    'status = "synthetic"\n[transformer]\nlayers = 3\nd_model = 64\nheads = 4\nkv_heads = 2\n'
                    'd_ff = 128\nvocab = 100\nseq_len = 32\nattention = "flash"\nmlp = "swiglu"\nnorm = "rmsnorm"\n'
                    'positions = "rope"\n')
    return load_network(path)


def test_segments_put_the_short_one_first():
    assert segments(48, "sqrt") == [(0, 6)] + [(s, s + 7) for s in range(6, 48, 7)]
    assert segments(48, "every:12") == [(0, 12), (12, 24), (24, 36), (36, 48)]
    assert segments(5, "every:2") == [(0, 1), (1, 3), (3, 5)]
    assert segments(3, "every:8") == [(0, 3)]
    assert segments(16, "sqrt") == [(0, 4), (4, 8), (8, 12), (12, 16)]
    assert segments(10, "none") == [] and segments(10, "selective") == []
    for n in range(1, 40):
        for ck in ("sqrt", "every:1", "every:3", "every:7"):
            segs = segments(n, ck)
            assert segs[0][0] == 0 and segs[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(segs, segs[1:], strict=False))
            lengths = [e - s for s, e in segs]
            assert all(x == lengths[-1] for x in lengths[1:]) and lengths[0] <= lengths[-1]


def _writers(g: Graph) -> dict[str, set[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {}
    for op in g.ops:
        for t in op.writes:
            out.setdefault(g.root(t)[0], set()).add((op.phase, op.block))
    return out


def _check_segments(g: Graph, ck: str) -> list[tuple[int, int]]:
    """Recompute = each segment's forward kernels, just before its backward; reads redirected."""
    segs = segments(len(g.blocks), ck)
    fwd = [op for op in g.ops if op.phase == "forward" and op.block >= 0]
    rec = [op for op in g.ops if op.phase == "recompute"]
    expect = [op.name for s, e in reversed(segs) for op in fwd if s <= op.block < e]
    assert [op.name for op in rec] == expect
    for s, e in segs:  # the segment's recompute comes right before its first backward kernel
        j = next(j for j, op in enumerate(g.ops) if op.phase == "backward" and s <= op.block < e)
        assert [op.block for op in g.ops[j - len([o for o in fwd if s <= o.block < e]):j]] == sorted(
            o.block for o in fwd if s <= o.block < e)
    writers = _writers(g)
    for op in g.ops:  # no backward kernel reads a forward copy of its own segment
        if op.phase != "backward" or op.block < 0:
            continue
        s, e = next(x for x in segs if x[0] <= op.block < x[1])
        for t in op.reads:
            assert not any(p == "forward" and s <= b < e for p, b in writers.get(g.root(t)[0], ())), (op.name, t)
    return segs


def _kept(g: Graph) -> set[str]:
    """Saved tensors that the forward pass produced (not a recompute)."""
    cls = classes(g)
    rec = {g.root(t)[0] for op in g.ops if op.phase == "recompute" for t in op.writes}
    return {t for t, c in cls.items() if c == "activations" and t not in rec}


@pytest.mark.parametrize("ck", ["every:1", "every:2", "every:4", "sqrt"])
def test_mlp_keeps_the_boundaries_and_recomputes_each_segment(tiny_mlp, ck):
    g = declare(tiny_mlp, TrainingConfig(batch=3, checkpoint=ck))
    segs = _check_segments(g, ck)
    x0 = next(t for t, d in g.tensors.items() if d.name == "x0")
    boundaries = {x0} | {g.blocks[s - 1] for s, _ in segs[1:]}
    assert len(boundaries) == len(segs)
    assert _kept(g) == boundaries | {g.blocks[-1]}  # and the output the loss reads
    plain, st = build_step(tiny_mlp, TrainingConfig(batch=3)), build_step(tiny_mlp, TrainingConfig(batch=3, checkpoint=ck))
    assert st.flops["recompute"] == plain.flops["forward"]  # one more forward pass
    assert st.flops["forward"] == plain.flops["forward"] and st.flops["backward"] == plain.flops["backward"]
    y = 3 * 32 * 4
    k = max(e - s for s, e in segs)
    # boundaries + k - 1 recomputed outputs, or, with one-layer segments, + the output the loss reads
    assert st.ledger.activations == (len(segs) + max(k - 1, 1)) * y
    assert st.ledger.activations <= plain.ledger.activations == (L_MLP + 1) * y


@pytest.mark.parametrize("ck", ["every:1", "every:2", "sqrt"])
def test_transformer_recomputes_one_forward_pass_of_its_blocks(tiny_gpt, ck):
    net = tiny_gpt(5, 64, 256, 100, 32)
    g = declare(net, TrainingConfig(batch=2, checkpoint=ck))
    segs = _check_segments(g, ck)
    x0 = next(t for t, d in g.tensors.items() if d.name == "embed.out")
    assert _kept(g) == {x0} | {g.blocks[s - 1] for s, _ in segs[1:]} | {g.blocks[-1]}  # + the final norm's input
    plain = build_step(net, TrainingConfig(batch=2), expand_repeats=True)
    st = build_step(net, TrainingConfig(batch=2, checkpoint=ck), expand_repeats=True)
    block_fwd = sum(k.flops * k.repeat for k in plain.kernels if k.phase == "forward" and k.layer >= 0)
    assert st.flops["recompute"] == block_fwd < plain.flops["forward"]
    assert st.ledger.activations < plain.ledger.activations


def test_selective_recomputes_only_the_attention_core(tiny_gpt):
    net = tiny_gpt(3, 64, 256, 100, 32)
    g = declare(net, TrainingConfig(batch=2, checkpoint="selective"))
    rec = [(j, op) for j, op in enumerate(g.ops) if op.phase == "recompute"]
    assert [op.name for _, op in rec] == ["attn.qk", "attn.softmax", "attn.dropout"] * 3
    assert {op.role for _, op in rec} == {"attention-core"}
    assert [op.block for _, op in rec] == [2, 2, 2, 1, 1, 1, 0, 0, 0]
    for j, op in rec[2::3]:  # right before the block's attention backward
        assert (g.ops[j + 1].name, g.ops[j + 1].block) == ("attn.dP", op.block)
    cls = classes(g)
    saved = {g.tensors[t].name for t, c in cls.items() if c == "activations"}
    fwd_core = {g.root(t)[0] for op in g.ops if op.phase == "forward" and op.role == "attention-core" for t in op.writes}
    assert all(cls[t] == "workspace" for t in fwd_core)  # the forward copies are not kept
    assert {"attn.probs", "attn.mask", "attn.dropped"} <= saved  # the recomputed ones are, for their backward
    st = build_step(net, TrainingConfig(batch=2, checkpoint="selective"))
    plain = build_step(net, TrainingConfig(batch=2))
    s, a, b = 32, 4, 2
    assert st.flops["recompute"] == 3 * (2 * b * a * s * s * 16 + 5 * b * a * s * s + b * a * s * s)
    assert st.ledger.activations < plain.ledger.activations


def test_selective_is_a_no_op_for_flash_attention(tiny_flash):
    cfg = TrainingConfig(batch=2, checkpoint="selective")
    st, plain = build_step(tiny_flash, cfg), build_step(tiny_flash, TrainingConfig(batch=2))
    assert st.flops == plain.flops and st.ledger == plain.ledger
    assert [k.as_dict() for k in st.kernels] == [k.as_dict() for k in plain.kernels]


@pytest.mark.parametrize("nid", ["affine-48x1024", "lecun-1989", "nettalk", "gpt2-small", "llama3-8b", "deepseek-v3"])
def test_checkpointing_never_grows_the_activations_peak(nid):
    net = load_network(nid)
    seq = 64 if net.is_sequence else None
    plain = build_step(net, TrainingConfig(batch=2, seq_len=seq))
    for ck in ("every:1", "every:2", "sqrt", "selective", "block:1"):
        if ck == "selective" and not net.is_sequence:
            continue
        st = build_step(net, TrainingConfig(batch=2, seq_len=seq, checkpoint=ck))
        assert st.ledger.activations <= plain.ledger.activations, ck
        assert st.ledger.peak <= plain.ledger.peak, ck


def test_refusals_keep_their_fields():
    with pytest.raises(InputError) as e:
        build_step(load_network("nettalk"), TrainingConfig(checkpoint="selective"))
    assert e.value.field == "checkpoint" and "transformers only" in str(e.value)
    with pytest.raises(InputError) as e:
        build_step(load_network("resnet-50"), TrainingConfig(checkpoint="sqrt"))
    assert e.value.field == "checkpoint" and "branches" in str(e.value)
    # inference ignores checkpointing, as before
    assert build_step(load_network("resnet-50"), TrainingConfig(checkpoint="sqrt", phase="forward")).kernels


def test_block_recomputes_the_first_n_layers_each_alone(tiny_gpt):
    """block:N (Megatron-LM's recompute_method block, recompute_num_layers N): each of the
    first N layers is a segment of its own; the rest keep their activations. Its recompute
    is N layers' forward, its activations peak between none's and every:1's, and N at or
    above L is every:1. The step keeps one layer of each kind the checkpointing leaves
    alike (the recomputed and the plain), repeated as many times as there are of it."""
    assert segments(12, "block:3") == [(0, 1), (1, 2), (2, 3)] and segments(2, "block:5") == [(0, 1), (1, 2)]
    assert [recomputed_layers(12, c) for c in ("none", "selective", "block:3", "block:40", "every:5", "sqrt")] == \
        [0, 0, 3, 12, 12, 12]
    net = tiny_gpt(6, 64, 256, 100, 32)

    def step(ck, expand=False):
        return build_step(net, TrainingConfig(batch=2, checkpoint=ck, optimizer="adam"), expand_repeats=expand)

    plain, every, block = step("none"), step("every:1"), step("block:2")
    layer_fwd = every.flops["recompute"] // 6
    assert block.flops["recompute"] == 2 * layer_fwd and every.flops["recompute"] == 6 * layer_fwd > 0
    assert plain.ledger.activations > block.ledger.activations > every.ledger.activations
    assert step("block:6").flops == every.flops and step("block:6").ledger == every.ledger
    assert step("block:9").flops == every.flops
    full = step("block:2", expand=True)
    assert block.flops == full.flops and block.ledger == full.ledger
    wqkv = [(k.phase, k.layer, k.repeat) for k in block.kernels if k.name == "wqkv.fwd"]
    assert wqkv == [("forward", 0, 2), ("forward", 2, 4), ("recompute", 0, 2)]
