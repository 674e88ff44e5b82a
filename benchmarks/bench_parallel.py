"""How long a multi-device step takes to time, on one core (issue 13's speed target).

Target: a GPT-3 175B step on 1024 H100s with dp x tp x pp = 1024 timed in under 30 s on
one core. Identical devices and stages are simulated once, so the cost is that of the
distinct stage kinds (first, middle, last), each replayed like a one-device step of its
shard. Each case runs in a fresh process pinned to one core (where the OS allows); the
figure is the best of --repeat runs, import time excluded.

    python benchmarks/bench_parallel.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

# (machine, network, micro-batch, accumulate, dp, tp, pp, zero, checkpoint)
CASES = [
    ("h100-sxm", "gpt3-175b", 1, 16, 16, 8, 8, 1, "selective"),  # 16 x 8 x 8 = 1024 devices
    ("h100-sxm", "gpt3-175b", 1, 64, 8, 8, 16, 0, "every:1"),  # 8 x 8 x 16 = 1024 devices
    ("a100-sxm", "gpt3-175b", 1, 1, 128, 8, 1, 3, "every:1"),  # 128 x 8 = 1024, ZeRO-3, one stage
]

CHILD = """
import json, sys, time
from memwall.simulation import Case, run_case
m, net, b, k, dp, tp, pp, z, ck, repeat = sys.argv[1:11]
best = float("inf")
for _ in range(int(repeat)):
    t0 = time.perf_counter()
    r = run_case(Case(machine=m, network=net, batch=int(b), accumulate=int(k), dp=int(dp), tp=int(tp), pp=int(pp),
                      zero=int(z), checkpoint=ck, optimizer="adam"))
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"wall": best, "devices": r["devices"], "seconds": r["seconds"], "bound": r["bound"],
                  "hfu": r["hfu"], "stages": len(r["stages"])}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    pin = ["taskset", "-c", "0"] if sys.platform.startswith("linux") and os.path.exists("/usr/bin/taskset") else []
    print(f"{'machine':<10} {'network':<10} {'dp':>4} {'tp':>3} {'pp':>3} {'zero':>4} {'m':>4} {'devices':>7} "
          f"{'step s':>8} {'HFU':>6} {'stages':>6} {'wall s':>7}  bound")
    for machine, network, b, k, dp, tp, pp, zero, ck in CASES:
        out = subprocess.run([*pin, sys.executable, "-c", CHILD, machine, network, str(b), str(k), str(dp), str(tp),
                              str(pp), str(zero), ck, str(args.repeat)], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{machine:<10} {network:<10} failed: {out.stderr.strip()[-300:]}")
            continue
        r = json.loads(out.stdout)
        print(f"{machine:<10} {network:<10} {dp:>4} {tp:>3} {pp:>3} {zero:>4} {k:>4} {r['devices']:>7} "
              f"{r['seconds']:>8.3g} {100 * r['hfu']:>5.1f}% {r['stages']:>6} {r['wall']:>7.2f}  {r['bound']}")


if __name__ == "__main__":
    main()
