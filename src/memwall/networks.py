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

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError

KINDS = ("mlp", "conv", "transformer", "moe-transformer")
DTYPES = ("fp32", "bf16")
STATUSES = ("primary", "secondary", "estimate", "synthetic")
ACTIVATIONS = ("sigmoid", "tanh", "relu", "identity", "gelu", "swiglu")
TOP_KEYS = {"id", "name", "kind", "year", "source", "status", "dtype", "notes", "mlp", "conv", "transformer"}


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


# ---- strict loading ----------------------------------------------------------------------
class _Table:
    """A TOML table read strictly: every key must be taken, with the right type."""

    def __init__(self, raw: Any, path: str, file: str) -> None:
        if not isinstance(raw, dict):
            raise InputError("must be a table", file=file, field=path or None)
        self.raw, self.path, self.file, self.taken = raw, path, file, set()

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def err(self, key: str, reason: str) -> InputError:
        return InputError(reason, file=self.file, field=self._field(key))

    def get(self, key: str, typ: type | tuple[type, ...], default: Any = ..., *, choices: tuple = ()) -> Any:
        self.taken.add(key)
        if key not in self.raw:
            if default is ...:
                raise self.err(key, "missing")
            return default
        v = self.raw[key]
        types = typ if isinstance(typ, tuple) else (typ,)
        if isinstance(v, bool) and bool not in types:
            raise self.err(key, f"must be {' or '.join(t.__name__ for t in types)}, got a boolean")
        if not isinstance(v, types):
            raise self.err(key, f"must be {' or '.join(t.__name__ for t in types)}, got {type(v).__name__}")
        if choices and v not in choices:
            raise self.err(key, f"must be one of {', '.join(map(str, choices))}, got {v!r}")
        return v

    def pos(self, key: str, default: Any = ..., *, zero: bool = False) -> int:
        v = self.get(key, int, default)
        if v is not None and (v < 0 or (v == 0 and not zero)):
            raise self.err(key, f"must be a {'non-negative' if zero else 'positive'} integer, got {v}")
        return v

    def ints(self, key: str, default: Any = ...) -> tuple[int, ...]:
        v = self.get(key, list, default)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
            raise self.err(key, "must be a list of positive integers")
        return tuple(v)

    def sub(self, key: str, required: bool = True) -> _Table | None:
        self.taken.add(key)
        if key not in self.raw:
            if required:
                raise self.err(key, "missing table")
            return None
        return _Table(self.raw[key], self._field(key), self.file)

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.taken)
        if unknown:
            raise self.err(unknown[0], f"unknown key (known here: {', '.join(sorted(self.taken))})")


def _load_mlp(t: _Table) -> dict[str, Any]:
    layers = t.ints("layers")
    if len(layers) < 2:
        raise t.err("layers", "needs at least an input and an output width")
    out = {
        "layers": layers,
        "bias": t.get("bias", bool),
        "bias_convention": t.get("bias_convention", str, ""),
        "activation": t.get("activation", str, choices=("sigmoid", "tanh", "relu", "identity")),
        "loss": t.get("loss", str, "mse", choices=("mse", "none")),
    }
    t.done()
    return out


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _load_conv(t: _Table) -> dict[str, Any]:
    shape = t.ints("input")
    if len(shape) != 3:
        raise t.err("input", "must be [channels, height, width]")
    layers: list[ConvLayer] = []
    c, hgt, wid = shape
    resnet = t.sub("resnet", required=False)
    raw_layers = t.get("layer", list, [])
    if resnet and raw_layers:
        raise t.err("layer", "give either [[conv.layer]] tables or [conv.resnet], not both")
    if resnet:
        layers = _expand_resnet(resnet, shape)
    else:
        if not raw_layers:
            raise t.err("layer", "needs [[conv.layer]] tables or [conv.resnet]")
        for i, raw in enumerate(raw_layers):
            lt = _Table(raw, f"{t.path}.layer[{i}]", t.file)
            typ = lt.get("type", str, choices=("conv", "fc"))
            name = lt.get("name", str, f"L{i + 1}")
            out_ch = lt.pos("out")
            bias = lt.get("bias", str, "shared", choices=("none", "shared", "unshared"))
            act = lt.get("activation", str, "tanh", choices=ACTIVATIONS[:4])
            if typ == "conv":
                k, s, p = lt.pos("kernel"), lt.pos("stride", 1), lt.pos("pad", 0, zero=True)
                conn = lt.pos("connected", c)
                if conn > c:
                    raise lt.err("connected", f"cannot exceed the {c} input channels")
                oh, ow = _conv_out(hgt, k, s, p), _conv_out(wid, k, s, p)
                if oh <= 0 or ow <= 0:
                    raise lt.err("kernel", "leaves no output pixels")
                layers.append(ConvLayer(name, "conv", c, out_ch, k, s, p, (hgt, wid), (oh, ow), conn, bias, False, act, i - 1))
                c, hgt, wid = out_ch, oh, ow
            else:
                inputs = c * hgt * wid
                layers.append(ConvLayer(name, "fc", inputs, out_ch, 1, 1, 0, (1, 1), (1, 1), inputs, bias, False, act, i - 1))
                c, hgt, wid = out_ch, 1, 1
            lt.done()
    t.done()
    return {"input_shape": shape, "conv_layers": tuple(layers)}


def _expand_resnet(t: _Table, shape: tuple[int, ...]) -> list[ConvLayer]:
    """torchvision's ResNet v1.5 bottleneck net: stride on the 3x3 conv, projection shortcuts."""
    stem = t.pos("stem_channels")
    classes = t.pos("classes")
    stages = t.get("stages", list)
    t.done()
    c, hw = shape[0], shape[1]
    out: list[ConvLayer] = []

    def conv(name: str, cin: int, cout: int, k: int, s: int, hw_in: int, src: int, act: str = "relu",
             residual: int | None = None) -> int:
        p = k // 2
        ho = _conv_out(hw_in, k, s, p)
        out.append(ConvLayer(name, "conv", cin, cout, k, s, p, (hw_in, hw_in), (ho, ho), cin, "none", True, act, src, residual))
        return ho

    hw = conv("conv1", c, stem, 7, 2, hw, -1)
    hw = _conv_out(hw, 3, 2, 1)  # the 3x3/2 max-pool: the step inserts it where sizes change
    c = stem
    for si, st in enumerate(stages):
        if not (isinstance(st, list) and len(st) == 4 and all(isinstance(x, int) for x in st)):
            raise InputError("each stage is [blocks, width, out_channels, stride]", file=t.file, field=f"{t.path}.stages[{si}]")
        blocks, width, cout, stride = st
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
    out.append(ConvLayer("fc", "fc", c, classes, 1, 1, 0, (1, 1), (1, 1), c, "shared", False, "identity", len(out) - 1))
    return out


def _load_transformer(t: _Table, kind: str) -> dict[str, Any]:
    d: dict[str, Any] = {
        "n_layers": t.pos("layers"),
        "d_model": t.pos("d_model"),
        "heads": t.pos("heads"),
        "vocab": t.pos("vocab"),
        "seq_len": t.pos("seq_len"),
        "d_ff": t.pos("d_ff"),
        "mlp": t.get("mlp", str, "gelu", choices=("gelu", "swiglu")),
        "norm": t.get("norm", str, "layernorm", choices=("layernorm", "rmsnorm")),
        "attention": t.get("attention", str, "materialized", choices=("materialized", "flash")),
        "dropout": t.get("dropout", bool, False),
        "causal": t.get("causal", bool, True),
        "tied_embeddings": t.get("tied_embeddings", bool, False),
        "linear_bias": t.get("linear_bias", bool, False),
        "positions": t.get("positions", str, "learned", choices=("learned", "rope")),
        "token_types": t.pos("token_types", 0, zero=True),
        "embedding_norm": t.get("embedding_norm", bool, False),
        "pooler": t.get("pooler", bool, False),
    }
    d["kv_heads"] = t.pos("kv_heads", d["heads"])
    d["d_head"] = t.pos("d_head", d["d_model"] // d["heads"])
    if d["heads"] % d["kv_heads"]:
        raise t.err("kv_heads", f"must divide heads ({d['heads']})")
    d["max_positions"] = t.pos("max_positions", d["seq_len"]) if d["positions"] == "learned" else 0
    if d["positions"] == "rope" and "max_positions" in t.raw:
        raise t.err("max_positions", "only learned position embeddings have a table")
    moe = t.sub("moe", required=False)
    if moe:
        spec = MoESpec(moe.pos("routed_experts"), moe.pos("shared_experts", 0, zero=True), moe.pos("active_experts"),
                       moe.pos("expert_d_ff"), moe.pos("dense_layers", 0, zero=True))
        moe.done()
        if spec.active_experts > spec.routed_experts:
            raise moe.err("active_experts", "cannot exceed routed_experts")
        if spec.dense_layers > d["n_layers"]:
            raise moe.err("dense_layers", "cannot exceed the layer count")
        d["moe"] = spec
    if (kind == "moe-transformer") != bool(moe):
        raise t.err("moe", "kind 'moe-transformer' needs a [transformer.moe] table, and only it")
    mla = t.sub("mla", required=False)
    if mla:
        d["mla"] = MLASpec(mla.pos("q_lora_rank"), mla.pos("kv_lora_rank"), mla.pos("qk_nope_head_dim"),
                           mla.pos("qk_rope_head_dim"), mla.pos("v_head_dim"))
        mla.done()
    t.done()
    return d


def load_network(id_or_path: str | Path) -> Network:
    """A shipped preset by id, or a preset file by path."""
    path = Path(id_or_path)
    if not (path.suffix == ".toml" and path.exists()):
        from .data import data_files

        found = {p.stem: p for p in data_files("networks")}
        if str(id_or_path) not in found:
            raise InputError(f"unknown network {str(id_or_path)!r}; known: {', '.join(sorted(found))}")
        path = found[str(id_or_path)]
    file = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"not valid TOML: {err}", file=file) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=file) from None
    t = _Table(raw, "", file)
    kind = t.get("kind", str, choices=KINDS)
    d: dict[str, Any] = {
        "id": t.get("id", str),
        "name": t.get("name", str),
        "kind": kind,
        "year": t.pos("year"),
        "source": t.get("source", str),
        "status": t.get("status", str, choices=STATUSES),
        "dtype": t.get("dtype", str, "fp32", choices=DTYPES),
        "notes": t.get("notes", str, ""),
        "file": file,
    }
    if not d["id"] or d["id"] != d["id"].lower() or not all(ch.isalnum() or ch == "-" for ch in d["id"]):
        raise t.err("id", f"must be lowercase kebab-case, got {d['id']!r}")
    if path.parent.name == "networks" and path.stem != d["id"] and Path(file).is_relative_to(_shipped_dir()):
        raise t.err("id", f"must match the file name {path.stem!r}")
    section = {"mlp": "mlp", "conv": "conv"}.get(kind, "transformer")
    for other in ("mlp", "conv", "transformer"):
        if other != section and other in raw:
            raise t.err(other, f"a {kind} network has no [{other}] table")
    sub = t.sub(section)
    assert sub is not None
    if kind == "mlp":
        d.update(_load_mlp(sub))
    elif kind == "conv":
        d.update(_load_conv(sub))
    else:
        d.update(_load_transformer(sub, kind))
    t.done()
    return Network(**d)


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
    "all_networks",
    "ceil_div",
    "load_network",
    "network_ids",
]
