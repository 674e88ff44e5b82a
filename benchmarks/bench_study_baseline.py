"""The default study of an earlier commit, run by that commit's code and by this one, interleaved.

Issue 16 asks for "the default study's 442 cases of today in at most half their present
time": the cases of the study as an earlier commit defines it, timed with the code of
that commit and with the code here, on the same machine in one run. Build the earlier
commit in a worktree first (its extension in place, its data beside its package):

    git worktree add --detach ../memwall-old 1cabb6b
    (cd ../memwall-old && python setup.py build_ext --inplace && ln -s ../../era_data src/memwall/era_data)
    python benchmarks/bench_study_baseline.py --old ../memwall-old/src [--repeat 2] [--jobs 2]

Each round lists the earlier study's cases (with the earlier code), then runs
``run_sweep`` over those cases into a fresh folder with each code in turn, in a fresh
interpreter each, and prints both wall times and their ratio; the last line is the median
ratio new / old.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

NEW_SRC = Path(__file__).resolve().parents[1] / "src"

LIST = """
import dataclasses, json, sys
try:
    from memwall.study.design import study
except ImportError:  # a commit before memwall.study
    from memwall.experiments.sweep import study
json.dump([dataclasses.asdict(c) for c in study()], open(sys.argv[1], "w"))
"""

RUN = """
import dataclasses, json, resource, sys, time
from pathlib import Path
try:
    from memwall.execute import sweep as sw
    from memwall.simulation import Case
except ImportError:  # a commit before memwall.execute and memwall.simulation
    from memwall.experiments import sweep as sw
    from memwall.simulate import Case
names = {f.name for f in dataclasses.fields(Case)}
cases = [Case(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items() if k in names})
         for c in json.load(open(sys.argv[1]))]
def cpu():
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
start, start_cpu = time.perf_counter(), cpu()
sw.run_sweep(cases, Path(sys.argv[2]), jobs=int(sys.argv[3]), progress=False)
print(time.perf_counter() - start, cpu() - start_cpu)
"""


def _python(src: Path, code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"bench_study_baseline: the run with {src} failed:\n{done.stderr.strip()}")
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, type=Path, help="the earlier commit's src folder, built in place")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="workers of each sweep (default 2)")
    args = parser.parse_args()
    if args.repeat < 1 or args.jobs < 1:
        parser.error("--repeat and --jobs take whole numbers >= 1")
    if not (args.old / "memwall" / "__init__.py").is_file():
        parser.error(f"--old {args.old}: no memwall package there (give the earlier checkout's src folder)")
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = Path(tmp) / "cases.json"
        _python(args.old, LIST, str(cases))
        count = len(json.loads(cases.read_text()))
        for i in range(args.repeat):
            old, old_cpu = map(float, _python(args.old, RUN, str(cases), str(Path(tmp) / f"old{i}"),
                                              str(args.jobs)).split())
            new, new_cpu = map(float, _python(NEW_SRC, RUN, str(cases), str(Path(tmp) / f"new{i}"),
                                              str(args.jobs)).split())
            ratios.append(new / old)
            cpu_ratios.append(new_cpu / old_cpu)
            print(f"round {i + 1}: {count} cases, earlier code {old:.1f} s ({old_cpu:.1f} s CPU), "
                  f"this code {new:.1f} s ({new_cpu:.1f} s CPU), ratio {new / old:.2f} "
                  f"(CPU {new_cpu / old_cpu:.2f})", flush=True)
    print(f"median ratio this / earlier: {statistics.median(ratios):.2f} wall, "
          f"{statistics.median(cpu_ratios):.2f} CPU (the sweep's process and its workers)")


if __name__ == "__main__":
    main()
