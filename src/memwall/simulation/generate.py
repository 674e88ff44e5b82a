"""Whole requests: B prompts prefilled as one step, then the decode steps that generate the rest.

Owns: the cases a ``--phase generate`` case runs (:func:`request_parts`: the prefill of the
B prompts of P tokens, which yields each request's first token, and a decode step at a
context), the choice of the decode contexts simulated and the integration of the N - 1
decode steps at contexts P ... P + N - 2 from them (:func:`sampled_contexts`,
:func:`refined_contexts`, :func:`decode_weights`), and the whole request's result
(:func:`run_generate`, :func:`combine`). docs/serving.md, "Whole requests", states the
equations as computed here.

A request is a static batch: the B requests start together and every decode step runs
all of them. Each part is an ordinary case (its own replay, its own devices: ``--tp``
runs each part as :func:`memwall.simulation.devices.run_parallel` does), so what the
request adds is arithmetic on their results: every additive figure (seconds, cycles,
bytes, FLOPs, joules, a kernel's time) is the prefill's plus the weighted sum of the
sampled decode steps', and every ratio is recomputed from those sums.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..energy import summed_table, with_power_warning
from ..errors import InputError
from ..options import Case
from ..profiles import Machine
from ..timing import DispatchTimes, bound_class, largest
from ..vocabulary import GENERATE
from .result import Devices, Groups, Ledger, Rates, Result, Seed, Time, finished
from .sensitivity import binding
from .verdict import verdict

# The decode steps are integrated from a few simulated contexts, the others interpolated
# linearly. A decode step's cost is linear in its context where it reads the cache and
# attends over it (bytes, FLOPs), so three contexts (the first, P; the middle one; the
# last, P + N - 2) usually give the sum. Where the step changes regime inside the
# request (dispatch-bound, then device-bound as the cache grows; a cache outgrowing a
# level) its seconds bend: a segment whose middle context's seconds stand more than
# GENERATE_TOLERANCE off the chord of its ends is halved, and both halves checked the
# same way, until GENERATE_MAX_SAMPLES contexts are simulated. A smooth curve whose middle
# stands d off the chord errs by about d/6 of its sum (Llama 3 8B at batch 64 over 128
# steps: d = 2.8e-4, error 9e-5), well inside the bound; a change of regime stands 10-20 %
# off (GPT-2 small on the H100 at batch 64 turning device-bound near context 1030).
GENERATE_SAMPLES = 3
GENERATE_MAX_SAMPLES = 9
GENERATE_TOLERANCE = 1e-3
# The tested bound of the integrated decode steps against every context simulated, as a
# fraction of the exact sum (seconds, main-memory bytes, FLOPs, joules): tests/test_generate.py.
GENERATE_SUM_BOUND = 1e-3

PartRun = Callable[[Case, Callable[[int, int], Any] | None], Result]


@dataclass(frozen=True)
class Request:
    """The cases one generate case ran: its prefill, the decode steps simulated and the
    decode steps each stands for (``weights``: they sum to ``output`` - 1)."""

    prompt: int
    output: int
    prefill: Case
    decodes: tuple[Case, ...]
    weights: tuple[float, ...]

    @property
    def contexts(self) -> list[int]:
        return [c.context for c in self.decodes]


def sampled_contexts(prompt: int, output: int, every: bool = False) -> list[int]:
    """The decode contexts first simulated for a request: all of P ... P + N - 2 when there
    are at most :data:`GENERATE_SAMPLES` of them (or ``every``), else the first, the middle
    and the last."""
    first, last = prompt, prompt + output - 2
    if last < first:
        return []
    if every or last - first + 1 <= GENERATE_SAMPLES:
        return list(range(first, last + 1))
    return [first, (first + last) // 2, last]


def refined_contexts(seconds_at: Callable[[int], float], prompt: int, output: int, *, every: bool = False,
                     limit: int = GENERATE_MAX_SAMPLES, tolerance: float = GENERATE_TOLERANCE) -> list[int]:
    """The decode contexts to simulate, sorted: :func:`sampled_contexts`, then, segment by
    segment (breadth first, so the order is fixed), the middle of each half of a segment
    whose middle context's seconds (``seconds_at``) stand more than ``tolerance`` (relative)
    off the chord of its ends, until ``limit`` contexts are sampled."""
    contexts = sampled_contexts(prompt, output, every)
    if len(contexts) != GENERATE_SAMPLES or every:
        return contexts
    f = {c: seconds_at(c) for c in contexts}
    queue = deque([tuple(contexts)])
    while queue and len(f) < limit:
        a, m, b = queue.popleft()
        chord = f[a] + (f[b] - f[a]) * (m - a) / (b - a)
        if abs(f[m] - chord) <= tolerance * abs(chord):
            continue
        for x, y in ((a, m), (m, b)):
            if y - x >= 2 and len(f) < limit:
                z = (x + y) // 2
                f[z] = seconds_at(z)
                queue.append((x, z, y))
    return sorted(f)


def decode_weights(contexts: Sequence[int], prompt: int, output: int) -> list[float]:
    """The decode steps each sampled context stands for: step c of P ... P + N - 2 is
    interpolated linearly between the sampled contexts around it, so sampled context s
    carries the sum over c of its hat function at c (exact where a step's cost is linear
    in its context). They sum to N - 1; with every context sampled, each is 1. The sampled
    contexts run from P to P + N - 2, so each segment [a, b] of length L gives its steps
    a ... b - 1 to its ends in closed form: (L + 1)/2 to a, (L - 1)/2 to b; the last
    context carries its own step (the sums of the hat functions, without a value per step)."""
    if not contexts:
        return []
    assert contexts[0] == prompt and contexts[-1] == prompt + output - 2, (contexts, prompt, output)
    weights = [0.0] * len(contexts)
    for i in range(len(contexts) - 1):
        length = contexts[i + 1] - contexts[i]
        weights[i] += (length + 1) / 2
        weights[i + 1] += (length - 1) / 2
    weights[-1] += 1.0
    return weights


def request_parts(case: Case) -> tuple[Case, Callable[[int], Case]]:
    """A generate case's prefill case, and its decode case at a context (their options are
    the case's: weights, KV cache type, devices, dispatch); an InputError naming what is
    missing."""
    if case.gemm is not None:
        raise InputError("phase generate runs a network's requests, not a single GEMM", field="phase")
    for name, what in (("prompt", "tokens in each request's prompt"), ("output", "tokens each request generates")):
        if getattr(case, name) is None:
            raise InputError(f"phase generate needs --{name} ({what})", field=name)
    step = {"prompt": None, "output": None}
    prefill = replace(case, phase="prefill", context=case.prompt, **step)
    return prefill, lambda c: replace(case, phase="decode", context=c, **step)


def run_generate(case: Case, run: PartRun, machine: Machine, *, progress: Callable[[int, int], Any] | None = None,
                 every: bool = False) -> Result:
    """A generate case's result: its prefill and its decode steps at
    :func:`refined_contexts` (``every``: at every context, to check the integration), each
    run by ``run(part, progress)`` (a case and its progress callback;
    :func:`memwall.simulation.run_case` with the caller's options), then :func:`combine`.
    ``progress(done, total)`` counts line lookups over every part run so far."""
    prefill_case, decode_case = request_parts(case)
    base = [0]

    def part(c: Case) -> Result:
        last = [0]

        def tick(done: int, total: int) -> None:
            last[0] = total
            progress(base[0] + done, base[0] + total)  # type: ignore[misc]

        out = run(c, tick if progress is not None else None)
        base[0] += last[0]
        return out

    prefill = part(prefill_case)
    steps: dict[int, Result] = {}

    def seconds_at(c: int) -> float:
        if c not in steps:
            steps[c] = part(decode_case(c))
        return float(steps[c]["seconds"])

    p, n = case.prompt, case.output
    contexts = refined_contexts(seconds_at, p, n, every=every)
    decodes = [steps[c] if c in steps else part(decode_case(c)) for c in contexts]
    request = Request(p, n, prefill_case, tuple(decode_case(c) for c in contexts),
                      tuple(decode_weights(contexts, p, n)))
    return combine(case, request, prefill, decodes, machine)


# --------------------------------------------------------------------------------------
# The request's result from its parts'


def _sum(parts: Sequence[tuple[float, Any]], get: Callable[[Any], float]) -> float:
    return float(sum(w * get(r) for w, r in parts))


def _sum_dicts(parts: Sequence[tuple[float, Any]], get: Callable[[Any], Mapping[str, float] | None]) -> dict[str, float]:
    out: dict[str, float] = {}
    for w, r in parts:
        for k, v in (get(r) or {}).items():
            out[k] = out.get(k, 0.0) + w * float(v)
    return out


def _weighted_ratio(parts: Sequence[tuple[float, Any]], ratio: Callable[[Any], float | None],
                    base: Callable[[Any], float]) -> float | None:
    """sum w.ratio.base / sum w.base over the parts with a ratio: a ratio of two additive
    quantities, recombined exactly (memory time / compute time, with base the compute time)."""
    num = den = 0.0
    for w, r in parts:
        x = ratio(r)
        if x is not None:
            num += w * x * base(r)
            den += w * base(r)
    return num / den if den > 0 else None


def _breakdown(parts: Sequence[tuple[float, Any]]) -> dict[str, Any]:
    return {"total": _sum(parts, lambda r: r["cycles"]["total"]),
            "compute": _sum(parts, lambda r: r["cycles"]["compute"]),
            "overhead": _sum(parts, lambda r: r["cycles"]["overhead"]),
            "stall": _sum_dicts(parts, lambda r: r["cycles"]["stall"])}


@dataclass(frozen=True)
class _Totals:
    """The request's totals in the shape :func:`memwall.simulation.verdict.verdict` reads a
    step's timing: seconds, seconds by component, memory ratio, the dispatch streams, and
    the machine at the request's power scale (:func:`_power_scale`)."""

    seconds: float
    time_by_component: dict[str, float]
    memory_ratio: float | None
    dispatch: DispatchTimes | None
    machine: Machine


def _power_scale(parts: Sequence[tuple[float, Any]]) -> float:
    """The share of their burst rates the request's arithmetic ran at: its arithmetic time at
    the burst rates over its time as run, sum w.s.t_c / sum w.t_c, each part's scale s
    weighted by its arithmetic time t_c (a held step's arithmetic takes 1/s of its burst
    time); 1 for a request without arithmetic."""
    compute = lambda r: r["time_by_component"].get("compute", 0.0)  # noqa: E731
    held = _sum(parts, compute)
    return _sum(parts, lambda r: r["power_scale"] * compute(r)) / held if held > 0 else 1.0


def _dispatch(parts: Sequence[tuple[float, Any]]) -> tuple[dict[str, Any], DispatchTimes | None]:
    """The dispatch streams summed over the steps (every step is issued in the same mode)."""
    mode = parts[-1][1]["dispatch"]
    host = _sum(parts, lambda r: r["dispatch"]["host_seconds"])
    device = _sum(parts, lambda r: r["dispatch"]["device_seconds"])
    if mode["mode"] is None:
        return {"mode": None, "host_seconds": host, "device_seconds": device}, None
    launches = int(round(_sum(parts, lambda r: r["dispatch"].get("launches", 0))))
    out = {"mode": mode["mode"], "host_seconds": host, "device_seconds": device, "launches": launches,
           "synchronous": mode["synchronous"]}
    return out, DispatchTimes(mode["mode"], host, device, launches, bool(mode["synchronous"]))


def _time(parts: Sequence[tuple[float, Any]], seconds: float, prefill_seconds: float, steps: int,
          machine: Machine) -> Time:
    """The request's time: sums, the elasticities weighted by each part's share of the
    request (d ln T / d ln x = sum w.t_i.e_i / T, exact for a sum), and the binding read
    from them."""
    compute = lambda r: r["time_by_component"].get("compute", 0.0)  # noqa: E731
    by_component = _sum_dicts(parts, lambda r: r["time_by_component"])
    ratio = _weighted_ratio(parts, lambda r: r["memory_ratio"], compute)
    elasticities = {k: v / seconds for k, v in _sum_dicts(
        parts, lambda r: {f: e * r["seconds"] for f, e in r["sensitivity"].items()}).items()} if seconds > 0 else {}
    dispatch, streams = _dispatch(parts)
    binds = binding(elasticities, ratio, fallback=bound_class(largest(by_component)))
    totals = _Totals(seconds, by_component, ratio, streams, replace(machine, power_scale=_power_scale(parts)))
    said = verdict(totals, binds, elasticities)  # type: ignore[arg-type]
    share = prefill_seconds / seconds if seconds > 0 else 0.0
    said += (f" (the whole request: the prefill {share:.0%} of it, {steps} decode step{'s' if steps != 1 else ''} "
             f"{1 - share:.0%})")
    stalls = _sum(parts, lambda r: r["stall_fraction"] * r["seconds"])
    return Time(seconds=seconds, stall_fraction=stalls / seconds if seconds > 0 else 0.0, bound=binds.bound,
                bound_class=binds.bound_class, memory_ratio=ratio, verdict=said, sensitivity=elasticities,
                bound_shares=binds.shares, dispatch=dispatch, time_by_component=by_component,
                cycles=_breakdown(parts))


def _rates(parts: Sequence[tuple[float, Any]], seconds: float, examples: int, tokens: int) -> Rates:
    """FLOPs summed; per-device rates (achieved, MFU, HFU) as each part's rate x its
    seconds, summed, over the request's seconds."""
    last = parts[-1][1].rates

    def rate(key: str) -> float:
        return _sum(parts, lambda r: r[key] * r["seconds"]) / seconds if seconds > 0 else 0.0

    achieved = rate("achieved_flops")
    per = {"seconds": seconds, "examples": examples, "tokens": tokens,
           "examples_per_second": examples / seconds if seconds > 0 else 0.0,
           "tokens_per_second": tokens / seconds if seconds > 0 else 0.0}
    return Rates(flops=_sum(parts, lambda r: r["flops"]), fraction_of_peak=achieved / last.peak_flops,
                 achieved_flops=achieved, peak_flops=last.peak_flops, achievable_flops=last.achievable_flops,
                 power_scale=_power_scale(parts),
                 cups=0.0, cps=0.0, model_flops=_sum(parts, lambda r: r["model_flops"]), mfu=rate("mfu"),
                 hfu=rate("hfu"), micro_batch=per,
                 optimizer_step={**per, "optimizer_seconds": 0.0, "optimizer_share": 0.0})


def _seed(parts: Sequence[tuple[float, Any]]) -> Seed:
    """The seed model's estimate of the request: its seconds summed; its memory ratio and
    fraction of peak recombined from each part's arithmetic time (fraction of peak x
    seconds) and memory time (memory ratio x arithmetic time); the per-parameter bytes
    summed; the per-token figures, which no sum of steps gives, left out."""
    last = parts[-1][1].seed
    seeds = [(w, r["seed"]) for w, r in parts]
    seconds = sum(w * (s.get("seconds") or 0.0) for w, s in seeds)
    arithmetic = [(w, (s.get("fraction_of_peak") or 0.0) * (s.get("seconds") or 0.0), s) for w, s in seeds]
    a_sum = sum(w * a for w, a, _ in arithmetic)
    m_sum = sum(w * a * (s.get("memory_ratio") or 0.0) for w, a, s in arithmetic)
    ratio = m_sum / a_sum if a_sum > 0 else None
    ref = last.seed  # intensity x memory ratio is the machine's peak / bandwidth, the same for every part
    balance = (ref.get("intensity") or 0.0) * (ref.get("memory_ratio") or 0.0)
    seed = {**ref, "seconds": seconds, "memory_ratio": ratio,
            "fraction_of_peak": a_sum / seconds if seconds > 0 else None,
            "intensity": balance / ratio if ratio and balance else None,
            "b_w": sum(w * (s.get("b_w") or 0.0) for w, s in seeds),
            "b_update": sum(w * (s.get("b_update") or 0.0) for w, s in seeds),
            "flops_per_token_per_parameter": None, "t_min": None}
    micro = _weighted_ratio(parts, lambda r: r["memory_ratio_micro"],
                            lambda r: r["time_by_component"].get("compute", 0.0))
    return Seed(last.a, last.d_min, seed, micro, None)


def _kernel_rows(prefill: Result, decodes: Sequence[tuple[float, Result]]) -> list[dict[str, Any]]:
    """The prefill's kernel rows (names prefixed ``prefill:``), then each decode kernel's row
    summed over the sampled contexts (``decode:``; the same kernels at every context), its
    ratios recomputed from the sums."""
    rows = [{**k, "name": f"prefill:{k['name']}"} for k in prefill["kernels"]]
    if not decodes:
        return rows
    peak = float(decodes[-1][1]["peak_flops"])
    for i, k in enumerate(decodes[-1][1]["kernels"]):
        same = [(w, r["kernels"][i]) for w, r in decodes]
        seconds = _sum(same, lambda x: x["seconds"])
        flops = _sum(same, lambda x: x["flops"])
        by_component = _sum_dicts(same, lambda x: x["time_by_component"])
        stalls = sum(v for c, v in by_component.items() if c not in ("compute", "dispatch", "startup"))
        joules = None if k.get("joules") is None else _sum(same, lambda x: x["joules"] or 0.0)
        bound = largest(by_component)
        rows.append({**k, "name": f"decode:{k['name']}", "flops": flops, "seconds": seconds,
                     "stall_fraction": stalls / seconds if seconds > 0 else 0.0,
                     "fraction_of_peak": flops / seconds / peak if seconds > 0 else 0.0,
                     "achieved_flops": flops / seconds if seconds > 0 else 0.0,
                     "bound": bound, "bound_class": bound_class(bound),
                     "memory_ratio": _weighted_ratio(same, lambda x: x["memory_ratio"],
                                                     lambda x: x["time_by_component"].get("compute", 0.0)),
                     "time_by_component": by_component, "cycles": _breakdown(same),
                     "bytes": _sum_dicts(same, lambda x: x["bytes"]), "joules": joules})
    return rows


def _communication(prefill: Result, decodes: Sequence[tuple[float, Result]]) -> list[dict[str, Any]] | None:
    """The prefill's collectives (``prefill:``) and each decode collective summed over the
    sampled contexts (``decode:``; ``bytes`` is then the mean bytes a collective)."""
    if prefill.get("communication") is None:
        return None
    rows = [{**c, "name": f"prefill:{c['name']}"} for c in prefill["communication"]]
    if not decodes:
        return rows
    for i, c in enumerate(decodes[-1][1]["communication"]):
        same = [(w, r["communication"][i]) for w, r in decodes]
        count = int(round(_sum(same, lambda x: x["count"])))  # the same at every context: a whole number
        rows.append({**c, "name": f"decode:{c['name']}", "count": count,
                     "bytes": _sum(same, lambda x: x["bytes"] * x["count"]) / count if count else c["bytes"],
                     **{k: _sum(same, lambda x, k=k: x[k]) for k in ("seconds", "exposed", "sent_bytes")}})
    return rows


def _devices(parts: Sequence[tuple[float, Result]], prefill: Result, decodes: Sequence[tuple[float, Result]],
             largest_part: Result, seconds: float, examples: int, tokens: int) -> Devices:
    last = parts[-1][1].devices
    whole = None
    if last.global_step is not None:
        whole = {"devices": last.devices, "examples": examples, "tokens": tokens, "seconds": seconds,
                 "examples_per_second": examples / seconds if seconds > 0 else 0.0,
                 "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
                 "tokens_per_second_per_device": tokens / seconds / last.devices if seconds > 0 else 0.0}
    return Devices(devices=last.devices, parallel=last.parallel,
                   interconnect_bytes=_sum(parts, lambda r: r["interconnect_bytes"]),
                   communication=_communication(prefill, decodes), stages=largest_part.devices.stages,
                   bubble_fraction=last.bubble_fraction, global_step=whole)


def _serving(request: Request, parts: Sequence[tuple[float, Result]], ttft: float, seconds: float,
             devices: int, replicas: int) -> dict[str, Any]:
    """The request's serving figures (docs/serving.md, "Whole requests")."""
    n = request.output
    decode = seconds - ttft
    tpot = decode / (n - 1) if n > 1 else None
    last = parts[-1][1]["serving"]  # the last step: the longest context, the largest cache
    batch = parts[0][1]["batch"]
    rate = replicas * batch * n / seconds if seconds > 0 else 0.0
    return {
        "prompt": request.prompt, "output": n,
        # the steps' own setup (the stored weights, the cache's type), whichever of these keys they carry
        **{k: v for k, v in last.items() if k in ("weights", "kv_dtype", "weight_group", "weight_zero",
                                                  "weight_bytes_per_parameter")},
        "ttft_seconds": ttft, "tpot_seconds": tpot, "request_seconds": seconds,
        "tokens_per_second": rate, "tokens_per_second_per_device": rate / devices,
        "seconds_per_token": tpot,
        "kv_cache_bytes_per_sequence": last["kv_cache_bytes_per_sequence"],
        # the batch every step of the request fits (the last decode step's cache is the largest)
        "max_batch_that_fits": min(r["serving"]["max_batch_that_fits"] for _, r in parts),
        "decode_contexts": request.contexts,  # the decode steps simulated ...
        "decode_weights": list(request.weights),  # ... and the steps each stands for (they sum to N - 1)
    }


def combine(case: Case, request: Request, prefill: Result, decodes: Sequence[Result], machine: Machine) -> Result:
    """The whole request's result from its prefill's and its sampled decode steps' (weighted
    by :attr:`Request.weights`): seconds = the prefill's + the sum of w x the decode steps'
    (= ttft + (N - 1) tpot), and every other additive figure likewise; the ledger and the
    stages are the request's largest step's; refused by
    :func:`memwall.simulation.result.finished` as a step would be."""
    weighted = list(zip(request.weights, decodes, strict=True))
    parts: list[tuple[float, Result]] = [(1.0, prefill), *weighted]
    ttft = float(prefill["seconds"])
    seconds = _sum(parts, lambda r: r["seconds"])
    par = case.parallel
    examples = par.dp * case.batch
    tokens = examples * request.output  # every request's output tokens, every replica
    largest_part = max((r for _, r in parts), key=lambda r: r["ledger"]["peak"])
    fits = all(r["capacity"]["fits"] for _, r in parts)
    warnings = list(dict.fromkeys(w for _, r in parts for w in r["warnings"]))
    energy = summed_table([(w, r.energy) for w, r in parts], seconds, par.devices, tokens=tokens)
    if energy is not None:  # the request's average power, not a step's
        warnings = with_power_warning(machine, warnings, energy)
    last = parts[-1][1].groups
    groups = Groups(
        identity=replace(last.identity, phase=GENERATE),
        time=_time(parts, seconds, ttft, request.output - 1, machine),
        rates=_rates(parts, seconds, case.batch, case.batch * request.output),
        training=last.training,
        bytes=_sum_dicts(parts, lambda r: r["bytes"]),
        ledger=Ledger(largest_part["ledger"], {**largest_part["capacity"], "fits": fits}),
        kernels=_kernel_rows(prefill, weighted),
        seed=_seed(parts),
        devices=_devices(parts, prefill, weighted, largest_part, seconds, examples, tokens),
        warnings=warnings,
        serving=_serving(request, parts, ttft, seconds, par.devices, par.replicas),
        dtype_fallback=next((r.dtype_fallback for _, r in parts if r.dtype_fallback is not None), None),
        energy=energy,
        what_if=last.what_if,
    )
    return finished(groups, machine)
