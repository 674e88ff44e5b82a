"""``memwall sweep``: run many cases in parallel, resumably, then draw the figures.

With no --machines/--networks/--batches/--checkpoint it runs the default study (see
:func:`memwall.study.design.study`); with any of them, the product of the given
axes (unset axes: every machine, the classic networks, batch 1, no checkpointing).
Every other case option (memwall.options: --phase, --accumulate, --fusion, --dp ...)
takes a comma list and multiplies the cases by its values: every combination runs, and
a value that does not apply to a combination (--context with --phase train) is left
off it and counted in one line.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..options import Combined, add_case_arguments, combine, option_lists
from . import add_command
from .inspect import _count

DESCRIPTION = __doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].replace("\n", " ")


def _split(values: list[str] | None) -> list[str] | None:
    """Accept both ``--machines a b`` and ``--machines a,b``."""
    if values is None:
        return None
    return [v for item in values for v in item.split(",") if v]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "sweep", run, description=DESCRIPTION,
                    help="sweep machines × networks × batches (× checkpointing), in parallel and resumable")
    p.add_argument("--machines", nargs="+", metavar="ID", help="machine ids or profile paths (BASE@bw=B/s for synthetic)")
    p.add_argument("--networks", nargs="+", metavar="ID", help="network preset ids or preset .toml paths")
    p.add_argument("--batches", "--batch", dest="batch", nargs="+", metavar="B",
                   help="batch sizes (examples, or sequences); a comma list runs every case once for each")
    add_case_arguments(p, lists=True, skip=("batch",))
    p.add_argument("--out", default="results", metavar="DIR", help="sweep folder (default: ./results)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="parallel cases (default: the cores); with 1, a multi-device case also replays its "
                        "stage kinds one after another")
    p.add_argument("--executor", default="local", help="local (processes, default) or dask")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="join this Dask scheduler instead of starting a local cluster. Joining a scheduler "
                        "means exchanging pickled Python objects (tasks, which run as code, and their "
                        "results) with it and with every worker it has: only join one you trust. "
                        "Loopback addresses (127.0.0.1, localhost, ::1) are accepted; any other "
                        "needs --allow-remote-scheduler")
    p.add_argument("--scheduler-timeout", type=_seconds, default=None, metavar="S",
                   help="seconds a --scheduler has to answer before the sweep stops with one line (default 10)")
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
    p.add_argument("--no-validation", action="store_true",
                   help="draw the figures but not the validation against published measurements (its "
                        "predictions are cached per user, so a later sweep or `memwall validate` reuses them)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1e5:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected seconds, more than 0 and at most 1e5, got {text!r}")
    return value


def build_cases(args: argparse.Namespace) -> Combined:
    """The cases a command line asks for: the default study, or machines x networks x
    batches x checkpointing, each once for every combination of the other option lists."""
    from ..study import design, identity

    lists = option_lists(args)
    machines = _split(args.machines)
    networks = _split(args.networks)
    batches, checkpoints = lists.pop("batch", None), lists.pop("checkpoint", None)
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
    return combine(cases, lists)


def run(args: argparse.Namespace) -> int:
    from ..execute import sweep as sw
    from ..simulation import checks

    sw.check_out_dir(args.out)  # before anything is loaded: a bad --out costs nothing
    sw.check_executor(args.executor, args.jobs, args.scheduler, args.allow_remote_scheduler)
    from ..simulation.replay import limit_replay_threads

    limit_replay_threads(args.jobs)
    combined = build_cases(args)
    if combined.skipped:
        print(f"memwall sweep: {combined.note()}", file=sys.stderr)
    cases = combined.cases
    checks.validate(cases)  # every argument checked before any case runs
    if not args.no_figures and not args.no_progress:
        _say_what_follows(args)
    start = time.monotonic()
    result = sw.run_sweep(cases, args.out, jobs=args.jobs, executor=args.executor, scheduler=args.scheduler,
                          allow_remote_scheduler=args.allow_remote_scheduler,
                          max_lookups=args.max_lookups, allow_fallback=args.allow_fallback,
                          scheduler_timeout=args.scheduler_timeout,
                          progress=not args.no_progress)
    elapsed = time.monotonic() - start
    shared = f", {result.shared} computed by another sweep in the same folder" if result.shared else ""
    if result.from_cache:
        shared += f", {result.from_cache} of them from the per-user cache (another folder ran them)"
    print(f"{len(result.rows)} cases: {result.computed} run, {result.reused} reused from {result.out / 'cases'}"
          f"{shared} in {elapsed:.1f} s; tables in {result.out / 'results.csv'} and results.json")
    if not args.no_figures:
        from ..figures import NAMES
        from ..study.draw import write_figures

        only = [n for n in NAMES if n != "validation"] if args.no_validation else None
        figs = write_figures(result.out, result.rows, quick=args.quick, only=only, progress=not args.no_progress,
                             jobs=args.jobs)
        print(f"{len(figs)} figures (PNG and SVG) in {result.out / 'figures'}")
    if result.failed:
        for row in result.failed:
            print(f"failed: {row['machine']} × {row['network']} batch {row['batch']} "
                  f"({row['checkpoint']}, {row['updates']}, {row['phase']}): {row['error']}", file=sys.stderr)
        print(f"memwall sweep: {len(result.failed)} of {len(result.rows)} cases failed", file=sys.stderr)
        return 1
    return 0


def _say_what_follows(args: argparse.Namespace) -> None:
    """The rest of the sweep's estimate: the figures and the validation after the cases."""
    from ..execute.pool import default_jobs
    from ..execute.validation import predictions_to_make
    from ..figures import NAMES
    from ..simulation.plan import FIGURE_SECONDS, PREDICTION_SECONDS, duration

    figures = [n for n in NAMES if n != "validation"]
    text = f"after the cases, {len(figures)} figures (about {duration(len(figures) * FIGURE_SECONDS)})"
    if not args.no_validation:
        needed, todo = predictions_to_make(one_device=args.quick)
        workers = max(1, min(default_jobs(), todo or 1))  # the validation's pool is the machine's, not --jobs
        text += (f" and the validation: {needed} predictions, {needed - todo} already in the cache, about "
                 f"{duration(todo * PREDICTION_SECONDS / workers)}")
    print(f"memwall sweep: {text}", file=sys.stderr)
