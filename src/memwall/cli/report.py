"""``memwall report DIR``: one self-contained, interactive HTML page of a sweep's figures and tables.

The page is built from what the sweep wrote into DIR (``results.json``, ``figures/``,
``validation.json``) and the shipped profiles; a damaged ``results.json`` is one error
line and exit status 2 (see :func:`memwall.execute.store.read_rows`).
"""

from __future__ import annotations

import argparse

from . import add_command

DESCRIPTION = (
    "Write DIR/report.html: every figure interactive (hover, legend toggles, zoom; plotly.js "
    "embedded), a machine picker with its stall breakdown and provenance, a results table that "
    "sorts and filters. It opens in a browser with no server and no network."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = add_command(subparsers, "report", run, help="write an interactive, offline HTML report of a sweep folder",
                    description=DESCRIPTION)
    p.add_argument("dir", metavar="DIR", help="a folder written by `memwall sweep --out DIR`")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write the page (default: DIR/report.html); its folder must exist")


def run(args: argparse.Namespace) -> int:
    from ..report.page import build_report

    path = build_report(args.dir, args.output)
    print(path)
    return 0
