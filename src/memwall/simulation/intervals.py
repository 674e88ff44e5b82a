"""Every prediction's interval: the range of seconds a measurement of the same kind of step
fell in, as the shipped measurements calibrate it (docs/intervals.md).

Owns: the calibration file's reading (:func:`load_calibration`, ``era_data/intervals.toml``,
written by ``memwall validate --write-intervals``, :mod:`memwall.study.intervals`), the
regime a result belongs to (:func:`regime`), the group a (machine kind, regime) draws its
quantiles from (:meth:`Calibration.group_for`) and the interval of a result's seconds
(:func:`interval_for`, :func:`with_interval`): ``{"low": s, "high": s, "coverage": c}``.

The interval is uncertainty around the point prediction, never a change of it: the
seconds are the model's, the interval multiplies them by the calibrated factors. The
calibration is data, read here and never computed here, so ``memwall inspect`` runs no
validation; a file calibrated at another model version is still used (``memwall validate``
says it is stale).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import InputError

ANY = "*"  # a group over every machine kind, or every regime
FILE_NAME = "intervals.toml"
COMMAND = "memwall validate --write-intervals"
# The regimes a result is calibrated in: what kind of step it times.
REGIMES = ("gemm", "train", "train-multi", "forward", "decode", "generate")


def regime(result: Mapping[str, Any]) -> str | None:
    """The kind of step ``result`` (a ``memwall inspect --json`` dict) times: ``gemm`` (one
    product), ``train`` (one device) or ``train-multi`` (several), ``forward`` (a forward
    pass or a prefill), ``decode``, ``generate`` (whole requests); None if it says no phase."""
    if result.get("gemm"):
        return "gemm"
    phase = result.get("phase")
    if phase == "train":
        return "train-multi" if (result.get("devices") or 1) > 1 else "train"
    if phase in ("forward", "prefill"):
        return "forward"
    if phase in ("decode", "generate"):
        return str(phase)
    return None


@dataclass(frozen=True)
class Group:
    """One group of point checks: its machine kind and regime (``*``: any), how many
    checks, and the quantiles of ln(measured seconds / predicted seconds) at the
    calibration's two tails."""

    kind: str
    regime: str
    count: int
    low: float  # the (1 - coverage) / 2 quantile of the log residuals
    high: float  # the (1 + coverage) / 2 quantile

    @property
    def factors(self) -> tuple[float, float]:
        """The seconds' multipliers: each tail's quantile, but never on the prediction's
        own side of 1, so the interval always holds the prediction (a biased group widens
        it on one side rather than leave the point outside)."""
        return math.exp(min(self.low, 0.0)), math.exp(max(self.high, 0.0))


@dataclass(frozen=True)
class Calibration:
    """The calibration file: the nominal coverage, the model version it was computed at,
    the command that rebuilds it, its groups, and what it said of itself when written."""

    coverage: float
    model_version: str
    command: str
    min_count: int
    groups: tuple[Group, ...]
    path: str | None = None
    stats: Mapping[str, Any] | None = None  # point checks, in-sample and leave-one-out coverage

    def group_for(self, kind: str | None, reg: str | None) -> Group | None:
        """The group a step draws from: its own (kind, regime), else every kind in its
        regime, else its kind in every regime, else the pooled group; None if there is none."""
        table = {(g.kind, g.regime): g for g in self.groups}
        for key in ((kind, reg), (ANY, reg), (kind, ANY), (ANY, ANY)):
            if key in table:
                return table[key]
        return None


def default_path() -> Path:
    """The shipped calibration: ``era_data/intervals.toml``."""
    from ..data import era_data_dir

    return era_data_dir() / FILE_NAME


_LOADED: dict[str, tuple[int, Calibration | None]] = {}


def load_calibration(path: str | Path | None = None) -> Calibration | None:
    """The calibration in ``path`` (None: the shipped file), kept while the file is
    unchanged; None when there is no such file (then no result carries an interval). A
    file that is not a calibration is an InputError naming the field."""
    p = Path(path) if path is not None else default_path()
    try:
        stamp = p.stat().st_mtime_ns
    except OSError:
        return None
    kept = _LOADED.get(str(p))
    if kept is not None and kept[0] == stamp:
        return kept[1]
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise InputError(f"not a calibration file: {err}", file=str(p)) from None
    cal = parse_calibration(data, str(p))
    _LOADED[str(p)] = (stamp, cal)
    return cal


def _number(table: Mapping[str, Any], key: str, where: str, file: str) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}.{key} must be a finite number, got {value!r}", file=file, field=key)
    return float(value)


def parse_calibration(data: Mapping[str, Any], file: str = "intervals.toml") -> Calibration:
    """A :class:`Calibration` from the file's TOML: ``[calibration]`` and its ``[[group]]``s."""
    head = data.get("calibration")
    if not isinstance(head, dict):
        raise InputError("no [calibration] table", file=file, field="calibration")
    coverage = _number(head, "coverage", "calibration", file)
    if not 0 < coverage < 1:
        raise InputError(f"calibration.coverage must lie between 0 and 1, got {coverage!r}", file=file,
                         field="coverage")
    version = head.get("model_version")
    if not isinstance(version, str):
        raise InputError(f"calibration.model_version must be a string, got {version!r}", file=file,
                         field="model_version")
    groups = []
    for i, g in enumerate(data.get("group") or []):
        where = f"group[{i}]"
        if not isinstance(g, dict) or not isinstance(g.get("kind"), str) or not isinstance(g.get("regime"), str):
            raise InputError(f"{where} needs a kind and a regime (strings)", file=file, field="group")
        low, high = _number(g, "low", where, file), _number(g, "high", where, file)
        if low > high:
            raise InputError(f"{where}.low {low} is above its high {high}", file=file, field="low")
        groups.append(Group(g["kind"], g["regime"], int(_number(g, "count", where, file)), low, high))
    stats = {k: v for k, v in head.items()
             if k not in ("coverage", "model_version", "command", "min_count")}
    return Calibration(coverage=coverage, model_version=version, command=str(head.get("command", COMMAND)),
                       min_count=int(head.get("min_count", 0)), groups=tuple(groups), path=file, stats=stats)


def interval_of(seconds: float, kind: str | None, reg: str | None,
                calibration: Calibration | None) -> dict[str, float] | None:
    """``{"low", "high", "coverage"}`` around ``seconds``: the seconds times the factors of the
    group the (kind, regime) draws from; None without a calibration, a group, or a time."""
    if calibration is None or not (isinstance(seconds, int | float) and seconds > 0 and math.isfinite(seconds)):
        return None
    group = calibration.group_for(kind, reg)
    if group is None:
        return None
    lo, hi = group.factors
    return {"low": seconds * lo, "high": seconds * hi, "coverage": calibration.coverage}


def interval_for(result: Mapping[str, Any], calibration: Calibration | None = None) -> dict[str, float] | None:
    """The interval on a result's ``seconds`` (the shipped calibration unless given)."""
    cal = calibration if calibration is not None else load_calibration()
    return interval_of(result.get("seconds"), result.get("kind"), regime(result), cal)


def with_interval(result: Any) -> Any:
    """``result`` (a :class:`~memwall.simulation.result.Result`) with its time group's
    ``interval`` set from the shipped calibration; the point prediction is untouched."""
    from .result import Result

    interval = interval_for(result)
    if interval is None:
        return result
    groups = result.groups
    return Result(replace(groups, time=replace(groups.time, interval=interval)))


def row_interval(result: Mapping[str, Any]) -> dict[str, float | None]:
    """A results row's ``interval_low``, ``interval_high`` and ``interval_coverage``
    (null without one), from the calibration shipped now."""
    iv = interval_for(result)
    return {"interval_low": iv["low"] if iv else None, "interval_high": iv["high"] if iv else None,
            "interval_coverage": iv["coverage"] if iv else None}


def groups_text(groups: Sequence[Group]) -> str:
    return ", ".join(f"{g.kind}/{g.regime} ({g.count})" for g in groups)
