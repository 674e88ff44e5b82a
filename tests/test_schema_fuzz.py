"""Mutated copies of the shipped data files either load with finite values or are refused
with an InputError that places the problem: never another exception, never a NaN.

Each example takes one shipped file of one format (machine profile, network preset,
stand-alone hierarchy file, measurement file), changes one line (a number to NaN, inf,
0, a negative or a huge one; the key dropped, duplicated or given a value of another
type) and feeds it to that format's loader.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwall import levels, networks, profiles
from memwall.data import data_files
from memwall.errors import InputError
from memwall.study import measurements

ROOT = Path(__file__).parent
HIERARCHY = ROOT / "data" / "hierarchy" / "three_levels.toml"
FORMATS = {
    "machine": (data_files("machines"), profiles.load_machine_file),
    "network": (data_files("networks"), networks.load_network),
    "hierarchy": ([HIERARCHY], levels.load_hierarchy_file),
    "measurement": (data_files("measurements"), measurements.load_measurement_file),
}
NUMBERS = ("nan", "inf", "-inf", "0", "-1", "-0.5", "1e308", "1e400", "18446744073709551616")
VALUES = ('"text"', "true", "[]", "{}", "[1, 2]", '{ value = "1 KiB" }', "2.5")
_ASSIGN = re.compile(r"^(\s*[A-Za-z0-9_\-]+\s*=\s*)(.*)$")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")


def _mutate(text: str, index: int, action: str, new: str) -> str:
    lines = text.splitlines()
    line = lines[index]
    m = _ASSIGN.match(line)
    if action == "drop":
        lines[index:index + 1] = []
    elif action == "duplicate":
        lines.insert(index, line)
    elif action == "retype" and m:
        lines[index] = m.group(1) + new
    elif action == "number":
        lines[index] = _NUMBER.sub(new, line, count=1) if _NUMBER.search(line) else (m.group(1) + new if m else line)
    return "\n".join(lines) + "\n"


def _floats(value: Any) -> list[float]:
    if is_dataclass(value) and not isinstance(value, type):
        return _floats(asdict(value))
    if isinstance(value, dict):
        return [x for v in value.values() for x in _floats(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _floats(v)]
    return [float(value)] if isinstance(value, float) else []


def _loaded_values(obj: Any) -> Any:
    return obj.as_dict() if hasattr(obj, "as_dict") else obj


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(sorted(FORMATS)), data=st.data())
def test_mutated_file_loads_finite_or_is_refused_by_place(fmt: str, data: st.DataObject) -> None:
    files, load = FORMATS[fmt]
    source = data.draw(st.sampled_from(files), label="file")
    text = source.read_text(encoding="utf-8")
    candidates = [i for i, x in enumerate(text.splitlines()) if _ASSIGN.match(x)]
    index = data.draw(st.sampled_from(candidates), label="line")
    action = data.draw(st.sampled_from(("number", "number", "drop", "duplicate", "retype")), label="action")
    new = data.draw(st.sampled_from(VALUES if action == "retype" else NUMBERS), label="value")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / source.name
        path.write_text(_mutate(text, index, action, new), encoding="utf-8")
        try:
            loaded = load(path)
        except InputError as err:
            assert err.file == str(path), str(err)
            assert err.field or err.line, f"the problem is not placed: {err}"
            return
    floats = _floats(_loaded_values(loaded))
    assert all(math.isfinite(x) for x in floats), [x for x in floats if not math.isfinite(x)]


def test_mutation_reaches_every_kind_of_change() -> None:
    """The mutator itself: each action changes the text the way its name says."""
    text = 'a = 1\nb = { value = "8 KiB" }\n'
    assert _mutate(text, 0, "number", "nan") == 'a = nan\nb = { value = "8 KiB" }\n'
    assert _mutate(text, 1, "number", "-1") == 'a = 1\nb = { value = "-1 KiB" }\n'
    assert _mutate(text, 0, "drop", "") == 'b = { value = "8 KiB" }\n'
    assert _mutate(text, 0, "duplicate", "").count("a = 1") == 2
    assert _mutate(text, 0, "retype", "true").startswith("a = true\n")
