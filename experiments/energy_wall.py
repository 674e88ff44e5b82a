"""The energy wall in numbers (issue 29's targets): joules per token of Llama 3 8B decode
and joules per connection update of per-example NETtalk, with each one's share of data
movement, and the batch where arithmetic energy overtakes memory energy.

    python experiments/energy_wall.py                 # about a minute
    python experiments/energy_wall.py --json          # the same, as JSON

Every number is ``memwall.simulation.run_case``'s ``energy`` table on the shipped
profiles (docs/energy.md); most energy figures are estimates, each with its derivation in
its profile. A machine whose profile states no ``[energy]`` prints as such.
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from typing import Any

from memwall.errors import InputError
from memwall.options import Case
from memwall.profiles import load_machine
from memwall.progress import Phase
from memwall.simulation import run_case

DECODE_MACHINES = ("v100-sxm2", "a100-sxm", "h100-sxm", "h200", "b200")
NETTALK_MACHINES = ("vax-11-780-fpa", "cray-1", "sun-3-260", "pentium-pro", "v100-sxm2", "h100-sxm", "b200")
BATCHES = (1, 8, 64, 256, 1024)


def _arithmetic(e: dict[str, Any]) -> float:
    return sum(v for k, v in e["joules_by_component"].items() if k.startswith("arithmetic."))


PHASE: Phase | None = None  # the run's progress line: every step run is one item


@cache
def _run(case: Case) -> Any:
    """One step, run once however many tables ask for it (the crossover walks the decode batches again)."""
    if PHASE is not None:
        PHASE.update()
    return run_case(case)


def decode(machine: str, batch: int, context: int = 512) -> dict[str, Any]:
    r = _run(Case(machine=machine, network="llama3-8b", phase="decode", context=context, batch=batch))
    e = r["energy"]
    if e is None:
        return {"machine": machine, "batch": batch, "energy": None}
    by = e["joules_by_component"]
    return {"machine": machine, "batch": batch, "seconds_per_token": r["seconds"],
            "joules_per_token": e["joules"] / batch, "memory_share": by["memory"] / e["joules"],
            "arithmetic_share": _arithmetic(e) / e["joules"], "static_share": by["static"] / e["joules"],
            "data_movement_share": e["data_movement_share"], "watts": e["watts_average"], "tdp": e["tdp"],
            "fits": r["capacity"]["fits"]}


def nettalk(machine: str) -> dict[str, Any]:
    if load_machine(machine).energy is None:  # nothing to price: not run
        return {"machine": machine, "energy": None}
    r = _run(Case(machine=machine, network="nettalk", batch=1, updates="per-example"))
    e = r["energy"]
    if e is None:
        return {"machine": machine, "energy": None}
    return {"machine": machine, "joules_per_connection_update": 1 / e["cups_per_joule"],
            "data_movement_share": e["data_movement_share"], "static_share":
            e["joules_by_component"]["static"] / e["joules"], "watts": e["watts_average"], "tdp": e["tdp"]}


MOST = 4096  # the largest decode batch the crossover tries


def crossover(machine: str, context: int = 512, most: int = MOST) -> int | None:
    """The first power-of-two batch whose arithmetic joules exceed its main-memory joules."""
    batch = 1
    while batch <= most:
        e = _run(Case(machine=machine, network="llama3-8b", phase="decode", context=context,
                      batch=batch))["energy"]
        if e is None:
            return None
        if _arithmetic(e) > e["joules_by_component"]["memory"]:
            return batch
        batch *= 2
    return None


def _main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--context", type=int, default=512, help="decode context in tokens (default 512)")
    args = p.parse_args()
    global PHASE
    PHASE = Phase("energy_wall", "running the steps", unit="step")
    out = {
        "decode": [decode(m, b, args.context) for m in DECODE_MACHINES for b in BATCHES],
        "nettalk": [nettalk(m) for m in NETTALK_MACHINES],
        "crossover": {m: crossover(m, args.context) for m in ("h100-sxm",)
                      if load_machine(m).energy is not None},
    }
    PHASE.close()
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"Llama 3 8B decode, context {args.context}: joules per token and where they go")
    print(f"{'machine':<12} {'batch':>6} {'J/token':>10} {'memory':>8} {'arith':>8} {'static':>8} {'W':>7} {'tdp':>6}")
    for row in out["decode"]:
        if row.get("energy", True) is None:
            print(f"{row['machine']:<12} {row['batch']:>6}  no [energy] figures")
            continue
        print(f"{row['machine']:<12} {row['batch']:>6} {row['joules_per_token']:>10.4g} "
              f"{100 * row['memory_share']:>7.1f}% {100 * row['arithmetic_share']:>7.2f}% "
              f"{100 * row['static_share']:>7.1f}% {row['watts']:>7.4g} {row['tdp']:>6.4g}"
              + ("" if row["fits"] else "  (does not fit)"))
    print("\nPer-example NETtalk (batch 1, an update after every example)")
    for row in out["nettalk"]:
        if row.get("energy", True) is None:
            print(f"{row['machine']:<16} no [energy] figures")
            continue
        print(f"{row['machine']:<16} {row['joules_per_connection_update']:.4g} J per connection update; "
              f"data movement {100 * row['data_movement_share']:.1f}%, static {100 * row['static_share']:.1f}%; "
              f"{row['watts']:.4g} W of {row['tdp']:.4g} W")
    for machine, batch in out["crossover"].items():
        print(f"\n{machine}: arithmetic energy overtakes main-memory energy at decode batch "
              f"{batch if batch else f'never (up to {MOST})'}")


def main() -> None:
    try:
        _main()
    except InputError as err:  # a bad --context: one line, not a traceback
        raise SystemExit(f"energy_wall: {err}") from None


if __name__ == "__main__":
    main()
