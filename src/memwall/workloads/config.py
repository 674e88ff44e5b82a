"""Training configurations: what one step of training does, independent of the network.

Owns: :class:`TrainingConfig` (batch, update rule, optimizer, precision, activation
checkpointing, sequence length, phase, gradient accumulation and its gradient precision,
kernel fusion), its checks, and the byte sizes and optimizer
state each choice implies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..vocabulary import (
    BLOCK_FORMATS,
    DTYPE_BYTES,
    FUSIONS,
    GENERATE,
    GRADIENT_DTYPES,
    INFERENCE_DTYPES,
    KV_DTYPES,
    MAX_WEIGHT_GROUP,
    NARROW_TRAINING,
    OPTIMIZERS,
    PHASES,
    SERVING_PHASES,
    UPDATES,
    WEIGHT_DTYPES,
    WEIGHT_GROUP_SCALES,
    WEIGHT_ZEROS,
    check_word,
    group_format,
    parse_checkpoint,
)
from ..vocabulary import DTYPES as ALL_DTYPES
from ..vocabulary import TRAINING_DTYPES as DTYPES

# How a training step's weight update runs (memwall.workloads.update_fusion)
FUSED, SEPARATE = "fused", "separate"
UPDATE_FUSIONS: tuple[str, ...] = (FUSED, SEPARATE)

# fp32 values kept per parameter by the optimizer, besides the weights themselves
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class TrainingConfig:
    """One training (or, with ``phase='forward'``, inference) step.

    ``batch`` counts examples, or sequences for sequence models (of ``seq_len`` tokens,
    the preset's own when None). ``per-example`` updates (1986-style online SGD) apply
    the update after every example; ``minibatch`` once per batch. ``bf16`` computes in
    bfloat16 with fp32 master weights kept by the optimizer. ``checkpoint`` is ``none``,
    ``sqrt`` (ceil(sqrt L) layers a segment), ``every:K``, ``block:N`` (the first N
    layers recomputed, each alone; Megatron-LM's recompute_num_layers) or ``selective``
    (recompute the attention core only: Korthikanti et al. 2022).

    ``accumulate`` K: K micro-batches of ``batch`` per optimizer step; the gradients are
    accumulated (the kernels that write them read them too: beta = 1 in the weight-gradient
    product) and the update runs once per K. ``grad_dtype`` is the gradients' type: by
    default the compute type, except that mixed precision with K > 1 accumulates into fp32
    main gradients (Megatron-LM, apex O2). ``fusion``: see :mod:`memwall.workloads.fusion`.
    ``update_fusion``: see :mod:`memwall.workloads.update_fusion` (None: ``fused`` with
    per-example updates, ``separate`` otherwise).
    """

    batch: int = 1
    updates: str = "minibatch"
    optimizer: str = "sgd"
    dtype: str = "fp32"
    checkpoint: str = "none"
    seq_len: int | None = None
    phase: str = "train"
    accumulate: int = 1
    grad_dtype: str | None = None
    fusion: str = "none"
    context: int | None = None
    weights: str | None = None
    kv_dtype: str | None = None
    weight_group: int | None = None  # weights a group scale covers (None: the type's default)
    weight_zero: str | None = None  # the groups' zero points (None: symmetric, none stored)
    update_fusion: str | None = None  # fused | separate (None: fused with per-example updates)
    cache_length: int | None = None  # decode: tokens each sequence's KV cache is allocated for (None: context + 1)
    cache_read: str = "filled"  # decode attention reads the filled rows or every allocated row (the framework's)
    single_product: bool = False  # a single GEMM's step: any arithmetic type (fp64 and tf32 too)

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch <= 0:
            raise InputError(f"batch must be a positive integer, got {self.batch!r}", field="batch")
        dtypes = ALL_DTYPES if self.single_product else DTYPES if self.phase == "train" else INFERENCE_DTYPES
        for name, allowed in (("updates", UPDATES), ("optimizer", OPTIMIZERS), ("dtype", dtypes), ("phase", PHASES)):
            check_word(getattr(self, name), allowed, name)
        self._check_serving()
        if self.seq_len is not None and (isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len <= 0):
            raise InputError(f"must be a positive integer, got {self.seq_len!r}", field="seq_len")
        parse_checkpoint(self.checkpoint)
        if isinstance(self.accumulate, bool) or not isinstance(self.accumulate, int) or self.accumulate <= 0:
            raise InputError(f"must be a positive integer, got {self.accumulate!r}", field="accumulate")
        if self.accumulate > 1 and not self.training:
            raise InputError("gradient accumulation needs a training step (phase train)", field="accumulate")
        if self.accumulate > 1 and self.updates == "per-example":
            raise InputError("per-example updates change the weights after every example: nothing to accumulate",
                             field="accumulate")
        if self.grad_dtype is not None:
            check_word(self.grad_dtype, GRADIENT_DTYPES, "grad_dtype")
            if self.dtype == "fp32" and self.grad_dtype != "fp32":
                raise InputError("fp32 training keeps fp32 gradients", field="grad_dtype")
        check_word(self.fusion, FUSIONS, "fusion")
        self._check_update_fusion()

    def _check_update_fusion(self) -> None:
        if self.update_fusion is None:
            return
        check_word(self.update_fusion, UPDATE_FUSIONS, "update_fusion")
        if not self.training:
            raise InputError(f"update_fusion applies to training steps, not phase {self.phase}", field="update_fusion")
        if self.update_fusion == FUSED and self.accumulates:
            raise InputError("a fused update changes the weights where their gradient is made: there is no "
                             "gradient to accumulate (--accumulate K, or fp32 main gradients)", field="update_fusion")

    @property
    def updates_fused(self) -> bool:
        """Whether the weight updates are fused into the kernels that make their gradients: as
        given, else with per-example updates (and no accumulation)."""
        if not self.training:
            return False
        if self.update_fusion is not None:
            return self.update_fusion == FUSED
        return self.updates == "per-example" and not self.accumulates

    @property
    def update_fusion_mode(self) -> str | None:
        """``fused`` or ``separate`` for a training step (the default resolved), else None."""
        return (FUSED if self.updates_fused else SEPARATE) if self.training else None

    def _check_serving(self) -> None:
        if self.phase == GENERATE:  # several steps: memwall.simulation.generate runs its prefill and decodes
            raise InputError("phase generate is a whole request (a prefill, then decode steps), not one step: "
                             "a step takes --phase prefill --context P or --phase decode --context C", field="phase")
        serving = self.phase in SERVING_PHASES
        if serving and self.seq_len is not None:
            raise InputError(f"--seq-len does not apply to {self.phase}: give the tokens in the cache as --context",
                             field="seq_len")
        if serving and self.context is None:
            raise InputError(f"{self.phase} needs --context (tokens in each sequence's KV cache)", field="context")
        if not serving and self.context is not None:
            raise InputError(f"context applies to decode and prefill only, not {self.phase}", field="context")
        c = self.context
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < (0 if self.phase == "decode" else 1)):
            raise InputError(f"must be a {'non-negative' if self.phase == 'decode' else 'positive'} integer, got {c!r}",
                             field="context")
        n = self.cache_length
        if n is not None:
            if self.phase != "decode":
                raise InputError(f"cache_length applies to decode only, not {self.phase}", field="cache_length")
            if isinstance(n, bool) or not isinstance(n, int) or n < (c or 0) + 1:
                raise InputError(f"must be an integer of at least context + 1 = {(c or 0) + 1} (the cache holds the "
                                 f"context and this step's token), got {n!r}", field="cache_length")
        check_word(self.cache_read, ("filled", "allocated"), "cache_read")
        for name, allowed in (("weights", WEIGHT_DTYPES), ("kv_dtype", KV_DTYPES)):
            value = getattr(self, name)
            if value is not None:
                check_word(value, allowed, name)
                if self.phase == "train":
                    raise InputError(f"{name} applies to inference phases, not train", field=name)
        if self.dtype in BLOCK_FORMATS and self.weights not in (None, self.dtype) and not self.training:
            raise InputError(f"{self.dtype} products read their weights in {self.dtype}: leave out --weights or "
                             f"give --weights {self.dtype} (weight-only formats take a 16-bit --dtype)",
                             field="weights")
        if self.kv_dtype is not None and not serving:
            raise InputError("kv_dtype applies to decode and prefill (the phases with a KV cache)", field="kv_dtype")
        self._check_groups()

    def _check_groups(self) -> None:
        grouped = self.weights in WEIGHT_GROUP_SCALES
        g = self.weight_group
        if g is not None:
            if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= MAX_WEIGHT_GROUP:
                raise InputError(f"must be a whole number of weights from 1 to {MAX_WEIGHT_GROUP}, got {g!r}",
                                 field="weight_group")
        if self.weight_zero is not None:
            check_word(self.weight_zero, tuple(WEIGHT_ZEROS), "weight_zero")
        for name in ("weight_group", "weight_zero"):
            if getattr(self, name) is not None and not grouped:
                kinds = ", ".join(WEIGHT_GROUP_SCALES)
                raise InputError(f"{name} applies to weights stored with group scales ({kinds}), not to "
                                 f"{self.weights or 'unquantized'} weights", field=name)

    @property
    def group_format(self) -> tuple[int, int] | None:
        """:func:`memwall.vocabulary.group_format` of this step's weights."""
        return group_format(self.weights, self.weight_group, self.weight_zero)

    @property
    def serving(self) -> bool:
        return self.phase in SERVING_PHASES

    @property
    def product_dtype(self) -> str | None:
        """The narrow type the products run in, the rest of the step in :attr:`storage_dtype`:
        fp8 and the block formats, in training (Transformer Engine's recipes) and in
        inference (W8A8 as vLLM and TensorRT-LLM serve it: the block matrices' weights stored
        narrow, their products' activation operands cast, every other tensor in bf16); None
        where the whole step runs in ``dtype``."""
        if self.single_product:
            return None
        return self.dtype if self.dtype in NARROW_TRAINING else None

    @property
    def storage_dtype(self) -> str:
        """The type activations, gradients and the non-product kernels run in: bf16 when the
        products run narrow (:attr:`product_dtype`), else ``dtype``."""
        return "bf16" if self.product_dtype is not None else self.dtype

    @property
    def stored_weights(self) -> str | None:
        """The type the block matrices are stored in when not the step's own: ``weights``, or
        in inference a narrow product type's own (fp8 or a block format: its products read
        the weights in it)."""
        if self.weights is not None:
            return self.weights
        if self.training:
            return None
        return self.dtype if self.dtype in BLOCK_FORMATS else self.product_dtype

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.storage_dtype]

    @property
    def training(self) -> bool:
        return self.phase == "train"

    @property
    def gradient_dtype(self) -> str:
        """The gradients' type: as given, else fp32 main gradients when mixed precision accumulates."""
        if self.grad_dtype is not None:
            return self.grad_dtype
        return "fp32" if self.accumulate > 1 else self.storage_dtype

    @property
    def accumulates(self) -> bool:
        """Whether the gradient kernels add into the gradients (read-modify-write) instead of writing them:
        with K > 1, and with fp32 main gradients under mixed precision (they are zeroed once per
        optimizer step and every micro-batch adds into them)."""
        return self.training and (self.accumulate > 1 or self.gradient_dtype != self.storage_dtype)

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "updates": self.updates,
            "optimizer": self.optimizer,
            "dtype": self.dtype,
            "checkpoint": self.checkpoint,
            "seq_len": self.seq_len,
            "phase": self.phase,
            "accumulate": self.accumulate,
            "grad_dtype": self.gradient_dtype if self.training else None,
            "fusion": self.fusion,
            "update_fusion": self.update_fusion_mode,
            # the serving options only where given, so other steps print as before
            **{k: v for k, v in (("context", self.context), ("weights", self.weights), ("kv_dtype", self.kv_dtype),
                                 ("weight_group", self.weight_group), ("weight_zero", self.weight_zero),
                                 ("cache_length", self.cache_length))
               if v is not None},
            **({"cache_read": self.cache_read} if self.cache_length is not None else {}),
        }
