"""memwall's engine next to a hand-written C replay of the same semantics (not a timed test).

Compiles ``benchmarks/c_replay.c`` (gcc -O3) into a temporary shared library and, on the
traces and hierarchies of ``bench_engine.py`` (PERFORMANCE.md's shapes), times in one run,
interleaved, best of ``--repeat``:

* ``Hierarchy.replay`` from NumPy arrays (building the hierarchy included) against the
  C replay called through ctypes on the same arrays (its allocation included); the
  counters of both are compared, so a fast wrong engine cannot pass;
* ``memwall replay FILE.npz`` (the rate of its ``cpu_seconds``: reading the file and
  replaying it, not the interpreter's start) against the in-process rate;
* reading din and xdin text (``traces.read_trace``), in lines per second;
* the one-pass capacity sweep (``CapacitySweep``) of hier3's L3 and of dm8k's L1 at 16
  capacities (1 .. 16 ways at the level's set count) against one replay of the hierarchy
  with that level at its largest (16 ways).

Times are the process's CPU time (``time.process_time``), not wall time: the machines
this runs on are shared, and a replay that waits for a core would otherwise be charged
for it; both sides are timed the same way.

    python benchmarks/bench_c.py [--repeat 5] [--scale 1.0] [--only TRACE,...]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import HIERARCHIES, TRACES  # noqa: E402

from memwall.engine import CapacitySweep, Hierarchy  # noqa: E402
from memwall.levels import LevelSpec  # noqa: E402
from memwall.traces import read_trace, write_trace  # noqa: E402

HERE = Path(__file__).parent
NCOUNT = 7  # counters per level in c_replay.c


def build_c(tmp: Path) -> ctypes.CDLL:
    lib = tmp / "c_replay.so"
    subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", str(HERE / "c_replay.c"), "-o", str(lib)],
                   check=True)
    dll = ctypes.CDLL(str(lib))
    p = ctypes.c_void_p
    dll.c_replay.argtypes = [ctypes.c_int, p, p, ctypes.c_uint64, p, p, p, ctypes.c_int64, p]
    dll.c_replay.restype = ctypes.c_int
    return dll


def run_c(dll: ctypes.CDLL, levels, addr, size, w) -> tuple[float, list[int]]:
    sizes = np.array([lv.size for lv in levels], np.uint64)
    ways = np.array([lv.ways for lv in levels], np.uint64)
    out = np.zeros(len(levels) * NCOUNT + 2, np.uint64)
    t = time.process_time()
    rc = dll.c_replay(len(levels), sizes.ctypes.data, ways.ctypes.data, levels[0].line, addr.ctypes.data,
                      size.ctypes.data, w.ctypes.data, len(addr), out.ctypes.data)
    dt = time.process_time() - t
    assert rc == 0
    return dt, [int(x) for x in out]


def run_memwall(levels, addr, size, w) -> tuple[float, list[int]]:
    t = time.process_time()
    h = Hierarchy(levels)
    h.replay(addr, size, w)
    dt = time.process_time() - t
    c = h.counters()
    row = []
    for lv in c.levels:
        row += [lv.reads, lv.writes, lv.read_misses, lv.write_misses, lv.writebacks, lv.bytes_in, lv.bytes_out]
    return dt, row + [c.memory.bytes_read, c.memory.bytes_written]


def hierarchy_file(tmp: Path, name: str, levels) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text("".join(f'[[level]]\nname = "{lv.name}"\nsize = {lv.size}\nline = {lv.line}\nways = {lv.ways}\n'
                            for lv in levels))
    return path


def cli_rate(trace: Path, hier: Path) -> float:
    out = subprocess.run([sys.executable, "-m", "memwall", "replay", str(trace), "--hierarchy", str(hier), "--json"],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    return result["accesses"] / result["cpu_seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", default="", help="comma-separated trace names")
    ap.add_argument("--no-files", action="store_true", help="skip the CLI and text-reading figures")
    args = ap.parse_args()
    names = [n for n in TRACES if not args.only or n in args.only.split(",")]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        dll = build_c(tmp)
        traces = {}
        for name in names:
            addr, size, w = TRACES[name](args.scale)
            traces[name] = (np.ascontiguousarray(addr, np.uint64), np.full(len(addr), size, np.uint32),
                            np.ascontiguousarray(w, np.uint8))
        print(f"{'trace':<13}{'hierarchy':<10}{'accesses':>10}{'memwall M/s':>13}{'C M/s':>9}{'ratio':>8}"
              + ("" if args.no_files else f"{'replay npz M/s':>16}{'npz/in-proc':>12}"))
        for hname, levels in HIERARCHIES.items():
            hier = hierarchy_file(tmp, hname, levels)
            for tname, (addr, size, w) in traces.items():
                npz = write_trace(tmp / f"{tname}.npz", addr, size, w) if not args.no_files else None
                best_m = best_c = float("inf")
                best_cli = 0.0
                for _ in range(args.repeat):  # interleaved: a slow streak of the machine hits both
                    dt, got = run_memwall(levels, addr, size, w)
                    best_m = min(best_m, dt)
                    dt, want = run_c(dll, levels, addr, size, w)
                    best_c = min(best_c, dt)
                    assert got == want, f"{tname}/{hname}: memwall {got} vs C {want}"
                    if npz is not None:
                        best_cli = max(best_cli, cli_rate(npz, hier))
                n = len(addr)
                rm, rc = n / best_m / 1e6, n / best_c / 1e6
                line = f"{tname:<13}{hname:<10}{n:>10,}{rm:>13.1f}{rc:>9.1f}{rm / rc:>7.2f}x"
                if npz is not None:
                    line += f"{best_cli / 1e6:>16.1f}{best_cli / 1e6 / rm:>11.2f}x"
                print(line, flush=True)
        print(f"{'capacity sweep':<24}{'16 capacities s':>16}{'one replay s':>14}{'ratio':>8}")
        for hname, levels, name in (("hier3", HIERARCHIES["hier3"], "L3"), ("dm8k", HIERARCHIES["dm8k"], "L1")):
            swept = next(lv for lv in levels if lv.name == name)
            largest = [lv if lv.name != name else LevelSpec(name, swept.sets * 16 * swept.line, swept.line, 16)
                       for lv in levels]
            for tname, (addr, size, w) in traces.items():
                best_s = best_r = float("inf")
                for _ in range(args.repeat):
                    t = time.process_time()
                    sweep = CapacitySweep(levels, name, 16)
                    sweep.replay(addr, size, w)
                    got = sweep.sweep()[swept.sets * 16 * swept.line]
                    best_s = min(best_s, time.process_time() - t)
                    t = time.process_time()
                    h = Hierarchy(largest)
                    h.replay(addr, size, w)
                    best_r = min(best_r, time.process_time() - t)
                    assert got == h.counters().level(name)
                print(f"{name + ' of ' + hname + ', ' + tname:<24}{best_s:>16.3f}{best_r:>14.3f}{best_s / best_r:>7.2f}x",
                      flush=True)
        if args.no_files:
            return
        addr, size, w = next(iter(traces.values()))
        for fmt in ("din", "xdin"):
            path = write_trace(tmp / f"t.{fmt}", addr, size, w)
            best = float("inf")
            for _ in range(args.repeat):
                t = time.process_time()
                n = sum(len(chunk[0]) for chunk in read_trace(path))
                best = min(best, time.process_time() - t)
            mb = os.path.getsize(path) / 1e6
            print(f"read {fmt}: {n / best / 1e6:.1f} M lines/s ({mb / best:.0f} MB/s)")


if __name__ == "__main__":
    main()
