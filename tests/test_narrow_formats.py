"""fp8 training as Transformer Engine runs it, and the block-scaled formats (mxfp8, mxfp6,
mxfp4, nvfp4): the products run narrow at the machine's own rate for the format, every
scale byte is counted, a machine without the rate is refused, and the measurement files
take the same names."""

from __future__ import annotations

import dataclasses

import pytest

from memwall.errors import InputError
from memwall.options import make_case
from memwall.profiles import load_machine
from memwall.simulation import Case, build_case_step, run_case
from memwall.simulation.result import weight_bytes_per_parameter
from memwall.study.measurements import load_measurement_file
from memwall.timing import arithmetic_rate
from memwall.vocabulary import BLOCK_FORMATS
from memwall.workloads.config import TrainingConfig


@pytest.mark.parametrize("fmt, per_param, scales_of_1000", [
    ("nvfp4", 0.5625, 63 + 4),  # 16 a block (63 blocks for 1000) and the fp32 tensor scale
    ("mxfp4", 0.53125, 32),  # 32 a block
    ("mxfp6", 0.78125, 32),
    ("mxfp8", 1.03125, 32),
])
def test_scale_bytes_of_each_format(fmt, per_param, scales_of_1000):
    f = BLOCK_FORMATS[fmt]
    assert f.bytes_per_element() == per_param
    assert f.scale_bytes(1000) == scales_of_1000
    cfg = TrainingConfig(phase="decode", context=16, weights=fmt)
    assert weight_bytes_per_parameter(cfg) == per_param
    # a product in the format reads the weights stored in it
    assert weight_bytes_per_parameter(TrainingConfig(phase="decode", context=16, dtype=fmt)) == per_param


def _decode(weights: str):
    return build_case_step(Case(machine="h100-sxm", network="gpt2-small", phase="decode", context=32,
                                weights=weights))


def test_the_ledger_and_every_product_carry_the_block_scales():
    """Each narrow weight has a scales tensor of ceil(values / block) bytes (+ nvfp4's 4 B),
    class weights, read by every product over those weights."""
    for fmt in ("nvfp4", "mxfp4"):
        f = BLOCK_FORMATS[fmt]
        products = [k for k in _decode(fmt).kernels if k.params.get("b_dtype") == fmt]
        assert products
        for k in products:
            w, s = k.reads[1], k.reads[2]
            assert s.name == f"scales.{w.name}" and s.cls == "weights"
            values = w.bytes * 8 // f.bits
            assert s.bytes == f.scale_bytes(values)
    # the ledger: nvfp4 and mxfp4 store the same 4-bit elements; nvfp4 holds twice mxfp4's
    # block scales (one a 16, one a 32), plus 4 B a narrow tensor. int8 - mxfp4 = v (1 - 1/2 - 1/32).
    weights = {w: _decode(w).ledger.as_dict()["weights"] for w in ("nvfp4", "mxfp4", "int8")}
    values = (weights["int8"] - weights["mxfp4"]) * 32 // 15
    extra = weights["nvfp4"] - weights["mxfp4"] - values // 32
    assert 0 < extra <= 4 * 8 * 12 and extra % 4 == 0  # a 4-byte tensor scale each (gpt2-small: 12 layers)


def test_a_block_format_the_machine_lacks_is_refused_naming_what_it_has():
    case = Case(machine="h100-sxm", network="gpt2-small", seq_len=64, dtype="nvfp4")
    with pytest.raises(InputError) as e:
        run_case(case)
    assert "fp4" in str(e.value) and "fp8" in str(e.value) and "--allow-fallback" in str(e.value)
    r = run_case(case, allow_fallback=True)
    assert r["dtype_fallback"] == {"requested": "nvfp4", "used": "fp8"}


def test_weight_group_is_refused_with_block_formats():
    for fmt in BLOCK_FORMATS:
        with pytest.raises(InputError) as e:
            make_case("h100-sxm", "gpt2-small", phase="decode", context="8", weights=fmt, weight_group="32")
        assert "--weight-group" in str(e.value) and "int4" in str(e.value)


def test_fp8_training_runs_the_block_products_in_fp8_and_the_rest_in_bf16():
    step = build_case_step(Case(machine="h100-sxm", network="gpt2-small", seq_len=64, dtype="fp8", optimizer="adam"))
    products = [k for k in step.kernels if k.op in ("gemm", "gemv")]
    narrow = [k for k in products if k.dtype == "fp8"]
    assert narrow and all(k.layer >= 0 for k in narrow)
    # the head (Megatron's output layer) and everything that is not a block's linear stay bf16
    assert {k.dtype for k in step.kernels if k not in narrow} == {"bf16"}
    assert any(k.name.startswith("head.") and k.dtype == "bf16" for k in products)
    for k in narrow:  # operands read as their fp8 copies, one byte an element; output bf16 (or the grads' type)
        a, b = k.reads[0], k.reads[1]
        assert a.name.endswith((".fp8", ".fp8.T")) and b.name.endswith((".fp8", ".fp8.T"))
        m, n, kk = k.dims
        assert a.bytes == k.batch * m * kk or a.bytes >= m * kk
        assert k.params["c_bytes"] in (2, 4)
    casts = [k for k in step.kernels if ".cast.fp8" in k.name]
    assert casts and all(k.dtype == "bf16" and k.ops == {"max": k.elements, "mul": k.elements} for k in casts)
    assert any(k.name == "fp8.amax_and_scale_update" for k in step.kernels)
    # fp32 main weights and Adam's two fp32 moments, as a bf16 step keeps them
    bf = build_case_step(Case(machine="h100-sxm", network="gpt2-small", seq_len=64, dtype="bf16", optimizer="adam"))
    assert step.ledger.as_dict()["optimizer"] >= bf.ledger.as_dict()["optimizer"]
    assert step.config.gradient_dtype == "bf16"


@pytest.mark.parametrize("phase, extra", [("decode", {"context": 64, "batch": 8}), ("prefill", {"context": 64})])
def test_fp8_inference_is_w8a8_weights_and_product_inputs_narrow_the_rest_bf16(phase, extra):
    """vLLM's and TensorRT-LLM's fp8: the block matrices' weights stored in fp8 and read as
    they are (no cast, no dequantization), each product's activation operand cast, every
    other tensor (norms, residuals, attention, the head and its weights, the KV cache) bf16."""
    step = build_case_step(Case(machine="h100-sxm", network="gpt2-small", phase=phase, dtype="fp8", **extra))
    bf = build_case_step(Case(machine="h100-sxm", network="gpt2-small", phase=phase, dtype="bf16", **extra))
    narrow = [k for k in step.kernels if k.dtype == "fp8"]
    assert narrow and all(k.op in ("gemm", "gemv") and k.layer >= 0 for k in narrow)
    assert {k.dtype for k in step.kernels if k not in narrow} == {"bf16"}
    assert any(k.name.startswith("head.") and k.dtype == "bf16" for k in step.kernels)
    for k in narrow:
        a, b = k.reads[0], k.reads[1]
        assert a.name.endswith(".fp8") and ".cast." not in b.name and b.bytes == k.dims[1] * k.dims[2]
        assert k.params["c_bytes"] == 2 and "dequant" not in k.ops
    casts = [k for k in step.kernels if ".cast.fp8" in k.name]
    assert casts and all(k.reads[0].bytes == 2 * k.writes[0].bytes for k in casts)  # bf16 in, fp8 out
    cast_out = {t for k in casts for t in k.writes}
    assert all(k.reads[0] in cast_out for k in narrow)  # every product's activation operand, cast
    assert not any(k.name == "fp8.amax_and_scale_update" for k in step.kernels)  # serving's scales are fixed
    # the block matrices' weights take half their bf16 bytes; the head's and the KV cache's do not move
    ledger, ledger_bf = step.ledger.as_dict(), bf.ledger.as_dict()
    assert ledger["kv_cache"] == ledger_bf["kv_cache"]
    assert ledger_bf["weights"] / 2 < ledger["weights"] < ledger_bf["weights"]


def test_fp8_products_run_at_the_fp8_rate_and_the_rest_at_bf16s():
    """Kernel by kernel against the bf16 step: a block's products take bf16 / fp8 of the
    time in arithmetic (the same tiles and waves), the head and attention the same."""
    def run(dtype):
        r = run_case(Case(machine="h100-sxm", network="gpt2-small", seq_len=64, dtype=dtype, optimizer="adam"))
        return r, {k["name"]: k for k in r["kernels"]}
    r8, fp8 = run("fp8")
    _, bf16 = run("bf16")
    # the machine as a training step holds it: at its power limit ([compute.sustained])
    m = dataclasses.replace(load_machine("h100-sxm"), power_saturated=True)
    ratio = arithmetic_rate(m, "bf16", "gemm") / arithmetic_rate(m, "fp8", "gemm")
    assert ratio < 1
    narrow = {k.name for k in build_case_step(Case(machine="h100-sxm", network="gpt2-small", seq_len=64,
                                                    dtype="fp8")).kernels if k.dtype == "fp8"}
    assert narrow
    # The library picks a product's tile from its dtype's list (the H100's fp8 list holds a
    # 64 x 128 tile its bf16 list does not): where both pick the same tiling, the time is in
    # the ratio of the rates; where fp8 picks another, it is never slower.
    from memwall.workloads.lowering import params_of, product_tiling

    steps = {d: {k.name: k for k in build_case_step(Case(machine="h100-sxm", network="gpt2-small", seq_len=64,
                                                         dtype=d, optimizer="adam")).kernels} for d in ("fp8", "bf16")}
    params = params_of(m.schedule)

    def tiling(d, name):
        k = steps[d][name]
        return product_tiling(k.dims, k.batch, k.dtype, params) if k.op in ("gemm", "gemv") else None

    same = 0
    for name, k in bf16.items():
        if k["op"] not in ("gemm", "gemv", "attention"):
            continue
        expected = k["time_by_component"]["compute"] * (ratio if name in narrow else 1)
        if tiling("fp8", name) == tiling("bf16", name):
            same += 1
            assert fp8[name]["time_by_component"]["compute"] == pytest.approx(expected, rel=1e-9)
        else:
            assert fp8[name]["time_by_component"]["compute"] <= k["time_by_component"]["compute"]
    assert same >= len(narrow) // 2
    assert r8["dtype"] == "fp8" and r8["peak_flops"] == m.peak_flops["fp8"]


def test_measurement_files_take_the_formats(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("""
[[measurement]]
id = "t-fp8-train"
machine = "h100-sxm"
network = "gpt2-small"
batch = 1
seq_len = 64
phase = "train"
dtype = "fp8"
metric = "tokens_per_second"
value = 1000
source = "test"
reliability = "low"
notes = "test"

[[measurement]]
id = "t-nvfp4-decode"
machine = "b200"
network = "gpt2-small"
batch = 1
phase = "decode"
context = 64
dtype = "nvfp4"
weights = "nvfp4"
metric = "tokens_per_second"
value = 1000
source = "test"
reliability = "low"
notes = "test"
""")
    ms = load_measurement_file(path)
    assert [m.dtype for m in ms] == ["fp8", "nvfp4"]
    assert ms[1].weights == "nvfp4" and ms[0].phase == "train"
