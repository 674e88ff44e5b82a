"""The era sweep: many cases, run in parallel, stored as they finish, resumable.

Owns: the case sets (the default study that ``memwall sweep`` runs, its ``--quick``
version, and plain machines × networks × batches × checkpointing products), checking
every argument before any work starts, the case key (a hash of the machine profile,
the network, the configuration and :data:`memwall.MODEL_VERSION`), running the cases
on local processes or a Dask cluster, and turning each :func:`memwall.simulate.run_case`
result into one flat results row.

Synthetic machines. A machine spec ``BASE@bw=X`` is the shipped profile ``BASE`` with
its main-memory bandwidth replaced by ``X`` bytes/s: same compute engine, same caches,
different balance. The synthetic balance sweep (figure 6) is made of these.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import MODEL_VERSION
from ..errors import InputError
from ..simulate import Case
from ..vocabulary import PHASES, UPDATES, parse_checkpoint
from .store import Store, dumps, write_tables

if TYPE_CHECKING:
    from ..profiles import Machine

Runner = Callable[..., Mapping[str, Any]]

# The classic 1980s backprop networks, in the order the figures list them.
CLASSICS = ("nettalk", "family-trees", "encoder-8-3-8", "sonar", "alvinn", "lecun-1989")
# A large network that is a pure chain of d×d products: at batch 1 every weight is used
# once per pass (a GEMV), and its activations equal its parameters at batch = d = 1024.
LARGE = "affine-48x1024"
# A bf16 transformer for the batch window (figure 4); short sequences so the batch
# axis spans from far below to far above the compute-bound batch in tokens.
WINDOW_NETWORK = "gpt2-small"
# Serving: a GQA model decoding on the modern machines, batch 1 to 256, a short and a long
# context (where batching turns decode compute-bound, and where the KV cache takes over).
DECODE_NETWORK = "llama3-8b"
DECODE_BATCHES = (1, 8, 64, 256)
DECODE_CONTEXTS = (512, 8192)

MODERN_KINDS = ("gpu", "tpu", "wafer")
# The batch window is drawn for a few modern machines, one line each, so it stays legible.
WINDOW_MACHINES = ("v100-sxm2", "a100-sxm", "h100-sxm", "b200", "mi300x", "tpu-v4", "tpu-v5p")
EXECUTORS = ("local", "dask")

# The leading columns of results.csv, in this order; per-level columns follow.
COLUMNS = (
    "machine", "name", "year", "kind", "synthetic", "bandwidth", "balance", "machine_balance",
    "network", "batch", "tokens", "checkpoint", "updates", "phase", "optimizer", "dtype",
    "seq_len", "status", "error", "seconds", "stall_fraction", "fraction_of_peak", "cups",
    "flops", "achieved_flops", "peak_flops", "bound", "cycles_total", "compute_fraction",
    "overhead_fraction",
)

_SYNTH = re.compile(r"^(?P<base>[^@]+)@bw=(?P<bw>[0-9.eE+\-]+)$")


# --------------------------------------------------------------------------------------
# What the sweep needs to know about machines and networks


@dataclass(frozen=True)
class MachineInfo:
    """The facts about one machine that rows, keys and figures use."""

    id: str
    name: str
    year: int
    kind: str
    primary_dtype: str
    peak_flops: Mapping[str, float]  # FLOP/s per dtype
    bandwidth: float  # main memory, B/s
    fingerprint: str  # hash of the whole profile: any edit changes every key that uses it
    synthetic: bool = False

    def balance(self) -> float:
        """Peak FLOP/s of the primary dtype per byte/s of main memory."""
        return self.peak_flops[self.primary_dtype] / self.bandwidth


@dataclass(frozen=True)
class NetworkInfo:
    id: str
    fingerprint: str
    seq_len: int | None = None  # tokens per example for sequence models, else None


def machine_ids() -> list[str]:
    """The shipped machines, by year, then id."""
    from ..profiles import all_machines

    return [m.id for m in all_machines()]


def network_ids() -> list[str]:
    from ..networks import network_ids as shipped

    return shipped()


def load_machine_spec(spec: str) -> Machine:
    """The profile for an id, a path, or a synthetic ``BASE@bw=X`` spec."""
    from ..profiles import load_machine

    base, bw = parse_machine_spec(spec)
    machine = load_machine(base)
    if bw is None:
        return machine
    return replace(machine, memory=replace(machine.memory, bandwidth=bw))


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(dumps(value).encode()).hexdigest()


def _content(described: Mapping[str, Any]) -> dict[str, Any]:
    # Where a file was read from is not what it says: keys must match across checkouts.
    return {k: v for k, v in described.items() if k != "path"}


# Each profile and preset is read once per process: the sweep asks for the same few
# thousands of times (every key, every row), and a sweep's files do not change under it.
@cache
def machine_info(spec: str) -> MachineInfo:
    """The facts the sweep uses about a machine spec (see :func:`load_machine_spec`)."""
    from ..profiles import load_machine

    base, bw = parse_machine_spec(spec)
    m = load_machine(base)
    bandwidth = m.memory.bandwidth if bw is None else bw
    name = m.name if bw is None else f"{m.name}, memory at {bandwidth:.3g} B/s"
    return MachineInfo(
        id=spec, name=name, year=m.year, kind=m.kind, primary_dtype=m.primary_dtype,
        peak_flops=dict(m.peak_flops), bandwidth=bandwidth,
        fingerprint=_fingerprint({"profile": _content(m.as_dict()), "bandwidth": bw}),
        synthetic=bw is not None,
    )


@cache
def network_info(net_id: str) -> NetworkInfo:
    from ..networks import load_network

    net = load_network(net_id)
    return NetworkInfo(id=net_id, fingerprint=_fingerprint(_content(net.as_dict())), seq_len=net.seq_len)


def parse_machine_spec(spec: str) -> tuple[str, float | None]:
    """``"cray-1"`` -> ("cray-1", None); ``"h100@bw=1e12"`` -> ("h100", 1e12)."""
    match = _SYNTH.match(spec)
    if not match:
        return spec, None
    try:
        bw = float(match["bw"])
    except ValueError:
        raise InputError(f"bad bandwidth in synthetic machine '{spec}'", field="machines") from None
    if not (bw > 0 and math.isfinite(bw)):
        raise InputError(f"synthetic machine '{spec}': bandwidth must be a positive number of B/s",
                         field="machines")
    return match["base"], bw


def synthetic_spec(base: str, bandwidth: float) -> str:
    # repr keeps the exact double, so the spec (and the key) is the same on every run.
    return f"{base}@bw={float(bandwidth)!r}"


# --------------------------------------------------------------------------------------
# Case sets


def product(machines: Iterable[str], networks: Iterable[str], batches: Iterable[int],
            checkpoints: Iterable[str] = ("none",), **fields: Any) -> list[Case]:
    """Every machine × network × batch × checkpoint, with ``fields`` set on each Case."""
    return [Case(machine=m, network=n, batch=b, checkpoint=c, **fields)
            for m in machines for n in networks for b in batches for c in checkpoints]


def _modern(ids: Sequence[str]) -> list[str]:
    return [i for i in ids if machine_info(i).kind in MODERN_KINDS]


def _window_machines(modern: Sequence[str], most: int = 6) -> list[str]:
    """The named representatives that are shipped, else the newest modern machines."""
    named = [i for i in WINDOW_MACHINES if i in modern][:most]
    if named:
        return named
    return sorted(modern, key=lambda i: (machine_info(i).year, i))[-most:]


def _synthetic_base(ids: Sequence[str]) -> str | None:
    """The compute engine for the synthetic sweep: an H100 if shipped, else the newest GPU."""
    gpus = [i for i in ids if machine_info(i).kind == "gpu"] or list(ids)
    named = [i for i in gpus if "h100" in i.lower()]
    if named:
        return sorted(named)[0]
    return max(gpus, key=lambda i: (machine_info(i).year, i)) if gpus else None


def synthetic_machines(base: str, decades: float = 4.0, per_decade: int = 3,
                       low_balance: float = 1.0) -> list[str]:
    """``base`` with memory bandwidth set so balance runs over ``decades`` from ``low_balance``."""
    info = machine_info(base)
    peak = info.peak_flops[info.primary_dtype]
    n = int(round(decades * per_decade))
    return [synthetic_spec(base, float(f"{peak / (low_balance * 10 ** (k / per_decade)):.6g}"))
            for k in range(n + 1)]


def study(*, quick: bool = False) -> list[Case]:
    """The README's main job: the cases behind figures 2, 3, 4 and 6 (1 and 5 need none).

    - per-example training (batch 1) of the classics and of a large network on every
      machine (the large network's word-by-word streams on the 1980s machines are
      sampled: see docs/timing.md);
    - a bf16 transformer over batch sizes, up to 8192 tokens, on a few modern machines
      (the batch window and its plateau);
    - the large network with and without √L checkpointing on one modern machine;
    - a few networks on one compute engine with memory bandwidth over four decades;
    - decode of a GQA transformer on a few modern machines over batch and context.

    ``quick`` keeps one machine per decade, three classics, fewer batches and bandwidths.
    """
    machines = machine_ids()
    networks = set(network_ids())
    classics = [n for n in CLASSICS if n in networks]
    large = [LARGE] if LARGE in networks else []
    if quick:
        machines = _one_per_era(machines)
        classics = classics[:3]
    modern = _modern(machines)
    cases = product(machines, classics, [1], updates="per-example")
    cases += product(machines, large, [1], updates="per-example")
    if WINDOW_NETWORK in networks and modern:
        window = _window_machines(modern, most=1 if quick else 6)
        batches = [1, 8, 64] if quick else [1, 2, 8, 32, 128, 512]
        cases += product(window, [WINDOW_NETWORK], batches, seq_len=16)
    if large and modern and not quick:
        cases += product(_window_machines(modern, most=1), large, [16, 128], ["none", "sqrt"])
    base = _synthetic_base(modern or machines)
    if base:
        synth_nets = (classics[:1] + large) if quick else (classics[:3] + large)
        per_decade = 1 if quick else 3
        cases += product(synthetic_machines(base, per_decade=per_decade), synth_nets, [1],
                         updates="per-example")
    if DECODE_NETWORK in networks and modern:
        decode_machines = _window_machines(modern, most=1 if quick else 6)
        batches = [1, 64] if quick else list(DECODE_BATCHES)
        for context in DECODE_CONTEXTS[:1] if quick else DECODE_CONTEXTS:
            cases += product(decode_machines, [DECODE_NETWORK], batches, phase="decode", context=context)
    return _dedupe(cases)


def _one_per_era(ids: Sequence[str]) -> list[str]:
    """The first machine of each decade (by year, then id): the quick sweep's machines."""
    seen: dict[int, str] = {}
    for i in sorted(ids, key=lambda i: (machine_info(i).year, i)):
        seen.setdefault(machine_info(i).year // 10, i)
    return list(seen.values())


def _dedupe(cases: Iterable[Case]) -> list[Case]:
    return list(dict.fromkeys(cases))


# --------------------------------------------------------------------------------------
# Checking arguments before any work starts


def check_checkpoint(value: str) -> str:
    parse_checkpoint(value)
    return value


def validate(cases: Sequence[Case]) -> None:
    """Raise InputError for the first unusable case; called before anything runs."""
    if not cases:
        raise InputError("no cases to run", field="cases")
    known_m = set(machine_ids())
    known_n = set(network_ids())
    for case in cases:
        base, _ = parse_machine_spec(case.machine)
        if base not in known_m and not (base.endswith(".toml") and Path(base).is_file()):
            raise InputError(f"unknown machine '{base}' (see `memwall machines list`)", field="machines")
        if case.network is None and case.gemm is None:
            raise InputError("a case needs a network or a GEMM", field="networks")
        if case.network is not None and case.network not in known_n:
            raise InputError(f"unknown network '{case.network}' (see `memwall networks list`)",
                             field="networks")
        if isinstance(case.batch, bool) or not isinstance(case.batch, int) or case.batch < 1:
            raise InputError(f"batch must be a whole number >= 1, got {case.batch!r}", field="batches")
        if case.seq_len is not None and case.seq_len < 1:
            raise InputError(f"seq_len must be >= 1, got {case.seq_len!r}", field="seq_len")
        check_checkpoint(case.checkpoint)
        if case.updates not in UPDATES:
            raise InputError(f"unknown updates '{case.updates}' (use {' or '.join(UPDATES)})", field="updates")
        if case.phase not in PHASES:
            raise InputError(f"unknown phase '{case.phase}' (use {' or '.join(PHASES)})", field="phase")
        _check_options(case)
    for spec in dict.fromkeys(c.machine for c in cases):
        # Loads every profile once, so a broken file fails here, not in a worker.
        machine_info(spec)
    for net in dict.fromkeys(c.network for c in cases if c.network):
        network_info(net)


def _check_options(case: Case) -> None:
    """The serving and dtype options, checked as the step will check them (network aside)."""
    from ..workloads.config import TrainingConfig

    if case.network is None:
        return
    TrainingConfig(batch=case.batch, updates=case.updates, optimizer=case.optimizer, dtype=case.dtype or "bf16",
                   checkpoint=case.checkpoint, seq_len=case.seq_len, phase=case.phase, context=case.context,
                   weights=case.weights, kv_dtype=case.kv_dtype)


# --------------------------------------------------------------------------------------
# Keys and rows


def case_key(case: Case) -> str:
    """What a stored result depends on: the profile, the network, the case and the model."""
    m = machine_info(case.machine)
    net = network_info(case.network).fingerprint if case.network else None
    payload = {"model": MODEL_VERSION, "case": case.as_dict(), "machine": m.fingerprint, "network": net}
    return hashlib.sha256(dumps(payload).encode()).hexdigest()[:32]


def make_row(case: Case, result: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    """One results row: who ran what, then the timing (stall fractions per level of total cycles)."""
    m = machine_info(case.machine)
    net = network_info(case.network) if case.network else None
    seq = case.seq_len or (net.seq_len if net else None)
    if case.phase == "decode":
        seq = 1
    elif case.phase == "prefill":
        seq = case.context
    row: dict[str, Any] = {
        "machine": m.id, "name": m.name, "year": m.year, "kind": m.kind, "synthetic": m.synthetic,
        "bandwidth": m.bandwidth, "balance": m.balance(), "machine_balance": m.balance(),
        "network": case.network, "batch": case.batch, "tokens": case.batch * seq if seq else case.batch,
        "checkpoint": case.checkpoint, "updates": case.updates, "phase": case.phase,
        "optimizer": case.optimizer, "dtype": case.dtype, "seq_len": seq,
        "status": "error" if error else "ok", "error": error,
    }
    if error or result is None:
        return row
    # result is memwall.simulate.result_dict's: every key below is always there.
    cycles = result["cycles"]
    total = float(cycles["total"])
    row.update({
        "seconds": float(result["seconds"]),
        "stall_fraction": float(result["stall_fraction"]),
        "fraction_of_peak": float(result["fraction_of_peak"]),
        "cups": float(result["cups"]),
        "flops": float(result["flops"]),
        "achieved_flops": float(result["achieved_flops"]),
        "peak_flops": float(result["peak_flops"]),
        "bound": result["bound"],
        "cycles_total": total,
        "compute_fraction": _share(cycles["compute"], total),
        "overhead_fraction": _share(cycles["overhead"], total),
        "dtype": result["dtype"],
        # Balance for the dtype this case computes in (the peak run_case timed against).
        "balance": float(result["peak_flops"]) / m.bandwidth,
    })
    serving = result.get("serving")
    if serving:  # decode and prefill rows only, so other tables keep their columns
        row.update({k: serving.get(k) for k in ("context", "weights", "kv_dtype", "tokens_per_second",
                                                "seconds_per_token", "time_to_first_token", "max_batch_that_fits")})
        row["kv_cache_bytes"] = float(result["ledger"].get("kv_cache", 0))
    for level, c in cycles["stall"].items():
        row[f"stall_{level}"] = _share(c, total)
    for level, b in result["bytes"].items():
        row[f"bytes_{level}"] = float(b)
    return row


def _share(part: float, total: float) -> float | None:
    return float(part) / total if total else None


def row_order(row: Mapping[str, Any]) -> tuple:
    """Rows sort by machine (year, id), then network and configuration, then batch."""
    def s(v: Any) -> str:
        return "" if v is None else str(v)
    return (row["year"], s(row["machine"]).split("@")[0], row.get("bandwidth") or 0.0, s(row["machine"]),
            s(row["network"]), s(row["phase"]), s(row["updates"]), s(row["checkpoint"]),
            s(row["optimizer"]), s(row["dtype"]), row.get("seq_len") or 0, row["batch"])


# --------------------------------------------------------------------------------------
# Running


def _default_runner(case: Case, machine: Any = None) -> Mapping[str, Any]:
    from ..simulate import run_case

    return run_case(case, machine=machine)


def execute(case: Case, runner: Runner | None = None) -> dict[str, Any]:
    """Run one case (in a worker) and return ``{"case", "result"}`` or ``{"case", "error"}``.

    Never raises for a failing case: the reason goes into the row and the sweep goes on.
    """
    runner = runner or _default_runner
    try:
        base, bw = parse_machine_spec(case.machine)
        if bw is None:
            result = runner(case)
        else:
            machine = load_machine_spec(case.machine)
            result = runner(replace(case, machine=base), machine=machine)
        return {"case": case.as_dict(), "result": dict(result)}
    except Exception as err:  # a case's failure is data, not a crash
        return {"case": case.as_dict(), "error": f"{type(err).__name__}: {err}"}


@dataclass
class SweepResult:
    out: Path
    rows: list[dict[str, Any]]
    computed: int  # cases run this time
    reused: int  # cases found in the store
    failed: list[dict[str, Any]] = field(default_factory=list)  # rows with status "error"


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_executor(executor: str, jobs: int | None, scheduler: str | None) -> None:
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor '{executor}' (use local or dask)", field="executor")
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {jobs}", field="jobs")
    if scheduler and executor != "dask":
        raise InputError("--scheduler needs --executor dask", field="scheduler")
    if executor == "dask":
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise InputError("--executor dask needs Dask: pip install 'memwall[dask]'",
                             field="executor") from None


def run_sweep(
    cases: Sequence[Case],
    out: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    executor: str = "local",
    scheduler: str | None = None,
    runner: Runner | None = None,
    progress: bool = True,
) -> SweepResult:
    """Run every case not already stored under ``out``; rebuild the results tables.

    Each finished case is written to ``out/cases/<key>.json`` the moment it arrives, so
    a sweep killed at any point resumes with only the running cases lost. Failed cases
    are stored with their reason and run again by the next sweep.
    """
    check_executor(executor, jobs, scheduler)
    validate(cases)
    cases = _dedupe(cases)
    jobs = jobs or default_jobs()
    store = Store(out)
    keys = {case: case_key(case) for case in cases}
    todo = []
    for case in cases:
        rec = store.get(keys[case])
        if rec is None or rec.get("status") != "ok":
            todo.append(case)
    reused = len(cases) - len(todo)

    bar = _progress(len(cases), reused, progress)
    failures = 0
    try:
        def finish(case: Case, outcome: Mapping[str, Any]) -> None:
            nonlocal failures
            err = outcome.get("error")
            row = make_row(case, outcome.get("result"), err)
            store.put({"key": keys[case], "status": row["status"], "error": err,
                       "case": case.as_dict(), "model": MODEL_VERSION, "row": row,
                       "result": outcome.get("result")})
            if bar is not None:
                bar.update(1)
                if err:
                    failures += 1
                    bar.set_postfix_str(f"failed {failures}")

        if todo:
            if executor == "dask":
                _run_dask(todo, runner, jobs, scheduler, finish)
            elif jobs == 1 or len(todo) == 1:
                for case in todo:
                    finish(case, execute(case, runner))
            else:
                _run_local(todo, runner, jobs, finish)
    finally:
        if bar is not None:
            bar.close()

    rows = [rec["row"] for rec in (store.get(keys[c]) for c in cases) if rec is not None]
    rows.sort(key=row_order)
    write_tables(out, rows, COLUMNS)
    failed = [r for r in rows if r["status"] != "ok"]
    return SweepResult(out=Path(out), rows=rows, computed=len(todo), reused=reused, failed=failed)


def _progress(total: int, done: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="memwall sweep", unit="case", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)


def _run_local(todo: Sequence[Case], runner: Runner | None, jobs: int,
               finish: Callable[[Case, Mapping[str, Any]], None]) -> None:
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)))
    try:
        pending = {pool.submit(execute, case, runner): case for case in todo}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                finish(pending.pop(fut), fut.result())
    finally:
        # On Ctrl-C, drop queued cases at once; the stored ones are kept.
        pool.shutdown(wait=True, cancel_futures=True)


def _run_dask(todo: Sequence[Case], runner: Runner | None, jobs: int, scheduler: str | None,
              finish: Callable[[Case, Mapping[str, Any]], None]) -> None:
    import logging

    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=min(jobs, len(todo)), threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
    try:
        futures = {client.submit(execute, case, runner, pure=False): case for case in todo}
        for fut in as_completed(futures):
            finish(futures[fut], fut.result())
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
