"""Every figure of the era sweep is written, as PNG, SVG and CSV, is not empty, and is
redrawn only when its data changed."""

from __future__ import annotations

import shutil

import pytest

from memwall.figures import NAMES
from memwall.study import tables as tb
from memwall.study.draw import write_figures


@pytest.fixture
def sweep_copy(tmp_path, quick_sweep):
    """The session's sweep folder (its cases feed the roofline), copied so tests may write."""
    out = tmp_path / "sweep"
    shutil.copytree(quick_sweep.out, out)
    return out


def test_every_figure_is_written_and_not_empty(sweep_copy, pyplot, quick_sweep, fast_measurements):
    machines = tb.machine_table()
    ledger = tb.ledger_table(batches=(1, 64, 1024, 4096))
    written = write_figures(sweep_copy, quick_sweep.rows, machines=machines, ledger=ledger,
                               measurements=fast_measurements)
    assert sorted(written) == sorted(NAMES)
    for name, paths in written.items():
        assert [p.suffix for p in paths] == [".png", ".svg"]
        for p in paths:
            assert p.parent == sweep_copy / "figures"
            assert p.stat().st_size > 5000, f"{p.name} looks empty"
        svg = paths[1].read_text()
        assert "No data for this figure" not in svg, f"{name} had no data"
        csv = paths[0].with_suffix(".csv")
        assert csv.is_file() and len(csv.read_text().splitlines()) > 1, f"{name} has no data CSV"


def test_a_figure_is_redrawn_only_when_its_data_changed(sweep_copy, pyplot, quick_sweep):
    rows = quick_sweep.rows
    names = ["regime_flip", "stall_breakdown"]
    png = {n: sweep_copy / "figures" / f"{n}.png" for n in names}
    write_figures(sweep_copy, rows, only=names)
    for p in png.values():
        p.write_bytes(b"marker")  # a redraw would overwrite it
    write_figures(sweep_copy, rows, only=names)
    assert all(p.read_bytes() == b"marker" for p in png.values())
    # One row's number changes: the figures that draw it are redrawn.
    changed = [dict(r) for r in rows]
    target = next(r for r in tb.per_example_rows(changed))
    target["stall_fraction"] = 0.5 * (target["stall_fraction"] or 0.1)
    write_figures(sweep_copy, changed, only=names)
    assert all(p.read_bytes() != b"marker" for p in png.values())


def test_a_figure_whose_drawing_changed_is_redrawn_though_its_data_did_not(sweep_copy, pyplot, quick_sweep,
                                                                           monkeypatch):
    from memwall.study import draw

    png = sweep_copy / "figures" / "regime_flip.png"
    write_figures(sweep_copy, quick_sweep.rows, only=["regime_flip"])
    png.write_bytes(b"marker")
    real = draw.drawing_version
    monkeypatch.setattr(draw, "drawing_version", lambda name: real(name) + "-edited")
    write_figures(sweep_copy, quick_sweep.rows, only=["regime_flip"])
    assert png.read_bytes() != b"marker"


def test_figures_say_what_they_lack_rather_than_vanish(tmp_path, pyplot):
    # (the validation, the high-water, the capacity sweep and the energy shares draw from the shipped data, not
    # the sweep's rows)
    sweep_figures = [n for n in NAMES
                     if n not in ("validation", "activation_highwater", "llc_capacity", "bytes_per_token",
                                  "energy_share")]
    written = write_figures(tmp_path, [], machines=[], ledger=[], only=sweep_figures)
    for paths in written.values():
        assert all(p.stat().st_size > 0 for p in paths)
        assert "No data for this figure" in paths[1].read_text()


def test_growth_rate_fit():
    years = [2000, 2002, 2004, 2006]
    assert tb.growth_per_two_years(years, [1, 3, 9, 27]) == pytest.approx(3.0)
    assert tb.growth_per_two_years(years, [5, 8, 12.8, 20.48]) == pytest.approx(1.6)


def test_drift_is_fitted_by_era():
    # Two eras with different growth: each fit sees only its own machines.
    table = [{"id": f"v{y}", "kind": "vector" if y < 1988 else "array", "year": y, "peak": 2.0 ** ((y - 1980) / 2),
              "bandwidth": 1.0} for y in (1980, 1984, 1988)]
    table += [{"id": f"g{y}", "kind": "gpu" if y < 2018 else "tpu", "year": y, "peak": 3.0 ** ((y - 2010) / 2), "bandwidth": 1.6 ** ((y - 2010) / 2)}
              for y in (2010, 2014, 2018)]
    for r in table:
        r["balance"] = r["peak"] / r["bandwidth"]
    fits = {f["fit"]: f for f in tb.drift_fits(table)}
    assert fits["scalar-vector"]["peak_growth"] == pytest.approx(2.0)
    assert fits["scalar-vector"]["machines"] == 3
    assert fits["accelerator"]["peak_growth"] == pytest.approx(3.0)
    assert fits["accelerator"]["balance_growth"] == pytest.approx(3.0 / 1.6)
    assert fits["gholami-window"]["machines"] == 3  # 2010-2018 only
    assert fits["all"]["machines"] == 6


def test_live_bytes_peak_is_the_ledger():
    from memwall.networks import load_network
    from memwall.workloads.config import TrainingConfig
    from memwall.workloads.liveness import live_bytes
    from memwall.workloads.step import build_step, declare

    net = load_network("affine-48x1024")
    for ck in ("none", "sqrt"):
        cfg = TrainingConfig(batch=64, dtype=net.dtype, checkpoint=ck)
        live = live_bytes(declare(net, cfg))
        ledger = build_step(net, cfg).ledger.as_dict()
        assert max(r["activations"] for r in live) == ledger["activations"]
        assert max(r["total"] for r in live) == ledger["peak"]
        acts = [r["activations"] for r in live]
        top = acts.index(max(acts))
        assert acts[0] < acts[top] and acts[-1] < acts[top]  # rises through forward, falls in backward


def test_the_flip_is_drawn_on_memory_ratio_when_rows_have_it(tmp_path, pyplot, quick_sweep):
    rows = [dict(r) for r in quick_sweep.rows]
    assert any(r.get("memory_ratio") for r in tb.per_example_rows(rows))  # the timing reports it
    without = [{**r, "memory_ratio": None} for r in rows]
    old = write_figures(tmp_path / "a", without, only=["regime_flip"])["regime_flip"][1].read_text()
    assert "memory time" not in old  # rows without memory_ratio: the stall-fraction figure
    svg = write_figures(tmp_path / "b", rows, only=["regime_flip"])["regime_flip"][1].read_text()
    assert "memory time ÷ arithmetic time" in svg and "dispatch and start-up" in svg


def test_the_batch_window_turns_where_the_steps_own_bytes_say(tmp_path, pyplot, quick_sweep):
    # bf16 GPT-2: per micro-batch each weight is read twice (forward, backward) and its
    # gradient written once, 2 bytes each; the update's traffic is counted apart.
    wb = tb.weight_bytes("gpt2-small", 16)
    assert wb["b_w"] == pytest.approx(6.0, rel=0.02)
    assert wb["b_update"] > 0
    assert wb["flops_per_token"] == pytest.approx(6.0, rel=0.05)
    rows = tb.window_rows(quick_sweep.rows)
    model = tb.window_model(rows)
    assert model and all(m["t_min"] == pytest.approx(m["balance"] * wb["b_w"] / wb["flops_per_token"])
                         for m in model)
    svg = write_figures(tmp_path, quick_sweep.rows, only=["batch_window"])["batch_window"][1].read_text()
    assert "T_min" in svg


def test_bytes_per_token_fall_as_one_over_t_except_the_activations():
    a, b = tb.bytes_per_token_table(batches=(4, 8), dp=8)
    assert b["tokens"] == 2 * a["tokens"]
    for part in ("weights", "optimizer", "communication"):
        assert b[part] == pytest.approx(a[part] / 2, rel=0.02), part  # read once per visit, shared by the batch
    assert b["activations"] == pytest.approx(a["activations"], rel=0.01)  # every token's own
    # the ring all-reduce: 2 (N-1)/N of 16-bit gradients, per token
    assert a["communication"] * a["tokens"] == pytest.approx(2 * 7 / 8 * 2 * 124_439_808, rel=0.01)


def test_the_batch_window_s_ceiling_and_floor_per_optimizer_step():
    crit = tb.critical_batch("gpt2-small")
    assert crit["non_embedding"] == 85_056_000  # GPT-2 small without its token and position tables
    loss = (8.8e13 / 85_056_000) ** 0.076  # Kaplan et al. 2020, eq. 1.1
    assert crit["b_crit"] == pytest.approx(2e8 / loss ** (1 / 0.21))  # their eq. 1.4
    assert tb.critical_batch("nettalk") is None
    rows = [{"machine": "h100-sxm", "name": "H100", "balance": 295.3, "network": "gpt2-small", "seq_len": 1024,
             "dtype": "bf16"}]
    (model,) = tb.window_model(rows)
    assert model["t_step"] == pytest.approx(295.3 * (model["b_update"] + 3.5) / model["flops_per_token"])
    assert model["t_min"] < model["t_step"] < model["t_opt"] < model["b_crit"]
    assert model["t_opt"] == pytest.approx((model["t_step"] * model["b_crit"]) ** 0.5)


def test_the_wide_network_is_drawn_beside_the_window_not_instead_of_it():
    def row(machine, network, batch, fusion="none"):
        return {"machine": machine, "name": machine, "kind": "gpu", "status": "ok", "updates": "minibatch",
                "phase": "train", "checkpoint": "none", "network": network, "batch": batch, "fusion": fusion,
                "tokens": 16 * batch, "fraction_of_peak": 0.1, "d_min": 1100.0, "seconds": 1.0}
    rows = [row(m, "gpt2-small", b) for m in ("h100-sxm", "a100-sxm") for b in (1, 8, 64)]
    rows += [row("h100-sxm", "gpt2-xl", b, f) for f in ("none", "full") for b in (1, 8, 64)]
    assert {r["network"] for r in tb.window_rows(rows)} == {"gpt2-small"}
    wide = tb.wide_window_rows(rows)
    assert {(r["network"], r["fusion"]) for r in wide} == {("gpt2-xl", "none"), ("gpt2-xl", "full")}
    assert all(r["d_model"] == 1600 for r in wide)


# --- the registry: one module a figure, each drawn by matplotlib and as a plotly spec -------------


def test_every_figure_module_is_registered_numbered_and_captioned():
    import pkgutil

    import memwall.figures as figures

    modules = {m.name for m in pkgutil.iter_modules(figures.__path__) if not m.name.startswith("_")}
    assert set(figures.FIGURES) == modules
    numbers = [m.NUMBER for m in figures.FIGURES.values()]
    assert len(set(numbers)) == len(numbers) and numbers == sorted(numbers)
    for name, module in figures.FIGURES.items():
        assert module.NAME == name and module.TITLE.strip() and module.CAPTION.strip(), name
        assert module.TABLES and all(isinstance(t, str) for t in module.TABLES), name
    assert set(figures.NAMES) | set(figures.OPT_IN) == set(figures.FIGURES)
    assert set(figures.OPT_IN) == {"gholami", "tricks"}


def test_a_figure_never_loads_the_model_or_matplotlib_on_import():
    import subprocess
    import sys

    code = ("import sys, memwall.figures; print(sorted(m for m in sys.modules if m.startswith(("
            "'memwall.simulation', 'memwall.simulate', 'memwall.engine', 'memwall.workloads', 'memwall.networks', "
            "'memwall.profiles', 'memwall._csim', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_every_figure_draws_and_specs_an_empty_sweep(pyplot):
    from memwall.figures import FIGURES

    for name, module in FIGURES.items():
        fig = module.draw({})
        assert fig.axes, name
        pyplot.close(fig)
        spec = module.plotly({})
        assert spec["data"] == [] and "No data" in spec["layout"]["annotations"][0]["text"], name
        assert module.prose({}) == "", name


# --- text boxes: nothing overprints, nothing is cut off ------------------------------------------


def _text_boxes(fig) -> tuple[list, list]:
    """(name, window box) of every drawn tick label, and of every other text box: titles, axis
    labels, annotations and texts, legends, the footnote and the suptitle."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, texts = [], []

    def add(where, artist, what):
        if artist is None or not artist.get_visible():
            return
        if isinstance(artist, Text):
            if not artist.get_text().strip():
                return
            box = Text.get_window_extent(artist, renderer)  # the words, without an annotation's leader line
        else:
            box = artist.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            where.append((what, box))

    for k, ax in enumerate(fig.axes):
        shown = ax.get_visible() and ax.axison
        drawn = [tick for axis_ in (ax.xaxis, ax.yaxis) for tick in axis_._update_ticks()] if shown else []
        for lab in (lab for tick in drawn for lab in (tick.label1, tick.label2)):  # the ticks within the view
            add(ticks, lab, f"axes {k} tick {lab.get_text()!r}")
        labels = (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label) if shown else ()
        for t in (*labels, *ax.texts):
            add(texts, t, f"axes {k} {t.get_text()[:40]!r}")
        add(texts, ax.get_legend(), f"axes {k} legend")
    for t in fig.texts:
        if t is not fig._suptitle:
            add(texts, t, f"figure text {t.get_text()[:40]!r}")
    for leg in fig.legends:
        add(texts, leg, "figure legend")
    if fig._suptitle is not None:
        add(texts, fig._suptitle, "suptitle")
    return ticks, texts


def overprints(fig) -> list[str]:
    """What is wrong with a figure's text: a box cut by the figure's edge, two text boxes
    overlapping, or a text box over a tick label."""
    ticks, texts = _text_boxes(fig)
    edge = fig.bbox.padded(1)
    out = [f"{n} is cut off by the figure's edge" for n, b in ticks + texts
           if not (edge.contains(b.x0, b.y0) and edge.contains(b.x1, b.y1))]
    for i, (n1, b1) in enumerate(texts):
        out += [f"{n1} overlaps {n2}" for n2, b2 in texts[i + 1:] if b1.overlaps(b2)]
        out += [f"{n1} overlaps {n2}" for n2, b2 in ticks if b1.overlaps(b2)]
    return out


@pytest.fixture(scope="module")
def figure_data(tmp_path_factory, quick_sweep, fast_measurements):
    """Each sweep figure's tables from the session's small sweep, plus a whole-memory-system
    synthetic sweep (figure 6's second panel) of its own; the validation from the fast
    measurements."""
    from memwall.execute import sweep as sw
    from memwall.execute.validation import write_validation
    from memwall.study import design
    from memwall.study.draw import figure_data, makers

    out = tmp_path_factory.mktemp("figure-text")
    shutil.copytree(quick_sweep.out, out, dirs_exist_ok=True)
    extra = design.product(design.synthetic_machines("h100-sxm", decades=4, per_decade=1, hierarchy=True),
                           ["nettalk"], [1], updates="per-example")
    rows = list(quick_sweep.rows) + list(sw.run_sweep(extra, out / "hier", jobs=2, progress=False).rows)
    tables = makers(out, rows, machines=tb.machine_table(), ledger=tb.ledger_table(batches=(1, 64, 1024, 4096)))
    write_validation(out, fast_measurements, progress=False)
    data = {name: tables[name][1]() for name in NAMES if name in tables}
    data["validation"] = figure_data(out, "validation")["data"]
    return data


@pytest.mark.parametrize("name", NAMES)
def test_no_figure_text_overprints_or_is_cut_off(name, figure_data, pyplot):
    from memwall.figures import FIGURES

    fig = FIGURES[name].draw(figure_data[name])
    try:
        assert fig.axes and not overprints(fig), f"{name}: " + "; ".join(overprints(fig))
    finally:
        pyplot.close(fig)


def test_the_overprint_check_sees_an_overprint(pyplot):
    fig, ax = pyplot.subplots(figsize=(4, 3))
    ax.set_xlabel("balance")
    ax.text(0.5, -0.12, "a note over the tick labels", transform=ax.transAxes, ha="center")
    ax.set_title("a title far wider than the little figure it is drawn on, so it runs off both edges")
    found = " ".join(overprints(fig))
    assert "over the tick labels" in found and "cut off" in found


def test_the_flip_finding_says_the_seeds_quantity_beside_the_whole_steps():
    from memwall.figures.regime_flip import finding_prose

    data = {"finding": [
        {"machine": "cray-1", "name": "Cray-1", "year": 1976, "kind": "vector", "memory_ratio": 1.35,
         "memory_ratio_micro": 0.676, "bound": "timing.memory_ports", "bound_class": "memory"},
        {"machine": "vax", "name": "VAX-11/780", "year": 1978, "kind": "scalar", "memory_ratio": 0.04,
         "memory_ratio_micro": 0.04, "bound": "issue_costs.fadd", "bound_class": "compute"}]}
    text = finding_prose(data)
    assert "Cray-1" in text and "1.35" in text and "0.676" in text and "seed counts it" in text


def test_figure_data_that_needs_no_sweep_is_computed_once_per_user(tmp_path, monkeypatch):
    from memwall.study import draw

    monkeypatch.setenv("MEMWALL_CACHE", str(tmp_path / "cache"))
    calls = []

    def data_of():
        calls.append(1)
        return {"rows": [{"x": 1.0, "y": 2.0}]}

    first = draw._shared_data("llc_capacity", {"network": "n", "fingerprint": "f"}, data_of)
    again = draw._shared_data("llc_capacity", {"network": "n", "fingerprint": "f"}, data_of)
    assert first == again and len(calls) == 1  # another sweep folder, the same inputs: reused
    draw._shared_data("llc_capacity", {"network": "n", "fingerprint": "g"}, data_of)
    assert len(calls) == 2  # other inputs: computed
    monkeypatch.setenv("MEMWALL_CACHE", "off")
    draw._shared_data("llc_capacity", {"network": "n", "fingerprint": "f"}, data_of)
    assert len(calls) == 3


def test_the_batch_windows_turn_is_the_binding_rules_not_only_the_seeds():
    from memwall.figures.batch_window import _turns

    rows = [{"tokens": 128, "bound_class": "memory"}, {"tokens": 512, "bound_class": "mixed"},
            {"tokens": 2048, "bound_class": "compute"}]
    assert _turns(rows, 138.2) == "seed's turn ≈138 tokens; compute-bound from 2048 tokens"
    assert _turns(rows[:2], 138.2).endswith("not compute-bound by 512 tokens")


def test_the_decode_figure_shades_each_predictions_interval_around_its_rate():
    """Issue 26, item 6: a band where a prediction is plotted, the seconds' interval
    inverted for a rate (docs/intervals.md)."""
    from matplotlib.collections import PolyCollection

    from memwall.figures import decode

    def row(batch: int, low: float | None, high: float | None) -> dict:
        seconds = 0.01 * (1 + batch / 64)
        return {"status": "ok", "phase": "decode", "machine": "h100-sxm", "year": 2022, "network": "llama3-8b",
                "context": 512, "batch": batch, "seconds": seconds, "tokens_per_second": batch / seconds,
                "bound_class": "memory", "interval_low": low and seconds * low, "interval_high": high and seconds * high}

    banded = decode.draw({"rows": [row(b, 0.8, 1.6) for b in (1, 8, 64)]})
    (band,) = [c for c in banded.axes[0].collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    rates = [b / row(b, 1, 1)["seconds"] for b in (1, 8, 64)]
    # the rate's band runs from rate / 1.6 (the slow end) to rate / 0.8 (the fast end)
    assert min(ys) == pytest.approx(rates[0] / 1.6) and max(ys) == pytest.approx(rates[-1] / 0.8)
    bare = decode.draw({"rows": [row(b, None, None) for b in (1, 8, 64)]})
    assert not [c for c in bare.axes[0].collections if isinstance(c, PolyCollection)]
    spec = decode.plotly({"rows": [row(b, 0.8, 1.6) for b in (1, 8, 64)]})
    assert [t.get("fill") for t in spec["data"] if "interval" in t["name"]] == [None, "tonexty"]
