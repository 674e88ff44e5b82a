"""The training step: a network and a configuration turned into kernels at addresses.

Owns: :class:`Kernel`, :class:`Ledger`, :class:`Step`, :func:`build_step` and
:func:`gemm_step`. One :class:`~memwall.workloads.allocator.Allocator` hands out every
address; tensors are freed when dead, and the ledger is the allocator's peak live bytes
per class (``activations`` = the peak of saved activations).

Conventions (they fix the exact FLOPs the tests check):

* Products are ``C[M x N] = A[M x K] . B[K x N]`` (row-major; ``trans`` says an operand
  is stored transposed), ``2.M.N.K`` FLOPs per product, ``batch`` independent products
  per kernel (attention heads). Weights are stored ``[out x in]`` as 1980s code and
  PyTorch both keep them, so the forward product reads them transposed.
* Every linear layer gets one product for the input gradient and one for the weight
  gradient - also the first layer, whose input gradient nobody needs (the issue fixes
  backward = 2 x forward for the affine test net).
* Elementwise FLOPs are counted from the ``ops`` of each kernel with weights
  :data:`FLOP_WEIGHTS` (a multiply-add is 2; add, mul, div, exp, sqrt, max, tanh 1).
* Attention computes the full ``s x s`` scores even when causal (as materialising
  implementations do; fused kernels that skip masked blocks would do about half).
* Checkpointing: segments of k layers (``sqrt``: k = ceil(sqrt L)); the short segment
  comes first, so the last segment - recomputed while every boundary is live - is a full
  one and the peak is (segments) boundaries + (k - 1) recomputed layer outputs. A
  recomputed segment reruns all of its layers (as torch.utils.checkpoint does), so
  recompute FLOPs are one more forward pass. ``selective`` recomputes the attention
  core only (QK^T, softmax, dropout), Korthikanti et al. 2022.
* Transformers: layers of one kind are identical; unless ``expand_repeats``, only the
  first layer of each group keeps its kernels, with ``repeat`` = the group's size.
  The allocator still walks every layer, so the ledger is the real one. Saved
  activations of a GPT-style block (materialised attention, dropout, 4h GeLU MLP) are
  exactly Korthikanti's 34sbh + 5as^2b bytes in 16-bit; other blocks (Flash attention,
  SwiGLU, GQA, MLA, MoE) save what their own kernels need, computed here.
* Q, K and V are written head-major by the projection (the transpose folded into its
  output addressing), so each head's matrix is contiguous.
* Mixture of experts: routing is perfectly balanced; the routed experts of a layer are
  one kernel with ``repeat`` = experts (also under ``expand_repeats``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..networks import Network
from . import checkpoint
from .allocator import Allocator, TensorRef
from .builders.chain import declare_chain
from .config import DTYPE_BYTES, OPTIMIZER_STATES, TrainingConfig
from .graph import Graph
from .kernel import Kernel, Ledger
from .liveness import derive
from .ops import (
    ACT_BWD,
    ACT_FWD,
    FLOP_WEIGHTS,
    KERNEL_OPS,
    KERNEL_PHASES,
    NORM_BWD,
    NORM_FWD,
    OPTIMIZER_OPS,
    SOFTMAX_BWD,
    SOFTMAX_FWD,
    flops_of,
)
from .ops import plus as _plus
from .ops import scale as _scale

__all__ = ["FLOP_WEIGHTS", "KERNEL_OPS", "KERNEL_PHASES", "Kernel", "Ledger", "Step", "build_step", "declare", "flops_of",
           "gemm_step"]

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
            "ledger": self.ledger.as_dict(),
            "kernels": [k.as_dict() for k in self.kernels],
        }


def _total_flops(kernels: list[Kernel], iterations: int) -> dict[str, int]:
    out = dict.fromkeys(KERNEL_PHASES, 0)
    for k in kernels:
        out[k.phase] += k.flops * k.repeat * iterations
    out["total"] = sum(out[p] for p in KERNEL_PHASES)
    return out


class _Param:
    """A trained tensor with its gradient and optimizer state."""

    def __init__(self, name: str, w: TensorRef, g: TensorRef | None, state: list[TensorRef], values: int,
                 layer: int, group: str) -> None:
        self.name, self.w, self.g, self.state, self.values = name, w, g, state, values
        self.layer, self.group = layer, group


class _Builder:
    def __init__(self, net: Network, cfg: TrainingConfig, batch: int) -> None:
        self.net, self.cfg, self.b = net, cfg, batch
        self.esz = DTYPE_BYTES[cfg.dtype]
        self.al = Allocator()
        self.kernels: list[Kernel] = []
        self.params: list[_Param] = []
        self.layer, self.group = -1, ""
        self.train = cfg.training

    # ---- tensors ------------------------------------------------------------------------
    def t(self, name: str, cls: str, elements: int, esz: int | None = None) -> TensorRef:
        return self.al.alloc(name, cls, elements * (self.esz if esz is None else esz))

    def free(self, *refs: TensorRef | None) -> None:
        seen: dict[int, TensorRef] = {}
        for r in refs:
            if r is not None and self.al.is_live(r):
                seen[id(r)] = r
        self.al.free(*seen.values())

    def param(self, name: str, values: int) -> _Param:
        w = self.t(name, "weights", values)
        g = None
        state: list[TensorRef] = []
        if self.train:
            g = self.t(f"grad.{name}", "gradients", values)
            if self.cfg.dtype != "fp32":
                state.append(self.t(f"master.{name}", "optimizer", values, 4))
            for i in range(OPTIMIZER_STATES[self.cfg.optimizer]):
                state.append(self.t(f"{('m', 'v')[i]}.{name}", "optimizer", values, 4))
        p = _Param(name, w, g, state, values, self.layer, self.group)
        self.params.append(p)
        return p

    # ---- kernels ------------------------------------------------------------------------
    def emit(self, k: Kernel) -> Kernel:
        k = replace(k, layer=self.layer, group=self.group)
        self.kernels.append(k)
        return k

    def gemm(self, name: str, phase: str, a: TensorRef, b: TensorRef, c: TensorRef, m: int, n: int, k: int,
             trans: tuple[bool, bool] = (False, False), batch: int = 1, repeat: int = 1) -> None:
        op = "gemv" if m == 1 or n == 1 else "gemm"
        fma = batch * m * n * k
        self.emit(Kernel(name, phase, op, self.cfg.dtype, 2 * fma, {"fma": fma}, (a, b), (c,), (m, n, k),
                         repeat=repeat, batch=batch, trans=trans))

    def ew(self, name: str, phase: str, reads: tuple[TensorRef, ...], writes: tuple[TensorRef, ...],
           elements: int, per_elem: dict[str, int], *, rows: int = 1, broadcast: tuple[TensorRef, ...] = (),
           op: str = "elementwise", extra: dict[str, int] | None = None, repeat: int = 1) -> None:
        ops = _plus(_scale(per_elem, elements), extra or {})
        self.emit(Kernel(name, phase, op, self.cfg.dtype, flops_of(ops), ops, reads, writes,
                         (rows, elements // max(rows, 1), 0), repeat=repeat, elements=elements,
                         broadcast=tuple(r.name for r in broadcast)))

    def updates(self) -> None:
        if not self.train:
            return
        per = OPTIMIZER_OPS[self.cfg.optimizer]
        for p in self.params:
            self.layer, self.group = p.layer, p.group
            assert p.g is not None
            state = tuple(p.state)
            # mixed precision: the fp32 master is updated and copied back to the bf16 weights
            reads = (p.g, *state) if self.cfg.dtype != "fp32" else (p.w, p.g, *state)
            writes = (p.w, *state)
            self.ew(f"update.{p.name}", "update", reads, writes, p.values, per, op="update")
        self.layer, self.group = -1, ""


# ---- transformers ---------------------------------------------------------------------------
def _slice(ref: TensorRef, offset: int, nbytes: int, name: str) -> TensorRef:
    """A view of part of a tensor (same class; the allocator knows only the whole)."""
    return TensorRef(name, ref.cls, ref.addr + offset, nbytes)


class _Transformer:
    """One transformer's step; every layer is walked, kernels tagged with their layer."""

    def __init__(self, bld: _Builder, seq: int) -> None:
        self.bld, self.net, self.s = bld, bld.net, seq
        self.tok = bld.b * seq
        self.sel = bld.train and bld.cfg.checkpoint == "selective"
        if self.sel and self.net.attention == "flash":
            # a fused kernel already recomputes its scores; selective recomputation is a no-op
            self.sel = False

    # a linear layer and its two backward products
    def linear(self, name: str, phase: str, x: TensorRef, w: _Param, b: _Param | None, n_in: int, n_out: int,
               cls: str = "workspace") -> TensorRef:
        bld = self.bld
        y = bld.t(f"{name}.out", cls, self.tok * n_out)
        bld.gemm(f"{name}.fwd", phase, x, w.w, y, self.tok, n_out, n_in, trans=(False, True))
        if b is not None:
            bld.ew(f"{name}.bias", phase, (y, b.w), (y,), self.tok * n_out, {"add": 1}, rows=self.tok, broadcast=(b.w,))
        return y

    def linear_bwd(self, name: str, x: TensorRef, dy: TensorRef, w: _Param, b: _Param | None, n_in: int,
                   n_out: int) -> TensorRef:
        bld = self.bld
        assert w.g is not None
        if b is not None:
            assert b.g is not None
            bld.ew(f"{name}.bias.bwd", "backward", (dy,), (b.g,), self.tok * n_out, {"add": 1}, rows=self.tok,
                   broadcast=(b.g,), op="reduction")
        bld.gemm(f"{name}.dW", "backward", dy, x, w.g, n_out, n_in, self.tok, trans=(True, False))
        dx = bld.t(f"{name}.dx", "workspace", self.tok * n_in)
        bld.gemm(f"{name}.dX", "backward", dy, w.w, dx, self.tok, n_in, n_out)
        return dx

    def norm(self, name: str, phase: str, x: TensorRef, g: _Param, cls: str) -> TensorRef:
        bld, h = self.bld, self.net.d_model
        y = bld.t(f"{name}.out", cls, self.tok * h)
        bld.ew(name, phase, (x, g.w), (y,), self.tok * h, NORM_FWD[self.net.norm], rows=self.tok, broadcast=(g.w,),
               extra={"sqrt": self.tok, "div": self.tok})
        return y

    def norm_bwd(self, name: str, x: TensorRef, dy: TensorRef, g: _Param, dres: TensorRef | None) -> TensorRef:
        """Gradient through a norm, added to the residual stream's gradient ``dres`` when given."""
        bld, h = self.bld, self.net.d_model
        assert g.g is not None
        reads = (dy, x, g.w) + ((dres,) if dres is not None else ())
        out = dres if dres is not None else bld.t(f"{name}.dx", "workspace", self.tok * h)
        bld.ew(f"{name}.bwd", "backward", reads, (out, g.g), self.tok * h,
               _plus(NORM_BWD[self.net.norm], {"add": 1} if dres is not None else {}), rows=self.tok,
               broadcast=(g.w, g.g))
        return out

    # ---- parameters of one layer -----------------------------------------------------------
    def layer_params(self, kind: str) -> dict[str, _Param | None]:
        net, bld = self.net, self.bld
        p: dict[str, _Param | None] = {"ln1": bld.param(f"L{bld.layer}.ln1", net.norm_values()),
                                       "ln2": bld.param(f"L{bld.layer}.ln2", net.norm_values())}
        for nm, i, o in net.attention_matrices():
            p[nm] = bld.param(f"L{bld.layer}.{nm}", i * o)
            p[nm + ".b"] = bld.param(f"L{bld.layer}.{nm}.b", o) if net.linear_bias else None
        if net.mla:
            p["q_norm"] = bld.param(f"L{bld.layer}.q_norm", net.mla.q_lora_rank)
            p["kv_norm"] = bld.param(f"L{bld.layer}.kv_norm", net.mla.kv_lora_rank)
        if kind == "dense":
            mats = net.mlp_matrices(net.d_ff)
            for nm, i, o in mats:
                p[nm] = bld.param(f"L{bld.layer}.{nm}", i * o)
                p[nm + ".b"] = bld.param(f"L{bld.layer}.{nm}.b", o) if net.linear_bias else None
        else:
            m = net.moe
            assert m is not None
            p["router"] = bld.param(f"L{bld.layer}.router", m.routed_experts * net.d_model)
            per = sum(i * o for _, i, o in net.mlp_matrices(m.expert_d_ff))
            p["experts"] = bld.param(f"L{bld.layer}.experts", m.routed_experts * per)
            p["shared"] = bld.param(f"L{bld.layer}.shared_experts", max(m.shared_experts, 1) * per) if m.shared_experts else None
        return p

    # ---- attention core ---------------------------------------------------------------------
    def attention(self, phase: str, q: TensorRef, k: TensorRef, v: TensorRef, keep: bool) -> tuple[TensorRef, dict]:
        """Returns the context (tok x heads x dv) and the tensors the backward pass needs."""
        bld, net, s = self.bld, self.net, self.s
        a, b = net.heads, bld.b
        dk, dv = net.qk_dim(), net.v_dim()
        ctx = bld.t("attn.ctx", "activations" if keep else "workspace", self.tok * a * dv)
        saved: dict[str, TensorRef] = {}
        if net.attention == "flash":
            lse = bld.t("attn.lse", "activations" if keep else "workspace", b * a * s, 4)
            fma = b * a * s * s * (dk + dv)
            ops = _plus({"fma": fma}, _scale(SOFTMAX_FWD, b * a * s * s))
            bld.emit(Kernel("attn.flash", phase, "attention", bld.cfg.dtype, flops_of(ops), ops, (q, k, v), (ctx, lse),
                            (s, s, dk), batch=b * a, params={"heads": a, "kv_group": a // net.kv_heads, "seq": s,
                                                            "dk": dk, "dv": dv, "causal": net.causal}))
            saved["lse"] = lse
            return ctx, saved
        # materialised: scores, softmax, dropout, context
        keep_core = keep and not self.sel
        sc = bld.t("attn.scores", "workspace", b * a * s * s)
        bld.gemm("attn.qk", phase, q, k, sc, s, s, dk, trans=(False, True), batch=b * a)
        p = bld.t("attn.probs", "activations" if keep_core else "workspace", b * a * s * s)
        bld.ew("attn.softmax", phase, (sc,), (p,), b * a * s * s, SOFTMAX_FWD, rows=b * a * s, op="softmax")
        bld.free(sc)
        pd = p
        if net.dropout:
            mask = bld.t("attn.mask", "activations" if keep_core else "workspace", b * a * s * s, 1)
            pd = bld.t("attn.dropped", "activations" if keep_core else "workspace", b * a * s * s)
            bld.ew("attn.dropout", phase, (p,), (mask, pd), b * a * s * s, {"mul": 1})
            saved["mask"] = mask
        bld.gemm("attn.pv", phase, pd, v, ctx, s, dv, s, batch=b * a)
        saved.update(probs=p, dropped=pd)
        if not keep_core:
            bld.free(*saved.values())
            saved = {}
        return ctx, saved

    def attention_bwd(self, q: TensorRef, k: TensorRef, v: TensorRef, ctx: TensorRef, dctx: TensorRef,
                      saved: dict, dq: TensorRef, dk_: TensorRef, dv_: TensorRef) -> None:
        bld, net, s = self.bld, self.net, self.s
        a, b = net.heads, bld.b
        dk, dv = net.qk_dim(), net.v_dim()
        if net.attention == "flash":
            fma = b * a * s * s * (3 * dk + 2 * dv)
            ops = _plus({"fma": fma}, _scale(_plus(SOFTMAX_FWD, SOFTMAX_BWD), b * a * s * s))
            bld.emit(Kernel("attn.flash.bwd", "backward", "attention", bld.cfg.dtype, flops_of(ops), ops,
                            (q, k, v, ctx, dctx, saved["lse"]), (dq, dk_, dv_), (s, s, dk), batch=b * a,
                            params={"heads": a, "kv_group": a // net.kv_heads, "seq": s, "dk": dk, "dv": dv,
                                    "causal": net.causal, "backward": True}))
            bld.free(saved["lse"])
            return
        if self.sel:  # Korthikanti's selective recomputation: rebuild the attention core
            sc = bld.t("attn.scores", "workspace", b * a * s * s)
            bld.gemm("attn.qk", "recompute", q, k, sc, s, s, dk, trans=(False, True), batch=b * a)
            p = bld.t("attn.probs", "activations", b * a * s * s)
            bld.ew("attn.softmax", "recompute", (sc,), (p,), b * a * s * s, SOFTMAX_FWD, rows=b * a * s, op="softmax")
            bld.free(sc)
            saved = {"probs": p, "dropped": p}
            if net.dropout:
                saved["mask"] = bld.t("attn.mask", "activations", b * a * s * s, 1)
                saved["dropped"] = bld.t("attn.dropped", "activations", b * a * s * s)
                bld.ew("attn.dropout", "recompute", (p,), (saved["mask"], saved["dropped"]), b * a * s * s, {"mul": 1})
        p, pd = saved["probs"], saved["dropped"]
        dpd = bld.t("attn.dprobs", "workspace", b * a * s * s)
        bld.gemm("attn.dP", "backward", dctx, v, dpd, s, s, dv, trans=(False, True), batch=b * a)
        bld.gemm("attn.dV", "backward", pd, dctx, dv_, s, dv, s, trans=(True, False), batch=b * a)
        if net.dropout:
            bld.ew("attn.dropout.bwd", "backward", (dpd, saved["mask"]), (dpd,), b * a * s * s, {"mul": 1})
        bld.ew("attn.softmax.bwd", "backward", (dpd, p), (dpd,), b * a * s * s, SOFTMAX_BWD, rows=b * a * s,
               op="softmax")
        bld.gemm("attn.dQ", "backward", dpd, k, dq, s, dk, s, batch=b * a)
        bld.gemm("attn.dK", "backward", dpd, q, dk_, s, dk, s, trans=(True, False), batch=b * a)
        bld.free(dpd, *saved.values())

    # ---- one block ----------------------------------------------------------------------------
    def block(self, x: TensorRef, p: dict, kind: str, phase: str, keep: bool) -> tuple[TensorRef, dict]:
        """Forward of one layer from its input ``x``; ``keep``: save what backward needs."""
        bld, net = self.bld, self.net
        h, tok = net.d_model, self.tok
        act = "activations" if keep else "workspace"
        sv: dict[str, Any] = {"x": x}
        n1 = self.norm("ln1", phase, x, p["ln1"], act)
        sv["n1"] = n1
        a, kvh, dh = net.heads, net.kv_heads, net.d_head
        if net.mla:
            m = net.mla
            dk, dv = net.qk_dim(), net.v_dim()
            cq = self.linear("wq_down", phase, n1, p["wq_down"], None, h, m.q_lora_rank, act)
            cqn = self.norm_small("q_norm", phase, cq, p["q_norm"], m.q_lora_rank, act)
            q = self.linear("wq_up", phase, cqn, p["wq_up"], None, m.q_lora_rank, a * dk, act)
            ckv = self.linear("wkv_down", phase, n1, p["wkv_down"], None, h, m.kv_lora_rank + m.qk_rope_head_dim, act)
            ckvn = self.norm_small("kv_norm", phase, ckv, p["kv_norm"], m.kv_lora_rank, act)
            kv = self.linear("wkv_up", phase, ckvn, p["wkv_up"], None, m.kv_lora_rank, a * (m.qk_nope_head_dim + dv), act)
            k = bld.t("attn.k", act, tok * a * dk)  # nope part from kv, rope part shared by the heads
            bld.ew("attn.k.assemble", phase, (kv, ckv), (k,), tok * a * dk, {"mul": 1})
            v = _slice(kv, tok * a * m.qk_nope_head_dim * bld.esz, tok * a * dv * bld.esz, "attn.v")
            bld.ew("attn.rope", phase, (q, k), (q, k), tok * a * m.qk_rope_head_dim, {"mul": 2, "add": 1})
            sv.update(cq=cq, cqn=cqn, q=q, ckv=ckv, ckvn=ckvn, kv=kv, k=k, v=v)
        else:
            dk = dv = dh
            width = (a + 2 * kvh) * dh
            qkv = self.linear("wqkv", phase, n1, p["wqkv"], p["wqkv.b"], h, width, act)
            e = bld.esz
            q = _slice(qkv, 0, tok * a * dh * e, "attn.q")
            k = _slice(qkv, tok * a * dh * e, tok * kvh * dh * e, "attn.k")
            v = _slice(qkv, tok * (a + kvh) * dh * e, tok * kvh * dh * e, "attn.v")
            if net.positions == "rope":
                bld.ew("attn.rope", phase, (q, k), (q, k), tok * (a + kvh) * dh, {"mul": 2, "add": 1})
            sv.update(qkv=qkv, q=q, k=k, v=v)
        ctx, core = self.attention(phase, q, k, v, keep)
        sv.update(ctx=ctx, core=core)
        o = self.linear("wo", phase, ctx, p["wo"], p["wo.b"], a * dv, h)
        x2 = bld.t("resid.attn", act, tok * h)
        reads = (o, x)
        if net.dropout:
            m1 = bld.t("attn.out.mask", act, tok * h, 1)
            bld.ew("attn.out.dropout+residual", phase, reads, (m1, x2), tok * h, {"mul": 1, "add": 1})
            sv["m1"] = m1
        else:
            bld.ew("attn.residual", phase, reads, (x2,), tok * h, {"add": 1})
        bld.free(o)
        sv["x2"] = x2
        n2 = self.norm("ln2", phase, x2, p["ln2"], act)
        sv["n2"] = n2
        y = self.mlp(phase, n2, p, kind, act, sv)
        out = bld.t("resid.mlp", "workspace", tok * h)  # the next layer's input; its class is set by the caller
        if net.dropout:
            m2 = bld.t("mlp.out.mask", act, tok * h, 1)
            bld.ew("mlp.out.dropout+residual", phase, (y, x2), (m2, out), tok * h, {"mul": 1, "add": 1})
            sv["m2"] = m2
        else:
            bld.ew("mlp.residual", phase, (y, x2), (out,), tok * h, {"add": 1})
        bld.free(y)
        if not keep:
            bld.free(*_tensors({k: v for k, v in sv.items() if k != "x"}))
            sv = {"x": x}
        return out, sv

    def norm_small(self, name: str, phase: str, x: TensorRef, g: _Param | None, width: int, cls: str) -> TensorRef:
        bld = self.bld
        assert g is not None
        y = bld.t(f"{name}.out", cls, self.tok * width)
        bld.ew(name, phase, (x, g.w), (y,), self.tok * width, NORM_FWD["rmsnorm"], rows=self.tok, broadcast=(g.w,),
               extra={"sqrt": self.tok, "div": self.tok})
        return y

    def mlp(self, phase: str, x: TensorRef, p: dict, kind: str, act: str, sv: dict) -> TensorRef:
        bld, net, tok, h = self.bld, self.net, self.tok, self.net.d_model
        if kind == "dense":
            return self.ffn("mlp", phase, x, p, net.d_ff, act, sv, tok)
        m = net.moe
        assert m is not None
        logits = bld.t("moe.router.logits", "workspace", tok * m.routed_experts)
        bld.gemm("moe.router", phase, x, p["router"].w, logits, tok, m.routed_experts, h, trans=(False, True))
        gates = bld.t("moe.gates", act, tok * m.active_experts)
        bld.ew("moe.route", phase, (logits,), (gates,), tok * m.routed_experts, SOFTMAX_FWD, rows=tok, op="softmax")
        bld.free(logits)
        routed = tok * m.active_experts
        xe = bld.t("moe.dispatched", act, routed * h)
        bld.ew("moe.dispatch", phase, (x,), (xe,), routed * h, {})
        sv.update(gates=gates, xe=xe)
        ye = self.experts(phase, xe, p["experts"], act, sv)
        out = bld.t("moe.out", "workspace", tok * h)
        if p["shared"] is not None:
            ys = self.ffn_on("shared", phase, x, p["shared"], m.expert_d_ff * m.shared_experts, act, sv, tok)
            bld.ew("moe.combine", phase, (ye, gates, ys), (out,), tok * h, {"fma": m.active_experts})
            bld.free(ys)
        else:
            bld.ew("moe.combine", phase, (ye, gates), (out,), tok * h, {"fma": m.active_experts})
        bld.free(ye)
        return out

    def ffn(self, name: str, phase: str, x: TensorRef, p: dict, ff: int, act: str, sv: dict, rows: int) -> TensorRef:
        net = self.net
        mats = net.mlp_matrices(ff)
        ws = [p[nm] for nm, _, _ in mats]
        bs = [p.get(nm + ".b") for nm, _, _ in mats]
        return self._ffn(name, phase, x, ws, bs, ff, act, sv, rows)

    def ffn_on(self, name: str, phase: str, x: TensorRef, w: _Param, ff: int, act: str, sv: dict, rows: int) -> TensorRef:
        """A SwiGLU/GeLU MLP whose matrices are consecutive slices of one parameter tensor."""
        h, e = self.net.d_model, self.bld.esz
        n = 3 if self.net.mlp == "swiglu" else 2
        parts = [_Param(f"{w.name}[{i}]", _slice(w.w, i * h * ff * e, h * ff * e, f"{w.w.name}[{i}]"),
                        _slice(w.g, i * h * ff * e, h * ff * e, f"{w.g.name}[{i}]") if w.g else None, [], h * ff,
                        w.layer, w.group) for i in range(n)]
        return self._ffn(name, phase, x, parts, [None] * n, ff, act, sv, rows)

    def _ffn(self, name: str, phase: str, x: TensorRef, ws: list, bs: list, ff: int, act: str, sv: dict,
             rows: int) -> TensorRef:
        bld, net, h = self.bld, self.net, self.net.d_model
        tok = self.tok
        self.tok = rows  # linear() works on self.tok rows
        try:
            if net.mlp == "swiglu":
                g = self.linear(f"{name}.gate", phase, x, ws[0], bs[0], h, ff, act)
                u = self.linear(f"{name}.up", phase, x, ws[1], bs[1], h, ff, act)
                hid = bld.t(f"{name}.hidden", act, rows * ff)
                bld.ew(f"{name}.swiglu", phase, (g, u), (hid,), rows * ff, {"exp": 1, "add": 1, "div": 1, "mul": 2})
                y = self.linear(f"{name}.down", phase, hid, ws[2], bs[2], ff, h)
                sv[name] = {"x": x, "g": g, "u": u, "hid": hid, "ws": ws, "bs": bs, "ff": ff, "rows": rows}
            else:
                h1 = self.linear(f"{name}.fc1", phase, x, ws[0], bs[0], h, ff, act)
                h2 = bld.t(f"{name}.gelu", act, rows * ff)
                bld.ew(f"{name}.gelu", phase, (h1,), (h2,), rows * ff, ACT_FWD["gelu"])
                y = self.linear(f"{name}.fc2", phase, h2, ws[1], bs[1], ff, h)
                sv[name] = {"x": x, "h1": h1, "h2": h2, "ws": ws, "bs": bs, "ff": ff, "rows": rows}
        finally:
            self.tok = tok
        return y

    def _ffn_bwd(self, name: str, sv: dict, dy: TensorRef) -> TensorRef:
        bld, net, h = self.bld, self.net, self.net.d_model
        f = sv[name]
        tok = self.tok
        self.tok = f["rows"]
        ff, ws, bs = f["ff"], f["ws"], f["bs"]
        try:
            if net.mlp == "swiglu":
                dhid = self.linear_bwd(f"{name}.down", f["hid"], dy, ws[2], bs[2], ff, h)
                dg = bld.t(f"{name}.dgate", "workspace", self.tok * ff)
                du = bld.t(f"{name}.dup", "workspace", self.tok * ff)
                bld.ew(f"{name}.swiglu.bwd", "backward", (dhid, f["g"], f["u"]), (dg, du), self.tok * ff,
                       {"exp": 1, "add": 2, "div": 1, "mul": 5})
                bld.free(dhid, f["hid"], f["g"], f["u"])
                dx = self.linear_bwd(f"{name}.gate", f["x"], dg, ws[0], bs[0], h, ff)
                dx2 = self.linear_bwd(f"{name}.up", f["x"], du, ws[1], bs[1], h, ff)
                bld.ew(f"{name}.dx.accumulate", "backward", (dx, dx2), (dx,), self.tok * h, {"add": 1})
                bld.free(dg, du, dx2)
            else:
                dh2 = self.linear_bwd(f"{name}.fc2", f["h2"], dy, ws[1], bs[1], ff, h)
                bld.ew(f"{name}.gelu.bwd", "backward", (dh2, f["h1"]), (dh2,), self.tok * ff, ACT_BWD["gelu"])
                bld.free(f["h2"])
                dx = self.linear_bwd(f"{name}.fc1", f["x"], dh2, ws[0], bs[0], h, ff)
                bld.free(dh2, f["h1"])
        finally:
            self.tok = tok
        return dx

    def experts(self, phase: str, xe: TensorRef, w: _Param, act: str, sv: dict) -> TensorRef:
        """Routed experts, perfectly balanced: the first expert's kernels stand for all of them."""
        bld, net, h = self.bld, self.net, self.net.d_model
        m = net.moe
        assert m is not None
        routed = self.tok * m.active_experts
        rows = -(-routed // m.routed_experts)  # the busiest expert's share (exact when it divides)
        per = sum(i * o for _, i, o in net.mlp_matrices(m.expert_d_ff))
        e = bld.esz
        one = _Param(f"{w.name}[0]", _slice(w.w, 0, per * e, f"{w.w.name}[0]"),
                     _slice(w.g, 0, per * e, f"{w.g.name}[0]") if w.g else None, [], per, w.layer, w.group)
        xe0 = _slice(xe, 0, rows * h * e, "moe.dispatched[0]")
        start = len(bld.kernels)
        ye0 = self.ffn_on("expert", phase, xe0, one, m.expert_d_ff, act, sv, rows)
        for i in range(start, len(bld.kernels)):
            bld.kernels[i] = replace(bld.kernels[i], repeat=m.routed_experts)
        sv["expert_repeat_from"] = start
        ye = bld.t("moe.expert.out", "workspace", routed * h)
        bld.ew("moe.expert.gather", phase, (ye0,), (ye,), routed * h, {})
        bld.free(ye0)
        return ye

    def block_bwd(self, sv: dict, p: dict, kind: str, dout: TensorRef) -> TensorRef:
        """Backward of one layer: the gradient of its input (dout is consumed)."""
        bld, net = self.bld, self.net
        h, tok = net.d_model, self.tok
        # MLP half: the residual passes dout straight to x2's gradient
        dy = dout
        if net.dropout:
            dy = bld.t("mlp.out.dropout.d", "workspace", tok * h)
            bld.ew("mlp.out.dropout.bwd", "backward", (dout, sv["m2"]), (dy,), tok * h, {"mul": 1})
            bld.free(sv["m2"])
        dn2 = self.mlp_bwd(sv, p, kind, dy)
        if dy is not dout:
            bld.free(dy)
        dx2 = self.norm_bwd("ln2", sv["x2"], dn2, p["ln2"], dout)  # dout becomes dx2
        bld.free(dn2, sv["n2"], sv["x2"])
        # attention half
        do = dx2
        if net.dropout:
            do = bld.t("attn.out.dropout.d", "workspace", tok * h)
            bld.ew("attn.out.dropout.bwd", "backward", (dx2, sv["m1"]), (do,), tok * h, {"mul": 1})
            bld.free(sv["m1"])
        a, dv = net.heads, net.v_dim()
        dctx = self.linear_bwd("wo", sv["ctx"], do, p["wo"], p["wo.b"], a * dv, h)
        if do is not dx2:
            bld.free(do)
        e = bld.esz
        if net.mla:
            m = net.mla
            dk = net.qk_dim()
            dq = bld.t("attn.dq", "workspace", tok * a * dk)
            dkk = bld.t("attn.dk", "workspace", tok * a * dk)
            dkv = bld.t("attn.dkv", "workspace", tok * a * (m.qk_nope_head_dim + dv))
            dvv = _slice(dkv, tok * a * m.qk_nope_head_dim * e, tok * a * dv * e, "attn.dv")
            self.attention_bwd(sv["q"], sv["k"], sv["v"], sv["ctx"], dctx, sv["core"], dq, dkk, dvv)
            bld.free(dctx, sv["ctx"])
            dckv = bld.t("attn.dckv", "workspace", tok * (m.kv_lora_rank + m.qk_rope_head_dim))
            bld.ew("attn.k.assemble.bwd", "backward", (dkk,), (dkv, dckv), tok * a * dk, {"add": 1})
            bld.free(dkk, sv["k"])
            dckvn = self.linear_bwd("wkv_up", sv["ckvn"], dkv, p["wkv_up"], None, m.kv_lora_rank, a * (m.qk_nope_head_dim + dv))
            bld.free(dkv, sv["kv"])
            bld.ew("kv_norm.bwd", "backward", (dckvn, sv["ckv"], p["kv_norm"].w), (dckv, p["kv_norm"].g), tok * m.kv_lora_rank,
                   _plus(NORM_BWD["rmsnorm"], {"add": 1}), rows=tok, broadcast=(p["kv_norm"].w, p["kv_norm"].g))
            bld.free(dckvn, sv["ckvn"])
            dn1 = self.linear_bwd("wkv_down", sv["n1"], dckv, p["wkv_down"], None, h, m.kv_lora_rank + m.qk_rope_head_dim)
            bld.free(dckv, sv["ckv"])
            dcqn = self.linear_bwd("wq_up", sv["cqn"], dq, p["wq_up"], None, m.q_lora_rank, a * dk)
            bld.free(dq, sv["q"])
            dcq = bld.t("q_norm.dx", "workspace", tok * m.q_lora_rank)
            bld.ew("q_norm.bwd", "backward", (dcqn, sv["cq"], p["q_norm"].w), (dcq, p["q_norm"].g), tok * m.q_lora_rank,
                   NORM_BWD["rmsnorm"], rows=tok, broadcast=(p["q_norm"].w, p["q_norm"].g))
            bld.free(dcqn, sv["cqn"])
            dn1b = self.linear_bwd("wq_down", sv["n1"], dcq, p["wq_down"], None, h, m.q_lora_rank)
            bld.free(dcq, sv["cq"])
            bld.ew("ln1.dx.accumulate", "backward", (dn1, dn1b), (dn1,), tok * h, {"add": 1})
            bld.free(dn1b)
        else:
            kvh, dh = net.kv_heads, net.d_head
            width = (a + 2 * kvh) * dh
            dqkv = bld.t("attn.dqkv", "workspace", tok * width)
            dq = _slice(dqkv, 0, tok * a * dh * e, "attn.dq")
            dkk = _slice(dqkv, tok * a * dh * e, tok * kvh * dh * e, "attn.dk")
            dvv = _slice(dqkv, tok * (a + kvh) * dh * e, tok * kvh * dh * e, "attn.dv")
            self.attention_bwd(sv["q"], sv["k"], sv["v"], sv["ctx"], dctx, sv["core"], dq, dkk, dvv)
            bld.free(dctx, sv["ctx"])
            if net.positions == "rope":
                bld.ew("attn.rope.bwd", "backward", (dq, dkk), (dq, dkk), tok * (a + kvh) * dh, {"mul": 2, "add": 1})
            dn1 = self.linear_bwd("wqkv", sv["n1"], dqkv, p["wqkv"], p["wqkv.b"], h, width)
            bld.free(dqkv, sv["qkv"])
        dx = self.norm_bwd("ln1", sv["x"], dn1, p["ln1"], dx2)
        bld.free(dn1, sv["n1"])
        return dx

    def mlp_bwd(self, sv: dict, p: dict, kind: str, dy: TensorRef) -> TensorRef:
        bld, net, h, tok = self.bld, self.net, self.net.d_model, self.tok
        if kind == "dense":
            return self._ffn_bwd("mlp", sv, dy)
        m = net.moe
        assert m is not None
        routed = tok * m.active_experts
        dye = bld.t("moe.dexpert.out", "workspace", routed * h)
        bld.ew("moe.combine.bwd", "backward", (dy, sv["gates"]), (dye, sv["gates"]), tok * h, {"fma": m.active_experts})
        dye0 = _slice(dye, 0, sv["expert"]["rows"] * h * bld.esz, "moe.dexpert.out[0]")
        start = len(bld.kernels)
        dxe0 = self._ffn_bwd("expert", sv, dye0)
        for i in range(start, len(bld.kernels)):
            bld.kernels[i] = replace(bld.kernels[i], repeat=m.routed_experts)
        dx = bld.t("moe.dx", "workspace", tok * h)
        bld.ew("moe.dispatch.bwd", "backward", (dxe0,), (dx,), routed * h, {"add": 1})
        bld.free(dxe0, dye, sv["xe"])
        if "shared" in sv:
            dxs = self._ffn_bwd("shared", sv, dy)
            bld.ew("moe.shared.dx.accumulate", "backward", (dx, dxs), (dx,), tok * h, {"add": 1})
            bld.free(dxs)
        dr = bld.t("moe.router.dlogits", "workspace", tok * m.routed_experts)
        bld.ew("moe.route.bwd", "backward", (sv["gates"],), (dr,), tok * m.routed_experts, SOFTMAX_BWD, rows=tok,
               op="softmax")
        bld.free(sv["gates"])
        router = p["router"]
        dxr = self.linear_bwd("moe.router", sv["n2"], dr, router, None, h, m.routed_experts)
        bld.ew("moe.router.dx.accumulate", "backward", (dx, dxr), (dx,), tok * h, {"add": 1})
        bld.free(dr, dxr)
        return dx


def _build_transformer(bld: _Builder) -> None:
    net, cfg = bld.net, bld.cfg
    seq = cfg.seq_len or net.seq_len or 1
    tr = _Transformer(bld, seq)
    tok, h, e = tr.tok, net.d_model, bld.esz
    # parameters: embeddings, then each layer's, then the head
    emb = bld.param("embed.tokens", net.vocab * h)
    pos = bld.param("embed.positions", net.max_positions * h) if net.max_positions else None
    if seq > (net.max_positions or seq):
        raise InputError(f"seq_len {seq} exceeds the {net.max_positions} learned positions", field="seq_len")
    types = bld.param("embed.types", net.token_types * h) if net.token_types else None
    enorm = bld.param("embed.norm", net.norm_values()) if net.embedding_norm else None
    layers: list[tuple[str, int, dict]] = []
    li = 0
    for kind, count in net.layer_kinds():
        for j in range(count):
            bld.layer, bld.group = li, kind
            layers.append((kind, j, tr.layer_params(kind)))
            li += 1
    bld.layer, bld.group = -1, ""
    fnorm = bld.param("final.norm", net.norm_values()) if not net.embedding_norm else None
    head = emb if net.tied_embeddings else bld.param("head", net.vocab * h)
    pooler = bld.param("pooler", h * h) if net.pooler else None
    pooler_b = bld.param("pooler.b", h) if net.pooler else None
    n_layers = len(layers)
    seg = cfg.checkpoint_segment(n_layers) if bld.train else None
    bounds: list[int] = []
    if seg:
        first = n_layers - (-(-n_layers // seg) - 1) * seg
        bounds = [0] + list(range(first, n_layers, seg))
    segments = [(s, (bounds[i + 1] if i + 1 < len(bounds) else n_layers)) for i, s in enumerate(bounds)] or [(0, n_layers)]
    starts = {s for s, _ in segments}

    ids = bld.t("tokens", "input", tok, 4)
    targets = bld.t("targets", "input", tok, 4) if bld.train else None
    # embedding: a gather of tok rows (modelled as the first tok rows of the table) + positions
    x = bld.t("embed.out", "activations" if bld.train else "workspace", tok * h)
    rows = _slice(emb.w, 0, min(tok, net.vocab) * h * e, "embed.tokens.rows")
    reads = (ids, rows) + ((_slice(pos.w, 0, seq * h * e, "embed.positions.rows"),) if pos else ())
    bld.ew("embed", "forward", reads, (x,), tok * h, {"add": (1 if pos else 0) + (1 if types else 0)})
    if enorm:
        bld.ew("embed.norm", "forward", (x, enorm.w), (x,), tok * h, NORM_FWD[net.norm], rows=tok, broadcast=(enorm.w,),
               extra={"sqrt": tok, "div": tok})
    saved: list[dict] = [{} for _ in range(n_layers)]
    inputs: list[TensorRef | None] = [None] * (n_layers + 1)
    inputs[0] = x
    for i, (kind, _, p) in enumerate(layers):
        bld.layer, bld.group = i, kind
        keep = bld.train and not seg
        out, sv = tr.block(inputs[i], p, kind, "forward", keep)
        saved[i] = sv
        nxt = bld.t(out.name, "activations" if bld.train and (not seg or i + 1 in starts) else "workspace", out.bytes // e)
        bld.free(out)  # re-filed under its class: same size, so it lands where it was
        inputs[i + 1] = _retarget(bld, out, nxt)
        if not bld.train or (seg and i not in starts):
            bld.free(inputs[i])
    bld.layer, bld.group = -1, ""
    xl = inputs[n_layers]
    assert xl is not None
    nf = tr.norm("final.norm", "forward", xl, fnorm, "workspace") if fnorm else xl
    logits = bld.t("logits", "workspace", tok * net.vocab)
    bld.gemm("head.fwd", "forward", nf, head.w, logits, tok, net.vocab, h, trans=(False, True))
    if pooler is not None:  # BERT's pooler reads the first token of each sequence
        pooled = bld.t("pooler.out", "workspace", bld.b * h)
        bld.gemm("pooler.fwd", "forward", _slice(nf, 0, bld.b * h * e, "pooler.in"), pooler.w, pooled, bld.b, h, h,
                 trans=(False, True))
        bld.ew("pooler.tanh", "forward", (pooled, pooler_b.w), (pooled,), bld.b * h, {"add": 1, "tanh": 1}, rows=bld.b,
               broadcast=(pooler_b.w,))
        bld.free(pooled)
    if not bld.train:
        bld.free(logits, nf if nf is not xl else None, xl, ids)
        return
    bld.ew("loss.softmax+grad", "backward", (logits, targets), (logits,), tok * net.vocab, _plus(SOFTMAX_FWD, {"add": 1}),
           rows=tok, op="softmax")
    dnf = tr.linear_bwd("head", nf, logits, head, None, h, net.vocab)
    bld.free(logits)
    if fnorm:
        dx = tr.norm_bwd("final.norm", xl, dnf, fnorm, None)
        bld.free(dnf, nf)
    else:
        dx = dnf
    if seg:
        bld.free(xl)
    for s, e_ in reversed(segments):
        if seg:
            for i in range(s, e_):
                kind, _, p = layers[i]
                bld.layer, bld.group = i, kind
                out, sv = tr.block(inputs[i], p, kind, "recompute", True)
                saved[i] = sv
                if i + 1 < e_:
                    inputs[i + 1] = out
                    nxt = bld.t(out.name, "activations", out.bytes // e)
                    bld.free(out)
                    inputs[i + 1] = _retarget(bld, out, nxt)
                else:
                    bld.free(out)
        for i in reversed(range(s, e_)):
            kind, _, p = layers[i]
            bld.layer, bld.group = i, kind
            dx = tr.block_bwd(saved[i], p, kind, dx)
            bld.free(inputs[i])
            saved[i] = {}
    bld.layer, bld.group = -1, ""
    if not seg:
        bld.free(xl)
    if enorm:
        bld.ew("embed.norm.bwd", "backward", (dx, x, enorm.w), (dx, enorm.g), tok * h, NORM_BWD[net.norm], rows=tok,
               broadcast=(enorm.w, enorm.g))
    # embedding gradient: scatter-add of tok rows into the (dense) table gradient
    grows = _slice(emb.g, 0, min(tok, net.vocab) * h * e, "grad.embed.tokens.rows")
    bld.ew("embed.bwd", "backward", (dx, grows), (grows,), tok * h, {"add": 1})
    if pos:
        bld.ew("embed.positions.bwd", "backward", (dx,), (_slice(pos.g, 0, seq * h * e, "grad.embed.positions.rows"),),
               tok * h, {"add": 1}, rows=bld.b, broadcast=(_slice(pos.g, 0, seq * h * e, "grad.embed.positions.rows"),),
               op="reduction")
    bld.free(dx, ids, targets)
    if pooler is not None:  # the pooler gets no gradient from a language-model loss: it is not updated here
        bld.params = [q for q in bld.params if q is not pooler and q is not pooler_b]
    bld.updates()


def _tensors(obj: Any) -> list[TensorRef]:
    """Every tensor inside a (nested) record of saved tensors."""
    if isinstance(obj, TensorRef):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def _retarget(bld: _Builder, old: TensorRef, new: TensorRef) -> TensorRef:
    return new


def _group_sizes(net: Network) -> dict[str, int]:
    return dict(net.layer_kinds()) if net.is_sequence else {}


def declare(network: Network, config: TrainingConfig) -> Graph:
    """The declared step of a chain, checkpointing applied (transformers: still built below)."""
    if config.seq_len is not None:
        raise InputError(f"{network.id} is not a sequence model: no seq_len", field="seq_len")
    per_example = config.updates == "per-example" and config.training
    g = Graph(config.dtype)
    declare_chain(g, network, 1 if per_example else config.batch, training=config.training,
                  optimizer=config.optimizer)
    if config.training:
        checkpoint.apply(g, config.checkpoint)
    return g


def build_step(network: Network, config: TrainingConfig, *, expand_repeats: bool = False) -> Step:
    """The step of ``config`` on ``network`` (kernels, FLOPs, capacity ledger)."""
    per_example = config.updates == "per-example" and config.training
    batch = 1 if per_example else config.batch
    iterations = config.batch if per_example else 1
    if not network.is_sequence:
        kernels, layout = derive(declare(network, config))
        return Step(network, config, kernels, layout.ledger, iterations, config.batch, network.connections,
                    _total_flops(kernels, iterations))
    bld = _Builder(network, config, batch)
    _build_transformer(bld)
    kernels = bld.kernels
    if network.is_sequence and not expand_repeats:
        sizes = _group_sizes(network)
        firsts: dict[str, int] = {}
        for k in kernels:
            if k.layer >= 0:
                firsts.setdefault(k.group, k.layer)
        kernels = [k if k.layer < 0 else replace(k, repeat=k.repeat * sizes[k.group]) for k in kernels
                   if k.layer < 0 or k.layer == firsts[k.group]]
    if bld.al.live:
        left = sorted(r.name for r in bld.al.live.values() if r.cls not in ("weights", "gradients", "optimizer"))
        if left:
            raise RuntimeError(f"step builder leaked tensors: {left[:8]}")
    peak = bld.al.peak
    ledger = Ledger(peak["weights"], peak["gradients"], peak["optimizer"], peak["activations"], peak["workspace"],
                    peak["input"], bld.al.peak_total)
    seq = (config.seq_len or network.seq_len or 1) if network.is_sequence else 1
    return Step(network, config, kernels, ledger, iterations, config.batch,
                network.connections, _total_flops(kernels, iterations), config.batch * seq if network.is_sequence else 0)


def gemm_step(m: int, n: int, k: int, dtype: str = "fp32") -> Step:
    """A single product C[M x N] = A[M x K] . B[K x N]: one kernel, 2MNK FLOPs."""
    for name, v in (("M", m), ("N", n), ("K", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(f"must be a positive integer, got {v!r}", field=name)
    cfg = TrainingConfig(batch=1, dtype=dtype, phase="forward")
    net = Network(id=f"gemm-{m}x{n}x{k}", name=f"GEMM {m}x{n}x{k}", kind="mlp", source="synthetic", year=2024,
                  status="synthetic", dtype=dtype, layers=(k, n), loss="none")
    bld = _Builder(net, cfg, m)
    a = bld.t("A", "input", m * k)
    b = bld.t("B", "weights", k * n)
    c = bld.t("C", "workspace", m * n)
    bld.gemm("gemm", "forward", a, b, c, m, n, k)
    p = bld.al.peak
    ledger = Ledger(p["weights"], 0, 0, 0, p["workspace"], p["input"], bld.al.peak_total)
    return Step(net, cfg, bld.kernels, ledger, 1, m, k * n, _total_flops(bld.kernels, 1))
