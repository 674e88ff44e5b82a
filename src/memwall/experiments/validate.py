"""The validation figure and the validation of a sweep folder.

The judge itself (:func:`~memwall.study.validation.validate` and its summary) is
:mod:`memwall.study.validation`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..options import Case
from ..study.validation import (
    BAND,
    ERAS,
    CaseResult,
    Predictor,
    case_for,
    default_predictor,
    era_of,
    known_ids,
    to_json,
    validate,
)

_MARKERS = {"flops": "o", "cups": "s", "cps": "D", "seconds": "v", "samples_per_second": "P"}
_UNITS = {"flops": "FLOP/s", "cups": "CUPS", "cps": "CPS", "seconds": "s", "samples_per_second": "samples/s"}


def validation_figure(cases: Iterable[CaseResult], out_dir: str | Path) -> list[Path]:
    """Predicted against measured, log-log, the 2x band shaded, points coloured by era.

    Each metric keeps its own unit (FLOP/s, CUPS, ...) on both axes, so a point's distance
    from the diagonal is the ratio whatever the metric. Bound checks are drawn hollow, with
    an arrow-like marker showing on which side the prediction must fall. Writes
    ``validation.png`` and ``validation.svg`` into out_dir and returns their paths.
    """
    import matplotlib.pyplot as plt

    rows = [c.as_dict() for c in cases]
    rows = [r for r in rows if r.get("predicted") and r.get("measured")]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    values = [v for r in rows for v in (r["measured"], r["predicted"])] or [1.0, 10.0]
    lo, hi = min(values) / 4, max(values) * 4
    xs = [lo, hi]
    ax.fill_between(xs, [x / BAND for x in xs], [x * BAND for x in xs], color="0.88", label="within 2x")
    ax.plot(xs, xs, color="0.4", lw=0.8, label="predicted = measured")
    colours = dict(zip([e[0] for e in ERAS] + ["year unknown"], ["#b2182b", "#ef8a62", "#2166ac", "0.5"],
                       strict=True))
    seen: set[tuple[str, str]] = set()
    for r in rows:
        era = era_of(r.get("year"))
        metric = r["metric"]
        point = r.get("check", "point") == "point"
        marker = _MARKERS.get(metric, "o") if point else ("^" if r["check"].startswith("lower") else "v")
        label_key = (era, metric if point else r["check"])
        label = None
        if label_key not in seen:
            seen.add(label_key)
            label = f"{era} - {_UNITS.get(metric, metric) if point else r['check']}"
        ax.scatter(r["measured"], r["predicted"], marker=marker, s=46, zorder=3, label=label,
                   facecolors=colours[era] if point else "none", edgecolors=colours[era], linewidths=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (the metric's unit: FLOP/s, CUPS, CPS, s, samples/s)")
    ax.set_ylabel("predicted by memwall (same unit)")
    ax.set_title("memwall against published measurements")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    ax.text(0.99, 0.01, "sources: era_data/measurements/*.toml", transform=ax.transAxes,
            ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout()
    paths = [out_dir / "validation.png", out_dir / "validation.svg"]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def cached_predictor(folder: str | Path, predictor: Predictor | None = None) -> Predictor:
    """``predictor`` (default :func:`memwall.run.run_case`), its answers stored in
    ``folder`` like sweep cases: keyed by the case, the machine profile, the network and
    :data:`memwall.MODEL_VERSION`, so a rerun predicts only what changed."""
    from ..run.row import case_key
    from .store import Store

    store = Store(folder, content="result")
    predict = predictor or default_predictor()

    def run(case: Case) -> Mapping[str, Any]:
        key = case_key(case)
        rec = store.get(key)
        if rec is not None and rec.get("status") == "ok":
            return rec["result"]
        result = dict(predict(case))
        result.pop("kernels", None)  # the judge needs the step's totals, not its kernels
        store.put({"key": key, "status": "ok", "case": case.as_dict(), "result": result})
        return result

    return run


def _predict_one(case: Case) -> tuple[Case, dict[str, Any] | None]:
    from ..run import run_case

    try:
        return case, dict(run_case(case))
    except Exception:  # noqa: BLE001 - validate() asks again in the parent and reports why on the case
        return case, None


def prefetch(cases: Sequence[Case], folder: str | Path, jobs: int | None = None) -> int:
    """Predict, on ``jobs`` worker processes (None: the cores), every case not yet stored
    in ``folder`` (:func:`cached_predictor`'s store), so that the validation's predictions
    run side by side rather than one after another; returns how many were computed. A
    case that fails is left for :func:`validate`, which reports its reason."""
    from concurrent.futures import ProcessPoolExecutor

    from ..run.row import case_key
    from .store import Store
    from .sweep import _stop_workers, _watch_parent, default_jobs

    store = Store(folder, content="result")
    todo = list(dict.fromkeys(c for c in cases if (store.get(case_key(c)) or {}).get("status") != "ok"))
    jobs = min(jobs or default_jobs(), len(todo))
    if jobs < 2:
        return 0
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_watch_parent, initargs=(os.getpid(),))
    done = 0
    try:
        for case, result in pool.map(_predict_one, todo):
            if result is not None:
                result.pop("kernels", None)
                store.put({"key": case_key(case), "status": "ok", "case": case.as_dict(), "result": result})
                done += 1
    except BaseException:
        _stop_workers(pool)  # Ctrl-C, a dead worker: kill, don't wait; finished predictions are kept
        raise
    pool.shutdown(wait=True)
    return done


def write_validation(out: str | Path, measurements: str | Path | None = None, *, jobs: int | None = None,
                     one_device: bool = False) -> list[Path]:
    """Validate the shipped measurements (or those in ``measurements``, a file or folder) into
    a sweep folder: ``validation.json`` beside its results, ``figures/validation.png`` (and
    ``.svg``, and the figure's data as ``.csv``) beside its figures.

    Predictions are stored under ``out/validation/`` (see :func:`cached_predictor`), made
    on ``jobs`` processes (:func:`prefetch`), and the figure is redrawn only when the
    table it draws differs from the one last drawn. ``one_device`` keeps the measurements
    of one device (a quick sweep's: the multi-device point checks take minutes to predict;
    ``memwall validate`` and the full sweep run them all)."""
    from ..study.measurements import load_measurements
    from .store import atomic_write, write_csv

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    measured = load_measurements(measurements)
    if one_device:
        measured = [m for m in measured if m.dp * m.tp * m.pp == 1]
    known = known_ids("machine"), known_ids("network")
    prefetch([case_for(m) for m in measured if m.machine in known[0] and (m.network is None or m.network in known[1])],
             out / "validation", jobs)
    results = validate(measured, cached_predictor(out / "validation"))
    data = to_json(results)
    text = json.dumps(data, indent=1) + "\n"
    figdir = out / "figures"
    paths = [figdir / "validation.png", figdir / "validation.svg"]
    old = out / "validation.json"
    same = old.is_file() and old.read_text(encoding="utf-8") == text and all(p.is_file() for p in paths)
    if same:
        return paths
    atomic_write(old, text)
    paths = validation_figure(results, figdir)
    write_csv(figdir / "validation.csv", data["cases"])
    return paths
