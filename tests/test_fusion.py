"""Kernel fusion: what a fused kernel moves, and that fusing never moves more."""

from __future__ import annotations

import pytest

from memwall.networks import load_network
from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.workloads.config import TrainingConfig
from memwall.workloads.lowering import lower
from memwall.workloads.step import activation_traffic, build_step

CASES = [
    ("h100-sxm", dict(network="gpt2-small", seq_len=64, optimizer="adam")),
    ("h100-sxm", dict(network="nettalk", batch=16)),
    ("skylake-sp", dict(network="nettalk", batch=16)),
    ("cray-1", dict(network="nettalk", batch=4)),
]
# A fused kernel leaves the caches in another state for the kernels after it; under LRU
# that can cost lines elsewhere (skylake-sp, gpt2-small at 16 tokens, replayed exactly:
# full fusion moves 0.01 % more from memory than none, and 0.4 % less from L1; h100-sxm,
# gpt2-small at 1024 tokens: 0.24 % more from HBM, all of it attn.dV reading the
# probabilities after the merged ln2.bwd+dropout.bwd, while L2 traffic falls 9 %).
REPLACEMENT_SLACK = 1e-3


@pytest.mark.parametrize("machine, case", CASES)
def test_full_fusion_never_moves_more_bytes_than_none_at_any_level(machine, case):
    by_mode = {f: run_case(Case(machine=machine, fusion=f, **case))["bytes"] for f in ("none", "epilogue", "full")}
    for level, b in by_mode["none"].items():
        assert by_mode["epilogue"][level] <= b * (1 + REPLACEMENT_SLACK)
        assert by_mode["full"][level] <= b * (1 + REPLACEMENT_SLACK)
    assert sum(by_mode["full"].values()) < sum(by_mode["none"].values())


@pytest.mark.parametrize("network", ["gpt2-small", "llama3-8b", "nettalk", "lecun-1989"])
def test_fusion_keeps_flops_and_shrinks_kernels(network):
    net = load_network(network)
    steps = {f: build_step(net, TrainingConfig(batch=2, dtype=net.dtype, optimizer="adam", fusion=f))
             for f in ("none", "epilogue", "full")}
    assert steps["none"].flops == steps["epilogue"].flops == steps["full"].flops
    assert len(steps["full"].kernels) <= len(steps["epilogue"].kernels) < len(steps["none"].kernels)
    assert steps["none"].ledger.peak >= steps["full"].ledger.peak


def test_seed_a_falls_with_fusion_and_matches_its_definition():
    net = load_network("gpt2-small")
    a = {}
    for f in ("none", "epilogue", "full"):
        step = build_step(net, TrainingConfig(batch=1, dtype="bf16", fusion=f))
        a[f] = activation_traffic(step)["a"]
    assert a["none"] > a["epilogue"] >= a["full"] > 0
    # epilogue fusion of gpt2-small's 4 biased products (3h, h, 4h, h wide): bias in place (read + write,
    # 2 B each) forward, the bias reductions folded into dW backward (a read), the GeLU's read of its
    # input forward and the GeLU backward's read and write of its gradient: 36 + 18 + 8 + 16 B per d
    assert a["none"] - a["epilogue"] == 78


def test_a_fused_product_streams_its_epilogue_once():
    net = load_network("gpt2-small")
    step = build_step(net, TrainingConfig(batch=1, seq_len=64, dtype="bf16", fusion="epilogue"))
    k = next(k for k in step.kernels if k.name.startswith("mlp.fc1.fwd+"))
    assert k.op == "gemm" and {w.name for w in k.writes} == {"mlp.fc1.out", "mlp.gelu"}
    for machine in ("h100-sxm", "skylake-sp", "cray-1", "vax-11-780"):
        m = load_machine(machine)
        moved = lower(k, m.schedule).bytes_by_tensor()
        assert moved["mlp.gelu"] == 64 * 4 * 768 * 2
        assert moved["L0.w_fc1.b"] == 4 * 768 * 2  # the bias: once, not once per row


def test_full_fusion_updates_each_layer_in_one_multi_tensor_kernel():
    net = load_network("gpt2-small")
    none = build_step(net, TrainingConfig(batch=1, dtype="bf16", optimizer="adam"))
    full = build_step(net, TrainingConfig(batch=1, dtype="bf16", optimizer="adam", fusion="full"))
    upd = [k for k in full.kernels if k.phase == "update"]
    assert len(upd) < len([k for k in none.kernels if k.phase == "update"])
    m = load_machine("h100-sxm")
    moved_full = sum(sum(lower(k, m.schedule).bytes_by_tensor().values()) * k.repeat for k in upd)
    moved_none = sum(sum(lower(k, m.schedule).bytes_by_tensor().values()) * k.repeat for k in none.kernels
                     if k.phase == "update")
    assert moved_full == moved_none
