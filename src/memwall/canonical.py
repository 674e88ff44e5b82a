"""JSON written so that equal values give equal bytes: sorted keys, no NaN literals.

Owns :func:`dumps` (indented, for files a person reads) and :func:`canonical` (one line,
what a stored record's checksum hashes and a key is made from). A leaf: the store, the
keys of cases and machines and the figures' data all write through it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def dumps(value: Any) -> str:
    """JSON with sorted keys and no NaN literals, so equal values give equal bytes."""
    return json.dumps(finite(value), sort_keys=True, indent=1, allow_nan=False) + "\n"


def canonical(value: Any) -> str:
    """One line of JSON with sorted keys, no spaces and no NaN literals (non-finite numbers
    become null, as :func:`dumps` writes them): a stored record's text and what its
    checksum hashes, so equal values give equal bytes.

    Written by the json module's C encoder: the indented text of :func:`dumps` goes through
    its Python encoder, which made writing and checking the records of a sweep's
    hundreds of cases the busiest work of the sweep's own process, beside its workers.
    A value is first encoded as it is and read back, its NaN and infinities as None (keys
    become strings, tuples lists, as the file will give them); only a type the encoder
    refuses (a mapping that is not a dict) is walked in Python."""
    try:
        plain = json.loads(json.dumps(value), parse_constant=lambda _: None)
    except TypeError:
        plain = finite(value)
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=False)


def finite(value: Any) -> Any:
    """``value`` with every NaN and infinity as None (keys as strings, tuples as lists)."""
    # JSON has no NaN or infinity; None is the honest "not a number" in a table.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
