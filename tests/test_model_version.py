"""MODEL_VERSION follows every file that decides a result, and only those.

A copy of the installed package (its compiled engine included) is imported in a fresh
interpreter; each edit of a module the run layer reaches, or of the engine's bytes,
moves the version, and an edit of a module it does not reach leaves it alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import memwall
from memwall import model_version

PACKAGE = Path(memwall.__file__).parent

# The copy is imported with site off (no editable-install hook can reach the checkout)
# and only the copy's parent on the path; model_version needs nothing else.
_SHOW = "import sys; sys.path.insert(0, sys.argv[1]); import memwall; print(memwall.__file__); print(memwall.MODEL_VERSION)"


def _version(root: Path) -> str:
    out = subprocess.run([sys.executable, "-S", "-c", _SHOW, str(root)], capture_output=True, text=True, check=True)
    where, version = out.stdout.split()
    assert Path(where).is_relative_to(root), f"imported {where}, not the copy under {root}"
    return version


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("installed")
    shutil.copytree(PACKAGE, root / "memwall", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def unedited(copy: Path) -> str:
    return _version(copy)


def _engine(top: Path, name: str) -> Path:
    found = [top / (name + s) for s in EXTENSION_SUFFIXES if (top / (name + s)).is_file()]
    assert len(found) == 1, found
    return found[0]


def test_the_copy_has_the_installed_version(unedited: str) -> None:
    assert unedited == memwall.MODEL_VERSION == model_version.MODEL_VERSION
    assert memwall.MODEL_VERSION.startswith(memwall.__version__ + "+")


@pytest.mark.parametrize("edited", ["interconnect.py", "seed.py", "vocabulary.py", "timing.py", "schema.py",
                                    "workloads/lowering.py", "_csim", "_textparse"])
def test_an_edit_the_run_layer_reaches_moves_the_version(copy: Path, unedited: str, edited: str) -> None:
    path = _engine(copy / "memwall", edited) if edited.startswith("_") else copy / "memwall" / edited
    before = path.read_bytes()
    try:
        path.write_bytes(before + (b"\0" if path.suffix != ".py" else b"\n# edited\n"))
        assert _version(copy) != unedited, f"editing {edited} left MODEL_VERSION where it was"
    finally:
        path.write_bytes(before)
    assert _version(copy) == unedited


@pytest.mark.parametrize("edited", ["cli/machines.py", "schema_docs.py", "host/profile.py"])
def test_an_edit_outside_the_run_layer_does_not(copy: Path, unedited: str, edited: str) -> None:
    path = copy / "memwall" / edited
    before = path.read_bytes()
    try:
        path.write_bytes(before + b"\n# edited\n")
        assert _version(copy) == unedited, f"{edited} is not reached from {model_version.ROOTS}"
    finally:
        path.write_bytes(before)


def test_the_hashed_files_are_the_run_layers_imports() -> None:
    files = model_version.model_files(PACKAGE)
    for reached in ("memwall.interconnect", "memwall.seed", "memwall.vocabulary", "memwall.schema",
                    "memwall.engine", "memwall._csim", "memwall._textparse"):
        assert reached in files, reached
    assert not [name for name in files if name.startswith("memwall.cli")], "the CLI decides no result"
    assert "memwall.schema_docs" not in files and "memwall.host" not in files
    assert all(path.is_relative_to(PACKAGE) for path in files.values())


def test_a_root_that_does_not_exist_is_skipped() -> None:
    assert model_version.model_files(PACKAGE, ("memwall.no_such_module",)) == {}
    with_missing = ("memwall.no_such_module", *model_version.ROOTS)
    assert model_version.model_version(PACKAGE, with_missing) == model_version.model_version(PACKAGE)
