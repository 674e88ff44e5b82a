"""Steps on many devices: the shards, the stages, ZeRO's ledger, the communication a device
waits for, the bubble, and that one device is exactly the step memwall always ran."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from memwall.errors import InputError
from memwall.interconnect import zero_bytes_per_parameter
from memwall.networks import load_network
from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.workloads.config import TrainingConfig
from memwall.workloads.parallel import Parallel, communication, shard, shard_ledger, stages
from memwall.workloads.step import build_step

DATA = Path(__file__).parent / "data"
SMALL = {"machine": "h100-sxm", "network": "gpt2-small", "batch": 1, "seq_len": 128, "optimizer": "adam"}


@pytest.fixture(scope="module")
def gpt2():
    return load_network("gpt2-small")


# ---- one device is today's step ---------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_one_device_reproduces_the_numbers_from_before_devices_existed(index: int) -> None:
    golden = json.loads((DATA / "single_device_before_parallel.json").read_text())["cases"][index]
    r = run_case(Case(**golden["case"], dp=1, tp=1, pp=1, ep=1, zero=0))
    assert r["seconds"] == golden["seconds"]
    assert r["flops"] == golden["flops"]
    assert r["bytes"] == golden["bytes"]
    assert r["ledger"] == golden["ledger"]
    # the golden's "bound" was the largest component (a label the binding-resource rule replaced)
    assert max(r["time_by_component"], key=r["time_by_component"].get) == golden["bound"]
    assert {k: v for k, v in r["time_by_component"].items() if k in golden["time_by_component"]} == \
        golden["time_by_component"]
    assert r["time_by_component"]["interconnect"] == r["time_by_component"]["bubble"] == 0.0
    assert (r["devices"], r["parallel"], r["interconnect_bytes"]) == (1, Parallel().as_dict(), 0)


def test_zero_on_one_device_changes_nothing() -> None:
    a, b = run_case(Case(**SMALL)), run_case(Case(**SMALL, zero=3))
    assert a["seconds"] == b["seconds"] and a["ledger"] == b["ledger"]


# ---- shards and stages ------------------------------------------------------------------


def test_tensor_parallel_splits_heads_mlp_and_vocabulary(gpt2) -> None:
    s = shard(gpt2, Parallel(tp=4))
    assert (s.heads, s.d_ff, s.vocab, s.d_model) == (gpt2.heads // 4, gpt2.d_ff // 4, -(-gpt2.vocab // 4),
                                                     gpt2.d_model)
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16")
    dims = {k.name: k.dims for k in build_step(s, cfg).kernels if k.dims}
    full = {k.name: k.dims for k in build_step(gpt2, cfg).kernels if k.dims}
    fwd = [n for n in full if "wqkv" in n and "fwd" in n][0]
    # column parallel: N / tp; row parallel (wo): K / tp
    assert dims[fwd][1] == full[fwd][1] // 4 and dims[fwd][2] == full[fwd][2]
    wo = [n for n in full if n.startswith("wo") and "fwd" in n][0]
    assert dims[wo][2] == full[wo][2] // 4 and dims[wo][1] == full[wo][1]


def test_tensor_parallel_that_does_not_divide_the_heads_is_refused(gpt2) -> None:
    with pytest.raises(InputError) as err:
        shard(gpt2, Parallel(tp=5))
    assert err.value.field == "tp"


def test_more_devices_than_any_machine_is_refused_not_simulated() -> None:
    assert Parallel(dp=1 << 16, tp=16, pp=16).devices == 1 << 24  # the bound itself is allowed
    for degrees in ({"dp": 10 ** 12}, {"dp": 1 << 16, "tp": 16, "pp": 32}):
        with pytest.raises(InputError, match="beyond any machine") as err:
            Parallel(**degrees)
        assert err.value.field == "dp"


def test_pipeline_stages_cover_every_layer_once_and_identical_stages_are_one() -> None:
    net = load_network("gpt3-175b")
    st = stages(net, 16)
    assert [(s.embed, s.head, s.count) for s in st] == [(True, False, 1), (False, False, 14), (False, True, 1)]
    assert sum(s.layers * s.count for s in st) == net.n_layers
    assert stages(net, 1)[0].layers == net.n_layers
    with pytest.raises(InputError):
        stages(net, 97)


def test_a_middle_stage_has_neither_embedding_nor_head(gpt2) -> None:
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16")
    mid = [s for s in stages(gpt2, 4) if not s.embed and not s.head][0]
    step = build_step(shard(gpt2, Parallel(pp=4), mid), cfg, embed=False, head=False)
    names = {k.name for k in step.kernels}
    assert not any(n.startswith(("embed", "head", "loss")) for n in names)
    assert step.flops["total"] < build_step(gpt2, cfg).flops["total"] / 3


def test_expert_parallel_pools_tokens_over_fewer_experts_a_device() -> None:
    ds = load_network("deepseek-v3")
    s = shard(ds, Parallel(dp=8, ep=8))
    assert s.moe is not None and ds.moe is not None
    assert s.moe.routed_experts == ds.moe.routed_experts // 8
    with pytest.raises(InputError) as err:
        Parallel(dp=4, ep=8)
    assert err.value.field == "ep"
    with pytest.raises(InputError):
        shard(load_network("gpt2-small"), Parallel(dp=2, ep=2))


# ---- ZeRO's ledger ----------------------------------------------------------------------


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_ledger_holds_rajbhandari_bytes_per_parameter(gpt2, stage: int) -> None:
    step = build_step(gpt2, TrainingConfig(batch=1, seq_len=128, dtype="bf16", optimizer="adam"))
    led = shard_ledger(step.ledger, Parallel(dp=8, zero=stage))
    held = (led.weights + led.gradients + led.optimizer) / gpt2.parameters
    assert held == pytest.approx(zero_bytes_per_parameter(stage, 8, 2, 2, 12), rel=1e-6)
    assert led.peak == step.ledger.peak - (step.ledger.weights + step.ledger.gradients + step.ledger.optimizer
                                           - led.weights - led.gradients - led.optimizer)


# ---- communication ----------------------------------------------------------------------


def test_tensor_parallel_all_reduces_twice_a_layer_each_way(gpt2) -> None:
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16")
    st = stages(gpt2, 1)[0]
    comms = {c.name: c for c in communication(gpt2, cfg, Parallel(tp=2), st, build_step(gpt2, cfg).ledger, 128)}
    tp = comms["tp: block activations"]
    assert (tp.kind, tp.count, tp.bytes) == ("all-reduce", 4 * gpt2.n_layers + 1, 128 * gpt2.d_model * 2)
    recompute = replace(cfg, checkpoint="every:1")
    again = communication(gpt2, recompute, Parallel(tp=2), st, build_step(gpt2, cfg).ledger, 128)[0]
    assert again.count == 6 * gpt2.n_layers + 1
    # block:N re-runs the forward of the first N layers only, and their all-reduces
    block = communication(gpt2, replace(cfg, checkpoint="block:3"), Parallel(tp=2), st, build_step(gpt2, cfg).ledger,
                          128)[0]
    assert block.count == 4 * gpt2.n_layers + 2 * 3 + 1
    sp = {c.kind: c.count for c in communication(gpt2, replace(cfg, checkpoint="block:3"),
                                                 Parallel(tp=2, sequence_parallel=True), st,
                                                 build_step(gpt2, cfg).ledger, 128)}
    sp_plain = {c.kind: c.count for c in communication(gpt2, cfg, Parallel(tp=2, sequence_parallel=True), st,
                                                       build_step(gpt2, cfg).ledger, 128)}
    assert {k: sp[k] - sp_plain[k] for k in sp} == {"all-gather": 6, "reduce-scatter": 6}


def test_data_parallel_reduces_every_gradient_byte(gpt2) -> None:
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16", optimizer="adam")
    step = build_step(gpt2, cfg)
    st = stages(gpt2, 1)[0]
    kinds = {z: [(c.kind, c.bytes) for c in communication(gpt2, cfg, Parallel(dp=4, zero=z), st, step.ledger, 128)]
             for z in (0, 1, 3)}
    assert kinds[0] == [("all-reduce", step.ledger.gradients)]
    assert kinds[1] == [("reduce-scatter", step.ledger.gradients), ("all-gather", step.ledger.weights)]
    # ZeRO-3: each layer's share of the gradients and the weights, reduce-scattered each
    # micro-batch and gathered before its forward and its backward; the framework's [sharding]
    # policy times them (tests/test_zero3.py)
    layers = gpt2.n_layers
    assert kinds[3] == [("reduce-scatter", -(-step.ledger.gradients // layers)),
                        ("all-gather", -(-step.ledger.weights // layers))]
    gather = communication(gpt2, cfg, Parallel(dp=4, zero=3), st, step.ledger, 128)[1]
    assert (gather.count, gather.per, gather.overlap) == (2 * layers, "micro", "prefetch")
    # the sharding policy re-gathers only the layers whose forward checkpointing re-runs
    assert {c.recomputed for c in communication(gpt2, replace(cfg, checkpoint="block:2"), Parallel(dp=4, zero=3),
                                                st, step.ledger, 128)} == {2}
    assert gather.layers * sum(gather.tensors) + gather.extra == step.ledger.weights // gather.elem_bytes


def test_expert_gradients_are_reduced_only_over_the_replicas_that_share_them() -> None:
    from memwall.workloads.kernel import Ledger

    ds = load_network("deepseek-v3")
    assert ds.moe is not None
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16", optimizer="adam")
    st = stages(ds, 16)[1]  # a middle stage: MoE layers only
    per = sum(i * o for _, i, o in ds.mlp_matrices(ds.moe.expert_d_ff))
    grads = 10 * st.layers * per  # any ledger bigger than the experts
    ledger = Ledger(weights=grads, gradients=grads, optimizer=6 * grads, activations=0, workspace=0, input=0,
                    peak=8 * grads)
    full = {c.name: c for c in communication(ds, cfg, Parallel(dp=8, ep=8), st, ledger, 128)}
    expert = st.layers * ds.moe.routed_experts // 8 * per * 2
    assert full["dp: gradient all-reduce"].bytes == grads - expert
    assert not any("experts" in n for n in full)  # ep = dp: every expert lives on one device
    half = {c.name: c for c in communication(ds, cfg, Parallel(dp=8, ep=4), st, ledger, 128)}
    ex = half["dp/ep (experts): gradient all-reduce"]
    assert (ex.size, ex.stride, ex.bytes) == (2, 4, st.layers * ds.moe.routed_experts // 4 * per * 2)
    a2a = half["ep: token dispatch and combine"]
    assert (a2a.kind, a2a.size, a2a.count) == ("all-to-all", 4, 4 * st.layers)


# ---- the timed step ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipelined() -> dict:
    return run_case(Case(**SMALL, dp=2, tp=2, pp=2, accumulate=4))


def test_multi_device_result_carries_devices_parallel_and_ledger(pipelined: dict) -> None:
    r = pipelined
    assert r["devices"] == 8
    assert r["parallel"] == {"dp": 2, "tp": 2, "pp": 2, "ep": 1, "zero": 0, "cp": 1, "cp_kind": "ring",
                             "sequence_parallel": False, "interleave": 1}
    assert r["accumulate"] == 4 and r["fusion"] == "none"
    assert r["interconnect_bytes"] > 0
    assert {"ledger", "fits"} <= set(r["stages"][0])
    assert sum(r["time_by_component"].values()) == pytest.approx(r["seconds"])
    assert r["bound"] in r["sensitivity"] and r["bound_class"] in ("compute", "memory", "dispatch", "interconnect",
                                                                  "mixed")


def test_the_bubble_is_p_minus_1_slots_of_the_slowest_stage(pipelined: dict) -> None:
    r = pipelined
    slot = max(s["slot_seconds"] for s in r["stages"])
    assert r["time_by_component"]["bubble"] == pytest.approx((2 - 1) * slot)
    assert r["bubble_fraction"] == pytest.approx(1 / 5)


def test_more_link_bandwidth_is_never_slower() -> None:
    case = Case(**SMALL, dp=4, tp=4, accumulate=2)
    base = load_machine("h100-sxm")
    slow = run_case(case, machine=base)
    assert base.interconnect is not None
    ic = base.interconnect
    fast = replace(base, interconnect=replace(ic, node=ic.node.scaled(4), cluster=ic.cluster.scaled(4)))
    quick = run_case(case, machine=fast)
    assert quick["seconds"] < slow["seconds"]
    assert quick["time_by_component"]["interconnect"] < slow["time_by_component"]["interconnect"]
    assert quick["time_by_component"]["compute"] == slow["time_by_component"]["compute"]


def test_data_parallel_alone_keeps_each_device_kernels() -> None:
    one = run_case(Case(**SMALL))
    many = run_case(Case(**SMALL, dp=2))
    assert many["time_by_component"]["compute"] == one["time_by_component"]["compute"]
    assert many["time_by_component"]["interconnect"] > 0
    assert many["seconds"] > one["seconds"]
    assert many["flops"] == 2 * one["flops"]


def test_zero_three_shards_the_ledger_and_gathers_the_weights() -> None:
    r0 = run_case(Case(**SMALL, dp=4))
    r3 = run_case(Case(**SMALL, dp=4, zero=3))
    assert r3["ledger"]["weights"] == r0["ledger"]["weights"] // 4
    assert r3["ledger"]["optimizer"] == r0["ledger"]["optimizer"] // 4
    assert r3["ledger"]["peak"] < r0["ledger"]["peak"]
    assert any("zero-3" in c["name"] for c in r3["communication"])


# ---- refusals ---------------------------------------------------------------------------


def test_a_profile_without_links_refuses_more_than_one_device() -> None:
    with pytest.raises(InputError) as err:
        run_case(Case(machine="cray-1", network="nettalk", batch=4, dp=2))
    assert "cray-1" in str(err.value) and "[interconnect]" in str(err.value)
    assert err.value.field == "interconnect"


def test_the_cli_refuses_with_one_line_and_a_nonzero_exit(capsys) -> None:
    from memwall.cli import main

    assert main(["inspect", "--machine", "vax-11-780", "--network", "nettalk", "--tp", "2", "--dp", "2",
                 "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "vax-11-780" in err and "interconnect" in err and "Traceback" not in err


@pytest.mark.parametrize("field, kwargs", [("dp", {"dp": 0}), ("zero", {"zero": 4}), ("tp", {"tp": -1})])
def test_bad_device_counts_are_refused_naming_the_field(field: str, kwargs: dict) -> None:
    with pytest.raises(InputError) as err:
        Case(**SMALL, **kwargs)
    assert err.value.field == field


# ---- measurements on many devices -------------------------------------------------------

NET_CASE = """
[[measurement]]
id = "m"
machine = "a100-sxm"
network = "{network}"
batch = 1
tp = 8
pp = 2
dp = 4
zero = 1
metric = "flops"
value = "100 TFLOP/s"
source = "a source, table 1"
reliability = "medium"
notes = "a note"
"""


def _measurement_folder(tmp_path: Path, network: str) -> Path:
    from memwall.networks import load_network as _load

    (tmp_path / "networks").mkdir()
    (tmp_path / "networks" / "tiny.toml").write_text(Path(_load("gpt2-small").file).read_text()
                                                     .replace('id = "gpt2-small"', 'id = "tiny"'))
    path = tmp_path / "cases.toml"
    path.write_text(NET_CASE.format(network=network))
    return path


def test_measurement_network_path_is_read_relative_to_its_file(tmp_path: Path) -> None:
    from memwall.study.measurements import load_measurements
    from memwall.study.validation import case_for

    _measurement_folder(tmp_path, "networks/tiny.toml")
    (m,) = load_measurements(tmp_path)  # networks/*.toml is not read as a measurement file
    assert m.network == "networks/tiny.toml"
    assert Path(m.network_file) == (tmp_path / "networks" / "tiny.toml").resolve()
    assert (m.dp, m.tp, m.pp, m.ep, m.zero) == (4, 8, 2, 1, 1)
    case = case_for(m)
    assert (case.network, case.dp, case.tp, case.pp, case.zero) == (m.network_file, 4, 8, 2, 1)
    assert "tp=8" in m.workload and str(tmp_path) not in m.workload


@pytest.mark.parametrize("network", ["../tiny.toml", "networks/../../tiny.toml", "/etc/tiny.toml"])
def test_measurement_network_path_may_not_leave_the_folder(tmp_path: Path, network: str) -> None:
    from memwall.study.measurements import load_measurement_file

    inner = tmp_path / "inner"
    inner.mkdir()
    path = _measurement_folder(inner, network)
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    assert err.value.field == "measurement[m].network"
    assert err.value.file == str(path)


def test_measurement_network_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    from memwall.study.measurements import load_measurement_file

    inner = tmp_path / "inner"
    inner.mkdir()
    path = _measurement_folder(inner, "networks/out.toml")
    (tmp_path / "outside.toml").write_text((inner / "networks" / "tiny.toml").read_text())
    (inner / "networks" / "out.toml").symlink_to(tmp_path / "outside.toml")
    with pytest.raises(InputError, match="outside"):
        load_measurement_file(path)


def test_measurement_zero_stage_out_of_range_is_refused(tmp_path: Path) -> None:
    from memwall.study.measurements import load_measurement_file

    path = _measurement_folder(tmp_path, "networks/tiny.toml")
    path.write_text(path.read_text().replace("zero = 1", "zero = 4"))
    with pytest.raises(InputError) as err:
        load_measurement_file(path)
    assert err.value.field == "measurement[m].zero"


def test_measurement_networks_are_hashed_with_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memwall import data

    for kind in ("machines", "networks", "measurements/networks"):
        (tmp_path / kind).mkdir(parents=True)
    (tmp_path / "measurements" / "networks" / "n.toml").write_text("a = 1\n")
    monkeypatch.setattr(data, "era_data_dir", lambda: tmp_path)
    before = data.data_version()
    (tmp_path / "measurements" / "networks" / "n.toml").write_text("a = 2\n")
    assert data.data_version() != before


def test_shipped_multi_device_measurements_name_existing_networks() -> None:
    from memwall.study.measurements import load_measurements

    many = [m for m in load_measurements() if m.tp * m.pp * m.dp > 1]
    assert len(many) >= 3
    for m in many:
        assert m.network_file is not None and Path(m.network_file).is_file()
        assert load_network(m.network_file).parameters > 1e9
    # Table 1's networks count the parameters the table gives (its P, to the decimal it prints)
    for m in many:
        if m.id.startswith("narayanan-2021-table1-gpt-"):
            size = float(m.id.removeprefix("narayanan-2021-table1-gpt-").removesuffix("b-a100"))
            assert round(load_network(m.network_file).parameters / 1e9, 1) == size, m.id


def test_sweep_runs_every_combination_of_the_device_lists() -> None:
    from memwall.cli import build_parser
    from memwall.cli.sweep import build_cases

    args = build_parser().parse_args(["sweep", "--machines", "h100-sxm", "--networks", "gpt2-small",
                                      "--dp", "1,2", "--tp", "1", "2", "--zero", "0,1", "--pp", "2"])
    cases = build_cases(args).cases
    assert sorted((c.dp, c.tp, c.pp, c.zero) for c in cases) == [
        (dp, tp, 2, z) for dp in (1, 2) for tp in (1, 2) for z in (0, 1)]
    with pytest.raises(InputError) as err:
        build_cases(build_parser().parse_args(["sweep", "--machines", "h100-sxm", "--networks", "gpt2-small",
                                               "--zero", "4"]))
    assert err.value.field == "zero"


def test_inspect_prints_the_communication_beside_the_kernels(capsys) -> None:
    from memwall.cli import main

    assert main(["inspect", "--machine", "h100-sxm", "--network", "gpt2-small", "--batch", "1", "--seq-len", "128",
                 "--tp", "2", "--pp", "2", "--accumulate", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "devices: 4 (dp 1, tp 2, pp 2, ep 1, zero 0)" in out
    assert "tp: block activations" in out and "pp: activations between stages" in out
    assert "bubble" in out and "(p-1)/(m+p-1) = 0.333" in out
    assert out.index("update.") < out.index("communication")  # the kernels first, then what they send


def test_a_stage_replayed_once_per_process_equals_the_full_replay_bit_for_bit():
    # Two cases whose device steps are the same (dp changes the replicas, not a device's
    # share): the second takes the first's counters; both equal a replay from nothing.
    from memwall.simulation import replay

    a = Case(machine="a100-sxm", network="gpt2-small", batch=2, tp=2, pp=2)
    b = Case(machine="a100-sxm", network="gpt2-small", batch=2, tp=2, pp=2, dp=2)
    replay._REPLAYED.clear()
    cold = json.dumps(run_case(a), sort_keys=True)
    kept = len(replay._REPLAYED)
    assert kept >= 1
    reused = json.dumps(run_case(b), sort_keys=True)
    assert len(replay._REPLAYED) == kept  # b's stages were a's
    replay._REPLAYED.clear()
    assert json.dumps(run_case(b), sort_keys=True) == reused
    assert json.dumps(run_case(a), sort_keys=True) == cold
