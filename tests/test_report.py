"""``memwall report``: one self-contained, interactive HTML file that renders offline.

The browser test opens the page in headless Chromium with every host unreachable and a
network log: every figure must draw, no script error, and no request may leave the file.
Under ``CI=true`` a missing Chromium fails the test rather than skipping it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from memwall.cli import main
from memwall.figures import FIGURES
from memwall.report.page import build_report
from memwall.study import tables as tb
from memwall.study.draw import write_figures


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, quick_sweep, fast_measurements):
    """A copy of the session's sweep folder, with its figures drawn."""
    out = tmp_path_factory.mktemp("report") / "sweep"
    shutil.copytree(quick_sweep.out, out)
    machines = tb.machine_table()
    ledger = tb.ledger_table(batches=(1, 1024, 4096))
    write_figures(out, quick_sweep.rows, machines=machines, ledger=ledger, measurements=fast_measurements)
    return out


def _data(text: str) -> dict:
    blob = re.search(r"<script type='application/json' id='memwall-data'>(.*?)</script>", text, re.S)
    return json.loads(blob.group(1).replace("<\\/", "</"))


def test_report_is_self_contained(sweep_dir, pyplot, sweep_cases):
    path = build_report(sweep_dir)
    text = path.read_text()
    for name in FIGURES:
        assert f"<div class='plot' id='plot-{name}' data-figure='{name}'>" in text
    # Nothing to fetch: no element loads a URL, no other file.
    assert not re.search(r"""<(script|link|img|iframe)[^>]*\s(src|href)=""", text)
    assert "Plotly.newPlot" in text and "plotly.js" in text.lower()
    # a section for each real machine of the sweep, none for the synthetic ones, and a picker
    real = {c.machine for c in sweep_cases if "@" not in c.machine}
    assert set(re.findall(r"<h3 id='m-([^']+)'>", text)) == real
    assert set(re.findall(r"<option value='([^']+)'>", text)) == real
    # the validation cases, as a table with their notes
    assert "id='validation'" in text and "deepbench-v100-fp32-4096x16x4096" in text
    data = _data(text)
    assert set(data["machines"]) == real and all(data["machines"][m]["data"] for m in real)
    assert data["figures"]["roofline"]["data"] and data["figures"]["roofline"]["layout"]["updatemenus"]
    assert data["figures"]["activation_highwater"]["layout"]["sliders"]
    capacity = data["figures"]["llc_capacity"]["data"]
    marked = [s for t in capacity for s in t["marker"]["symbol"] if s == "circle-open"]
    assert len(capacity) == len(marked) == len(tb.LLC_CASES)  # each machine's own marked


def test_prose_numbers_come_from_the_data(sweep_dir):
    from memwall.study.draw import figure_data

    text = build_report(sweep_dir).read_text()
    fits = {f["fit"]: f for f in figure_data(sweep_dir, "balance_drift")["data"]["fits"]}
    acc = fits["accelerator"]
    assert f"balance ×{acc['balance_growth']:.2f}" in text
    win = figure_data(sweep_dir, "batch_window")["data"]["rows"]
    best = max(win, key=lambda r: r["fraction_of_peak"])
    assert f"{best['fraction_of_peak']:.2f}, on {best['name']} at {best['tokens']} tokens" in text


def test_report_command_and_its_error(sweep_dir, tmp_path, capsys):
    assert main(["report", str(sweep_dir), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 10000
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no results.json" in capsys.readouterr().err


# Chromium's own background queries (time, component updates), which no page makes.
BROWSER_OWN = re.compile(r"https?://([a-z0-9-]+\.)*(google\.com|gvt1\.com|googleapis\.com)/")


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_report_renders_in_headless_chromium(sweep_dir, tmp_path):
    browser = _browser()
    if not browser:
        if os.environ.get("CI") == "true":
            pytest.fail("headless chromium is not installed, and CI needs it (.ci/run installs it)")
        pytest.skip("headless chromium is not installed (apt-get install chromium)")
    path = build_report(sweep_dir)
    netlog = tmp_path / "net.json"
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-default-apps", "--disable-features=NetworkTimeServiceQuerying", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--log-net-log={netlog}", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000", "--dump-dom",
         path.resolve().as_uri()],
        capture_output=True, text=True, timeout=180,
    )
    dom = proc.stdout
    assert "memwall: where backprop" in dom, proc.stderr[-2000:]
    # The page's own script counts the plots plotly drew (every figure and the machine
    # picker's) and the errors it saw.
    plots = path.read_text().count("<div class='plot' id='plot-")
    assert plots == len(FIGURES) + 1
    assert f'data-figures-rendered="{plots}"' in dom, re.findall(r'data-(?:figures|errors)[a-z-]*="[^"]*"', dom)
    assert 'data-errors="0"' in dom
    for name in FIGURES:
        assert re.search(rf'id="plot-{name}"[^>]*data-rendered="1"', dom), name
    assert dom.count('class="main-svg"') >= plots  # plotly's own SVG, in every plot
    # No console error from the page.
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and ("Error" in ln or "Uncaught" in ln)]
    assert not console, console
    # No request left the file: the network log names no URL but file: and data: ones.
    urls = set(re.findall(r'"url":"([^"]+)"', netlog.read_text(errors="replace"))) if netlog.is_file() else set()
    outside = {u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:", "chrome"))
               and not BROWSER_OWN.match(u)}
    assert not outside, outside


def test_every_registered_figure_is_drawn_and_on_the_page(sweep_dir, pyplot):
    """Each figure of the registry draws its stored data (matplotlib) and gives a plotly
    spec, and the page shows its heading, caption and that spec."""
    import html

    from memwall.figures import heading
    from memwall.study.draw import figure_data

    text = build_report(sweep_dir).read_text()
    data = _data(text)
    assert list(data["figures"]) == list(FIGURES)
    for name, module in FIGURES.items():
        stored = figure_data(sweep_dir, name)
        assert stored is not None or module.OPT_IN, f"{name}: not drawn by the sweep"
        tables = stored["data"] if stored else {}
        fig = module.draw(tables)
        assert fig.axes, name
        pyplot.close(fig)
        spec = module.plotly(tables)
        assert set(spec) == {"data", "layout"} and (spec["data"] or module.OPT_IN), name
        assert len(data["figures"][name]["data"]) == len(spec["data"]), name
        assert f"<b>{html.escape(heading(name))}.</b> {html.escape(module.CAPTION)}" in text, name


def test_the_results_table_follows_the_row_declaration():
    """Years print whole, decode rows show their context and both token rates by name, CUPS
    only where something trains, and every header carries its column's key for the filter."""
    from memwall.report.page import _cell, _table, results_columns

    train = {"machine": "h100-sxm", "year": 2022, "phase": "train", "cups": 1e9, "seconds": 1.0}
    decode = {"machine": "h100-sxm", "year": 2022, "phase": "decode", "cups": None, "context": 8192,
              "tokens_per_second": 2000.0, "tokens_per_second_per_device": 250.0, "seconds": 0.01}
    keys = [k for k, _ in results_columns([train, decode])]
    assert {"context", "tokens_per_second", "tokens_per_second_per_device", "cups"} <= set(keys)
    assert "context" not in [k for k, _ in results_columns([train])]
    assert "cups" not in [k for k, _ in results_columns([decode])]
    assert _cell("year", 2022) == "2022" and _cell("year", 2022.0) == "2022" and _cell("seconds", 0.5) == "0.5"
    html = _table([train, decode], results_columns([train, decode]), "results-table", sortable=True)
    assert "data-key='context'" in html and ">8192<" in html and "2.02e+03" not in html


def test_a_damaged_figure_file_is_shown_empty_with_a_warning(sweep_dir, tmp_path, capsys):
    import shutil

    from memwall.report.page import build_report

    folder = tmp_path / "sweep"
    shutil.copytree(sweep_dir, folder)
    path = folder / "figures" / "balance_drift.json"
    stored = json.loads(path.read_text(encoding="utf-8"))
    stored["data"]["fits"] = [{"label": "x", "machines": "many", "first_year": "a", "last_year": "b",
                               "peak": "fast", "bandwidth": "wide", "balance": "even"}]
    path.write_text(json.dumps(stored), encoding="utf-8")
    page = build_report(folder).read_text(encoding="utf-8")
    err = capsys.readouterr().err
    assert "balance_drift.json: its data cannot be drawn" in err and "Traceback" not in err
    assert "could not be drawn: rerun the sweep" in page
