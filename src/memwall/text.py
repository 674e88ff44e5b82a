"""What memwall prints is fit to print: strings safe on a terminal, numbers finite.

Owns :func:`printable` and :func:`non_finite`. :func:`printable` is the one place every
text printer (``memwall inspect``'s table, ``machines list`` / ``show`` / ``validate``,
``memwall validate``'s table, the one-line error of :func:`memwall.cli.main`) passes what
it prints through. A profile's name, a
measurement's notes or a path typed on the command line may hold an ESC sequence that
clears the screen, retitles the window or hides the rest of the line; each control
character is shown as a visible escape instead (``\\x1b``), so the text stays readable
and says what was there. JSON output needs none of this: the encoder escapes them.
:func:`non_finite` finds the NaN or infinity a result or a JSON document must not hold,
by its key path, for the refusals of :func:`memwall.simulation.result.finished` and
:func:`memwall.cli._output.print_json`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

# C0 but tab and newline, DEL, C1, the bidirectional embeddings, overrides and isolates
# (they reorder what follows on the line), and lone surrogates (undecodable bytes of a
# command-line argument, which the terminal's encoder would refuse).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character shown as a visible escape (newline and tab kept).

    >>> printable("name\\x1b[2J\\ttab")
    'name\\\\x1b[2J\\ttab'
    """
    return _CONTROL.sub(_escape, text)


def non_finite(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(key path, number) of each NaN or infinity in a JSON-like ``value``, in document
    order (``kernels[3].cycles.total``): what a printed document must not hold."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from non_finite(item, f"{path}[{i}]")
