"""Attention, declared: projections (multi-head, grouped-query, multi-head latent) and core.

Owns: :func:`attention` and :func:`attention_bwd`, for one block.

* Q, K and V are written head-major by the projection (the transpose folded into its
  output addressing), so each head's matrix is contiguous: with a fused QKV projection
  they are views of its output. Grouped-query attention has ``kv_heads`` K and V heads.
* MLA (DeepSeek) projects through low-rank latents with their own RMSNorms; K joins a
  per-head part from the latent and a rope part shared by the heads.
* The core computes the full ``s x s`` scores even when causal (as materialising
  implementations do). Its QK^T, softmax and dropout have role ``attention-core``, what
  selective recomputation reruns; a fused (flash) kernel saves only the softmax
  statistics and recomputes the scores in its backward.
* Context parallelism (``cp`` > 1, :mod:`memwall.workloads.parallel`): the block holds S / cp
  tokens. Ring: the core is one fused kernel over the local queries and the S keys, in cp
  blocks (``params['blocks']``): the device's own K, V, then cp - 1 blocks from a receive
  buffer of two blocks (one arriving while the other is computed on); backward, the K, V
  blocks and the partial dK, dV travel through a buffer of two of each; the local dK, dV
  arrive home by the ring. Ulysses: the core runs on S tokens and heads / cp; Q, K, V,
  the context and their gradients in that layout are tensors of the same bytes, filled by
  the all-to-alls (no kernel writes them).
* Serving. Prefill (the prompt) and decode write each token's keys and values into the
  layer's KV cache (class ``kv_cache``, live the whole step), a store kernel as serving
  engines run one (vLLM's ``reshape_and_cache``), which also narrows them to the cache's
  type. The cache is laid out [sequence, KV head, token, dim], K then V; the appended
  row of a decode step is placed at the end of each of them (its bytes exact, its
  addresses not strided). Decode attention is its own fused kernel: per KV head of each
  sequence, the group's query tokens (one a query head) against ``context + 1`` cached
  rows, dequantizing a narrow cache as it reads (a multiply per element, and for the
  integer types a subtraction, counted). MLA caches the compressed latent
  (``kv_lora_rank + qk_rope_head_dim`` a token) and decodes in the absorbed form
  (DeepSeek-V2 section 2.1.3): every head attends to the one latent (K = the latent,
  V = its first ``kv_lora_rank`` columns); the up-projection ``wkv_up`` runs on the new
  token only, standing for the two absorbed products (same weights, same FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...networks import Network
from ...vocabulary import DTYPE_BITS
from ..graph import Graph, Op, Param
from ..ops import SOFTMAX_BWD, SOFTMAX_FWD, flops_of, plus, scale
from .layers import Rows, linear, linear_bwd, norm, norm_bwd


@dataclass(frozen=True)
class Attn:
    """One block's attention: the network, its batch and sequence length, its rows."""

    net: Network
    batch: int
    seq: int
    r: Rows
    phase: str = "train"
    context: int = 0  # decode: tokens cached before this step; prefill: the prompt
    kv_dtype: str | None = None
    cp: int = 1  # context-parallel devices: seq is this device's S / cp tokens
    cp_kind: str = "ring"
    cache_length: int = 0  # decode: tokens the cache is allocated for (0: the tokens it holds)
    cache_read: str = "filled"  # decode attention reads the filled rows, or every allocated one

    @property
    def ring(self) -> bool:
        return self.cp > 1 and self.cp_kind == "ring"

    @property
    def ulysses(self) -> bool:
        return self.cp > 1 and self.cp_kind == "ulysses"

    @property
    def core_heads(self) -> int:
        """Query heads the core runs (Ulysses: heads / cp)."""
        return self.net.heads // self.cp if self.ulysses else self.net.heads

    @property
    def core_kv_group(self) -> int:
        """Query heads that share one K, V head in the core (MLA: none share)."""
        return self.net.heads // self.net.kv_heads

    @property
    def q_len(self) -> int:
        """Queries a sequence the core runs: the local tokens, or all S for Ulysses."""
        return self.seq * self.cp if self.ulysses else self.seq

    @property
    def k_len(self) -> int:
        """Keys each query meets: all S of the sequence."""
        return self.seq * self.cp

    @property
    def kv_bits(self) -> int:
        return DTYPE_BITS[self.kv_dtype] if self.kv_dtype else 8 * self.r.g.esz

    @property
    def cached(self) -> int:
        """Tokens the cache holds at the end of the step."""
        return self.context + 1 if self.phase == "decode" else self.context

    @property
    def allocated(self) -> int:
        """Tokens the cache is allocated for: a preallocated decode cache's length, else what it holds."""
        return max(self.cached, self.cache_length) if self.phase == "decode" else self.cached

    @property
    def attended(self) -> int:
        """Cached rows decode attention reads: every allocated one (the unfilled masked) when
        the framework's kernel attends over the whole cache tensor, else the filled ones."""
        return self.allocated if self.cache_read == "allocated" else self.cached

    def cache_row(self) -> tuple[int, int]:
        """Values a cached token holds per KV head for K and for V (MLA: the latent, once)."""
        net = self.net
        if net.mla:
            return net.mla.kv_lora_rank + net.mla.qk_rope_head_dim, 0
        return net.d_head, net.d_head

    @property
    def scores(self) -> int:
        return self.batch * self.core_heads * self.q_len * self.k_len

    def core_params(self, backward: bool = False) -> dict:
        net = self.net
        p = {"heads": self.core_heads, "kv_group": self.core_kv_group, "seq": self.q_len, "dk": net.qk_dim(),
             "dv": net.v_dim(), "causal": net.causal}
        if self.cp > 1:  # the keys (all S), and ring attention's blocks of them
            p.update(keys=self.k_len, **({"blocks": self.cp} if self.ring else {}))
        return {**p, "backward": True} if backward else p


def _like(g: Graph, name: str, t: str) -> str:
    """A new tensor of ``t``'s bytes: the same values in another layout, filled by a collective."""
    return g.tensor(name, g.tensors[t].bytes, 1)


def _ring_buffer(at: Attn, name: str, k: str, v: str, grads: bool = False) -> tuple[str, ...]:
    """Views of ring attention's receive buffer: two blocks of K, V (and of dK, dV): one is
    computed on while the next arrives."""
    g = at.r.g
    kb, vb = g.tensors[k].bytes, g.tensors[v].bytes
    buf = g.tensor(name, 2 * (kb + vb) * (2 if grads else 1), 1)
    out = (g.view(buf, f"{name}.k", 0, kb), g.view(buf, f"{name}.v", kb, vb))
    if grads:
        out += (g.view(buf, f"{name}.dk", 2 * (kb + vb), kb), g.view(buf, f"{name}.dv", 2 * (kb + vb) + kb, vb))
    return out


def _core(at: Attn, phase: str, q: str, k: str, v: str) -> tuple[str, dict[str, str]]:
    g, net, s, bh = at.r.g, at.net, at.q_len, at.batch * at.core_heads
    dk, dv = net.qk_dim(), net.v_dim()
    ctx = g.tensor("attn.ctx", at.r.n * net.heads * dv)
    out, heads = ctx, {}
    if at.ulysses:  # Q, K, V and the context in the head-split layout the all-to-alls fill
        q, k, v = (_like(g, f"attn.{n}.heads", t) for n, t in (("q", q), ("k", k), ("v", v)))
        out = _like(g, "attn.ctx.heads", ctx)
        heads = {"q.heads": q, "k.heads": k, "v.heads": v, "ctx.heads": out}
    if net.attention == "flash":
        lse = g.tensor("attn.lse", bh * s, 4)
        ops = plus({"fma": at.scores * (dk + dv)}, scale(SOFTMAX_FWD, at.scores))
        reads = (q, k, v) + (_ring_buffer(at, "attn.ring", k, v) if at.ring else ())
        g.add(Op("attn.flash", phase, "attention", g.dtype, flops_of(ops), ops, reads, (out, lse),
                 (s, at.k_len, dk), batch=bh, params=at.core_params(), role="attention"))
        return ctx, {"lse": lse, **heads}
    # materialised scores (cp > 1 only with Ulysses: q_len = k_len); the product writes ``out``
    sc = g.tensor("attn.scores", at.scores)
    g.gemm("attn.qk", phase, q, k, sc, s, s, dk, trans=(False, True), batch=bh, role="attention-core")
    p = g.tensor("attn.probs", at.scores)
    g.ew("attn.softmax", phase, (sc,), (p,), at.scores, SOFTMAX_FWD, rows=bh * s, op="softmax", role="attention-core")
    saved = {"probs": p, "dropped": p}
    if net.dropout:
        saved["mask"] = g.tensor("attn.mask", at.scores, 1)
        saved["dropped"] = g.tensor("attn.dropped", at.scores)
        g.ew("attn.dropout", phase, (p,), (saved["mask"], saved["dropped"]), at.scores, {"mul": 1},
             role="attention-core")
    g.gemm("attn.pv", phase, saved["dropped"], v, out, s, dv, s, batch=bh, role="attention")
    return ctx, {**saved, **heads}


def _core_bwd(at: Attn, q: str, k: str, v: str, ctx: str, dctx: str, saved: dict[str, str], dq: str, dk_: str,
              dv_: str) -> None:
    g, net, s, bh = at.r.g, at.net, at.q_len, at.batch * at.core_heads
    dk, dv = net.qk_dim(), net.v_dim()
    if at.ulysses:  # the head-split layout: saved from the forward, or filled by the all-to-alls
        q, k, v, ctx = saved["q.heads"], saved["k.heads"], saved["v.heads"], saved["ctx.heads"]
        dctx = _like(g, "attn.dctx.heads", dctx)
        dq, dk_, dv_ = (_like(g, f"attn.d{n}.heads", t) for n, t in (("q", dq), ("k", dk_), ("v", dv_)))
    if net.attention == "flash":
        ops = plus({"fma": at.scores * (3 * dk + 2 * dv)}, scale(plus(SOFTMAX_FWD, SOFTMAX_BWD), at.scores))
        reads = (q, k, v, ctx, dctx, saved["lse"])
        writes = (dq, dk_, dv_)
        if at.ring:  # K, V blocks in from the ring; the partial dK, dV travel on (home: dk_, dv_)
            kb, vb, dkb, dvb = _ring_buffer(at, "attn.ring.bwd", k, v, grads=True)
            reads, writes = reads + (kb, vb), (dq, dkb, dvb)
        g.add(Op("attn.flash.bwd", "backward", "attention", g.dtype, flops_of(ops), ops, reads, writes,
                 (s, at.k_len, dk), batch=bh, params=at.core_params(backward=True), role="attention"))
        return
    dpd = g.tensor("attn.dprobs", at.scores)
    g.gemm("attn.dP", "backward", dctx, v, dpd, s, s, dv, trans=(False, True), batch=bh, role="attention")
    g.gemm("attn.dV", "backward", saved["dropped"], dctx, dv_, s, dv, s, trans=(True, False), batch=bh,
           role="attention")
    if net.dropout:
        g.ew("attn.dropout.bwd", "backward", (dpd, saved["mask"]), (dpd,), at.scores, {"mul": 1},
             role="attention-core")
    g.ew("attn.softmax.bwd", "backward", (dpd, saved["probs"]), (dpd,), at.scores, SOFTMAX_BWD, rows=bh * s,
         op="softmax", role="attention-core")
    g.gemm("attn.dQ", "backward", dpd, k, dq, s, dk, s, batch=bh, role="attention")
    g.gemm("attn.dK", "backward", dpd, q, dk_, s, dk, s, trans=(True, False), batch=bh, role="attention")


def _dequant(kv_dtype: str | None, elements: int) -> dict[str, int]:
    """Operations to widen a narrow cache as it is read: a scale, and an integer type's zero point."""
    if kv_dtype in (None, "bf16", "fp16"):
        return {}
    return {"mul": elements, **({"add": elements} if kv_dtype.startswith("int") else {})}


def _cache(at: Attn, sources: tuple[str, ...]) -> tuple[str, str | None]:
    """Declare the layer's KV cache and the kernel storing this step's keys and values in it."""
    g, net = at.r.g, at.net
    kv_heads = 1 if net.mla else net.kv_heads
    kr, vr = at.cache_row()
    bits = at.kv_bits
    # allocated (a preallocated cache's length, else what it holds); the rows attention reads
    # are a prefix of each half, the filled ones or all of them
    per_k = at.batch * kv_heads * at.allocated * kr
    per_v = at.batch * kv_heads * at.allocated * vr
    read_k = at.batch * kv_heads * at.attended * kr
    read_v = at.batch * kv_heads * at.attended * vr
    filled_k = at.batch * kv_heads * at.cached * kr
    filled_v = at.batch * kv_heads * at.cached * vr
    cache = g.tensor("kv_cache", per_k + per_v, cls="kv_cache", whole_step=True, bits=bits)
    v0 = -(-per_k * bits // 8)  # V starts after the whole allocation of K
    kc = g.view(cache, "kv_cache.k", 0, -(-read_k * bits // 8))
    vc = g.view(cache, "kv_cache.v", v0, -(-read_v * bits // 8)) if vr else None
    new = at.r.n * kv_heads  # rows stored this step
    nk, nv = -(-new * kr * bits // 8), -(-new * vr * bits // 8)
    if at.phase == "decode":  # the appended row, placed at the end of the filled K and V
        dests: tuple[str, ...] = (g.view(cache, "kv_cache.k.new", -(-filled_k * bits // 8) - nk, nk),)
        if vr:
            dests += (g.view(cache, "kv_cache.v.new", v0 + -(-filled_v * bits // 8) - nv, nv),)
    else:
        dests = (kc,) + ((vc,) if vc else ())
    narrow = {"mul": new * (kr + vr)} if bits < 8 * g.esz else {}  # scale to the cache's type
    g.ew("kv.store", "forward", sources, dests, new * (kr + vr), {}, extra=narrow, role="kv-cache")
    return kc, vc


def _decode_core(at: Attn, q: str, kc: str, vc: str | None) -> str:
    """One query token a sequence against the cache: scores, softmax and context, fused, over
    the rows it attends (a masked kernel computes the scores of the unfilled rows too)."""
    g, net = at.r.g, at.net
    s = at.attended
    if net.mla:
        m = net.mla
        assert m is not None
        dk, dv, group = m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank, net.heads
    else:
        dk, dv, group = net.d_head, net.d_head, net.heads // net.kv_heads
    bh = at.batch * net.heads
    ctx = g.tensor("attn.ctx", at.r.n * net.heads * net.v_dim())
    scores = bh * s
    kv_heads = at.batch * net.heads // group
    ops = plus({"fma": scores * (dk + dv)}, scale(SOFTMAX_FWD, scores),
               _dequant(at.kv_dtype, kv_heads * s * (dk + (0 if vc is None else dv))))
    params = {"heads": net.heads, "kv_group": group, "seq": 1, "context": s, "dk": dk, "dv": dv,
              "causal": False, "decode": True, "kv_bits": at.kv_bits}
    reads = (q, kc) + ((vc,) if vc else ())
    g.add(Op("attn.decode", "forward", "attention", g.dtype, flops_of(ops), ops, reads, (ctx,), (1, s, dk),
             batch=bh, params=params, role="attention"))
    return ctx


def _heads(at: Attn, qkv: str, prefix: str) -> tuple[str, str, str]:
    """Q, K, V (or their gradients) as views of one fused tensor."""
    g, net, tok = at.r.g, at.net, at.r.n
    a, kvh, dh, e = net.heads, net.kv_heads, net.d_head, g.esz
    return (g.view(qkv, f"{prefix}q", 0, tok * a * dh * e),
            g.view(qkv, f"{prefix}k", tok * a * dh * e, tok * kvh * dh * e),
            g.view(qkv, f"{prefix}v", tok * (a + kvh) * dh * e, tok * kvh * dh * e))


def _rope(at: Attn, name: str, phase: str, q: str, k: str) -> None:
    net = at.net
    cols = net.heads * net.mla.qk_rope_head_dim if net.mla else (net.heads + net.kv_heads) * net.d_head
    at.r.g.ew(name, phase, (q, k), (q, k), at.r.n * cols, {"mul": 2, "add": 1}, role="position")


def _mla(at: Attn, n1: str, p: dict[str, Param | None]) -> tuple[str, str, str, dict[str, str]]:
    r, net, g = at.r, at.net, at.r.g
    m, a, h, tok = net.mla, net.heads, net.d_model, at.r.n
    assert m is not None
    dk, dv = net.qk_dim(), net.v_dim()
    cq = linear(r, "wq_down", "forward", n1, p["wq_down"], None, h, m.q_lora_rank)
    cqn = norm(r, "q_norm", "forward", cq, p["q_norm"], m.q_lora_rank, "rmsnorm")
    q = linear(r, "wq_up", "forward", cqn, p["wq_up"], None, m.q_lora_rank, a * dk)
    ckv = linear(r, "wkv_down", "forward", n1, p["wkv_down"], None, h, m.kv_lora_rank + m.qk_rope_head_dim)
    ckvn = norm(r, "kv_norm", "forward", ckv, p["kv_norm"], m.kv_lora_rank, "rmsnorm")
    kv = linear(r, "wkv_up", "forward", ckvn, p["wkv_up"], None, m.kv_lora_rank, a * (m.qk_nope_head_dim + dv))
    if at.phase == "decode":  # absorbed: the cache of latents is K and V; rope on the query
        at.r.g.ew("attn.rope", "forward", (q,), (q,), tok * a * m.qk_rope_head_dim, {"mul": 2, "add": 1},
                  role="position")
        return q, ckv, kv, {"cq": cq, "cqn": cqn, "ckv": ckv, "ckvn": ckvn}
    k = g.tensor("attn.k", tok * a * dk)  # nope part from kv, rope part shared by the heads
    g.ew("attn.k.assemble", "forward", (kv, ckv), (k,), tok * a * dk, {"mul": 1})
    v = g.view(kv, "attn.v", tok * a * m.qk_nope_head_dim * g.esz, tok * a * dv * g.esz)
    _rope(at, "attn.rope", "forward", q, k)
    return q, k, v, {"cq": cq, "cqn": cqn, "ckv": ckv, "ckvn": ckvn}


def attention(at: Attn, n1: str, p: dict[str, Param | None]) -> dict[str, object]:
    """Forward from the normed input ``n1``: the saved record; ``"ctx"`` is the context."""
    net = at.net
    if net.mla:
        q, k, v, sv = _mla(at, n1, p)
    else:
        width = (net.heads + 2 * net.kv_heads) * net.d_head
        qkv = linear(at.r, "wqkv", "forward", n1, p["wqkv"], p["wqkv.b"], net.d_model, width)
        q, k, v = _heads(at, qkv, "attn.")
        if net.positions == "rope":
            _rope(at, "attn.rope", "forward", q, k)
        sv = {}
    if at.phase in ("decode", "prefill"):
        kc, vc = _cache(at, (sv["ckv"],) if net.mla else (k, v))
        if at.phase == "decode":
            return {**sv, "q": q, "k": k, "v": v, "ctx": _decode_core(at, q, kc, vc), "core": {}}
    ctx, core = _core(at, "forward", q, k, v)
    return {**sv, "q": q, "k": k, "v": v, "ctx": ctx, "core": core}


def _mla_bwd(at: Attn, sv: dict, p: dict[str, Param | None], n1: str, dctx: str) -> str:
    r, net, g = at.r, at.net, at.r.g
    m, a, h, tok, e = net.mla, net.heads, net.d_model, at.r.n, at.r.g.esz
    assert m is not None
    dk, dv = net.qk_dim(), net.v_dim()
    dq = g.tensor("attn.dq", tok * a * dk)
    dkk = g.tensor("attn.dk", tok * a * dk)
    dkv = g.tensor("attn.dkv", tok * a * (m.qk_nope_head_dim + dv))
    dvv = g.view(dkv, "attn.dv", tok * a * m.qk_nope_head_dim * e, tok * a * dv * e)
    _core_bwd(at, sv["q"], sv["k"], sv["v"], sv["ctx"], dctx, sv["core"], dq, dkk, dvv)
    dckv = g.tensor("attn.dckv", tok * (m.kv_lora_rank + m.qk_rope_head_dim))
    g.ew("attn.k.assemble.bwd", "backward", (dkk,), (dkv, dckv), tok * a * dk, {"add": 1})
    dckvn = linear_bwd(r, "wkv_up", sv["ckvn"], dkv, p["wkv_up"], None, m.kv_lora_rank, a * (m.qk_nope_head_dim + dv))
    # the latent's gradient: the rope columns came from the K assembly, these are added
    norm_bwd(r, "kv_norm", sv["ckv"], dckvn, p["kv_norm"], m.kv_lora_rank, "rmsnorm", into=dckv, add=True)
    dn1 = linear_bwd(r, "wkv_down", n1, dckv, p["wkv_down"], None, h, m.kv_lora_rank + m.qk_rope_head_dim)
    dcqn = linear_bwd(r, "wq_up", sv["cqn"], dq, p["wq_up"], None, m.q_lora_rank, a * dk)
    dcq = norm_bwd(r, "q_norm", sv["cq"], dcqn, p["q_norm"], m.q_lora_rank, "rmsnorm")
    dn1b = linear_bwd(r, "wq_down", n1, dcq, p["wq_down"], None, h, m.q_lora_rank)
    g.ew("ln1.dx.accumulate", "backward", (dn1, dn1b), (dn1,), tok * h, {"add": 1}, role="accumulate")
    return dn1


def attention_bwd(at: Attn, sv: dict, p: dict[str, Param | None], n1: str, dctx: str) -> str:
    """Backward from the context's gradient: the gradient of the normed input ``n1``."""
    net = at.net
    if net.mla:
        return _mla_bwd(at, sv, p, n1, dctx)
    width = (net.heads + 2 * net.kv_heads) * net.d_head
    dqkv = at.r.g.tensor("attn.dqkv", at.r.n * width)
    dq, dkk, dvv = _heads(at, dqkv, "attn.d")
    _core_bwd(at, sv["q"], sv["k"], sv["v"], sv["ctx"], dctx, sv["core"], dq, dkk, dvv)
    if net.positions == "rope":
        _rope(at, "attn.rope.bwd", "backward", dq, dkk)
    return linear_bwd(at.r, "wqkv", n1, dqkv, p["wqkv"], p["wqkv.b"], net.d_model, width)
