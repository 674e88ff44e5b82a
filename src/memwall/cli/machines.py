"""``memwall machines``: list, show and validate machine profiles.

Owns the ``machines`` subcommand and its sub-subcommands ``list``, ``show`` and
``validate``. Other modules add sub-subcommands (``memwall machines detect``) without
editing this file: a module in ``memwall.cli`` that defines
``register_machines(machines_subparsers)`` is called when the ``machines`` parser is
built (it must still define ``register(subparsers)``, which may do nothing), and code
running inside such a hook may call :func:`add_machines_command`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
from typing import Any

from .. import profiles
from ..errors import InputError
from ..text import printable
from ..units import format_byte_rate, format_bytes, format_flop_rate, format_frequency, format_time
from ._output import print_json, report

_machines_subparsers: Any = None  # the sub-subparsers of the most recently built 'machines' parser


def add_machines_command(name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Add ``memwall machines NAME``; set ``func=`` on the returned parser with set_defaults."""
    if _machines_subparsers is None:
        raise RuntimeError("the 'machines' parser is not built yet; call from register_machines()")
    return _machines_subparsers.add_parser(name, help=help, description=help, **kwargs)


def register(subparsers: Any) -> None:
    global _machines_subparsers
    parser = subparsers.add_parser(
        "machines", help="list, show and validate machine profiles; detect the host",
        description="The catalogue of machines: profiles in era_data/machines, with provenance.",
    )
    sub = parser.add_subparsers(dest="machines_command", metavar="ACTION")
    _machines_subparsers = sub
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    p = sub.add_parser("list", help="one row per machine: peak, bandwidth, balance, provenance",
                       description="One row per shipped machine.")
    p.add_argument("--json", action="store_true", help="a JSON list of objects")
    p.add_argument("--era", help="a decade ('1980s') or a range of years ('1976-1995')")
    p.add_argument("--kind", choices=profiles.KINDS, help="only machines of this kind")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="everything about one machine, with each figure's source",
                       description="Everything about one machine (an id or a profile path).")
    p.add_argument("machine", metavar="ID", help="machine id (see 'memwall machines list') or a .toml path")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("validate", help="check profile files; every problem by file, line, field and reason",
                       description="Check profile files: every problem, then warnings for figures that are legal "
                                   "but implausible. Exit 0 if all are valid, 1 otherwise.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="profile .toml files")
    p.add_argument("--strict", action="store_true", help="count warnings as problems")
    p.set_defaults(func=cmd_validate)

    # Sub-subcommands other modules contribute (see the module docstring).
    package = importlib.import_module(__package__ or "memwall.cli")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "machines":
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        hook = getattr(module, "register_machines", None)
        if callable(hook):
            hook(sub)


def _era_filter(era: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d{4})s", era.strip())
    if m and int(m.group(1)) % 10 == 0:
        start = int(m.group(1))
        return start, start + 9
    m = re.fullmatch(r"(\d{4})\s*-\s*(\d{4})", era.strip())
    if m and int(m.group(1)) <= int(m.group(2)):
        return int(m.group(1)), int(m.group(2))
    raise InputError(f"cannot read era {era!r}: write a decade such as '1980s' or years such as '1976-1995'",
                     field="--era")


def _short_flops(value: float) -> str:
    return format_flop_rate(value).replace("FLOP/s", "").replace(" ", "")


def _row(m: profiles.Machine) -> dict[str, Any]:
    return {
        "id": m.id, "name": m.name, "vendor": m.vendor, "year": m.year, "kind": m.kind,
        "clock_hz": m.clock_hz, "primary_dtype": m.primary_dtype,
        "peak_flops": dict(m.peak_flops), "memory_bandwidth": m.memory.bandwidth,
        "memory_capacity": m.memory.capacity, "balance": m.balances(),
        "status": m.status, "status_counts": m.status_counts(),
    }


def cmd_list(args: argparse.Namespace) -> int:
    machines = profiles.all_machines()
    if args.era:
        lo, hi = _era_filter(args.era)
        machines = [m for m in machines if lo <= m.year <= hi]
    if args.kind:
        machines = [m for m in machines if m.kind == args.kind]
    if args.json:
        print_json([_row(m) for m in machines])
        return 0
    header = ("id", "name", "year", "kind", "peak FLOP/s", "memory B/s", "balance FLOP/B", "status")
    rows = []
    for m in machines:
        dtypes = [m.primary_dtype] + [d for d in m.peak_flops if d != m.primary_dtype]
        peaks = " ".join(f"{d}:{_short_flops(m.peak_flops[d])}" for d in dtypes)
        balance = " ".join(f"{d}:{m.balance(d):.3g}" for d in dtypes)
        counts = ",".join(f"{n} {s}" for s, n in m.status_counts().items())
        rows.append((m.id, m.name, str(m.year), m.kind, peaks, format_byte_rate(m.memory.bandwidth),
                     balance, f"{m.status} ({counts})"))
    _print_table(header, rows)
    print(f"{len(rows)} machines; balance = peak FLOP/s / main-memory bytes/s, primary dtype first")
    return 0


def _print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    rows = [tuple(printable(cell) for cell in r) for r in rows]  # before the widths: escapes widen a cell
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _figure_text(m: profiles.Machine, key: str, shown: str) -> str:
    """A value as shown, with its status, citation and derivation where it has them."""
    f = m.provenance.get(key)
    if f is None:
        return shown
    extra = f"  [{f.status}; {m.citation(f)}]"
    if f.derivation:
        extra += f"  derived: {f.derivation}"
    return shown + extra


def _level_lines(m: profiles.Machine) -> list[str]:
    out = ["levels (first first)"]
    shown = {"latency": format_time, "bandwidth": format_byte_rate}
    for lv in m.levels:
        managed = "software-managed" if lv.software_managed else f"{lv.policy}, {lv.write}, {lv.inclusion}"
        out.append(f"  {lv.name}: {format_bytes(lv.size)}, {lv.line} B lines, {lv.ways} ways, "
                   f"{lv.sets} sets, {managed}")
        for key, f in lv.provenance.items():
            value = getattr(lv, key, None)
            text = shown[key](value) if key in shown and value is not None else str(f.value)
            out.append(f"      {key}: " + _figure_text(m, f"level[{lv.name}].{key}", text))
    return out


def _machine_lines(m: profiles.Machine) -> list[str]:
    out = [f"{m.name}  ({m.id})",
           f"  vendor {m.vendor}; year {m.year}; kind {m.kind}; primary dtype {m.primary_dtype}"]
    if m.base:
        out.append(f"  extends {m.base}")
    out.append(f"  profile {m.path}")
    if m.notes:
        out.append(f"  notes: {m.notes}")
    out += ["clock", "  " + _figure_text(m, "clock", format_frequency(m.clock_hz)), "compute (peak, dense)"]
    out += [f"  {dtype:5} " + _figure_text(m, f"compute.{dtype}", format_flop_rate(rate))
            + f"   balance {m.balance(dtype):.3g} FLOP/B" for dtype, rate in m.peak_flops.items()]
    for table, title, rates in (("vector", "compute.vector (kernels that are not products)", m.vector_flops),
                                ("achievable", "compute.achievable (the products' measured ceiling, a burst)",
                                 m.achievable_flops),
                                ("sustained", "compute.sustained (the products' ceiling at the power limit: "
                                              "training steps)", m.sustained_flops)):
        if rates:
            out.append(title)
            out += [f"  {dtype:5} " + _figure_text(m, f"compute.{table}.{dtype}", format_flop_rate(rate))
                    for dtype, rate in rates.items()]
    if m.issue_costs:
        out.append("issue costs")
        out += [f"  {op:6} " + _figure_text(m, f"issue_costs.{op}", f"{format_time(s)} ({s * m.clock_hz:.3g} cycles)")
                for op, s in m.issue_costs.items()]
    return out


def _memory_lines(m: profiles.Machine) -> list[str]:
    out = ["main memory",
           "  capacity  " + _figure_text(m, "memory.capacity", format_bytes(m.memory.capacity)),
           "  latency   " + _figure_text(m, "memory.latency", format_time(m.memory.latency)),
           "  bandwidth " + _figure_text(m, "memory.bandwidth", format_byte_rate(m.memory.bandwidth))]
    for name in profiles.SUSTAINED:
        rate = getattr(m.memory, name)
        if rate is not None:
            out.append(f"  {name.replace('_', ' ')} " + _figure_text(
                m, f"memory.{name}", f"{format_byte_rate(rate)} ({rate / m.memory.bandwidth:.0%} of the peak)"))
    if m.memory.energy is not None:
        out.append("  energy    " + _figure_text(m, "memory.energy", f"{m.memory.energy * 1e12:.4g} pJ/B"))
    out.append(f"timing model {m.timing.model}")
    out += [f"  {k} = " + _figure_text(m, f"timing.{k}", repr(v)) for k, v in m.timing.params.items()]
    out.append(f"schedule {m.schedule.family}")
    out += [f"  {k} = " + _figure_text(m, f"schedule.{k}", repr(v)) for k, v in m.schedule.params.items()]
    out += _interconnect_lines(m)
    out += _energy_lines(m)
    if m.sources:
        out.append("sources")
        out += [f"  {key}: {citation}" for key, citation in m.sources.items()]
    return out


def _energy_lines(m: profiles.Machine) -> list[str]:
    """The energy figures (docs/energy.md), each with its provenance; a profile without
    [energy] says so, as its results do."""
    spec = m.energy
    if spec is None:
        return ["energy: none stated (results carry energy null)"]
    out = ["energy", "  tdp     " + _figure_text(m, "energy.tdp", f"{spec.tdp:.4g} W"),
           "  static  " + _figure_text(m, "energy.static", f"{spec.static:.4g} W")]
    if spec.host is not None:
        out.append("  host    " + _figure_text(m, "energy.host", f"{spec.host:.4g} W"))
    if spec.fabric is not None:
        out.append("  fabric  " + _figure_text(m, "energy.fabric", f"{spec.fabric * 1e12:.4g} pJ/B per main-memory byte"))
    out += [f"  {d:7} " + _figure_text(m, f"energy.{d}", f"{j * 1e12:.4g} pJ/FLOP (matrix units)")
            for d, j in spec.matrix.items()]
    out += [f"  {d:7} " + _figure_text(m, f"energy.vector.{d}", f"{j * 1e12:.4g} pJ/FLOP (vector units)")
            for d, j in spec.vector.items()]
    return out


def _interconnect_lines(m: profiles.Machine) -> list[str]:
    """The links between devices, each figure with its provenance (none: one device only)."""
    ic = m.interconnect
    if ic is None:
        return []
    out = ["interconnect",
           "  devices_per_node " + _figure_text(m, "interconnect.devices_per_node", str(ic.devices_per_node))]
    for name, link in (("node", ic.node), ("cluster", ic.cluster)):
        if link is not None:
            out.append(f"  {name:7} bandwidth " + _figure_text(m, f"interconnect.{name}.bandwidth",
                                                          format_byte_rate(link.bandwidth) + " per direction"))
            if link.sustained is not None:
                out.append(f"  {name:7} sustained " + _figure_text(
                    m, f"interconnect.{name}.sustained",
                    f"{format_byte_rate(link.sustained)} per direction ({link.sustained / link.bandwidth:.0%} of the "
                    "peak; the collectives' rate)"))
            if link.sustained_all_reduce is not None:
                out.append(f"  {name:7} all-reduce " + _figure_text(
                    m, f"interconnect.{name}.sustained_all_reduce",
                    f"{format_byte_rate(link.sustained_all_reduce)} bus bandwidth (an all-reduce within one node)"))
            out.append(f"  {name:7} latency   " + _figure_text(m, f"interconnect.{name}.latency",
                                                          format_time(link.latency)))
    return out


def cmd_show(args: argparse.Namespace) -> int:
    m = profiles.load_machine(args.machine)
    if args.json:
        print_json(m.as_dict())
        return 0
    print(printable("\n".join(_machine_lines(m) + _level_lines(m) + _memory_lines(m))))
    return 0


def _check(path: str) -> tuple[list[InputError], list[InputError]]:
    _, errors, warnings = profiles.check_file(path)
    return errors, warnings


def cmd_validate(args: argparse.Namespace) -> int:
    return report(args.paths, _check, strict=args.strict)
