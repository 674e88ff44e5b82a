"""The case options, declared once.

Owns: :data:`OPTIONS`, every option a case takes besides its machine and its workload
(a network or a single GEMM): its type, choices, default and doc (a
:class:`memwall.schema.Field`, as the data files declare theirs), the stage that reads it
(``step``: the step builder; ``devices``: how the step is split over devices;
``timing``: the timing alone), and where it applies (which workload, which phases).
Everything else follows from the declaration:

- :class:`Case`, whose fields are the identity and the options in declared order;
- the keys of a case (:meth:`Case.given`, :meth:`Case.key`): an option at its default is
  never given, and an option read only by the timing never shapes a replay;
- the refusal of an option that does not apply (:func:`refuse_inapplicable`), with one
  line naming it;
- the command line (:func:`add_case_arguments`: one value for ``inspect`` and ``step``,
  comma lists for ``sweep``) and the measurement files' keys (:data:`OPTION_FIELDS`).

A new option is one entry here plus the stage that reads it.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass, replace
from typing import Any

from .errors import InputError
from .frameworks import GRADIENT_REDUCTIONS, framework_ids
from .schema import Field
from .vocabulary import (
    ATTENTIONS,
    BLOCK_FORMATS,
    CHECKPOINT_SYNTAX,
    DISPATCH_MODES,
    DTYPES,
    FUSIONS,
    GENERATE,
    GRADIENT_DTYPES,
    HELD,
    KV_DTYPES,
    MAX_WEIGHT_GROUP,
    OPTIMIZERS,
    PHASES,
    POWER_STATES,
    PRODUCT_OUT_DTYPES,
    SERVING_PHASES,
    TIMINGS,
    TRAIN,
    TRAINING_DTYPES,
    UPDATES,
    WEIGHT_DTYPES,
    WEIGHT_GROUP_SCALES,
    WEIGHT_ZEROS,
    parse_checkpoint,
)
from .workloads.config import UPDATE_FUSIONS
from .workloads.parallel import CP_KINDS, Parallel

# The stages that read an option.
STEP = "step"  # the step builder: the kernels, their tensors and the ledger
DEVICES = "devices"  # the split of the step over devices (each device's share is a step too)
TIMING = "timing"  # the timing model alone: the engine never sees it
STAGES = (STEP, DEVICES, TIMING)

NETWORK = "network"
GEMM = "gemm"
WORKLOADS = (NETWORK, GEMM)

TRAIN_ONLY = (TRAIN,)
NOT_SERVING = tuple(p for p in PHASES if p not in SERVING_PHASES)
INFERENCE = tuple(p for p in PHASES if p != "train")
ONE_STEP_SERVING = tuple(p for p in SERVING_PHASES if p != GENERATE)  # a generate request's contexts are its own
GROUPED = ("weights", tuple(WEIGHT_GROUP_SCALES))  # weights stored with a scale a group of them


def _checkpoint(value: Any, context: dict[str, Any]) -> str:
    return parse_checkpoint(value).text


@dataclass(frozen=True)
class Option:
    """One case option: its declaration (``field``: key, type, choices, bounds, doc), the
    stage that reads it, the workloads and phases it applies to, and its command-line help."""

    field: Field
    stage: str
    python_type: type  # int or str: what a value is once read
    workloads: tuple[str, ...] = (NETWORK,)
    phases: tuple[str, ...] = PHASES
    help: str = ""  # the command line's help, when it says more than the field's doc
    metavar: str = ""
    needs: tuple[str, tuple[str, ...]] | None = None  # (another option, the values of it this one applies to)

    @property
    def name(self) -> str:
        return self.field.key

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def default(self) -> Any:
        return self.field.default

    def applies(self, workload: str, phase: str, given: Mapping[str, Any] | None = None) -> bool:
        """Whether the option applies to a case of ``workload`` at ``phase`` whose other
        options are ``given``."""
        if workload not in self.workloads or (workload == NETWORK and phase not in self.phases):
            return False
        return self.needs is None or (given or {}).get(self.needs[0]) in self.needs[1]

    def why_not(self, workload: str, phase: str) -> str:
        """Why the option does not apply (one clause), for :func:`refuse_inapplicable`."""
        if workload not in self.workloads:
            if workload == NETWORK:
                return "applies only to a single GEMM (--gemm), not to a network's step"
            return f"does not apply to a single GEMM (it {'picks' if self.name == 'phase' else 'shapes'} a network's step)"
        if phase not in self.phases:
            return f"does not apply to phase {phase} (only to {', '.join(self.phases)})"
        assert self.needs is not None
        return f"applies only with {self.needs[0]} {' or '.join(self.needs[1])}"

    def parse(self, value: Any) -> Any:
        """``value`` (text from the command line, or a value from a file or the API) checked
        and converted as the declaration says; an InputError naming the option otherwise."""
        name = self.name
        f = self.field
        if self.python_type is bool:
            if isinstance(value, bool):
                return value
            word = value.strip().lower() if isinstance(value, str) else None
            if word in BOOL_WORDS:
                return BOOL_WORDS[word]
            raise InputError(f"must be on or off (true or false), got {value!r}", field=name)
        if self.python_type is int:
            number = _whole(value)
            low, high = f.minimum, f.maximum
            span = "" if low is None else f" >= {low:g}" if high is None else f" from {low:g} to {high:g}"
            if number is None or (low is not None and number < low) or (high is not None and number > high):
                raise InputError(f"must be a whole number{span}, got {value!r}", field=name)
            return number
        if not isinstance(value, str):
            raise InputError(f"must be text, got {value!r}", field=name)
        if f.choices and value not in f.choices:
            raise InputError(f"must be one of {', '.join(f.choices)}, got {value!r}", field=name)
        return f.parse(value, {}) if f.parse is not None else value


# how a boolean option is written on the command line (a file gives true or false)
BOOL_WORDS = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False}


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):  # not '²', which isdigit() takes
        return int(value.strip())
    return None


def _option(key: str, kind: type, doc: str, stage: str, *, default: Any = None, choices: Sequence[str] = (),
            minimum: float | None = None, maximum: float | None = None, workloads: tuple[str, ...] = (NETWORK,),
            phases: tuple[str, ...] = PHASES, help: str = "", metavar: str = "", default_doc: str = "",
            unit: str = "", parse: Any = None, needs: tuple[str, tuple[str, ...]] | None = None) -> Option:
    schema_type = "int" if kind is int else "bool" if kind is bool else ("word" if choices else "str")
    return Option(Field(key, schema_type, doc, default=default, choices=tuple(choices), minimum=minimum,
                        maximum=maximum, default_doc=default_doc, unit=unit, parse=parse),
                  stage, kind, workloads, phases, help, metavar, needs)


OPTIONS: tuple[Option, ...] = (
    _option("batch", int, "examples (sequences for sequence models) per step; 1 for per-example updates", STEP,
            default=1, minimum=1, metavar="B"),
    _option("checkpoint", str, "activation checkpointing", STEP, default="none", phases=TRAIN_ONLY,
            parse=_checkpoint, unit=f"`{CHECKPOINT_SYNTAX}`", metavar="MODE",
            help=f"activation checkpointing: {CHECKPOINT_SYNTAX} (default none)"),
    _option("updates", str, "how often the weights change: per-example (1986-style online SGD, one update per "
            "example) or minibatch", STEP, default="minibatch", choices=UPDATES, phases=NOT_SERVING),
    _option("phase", str, "what a step runs: train, forward (inference), decode (one token a sequence against a "
            "KV cache of 'context' tokens), prefill (a prompt of 'context' tokens that fills the cache) or generate "
            "(whole requests: a prompt of 'prompt' tokens prefilled, then 'output' - 1 decode steps)", STEP,
            default="train", choices=PHASES),
    _option("optimizer", str, "the optimizer's update", STEP, default="sgd", choices=OPTIMIZERS, phases=TRAIN_ONLY),
    _option("dtype", str, f"the arithmetic type: training {', '.join(TRAINING_DTYPES)} (fp8 and the "
            "block-scaled formats as Transformer Engine trains: the products narrow, the rest bf16); inference "
            "also int8 (fp8 and the block formats as W8A8 serving runs them: the block matrices' weights and "
            "product inputs narrow, the rest bf16); a single GEMM any", STEP, choices=DTYPES, workloads=(NETWORK, GEMM),
            default_doc="the network's own; fp32 for a GEMM"),
    _option("out_dtype", str, "a single GEMM: the type its product writes C in (cuBLASLt's D type; an fp8 "
            "product commonly writes bf16 or fp16)", STEP, choices=PRODUCT_OUT_DTYPES, workloads=(GEMM,),
            default_doc="the dtype's own; bf16 for a block-scaled format"),
    _option("seq_len", int, "tokens per sequence, for sequence models", STEP, minimum=1, phases=NOT_SERVING,
            default_doc="the preset's", metavar="N"),
    _option("dispatch", str, "how kernels are issued: eager (kernel by kernel), graph (a captured graph "
            "replayed) or compiled (one program per step)", TIMING, choices=DISPATCH_MODES,
            workloads=(NETWORK, GEMM), default_doc="the machine profile's own"),
    _option("framework", str, "the framework or runtime that runs the step (era_data/frameworks/<id>.toml): "
            "its host time per operator, layer pass and step, its synchronisation and its base latency per "
            "collective (docs/timing.md, 'The framework'); hand-written: the kernels alone", TIMING,
            choices=framework_ids(), workloads=(NETWORK, GEMM),
            default_doc="the machine profile's [timing] framework, else hand-written"),
    _option("timing", str, "how the step is timed: device (the device's stream, step after step) or host (a "
            "host timer around one step: its launch and a synchronisation round trip added)", TIMING,
            default="device", choices=TIMINGS, workloads=(NETWORK, GEMM)),
    _option("power", str, "the device's power over the run: burst (short enough to stay at the boost clock: its "
            "products at [compute.achievable]) or held (long enough to hold the device at its power limit, a "
            "training run or a benchmark loop of seconds: its products at [compute.sustained] and its arithmetic "
            "slowed until the device draws its rating; docs/timing.md, 'The power limit')", TIMING,
            choices=POWER_STATES, workloads=(NETWORK, GEMM),
            default_doc="held for training a network, burst otherwise"),
    _option("grad_reduce", str, "when the data-parallel gradient reduction runs: overlapped (in buckets as the "
            "backward makes them, PyTorch DDP's and Megatron-Core's overlap_grad_reduce) or after-backward (the "
            "whole buffer once the step's backward is done, Megatron-LM's local DDP of 2021)", TIMING,
            choices=GRADIENT_REDUCTIONS, phases=TRAIN_ONLY,
            default_doc="the framework's [collectives] gradients, else overlapped"),
    _option("accumulate", int, "micro-batches of 'batch' per optimizer step (gradient accumulation)", STEP,
            default=1, minimum=1, phases=TRAIN_ONLY, metavar="K"),
    _option("fusion", str, "kernel fusion: none, epilogue (bias and activation in the product), full (also "
            "dropout + residual + norm, and a multi-tensor optimizer)", STEP, default="none", choices=FUSIONS),
    _option("grad_dtype", str, "the gradients' type", STEP, choices=GRADIENT_DTYPES, phases=TRAIN_ONLY,
            default_doc="fp32 main gradients when a 16-bit step accumulates, else the step's dtype"),
    _option("context", int, "decode, prefill: tokens in each sequence's KV cache (decode) or the prompt (prefill)",
            STEP, minimum=0, phases=ONE_STEP_SERVING, metavar="S"),
    _option("prompt", int, "generate: tokens in each request's prompt (prefilled as one step)", STEP, minimum=1,
            phases=(GENERATE,), metavar="P"),
    _option("output", int, "generate: tokens each request generates (the prefill's first, then one a decode step)",
            STEP, minimum=1, phases=(GENERATE,), metavar="N"),
    _option("weights", str, "weight-only quantization: the block matrices stored narrow, dequantized in the "
            f"product ({', '.join(BLOCK_FORMATS)} with their block scales)", STEP, choices=WEIGHT_DTYPES, phases=INFERENCE),
    _option("kv_dtype", str, "the KV cache's type", STEP, choices=KV_DTYPES, phases=SERVING_PHASES,
            default_doc="dtype"),
    _option("cache_length", int, "decode: tokens each sequence's KV cache is preallocated for (a static cache, "
            "gpt-fast's max_seq_length); the framework's [kernels] decode_attention says whether attention reads "
            "every allocated row or the filled ones (docs/serving.md)", STEP, minimum=1, phases=("decode",),
            default_doc="context + 1 (the cache holds what it is filled with)", metavar="N"),
    _option("weight_group", int, "int4 weights: weights that share one fp16 scale (GPTQ and AWQ use 32-128)", STEP,
            minimum=1, maximum=MAX_WEIGHT_GROUP, phases=INFERENCE, default_doc="128", metavar="N", needs=GROUPED),
    _option("weight_zero", str, "int4 weights: the type of each group's zero point, stored beside its scale "
            "(AWQ and GPTQ pack int4 zeros, gpt-fast keeps bf16)", STEP, choices=tuple(WEIGHT_ZEROS),
            phases=INFERENCE, default_doc="none (symmetric groups)", needs=GROUPED),
    _option("dp", int, "data-parallel replicas; 'batch' stays one replica's micro-batch", DEVICES, default=1,
            minimum=1, metavar="N"),
    _option("tp", int, "tensor-parallel devices per replica, Megatron-style column/row products", DEVICES,
            default=1, minimum=1, metavar="N"),
    _option("pp", int, "pipeline stages, 1F1B over 'accumulate' micro-batches", DEVICES, default=1, minimum=1,
            metavar="N"),
    _option("ep", int, "expert-parallel group, drawn from the dp replicas", DEVICES, default=1, minimum=1,
            metavar="N"),
    _option("zero", int, "ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also weights", DEVICES,
            default=0, minimum=0, maximum=3, phases=TRAIN_ONLY, metavar="N"),
    _option("cp", int, "context-parallel devices: each holds S / cp tokens of every sequence (ranks: tp, then "
            "cp, then dp, then pp)", DEVICES, default=1, minimum=1, metavar="N"),
    _option("cp_kind", str, "context parallelism: ring (K, V blocks passed device to device, overlapped with "
            "each block's attention) or ulysses (all-to-alls of heads around attention; heads must divide by cp)",
            DEVICES, default="ring", choices=CP_KINDS),
    _option("sequence_parallel", bool, "Megatron sequence parallelism: norms, residuals and dropouts sharded "
            "over the tensor-parallel group, its all-reduces replaced by reduce-scatters and all-gathers (needs "
            "tp > 1)", DEVICES, default=False, metavar="on|off", default_doc="off",
            help="Megatron sequence parallelism: norms, residuals and dropouts sharded over the tensor-parallel "
            "group, its all-reduces replaced by reduce-scatters and all-gathers; needs --tp > 1 (on | off; the "
            "flag alone is on)"),
    _option("interleave", int, "interleaved 1F1B: virtual pipeline stages a device (the layers split into pp x "
            "interleave chunks; accumulate a multiple of pp)", DEVICES, default=1, minimum=1, metavar="V",
            phases=TRAIN_ONLY),
    _option("max_positions", int, "rows of the learned position table, for a preset with learned positions "
            "run at a longer sequence than it was trained for (its position weights grow with it)", STEP, minimum=1,
            default_doc="the preset's", metavar="N"),
    _option("attention", str, "attention kernels: materialized (the scores in memory, kept for the backward) or "
            "flash (one fused kernel, scores recomputed)", STEP, choices=ATTENTIONS,
            default_doc="the network's own"),
    _option("update_fusion", str, "the weight update: fused into the kernel that makes each gradient (W += "
            "-eta.dY^T.X as one sweep over W, no gradient stored, as the codes of 1986 wrote it) or separate (the "
            "gradient written, then an update kernel)", STEP, choices=UPDATE_FUSIONS, phases=TRAIN_ONLY,
            default_doc="fused with --updates per-example, separate otherwise"),
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
# The options' declarations, as the measurement files and the docs read them.
OPTION_FIELDS: tuple[Field, ...] = tuple(o.field for o in OPTIONS)


def names(*stages: str) -> tuple[str, ...]:
    """The options read by ``stages`` (all of them when none is named), in declared order."""
    return tuple(o.name for o in OPTIONS if not stages or o.stage in stages)


def workload_of(network: Any, gemm: Any) -> str:
    return GEMM if gemm is not None else NETWORK


def inapplicable(given: Mapping[str, Any], workload: str) -> list[tuple[str, str]]:
    """The ``given`` options that do not apply to a case of ``workload`` (at the phase given,
    else the default phase), each with the clause that says why."""
    phase = given.get("phase", BY_NAME["phase"].default)
    return [(k, BY_NAME[k].why_not(workload, phase))
            for k in given if k in BY_NAME and not BY_NAME[k].applies(workload, phase, given)]


def refuse_inapplicable(given: Mapping[str, Any], workload: str) -> None:
    """An InputError naming the first given option that does not apply, if any."""
    for name, why in inapplicable(given, workload)[:1]:
        raise InputError(f"{BY_NAME[name].flag} {why}", field=name)


# --------------------------------------------------------------------------------------
# The case


class _CaseMethods:
    """What every :class:`Case` does; its fields come from :data:`OPTIONS`."""

    machine: str
    network: str | None
    gemm: tuple[int, int, int] | None
    phase: str
    power: str | None

    def __post_init__(self) -> None:
        self.parallel  # noqa: B018 - refuses bad device counts before any work

    @property
    def parallel(self) -> Parallel:
        return Parallel(**{k: getattr(self, k) for k in names(DEVICES)})

    @property
    def workload(self) -> str:
        return workload_of(self.network, self.gemm)

    @property
    def held(self) -> bool:
        """Whether the run holds its device at its power limit: as ``power`` says, else a
        network's training run (hours at the limit), not a single product or an inference
        step (a benchmark's or a server's burst)."""
        if self.power is not None:
            return self.power == HELD
        return self.phase == TRAIN and self.gemm is None

    def given(self) -> dict[str, Any]:
        """The options not at their default, in declared order: what a person said."""
        return {o.name: getattr(self, o.name) for o in OPTIONS if getattr(self, o.name) != o.default}

    def as_dict(self) -> dict[str, Any]:
        """The machine, the workload and the given options: the case's identity in stored records."""
        return {"machine": self.machine, **self.key()}

    def key(self, *stages: str) -> dict[str, Any]:
        """The workload and the given options read by ``stages`` (all of them when none is
        named): what a step or a replay depends on."""
        keep = set(names(*stages))
        out = {"network": self.network, "gemm": list(self.gemm) if self.gemm is not None else None,
               **{k: v for k, v in self.given().items() if k in keep}}
        if self.network is not None and "framework" not in keep:
            # The framework (the case's, else the machine's default) picks kernels that shape
            # the step: its attention, and what decode reads of a preallocated cache.
            shaping = _step_shaping(self.framework, self.machine, self.network, self.phase,
                                    self.cache_length is not None)
            if shaping:
                out["stack"] = dict(shaping)
        return out


@functools.lru_cache(maxsize=256)
def _step_shaping(framework: str | None, machine: str, network: str, phase: str, preallocated: bool
                  ) -> dict[str, str]:
    """The kernel choices of a case's framework that shape its step: its attention kernels
    for a network with attention, what decode reads of a cache preallocated to
    ``--cache-length``; those at their defaults are left out."""
    from .networks import load_network
    from .profiles import case_framework

    try:
        fw = case_framework(framework, machine)
        sequence = load_network(network).is_sequence
    except InputError:  # a machine, network or framework that does not load: the run says why
        return {}
    out = {}
    if sequence and fw.attention is not None:
        out["attention"] = fw.attention
    if sequence and phase == "decode" and preallocated and fw.decode_attention != "filled":
        out["decode_attention"] = fw.decode_attention
    return out


Case = make_dataclass(
    "Case",
    [("machine", str), ("network", "str | None", field(default=None)),
     *[(o.name, f"{o.python_type.__name__}" + ("" if o.default is not None else " | None"),
        field(default=o.default)) for o in OPTIONS],
     ("gemm", "tuple[int, int, int] | None", field(default=None))],
    bases=(_CaseMethods,),
    frozen=True,
)
Case.__module__ = __name__  # so it pickles for worker processes (make_dataclass's module= is 3.12+)
Case.__doc__ = ("What to simulate: a machine (profile id or file), exactly one of a network (preset id or "
                "file) and a GEMM (M, N, K), and the options of :data:`OPTIONS` (each at its default "
                "unless given).")


def make_case(machine: str, network: str | None = None, gemm: Sequence[int] | None = None,
              **options: Any) -> Any:
    """A :class:`Case` from option values as a person gives them (text or numbers), each
    checked by its declaration; an option that does not apply is an InputError."""
    unknown = [k for k in options if k not in BY_NAME]
    if unknown:
        raise InputError(f"unknown option {unknown[0]!r} (options: {', '.join(BY_NAME)})", field=unknown[0])
    if (network is None) == (gemm is None):
        raise InputError("a case names exactly one of a network and a GEMM", field="network")
    values = {k: BY_NAME[k].parse(v) for k, v in options.items() if v is not None}
    refuse_inapplicable(values, workload_of(network, gemm))
    return Case(machine=machine, network=network, gemm=tuple(gemm) if gemm is not None else None, **values)


# --------------------------------------------------------------------------------------
# The command line


def _help(option: Option, lists: bool) -> str:
    text = option.help or option.field.doc
    if option.field.choices and not option.help:
        text = f"{text} ({' | '.join(option.field.choices)})"
    default = option.field.default_doc or (str(option.default) if option.default is not None else "")
    if default:
        text += f"; default {default}"
    if lists:
        text += "; a comma list runs every case once for each"
    return text.replace("%", "%%")


def add_case_arguments(parser: argparse.ArgumentParser | Any, *, lists: bool = False,
                       stages: Iterable[str] = STAGES, skip: Iterable[str] = ()) -> None:
    """One argument per option read by ``stages`` (except ``skip``): one value each
    (``inspect``, ``step``), or comma lists (``sweep``, ``lists``). No argument has a
    default: an option left out is absent from the namespace, so it never counts as given."""
    wanted = set(stages)
    group = parser.add_argument_group("case options", "the case's configuration (memwall.options)")
    for option in OPTIONS:
        if option.stage not in wanted or option.name in skip:
            continue
        metavar = option.metavar or ("V" if lists else option.name.upper())
        if lists:
            group.add_argument(option.flag, dest=option.name, nargs="+", metavar=metavar,
                               default=argparse.SUPPRESS, help=_help(option, True))
        elif option.python_type is bool:  # the flag alone says on
            group.add_argument(option.flag, dest=option.name, nargs="?", const="on", default=argparse.SUPPRESS,
                               metavar=metavar, help=_help(option, False))
        else:
            # Read as text and checked by make_case, so a bad value is one InputError line, as from a file.
            group.add_argument(option.flag, dest=option.name, default=argparse.SUPPRESS, metavar=metavar,
                               help=_help(option, False))


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The case options a command line gave, in declared order."""
    return {o.name: getattr(args, o.name) for o in OPTIONS if hasattr(args, o.name)}


def option_lists(args: argparse.Namespace) -> dict[str, list[Any]]:
    """``sweep``'s option lists (``--phase train,decode`` or ``--phase train decode``), each value
    checked and converted; options not given are absent."""
    out: dict[str, list[Any]] = {}
    for o in OPTIONS:
        raw = getattr(args, o.name, None)
        if raw is None:
            continue
        items = [v for item in raw for v in str(item).split(",") if v]
        if not items:
            raise InputError("needs at least one value", field=o.name)
        out[o.name] = list(dict.fromkeys(o.parse(v) for v in items))
    return out


# --------------------------------------------------------------------------------------
# Many cases


@dataclass
class Combined:
    """Cases with option lists applied: ``cases``, and per option the cases each of its
    values was left off because it does not apply to them (``skipped``)."""

    cases: list[Any]
    skipped: dict[str, int]

    def note(self) -> str:
        """One line counting the left-off combinations ('' when none)."""
        if not self.skipped:
            return ""
        parts = [f"{BY_NAME[k].flag} on {n} case{'s' if n != 1 else ''}" for k, n in self.skipped.items()]
        return ("option values left off the cases they do not apply to (another workload or phase): "
                + ", ".join(parts))


def combine(cases: Iterable[Any], lists: Mapping[str, Sequence[Any]]) -> Combined:
    """Every case once for each combination of the option ``lists`` (the sweep's axes). A
    value that does not apply to a combination (``--context 512`` with ``--phase train``)
    is left off it and counted; the cases that differ only by left-off values run once."""
    axes = [[(name, v) for v in values] for name, values in lists.items() if values]
    out: dict[Any, None] = {}
    skipped: dict[str, int] = {}
    for case in cases:
        for combo in itertools.product(*axes):
            values = {**case.given(), **dict(combo)}
            dropped = dict(inapplicable(values, case.workload))
            for name in dropped:
                if name in lists:
                    skipped[name] = skipped.get(name, 0) + 1
            kept = {k: v for k, v in dict(combo).items() if k not in dropped}
            out[replace(case, **kept) if kept else case] = None
    return Combined(list(out), skipped)
