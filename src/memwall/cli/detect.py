"""``memwall machines detect``: describe and measure this host, and write its profile.

Owns only the command line; :mod:`memwall.host` reads the system, measures and writes.
It adds itself under ``memwall machines`` through the hook ``register_machines`` (see
:mod:`memwall.cli.machines`); it adds no top-level subcommand.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .. import host, profiles
from ..errors import InputError
from . import add_command
from ._output import print_json

DESCRIPTION = (
    "Read this host's caches and clock from the operating system, measure peak FLOP/s "
    "(the best of NumPy matrix products up to 4096, all BLAS threads, fp32 and fp64), the "
    "fraction of it products with a small dimension reach, the cost of one NumPy call "
    "(written as eager dispatch), numpy.matmul's K=1 loop, bandwidth (STREAM-like copy and "
    "triad, per level and main memory), latency (pointer chase) and the last level's "
    "effective size, and write a profile that 'memwall machines validate' accepts. About "
    "a minute; --quick takes seconds."
)


def register(subparsers: Any) -> None:
    """No top-level subcommand: detect lives under ``memwall machines``."""


def register_machines(sub: Any) -> None:
    p = add_command(sub, "detect", cmd_detect, description=DESCRIPTION,
                    help="profile this host: caches from the OS, measured peak, bandwidth and latency")
    p.add_argument("--out", metavar="FILE", help="write the profile here (and FILE.json with the raw "
                                                 "measurements); without it, print the profile")
    p.add_argument("--id", default="host", help="the profile's id (default: host)")
    p.add_argument("--quick", action="store_true", help="every measurement, smaller and shorter (seconds)")
    p.add_argument("--json", action="store_true", help="print the raw measurements as JSON")


def cmd_detect(args: argparse.Namespace) -> int:
    # Checked before measuring, so a bad --id or --out costs nothing and leaves no file.
    try:
        profiles.check_id(args.id)  # the profile loader's own rule for ids
    except InputError as err:
        raise InputError(err.reason, field="--id") from None
    if args.out is not None:
        from ..paths import writable_file

        writable_file(args.out, field="--out")
        writable_file(args.out + ".json", field="--out")
    detected = host.detect(quick=args.quick, verbose=not args.json, root=host.SYS_CPU)
    if args.out:
        from ..paths import write_error

        try:
            path = host.write_profile(detected, args.out, args.id)
        except OSError as err:
            raise write_error(args.out, err, field="--out") from None
        errors = profiles.validate_paths([path])
        for err in errors:
            print(str(err), file=sys.stderr)
        if not args.json:
            print(host.summary(detected))
            print(f"wrote {path} ({'INVALID' if errors else 'valid'}) and {path}.json")
        if errors:
            return 1
    elif not args.json:
        print(host.summary(detected), file=sys.stderr)
        print(host.profile_toml(detected, args.id))
    if args.json:
        print_json(detected.as_dict(), default=str)
    return 0
