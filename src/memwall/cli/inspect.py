"""``memwall inspect``: one machine x one workload, the per-kernel, per-level stall breakdown."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import InputError
from ..options import Case, add_case_arguments, given_options, make_case
from ..simulation.result import SERVING_COLUMNS
from ..text import printable
from ..units import format_bytes, format_flop_rate, format_time
from . import add_command
from ._output import print_json


def parse_gemm(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--gemm takes M,N,K as three positive integers, got {text!r}")
    return dims  # type: ignore[return-value]


DESCRIPTION = (
    "Simulate one training (or inference) step of a network, or one matrix product, on "
    "one machine profile, and print per kernel and per memory level the cycles spent "
    "computing and stalled, with a one-line verdict."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "inspect", run, description=DESCRIPTION,
                    help="one machine x one network (or GEMM): where the step's time goes")
    p.add_argument("--machine", required=True, help="machine profile id (memwall machines list) or file")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--network", help="network preset id (memwall networks list) or preset .toml path")
    what.add_argument("--gemm", type=parse_gemm, metavar="M,N,K", help="a single product C[MxN] = A[MxK] B[KxN]")
    add_case_arguments(p)
    p.add_argument("--allow-fallback", action="store_true",
                   help="run a --dtype the machine has no arithmetic for at the rate of its nearest dtype "
                        "(bf16 -> fp16 -> fp32 ...), with a warning and 'dtype_fallback' in the JSON; "
                        "without it such a --dtype is refused")
    p.add_argument("--exact", action="store_true",
                   help="replay every access of every loop nest (default: sample nests beyond the step's "
                        "budget of line lookups; see docs/timing.md)")
    p.add_argument("--max-lookups", type=_count, default=None, metavar="N",
                   help="refuse a step whose replay needs more than N line lookups (default: about ten "
                        "minutes of replay; the refusal gives the estimate)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it shows only on a terminal)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
                   help="change one profile figure for a what-if, read as the profile file reads it, "
                        "e.g. --set memory.bandwidth='1 TB/s' or --set timing.dispatch.eager.host_issue='2 us' "
                        "(repeatable)")
    p.add_argument("--crossover", action="store_true",
                   help="decode: double the batch from 1 until the step is compute-bound (or no longer fits), "
                        "and say at which batch the KV cache reads overtake the weights'")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _count(text: str) -> int:
    """A positive whole number, also written as 1e10."""
    try:
        value = float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        value = None
    if value is None or value != value or value < 1 or value == float("inf") or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 (such as 2e10), got {text!r}")
    return int(value)


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["memory.bandwidth=1 TB/s"]`` -> {"memory.bandwidth": "1 TB/s"}; quotes around VALUE are dropped."""
    out: dict[str, str] = {}
    for item in items:
        field, sep, value = item.partition("=")
        field, value = field.strip(), value.strip()
        if not sep or not field or not value:
            raise InputError(f"--set takes FIELD=VALUE, got {item!r}", field="--set")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" and " " in value:
            value = value[1:-1]
        out[field] = value
    return out


def run(args: argparse.Namespace) -> int:
    given = given_options(args)
    case = make_case(args.machine, args.network, args.gemm, **given)  # refuses an option that does not apply
    if args.crossover:
        if case.gemm is not None or case.phase != "decode":
            raise InputError("--crossover is a decode question: it takes --network with --phase decode"
                             + (", not --gemm" if case.gemm is not None else ""), field="--crossover")
        return _crossover(case, args)
    from ..simulation import run_case  # imported here: the simulation pulls in every stage

    machine = None
    if args.sets:
        from ..profiles import load_machine

        machine = load_machine(args.machine, sets=parse_sets(args.sets))
    from ..progress import Phase

    # a bar on a terminal; in a log, a line as the replay starts, every 10 s and at its end
    with Phase("memwall inspect", "replaying the step", unit="line lookup", enabled=not args.no_progress,
               delay=2.0) as bar:
        def progress(done: int, total: int) -> None:
            bar.set_total(total)
            bar.update(done - bar.done)

        result = run_case(case, machine=machine, exact=args.exact, max_lookups=args.max_lookups, progress=progress,
                          allow_fallback=args.allow_fallback)
    for warning in result["warnings"]:
        print(f"warning: {printable(warning)}", file=sys.stderr)
    if args.json:
        print_json(result.to_json())
    else:
        print(render(result))
    return 0


def _crossover(case: Case, args: argparse.Namespace) -> int:
    from ..profiles import load_machine
    from ..progress import Phase
    from ..simulation import run_case  # imported here: the simulation pulls in every stage
    from ..study.serving import decode_crossovers

    machine = load_machine(args.machine, sets=parse_sets(args.sets)) if args.sets else None  # the what-if too
    with Phase("memwall inspect", "doubling the decode batch from 1", unit="batch",
               enabled=not args.no_progress) as phase:
        def run(c: Case) -> Any:
            result = run_case(c, machine=machine, exact=args.exact, max_lookups=args.max_lookups,
                              allow_fallback=args.allow_fallback)
            phase.update()
            phase.note(f"batch {c.batch}: {result['bound_class']}")
            return result

        out = decode_crossovers(case, run=run)
    for warning in out["warnings"]:
        print(f"warning: {printable(warning)}", file=sys.stderr)
    if args.json:
        print_json(out)
        return 0
    print(printable(f"{out['network']} decode at context {out['context']} on {out['machine']}:"))
    print(f"{'batch':>7} {'tokens/s':>12} {'s/token':>10} {'mem/arith':>9}  bound")
    for r in out["rows"]:
        ratio = f"{r['memory_ratio']:.3g}" if r["memory_ratio"] is not None else "-"
        print(f"{r['batch']:>7} {r['tokens_per_second']:>12.4g} {format_time(r['seconds']):>10} {ratio:>9}  "
              f"{r['bound_class']} ({r['bound']})"
              + ("" if r["fits"] else "  (does not fit)"))
    cb = out["compute_bound_at_batch"]
    if cb:
        print(f"compute-bound from batch {cb}")
    elif out["rows"] and not out["rows"][0]["fits"]:
        print("does not fit at batch 1: no batch to be compute-bound at")
    else:
        print("never compute-bound before the batch stops fitting")
    print(f"KV cache reads overtake weight reads ({format_bytes(out['weights_read_per_step'])} a step) at batch "
          f"{out['kv_overtakes_weights_at_batch']} ({format_bytes(out['kv_cache_read_per_sequence'])} a sequence)")
    return 0


def _communication(result: dict) -> list[str]:
    """The devices, each collective beside the kernels, the stages and the bubble."""
    if result.get("devices", 1) <= 1:
        return []
    p = result["parallel"]
    g = result["global_step"]
    extra = "".join(part for part, on in (
        (f", cp {p['cp']} {p['cp_kind']}", p.get("cp", 1) > 1),
        (", sequence-parallel", p.get("sequence_parallel")),
        (f", interleave {p['interleave']}", p.get("interleave", 1) > 1)) if on)
    out = [f"devices: {result['devices']} (dp {p['dp']}, tp {p['tp']}, pp {p['pp']}, ep {p['ep']}, zero "
           f"{p['zero']}{extra}); the slowest stage's device is shown; {g['tokens_per_second']:.4g} tokens/s in all, "
           f"{g['tokens_per_second_per_device']:.4g} per device",
           f"{'communication':<44} {'kind':>14} {'group':>6} {'count':>6} {'bytes':>10} {'time':>10} {'exposed':>10}"]
    for c in result["communication"]:
        out.append(f"{c['name'][:44]:<44} {c['kind']:>14} {c['group']:>6} {c['count']:>6} "
                   f"{format_bytes(c['bytes']):>10} {format_time(c['seconds']):>10} {format_time(c['exposed']):>10}")
    tbc = result["time_by_component"]
    out.append(f"interconnect {format_time(tbc['interconnect'])} exposed, {format_bytes(result['interconnect_bytes'])} "
               f"sent; bubble {format_time(tbc['bubble'])} ("
               f"{'(p-1)/(m+p-1)' if p.get('interleave', 1) == 1 else '(p-1)/(V m+p-1)'} = "
               f"{result['bubble_fraction']:.3f})")
    for st in result["stages"]:
        sh = st.get("shards") or {}
        held = (f"; a device holds {sh['sequence_tokens']} tokens a sequence ({sh['norm_tokens']} in its norms), "
                f"{sh['heads']} heads ({sh['attention_heads']} in attention, {sh['attention_queries']} queries x "
                f"{sh['attention_keys']} keys)" if sh.get("layers") else "")
        out.append(f"stage {st['stage']} (x{st['count']}): {format_time(st['slot_seconds'])} a micro-batch, peak "
                   f"{format_bytes(st['ledger']['peak'])}" + ("" if st["fits"] else " (DOES NOT FIT)") + held)
    return out


def _energy_line(result: dict) -> str:
    e = result.get("energy")
    if e is None:
        return f"energy: not counted ({result['machine']} states no [energy] figures; docs/energy.md)"
    parts = ", ".join(f"{k} {100 * v / e['joules']:.1f}%" for k, v in e["joules_by_component"].items() if v > 0)
    per = (f"; {e['tokens_per_joule']:.4g} tokens/J" if e["tokens_per_joule"] else "") + (
        f"; {e['cups_per_joule']:.4g} connection updates/J" if e["cups_per_joule"] else "")
    unstated = f"; not counted (no figure): {', '.join(e['unstated'])}" if e["unstated"] else ""
    return (f"energy: {e['joules']:.4g} J, {e['watts_average']:.4g} W a device (tdp {e['tdp']:.4g} W); data movement "
            f"{100 * e['data_movement_share']:.1f}%: {parts}{per}{unstated}")


def _request_line(sv: dict, batch: int) -> str:
    """A generate case's serving line: the request's TTFT, TPOT and throughput, its setup,
    and the decode contexts simulated (docs/serving.md, "Whole requests")."""
    setup = ", ".join(f"{c.label} {sv[c.name]}" for c in SERVING_COLUMNS if c.setting and sv.get(c.name) is not None)
    tpot = f"TPOT {format_time(sv['tpot_seconds'])}, " if sv["tpot_seconds"] is not None else ""
    contexts = ", ".join(map(str, sv["decode_contexts"])) or "none"
    return (f"requests: {batch} together, {setup}: TTFT {format_time(sv['ttft_seconds'])}, {tpot}request "
            f"{format_time(sv['request_seconds'])}; {sv['tokens_per_second']:.4g} output tokens/s "
            f"({sv['tokens_per_second_per_device']:.4g} per device); decode steps simulated at contexts {contexts}; "
            f"at most batch {sv['max_batch_that_fits']} fits every step")


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole > 0 else "   - "


def render(result: dict) -> str:
    """A table a person reads at a glance: kernels down, compute and stall by level across
    (control characters of the names in it shown as escapes)."""
    levels = list(result["cycles"]["stall"])
    workload = result["network"] or "gemm " + "x".join(map(str, result["gemm"]))
    lines = [
        f"{result['machine_name']} ({result['machine']}, {result['year']}, {result['kind']}, "
        f"balance {result['balance']:.3g} FLOP/B)",
        f"{workload}: batch {result['batch']}, {result['phase']}, updates {result['updates']}, "
        f"checkpoint {result['checkpoint']}, {result['dtype']}"
        + (f", C written in {result['out_dtype']}" if result.get("out_dtype") else ""),
        "",
    ]
    header = f"{'kernel':<28} {'x':>5} {'time':>10} {'compute':>7} {'ovh':>6} " + " ".join(
        f"{lv[:9]:>9}" for lv in levels
    ) + "  bound"
    lines.append(header)
    lines.append("-" * len(header))
    for k in result["kernels"]:
        c = k["cycles"]
        lines.append(
            f"{k['name'][:28]:<28} {k['repeat']:>5} {format_time(k['seconds']):>10} "
            f"{_pct(c['compute'], c['total']):>7} {_pct(c['overhead'], c['total']):>6} "
            + " ".join(f"{_pct(c['stall'].get(lv, 0.0), c['total']):>9}" for lv in levels)
            + f"  {k['bound']}"
        )
    c = result["cycles"]
    lines.append("-" * len(header))
    lines.append(
        f"{'request' if result['phase'] == 'generate' else 'step':<28} {'':>5} {format_time(result['seconds']):>10} "
        f"{_pct(c['compute'], c['total']):>7} "
        f"{_pct(c['overhead'], c['total']):>6} "
        + " ".join(f"{_pct(c['stall'].get(lv, 0.0), c['total']):>9}" for lv in levels)
    )
    lines.append("")
    lines.append("bytes moved: " + ", ".join(f"{lv} {format_bytes(b)}" for lv, b in result["bytes"].items()))
    lines.append(
        f"{format_flop_rate(result['achieved_flops'])} achieved, {100 * result['fraction_of_peak']:.1f}% of "
        f"{format_flop_rate(result['peak_flops'])}; stall {100 * result['stall_fraction']:.1f}% of cycles"
        + (f"; {result['cups']:.4g} CUPS" if result["cups"] else "")
        + (f"; {result['cps']:.4g} connections/s" if result["cps"] else "")
    )
    if result.get("accumulate", 1) > 1:
        mb, st = result["micro_batch"], result["optimizer_step"]
        lines.append(
            f"per micro-batch {format_time(mb['seconds'])}; per optimizer step ({result['accumulate']} micro-batches) "
            f"{format_time(st['seconds'])}, optimizer {100 * st['optimizer_share']:.1f}% of it"
        )
    if result.get("mfu") is not None and result["phase"] == "train":
        seed = f"; a = {result['a']:.4g} B/(d.token.layer), d_min {result['d_min']:.4g}" if result.get("a") else ""
        lines.append(f"MFU {100 * result['mfu']:.1f}%, HFU {100 * result['hfu']:.1f}% (fusion {result['fusion']}){seed}")
    gap, seed_ratio = result.get("seed_gap"), (result.get("seed") or {}).get("memory_ratio")
    if gap and seed_ratio:
        lines.append(f"seed beside simulation (memory ÷ arithmetic, the micro-batch at the dtype's width): seed "
                     f"{seed_ratio:.3g}, simulated {result['memory_ratio_micro']:.3g} = seed x traffic "
                     f"{gap['traffic']:.3g} x memory term {gap['memory_term']:.3g} x arithmetic {gap['arithmetic']:.3g}; "
                     f"whole step {result['memory_ratio']:.3g}")
    ledger = result["ledger"]
    lines.append(
        "capacity: peak "
        + format_bytes(ledger["peak"])
        + f" of {format_bytes(result['capacity']['memory'])}"
        + ("" if result["capacity"]["fits"] else "  (DOES NOT FIT)")
    )
    lines.extend(_communication(result))
    d = result.get("dispatch") or {}
    if d.get("host_seconds"):
        lines.append(f"dispatch {d['mode']}: the host issues {d.get('launches', 0)} kernels in "
                     f"{format_time(d['host_seconds'])}, the device works {format_time(d['device_seconds'])}")
    lines.extend(_framework_lines(d))
    if "serving" in result and "request_seconds" in result["serving"]:
        lines.append(_request_line(result["serving"], result["batch"]))
    elif "serving" in result:
        sv = result["serving"]
        per = (f"{format_time(sv['seconds_per_token'])} per output token" if "seconds_per_token" in sv
               else f"time to first token {format_time(sv['time_to_first_token'])}")
        setup = ", ".join(f"{c.label} {sv[c.name]}" for c in SERVING_COLUMNS
                          if c.setting and sv.get(c.name) is not None)
        lines.append(f"serving: {setup}: "
                     f"{sv['tokens_per_second']:.4g} tokens/s"
                     + (f" ({sv['tokens_per_second_per_device']:.4g} per device)"
                        if "tokens_per_second_per_device" in sv else "")
                     + f", {per}; KV cache "
                     f"{format_bytes(ledger.get('kv_cache', 0))}, at most batch {sv['max_batch_that_fits']} fits")
    lines.append(_energy_line(result))
    if result.get("power_scale", 1.0) < 1.0:
        e = result.get("energy") or {}
        # a request's steps each run at their own clock: its scale is their blend
        who, over, clock = (("the request's steps", " over the request", "each step at the clock the limit allows it")
                            if result["phase"] == "generate" else ("the step", "", "the clock the limit allows"))
        lines.append(f"power: held at the rated {e.get('tdp', 0):.4g} W: at their burst rates {who} would draw "
                     f"more, so the arithmetic runs at {result['power_scale']:.3g} of them{over} ({clock}; "
                     f"docs/timing.md)")
    lines.append(f"verdict: {result['verdict']}")
    return printable("\n".join(lines))  # names from files and the command line reach a terminal


def _framework_lines(d: dict) -> list[str]:
    """What the framework added: its host work, its synchronisation, what it could not count."""
    f = d.get("framework")
    if not f or f["id"] == "hand-written":
        return []
    timed = " (timed from the host)" if d.get("timing") == "host" else ""
    work = (f"host work {format_time(f['host_seconds'])} ({f['layer_passes']} layer passes)" if f["host_seconds"]
            else "no host work of its own")
    line = (f"framework {f['id']} ({f['name']}, {f['version']}){timed}: {work}, "
            + (f"synchronisation {format_time(f['synchronize_seconds'])}" if f["synchronize_seconds"]
               else "no synchronisation"))
    if f.get("unstated"):
        line += f"; unstated, counted as 0: {', '.join(f['unstated'])}"
    return [line]
