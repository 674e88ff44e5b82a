"""Training configurations: what one step of training does, independent of the network.

Owns: :class:`TrainingConfig` (batch, update rule, optimizer, precision, activation
checkpointing, sequence length, phase), its checks, and the byte sizes and optimizer
state each choice implies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

UPDATES = ("per-example", "minibatch")
OPTIMIZERS = ("sgd", "momentum", "adam")
DTYPES = ("fp32", "bf16", "fp16")  # 16-bit types train with fp32 master weights
PHASES = ("train", "forward")

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# fp32 values kept per parameter by the optimizer, besides the weights themselves
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class TrainingConfig:
    """One training (or, with ``phase='forward'``, inference) step.

    ``batch`` counts examples, or sequences for sequence models (of ``seq_len`` tokens,
    the preset's own when None). ``per-example`` updates (1986-style online SGD) apply
    the update after every example; ``minibatch`` once per batch. ``bf16`` computes in
    bfloat16 with fp32 master weights kept by the optimizer. ``checkpoint`` is ``none``,
    ``sqrt`` (ceil(sqrt L) layers a segment), ``every:K`` or ``selective`` (recompute
    the attention core only: Korthikanti et al. 2022).
    """

    batch: int = 1
    updates: str = "minibatch"
    optimizer: str = "sgd"
    dtype: str = "fp32"
    checkpoint: str = "none"
    seq_len: int | None = None
    phase: str = "train"

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch <= 0:
            raise InputError(f"batch must be a positive integer, got {self.batch!r}", field="batch")
        for name, allowed in (("updates", UPDATES), ("optimizer", OPTIMIZERS), ("dtype", DTYPES), ("phase", PHASES)):
            value = getattr(self, name)
            if value not in allowed:
                raise InputError(f"must be one of {', '.join(allowed)}, got {value!r}", field=name)
        if self.seq_len is not None and (isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len <= 0):
            raise InputError(f"must be a positive integer, got {self.seq_len!r}", field="seq_len")
        self.checkpoint_segment(1)  # validates the spelling

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def training(self) -> bool:
        return self.phase == "train"

    def checkpoint_segment(self, layers: int) -> int | None:
        """Layers per checkpointed segment for a net of ``layers`` layers; None without."""
        c = self.checkpoint
        if c in ("none", "selective"):
            return None
        if c == "sqrt":
            k = 1
            while k * k < layers:
                k += 1
            return k
        if c.startswith("every:"):
            try:
                k = int(c[6:])
            except ValueError:
                k = 0
            if k <= 0:
                raise InputError(f"every:K needs a positive integer K, got {c!r}", field="checkpoint")
            return k
        raise InputError(f"must be none, sqrt, every:K or selective, got {c!r}", field="checkpoint")

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "updates": self.updates,
            "optimizer": self.optimizer,
            "dtype": self.dtype,
            "checkpoint": self.checkpoint,
            "seq_len": self.seq_len,
            "phase": self.phase,
        }
