"""``memwall replay``: replay a trace file through a cache hierarchy and print the counts.

Owns only the command line; :mod:`memwall.engine` simulates and :mod:`memwall.traces`
reads the file.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..errors import InputError
from ..traces import FORMATS
from . import add_command
from ._output import print_json

_CLASSIFY_KEYS = ("compulsory", "capacity", "conflict")


DESCRIPTION = (
    "Replay a trace (DineroIV din, extended din 'r|w addr size', valgrind lackey, or "
    "an npz of addr/size/is_write; gzip accepted) through the cache levels of a "
    "hierarchy file or a machine profile, and print per-level counts."
)


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "replay", cmd_replay, help="replay a trace file through a cache hierarchy",
                    description=DESCRIPTION)
    p.add_argument("trace", metavar="TRACE", help="the trace file")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hierarchy", metavar="FILE.toml", help="a file of [[level]] tables")
    src.add_argument("--machine", metavar="ID", help="a machine profile: replay through its cache levels")
    p.add_argument("--format", choices=FORMATS, help="trace format (default: from the file name)")
    p.add_argument("--flush", action="store_true", help="write back every dirty line at the end")
    p.add_argument("--classify", action="store_true", help="split misses into compulsory/capacity/conflict")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _levels(args: argparse.Namespace) -> list[Any]:
    if args.hierarchy:
        from ..levels import load_hierarchy_file

        return load_hierarchy_file(args.hierarchy)
    from ..profiles import load_machine

    machine = load_machine(args.machine)
    levels = list(machine.cache_levels)
    if not levels:
        raise InputError(f"{machine.id} has no cache levels (its loads go straight to memory): there is "
                         "nothing to replay a trace through; give --hierarchy FILE.toml", field="--machine")
    return levels


def cmd_replay(args: argparse.Namespace) -> int:
    from ..engine import Hierarchy
    from ..progress import Phase
    from ..traces import guess_format

    fmt = args.format or guess_format(args.trace)
    options: dict[str, Any] = {}
    if fmt == "npz":
        # zipfile decodes member names with cp437, whose first import costs ~0.7 ms: load
        # it with the other modules, so that cpu_seconds is reading and replaying.
        import encodings.cp437  # noqa: F401

        # A stored npz is mapped, so its chunks are views that cost no memory, and a
        # deflated one's chunk of 1 Mi accesses is 13 MB: fewer chunks, less per-chunk
        # checking (3-4 % of a 1 M-access replay through one level).
        options["chunk"] = 1 << 20
    hierarchy = Hierarchy(_levels(args), classify=args.classify)
    # A bar on a terminal, lines in a log (memwall.progress); made before the clock starts
    # (a bar's first construction costs about 10 ms).
    with Phase("memwall replay", f"replaying {args.trace}", unit="access", delay=2.0) as bar:
        start, cpu_start = time.perf_counter(), time.process_time()
        hierarchy.replay_file(args.trace, fmt, progress=bar.update, **options)
        if args.flush:
            hierarchy.flush()
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start  # (this process's CPU: a shared machine's waits excluded)
    counters = hierarchy.counters()
    result = counters.as_dict()
    if not args.classify:
        for level in result["levels"]:
            for key in _CLASSIFY_KEYS:
                level.pop(key)
    result["seconds"] = seconds
    result["cpu_seconds"] = cpu_seconds
    if args.json:
        print_json(result)
    else:
        print(_table(result, args.classify))
    return 0


def _table(result: dict[str, Any], classify: bool) -> str:
    cols = ["reads", "writes", "read_misses", "write_misses"]
    cols += list(_CLASSIFY_KEYS) if classify else []
    cols += ["writebacks", "bytes_in", "bytes_out"]
    if any(lv["back_invalidations"] for lv in result["levels"]):
        cols.append("back_invalidations")
    names = [lv["name"] for lv in result["levels"]] + ["memory"]
    width = max(8, *(len(n) for n in names))
    widths = [max(len(c), *(len(f"{lv[c]:,}") for lv in result["levels"])) for c in cols]
    lines = [f"{'level':<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True))]
    for lv in result["levels"]:
        cells = "  ".join(f"{lv[c]:>{w},}" for c, w in zip(cols, widths, strict=True))
        miss = lv["read_misses"] + lv["write_misses"]
        look = lv["reads"] + lv["writes"]
        rate = f"  miss rate {miss / look:.4f}" if look else ""
        lines.append(f"{lv['name']:<{width}}  {cells}{rate}")
    m = result["memory"]
    lines.append(f"{'memory':<{width}}  reads {m['reads']:,}  writes {m['writes']:,}  "
                 f"bytes_read {m['bytes_read']:,}  bytes_written {m['bytes_written']:,}")
    rate = result["accesses"] / result["seconds"] / 1e6 if result["seconds"] > 0 else 0.0
    lines.append(f"{result['accesses']:,} accesses in {result['seconds']:.3f} s ({rate:.1f} M/s)")
    return "\n".join(lines)
