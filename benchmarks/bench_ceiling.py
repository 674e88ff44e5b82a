"""memwall's engine next to the shared speed ceiling, ``cachelimit.c`` (not a timed test).

Issue 31's yardstick for the engine (it replaces ``bench_c.py``'s C replay for that
target; ``bench_c.py`` stays for its other figures). In a temporary folder, never in
the repository, this

* compiles the ceiling's plain-C replay (``../shared/ceiling/cachelimit.c``, the same
  semantics as /ENGINE_SEMANTICS.md) twice with ``gcc -O3 -march=native``: the scalar
  build (``-DNO_SIMD``) and the SIMD build (AVX-512 tag compares where the CPU has them);
* generates the ceiling's traces with the ceiling's own generator (``dump_traces.py``,
  which checks each trace's sha256 and writes DineroIV's expected counts beside it):
  seq, strided, random, matmul, mlp;
* on each trace x hierarchy pair (hier3, dm8k: 10 pairs) times, side by side, in rounds
  (each round runs every pair once, the contenders one after another, so the slow streaks
  of a shared machine hit all of them), best over the rounds:

  - ``scalar C`` and ``SIMD C``: the binaries' own best of ``--c-reps`` replays (replay
    and final flush; reading the file and resetting the tags untimed);
  - ``arrays``: ``Hierarchy.replay`` of the same NumPy arrays and ``Hierarchy.flush``
    (the arrays' checks included; the reset before it untimed), best of ``--c-reps``;
  - ``file``: ``Hierarchy.replay_file`` of the trace written as npz (reading, checking and
    replaying it) and ``flush``, best of ``--c-reps``.

  Every contender's per-level counters (reads, writes, read and write misses, write-backs,
  bytes in and out, after the flush) must agree, and the C builds' counts with DineroIV's
  (``check OK``): a fast wrong engine cannot pass.

Times are wall-clock (``perf_counter``; the C binaries use CLOCK_MONOTONIC), the same on
every side. Reported: million accesses per second of each, and the ratios engine / scalar
C, engine / SIMD C and file / arrays, with the targets (>= 0.5 of scalar C, file >= 0.8
of arrays), the 1-minute load average at the start and the end, and the CPU.

    python benchmarks/bench_ceiling.py [--rounds 5] [--c-reps 3] [--only seq,mlp]
        [--hier hier3,dm8k] [--ceiling DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memwall import _csim
from memwall.engine import Hierarchy
from memwall.levels import LevelSpec
from memwall.traces import write_trace

KiB, MiB = 1024, 1024 * 1024
HIERARCHIES = {  # as cachelimit.c's -c hier3 / -c dm8k
    "hier3": [LevelSpec("L1", 32 * KiB, 64, 8), LevelSpec("L2", MiB, 64, 16), LevelSpec("L3", 32 * MiB, 64, 16)],
    "dm8k": [LevelSpec("L1", 8 * KiB, 32, 1)],
}
TRACES = ("seq", "strided", "random", "matmul", "mlp")
FIELDS = ("reads", "writes", "read_misses", "write_misses", "writebacks", "bytes_in", "bytes_out")
TARGET_SCALAR, TARGET_FILE = 0.5, 0.8


def default_ceiling() -> Path:
    env = os.environ.get("MEMWALL_CEILING")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parent.parent
    for cand in (repo / "shared" / "ceiling", repo.parent / "shared" / "ceiling"):
        if (cand / "cachelimit.c").exists():
            return cand
    return repo.parent / "shared" / "ceiling"


def build(ceiling: Path, tmp: Path) -> dict[str, Path]:
    out = {}
    for name, extra in (("scalar", ["-DNO_SIMD"]), ("simd", [])):
        exe = tmp / f"cachelimit_{name}"
        subprocess.run(["gcc", "-O3", "-march=native", *extra, "-o", str(exe), str(ceiling / "cachelimit.c")],
                       check=True)
        out[name] = exe
    return out


def load_bin(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raw = path.read_bytes()
    if raw[:8] != b"CLTRACE1":
        raise SystemExit(f"{path}: not a CLTRACE1 file")
    n = int(np.frombuffer(raw, "<u8", 1, 8)[0])
    addr = np.frombuffer(raw, "<u8", n, 16).astype(np.uint64)
    size = np.frombuffer(raw, "<u4", n, 16 + 8 * n).astype(np.uint32)
    isw = np.frombuffer(raw, "u1", n, 16 + 12 * n).astype(np.uint8)
    return addr, size, isw


def run_c(exe: Path, hname: str, reps: int, trace: Path, expect: Path) -> tuple[float, list[list[int]]]:
    out = subprocess.run([str(exe), "-c", hname, "-r", str(reps), "-e", str(expect), str(trace)],
                         capture_output=True, text=True)
    if out.returncode != 0 or "check OK" not in out.stdout:
        raise SystemExit(f"{exe.name} {hname} {trace.name}: rc {out.returncode}\n{out.stdout}{out.stderr}")
    counts = []
    for line in out.stdout.splitlines():
        m = re.match(r"L\d+ (.*)", line)
        if m:
            words = m.group(1).split()
            counts.append([int(words[words.index(f) + 1]) for f in FIELDS])
    best = float(re.search(r"best_s ([0-9.]+)", out.stdout).group(1))
    return best, counts


def engine_counts(h: Hierarchy) -> list[list[int]]:
    return [[getattr(lv, f) for f in FIELDS] for lv in h.counters().levels]


def run_engine(h: Hierarchy, reps: int, replay) -> tuple[float, list[list[int]]]:
    best = float("inf")
    for _ in range(reps):
        h.reset()
        gc.disable()
        try:
            t = time.perf_counter()
            replay()
            h.flush()
            dt = time.perf_counter() - t
        finally:
            gc.enable()
        best = min(best, dt)
    return best, engine_counts(h)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds over every pair (best is kept)")
    ap.add_argument("--c-reps", type=int, default=3, help="replays per contender per round (best is kept)")
    ap.add_argument("--only", default=",".join(TRACES), help="comma-separated traces")
    ap.add_argument("--hier", default=",".join(HIERARCHIES), help="comma-separated hierarchies")
    ap.add_argument("--ceiling", type=Path, default=None, help="folder of cachelimit.c (default ../shared/ceiling)")
    ap.add_argument("--no-file", action="store_true", help="skip the file replay")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    if args.rounds < 1 or args.c_reps < 1:
        raise SystemExit("--rounds and --c-reps must be at least 1: nothing would be timed or checked")
    unknown = sorted(set(t for t in args.only.split(",") if t) - set(TRACES)) + \
        sorted(set(h for h in args.hier.split(",") if h) - set(HIERARCHIES))
    if unknown:
        raise SystemExit(f"unknown trace or hierarchy: {', '.join(unknown)} (traces {', '.join(TRACES)}; "
                         f"hierarchies {', '.join(HIERARCHIES)})")
    ceiling = args.ceiling or default_ceiling()
    if not (ceiling / "cachelimit.c").exists():
        raise SystemExit(f"no cachelimit.c in {ceiling} (set --ceiling or MEMWALL_CEILING)")
    names = [t for t in args.only.split(",") if t]
    hnames = [h for h in args.hier.split(",") if h]
    load0 = os.getloadavg()[0]
    print(f"CPU {cpu_name()}, {os.cpu_count()} cores; load {load0:.2f} at start; ceiling {ceiling}", flush=True)
    print("engine: a 16-way ordered level compares its tags with "
          + ("AVX-512 (this host has it)" if _csim.SIMD_TAG_COMPARE else "the scalar loop (no AVX-512F here)"), flush=True)
    with tempfile.TemporaryDirectory(prefix="memwall-ceiling-") as tmpdir:
        tmp = Path(tmpdir)
        print("building the C replay (scalar and SIMD) and generating the traces ...", file=sys.stderr, flush=True)
        exes = build(ceiling, tmp)
        subprocess.run([sys.executable, str(ceiling / "dump_traces.py"), "--out", str(tmp), "--only", ",".join(names)],
                       check=True, capture_output=True)
        arrays = {t: load_bin(tmp / f"{t}.bin") for t in names}
        npz = {t: write_trace(tmp / f"{t}.npz", *arrays[t]) for t in names} if not args.no_file else {}
        hier = {h: Hierarchy(HIERARCHIES[h]) for h in hnames}
        pairs = [(t, h) for h in hnames for t in names]
        best = {p: {"scalar": float("inf"), "simd": float("inf"), "arrays": float("inf"), "file": float("inf")}
                for p in pairs}
        for r in range(args.rounds):
            for t, hn in pairs:
                trace, expect = tmp / f"{t}.bin", tmp / f"{t}.{hn}.expect"
                b = best[(t, hn)]
                dt, want = run_c(exes["scalar"], hn, args.c_reps, trace, expect)
                b["scalar"] = min(b["scalar"], dt)
                dt, got = run_c(exes["simd"], hn, args.c_reps, trace, expect)
                b["simd"] = min(b["simd"], dt)
                assert got == want, f"{t}/{hn}: SIMD C {got} vs scalar C {want}"
                h = hier[hn]
                a, s, w = arrays[t]
                dt, got = run_engine(h, args.c_reps, lambda h=h, a=a, s=s, w=w: h.replay(a, s, w))
                b["arrays"] = min(b["arrays"], dt)
                assert got == want, f"{t}/{hn}: memwall {got} vs C {want}"
                if not args.no_file:
                    path = npz[t]
                    dt, got = run_engine(h, args.c_reps, lambda h=h, path=path: h.replay_file(path))
                    b["file"] = min(b["file"], dt)
                    assert got == want, f"{t}/{hn}: memwall from file {got} vs C {want}"
            print(f"round {r + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    load1 = os.getloadavg()[0]
    rows = []
    print(f"\n{'trace':<9}{'hier':<7}{'accesses':>10}{'scalar C':>10}{'SIMD C':>9}{'arrays':>9}{'file':>8}"
          f"{'arr/scalar':>12}{'arr/SIMD':>10}{'file/arr':>10}   (M accesses/s, best of {args.rounds}x{args.c_reps})")
    for t, hn in pairs:
        b = best[(t, hn)]
        n = len(arrays[t][0])
        rate = {k: n / v / 1e6 if v != float("inf") else float("nan") for k, v in b.items()}
        row = {"trace": t, "hierarchy": hn, "accesses": n, **{f"{k}_Mps": rate[k] for k in rate},
               "arrays_over_scalar": rate["arrays"] / rate["scalar"], "arrays_over_simd": rate["arrays"] / rate["simd"],
               "file_over_arrays": rate["file"] / rate["arrays"]}
        rows.append(row)
        flag = "" if row["arrays_over_scalar"] >= TARGET_SCALAR else "  < 0.5"
        if not args.no_file and row["file_over_arrays"] < TARGET_FILE:
            flag += "  file < 0.8"
        print(f"{t:<9}{hn:<7}{n:>10,}{rate['scalar']:>10.1f}{rate['simd']:>9.1f}{rate['arrays']:>9.1f}"
              f"{rate['file']:>8.1f}{row['arrays_over_scalar']:>11.2f}x{row['arrays_over_simd']:>9.2f}x"
              f"{row['file_over_arrays']:>9.2f}x{flag}")
    worst = min(r["arrays_over_scalar"] for r in rows)
    line = f"\nengine / scalar C: worst {worst:.2f}x (target >= {TARGET_SCALAR}); engine / SIMD C: worst " \
           f"{min(r['arrays_over_simd'] for r in rows):.2f}x"
    if not args.no_file:
        line += f"; file / arrays: worst {min(r['file_over_arrays'] for r in rows):.2f}x (target >= {TARGET_FILE})"
    print(line)
    print(f"load {load0:.2f} at start, {load1:.2f} at the end; counts agree on every pair (and with DineroIV)")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "cores": os.cpu_count(), "load_start": load0,
                                         "load_end": load1, "rounds": args.rounds, "c_reps": args.c_reps,
                                         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
