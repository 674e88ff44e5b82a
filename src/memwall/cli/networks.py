"""``memwall networks``: list, show and validate the network presets of era_data/networks.

Owns the ``networks`` subcommand (``list [--json]``, ``show ID [--json]``,
``validate FILE...``).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..networks import all_networks, check_network_file, load_network
from ..text import printable
from ._output import add_catalogue, print_json, report


def register(subparsers: Any) -> None:
    add_catalogue(subparsers, "networks", help="list and show network presets",
                  description="The shipped networks: classics of the 1980s and modern ones.", noun="network",
                  show_metavar="ID", show_help="one network in full",
                  show_description="One network (an id or a .toml path).",
                  validate_description="Check network preset files. Exit 0 if all are valid, 1 otherwise.",
                  list_func=cmd_list, show_func=cmd_show, validate_func=cmd_validate)


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
