"""Every shipped multi-device case and GPT-3 175B on 1,024 A100s, timed before and after (issue 31).

For each distinct multi-device case of the shipped validation set (era_data/measurements,
dp x tp x cp x pp > 1) and GPT-3 175B on 1,024 A100s (dp 8, tp 8, pp 16, 64 micro-batches,
full checkpointing), in one process, one case after another:

- cold: the case as a fresh process runs it (this process's replays forgotten), with the
  exact reuse; the replay and the timing both;
- timing before / after: the same case again with its replays kept (the engine's part is
  the same counters either way), before = every machine the sensitivity moves a figure of
  times the stages afresh and each kernel's demand is counted again
  (devices.REUSE_TIMED False, replay.DEMAND_KEPT 0), after = the exact reuse (stage
  timings shared by machines that differ only in their links, the demand counted once per
  lowering, the communication worked out once); best of --repeat each, interleaved; the
  result JSON of before must equal after's bit for bit;
- shapes: the opt-in approximation (run_parallel(..., reuse_shapes=True)) cold, and its
  error: predicted seconds / exact - 1;
- with --stages-apart: the cold case again with each pipeline stage replayed on its own
  (replay.REUSE_STAGES False: no runs shared between the stages), its CPU seconds beside
  the cold run's and its result, which must equal the cold run's bit for bit.

Times are this process's CPU seconds (time.process_time, every thread's), which a shared
machine's load moves far less than wall time; the cold run's wall time is printed beside
them (its stage kinds replayed side by side on a thread a core, replay.replay_threads), and
with --one-thread the cold run's wall time with them one after another (the result must be
the same), and the load (1-minute average) at the start and the end.

    python benchmarks/bench_multidevice.py [--only SUBSTRING] [--no-shapes] [--repeat 2] [--one-thread]
                                           [--stages-apart]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from memwall.profiles import load_machine
from memwall.simulation import Case, run_case
from memwall.simulation import devices as D
from memwall.simulation import replay as R
from memwall.study.measurements import load_measurements
from memwall.study.validation import case_for

KEPT = R.DEMAND_KEPT
GPT3 = Case(machine="a100-sxm", network="gpt3-175b", batch=1, accumulate=64, dp=8, tp=8, pp=16,
            checkpoint="every:1", optimizer="adam", dtype="bf16", seq_len=2048)


def cases() -> list[Case]:
    out: list[Case] = []
    for m in load_measurements():
        c = case_for(m)
        if c.gemm is None and c.parallel.devices > 1 and c not in out:
            out.append(c)
    return [*out, GPT3]


def _timed(case: Case, *, exact_reuse: bool = True, shapes: bool = False, cold: bool = False,
           wall: list[float] | None = None, stages_apart: bool = False) -> tuple[float, dict]:
    if cold:
        R._REPLAYED.clear()
    R._DEMAND.clear()
    D.REUSE_TIMED = exact_reuse
    R.DEMAND_KEPT = KEPT if exact_reuse else 0
    R.REUSE_STAGES = not stages_apart
    try:
        start, clock = time.process_time(), time.perf_counter()
        r = D.run_parallel(case, load_machine(case.machine), reuse_shapes=True) if shapes else run_case(case)
        if wall is not None:
            wall.append(time.perf_counter() - clock)
        return time.process_time() - start, r.to_json()
    finally:
        D.REUSE_TIMED, R.DEMAND_KEPT, R.REUSE_STAGES = True, KEPT, True


def label(c: Case) -> str:
    p = c.parallel
    net = os.path.basename(str(c.network)).removesuffix(".toml")
    return (f"{c.machine} {net} {c.dtype or ''} dp{p.dp} tp{p.tp} pp{p.pp}" + (f" cp{p.cp}" if p.cp > 1 else "")
            + (f" z{p.zero}" if p.zero else "") + f" b{c.batch} m{c.accumulate} {c.checkpoint or ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="cases whose label contains this")
    parser.add_argument("--no-shapes", action="store_true", help="leave out the reuse_shapes approximation")
    parser.add_argument("--repeat", type=int, default=2, help="timing before/after: best of this many each")
    parser.add_argument("--stages-apart", action="store_true",
                        help="also the cold case with each pipeline stage replayed on its own (CPU seconds)")
    parser.add_argument("--one-thread", action="store_true",
                        help="also the cold case with its stage kinds replayed one after another (its wall time)")
    args = parser.parse_args()
    todo = [c for c in cases() if not args.only or args.only in label(c)]
    print(f"load at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {len(todo)} cases")
    one_thread = f"{'1-thread wall s':>15} " if args.one_thread else ""
    shapes = "" if args.no_shapes else f"{'shapes s':>8} {'ratio':>6} {'error':>8}"
    apart_head = f"{'apart s':>7} {'ratio':>6} " if args.stages_apart else ""
    print(f"{one_thread}{apart_head}{'wall s':>6} {'cold s':>7} {'timing before s':>15} {'after s':>7} {'ratio':>6} {'equal':>5} "
          f"{shapes}  case")
    worst = 0.0
    totals = [0.0, 0.0, 0.0, 0.0, 0.0]
    over, over_wall = [], []
    for c in todo:
        wall: list[float] = []
        one = ""
        if args.one_thread:
            R.REPLAY_THREADS = 1
            try:
                _, j1 = _timed(c, cold=True, wall=wall)
            finally:
                R.REPLAY_THREADS = None
            one = f"{wall.pop():15.2f} "
        tc, jc = _timed(c, cold=True, wall=wall)
        apart = ""
        if args.stages_apart:
            tp, jp = _timed(c, cold=True, stages_apart=True)
            assert json.dumps(jp, sort_keys=True) == json.dumps(jc, sort_keys=True), "sharing stages changed a result"
            totals[4] += tp
            apart = f"{tp:7.2f} {tp / tc:5.2f}x "
        if args.one_thread:
            assert json.dumps(j1, sort_keys=True) == json.dumps(jc, sort_keys=True), "threads changed a result"
        tb = ta = float("inf")
        equal = True
        for _ in range(args.repeat):
            t, jb = _timed(c, exact_reuse=False)
            tb = min(tb, t)
            t, ja = _timed(c)
            ta = min(ta, t)
            equal = equal and json.dumps(jb, sort_keys=True) == json.dumps(ja, sort_keys=True) == json.dumps(
                jc, sort_keys=True)
        for i, t in enumerate((tc, tb, ta)):
            totals[i] += t
        if tc > (5.0 if c is GPT3 else 2.0):
            over.append(label(c))
        if wall[0] > (5.0 if c is GPT3 else 2.0):
            over_wall.append(label(c))
        line = f"{one}{apart}{wall[0]:6.2f} {tc:7.2f} {tb:15.2f} {ta:7.2f} {tb / ta:5.2f}x {'yes' if equal else 'NO':>5}"
        if not args.no_shapes:
            ts, js = _timed(c, shapes=True, cold=True)
            err = js["seconds"] / jc["seconds"] - 1
            worst = max(worst, abs(err))
            totals[3] += ts
            line += f" {ts:8.2f} {tc / ts:5.2f}x {err:+8.3%}"
        print(f"{line}  {label(c)}", flush=True)
    print(f"total cold {totals[0]:.1f} s; timing before {totals[1]:.1f} s, after {totals[2]:.1f} s "
          f"({totals[1] / totals[2]:.2f}x)" + ("" if args.no_shapes else
                                               f"; reuse_shapes cold {totals[3]:.1f} s ({totals[0] / totals[3]:.2f}x), "
                                               f"worst error {worst:.3%}"))
    if args.stages_apart:
        print(f"cold with each stage apart {totals[4]:.1f} s, sharing their runs {totals[0]:.1f} s "
              f"({totals[4] / totals[0]:.2f}x), every result equal bit for bit")
    print(f"over target (2 s a case, 5 s GPT-3 on 1,024): {len(over)} of {len(todo)} in CPU seconds, "
          f"{len(over_wall)} in wall seconds (stage kinds side by side on {R.replay_threads()} threads)")
    print(f"load at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
