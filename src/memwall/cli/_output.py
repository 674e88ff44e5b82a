"""What every subcommand prints the same way: JSON documents and validation reports.

Owns :func:`print_json` (every JSON document the CLI prints carries
``"schema_version"``, :data:`memwall.schema.SCHEMA_VERSION`, added here and nowhere
else; a list carries it in each object, so a reader of the list keeps working; a NaN or
infinity is refused, never written as a token no JSON reader takes) and
:func:`report` (``memwall machines validate`` / ``memwall networks validate``: every
problem of every file, the counts on stderr, exit 1 if any file is invalid).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import InputError
from ..schema import SCHEMA_VERSION
from ..text import non_finite, printable


def stamped(document: Any) -> Any:
    """``document`` with the schema version first in it (in each object of a list)."""
    if isinstance(document, dict):
        return {"schema_version": SCHEMA_VERSION, **document}
    if isinstance(document, list):
        return [stamped(item) if isinstance(item, dict) else item for item in document]
    return document


def print_json(document: Any, indent: int = 1, default: Callable[[Any], Any] | None = None) -> None:
    """``document`` as JSON on stdout, or nothing and an InputError naming the first key
    that holds NaN or an infinity (JSON has neither: a reader would choke on the token)."""
    document = stamped(document)
    try:
        text = json.dumps(document, indent=indent, default=default, allow_nan=False)
    except ValueError:
        where = next(non_finite(document), None)
        if where is None:  # not a number's fault (a circular reference): a bug, shown as one
            raise
        raise InputError(f"the output holds a number that is not finite at {where[0] or 'the top'} ({where[1]!r}): "
                         "not printed, as JSON has no NaN or Infinity; check the figures that made it") from None
    sys.stdout.write(text + "\n")


def report(paths: Iterable[str], check: Callable[[str], tuple[list[InputError], list[InputError]]],
           strict: bool = False) -> int:
    """Print each file's problems (and warnings); 0 if every file is valid, else 1.

    ``check(path)`` gives (problems, warnings); ``strict`` counts warnings as problems.
    """
    paths = list(paths)
    bad = warned = 0
    for path in paths:
        errors, warnings = check(path)
        for err in errors:
            print(printable(str(err)))
        for warning in warnings:
            print(printable(("" if strict else "warning: ") + str(warning)))
        bad += bool(errors or (strict and warnings))
        warned += len(warnings)
    extra = f"; {warned} warning(s){' (counted as problems: --strict)' if strict else ''}" if warned else ""
    print(f"{len(paths) - bad} of {len(paths)} file(s) valid{extra}", file=sys.stderr)
    return 1 if bad else 0


def add_catalogue(subparsers: Any, name: str, *, help: str, description: str, noun: str, show_metavar: str,
                  show_help: str, show_description: str, validate_description: str,
                  list_func: Callable[[Any], int], show_func: Callable[[Any], int],
                  validate_func: Callable[[Any], int]) -> None:
    """A data catalogue's subcommand (``memwall networks``, ``memwall frameworks``): ``list
    [--json]``, ``show ID [--json]`` and ``validate FILE...``; ``show`` reads its id as ``noun``."""
    parser = subparsers.add_parser(name, help=help, description=description)
    sub = parser.add_subparsers(dest=f"{name}_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    p = sub.add_parser("list", help=f"one row per {noun}", description=f"One row per shipped {noun}.")
    p.add_argument("--json", action="store_true", help="a JSON list of objects")
    p.set_defaults(func=list_func)
    p = sub.add_parser("show", help=show_help, description=show_description)
    p.add_argument(noun, metavar=show_metavar)
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=show_func)
    p = sub.add_parser("validate", help=f"check {noun} files; every problem by file, line, field and reason",
                       description=validate_description)
    p.add_argument("paths", nargs="+", metavar="FILE", help=f"{noun} .toml files")
    p.set_defaults(func=validate_func)
