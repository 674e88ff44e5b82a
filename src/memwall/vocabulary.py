"""The words memwall's files, configurations, sweeps and command line share.

Owns: the allowed values of the case options (phases, update modes, optimizers, training
dtypes, kernel fusion, activation checkpointing and its syntax), so a loader, the configuration, the
sweep and the CLI all accept exactly the same spellings and say the same thing about a
wrong one. Nothing here knows what a word does; the stage that uses it does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InputError

PHASES: tuple[str, ...] = ("train", "forward", "decode", "prefill", "generate")
# Serving phases: decode generates one token per sequence against a cache of ``context``
# tokens; prefill runs a prompt of ``context`` tokens and fills the cache; generate is a
# whole request (a prompt of ``prompt`` tokens prefilled, then ``output`` - 1 decode
# steps: memwall.simulation.generate), not one step.
SERVING_PHASES: tuple[str, ...] = ("decode", "prefill", "generate")
GENERATE = "generate"
TRAIN = "train"
UPDATES: tuple[str, ...] = ("per-example", "minibatch")
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam")
# Dtypes a network trains in; 16-bit types train with fp32 master weights. fp8 and the
# block-scaled formats train as Transformer Engine runs them (memwall.workloads.graph):
# the products in the narrow type, everything else in bf16 with fp32 main weights.
GRADIENT_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format (OCP Microscaling, NVIDIA NVFP4): ``bits`` an element, one
    scale of ``scale_bits`` a block of ``block`` consecutive elements along the reduction,
    ``tensor_bytes`` more a tensor (NVFP4's fp32 second-level scale); its products run at
    the ``[compute]`` rate of ``rate``."""

    bits: int
    block: int
    scale_bits: int
    tensor_bytes: int
    rate: str

    def scale_bytes(self, elements: int) -> int:
        """Bytes of the scales of a tensor of ``elements``: every block's, and the tensor's own."""
        return -(-elements // self.block) * self.scale_bits // 8 + self.tensor_bytes

    def bytes_per_element(self) -> float:
        """Bytes an element takes with its share of the block scales (the tensor's own left out)."""
        return self.bits / 8 + self.scale_bits / 8 / self.block


# OCP MX v1.0: E8M0 scale a block of 32 (MXFP8 E4M3, MXFP6 E2M3, MXFP4 E2M1); NVFP4: E2M1
# elements, an E4M3 scale a block of 16 and an fp32 scale a tensor.
BLOCK_FORMATS: dict[str, BlockFormat] = {
    "mxfp8": BlockFormat(8, 32, 8, 0, "fp8"),
    "mxfp6": BlockFormat(6, 32, 8, 0, "fp6"),
    "mxfp4": BlockFormat(4, 32, 8, 0, "fp4"),
    "nvfp4": BlockFormat(4, 16, 8, 4, "fp4"),
}
# Training types whose products run narrow (cast from bf16 before each product, Transformer
# Engine's recipes: fp8 delayed per-tensor scaling, MXFP8 and NVFP4 block scaling).
NARROW_TRAINING: tuple[str, ...] = ("fp8", *BLOCK_FORMATS)
TRAINING_DTYPES: tuple[str, ...] = (*GRADIENT_DTYPES, *NARROW_TRAINING)
# How kernels reach the device (docs/timing.md, "Dispatch"): a framework issuing kernel by
# kernel, a captured graph replayed, or one compiled program per step.
DISPATCH_MODES: tuple[str, ...] = ("eager", "graph", "compiled")
# How a step is timed: on the device's stream (step after step), or by a host timer around
# one step (its first launch and a synchronisation round trip included).
TIMINGS: tuple[str, ...] = ("device", "host")
# The device's power over a run (docs/timing.md, "The power limit"): a burst short enough to
# stay at the boost clock, or a run held at the power limit (a training run; a benchmark loop
# of seconds of back-to-back calls).
BURST, HELD = "burst", "held"
POWER_STATES: tuple[str, ...] = (BURST, HELD)
# Kernel fusion: none; epilogue (bias and activation folded into the product that makes
# their input, as cuBLASLt epilogues do); full (also dropout + residual + norm in one
# kernel and the optimizer as one multi-tensor kernel per layer: Megatron-LM, apex).
FUSIONS: tuple[str, ...] = ("none", "epilogue", "full")
# Attention kernels: the scores materialised in memory (and kept for the backward), or
# one fused kernel that keeps them on chip and recomputes them (FlashAttention).
ATTENTIONS: tuple[str, ...] = ("materialized", "flash")
DTYPE_BYTES: dict[str, int] = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
# The types of two bytes or more: the ones a step's products run in whatever its case asks
# (a narrow step keeps its attention and its gradients' products there).
WIDE_DTYPES: tuple[str, ...] = tuple(d for d, b in DTYPE_BYTES.items() if b >= 2)
# Every arithmetic type a case may name (a single GEMM any of them; a network's step checks
# its phase's own set: TRAINING_DTYPES, INFERENCE_DTYPES).
DTYPES: tuple[str, ...] = (*DTYPE_BYTES, *BLOCK_FORMATS)
# Storage widths in bits, for the types narrower than a byte (int4 packs two a byte); a
# block-scaled format's elements (its scales are tensors of their own).
DTYPE_BITS: dict[str, int] = {**{k: 8 * v for k, v in DTYPE_BYTES.items()}, "int4": 4,
                              **{k: f.bits for k, f in BLOCK_FORMATS.items()}}
# Compute dtypes of inference (forward, decode, prefill): the training ones and 8-bit.
INFERENCE_DTYPES: tuple[str, ...] = (*GRADIENT_DTYPES, "fp8", "int8", *BLOCK_FORMATS)
# Weight-only quantization (weights stored narrow, dequantized in the product) and KV cache types.
WEIGHT_DTYPES: tuple[str, ...] = ("int8", "int4", "fp8", *BLOCK_FORMATS)


def rate_key(dtype: str) -> str:
    """The ``[compute]`` key whose rate runs a product in ``dtype`` (a block-scaled format's
    element type; any other dtype its own)."""
    f = BLOCK_FORMATS.get(dtype)
    return f.rate if f is not None else dtype
# Weight types stored with a scale a group of weights along the input dimension, as GPTQ
# and AWQ int4 checkpoints are: (weights a group, bytes a scale: fp16). Symmetric: no zero
# point is stored. int8 (a scale a channel) and fp8 (a scale a tensor) add no bytes worth
# counting.
WEIGHT_GROUP_SCALES: dict[str, tuple[int, int]] = {"int4": (128, 2)}
# Zero points stored beside each group's scale (asymmetric groups), by their type, in bits:
# AWQ and GPTQ checkpoints pack them as int4; gpt-fast keeps a bf16 scale and zero a group.
WEIGHT_ZEROS: dict[str, int] = {"none": 0, "int4": 4, "fp16": 16, "bf16": 16}
MAX_WEIGHT_GROUP = 1 << 20  # weights a group at most (a group larger than any matrix is no group)


def group_format(weights: str | None, group: int | None = None, zero: str | None = None) -> tuple[int, int] | None:
    """(weights a group, bits a group's scale and zero point take) for weights stored with
    group scales, the type's default group and no zero point unless given; None otherwise."""
    if weights not in WEIGHT_GROUP_SCALES:
        return None
    default, scale_bytes = WEIGHT_GROUP_SCALES[weights]
    return group or default, 8 * scale_bytes + WEIGHT_ZEROS[zero or "none"]


KV_DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "int8", "int4")
# The types a single product may write its result in (cuBLASLt's D type): an fp8 product
# commonly writes bf16 or fp16, and a 16-bit one may write fp32.
PRODUCT_OUT_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp8")


def product_out_dtype(dtype: str, out_dtype: str | None = None) -> str:
    """The type a single product writes C in: ``out_dtype`` where given, else its dtype's own
    (bf16 for a block-scaled format, whose elements have no type of their own to write)."""
    return out_dtype or ("bf16" if dtype in BLOCK_FORMATS else dtype)


# Activation checkpointing: none, sqrt (ceil(sqrt L) layers a segment), every:K (K layers
# a segment), block:N (the first N layers each its own segment, the rest stored: Megatron's
# recompute_method block with recompute_num_layers N), selective (recompute the attention
# core only; Korthikanti et al. 2022).
CHECKPOINT_WORDS: tuple[str, ...] = ("none", "sqrt", "selective")
CHECKPOINT_SYNTAX = "none | sqrt | every:K | block:N | selective"
_COUNTED = re.compile(r"(every|block):([1-9][0-9]*)")


@dataclass(frozen=True)
class Checkpointing:
    """A parsed checkpointing option: ``mode`` is none, sqrt, every, block or selective."""

    mode: str
    count: int = 0  # every: layers a segment; block: the layers recomputed, from the first

    @property
    def text(self) -> str:
        return f"{self.mode}:{self.count}" if self.mode in ("every", "block") else self.mode


def parse_checkpoint(text: object, field: str = "checkpoint") -> Checkpointing:
    """``"every:4"`` -> Checkpointing("every", 4); anything else not in the syntax is refused."""
    if isinstance(text, str):
        if text in CHECKPOINT_WORDS:
            return Checkpointing(text)
        m = _COUNTED.fullmatch(text)
        if m:
            return Checkpointing(m.group(1), int(m.group(2)))
    raise InputError(f"unknown checkpointing {text!r}; use {CHECKPOINT_SYNTAX} (K and N positive integers)",
                     field=field)


def check_word(value: object, allowed: tuple[str, ...], field: str) -> str:
    """``value`` if it is one of ``allowed``; else an InputError naming the field and the choices."""
    if isinstance(value, str) and value in allowed:
        return value
    raise InputError(f"must be one of {', '.join(allowed)}, got {value!r}", field=field)


# What a published measurement's value measures (era_data/measurements, memwall.study.measurements),
# declared here, below the model, so that a figure can name the metrics without loading it.
METRICS: dict[str, str] = {
    "cups": "connection updates per second (training: forward, backward and weight update)",
    "cps": "connections per second (forward pass only)",
    "flops": "achieved arithmetic rate, FLOP/s",
    "seconds": "seconds per step (a training step, a forward pass or one GEMM; generate: the whole request, "
               "ttft + (output - 1) x tpot; a time to first token is a prefill's seconds)",
    "samples_per_second": "examples (or sequences) per second, per device (all devices' / the device count)",
    "tokens_per_second": "decode: tokens generated per second, all sequences together (batch / seconds per step); "
                         "prefill: prompt tokens per second; generate: output tokens of every request over the "
                         "request's seconds, all devices; train or forward: tokens per second per device "
                         "(all devices' / the device count)",
    "seconds_per_token": "decode: seconds per output token of each sequence (the decode step's time); generate: "
                         "the mean decode step (tpot)",
    "joules": "energy of one step, every device (a training step, a forward pass, one decode step of the whole "
              "batch, a prefill; generate: the whole request, prefill and decode steps)",
    "watts": "average power per device over the step",
    "tokens_per_joule": "tokens of one step per joule, every device's (decode: output tokens; prefill: prompt "
                        "tokens; generate: the requests' output tokens; training: tokens trained)",
}
# The unit a value written as a string must carry, per metric (with a decimal prefix).
METRIC_UNITS: dict[str, tuple[str, ...]] = {
    "cups": ("CUPS",),
    "cps": ("CPS",),
    "flops": ("FLOP/s", "FLOPS"),
    "seconds": ("s",),
    "samples_per_second": ("samples/s",),
    "tokens_per_second": ("tokens/s",),
    "seconds_per_token": ("s",),
    "joules": ("J",),
    "watts": ("W",),
    "tokens_per_joule": ("tokens/J",),
}
