"""``memwall report``: one self-contained HTML file that renders, every figure present."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from memwall.cli import main
from memwall.experiments import figures as fg
from memwall.experiments.report import build_report


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, quick_sweep, fast_measurements):
    """A copy of the session's sweep folder, with its figures drawn."""
    out = tmp_path_factory.mktemp("report") / "sweep"
    shutil.copytree(quick_sweep.out, out)
    machines = fg.machine_table()
    ledger = fg.ledger_table(batches=(1, 1024, 4096))
    fg.write_figures(out, quick_sweep.rows, machines=machines, ledger=ledger, measurements=fast_measurements)
    return out


def test_report_is_self_contained(sweep_dir, pyplot, sweep_cases):
    path = build_report(sweep_dir)
    text = path.read_text()
    assert text.count("<img class='figure'") == len(fg.NAMES)
    assert text.count("src='data:image/png;base64,") == len(fg.NAMES)
    # Nothing to fetch: no http(s) resources, no other files.
    assert not re.search(r"""(src|href)=['"](https?:|//|[^'"#d])""", text)
    # a section for each real machine of the sweep, none for the synthetic ones
    real = {c.machine for c in sweep_cases if "@" not in c.machine}
    assert set(re.findall(r"<h3 id='m-([^']+)'>", text)) == real
    # the validation figure's cases, as a table with their notes
    assert "id='validation'" in text and "deepbench-v100-fp32-4096x16x4096" in text


def test_report_command_and_its_error(sweep_dir, tmp_path, capsys):
    assert main(["report", str(sweep_dir), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 10000
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no results.json" in capsys.readouterr().err


def test_report_renders_in_headless_chromium(sweep_dir, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        pytest.skip("headless chromium is not installed (apt-get install chromium)")
    path = build_report(sweep_dir)
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
         path.resolve().as_uri()],
        capture_output=True, text=True, timeout=60,
    )
    dom = proc.stdout
    assert "memwall: where backprop" in dom, proc.stderr[-2000:]
    # The page's own script counts the figures whose images decoded and drew.
    assert f'data-figures-loaded="{len(fg.NAMES)}"' in dom
    for name in fg.NAMES:
        assert f'id="fig-{name}"' in dom
