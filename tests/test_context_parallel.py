"""Context parallelism (ring and Ulysses), Megatron sequence parallelism and the interleaved
1F1B schedule: their closed forms, that their degree 1 is exactly the step without them, and
their refusals."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from memwall.errors import InputError
from memwall.interconnect import bubble_fraction
from memwall.networks import load_network
from memwall.options import BY_NAME, Case, add_case_arguments, given_options, make_case, option_lists
from memwall.simulation import run_case
from memwall.timing import time_communication
from memwall.workloads.config import TrainingConfig
from memwall.workloads.parallel import Comm, Parallel, communication, device_steps, stages

# gpt2-small: 12 layers, 12 heads, materialised attention; at 128 tokens a step is fast
SMALL = {"machine": "h100-sxm", "network": "gpt2-small", "batch": 1, "seq_len": 128}
FLASH = {**SMALL, "attention": "flash"}


@pytest.fixture(scope="module")
def gpt2():
    return load_network("gpt2-small")


@pytest.fixture(scope="module")
def llama():
    return load_network("llama3-8b")


def _comm(result: dict, prefix: str) -> list[dict]:
    return [c for c in result["communication"] if c["name"].startswith(prefix)]


# ---- the interleaved schedule -------------------------------------------------------------


def test_interleaved_bubble_is_narayanans_closed_form() -> None:
    # (p - 1)/(V m + p - 1): the issue's gpt3-175b case, p = 8, m = 16
    assert bubble_fraction(8, 16) == 7 / 23
    assert bubble_fraction(8, 16, 4) == 7 / 71
    # Narayanan's form: the bubble over the ideal time is (p - 1)/(V m)
    f = bubble_fraction(8, 16, 4)
    assert f / (1 - f) == pytest.approx(7 / (4 * 16))


def test_interleaved_step_waits_a_vth_of_the_plain_bubble() -> None:
    plain = run_case(Case(**SMALL, pp=2, accumulate=2))
    inter = run_case(Case(**SMALL, pp=2, accumulate=2, interleave=3))
    assert inter["bubble_fraction"] == 1 / (3 * 2 + 1)
    slot = max(s["slot_seconds"] for s in inter["stages"])
    assert inter["time_by_component"]["bubble"] == pytest.approx((2 - 1) * slot / 3, rel=1e-12)
    assert inter["time_by_component"]["bubble"] < plain["time_by_component"]["bubble"]
    # each device holds layers of three chunks: device 0 chunks 0, 2, 4 of two layers
    assert inter["stages"][0]["stage"] == "layers 0-1, 4-5, 8-9 + embedding"


def test_interleaved_sends_v_times_the_pipeline_messages(gpt2) -> None:
    cfg = TrainingConfig(batch=1, seq_len=128, accumulate=2)
    for v in (1, 3):
        par = Parallel(pp=2, interleave=v)
        first, last = stages(gpt2, 2, v)
        sends = [c.count for st in (first, last) for c in communication(gpt2, cfg, par, st, _ledger(), 128)
                 if c.name.startswith("pp")]
        # forward from every chunk but the pipeline's last, backward from every chunk but its first
        assert sends == [2 * v - 1, 2 * v - 1]


def _ledger():
    from memwall.workloads.kernel import Ledger
    return Ledger(weights=0, gradients=0, optimizer=0, activations=0, workspace=0, input=0, peak=0)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"pp": 2, "interleave": 5, "accumulate": 2}, "interleave"),  # 12 layers are not 10 chunks
    ({"pp": 2, "interleave": 2, "accumulate": 3}, "interleave"),  # m not a multiple of p
    ({"interleave": 2}, "interleave"),  # no pipeline
])
def test_an_interleave_that_does_not_divide_is_refused(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as e:
        run_case(make_case(**SMALL, **kwargs))
    assert e.value.field == field


def test_interleave_one_is_the_plain_schedule_bit_for_bit() -> None:
    assert make_case(**SMALL, pp=2, accumulate=2, interleave=1) == make_case(**SMALL, pp=2, accumulate=2)
    a = run_case(make_case(**SMALL, pp=2, accumulate=2))
    b = run_case(replace(make_case(**SMALL, pp=2, accumulate=2), interleave=1))
    assert a.to_json() == b.to_json()


# ---- context parallelism -------------------------------------------------------------------


def test_cp_one_is_the_step_without_cp_bit_for_bit() -> None:
    assert make_case(**SMALL, tp=2, cp=1, cp_kind="ring") == make_case(**SMALL, tp=2)
    a = run_case(make_case(**SMALL, tp=2))
    b = run_case(replace(make_case(**SMALL, tp=2), cp=1))
    assert a.to_json() == b.to_json()


def test_ring_passes_n_minus_one_blocks_a_layer_each_way(gpt2) -> None:
    r = run_case(make_case(**FLASH, cp=4))
    fwd, bwd = _comm(r, "cp: ring K, V blocks"), _comm(r, "cp: ring K, V and dK")
    assert [c["count"] for c in fwd] == [(4 - 1) * gpt2.n_layers]
    assert [c["count"] for c in bwd] == [(4 - 1) * gpt2.n_layers]
    # a block: the device's 128 / 4 tokens of K and V (12 heads of 64), bf16
    block = 128 // 4 * 2 * gpt2.heads * gpt2.d_head * 2
    assert fwd[0]["bytes"] == block and bwd[0]["bytes"] == 2 * block
    assert fwd[0]["kind"] == "p2p" and fwd[0]["group"] == 4


def test_ring_transfers_hide_behind_each_blocks_attention() -> None:
    one = Comm("ring", "p2p", 4, 1, 1 << 20, 6, "micro", "attention")
    link = load_machine_links()
    t_one = time_communication(link, [replace(one, overlap="critical")], micro_batches=1, micro_seconds=1,
                               backward_seconds=0)[0].seconds / 6
    # attention long enough: each block (A (n-1)/(c n)) outlasts its transfer, nothing exposed
    long = time_communication(link, [one], micro_batches=1, micro_seconds=1, backward_seconds=0,
                              attention_seconds={"forward": 100 * t_one * 6 * 4 / 3})[0]
    assert long.exposed == 0
    # no attention to hide behind: every transfer waited for; half: what sticks out
    bare = time_communication(link, [one], micro_batches=2, micro_seconds=1, backward_seconds=0,
                              attention_seconds={"forward": 0.0})[0]
    assert bare.exposed == pytest.approx(2 * 6 * t_one)
    half = time_communication(link, [one], micro_batches=1, micro_seconds=1, backward_seconds=0,
                              attention_seconds={"forward": 0.5 * t_one * 6 * 4 / 3})[0]
    assert half.exposed == pytest.approx(6 * 0.5 * t_one)


def load_machine_links():
    from memwall.profiles import load_machine
    return load_machine("h100-sxm").interconnect


def test_ulysses_all_to_all_volume_is_the_qkv_and_context_bytes(llama) -> None:
    r = run_case(make_case(machine="h100-sxm", network="llama3-8b", batch=1, seq_len=128, tp=2, cp=4,
                           cp_kind="ulysses"))
    tokens = 128 // 4  # a device's share of the sequence
    heads, kv = llama.heads // 2, llama.kv_heads // 2  # a tensor-parallel device's
    qkv, ctx = _comm(r, "cp: ulysses Q, K, V"), _comm(r, "cp: ulysses context")
    assert qkv[0]["bytes"] == tokens * (heads + 2 * kv) * llama.d_head * 2
    assert ctx[0]["bytes"] == tokens * heads * llama.d_head * 2
    # forward and backward once a layer; each device sends (n - 1)/n of what it holds
    assert qkv[0]["count"] == 2 * llama.n_layers
    assert qkv[0]["sent_bytes"] == pytest.approx(qkv[0]["count"] * 3 / 4 * qkv[0]["bytes"])
    assert qkv[0]["kind"] == "all-to-all" and qkv[0]["group"] == 4
    sh = r["stages"][0]["shards"]
    assert (sh["sequence_tokens"], sh["heads"], sh["attention_heads"], sh["attention_queries"]) == \
        (32, heads, heads // 4, 128)


def test_context_parallel_splits_the_tokens_not_the_work() -> None:
    one = device_steps(load_network("gpt2-small"), TrainingConfig(batch=1, seq_len=128, dtype="bf16"),
                       Parallel(tp=1))[0][1]
    for kind, extra in (("ring", {"attention": "flash"}), ("ulysses", {})):
        net = load_network("gpt2-small")
        if extra:
            net = replace(net, attention="flash")
        cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16")
        base = device_steps(net, cfg, Parallel())[0][1]
        cp = device_steps(net, cfg, Parallel(cp=4, cp_kind=kind))[0][1]
        assert cp.tokens * 4 == base.tokens
        # every device does 1/cp of the forward and backward work (the zigzag's balance)
        for phase in ("forward", "backward"):
            assert 4 * cp.flops[phase] == pytest.approx(base.flops[phase], rel=1e-9)
    assert one.tokens == 128


def test_context_parallel_reduces_gradients_over_dp_times_cp() -> None:
    r = run_case(make_case(**FLASH, dp=2, cp=2))
    grads = [c for c in r["communication"] if "gradient" in c["name"]]
    assert [c["group"] for c in grads] == [4]
    assert r["devices"] == 4 and r["global_step"]["tokens"] == 2 * 128


def test_ulysses_refuses_heads_that_do_not_divide() -> None:
    with pytest.raises(InputError) as e:  # 12 heads over 8 devices
        run_case(make_case(**SMALL, cp=8, cp_kind="ulysses"))
    assert e.value.field == "cp" and "heads" in str(e.value)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"cp": 2}, "cp_kind"),  # ring over materialised scores
    ({"cp": 3, "attention": "flash"}, "cp"),  # 128 tokens do not split into 6 zigzag chunks
    ({"cp": 2, "phase": "decode", "context": 64, "seq_len": None}, "cp"),  # one token to split
])
def test_a_context_split_the_step_cannot_take_is_refused(kwargs: dict, field: str) -> None:
    args = {**SMALL, **kwargs}
    args = {k: v for k, v in args.items() if v is not None}
    with pytest.raises(InputError) as e:
        run_case(make_case(**args))
    assert e.value.field == field


# ---- sequence parallelism ------------------------------------------------------------------


def test_sequence_parallel_needs_tensor_parallelism() -> None:
    with pytest.raises(InputError) as e:
        make_case(**SMALL, sequence_parallel=True)
    assert e.value.field == "sequence_parallel"


def test_sequence_parallel_replaces_all_reduces_and_shards_the_norms(gpt2) -> None:
    plain = run_case(make_case(**SMALL, tp=4))
    sp = run_case(make_case(**SMALL, tp=4, sequence_parallel=True))
    assert [c["kind"] for c in plain["communication"]] == ["all-reduce"]
    kinds = {c["kind"]: c for c in sp["communication"]}
    assert set(kinds) == {"all-gather", "reduce-scatter"}
    L = gpt2.n_layers
    # forward 2 gathers and 2 scatters a layer; backward their mirror and the 2 re-gathers
    assert kinds["all-gather"]["count"] == 6 * L + 1 + 1 and kinds["reduce-scatter"]["count"] == 4 * L + 1 + 1
    # the same bytes on the wire as the all-reduces, but for the re-gathers and the head's pair
    ar = plain["communication"][0]
    assert kinds["reduce-scatter"]["bytes"] == ar["bytes"]
    norms = {k["name"]: k for k in sp["kernels"]}
    base = {k["name"]: k for k in plain["kernels"]}
    assert norms["ln1"]["flops"] * 4 == base["ln1"]["flops"]
    assert sp["ledger"]["activations"] < plain["ledger"]["activations"]
    assert sp["stages"][0]["shards"]["norm_tokens"] == 128 // 4


# ---- the options ---------------------------------------------------------------------------


def test_options_default_and_parse_as_the_issue_names_them() -> None:
    assert {k: BY_NAME[k].default for k in ("cp", "cp_kind", "sequence_parallel", "interleave")} == \
        {"cp": 1, "cp_kind": "ring", "sequence_parallel": False, "interleave": 1}
    assert BY_NAME["sequence_parallel"].field.type == "bool"
    with pytest.raises(InputError) as e:
        make_case(**SMALL, tp=2, sequence_parallel="maybe")
    assert e.value.field == "sequence_parallel"
    with pytest.raises(InputError) as e:
        make_case(**SMALL, cp=2, cp_kind="tree")
    assert e.value.field == "cp_kind"


def test_sequence_parallel_is_a_flag_on_inspect_and_a_list_on_sweep() -> None:
    one = argparse.ArgumentParser()
    add_case_arguments(one)
    assert given_options(one.parse_args(["--sequence-parallel"]))["sequence_parallel"] == "on"
    assert make_case(**SMALL, tp=2, sequence_parallel="on").sequence_parallel is True
    lists = argparse.ArgumentParser()
    add_case_arguments(lists, lists=True)
    got = option_lists(lists.parse_args(["--sequence-parallel", "on,off", "--cp-kind", "ring,ulysses",
                                         "--interleave", "1,2", "--cp", "1,2"]))
    assert got == {"sequence_parallel": [True, False], "cp": [1, 2], "cp_kind": ["ring", "ulysses"],
                   "interleave": [1, 2]}


def test_the_json_parallel_group_names_every_degree() -> None:
    r = run_case(make_case(**FLASH, tp=2, cp=2, sequence_parallel=True))
    assert r["parallel"] == {"dp": 1, "tp": 2, "pp": 1, "ep": 1, "zero": 0, "cp": 2, "cp_kind": "ring",
                             "sequence_parallel": True, "interleave": 1}
    assert r["devices"] == 4
