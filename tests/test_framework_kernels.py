"""The kernels a framework runs for an operation (era_data/frameworks/<id>.toml [kernels]):
a weight-only product's dequantization timed on the vector units, and decode attention over
a preallocated KV cache (--cache-length) reading every allocated row or the filled ones."""

from __future__ import annotations

import pytest

from memwall.errors import InputError
from memwall.frameworks import BARE, Framework, load_framework, load_framework_file
from memwall.options import make_case
from memwall.profiles import load_machine
from memwall.simulation.step import build_case_step
from memwall.simulation.timed import simulate_step
from memwall.timing import instruction_rate

A100 = load_machine("a100-sxm")


def _decode(**options):
    return build_case_step(make_case("a100-sxm", "gpt2-small", batch=1, phase="decode", context=16, **options))


def _device(timing) -> float:
    """The kernels' own seconds (no host stream: frameworks issue them differently)."""
    return sum(k.work_seconds for k in timing.kernels)


def test_dequant_instructions_bind_on_the_vector_units():
    step = _decode(weights="int8")
    widened = {k.name: k.ops["dequant"] for k in step.kernels if k.ops.get("dequant")}
    assert widened, "a weight-only product declares the weights it widens"
    slow = Framework("slow", "slow", dequant={"int8": 400.0})
    slower = Framework("slower", "slower", dequant={"int8": 800.0})
    t1, t2 = (simulate_step(A100, step, framework=f) for f in (slow, slower))
    rate = instruction_rate(A100)
    for a, b in zip(t1.kernels, t2.kernels, strict=True):
        if a.name not in widened:
            assert a.compute == b.compute
            continue
        # compute = max(matrix, instructions / rate x waves): the vector term binds, so it
        # doubles with the instructions and is at least their time
        assert a.compute >= widened[a.name] * a.repeat * 400.0 / rate * (1 - 1e-12)
        assert b.compute == pytest.approx(2 * a.compute)
        assert a.bound == "compute"


def test_plain_dequant_is_the_counted_operations_and_never_faster_than_none():
    assert BARE.dequant_instructions("int4") == 2.0 and BARE.dequant_instructions("fp8") == 1.0
    plain = _device(simulate_step(A100, _decode(), framework=BARE))
    assert _device(simulate_step(A100, _decode(weights="int8"), framework=BARE)) < plain  # fewer bytes still win


def test_the_framework_file_states_its_kernels():
    tc = load_framework("torch-compile")
    assert tc.dequant_instructions("int4") == 1.375 and tc.dequant_instructions("int8") == 5.0
    assert tc.decode_attention == "allocated" and load_framework("vllm").decode_attention == "filled"
    assert tc.provenance["kernels.dequant_int4"].source == "pt_int4mm"
    assert tc.as_dict()["kernels"]["dequant_int8"] == 5.0
    assert "kernels" not in load_framework("megatron").as_dict()  # nothing stated, nothing shown
    step = _decode(weights="int8")
    # torch-compile's int8 GEMV converts each weight at a quarter rate: never faster than the plain count
    assert _device(simulate_step(A100, step, framework=tc)) >= _device(simulate_step(A100, step, framework=BARE))


def test_a_bad_kernels_table_is_refused(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[framework]\nname = "x"\nversion = "1"\ndispatch = "eager"\n'
                    '[kernels]\ndecode_attention = "whole"\n')
    with pytest.raises(InputError, match="decode_attention"):
        load_framework_file(path)
    path.write_text('[framework]\nname = "x"\nversion = "1"\ndispatch = "eager"\n[kernels]\ndequant_int4 = 3\n')
    with pytest.raises(InputError, match="source"):  # a figure carries its provenance
        load_framework_file(path)


def _attention(step):
    return next(k for k in step.kernels if k.name.endswith("attn.decode"))


def test_a_preallocated_cache_is_read_whole_where_the_framework_attends_over_it():
    filled = _decode(framework="vllm", cache_length=1024)
    whole = _decode(framework="torch-compile", cache_length=1024)
    plain = _decode(framework="torch-compile")
    # the allocation is the ledger's either way
    assert filled.ledger.as_dict()["kv_cache"] == whole.ledger.as_dict()["kv_cache"]
    assert whole.ledger.as_dict()["kv_cache"] == pytest.approx(plain.ledger.as_dict()["kv_cache"] * 1024 / 17)
    # vLLM reads the 17 filled rows, as without an allocation; torch-compile all 1024
    assert _attention(filled).flops == _attention(plain).flops
    assert _attention(whole).flops == pytest.approx(_attention(plain).flops * 1024 / 17, rel=0.01)
    assert _attention(whole).params["context"] == 1024 and _attention(filled).params["context"] == 17
    t_filled, t_whole = (_device(simulate_step(A100, s)) for s in (filled, whole))
    assert t_whole > t_filled


def test_cache_length_is_checked_and_keys_the_step_by_framework():
    with pytest.raises(InputError) as e:
        _decode(cache_length=10)
    assert e.value.field == "cache_length"
    with pytest.raises(InputError):
        make_case("a100-sxm", "gpt2-small", batch=1, phase="prefill", context=16, cache_length=64)
    a = make_case("a100-sxm", "gpt2-small", phase="decode", context=16, cache_length=64, framework="vllm")
    b = make_case("a100-sxm", "gpt2-small", phase="decode", context=16, cache_length=64, framework="torch-compile")
    assert a.key("step", "devices") != b.key("step", "devices")
    c = make_case("a100-sxm", "gpt2-small", phase="decode", context=16)
    assert "framework" not in c.key("step", "devices")  # without an allocation the framework shapes nothing
