"""The figures, one module each, in scikit-learn's Display style: a figure is given its
data as tables and draws them; it never runs the model.

Each module here (other than those starting with ``_``) declares:

- ``NUMBER``, ``NAME`` (its file names: ``figures/NAME.png``, ``.svg``, ``.csv``,
  ``.json``), ``TITLE`` and ``CAPTION`` (the report's caption);
- ``TABLES``: the tables its data holds, in order (the first is ``NAME.csv``, each other
  ``NAME-TABLE.csv``), and ``NEEDS``: what a sweep must hold for it to have data;
- ``OPT_IN``: true if the figure simulates cases of its own and is drawn only when named;
- optionally ``from_rows(rows)``: its tables, where they are a selection of a sweep's
  rows (else :mod:`memwall.study.draw` computes them: see its ``makers``);
- ``draw(data)``: a matplotlib figure (for papers); ``plotly(data)``: the same data as a
  plotly spec, ``{"data": [traces], "layout": {...}}`` (for the report); ``prose(data)``:
  a paragraph of HTML whose numbers come from the data ("" when it has none).

``data`` maps each of ``TABLES`` to its rows (lists of dicts), as
:func:`memwall.study.draw.write_figures` computes and stores them. The registry finds the
modules as :mod:`memwall.cli` finds its subcommands, so a new figure drawn from a sweep's
rows is one new file (one that needs tables of its own adds their computation to
:mod:`memwall.study`).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

REQUIRED = ("NUMBER", "NAME", "TITLE", "CAPTION", "TABLES", "NEEDS", "OPT_IN", "draw", "plotly", "prose")


def _discover() -> dict[str, ModuleType]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        missing = [a for a in REQUIRED if not hasattr(module, a)]
        if missing:
            raise RuntimeError(f"figure module {module.__name__} lacks {', '.join(missing)}")
        if module.NAME != info.name:
            raise RuntimeError(f"figure module {module.__name__} names itself {module.NAME!r}")
        found.append(module)
    numbers = [m.NUMBER for m in found]
    if len(set(numbers)) != len(numbers):
        raise RuntimeError(f"two figure modules share a number: {sorted(numbers)}")
    return {m.NAME: m for m in sorted(found, key=lambda m: m.NUMBER)}


# name -> module, by number
FIGURES: dict[str, ModuleType] = _discover()
# Drawn by every sweep, and drawn only when named (they simulate cases of their own).
NAMES: tuple[str, ...] = tuple(n for n, m in FIGURES.items() if not m.OPT_IN)
OPT_IN: tuple[str, ...] = tuple(n for n, m in FIGURES.items() if m.OPT_IN)


def heading(name: str) -> str:
    """``"NUMBER. TITLE"`` of figure ``name``."""
    module = FIGURES[name]
    return f"{module.NUMBER}. {module.TITLE}"


__all__ = ["FIGURES", "NAMES", "OPT_IN", "heading"]
