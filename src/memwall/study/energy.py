"""The energy figures' tables, computed (issue 29): what figure 15 draws from the
profiles' energy figures (:func:`balance_data`) and the steps figure 16 runs and splits by
component (:func:`share_data`). The figures in :mod:`memwall.figures` only draw them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PJ = 1e12  # joules -> picojoules
NETTALK_MACHINES = ("vax-11-780-fpa", "cray-1", "v100-sxm2", "h100-sxm", "b200")
# (workload label, batch, updates)
NETTALK_WORKLOADS = (("NETtalk per-example, batch 1", 1, "per-example"),
                     ("NETtalk batched, batch 64", 64, "minibatch"))
DECODE_MACHINES = ("v100-sxm2", "h100-sxm", "b200")
DECODE_NETWORK, DECODE_BATCH, DECODE_CONTEXT = "llama3-8b", 1, 512
DECODE_WORKLOAD = f"Llama 3 8B decode, batch {DECODE_BATCH}, context {DECODE_CONTEXT}"

# The groups a step's joules are stacked by, in order, and whether each is data movement.
GROUPS = (("arithmetic", False), ("levels", True), ("memory", True), ("fabric", True), ("interconnect", True),
          ("static", False), ("host", False))
DYNAMIC = tuple(g for g, _ in GROUPS if g not in ("static", "host"))


def cases() -> list[tuple[str, Any]]:
    """(workload label, Case) of every step the figure runs, profiles with [energy] or not."""
    from ..options import Case

    out = [(label, Case(machine=m, network="nettalk", batch=b, updates=updates))
           for label, b, updates in NETTALK_WORKLOADS for m in NETTALK_MACHINES]
    out += [(DECODE_WORKLOAD, Case(machine=m, network=DECODE_NETWORK, batch=DECODE_BATCH, phase="decode",
                                   context=DECODE_CONTEXT)) for m in DECODE_MACHINES]
    return out


def share_inputs() -> dict[str, Any]:
    """What the tables are computed from: reused while the model, profiles and presets are unchanged."""
    import json

    from ..canonical import dumps
    from ..model_version import MODEL_VERSION
    from .identity import machine_info, network_info

    shown = cases()
    return json.loads(dumps({"model": MODEL_VERSION, "cases": [[label, c.as_dict()] for label, c in shown],
                             "machines": {c.machine: machine_info(c.machine).fingerprint for _, c in shown},
                             "networks": {c.network: network_info(c.network).fingerprint for _, c in shown}}))


def group_of(component: str, levels: Sequence[str]) -> str:
    """A ``joules_by_component`` key's group (:data:`GROUPS`)."""
    if component.startswith("arithmetic."):
        return "arithmetic"
    if component in ("memory", "fabric", "interconnect", "static", "host"):
        return component
    if component in levels:
        return "levels"
    raise ValueError(f"unknown energy component {component!r}")


def step_rows(label: str, case: Any, machine: Any, result: Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                                       list[dict[str, Any]]]:
    """One step's row (its joules by group, its shares) and its components' rows."""
    energy = result["energy"]
    total = energy["joules"]
    levels = [lv.name for lv in machine.levels]
    grouped = {g: 0.0 for g, _ in GROUPS}
    components = []
    for component, joules in energy["joules_by_component"].items():
        g = group_of(component, levels)
        grouped[g] += joules
        components.append({"workload": label, "machine": machine.id, "component": component, "group": g,
                           "joules": joules, "share": joules / total if total > 0 else None})
    dynamic = sum(grouped[g] for g in DYNAMIC)
    moving = sum(grouped[g] for g, movement in GROUPS if movement)
    if energy.get("tokens_per_joule"):
        per_unit, unit = 1 / energy["tokens_per_joule"], "token"
    elif energy.get("cups_per_joule"):
        per_unit, unit = 1 / energy["cups_per_joule"], "connection update"
    else:
        per_unit, unit = None, None
    row = {"workload": label, "machine": machine.id, "name": machine.name, "year": machine.year,
           "network": case.network, "batch": case.batch, "updates": case.updates, "phase": case.phase,
           "context": case.context, "seconds": result["seconds"], "joules": total,
           "data_movement_share": energy["data_movement_share"],
           "dynamic_movement_share": moving / dynamic if dynamic > 0 else None,
           "joules_per_unit": per_unit, "unit": unit, "watts_average": energy["watts_average"],
           "tdp": energy["tdp"], "unstated": "; ".join(energy.get("unstated") or []),
           **{f"joules_{g}": v for g, v in grouped.items()}}
    return row, components


def share_data(run: Any = None) -> dict[str, list[dict[str, Any]]]:
    """The tables: ``steps`` (one row a step of a machine with [energy]), ``components``
    (each step's joules by component) and ``lacking`` (the steps left out: the machine's
    profile states no [energy]). Machines without energy are not run. ``run``: how a case
    is run (default :func:`memwall.simulation.run_case`)."""
    from ..profiles import load_machine

    if run is None:
        from ..simulation import run_case as run
    steps, components, lacking = [], [], []
    for label, case in cases():
        machine = load_machine(case.machine)
        if machine.energy is None:
            lacking.append({"workload": label, "machine": machine.id, "name": machine.name, "year": machine.year})
            continue
        result = run(case)
        if result.get("energy") is None:
            lacking.append({"workload": label, "machine": machine.id, "name": machine.name, "year": machine.year})
            continue
        row, parts = step_rows(label, case, machine, result)
        steps.append(row)
        components += parts
    return {"steps": steps, "components": components, "lacking": lacking}


def _status(machine: Any, key: str) -> tuple[str | None, str | None]:
    fig = machine.provenance.get(key)
    if fig is None:
        return None, None
    return fig.status, machine.citation(fig)


def machine_row(machine: Any) -> dict[str, Any] | None:
    """One machine's energy figures as the figure draws them (None: it states none): pJ per
    FLOP of its primary dtype on the matrix units (the dtype whose figure prices it, as the
    energy model does), pJ per byte of main memory, the energy balance where both are
    positive, the time balance, and rated power ÷ peak (pJ per FLOP at the rated power)."""
    from ..energy import arithmetic_figure

    dtype = machine.primary_dtype
    peak, bandwidth = machine.peak_flops[dtype], machine.memory.bandwidth
    priced = arithmetic_figure(machine, dtype, "gemm") if machine.energy is not None else None
    per_byte = machine.memory.energy
    if priced is None and per_byte is None:
        return None
    flop_dtype, per_flop = priced if priced is not None else (None, None)
    flop_status, flop_source = _status(machine, f"energy.{flop_dtype}") if flop_dtype else (None, None)
    byte_status, byte_source = _status(machine, "memory.energy") if per_byte is not None else (None, None)
    tdp = machine.energy.tdp if machine.energy is not None else None
    pj_flop = per_flop * PJ if per_flop is not None else None
    pj_byte = per_byte * PJ if per_byte is not None else None
    return {"id": machine.id, "name": machine.name, "year": machine.year, "kind": machine.kind, "dtype": dtype,
            "flop_dtype": flop_dtype, "pj_per_flop": pj_flop, "pj_per_byte": pj_byte,
            "energy_balance": pj_byte / pj_flop if pj_flop and pj_byte else None,
            "time_balance": peak / bandwidth, "peak": peak, "bandwidth": bandwidth, "tdp": tdp,
            "static": machine.energy.static if machine.energy is not None else None,
            "pj_per_flop_at_tdp": tdp / peak * PJ if tdp else None,
            "flop_status": flop_status, "byte_status": byte_status,
            "flop_source": flop_source, "byte_source": byte_source}


def balance_data(ids: Iterable[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The tables, from the shipped profiles (those of ``ids`` where given): ``machines``,
    one row a machine stating any energy figure (:func:`machine_row`); ``lacking``, those
    stating none (left out of the figure)."""
    from ..profiles import all_machines

    keep = None if ids is None else set(ids)
    machines, lacking = [], []
    for m in all_machines():
        if keep is not None and m.id not in keep:
            continue
        row = machine_row(m)
        if row is None:
            lacking.append({"id": m.id, "name": m.name, "year": m.year, "kind": m.kind})
        else:
            machines.append(row)
    return {"machines": machines, "lacking": lacking}
