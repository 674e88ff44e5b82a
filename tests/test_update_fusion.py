"""--update-fusion fused|separate (issue 27, part 3): the 1986 codes updated each weight where
its gradient was made, W += eta . delta . x^T as one sweep over W, no gradient stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memwall
from memwall.cli import build_parser, main
from memwall.errors import InputError
from memwall.networks import load_network
from memwall.options import make_case
from memwall.study.measurements import load_measurement_file
from memwall.workloads.config import TrainingConfig
from memwall.workloads.step import build_step, declare


def _step(**config):
    return build_step(load_network("nettalk"), TrainingConfig(batch=1, updates="per-example", **config))


def test_fused_per_example_nettalk_moves_fewer_bytes_in_fewer_kernels():
    fused = memwall.run("rs6000-530", "nettalk", updates="per-example", update_fusion="fused").to_json()
    separate = memwall.run("rs6000-530", "nettalk", updates="per-example", update_fusion="separate").to_json()
    assert len(fused["kernels"]) == len(separate["kernels"]) - 4  # two weights, two biases
    assert fused["bytes"]["memory"] < separate["bytes"]["memory"]
    assert fused["bytes"]["dcache"] < separate["bytes"]["dcache"]
    assert fused["flops"] == separate["flops"]  # the same arithmetic: only the traffic differs
    assert fused["ledger"]["gradients"] == 0 < separate["ledger"]["gradients"]
    assert not any(k["phase"] == "update" for k in fused["kernels"])
    # the default with per-example updates is fused, with mini-batches separate
    default = memwall.run("rs6000-530", "nettalk", updates="per-example").to_json()
    assert default["bytes"] == fused["bytes"] and default["seconds"] == fused["seconds"]
    assert TrainingConfig(batch=4).update_fusion_mode == "separate"
    assert TrainingConfig(phase="forward").update_fusion_mode is None


def test_a_fused_update_is_one_sweep_over_the_weights_after_their_last_reader():
    step = _step(update_fusion="fused")
    names = [k.name for k in step.kernels]
    # the input gradient reads the old weights, so the fused update of L1's weights follows it
    assert names.index("L1.dW+update") == names.index("L1.dX") + 1
    k = step.kernels[names.index("L1.dW+update")]
    assert [t.name for t in k.reads] == ["L1.dz", "x0"] and [t.name for t in k.writes] == ["L1.w"]
    assert k.params["beta"] == 1  # W = W + (-eta) dz x^T: the weights read and written in the product's loops
    assert not any(t.name.startswith("grad.") for kern in step.kernels for t in (*kern.reads, *kern.writes))
    # the declared graph holds no gradient tensor at all, so nothing allocates one
    assert not any(t.cls == "gradients" for t in declare(load_network("nettalk"), step.config).tensors.values())
    from memwall.profiles import ScheduleSpec
    from memwall.workloads.lowering import lower

    by = lower(k, ScheduleSpec("scalar", {})).bytes_by_tensor()
    assert by["L1.w"] == 2 * 80 * 203 * 4  # each weight read once and written once


def test_what_cannot_fuse_keeps_its_separate_update():
    # an embedding's gradient is made row by row through views: it keeps its update kernel
    step = build_step(load_network("gpt2-small"), TrainingConfig(batch=1, seq_len=16, updates="per-example"))
    updates = {k.name for k in step.kernels if k.phase == "update"}
    assert updates == {"update.embed.tokens", "update.embed.positions"}
    assert any(k.name.endswith("+update") for k in step.kernels)


def test_the_option_round_trips_through_inspect_step_sweep_and_a_measurement_file(tmp_path: Path, capsys):
    assert main(["inspect", "--machine", "vax-11-780", "--network", "nettalk", "--updates", "per-example",
                 "--update-fusion", "separate", "--json"]) == 0
    separate = json.loads(capsys.readouterr().out)
    assert sum(k["phase"] == "update" for k in separate["kernels"]) == 4
    assert main(["step", "--network", "nettalk", "--updates", "per-example", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["update_fusion"] == "fused"

    from memwall.cli.sweep import build_cases

    args = build_parser().parse_args(["sweep", "--machines", "vax-11-780", "--networks", "nettalk",
                                      "--updates", "per-example", "--update-fusion", "fused,separate"])
    cases = build_cases(args).cases
    assert sorted(c.update_fusion for c in cases) == ["fused", "separate"]
    assert all(c.given()["update_fusion"] in ("fused", "separate") for c in cases)
    assert len({json.dumps(c.as_dict(), sort_keys=True) for c in cases}) == 2

    path = tmp_path / "m.toml"
    path.write_text('[[measurement]]\nid = "x"\nmachine = "vax-11-780"\nnetwork = "nettalk"\nbatch = 1\n'
                    'updates = "per-example"\nupdate_fusion = "separate"\nmetric = "cups"\nvalue = 5e3\n'
                    'source = "s"\nreliability = "low"\nnotes = "n"\n')
    (m,) = load_measurement_file(path)
    assert m.update_fusion == "separate" and m.options()["update_fusion"] == "separate"
    assert main(["validate", "--measurements", str(path)]) == 0


@pytest.mark.parametrize(("argv", "words"), [
    (["--network", "gpt2-small", "--phase", "decode", "--context", "8", "--update-fusion", "fused"],
     "--update-fusion does not apply to phase decode"),
    (["--network", "nettalk", "--phase", "forward", "--update-fusion", "separate"],
     "--update-fusion does not apply to phase forward"),
    (["--gemm", "64,64,64", "--update-fusion", "fused"], "--update-fusion does not apply to a single GEMM"),
    (["--network", "nettalk", "--accumulate", "2", "--update-fusion", "fused"], "no gradient to accumulate"),
    (["--network", "nettalk", "--updates", "per-example", "--dp", "2", "--update-fusion", "fused"],
     "all-reduce the gradients first"),
])
def test_where_it_does_not_apply_it_is_refused_in_one_line(argv, words, capsys):
    assert main(["inspect", "--machine", "h100-sxm", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err
    with pytest.raises(InputError):
        make_case("h100-sxm", "gpt2-small", phase="decode", context=8, update_fusion="fused")


def test_data_parallel_replicas_keep_their_gradients_by_default():
    # with dp > 1 the replicas all-reduce the gradients before the update: the default is separate there
    r = memwall.run("h100-sxm", "nettalk", updates="per-example", dp=2).to_json()
    assert sum(k["phase"] == "update" for k in r["kernels"]) == 4
    assert r["interconnect_bytes"] > 0
