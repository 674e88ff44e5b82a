"""Whole requests (``--phase generate``): a prompt prefilled, then output - 1 decode steps.

What a user relies on: a request of one output token is its prefill and one of two output
tokens its prefill plus the decode step at context P; the serving figures follow their
closed forms; the integrated decode steps stay within the stated bound of every context
simulated; the options are refused where they do not fit; measurement files take the
request's keys. Small cases only (GPT-2 small on the H100, short prompts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memwall.errors import InputError
from memwall.options import combine, make_case
from memwall.profiles import load_machine
from memwall.simulation import Case, build_case_step, run_case
from memwall.simulation.generate import (
    GENERATE_MAX_SAMPLES,
    GENERATE_SAMPLES,
    GENERATE_SUM_BOUND,
    decode_weights,
    refined_contexts,
    request_parts,
    run_generate,
    sampled_contexts,
)
from memwall.simulation.row import make_row, row_problem
from memwall.study.measurements import load_measurement_file
from memwall.study.validation import predicted_metric

MACHINE, NETWORK = "h100-sxm", "gpt2-small"


def _case(**options) -> Case:
    return make_case(MACHINE, NETWORK, **{"batch": 2, "phase": "generate", "prompt": 8, **options})


def _step(phase: str, context: int, batch: int = 2) -> dict:
    return run_case(make_case(MACHINE, NETWORK, batch=batch, phase=phase, context=context))


def test_a_request_of_one_output_token_is_its_prefill():
    request = run_case(_case(output=1))
    prefill = _step("prefill", 8)
    sv = request["serving"]
    assert request["phase"] == "generate" and sv["decode_contexts"] == []
    assert request["seconds"] == sv["request_seconds"] == sv["ttft_seconds"] == pytest.approx(prefill["seconds"])
    assert sv["tpot_seconds"] is None and sv["seconds_per_token"] is None
    assert request["flops"] == pytest.approx(prefill["flops"])
    assert request["cycles"]["total"] == pytest.approx(prefill["cycles"]["total"])
    assert request["cycles"]["stall"] == pytest.approx(prefill["cycles"]["stall"])
    assert request["bytes"] == pytest.approx(prefill["bytes"])
    assert request["energy"]["joules"] == pytest.approx(prefill["energy"]["joules"])
    assert request["energy"]["joules_by_component"] == pytest.approx(prefill["energy"]["joules_by_component"])
    assert sv["tokens_per_second"] == pytest.approx(2 / prefill["seconds"])  # one output token a request


def test_a_request_of_two_output_tokens_is_its_prefill_and_the_decode_step_at_the_prompt():
    request = run_case(_case(output=2))
    prefill, decode = _step("prefill", 8), _step("decode", 8)
    sv = request["serving"]
    assert sv["decode_contexts"] == [8] and sv["decode_weights"] == [1.0]
    assert sv["ttft_seconds"] == pytest.approx(prefill["seconds"])
    assert sv["tpot_seconds"] == pytest.approx(decode["seconds"])
    assert request["seconds"] == pytest.approx(prefill["seconds"] + decode["seconds"])
    assert request["flops"] == pytest.approx(prefill["flops"] + decode["flops"])
    assert request["bytes"]["memory"] == pytest.approx(prefill["bytes"]["memory"] + decode["bytes"]["memory"])
    assert request["energy"]["joules"] == pytest.approx(prefill["energy"]["joules"] + decode["energy"]["joules"])
    # the kernels of both, the decode step's named as such; their seconds are the request's
    names = [k["name"] for k in request["kernels"]]
    assert "prefill:embed" in names and "decode:attn.decode" in names
    assert sum(k["seconds"] for k in request["kernels"]) == pytest.approx(request["seconds"])


def test_the_serving_figures_follow_their_closed_forms():
    n = 6
    request = run_case(_case(output=n))
    sv, e = request["serving"], request["energy"]
    assert (sv["prompt"], sv["output"]) == (8, n)
    assert sv["request_seconds"] == pytest.approx(sv["ttft_seconds"] + (n - 1) * sv["tpot_seconds"])
    assert request["seconds"] == sv["request_seconds"]
    assert sv["seconds_per_token"] == sv["tpot_seconds"]
    assert sv["tokens_per_second"] == pytest.approx(2 * n / sv["request_seconds"])
    assert sv["tokens_per_second_per_device"] == sv["tokens_per_second"]  # one device
    assert sum(sv["decode_weights"]) == pytest.approx(n - 1)
    assert e["joules"] == pytest.approx(sum(e["joules_by_component"].values()))
    assert e["watts_average"] == pytest.approx(e["joules"] / request["seconds"])
    assert e["tokens_per_joule"] == pytest.approx(2 * n / e["joules"])
    assert request["verdict"].endswith(f"{n - 1} decode steps {1 - sv['ttft_seconds'] / request['seconds']:.0%})")


def test_the_weights_integrate_a_linear_step_exactly():
    for p, n in ((8, 2), (8, 5), (100, 128), (3, 1000)):
        contexts = sampled_contexts(p, n)
        assert contexts[0] == p and contexts[-1] == p + n - 2 and len(contexts) == min(n - 1, GENERATE_SAMPLES)
        w = decode_weights(contexts, p, n)
        assert sum(w) == pytest.approx(n - 1)
        a, b = 3.0, 0.25  # a step costing a + b.context: the sum over P ... P + N - 2, exactly
        every = np.arange(p, p + n - 1)
        assert sum(wi * (a + b * c) for wi, c in zip(w, contexts, strict=True)) == pytest.approx((a + b * every).sum())
    assert sampled_contexts(8, 1) == [] and decode_weights([], 8, 1) == []
    assert decode_weights(sampled_contexts(8, 4, every=True), 8, 4) == [1.0, 1.0, 1.0]


def _integrated(f, p, n, contexts):
    return sum(w * f(c) for w, c in zip(decode_weights(contexts, p, n), contexts, strict=True))


def test_a_bend_in_the_decode_steps_is_sampled_more_finely():
    p, n = 512, 1024
    every = np.arange(p, p + n - 1)
    linear = lambda c: 1e-3 + 1e-6 * c  # noqa: E731
    assert refined_contexts(linear, p, n) == sampled_contexts(p, n)  # a straight line: three contexts
    # dispatch-bound (the host's issue time) until the device's time overtakes it at context 700
    bent = lambda c: max(1.3e-3, 0.6e-3 + 1e-6 * c)  # noqa: E731
    exact = sum(bent(c) for c in every)
    three = _integrated(bent, p, n, sampled_contexts(p, n))
    refined = refined_contexts(bent, p, n)
    assert GENERATE_SAMPLES < len(refined) <= GENERATE_MAX_SAMPLES and refined == sorted(set(refined))
    assert abs(three / exact - 1) > GENERATE_SUM_BOUND  # three contexts alone miss the bend ...
    assert _integrated(bent, p, n, refined) == pytest.approx(exact, rel=GENERATE_SUM_BOUND)  # ... refined, not


def test_the_integrated_decode_steps_stay_within_the_bound_of_every_context_simulated():
    # a batch large enough that the KV cache moves the step, and a long enough output that
    # a few sampled contexts stand for many
    case = make_case(MACHINE, NETWORK, batch=16, phase="generate", prompt=40, output=18)
    machine = load_machine(MACHINE)
    sampled = run_generate(case, lambda c, tick: run_case(c), machine)
    every = run_generate(case, lambda c, tick: run_case(c), machine, every=True)
    assert len(sampled["serving"]["decode_contexts"]) < 17
    assert every["serving"]["decode_contexts"] == list(range(40, 57))
    for get in (lambda r: r["seconds"], lambda r: r["flops"], lambda r: r["bytes"]["memory"],
                lambda r: r["energy"]["joules"]):
        assert get(sampled) == pytest.approx(get(every), rel=GENERATE_SUM_BOUND)


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"output": 4, "context": 8}, "context", "does not apply to phase generate"),
    ({"output": 4, "seq_len": 8}, "seq_len", "does not apply to phase generate"),
    ({"output": 0}, "output", ">= 1"),
    ({"output": 4, "prompt": 0}, "prompt", ">= 1"),
])
def test_options_that_do_not_fit_a_request_are_refused(options, field, words):
    with pytest.raises(InputError) as err:
        _case(**options)
    assert err.value.field == field and words in err.value.reason


def test_a_request_needs_its_prompt_and_output_and_a_step_refuses_them():
    with pytest.raises(InputError) as err:
        run_case(make_case(MACHINE, NETWORK, phase="generate", prompt=8))
    assert err.value.field == "output" and "needs --output" in err.value.reason
    with pytest.raises(InputError) as err:
        request_parts(make_case(MACHINE, NETWORK, phase="generate", output=3))
    assert err.value.field == "prompt"
    with pytest.raises(InputError) as err:
        make_case(MACHINE, NETWORK, phase="decode", context=8, output=4)
    assert err.value.field == "output" and "only to generate" in err.value.reason
    with pytest.raises(InputError) as err:  # memwall step: a request is not one step
        build_case_step(_case(output=4))
    assert err.value.field == "phase" and "whole request" in err.value.reason


def test_a_sweep_lists_prompts_and_outputs_and_leaves_context_off_a_request():
    base = make_case(MACHINE, NETWORK, batch=2)
    out = combine([base], {"phase": ["generate", "decode"], "prompt": [8, 16], "output": [4], "context": [8]})
    requests = [c for c in out.cases if c.phase == "generate"]
    assert sorted(c.prompt for c in requests) == [8, 16] and all(c.context is None for c in requests)
    assert all(c.prompt is None and c.output is None for c in out.cases if c.phase == "decode")


def test_a_request_on_two_tensor_parallel_devices():
    request = run_case(_case(output=3, tp=2))
    sv = request["serving"]
    assert request["devices"] == 2
    assert sv["tokens_per_second_per_device"] == pytest.approx(sv["tokens_per_second"] / 2)
    assert sv["request_seconds"] == pytest.approx(sv["ttft_seconds"] + 2 * sv["tpot_seconds"])
    assert request["global_step"]["tokens"] == 2 * 3
    prefill = run_case(make_case(MACHINE, NETWORK, batch=2, phase="prefill", context=8, tp=2))
    assert sv["ttft_seconds"] == pytest.approx(prefill["seconds"])
    assert request["energy"]["watts_average"] == pytest.approx(request["energy"]["joules"] / request["seconds"] / 2)


def test_a_request_row_carries_its_columns():
    case = _case(output=3)
    row = make_row(case, run_case(case), None)
    assert row_problem(row) is None
    assert (row["phase"], row["prompt"], row["output"], row["seq_len"]) == ("generate", 8, 3, 3)
    assert row["request_seconds"] == pytest.approx(row["ttft_seconds"] + 2 * row["tpot_seconds"])
    assert row["seconds"] == row["request_seconds"] and row["context"] is None


GENERATE_MEASUREMENT = """
[[measurement]]
id = "r"
machine = "h100-sxm"
network = "llama3-8b"
batch = 64
phase = "generate"
prompt = 128
output = 128
metric = "tokens_per_second"
value = "8000 tokens/s"
source = "a source, table 1"
reliability = "medium"
notes = "a note"
"""


def test_measurement_files_take_a_request(tmp_path: Path):
    path = tmp_path / "g.toml"
    path.write_text(GENERATE_MEASUREMENT, encoding="utf-8")
    (m,) = load_measurement_file(path)
    assert (m.phase, m.prompt, m.output, m.context) == ("generate", 128, 128, None)
    for old, new, field, words in (
            ("output = 128\n", "", "output", "needs 'output'"),
            ("prompt = 128\n", "", "prompt", "needs 'prompt'"),
            ("output = 128", "output = 128\ncontext = 128", "context", "does not apply to phase generate"),
            ('phase = "generate"', 'phase = "decode"\ncontext = 8', "prompt", "only to generate")):
        path.write_text(GENERATE_MEASUREMENT.replace(old, new), encoding="utf-8")
        with pytest.raises(InputError) as err:
            load_measurement_file(path)
        assert err.value.field.endswith(field) and words in err.value.reason, err.value
    path.write_text(GENERATE_MEASUREMENT.replace('"tokens_per_second"', '"seconds_per_token"').replace(
        '"8000 tokens/s"', '"10 ms"'), encoding="utf-8")
    (m,) = load_measurement_file(path)
    assert m.metric == "seconds_per_token"
    prediction = {"seconds": 2.0, "serving": {"tokens_per_second": 5.0, "seconds_per_token": 0.01,
                                              "tpot_seconds": 0.01, "request_seconds": 2.0}}
    assert predicted_metric("seconds", prediction) == 2.0
    assert predicted_metric("tokens_per_second", prediction) == 5.0
    assert predicted_metric("seconds_per_token", prediction) == 0.01
    with pytest.raises(InputError):  # a request of one token has no decode step to time
        predicted_metric("seconds_per_token", {"seconds": 1.0, "serving": {"seconds_per_token": None}})


def test_a_sweep_costs_a_request_before_it_runs_and_refuses_one_over_the_limit() -> None:
    from memwall.execute.sweep import plan_costs
    from memwall.simulation.generate import GENERATE_SAMPLES

    request = Case(machine="h100-sxm", network="gpt2-small", phase="generate", prompt=64, output=32, batch=4)
    prefill = Case(machine="h100-sxm", network="gpt2-small", phase="prefill", context=64, batch=4)
    decodes = [Case(machine="h100-sxm", network="gpt2-small", phase="decode", context=c, batch=4)
               for c in (64, 64 + 15, 64 + 30)]  # the first, middle and last contexts the integration simulates
    assert len(decodes) == GENERATE_SAMPLES
    cost = plan_costs([request], None)
    assert cost.lookups == sum(plan_costs([c], None).lookups for c in (prefill, *decodes))
    assert not cost.refused
    assert "--max-lookups" in plan_costs([request], 1000).refused[request]
