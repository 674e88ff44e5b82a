"""The default study's time with replays shared and without, interleaved in one run.

Cases that differ only in what the engine never sees (the synthetic bandwidth sweep,
machines that share their caches and schedule, dispatch modes) share one replay
(issue 16, item 2). This runs the study into fresh folders alternately with the sweep's
replay store and with every case replaying its own step, on one worker, and reports
each run's time and the ratio (median over --repeat pairs).

    python benchmarks/bench_sweep.py [--quick] [--repeat 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from memwall.execute import sweep as sw
from memwall.simulation import run_case
from memwall.study.design import study


def _own_replay(case, machine=None):  # noqa: ANN001, ANN202 - a sweep runner
    return run_case(case, machine=machine)


def _timed(cases: list, out: Path, shared: bool) -> float:
    start = time.perf_counter()
    sw.run_sweep(cases, out, jobs=1, progress=False, runner=None if shared else _own_replay)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick study (39 cases) instead of the full one")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    cases = study(quick=args.quick)
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            own = _timed(cases, Path(tmp) / f"own{i}", shared=False)
            shared = _timed(cases, Path(tmp) / f"shared{i}", shared=True)
            pairs.append((own, shared))
            print(f"run {i + 1}: {len(cases)} cases, own replays {own:.1f} s, shared replays {shared:.1f} s, "
                  f"ratio {shared / own:.2f}")
    print(f"median ratio shared / own: {statistics.median(s / o for o, s in pairs):.2f}")


if __name__ == "__main__":
    main()
