"""Drawing a sweep's figures: compute each figure's tables, reuse them while what they are
computed from is unchanged, draw them (:mod:`memwall.figures`) and write the files.

Owns: which tables each figure is given (:data:`TABLES`: how each is computed, and what
makes stored tables reusable), ``figures/NAME.json`` (the tables, their inputs and their
digest), the CSVs beside it, and redrawing a figure only when its digest changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..figures import FIGURES, NAMES, OPT_IN
from ..model_version import MODEL_VERSION
from . import energy
from . import gholami as gh
from . import tables as tb

Row = Mapping[str, Any]
# What a figure's tables are computed from, to reuse them by (None: always computed), and the tables.
Maker = tuple[Callable[[], Any] | None, Callable[[], dict[str, Any]]]


def _network_inputs(network: str, **params: Any) -> dict[str, Any]:
    from .identity import network_info

    return {"model": MODEL_VERSION, "network": network_info(network).fingerprint, **params}


def _llc_inputs(cases: Sequence[tuple[str, str]]) -> dict[str, Any]:
    from .identity import machine_info, network_info

    return {"model": MODEL_VERSION, "cases": [[machine_info(m).fingerprint, network_info(n).fingerprint]
                                              for m, n in cases]}


def makers(out: str | os.PathLike[str], rows: Sequence[Row], *,
           machines: Sequence[Mapping[str, Any]] | None = None, ledger: Sequence[Mapping[str, Any]] | None = None,
           gholami: Mapping[str, Any] | None = None) -> dict[str, Maker]:
    """Per figure (but the validation, which :func:`write_figures` hands to the judge): what
    its tables are computed from, and the tables (see :func:`write_figures`). A figure whose
    tables are a selection of the sweep's rows gives them itself (its ``from_rows``)."""
    own: dict[str, Maker] = {name: (None, partial(module.from_rows, rows)) for name, module in FIGURES.items()
                             if hasattr(module, "from_rows")}
    return own | {
        "balance_drift": (None, lambda: tb.balance_drift_data(machines if machines is not None
                                                              else tb.machine_table(_roofs(out)))),
        "batch_window": (None, lambda: _batch_window(rows)),
        "capacity_ledger": ((lambda: _network_inputs(tb.LEDGER_NETWORK, kind="ledger")) if ledger is None else None,
                            lambda: {"ledger": list(ledger if ledger is not None else tb.ledger_table())}),
        "roofline": (None, lambda: tb.roofline_data(out, rows)),
        "activation_highwater": (lambda: _network_inputs(tb.LEDGER_NETWORK, batch=tb.HIGHWATER_BATCH),
                                 lambda: {"live": tb.highwater_table()}),
        # Replays three steps (seconds); kept while the model, the networks and the
        # machines' profiles are unchanged.
        "llc_capacity": (lambda: _llc_inputs(tb.LLC_CASES), lambda: {"capacity": tb.llc_capacity_table()}),
        "bytes_per_token": (lambda: _network_inputs(tb.BYTES_PER_TOKEN_NETWORK, dp=tb.BYTES_PER_TOKEN_DP,
                                                    seq_len=tb.BYTES_PER_TOKEN_SEQ),
                            lambda: {"bytes": tb.bytes_per_token_table()}),
        "tricks": (tb.tricks_inputs, lambda: {"ladder": tb.tricks_ladder()}),
        "gholami": (lambda: gh.gholami_inputs(gholami or {}), lambda: gh.gholami_data(gholami or {})),
        # From the profiles alone: the machines of ``machines`` where given, else every shipped one.
        "energy_balance": (None, lambda: energy.balance_data(
            None if machines is None else [r["id"] for r in machines])),
        # Runs its steps (up to thirteen, a few seconds); kept while the model, networks and profiles are unchanged.
        "energy_share": (energy.share_inputs, energy.share_data),
    }


def _batch_window(rows: Sequence[Row]) -> dict[str, Any]:
    window = tb.window_rows(rows)
    return {"rows": window, "model": tb.window_model(window), "wide": tb.wide_window_rows(rows)}


def _validation(folder: Path) -> dict[str, Any] | None:
    """The sweep's validation.json (the judge writes it beside the results), if there is one."""
    path = folder / "validation.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"damaged ({type(err).__name__}); delete it or run the sweep again",
                         file=str(path)) from None
    if not (isinstance(data, dict) and isinstance(data.get("summary"), dict)
            and isinstance(data.get("cases"), list) and all(isinstance(c, dict) for c in data["cases"])):
        raise InputError("expected {\"cases\": [...], \"summary\": {...}} as the sweep writes it",
                         file=str(path))
    return data


def _roofs(out: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The sweep's machines as machines.json has them (none before a sweep wrote it)."""
    from ..execute.sweep import read_machine_roofs

    return read_machine_roofs(out)


def figure_data(folder: str | os.PathLike[str], name: str) -> dict[str, Any] | None:
    """What figure ``name`` was last drawn from (``figures/name.json``): ``data`` (table
    name -> records), ``inputs`` and ``digest``; None if it was never drawn. The validation's
    data is the judge's ``validation.json`` (a damaged one is an InputError)."""
    if name == "validation":
        data = _validation(Path(folder))
        return None if data is None else {"data": data, "inputs": None, "digest": None}
    path = Path(folder) / "figures" / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


@cache
def drawing_version(name: str) -> str:
    """A hash of the code that draws figure ``name`` (its module and the shared style), so
    a figure whose drawing changed is drawn again though its data did not."""
    import importlib.util

    texts = []
    for module in (FIGURES[name].__name__, "memwall.figures._style"):
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        texts.append(Path(origin).read_bytes() if origin else module.encode())
    return hashlib.sha256(b"\0".join(texts)).hexdigest()[:16]


def write_figures(out: str | os.PathLike[str], rows: Sequence[Row], *,
                  machines: Sequence[Mapping[str, Any]] | None = None,
                  ledger: Sequence[Mapping[str, Any]] | None = None,
                  only: Iterable[str] | None = None,
                  measurements: str | os.PathLike[str] | None = None,
                  gholami: Mapping[str, Any] | None = None, quick: bool = False,
                  progress: bool = True, command: str = "memwall sweep",
                  jobs: int | None = None) -> dict[str, list[Path]]:
    """Draw every figure (or those in ``only``) into ``out/figures``; returns name -> [PNG, SVG].

    Beside each PNG and SVG go ``name.csv`` (the figure's data, one table) and
    ``name.json`` (all its tables, what they were computed from, and their digest). A
    figure whose data has the digest it was last drawn with is not drawn again; data that
    needs no sweep (the ledger, the high-water) is reused while the model and the network
    are unchanged. ``machines`` (see :func:`memwall.study.tables.machine_table`) and
    ``ledger`` (see :func:`memwall.study.tables.ledger_table`) default to the shipped
    profiles and the affine-48x1024 network's steps; the validation figure predicts the
    shipped measurements, or those in ``measurements`` (file or folder). Figures in
    :data:`memwall.figures.OPT_IN` are drawn only when named in ``only``; ``gholami``
    holds keyword arguments of :func:`memwall.study.gholami.gholami_table`. ``quick`` (a
    quick sweep's) validates the one-device measurements only. Each figure is said on
    stderr as it is drawn (``progress``; :class:`memwall.progress.Phase`). The figures to
    draw are drawn on up to ``jobs`` worker processes (None: the cores), their files the
    same as one process draws.
    """
    from ..execute.pool import LazyPool, default_jobs
    from ..execute.store import remove_stale_temps
    from ..progress import Phase

    names = list(only) if only else list(NAMES)
    folder = Path(out) / "figures"
    remove_stale_temps(folder, lambda final: final.endswith((".json", ".csv")))  # a killed writer's
    tables = makers(out, rows, machines=machines, ledger=ledger, gholami=gholami)
    written: dict[str, list[Path]] = {}
    drawn = [n for n in names if n in tables]

    def drawn_as(fig: _Figure, paths: list[Path]) -> None:
        _keep_drawing(fig.digest, fig.name, paths)
        written[fig.name] = _finish(fig)
        phase.update()

    width = jobs or default_jobs()
    with Phase(command, "drawing figures", len(drawn), unit="figure", enabled=progress) as phase, \
            LazyPool(width) as pool:
        # Drawing is matplotlib's work, a second or two a figure, independent between figures:
        # each figure is handed to the worker processes as soon as its data is ready, so they
        # draw while the data of the next (some of it steps run here) is worked out. A lone
        # figure to draw is drawn here: the first waits until a second shows a pool is worth starting.
        drawing: list[tuple[_Figure, Future[list[Path]]]] = []
        held: list[_Figure] = []
        for name in drawn:  # each figure's data here, in order (some run steps on the pool themselves)
            phase.note(name)
            fig = _prepare(name, out, folder, tables[name])
            if fig.drawn:
                written[name] = _finish(fig)
                phase.update()
            elif width < 2:
                drawn_as(fig, _render(fig.name, fig.data, fig.folder))
            elif not (held or drawing):
                held.append(fig)
            else:
                fig.folder.mkdir(parents=True, exist_ok=True)
                drawing.extend((f, pool.submit(_render_one, (f.name, f.data, f.folder))) for f in (*held, fig))
                held.clear()
        for fig in held:
            drawn_as(fig, _render(fig.name, fig.data, fig.folder))
        for fig, future in drawing:
            phase.note(fig.name)
            drawn_as(fig, future.result())
    if "validation" in names:
        # Predictions of the shipped measurements, independent of the sweep's own cases.
        from ..execute.validation import write_validation

        written["validation"] = write_validation(out, measurements, one_device=quick, progress=progress)
    return {n: written[n] for n in (*NAMES, *OPT_IN) if n in written}


def _shared_data(name: str, inputs: Any, data_of: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A figure's data that needs no sweep (the ledger, the high-water, the capacity
    sweeps), from the per-user cache (:mod:`memwall.execute.cache`) where the same model
    computed it from the same inputs for another sweep folder; computed and kept otherwise."""
    from ..canonical import dumps
    from ..execute.cache import cache_store

    store = cache_store("figures", "data")
    if store is None:
        return data_of()
    key = hashlib.sha256(dumps({"model": MODEL_VERSION, "figure": name, "inputs": inputs}).encode()).hexdigest()[:32]
    record = store.get(key)
    if record is not None and record.get("status") == "ok":
        return record["data"]
    data = data_of()
    try:
        store.put({"key": key, "status": "ok", "figure": name, "data": data})
    except OSError as err:  # a cache that cannot be written costs the reuse, never the figure
        print(f"memwall: the figure cache {store.root} cannot be written ({err})", file=sys.stderr)
    return data


def _drawings() -> Any:
    """The per-user cache's store of drawn figures (None: the cache is off)."""
    from ..execute.cache import cache_store

    return cache_store("drawings", "files")


def _drawn_before(digest: str, paths: Sequence[Path]) -> bool:
    """Write ``paths`` (a figure's PNG and SVG) from the per-user cache, where the same
    drawing code drew the same data for another sweep folder; False when it did not.
    The store's records are checksummed: a damaged one is set aside and the figure drawn."""
    from ..execute.store import atomic_write

    store = _drawings()
    record = store.get(digest[:32]) if store is not None else None
    if record is None or record.get("status") != "ok" or record.get("digest") != digest:
        return False
    files = record["files"]
    if sorted(files) != sorted(p.name for p in paths):
        return False
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    for p in paths:
        atomic_write(p, base64.b64decode(files[p.name]))
    return True


def _keep_drawing(digest: str, name: str, paths: Sequence[Path]) -> None:
    """Keep a figure's drawn files in the per-user cache for the next sweep folder."""
    store = _drawings()
    if store is None:
        return
    try:
        files = {p.name: base64.b64encode(p.read_bytes()).decode("ascii") for p in paths}
        store.put({"key": digest[:32], "status": "ok", "digest": digest, "figure": name, "files": files})
    except OSError as err:  # a cache that cannot be written costs the reuse, never the figure
        print(f"memwall: the drawing cache {store.root} cannot be written ({err})", file=sys.stderr)


@dataclass
class _Figure:
    """One figure between its data and its files: what :func:`_prepare` found, for
    :func:`_render_one` (when not ``drawn`` yet) and :func:`_finish`."""

    name: str
    folder: Path
    inputs: Any
    data: dict[str, Any]
    digest: str
    paths: list[Path]
    drawn: bool  # its PNG and SVG are in place (this folder's, or the per-user cache's)
    current: bool  # its data and digest are this folder's already: nothing to write


def _prepare(name: str, out: str | os.PathLike[str], folder: Path, maker: Maker) -> _Figure:
    """A figure's data and digest; its files put in place where they need no drawing (its
    digest unchanged in this folder, or the same drawing in the per-user cache)."""
    from ..canonical import dumps

    inputs_of, data_of = maker
    stored = figure_data(out, name)
    inputs = inputs_of() if inputs_of else None
    if inputs is not None and stored and stored.get("inputs") == inputs:
        data = stored["data"]
    elif inputs is not None:
        data = _shared_data(name, inputs, data_of)
    else:
        data = data_of()
    digest = hashlib.sha256(dumps({"model": MODEL_VERSION, "drawing": drawing_version(name),
                                   "data": data}).encode()).hexdigest()
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    if stored and stored.get("digest") == digest and all(p.is_file() for p in paths):
        return _Figure(name, folder, inputs, data, digest, paths, drawn=True, current=True)
    return _Figure(name, folder, inputs, data, digest, paths, drawn=_drawn_before(digest, paths), current=False)


def _render(name: str, data: dict[str, Any], folder: Path) -> list[Path]:
    """Draw figure ``name`` from ``data`` and write its PNG and SVG into ``folder`` (on a worker)."""
    from ..figures._style import save

    return save(FIGURES[name].draw(data), folder, name)


def _render_one(job: tuple[str, dict[str, Any], Path]) -> list[Path]:
    return _render(*job)


def _finish(fig: _Figure) -> list[Path]:
    """A drawn figure's CSVs and ``name.json`` (its tables, inputs and digest) beside its files."""
    from ..canonical import dumps
    from ..execute.store import atomic_write, write_csv

    if fig.current:
        return fig.paths
    first = next(iter(fig.data))
    write_csv(fig.folder / f"{fig.name}.csv", fig.data[first])
    for extra in list(fig.data)[1:]:
        write_csv(fig.folder / f"{fig.name}-{extra}.csv", fig.data[extra])
    atomic_write(fig.folder / f"{fig.name}.json", dumps({"inputs": fig.inputs, "digest": fig.digest,
                                                        "data": fig.data}))
    return fig.paths
