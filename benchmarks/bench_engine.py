"""Side-by-side throughput of memwall's engine and pycachesim 0.3.1 (not a timed test).

Both simulators get the same deterministic traces (sequential, strided, random, matmul,
MLP backprop; shapes as in PERFORMANCE.md) and the same hierarchies (hier3: 32 KiB
8-way / 1 MiB 16-way / 32 MiB 16-way, 64 B lines, LRU, write-back write-allocate;
dm8k: 8 KiB direct-mapped, 32 B lines). Runs are interleaved and repeated; the best
of each is quoted, with the ratio. What a user pays is counted: for memwall, building
the hierarchy and replaying the NumPy arrays; for pycachesim, building its caches,
converting the arrays to its ``[(loads, stores), ...]`` input, and ``loadstore``.
Then the loop-nest stream input, on a sequential L1-resident stream.

    python benchmarks/bench_engine.py [--repeat 3] [--scale 1.0] [--no-pycachesim]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from memwall.engine import Hierarchy
from memwall.levels import LevelSpec
from memwall.streams import Access, LoopNest

KiB, MiB = 1024, 1024 * 1024
HIERARCHIES = {
    "hier3": [LevelSpec("L1", 32 * KiB, 64, 8), LevelSpec("L2", MiB, 64, 16), LevelSpec("L3", 32 * MiB, 64, 16)],
    "dm8k": [LevelSpec("L1", 8 * KiB, 32, 1)],
}


def sequential(scale: float):
    n = int(2_000_000 * scale)
    return np.arange(n, dtype=np.uint64) * 8, 8, np.zeros(n, np.uint8)


def strided(scale: float):
    # Column walk of a 1024x1024 fp32 matrix: consecutive accesses 4 KiB apart.
    n = 1024
    cols = max(1, int(n * scale))
    i, j = np.meshgrid(np.arange(n, dtype=np.uint64), np.arange(cols, dtype=np.uint64), indexing="xy")
    return ((i * n + j) * 4).ravel().astype(np.uint64), 4, np.zeros(n * cols, np.uint8)


def random_trace(scale: float):
    rng = np.random.default_rng(12345)
    n = int(1_000_000 * scale)
    addr = rng.integers(0, 64 * MiB // 8, n, dtype=np.uint64) * 8
    return addr, 8, (rng.random(n) < 0.25).astype(np.uint8)


def matmul(scale: float):
    n = 96
    e = 4
    a, b, c = 0, n * n * e, 2 * n * n * e
    nest = LoopNest((n, n, n), (
        Access(c, (n * e, e), e),
        Access(a, (n * e, 0, e), e),
        Access(b, (0, e, n * e), e),
        Access(c, (n * e, e), e, is_write=True, after=True),
    ))
    addr, _, w = nest.expand()
    return addr, e, w


def mlp_backprop(scale: float):
    """Ten per-example SGD steps of a 203-80-26 fp32 MLP (forward, backward, update)."""
    e = 4
    sizes = (203, 80, 26)
    base = 0
    weights, acts, deltas = [], [], []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        weights.append(base)
        base += fan_in * fan_out * e
    for width in sizes:
        acts.append(base)
        base += width * e
        deltas.append(base)
        base += width * e
    nests = []
    for layer, (fi, fo) in enumerate(zip(sizes, sizes[1:], strict=False)):  # forward: y = W x
        w, x, y = weights[layer], acts[layer], acts[layer + 1]
        nests.append(LoopNest((fo, fi), (Access(w, (fi * e, e), e), Access(x, (0, e), e),
                                         Access(y, (e,), e, is_write=True, after=True))))
    for layer in reversed(range(2)):  # backward: delta_in = W^T delta_out; W -= lr * delta_out x^T
        fi, fo = sizes[layer], sizes[layer + 1]
        w, x, dout, din = weights[layer], acts[layer], deltas[layer + 1], deltas[layer]
        if layer:
            nests.append(LoopNest((fi, fo), (Access(w, (e, fi * e), e), Access(dout, (0, e), e),
                                             Access(din, (e,), e, is_write=True, after=True))))
        nests.append(LoopNest((fo, fi), (Access(dout, (e,), e), Access(x, (0, e), e),
                                         Access(w, (fi * e, e), e), Access(w, (fi * e, e), e, is_write=True))))
    parts = [nest.expand() for nest in nests] * 10
    return (np.concatenate([p[0] for p in parts]), 4, np.concatenate([p[2] for p in parts]))


TRACES = {"sequential": sequential, "strided": strided, "random": random_trace, "matmul": matmul,
          "mlp_backprop": mlp_backprop}


def run_memwall(levels, addr, size, is_write):
    t = time.perf_counter()
    h = Hierarchy(levels)
    h.replay(addr, np.full(len(addr), size, np.uint32), is_write)
    dt = time.perf_counter() - t
    return dt, h.counters().levels[0].misses


def run_pycachesim(levels, addr, size, is_write):
    from cachesim import Cache, CacheSimulator, MainMemory

    t = time.perf_counter()
    mem = MainMemory()
    below = None
    for lv in reversed(levels):
        cache = Cache(lv.name, lv.sets, lv.ways, lv.line, "LRU", store_to=below, load_from=below)
        if below is None:
            mem.load_to(cache)
            mem.store_from(cache)
        below = cache
    sim = CacheSimulator(below, mem)
    batch = [((), (a,)) if w else ((a,), ()) for a, w in zip(addr.tolist(), is_write.tolist(), strict=True)]
    sim.loadstore(batch, length=size)
    dt = time.perf_counter() - t
    first = next(iter(sim.stats()))
    return dt, first["MISS_count"]


def stream_rate(levels, repeat: int, line_size: int) -> tuple[float, float]:
    """Line references per second of an L1-resident sequential nest (16 KiB, reread)."""
    step = 8 if line_size == 0 else line_size
    inner = 16 * KiB // step
    outer = 200_000_000 // inner // (8 if step == 8 else 1)
    nest = LoopNest((outer, inner), (Access(0, (0, step), step),))
    best = float("inf")
    for _ in range(repeat):
        h = Hierarchy(levels)
        t = time.perf_counter()
        h.replay_nest(nest)
        best = min(best, time.perf_counter() - t)
    refs = h.counters().levels[0].lookups
    return refs / best, nest.n_accesses / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="trace length factor")
    ap.add_argument("--no-pycachesim", action="store_true")
    args = ap.parse_args()
    try:
        import cachesim  # noqa: F401
    except ImportError:
        args.no_pycachesim = True
        print("pycachesim not installed (pip install pycachesim==0.3.1): memwall only")
    traces = {name: make(args.scale) for name, make in TRACES.items()}
    print(f"{'trace':<13}{'hierarchy':<10}{'accesses':>10}{'memwall M/s':>13}{'pycachesim M/s':>16}"
          f"{'ratio':>8}   L1 misses (memwall / pycachesim)")
    for hname, levels in HIERARCHIES.items():
        for tname, (addr, size, w) in traces.items():
            best_m = best_p = float("inf")
            miss_m = miss_p = None
            for _ in range(args.repeat):  # interleaved: the machine's slow streaks hit both
                dt, miss_m = run_memwall(levels, addr, size, w)
                best_m = min(best_m, dt)
                if not args.no_pycachesim:
                    dt, miss_p = run_pycachesim(levels, addr, size, w)
                    best_p = min(best_p, dt)
            n = len(addr)
            rate_m = n / best_m / 1e6
            rate_p = n / best_p / 1e6 if not args.no_pycachesim else float("nan")
            print(f"{tname:<13}{hname:<10}{n:>10,}{rate_m:>13.1f}{rate_p:>16.2f}{rate_m / rate_p:>8.1f}x"
                  f"   {miss_m} / {miss_p}")
    for hname, levels in HIERARCHIES.items():
        for step in (0, 64):
            refs, acc = stream_rate(levels, args.repeat, step)
            what = "8 B accesses (fast path)" if step == 0 else "64 B accesses (one lookup each)"
            print(f"stream {hname:<6} sequential L1-resident, {what}: {refs / 1e6:.0f} M line refs/s "
                  f"({acc / 1e6:.0f} M accesses/s)")


if __name__ == "__main__":
    main()
