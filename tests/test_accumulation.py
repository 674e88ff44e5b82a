"""Gradient accumulation, fp32 main gradients, MFU and HFU: the invariants issue 13 asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memwall.cli import main
from memwall.errors import InputError
from memwall.networks import load_network
from memwall.simulation import Case, run_case
from memwall.workloads.config import TrainingConfig
from memwall.workloads.step import build_step

DATA = Path(__file__).parent / "data" / "baseline_16bit"
SMALL_GPT = dict(network="gpt2-small", seq_len=64, optimizer="adam")


def _update_bytes(result: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in result["kernels"]:
        if k["phase"] == "update":
            for level, b in k["bytes"].items():
                out[level] = out.get(level, 0.0) + b
    return out


@pytest.mark.parametrize("args", [
    ["--network", "gpt2-small", "--optimizer", "adam"],
    ["--network", "nettalk", "--optimizer", "adam", "--dtype", "bf16"],
])
def test_accumulate_1_fusion_none_16_bit_gradients_reproduce_the_step_before_them(args, capsys):
    name = "step_gpt2-small_adam.json" if "gpt2-small" in args else "step_nettalk_adam_bf16.json"
    before = json.loads((DATA / name).read_text())
    main(["step", *args, "--accumulate", "1", "--fusion", "none", "--grad-dtype", "bf16", "--json"])
    now = json.loads(capsys.readouterr().out)
    for key in ("accumulate", "grad_dtype", "fusion", "update_fusion"):
        now["config"].pop(key)
    for key in ("model_flops", "optimizer_step", "activation_traffic"):
        now.pop(key)
    assert now == before


@pytest.mark.parametrize("case", ["2", "6"])
def test_accumulate_1_fusion_none_reproduce_the_bytes_moved_before_them(case):
    before = json.loads((DATA / "inspect_bytes.json").read_text())[case]
    a = before["args"]
    net = load_network(a[a.index("--network") + 1])
    r = run_case(Case(machine=a[a.index("--machine") + 1], network=net.id, batch=int(a[a.index("--batch") + 1]),
                      accumulate=1, fusion="none", grad_dtype=net.dtype))
    assert r["flops"] == before["flops"]
    assert r["bytes"] == before["bytes"]
    assert r["ledger"] == before["ledger"]
    assert [k["bytes"] for k in r["kernels"]] == before["kernel_bytes"]


def test_fp32_main_gradients_give_w_plus_g_with_g_four_bytes():
    net = load_network("gpt2-small")
    for k, grad, g_bytes in ((1, None, 2), (1, "fp32", 4), (4, None, 4), (4, "bf16", 2)):
        step = build_step(net, TrainingConfig(batch=1, dtype="bf16", optimizer="adam", accumulate=k, grad_dtype=grad))
        led = step.ledger
        assert led.weights == 2 * net.parameters
        assert led.gradients == g_bytes * net.parameters
        # the optimizer's state (fp32 master, m, v) does not change with the gradients' type
        assert led.optimizer == 12 * net.parameters


def test_accumulating_makes_every_gradient_kernel_read_what_it_adds_into():
    net = load_network("gpt2-small")
    step = build_step(net, TrainingConfig(batch=1, dtype="bf16", optimizer="adam", accumulate=2))
    writers = [k for k in step.kernels if k.phase == "backward" and any(w.cls == "gradients" for w in k.writes)]
    assert writers
    for k in writers:
        if k.op in ("gemm", "gemv"):
            assert k.params["beta"] == 1 and k.params["c_bytes"] == 4
        else:
            assert {w.name for w in k.writes if w.cls == "gradients"} <= {r.name for r in k.reads}


def test_accumulation_never_raises_optimizer_traffic_per_token():
    per_token = []
    for k in (1, 2, 8):
        r = run_case(Case(machine="h100-sxm", batch=1, accumulate=k, **SMALL_GPT))
        tokens = r["optimizer_step"]["tokens"]
        assert tokens == 64 * k
        per_token.append({lv: b / tokens for lv, b in _update_bytes(r).items()})
    for fewer, more in zip(per_token, per_token[1:], strict=False):
        for level, b in more.items():
            assert b <= fewer[level]
    assert per_token[-1]["memory"] < per_token[0]["memory"] / 4


def test_optimizer_step_is_k_micro_batches_and_one_update():
    # compiled and hand-written: no host stream to outrun the device, so a micro-batch's time
    # is its own (in eager mode, or under a framework's per-layer host work, a host-bound
    # step shares the host's excess over every kernel run, the update's included, and the
    # micro-batch's share then moves with K)
    results = {k: run_case(Case(machine="h100-sxm", batch=1, accumulate=k, dispatch="compiled",
                                framework="hand-written", **SMALL_GPT))
               for k in (2, 6)}
    for k, r in results.items():
        step = r["optimizer_step"]
        assert step["seconds"] == pytest.approx(k * r["micro_batch"]["seconds"] + step["optimizer_seconds"], rel=1e-12)
        assert r["seconds"] == step["seconds"]
        assert step["tokens_per_second"] == pytest.approx(k * 64 / step["seconds"])
    # the micro-batch and the update are replayed once, whatever K is
    assert results[2]["micro_batch"]["seconds"] == pytest.approx(results[6]["micro_batch"]["seconds"], rel=1e-12)
    assert results[2]["optimizer_step"]["optimizer_seconds"] == results[6]["optimizer_step"]["optimizer_seconds"]
    assert results[6]["optimizer_step"]["optimizer_share"] < results[2]["optimizer_step"]["optimizer_share"]


@pytest.mark.parametrize("checkpoint", ["none", "every:4", "selective"])
def test_mfu_at_most_hfu_and_equal_without_recomputation(checkpoint):
    r = run_case(Case(machine="a100-sxm", batch=1, checkpoint=checkpoint, accumulate=2, **SMALL_GPT))
    assert 0 < r["mfu"] <= r["hfu"] <= 1
    assert r["hfu"] == pytest.approx(r["fraction_of_peak"])
    if checkpoint == "none":
        assert r["mfu"] == r["hfu"]
    else:
        assert r["mfu"] < r["hfu"]
        recompute = sum(k["flops"] for k in r["kernels"] if k["phase"] == "recompute")
        assert r["model_flops"] == r["flops"] - recompute


@pytest.mark.parametrize("config, field", [
    (dict(accumulate=0), "accumulate"),
    (dict(accumulate=2, phase="forward"), "accumulate"),
    (dict(accumulate=2, updates="per-example"), "accumulate"),
    (dict(grad_dtype="bf16", dtype="fp32"), "grad_dtype"),
    (dict(fusion="some"), "fusion"),
])
def test_bad_accumulation_settings_are_refused_by_field(config, field):
    with pytest.raises(InputError) as err:
        TrainingConfig(**config)
    assert err.value.field == field


def test_sweep_runs_every_accumulation_and_fusion_listed():

    from memwall.cli import build_parser
    from memwall.cli.sweep import build_cases

    argv = ["sweep", "--machines", "h100-sxm", "--networks", "nettalk", "--batches", "1,4"]
    args = build_parser().parse_args([*argv, "--accumulate", "1,8", "--fusion", "none", "full"])
    cases = build_cases(args).cases
    assert len(cases) == 2 * 2 * 2
    assert {(c.batch, c.accumulate, c.fusion) for c in cases} == {
        (b, k, f) for b in (1, 4) for k in (1, 8) for f in ("none", "full")}
    with pytest.raises(InputError):
        build_cases(build_parser().parse_args([*argv, "--accumulate", "0"]))
    with pytest.raises(InputError):
        build_cases(build_parser().parse_args([*argv, "--fusion", "most"]))


def test_sweep_key_of_a_default_case_is_unchanged_by_the_new_fields():
    from memwall.simulation.row import case_key

    base = Case(machine="h100-sxm", network="nettalk")
    assert case_key(base) == case_key(Case(machine="h100-sxm", network="nettalk", accumulate=1, fusion="none"))
    assert case_key(base) != case_key(Case(machine="h100-sxm", network="nettalk", accumulate=2))


def test_a_kernel_repeated_k_times_is_replace_with_its_counts_times_k():
    """KernelTiming.repeated (what accumulated() makes of each micro-batch kernel) is the
    dataclasses.replace it stands for, and names every field: a field added to KernelTiming
    must be added there too, or it would fall back to its default."""
    from dataclasses import fields, replace

    from memwall.timing import KernelTiming

    assert [f.name for f in fields(KernelTiming)] == [
        "name", "phase", "op", "flops", "repeat", "compute", "overhead", "stall", "bytes", "terms", "dispatch",
        "framework", "dtype"], "a new KernelTiming field: carry it in KernelTiming.repeated"
    t = KernelTiming("L1.fwd", "forward", "gemm", 10, 2, 1.5, 0.25, {"L2": 0.5, "memory": 0.75}, {"L2": 7, "memory": 9},
                     terms={"L2": 0.1}, dispatch=0.01, framework=0.02, dtype="bf16")
    k = 3
    assert t.repeated(k) == replace(t, flops=30, repeat=6, compute=4.5, overhead=0.75, stall={"L2": 1.5, "memory": 2.25},
                                    bytes={"L2": 21, "memory": 27})
