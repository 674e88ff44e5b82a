"""Shared by the figure scripts: run (or resume) the default study into one folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from memwall.execute import sweep as sw
from memwall.study.design import study


def parse(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default="results", type=Path, help="sweep folder (default: ./results)")
    p.add_argument("--quick", action="store_true", help="the small version of the study")
    p.add_argument("--jobs", type=int, default=None, help="parallel cases (default: the cores)")
    return p.parse_args()


def study_rows(args: argparse.Namespace) -> list[dict]:
    """The default study's rows; cases already in ``args.out`` are reused, not rerun."""
    return sw.run_sweep(study(quick=args.quick), args.out, jobs=args.jobs).rows
