"""One case end to end (memwall inspect): the contract of its result and the model's invariants."""

from __future__ import annotations

import dataclasses
import json

import pytest

import memwall.simulation.plan as planning
import memwall.simulation.replay as replaying
from memwall.cli import main
from memwall.errors import InputError
from memwall.levels import LevelSpec
from memwall.profiles import MainMemory, load_machine
from memwall.simulation import Case, build_case_step, plan_replay, replay_step, run_case
from memwall.streams import Access, LoopNest

KEYS = ("machine", "network", "batch", "flops", "seconds", "stall_fraction", "fraction_of_peak",
        "achieved_flops", "cups", "cycles", "bytes", "kernels")


def _check_breakdown(part: dict) -> None:
    cycles = part["cycles"]
    assert set(cycles) >= {"total", "compute", "overhead", "stall"}
    stall = sum(cycles["stall"].values())
    assert cycles["total"] == pytest.approx(cycles["compute"] + cycles["overhead"] + stall, rel=1e-9)
    assert all(v >= 0 for v in cycles["stall"].values())


@pytest.mark.parametrize("machine, network, batch, updates", [
    ("vax-11-780", "nettalk", 2, "per-example"),
    ("cray-1", "nettalk", 1, "per-example"),
    ("skylake-sp", "sonar", 8, "minibatch"),
    ("a100-sxm", "encoder-8-3-8", 4, "minibatch"),
])
def test_result_has_the_contract_keys_and_its_breakdown_sums(machine, network, batch, updates):
    r = run_case(Case(machine=machine, network=network, batch=batch, updates=updates))
    for key in KEYS:
        assert key in r
    _check_breakdown(r)
    assert r["stall_fraction"] == pytest.approx(sum(r["cycles"]["stall"].values()) / r["cycles"]["total"])
    assert r["seconds"] * load_machine(machine).clock_hz == pytest.approx(r["cycles"]["total"])
    assert set(r["bytes"]) == set(r["cycles"]["stall"])
    for k in r["kernels"]:
        for key in ("name", "flops", "seconds", "stall_fraction", "fraction_of_peak", "achieved_flops",
                    "cycles", "bytes", "bound"):
            assert key in k
        _check_breakdown(k)
    assert sum(k["seconds"] for k in r["kernels"]) == pytest.approx(r["seconds"])
    assert sum(k["flops"] for k in r["kernels"]) == r["flops"]
    assert r["cups"] == pytest.approx(r["ledger"]["weights"] * 0 + _connections(network) * batch / r["seconds"])


def _connections(network: str) -> int:
    from memwall.networks import load_network

    return load_network(network).connections


def test_affine_stack_on_an_accelerator_shows_both_regimes():
    small = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=1))
    large = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=16384))
    assert small["bound_class"] in ("memory", "dispatch") and small["fraction_of_peak"] < 0.01
    # Not 0.8 of peak: the weight-gradient product (1024 x 1024 out) has 32 output tiles
    # and keeps 32 of the 132 SMs busy (waves; no split-K is modelled).
    assert large["bound_class"] == "compute" and large["fraction_of_peak"] > 0.4
    assert large["stall_fraction"] < 0.05 < small["stall_fraction"]


@pytest.mark.parametrize("machine, network", [
    ("vax-11-780-fpa", "nettalk"), ("cray-x-mp", "nettalk"), ("h100-sxm", "nettalk"), ("skylake-sp", "sonar"),
])
def test_per_example_is_never_faster_than_the_same_work_batched(machine, network):
    per = run_case(Case(machine=machine, network=network, batch=8, updates="per-example"))
    mini = run_case(Case(machine=machine, network=network, batch=8, updates="minibatch"))
    assert per["flops"] >= mini["flops"] * 0.99
    assert per["seconds"] >= mini["seconds"] * (1 - 1e-9)


def _scaled_memory(machine, factor):
    mem = machine.memory
    return dataclasses.replace(machine, memory=MainMemory(mem.capacity, mem.latency / factor, mem.bandwidth * factor))


@pytest.mark.parametrize("machine, network, batch", [
    ("vax-11-780", "nettalk", 1), ("cray-1", "nettalk", 1), ("skylake-sp", "lecun-1989", 4),
    ("a100-sxm", "gpt2-small", 1),
])
def test_more_bandwidth_and_less_latency_are_never_slower(machine, network, batch):
    base = load_machine(machine)
    case = Case(machine=machine, network=network, batch=batch, seq_len=64 if network == "gpt2-small" else None)
    times = [run_case(case, machine=_scaled_memory(base, f))["seconds"] for f in (0.25, 1, 4, 64)]
    assert all(later <= earlier * (1 + 1e-9) for earlier, later in zip(times, times[1:], strict=False))


def _bigger_caches(machine, factor):
    levels = tuple(
        lv if lv.software_managed else dataclasses.replace(lv, size=lv.size * factor) for lv in machine.levels
    )
    return dataclasses.replace(machine, levels=levels)


@pytest.mark.parametrize("machine, network, batch", [
    ("vax-8600", "nettalk", 1), ("skylake-sp", "lecun-1989", 8), ("v100-sxm2", "gpt2-small", 1),
])
def test_more_cache_never_increases_main_memory_traffic(machine, network, batch):
    base = load_machine(machine)
    assert all(lv.policy == "lru" for lv in base.cache_levels)
    case = Case(machine=machine, network=network, batch=batch, seq_len=32 if network == "gpt2-small" else None)
    traffic = [run_case(case, machine=_bigger_caches(base, f), exact=True)["bytes"]["memory"] for f in (1, 2, 8)]
    assert traffic[0] >= traffic[1] >= traffic[2]


@pytest.mark.parametrize("machine, network, batch", [
    ("a100-sxm", "gpt2-small", 1), ("v100-sxm2", "bert-large", 1), ("h100-sxm", "gpt2-xl", 1),
])
def test_sampled_replay_agrees_with_the_exact_one(monkeypatch, machine, network, batch):
    case = Case(machine=machine, network=network, batch=batch)
    exact = run_case(case, exact=True)
    # a budget ten times tighter than the default, so that these steps are sampled, and the
    # floor's least lookups halved (the GPUs' floor, two spans of their caches, is kept)
    monkeypatch.setattr(planning, "STEP_BUDGET", planning.STEP_BUDGET // 10)
    monkeypatch.setattr(planning, "SAMPLE_FLOOR", planning.SAMPLE_FLOOR // 2)
    sampled = run_case(case)
    assert sampled["seconds"] != exact["seconds"], "the budget did not make the step sample"
    assert sampled["seconds"] == pytest.approx(exact["seconds"], rel=0.03)
    assert sampled["bytes"]["memory"] == pytest.approx(exact["bytes"]["memory"], rel=0.05)


def _family_network(tmp_path, family: str) -> str:
    """A shipped preset of the family, cut down so that its exact replay takes seconds."""
    from memwall.data import era_data_dir

    if family == "mlp":  # 8 square layers of affine-48x1024's width
        text = (era_data_dir() / "networks" / "affine-48x1024.toml").read_text()
        start = text.index("layers = [")
        end = text.index("]", start) + 1
        text = text[:start] + "layers = [" + ", ".join(["1024"] * 9) + "]" + text[end:]
        text = text.replace('id = "affine-48x1024"', 'id = "affine-8x1024"')
    elif family == "moe-transformer":  # deepseek-v3's shape at 1/7 the width, 4 layers, 16 experts
        text = (era_data_dir() / "networks" / "deepseek-v3.toml").read_text()
        for a, b in (('id = "deepseek-v3"', 'id = "moe-small"'), ("layers = 61", "layers = 4"),
                     ("d_model = 7168", "d_model = 1024"), ("heads = 128", "heads = 8"), ("d_ff = 18432", "d_ff = 2816"),
                     ("vocab = 129280", "vocab = 8192"), ("seq_len = 4096", "seq_len = 256"),
                     ("routed_experts = 256", "routed_experts = 16"), ("active_experts = 8", "active_experts = 2"),
                     ("expert_d_ff = 2048", "expert_d_ff = 512"), ("dense_layers = 3", "dense_layers = 1"),
                     ("q_lora_rank = 1536", "q_lora_rank = 256"), ("kv_lora_rank = 512", "kv_lora_rank = 128")):
            assert a in text
            text = text.replace(a, b)
    else:
        return {"conv": "resnet-50", "transformer": "gpt2-small"}[family]
    path = tmp_path / f"{family}.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("family, machine, batch", [
    ("mlp", "sun-4-260", 1), ("conv", "v100-sxm2", 8), ("transformer", "a100-sxm", 1),
    ("moe-transformer", "a100-sxm", 8),
])
def test_sampling_is_held_to_account_in_every_family(tmp_path, monkeypatch, family, machine, batch):
    """A sampled step of each family of presets against its exact replay: within 1 % in time
    and in main-memory bytes (issue 16, item 4)."""
    from memwall.profiles import load_machine
    from memwall.simulation import build_case_step, plan_replay

    case = Case(machine=machine, network=_family_network(tmp_path, family), batch=batch)
    exact = run_case(case, exact=True)
    # a budget ten times tighter than the default, so that these small steps are sampled, and
    # the floor's least lookups halved (the GPUs' floor, two spans of their caches, is kept)
    monkeypatch.setattr(planning, "STEP_BUDGET", planning.STEP_BUDGET // 10)
    monkeypatch.setattr(planning, "SAMPLE_FLOOR", planning.SAMPLE_FLOOR // 2)
    plan = plan_replay(load_machine(machine), build_case_step(case))
    assert any(scale != 1.0 for row in plan.replays for _, _, scale in row), "the budget did not make it sample"
    sampled = run_case(case)
    assert sampled["seconds"] == pytest.approx(exact["seconds"], rel=0.01)
    # Bytes within 1.5 %: on the MLP on the Sun-4/260 the sampled forward products read 5 % more
    # and the weight gradients 7 % less than their exact replays (each sample's window sees
    # the nest's steady state, the whole nest also its first iterations); the input
    # gradients, which averaged some of that out, are now replayed whole (the BLAS-order
    # lowering zeroes their output outside the loops, which no sample can hold), and the
    # step lands 1.2 % low.
    assert sampled["bytes"]["memory"] == pytest.approx(exact["bytes"]["memory"], rel=0.015)


def test_a_network_that_does_not_fit_is_simulated_with_a_warning(capsys):
    code = main(["inspect", "--machine", "vax-11-780", "--network", "gpt2-small", "--seq-len", "8",
                 "--phase", "forward", "--json"])
    out = capsys.readouterr()
    assert code == 0
    r = json.loads(out.out)
    assert not r["capacity"]["fits"] and r["ledger"]["peak"] > r["capacity"]["memory"]
    assert "warning" in out.err and "vax-11-780" in out.err
    assert r["seconds"] > 0


def test_inspect_prints_a_breakdown_and_a_verdict(capsys):
    assert main(["inspect", "--machine", "cray-1", "--network", "nettalk", "--updates", "per-example"]) == 0
    text = capsys.readouterr().out
    assert "verdict:" in text and "L1.fwd" in text and "memory" in text


def _exit_code(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as done:  # argparse's own refusals
        return int(done.code)


@pytest.mark.parametrize("args, words", [
    (["--machine", "no-such-machine", "--network", "nettalk"], "no-such-machine"),
    (["--machine", "cray-1", "--network", "no-such-net"], "no-such-net"),
    (["--machine", "cray-1", "--network", "nettalk", "--batch", "0"], "batch"),
    (["--machine", "cray-1", "--gemm", "4,0,2"], "--gemm"),
])
def test_bad_arguments_are_named(capsys, args, words):
    assert _exit_code(["inspect", *args]) == 2
    assert words in capsys.readouterr().err


def test_gemm_and_forward_flops_match_closed_forms():
    r = run_case(Case(machine="v100-sxm2", gemm=(512, 64, 256), dtype="fp16"))
    assert r["flops"] == 2 * 512 * 64 * 256
    assert r["phase"] == "forward" and r["cups"] == 0  # a product trains nothing
    train = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=4))
    forward = run_case(Case(machine="h100-sxm", network="affine-48x1024", batch=4, phase="forward"))
    products = lambda r: sum(k["flops"] for k in r["kernels"] if k["op"] in ("gemm", "gemv"))  # noqa: E731
    assert products(forward) * 3 == products(train)
    assert forward["cps"] > 0 and forward["cups"] == 0


def test_same_inputs_give_the_same_numbers_bit_for_bit():
    a = run_case(Case(machine="skylake-sp", network="nettalk", batch=4))
    b = run_case(Case(machine="skylake-sp", network="nettalk", batch=4))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_level_bandwidth_floor_binds_on_a_synthetic_machine():
    base = load_machine("vax-11-780")
    slow = dataclasses.replace(base, levels=tuple(
        dataclasses.replace(lv, bandwidth=1e3) if isinstance(lv, LevelSpec) else lv for lv in base.levels
    ))
    r = run_case(Case(machine="vax-11-780", network="encoder-8-3-8", batch=1), machine=slow)
    assert r["bound"] == f"level.{base.cache_levels[0].name}.bandwidth" and r["bound_class"] == "memory"


# --- the cost guard and the cut replay (issue 17, item 2) ------------------------------------

def _random_nest(rng):
    from memwall.streams import Access, LoopNest

    depth = rng.randint(1, 4)
    counts = tuple(rng.choice([1, 1, 2, 3, 7, 40]) for _ in range(depth))
    accesses = []
    for _ in range(rng.randint(1, 5)):
        d = rng.randint(0, depth)
        accesses.append(Access(base=rng.randrange(0, 1 << 20), strides=tuple(rng.choice([0, 4, 8, 64, 200])
                                                                                 for _ in range(d)),
                               size=rng.choice([1, 4, 8, 64, 100]), is_write=rng.random() < 0.3,
                               after=rng.random() < 0.3, rows=rng.choice([1, 1, 3]), row_stride=96))
    return LoopNest(counts, tuple(accesses), "random")


@pytest.mark.parametrize("seed", range(40))
def test_a_cut_replay_is_the_same_accesses_in_the_same_order(seed):
    import random

    import numpy as np

    from memwall.engine import Hierarchy

    rng = random.Random(seed)
    nest = _random_nest(rng)
    limit = max(1, nest.line_lookups(64) // rng.choice([2, 5, 50]))
    pieces = list(replaying._pieces(nest, limit, 64))
    whole = nest.expand()
    cut = [p.expand() for p in pieces]
    for i in range(3):
        assert np.array_equal(whole[i], np.concatenate([c[i] for c in cut]) if cut else whole[i])
    levels = [LevelSpec(name="L1", size=1024, line=64, ways=2), LevelSpec(name="L2", size=8192, line=64, ways=4)]
    a, b = Hierarchy(levels), Hierarchy(levels)
    a.replay_nest(nest)
    for p in pieces:
        b.replay_nest(p)
    assert a.counters().as_dict() == b.counters().as_dict()


# (Sampled, a 10^6-cube product is a few tile iterations: it runs, in seconds. Exact, or a
# per-example step of 10^12 examples, it would take days.)
@pytest.mark.parametrize("machine, kw", [
    ("h100-sxm", {"gemm": (1_000_000, 1_000_000, 1_000_000), "exact": True}),
    ("vax-11-780", {"network": "nettalk", "batch": 10**12}),
    ("vax-11-780", {"gemm": (1_000_000, 1_000_000, 1_000_000), "exact": True}),
])
def test_days_of_work_are_refused_at_once_with_the_estimate(machine, kw, capsys):
    import time

    argv = ["inspect", "--machine", machine, "--no-progress"]
    if "gemm" in kw:
        argv += ["--gemm", ",".join(map(str, kw["gemm"]))]
    else:
        argv += ["--network", kw["network"], "--batch", str(kw["batch"])]
    if kw.get("exact"):
        argv.append("--exact")
    start = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - start < 1.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line lookups" in err[0] and "--max-lookups" in err[0], err


def test_a_wide_network_is_refused_and_max_lookups_is_the_limit(tmp_path, capsys):
    import time

    from memwall.data import era_data_dir

    text = (era_data_dir() / "networks" / "nettalk.toml").read_text()
    wide = tmp_path / "wide.toml"
    wide.write_text(text.replace("layers = [203, 80, 26]", "layers = [203, 1000000000, 26]")
                    .replace('id = "nettalk"', 'id = "wide"'))
    start = time.monotonic()
    assert main(["inspect", "--machine", "vax-11-780", "--network", str(wide), "--no-progress"]) == 2
    assert time.monotonic() - start < 1.0
    assert "line lookups" in capsys.readouterr().err
    # A small limit refuses a small case; the estimate is what the replay really does.
    case = Case(machine="vax-11-780", network="nettalk", batch=64)
    step = build_case_step(case)
    plan = plan_replay(load_machine("vax-11-780"), step)
    with pytest.raises(InputError, match="line lookups"):
        run_case(case, max_lookups=plan.lookups - 1)
    seen = []
    run_case(case, max_lookups=plan.lookups, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][1] == plan.lookups and seen[-1][0] == pytest.approx(plan.lookups, rel=0.05)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "nan", "inf", "ten"])
def test_max_lookups_must_be_a_whole_number(value, capsys):
    with pytest.raises(SystemExit):
        main(["inspect", "--machine", "cray-1", "--network", "nettalk", "--max-lookups", value])
    assert "whole number" in capsys.readouterr().err


@pytest.mark.parametrize("network, batch, seq_len", [("nettalk", 4, None), ("gpt2-small", 1, 16)])
def test_a_machine_without_caches_counts_what_the_engine_would(network, batch, seq_len):
    """With no cache level every access reaches memory as it is: the counts come from the
    streams, equal to the engine's replay of every access, and nothing is replayed."""
    from memwall.engine import Hierarchy

    machine = load_machine("cray-1")
    assert not machine.cache_levels
    case = Case(machine="cray-1", network=network, batch=batch, **({"seq_len": seq_len} if seq_len else {}))
    plan = plan_replay(machine, build_case_step(case))
    assert plan.lookups == 0  # no replay to cost, so none is ever refused
    counted = replay_step(machine, plan)
    engine = Hierarchy([])
    for low, counts in zip(plan.lowered, counted, strict=True):
        before = engine.counters()
        for nest in low.nests:
            engine.replay_nest(nest)
        assert engine.counters() - before == counts


def test_a_machine_without_caches_is_never_sampled():
    """A step far over the replay budget (the per-example 48-layer stack on the Cray-1) is
    counted exactly: whole numbers, and every byte the core moves reaches memory."""
    case = Case(machine="cray-1", network="affine-48x1024", batch=1, updates="per-example")
    machine = load_machine("cray-1")
    step = build_case_step(case)
    plan = plan_replay(machine, step)
    assert sum(nest.line_lookups(64) for low in plan.lowered for nest in low.nests) > planning.STEP_BUDGET
    assert all(warm is None and scale == 1.0 for row in plan.replays for warm, _, scale in row)
    counted = replay_step(machine, plan)
    assert all(isinstance(c.memory.bytes_read, int) and isinstance(c.accesses, int) for c in counted)
    for low, counts in zip(plan.lowered, counted, strict=True):
        reads, writes, nbytes, _ = replaying._demand(low)
        assert (counts.memory.reads, counts.memory.writes) == (reads, writes)
        assert counts.memory.bytes_read + counts.memory.bytes_written == nbytes


def _k_product(passes: int, chunks: int, rows: int = 64, chunk_bytes: int = 4096) -> LoopNest:
    """A product's waves as the tiled lowering builds them: ``passes`` waves, each reading
    ``chunks`` K chunks of two operands (``rows`` rows each) and storing its tile rows after."""
    a = Access(0, (rows * chunks * chunk_bytes, chunk_bytes), chunk_bytes, rows=rows, row_stride=chunks * chunk_bytes,
               tensor="A")
    b = Access(1 << 32, (0, chunk_bytes), chunk_bytes, rows=rows, row_stride=chunks * chunk_bytes, tensor="B")
    c = Access(1 << 34, (rows * 1024,), 1024, is_write=True, after=True, rows=rows, row_stride=1024, tensor="C")
    return LoopNest((passes, chunks), (a, b, c), "product")


def test_a_wave_longer_than_two_sweeps_of_the_caches_is_sampled_along_k():
    line = 128
    nest = _k_product(passes=4, chunks=32)  # a pass reads 32 x 2 x 64 x 32 = 131,072 lines
    pass_lines = nest.line_lookups(line) // 4 - 64 * 8
    # a pass under twice the span: sampled by its waves only
    assert nest._sample_inner(0, pass_lines // 2 + 1, line) is None
    parts = nest._sample_inner(0, pass_lines // 8, line)  # 4 chunks are a span
    assert parts is not None and len(parts) == 2
    (warm, counted, scale), (none, stores, stores_scale) = parts
    assert (warm.counts, counted.counts, scale) == ((1, 4), (1, 4), 4 * 32 / 4)
    assert none is None and stores.counts == (1,) and stores_scale == 4.0 and stores.write_back
    assert not any(a.is_write for a in warm.accesses + counted.accesses)  # the warm-up dirties nothing
    assert counted.accesses[0].base == 4 * 4096  # the chunks after the warm-up's
    # the sample is what the plan takes when it is the cheaper: 2 x 4 chunks and one pass's stores
    assert nest.sample_parts(1, line, span=pass_lines // 8) == parts


def test_a_product_sampled_along_k_misses_as_its_whole_replay(monkeypatch):
    """The LM head's dX on the H100 (8192 x 4096 x 128256: each wave of tiles streams 1.9 GB
    of the logits and the head's weights, 38 times the L2): sampled along K, two chunks of
    one wave warm and two counted, every level's misses and fetched bytes are the whole
    replay's; its write-backs are those of all its tile stores (the whole replay leaves
    its last wave's dirty for the next kernel to write back)."""
    from memwall.engine import Hierarchy

    machine = load_machine("h100-sxm")
    step = build_case_step(Case(machine="h100-sxm", network="llama3-8b", batch=1, seq_len=8192, dtype="bf16"))
    plan = plan_replay(machine, step)
    k = next(i for i, kernel in enumerate(step.kernels) if kernel.name == "head.dX")
    assert any(c.write_back for _, c, _ in plan.replays[k]), "head.dX was not sampled along K"
    assert plan_replay(machine, step, exact=True).lookups > plan.lookups
    counts = {}
    for label, row in (("whole", [(None, n, 1.0) for n in plan.lowered[k].nests]), ("sampled", plan.replays[k])):
        h = Hierarchy(machine.cache_levels)
        replaying.replay_kernel(h, [(None, n, 1.0) for n in plan.lowered[k - 1].nests], plan.line, None)
        counts[label] = replaying.replay_kernel(h, row, plan.line, None).levels[0]
    whole, sampled = counts["whole"], counts["sampled"]
    assert (sampled.read_misses, sampled.write_misses, sampled.bytes_in) == \
        (whole.read_misses, whole.write_misses, whole.bytes_in)
    assert whole.bytes_out <= sampled.bytes_out <= 1.1 * whole.bytes_out
