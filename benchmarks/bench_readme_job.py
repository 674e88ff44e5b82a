"""Issue 31's end-to-end targets, each timed as a new user meets it, with the load beside it.

Runs, one after another, in a scratch folder with its own per-user cache
(``MEMWALL_CACHE``), each as the installed ``memwall`` command:

1. the README's main job from an empty folder with a cold cache
   (``memwall sweep --out results && memwall report results``);
2. the same into a second folder, the validation cache now warm;
3. ``memwall validate`` with a cold cache (a second, empty cache) and then warm;
4. a 12-case sweep (3 machines x 4 batches of gpt2-small) into a new folder, the
   validation cache warm: its whole time against the time of its cases (the figure the
   sweep prints).

Each line gives the wall time, the 1-minute load average at its start and the issue's
budget at that load (``budget x max(1, load / 1.5)``). Not a test: the machines are
shared and noisy; read the ratios.

    python benchmarks/bench_readme_job.py [--skip-cold-job]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TWELVE = ["--machines", "h100-sxm", "a100-sxm", "v100-sxm2", "--networks", "gpt2-small",
          "--batch", "1", "4", "16", "64"]


def _load() -> float:
    return os.getloadavg()[0]


def _run(label: str, commands: list[list[str]], cwd: Path, env: dict[str, str],
         budget: float | None = None) -> tuple[float, str]:
    load = _load()
    start = time.perf_counter()
    err = ""
    for cmd in commands:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        err += done.stdout + done.stderr
        if done.returncode != 0:
            sys.exit(f"{label}: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    wall = time.perf_counter() - start
    factor = max(1.0, load / 1.5)
    tail = f"; budget {budget:.0f} s x {factor:.2f} = {budget * factor:.0f} s: " \
           f"{'met' if wall <= budget * factor else 'missed'}" if budget else ""
    print(f"{label}: {wall:.1f} s at load {load:.2f}{tail}", flush=True)
    for line in err.splitlines():  # each phase's own time, as the command said it
        if ": done, " in line:
            print(f"  {line.split(': ', 1)[1]}", flush=True)
    return wall, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold-job", action="store_true", help="leave out step 1 (minutes)")
    args = parser.parse_args()
    memwall = [sys.executable, "-m", "memwall"]
    with tempfile.TemporaryDirectory(prefix="bench-readme-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "MEMWALL_CACHE": str(root / "cache")}
        if not args.skip_cold_job:
            _run("README job, cold cache", [[*memwall, "sweep", "--out", "results"],
                                            [*memwall, "report", "results"]], root, env, budget=120)
            _run("README job, warm validation cache", [[*memwall, "sweep", "--out", "results2"],
                                                       [*memwall, "report", "results2"]], root, env, budget=60)
        cold = {**env, "MEMWALL_CACHE": str(root / "cache-cold")}
        _run("memwall validate, cold cache", [[*memwall, "validate"]], root, cold, budget=30)
        _run("memwall validate, warm cache", [[*memwall, "validate"]], root, cold, budget=2)
        wall, err = _run("12-case sweep, new folder, validation cache warm",
                         [[*memwall, "sweep", "--out", "twelve", *TWELVE]], root, cold)
        found = re.search(r"(\d+) cases: \d+ run, \d+ reused .*? in ([\d.]+) s", err)
        if found:  # the sweep's own summary line: its cases' time
            cases = float(found.group(2))
            print(f"  its {found.group(1)} cases took {cases:.1f} s: whole sweep / cases = "
                  f"{wall / max(cases, 1e-9):.2f} (target <= 3)")


if __name__ == "__main__":
    main()
