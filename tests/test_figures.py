"""Every figure of the era sweep is written, as PNG and SVG, and is not empty."""

from __future__ import annotations

import pytest
import test_sweep as ts  # the sweep tests' cases, runner and catalogue (real once the stages exist)

from memwall.data import era_data_dir
from memwall.experiments import figures as fg
from memwall.experiments import sweep as sw

# Single GEMMs predict in seconds; the shipped set's GPT-3 step would take twenty.
FAST_MEASUREMENTS = era_data_dir() / "measurements" / "deepbench_v100.toml"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """A small sweep with data for every simulated figure: per-example, batches, synthetic."""
    cat = ts.CAT
    old, new, nets = "vax-11-780", "h100-sxm", ["nettalk", "encoder-8-3-8"]
    window = sw.product([new], ["gpt2-small"], [1, 4], seq_len=16)
    cases = sw.product([old, "cray-1", new], nets, [1], updates="per-example") + window
    cases += sw.product(sw.synthetic_machines(cat, new, decades=4, per_decade=1), nets[:1], [1],
                        updates="per-example")
    out = tmp_path_factory.mktemp("sweep")
    res = sw.run_sweep(cases, out, jobs=2, catalogue=ts.CAT, progress=False)
    assert not res.failed, res.failed
    return res.rows


def test_every_figure_is_written_and_not_empty(tmp_path, pyplot, rows):
    machines = fg.machine_table()
    ledger = fg.ledger_table(batches=(1, 64, 1024, 4096))
    written = fg.write_figures(tmp_path, rows, machines=machines, ledger=ledger, measurements=FAST_MEASUREMENTS)
    assert sorted(written) == sorted(fg.NAMES)
    for name, paths in written.items():
        assert [p.suffix for p in paths] == [".png", ".svg"]
        for p in paths:
            assert p.parent == tmp_path / "figures"
            assert p.stat().st_size > 5000, f"{p.name} looks empty"
        svg = paths[1].read_text()
        assert "No data for this figure" not in svg, f"{name} had no data"


def test_figures_say_what_they_lack_rather_than_vanish(tmp_path, pyplot):
    sweep_figures = [n for n in fg.NAMES if n != "validation"]  # validation has data of its own
    written = fg.write_figures(tmp_path, [], machines=[], ledger=[], only=sweep_figures)
    for paths in written.values():
        assert all(p.stat().st_size > 0 for p in paths)
        assert "No data for this figure" in paths[1].read_text()


def test_growth_rate_fit():
    years = [2000, 2002, 2004, 2006]
    assert fg.growth_per_two_years(years, [1, 3, 9, 27]) == pytest.approx(3.0)
    assert fg.growth_per_two_years(years, [5, 8, 12.8, 20.48]) == pytest.approx(1.6)
