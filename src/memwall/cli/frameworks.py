"""``memwall frameworks``: list, show and validate the framework files of era_data/frameworks.

Owns the ``frameworks`` subcommand (``list [--json]``, ``show ID [--json]``,
``validate FILE...``).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ..frameworks import HOST_FIGURES, framework_ids, load_framework, load_framework_file
from ..text import printable
from ..units import format_time
from ._output import add_catalogue, print_json, report


def register(subparsers: Any) -> None:
    add_catalogue(subparsers, "frameworks", help="list and show the frameworks and runtimes a step can run with",
                  description="The frameworks and runtimes (era_data/frameworks): the host time each adds around "
                              "the kernels, and the base latency of its collectives (docs/timing.md, 'The "
                              "framework').", noun="framework", show_metavar="ID",
                  show_help="one framework with each figure's source",
                  show_description=f"One framework ({', '.join(framework_ids())}): its figures, their sources "
                                   "and status.",
                  validate_description="Check framework files. Exit 0 if all are valid, 1 otherwise.",
                  list_func=cmd_list, show_func=cmd_show, validate_func=cmd_validate)


def _time(value: float, stated: bool) -> str:
    return ("0" if value == 0 else format_time(value)) if stated else "-"


def cmd_list(args: Any) -> int:
    frameworks = [load_framework(i) for i in framework_ids()]
    if args.json:
        print_json([f.as_dict() for f in frameworks])
        return 0
    print(f"{'id':<14} {'dispatch':<9} {'operator':>9} {'layer':>9} {'step':>9} {'sync':>9} {'coll. base':>10}  name")
    for f in frameworks:
        stated = {k: f"host.{k}" not in f.unstated and f.id != "hand-written" for k in HOST_FIGURES}
        cells = [_time(getattr(f, k), stated[k]) for k in HOST_FIGURES]
        base = _time(f.collective_base, "collectives.base" not in f.unstated and f.id != "hand-written")
        print(printable(f"{f.id:<14} {f.dispatch or '-':<9} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {cells[3]:>9} "
                        f"{base:>10}  {f.name}"))
    print("-: not stated (counted as 0); hand-written adds nothing around the kernels")
    return 0


def cmd_show(args: Any) -> int:
    f = load_framework(args.framework)
    if args.json:
        print_json({**f.as_dict(), "provenance": {k: vars(v) for k, v in f.provenance.items()},
                    "sources": dict(f.sources)})
        return 0
    print(printable(f"{f.id}: {f.name} ({f.version}); dispatch {f.dispatch or 'the machine default'}"))
    for key, fig in f.provenance.items():
        source = f.sources.get(fig.source or "", fig.source or "")
        print(printable(f"  {key} = {fig.value} [{fig.status}] {source}"))
        if fig.derivation:
            print(printable(f"      derivation: {fig.derivation}"))
    if f.gradients is not None:
        print(f"  collectives.gradients = {f.gradients}: the data-parallel gradient reduction "
              + ("runs after the backward, waited for" if f.gradients == "after-backward"
                 else "hides behind the last micro-batch's backward"))
    if f.weights is not None:
        print(f"  collectives.weights = {f.weights}: ZeRO 1-2's updated weights all-gather "
              + ("hides behind the next step's first forward, in buckets" if f.weights == "overlapped"
                 else "runs after the update, waited for"))
    if f.unstated:
        print(printable(f"  unstated (counted as 0): {', '.join(f.unstated)}"))
    return 0


def _check(path: str) -> tuple[list[InputError], list[InputError]]:
    try:
        load_framework_file(path)
    except InputError as err:
        return [err], []
    return [], []


def cmd_validate(args: Any) -> int:
    return report(args.paths, _check)
