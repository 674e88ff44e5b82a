"""``memwall sweep``: run many cases in parallel, resumably, then draw the figures.

With no --machines/--networks/--batches/--checkpoint it runs the default study (see
:func:`memwall.study.design.study`); with any of them, the product of the given
axes (unset axes: every machine, the classic networks, batch 1, no checkpointing).
--accumulate and --fusion multiply any set of cases by every value they list, and so do
the case options (--optimizer ... --dp --tp --pp --ep --zero): every combination runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from ..errors import InputError
from ..vocabulary import CHECKPOINT_SYNTAX, FUSIONS, PHASES, UPDATES, check_word
from . import add_command
from .inspect import _count

DESCRIPTION = __doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].replace("\n", " ")


def _split(values: list[str] | None) -> list[str] | None:
    """Accept both ``--machines a b`` and ``--machines a,b``."""
    if values is None:
        return None
    return [v for item in values for v in item.split(",") if v]


def _batches(values: list[str] | None) -> list[int] | None:
    items = _split(values)
    if items is None:
        return None
    out = []
    for v in items:
        try:
            out.append(int(v))
        except ValueError:
            raise InputError(f"batch must be a whole number >= 1, got '{v}'", field="batches") from None
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "sweep", run, description=DESCRIPTION,
                    help="sweep machines × networks × batches (× checkpointing), in parallel and resumable")
    p.add_argument("--machines", nargs="+", metavar="ID", help="machine ids or profile paths (BASE@bw=B/s for synthetic)")
    p.add_argument("--networks", nargs="+", metavar="ID", help="network preset ids or preset .toml paths")
    p.add_argument("--batches", nargs="+", metavar="B", help="batch sizes (examples, or sequences)")
    p.add_argument("--checkpoint", nargs="+", metavar="MODE", help=CHECKPOINT_SYNTAX)
    p.add_argument("--accumulate", nargs="+", metavar="K", help="micro-batches per optimizer step (default 1)")
    p.add_argument("--fusion", nargs="+", metavar="MODE", help=f"{' | '.join(FUSIONS)} (default none)")
    p.add_argument("--dispatch", nargs="+", metavar="MODE",
                   help="eager, graph and/or compiled (comma list): run every case in each mode "
                        "(default: each profile's own)")
    p.add_argument("--updates", nargs="+", metavar="MODE", help=f"{' | '.join(UPDATES)}: set on every case "
                   "(a list: every case once for each)")
    p.add_argument("--phase", nargs="+", metavar="PHASE", help=f"{' | '.join(PHASES)}: set on every case (a list: "
                   "every case once for each)")
    for opt, what in (("--optimizer", "sgd | momentum | adam"), ("--dtype", "the compute dtype"),
                      ("--seq-len", "tokens per sequence"), ("--context", "decode, prefill: tokens in the KV cache"),
                      ("--weights", "int8 | int4 | fp8 weight-only quantization"),
                      ("--kv-dtype", "the KV cache's type"),
                      ("--weight-group", "int4 weights: weights a group scale covers (default 128)"),
                      ("--weight-zero", "int4 weights: the groups' zero points, none | int4 | fp16 | bf16"),
                      ("--attention", "materialized | flash attention kernels (default: each network's own)")):
        p.add_argument(opt, nargs="+", metavar="V", help=f"{what}: set on every case (a list: once for each)")
    from .inspect import PARALLEL_OPTIONS

    for name, what in PARALLEL_OPTIONS:  # every combination of the lists runs
        p.add_argument(f"--{name}", nargs="+", metavar="N", help=f"{what}: a list runs every case once for each")
    p.add_argument("--out", default="results", metavar="DIR", help="sweep folder (default: ./results)")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="parallel cases (default: the cores)")
    p.add_argument("--executor", default="local", help="local (processes, default) or dask")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="join this Dask scheduler instead of starting a local cluster. Joining a scheduler "
                        "means exchanging pickled Python objects (tasks, which run as code, and their "
                        "results) with it and with every worker it has: only join one you trust. "
                        "Loopback addresses (127.0.0.1, localhost, ::1) are accepted; any other "
                        "needs --allow-remote-scheduler")
    p.add_argument("--allow-remote-scheduler", action="store_true",
                   help="allow a --scheduler that is not on this machine's loopback address")
    p.add_argument("--max-lookups", type=_count, default=None, metavar="N",
                   help="a case whose replay needs more than N line lookups fails with the estimate "
                        "instead of running (default: about ten minutes of replay per case)")
    p.add_argument("--allow-fallback", action="store_true",
                   help="run a --dtype a machine has no arithmetic for at its nearest dtype's rate, with a "
                        "warning in the case's result (without it such a case fails, naming the machine's dtypes)")
    p.add_argument("--quick", action="store_true", help="a small version of the default study, validated against the "
                   "one-device measurements only (under a minute)")
    p.add_argument("--no-figures", action="store_true", help="write the tables only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_cases(args: argparse.Namespace) -> list:
    from ..run import checks
    from ..study import design, identity

    machines = _split(args.machines)
    networks = _split(args.networks)
    batches = _batches(args.batches)
    checkpoints = _split(args.checkpoint)
    for ck in checkpoints or ():
        checks.check_checkpoint(ck)
    if machines is None and networks is None and batches is None and checkpoints is None:
        cases = design.study(quick=args.quick)
    else:
        known = identity.network_ids()
        default_nets = [n for n in design.CLASSICS if n in known]
        if args.quick:
            default_nets = default_nets[:3]
        cases = design.product(
            machines if machines is not None else identity.machine_ids(),
            networks if networks is not None else default_nets,
            batches if batches is not None else [1],
            checkpoints if checkpoints is not None else ["none"],
        )
    cases = _expand(cases, args)
    modes = _split(getattr(args, "dispatch", None))
    if modes:
        for mode in modes:
            checks.check_dispatch(mode)
        cases = [replace(c, dispatch=mode) for c in cases for mode in modes]
    accumulate = _ints(getattr(args, "accumulate", None), "--accumulate")
    fusions = _split(getattr(args, "fusion", None))
    for f in fusions or ():
        check_word(f, FUSIONS, "--fusion")
    if accumulate is None and fusions is None:
        return cases
    return [replace(c, accumulate=k, fusion=f) for c in cases for k in accumulate or [1] for f in fusions or ["none"]]


def _ints(values: list[str] | None, field: str) -> list[int] | None:
    items = _split(values)
    if items is None:
        return None
    out = []
    for v in items:
        if not v.isdigit() or int(v) < 1:
            raise InputError(f"must be a positive integer, got {v!r}", field=field)
        out.append(int(v))
    return out


# sweep options that set a case field on every case; a comma list runs each case once a value
_INT_OPTIONS = ("seq_len", "context", "weight_group", "dp", "tp", "pp", "ep", "zero")
CASE_OPTIONS = ("updates", "phase", "optimizer", "dtype", "seq_len", "context", "weights", "kv_dtype",
                "weight_group", "weight_zero", "attention", "dp", "tp", "pp", "ep", "zero")


def _expand(cases: list, args: argparse.Namespace) -> list:
    import itertools

    axes: list[list[tuple[str, object]]] = []
    for name in CASE_OPTIONS:
        values = _split(getattr(args, name, None))
        if not values:
            continue
        if name in _INT_OPTIONS:
            try:
                parsed: list[object] = [int(v) for v in values]
            except ValueError:
                raise InputError(f"{name} takes whole numbers, got {values!r}", field=name) from None
        else:
            parsed = list(values)
        axes.append([(name, v) for v in parsed])
    if not axes:
        return cases
    return [replace(c, **dict(combo)) for c in cases for combo in itertools.product(*axes)]


def run(args: argparse.Namespace) -> int:
    from ..execute import sweep as sw
    from ..run import checks

    sw.check_out_dir(args.out)  # before anything is loaded: a bad --out costs nothing
    sw.check_executor(args.executor, args.jobs, args.scheduler, args.allow_remote_scheduler)
    cases = build_cases(args)
    checks.validate(cases)  # every argument checked before any case runs
    start = time.monotonic()
    result = sw.run_sweep(cases, args.out, jobs=args.jobs, executor=args.executor, scheduler=args.scheduler,
                          allow_remote_scheduler=args.allow_remote_scheduler,
                          max_lookups=args.max_lookups, allow_fallback=args.allow_fallback,
                          progress=not args.no_progress)
    elapsed = time.monotonic() - start
    shared = f", {result.shared} computed by another sweep in the same folder" if result.shared else ""
    print(f"{len(result.rows)} cases: {result.computed} run, {result.reused} reused from {result.out / 'cases'}"
          f"{shared} in {elapsed:.1f} s; tables in {result.out / 'results.csv'} and results.json")
    if not args.no_figures:
        from ..study.draw import write_figures

        figs = write_figures(result.out, result.rows, quick=args.quick)
        print(f"{len(figs)} figures (PNG and SVG) in {result.out / 'figures'}")
    if result.failed:
        for row in result.failed:
            print(f"failed: {row['machine']} × {row['network']} batch {row['batch']} "
                  f"({row['checkpoint']}, {row['updates']}, {row['phase']}): {row['error']}", file=sys.stderr)
        print(f"memwall sweep: {len(result.failed)} of {len(result.rows)} cases failed", file=sys.stderr)
        return 1
    return 0
