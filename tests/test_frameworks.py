"""Issue 26, item 1: the software stack as a component with its own time: framework files,
--framework, --timing device|host, the framework's host time in the step and its base
latency per collective (docs/timing.md, "The framework")."""

from __future__ import annotations

import json
import textwrap

import pytest
from test_dispatch import SPEC, gpu, kernel

from memwall.cli import main
from memwall.errors import InputError
from memwall.frameworks import HAND_WRITTEN, Framework, framework_ids, load_framework, load_framework_file
from memwall.options import combine, make_case
from memwall.simulation import Case, run_case
from memwall.timing import FRAMEWORK, apply_dispatch, layer_passes, time_communication

FW = Framework("test-fw", "a test framework", operator=1e-6, layer=10e-6, step=100e-6, synchronize=20e-6,
               synchronizes=True, collective_base=8e-6)


# ---- the files --------------------------------------------------------------------------


def test_every_shipped_framework_loads_with_its_figures_sourced():
    ids = framework_ids()
    for named in ("pytorch-eager", "torch-compile", "megatron", "deepspeed", "fsdp", "jax-xla", "tensorrt-llm",
                  "vllm", "llama-cpp", "library", HAND_WRITTEN):
        assert named in ids
    for i in ids:
        f = load_framework(i)
        assert f.dispatch in (None, "eager", "graph", "compiled")
        for key, fig in f.provenance.items():
            assert fig.source and fig.status, (i, key)
        # a figure a file leaves out is named, never silently zero
        for name in ("operator", "layer", "step", "synchronize"):
            if f.id != HAND_WRITTEN and f"host.{name}" not in f.provenance:
                assert f"host.{name}" in f.unstated


def test_a_figure_without_its_status_or_a_bad_unit_is_refused_naming_file_line_and_field(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(textwrap.dedent("""\
        [framework]
        name = "mine"
        version = "1"
        dispatch = "eager"

        [host]
        step = { value = "3 us", source = "a paper" }
        """))
    with pytest.raises(InputError) as err:
        load_framework_file(path)
    assert err.value.field == "host.step" and err.value.line == 7 and "status" in err.value.reason
    path.write_text(path.read_text().replace('"3 us", source = "a paper"',
                                             '"3 parsecs", source = "a paper", status = "measured"'))
    with pytest.raises(InputError) as err:
        load_framework_file(path)
    assert err.value.field == "host.step"


def test_an_unknown_framework_is_one_line_naming_the_option(capsys):
    with pytest.raises(InputError, match="framework"):
        make_case("h100-sxm", "gpt2-small", framework="pytorch-eagre")
    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--framework", "tensorflow"]) != 0
    err = capsys.readouterr().err
    assert "framework" in err and "Traceback" not in err


# ---- the host stream ---------------------------------------------------------------------


def test_the_framework_adds_its_host_work_to_the_host_stream_and_its_synchronisation_after():
    m = gpu(dispatch=SPEC)
    n, h, g, t = 20, 7e-6, 2.5e-6, 1e-6
    ks = [kernel(m, flops=int(t * 1e12)) for _ in range(n)]
    d = apply_dispatch(m, ks, iterations=2, mode="eager", framework=FW, passes=3)
    framework_host = 2 * (n * FW.operator + 3 * FW.layer + FW.step)
    assert d.framework_host == pytest.approx(framework_host)
    assert d.host_seconds == pytest.approx(2 * n * h + framework_host)
    assert d.synchronize == pytest.approx(2 * FW.synchronize)
    step = 2 * sum(k.seconds for k in ks)
    assert step == pytest.approx(max(d.host_seconds, 2 * n * (g + t)) + 2 * FW.synchronize)
    # the excess over the device is split between dispatch and framework as H_m : H_f
    excess = d.host_seconds - d.device_seconds
    assert 2 * sum(k.framework for k in ks) == pytest.approx(excess * framework_host / d.host_seconds
                                                             + 2 * FW.synchronize)


def test_a_framework_that_does_not_synchronise_pays_it_only_when_timed_from_the_host():
    m = gpu(dispatch=SPEC)
    quiet = Framework("bench", "a benchmark loop", synchronize=20e-6, synchronizes=False)
    ks = [kernel(m, flops=10 ** 8)]
    device = apply_dispatch(m, ks, iterations=1, mode="eager", framework=quiet)
    on_device = sum(k.seconds for k in ks)
    host = apply_dispatch(m, ks, iterations=1, mode="eager", framework=quiet, timing="host")
    # a host timer around one call waits for its launch (h) and a synchronisation round trip
    assert device.synchronize == 0 and host.synchronize == pytest.approx(20e-6 + 7e-6)
    assert sum(k.seconds for k in ks) == pytest.approx(on_device + 27e-6)


def test_the_framework_picks_the_dispatch_mode_unless_the_case_says():
    m = gpu(dispatch=SPEC)
    compiled = Framework("c", "compiled", dispatch="compiled")
    assert apply_dispatch(m, [kernel(m, flops=10)], 1, framework=compiled).mode == "compiled"
    assert apply_dispatch(m, [kernel(m, flops=10)], 1, "graph", framework=compiled).mode == "graph"
    assert apply_dispatch(m, [kernel(m, flops=10)], 1).mode == "eager"  # the machine's default


def test_layer_passes_count_the_forward_and_its_recomputation_not_the_backward():
    from memwall.simulation.case import build_case_step

    plain = build_case_step(make_case("h100-sxm", "gpt2-small", seq_len=32))
    assert layer_passes(plain.kernels) == 12
    recomputed = build_case_step(make_case("h100-sxm", "gpt2-small", seq_len=32, checkpoint="every:1"))
    assert layer_passes(recomputed.kernels) == 24
    decode = build_case_step(make_case("h100-sxm", "gpt2-small", phase="decode", context=16))
    assert layer_passes(decode.kernels) == 12


# ---- cases -------------------------------------------------------------------------------


def test_a_case_runs_with_its_machines_framework_and_the_option_overrides_it():
    case = Case(machine="h100-sxm", network="gpt2-small", seq_len=32, batch=2)
    r = run_case(case)
    f = r["dispatch"]["framework"]
    assert f["id"] == "pytorch-eager" and f["layer_passes"] == 12
    assert f["host_seconds"] == pytest.approx(12 * load_framework("pytorch-eager").layer)
    bare = run_case(Case(machine="h100-sxm", network="gpt2-small", seq_len=32, batch=2, framework=HAND_WRITTEN))
    assert bare["dispatch"]["framework"]["host_seconds"] == 0
    assert bare["time_by_component"][FRAMEWORK] == 0
    # the step is host-bound here: the framework's layer work lengthens it by exactly its share,
    # and the step's closing synchronisation (loss.item()) comes on top
    assert r["seconds"] - bare["seconds"] == pytest.approx(f["host_seconds"] + f["synchronize_seconds"], rel=1e-9)
    assert r["seconds"] > bare["seconds"]


def test_a_cray_runs_hand_written_code_and_says_no_framework_line(capsys):
    r = run_case(Case(machine="cray-1", network="nettalk"))
    assert r["dispatch"]["framework"]["id"] == HAND_WRITTEN
    assert main(["inspect", "--machine", "cray-1", "--network", "nettalk"]) == 0
    assert "framework" not in capsys.readouterr().out.split("verdict")[0].split("capacity")[-1]


def test_a_host_timed_gemm_adds_a_launch_and_the_round_trip():
    # a library benchmark loop does not synchronise each call: a host timer adds both
    device = run_case(Case(machine="h100-sxm", gemm=(1024, 1024, 1024), framework="library"))
    host = run_case(Case(machine="h100-sxm", gemm=(1024, 1024, 1024), framework="library", timing="host"))
    h = load_machine_eager_issue("h100-sxm")
    y = load_framework("library").synchronize
    assert y > 0
    assert host["seconds"] - device["seconds"] == pytest.approx(h + y, rel=1e-6)
    assert host["dispatch"]["timing"] == "host"
    # a single GEMM is a benchmark loop's call under any framework: PyTorch eager's per-step
    # round trip (a training loop reading its loss) is not charged to it unless timed from the host
    device = run_case(Case(machine="h100-sxm", gemm=(1024, 1024, 1024), framework="pytorch-eager"))
    host = run_case(Case(machine="h100-sxm", gemm=(1024, 1024, 1024), framework="pytorch-eager", timing="host"))
    assert device["dispatch"]["framework"]["synchronize_seconds"] == 0
    assert host["seconds"] - device["seconds"] == pytest.approx(h + load_framework("pytorch-eager").synchronize,
                                                                rel=1e-6)


def load_machine_eager_issue(machine: str) -> float:
    from memwall.profiles import load_machine

    spec = load_machine(machine).dispatch
    assert spec is not None
    return spec.mode("eager").host_issue


def test_sweep_takes_frameworks_and_timings_as_lists():
    base = [make_case("h100-sxm", "gpt2-small", seq_len=32)]
    combined = combine(base, {"framework": ["pytorch-eager", "torch-compile"], "timing": ["device", "host"]})
    assert sorted((c.framework, c.timing) for c in combined.cases) == [
        ("pytorch-eager", "device"), ("pytorch-eager", "host"), ("torch-compile", "device"),
        ("torch-compile", "host")]


def test_inspect_json_and_text_name_the_framework_and_what_it_left_uncounted(capsys):
    args = ["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--seq-len", "32",
            "--framework", "torch-compile"]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    f = d["dispatch"]["framework"]
    assert f["id"] == "torch-compile" and d["dispatch"]["mode"] == "compiled"
    assert "host.synchronize" in f["unstated"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "framework torch-compile" in out and "unstated, counted as 0" in out


# ---- collectives --------------------------------------------------------------------------


def test_every_collective_call_pays_the_frameworks_base_latency():
    from memwall.profiles import load_machine
    from memwall.workloads.parallel import Comm

    ic = load_machine("h100-sxm").interconnect
    grads = 100 * 2**20  # 100 MiB of gradients: 4 buckets of 25 MiB
    comms = [Comm("grads", "all-reduce", 8, 1, grads, 1, "step", "after"),
             Comm("acts", "all-reduce", 8, 1, 2**20, 3, "micro", "critical")]
    plain = time_communication(ic, comms, micro_batches=2, micro_seconds=1e-3, backward_seconds=1e-3)
    based = time_communication(ic, comms, micro_batches=2, micro_seconds=1e-3, backward_seconds=1e-3, base=8e-6)
    assert based[0].seconds - plain[0].seconds == pytest.approx(8e-6)
    assert based[1].seconds - plain[1].seconds == pytest.approx(2 * 3 * 8e-6)
    bucketed = [Comm("grads", "all-reduce", 8, 1, grads, 1, "step", "backward")]
    a = time_communication(ic, bucketed, micro_batches=1, micro_seconds=1, backward_seconds=1)
    b = time_communication(ic, bucketed, micro_batches=1, micro_seconds=1, backward_seconds=1, base=8e-6)
    assert b[0].seconds - a[0].seconds == pytest.approx(4 * 8e-6)


def test_a_gradient_reduction_after_the_backward_is_one_call_and_hides_behind_nothing():
    from memwall.interconnect import Group, collective
    from memwall.profiles import load_machine
    from memwall.workloads.parallel import Comm

    ic = load_machine("a100-sxm").interconnect
    grads = 100 * 2**20  # 4 buckets of 25 MiB when issued during the backward
    comms = [Comm("grads", "all-reduce", 32, 1, grads, 1, "step", "backward")]
    kw = dict(micro_batches=4, micro_seconds=1.0, backward_seconds=0.6, base=8e-6)
    hidden = time_communication(ic, comms, **kw)[0]
    after = time_communication(ic, comms, **kw, gradients="after-backward")[0]
    whole = collective(ic, "all-reduce", Group(32, 1), grads)
    assert after.exposed == after.seconds == pytest.approx(whole + 8e-6)  # one call on the flat buffer
    assert hidden.seconds == pytest.approx(whole + 4 * 8e-6)
    assert hidden.exposed < after.exposed  # the buckets hide behind a backward longer than them


def test_megatron_2021_waits_for_its_gradients_and_megatron_core_hides_them():
    assert load_framework("megatron").gradients == "after-backward"
    assert load_framework("megatron-core").gradients == "overlapped"
    assert load_framework("pytorch-eager").gradients is None  # unstated: overlapped, DDP's buckets
    case = dict(machine="a100-sxm", network="gpt2-small", batch=1, seq_len=256, accumulate=2, dp=8)
    old = run_case(Case(**case, framework="megatron"))
    new = run_case(Case(**case, framework="megatron-core"))
    grads = [c for c in old["communication"] if "gradient" in c["name"]]
    assert grads and grads[0]["exposed"] == pytest.approx(grads[0]["seconds"])
    assert old["seconds"] > new["seconds"]


def test_a_case_says_how_its_gradients_are_reduced_over_its_frameworks_default():
    """--grad-reduce: Megatron-LM 2021 run with PyTorch DDP (the paper's reproduction script
    for its smaller models) reduces in buckets during the backward, hiding what the
    backward outlasts; the framework's own after-backward reduction hides nothing."""
    case = dict(machine="a100-sxm", network="gpt2-small", batch=1, seq_len=256, accumulate=2, dp=8,
                framework="megatron")
    after = run_case(Case(**case))
    overlapped = run_case(Case(**case, grad_reduce="overlapped"))
    assert run_case(Case(**case, grad_reduce="after-backward"))["seconds"] == after["seconds"]
    exposed = {r: sum(c["exposed"] for c in x["communication"] if "gradient" in c["name"])
               for r, x in (("after", after), ("overlapped", overlapped))}
    assert exposed["overlapped"] < exposed["after"]
    assert overlapped["seconds"] < after["seconds"]
    assert overlapped["kernels"] == after["kernels"]  # a timing option: the same step


def test_grad_reduce_is_refused_where_nothing_is_reduced_and_names_its_choices(capsys):
    assert main(["inspect", "--machine", "a100-sxm", "--network", "gpt2-small", "--phase", "decode", "--context",
                 "64", "--grad-reduce", "overlapped"]) == 2
    assert "--grad-reduce" in capsys.readouterr().err
    assert main(["inspect", "--machine", "a100-sxm", "--network", "gpt2-small", "--grad-reduce", "sometimes"]) == 2
    assert "must be one of overlapped, after-backward, got 'sometimes'" in capsys.readouterr().err


def test_updated_weights_gathered_behind_the_next_forward_hide_all_but_what_outlasts_it():
    """ZeRO 1-2's all-gather of the updated weights: waited for whole after the update by
    default; Megatron-Core's overlap_param_gather issues it in buckets that the next step's
    first forward (t_micro - T_bwd) hides, as far as it lasts."""
    from memwall.interconnect import Group, collective
    from memwall.profiles import load_machine
    from memwall.workloads.parallel import Comm

    ic = load_machine("a100-sxm").interconnect
    weights = 100 * 2**20  # 4 buckets of 25 MiB
    comms = [Comm("gather", "all-gather", 32, 1, weights, 1, "step", "after")]
    whole = collective(ic, "all-gather", Group(32, 1), weights)
    bucket = collective(ic, "all-gather", Group(32, 1), 25 * 2**20) + 8e-6
    waited = time_communication(ic, comms, micro_batches=4, micro_seconds=1.0, backward_seconds=0.6, base=8e-6)[0]
    assert waited.exposed == waited.seconds == pytest.approx(whole + 8e-6)  # one call, nothing hides it
    for forward in (1e-6, 0.4, 10.0):  # shorter than one bucket, than the gather, longer than it
        behind = time_communication(ic, comms, micro_batches=4, micro_seconds=0.6 + forward, backward_seconds=0.6,
                                    base=8e-6, weights="overlapped")[0]
        assert behind.seconds == pytest.approx(whole + 4 * 8e-6)
        assert behind.exposed == pytest.approx(max(bucket, behind.seconds - forward))
    assert load_framework("megatron-core").weight_gather == "overlapped"
    assert load_framework("deepspeed").weight_gather == "after-update"  # unstated
    case = dict(machine="a100-sxm", network="gpt2-small", batch=1, seq_len=256, accumulate=2, dp=8, zero=1)
    exposed = {f: next(c["exposed"] for c in run_case(Case(**case, framework=f))["communication"]
                       if "updated weights" in c["name"]) for f in ("megatron", "megatron-core")}
    assert exposed["megatron-core"] < exposed["megatron"]


def test_a_measurement_may_name_its_framework_and_timing(tmp_path):
    from memwall.study.measurements import load_measurement_file
    from memwall.study.validation import case_for

    path = tmp_path / "m.toml"
    path.write_text(textwrap.dedent("""\
        [[measurement]]
        id = "a"
        machine = "h100-sxm"
        gemm = "1024,1024,1024"
        dtype = "fp16"
        framework = "library"
        timing = "host"
        metric = "seconds"
        value = "0.1 ms"
        source = "test"
        reliability = "low"
        notes = "n"
        """))
    (m,) = load_measurement_file(path)
    case = case_for(m)
    assert case.framework == "library" and case.timing == "host"
    path.write_text(path.read_text().replace('timing = "host"', 'timing = "wall"'))
    with pytest.raises(InputError, match="timing"):
        load_measurement_file(path)


def test_the_framework_picks_the_attention_kernels_unless_the_case_says():
    from memwall.simulation.step import case_network

    plain = make_case("h100-sxm", "gpt2-small", phase="decode", context=16)  # gpt2-small: materialized
    assert case_network(plain).attention == "materialized"
    assert case_network(make_case("h100-sxm", "gpt2-small", phase="decode", context=16,
                                  framework="vllm")).attention == "flash"
    assert case_network(make_case("h100-sxm", "gpt2-small", phase="decode", context=16, framework="vllm",
                                  attention="materialized")).attention == "materialized"
    # a network without attention runs as it is under any framework
    assert case_network(make_case("h100-sxm", "nettalk", framework="vllm")).id == "nettalk"


def test_a_framework_whose_kernels_shape_the_step_never_shares_another_frameworks_replay():
    from memwall.options import DEVICES, STEP
    from memwall.profiles import load_machine
    from memwall.simulation.replay import replay_key

    m = load_machine("h100-sxm")
    eager = make_case("h100-sxm", "gpt2-small", phase="decode", context=16)
    vllm = make_case("h100-sxm", "gpt2-small", phase="decode", context=16, framework="vllm")
    assert vllm.key(STEP, DEVICES) != eager.key(STEP, DEVICES)
    assert replay_key(m, vllm) != replay_key(m, eager)
    # frameworks whose kernels are the same share the replay: only the host time differs
    megatron = make_case("h100-sxm", "gpt2-small", phase="decode", context=16, framework="megatron")
    assert replay_key(m, megatron) == replay_key(m, make_case("h100-sxm", "gpt2-small", phase="decode", context=16,
                                                                framework="hand-written"))


@pytest.mark.parametrize(("framework", "old", "new", "field"), [
    ("deepspeed", "prefetch_bucket = { value = 50000000", "prefetch_bucket = { value = -5", "sharding.prefetch_bucket"),
    ("deepspeed", "prefetch_bucket = { value = 50000000", "prefetch_bucket = { value = 1e300",
     "sharding.prefetch_bucket"),
    ("deepspeed", "prefetch_bucket = { value = 50000000", 'prefetch_bucket = { value = "many"',
     "sharding.prefetch_bucket"),
    ("megatron", 'gradients = "after-backward"', 'gradients = "sometimes"', "collectives.gradients"),
    ("megatron-core", 'weights = "overlapped"', 'weights = "early"', "collectives.weights"),
])
def test_a_bad_figure_or_policy_is_one_error_naming_the_field(tmp_path, framework, old, new, field):
    from memwall.data import era_data_dir

    path = tmp_path / f"{framework}.toml"
    text = (era_data_dir() / "frameworks" / f"{framework}.toml").read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        load_framework_file(path)
    assert err.value.field == field and err.value.line is not None


def test_an_absurd_dequantization_count_is_refused(tmp_path):
    from memwall.data import era_data_dir

    path = tmp_path / "torch-compile.toml"
    path.write_text((era_data_dir() / "frameworks" / "torch-compile.toml").read_text()
                    .replace("dequant_int4 = { value = 1.375", "dequant_int4 = { value = 1e300", 1))
    with pytest.raises(InputError) as err:
        load_framework_file(path)
    assert err.value.field == "kernels.dequant_int4"


def test_a_cache_length_beyond_any_address_space_names_itself():
    from memwall.simulation.step import build_case_step

    with pytest.raises(InputError) as err:
        build_case_step(make_case("h100-sxm", "gpt2-small", phase="decode", context=16, cache_length=10**20))
    assert err.value.field == "cache_length"


def test_a_step_the_frameworks_host_work_binds_says_framework_bound_with_its_numbers():
    r = run_case(Case(machine="h100-sxm", network="gpt2-small", phase="decode", context=16, framework="torch-compile"))
    d = r["dispatch"]
    assert d["host_seconds"] > d["device_seconds"] and d["framework"]["host_seconds"] > d["host_seconds"] / 2
    assert r["bound"] == r["bound_class"] == "framework"
    assert r["verdict"].startswith("framework-bound (torch-compile): its own host work (345 us)")
