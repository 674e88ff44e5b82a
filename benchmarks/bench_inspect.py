"""How long `memwall inspect` takes for the cases issues 5 and 16 name, on one core.

Targets: NETtalk per-example on any 1980s profile under a second; a GPT-3 175B step
(batch 1 sequence) on h100-sxm under 30 seconds (issue 5); with ``--presets``, every
shipped preset at batch 1 on h100-sxm under 15 seconds (issue 16). Each case runs in a
fresh process pinned to one core (where the OS allows), best of --repeat runs, so import
time is excluded and the figure is what one case costs inside a sweep.

    python benchmarks/bench_inspect.py [--repeat 3] [--skip-large] [--presets]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CASES = [
    ("cray-1", "nettalk", 1, "per-example"),
    ("vax-11-780", "nettalk", 1, "per-example"),
    ("vax-11-780-fpa", "nettalk", 1, "per-example"),
    ("sun-3-260", "nettalk", 1, "per-example"),
    ("h100-sxm", "affine-48x1024", 1, "minibatch"),
    ("h100-sxm", "affine-48x1024", 16384, "minibatch"),
    ("h100-sxm", "gpt3-175b", 1, "minibatch"),
]

CHILD = """
import json, sys, time
from memwall.simulation import Case, run_case
machine, network, batch, updates = sys.argv[1:5]
best = float("inf")
for _ in range(int(sys.argv[5])):
    t0 = time.perf_counter()
    r = run_case(Case(machine=machine, network=network, batch=int(batch), updates=updates))
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"wall": best, "stall_fraction": r["stall_fraction"], "bound": r["bound"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true", help="leave out GPT-3 175B")
    parser.add_argument("--presets", action="store_true",
                        help="instead: every shipped preset at batch 1 on h100-sxm, once each")
    args = parser.parse_args()
    cases = CASES
    if args.presets:
        from memwall.study.identity import network_ids

        cases = [("h100-sxm", net, 1, "minibatch") for net in network_ids()]
        args.repeat, args.skip_large = 1, False
    pin = ["taskset", "-c", "0"] if sys.platform.startswith("linux") and os.path.exists("/usr/bin/taskset") else []
    print(f"{'machine':<16} {'network':<16} {'batch':>6} {'updates':<12} {'wall s':>8}  bound")
    for machine, network, batch, updates in cases:
        if args.skip_large and network == "gpt3-175b":
            continue
        repeat = 1 if network == "gpt3-175b" else args.repeat
        out = subprocess.run(
            [*pin, sys.executable, "-c", CHILD, machine, network, str(batch), updates, str(repeat)],
            capture_output=True, text=True,
        )
        if out.returncode != 0:
            print(f"{machine:<16} {network:<16} {batch:>6} {updates:<12} failed: {out.stderr.strip()[-200:]}")
            continue
        r = json.loads(out.stdout)
        print(f"{machine:<16} {network:<16} {batch:>6} {updates:<12} {r['wall']:>8.3f}  {r['bound']}")


if __name__ == "__main__":
    main()
