"""The validation figure: predicted against measured for a validation's cases.

The judge (:func:`~memwall.study.validation.validate` and its summary) is
:mod:`memwall.study.validation`'s; validating a sweep folder, its predictions made on the
worker processes, is :mod:`memwall.execute.validation`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..study.validation import ERAS, CaseResult


def validation_figure(cases: Iterable[CaseResult], out_dir: str | Path) -> list[Path]:
    """Figure 7 (:mod:`memwall.figures.validation`) of ``cases``, its points coloured by
    :data:`ERAS`: writes ``validation.png`` and ``validation.svg`` into out_dir and returns
    their paths."""
    from ..figures import validation
    from ..figures._style import save

    data = {"cases": [c.as_dict() for c in cases],
            "eras": [{"name": name, "first": lo, "last": hi} for name, lo, hi in ERAS]}
    return save(validation.draw(data), out_dir, "validation")
