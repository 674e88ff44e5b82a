"""Sharding a training step over devices: data, tensor, pipeline and expert parallelism, ZeRO.

Owns: :class:`Parallel` (dp, tp, pp, ep, zero and their checks), :class:`Stage` (one
kind of pipeline stage: its layers, whether it holds the embedding or the head, how
many stages are of that kind), :func:`stages`, :func:`shard` (the network one device of
a stage holds, as a :class:`~memwall.networks.Network` the builders declare like any
other), :func:`device_steps` (each distinct device's step, built by
:func:`memwall.workloads.step.build_step`), :class:`Comm` and :func:`communication`
(the collectives and transfers one device takes part in, per optimizer step),
:func:`shard_ledger` (the capacity ledger with ZeRO's sharding applied) and
:func:`shard_summary` (what a device holds: layers, tokens, heads).

The transform is declared, not hand-placed: a shard is a narrower or shorter network,
so every pass (checkpointing, accumulation, fusion, liveness) runs on it unchanged.

* Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): the QKV and first MLP products
  are column-parallel (heads / tp, d_ff / tp), the attention output and second MLP
  products row-parallel (their input width / tp), the vocabulary split (vocab / tp,
  rounded up), norms and residuals replicated. Two all-reduces of the block's activation
  per layer forward, two backward, two more per layer whose forward checkpointing re-runs
  (every layer with every:K or sqrt, the first N with block:N); one for the
  vocabulary-parallel embedding.
* Pipeline parallelism: stage i holds layers [i s, (i+1) s), s = ceil(L / pp); the first
  holds the embedding, the last the head. Identical stages are one :class:`Stage`.
* Expert parallelism: the ep devices of a group (drawn from the data-parallel replicas,
  as Megatron-core and DeepSpeed-MoE do) each hold E / ep experts and receive every
  group member's tokens for them: each expert's product runs on tokens x k x ep / E rows.
  Dispatch and combine are all-to-alls, two forward and two backward per MoE layer.
* ZeRO (Rajbhandari et al. 2020) over the data-parallel group: stage 1 and 2 reduce-scatter
  the gradients and all-gather the updated weights after the update; stage 3 gathers each
  layer's weights before its forward and before its backward and reduce-scatters each
  layer's gradients, every micro-batch; the calls, their prefetch and overlap follow the
  framework's [sharding] policy (memwall.frameworks.Sharding) when the step is timed.
* Context parallelism (``cp``): each of the cp devices of a group holds S / cp tokens of
  every sequence for all kernels but attention's core. ``ring`` (Liu et al. 2023, ring
  attention; Megatron-core / Transformer Engine's CP): the core runs on the local queries
  against the S keys in cp blocks, the K, V blocks passed to the next device while the
  block before is computed (cp - 1 transfers forward; K, V and their gradients backward);
  the zigzag split (device i holds chunks i and 2 cp - 1 - i) gives every device the
  same share of a causal attention. ``ulysses`` (Jacobs et al. 2023, DeepSpeed-Ulysses):
  an all-to-all turns Q, K, V of S / cp tokens and every head into S tokens and heads /
  cp before the core, another turns the context back after it (and the mirror two
  backward); refused unless the heads (and KV heads) divide by cp. The weights are
  replicated over cp, so their gradients are reduced over dp x cp (Megatron's
  data-parallel group with cp), and ZeRO shards over it.
* Sequence parallelism (``sequence_parallel``, Korthikanti et al. 2022): with tp > 1 the
  norms, residuals and dropouts run on S / tp tokens; each block's all-reduce becomes a
  reduce-scatter after the row-parallel product and an all-gather before the
  column-parallel one, and the backward re-gathers the saved shard for the weight
  gradient.
* Interleaved 1F1B (``interleave`` V, Narayanan et al. 2021): the layers split into
  pp x V chunks, device d holding chunks d, d + pp, ...; the same layers per device as
  plain 1F1B, V times the pipeline messages, the bubble divided by V.
* Ranks are placed tensor-parallel first, then context-parallel, then data-parallel, then
  pipeline (Megatron's order): the tp group has stride 1, cp stride tp, dp (and ep)
  stride tp x cp, pp stride tp x cp x dp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..networks import Network
from ..vocabulary import DTYPE_BYTES
from .checkpoint import recomputed_layers
from .config import TrainingConfig
from .kernel import Ledger

ZERO_STAGES = (0, 1, 2, 3)
CP_KINDS = ("ring", "ulysses")
# dp x tp x pp at most 2**24 (16.8 M): the largest clusters built hold a few hundred
# thousand accelerators, so more is a typo; the bound also keeps the collectives' step
# counts and the bubble's micro-batch arithmetic far from overflow.
MAX_DEVICES = 1 << 24


@dataclass(frozen=True)
class Parallel:
    """How a step is spread over devices: dp x tp x cp x pp devices (ep divides dp), ZeRO
    stage, context parallelism's kind, sequence parallelism, interleaved pipeline chunks."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    zero: int = 0
    cp: int = 1
    cp_kind: str = "ring"
    sequence_parallel: bool = False
    interleave: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "ep", "cp", "interleave"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"must be a positive integer, got {v!r}", field=name)
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero!r}", field="zero")
        if self.cp_kind not in CP_KINDS:
            raise InputError(f"must be one of {', '.join(CP_KINDS)}, got {self.cp_kind!r}", field="cp_kind")
        if not isinstance(self.sequence_parallel, bool):
            raise InputError(f"must be true or false, got {self.sequence_parallel!r}", field="sequence_parallel")
        if self.devices > MAX_DEVICES:
            raise InputError(f"dp x tp x cp x pp = {self.devices:,} devices is beyond any machine "
                             f"(at most {MAX_DEVICES:,}); check the degrees", field="dp")
        if self.dp % self.ep:
            raise InputError(f"the expert-parallel group is drawn from the data-parallel replicas: ep {self.ep} "
                             f"must divide dp {self.dp}", field="ep")
        if self.sequence_parallel and self.tp == 1:
            raise InputError("sequence parallelism shards the activations across the tensor-parallel group: it "
                             "needs --tp > 1", field="sequence_parallel")
        if self.interleave > 1 and self.pp == 1:
            raise InputError("an interleaved schedule splits each pipeline device's layers into virtual stages: it "
                             "needs --pp > 1", field="interleave")

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.cp * self.pp

    @property
    def replicas(self) -> int:
        """Devices holding the same weights, whose gradients are reduced together: dp x cp."""
        return self.dp * self.cp

    @property
    def single(self) -> bool:
        """One device, no sharding: the step memwall has always run."""
        return self.devices == 1 and self.zero == 0

    def as_dict(self) -> dict[str, int | str | bool]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": self.ep, "zero": self.zero, "cp": self.cp,
                "cp_kind": self.cp_kind, "sequence_parallel": self.sequence_parallel, "interleave": self.interleave}


@dataclass(frozen=True)
class Stage:
    """One kind of pipeline stage."""

    first_layer: int
    layers: int
    embed: bool
    head: bool
    count: int  # stages of this kind
    chunks: tuple[tuple[int, int], ...] = ()  # interleaved: (first layer, layers) of each virtual stage

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        """The (first layer, layers) runs the device holds: one, or its interleaved chunks."""
        return self.chunks or ((self.first_layer, self.layers),)

    @property
    def name(self) -> str:
        if self.layers == 0:  # a network without transformer layers runs whole on every device
            return "the whole network"
        where = "+".join(n for n, on in (("embedding", self.embed), ("head", self.head)) if on)
        runs = ", ".join(f"{a}-{a + n - 1}" for a, n in self.spans)
        return f"layers {runs}" + (f" + {where}" if where else "")


def stages(network: Network, pp: int, interleave: int = 1) -> list[Stage]:
    """The distinct stages of a pipeline of ``pp`` stages: first, middle (one of them stands for
    all), last; the whole network when pp = 1. With ``interleave`` V the layers split into
    pp x V chunks of L / (pp V) (refused unless they divide), device d holding chunks d,
    d + pp, ...: the embedding on device 0, the head on device pp - 1."""
    layers = network.n_layers
    if interleave > 1:
        if layers % (pp * interleave):
            raise InputError(f"{network.id} has {layers} layers: they do not split into pp x interleave = "
                             f"{pp * interleave} virtual stages of equal size", field="interleave")
        per = layers // (pp * interleave)
        out: list[Stage] = []
        for d in range(pp):
            chunks = tuple(((v * pp + d) * per, per) for v in range(interleave))
            embed, head = d == 0, d == pp - 1
            kind = (embed, head, sum(_dense(network, a, n) for a, n in chunks))
            same = next((j for j, s in enumerate(out)
                         if (s.embed, s.head, _stage_dense(network, s)) == kind), None)
            if same is None:
                out.append(Stage(chunks[0][0], per * interleave, embed, head, 1, chunks))
            else:
                out[same] = replace(out[same], count=out[same].count + 1)
        return out
    if pp > layers:
        raise InputError(f"{network.id} has {layers} layers: a pipeline of {pp} stages leaves some empty", field="pp")
    per = -(-layers // pp)
    if per * (pp - 1) >= layers:
        raise InputError(f"{layers} layers in stages of {per} fill fewer than {pp} stages: choose pp so that "
                         f"ceil(layers / pp) x (pp - 1) < layers", field="pp")
    spans = [(i * per, min(per, layers - i * per)) for i in range(pp)]
    out = []
    for i, (first, n) in enumerate(spans):
        embed, head = i == 0, i == pp - 1
        kind = (n, embed, head, _dense(network, first, n))
        same = next((j for j, s in enumerate(out)
                     if (s.layers, s.embed, s.head, _dense(network, s.first_layer, s.layers)) == kind), None)
        if same is None:
            out.append(Stage(first, n, embed, head, 1))
        else:
            out[same] = replace(out[same], count=out[same].count + 1)
    return out


def _dense(network: Network, first: int, n: int) -> int:
    """Dense layers (before the first MoE layer) among layers [first, first + n)."""
    dense = network.moe.dense_layers if network.moe else network.n_layers
    return max(0, min(first + n, dense) - first)


def _stage_dense(network: Network, stage: Stage) -> int:
    """Dense layers a device of ``stage`` holds, over all its chunks."""
    return sum(_dense(network, a, n) for a, n in stage.spans)


def _divide(value: int, by: int, what: str, network: Network, name: str) -> int:
    if value % by:
        raise InputError(f"{network.id}: {what} {value} does not divide over {name} {by}", field=name)
    return value // by


def shard(network: Network, parallel: Parallel, stage: Stage | None = None) -> Network:
    """The network one device of ``stage`` holds (module docstring); the network itself when
    nothing is split."""
    tp, ep = parallel.tp, parallel.ep
    if not network.is_sequence:
        wanted = [name for name, on in (("tp", tp > 1), ("pp", parallel.pp > 1), ("ep", ep > 1),
                                        ("cp", parallel.cp > 1)) if on]
        if wanted:
            raise InputError(f"{network.id} is not a transformer: tensor, pipeline, expert and context "
                             "parallelism are modelled for transformers (data parallelism and ZeRO apply to any "
                             "network)", field=wanted[0])
        return network
    if ep > 1 and network.moe is None:
        raise InputError(f"{network.id} has no experts: expert parallelism needs a mixture of experts", field="ep")
    changes: dict[str, Any] = {}
    if tp > 1:
        kv = network.kv_heads
        changes.update(heads=_divide(network.heads, tp, "heads", network, "tp"),
                       kv_heads=max(1, kv // tp) if kv else kv,  # fewer KV heads than tp: each device keeps one
                       d_ff=_divide(network.d_ff, tp, "d_ff", network, "tp") if network.d_ff else 0,
                       vocab=-(-network.vocab // tp))
    moe = network.moe
    if moe is not None and (tp > 1 or ep > 1):
        moe = replace(moe, routed_experts=_divide(moe.routed_experts, ep, "routed experts", network, "ep"),
                      expert_d_ff=_divide(moe.expert_d_ff, tp, "expert d_ff", network, "tp"))
    if stage is not None and (stage.layers != network.n_layers):
        changes["n_layers"] = stage.layers
        if moe is not None:
            moe = replace(moe, dense_layers=_stage_dense(network, stage))
    if moe is not network.moe:
        changes["moe"] = moe
    if not changes:
        return network
    return replace(network, id=f"{network.id}/shard", _counts={}, **changes)


def device_steps(network: Network, config: TrainingConfig, parallel: Parallel) -> list[tuple[Stage, Any]]:
    """Each distinct device's step: one per kind of pipeline stage, on its shard. With expert
    parallelism the micro-batch's routed tokens are pooled over the ep group (each device's
    experts see ep times the tokens), which the shard's E / ep experts express. Data-parallel
    (and context-parallel) replicas all-reduce their gradients before the update, so with
    dp x cp > 1 the update runs separate (a fused update, given, is refused). Context and
    sequence parallelism split each sequence's tokens (:func:`check_split`)."""
    from .builders.transformer import SeqSplit
    from .step import build_step

    if parallel.replicas > 1 and config.updates_fused:
        if config.update_fusion is not None:
            raise InputError("--update-fusion fused updates the weights where their gradient is made: with --dp "
                             f"{parallel.dp} x --cp {parallel.cp} the replicas all-reduce the gradients first "
                             "(use separate)", field="update_fusion")
        config = replace(config, update_fusion="separate")
    if parallel.interleave > 1 and config.accumulate % parallel.pp:
        raise InputError(f"the interleaved schedule runs the micro-batches in rounds of pp: --accumulate "
                         f"{config.accumulate} is not a multiple of --pp {parallel.pp}", field="interleave")
    if not network.is_sequence:
        if parallel.sequence_parallel:
            raise InputError(f"{network.id} is not a transformer: sequence parallelism shards a transformer's "
                             "tokens", field="sequence_parallel")
        return [(Stage(0, 0, True, True, 1), build_step(shard(network, parallel), config))]
    check_split(network, config, parallel)
    split = SeqSplit(parallel.cp, parallel.cp_kind, parallel.tp if parallel.sequence_parallel else 1)
    out = []
    for st in stages(network, parallel.pp, parallel.interleave):
        out.append((st, build_step(shard(network, parallel, st), config, embed=st.embed, head=st.head,
                                   split=split)))
    return out


def check_split(network: Network, config: TrainingConfig, parallel: Parallel) -> None:
    """Refuse a context or sequence split the step cannot take: a phase without a sequence to
    split (decode's one token), a sequence that does not divide (ring's zigzag halves each
    device's share: S divides by 2 cp; Ulysses: by cp; sequence parallelism: S / cp by tp),
    ring attention over materialised scores (it merges blocks by their softmax statistics,
    as a flash kernel does), Ulysses with heads or KV heads that do not divide by cp."""
    from .step import _seq

    cp, tp = parallel.cp, parallel.tp
    if cp == 1 and not parallel.sequence_parallel:
        return
    if config.phase not in ("train", "forward", "prefill"):
        raise InputError(f"context and sequence parallelism split a sequence's tokens: phase {config.phase} has "
                         "none to split (train, forward and prefill do)", field="cp" if cp > 1 else
                         "sequence_parallel")
    seq = _seq(network, config)
    if cp > 1:
        ring = parallel.cp_kind == "ring"
        parts = 2 * cp if ring else cp
        if seq % parts:
            how = f"2 x cp = {parts} (ring attention's zigzag gives each device two chunks)" if ring else f"cp {cp}"
            raise InputError(f"{seq} tokens a sequence do not divide by {how}", field="cp")
        if ring and network.attention != "flash":
            raise InputError("ring attention merges each block's result by its softmax statistics, as a fused "
                             "(flash) kernel does: use --attention flash, or --cp-kind ulysses", field="cp_kind")
        if not ring:
            heads = network.heads // tp
            kv = max(1, network.kv_heads // tp) if network.kv_heads else heads
            if network.mla:
                kv = heads
            if heads % cp or kv % cp:
                raise InputError(f"Ulysses gives each of the cp {cp} devices whole heads: {network.id} has "
                                 f"{heads} heads and {kv} KV heads a tensor-parallel device, which do not divide by "
                                 f"{cp} (use --cp-kind ring)", field="cp")
    if parallel.sequence_parallel and (seq // cp) % tp:
        raise InputError(f"sequence parallelism gives each of the tp {tp} devices S / (cp tp) tokens: {seq // cp} "
                         f"tokens a device's sequence do not divide by {tp}", field="sequence_parallel")


@dataclass(frozen=True)
class Comm:
    """One collective or transfer one device takes part in.

    ``count`` times per micro-batch (``per = 'micro'``) or per optimizer step (``'step'``);
    ``overlap``: ``critical`` (the device waits for it), ``backward`` (bucketed, hidden
    behind the last micro-batch's backward pass but for what sticks out), ``compute``
    (prefetched behind the micro-batch's kernels), ``after`` (after the update)."""

    name: str
    kind: str  # one of memwall.interconnect.COLLECTIVES
    size: int  # devices in the group
    stride: int  # ranks between its members
    bytes: int  # S of docs/timing.md, per collective
    count: int
    per: str  # micro | step
    overlap: str  # critical | backward | compute | after | prefetch
    # ZeRO-3's gathers and reduce-scatters (overlap 'prefetch'), which the framework's
    # [sharding] policy times (memwall.timing.time_communication): the elements of each of
    # one layer's parameter tensors on this device, in the order the layer runs them; the
    # layers; the stage's other parameters (embedding, head, final norm); bytes an element.
    tensors: tuple[int, ...] = ()
    layers: int = 0
    extra: int = 0
    elem_bytes: int = 0
    recomputed: int | None = None  # ZeRO-3: the layers whose forward is re-run (None: all of them)


def _param_bytes(ledger: Ledger, cls: str) -> int:
    return int(getattr(ledger, cls))


def communication(network: Network, config: TrainingConfig, parallel: Parallel, stage: Stage,
                  ledger: Ledger, tokens: int) -> list[Comm]:
    """What one device of ``stage`` sends and receives in one optimizer step (module docstring);
    ``tokens`` are one micro-batch's on this device (the step's: decode's one a sequence,
    prefill's prompt; S / cp of each sequence with context parallelism)."""
    tp, dp, pp, ep, cp = parallel.tp, parallel.dp, parallel.pp, parallel.ep, parallel.cp
    out: list[Comm] = []
    esz = config.elem_bytes
    act = tokens * network.d_model * esz
    training = config.training
    # full recomputation re-runs a block's forward, and the forward's communication: every
    # block of the stage (every:K, sqrt) or the first N (block:N)
    again = recomputed_layers(stage.layers, config.checkpoint) if training else 0
    if tp > 1 and network.is_sequence:
        if parallel.sequence_parallel:
            out.extend(_sequence_parallel(act, tp, stage, training, again))
        else:
            per_layer = 2 + (2 if training else 0)
            out.append(Comm("tp: block activations", "all-reduce", tp, 1, act,
                            per_layer * stage.layers + 2 * again + stage.embed, "micro", "critical"))
    if cp > 1 and network.is_sequence:
        out.extend(_context_parallel(network, parallel, stage, tokens, esz, training, again))
    if pp > 1:
        # Megatron's scatter/gather: each of the tp devices sends 1/tp of the activation; each of
        # the V chunks of a device sends forward (but the last chunk of the pipeline) and
        # backward (but the first)
        v = parallel.interleave
        sends = (v - stage.head) + ((v - stage.embed) if training else 0)
        out.append(Comm("pp: activations between stages", "p2p", 2, tp * cp * dp, -(-act // tp), sends, "micro",
                        "critical"))
    if ep > 1 and network.moe is not None:
        moe_layers = stage.layers - _stage_dense(network, stage)
        routed = tokens * network.moe.active_experts * network.d_model * esz
        out.append(Comm("ep: token dispatch and combine", "all-to-all", ep, tp * cp, routed,
                        (4 if training else 2) * moe_layers, "micro", "critical"))
    if training and parallel.replicas > 1:
        grads, weights = _param_bytes(ledger, "gradients"), _param_bytes(ledger, "weights")
        expert = _expert_values(network, parallel, stage)
        g_expert = expert * DTYPE_BYTES[config.gradient_dtype]
        w_expert = expert * config.elem_bytes
        # the weights are replicated over the dp x cp replicas (ranks tp apart); experts only over
        # dp / ep of the data-parallel ones (and every cp rank)
        label = "dp" if cp == 1 else "dp x cp"
        groups = [(label, dp * cp, tp, grads - g_expert, weights - w_expert)]
        if expert and (dp // ep) * cp > 1:
            groups.append((f"{label}/ep (experts)", (dp // ep) * cp, tp * ep if cp == 1 else tp, g_expert,
                           w_expert))
        g_esz = DTYPE_BYTES[config.gradient_dtype]
        dense = _layer_tensors(network, parallel) if parallel.zero == 3 and network.moe is None else ()
        for label, n, stride, g, w in groups:
            layers = max(1, stage.layers)
            tensors = dense if "experts" not in label else ()
            out.extend(_data_parallel(label, n, stride, g, w, parallel.zero, layers,
                                      _zero3_shape(tensors, layers, w // esz), esz, g_esz, again))
    return out


def _layer_tensors(network: Network, parallel: Parallel) -> tuple[int, ...]:
    """Elements of each parameter tensor of one dense transformer layer on a tensor-parallel
    device, in the order the layer runs them: the first norm, the attention products (weight,
    bias), the second norm, the MLP products. Column-parallel products hold 1/tp of their
    weight and bias; row-parallel ones (the last of each block) 1/tp of the weight and all of
    the bias; norms are replicated. () where the network has no such layer."""
    if not network.is_sequence:
        return ()
    tp, h = parallel.tp, network.d_model
    norm = (h, h) if network.norm == "layernorm" else (h,)

    def products(ms: list[tuple[str, int, int]]) -> tuple[int, ...]:
        out: list[int] = []
        for j, (_, i, o) in enumerate(ms):
            out.append(i * o // tp)
            if network.linear_bias:
                out.append(o if j == len(ms) - 1 else o // tp)
        return tuple(out)

    mla = (network.mla.q_lora_rank, network.mla.kv_lora_rank) if network.mla else ()
    return norm + products(network.attention_matrices()) + mla + norm + products(network.mlp_matrices(network.d_ff))


def _zero3_shape(tensors: tuple[int, ...], layers: int, elements: int) -> tuple[tuple[int, ...], int]:
    """ZeRO-3's units of a stage of ``elements`` parameters: each layer's ``tensors`` and the
    stage's other parameters (embedding, head, final norm); a network without per-tensor
    detail (an MoE, a convolutional or MLP network) gathers each layer's share as one tensor."""
    if tensors and layers * sum(tensors) <= elements:
        return tensors, elements - layers * sum(tensors)
    return (-(-elements // layers),), 0


def _sequence_parallel(act: int, tp: int, stage: Stage, training: bool, again: int) -> list[Comm]:
    """Megatron's sequence parallelism: per layer, forward, an all-gather before each of the two
    column-parallel products and a reduce-scatter after each row-parallel one; backward, the
    mirror (a reduce-scatter for each gather, a gather for each reduce-scatter) and the
    re-gather of the two saved shards for the weight gradients; full recomputation repeats the
    forward's for the ``again`` layers it re-runs. The embedding's all-reduce becomes a
    reduce-scatter (a gather backward); the head gathers the last norm's shards
    (reduce-scatters their gradient)."""
    gathers = stage.layers * (2 + (4 if training else 0)) + 2 * again + (stage.embed and training) + stage.head
    scatters = stage.layers * (2 + (2 if training else 0)) + 2 * again + stage.embed + (stage.head and training)
    return [Comm("tp: sequence-parallel all-gathers", "all-gather", tp, 1, act, gathers, "micro", "critical"),
            Comm("tp: sequence-parallel reduce-scatters", "reduce-scatter", tp, 1, act, scatters, "micro",
                 "critical")]


def kv_bytes_per_token(network: Network, tp: int, esz: int) -> int:
    """Bytes of K and V one token holds on a tensor-parallel device (what ring attention passes)."""
    if network.mla:  # K and V per head, assembled from the latent
        heads = network.heads // tp
        return heads * (network.qk_dim() + network.v_dim()) * esz
    kv = max(1, network.kv_heads // tp)
    return kv * 2 * network.d_head * esz


def qkv_bytes_per_token(network: Network, tp: int, esz: int) -> int:
    """Bytes of Q, K and V one token holds on a tensor-parallel device (what Ulysses exchanges)."""
    return network.heads // tp * network.qk_dim() * esz + kv_bytes_per_token(network, tp, esz)


def _context_parallel(network: Network, parallel: Parallel, stage: Stage, tokens: int, esz: int, training: bool,
                      again: int) -> list[Comm]:
    """Context parallelism's transfers, group cp at stride tp. Ring: cp - 1 sends a layer of the
    device's K, V block (``tokens`` tokens), forward (again for the ``again`` layers
    recomputation re-runs) and, backward, of K, V with the partial dK, dV (twice the
    bytes); each hides behind one block's attention
    (overlap ``attention``). Ulysses: all-to-alls of Q, K, V and of the context forward, of
    the context's gradient and of dQ, dK, dV backward; the device waits for them."""
    cp, tp, layers = parallel.cp, parallel.tp, stage.layers
    if parallel.cp_kind == "ring":
        block = tokens * kv_bytes_per_token(network, tp, esz)
        out = [Comm("cp: ring K, V blocks forward", "p2p", cp, tp, block, (cp - 1) * (layers + again), "micro",
                    "attention")]
        if training:
            out.append(Comm("cp: ring K, V and dK, dV blocks backward", "p2p", cp, tp, 2 * block,
                            (cp - 1) * layers, "micro", "attention-backward"))
        return out
    qkv = tokens * qkv_bytes_per_token(network, tp, esz)
    ctx = tokens * network.heads // tp * network.v_dim() * esz
    calls = layers * (1 + training) + again
    out = [Comm("cp: ulysses Q, K, V all-to-all", "all-to-all", cp, tp, qkv, calls, "micro", "critical"),
           Comm("cp: ulysses context all-to-all", "all-to-all", cp, tp, ctx, calls, "micro", "critical")]
    return out


def _data_parallel(label: str, n: int, stride: int, grads: int, weights: int, zero: int,
                   layers: int, shape: tuple[tuple[int, ...], int] = ((), 0), w_esz: int = 2,
                   g_esz: int = 2, recomputed: int | None = None) -> list[Comm]:
    """The gradient reduction and weight gathers of one data-parallel group (module docstring).
    ZeRO-3 gathers each layer's parameters before its forward and again before its backward
    and reduce-scatters its gradients every micro-batch (sharded gradients cannot be
    accumulated whole); how many calls that is, how far ahead they are issued and what they
    hide behind is the framework's [sharding] policy, applied when the step is timed
    (overlap ``prefetch``; ``shape``: one layer's tensors' elements and the stage's others)."""
    kind = "all-reduce" if zero == 0 else "reduce-scatter"
    if zero == 3:
        tensors, extra = shape if shape[0] else ((-(-weights // w_esz // layers),), 0)
        return [Comm(f"{label}: zero-3 gradient reduce-scatter (each layer, backward)", "reduce-scatter", n, stride,
                     -(-grads // layers), layers, "micro", "prefetch", tensors, layers, extra, g_esz, recomputed),
                Comm(f"{label}: zero-3 weights all-gather (each layer, forward and backward)", "all-gather", n,
                     stride, -(-weights // layers), 2 * layers, "micro", "prefetch", tensors, layers, extra, w_esz,
                     recomputed)]
    out = [Comm(f"{label}: gradient {kind}", kind, n, stride, grads, 1, "step", "backward")]
    if zero in (1, 2):
        out.append(Comm(f"{label}: updated weights all-gather", "all-gather", n, stride, weights, 1, "step", "after"))
    return out


def _expert_values(network: Network, parallel: Parallel, stage: Stage) -> int:
    """Routed-expert parameters one device of ``stage`` holds (E / ep experts, each / tp)."""
    m = network.moe
    if m is None or not network.is_sequence:
        return 0
    moe_layers = stage.layers - _stage_dense(network, stage)
    per = sum(i * o for _, i, o in network.mlp_matrices(m.expert_d_ff))
    return moe_layers * (m.routed_experts // parallel.ep) * per // parallel.tp


def shard_summary(step: Any, stage: Stage, parallel: Parallel) -> dict[str, Any]:
    """What one device of ``stage`` holds of the step (its ``step`` is built on its shard): the
    layers, a sequence's tokens in its products, in its norms and residuals (sequence
    parallelism), the heads of its products and of attention's core (Ulysses: / cp), the
    queries and keys a core meets, and the group ZeRO shards the training state over."""
    net = step.network
    if not net.is_sequence:
        return {"layers": 0, "zero_group": parallel.replicas if parallel.zero else 1}
    seq = step.tokens // max(1, step.config.batch)
    ulysses = parallel.cp > 1 and parallel.cp_kind == "ulysses"
    sp = parallel.tp if parallel.sequence_parallel else 1
    return {"layers": stage.layers, "sequence_tokens": seq, "norm_tokens": seq // sp, "heads": net.heads,
            "attention_heads": net.heads // parallel.cp if ulysses else net.heads,
            "attention_queries": seq * parallel.cp if ulysses else seq, "attention_keys": seq * parallel.cp,
            "zero_group": parallel.replicas if parallel.zero else 1}


def shard_ledger(ledger: Ledger, parallel: Parallel) -> Ledger:
    """The ledger with ZeRO's shards: optimizer state / (dp x cp) from stage 1, gradients from 2,
    weights at 3."""
    n, z = parallel.replicas, parallel.zero
    if z == 0 or n == 1:
        return ledger
    cut = {"optimizer": ledger.optimizer - ledger.optimizer // n}
    if z >= 2:
        cut["gradients"] = ledger.gradients - ledger.gradients // n
    if z >= 3:
        cut["weights"] = ledger.weights - ledger.weights // n
    return replace(ledger, **{k: getattr(ledger, k) - v for k, v in cut.items()}, peak=ledger.peak - sum(cut.values()))
