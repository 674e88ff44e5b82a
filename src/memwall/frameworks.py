"""Frameworks and runtimes: the software stack's own time, declared in data.

Owns: :data:`FRAMEWORK` (the declaration of ``era_data/frameworks/<id>.toml``),
:class:`Framework` (one loaded file: the kernel-issue mode it runs, the host seconds it
adds per kernel run, per layer pass and per step, the synchronisation that ends a step,
the base latency it pays per collective, and the kernels it runs for an operation: what
decode attention reads of a preallocated cache, the vector instructions a weight-only
product spends per weight), :func:`load_framework`,
:func:`framework_ids` (the shipped files' ids and :data:`HAND_WRITTEN`),
:func:`framework_for` (the framework a case runs with: its own, else the profile's
``[timing] framework``, else hand-written).

The machine's ``[timing.dispatch]`` says what issuing one kernel costs in each mode; the
framework adds what it does around the kernels (docs/timing.md, "The framework"). A
figure a file does not state is charged as zero and named in ``unstated``, so a result
says what it could not count. ``hand-written`` is the code of the 1980s papers and
hand-written CUDA: the kernels alone, nothing around them, nothing unstated.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .data import data_files
from .errors import InputError
from .schema import Field, Figure, Problems, Table, check_provenance, read_toml, walk
from .units import parse_time
from .vocabulary import ATTENTIONS, DISPATCH_MODES

HAND_WRITTEN = "hand-written"  # no file: the kernels alone
HOST_FIGURES = ("operator", "layer", "step", "synchronize")
# When the data-parallel gradient reduction runs ([collectives] gradients): memwall.timing.time_communication
GRADIENT_REDUCTIONS = ("overlapped", "after-backward")
# When the distributed optimizer's updated weights are all-gathered ([collectives] weights)
WEIGHT_GATHERS = ("after-update", "overlapped")


def _time(value: Any, context: dict[str, Any]) -> float:
    return parse_time(value)


_T = "time (`'7 us'`, `'0.2 ms'`)"
HOST = Table("[host]", (
    Field("operator", "any", "host time per kernel run on top of the machine's `[timing.dispatch.<mode>]` "
          "host_issue (the framework's own work around one operator)", parse=_time, unit=_T, figure="required"),
    Field("layer", "any", "host time per layer and pass (forward, backward, recompute): module calls and "
          "hooks, operators that launch no kernel (views, reshapes), autograd's bookkeeping", parse=_time,
          unit=_T, figure="required"),
    Field("step", "any", "host time per step (an optimizer step; one serving iteration): the optimizer "
          "loop, the scheduler, sampling, logging", parse=_time, unit=_T, figure="required"),
    Field("synchronize", "any", "one host-device round trip that ends a step (`loss.item()`, reading "
          "back the sampled tokens; a host-timed call's synchronisation): the next step's issue waits for "
          "it", parse=_time, unit=_T, figure="required"),
    Field("note", "str", "free text"),
), doc="Host seconds the framework adds to the host stream (docs/timing.md, 'The framework').")
COLLECTIVES = Table("[collectives]", (
    Field("library", "text", "the collective library and version the figures describe (`NCCL 2.21`)"),
    Field("base", "any", "seconds per collective call before its per-hop latencies and bytes (NCCL's "
          "baseLat for the protocol it picks)", parse=_time, unit=_T, figure="required"),
    Field("gradients", "word", "when the data-parallel gradient reduction (ZeRO 0-2) runs: `overlapped` "
          "(in buckets, issued while the last micro-batch's backward runs, as PyTorch DDP and Megatron-Core's "
          "overlap_grad_reduce do) or `after-backward` (the whole gradient buffer reduced once the step's "
          "backward has finished, the device waiting for it, as Megatron-LM's local DDP of 2020-22 does); "
          "unstated: overlapped; say where it was read in the note", choices=GRADIENT_REDUCTIONS,
          noun="gradient reduction"),
    Field("weights", "word", "when ZeRO 1-2's updated weights are all-gathered: `after-update` (once the "
          "update is done, the device waiting for it before the next step, as DeepSpeed's ZeRO-1/2 optimizer "
          "step does) or `overlapped` (in buckets behind the next step's first forward, each bucket's layers "
          "waiting for their own gather, as Megatron-Core's overlap_param_gather does); unstated: "
          "after-update; say where it was read in the note", choices=WEIGHT_GATHERS, noun="weight gather"),
    Field("note", "str", "free text"),
), doc="The alpha of each collective call, and when the gradient reduction runs: the links' per-hop "
       "latencies and bandwidths are the machine's.")


# Elements or units a sharding figure counts: far above any model's parameters, so only a
# typing error meets it (and the step's arithmetic stays finite).
MAX_COUNT = 1e18
# Vector instructions a weight: far above any kernel's unpacking.
MAX_INSTRUCTIONS = 1e3


def _count(value: Any, context: dict[str, Any]) -> int:
    """A count of elements or units: a number, or a string like ``'5e7'``."""
    try:
        n = float(str(value).replace("_", ""))
    except ValueError:
        raise InputError(f"expected a count (a number like 50000000 or '5e7'), got {value!r}") from None
    if not 0 <= n <= MAX_COUNT or n != int(n):
        raise InputError(f"expected a whole count from 0 to {MAX_COUNT:.0e}, got {value!r}")
    return int(n)


_N = "a count (`50000000`, `'5e7'`)"
GRANULARITIES = ("parameter", "unit")
SHARDING = Table("[sharding]", (
    Field("gather", "word", "how ZeRO-3's weights are gathered: `parameter` (one all-gather call per parameter "
          "tensor, as DeepSpeed's ZeRO-3 does) or `unit` (one call per sharding unit, a layer's flat "
          "parameter, as FSDP does)", choices=GRANULARITIES, noun="gather granularity"),
    Field("reduce", "word", "how the gradients are reduce-scattered: `parameter` (one call per parameter "
          "tensor, issued a reduce bucket at a time) or `unit` (one call per unit, after its backward)",
          choices=GRANULARITIES, noun="reduce granularity"),
    Field("persist_below", "any", "parameter tensors with fewer elements stay gathered between passes (gathered "
          "once a step): DeepSpeed's stage3_param_persistence_threshold", parse=_count, unit=_N,
          figure="required"),
    Field("prefetch_bucket", "any", "elements gathered ahead of the module that runs: the prefetch covers the "
          "following modules until this many elements (at least one module), and the next prefetch is issued "
          "only when the last one has been waited for (DeepSpeed's stage3_prefetch_bucket_size)", parse=_count,
          unit=_N, figure="required"),
    Field("prefetch_depth", "any", "units gathered ahead of the one that runs (FSDP: 1, its backward_prefetch "
          "and the rate limiter's two all-gathers in flight); ignored where prefetch_bucket is given",
          parse=_count, unit=_N, figure="required"),
    Field("max_live", "any", "a prefetch is issued only while fewer elements are gathered and not yet released "
          "(DeepSpeed's stage3_max_live_parameters): the unit that runs, as memwall counts them; 0: no limit",
          parse=_count, unit=_N, figure="required"),
    Field("max_reuse", "any", "a unit stays gathered from its forward to its backward when fewer elements are "
          "used between the two (DeepSpeed's stage3_max_reuse_distance); 0: every unit is released after its "
          "forward", parse=_count, unit=_N, figure="required"),
    Field("reduce_bucket", "any", "gradient elements collected before their reduce-scatters are issued "
          "(DeepSpeed's reduce_bucket_size); 0: each unit's after its backward", parse=_count, unit=_N,
          figure="required"),
    Field("synchronize", "bool", "true if each wait for a gather waits for the whole device (every stream, the "
          "reduce-scatters in flight included), and a reduce bucket waits for the one before it"),
    Field("launch", "any", "host time to issue one gather call (the hooks' bookkeeping and the collective's "
          "launch) where `synchronize` has drained the device first, so the device waits it out; absent: 0",
          parse=_time, unit=_T, figure="required"),
    Field("serialized", "bool", "true if the gathers and the reduce-scatters run on one process group's "
          "communication stream, one after the other in the order issued"),
    Field("list_copies", "bool", "true if each call passes one tensor per group member (the list form of "
          "torch.distributed.all_gather / reduce_scatter), which the process group copies to or from a flat "
          "buffer one tensor at a time on its stream: n copy kernels a call"),
    Field("note", "str", "free text"),
), doc="How ZeRO-3 / FSDP gathers, prefetches and reduces (docs/timing.md, 'Devices and the interconnect').")
_I = "instructions a weight (`1.375`)"
DECODE_ATTENTIONS = ("filled", "allocated")
KERNELS = Table("[kernels]", (
    Field("decode_attention", "word", "what decode attention reads of a KV cache preallocated to `--cache-length` "
          "tokens: `filled` (each sequence's context + 1 rows, as kernels told each sequence's length do) or "
          "`allocated` (every allocated row, the unfilled ones masked, as attention over the whole cache tensor "
          "does); unstated: filled", choices=DECODE_ATTENTIONS, noun="decode attention"),
    Field("dequant_int4", "number", "vector-unit instructions per weight its weight-only int4 product executes to "
          "unpack, convert, scale and offset each weight (and, where it computes the product on the vector "
          "units, the multiply-add), counted at the 32-bit instruction rate (an instruction at half or a quarter "
          "of that rate counts 2 or 4); unstated: the scale multiply and zero-point subtraction the step counts "
          "(2)", minimum=0, maximum=MAX_INSTRUCTIONS, unit=_I, figure="required"),
    Field("dequant_int8", "number", "as dequant_int4, for int8 weights; unstated: 2", minimum=0,
          maximum=MAX_INSTRUCTIONS, unit=_I, figure="required"),
    Field("note", "str", "free text"),
), doc="The kernels it runs for an operation where they differ from the plain ones (docs/timing.md, 'The "
       "framework').")
FRAMEWORK_TABLE = Table("[framework]", (
    Field("name", "text", "the framework's name", required=True),
    Field("version", "text", "the version the figures describe", required=True),
    Field("dispatch", "word", "how it issues kernels: the `--dispatch` mode it runs unless told",
          required=True, choices=DISPATCH_MODES, noun="dispatch mode"),
    Field("attention", "word", "the attention kernels it runs, unless the case says (`--attention`); "
          "unstated: the network's own", choices=ATTENTIONS, noun="attention"),
    Field("synchronizes", "bool", "true if each step ends with a host-device synchronisation (a training "
          "loop that reads its loss, a serving loop that reads the sampled tokens); false for a benchmark loop "
          "that only synchronises around many calls", default=True),
    Field("note", "str", "free text"),
), doc="Who it is and how it issues kernels.")
FRAMEWORK = Table("framework file", (
    Field("framework", "table", "identity and kernel issue", required=True, table=FRAMEWORK_TABLE),
    Field("host", "table", "host seconds it adds", table=HOST),
    Field("collectives", "table", "the base latency per collective call", table=COLLECTIVES),
    Field("sharding", "table", "how ZeRO-3 gathers and reduces", table=SHARDING),
    Field("kernels", "table", "the kernels it runs for an operation", table=KERNELS),
    Field("sources", "mapping", "key -> full citation or URL"),
), doc="One framework or runtime: `era_data/frameworks/<id>.toml` (docs/timing.md, 'The framework').")


@dataclass(frozen=True)
class Sharding:
    """ZeRO-3's gathers and reduce-scatters as a framework runs them ([sharding]); the
    default, for a framework without the table, is an ideal one: a gather a layer, one
    layer ahead, on a stream of its own."""

    gather: str = "unit"
    reduce: str = "unit"
    persist_below: int = 0  # elements
    prefetch_bucket: int = 0  # elements; 0: prefetch_depth units
    prefetch_depth: int = 1  # units
    max_live: int = 0  # elements; 0: no limit
    max_reuse: int = 0  # elements; 0: released after each forward
    reduce_bucket: int = 0  # elements; 0: each unit's after its backward
    synchronize: bool = False
    launch: float = 0.0  # seconds of host time per gather call, waited out by the device (with synchronize)
    serialized: bool = False
    list_copies: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"gather": self.gather, "reduce": self.reduce, "persist_below": self.persist_below,
                "prefetch_bucket": self.prefetch_bucket, "prefetch_depth": self.prefetch_depth,
                "max_live": self.max_live, "max_reuse": self.max_reuse,
                "reduce_bucket": self.reduce_bucket, "synchronize": self.synchronize, "launch": self.launch,
                "serialized": self.serialized, "list_copies": self.list_copies}


IDEAL_SHARDING = Sharding()


@dataclass(frozen=True)
class Framework:
    """One framework's figures, in seconds; an unstated figure is 0 and named in ``unstated``."""

    id: str
    name: str
    version: str = ""
    dispatch: str | None = None  # None: the machine's default mode
    attention: str | None = None  # None: the network's own
    synchronizes: bool = False
    operator: float = 0.0
    layer: float = 0.0
    step: float = 0.0
    synchronize: float = 0.0
    collective_base: float = 0.0
    gradients: str | None = None  # when the data-parallel gradient reduction runs (GRADIENT_REDUCTIONS); None: overlapped
    weights: str | None = None  # when ZeRO 1-2's updated weights are gathered (WEIGHT_GATHERS); None: after-update
    sharding: Sharding = IDEAL_SHARDING
    decode_attention: str = "filled"  # what decode attention reads of a preallocated cache
    dequant: Mapping[str, float] = field(default_factory=dict)  # stored type -> vector instructions a weight
    unstated: tuple[str, ...] = ()
    provenance: Mapping[str, Figure] = field(default_factory=dict, compare=False, repr=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    path: str = ""

    @property
    def gradient_reduction(self) -> str:
        """When its data-parallel gradient reduction runs (:data:`GRADIENT_REDUCTIONS`): the
        file's ``[collectives] gradients``, else overlapped."""
        return self.gradients or "overlapped"

    @property
    def weight_gather(self) -> str:
        """When ZeRO 1-2's updated weights are all-gathered (:data:`WEIGHT_GATHERS`): the
        file's ``[collectives] weights``, else after the update."""
        return self.weights or "after-update"

    @property
    def bare(self) -> bool:
        """True when it adds nothing around the kernels."""
        return not (self.operator or self.layer or self.step or self.synchronize or self.collective_base)

    def dequant_instructions(self, stored: str) -> float:
        """Vector-unit instructions (at the 32-bit rate) its weight-only product executes per
        weight stored in ``stored``: the file's figure, else the operations the step counts
        (a scale multiply, and an integer type's zero-point subtraction)."""
        if stored in self.dequant:
            return self.dequant[stored]
        return 2.0 if stored.startswith("int") else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "version": self.version, "dispatch": self.dispatch,
                "synchronizes": self.synchronizes,
                "host": {"operator": self.operator, "layer": self.layer, "step": self.step,
                         "synchronize": self.synchronize},
                "collective_base": self.collective_base, "unstated": list(self.unstated),
                # only a file that states when its gradients are reduced
                **({"gradients": self.gradients} if self.gradients is not None else {}),
                **({"weights": self.weights} if self.weights is not None else {}),
                # only a file that states [sharding]: the ideal default is no figure of its own
                **({"sharding": self.sharding.as_dict()} if self.sharding is not IDEAL_SHARDING else {}),
                # only a file that states [kernels]: the plain kernels are no figure of their own
                **({"kernels": {"decode_attention": self.decode_attention,
                                **{f"dequant_{k}": v for k, v in sorted(self.dequant.items())}}}
                   if self.decode_attention != "filled" or self.dequant else {})}


BARE = Framework(HAND_WRITTEN, "hand-written code: the kernels alone")


def _shipped() -> dict[str, Path]:
    return {p.stem: p for p in data_files("frameworks")}


def framework_ids() -> tuple[str, ...]:
    """Every framework a case may name: the shipped files' ids, and hand-written."""
    return (*_shipped(), HAND_WRITTEN)


def load_framework_file(path: str | Path) -> Framework:
    """Load and check one framework file; raises its first problem, naming file, line and field."""
    path = Path(path)
    raw, text = read_toml(path)
    problems = Problems(str(path), text)
    values = walk(raw, FRAMEWORK, problems, context={"provenance": True})
    sources = values.get("sources", {})
    check_provenance(problems, sources)
    problems.raise_first("; run 'memwall frameworks validate'")
    ident, host, coll = values["framework"], values.get("host", {}), values.get("collectives", {})
    unstated = tuple(f"host.{k}" for k in HOST_FIGURES if k not in host)
    if "base" not in coll:
        unstated += ("collectives.base",)
    shard = values.get("sharding")
    kernels = values.get("kernels", {})
    sharding = IDEAL_SHARDING if shard is None else Sharding(**{
        k: shard[k] for k in ("gather", "reduce", "persist_below", "prefetch_bucket", "prefetch_depth", "max_live",
                              "max_reuse", "reduce_bucket", "synchronize", "launch", "serialized", "list_copies")
        if k in shard})
    return Framework(id=path.stem, name=ident["name"], version=ident["version"], dispatch=ident["dispatch"],
                     attention=ident.get("attention"),
                     synchronizes=ident["synchronizes"],
                     operator=host.get("operator", 0.0), layer=host.get("layer", 0.0), step=host.get("step", 0.0),
                     synchronize=host.get("synchronize", 0.0), collective_base=coll.get("base", 0.0),
                     gradients=coll.get("gradients"), weights=coll.get("weights"),
                     sharding=sharding, decode_attention=kernels.get("decode_attention", "filled"),
                     dequant={k[len("dequant_"):]: v for k, v in kernels.items() if k.startswith("dequant_")},
                     unstated=unstated, provenance=dict(problems.provenance), sources=dict(sources),
                     path=str(path))


@lru_cache(maxsize=64)
def load_framework(framework_id: str) -> Framework:
    """A shipped framework by id (``hand-written``: no file, nothing around the kernels)."""
    if framework_id == HAND_WRITTEN:
        return BARE
    shipped = _shipped()
    if framework_id not in shipped:
        close = difflib.get_close_matches(framework_id, list(framework_ids()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; one of {', '.join(framework_ids())}"
        raise InputError(f"no framework {framework_id!r}{hint}", field="framework")
    return load_framework_file(shipped[framework_id])


def framework_for(case_framework: str | None, machine_framework: str | None) -> Framework:
    """The framework a case runs with: its own, else its machine's default, else hand-written."""
    return load_framework(case_framework or machine_framework or HAND_WRITTEN)
