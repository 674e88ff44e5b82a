"""The training step: a network and a configuration turned into kernels at addresses.

Owns: :class:`Step`, :func:`declare`, :func:`build_step`, :func:`gemm_step` and the seed model's
``a`` and ``d_min`` (:func:`activation_traffic`, :func:`d_min`); re-exports
:class:`~memwall.workloads.kernel.Kernel`, :class:`~memwall.workloads.kernel.Ledger` and
the operation tables of :mod:`memwall.workloads.ops`. A step is built in four stages:

1. a builder per architecture family (:mod:`memwall.workloads.builders`) *declares* the
   kernels over named tensors (:mod:`memwall.workloads.graph`);
2. passes rewrite the declared kernels: gradient accumulation
   (:mod:`memwall.workloads.accumulation`), the weight update fused into the kernel that
   makes the gradient (:mod:`memwall.workloads.update_fusion`), kernel fusion
   (:mod:`memwall.workloads.fusion`), then the checkpointing transform
   (:mod:`memwall.workloads.checkpoint`), so recomputation reruns fused kernels;
3. the liveness pass (:mod:`memwall.workloads.liveness`) derives each tensor's class and
   lifetime, runs the allocator and sums the ledger (``activations`` = the peak of saved
   activations);
4. transformers' identical layers are simulated once: unless ``expand_repeats``, only
   the first layer of each group keeps its kernels, with ``repeat`` = the group's size
   (the ledger is still the one of every layer).

Conventions (they fix the exact FLOPs the tests check):

* Products are ``C[M x N] = A[M x K] . B[K x N]`` (row-major; ``trans`` says an operand
  is stored transposed), ``2.M.N.K`` FLOPs per product, ``batch`` independent products
  per kernel (attention heads). Weights are stored ``[out x in]`` as 1980s code and
  PyTorch both keep them, so the forward product reads them transposed.
* Elementwise FLOPs are counted from the ``ops`` of each kernel with weights
  :data:`FLOP_WEIGHTS` (a multiply-add is 2; add, mul, div, exp, sqrt, max, tanh 1).
* Checkpointing: see :mod:`memwall.workloads.checkpoint`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..networks import Network
from ..vocabulary import BLOCK_FORMATS, DTYPE_BITS, DTYPE_BYTES, product_out_dtype
from . import accumulation, checkpoint, fusion, update_fusion
from .builders.chain import declare_chain
from .builders.transformer import NO_SPLIT, SeqSplit, declare_transformer
from .config import TrainingConfig
from .graph import PARAMETER_CLASSES, Graph, Op
from .kernel import Kernel, Ledger
from .liveness import derive
from .ops import FLOP_WEIGHTS, KERNEL_OPS, KERNEL_PHASES, flops_of

__all__ = ["FLOP_WEIGHTS", "KERNEL_OPS", "KERNEL_PHASES", "Kernel", "Ledger", "Step", "activation_traffic",
           "build_step", "d_min", "declare", "flops_of", "gemm_step"]


@dataclass
class Step:
    network: Network
    config: TrainingConfig
    kernels: list[Kernel]
    ledger: Ledger
    iterations: int
    examples: int
    connections: int
    flops: dict[str, int]
    tokens: int = 0  # tokens per step, sequence models

    @property
    def model_flops(self) -> int:
        """The step's FLOPs without recomputation (what MFU counts; HFU counts ``flops['total']``)."""
        return self.flops["total"] - self.flops["recompute"]

    def optimizer_step(self) -> dict[str, int]:
        """One optimizer step: ``accumulate`` micro-batches (this step less its update) and one update."""
        k = self.config.accumulate
        micro = self.flops["total"] - self.flops["update"]
        return {"micro_batches": k, "examples": k * self.examples, "tokens": k * self.tokens,
                "flops": k * micro + self.flops["update"], "model_flops": k * (micro - self.flops["recompute"])
                + self.flops["update"]}

    def as_dict(self) -> dict[str, Any]:
        return {
            "network": self.network.id,
            "config": self.config.as_dict(),
            "iterations": self.iterations,
            "examples": self.examples,
            "tokens": self.tokens,
            "connections": self.connections,
            "parameters": self.network.parameters,
            "flops": self.flops,
            "model_flops": self.model_flops,
            "optimizer_step": self.optimizer_step(),
            "activation_traffic": activation_traffic(self),
            "ledger": self.ledger.as_dict(),
            "kernels": [k.as_dict() for k in self.kernels],
        }


def activation_traffic(step: Step) -> dict[str, float] | None:
    """The seed model's ``a``: bytes of inter-kernel activation traffic per d per token per layer.

    Summed over the kernels of the repeated layers (forward, backward and recompute): every
    read and every write of a tensor that is not a parameter, its gradient or optimizer
    state, as the kernel names it (what an ideal kernel moves: each operand once), divided
    by layers x tokens x d_model. None for networks without tokens and layers (chains).
    """
    net = step.network
    layers = sum(count for _, count in net.layer_kinds()) if net.is_sequence else 0
    if not layers or not step.tokens or not net.d_model:
        return None
    total = 0
    for k in step.kernels:
        if k.layer < 0 or k.phase == "update":
            continue
        moved = sum(t.bytes for t in (*k.reads, *k.writes) if t.cls not in PARAMETER_CLASSES)
        total += moved * k.repeat * step.iterations
    return {"a": total / (layers * step.tokens * net.d_model), "bytes_per_layer": total / layers}


def d_min(a: float, balance: float) -> float:
    """The seed model's pole: below this width no batch makes the step compute-bound (a.beta/72)."""
    return a * balance / 72


def _total_flops(kernels: list[Kernel], iterations: int) -> dict[str, int]:
    out = dict.fromkeys(KERNEL_PHASES, 0)
    for k in kernels:
        out[k.phase] += k.flops * k.repeat * iterations
    out["total"] = sum(out[p] for p in KERNEL_PHASES)
    return out


def _seq(network: Network, config: TrainingConfig) -> int:
    """Tokens a sequence runs through the step: decode's one new token, prefill's prompt."""
    if config.phase == "decode":
        return 1
    if config.phase == "prefill":
        return config.context or 1
    return (config.seq_len or network.seq_len or 1) if network.is_sequence else 1


def _batch(config: TrainingConfig) -> tuple[int, int]:
    """Examples a kernel sees, and iterations a step runs (per-example updates: one at a time)."""
    per_example = config.updates == "per-example" and config.training
    return (1, config.batch) if per_example else (config.batch, 1)


def declare(network: Network, config: TrainingConfig, *, embed: bool = True, head: bool = True,
            split: SeqSplit = NO_SPLIT) -> Graph:
    """The declared step, checkpointing applied: kernels over named tensors, no addresses.

    ``embed`` / ``head`` false: a pipeline stage without the embedding / the head
    (:mod:`memwall.workloads.parallel`)."""
    batch, _ = _batch(config)
    g = Graph(config.storage_dtype, config.gradient_dtype if config.training else None, config.group_format,
              product=config.product_dtype)
    if network.is_sequence:
        declare_transformer(g, network, batch, _seq(network, config), training=config.training,
                            optimizer=config.optimizer, phase=config.phase, context=config.context or 0,
                            weights=config.stored_weights, kv_dtype=config.kv_dtype, embed=embed, head=head,
                            split=split, cache_length=config.cache_length or 0,
                            cache_read=config.cache_read)
    else:
        if config.serving:
            raise InputError(f"{network.id} is not a sequence model: it has no KV cache to {config.phase}",
                             field="phase")
        if config.weights is not None:
            raise InputError("weight-only quantization (weights) is modelled for transformers", field="weights")
        if config.seq_len is not None:
            raise InputError(f"{network.id} is not a sequence model: no seq_len", field="seq_len")
        declare_chain(g, network, batch, training=config.training, optimizer=config.optimizer)
    if config.training and config.accumulates:
        accumulation.apply(g)
    update_fusion.apply(g, config.update_fusion_mode or update_fusion.SEPARATE)
    fusion.apply(g, config.fusion)
    if config.training:
        checkpoint.apply(g, config.checkpoint)
    return g


def _collapse(network: Network, kernels: list[Kernel]) -> list[Kernel]:
    """Keep the first layer of each group of identical layers, repeated the group's size.

    Layers of one kind differ only where checkpointing re-runs the forward of some and not
    of others (block:N): those are two groups, each kept once."""
    rerun = {k.layer for k in kernels if k.layer >= 0 and k.phase == "recompute"}

    def variant(k: Kernel) -> tuple[str, bool]:
        return k.group, k.layer in rerun

    sizes: dict[tuple[str, bool], set[int]] = {}
    firsts: dict[tuple[str, bool], int] = {}
    for k in kernels:
        if k.layer >= 0:
            sizes.setdefault(variant(k), set()).add(k.layer)
            firsts.setdefault(variant(k), k.layer)
    assert sum(map(len, sizes.values())) == sum(n for _, n in network.layer_kinds())
    return [k if k.layer < 0 else replace(k, repeat=k.repeat * len(sizes[variant(k)])) for k in kernels
            if k.layer < 0 or k.layer == firsts[variant(k)]]


def build_step(network: Network, config: TrainingConfig, *, expand_repeats: bool = False, embed: bool = True,
               head: bool = True, split: SeqSplit = NO_SPLIT) -> Step:
    """The step of ``config`` on ``network`` (kernels, FLOPs, capacity ledger); ``embed``,
    ``head`` and ``split`` (a context-parallel device's S / cp tokens) as :func:`declare`'s."""
    _, iterations = _batch(config)
    kernels, layout = derive(declare(network, config, embed=embed, head=head, split=split))
    if network.is_sequence and not expand_repeats:
        kernels = _collapse(network, kernels)
    tokens = config.batch * (_seq(network, config) // split.cp) if network.is_sequence else 0
    return Step(network, config, kernels, layout.ledger, iterations, config.batch, network.connections,
                _total_flops(kernels, iterations), tokens)


def gemm_step(m: int, n: int, k: int, dtype: str = "fp32", out_dtype: str | None = None) -> Step:
    """A single product C[M x N] = A[M x K] . B[K x N]: one kernel, 2MNK FLOPs; C written
    in ``out_dtype`` (vocabulary.product_out_dtype)."""
    for name, v in (("M", m), ("N", n), ("K", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(f"must be a positive integer, got {v!r}", field=name)
    cfg = TrainingConfig(batch=1, dtype=dtype, phase="forward", single_product=True)
    net = Network(id=f"gemm-{m}x{n}x{k}", name=f"GEMM {m}x{n}x{k}", kind="mlp", source="synthetic", year=2024,
                  status="synthetic", dtype=dtype, layers=(k, n), loss="none")
    fmt = BLOCK_FORMATS.get(dtype)
    g = Graph("bf16" if fmt else dtype)
    bits = DTYPE_BITS[dtype] if fmt else None
    a = g.tensor("A", m * k, cls="input", whole_step=True, bits=bits)
    b = g.tensor("B", k * n, cls="weights", whole_step=True, bits=bits)
    c_bytes = DTYPE_BYTES[product_out_dtype(dtype, out_dtype)] if out_dtype or fmt else None
    c = g.tensor("C", m * n, c_bytes, cls="workspace", whole_step=True)
    if fmt is None:
        g.gemm("gemm", "forward", a, b, c, m, n, k, c_bytes=c_bytes)
    else:  # both operands stored in the block format with their scales
        scales = tuple(g.tensor(f"scales.{t}", fmt.scale_bytes(e), 1, cls=cls, whole_step=True)
                       for t, e, cls in (("A", m * k, "input"), ("B", k * n, "weights")))
        ops = {"fma": m * n * k}
        g.add(Op("gemm", "forward", "gemv" if m == 1 or n == 1 else "gemm", dtype, flops_of(ops), ops,
                 (a, b, *scales), (c,), (m, n, k), params={"c_bytes": c_bytes}))
    kernels, layout = derive(g)
    return Step(net, cfg, kernels, layout.ledger, 1, m, k * n, _total_flops(kernels, 1))
