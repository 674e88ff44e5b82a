"""Every figure of the era sweep is written, as PNG and SVG, and is not empty."""

from __future__ import annotations

import pytest

from memwall.experiments import figures as fg


def test_every_figure_is_written_and_not_empty(tmp_path, pyplot, quick_sweep, fast_measurements):
    machines = fg.machine_table()
    ledger = fg.ledger_table(batches=(1, 64, 1024, 4096))
    written = fg.write_figures(tmp_path, quick_sweep.rows, machines=machines, ledger=ledger,
                               measurements=fast_measurements)
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
