"""Training configurations: what one step of training does, independent of the network.

Owns: :class:`TrainingConfig` (batch, update rule, optimizer, precision, activation
checkpointing, sequence length, phase), its checks, and the byte sizes and optimizer
state each choice implies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..vocabulary import DTYPE_BYTES, OPTIMIZERS, PHASES, UPDATES, check_word, parse_checkpoint
from ..vocabulary import TRAINING_DTYPES as DTYPES

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
            check_word(getattr(self, name), allowed, name)
        if self.seq_len is not None and (isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len <= 0):
            raise InputError(f"must be a positive integer, got {self.seq_len!r}", field="seq_len")
        parse_checkpoint(self.checkpoint)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def training(self) -> bool:
        return self.phase == "train"

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
