"""Check memwall against the machine it runs on: real NumPy training steps, timed, beside
memwall's prediction for the same steps on the host's detected profile.

    python experiments/host_check.py --out results/host          # a few minutes
    python experiments/host_check.py --out hc --quick       # seconds
    python experiments/host_check.py --out results/host --profile host.toml   # reuse a profile
    python experiments/host_check.py --out results/host --blas-threads 1      # a shared host

Cases: per-example NETtalk (the 1986 way: an update after every example); NETtalk in
mini-batches; affine stacks of width 1024 at batch 1 … 16384 (fewer layers at large
batches, so every step stays affordable: per-layer work is what is compared); and stacks
of width 4096, whose 64 MiB weight matrices overflow the last-level cache. Each step is
forward, backward and an SGD update in fp32 (:class:`NumpyMLP`, below), timed after a
warm-up in interleaved rounds (every case once per round, :func:`measure_interleaved`);
each case keeps the median and the best round. The prediction is ``run_case`` on the profile
``memwall machines detect`` wrote (schedule ``blocked``, which is what OpenBLAS runs);
nothing in the model is tuned to these timings, and nothing measured here reaches the
prediction. Each row's note names what the model charges differently (NumPy calls per
memwall kernel; K = 1 products, which the profile's ``outer_product`` times). docs/host.md
has the whole account.

Writes to --out: host_check.csv and .json (one row per case), host_check.png and .svg
(measured against predicted seconds per step; achieved FLOP/s against batch with each
side's knee), and host.toml (the profile used), unless --profile names one.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memwall import host
from memwall.errors import InputError
from memwall.profiles import Machine, load_machine_file

# A step is "compute-bound" (the knee) from the smallest batch whose achieved rate reaches
# this fraction of the profile's peak, for measured and predicted alike.
KNEE_FRACTION = 0.5
# Per-step FLOPs the affine stacks are allowed before their depth is cut (keeps the run short).
STEP_FLOP_BUDGET = 1.2e10


# ---------------------------------------------------------------------------------
# Real training steps, timed (the measured side of the check)


@dataclass(frozen=True)
class MLPSpec:
    """The part of a network preset a NumPy MLP step needs."""

    layers: tuple[int, ...]  # units, input first
    bias: bool
    activation: str  # sigmoid | tanh | relu | identity
    loss: str  # mse | none (the output gradient supplied as an input)


class CallCounter:
    """NumPy, counting the calls made through it (for the calls-per-kernel column)."""

    def __init__(self) -> None:
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        fn = getattr(np, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return fn(*args, **kwargs)

        return counted


class NumpyMLP:
    """Forward, backward and an SGD update of a fully connected net in fp32 NumPy.

    Written the way memwall's step lowers it (``y = x Wᵀ``, bias and activation as one
    epilogue, ``dX = dZ W``, ``dW = dZᵀ X``, no input gradient for the first layer, then
    ``W -= lr·dW``; ``dX`` for the first layer too, as memwall lowers it), into buffers allocated once, so that the time is the arithmetic and
    traffic of the step and not the allocator's. Per-example updates run the same step
    on one example at a time.
    """

    def __init__(self, spec: MLPSpec, batch: int, seed: int = 0) -> None:
        if spec.activation not in ("sigmoid", "tanh", "relu", "identity"):
            raise InputError(f"the NumPy step does not implement activation {spec.activation!r}")
        rng = np.random.default_rng(seed)
        f32 = np.float32
        self.spec, self.batch, self.lr = spec, batch, f32(1e-4)
        dims = spec.layers
        self.w = [(rng.standard_normal((o, i)) / np.sqrt(i)).astype(f32) for i, o in zip(dims, dims[1:], strict=False)]
        self.b = [np.zeros(o, f32) for o in dims[1:]] if spec.bias else []
        self.gw = [np.zeros_like(w) for w in self.w]
        self.gb = [np.zeros_like(b) for b in self.b]
        self.x = rng.random((batch, dims[0]), dtype=f32)
        self.y = [np.zeros((batch, o), f32) for o in dims[1:]]
        self.d = [np.zeros((batch, n), f32) for n in dims[1:]]  # gradient w.r.t. each layer's output
        self.tmp = [np.zeros((batch, o), f32) for o in dims[1:]]
        self.target = rng.random((batch, dims[-1]), dtype=f32)
        self.dx_in = np.zeros((batch, dims[0]), f32)  # the first layer's input gradient
        self.xp: Any = np  # the array namespace the step calls (CallCounter counts through it)

    def calls_per_step(self, per_example: bool) -> int:
        """NumPy calls one step issues (per-example: all of the batch's)."""
        counter = CallCounter()
        self.xp = counter
        try:
            self.run(per_example)
        finally:
            self.xp = np
        return counter.count

    def step(self, rows: slice | None = None) -> None:
        """One step on the batch (or on ``rows`` of it, for per-example updates)."""
        s = rows or slice(None)
        xp = self.xp
        act = self.spec.activation
        x = self.x[s]
        nl = len(self.w)
        for i in range(nl):
            y = self.y[i][s]
            xp.matmul(x, self.w[i].T, out=y)
            if self.b:
                xp.add(y, self.b[i], out=y)
            if act == "sigmoid":
                xp.negative(y, out=y)
                xp.exp(y, out=y)
                xp.add(y, 1.0, out=y)
                xp.reciprocal(y, out=y)
            elif act == "tanh":
                xp.tanh(y, out=y)
            elif act == "relu":
                xp.maximum(y, 0.0, out=y)
            x = y
        d = self.d[-1][s]
        if self.spec.loss == "mse":
            xp.subtract(self.y[-1][s], self.target[s], out=d)
        # loss "none": d (the supplied output gradient) is already in self.d[-1]
        for i in reversed(range(nl)):
            d = self.d[i][s]
            y = self.y[i][s]
            if act == "sigmoid":  # dz = d * y * (1 - y)
                t = self.tmp[i][s]
                xp.subtract(1.0, y, out=t)
                xp.multiply(t, y, out=t)
                xp.multiply(d, t, out=d)
            elif act == "tanh":
                t = self.tmp[i][s]
                xp.multiply(y, y, out=t)
                xp.subtract(1.0, t, out=t)
                xp.multiply(d, t, out=d)
            elif act == "relu":
                xp.multiply(d, y > 0, out=d)
            x_in = self.x[s] if i == 0 else self.y[i - 1][s]
            # dX for every layer, the first one's into a buffer no one reads: memwall's
            # step lowers it too (its L1.dX), and both sides must do the same work.
            xp.matmul(d, self.w[i], out=self.d[i - 1][s] if i > 0 else self.dx_in[s])
            # The learning rate goes into dZ (B×n) so the update is one pass over the
            # weights, as memwall's update kernel models it: w -= g reads w and g, writes w.
            xp.multiply(d, self.lr, out=d)
            xp.matmul(d.T, x_in, out=self.gw[i])
            if self.b:
                xp.sum(d, axis=0, out=self.gb[i])
        for params, grads in ((self.w, self.gw), (self.b, self.gb)):
            for p, g in zip(params, grads, strict=True):
                xp.subtract(p, g, out=p)

    def run(self, per_example: bool) -> None:
        if per_example:
            for r in range(self.batch):
                self.step(slice(r, r + 1))
        else:
            self.step()


@dataclass(frozen=True)
class StepTime:
    median: float  # seconds per step, median of the visits
    best: float  # seconds per step, the fastest visit
    repeats: int  # visits (interleaved rounds)
    warmup: int


@dataclass(frozen=True)
class HostCase:
    series: str  # the line this case belongs to in the figure
    network: str  # preset id or path
    spec: MLPSpec
    batch: int
    updates: str  # per-example | minibatch


def _affine_network(out: Path, depth: int, width: int) -> str:
    """A preset file for a stack of ``depth`` square affine layers (written to --out:
    output of this run, like the affine-48x1024 preset but with fewer layers)."""
    ident = f"affine-{depth}x{width}"
    path = out / "networks" / f"{ident}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    layers = ", ".join([str(width)] * (depth + 1))
    path.write_text(
        f'id = "{ident}"\nname = "{depth} square affine layers of width {width} (host check)"\n'
        f'kind = "mlp"\nyear = 2024\nstatus = "synthetic"\ndtype = "fp32"\n'
        f'source = "experiments/host_check.py: affine-48x1024 with {depth} layers of width {width}"\n'
        f'notes = "No bias, no nonlinearity, no loss kernel: the output gradient is supplied."\n\n'
        f'[mlp]\nlayers = [{layers}]\nbias = false\nactivation = "identity"\nloss = "none"\n',
        encoding="utf-8",
    )
    return str(path)


def _spec_of(network: str) -> MLPSpec:
    from memwall.networks import load_network

    net = load_network(network)
    if net.kind != "mlp":
        raise InputError(f"host check runs MLPs only; {network} is {net.kind}")
    return MLPSpec(tuple(net.layers), bool(net.bias), net.activation, net.loss)


def cases(out: Path, quick: bool) -> list[HostCase]:
    found: list[HostCase] = []
    nettalk = _spec_of("nettalk")
    for b in ([1, 16] if quick else [1, 16, 256]):
        found.append(HostCase("NETtalk per-example", "nettalk", nettalk, b, "per-example"))
    for b in ([64] if quick else [64, 1024, 16384]):
        found.append(HostCase("NETtalk mini-batch", "nettalk", nettalk, b, "minibatch"))
    width = 256 if quick else 1024
    batches = [1, 64, 1024] if quick else [1, 4, 16, 64, 256, 1024, 4096, 16384]
    for b in batches:
        depth = max(1, min(48 if not quick else 4, int(STEP_FLOP_BUDGET / (6 * b * width * width))))
        net = _affine_network(out, depth, width)
        found.append(HostCase(f"affine width {width}", net, _spec_of(net), b, "minibatch"))
    if not quick:
        # 64 MiB of fp32 weights per layer: twice the stated L3, so every step streams them.
        for b in [1, 16, 256, 1024]:
            depth = max(1, min(2, int(STEP_FLOP_BUDGET / (6 * b * 4096 * 4096))))
            net = _affine_network(out, depth, 4096)
            found.append(HostCase("affine width 4096 (weights > LLC)", net, _spec_of(net), b, "minibatch"))
    return found


def measure_interleaved(steps: list[Callable[[], None]], rounds: int, sample: float = 0.02,
                        warmup: int = 1) -> list[StepTime]:
    """Time every step in ``rounds`` rounds, each round visiting every step once, so that
    a burst of other work on a shared host falls on all cases alike rather than on the
    one being timed. A visit repeats a step until ``sample`` seconds have passed (at least
    once) and keeps seconds per step; each case gets the median and the best visit."""
    if rounds < 1 or not steps:
        raise InputError(f"measure_interleaved needs steps and rounds >= 1, got {len(steps)} and {rounds}")
    loops = []
    for fn in steps:
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        loops.append(max(1, int(sample / max(time.perf_counter() - t0, 1e-9))))
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(rounds):
        for fn, n, out in zip(steps, loops, times, strict=True):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n)
    return [StepTime(float(np.median(t)), min(t), len(t), warmup) for t in times]


def predict(case: HostCase, machine: Machine) -> dict[str, Any]:
    from memwall.simulation import Case, run_case

    return run_case(Case(machine=str(machine.path), network=case.network, batch=case.batch,
                         updates=case.updates, dtype="fp32"), machine=machine)


def knee(rows: list[dict[str, Any]], key: str, peak: float) -> int | None:
    """Smallest batch from which the achieved rate stays at or above KNEE_FRACTION of peak."""
    ordered = sorted(rows, key=lambda r: r["batch"])
    for i, r in enumerate(ordered):
        if all(s[key] is not None and s[key] >= KNEE_FRACTION * peak for s in ordered[i:]):
            return r["batch"]
    return None


def _detected_raw(profile_path: Path) -> dict[str, Any]:
    """The raw measurements detect wrote beside the profile ({} if there are none)."""
    raw = profile_path.with_suffix(profile_path.suffix + ".json")
    try:
        return json.loads(raw.read_text())
    except (OSError, ValueError):
        return {}


def outer_products(case: HostCase) -> int:
    """Output elements of the step's K = 1 products (each dW = dZᵀ X over one example)."""
    if case.updates != "per-example" and case.batch != 1:
        return 0
    dims = case.spec.layers
    per_step = sum(i * o for i, o in zip(dims, dims[1:], strict=False))
    return per_step * (case.batch if case.updates == "per-example" else 1)


def case_note(row: dict[str, Any], outer_ns: float | None, effective_l3: int | None) -> str:
    """Why a case may miss, beside it: the mechanisms memwall's model has no term for."""
    notes = []
    if row["numpy_calls"] and row["kernels"] and row["numpy_calls"] > row["kernels"]:
        notes.append(f"NumPy issues {row['numpy_calls']} calls for memwall's {row['kernels']} kernels (a sigmoid "
                     "is four ufuncs, the lr scaling its own call): the model charges the host per kernel")
    if row["outer_elements"]:
        est = f", about {row['outer_estimate_s']:.3g} s at detect's {outer_ns:.3g} ns per element" if outer_ns else ""
        notes.append(f"{row['outer_elements']} output elements of K = 1 products, which numpy.matmul runs in its "
                     f"own loop, not the BLAS{est} (the profile's outer_product)")
    if effective_l3 and row["weights_bytes"] > effective_l3:
        notes.append("the weights exceed the last level as it behaves (the profile's measured size)")
    return "; ".join(notes)


def run(out: Path, quick: bool = False, profile: str | None = None, blas_threads: int | None = None,
        rounds: int | None = None) -> dict[str, Any]:
    """Detect (or load) the profile, measure and predict every case, write the outputs.
    ``blas_threads`` sets the BLAS's threads for detect and the steps alike; the steps are
    timed interleaved over ``rounds`` rounds (:func:`measure_interleaved`)."""
    out.mkdir(parents=True, exist_ok=True)
    if blas_threads is not None:
        host.set_blas_threads(blas_threads)
    if profile is None:
        detected = host.detect(quick=quick, verbose=True)
        profile_path = host.write_profile(detected, out / "host.toml")
    else:
        profile_path = Path(profile)
    machine = load_machine_file(profile_path)
    peak = machine.peak_flops["fp32"]
    raw = _detected_raw(profile_path)
    outer_ns = raw["outer"]["k1_seconds"] / (raw["outer"]["m"] * raw["outer"]["n"]) * 1e9 if raw.get("outer") else None
    effective_l3 = machine.levels[-1].size if machine.levels else None
    rows: list[dict[str, Any]] = []
    prediction_error: str | None = None
    found = cases(out, quick)
    models = [NumpyMLP(case.spec, case.batch) for case in found]
    steps = [lambda m=m, c=c: m.run(c.updates == "per-example") for m, c in zip(models, found, strict=True)]
    timings = measure_interleaved(steps, rounds or (3 if quick else 9), sample=0.005 if quick else 0.03,
                                  warmup=1 if quick else 2)
    for case, model, timed in zip(found, models, timings, strict=True):
        dims = case.spec.layers
        row: dict[str, Any] = {
            "series": case.series, "network": Path(case.network).stem, "layers": len(dims) - 1,
            "width": max(dims), "batch": case.batch, "updates": case.updates,
            "measured_s": timed.median, "measured_best_s": timed.best, "repeats": timed.repeats,
            "numpy_calls": model.calls_per_step(case.updates == "per-example"),
            "outer_elements": outer_products(case),
            "weights_bytes": 4 * sum(i * o for i, o in zip(dims, dims[1:], strict=False)),
        }
        row["outer_estimate_s"] = row["outer_elements"] * outer_ns * 1e-9 if outer_ns else None
        try:
            result = predict(case, machine)
        except (ImportError, NotImplementedError) as err:  # a stage not built yet: say so, keep measuring
            prediction_error = f"{type(err).__name__}: {err}"
            result = None
        if result is not None:
            row.update({
                "flops": result["flops"], "predicted_s": result["seconds"],
                "ratio": result["seconds"] / timed.median,
                "ratio_best": result["seconds"] / timed.best,
                "predicted_bound": result["bound"], "predicted_stall_fraction": result["stall_fraction"],
                "predicted_host_s": result["dispatch"]["host_seconds"],
                "kernels": result["dispatch"].get("launches"),
                "measured_flops": result["flops"] / timed.median,
                "measured_best_flops": result["flops"] / timed.best,
                "predicted_flops": result["achieved_flops"],
            })
        else:
            row.update({"flops": None, "predicted_s": None, "ratio": None, "ratio_best": None, "predicted_bound": None,
                        "predicted_stall_fraction": None, "predicted_host_s": None, "kernels": None,
                        "measured_flops": None, "measured_best_flops": None, "predicted_flops": None})
        row["note"] = case_note(row, outer_ns, effective_l3)
        rows.append(row)
        ratio = f"{row['ratio']:.3g}" if row["ratio"] is not None else "n/a"
        print(f"{case.series:36} batch {case.batch:6}  measured {timed.median:.4g} s (best {timed.best:.4g})  "
              f"predicted {row['predicted_s'] or float('nan'):.4g} s  ratio {ratio}  {row['predicted_bound']}"
              + (f"\n    {row['note']}" if row["note"] else ""), flush=True)

    summary = summarize(rows, peak)
    summary.update({
        "profile": str(profile_path), "machine": machine.id, "memory_bandwidth": machine.memory.bandwidth,
        "quick": quick, "per_call": raw.get("per_call"), "outer_ns_per_element": outer_ns,
        "last_level_bytes": effective_l3, "load_average": _loadavg(), "prediction_error": prediction_error,
        "blas_threads": host.blas_info().threads, "rounds": timings[0].repeats if timings else None,
    })
    _write(out, rows, summary)
    return {"rows": rows, "summary": summary}


def _worst(ratios: list[float]) -> float | None:
    return max(ratios, key=lambda x: abs(math.log(x))) if ratios else None


def summarize(rows: list[dict[str, Any]], peak: float) -> dict[str, Any]:
    """Median and worst predicted ÷ measured (against the median repeat and the best one),
    both knees, and the top rate the steps reach against the profile's peak."""
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    best = [r["ratio_best"] for r in rows if r["ratio_best"] is not None]
    affine = [r for r in rows if r["series"].startswith("affine width") and "LLC" not in r["series"]]
    top = max((r for r in rows if r["measured_best_flops"]), key=lambda r: r["measured_best_flops"], default=None)
    return {
        "peak_fp32": peak, "knee_fraction": KNEE_FRACTION,
        "median_ratio": float(np.median(ratios)) if ratios else None, "worst_ratio": _worst(ratios),
        # Against the fastest repeat: other processes on a shared host only ever slow a repeat.
        "median_ratio_best": float(np.median(best)) if best else None, "worst_ratio_best": _worst(best),
        "measured_knee": knee(affine, "measured_flops", peak) if ratios else None,
        "measured_knee_best": knee(affine, "measured_best_flops", peak) if ratios else None,
        "predicted_knee": knee(affine, "predicted_flops", peak) if ratios else None,
        "predicted_compute_bound_from": next((r["batch"] for r in sorted(affine, key=lambda r: r["batch"])
                                              if r["predicted_bound"] == "compute"), None),
        "top_measured_flops": top["measured_best_flops"] if top else None,
        "top_measured_case": f"{top['series']} batch {top['batch']}" if top else None,
        "top_over_peak": top["measured_best_flops"] / peak if top else None,
    }


def _loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work on the host skews the timings)."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def _write(out: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    with open(out / "host_check.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "host_check.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    if any(r["predicted_s"] is not None for r in rows):
        _figure(out, rows, summary)


def _figure(out: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    series = sorted({r["series"] for r in rows})
    colors = dict(zip(series, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    lo = min(min(r["measured_s"], r["predicted_s"]) for r in rows if r["predicted_s"])
    hi = max(max(r["measured_s"], r["predicted_s"]) for r in rows if r["predicted_s"])
    left.plot([lo / 2, hi * 2], [lo / 2, hi * 2], color="grey", lw=0.8, label="predicted = measured")
    for s in series:
        pts = [r for r in rows if r["series"] == s and r["predicted_s"]]
        left.scatter([r["measured_s"] for r in pts], [r["predicted_s"] for r in pts], color=colors[s], label=s)
        for r in pts:
            left.annotate(str(r["batch"]), (r["measured_s"], r["predicted_s"]), fontsize=7,
                          xytext=(3, 3), textcoords="offset points")
    left.set(xscale="log", yscale="log", xlabel="measured seconds per step (median)",
             ylabel="predicted seconds per step", title="memwall on this host (labels: batch)")
    left.legend(fontsize=7)
    peak = summary["peak_fp32"]
    for s in series:
        pts = sorted((r for r in rows if r["series"] == s and r["predicted_s"]), key=lambda r: r["batch"])
        if len(pts) < 2 or s.startswith("NETtalk per"):
            continue  # per-example steps have no batch to turn on: they are in the left panel only
        b = [r["batch"] for r in pts]
        right.plot(b, [r["measured_flops"] for r in pts], "o-", color=colors[s], label=f"{s}, measured")
        right.plot(b, [r["predicted_flops"] for r in pts], "s--", color=colors[s], label=f"{s}, predicted")
    right.axhline(peak, color="black", lw=0.8, label=f"detected fp32 peak {peak / 1e9:.3g} GFLOP/s")
    right.axhline(KNEE_FRACTION * peak, color="black", lw=0.5, ls=":", label=f"{KNEE_FRACTION:.0%} of peak")
    for key, ls in (("measured_knee", "-"), ("predicted_knee", "--")):
        if summary[key]:
            right.axvline(summary[key], color="grey", ls=ls, lw=0.8,
                          label=f"{key.split('_')[0]} knee: batch {summary[key]}")
    right.set(xscale="log", yscale="log", xlabel="batch (examples per step)", ylabel="achieved FLOP/s",
              title="where steps turn compute-bound")
    right.legend(fontsize=7)
    fig.text(0.01, 0.01, f"profile: memwall machines detect ({summary['machine']}); median predicted/measured "
             f"{summary['median_ratio']:.3g}, worst {summary['worst_ratio']:.3g}; right panel: mini-batch "
             "steps only (per-example NETtalk is on the left); the knee is from the width-1024 stack", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    for ext in ("png", "svg"):
        fig.savefig(out / f"host_check.{ext}", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the table, the figure and the profile")
    parser.add_argument("--quick", action="store_true", help="a seconds-long run: fewer, smaller cases")
    parser.add_argument("--profile", help="a profile from 'memwall machines detect' (default: detect now)")
    parser.add_argument("--blas-threads", type=int, metavar="N",
                        help="BLAS threads for detect and the steps (default: the BLAS's own count); on a host "
                             "shared with other work, 1 keeps a descheduled BLAS thread from stalling the other")
    parser.add_argument("--rounds", type=int, metavar="R", help="interleaved timing rounds (default 9; 3 --quick)")
    args = parser.parse_args(argv)
    result = run(Path(args.out), quick=args.quick, profile=args.profile, blas_threads=args.blas_threads,
                 rounds=args.rounds)
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CallCounter", "HostCase", "NumpyMLP", "case_note", "cases", "knee", "main", "outer_products", "run",
           "summarize"]
