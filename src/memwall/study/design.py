"""The default study, as data: which cases ``memwall sweep`` runs and why.

Owns: the study's networks and machines (:data:`CLASSICS`, :data:`LARGE`, the batch
window's and decode's), :func:`study` (the default study and its ``--quick`` version),
:func:`product` (plain machines × networks × batches × checkpointing) and
:func:`synthetic_machines` (one compute engine with its memory bandwidth, or its whole
memory system, over decades: the synthetic balance sweep of figure 6).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..options import Case
from .identity import machine_ids, machine_info, network_ids, synthetic_spec

# The classic 1980s backprop networks, in the order the figures list them.
CLASSICS = ("nettalk", "family-trees", "encoder-8-3-8", "sonar", "alvinn", "lecun-1989")
# A large network that is a pure chain of d×d products: at batch 1 every weight is used
# once per pass (a GEMV), and its activations equal its parameters at batch = d = 1024.
LARGE = "affine-48x1024"
# A bf16 transformer for the batch window (figure 4); short sequences so the batch
# axis spans from far below to far above the compute-bound batch in tokens.
WINDOW_NETWORK = "gpt2-small"
# ... and one wider than d_min = a·β/72 (about 1100 unfused and 770 fully fused on an
# H100, for GPT-2's a of 270 and 188), unfused and fully fused, on one machine: its curve
# can reach the plateau that GPT-2 small's cannot.
WIDE_WINDOW_NETWORK = "gpt2-xl"
WIDE_WINDOW_FUSIONS = ("none", "full")
# Serving: a GQA model decoding on the modern machines, batch 1 to 256, a short and a long
# context (where batching turns decode compute-bound, and where the KV cache takes over).
DECODE_NETWORK = "llama3-8b"
DECODE_BATCHES = (1, 8, 64, 256)
DECODE_CONTEXTS = (512, 8192)

MODERN_KINDS = ("gpu", "tpu", "wafer")
# The batch window is drawn for a few modern machines, one line each, so it stays legible.
WINDOW_MACHINES = ("v100-sxm2", "a100-sxm", "h100-sxm", "b200", "mi300x", "tpu-v4", "tpu-v5p")


def product(machines: Iterable[str], networks: Iterable[str], batches: Iterable[int],
            checkpoints: Iterable[str] = ("none",), **fields: Any) -> list[Case]:
    """Every machine × network × batch × checkpoint, with ``fields`` set on each Case."""
    return [Case(machine=m, network=n, batch=b, checkpoint=c, **fields)
            for m in machines for n in networks for b in batches for c in checkpoints]


def _modern(ids: Sequence[str]) -> list[str]:
    return [i for i in ids if machine_info(i).kind in MODERN_KINDS]


def _window_machines(modern: Sequence[str], most: int = 6) -> list[str]:
    """The named representatives that are shipped, else the newest modern machines."""
    named = [i for i in WINDOW_MACHINES if i in modern][:most]
    if named:
        return named
    return sorted(modern, key=lambda i: (machine_info(i).year, i))[-most:]


def _synthetic_base(ids: Sequence[str]) -> str | None:
    """The compute engine for the synthetic sweep: an H100 if shipped, else the newest GPU."""
    gpus = [i for i in ids if machine_info(i).kind == "gpu"] or list(ids)
    named = [i for i in gpus if "h100" in i.lower()]
    if named:
        return sorted(named)[0]
    return max(gpus, key=lambda i: (machine_info(i).year, i)) if gpus else None


def synthetic_machines(base: str, decades: float = 4.0, per_decade: int = 3,
                       low_balance: float = 1.0, hierarchy: bool = False) -> list[str]:
    """``base`` with memory bandwidth set so balance runs over ``decades`` from ``low_balance``:
    main memory's alone (``BASE@bw=X``), or with ``hierarchy`` the whole memory system
    scaled with it (``BASE@hier=X``: every level's bandwidth times the same factor, every
    latency over it), so that no on-chip level or latency floors the memory time."""
    info = machine_info(base)
    peak = info.peak_flops[info.primary_dtype]
    n = int(round(decades * per_decade))
    return [synthetic_spec(base, float(f"{peak / (low_balance * 10 ** (k / per_decade)):.6g}"), hierarchy)
            for k in range(n + 1)]


def study(*, quick: bool = False) -> list[Case]:
    """The README's main job: the cases behind figures 2, 3, 4 and 6 (1 and 5 need none).

    - per-example training (batch 1) of the classics and of a large network on every
      machine (the large network's word-by-word streams on the 1980s machines are
      sampled: see docs/timing.md);
    - a bf16 transformer over batch sizes, up to 8192 tokens, on a few modern machines
      (the batch window), and a wider one, unfused and fused, on one (its plateau);
    - the large network with and without √L checkpointing on one modern machine;
    - a few networks on one compute engine with memory bandwidth over four decades, main
      memory's alone and the whole memory system's (each level's bandwidth and latency);
    - decode of a GQA transformer on a few modern machines over batch and context.

    ``quick`` keeps one machine per decade, three classics, fewer batches and bandwidths.
    """
    machines = machine_ids()
    networks = set(network_ids())
    classics = [n for n in CLASSICS if n in networks]
    large = [LARGE] if LARGE in networks else []
    if quick:
        machines = _one_per_era(machines)
        classics = classics[:3]
    modern = _modern(machines)
    cases = product(machines, classics, [1], updates="per-example")
    cases += product(machines, large, [1], updates="per-example")
    if WINDOW_NETWORK in networks and modern:
        window = _window_machines(modern, most=1 if quick else 6)
        batches = [1, 8, 64] if quick else [1, 2, 8, 32, 128, 512]
        cases += product(window, [WINDOW_NETWORK], batches, seq_len=16)
        if WIDE_WINDOW_NETWORK in networks and not quick:
            for fusion in WIDE_WINDOW_FUSIONS:
                cases += product(window[:1], [WIDE_WINDOW_NETWORK], batches, seq_len=16, fusion=fusion)
    if large and modern and not quick:
        cases += product(_window_machines(modern, most=1), large, [16, 128], ["none", "sqrt"])
    base = _synthetic_base(modern or machines)
    if base:
        synth_nets = (classics[:1] + large) if quick else (classics[:3] + large)
        per_decade = 1 if quick else 3
        for hierarchy in (False, True):
            cases += product(synthetic_machines(base, per_decade=per_decade, hierarchy=hierarchy), synth_nets, [1],
                             updates="per-example")
    if DECODE_NETWORK in networks and modern:
        decode_machines = _window_machines(modern, most=1 if quick else 6)
        batches = [1, 64] if quick else list(DECODE_BATCHES)
        for context in DECODE_CONTEXTS[:1] if quick else DECODE_CONTEXTS:
            cases += product(decode_machines, [DECODE_NETWORK], batches, phase="decode", context=context)
    return _dedupe(cases)


def _one_per_era(ids: Sequence[str]) -> list[str]:
    """The first machine of each decade (by year, then id): the quick sweep's machines."""
    seen: dict[int, str] = {}
    for i in sorted(ids, key=lambda i: (machine_info(i).year, i)):
        seen.setdefault(machine_info(i).year // 10, i)
    return list(seen.values())


def _dedupe(cases: Iterable[Case]) -> list[Case]:
    return list(dict.fromkeys(cases))

