"""``memwall trace``: write the expanded accesses of a step's streams to a file.

Owns the ``trace`` subcommand. The step is lowered by the machine's schedule and every
kernel's streams are expanded in order - one run of each kernel as the engine replays
it (``repeat`` and per-example ``iterations`` are not unrolled). The suffix picks the
format: ``.npz`` (arrays ``addr`` uint64, ``size`` uint32, ``is_write`` uint8) or din
text (``label hexaddr size`` per line, label 0 read / 1 write) for other tools.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from . import add_command
from .step import add_step_arguments, step_from_args

DESCRIPTION = "Lower a step for a machine and write its explicit accesses."


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "trace", cmd_trace, help="write a step's expanded accesses (npz or din)",
                    description=DESCRIPTION)
    p.add_argument("--machine", required=True, metavar="ID", help="machine id or profile path (its schedule)")
    add_step_arguments(p)
    p.add_argument("--out", required=True, metavar="FILE", help="*.npz, or din text for any other suffix")
    p.add_argument("--max-accesses", type=int, default=50_000_000, help="refuse to write more than this many")


def cmd_trace(args: Any) -> int:
    from ..paths import writable_file, write_error
    from ..profiles import load_machine  # profiles are loaded only when a trace is asked for
    from ..simulation.plan import lower_on

    out = writable_file(args.out, field="--out")  # before any work
    machine = load_machine(args.machine)
    step = step_from_args(args)
    nests = [n for k in step.kernels for n in lower_on(machine, k).nests]
    total = sum(n.n_accesses for n in nests)
    if total > args.max_accesses:
        raise InputError(f"the trace would hold {total:,} accesses, over --max-accesses {args.max_accesses:,}",
                         field="--max-accesses")
    try:
        _write(out, nests)
    except OSError as err:
        if out.is_file():  # a torn trace is worse than none
            out.unlink()
        raise write_error(out, err, field="--out") from None
    print(f"{out}: {total:,} accesses from {len(step.kernels)} kernels ({machine.schedule.family} schedule of {machine.id})")
    return 0


def _write(out: Path, nests: list[Any]) -> None:
    if out.suffix == ".npz":
        parts = [n.expand() for n in nests]
        addr = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
        size = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.uint32)
        wr = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.uint8)
        np.savez(out, addr=addr.astype(np.uint64), size=size.astype(np.uint32), is_write=wr.astype(np.uint8))
    else:
        with out.open("w", encoding="ascii") as f:
            for n in nests:
                addr, size, wr = n.expand()
                f.writelines(f"{w} {a:x} {s}\n" for a, s, w in zip(addr.tolist(), size.tolist(), wr.tolist(), strict=True))
