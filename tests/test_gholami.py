"""Gholami's case study, simulated: the Xeon Gold 6242 profile and the BERT-Base preset
match their sources and derivations, the summed-decode approximation stays within its
stated bound of the exact sum, and the figure's data shows the decoder below both
encoders in arithmetic intensity (small lengths, so it runs in seconds)."""

from __future__ import annotations

import re

import pytest

from memwall.errors import InputError
from memwall.figures import NAMES, OPT_IN
from memwall.networks import load_network
from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.study import gholami as gh
from memwall.study.draw import write_figures

SMALL = (16, 32)


def _number(text: str) -> float:
    return float(re.match(r"[\d.]+", text).group())


def test_the_xeon_profile_matches_its_derivations():
    m = load_machine("xeon-gold-6242")
    cores, clock = m.timing.params["cores"], 2.8e9
    assert (cores, m.clock_hz) == (16, clock)
    assert m.memory.bandwidth == pytest.approx(6 * 2933e6 * 8)  # six DDR4-2933 channels, 8 B each
    assert round(m.memory.bandwidth / 1e9, 1) == 140.8
    assert m.peak_flops["fp64"] == pytest.approx(cores * clock * 32)  # 2 FMA units x 8 lanes x 2
    assert m.peak_flops["fp32"] == pytest.approx(cores * clock * 64)
    assert m.peak_flops["int8"] == pytest.approx(4 * m.peak_flops["fp32"])  # VNNI: 4 int8 products a lane
    sizes = {lv.name: lv.size for lv in m.levels}
    assert sizes == {"L1d": 32 << 10, "L2": 1 << 20, "L3": int(16 * 1.375 * (1 << 20))}
    assert [lv.shared_by for lv in m.levels] == [1, 1, 16]
    for key, fig in m.provenance.items():
        assert fig.source and fig.status in ("verified", "secondary", "estimate", "measured"), key
        assert fig.status != "estimate" or fig.derivation, f"{key}: an estimate needs its derivation"
    # Every derivation's leading factors multiply out to the figure it derives.
    assert _number(m.provenance["compute.fp32"].derivation.split(" x ")[0]) == cores


def test_bert_base_has_bertmodels_110m_parameters():
    net = load_network("bert-base")
    assert (net.n_layers, net.d_model, net.heads, net.d_ff, net.vocab, net.max_positions) == (
        12, 768, 12, 3072, 30522, 512)
    assert net.parameters == 109_482_240  # BertModel: embeddings, 12 layers and the pooler
    assert net.parameters == pytest.approx(110e6, rel=0.01)
    assert "Devlin" in net.source


def test_presets_get_the_positions_a_long_sequence_needs(capsys):
    """Longer sequences are a case option (max_positions), not an edited preset: the
    position table, and so the parameters, grow with it; a preset long enough keeps its own."""
    from memwall.cli import main
    from memwall.simulation import Case, build_case_step
    from memwall.simulation.step import case_network

    assert gh._positions(["bert-base", "gpt2-small"], 2048) == {"bert-base": 2048, "gpt2-small": 2048}
    assert gh._positions(["bert-base"], 512) == {"bert-base": None}
    longer = case_network(Case("h100-sxm", "bert-base", max_positions=2048))
    assert longer.parameters - load_network("bert-base").parameters == (2048 - 512) * 768
    with pytest.raises(InputError, match="exceeds the 512 learned positions"):
        build_case_step(Case("h100-sxm", "bert-base", phase="forward", seq_len=2048))
    assert build_case_step(Case("h100-sxm", "bert-base", phase="forward", seq_len=2048, max_positions=2048)).flops
    assert main(["inspect", "--machine", "h100-sxm", "--network", "llama3-8b", "--max-positions", "9000"]) == 2
    assert "no learned position table" in capsys.readouterr().err


def test_summed_decode_is_exact_for_a_linear_cost_and_needs_its_end_points():
    steps = {c: {"flops": 3.0 + 2 * c, "bytes": 7.0 + c, "seconds": 1.0} for c in gh.gholami_contexts([64])}
    total = gh.summed_decode(steps, 64)
    assert total == {"flops": sum(3 + 2 * c for c in range(64)), "bytes": sum(7 + c for c in range(64)),
                     "seconds": 64.0}
    assert gh.gholami_contexts([16]) == [0, 7, 11, 15]
    with pytest.raises(ValueError, match="contexts 0 and 15 sampled"):
        gh.summed_decode({0: steps[0], 31: steps[31]}, 16)


@pytest.fixture(scope="module")
def runs():
    """run_case, remembered: the module's tests share their simulated steps."""
    seen: dict[Case, dict] = {}

    def run(case: Case) -> dict:
        if case not in seen:
            seen[case] = run_case(case)
        return seen[case]

    run.seen = seen
    return run


def test_the_sampled_sum_is_within_its_bound_of_the_exact_one(runs):
    length = 16
    exact = {c: gh._step_metrics(runs(Case(machine="xeon-gold-6242", network="gpt2-small", phase="decode",
                                             context=c, dtype="int8"))) for c in range(length)}
    sampled = {c: exact[c] for c in gh.gholami_contexts([length])}
    approx, full = gh.summed_decode(sampled, length), gh.summed_decode(exact, length)
    assert len(sampled) < length
    for metric in gh.GHOLAMI_METRICS:
        assert full[metric] == pytest.approx(sum(exact[c][metric] for c in range(length)))
        assert abs(approx[metric] - full[metric]) <= gh.GHOLAMI_SUM_BOUND * full[metric], metric


@pytest.fixture(scope="module")
def table(runs):
    return gh.gholami_table(lengths=SMALL, machines=("xeon-gold-6242",), decode_batch=2, run=runs)


def test_the_decoder_has_lower_intensity_than_both_encoders_at_every_length(table):
    one = [r for r in table if r["batch"] == 1]
    assert {(r["network"], r["length"]) for r in one} == {(n, L) for n, _ in gh.GHOLAMI_NETWORKS for L in SMALL}
    for length in SMALL:
        at = {r["network"]: r for r in one if r["length"] == length}
        assert at["gpt2-small"]["intensity"] < min(at["bert-base"]["intensity"], at["bert-large"]["intensity"])
        assert at["gpt2-small"]["latency_norm"] > at["bert-base"]["latency_norm"]
    # Generating twice the tokens costs about twice the steps; the encoders' pass grows less.
    growth = {s["network"]: s["latency_growth"] for s in gh.gholami_summary(table) if s["what"] == "latency growth"}
    assert growth["gpt2-small"] > max(growth["bert-base"], growth["bert-large"])
    # Batched decode shares the weight reads: more FLOPs per byte than one sequence.
    dec = {(r["batch"], r["length"]): r for r in table if r["network"] == "gpt2-small"}
    assert all(dec[(2, L)]["intensity"] > dec[(1, L)]["intensity"] for L in SMALL)
    base = next(r for r in one if r["network"] == "bert-base" and r["length"] == SMALL[0])
    assert base["latency_norm"] == 1.0


def test_the_figure_is_written_with_its_data_and_reused(tmp_path, pyplot, runs):
    options = {"lengths": SMALL, "machines": ("xeon-gold-6242",), "decode_batch": 2, "run": runs}
    written = write_figures(tmp_path, [], only=["gholami"], gholami=options)
    png, svg = written["gholami"]
    assert png.stat().st_size > 20000 and "No data for this figure" not in svg.read_text()
    assert (tmp_path / "figures" / "gholami.csv").read_text().count("\n") == 1 + 3 * len(SMALL) + len(SMALL)
    assert "intensity_ratio" in (tmp_path / "figures" / "gholami-summary.csv").read_text()
    png.write_bytes(b"marker")
    calls = len(runs.seen)

    def refuse(case):
        raise AssertionError(f"unchanged inputs were simulated again: {case}")

    write_figures(tmp_path, [], only=["gholami"], gholami={**options, "run": refuse})
    assert png.read_bytes() == b"marker" and len(runs.seen) == calls
    # opt-in: a sweep's figures (NAMES, drawn when ``only`` is not given) leave it out
    assert "gholami" in OPT_IN and "gholami" not in NAMES
