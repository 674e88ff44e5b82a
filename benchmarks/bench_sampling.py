"""The sampling floor: what each choice costs and how far it moves the predictions (issue 31).

Every prediction the validation makes (era_data/measurements: 121 distinct cases) is run
in this process, one group of cases sharing replays after another as a validation worker
runs them, once for each floor asked for and once at the reference floor (``--reference``,
4 M lookups a sample: four times the million the flat floor was, two to twelve spans of
the GPUs' caches). A floor is given either as lookups (``1M``: every machine with large
caches samples at least that many) or as spans (``2x``: that many times the caches' lines,
:func:`memwall.simulation.plan.sample_floor`'s rule); ``default`` is the shipped rule.

For each floor it prints this process's CPU seconds (every thread's: time.process_time) in
all and on the multi-device cases, and the predicted step time against the reference's:
the largest |seconds / reference - 1|, the mean of it, the mean signed (negative: the
floor predicts faster), the cases over 1 %, and the same by machine.

    python benchmarks/bench_sampling.py [--floors default,1M,1x,2x] [--reference 4M] [--json OUT]

About 3 CPU minutes a floor on a 2-core machine (the reference about 3, the rest 1.5-2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial

from memwall.execute.validation import _predictable, _Replays, replay_groups
from memwall.simulation import plan as P
from memwall.simulation import replay as R
from memwall.simulation import run_case
from memwall.simulation.row import case_key
from memwall.study.measurements import load_measurements

SHIPPED = P.sample_floor


def _floor_rule(text: str) -> Callable[[int], int]:
    """``default``, lookups (``1M``, ``500k``, ``250000``) or spans of the caches (``2x``)."""
    text = text.strip().lower()
    if text == "default":
        return SHIPPED
    if text.endswith("x"):
        spans = float(text[:-1])
        if not 0 < spans <= P.CACHE_SPANS:
            raise ValueError(f"{text!r}: spans must be above 0 and at most {P.CACHE_SPANS}")
        return partial(SHIPPED, spans=spans, least=0)
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    number = float(text.rstrip("km")) * scale
    if not 0 < number <= P.MAX_LOOKUPS:  # (NaN and infinity fail this too)
        raise ValueError(f"{text!r}: lookups must be above 0 and at most {P.MAX_LOOKUPS:.3g}")
    lookups = int(number)
    return partial(SHIPPED, spans=0, least=lookups)  # the flat floor of before 2b64656


def predict_all(rule: Callable[[int], int], name: str) -> dict[str, dict]:
    """Every validation prediction with ``rule`` as the floor: key -> seconds, CPU, devices
    (a progress line on stderr every 10 s)."""
    P.sample_floor = rule
    R._REPLAYED.clear()  # a stage replayed at another floor must not answer this one
    out: dict[str, dict] = {}
    cases = _predictable(load_measurements())
    began = said = time.monotonic()
    try:
        for group in replay_groups(cases):
            replays = _Replays()
            for case in group:
                start = time.process_time()
                result = run_case(case, replays=replays)
                out[case_key(case)] = {"machine": case.machine, "devices": case.parallel.devices,
                                       "seconds": result["seconds"], "cpu": time.process_time() - start}
                if time.monotonic() - said >= 10:
                    said = time.monotonic()
                    print(f"  {name}: {len(out)} of {len(cases)} predictions, {said - began:.0f} s", file=sys.stderr,
                          flush=True)
    finally:
        P.sample_floor = SHIPPED
    return out


def compare(runs: dict[str, dict], reference: dict[str, dict]) -> dict:
    errors = {k: runs[k]["seconds"] / reference[k]["seconds"] - 1 for k in reference}
    by_machine: dict[str, list[float]] = defaultdict(list)
    for k, e in errors.items():
        by_machine[reference[k]["machine"]].append(e)
    return {
        "cpu": sum(r["cpu"] for r in runs.values()),
        "cpu_multi_device": sum(r["cpu"] for r in runs.values() if r["devices"] > 1),
        "max_abs_error": max(map(abs, errors.values())),
        "mean_abs_error": sum(map(abs, errors.values())) / len(errors),
        "mean_error": sum(errors.values()) / len(errors),
        "over_1_percent": sum(abs(e) > 0.01 for e in errors.values()),
        "by_machine": {m: {"count": len(v), "max_abs_error": max(map(abs, v)), "mean_error": sum(v) / len(v)}
                       for m, v in sorted(by_machine.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floors", default="default,1M,1x,2x",
                    help="comma-separated: default, lookups (1M, 500k) or spans of the caches (2x)")
    ap.add_argument("--reference", default="4M", help="the floor the others are compared with")
    ap.add_argument("--json", help="write the figures here as JSON")
    args = ap.parse_args()
    try:
        rules = {name: _floor_rule(name) for name in [args.reference, *args.floors.split(",")]}
    except ValueError as err:
        ap.error(f"--floors/--reference: a floor is default, lookups (1M, 500k) or spans (2x): {err}")
    R.REPLAY_THREADS = 1  # one stage after another, as a validation worker replays them
    print(f"load {os.getloadavg()[0]:.2f}")
    reference = predict_all(rules[args.reference], f"reference {args.reference}")
    print(f"reference {args.reference}: {len(reference)} predictions, "
          f"{sum(r['cpu'] for r in reference.values()):.1f} CPU s")
    report: dict[str, dict] = {}
    for name in args.floors.split(","):
        row = report[name] = compare(predict_all(rules[name], name), reference)
        print(f"{name:>8}: {row['cpu']:6.1f} CPU s ({row['cpu_multi_device']:.1f} multi-device); "
              f"max |error| {row['max_abs_error']:.2%}, mean |error| {row['mean_abs_error']:.3%}, "
              f"mean {row['mean_error']:+.3%}, over 1 %: {row['over_1_percent']}")
        for machine, m in row["by_machine"].items():
            if m["max_abs_error"] > 1e-4:
                print(f"          {machine:10s} {m['count']:3d} cases: max {m['max_abs_error']:.2%}, "
                      f"mean {m['mean_error']:+.3%}")
    print(f"load {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"reference": args.reference, "floors": report}, f, indent=1)


if __name__ == "__main__":
    main()
