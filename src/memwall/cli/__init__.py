"""The ``memwall`` command: one subcommand per module of this package.

Each module here defines ``register(subparsers)``, which adds its subcommand and sets
``func`` on its parser. Bad input (:class:`memwall.errors.InputError`) is printed as one
line naming the file, line or field (its control characters shown as escapes:
:func:`memwall.text.printable`), with exit status 2. SIGTERM is turned into an
exception, so every ``finally`` runs (a sweep stops its workers and frees its claims)
and the exit status is 143; Ctrl-C gives 130.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import pkgutil
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__
from ..errors import InputError
from ..text import printable


def _version_text() -> str:
    try:
        from .. import _csim

        engine = f"engine memwall._csim ({_csim.ENGINE_NAME})"
    except ImportError as err:  # reported, never silently replaced
        engine = f"engine missing: {err}"
    from ..data import data_version

    return f"memwall {__version__}; {engine}; era_data {data_version()}"


class _VersionAction(argparse.Action):
    """--version, with the data hash computed only when asked for (not on every start)."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        print(_version_text())
        parser.exit()


def add_command(subparsers: Any, name: str, func: Callable[[argparse.Namespace], int], *, help: str,
                description: str) -> argparse.ArgumentParser:
    """The parser of one subcommand: ``help`` is its line in ``memwall --help``,
    ``description`` opens ``memwall NAME --help``, ``func`` runs it."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(func=func)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memwall",
        description=(
            "Replay backprop's memory traffic through real machines' memory hierarchies "
            "and count the cycles stalled on memory."
        ),
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the memwall, engine and era_data versions and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C, so cleanup code runs."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


_FULL = (errno.ENOSPC, errno.EDQUOT)  # no room left: a full disk, or the user's quota


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (main() called from a test's thread)
        pass
    try:
        return int(args.func(args) or 0)
    except Terminated:
        print(f"memwall {args.command}: terminated", file=sys.stderr)
        return 143
    except InputError as err:
        print(printable(f"memwall {args.command}: error: {err}"), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as err:
        if err.errno not in _FULL:
            raise
        # the atomic writes leave every finished file whole; what is missing is room
        where = f" writing {err.filename}" if err.filename else ""
        print(printable(f"memwall {args.command}: error: the disk is full{where} ({err.strerror}): free some "
                        "space (or give another --out) and run the same command again: finished work is kept"),
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"memwall {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
