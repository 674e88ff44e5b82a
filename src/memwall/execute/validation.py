"""Validation of a sweep folder: every measurement predicted, side by side, and stored.

Owns: :func:`cached_predictor` (predictions stored like sweep cases, so a rerun predicts
only what changed), :func:`prefetch` (the predictions made on the worker processes of
:func:`memwall.execute.pool.map_cases`, not one after another),
:func:`predict_measurements` (both, in the per-user cache, with progress: what
``memwall validate`` and a sweep's validation run) and
:func:`write_validation` (``validation.json`` and the validation figure beside a sweep's
results). The judge itself is :mod:`memwall.study.validation`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..progress import Phase
from ..simulation import Case
from ..study.measurements import Measurement
from ..study.validation import (
    ERAS,
    CaseResult,
    Predictor,
    case_for,
    default_predictor,
    known_ids,
    to_json,
    validate,
)
from ..vocabulary import GENERATE


def cached_predictor(folder: str | Path, predictor: Predictor | None = None) -> Predictor:
    """``predictor`` (default :func:`memwall.simulation.run_case`), its answers stored in
    ``folder`` like sweep cases: keyed by the case, the machine profile, the network and
    :data:`memwall.MODEL_VERSION`, so a rerun predicts only what changed."""
    from ..simulation.row import case_key
    from .store import Store

    store = Store(folder, content="result")
    store.clean_temps()
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


class _Replays(dict):
    """Replays kept in memory by :func:`memwall.simulation.replay.replay_key` (the
    :class:`memwall.simulation.replay.ReplayCache` a group's cases share)."""

    def put(self, key: str, counters: list) -> None:
        self[key] = counters


def _predict_one(case: Case, replays: _Replays | None = None) -> tuple[Case, dict[str, Any] | None]:
    from ..simulation import run_case

    try:
        return case, dict(run_case(case, replays=replays))
    except Exception:  # noqa: BLE001 - validate() asks again in the parent and reports why on the case
        return case, None


def _predict_group(cases: tuple[Case, ...]) -> list[tuple[Case, dict[str, Any] | None]]:
    """:func:`_predict_one` of each case, one after another in one worker, sharing what the
    engine replayed: a multi-device case's stages are kept in the worker
    (:func:`memwall.simulation.replay.replay_once`), a one-device case's replay (and each
    step of a whole request's) in the group's own table, by its
    :func:`memwall.simulation.replay.replay_key`."""
    replays = _Replays()
    return [_predict_one(case, replays) for case in cases]


# A prediction's cost in step replays of a large model: a multi-device case replays one
# stage kind whole and of the others (first and last: at most two more) their edges and
# the layers' first kernels (memwall.simulation.reuse: about a quarter of a stage each,
# measured), a whole request its prefill and a few decode steps (about one such replay in
# all), any other one-device case a fraction of one; a case whose replays its group already
# made costs its timing alone (about a tenth). Only the order of the work follows them.
ONE_DEVICE_COST = 0.05
EDGE_STAGE_COST = 0.25
REQUEST_COST = 1.0
REPEAT_COST = 0.1


def replay_groups(cases: Sequence[Case]) -> list[tuple[Case, ...]]:
    """The cases in groups whose devices may replay the same stages, longest first.

    Two cases whose machines replay alike (:func:`engine_fields`: an H200 beside an H100)
    and whose step options are the same replay the same steps, bit for bit; two
    multi-device ones may also differ in the data-parallel degree, the ZeRO stage or the
    micro-batches a step accumulates and still give each device the same shard to run.
    Run in one worker, the second case reuses the first's replays (on the shipped set,
    32 groups for 40 multi-device cases: 2.2e9 of 9.3e9 line lookups not replayed twice).
    The grouping only decides which worker predicts what: a case grouped with another
    whose steps turn out to differ replays its own."""
    from ..errors import InputError
    from ..options import DEVICES, STEP
    from ..profiles import load_machine
    from ..simulation.replay import case_engine_fields

    groups: dict[str, list[Case]] = {}
    for case in cases:
        try:
            engine = case_engine_fields(load_machine(case.machine), case)
        except InputError:  # predicted alone: its worker reports why
            groups[json.dumps(["alone", case.as_dict()], sort_keys=True, default=str)] = [case]
            continue
        shard = {k: v for k, v in case.key(STEP, DEVICES).items()
                 if case.parallel.devices == 1 or k not in ("dp", "zero", "accumulate")}
        groups.setdefault(json.dumps([engine, case.phase, shard], sort_keys=True, default=str), []).append(case)

    return [tuple(g) for g in sorted(groups.values(), key=group_cost, reverse=True)]


def group_cost(group: Sequence[Case]) -> float:
    """What a group of :func:`replay_groups` costs to predict, in step replays of a large
    model (the weights of the order and of the time left)."""
    def cost(case: Case) -> float:
        if case.parallel.devices > 1:
            return 1.0 + EDGE_STAGE_COST * (min(case.parallel.pp, 3) - 1)
        return REQUEST_COST if case.phase == GENERATE else ONE_DEVICE_COST

    return cost(group[0]) + REPEAT_COST * sum(map(cost, group[1:]))


def prefetch(cases: Sequence[Case], folder: str | Path, jobs: int | None = None,
             phase: Phase | None = None) -> set[Case]:
    """Predict, on ``jobs`` worker processes (None: the cores), every case not yet stored
    in ``folder`` (:func:`cached_predictor`'s store), so that the validation's predictions
    run side by side rather than one after another. A case that fails is left for
    :func:`validate`, which reports its reason. Returns the cases found stored or
    tried; ``phase`` counts each of them."""
    from ..simulation.row import case_key
    from .pool import default_jobs, map_cases
    from .store import Store

    store = Store(folder, content="result")
    unique = list(dict.fromkeys(cases))
    todo = [c for c in unique if (store.get(case_key(c)) or {}).get("status") != "ok"]
    seen = set(unique) - set(todo)
    if phase is not None:
        phase.update(len(seen))  # stored: nothing to predict
    # Longest first: a multi-device prediction takes seconds where one device's takes a
    # fraction of one, so the workers finish together instead of one waiting on the last;
    # the cases that replay the same stages together, in one worker.
    groups = replay_groups(todo)
    jobs = min(jobs or default_jobs(), len(groups))
    if jobs < 2:
        return seen
    if phase is not None:
        phase.weigh(sum(map(group_cost, groups)))
    # Ctrl-C, a dead worker: the workers are killed, not waited for; finished predictions are kept
    for group, predicted in zip(groups, map_cases(_predict_group, groups, jobs), strict=True):
        for case, result in predicted:
            if result is not None:
                result.pop("kernels", None)
                store.put({"key": case_key(case), "status": "ok", "case": case.as_dict(), "result": result})
            seen.add(case)
        if phase is not None:
            phase.update(len(group), work=group_cost(group))
    return seen


def _predictable(measured: Sequence[Measurement]) -> list[Case]:
    """The distinct cases of the measurements whose machine and network memwall knows (a
    network file included): the ones a worker can predict."""
    known = known_ids("machine"), known_ids("network")
    return list(dict.fromkeys(case_for(m) for m in measured if m.machine in known[0]
                              and (m.network is None or m.network in known[1] or m.network_file is not None)))


def predictions_to_make(measurements: str | Path | None = None, one_device: bool = False) -> tuple[int, int]:
    """(predictions the validation needs, those not yet in the per-user cache): what a
    sweep's estimate says before it starts."""
    from ..simulation.row import case_key
    from ..study.measurements import load_measurements
    from .cache import predictions_folder
    from .store import Store

    measured = load_measurements(measurements)
    if one_device:
        measured = [m for m in measured if m.dp * m.tp * m.pp == 1]
    cases = _predictable(measured)
    folder = predictions_folder(None)
    if folder is None:
        return len(cases), len(cases)
    store = Store(folder, content="result", on_damaged=None)
    return len(cases), sum(1 for c in cases if (store.get(case_key(c)) or {}).get("status") != "ok")


def predict_measurements(measured: Sequence[Measurement], fallback: str | Path | None = None, *,
                         jobs: int | None = None, command: str = "memwall validate",
                         progress: bool = True) -> list[CaseResult]:
    """Every measurement judged (:func:`memwall.study.validation.validate`), its predictions
    made on worker processes and stored in the per-user cache (:mod:`memwall.execute.cache`;
    ``fallback`` when it is off, None: kept only while this runs), so the same model
    predicts each case once; said on stderr as it goes (:class:`memwall.progress.Phase`)."""
    import tempfile

    from .cache import predictions_folder

    folder = predictions_folder(Path(fallback) if fallback is not None else None)
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="memwall-validation-") as scratch:
            return predict_measurements(measured, scratch, jobs=jobs, command=command, progress=progress)
    cases = _predictable(measured)
    with Phase(command, f"predicting {len(measured)} measurements", len(cases), unit="prediction",
               enabled=progress) as phase:
        counted = prefetch(cases, folder, jobs, phase)
        predict = cached_predictor(folder)

        def predict_counted(case: Case) -> Mapping[str, Any]:  # what prefetch left (one worker)
            try:
                return predict(case)
            finally:
                if case not in counted:
                    counted.add(case)
                    phase.update()

        return validate(measured, predict_counted)


def write_validation(out: str | Path, measurements: str | Path | None = None, *, jobs: int | None = None,
                     one_device: bool = False, progress: bool = True) -> list[Path]:
    """Validate the shipped measurements (or those in ``measurements``, a file or folder) into
    a sweep folder: ``validation.json`` beside its results, ``figures/validation.png`` (and
    ``.svg``, and the figure's data as ``.csv``) beside its figures.

    Predictions are stored in the per-user cache (``out/validation/`` when it is off; see
    :func:`predict_measurements`), made on ``jobs`` processes, and the figure is redrawn only when the
    table it draws differs from the one last drawn. ``one_device`` keeps the measurements
    of one device (a quick sweep's: the multi-device point checks take minutes to predict;
    ``memwall validate`` and the full sweep run them all)."""
    from ..study.measurements import load_measurements
    from .store import atomic_write, remove_stale_temps, write_csv

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out, "validation.json".__eq__)  # what a killed writer left
    remove_stale_temps(out / "figures", "validation.csv".__eq__)
    measured = load_measurements(measurements)
    if one_device:
        measured = [m for m in measured if m.dp * m.tp * m.pp == 1]
    results = predict_measurements(measured, out / "validation", jobs=jobs, command="memwall sweep",
                                   progress=progress)
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


def validation_figure(cases: Iterable[CaseResult], out_dir: str | Path) -> list[Path]:
    """Figure 7 (:mod:`memwall.figures.validation`) of ``cases``, its points coloured by
    :data:`ERAS`: writes ``validation.png`` and ``validation.svg`` into out_dir and returns
    their paths."""
    from ..figures import validation
    from ..figures._style import save

    data = {"cases": [c.as_dict() for c in cases],
            "eras": [{"name": name, "first": lo, "last": hi} for name, lo, hi in ERAS]}
    return save(validation.draw(data), out_dir, "validation")
