"""Sharding a training step over devices: data, tensor, pipeline and expert parallelism, ZeRO.

Owns: :class:`Parallel` (dp, tp, pp, ep, zero and their checks), :class:`Stage` (one
kind of pipeline stage: its layers, whether it holds the embedding or the head, how
many stages are of that kind), :func:`stages`, :func:`shard` (the network one device of
a stage holds, as a :class:`~memwall.networks.Network` the builders declare like any
other), :func:`device_steps` (each distinct device's step, built by
:func:`memwall.workloads.step.build_step`), :class:`Comm` and :func:`communication`
(the collectives and transfers one device takes part in, per optimizer step), and
:func:`shard_ledger` (the capacity ledger with ZeRO's sharding applied).

The transform is declared, not hand-placed: a shard is a narrower or shorter network,
so every pass (checkpointing, accumulation, fusion, liveness) runs on it unchanged.

* Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): the QKV and first MLP products
  are column-parallel (heads / tp, d_ff / tp), the attention output and second MLP
  products row-parallel (their input width / tp), the vocabulary split (vocab / tp,
  rounded up), norms and residuals replicated. Two all-reduces of the block's activation
  per layer forward, two backward, two more per layer when checkpointing re-runs the
  forward; one for the vocabulary-parallel embedding.
* Pipeline parallelism: stage i holds layers [i s, (i+1) s), s = ceil(L / pp); the first
  holds the embedding, the last the head. Identical stages are one :class:`Stage`.
* Expert parallelism: the ep devices of a group (drawn from the data-parallel replicas,
  as Megatron-core and DeepSpeed-MoE do) each hold E / ep experts and receive every
  group member's tokens for them: each expert's product runs on tokens x k x ep / E rows.
  Dispatch and combine are all-to-alls, two forward and two backward per MoE layer.
* ZeRO (Rajbhandari et al. 2020) over the data-parallel group: stage 1 and 2 reduce-scatter
  the gradients and all-gather the updated weights after the update; stage 3 gathers each
  layer's weights before its forward and before its backward (a layer's share: the stage's
  weights / its layers) and reduce-scatters the gradients.
* Ranks are placed tensor-parallel first, then data-parallel, then pipeline (Megatron's
  order): the tp group has stride 1, dp (and ep) stride tp, pp stride tp x dp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..networks import Network
from ..vocabulary import DTYPE_BYTES
from .config import TrainingConfig
from .kernel import Ledger

ZERO_STAGES = (0, 1, 2, 3)
# dp x tp x pp at most 2**24 (16.8 M): the largest clusters built hold a few hundred
# thousand accelerators, so more is a typo; the bound also keeps the collectives' step
# counts and the bubble's micro-batch arithmetic far from overflow.
MAX_DEVICES = 1 << 24


@dataclass(frozen=True)
class Parallel:
    """How a step is spread over devices: dp x tp x pp devices (ep divides dp), ZeRO stage."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    zero: int = 0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "ep"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"must be a positive integer, got {v!r}", field=name)
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero!r}", field="zero")
        if self.dp * self.tp * self.pp > MAX_DEVICES:
            raise InputError(f"dp x tp x pp = {self.dp * self.tp * self.pp:,} devices is beyond any machine "
                             f"(at most {MAX_DEVICES:,}); check the degrees", field="dp")
        if self.dp % self.ep:
            raise InputError(f"the expert-parallel group is drawn from the data-parallel replicas: ep {self.ep} "
                             f"must divide dp {self.dp}", field="ep")

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def single(self) -> bool:
        """One device, no sharding: the step memwall has always run."""
        return self.devices == 1 and self.zero == 0

    def as_dict(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": self.ep, "zero": self.zero}


@dataclass(frozen=True)
class Stage:
    """One kind of pipeline stage."""

    first_layer: int
    layers: int
    embed: bool
    head: bool
    count: int  # stages of this kind

    @property
    def name(self) -> str:
        if self.layers == 0:  # a network without transformer layers runs whole on every device
            return "the whole network"
        where = "+".join(n for n, on in (("embedding", self.embed), ("head", self.head)) if on)
        return f"layers {self.first_layer}-{self.first_layer + self.layers - 1}" + (f" + {where}" if where else "")


def stages(network: Network, pp: int) -> list[Stage]:
    """The distinct stages of a pipeline of ``pp`` stages: first, middle (one of them stands for
    all), last; the whole network when pp = 1."""
    layers = network.n_layers
    if pp > layers:
        raise InputError(f"{network.id} has {layers} layers: a pipeline of {pp} stages leaves some empty", field="pp")
    per = -(-layers // pp)
    if per * (pp - 1) >= layers:
        raise InputError(f"{layers} layers in stages of {per} fill fewer than {pp} stages: choose pp so that "
                         f"ceil(layers / pp) x (pp - 1) < layers", field="pp")
    spans = [(i * per, min(per, layers - i * per)) for i in range(pp)]
    out: list[Stage] = []
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


def _divide(value: int, by: int, what: str, network: Network, name: str) -> int:
    if value % by:
        raise InputError(f"{network.id}: {what} {value} does not divide over {name} {by}", field=name)
    return value // by


def shard(network: Network, parallel: Parallel, stage: Stage | None = None) -> Network:
    """The network one device of ``stage`` holds (module docstring); the network itself when
    nothing is split."""
    tp, ep = parallel.tp, parallel.ep
    if not network.is_sequence:
        if tp > 1 or parallel.pp > 1 or ep > 1:
            raise InputError(f"{network.id} is not a transformer: tensor, pipeline and expert parallelism are "
                             "modelled for transformers (data parallelism and ZeRO apply to any network)",
                             field="tp" if tp > 1 else "pp" if parallel.pp > 1 else "ep")
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
            moe = replace(moe, dense_layers=_dense(network, stage.first_layer, stage.layers))
    if moe is not network.moe:
        changes["moe"] = moe
    if not changes:
        return network
    return replace(network, id=f"{network.id}/shard", _counts={}, **changes)


def device_steps(network: Network, config: TrainingConfig, parallel: Parallel) -> list[tuple[Stage, Any]]:
    """Each distinct device's step: one per kind of pipeline stage, on its shard. With expert
    parallelism the micro-batch's routed tokens are pooled over the ep group (each device's
    experts see ep times the tokens), which the shard's E / ep experts express. Data-parallel
    replicas all-reduce their gradients before the update, so with dp > 1 the update runs
    separate (a fused update, given, is refused)."""
    from .step import build_step

    if parallel.dp > 1 and config.updates_fused:
        if config.update_fusion is not None:
            raise InputError("--update-fusion fused updates the weights where their gradient is made: with --dp "
                             f"{parallel.dp} the replicas all-reduce the gradients first (use separate)",
                             field="update_fusion")
        config = replace(config, update_fusion="separate")
    if not network.is_sequence:
        return [(Stage(0, 0, True, True, 1), build_step(shard(network, parallel), config))]
    out = []
    for st in stages(network, parallel.pp):
        out.append((st, build_step(shard(network, parallel, st), config, embed=st.embed, head=st.head)))
    return out


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
    overlap: str  # critical | backward | compute | after


def _param_bytes(ledger: Ledger, cls: str) -> int:
    return int(getattr(ledger, cls))


def communication(network: Network, config: TrainingConfig, parallel: Parallel, stage: Stage,
                  ledger: Ledger, tokens: int) -> list[Comm]:
    """What one device of ``stage`` sends and receives in one optimizer step (module docstring);
    ``tokens`` are one micro-batch's (the step's: decode's one a sequence, prefill's prompt)."""
    tp, dp, pp, ep = parallel.tp, parallel.dp, parallel.pp, parallel.ep
    out: list[Comm] = []
    esz = config.elem_bytes
    act = tokens * network.d_model * esz
    training = config.training
    if tp > 1 and network.is_sequence:
        # full recomputation re-runs each block's forward, and its two all-reduces
        again = 2 if training and config.checkpoint not in ("none", "selective") else 0
        per_layer = (2 + (2 if training else 0) + again)
        out.append(Comm("tp: block activations", "all-reduce", tp, 1, act, per_layer * stage.layers + stage.embed,
                        "micro", "critical"))
    if pp > 1:
        # Megatron's scatter/gather: each of the tp devices sends 1/tp of the activation
        sends = (0 if stage.head else 1) + (0 if stage.embed or not training else 1)
        out.append(Comm("pp: activations between stages", "p2p", 2, tp * dp, -(-act // tp), sends, "micro",
                        "critical"))
    if ep > 1 and network.moe is not None:
        moe_layers = stage.layers - _dense(network, stage.first_layer, stage.layers)
        routed = tokens * network.moe.active_experts * network.d_model * esz
        out.append(Comm("ep: token dispatch and combine", "all-to-all", ep, tp, routed,
                        (4 if training else 2) * moe_layers, "micro", "critical"))
    if training and dp > 1:
        grads, weights = _param_bytes(ledger, "gradients"), _param_bytes(ledger, "weights")
        expert = _expert_values(network, parallel, stage)
        g_expert = expert * DTYPE_BYTES[config.gradient_dtype]
        w_expert = expert * config.elem_bytes
        # experts are replicated only over dp / ep replicas, ep apart; the rest over all dp
        groups = [("dp", dp, tp, grads - g_expert, weights - w_expert)]
        if expert and dp // ep > 1:
            groups.append(("dp/ep (experts)", dp // ep, tp * ep, g_expert, w_expert))
        for label, n, stride, g, w in groups:
            out.extend(_data_parallel(label, n, stride, g, w, parallel.zero, max(1, stage.layers)))
    return out


def _data_parallel(label: str, n: int, stride: int, grads: int, weights: int, zero: int,
                   layers: int) -> list[Comm]:
    """The gradient reduction and weight gathers of one data-parallel group (module docstring);
    ZeRO-3 gathers each of the ``layers`` layers' share of the weights before its forward and
    again before its backward."""
    kind = "all-reduce" if zero == 0 else "reduce-scatter"
    out = [Comm(f"{label}: gradient {kind}", kind, n, stride, grads, 1, "step", "backward")]
    if zero in (1, 2):
        out.append(Comm(f"{label}: updated weights all-gather", "all-gather", n, stride, weights, 1, "step", "after"))
    if zero == 3:
        out.append(Comm(f"{label}: zero-3 weights all-gather (each layer, forward and backward)", "all-gather", n,
                        stride, -(-weights // layers), 2 * layers, "micro", "compute"))
    return out


def _expert_values(network: Network, parallel: Parallel, stage: Stage) -> int:
    """Routed-expert parameters one device of ``stage`` holds (E / ep experts, each / tp)."""
    m = network.moe
    if m is None or not network.is_sequence:
        return 0
    moe_layers = stage.layers - _dense(network, stage.first_layer, stage.layers)
    per = sum(i * o for _, i, o in network.mlp_matrices(m.expert_d_ff))
    return moe_layers * (m.routed_experts // parallel.ep) * per // parallel.tp


def shard_ledger(ledger: Ledger, parallel: Parallel) -> Ledger:
    """The ledger with ZeRO's shards: optimizer state / dp from stage 1, gradients from 2, weights at 3."""
    n, z = parallel.dp, parallel.zero
    if z == 0 or n == 1:
        return ledger
    cut = {"optimizer": ledger.optimizer - ledger.optimizer // n}
    if z >= 2:
        cut["gradients"] = ledger.gradients - ledger.gradients // n
    if z >= 3:
        cut["weights"] = ledger.weights - ledger.weights // n
    return replace(ledger, **{k: getattr(ledger, k) - v for k, v in cut.items()}, peak=ledger.peak - sum(cut.values()))
