"""Network presets: the strict loader of era_data/networks/*.toml and the shapes they describe.

Owns: :class:`Network` (and its parts :class:`ConvLayer`, :class:`MoESpec`,
:class:`MLASpec`), parameter and connection counts, :func:`load_network`,
:func:`all_networks` and :func:`network_ids`.

A preset file has top-level ``id, name, kind, year, source, status, dtype, notes`` and
one table for its kind:

* ``[mlp]`` ``layers = [203, 80, 26]``, ``bias``, ``bias_convention``, ``activation``
  (``sigmoid | tanh | relu | identity``), ``loss`` (``mse``, or ``none`` when the output
  gradient is supplied, as for the synthetic ``affine-48x1024``).
* ``[conv]`` ``input = [channels, height, width]`` and either ``[[conv.layer]]`` tables
  (``type = "conv" | "fc"``) or ``[conv.resnet]`` (bottleneck stages, expanded here).
  Convolutions become GEMMs in the step (M = batch x output pixels, N = output
  channels, K = connected input channels x kernel area), so local and partial
  connections are counted as the paper did, and shared weights once.
* ``[transformer]`` (kinds ``transformer`` and ``moe-transformer``) with optional
  ``[transformer.moe]`` and ``[transformer.mla]``.

Counts: ``parameters`` are trained values (biases and norm gains included; buffers such
as BatchNorm running statistics are not). ``connections`` is what CUPS counts: the
connections one example's forward pass uses, each of which the example's backward pass
updates - weights including bias links for MLPs, local connections for convolutional
nets (LeCun 1989: 64,660 connections over 9,760 free parameters), and for sequence
models the active parameters of the matrices used per token (embedding lookups are not
multiply-adds and are left out).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .schema import Field, Problems, Table, read_toml, walk
from .vocabulary import ATTENTIONS, check_word

KINDS = ("mlp", "conv", "transformer", "moe-transformer")
DTYPES = ("fp32", "bf16")
STATUSES = ("primary", "secondary", "estimate", "synthetic")
ACTIVATIONS = ("sigmoid", "tanh", "relu", "identity", "gelu", "swiglu")


@dataclass(frozen=True)
class ConvLayer:
    """One layer of a convolutional net as a GEMM-shaped operation (``fc`` is a 1x1 map)."""

    name: str
    type: str  # conv | fc
    in_channels: int
    out_channels: int
    kernel: int
    stride: int
    pad: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    connected: int  # input channels each output channel sees (LeCun's H2 sees 8 of 12)
    bias: str  # none | shared (one per map) | unshared (one per unit)
    batchnorm: bool
    activation: str
    source: int  # index of the layer whose output this one reads (-1: the network input)
    residual: int | None = None  # after this layer, add the output of layer `residual` (-1: block input)

    @property
    def out_units(self) -> int:
        return self.out_channels * self.out_hw[0] * self.out_hw[1]

    @property
    def in_units(self) -> int:
        return self.in_channels * self.in_hw[0] * self.in_hw[1]

    @property
    def gemm_k(self) -> int:
        return self.connected * self.kernel * self.kernel

    @property
    def pixels(self) -> int:
        return self.out_hw[0] * self.out_hw[1]

    @property
    def weight_values(self) -> int:
        return self.out_channels * self.gemm_k

    @property
    def bias_values(self) -> int:
        return {"none": 0, "shared": self.out_channels, "unshared": self.out_units}[self.bias]

    @property
    def bn_values(self) -> int:
        return 2 * self.out_channels if self.batchnorm else 0

    @property
    def connections(self) -> int:
        return self.out_units * self.gemm_k + (self.out_units if self.bias != "none" else 0)


@dataclass(frozen=True)
class MoESpec:
    routed_experts: int
    shared_experts: int
    active_experts: int  # routed experts per token
    expert_d_ff: int
    dense_layers: int  # the first layers keep a dense MLP


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek's multi-head latent attention (training form: per-head K and V are materialised)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Network:
    """A network preset: identity, provenance and the shape its kind needs."""

    id: str
    name: str
    kind: str
    source: str
    year: int
    status: str
    dtype: str
    notes: str = ""
    file: str = ""
    # mlp
    layers: tuple[int, ...] = ()
    bias: bool = False
    bias_convention: str = ""
    activation: str = "identity"
    loss: str = "mse"
    # conv
    input_shape: tuple[int, ...] = ()
    conv_layers: tuple[ConvLayer, ...] = ()
    # transformer
    n_layers: int = 0
    d_model: int = 0
    heads: int = 0
    kv_heads: int = 0
    d_head: int = 0
    d_ff: int = 0
    vocab: int = 0
    seq_len: int | None = None
    mlp: str = "gelu"  # gelu | swiglu
    norm: str = "layernorm"  # layernorm | rmsnorm
    attention: str = "materialized"  # materialized (scores kept) | flash (fused, scores recomputed)
    dropout: bool = False
    causal: bool = True
    tied_embeddings: bool = False
    linear_bias: bool = False
    positions: str = "learned"  # learned | rope
    max_positions: int = 0
    token_types: int = 0
    embedding_norm: bool = False
    pooler: bool = False
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    _counts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    # ---- counts -------------------------------------------------------------------------
    @property
    def parameters(self) -> int:
        return self._count()["parameters"]

    @property
    def connections(self) -> int:
        return self._count()["connections"]

    @property
    def active_parameters(self) -> int:
        return self._count()["active"]

    @property
    def is_sequence(self) -> bool:
        return self.kind in ("transformer", "moe-transformer")

    def _count(self) -> dict[str, int]:
        if not self._counts:
            self._counts.update(_counts(self))
        return self._counts

    # transformer pieces used by the step and the counts
    def norm_values(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.d_model

    def attention_matrices(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of each attention weight matrix of one layer."""
        h = self.d_model
        if self.mla:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            return [
                ("wq_down", h, m.q_lora_rank),
                ("wq_up", m.q_lora_rank, self.heads * qk),
                ("wkv_down", h, m.kv_lora_rank + m.qk_rope_head_dim),
                ("wkv_up", m.kv_lora_rank, self.heads * (m.qk_nope_head_dim + m.v_head_dim)),
                ("wo", self.heads * m.v_head_dim, h),
            ]
        qkv = (self.heads + 2 * self.kv_heads) * self.d_head
        return [("wqkv", h, qkv), ("wo", self.heads * self.d_head, h)]

    def mlp_matrices(self, d_ff: int) -> list[tuple[str, int, int]]:
        h = self.d_model
        if self.mlp == "swiglu":
            return [("w_gate", h, d_ff), ("w_up", h, d_ff), ("w_down", d_ff, h)]
        return [("w_fc1", h, d_ff), ("w_fc2", d_ff, h)]

    def layer_kinds(self) -> list[tuple[str, int]]:
        """Groups of identical layers, in order: ("dense", n) and, for MoE, ("moe", n)."""
        if self.moe:
            return [("dense", self.moe.dense_layers), ("moe", self.n_layers - self.moe.dense_layers)]
        return [("dense", self.n_layers)]

    def qk_dim(self) -> int:
        return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim if self.mla else self.d_head

    def v_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else self.d_head

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "year": self.year,
            "status": self.status,
            "dtype": self.dtype,
            "source": self.source,
            "parameters": self.parameters,
            "connections": self.connections,
        }
        if self.kind == "moe-transformer":
            out["active_parameters"] = self.active_parameters
        if self.kind == "mlp":
            out.update(layers=list(self.layers), bias=self.bias, activation=self.activation, loss=self.loss)
            if self.bias_convention:
                out["bias_convention"] = self.bias_convention
        elif self.kind == "conv":
            out["input"] = list(self.input_shape)
            out["layers"] = [
                {
                    "name": c.name,
                    "type": c.type,
                    "in": [c.in_channels, *c.in_hw],
                    "out": [c.out_channels, *c.out_hw],
                    "kernel": c.kernel,
                    "stride": c.stride,
                    "connected": c.connected,
                    "bias": c.bias,
                    "batchnorm": c.batchnorm,
                }
                for c in self.conv_layers
            ]
        else:
            out.update(
                layers=self.n_layers,
                d_model=self.d_model,
                heads=self.heads,
                kv_heads=self.kv_heads,
                d_head=self.d_head,
                d_ff=self.d_ff,
                vocab=self.vocab,
                seq_len=self.seq_len,
                mlp=self.mlp,
                norm=self.norm,
                attention=self.attention,
                dropout=self.dropout,
                tied_embeddings=self.tied_embeddings,
            )
            if self.moe:
                out["moe"] = vars(self.moe).copy()
            if self.mla:
                out["mla"] = vars(self.mla).copy()
        if self.notes:
            out["notes"] = self.notes
        return out


def _counts(n: Network) -> dict[str, int]:
    if n.kind == "mlp":
        w = sum(a * b for a, b in zip(n.layers, n.layers[1:], strict=False))
        b = sum(n.layers[1:]) if n.bias else 0
        return {"parameters": w + b, "connections": w + b, "active": w + b}
    if n.kind == "conv":
        p = sum(c.weight_values + c.bias_values + c.bn_values for c in n.conv_layers)
        conn = sum(c.connections for c in n.conv_layers)
        return {"parameters": p, "connections": conn, "active": p}
    h = n.d_model
    emb = n.vocab * h + n.max_positions * h + n.token_types * h + (n.norm_values() if n.embedding_norm else 0)
    head = 0 if n.tied_embeddings else n.vocab * h
    final_norm = 0 if n.embedding_norm else n.norm_values()  # BERT (post-LN) has no final norm
    pooler = h * h + h if n.pooler else 0

    def mats(ms: list[tuple[str, int, int]]) -> tuple[int, int]:
        w = sum(i * o for _, i, o in ms)
        b = sum(o for _, _, o in ms) if n.linear_bias else 0
        return w, b

    aw, ab = mats(n.attention_matrices())
    attn = aw + ab + (n.mla.q_lora_rank + n.mla.kv_lora_rank if n.mla else 0)
    norms = 2 * n.norm_values()
    total = emb + head + final_norm + pooler
    active = total
    conn = 0
    for kind, count in n.layer_kinds():
        if kind == "dense":
            mw, mb = mats(n.mlp_matrices(n.d_ff))
            layer = attn + norms + mw + mb
            total += count * layer
            active += count * layer
            conn += count * (aw + mw)
        else:
            m = n.moe
            assert m is not None
            ew, _ = mats(n.mlp_matrices(m.expert_d_ff))
            router = m.routed_experts * h
            layer = attn + norms + router + (m.routed_experts + m.shared_experts) * ew
            total += count * layer
            active += count * (attn + norms + router + (m.active_experts + m.shared_experts) * ew)
            conn += count * (aw + router + (m.active_experts + m.shared_experts) * ew)
    conn += n.vocab * h + (h * h if n.pooler else 0)  # the LM head's product
    return {"parameters": total, "connections": conn, "active": active}


# ---- the declaration ------------------------------------------------------------------
# Lowercase words of letters and digits joined by single hyphens or dots: a version or a
# size keeps its dot, as its authors write it (llama3.1-8b, megatron-1.2b).
_NETWORK_ID = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*")


def _kebab(value: str, context: dict[str, Any]) -> str:
    if not _NETWORK_ID.fullmatch(value):
        raise InputError(f"must be lowercase kebab-case (letters, digits, single hyphens or dots between them, as "
                         f"in llama3.1-8b), got {value!r}")
    return value


def _stages(value: list[Any], context: dict[str, Any]) -> list[list[int]]:
    for i, st in enumerate(value):
        if not (isinstance(st, list) and len(st) == 4 and all(isinstance(x, int) and not isinstance(x, bool)
                                                               and x > 0 for x in st)):
            raise InputError("each stage is [blocks, width, out_channels, stride], positive integers", field=f"[{i}]")
    return value


MLP = Table("[mlp]", (
    Field("layers", "ints", "units per layer, input first (at least an input and an output width)", required=True),
    Field("bias", "bool", "whether every non-input unit has a bias", required=True),
    Field("bias_convention", "str", "how the source counts biases", default=""),
    Field("activation", "word", "the units' activation", required=True, choices=ACTIVATIONS[:4]),
    Field("loss", "word", "mse, or none when the output gradient is supplied", choices=("mse", "none"), default="mse"),
), doc="A fully connected net.")
_CONV = ("type", ("conv",))
CONV_LAYER = Table("[[conv.layer]]", (
    Field("type", "word", "a convolution, or a fully connected layer over everything before it", required=True,
          choices=("conv", "fc")),
    Field("name", "text", "layer name", default_doc="L1, L2, ..."),
    Field("out", "int", "output channels (conv) or units (fc)", required=True, minimum=1),
    Field("bias", "word", "one bias per map (shared), per unit (unshared), or none", choices=("none", "shared",
          "unshared"), default="shared"),
    Field("activation", "word", "the units' activation", choices=ACTIVATIONS[:4], default="tanh"),
    Field("kernel", "int", "square kernel width", required=True, minimum=1, when=_CONV),
    Field("stride", "int", "stride", minimum=1, default=1, when=_CONV),
    Field("pad", "int", "zero padding on each side", minimum=0, default=0, when=_CONV),
    Field("connected", "int", "input channels each output channel sees (LeCun's H2 sees 8 of 12)", minimum=1,
          when=_CONV, default_doc="all input channels"),
), doc="One layer of a hand-described convolutional net, in order.")
RESNET = Table("[conv.resnet]", (
    Field("stem_channels", "int", "channels of the 7x7/2 stem convolution", required=True, minimum=1),
    Field("classes", "int", "outputs of the classifier", required=True, minimum=1),
    Field("stages", "list", "bottleneck stages, each [blocks, width, out_channels, stride]", required=True,
          parse=_stages),
), doc="torchvision's ResNet v1.5 bottleneck net, expanded by the loader.")
CONV = Table("[conv]", (
    Field("input", "ints", "input shape [channels, height, width]", required=True),
    Field("layer", "tables", "the layers (or give [conv.resnet])", table=CONV_LAYER),
    Field("resnet", "table", "a ResNet (or give [[conv.layer]] tables)", table=RESNET),
), doc="A convolutional net: either `[[conv.layer]]` tables or `[conv.resnet]`.")
MOE = Table("[transformer.moe]", (
    Field("routed_experts", "int", "routed experts per MoE layer", required=True, minimum=1),
    Field("shared_experts", "int", "always-active experts per MoE layer", minimum=0, default=0),
    Field("active_experts", "int", "routed experts per token (at most routed_experts)", required=True, minimum=1),
    Field("expert_d_ff", "int", "hidden width of one expert", required=True, minimum=1),
    Field("dense_layers", "int", "the first layers keep a dense MLP", minimum=0, default=0),
), doc="Mixture of experts; kind 'moe-transformer' needs it, and only it.")
MLA = Table("[transformer.mla]", (
    Field("q_lora_rank", "int", "rank of the query down-projection", required=True, minimum=1),
    Field("kv_lora_rank", "int", "rank of the key-value down-projection", required=True, minimum=1),
    Field("qk_nope_head_dim", "int", "per-head query/key width without rotary positions", required=True,
          minimum=1),
    Field("qk_rope_head_dim", "int", "per-head query/key width with rotary positions", required=True, minimum=1),
    Field("v_head_dim", "int", "per-head value width", required=True, minimum=1),
), doc="DeepSeek's multi-head latent attention (training form: per-head K and V are materialised).")
TRANSFORMER = Table("[transformer]", (
    Field("layers", "int", "transformer layers", required=True, minimum=1),
    Field("d_model", "int", "model width", required=True, minimum=1),
    Field("heads", "int", "attention heads", required=True, minimum=1),
    Field("vocab", "int", "vocabulary size", required=True, minimum=1),
    Field("seq_len", "int", "default sequence length", required=True, minimum=1),
    Field("d_ff", "int", "hidden width of the dense MLP", required=True, minimum=1),
    Field("mlp", "word", "the MLP's form", choices=("gelu", "swiglu"), default="gelu"),
    Field("norm", "word", "the normalisation", choices=("layernorm", "rmsnorm"), default="layernorm"),
    Field("attention", "word", "materialized (scores kept) or flash (fused, scores recomputed)",
          choices=ATTENTIONS, default="materialized"),
    Field("dropout", "bool", "whether dropout masks are kept", default=False),
    Field("causal", "bool", "causal attention", default=True),
    Field("tied_embeddings", "bool", "the LM head shares the embedding matrix", default=False),
    Field("linear_bias", "bool", "linear layers have biases", default=False),
    Field("positions", "word", "learned position embeddings or rotary", choices=("learned", "rope"),
          default="learned", noun="positions"),
    Field("token_types", "int", "token-type embeddings (BERT)", minimum=0, default=0),
    Field("embedding_norm", "bool", "a norm after the embeddings (BERT)", default=False),
    Field("pooler", "bool", "a pooler on the first token (BERT)", default=False),
    Field("kv_heads", "int", "key-value heads (grouped-query attention); must divide heads", minimum=1,
          default_doc="heads"),
    Field("d_head", "int", "width of one head", minimum=1, default_doc="d_model / heads"),
    Field("max_positions", "int", "rows of the learned position table", minimum=1,
          when=("positions", ("learned",)), default_doc="seq_len"),
    Field("moe", "table", "mixture of experts", table=MOE),
    Field("mla", "table", "multi-head latent attention", table=MLA),
), doc="A decoder (or encoder) transformer.")
PRESET = Table("network preset", (
    Field("id", "text", "lowercase kebab-case, a dot allowed between words (llama3.1-8b); a shipped file is named "
          "after it", required=True, parse=_kebab),
    Field("name", "text", "full name", required=True),
    Field("kind", "word", "which table describes the shape", required=True, choices=KINDS, noun="kind"),
    Field("year", "int", "year of publication", required=True, minimum=1940, maximum=2100),
    Field("source", "str", "where the shape is published", required=True),
    Field("status", "word", "how far the shape is from its source", required=True, choices=STATUSES),
    Field("dtype", "word", "the dtype it trains in", choices=DTYPES, default="fp32"),
    Field("notes", "str", "free text", default=""),
    Field("mlp", "table", "the shape of an mlp", required=True, table=MLP, when=("kind", ("mlp",))),
    Field("conv", "table", "the shape of a conv net", required=True, table=CONV, when=("kind", ("conv",))),
    Field("transformer", "table", "the shape of a transformer", required=True, table=TRANSFORMER,
          when=("kind", ("transformer", "moe-transformer"))),
), doc="A network preset: identity, provenance and one table for its kind.")


# ---- building ------------------------------------------------------------------------------
def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _mlp(v: dict[str, Any], problems: Problems) -> dict[str, Any]:
    if len(v["layers"]) < 2:
        problems.add("needs at least an input and an output width", "mlp.layers")
    return {"layers": v["layers"], "bias": v["bias"], "bias_convention": v["bias_convention"],
            "activation": v["activation"], "loss": v["loss"]}


def _conv(v: dict[str, Any], problems: Problems) -> dict[str, Any]:
    shape = v["input"]
    if len(shape) != 3:
        problems.add("must be [channels, height, width]", "conv.input")
        return {}
    if "resnet" in v and v.get("layer"):
        problems.add("give either [[conv.layer]] tables or [conv.resnet], not both", "conv.layer")
    elif "resnet" in v:
        return {"input_shape": shape, "conv_layers": tuple(_expand_resnet(v["resnet"], shape))}
    elif not v.get("layer"):
        problems.add("needs [[conv.layer]] tables or [conv.resnet]", "conv.layer")
    return {"input_shape": shape, "conv_layers": tuple(_conv_layers(v.get("layer", []), shape, problems))}


def _conv_layers(tables: Iterable[dict[str, Any]], shape: tuple[int, ...], problems: Problems) -> list[ConvLayer]:
    layers: list[ConvLayer] = []
    c, hgt, wid = shape
    for i, lt in enumerate(tables):
        where = f"conv.layer[{i}]"
        name, bias, act = lt.get("name", f"L{i + 1}"), lt["bias"], lt["activation"]
        if lt["type"] == "fc":
            inputs = c * hgt * wid
            layers.append(ConvLayer(name, "fc", inputs, lt["out"], 1, 1, 0, (1, 1), (1, 1), inputs, bias, False, act,
                                    i - 1))
            c, hgt, wid = lt["out"], 1, 1
            continue
        k, s, p, conn = lt["kernel"], lt["stride"], lt["pad"], lt.get("connected", c)
        oh, ow = _conv_out(hgt, k, s, p), _conv_out(wid, k, s, p)
        if conn > c:
            problems.add(f"cannot exceed the {c} input channels", f"{where}.connected")
        if oh <= 0 or ow <= 0:
            problems.add("leaves no output pixels", f"{where}.kernel")
            return layers
        layers.append(ConvLayer(name, "conv", c, lt["out"], k, s, p, (hgt, wid), (oh, ow), conn, bias, False, act,
                                i - 1))
        c, hgt, wid = lt["out"], oh, ow
    return layers


def _expand_resnet(t: dict[str, Any], shape: tuple[int, ...]) -> list[ConvLayer]:
    """torchvision's ResNet v1.5 bottleneck net: stride on the 3x3 conv, projection shortcuts."""
    out: list[ConvLayer] = []

    def conv(name: str, cin: int, cout: int, k: int, s: int, hw_in: int, src: int, act: str = "relu",
             residual: int | None = None) -> int:
        p = k // 2
        ho = _conv_out(hw_in, k, s, p)
        out.append(ConvLayer(name, "conv", cin, cout, k, s, p, (hw_in, hw_in), (ho, ho), cin, "none", True, act, src,
                             residual))
        return ho

    stem = t["stem_channels"]
    hw = conv("conv1", shape[0], stem, 7, 2, shape[1], -1)
    hw = _conv_out(hw, 3, 2, 1)  # the 3x3/2 max-pool: the step inserts it where sizes change
    c = stem
    for si, (blocks, width, cout, stride) in enumerate(t["stages"]):
        for b in range(blocks):
            s = stride if b == 0 else 1
            block_in = len(out) - 1
            nm = f"layer{si + 1}.{b}"
            h1 = conv(f"{nm}.conv1", c, width, 1, 1, hw, block_in)
            h2 = conv(f"{nm}.conv2", width, width, 3, s, h1, len(out) - 1)
            if b == 0:
                conv(f"{nm}.conv3", width, cout, 1, 1, h2, len(out) - 1, act="identity")
                conv(f"{nm}.downsample", c, cout, 1, s, hw, block_in, act="relu", residual=len(out) - 1)
            else:
                conv(f"{nm}.conv3", width, cout, 1, 1, h2, len(out) - 1, act="relu", residual=block_in)
            c, hw = cout, h2
    # global average pool folded into the classifier's input (2048 x 1 x 1)
    out.append(ConvLayer("fc", "fc", c, t["classes"], 1, 1, 0, (1, 1), (1, 1), c, "shared", False, "identity",
                         len(out) - 1))
    return out


def _transformer(v: dict[str, Any], kind: str, problems: Problems) -> dict[str, Any]:
    d = {("n_layers" if k == "layers" else k): x for k, x in v.items() if k not in ("moe", "mla")}
    d["kv_heads"] = v.get("kv_heads", v["heads"])
    d["d_head"] = v.get("d_head", v["d_model"] // v["heads"])
    if "d_head" not in v and v["d_model"] % v["heads"]:
        problems.add(f"d_model {v['d_model']} is not a multiple of heads {v['heads']}: the head width would be "
                     f"truncated to {d['d_head']}; give d_head to say what the network uses", "transformer.heads")
    d["max_positions"] = v.get("max_positions", v["seq_len"]) if v["positions"] == "learned" else 0
    if v["heads"] % d["kv_heads"]:
        problems.add(f"must divide heads ({v['heads']})", "transformer.kv_heads")
    if (kind == "moe-transformer") != ("moe" in v):
        problems.add("kind 'moe-transformer' needs a [transformer.moe] table, and only it", "transformer.moe")
    if "moe" in v:
        d["moe"] = MoESpec(**v["moe"])
        if d["moe"].active_experts > d["moe"].routed_experts:
            problems.add("cannot exceed routed_experts", "transformer.moe.active_experts")
        if d["moe"].dense_layers > v["layers"]:
            problems.add("cannot exceed the layer count", "transformer.moe.dense_layers")
    if "mla" in v:
        d["mla"] = MLASpec(**v["mla"])
    return d


def _shape(values: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """The Network fields of the kind's table, with the checks that span its fields."""
    kind = values["kind"]
    if kind == "mlp":
        return _mlp(values["mlp"], problems)
    if kind == "conv":
        return _conv(values["conv"], problems)
    return _transformer(values["transformer"], kind, problems)


def check_network_file(path: str | Path) -> tuple[Network | None, list[InputError]]:
    """A preset file: the network (None if invalid) and every problem in it."""
    path = Path(path)
    file = str(path)
    try:
        raw, text = read_toml(path)
    except InputError as err:
        return None, [err]
    problems = Problems(file, text)
    values = walk(raw, PRESET, problems)
    if (values.get("id") and path.parent.name == "networks" and path.stem != values["id"]
            and path.resolve().is_relative_to(_shipped_dir().resolve())):
        problems.add(f"must match the file name {path.stem!r}", "id")
    # The shape's own checks read the checked values: they run once those are all valid.
    shape = _shape(values, problems) if not problems.errors else {}
    if problems.errors:
        return None, problems.errors
    top = {k: values[k] for k in ("id", "name", "kind", "year", "source", "status", "dtype", "notes")}
    return Network(**top, file=file, **shape), []


def load_network(id_or_path: str | Path) -> Network:
    """A shipped preset by id, or a preset file by path."""
    path = Path(id_or_path)
    if not (path.suffix == ".toml" and path.exists()):
        from .data import data_files

        found = {p.stem: p for p in data_files("networks")}
        if str(id_or_path) not in found:
            raise InputError(f"unknown network {str(id_or_path)!r}; known: {', '.join(sorted(found))}")
        path = found[str(id_or_path)]
    network, errors = check_network_file(path)
    problems = Problems()
    problems.errors = errors
    problems.raise_first("; run 'memwall networks validate'")
    assert network is not None
    return network


def validate_paths(paths: Iterable[str | Path]) -> list[InputError]:
    """Every problem of every preset file, in file order (an empty list: all valid)."""
    return [err for path in paths for err in check_network_file(path)[1]]


def _shipped_dir() -> Path:
    from .data import era_data_dir

    return era_data_dir() / "networks"


def network_ids() -> list[str]:
    from .data import data_files

    return [p.stem for p in data_files("networks")]


def all_networks() -> list[Network]:
    return [load_network(i) for i in network_ids()]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = [
    "ConvLayer",
    "MLASpec",
    "MoESpec",
    "Network",
    "PRESET",
    "all_networks",
    "ceil_div",
    "check_network_file",
    "load_network",
    "network_ids",
    "validate_paths",
]


def with_attention(network: Network, attention: str | None) -> Network:
    """``network`` with its attention kernels materialised or fused (flash), as a case or
    ``--attention`` asks; unchanged when ``attention`` is None or already the network's."""
    if attention is None or attention == network.attention:
        return network
    check_word(attention, ATTENTIONS, "attention")
    if not network.is_sequence:
        raise InputError(f"network {network.id!r} has no attention to choose kernels for", field="attention")
    return dataclasses.replace(network, attention=attention)


def with_positions(network: Network, positions: int | None) -> Network:
    """``network`` with a learned position table of ``positions`` rows, as a case's
    ``max_positions`` asks (a longer sequence than the preset was trained for); unchanged
    when None or already the network's."""
    if positions is None or positions == network.max_positions:
        return network
    if not network.max_positions:
        raise InputError(f"network {network.id!r} has no learned position table to size", field="max_positions")
    return dataclasses.replace(network, max_positions=positions)
