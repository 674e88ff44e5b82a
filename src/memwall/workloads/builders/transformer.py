"""Transformers (GPT, BERT, Llama, DeepSeek): embeddings, blocks, head and loss, declared.

Owns: :func:`declare_transformer`. A block is pre-norm attention then an MLP (dense, or
mixture of experts), each added to the residual stream (with dropout when the preset
has it); every block is one checkpointable block and one ``layer``, its kernels tagged
with the group of identical layers it belongs to. The embedding is a gather of the
token rows (modelled as the first rows of the table) plus learned positions; the head
is a product with the vocabulary (tied to the embedding or its own); BERT adds an
embedding norm and a pooler, which a language-model loss does not train (no update).
Saved activations of a GPT-style block (materialised attention, dropout, 4h GeLU MLP)
come out as exactly Korthikanti's 34sbh + 5as^2b bytes in 16-bit.

A device's share of a context- or sequence-parallel step (:class:`SeqSplit`,
:mod:`memwall.workloads.parallel`) declares S / cp tokens of each sequence; attention's
core is declared by :mod:`.attention` (ring blocks, or Ulysses' head-split layout). With
sequence parallelism the norms, residuals and dropouts run on S / (cp tp) tokens; the
tensors that collectives fill (the gathered input of a column-parallel product, the
scattered output of a row-parallel one, and their gradients) are declared and written by
no kernel. The shard a backward re-gathers is read by its norm's backward (the gather
reads it on this device while the MLP's or attention's backward runs: charged there, it
lives as long as it does in Megatron-LM). Known limit: under full recomputation the
recomputed products read the gathered inputs of the first forward, which then live until
the backward (an overcount of one gathered input a product).

A pipeline stage (``embed`` / ``head`` false, :mod:`memwall.workloads.parallel`) declares
only its blocks: without the embedding its input is the activation received from the
stage before (class ``input``), without the head its backward starts from the gradient
received from the stage after. A last stage with tied embeddings keeps its own copy of
the table for the head, as Megatron-LM does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import InputError
from ...networks import Network
from ..graph import Graph, Param
from ..ops import SOFTMAX_FWD, plus
from .attention import Attn, attention, attention_bwd
from .layers import Rows, ffn, ffn_bwd, linear, linear_bwd, norm, norm_bwd
from .moe import moe, moe_bwd


@dataclass(frozen=True)
class SeqSplit:
    """How a device's step splits each sequence: ``cp`` context-parallel devices of ``cp_kind``
    (ring or ulysses), ``sp`` the tensor-parallel degree the norms and residuals are sharded
    over (1: not sequence-parallel)."""

    cp: int = 1
    cp_kind: str = "ring"
    sp: int = 1


NO_SPLIT = SeqSplit()


@dataclass
class _Model:
    """The step's shape and its parameters outside the blocks."""

    net: Network
    batch: int
    seq: int
    training: bool
    optimizer: str
    targets: str | None = None  # the batch's next tokens (training)
    phase: str = "train"
    context: int = 0  # decode: tokens already cached per sequence; prefill: the prompt
    weights: str | None = None  # block matrices stored in this narrow type (weight-only quantization)
    kv_dtype: str | None = None  # the KV cache's type (None: the compute dtype)
    split: SeqSplit = NO_SPLIT  # seq is this device's S / cp tokens of a sequence
    cache_length: int = 0  # decode: tokens the cache is allocated for (0: context + 1)
    cache_read: str = "filled"  # decode attention reads the filled rows, or every allocated one

    @property
    def tok(self) -> int:
        return self.batch * self.seq

    @property
    def sp_tok(self) -> int:
        """Tokens the norms, residuals and dropouts run on: tok / tp with sequence parallelism."""
        return self.tok // self.split.sp


def _gather(g: Graph, md: _Model, name: str, shard: str) -> str:
    """The full-token tensor an all-gather of ``shard`` fills (the shard itself without sequence
    parallelism)."""
    if md.split.sp == 1:
        return shard
    return g.tensor(name, md.tok * md.net.d_model)


def _scatter(g: Graph, md: _Model, name: str, full: str) -> str:
    """The shard a reduce-scatter of ``full`` fills (``full`` itself without sequence parallelism)."""
    if md.split.sp == 1:
        return full
    return g.tensor(name, md.sp_tok * md.net.d_model)


def _block_params(g: Graph, md: _Model, kind: str) -> dict[str, Param | None]:
    net = md.net

    def p(name: str, values: int, stored: str | None = None) -> Param:
        return g.param(f"L{g.layer}.{name}", values, training=md.training, optimizer=md.optimizer, stored=stored)

    out: dict[str, Param | None] = {"ln1": p("ln1", net.norm_values()), "ln2": p("ln2", net.norm_values())}

    # weight-only quantization covers the block's matrices (the embedding, head, norms and
    # router stay in the compute type, as AWQ and GPTQ checkpoints keep them)
    def matrices(mats: list[tuple[str, int, int]]) -> None:
        for nm, n_in, n_out in mats:
            out[nm] = p(nm, n_in * n_out, md.weights)
            out[nm + ".b"] = p(f"{nm}.b", n_out) if net.linear_bias else None

    matrices(net.attention_matrices())
    if net.mla:
        out["q_norm"] = p("q_norm", net.mla.q_lora_rank)
        out["kv_norm"] = p("kv_norm", net.mla.kv_lora_rank)
    if kind == "dense":
        matrices(net.mlp_matrices(net.d_ff))
    else:
        m = net.moe
        assert m is not None
        per = sum(i * o for _, i, o in net.mlp_matrices(m.expert_d_ff))
        out["router"] = p("router", m.routed_experts * net.d_model)
        out["experts"] = p("experts", m.routed_experts * per, md.weights)
        out["shared"] = p("shared_experts", max(m.shared_experts, 1) * per, md.weights) if m.shared_experts else None
    return out


def _mlp(r: Rows, net: Network, kind: str, x: str, p: dict[str, Param | None]) -> tuple[str, dict]:
    if kind != "dense":
        return moe(r, net, x, p)
    mats = net.mlp_matrices(net.d_ff)
    y, f = ffn(r, "mlp", "forward", x, tuple(p[nm] for nm, _, _ in mats), tuple(p[nm + ".b"] for nm, _, _ in mats),
               net.d_ff, net.d_model, net.mlp)
    return y, {"mlp": f}


def _residual(r: Rows, net: Network, name: str, y: str, x: str, out: str) -> str | None:
    """``out = x + dropout(y)``; the dropout mask when there is one."""
    n = r.n * net.d_model
    if not net.dropout:
        r.g.ew(f"{name}.residual", "forward", (y, x), (out,), n, {"add": 1}, role="residual")
        return None
    mask = r.g.tensor(f"{name}.out.mask", n, 1)
    r.g.ew(f"{name}.out.dropout+residual", "forward", (y, x), (mask, out), n, {"mul": 1, "add": 1}, role="residual")
    return mask


def _dropout_bwd(r: Rows, net: Network, name: str, dy: str, mask: str | None) -> str:
    if mask is None:
        return dy
    d = r.g.tensor(f"{name}.out.dropout.d", r.n * net.d_model)
    r.g.ew(f"{name}.out.dropout.bwd", "backward", (dy, mask), (d,), r.n * net.d_model, {"mul": 1}, role="dropout")
    return d


def _block(g: Graph, md: _Model, kind: str, x: str, p: dict[str, Param | None]) -> tuple[str, dict]:
    """Forward of one block from its input ``x``: its output and what its backward reads."""
    net, r, rs = md.net, Rows(g, md.tok), Rows(g, md.sp_tok)
    h = net.d_model
    n1 = norm(rs, "ln1", "forward", x, p["ln1"], h, net.norm)
    at = Attn(net, md.batch, md.seq, r, md.phase, md.context, md.kv_dtype, md.split.cp, md.split.cp_kind,
              md.cache_length, md.cache_read)
    sv = attention(at, _gather(g, md, "ln1.out.gathered", n1), p)
    o = linear(r, "wo", "forward", sv["ctx"], p["wo"], p["wo.b"], net.heads * net.v_dim(), h)
    x2 = g.tensor("resid.attn", rs.n * h)
    m1 = _residual(rs, net, "attn", _scatter(g, md, "wo.out.scattered", o), x, x2)
    n2 = norm(rs, "ln2", "forward", x2, p["ln2"], h, net.norm)
    y, mlp_sv = _mlp(r, net, kind, _gather(g, md, "ln2.out.gathered", n2), p)
    out = g.tensor("resid.mlp", rs.n * h)
    m2 = _residual(rs, net, "mlp", _scatter(g, md, "mlp.out.scattered", y), x2, out)
    return out, {**sv, **mlp_sv, "at": at, "x": x, "n1": n1, "x2": x2, "n2": n2, "m1": m1, "m2": m2}


def _block_bwd(g: Graph, md: _Model, kind: str, sv: dict, p: dict[str, Param | None], dout: str) -> str:
    """Backward of one block from its output's gradient: the gradient of its input."""
    net, r, rs = md.net, Rows(g, md.tok), Rows(g, md.sp_tok)
    h = net.d_model
    sp = md.split.sp > 1
    # MLP half: the residual passes dout straight to x2's gradient
    dy = _gather(g, md, "mlp.out.d.gathered", _dropout_bwd(rs, net, "mlp", dout, sv["m2"]))
    n2 = _gather(g, md, "ln2.out.regathered", sv["n2"])  # the saved shard, gathered again
    if kind != "dense":
        dn2 = moe_bwd(r, net, sv, p, n2, dy)
    else:
        dn2 = ffn_bwd(replace(sv["mlp"], x=n2), dy, h)
    dn2 = _scatter(g, md, "ln2.out.d.scattered", dn2)
    dx2 = norm_bwd(rs, "ln2", sv["x2"], dn2, p["ln2"], h, net.norm, into=dout, reads_into=True, add=True,
                   keep=sv["n2"] if sp else None)
    # attention half
    do = _gather(g, md, "attn.out.d.gathered", _dropout_bwd(rs, net, "attn", dx2, sv["m1"]))
    dctx = linear_bwd(r, "wo", sv["ctx"], do, p["wo"], p["wo.b"], net.heads * net.v_dim(), h)
    dn1 = attention_bwd(sv["at"], sv, p, _gather(g, md, "ln1.out.regathered", sv["n1"]), dctx)
    dn1 = _scatter(g, md, "ln1.out.d.scattered", dn1)
    return norm_bwd(rs, "ln1", sv["x"], dn1, p["ln1"], h, net.norm, into=dx2, reads_into=True, add=True,
                    keep=sv["n1"] if sp else None)


def _embed(g: Graph, md: _Model, emb: Param, pos: Param | None, types: Param | None, enorm: Param | None,
           out: str | None = None) -> str:
    net, tok, h, e = md.net, md.tok, md.net.d_model, g.esz
    ids = g.tensor("tokens", tok, 4, cls="input", whole_step=True)
    if md.training:
        md.targets = g.tensor("targets", tok, 4, cls="input", whole_step=True)
    x = out or g.tensor("embed.out", tok * h)
    reads = (ids, g.view(emb.w, "embed.tokens.rows", 0, min(tok, net.vocab) * h * e))
    if pos is not None:
        reads += (g.view(pos.w, "embed.positions.rows", 0, md.seq * h * e),)
    g.ew("embed", "forward", reads, (x,), tok * h, {"add": (1 if pos else 0) + (1 if types else 0)}, role="embedding")
    if enorm is not None:
        norm(Rows(g, tok), "embed.norm", "forward", x, enorm, h, net.norm, out=x)
    return x


def _embed_bwd(g: Graph, md: _Model, x: str, dx: str, emb: Param, pos: Param | None, enorm: Param | None) -> None:
    net, tok, h, e = md.net, md.tok, md.net.d_model, g.grad_esz
    assert emb.g is not None
    if enorm is not None:
        norm_bwd(Rows(g, tok), "embed.norm", x, dx, enorm, h, net.norm, into=dx)
    # embedding gradient: scatter-add of tok rows into the (dense) table gradient
    rows = g.view(emb.g, "grad.embed.tokens.rows", 0, min(tok, net.vocab) * h * e)
    g.ew("embed.bwd", "backward", (dx, rows), (rows,), tok * h, {"add": 1}, role="embedding")
    if pos is not None:
        assert pos.g is not None
        pg = g.view(pos.g, "grad.embed.positions.rows", 0, md.seq * h * e)
        g.ew("embed.positions.bwd", "backward", (dx,), (pg,), tok * h, {"add": 1}, rows=md.batch, broadcast=(pg,),
             op="reduction", role="embedding")


@dataclass
class _Outside:
    """The parameters outside the blocks."""

    emb: Param
    pos: Param | None
    types: Param | None
    enorm: Param | None
    fnorm: Param | None = None
    head: Param | None = None
    pooler: tuple[Param, Param] | None = None


def _params(g: Graph, md: _Model, embed: bool = True,
            head: bool = True) -> tuple[_Outside | None, list[tuple[str, dict[str, Param | None]]]]:
    net, h = md.net, md.net.d_model

    def p(name: str, values: int, update: bool = True) -> Param:
        return g.param(name, values, training=md.training, optimizer=md.optimizer, update=update)

    o = None
    if embed:
        o = _Outside(p("embed.tokens", net.vocab * h), p("embed.positions", net.max_positions * h)
                     if net.max_positions else None, p("embed.types", net.token_types * h) if net.token_types
                     else None, p("embed.norm", net.norm_values()) if net.embedding_norm else None)
    blocks = []
    for kind, count in net.layer_kinds():
        for _ in range(count):
            with g.at(len(blocks), kind):
                blocks.append((kind, _block_params(g, md, kind)))
    if not head:
        return o, blocks
    if o is None:  # a last pipeline stage: the head's own table (a copy of a tied embedding)
        o = _Outside(p("head", net.vocab * h), None, None, None)
    o.fnorm = p("final.norm", net.norm_values()) if not net.embedding_norm else None
    o.head = o.emb if net.tied_embeddings or not embed else p("head", net.vocab * h)
    if net.pooler:  # the pooler gets no gradient from a language-model loss: it is not updated here
        o.pooler = (p("pooler", h * h, update=False), p("pooler.b", h, update=False))
    return o, blocks


def _head(g: Graph, md: _Model, o: _Outside, xl: str, dout: str | None = None) -> str:
    """Final norm, the vocabulary product and the pooler: the final norm's output (training:
    the gradient into the last layer, written to ``dout`` when given)."""
    net, r, h = md.net, Rows(g, md.tok), md.net.d_model
    rs = Rows(g, md.sp_tok)
    assert o.head is not None
    nf_s = norm(rs, "final.norm", "forward", xl, o.fnorm, h, net.norm) if o.fnorm else xl
    nf = _gather(g, md, "final.norm.out.gathered", nf_s)
    logits = g.tensor("logits", md.tok * net.vocab)
    g.gemm("head.fwd", "forward", nf, o.head.w, logits, md.tok, net.vocab, h, trans=(False, True), role="linear")
    if o.pooler is not None:  # BERT's pooler reads the first token of each sequence
        w, b = o.pooler
        pooled = g.tensor("pooler.out", md.batch * h)
        g.gemm("pooler.fwd", "forward", g.view(nf, "pooler.in", 0, md.batch * h * g.esz), w.w, pooled, md.batch, h, h,
               trans=(False, True), role="linear")
        g.ew("pooler.tanh", "forward", (pooled, b.w), (pooled,), md.batch * h, {"add": 1, "tanh": 1}, rows=md.batch,
             broadcast=(b.w,), role="activation")
    if md.training:
        if md.targets is None:  # a last pipeline stage reads the targets itself
            md.targets = g.tensor("targets", md.tok, 4, cls="input", whole_step=True)
        g.ew("loss.softmax+grad", "backward", (logits, md.targets), (logits,), md.tok * net.vocab,
             plus(SOFTMAX_FWD, {"add": 1}), rows=md.tok, op="softmax", role="loss")
        dnf = _scatter(g, md, "final.norm.out.d.scattered", linear_bwd(r, "head", nf, logits, o.head, None, h,
                                                                       net.vocab))
        return norm_bwd(rs, "final.norm", xl, dnf, o.fnorm, h, net.norm, into=dout) if o.fnorm else dnf
    return nf


def declare_transformer(g: Graph, net: Network, batch: int, seq: int, *, training: bool, optimizer: str,
                        phase: str = "train", context: int = 0, weights: str | None = None,
                        kv_dtype: str | None = None, embed: bool = True, head: bool = True,
                        split: SeqSplit = NO_SPLIT, cache_length: int = 0, cache_read: str = "filled") -> None:
    """Declare the step of a transformer on ``batch`` sequences of ``seq`` tokens into ``g``.

    ``phase`` decode: ``seq`` is 1, the new token, against ``context`` cached tokens;
    prefill: ``seq`` = ``context``, the prompt, whose keys and values fill the cache.
    ``embed`` / ``head`` false: a pipeline stage without the embedding / the head.
    ``split``: this device holds ``seq`` / cp tokens of each sequence (:class:`SeqSplit`).
    ``cache_length`` (decode): the tokens each sequence's cache is allocated for (0: context + 1);
    ``cache_read``: ``filled`` (attention reads context + 1 rows) or ``allocated`` (all of them).
    """
    reach = context + 1 if phase == "decode" else seq
    if reach > (net.max_positions or reach):
        what = "context + 1" if phase == "decode" else ("context" if phase == "prefill" else "seq_len")
        raise InputError(f"{what} {reach} exceeds the {net.max_positions} learned positions",
                         field="context" if phase in ("decode", "prefill") else "seq_len")
    md = _Model(net, batch, seq // split.cp, training, optimizer, phase=phase, context=context, weights=weights,
                kv_dtype=kv_dtype, split=split, cache_length=cache_length, cache_read=cache_read)
    if phase == "prefill" and split.cp > 1:  # the prompt this device holds, and caches
        md.context = md.seq
    o, blocks = _params(g, md, embed, head)
    # A pipeline stage's boundary: the activation its layers start from and the gradient its
    # last layer's backward starts from, whole-step tensors that the stage before and after
    # send, or that its own embedding and head write; declared alike in every stage, so the
    # layers of every stage sit at the same addresses (memwall.simulation.reuse).
    stage_in = stage_out = None
    if not (embed and head):
        g.stage = True
        stage_in = g.tensor("stage.in", md.sp_tok * net.d_model, cls=None if embed else "input", whole_step=True)
        if training and (not head or (o is not None and o.fnorm is not None)):
            stage_out = g.tensor("stage.dout", md.sp_tok * net.d_model, cls=None if head else "input",
                                 whole_step=True)
    if embed:
        assert o is not None
        x0 = _embed(g, md, o.emb, o.pos, o.types, o.enorm, out=stage_in if md.split.sp == 1 else None)
        x = stage_in if stage_in is not None else _scatter(g, md, "embed.out.scattered", x0)
    else:  # the activation the stage before sends
        assert stage_in is not None
        x0 = x = stage_in
    saved = []
    for i, (kind, p) in enumerate(blocks):
        with g.at(i, kind, i):
            x, sv = _block(g, md, kind, x, p)
        g.blocks.append(x)
        saved.append(sv)
    if head:
        assert o is not None
        dx = _head(g, md, o, x, stage_out)
    elif training:  # the gradient the stage after sends back
        assert stage_out is not None
        dx = stage_out
    if not training:
        return
    for i in reversed(range(len(blocks))):
        kind, p = blocks[i]
        with g.at(i, kind, i):
            dx = _block_bwd(g, md, kind, saved[i], p, dx)
    if embed:
        assert o is not None
        _embed_bwd(g, md, x0, _gather(g, md, "embed.out.d.gathered", dx), o.emb, o.pos, o.enorm)
    g.updates(optimizer)
