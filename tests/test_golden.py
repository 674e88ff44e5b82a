"""The README's first-look commands print, bit for bit, what they printed when their goldens were taken.

The goldens (tests/golden/inspect_N.json, the commands in inspect_commands.txt) were
taken at 485d125, before the upper floors were split (the seventh, a training step held at
its power limit, when that limit was built); a change of the model's numbers regenerates
them in the same commit and names the difference in its message.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from memwall.cli import main

GOLDEN = Path(__file__).parent / "golden"
COMMANDS = [line.split(":", 1) for line in (GOLDEN / "inspect_commands.txt").read_text().splitlines() if line]


@pytest.mark.parametrize("n", range(1, len(COMMANDS) + 1), ids=[name for name, _ in COMMANDS])
def test_first_look_commands_print_their_golden_json(n, capsys):
    _, args = COMMANDS[n - 1]
    assert main(["inspect", *shlex.split(args), "--json", "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # the interval is the calibration's (era_data/intervals.toml, regenerated on its own;
    # tests/test_intervals.py holds it), not the model's numbers the goldens pin
    assert printed.pop("interval", None) is None or "interval" not in json.loads(
        (GOLDEN / f"inspect_{n}.json").read_text())
    assert printed == json.loads((GOLDEN / f"inspect_{n}.json").read_text())
