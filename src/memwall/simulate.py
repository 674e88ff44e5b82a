"""One case, end to end: a machine and a workload in, the timed stall breakdown out.

Owns: :class:`Case` (what to run: machine, network or GEMM, batch, configuration) and
:func:`run_case`, which builds the step, lowers each kernel by the machine's schedule,
replays the streams through the machine's cache levels, and times the counts with the
machine's timing model. The result is the JSON-able dict that ``memwall inspect``
prints and each row of a sweep is made from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Case:
    """What to simulate. Exactly one of ``network`` and ``gemm`` is given."""

    machine: str  # profile id (or path to a profile file)
    network: str | None = None  # network preset id
    batch: int = 1  # examples, or sequences for sequence models
    checkpoint: str = "none"  # none | sqrt | every:K | selective
    updates: str = "minibatch"  # per-example | minibatch
    phase: str = "train"  # train | forward
    optimizer: str = "sgd"  # sgd | momentum | adam
    dtype: str | None = None  # None: the network's own (fp32 classics, bf16 modern)
    seq_len: int | None = None  # None: the preset's
    gemm: tuple[int, int, int] | None = None  # (M, N, K) for a single product

    def as_dict(self) -> dict:
        return asdict(self)
