"""Operation counts: how many of each arithmetic operation an element of a kernel costs.

Owns: the kernel phases and operation kinds, :data:`FLOP_WEIGHTS` (a multiply-add is 2
FLOPs; add, mul, div, exp, sqrt, max, tanh 1) and the per-element operation counts of
the elementwise kernels (activations, norms, softmax, pooling, optimizers), so the
builders state counts once and the FLOPs follow from them.
"""

from __future__ import annotations

KERNEL_PHASES = ("forward", "backward", "recompute", "update")
KERNEL_OPS = ("gemm", "gemv", "elementwise", "softmax", "attention", "reduction", "update")
FLOP_WEIGHTS = {"fma": 2, "add": 1, "mul": 1, "div": 1, "exp": 1, "sqrt": 1, "max": 1, "tanh": 1}

# operation counts per element of the elementwise kernels (the FLOPs follow from them)
ACT_FWD = {"sigmoid": {"exp": 1, "add": 1, "div": 1}, "tanh": {"tanh": 1}, "relu": {"max": 1},
           "identity": {}, "gelu": {"tanh": 1, "mul": 5, "add": 2}}
ACT_BWD = {"sigmoid": {"add": 1, "mul": 2}, "tanh": {"mul": 2, "add": 1}, "relu": {"mul": 1},
           "identity": {}, "gelu": {"tanh": 1, "mul": 9, "add": 4}}
NORM_FWD = {"layernorm": {"add": 3, "mul": 2, "fma": 1}, "rmsnorm": {"fma": 1, "mul": 2}}
NORM_BWD = {"layernorm": {"add": 5, "mul": 5, "fma": 2}, "rmsnorm": {"add": 2, "mul": 4, "fma": 1}}
SOFTMAX_FWD = {"max": 1, "add": 2, "exp": 1, "mul": 1}  # scale, running max, exp, sum, normalise
SOFTMAX_BWD = {"mul": 2, "add": 2}  # dS = P (dP - sum(dP P))
POOL_OPS = {"max": 1}  # max-pool and average-pool alike: one operation per input element
OPTIMIZER_OPS = {"sgd": {"mul": 1, "add": 1}, "momentum": {"mul": 2, "add": 2},
                 "adam": {"mul": 6, "add": 4, "div": 1, "sqrt": 1}}


def flops_of(ops: dict[str, int]) -> int:
    return sum(FLOP_WEIGHTS.get(k, 0) * v for k, v in ops.items())


def scale(ops: dict[str, int], n: int) -> dict[str, int]:
    return {k: v * n for k, v in ops.items() if v}


def plus(*ops: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in ops:
        for k, v in o.items():
            out[k] = out.get(k, 0) + v
    return out
