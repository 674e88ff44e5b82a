"""One case's result, typed: what ``memwall inspect --json`` prints and a results row is made from.

Owns: :class:`Result` and its groups (identity, time, rates, training, bytes, ledger,
kernels, seed, devices, serving, warnings), :func:`build_result` (a timed step to a
Result, asking the timing nothing it has not already answered), :func:`finished`
(no result holds NaN, an infinity, or no cycles for a step that takes time: it is
refused, naming the machine figures that made it) and the serving figures
(:func:`serving_figures`). A Result is the JSON (every key it has always had), so a
script written against ``--json`` reads it unchanged, and carries its groups typed. The
verdict's phrases are :mod:`memwall.simulation.verdict`'s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..energy import EnergyTable, as_json, device_joules, energy_table, energy_warnings, kernel_total_joules
from ..errors import InputError
from ..options import Case
from ..plausibility import implausible_figures, structure_warnings, suspect_figures
from ..profiles import Machine
from ..seed import MICRO_PHASES, seed_model
from ..text import non_finite
from ..timing import FRAMEWORK, MEMORY, StepTiming, arithmetic_rate, word_widening
from ..vocabulary import BLOCK_FORMATS, DTYPE_BITS, product_out_dtype
from ..workloads.config import TrainingConfig
from ..workloads.step import Step, activation_traffic, d_min
from .columns import Column
from .sensitivity import Retime, binding, sensitivity
from .verdict import verdict


@dataclass(frozen=True)
class Identity:
    """Who ran what: the machine, the workload and the step's configuration."""

    machine: str
    machine_name: str
    year: int
    kind: str
    balance: float  # the machine's primary dtype's peak FLOP/s per main-memory byte/s
    network: str | None
    gemm: list[int] | None
    batch: int
    checkpoint: str
    updates: str
    phase: str  # the step's: a single GEMM is a forward product whatever the case says
    dtype: str | None
    parameters: int | None = None  # the network's trained values, as `memwall step --json` counts them
    out_dtype: str | None = None  # a single GEMM: the type C is written in (None for a network)


@dataclass(frozen=True)
class Time:
    """Where the step's time goes: seconds, the binding component, the cycle breakdown."""

    seconds: float
    stall_fraction: float
    bound: str  # the --set path of the figure whose elasticity is largest
    bound_class: str  # compute, memory, dispatch, startup, interconnect, or mixed
    memory_ratio: float | None
    verdict: str
    sensitivity: dict[str, float]  # each timing figure's --set path -> d ln(seconds) / d ln(figure)
    bound_shares: dict[str, float]  # each class's summed |elasticity|
    dispatch: dict[str, Any]
    time_by_component: dict[str, float]
    cycles: dict[str, Any]
    # {"low", "high", "coverage"}: the seconds measurements of this kind of step fell in, as
    # the shipped calibration says (memwall.simulation.intervals; None: no calibration)
    interval: dict[str, float] | None = None


@dataclass(frozen=True)
class Rates:
    """The step's work and the rates it reaches, against the datasheet peak."""

    flops: float
    fraction_of_peak: float
    achieved_flops: float
    peak_flops: float
    achievable_flops: float  # the products' ceiling, their time's rate: [compute.achievable], and in a
    #                          held run (Case.held) [compute.sustained] where lower, x power_scale (docs/timing.md)
    power_scale: float  # the share of their burst rates the arithmetic ran at: below 1 where the step
    #                     would draw more than the rated power at them (memwall.simulation.power)
    cups: float
    cps: float
    model_flops: float  # no recomputation
    mfu: float
    hfu: float
    micro_batch: dict[str, Any]
    optimizer_step: dict[str, Any]


@dataclass(frozen=True)
class Training:
    """How the step trains: accumulation, fusion, attention kernels, gradient type."""

    accumulate: int
    fusion: str
    attention: str | None
    grad_dtype: str | None
    update_fusion: str | None  # fused or separate for a training step (the default resolved), else None


@dataclass(frozen=True)
class Ledger:
    """Peak live bytes per tensor class, and whether they fit in main memory."""

    ledger: dict[str, int]
    capacity: dict[str, Any]


@dataclass(frozen=True)
class Seed:
    """The seed model's ``a``, its pole ``d_min`` on this machine, and its whole estimate."""

    a: float | None
    d_min: float | None
    seed: dict[str, Any]
    # memory ÷ arithmetic time of the micro-batch's kernels (no update), bytes at the
    # dtype's width: the simulation's figure on the seed's own quantity (seed.memory_ratio)
    memory_ratio_micro: float | None = None
    # memory_ratio_micro ÷ seed.memory_ratio as a product of three mechanisms (docs/timing.md,
    # "The seed model, beside the simulation")
    seed_gap: dict[str, float | None] | None = None


@dataclass(frozen=True)
class Devices:
    """The devices the step runs on; the multi-device fields are None on one device."""

    devices: int
    parallel: dict[str, int]
    interconnect_bytes: float
    communication: list[dict[str, Any]] | None = None
    stages: list[dict[str, Any]] | None = None
    bubble_fraction: float | None = None
    global_step: dict[str, Any] | None = None


# The groups in the order their keys appear in the JSON.
GROUPS = ("identity", "rates", "time", "bytes", "energy", "ledger", "warnings", "kernels", "dtype_fallback", "training",
          "seed", "devices", "serving", "what_if")


@dataclass(frozen=True)
class Groups:
    """A result's groups; :class:`Result` is their JSON, with the groups as attributes."""

    identity: Identity
    time: Time
    rates: Rates
    training: Training
    bytes: dict[str, float]
    ledger: Ledger
    kernels: list[dict[str, Any]]
    seed: Seed
    devices: Devices
    warnings: list[str] = field(default_factory=list)
    serving: dict[str, Any] | None = None
    dtype_fallback: dict[str, Any] | None = None  # {requested, used} when the products ran at another dtype's rate
    energy: EnergyTable | None = None  # None: the profile states no [energy]
    # a --set what-if on the machine: {"set": FIELD -> VALUE as given, "moved": {FIELD:
    # {from, to, by}}}, every figure it changed (memwall.profiles._what_if); None: no --set
    what_if: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in GROUPS:
            value = getattr(self, name)
            if name in ("bytes", "warnings", "kernels"):
                out[name] = value
            elif name == "energy":
                out[name] = as_json(value)
            elif name in ("serving", "dtype_fallback", "what_if"):
                if value is not None:
                    out[name] = value
            elif name == "devices":
                out.update({k: v for k, v in asdict(value).items()
                            if v is not None or k in ("devices", "parallel", "interconnect_bytes")})
            else:
                out.update(asdict(value))
        return out


class Result(dict):
    """One case's result: the JSON ``memwall inspect --json`` prints (less ``schema_version``,
    which the CLI adds to every document), so ``result["seconds"]`` and ``json.dumps(result)``
    work as they always have, with its groups typed as attributes: ``result.time.seconds``,
    ``result.identity.machine``, ``result.devices.global_step``."""

    def __init__(self, groups: Groups) -> None:
        super().__init__(groups.to_json())
        self.groups = groups

    def __getattr__(self, name: str) -> Any:
        groups = self.__dict__.get("groups")
        if groups is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(groups, name)

    def to_json(self) -> dict[str, Any]:
        return dict(self)


def _breakdown(compute: float, overhead: float, stall: dict[str, float], clock: float) -> dict:
    total = compute + overhead + sum(stall.values())
    return {
        "total": total * clock,
        "compute": compute * clock,
        "overhead": overhead * clock,
        "stall": {k: v * clock for k, v in stall.items()},
    }


def _kernel_rows(timing: StepTiming) -> list[dict[str, Any]]:
    clock = timing.machine.clock_hz
    n = timing.iterations
    rows = []
    for k in timing.kernels:
        rows.append({
            "name": k.name,
            "phase": k.phase,
            "op": k.op,
            "repeat": k.repeat,
            "flops": k.flops * n,
            "seconds": k.seconds * n,
            "stall_fraction": (sum(k.stall.values()) / k.seconds) if k.seconds > 0 else 0.0,
            "fraction_of_peak": (k.flops / k.seconds / timing.peak) if k.seconds > 0 else 0.0,
            "achieved_flops": k.flops / k.seconds if k.seconds > 0 else 0.0,
            "bound": k.bound,
            "bound_class": k.bound_class,
            "memory_ratio": k.memory_ratio,
            "time_by_component": {c: v * n for c, v in k.time_by_component.items()},
            "cycles": _breakdown(k.compute * n, (k.overhead + k.dispatch + k.framework) * n,
                                 {c: v * n for c, v in k.stall.items()}, clock),
            "bytes": {c: v * n for c, v in k.bytes.items()},
            "joules": kernel_total_joules(timing.machine, k, n),
        })
    return rows


def _dispatch(timing: StepTiming) -> dict[str, Any]:
    d = timing.dispatch
    if d is None:
        return {"mode": None, "host_seconds": 0.0, "device_seconds": timing.seconds}
    f = timing.framework
    return {"mode": d.mode, "host_seconds": d.host_seconds, "device_seconds": d.device_seconds,
            "launches": d.launches, "synchronous": d.synchronous, "timing": d.timing,
            "framework": None if f is None else {**f.as_dict(), "host_seconds": d.framework_host,
                                                 "synchronize_seconds": d.synchronize,
                                                 "layer_passes": d.layer_passes}}


def _rates(step: Step, timing: StepTiming, dtype: str | None) -> Rates:
    """Per micro-batch and per optimizer step: seconds, throughput, MFU and HFU."""
    machine = timing.machine
    seconds = timing.seconds
    k = step.config.accumulate
    update = timing.iterations * sum(t.seconds for t in timing.kernels if t.phase == "update")
    micro = (seconds - update) / k
    recompute = timing.iterations * sum(t.flops for t in timing.kernels if t.phase == "recompute")
    model_flops = timing.flops - recompute
    tokens, examples = step.tokens, step.examples
    per_example_work = timing.connections * timing.examples
    achieved = timing.flops / seconds if seconds > 0 else 0.0

    def rate(n: float, s: float) -> float:
        return n / s if s > 0 else 0.0

    return Rates(
        flops=timing.flops, fraction_of_peak=achieved / timing.peak, achieved_flops=achieved,
        peak_flops=timing.peak, achievable_flops=arithmetic_rate(machine, dtype, "gemm"),
        power_scale=machine.power_scale,
        cups=rate(per_example_work, seconds) if timing.phase == "train" else 0.0,
        cps=rate(per_example_work, seconds) if timing.phase == "forward" else 0.0,
        model_flops=model_flops, mfu=rate(model_flops, seconds) / timing.peak,
        hfu=rate(timing.flops, seconds) / timing.peak,
        micro_batch={"seconds": micro, "examples": examples, "tokens": tokens,
                     "examples_per_second": rate(examples, micro), "tokens_per_second": rate(tokens, micro)},
        optimizer_step={"seconds": seconds, "optimizer_seconds": update,
                        "optimizer_share": update / seconds if seconds > 0 else 0.0,
                        "examples": k * examples, "tokens": k * tokens,
                        "examples_per_second": rate(k * examples, seconds),
                        "tokens_per_second": rate(k * tokens, seconds)})


def _seed(step: Step, machine: Machine, timing: StepTiming) -> Seed:
    """The seed model's ``a`` of this step and its pole d_min = a.beta/72 on this machine
    (at its primary dtype's balance), the whole back-of-the-envelope estimate of the
    step at the step's own dtype (:mod:`memwall.seed`), and the simulation's memory ratio
    on the seed's quantity with the gap between the two split by mechanism."""
    traffic = activation_traffic(step)
    peak = arithmetic_rate(machine, step.config.dtype, "gemm", achievable=False)
    estimate = seed_model(step, peak, machine.memory.bandwidth)
    micro, gap = _micro_ratio(step, machine, timing, estimate, peak)
    if traffic is None:
        return Seed(None, None, estimate, micro, gap)
    return Seed(traffic["a"], d_min(traffic["a"], machine.balance()), estimate, micro, gap)


def _micro_ratio(step: Step, machine: Machine, timing: StepTiming, estimate: dict[str, Any],
                 peak: float) -> tuple[float | None, dict[str, float | None] | None]:
    """memory_ratio_micro and the factors that multiply seed.memory_ratio into it:
    ``traffic`` (main-memory bytes simulated ÷ the seed's operand bytes), ``memory_term``
    (the kernels' memory time ÷ those bytes at full bandwidth) and ``arithmetic`` (the
    seed's FLOPs at peak ÷ the simulated arithmetic time)."""
    per_micro = timing.iterations / step.config.accumulate
    memory_time = compute = moved = 0.0
    for kernel, t in zip(step.kernels, timing.kernels, strict=True):
        if t.phase not in MICRO_PHASES:
            continue
        widen = word_widening(machine, kernel.dtype)
        memory_time += t.memory_time / widen * per_micro
        compute += t.compute * per_micro
        moved += t.bytes.get(MEMORY, 0) / widen * per_micro
    if compute <= 0:
        return None, None
    micro = memory_time / compute
    seed_ratio, flops = estimate.get("memory_ratio"), estimate.get("intensity")
    seed_bytes = float(sum(step.flops.get(p, 0) for p in MICRO_PHASES)) / flops if flops else 0.0
    if not seed_ratio or not seed_bytes or not moved:
        return micro, None
    streamed = moved / machine.memory.bandwidth
    gap = {"traffic": moved / seed_bytes, "memory_term": memory_time / streamed,
           "arithmetic": float(sum(step.flops.get(p, 0) for p in MICRO_PHASES)) / peak / compute}
    return micro, gap


def capacity_warning(peak: int, machine: Machine, where: str = "the step") -> str:
    return (f"{where} needs {peak} bytes at its peak but {machine.id} has {machine.memory.capacity} bytes of "
            "main memory; simulated as if it fitted")


def _warnings(machine: Machine, step: Step, peak: int, fits: bool) -> list[str]:
    out = [] if fits else [capacity_warning(peak, machine)]
    out += structure_warnings(machine)
    # a what-if (--set) or a profile beyond every machine: legal, so run, but said
    out += [f"{shown} is outside the plausible {bounds}: the result describes no real machine"
            for _, shown, bounds in implausible_figures(machine)]
    dtype = step.kernels[0].dtype if step.kernels else None
    if dtype and word_widening(machine, dtype) > 1:
        out.append(f"{machine.id} has no floating point narrower than its {machine.timing.params.get('word_bytes', 8)}"
                   f"-byte word: each {dtype} element moves as a whole word (bytes and memory time count words; "
                   f"the ledger counts {dtype})")
    return out


# The serving group's figures that a results row carries, declared once: the row's columns
# (memwall.simulation.row), the JSON's keys and what `memwall inspect` prints beside the case.
# A generate row's own columns (memwall.simulation.generate): only its rows carry them.
GENERATE_COLUMNS = ("prompt", "output", "ttft_seconds", "tpot_seconds", "request_seconds")
SERVING_COLUMNS: tuple[Column, ...] = (
    Column("context", "int", "tokens", "context", "tokens in each sequence's KV cache (the prompt for prefill)",
           leading=False, setting=True),
    Column("weights", "text", "", "weights", "the weights' stored type", leading=False, setting=True),
    Column("kv_dtype", "text", "", "KV cache", "the KV cache's type", leading=False, setting=True),
    Column("weight_group", "int", "", "weights a scale", "int4: weights a group scale covers", leading=False,
           setting=True),
    Column("weight_zero", "text", "", "zero points", "int4: the groups' zero points", leading=False, setting=True),
    Column("prompt", "int", "tokens", "prompt", "generate: tokens in each request's prompt", leading=False,
           setting=True),
    Column("output", "int", "tokens", "output", "generate: tokens each request generates", leading=False,
           setting=True),
    Column("tokens_per_second", "number", "tokens/s", "tokens/s", "every device's tokens per second (generate: "
           "output tokens over the request's seconds)", leading=False),
    Column("tokens_per_second_per_device", "number", "tokens/s", "tokens/s/device",
           "several devices: tokens per second per device", leading=False),
    Column("seconds_per_token", "number", "s", "s/token", "decode: seconds per output token", leading=False),
    Column("time_to_first_token", "number", "s", "TTFT", "prefill: time to the first token", leading=False),
    Column("ttft_seconds", "number", "s", "TTFT", "generate: the prefill, which yields each request's first token",
           leading=False),
    Column("tpot_seconds", "number", "s", "TPOT", "generate: the mean decode step, seconds per output token after "
           "the first", leading=False),
    Column("request_seconds", "number", "s", "request", "generate: ttft + (output - 1) x tpot", leading=False),
    Column("max_batch_that_fits", "int", "", "max batch", "the largest batch whose weights and cache fit",
           leading=False),
)
# Every serving row has these columns (null where they do not apply); the others only where given.
SERVING_EVERY_ROW = frozenset(c.name for c in SERVING_COLUMNS) - {"tokens_per_second_per_device", *GENERATE_COLUMNS}


def weight_bytes_per_parameter(cfg: TrainingConfig) -> float:
    """Bytes a parameter of the block matrices takes as stored, its scales included: a
    block format's element and its share of the block's scale (NVFP4's 4-byte tensor scale
    left out: 4 B a tensor), int4's with its group's scale and zero point, else the stored
    type's bytes."""
    stored = cfg.stored_weights
    if stored in BLOCK_FORMATS:
        return BLOCK_FORMATS[stored].bytes_per_element()
    groups = cfg.group_format
    if groups is not None:
        group, bits_a_group = groups
        return (DTYPE_BITS[stored or "int4"] + bits_a_group / group) / 8
    return DTYPE_BITS[stored or cfg.storage_dtype] / 8


def serving_figures(step: Step, seconds: float, capacity: int, *, devices: int = 1, replicas: int = 1) -> dict:
    """Decode and prefill: tokens per second (all sequences of all ``replicas``), per device,
    seconds per output token, time to first token, and the largest batch at this context
    whose weights and cache fit."""
    cfg = step.config
    tokens = step.tokens * replicas  # decode: one a sequence; prefill: the prompts
    led = step.ledger
    per_seq = led.kv_cache / cfg.batch
    rest = led.peak - led.kv_cache  # weights, the step's workspace (held at their peak)
    fit = int((capacity - rest) // per_seq) if per_seq and capacity > rest else 0
    rate = tokens / seconds if seconds > 0 else 0.0
    out = {
        "context": cfg.context,
        "weights": cfg.weights or cfg.dtype,
        "kv_dtype": cfg.kv_dtype or cfg.dtype,
        # int4's groups: weights a scale covers and the zero points' type (None for other weights)
        "weight_group": cfg.group_format[0] if cfg.group_format else None,
        "weight_zero": (cfg.weight_zero or "none") if cfg.group_format else None,
        "weight_bytes_per_parameter": weight_bytes_per_parameter(cfg),
        "tokens_per_second": rate,
        "kv_cache_bytes_per_sequence": per_seq,
        "max_batch_that_fits": fit,
    }
    if devices > 1:
        out["tokens_per_second_per_device"] = rate / devices
    if cfg.phase == "decode":
        out["seconds_per_token"] = seconds  # each sequence gets one token per step
    else:
        out["time_to_first_token"] = seconds  # the prompt's pass ends with the first token's logits
    return out


def finished(groups: Groups, machine: Machine) -> Result:
    """The Result of ``groups``, or an InputError naming the machine figures that made it
    meaningless: a number that is not finite (NaN, an infinity) anywhere in it, or no
    cycles for a step that takes time (a clock so slow its cycles underflow). The loaders
    refuse such figures first; this holds for a Machine built in a script, or a
    combination of figures each of which is possible alone."""
    result = Result(groups)
    bad = next(non_finite(result), None)
    if bad is None and not (result["seconds"] > 0 and not result["cycles"]["total"] > 0):
        return result
    what = (f"{bad[0]} is {bad[1]!r}" if bad is not None
            else f"a step of {result['seconds']:g} s counts {result['cycles']['total']!r} cycles")
    suspects = suspect_figures(machine)
    blame = (f"{', '.join(suspects)} make{'s' if len(suspects) == 1 else ''} the step's numbers meaningless"
             if suspects else "its figures make the step's numbers meaningless")
    raise InputError(f"machine {machine.id}: {blame} ({what}); check the profile with 'memwall machines validate'")


def build_result(case: Case, step: Step, timing: StepTiming, fallback: dict[str, Any] | None = None,
                 retime: Retime | None = None) -> Result:
    """The result of a step's ``timing`` on one device, refused by :func:`finished` if a
    figure made it meaningless; ``retime`` times the same counts on another machine (for
    the sensitivity), None: the step's own seconds whatever the machine."""
    return finished(build_groups(case, step, timing, fallback, retime), timing.machine)


def build_groups(case: Case, step: Step, timing: StepTiming, fallback: dict[str, Any] | None = None,
                 retime: Retime | None = None) -> Groups:
    """The groups of one device's ``timing`` of ``step`` (the whole step on one device, or
    the slowest device's share, which :mod:`memwall.simulation.devices` then widens).
    ``retime`` gives the seconds of the whole step on a machine with one figure moved
    (:func:`memwall.simulation.sensitivity.sensitivity`)."""
    machine = timing.machine
    seconds_of = retime or (lambda _: timing.seconds)
    mode = timing.dispatch.mode if timing.dispatch is not None else None
    elasticities = sensitivity(machine, seconds_of, mode, links=case.parallel.devices > 1) if timing.seconds > 0 else {}
    binds = binding(elasticities, timing.memory_ratio, fallback=timing.bound_class,
                    framework_bound=timing.bound == FRAMEWORK)
    seconds = timing.seconds
    # the step's dtype as asked: fp8 training runs its products in fp8, the rest in bf16
    dtype = step.config.dtype if step.kernels else case.dtype
    ledger = step.ledger.as_dict()
    fits = ledger["peak"] <= machine.memory.capacity
    warnings = _warnings(machine, step, ledger["peak"], fits)
    energy = step_energy(step, timing)
    warnings += energy_warnings(machine, energy)
    if fallback is not None:
        warnings.append(fallback["warning"])
    cfg = step.config
    return Groups(
        identity=Identity(machine=machine.id, machine_name=machine.name, year=machine.year, kind=machine.kind,
                          balance=machine.balance(), network=case.network,
                          gemm=list(case.gemm) if case.gemm else None, batch=case.batch,
                          checkpoint=case.checkpoint, updates=case.updates, phase=timing.phase, dtype=dtype,
                          parameters=step.network.parameters if case.network is not None else None,
                          out_dtype=product_out_dtype(dtype, case.out_dtype) if case.gemm else None),
        time=Time(seconds=seconds, stall_fraction=sum(timing.stall.values()) / seconds if seconds > 0 else 0.0,
                  bound=binds.bound, bound_class=binds.bound_class, memory_ratio=timing.memory_ratio,
                  verdict=verdict(timing, binds, elasticities), sensitivity=elasticities,
                  bound_shares=binds.shares, dispatch=_dispatch(timing), time_by_component=timing.time_by_component,
                  cycles=_breakdown(timing.compute, timing.overhead, timing.stall, machine.clock_hz)),
        rates=_rates(step, timing, dtype),
        training=Training(accumulate=cfg.accumulate, fusion=cfg.fusion,
                          attention=step.network.attention if step.network.is_sequence else None,
                          grad_dtype=cfg.gradient_dtype if cfg.training else None,
                          update_fusion=cfg.update_fusion_mode),
        bytes=timing.bytes,
        ledger=Ledger(ledger, {"memory": machine.memory.capacity, "fits": fits}),
        kernels=_kernel_rows(timing),
        seed=_seed(step, machine, timing),
        devices=Devices(devices=1, parallel=case.parallel.as_dict(), interconnect_bytes=0),
        warnings=warnings,
        serving=serving_figures(step, seconds, machine.memory.capacity) if cfg.serving else None,
        dtype_fallback={k: v for k, v in fallback.items() if k != "warning"} if fallback is not None else None,
        energy=energy,
        what_if=machine.what_if,
    )


def step_energy(step: Step, timing: StepTiming) -> EnergyTable | None:
    """The energy of one device's ``timing`` of ``step`` (docs/energy.md): its tokens (a
    sequence model's, every micro-batch's) and, for training, its connection updates."""
    unstated: set[str] = set()
    joules = device_joules(timing, (), unstated)
    updates = timing.connections * timing.examples if timing.phase == "train" else 0
    return energy_table(timing.machine, [(1, joules)], timing.seconds, 1,
                        tokens=step.config.accumulate * step.tokens, connection_updates=updates, unstated=unstated)
