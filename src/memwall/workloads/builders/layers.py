"""The pieces every transformer block is made of, declared once: linear, norm, FFN.

Owns: :class:`Rows` (the graph and the row count a piece works on), :func:`linear` and
:func:`linear_bwd` (a product with its optional bias, and its two backward products),
:func:`norm` and :func:`norm_bwd` (LayerNorm or RMSNorm over rows), :func:`ffn` and
:func:`ffn_bwd` (a GeLU or SwiGLU MLP on any number of rows: a dense MLP, a shared
expert, one routed expert standing for ``repeat`` of them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph, Param
from ..ops import ACT_BWD, ACT_FWD, NORM_BWD, NORM_FWD, plus


@dataclass(frozen=True)
class Rows:
    """A graph and the rows (tokens) the next pieces work on; ``repeat`` runs stand for many."""

    g: Graph
    n: int
    repeat: int = 1


def linear(r: Rows, name: str, phase: str, x: str, w: Param, b: Param | None, n_in: int, n_out: int) -> str:
    """``y = x . W^T (+ b)``: weights are stored [out x in], so the product reads them transposed."""
    g = r.g
    y = g.tensor(f"{name}.out", r.n * n_out)
    g.gemm(f"{name}.fwd", phase, x, w.w, y, r.n, n_out, n_in, trans=(False, True), repeat=r.repeat, role="linear",
           stored=w.stored)
    if b is not None:
        g.ew(f"{name}.bias", phase, (y, b.w), (y,), r.n * n_out, {"add": 1}, rows=r.n, broadcast=(b.w,),
             repeat=r.repeat, role="bias")
    return y


def linear_bwd(r: Rows, name: str, x: str, dy: str, w: Param, b: Param | None, n_in: int, n_out: int) -> str:
    """Bias reduction, ``dW = dY^T . X`` and ``dX = dY . W``; returns dX."""
    g = r.g
    assert w.g is not None
    if b is not None:
        assert b.g is not None
        g.ew(f"{name}.bias.bwd", "backward", (dy,), (b.g,), r.n * n_out, {"add": 1}, rows=r.n, broadcast=(b.g,),
             op="reduction", repeat=r.repeat, role="bias")
    g.gemm(f"{name}.dW", "backward", dy, x, w.g, n_out, n_in, r.n, trans=(True, False), repeat=r.repeat, role="linear")
    dx = g.tensor(f"{name}.dx", r.n * n_in)
    g.gemm(f"{name}.dX", "backward", dy, w.w, dx, r.n, n_in, n_out, repeat=r.repeat, role="linear")
    return dx


def norm(r: Rows, name: str, phase: str, x: str, gain: Param, width: int, kind: str, out: str | None = None) -> str:
    """A norm over ``width`` columns of each row, into a new tensor or in place (``out``)."""
    y = out or r.g.tensor(f"{name}.out", r.n * width)
    r.g.ew(name, phase, (x, gain.w), (y,), r.n * width, NORM_FWD[kind], rows=r.n, broadcast=(gain.w,),
           extra={"sqrt": r.n, "div": r.n}, role="norm")
    return y


def norm_bwd(r: Rows, name: str, x: str, dy: str, gain: Param, width: int, kind: str, *, into: str | None = None,
             reads_into: bool = False, add: bool = False, keep: str | None = None) -> str:
    """Gradient through a norm, written to ``into`` (added to it when ``add``) or a new tensor.
    ``keep``: the norm's saved output shard, which sequence parallelism's backward re-gathers
    (read here: the gather reads it on this device, just before)."""
    assert gain.g is not None
    out = into or r.g.tensor(f"{name}.dx", r.n * width)
    reads = (dy, x, gain.w) + ((out,) if reads_into else ()) + ((keep,) if keep else ())
    r.g.ew(f"{name}.bwd", "backward", reads, (out, gain.g), r.n * width, plus(NORM_BWD[kind], {"add": 1} if add else {}),
           rows=r.n, broadcast=(gain.w, gain.g), role="norm")
    return out


@dataclass(frozen=True)
class FFN:
    """What an FFN's backward needs: its input, weights and the hidden tensors it saved."""

    name: str
    rows: Rows
    x: str
    ws: tuple[Param, ...]
    bs: tuple[Param | None, ...]
    ff: int
    hidden: tuple[str, ...]  # swiglu: gate, up, product; gelu: fc1 output, activation


def ffn(r: Rows, name: str, phase: str, x: str, ws: tuple[Param, ...], bs: tuple[Param | None, ...], ff: int,
        d_model: int, mlp: str) -> tuple[str, FFN]:
    """A SwiGLU (gate, up, down) or GeLU (fc1, fc2) MLP of width ``ff`` on ``r.n`` rows."""
    g, h = r.g, d_model
    if mlp == "swiglu":
        gt = linear(r, f"{name}.gate", phase, x, ws[0], bs[0], h, ff)
        u = linear(r, f"{name}.up", phase, x, ws[1], bs[1], h, ff)
        hid = g.tensor(f"{name}.hidden", r.n * ff)
        g.ew(f"{name}.swiglu", phase, (gt, u), (hid,), r.n * ff, {"exp": 1, "add": 1, "div": 1, "mul": 2},
             repeat=r.repeat, role="activation")
        y = linear(r, f"{name}.down", phase, hid, ws[2], bs[2], ff, h)
        return y, FFN(name, r, x, ws, bs, ff, (gt, u, hid))
    h1 = linear(r, f"{name}.fc1", phase, x, ws[0], bs[0], h, ff)
    h2 = g.tensor(f"{name}.gelu", r.n * ff)
    g.ew(f"{name}.gelu", phase, (h1,), (h2,), r.n * ff, ACT_FWD["gelu"], repeat=r.repeat, role="activation")
    y = linear(r, f"{name}.fc2", phase, h2, ws[1], bs[1], ff, h)
    return y, FFN(name, r, x, ws, bs, ff, (h1, h2))


def ffn_bwd(f: FFN, dy: str, d_model: int) -> str:
    """The FFN's backward from the gradient of its output; returns the gradient of its input."""
    r, g, h, name, ff, ws, bs = f.rows, f.rows.g, d_model, f.name, f.ff, f.ws, f.bs
    if len(f.hidden) == 3:
        gt, u, hid = f.hidden
        dhid = linear_bwd(r, f"{name}.down", hid, dy, ws[2], bs[2], ff, h)
        dg = g.tensor(f"{name}.dgate", r.n * ff)
        du = g.tensor(f"{name}.dup", r.n * ff)
        g.ew(f"{name}.swiglu.bwd", "backward", (dhid, gt, u), (dg, du), r.n * ff,
             {"exp": 1, "add": 2, "div": 1, "mul": 5}, repeat=r.repeat, role="activation")
        dx = linear_bwd(r, f"{name}.gate", f.x, dg, ws[0], bs[0], h, ff)
        dx2 = linear_bwd(r, f"{name}.up", f.x, du, ws[1], bs[1], h, ff)
        g.ew(f"{name}.dx.accumulate", "backward", (dx, dx2), (dx,), r.n * h, {"add": 1}, repeat=r.repeat,
             role="accumulate")
        return dx
    h1, h2 = f.hidden
    dh2 = linear_bwd(r, f"{name}.fc2", h2, dy, ws[1], bs[1], ff, h)
    g.ew(f"{name}.gelu.bwd", "backward", (dh2, h1), (dh2,), r.n * ff, ACT_BWD["gelu"], repeat=r.repeat,
         role="activation")
    return linear_bwd(r, f"{name}.fc1", f.x, dh2, ws[0], bs[0], h, ff)


def ffn_parts(g: Graph, w: Param, ff: int, d_model: int, mlp: str) -> tuple[Param, ...]:
    """The matrices of an FFN stored back to back in one parameter tensor."""
    n = 3 if mlp == "swiglu" else 2
    return tuple(g.part(w, i, i * d_model * ff, d_model * ff) for i in range(n))
