"""``memwall networks``: list, show and validate the network presets of era_data/networks.

Owns the ``networks`` subcommand (``list [--json]``, ``show ID [--json]``,
``validate FILE...``).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..networks import all_networks, check_network_file, load_network
from ..text import printable
from ._output import print_json, report


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("networks", help="list and show network presets",
                                   description="The shipped networks: classics of the 1980s and modern ones.")
    sub = parser.add_subparsers(dest="networks_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    p = sub.add_parser("list", help="one row per network", description="One row per shipped network.")
    p.add_argument("--json", action="store_true", help="a JSON list of objects")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("show", help="one network in full", description="One network (an id or a .toml path).")
    p.add_argument("network", metavar="ID")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("validate", help="check preset files; every problem by file, line, field and reason",
                       description="Check network preset files. Exit 0 if all are valid, 1 otherwise.")
    p.add_argument("paths", nargs="+", metavar="FILE", help="preset .toml files")
    p.set_defaults(func=cmd_validate)


def _count(n: int) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)


def cmd_list(args: Any) -> int:
    nets = all_networks()
    if args.json:
        print_json([n.as_dict() for n in nets])
        return 0
    print(f"{'id':<16} {'kind':<16} {'year':>4} {'parameters':>11} {'connections':>11}  name")
    for n in nets:
        print(printable(f"{n.id:<16} {n.kind:<16} {n.year:>4} {_count(n.parameters):>11} {_count(n.connections):>11}  "
                        f"{n.name}"))
    return 0


def cmd_show(args: Any) -> int:
    n = load_network(args.network)
    d = n.as_dict()
    if args.json:
        print_json(d)
        return 0
    for k, v in d.items():
        if k == "layers" and isinstance(v, list) and v and isinstance(v[0], dict):
            print("layers:")
            for lay in v:
                print(f"  {printable(str(lay['name'])):<22} {lay['type']:<4} in {lay['in']} -> out {lay['out']} kernel {lay['kernel']} "
                      f"stride {lay['stride']} connected {lay['connected']} bias {lay['bias']}"
                      + (" +BN" if lay["batchnorm"] else ""))
        elif isinstance(v, int) and not isinstance(v, bool) and v >= 10_000:
            print(f"{k}: {v:,}")
        else:
            print(printable(f"{k}: {v}"))
    return 0


def _check(path: str) -> tuple[list[InputError], list[InputError]]:
    return check_network_file(path)[1], []


def cmd_validate(args: Any) -> int:
    return report(args.paths, _check)
