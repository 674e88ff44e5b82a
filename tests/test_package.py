"""The installed package: its console script, its engine and its data, from any folder."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import memwall
from memwall.cli import build_parser
from memwall.data import data_files, data_version

ROOT = Path(__file__).resolve().parents[1]


def test_every_console_script_imports():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr))


def test_engine_is_compiled_not_a_fallback():
    from memwall import _csim

    assert Path(_csim.__file__).suffix in (".so", ".pyd")


def test_era_data_found_from_another_folder(tmp_path):
    assert data_files("machines"), "no machine profiles shipped"
    assert data_files("networks"), "no network presets shipped"
    out = subprocess.run(
        [sys.executable, "-m", "memwall", "--version"], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert out.returncode == 0, out.stderr
    assert memwall.__version__ in out.stdout and data_version() in out.stdout


def test_every_subcommand_has_help():
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0]  # noqa: SLF001
    summaries = {action.dest: action.help for action in subcommands._choices_actions}  # noqa: SLF001
    listing = " ".join(parser.format_help().split())
    for name in ("machines", "networks", "step", "inspect", "replay", "trace", "sweep", "report", "validate"):
        assert name in subcommands.choices, f"memwall {name} is missing"
        # a line in `memwall --help`, and a description of its own in `memwall NAME --help`
        assert summaries.get(name), f"memwall {name} has no one-line help"
        assert " ".join(summaries[name].split()) in listing
        description = subcommands.choices[name].description
        assert description and description.strip(), f"memwall {name} has no description"


def test_library_code_leaves_the_matplotlib_backend_to_the_caller():
    import ast

    calls = []
    for path in sorted((ROOT / "src" / "memwall").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "use"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "matplotlib"):
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not calls, f"matplotlib.use in library code: {calls}"
