"""ZeRO-3 and FSDP as they run (issue 26, item 4): the gathers a framework issues per
module, how far ahead it prefetches them, what they can hide behind, and that the shipped
DeepSpeed and FSDP files state the policies their code and docs give."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from memwall.errors import InputError
from memwall.frameworks import IDEAL_SHARDING, Sharding, load_framework, load_framework_file
from memwall.networks import load_network
from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.timing import Unit, _copy_figures, time_communication, zero3_replay, zero3_units
from memwall.workloads.config import TrainingConfig
from memwall.workloads.parallel import Comm, Parallel, communication, stages
from memwall.workloads.step import build_step

GPT2_LAYER = (768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768)


def _calls(units: list[Unit]) -> int:
    return sum(u.calls for u in units)


def _one(e: int) -> float:
    return 1e-3 if e else 0.0


# ---- the gathers a framework issues ---------------------------------------------------


def test_gather_calls_follow_the_modules_and_the_persistence_threshold() -> None:
    deepspeed, fsdp = load_framework("deepspeed").sharding, load_framework("fsdp").sharding
    layers = 12
    first = zero3_units(GPT2_LAYER, layers, 0, deepspeed, _one, _one, 1.0, 2.0, first=True)
    later = zero3_units(GPT2_LAYER, layers, 0, deepspeed, _one, _one, 1.0, 2.0, first=False)
    large = sum(1 for e in GPT2_LAYER if e >= deepspeed.persist_below)  # the four products' weights
    assert large == 4
    # DeepSpeed: one call a parameter; the small ones (norms, biases) only in the step's first forward
    assert _calls(first[0]) == layers * len(GPT2_LAYER)
    assert _calls(later[0]) == layers * large
    # no recomputation: each large parameter once more in the backward (the model is too small
    # for max_reuse to release the last layers, which stay gathered since their forward)
    kept = sum(1 for p in range(layers) if 2 * p * sum(GPT2_LAYER) < deepspeed.max_reuse)
    assert _calls(later[1]) == (layers - kept) * large
    # and one reduce-scatter a parameter
    assert sum(u.reduce_calls for u in later[1]) == layers * len(GPT2_LAYER)
    # FSDP: one flat all-gather a unit (layer) and pass, one reduce-scatter a unit
    f = zero3_units(GPT2_LAYER, layers, 0, fsdp, _one, _one, 1.0, 2.0)
    assert (_calls(f[0]), _calls(f[1]), sum(u.reduce_calls for u in f[1])) == (layers, layers, layers)


def test_a_recomputed_forward_gathers_again_and_so_do_modules_past_the_reuse_distance() -> None:
    policy = replace(load_framework("deepspeed").sharding, max_reuse=2 * 1000)
    tensors, layers = (1000, 1000, 1000), 4
    fwd, bwd = zero3_units(tensors, layers, 0, replace(policy, persist_below=0), _one, _one, 1.0, 3.0,
                           recompute_seconds=1.0, first=False)
    # per layer, backward: 3 recomputed + the 2 modules whose reuse distance (2 x the modules after
    # them) reaches max_reuse; the layer run first in the backward stays gathered from its forward
    assert _calls(fwd) == layers * 3
    assert _calls(bwd) == 2 + (layers - 1) * (3 + 2)
    assert sum(u.compute for u in fwd) == pytest.approx(1.0)
    assert sum(u.compute for u in bwd) == pytest.approx(3.0)
    # block:N re-runs the first N layers only (the backward's last): the others gather once more
    # unless kept, as without recomputation, and the recompute's second spread over the re-run one
    args = (tensors, layers, 0, replace(policy, persist_below=0), _one, _one, 1.0, 3.0)
    _, one = zero3_units(*args, recompute_seconds=1.0, first=False, recomputed=1)
    assert _calls(one) == 0 + 3 + 3 + (3 + 2)
    assert sum(u.compute for u in one) == pytest.approx(3.0)
    assert zero3_units(*args, recompute_seconds=1.0, first=False, recomputed=layers) == (fwd, bwd)
    # a recompute of no whole layer (selective: the attention core, no parameters) gathers
    # nothing again, and its second is not lost
    _, none = zero3_units(*args, recompute_seconds=1.0, first=False, recomputed=0)
    _, plain = zero3_units(*args, recompute_seconds=0.0, first=False)
    assert _calls(none) == _calls(plain) and sum(u.compute for u in none) == pytest.approx(3.0)


# ---- how far ahead, and what it hides behind --------------------------------------------


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_prefetch_depth_of_d_hides_at_most_d_modules_compute(depth: int) -> None:
    c, big = 1.0, 5.0
    units = [Unit(0, 0, 0.0, c) for _ in range(8)]
    units[6] = Unit(10, 1, big, c)  # one large gather among modules with nothing to gather
    policy = Sharding(prefetch_depth=depth)
    exposed, _ = zero3_replay(units, [], policy)
    assert exposed == pytest.approx(max(0.0, big - depth * c))
    assert zero3_replay(units, [], Sharding(prefetch_depth=6))[0] == pytest.approx(0.0)


@pytest.mark.parametrize("k", [1, 3])
def test_deepspeed_prefetches_a_bucket_and_waits_for_all_but_its_last_gather(k: int) -> None:
    # DeepSpeed 2021: a prefetch of k parameters after each wait, each issued after a device
    # synchronisation, so only the last of them overlaps the kernels
    g, c, elements = 0.5, 1.0, 1000
    units = [Unit(elements, 1, g, c) for _ in range(7)]
    policy = Sharding(gather="parameter", prefetch_bucket=k * elements, synchronize=True)
    # unit 0 waits for its own gather; the prefetches after the waits at units 0 and 1 cover
    # units 1-3 and 4-6 (k = 3), each exposing its first k - 1 gathers; g < c hides the rest
    waits_with_a_bucket = math.ceil((len(units) - 1) / k) if k > 1 else 0
    exposed, _ = zero3_replay(units, [], policy)
    assert exposed == pytest.approx(g + waits_with_a_bucket * (k - 1) * g)


def test_serialized_gathers_wait_behind_the_reduce_scatters() -> None:
    # backward units: each gather of the next unit and this unit's reduce-scatter share one stream
    g, r, c = 0.4, 0.4, 0.5
    fwd = [Unit(10, 1, g, c) for _ in range(4)]
    bwd = [Unit(10, 1, g, c, 10, 1, r) for _ in range(4)]
    apart = zero3_replay(fwd, bwd, Sharding(serialized=False))[0]
    shared = zero3_replay(fwd, bwd, Sharding(serialized=True))[0]
    assert shared > apart
    # a unit's gather and reduce-scatter (0.8 s) behind its compute (0.5 s): 0.3 s a unit shows
    assert shared >= 3 * (g + r - c)


def test_a_synchronised_gathers_host_launch_is_waited_out_by_the_device() -> None:
    # no prefetch (a bucket of one element): each unit's gather is issued at its wait, after
    # the device is drained; its launch (2 ms a call) then holds the kernels back
    fwd = [Unit(10, 2, 0.001, 0.005) for _ in range(3)]
    base = Sharding(prefetch_bucket=1, synchronize=True)
    without = zero3_replay(fwd, [], base)[0]
    launched = zero3_replay(fwd, [], replace(base, launch=0.002))[0]
    # every call of every unit: 3 units x 2 calls x 2 ms on the critical path
    assert launched - without == pytest.approx(3 * 2 * 0.002)
    # without synchronize the host runs ahead of the device: its launches hide
    free = Sharding(prefetch_bucket=1, synchronize=False)
    assert zero3_replay(fwd, [], replace(free, launch=0.002))[0] == zero3_replay(fwd, [], free)[0]


# ---- the shipped policies -----------------------------------------------------------------


def test_deepspeed_and_fsdp_state_the_policies_their_code_documents() -> None:
    ds, fsdp = load_framework("deepspeed").sharding, load_framework("fsdp").sharding
    assert (ds.gather, ds.reduce, ds.persist_below, ds.prefetch_bucket, ds.reduce_bucket) == \
        ("parameter", "parameter", 100_000, 50_000_000, 500_000_000)
    assert (ds.max_live, ds.max_reuse, ds.synchronize, ds.serialized, ds.list_copies) == \
        (1_000_000_000, 1_000_000_000, True, True, True)
    assert ds.launch == pytest.approx(380e-6)  # 130 us pre-launch + 250 us launch a parameter (ds1069)
    assert (fsdp.gather, fsdp.reduce, fsdp.prefetch_depth, fsdp.prefetch_bucket) == ("unit", "unit", 1, 0)
    assert (fsdp.synchronize, fsdp.serialized, fsdp.list_copies) == (False, True, False)
    # every figure of the table carries its source
    prov = load_framework("deepspeed").provenance
    assert all(prov[f"sharding.{k}"].source for k in ("persist_below", "prefetch_bucket", "reduce_bucket"))
    # a framework without the table runs the ideal one
    assert load_framework("hand-written").sharding is IDEAL_SHARDING


def test_a_bad_sharding_value_is_one_line_naming_the_field(tmp_path) -> None:
    from pathlib import Path

    text = Path(load_framework("fsdp").path).read_text()
    path = tmp_path / "fsdp.toml"
    path.write_text(text.replace('gather = "unit"', 'gather = "tensor"'))
    with pytest.raises(InputError) as err:
        load_framework_file(path)
    assert "sharding.gather" in str(err.value) and "\n" not in str(err.value)


# ---- ZeRO-3 as run is slower than the gathers at the links' rate behind the whole micro-batch


def _zero3_comms(dp: int) -> tuple[list[Comm], list[Comm], int]:
    net = load_network("gpt2-small")
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16", optimizer="adam", checkpoint="every:1")
    step = build_step(net, cfg)
    st = stages(net, 1)[0]
    new = communication(net, cfg, Parallel(dp=dp, zero=3), st, step.ledger, 128)
    grads, weights = step.ledger.gradients, step.ledger.weights
    old = [Comm("dp: gradient reduce-scatter", "reduce-scatter", dp, 1, grads, 1, "step", "backward"),
           Comm("dp: zero-3 weights all-gather", "all-gather", dp, 1, -(-weights // net.n_layers),
                2 * net.n_layers, "micro", "compute")]
    return new, old, net.n_layers


def test_zero3_as_deepspeed_ran_it_is_slower_than_before_on_the_table2_shape() -> None:
    # Narayanan et al.'s ZeRO-3 rows: every GPU a data-parallel replica, one micro-batch a step,
    # full recomputation; a small network keeps the test fast
    machine = load_machine("a100-sxm")
    ds = load_framework("deepspeed")
    new, old, _ = _zero3_comms(384)
    kw = {"micro_batches": 1, "micro_seconds": 0.02, "backward_seconds": 0.015, "base": ds.collective_base}
    before = sum(c.exposed for c in time_communication(machine.interconnect, old, **kw))
    after = sum(c.exposed for c in time_communication(machine.interconnect, new, sharding=ds.sharding,
                                                     copy=_copy_figures(machine), recompute_seconds=0.005,
                                                     **kw))
    assert after > before
    # the list form's copies: 384 of them a call, at the A100's eager device gap each
    timed = {c.kind: c for c in time_communication(machine.interconnect, new, sharding=ds.sharding,
                                                   copy=_copy_figures(machine), recompute_seconds=0.005, **kw)}
    bare = {c.kind: c for c in time_communication(machine.interconnect, new, sharding=replace(
        ds.sharding, list_copies=False), copy=_copy_figures(machine), recompute_seconds=0.005, **kw)}
    gap = machine.dispatch.mode("eager").device_gap
    gather = timed["all-gather"]
    assert gather.seconds - bare["all-gather"].seconds == pytest.approx(gather.count * 384 * gap, rel=0.05)


def test_deepspeed_runs_zero3_slower_than_fsdp_and_fsdp_than_the_ideal() -> None:
    case = Case(machine="a100-sxm", network="gpt2-small", batch=1, seq_len=128, optimizer="adam", dp=64, zero=3,
                checkpoint="every:1")
    seconds = {fw: run_case(replace(case, framework=fw))["seconds"] for fw in ("deepspeed", "fsdp", "hand-written")}
    assert seconds["deepspeed"] > seconds["fsdp"] >= seconds["hand-written"]


def test_zero1_is_not_timed_by_the_sharding_policy() -> None:
    # Megatron's distributed optimizer (ZeRO-1) reduce-scatters and gathers once a step: the
    # ZeRO-3 policy of any framework leaves it as it was
    machine = load_machine("a100-sxm")
    net = load_network("gpt2-small")
    cfg = TrainingConfig(batch=1, seq_len=128, dtype="bf16", optimizer="adam")
    comms = communication(net, cfg, Parallel(dp=64, zero=1), stages(net, 1)[0], build_step(net, cfg).ledger, 128)
    kw = {"micro_batches": 4, "micro_seconds": 0.02, "backward_seconds": 0.015, "base": 8.4e-6}
    plain = time_communication(machine.interconnect, comms, **kw)
    for fw in ("deepspeed", "fsdp"):
        assert time_communication(machine.interconnect, comms, sharding=load_framework(fw).sharding,
                                  copy=_copy_figures(machine), **kw) == plain
