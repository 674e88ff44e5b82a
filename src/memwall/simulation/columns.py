"""What a column of a results table is: a name, a type, a unit, a short label and a doc.

Owns: :class:`Column` and the Python types each column type allows. The results row
(:mod:`memwall.simulation.row`) and the serving group of a result (:mod:`memwall.simulation.result`)
declare their columns with it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of the results row: its type (``text``, ``int``, ``number``, ``flag``), unit,
    a table's short label, and what it holds. ``required``: every row a sweep writes has it
    (of that type); the others are that type or null. ``leading``: among the leading
    columns of results.csv, in declared order (the rest follow as rows have them)."""

    name: str
    type: str
    unit: str
    label: str
    doc: str
    required: bool = False
    leading: bool = True
    setting: bool = False  # says how the case was set up (shown beside the case), not what it measured


TYPES = {"text": (str,), "int": (int,), "number": (int, float), "flag": (bool,)}

