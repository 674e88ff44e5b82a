"""memwall from Python (a notebook, a script): one case, or many, by the options' own names.

Owns: :func:`run` (one case, its :class:`memwall.simulation.result.Result`) and :func:`sweep`
(every combination of option lists, the results rows). Options are named as the
measurement files name them (``batch``, ``phase``, ``context``, ``tp``, ...; see
:data:`memwall.options.OPTIONS`), take what the command line takes (``batch=8`` or
``batch="8"``) and are checked as it checks them: an option that does not apply to the
case is an :class:`memwall.errors.InputError` naming it.

    >>> import memwall
    >>> r = memwall.run("h100-sxm", "gpt2-small", batch=8)
    >>> r.time.seconds, r.time.bound, r["verdict"]
    >>> rows = memwall.sweep(machine=["a100-sxm", "h100-sxm"], network="gpt2-small", batch=[1, 8, 64])
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from .errors import InputError
from .options import BY_NAME, Case, combine, make_case
from .profiles import Machine
from .simulation.case import run_case
from .simulation.checks import validate as check_cases
from .simulation.plan import Prepared
from .simulation.result import Result
from .simulation.row import make_row, row_order

__all__ = ["run", "sweep"]


def run(machine: str | Machine, network: str | None = None, gemm: Sequence[int] | None = None, *,
        exact: bool = False, max_lookups: int | None = None, allow_fallback: bool = False,
        **options: Any) -> Result:
    """One case: ``machine`` (a profile id or file, or a loaded :class:`Machine` for a what-if),
    exactly one of ``network`` (a preset id or file) and ``gemm`` ((M, N, K)), and any case
    options. ``exact``, ``max_lookups`` and ``allow_fallback`` are ``memwall inspect``'s."""
    profile = machine if isinstance(machine, Machine) else None
    spec = profile.id if profile is not None else machine
    case = make_case(spec, network, gemm, **options)
    return run_case(case, machine=profile, exact=exact, max_lookups=max_lookups, allow_fallback=allow_fallback)


def sweep(machine: str | Iterable[str], network: str | Iterable[str] | None = None, *,
          max_lookups: int | None = None, allow_fallback: bool = False,
          **lists: Any) -> list[dict[str, Any]]:
    """Every machine x network, once for each combination of the option lists (a single
    value fixes an option), run in this process, as results rows (``memwall.simulation.row.ROW``)
    in the order ``results.csv`` keeps. A value that does not apply to a combination is
    left off it, with a warning counting them; a case that fails is a row with its
    ``error``. For many cases, in parallel and resumable, use ``memwall sweep``."""
    unknown = [k for k in lists if k not in BY_NAME]
    if unknown:
        raise InputError(f"unknown option {unknown[0]!r} (options: {', '.join(BY_NAME)})", field=unknown[0])
    machines, networks = _values(machine), _values(network)
    if not machines or not networks:
        raise InputError("sweep needs at least one machine and one network", field="machine" if not machines
                         else "network")
    axes = {k: [BY_NAME[k].parse(v) for v in _values(vals)] for k, vals in lists.items()}
    combined = combine([Case(machine=m, network=n) for m in machines for n in networks], axes)
    check_cases(combined.cases)  # every machine, network and value checked before any case runs
    if combined.skipped:
        warnings.warn(combined.note(), stacklevel=2)
    from tqdm import tqdm

    prepared = Prepared()
    rows = []
    # disable=None: a bar on a terminal (a notebook's stderr too), nothing in a pipe
    for case in tqdm(combined.cases, desc="memwall.sweep", unit="case", file=sys.stderr, disable=None,
                     leave=False):
        try:
            result = run_case(case, max_lookups=max_lookups, allow_fallback=allow_fallback, prepared=prepared)
        except InputError as err:
            rows.append(make_row(case, None, str(err)))
        else:
            rows.append(make_row(case, result, None))
    return sorted(rows, key=row_order)


def _values(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, int)) or not isinstance(value, Iterable):
        return [value]
    return list(value)
