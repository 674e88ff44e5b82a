"""MLPs and convolutional nets (LeNet, ResNet): a chain of layers, declared.

Owns: :func:`declare_chain`. Each layer is one product (a convolution as an im2col
product, with pooling of its input when sizes differ) and one fused epilogue (bias,
BatchNorm, activation, residual add); its backward is the epilogue's gradient, the bias
reduction, the weight-gradient and input-gradient products and the col2im scatter.
Every linear layer gets both backward products - also the first, whose input gradient
nobody needs (this keeps backward = 2 x forward for the affine test net). A layer is one
checkpointable block; ResNet's branches and shortcuts make the net ``branched``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...networks import Network
from ..graph import Graph, Param
from ..ops import ACT_BWD, ACT_FWD, POOL_OPS, plus


@dataclass
class _Layer:
    name: str
    rows_per_example: int  # output pixels (1 for fully connected layers)
    n: int  # output channels / units
    k: int  # GEMM depth
    in_units: int
    out_units: int
    im2col: bool
    bias: str  # none | shared | unshared
    bn: bool
    act: str
    source: int
    residual: int | None
    pool_from: int = 0  # units of the source before a pooling step, when sizes differ


def _layers(net: Network) -> list[_Layer]:
    if net.kind == "mlp":
        return [
            _Layer(f"L{i + 1}", 1, o, n_in, n_in, o, False, "shared" if net.bias else "none", False,
                   net.activation, i - 1, None)
            for i, (n_in, o) in enumerate(zip(net.layers, net.layers[1:], strict=False))
        ]
    out = []
    prev_units = [net.input_shape[0] * net.input_shape[1] * net.input_shape[2]]
    for c in net.conv_layers:
        src_units = prev_units[c.source + 1]
        im2col = c.type == "conv" and (c.kernel > 1 or c.stride > 1 or c.connected != c.in_channels)
        lay = _Layer(c.name, c.pixels, c.out_channels, c.gemm_k, c.in_units, c.out_units, im2col, c.bias,
                     c.batchnorm, c.activation, c.source, c.residual)
        if src_units != c.in_units:
            lay.pool_from = src_units
        out.append(lay)
        prev_units.append(c.out_units)
    return out


@dataclass
class _Params:
    w: Param
    bias: Param | None
    bn: Param | None


class _Chain:
    def __init__(self, g: Graph, net: Network, batch: int, training: bool, optimizer: str) -> None:
        self.g, self.net, self.b, self.train = g, net, batch, training
        self.layers = _layers(net)
        self.params = [self._params(lay, optimizer) for lay in self.layers]
        first = self.layers[0]
        self.x0 = g.tensor("x0", batch * (first.pool_from or first.in_units), cls=None if training else "input")
        self.loss_none = net.kind == "mlp" and net.loss == "none"
        needs_target = training and (net.kind != "mlp" or net.loss == "mse")  # inference has no loss
        self.target = g.tensor("target", batch * self.layers[-1].out_units, cls="input",
                               whole_step=True) if needs_target else None
        self.outs: list[str] = []
        self.pre: list[str | None] = []  # BatchNorm inputs (conv outputs)
        g.branched = any(lay.residual is not None or lay.source != i - 1 for i, lay in enumerate(self.layers))

    def _params(self, lay: _Layer, optimizer: str) -> _Params:
        def p(name: str, values: int) -> Param | None:
            return self.g.param(f"{lay.name}.{name}", values, training=self.train, optimizer=optimizer) if values else None

        w = p("w", lay.n * lay.k)
        assert w is not None
        return _Params(w, p("b", {"none": 0, "shared": lay.n, "unshared": lay.out_units}[lay.bias]),
                       p("bn", 2 * lay.n if lay.bn else 0))

    def src(self, i: int) -> str:
        s = self.layers[i].source
        return self.x0 if s < 0 else self.outs[s]

    def _gather(self, i: int, phase: str) -> str:
        """The layer's product operand: its input, pooled and unrolled (im2col) as it needs."""
        g, lay = self.g, self.layers[i]
        x = self.src(i)
        if lay.pool_from:
            xp = g.tensor(f"{lay.name}.pooled", self.b * lay.in_units)
            g.ew(f"{lay.name}.pool", phase, (x,), (xp,), self.b * lay.pool_from, POOL_OPS, op="reduction", role="pool")
            x = xp
        if lay.im2col:
            cols = g.tensor(f"{lay.name}.cols", self.b * lay.rows_per_example * lay.k)
            g.ew(f"{lay.name}.im2col", phase, (x,), (cols,), self.b * lay.rows_per_example * lay.k, {}, role="im2col")
            x = cols
        return x

    # ---- forward ----------------------------------------------------------------------------
    def forward(self, i: int) -> None:
        g, lay, p = self.g, self.layers[i], self.params[i]
        m = self.b * lay.rows_per_example
        a = self._gather(i, "forward")
        z = g.tensor(f"{lay.name}.z", m * lay.n) if lay.bn else None
        y = g.tensor(f"{lay.name}.y", m * lay.n, recompute_name=f"{lay.name}.y'")
        g.gemm(f"{lay.name}.fwd", "forward", a, p.w.w, z or y, m, lay.n, lay.k, trans=(False, True), role="linear")
        epi = plus(ACT_FWD[lay.act], {"add": 1} if p.bias else {}, {"add": 2, "mul": 3} if lay.bn else {},
                   {"add": 1} if lay.residual is not None else {})
        if epi:
            reads = [z or y] + [q.w for q in (p.bias, p.bn) if q is not None]
            if lay.residual is not None:
                r = self.layers[lay.residual].source if lay.residual < 0 else lay.residual
                reads.append(self.x0 if r < 0 else self.outs[r])
            bcast = tuple(q.w for q in (p.bias, p.bn) if q is not None and (q is not p.bias or lay.bias == "shared"))
            # batch normalisation needs the whole batch's statistics: a norm, not a product's epilogue
            g.ew(f"{lay.name}.epilogue", "forward", tuple(reads), (y,), m * lay.n, epi, rows=m, broadcast=bcast,
                 role="norm" if lay.bn else "epilogue")
        self.outs.append(y)
        self.pre.append(z)

    def loss(self) -> str:
        """The gradient of the last layer's output."""
        out = self.outs[-1]
        n = self.b * self.layers[-1].out_units
        if self.target is None:
            return self.g.tensor("d.out", n, cls="input")  # the supplied output gradient
        d_out = self.g.tensor("d.out", n)
        self.g.ew("loss.grad", "backward", (out, self.target), (d_out,), n, {"add": 1}, role="loss")
        return d_out

    # ---- backward ---------------------------------------------------------------------------
    def _epilogue_bwd(self, i: int, dy: str) -> str:
        """The gradient of the layer's product output (``dy`` itself when the epilogue is linear)."""
        g, lay, bn = self.g, self.layers[i], self.params[i].bn
        m = self.b * lay.rows_per_example
        # the supplied output gradient of a loss-less net is taken at the product's output
        y = None if (i == len(self.layers) - 1 and self.loss_none) else self.outs[i]
        bwd = plus(ACT_BWD[lay.act] if y is not None else {}, {"add": 2, "mul": 4} if lay.bn else {})
        if not (bwd or lay.bn):
            return dy
        dz = g.tensor(f"{lay.name}.dz", m * lay.n)
        reads = [dy] + ([y] if ACT_BWD[lay.act] and y is not None else [])
        writes = [dz]
        if bn is not None:
            assert bn.g is not None and self.pre[i] is not None
            reads += [self.pre[i], bn.w]
            writes.append(bn.g)
        g.ew(f"{lay.name}.epilogue.bwd", "backward", tuple(reads), tuple(writes), m * lay.n, bwd, rows=m,
             broadcast=(bn.g, bn.w) if bn is not None and bn.g is not None else (), role="norm" if lay.bn else "epilogue")
        return dz

    def _join(self, grads: list[str | None], to: int, d: str, name: str, elements: int) -> None:
        """Add gradient ``d`` into layer ``to``'s output gradient (or make it that gradient)."""
        have = grads[to]
        if have is None:
            grads[to] = d
        else:
            self.g.ew(name, "backward", (have, d), (have,), elements, {"add": 1}, role="accumulate")

    def backward(self, i: int, grads: list[str | None]) -> None:
        g, lay, p = self.g, self.layers[i], self.params[i]
        m = self.b * lay.rows_per_example
        dy = grads[i]
        assert dy is not None and p.w.g is not None
        dz = self._epilogue_bwd(i, dy)
        if lay.residual is not None:  # the shortcut's gradient joins its source's
            self._join(grads, lay.residual, dz, f"{lay.name}.residual.bwd", m * lay.n)
        if p.bias is not None:
            assert p.bias.g is not None
            g.ew(f"{lay.name}.bias.bwd", "backward", (dz,), (p.bias.g,), m * lay.n, {"add": 1},
                 rows=m if lay.bias == "shared" else self.b, broadcast=(p.bias.g,), op="reduction", role="bias")
        a = self._gather(i, "backward")
        # weight gradient: dW[n x k] = dZ^T . A;  input gradient: dA[m x k] = dZ . W
        g.gemm(f"{lay.name}.dW", "backward", dz, a, p.w.g, lay.n, lay.k, m, trans=(True, False), role="linear")
        dx = g.tensor(f"{lay.name}.dx", m * lay.k)
        g.gemm(f"{lay.name}.dX", "backward", dz, p.w.w, dx, m, lay.k, lay.n, role="linear")
        n_dx = m * lay.k
        if lay.im2col or lay.pool_from:
            da, n_dx = dx, self.b * (lay.pool_from or lay.in_units)
            dx = g.tensor(f"{lay.name}.dx.img", n_dx)
            g.ew(f"{lay.name}.col2im", "backward", (da,), (dx,), m * lay.k, {"add": 1}, role="col2im")
        if lay.source >= 0:  # the first layer's input gradient: computed, not needed
            self._join(grads, lay.source, dx, f"{lay.name}.dx.accumulate", n_dx)


def declare_chain(g: Graph, net: Network, batch: int, *, training: bool, optimizer: str) -> None:
    """Declare the step of a chain of layers on ``batch`` examples into ``g``."""
    ch = _Chain(g, net, batch, training, optimizer)
    n = len(ch.layers)
    for i in range(n):
        with g.at(block=i):
            ch.forward(i)
    g.blocks = list(ch.outs)
    if not training:
        return
    grads: list[str | None] = [None] * n
    grads[-1] = ch.loss()
    for i in reversed(range(n)):
        with g.at(block=i):
            ch.backward(i, grads)
    g.updates(optimizer)
