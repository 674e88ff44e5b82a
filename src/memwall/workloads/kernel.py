"""A kernel at addresses, and the capacity ledger: what the liveness pass hands lowering.

Owns: :class:`Kernel` (one kernel of a step, its tensors as
:class:`~memwall.workloads.allocator.TensorRef` at addresses) and :class:`Ledger` (peak
live bytes per tensor class, and in total).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .allocator import TensorRef


@dataclass(frozen=True)
class Kernel:
    """One kernel: exact FLOPs of one run, the tensors it touches, how many runs it stands for."""

    name: str
    phase: str  # KERNEL_PHASES
    op: str  # KERNEL_OPS
    dtype: str
    flops: int
    ops: dict[str, int]
    reads: tuple[TensorRef, ...]
    writes: tuple[TensorRef, ...]
    dims: tuple[int, int, int] | None = None  # (M, N, K) of products; (rows, cols, 0) otherwise
    repeat: int = 1
    batch: int = 1  # independent products in one run (heads)
    trans: tuple[bool, bool] = (False, False)  # A, B stored transposed
    elements: int = 0  # elementwise kernels: elements per run
    broadcast: tuple[str, ...] = ()  # tensors reused for every row (biases, norm gains, reductions' outputs)
    params: dict[str, Any] = field(default_factory=dict)  # attention: heads, kv_group, seq, dk, dv
    layer: int = -1  # transformer layer (-1: outside the repeated layers)
    group: str = ""

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "phase": self.phase,
            "op": self.op,
            "dtype": self.dtype,
            "flops": self.flops,
            "repeat": self.repeat,
            "ops": self.ops,
            "reads": [r.as_dict() for r in self.reads],
            "writes": [w.as_dict() for w in self.writes],
        }
        if self.dims:
            d["dims"] = list(self.dims)
        if self.batch != 1:
            d["batch"] = self.batch
        if any(self.trans):
            d["trans"] = list(self.trans)
        if self.elements:
            d["elements"] = self.elements
        if self.params:
            d["params"] = self.params
        return d


@dataclass(frozen=True)
class Ledger:
    """Peak live bytes per tensor class, and in total."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    workspace: int
    input: int
    peak: int
    kv_cache: int = 0  # the KV cache of decode and prefill (cached keys and values)

    def as_dict(self) -> dict[str, int]:
        d = dict(vars(self))
        cache = d.pop("kv_cache")
        peak = d.pop("peak")
        # steps without a cache print as they always did
        return {**d, **({"kv_cache": cache} if cache else {}), "peak": peak}
