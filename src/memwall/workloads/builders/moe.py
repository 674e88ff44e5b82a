"""Mixture of experts, declared: router, dispatch, routed and shared experts, combine.

Owns: :func:`moe` and :func:`moe_bwd`, the MLP half of an MoE block. Routing is
perfectly balanced: the routed experts of a layer are one set of kernels on the busiest
expert's rows (exact when they divide), declared with ``repeat`` = experts; the shared
experts are one FFN as wide as all of them.
"""

from __future__ import annotations

from ...networks import Network
from ..graph import Param
from ..ops import SOFTMAX_BWD, SOFTMAX_FWD
from .layers import FFN, Rows, ffn, ffn_bwd, ffn_parts, linear_bwd


def moe(r: Rows, net: Network, x: str, p: dict[str, Param | None]) -> tuple[str, dict]:
    """Forward from the normed input ``x``: the output and the saved record."""
    g, m, h, tok = r.g, net.moe, net.d_model, r.n
    assert m is not None and p["router"] is not None and p["experts"] is not None
    logits = g.tensor("moe.router.logits", tok * m.routed_experts)
    g.gemm("moe.router", "forward", x, p["router"].w, logits, tok, m.routed_experts, h, trans=(False, True),
           role="router")
    gates = g.tensor("moe.gates", tok * m.active_experts)
    g.ew("moe.route", "forward", (logits,), (gates,), tok * m.routed_experts, SOFTMAX_FWD, rows=tok, op="softmax",
         role="router")
    routed = tok * m.active_experts
    xe = g.tensor("moe.dispatched", routed * h)
    g.ew("moe.dispatch", "forward", (x,), (xe,), routed * h, {}, role="dispatch")
    # the first expert's kernels stand for all of them; with fewer routed tokens than
    # experts (decoding a small batch) only as many experts as tokens receive one
    rows = Rows(g, -(-routed // m.routed_experts), min(m.routed_experts, routed))
    per = sum(i * o for _, i, o in net.mlp_matrices(m.expert_d_ff))
    one = g.part(p["experts"], 0, 0, per)
    xe0 = g.view(xe, "moe.dispatched[0]", 0, rows.n * h * g.esz)
    ye0, expert = ffn(rows, "expert", "forward", xe0, ffn_parts(g, one, m.expert_d_ff, h, net.mlp),
                      (None,) * len(net.mlp_matrices(m.expert_d_ff)), m.expert_d_ff, h, net.mlp)
    ye = g.tensor("moe.expert.out", routed * h)
    g.ew("moe.expert.gather", "forward", (ye0,), (ye,), routed * h, {}, role="dispatch")
    out = g.tensor("moe.out", tok * h)
    sv: dict = {"gates": gates, "expert": expert}
    reads = (ye, gates)
    if p["shared"] is not None:
        ff = m.expert_d_ff * m.shared_experts
        parts = ffn_parts(g, p["shared"], ff, h, net.mlp)
        ys, sv["shared"] = ffn(r, "shared", "forward", x, parts, (None,) * len(parts), ff, h, net.mlp)
        reads = (ye, gates, ys)
    g.ew("moe.combine", "forward", reads, (out,), tok * h, {"fma": m.active_experts}, role="combine")
    return out, sv


def moe_bwd(r: Rows, net: Network, sv: dict, p: dict[str, Param | None], n2: str, dy: str) -> str:
    """Backward from the output's gradient: the gradient of the normed input ``n2``."""
    g, m, h, tok = r.g, net.moe, net.d_model, r.n
    assert m is not None and p["router"] is not None
    routed = tok * m.active_experts
    expert: FFN = sv["expert"]
    dye = g.tensor("moe.dexpert.out", routed * h)
    g.ew("moe.combine.bwd", "backward", (dy, sv["gates"]), (dye, sv["gates"]), tok * h, {"fma": m.active_experts},
         role="combine")
    dye0 = g.view(dye, "moe.dexpert.out[0]", 0, expert.rows.n * h * g.esz)
    dxe0 = ffn_bwd(expert, dye0, h)
    dx = g.tensor("moe.dx", tok * h)
    g.ew("moe.dispatch.bwd", "backward", (dxe0,), (dx,), routed * h, {"add": 1}, role="dispatch")
    if "shared" in sv:
        dxs = ffn_bwd(sv["shared"], dy, h)
        g.ew("moe.shared.dx.accumulate", "backward", (dx, dxs), (dx,), tok * h, {"add": 1}, role="accumulate")
    dr = g.tensor("moe.router.dlogits", tok * m.routed_experts)
    g.ew("moe.route.bwd", "backward", (sv["gates"],), (dr,), tok * m.routed_experts, SOFTMAX_BWD, rows=tok,
         op="softmax", role="router")
    dxr = linear_bwd(r, "moe.router", n2, dr, p["router"], None, h, m.routed_experts)
    g.ew("moe.router.dx.accumulate", "backward", (dx, dxr), (dx,), tok * h, {"add": 1}, role="accumulate")
    return dx
