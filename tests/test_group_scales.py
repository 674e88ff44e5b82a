"""int4 weights carry a scale a group of 128 weights (fp16), as GPTQ and AWQ checkpoints
do: the ledger holds them, every product over int4 weights reads them once a run, and
int4 still never moves more bytes than int8."""

from __future__ import annotations

import pytest

from memwall.simulate import Case, build_case_step, run_case
from memwall.vocabulary import WEIGHT_GROUP_SCALES


def _step(network: str, weights: str | None, **kw):
    return build_case_step(Case(machine="h100-sxm", network=network, phase="decode", context=64, batch=2,
                                weights=weights, **kw))


def test_each_int4_product_reads_a_scale_a_group_of_its_weights():
    group, scale = WEIGHT_GROUP_SCALES["int4"]
    step = _step("llama3-8b", "int4")
    products = [k for k in step.kernels if k.params.get("b_dtype") == "int4"]
    assert products
    for k in products:
        w, s = k.reads[1], k.reads[2]
        assert s.name == f"scales.{w.name}" and s.cls == "weights"
        assert s.bytes == -(-(2 * w.bytes) // group) * scale  # two int4 weights a byte
    # the embedding and head stay in the step's dtype: no scales
    assert all(not r.name.startswith("scales.") for k in step.kernels if k.name == "head.fwd" for r in k.reads)


def test_the_ledger_holds_the_scales_beside_the_weights():
    from memwall.networks import load_network
    from memwall.workloads.config import TrainingConfig
    from memwall.workloads.step import declare

    group, scale = WEIGHT_GROUP_SCALES["int4"]
    net = load_network("gpt2-small")
    graph = declare(net, TrainingConfig(batch=2, dtype="bf16", phase="decode", context=64, weights="int4"))
    narrow = [p for p in graph.params if p.stored == "int4"]
    scales = sum(-(-p.values // group) * scale for p in narrow)
    assert len(narrow) == 4 * net.n_layers  # qkv, out, fc1, fc2 of every block
    plain, q8, q4 = (_step("gpt2-small", w) for w in (None, "int8", "int4"))
    halved = sum(p.values for p in narrow) // 2  # int8 -> int4: half a byte less a weight
    assert q4.ledger.weights == q8.ledger.weights - halved + scales
    assert q4.ledger.weights < q8.ledger.weights < plain.ledger.weights


@pytest.mark.parametrize("machine,net", [("h100-sxm", "gpt2-small"), ("xeon-gold-6242", "gpt2-small")])
def test_int4_with_its_scales_never_moves_more_bytes_than_int8(machine, net, monkeypatch):
    from memwall.workloads import graph

    def memory(weights: str) -> float:
        return run_case(Case(machine=machine, network=net, phase="decode", context=64, weights=weights))["bytes"]["memory"]

    step = build_case_step(Case(machine=machine, network=net, phase="decode", context=64, weights="int4"))
    scales = sum(r.bytes * k.repeat for k in step.kernels for r in k.reads if r.name.startswith("scales."))
    with_scales, int8 = memory("int4"), memory("int8")
    assert with_scales < int8
    monkeypatch.setattr(graph, "WEIGHT_GROUP_SCALES", {})
    without = memory("int4")
    # the scales travel from main memory once a step, beside the weights they scale
    assert with_scales - without == pytest.approx(scales, rel=0.02)
