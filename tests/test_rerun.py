"""A rerun recomputes nothing: validation predictions are stored like cases, and the
validation figure is redrawn only on change (the model version that keys them follows the
source: tests/test_model_version.py)."""

from __future__ import annotations

from memwall.execute.validation import cached_predictor, write_validation
from memwall.simulation import Case


def test_predictions_are_stored_and_reused(tmp_path):
    calls = []

    def predictor(case):
        calls.append(case)
        return {"seconds": 2.0, "batch": case.batch, "bound": "compute", "kernels": [1, 2]}

    case = Case(machine="h100-sxm", gemm=(64, 64, 64), dtype="bf16", phase="forward")
    first = cached_predictor(tmp_path, predictor)(case)
    again = cached_predictor(tmp_path, predictor)(case)  # a new run, the same folder
    assert len(calls) == 1 and first == again and "kernels" not in again
    cached_predictor(tmp_path, predictor)(Case(machine="h100-sxm", gemm=(64, 64, 128), dtype="bf16",
                                               phase="forward"))
    assert len(calls) == 2


def test_validation_figure_is_redrawn_only_on_change(tmp_path, pyplot, fast_measurements):
    png, svg = write_validation(tmp_path, fast_measurements)
    assert (tmp_path / "figures" / "validation.csv").is_file()
    png.write_bytes(b"marker")
    write_validation(tmp_path, fast_measurements)
    assert png.read_bytes() == b"marker"
    (tmp_path / "validation.json").write_text("{}")  # what was drawn differs: redraw
    write_validation(tmp_path, fast_measurements)
    assert png.read_bytes() != b"marker"
