"""Serving: decode against a KV cache, prefill that fills it, quantized weights and caches."""

from __future__ import annotations

import time

import pytest

from memwall.errors import InputError
from memwall.networks import load_network
from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.timing import arithmetic_rate
from memwall.workloads.config import TrainingConfig
from memwall.workloads.step import build_step


def _step(net: str, **kw):
    n = load_network(net)
    kw.setdefault("dtype", n.dtype)
    return build_step(n, TrainingConfig(**kw))


def _decode(machine: str, net: str, batch: int, context: int, **kw) -> dict:
    return run_case(Case(machine=machine, network=net, batch=batch, phase="decode", context=context, **kw))


# ---- closed forms ------------------------------------------------------------------------------
@pytest.mark.parametrize("batch,context", [(1, 0), (3, 100), (8, 4096)])
def test_kv_cache_of_gqa_is_2_layers_tokens_kv_heads_head_dim_bytes(batch, context):
    n = load_network("llama3-8b")
    s = _step("llama3-8b", batch=batch, phase="decode", context=context)
    # the cache holds the context and the token this step appends
    assert s.ledger.kv_cache == 2 * n.n_layers * batch * (context + 1) * n.kv_heads * n.d_head * 2
    attn = next(k for k in s.kernels if k.name == "attn.decode")
    cache_read = sum(r.bytes for r in attn.reads if r.cls == "kv_cache") * attn.repeat
    assert cache_read == s.ledger.kv_cache


def test_mla_caches_the_latent_and_a_narrow_cache_shrinks_by_its_width():
    n = load_network("deepseek-v3")
    m = n.mla
    s = _step("deepseek-v3", batch=2, phase="decode", context=1000)
    assert s.ledger.kv_cache == n.n_layers * 2 * 1001 * (m.kv_lora_rank + m.qk_rope_head_dim) * 2
    for kv, div in (("fp8", 2), ("int4", 4)):
        q = _step("deepseek-v3", batch=2, phase="decode", context=1000, kv_dtype=kv)
        assert q.ledger.kv_cache * div == s.ledger.kv_cache


def test_prefill_flops_are_a_forward_pass_of_the_prompt_and_it_holds_the_cache():
    n = load_network("llama3-8b")
    pre = _step("llama3-8b", batch=2, phase="prefill", context=512)
    fwd = _step("llama3-8b", batch=2, phase="forward", seq_len=512)
    assert pre.flops == fwd.flops
    assert pre.tokens == 2 * 512
    assert pre.ledger.kv_cache == 2 * n.n_layers * 2 * 512 * n.kv_heads * n.d_head * 2
    assert fwd.ledger.kv_cache == 0 and "kv_cache" not in fwd.ledger.as_dict()


def test_decode_at_batch_1_takes_weights_plus_cache_over_bandwidth():
    """h100: 15 GB of read weights and 1 GB of cache overflow its 50 MiB L2. The closed form
    is the bandwidth-bound limit: the per-unit work-in-flight cap (issue 12) is lifted here
    (a huge bytes_in_flight), and the steps run compiled, so what is left is the bytes at the
    rate a read stream sustains."""
    m = load_machine("h100-sxm", sets={"schedule.bytes_in_flight": "'1 GB'"})
    r = run_case(Case(machine="h100-sxm", network="llama3-8b", batch=1, phase="decode", context=8192,
                      dispatch="compiled"), machine=m)
    n = load_network("llama3-8b")
    led = r["ledger"]
    table = n.vocab * n.d_model * 2  # the embedding table: one row of it is read
    # read-only traffic (a KV row's write is bytes against gigabytes): the read stream's rate
    closed = (led["weights"] - table + led["kv_cache"]) / m.memory.sustained_for(0.0)
    moving = r["seconds"] - r["cycles"]["overhead"] / m.clock_hz  # launches are not memory
    assert moving == pytest.approx(closed, rel=0.03)
    assert r["bound_class"] == "memory"
    sv = r["serving"]
    assert sv["seconds_per_token"] == r["seconds"]
    assert sv["tokens_per_second"] == pytest.approx(1 / r["seconds"])


# ---- invariants --------------------------------------------------------------------------------
def test_more_context_never_fewer_bytes_per_token():
    per = [_decode("h100-sxm", "gpt2-small", 4, c)["bytes"]["memory"] / 4 for c in (16, 256, 1000)]
    assert per == sorted(per) and per[-1] > per[0]


def test_doubling_the_decode_batch_never_lowers_tokens_per_second():
    tps = [_decode("h100-sxm", "gpt2-small", b, 256)["serving"]["tokens_per_second"] for b in (1, 2, 4, 8, 16, 32)]
    assert tps == sorted(tps)


@pytest.mark.parametrize("machine,net", [("h100-sxm", "gpt2-small"), ("sapphire-rapids", "gpt2-xl")])
def test_int4_weights_never_move_more_bytes_than_int8(machine, net):
    """Tiled and blocked schedules (the weights overflow the caches in both)."""
    by = {w: _decode(machine, net, 2, 128, weights=w)["bytes"]["memory"] for w in ("int8", "int4")}
    assert by["int4"] < by["int8"]
    s8, s4 = (_step("gpt2-small", batch=2, phase="decode", context=128, weights=w) for w in ("int8", "int4"))
    assert s4.ledger.weights < s8.ledger.weights


def test_quantized_products_count_their_dequantization():
    plain = _step("llama3-8b", batch=4, phase="decode", context=64)
    q = _step("llama3-8b", batch=4, phase="decode", context=64, weights="int4")
    k0 = next(k for k in plain.kernels if k.name == "mlp.up.fwd")
    k1 = next(k for k in q.kernels if k.name == "mlp.up.fwd")
    m, n, kk = k1.dims
    # scale and zero point, once a weight; the weights widened, whose instructions the timing charges
    assert k1.ops == {"fma": m * n * kk, "mul": n * kk, "add": n * kk, "dequant": n * kk}
    assert k1.flops == k0.flops + 2 * n * kk
    w = next(r for r in k1.reads if r.cls == "weights")
    assert w.bytes * 4 == next(r for r in k0.reads if r.cls == "weights").bytes


def test_int8_compute_runs_at_the_machines_int8_rate():
    m = load_machine("h100-sxm")
    assert m.peak_flops["int8"] > m.peak_flops["bf16"]
    assert arithmetic_rate(m, "int8", "gemm") == m.peak_flops["int8"]
    r = _decode("h100-sxm", "gpt2-small", 64, 128, dtype="int8")
    assert r["peak_flops"] == m.peak_flops["int8"]


def test_the_batch_that_fits_is_reported():
    r = _decode("h100-sxm", "llama3-8b", 256, 8192)
    sv = r["serving"]
    assert not r["capacity"]["fits"] and 0 < sv["max_batch_that_fits"] < 256
    led = r["ledger"]
    per = led["kv_cache"] / 256
    assert (led["peak"] - led["kv_cache"]) + sv["max_batch_that_fits"] * per <= load_machine("h100-sxm").memory.capacity


# ---- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,field", [
    ({"phase": "decode"}, "context"),
    ({"phase": "prefill"}, "context"),
    ({"phase": "decode", "context": 8, "seq_len": 8}, "seq_len"),
    ({"phase": "train", "context": 8}, "context"),
    ({"phase": "decode", "context": -1}, "context"),
    ({"phase": "decode", "context": 8, "weights": "int3"}, "weights"),
    ({"phase": "train", "weights": "int8"}, "weights"),
    ({"phase": "forward", "kv_dtype": "int8"}, "kv_dtype"),
    ({"phase": "train", "dtype": "int8"}, "dtype"),
])
def test_bad_serving_options_name_their_field(kw, field):
    with pytest.raises(InputError) as e:
        TrainingConfig(batch=1, **kw)
    assert e.value.field == field


def test_decode_of_a_network_without_a_cache_is_refused():
    with pytest.raises(InputError):
        _step("nettalk", batch=1, phase="decode", context=4, dtype="fp32")


def test_sweep_options_take_comma_lists():
    from memwall.cli import build_parser
    from memwall.cli.sweep import build_cases

    args = build_parser().parse_args(["sweep", "--machines", "h100-sxm", "--networks", "gpt2-small", "--batches",
                                      "1,8", "--phase", "decode", "--context", "128,1024", "--weights", "int8,int4"])
    cases = build_cases(args).cases
    assert len(cases) == 2 * 2 * 2
    assert {(c.batch, c.context, c.weights) for c in cases} == {(b, c, w) for b in (1, 8) for c in (128, 1024)
                                                                for w in ("int8", "int4")}
    assert all(c.phase == "decode" for c in cases)


# ---- speed -------------------------------------------------------------------------------------
def test_a_llama3_70b_decode_step_at_batch_64_and_context_8192_is_timed_in_under_10_s():
    start = time.perf_counter()
    r = _decode("h100-sxm", "llama3-70b", 64, 8192)
    assert time.perf_counter() - start < 10
    assert r["serving"]["tokens_per_second"] > 0


# ---- where batching decode turns compute-bound -------------------------------------------------
def test_decode_turns_compute_bound_at_a_batch_and_the_cache_overtakes_the_weights_at_another():
    from memwall.study.serving import decode_crossovers

    case = Case(machine="h100-sxm", network="llama3-8b", phase="decode", context=16, kv_dtype="int4")
    out = decode_crossovers(case)
    rows = out["rows"]
    b = out["compute_bound_at_batch"]
    assert b is not None and rows[-1]["batch"] == b and rows[-1]["bound_class"] == "compute"
    assert all(r["bound_class"] != "compute" for r in rows[:-1]) and len(rows) > 3
    assert rows[-1]["memory_ratio"] <= 1.05  # compute-bound by the rule: memory never the larger there
    # closed form: the cache a sequence reads against the weights a step reads
    n = load_network("llama3-8b")
    per_seq = 2 * n.n_layers * 17 * n.kv_heads * n.d_head // 2  # int4: half a byte a value
    assert out["kv_cache_read_per_sequence"] == per_seq
    assert out["kv_overtakes_weights_at_batch"] == -(-out["weights_read_per_step"] // per_seq)


def test_crossover_cli_refuses_other_phases(capsys):
    from memwall.cli import main

    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--phase", "forward",
                 "--crossover"]) != 0
