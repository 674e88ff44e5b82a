"""``memwall validate``: memwall's predictions against published measurements.

Reads the shipped measurement set (or the ``*.toml`` files of ``--measurements DIR``),
predicts each with :func:`memwall.simulation.run_case`, and prints one row per case and the
summary (or, with ``--json``, ``{"cases": [...], "summary": {...}}``). The comparison
itself lives in :mod:`memwall.study.validation`.

Exit status: 0 when every case was predicted; 1 when any was not (an unknown machine or
network, or an error), each named on stderr with its reason; 2 when there is nothing to
validate (no measurement in the folder) or a file is bad.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..text import printable
from . import add_command
from ._output import print_json

DESCRIPTION = (
    "Predict every published measurement (era_data/measurements, or the TOML files in DIR) "
    "and print measured, predicted, predicted / measured, the bound memwall names and the note; "
    "then the median and worst |log2 ratio| and the share within 2x."
)


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "validate", run, help="compare predictions with published measurements",
                    description=DESCRIPTION)
    p.add_argument("--measurements", metavar="DIR", help="a folder (or one file) of measurement TOML files")
    p.add_argument("--json", action="store_true", help="print {cases, summary} as JSON")
    p.add_argument("--figure", metavar="OUT_DIR", help="also write validation.png and validation.svg here")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="worker processes for the predictions (default: the cores); with 1, a multi-device "
                        "case also replays its stage kinds one after another")
    p.add_argument("--write-intervals", nargs="?", const="", metavar="PATH",
                   help="calibrate the prediction intervals on these measurements and write them (default: the "
                        "shipped era_data/intervals.toml; docs/intervals.md), then report with them")
    p.add_argument("--no-progress", action="store_true",
                   help="say nothing while predicting (progress goes to stderr, never into --json)")


def run(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from ..execute.validation import predict_measurements, validation_figure
    from ..simulation.intervals import load_calibration
    from ..study.intervals import stale, write_calibration
    from ..study.measurements import load_measurements
    from ..study.validation import format_table, summarize, to_json, with_intervals

    measurements = load_measurements(args.measurements)
    if not measurements:
        where = args.measurements or "the shipped measurement set"
        raise InputError("no measurement to validate (no [[measurement]] in any *.toml file)", file=str(where))
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {args.jobs}", field="--jobs")
    from ..simulation.replay import limit_replay_threads

    limit_replay_threads(args.jobs)
    # predictions are stored in the per-user cache (memwall.execute.cache): a second run, or a
    # sweep's validation, predicts only what the model has not predicted before
    results = predict_measurements(measurements, jobs=args.jobs, progress=not args.no_progress)
    calibration = load_calibration()
    if args.write_intervals is not None:  # calibrated on these results, then reported with
        path, calibration, stats = write_calibration(
            results, args.write_intervals or None,
            measurements=f"the files in {args.measurements}" if args.measurements else "the shipped set")
        results = with_intervals(results, calibration)
        print(printable(f"wrote {path}: {len(calibration.groups)} groups from {stats['point_checks']} point checks "
                        f"of speed; {stats['in_sample_covered']} of {stats['in_sample_checks']} inside their "
                        f"interval, {stats['leave_one_out_covered']} of {stats['leave_one_out_checks']} "
                        "calibrated on the others alone"), file=sys.stderr)
    else:
        warning = stale(calibration)
        if warning:  # the intervals still apply: said, never refused
            print(printable(f"memwall validate: warning: {warning}"), file=sys.stderr)
    if args.figure:
        paths = validation_figure(results, args.figure)
        print(printable("wrote " + ", ".join(str(p) for p in paths)), file=sys.stderr)
    if args.json:
        print_json(to_json(results, calibration), indent=2)
    else:
        print(printable(format_table(results, summarize(results, calibration))))
    missed = [r for r in results if r.status != "ok"]
    for r in missed:
        print(printable(f"memwall validate: not predicted: {r.id} ({r.status}): {r.error}"), file=sys.stderr)
    if missed:
        print(f"memwall validate: {len(missed)} of {len(results)} cases not predicted", file=sys.stderr)
        return 1
    return 0
