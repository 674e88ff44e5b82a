"""int4 weights carry a scale a group of 128 weights (fp16), as GPTQ and AWQ checkpoints
do: the ledger holds them, every product over int4 weights reads them once a run, and
int4 still never moves more bytes than int8."""

from __future__ import annotations

import pytest

from memwall.simulation import Case, build_case_step, run_case
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


# The H100 decodes GPT-2 XL (926 MB of int4 weights, 18x its L2: nothing is left for the
# next step, so what the scales add is their own bytes); GPT-2 small's 123 MB, 2.5x the L2,
# keeps part of its weights between steps, and which part, with the scales' lines among
# them, follows the order its products' tiles stream in (2.5 % off the scales' bytes with
# the tiling c12e122 picks)
@pytest.mark.parametrize("machine,net", [("h100-sxm", "gpt2-xl"), ("xeon-gold-6242", "gpt2-small")])
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


@pytest.mark.parametrize("group,zero,bits", [(32, "bf16", 32), (64, "int4", 20), (128, "none", 16)])
def test_a_group_format_sizes_the_scales_and_their_zero_points(group, zero, bits):
    """gpt-fast's int4 (a bf16 scale and zero a group of 32) is five bits a weight; AWQ's
    packed int4 zero points add four bits a group."""
    step = _step("llama3-8b", "int4", weight_group=group, weight_zero=zero)
    products = [k for k in step.kernels if k.params.get("b_dtype") == "int4"]
    assert products
    for k in products:
        w, s = k.reads[1], k.reads[2]
        groups = -(-(2 * w.bytes) // group)  # two int4 weights a byte
        assert s.bytes == -(-groups * bits // 8)
    # the ledger grows by the scale bits beyond the default's 16 a group of 128
    more = step.ledger.weights - _step("llama3-8b", "int4").ledger.weights
    assert more == 0 if (group, zero) == (128, "none") else more > 0


def test_group_options_are_refused_where_no_groups_are_stored():
    from memwall.errors import InputError

    for weights, kw in ((None, {"weight_group": 32}), ("int8", {"weight_zero": "bf16"}),
                        ("int4", {"weight_group": 0}), ("int4", {"weight_zero": "uint3"})):
        with pytest.raises(InputError) as err:
            _step("gpt2-small", weights, **kw)
        assert err.value.field == next(iter(kw))


def test_sweep_runs_each_group_format_and_measurements_take_them(tmp_path):
    from memwall.cli import build_parser
    from memwall.cli.sweep import build_cases
    from memwall.study.measurements import load_measurements
    from memwall.study.validation import case_for

    args = build_parser().parse_args(["sweep", "--machines", "a100-sxm", "--networks", "llama2-7b", "--phase",
                                      "decode", "--context", "105", "--weights", "int4", "--weight-group", "32,128",
                                      "--weight-zero", "none,bf16"])
    cases = build_cases(args).cases
    assert sorted((c.weight_group, c.weight_zero) for c in cases) == [
        (32, "bf16"), (32, "none"), (128, "bf16"), (128, "none")]
    (m,) = [m for m in load_measurements() if m.id == "gpt-fast-a100-llama2-7b-int4-decode"]
    case = case_for(m)
    assert (case.weight_group, case.weight_zero) == (32, "bf16")
    assert "weight_group" not in Case(machine="a100-sxm", network="llama2-7b").as_dict()  # other keys unchanged
