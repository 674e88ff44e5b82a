"""The training step: exact FLOPs, the capacity ledger, checkpointing, repeats."""

from __future__ import annotations

import re

import pytest

from memwall.errors import InputError
from memwall.networks import load_network
from memwall.workloads.config import TrainingConfig
from memwall.workloads.step import KERNEL_OPS, KERNEL_PHASES, build_step, flops_of, gemm_step

D, L = 1024, 48
AFFINE = load_network("affine-48x1024")


def test_affine_exact_figures():
    for b in (1, 8, 1024):
        s = build_step(AFFINE, TrainingConfig(batch=b))
        f = 2 * b * D * D * L
        assert s.flops["forward"] == f
        assert s.flops["backward"] == 2 * f
        assert s.flops["recompute"] == 0
        assert s.ledger.weights == 50_331_648 * 4 == 201_326_592
        assert s.ledger.gradients == 201_326_592
        assert s.ledger.activations == L * b * D * 4  # L.B.d saved values
    s = build_step(AFFINE, TrainingConfig(batch=1024))
    assert s.ledger.activations == s.ledger.weights  # activations equal parameters at B = d = 1024


def test_affine_sqrt_checkpointing_keeps_13_tensors_and_costs_one_forward():
    b = 16
    plain = build_step(AFFINE, TrainingConfig(batch=b))
    ck = build_step(AFFINE, TrainingConfig(batch=b, checkpoint="sqrt"))
    tensor = b * D * 4
    assert ck.ledger.activations == 13 * tensor  # 7 boundaries + 6 of the segment recomputed
    assert plain.ledger.activations == 48 * tensor
    f = plain.flops["forward"]
    assert ck.flops["recompute"] == f
    assert ck.flops["forward"] + ck.flops["backward"] + ck.flops["recompute"] == 4 * f
    assert plain.flops["forward"] + plain.flops["backward"] == 3 * f


def test_every_k_checkpointing():
    b = 4
    ck = build_step(AFFINE, TrainingConfig(batch=b, checkpoint="every:12"))
    # 4 segments of 12: 4 boundaries + 11 recomputed
    assert ck.ledger.activations == (4 + 11) * b * D * 4
    with pytest.raises(InputError):
        TrainingConfig(checkpoint="every:0")
    with pytest.raises(InputError):
        TrainingConfig(checkpoint="sometimes")


@pytest.mark.parametrize("nid", ["nettalk", "lecun-1989", "resnet-50", "gpt2-small", "llama3-8b", "deepseek-v3"])
def test_every_kernel_flops_against_closed_forms(nid):
    s = build_step(load_network(nid), TrainingConfig(batch=2, optimizer="adam"))
    for k in s.kernels:
        assert k.phase in KERNEL_PHASES and k.op in KERNEL_OPS
        if k.op in ("gemm", "gemv"):
            m, n, kk = k.dims
            assert k.flops == 2 * k.batch * m * n * kk, k.name
            assert k.ops == {"fma": k.batch * m * n * kk}
            assert (k.op == "gemv") == (m == 1 or n == 1)
        else:
            assert k.flops == flops_of(k.ops), k.name
        if k.op == "update":
            # Adam: 6 mul, 4 add, 1 div, 1 sqrt per parameter
            assert k.ops == {"mul": 6 * k.elements, "add": 4 * k.elements, "div": k.elements, "sqrt": k.elements}
    upd = sum(k.elements * k.repeat for k in s.kernels if k.op == "update")
    pooler = 1024 * 1024 + 1024 if nid == "bert-large" else 0
    assert upd == s.network.parameters - pooler


def test_nettalk_per_example_is_batch_one_iterations():
    net = load_network("nettalk")
    s = build_step(net, TrainingConfig(batch=10, updates="per-example"))
    assert s.iterations == 10 and s.examples == 10
    one = build_step(net, TrainingConfig(batch=1))
    assert s.flops["total"] == 10 * one.flops["total"]
    gemms = [k for k in s.kernels if k.op in ("gemm", "gemv")]
    assert [k.dims for k in gemms[:2]] == [(1, 80, 203), (1, 26, 80)]
    assert all(k.op == "gemv" for k in gemms if k.name.endswith((".fwd", ".dX")))
    # per-example forward: one multiply-add per weight
    assert sum(k.ops["fma"] for k in gemms if k.phase == "forward") == 203 * 80 + 80 * 26
    assert s.connections == 18_426


def test_ledger_precision_and_optimizer_bytes():
    net = load_network("gpt2-small")
    p = net.parameters
    s = build_step(net, TrainingConfig(batch=1, dtype="bf16", optimizer="adam"))
    assert (s.ledger.weights, s.ledger.gradients, s.ledger.optimizer) == (2 * p, 2 * p, 12 * p)
    s = build_step(net, TrainingConfig(batch=1, dtype="fp32", optimizer="momentum"))
    assert (s.ledger.weights, s.ledger.gradients, s.ledger.optimizer) == (4 * p, 4 * p, 4 * p)
    f = build_step(net, TrainingConfig(batch=1, phase="forward"))
    assert (f.ledger.gradients, f.ledger.optimizer, f.ledger.activations) == (0, 0, 0)
    assert {k.phase for k in f.kernels} == {"forward"}
    assert f.ledger.peak >= f.ledger.weights


def test_gpt3_saved_activations_follow_korthikanti():
    net = load_network("gpt3-175b")
    s_, h, a, n = 2048, 12288, 96, 96
    for b in (1, 2):
        st = build_step(net, TrainingConfig(batch=b, dtype="bf16"))
        per_layer = 34 * s_ * b * h + 5 * a * s_ * s_ * b
        # every layer's saved tensors, plus the last layer's output (the final norm's input)
        assert st.ledger.activations == n * per_layer + 2 * s_ * b * h
    sel = build_step(net, TrainingConfig(batch=1, dtype="bf16", checkpoint="selective"))
    base = n * 34 * s_ * h
    assert base <= sel.ledger.activations <= base + 2 * s_ * h + 5 * a * s_ * s_
    assert sel.flops["recompute"] == n * (2 * a * s_ * s_ * 128 + 5 * a * s_ * s_ + a * s_ * s_)


def test_dense_transformer_flops_are_6_n_tokens_plus_attention():
    for nid in ("gpt3-175b", "llama3-8b", "gpt2-xl"):
        net = load_network(nid)
        st = build_step(net, TrainingConfig(batch=1, dtype="bf16"))
        s_ = net.seq_len
        matrix_params = net.parameters - net.vocab * net.d_model * (1 if net.tied_embeddings else 2) - net.max_positions * net.d_model
        # attention: 4 s^2 a d_head forward; backward twice that, plus the score recomputation of a fused kernel
        attn = (12 if net.attention == "materialized" else 14) * net.n_layers * s_ * s_ * net.heads * net.d_head
        expected = 6 * (matrix_params + net.vocab * net.d_model) * s_ + attn
        assert abs(st.flops["forward"] + st.flops["backward"] - expected) / expected < 0.01, nid




@pytest.mark.parametrize("ckpt", ["none", "sqrt", "selective"])
def test_scaled_layers_match_the_full_simulation(tiny_gpt, ckpt):
    net = tiny_gpt(4, 64, 256, 100, 32)
    cfg = TrainingConfig(batch=2, checkpoint=ckpt, optimizer="adam")
    scaled = build_step(net, cfg)
    full = build_step(net, cfg, expand_repeats=True)
    assert scaled.flops == full.flops
    assert scaled.ledger == full.ledger
    assert len(full.kernels) > len(scaled.kernels)

    def per_name(step):
        out = {}
        for k in step.kernels:
            name = re.sub(r"\bL\d+\.", "L*.", k.name)
            out[name] = out.get(name, 0) + k.flops * k.repeat
        return out

    assert per_name(scaled) == per_name(full)
    assert all(k.repeat == 4 for k in scaled.kernels if k.layer >= 0)


def test_gemm_step():
    s = gemm_step(64, 32, 16)
    (k,) = s.kernels
    assert k.flops == 2 * 64 * 32 * 16 and k.dims == (64, 32, 16)
    assert s.flops["total"] == k.flops
    assert [r.name for r in k.reads] == ["A", "B"] and k.writes[0].bytes == 64 * 32 * 4


def test_tensors_do_not_overlap_while_live():
    s = build_step(load_network("lecun-1989"), TrainingConfig(batch=3))
    for k in s.kernels:
        refs = {(r.addr, r.bytes, r.name) for r in k.reads + k.writes}
        spans = sorted((a, a + n, nm) for a, n, nm in refs)
        for (a0, e0, n0), (a1, _e1, n1) in zip(spans, spans[1:], strict=False):
            assert a1 >= e0 or a0 == a1, (k.name, n0, n1)


def test_bad_configurations():
    with pytest.raises(InputError):
        TrainingConfig(batch=0)
    with pytest.raises(InputError):
        TrainingConfig(optimizer="lion")
    with pytest.raises(InputError):
        build_step(load_network("nettalk"), TrainingConfig(checkpoint="selective"))
    with pytest.raises(InputError):
        build_step(load_network("nettalk"), TrainingConfig(seq_len=5))


def test_memwall_step_json(capsys):
    import json

    from memwall.cli import main

    assert main(["step", "--network", "affine-48x1024", "--batch", "4", "--checkpoint", "sqrt", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    f = 2 * 4 * D * D * L
    assert d["flops"] == {"forward": f, "backward": 2 * f, "recompute": f, "update": 2 * 50_331_648, "total": 4 * f + 2 * 50_331_648}
    assert d["ledger"]["activations"] == 13 * 4 * D * 4 and d["ledger"]["weights"] == 201_326_592
    assert {"weights", "gradients", "optimizer", "activations", "peak"} <= set(d["ledger"])
    assert len(d["kernels"]) == 48 * 3 + 48 + 48  # fwd, recompute, dW and dX per layer, updates
    assert main(["step", "--network", "nettalk", "--checkpoint", "every:x"]) == 2
    assert main(["networks", "show", "deepseek-v3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["active_parameters"] > 37e9


def test_attention_kernels_are_a_case_option(capsys):
    """--attention flash on a preset that materialises its scores: fewer bytes and a smaller
    peak, and the result says which kernels ran; a chain has no attention to choose."""
    import json

    from memwall.cli import main
    from memwall.errors import InputError
    from memwall.simulation import Case, build_case_step

    base = build_case_step(Case("h100-sxm", "gpt2-small", 4))
    flash = build_case_step(Case("h100-sxm", "gpt2-small", 4, attention="flash"))
    assert base.network.attention == "materialized" and flash.network.attention == "flash"
    assert flash.ledger.peak < base.ledger.peak
    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--seq-len", "64",
                 "--attention", "flash", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["attention"] == "flash"
    with pytest.raises(InputError, match="no attention"):
        build_case_step(Case("h100-sxm", "nettalk", attention="flash"))


def test_a_single_product_writes_its_result_in_out_dtype(capsys):
    """--out-dtype: cuBLASLt's D type. An fp8 product that writes fp16 (as Azure's
    cublaslt_gemm -t fp8e4m3 does) moves twice the output bytes of one that writes fp8, and a
    skinny, memory-bound product is slower for it; the option belongs to a GEMM alone."""
    import json

    from memwall.cli import main

    s8, s16 = gemm_step(4096, 192, 768, "fp8"), gemm_step(4096, 192, 768, "fp8", "fp16")
    assert (s8.kernels[0].writes[0].bytes, s16.kernels[0].writes[0].bytes) == (4096 * 192, 4096 * 192 * 2)
    assert s16.kernels[0].flops == s8.kernels[0].flops
    assert gemm_step(64, 64, 64, "mxfp8", "fp32").kernels[0].writes[0].bytes == 64 * 64 * 4

    def run(*extra):
        assert main(["inspect", "--machine", "h100-sxm", "--gemm", "802816,192,768", "--dtype", "fp8",
                     "--json", "--no-progress", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    plain, wide = run(), run("--out-dtype", "fp16")
    assert wide["bytes"]["memory"] > plain["bytes"]["memory"] * 1.1
    assert wide["seconds"] > plain["seconds"]
    assert (plain["out_dtype"], wide["out_dtype"]) == ("fp8", "fp16")
    assert main(["inspect", "--machine", "h100-sxm", "--network", "llama2-7b", "--out-dtype", "fp16"]) == 2
    assert "applies only to a single GEMM" in capsys.readouterr().err
