"""A case on dp x tp x cp x pp devices: each distinct device's share replayed once, its
communication timed by the link model, the pipeline paced by its slowest stage.

Owns: :func:`run_parallel` and the turning of the slowest device's result into the
whole step's (:func:`_whole_step`); docs/timing.md, "Devices and the interconnect".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from ..energy import device_joules, energy_table, with_power_warning
from ..errors import InputError
from ..interconnect import bubble_fraction
from ..options import Case
from ..profiles import Machine
from ..timing import StageTimes, StepTiming, sharded_update, time_pipeline, time_stage
from ..workloads.parallel import Parallel, communication, device_steps, shard_ledger, shard_summary
from .plan import check_cost, plan_stages
from .power import at_power_limit, dynamic_joules_of
from .replay import _ticker, replay_by_shape, replay_plans
from .result import Devices, Groups, Ledger, Result, build_groups, capacity_warning, finished, serving_figures
from .step import case_config, case_network
from .timed import accumulated, dtype_fallback, simulate_step, stack_of

# What a result replayed with reuse_shapes says. The error is the largest |predicted
# seconds / exact - 1| over the shipped multi-device cases and GPT-3 175B on 1,024
# A100s, measured by benchmarks/bench_multidevice.py at 4e69e16 (0.615 %, benchmarks/README.md).
SHAPE_REUSE_ERROR = 0.0062
SHAPE_REUSE_WARNING = ("approximate replay (reuse_shapes): {reused} of the {kernels} kernels of the stages took the "
                       "counters of an earlier kernel of the same shape instead of being replayed; on the shipped "
                       f"multi-device cases this moved the step time by at most {SHAPE_REUSE_ERROR:.2%}")

# False: every machine the sensitivity moves a figure of times the stages afresh (the
# benchmark's "before", and the proof that sharing them changes no figure).
REUSE_TIMED = True


def run_parallel(case: Case, machine: Machine, *, exact: bool = False, max_lookups: int | None = None,
                 progress: Callable[[int, int], Any] | None = None, allow_fallback: bool = False,
                 reuse_shapes: bool = False) -> Result:
    """A step on dp x tp x pp devices: each distinct device's share replayed once, its
    communication timed by the link model, the pipeline paced by its slowest stage
    (docs/timing.md, "Devices and the interconnect"). The result is the slowest stage's
    device, with the whole step's FLOPs and throughput per device. A dtype the machine
    has no rate for is treated as :func:`run_case` treats it.

    ``reuse_shapes`` (opt-in, not exact): a kernel of the same shape as one replayed before
    in this step takes its counters (:func:`replay_by_shape`); the result says so in a
    warning with the error measured on the shipped set (benchmarks/bench_multidevice.py)."""
    par = case.parallel
    if case.gemm is not None:
        raise InputError("a single GEMM runs on one device: --dp, --tp and --pp apply to networks", field="dp")
    ic = machine.interconnect
    if ic is None:
        raise InputError(f"machine {machine.id!r} has no [interconnect] table: a {par.devices}-device step "
                         f"(dp {par.dp}, tp {par.tp}, pp {par.pp}) needs its links; run it on one device, or add "
                         "the table (era_data/README.md)", file=str(machine.path or machine.id), field="interconnect")
    network = case_network(case)
    config = case_config(case, network)
    if par.dp > 1 and not config.training and par.zero:
        raise InputError("ZeRO shards training state: it needs phase train", field="zero")
    k = config.accumulate
    steps = device_steps(network, config, par)
    fallback = dtype_fallback(machine, steps[0][1], asked=case.dtype is not None, allow=allow_fallback)
    plans = plan_stages(machine, [st for _, st in steps], exact=exact)
    total = sum(p.lookups for p in plans)
    check_cost(replace(plans[0], lookups=total), max_lookups, exact=exact)
    share = 1.0 / par.replicas if par.zero >= 1 and config.training else 1.0
    reused = 0
    if reuse_shapes:  # never kept for replay_once: an approximate count must not answer an exact case
        counters, reused = replay_by_shape(machine, plans, _ticker(progress, total))
    else:
        counters = replay_plans(machine, plans, progress)

    # What a device communicates depends on the shard and the degrees, never on the machine:
    # worked out once, not once for each machine the sensitivity times the stages on.
    comms = [communication(network, config, par, stage, st.ledger, st.tokens) for stage, st in steps]
    # Each stage's device step (its kernels, dispatch and K micro-batches) depends on the
    # machine but not on its interconnect, which only time_stage reads: the sensitivity's
    # machines that move a link figure share the steps timed on the machine they came from
    # (sensitivity.scaled replaces the one figure; every other field is the same object).
    timed: dict[tuple[int, ...], tuple[Machine, list[StepTiming]]] = {}

    def device_steps_on(on: Machine) -> list[StepTiming]:
        key = tuple(id(getattr(on, f.name)) for f in fields(on) if f.name != "interconnect")
        kept = timed.get(key)  # the machine is kept beside its steps, so no id in a key is reused
        if kept is None or not REUSE_TIMED:
            kept = timed[key] = (on, [accumulated(simulate_step(on, st, plan=plan, dispatch=case.dispatch,
                                                                counters=c, **stack_of(case, on)), k)
                                      for (_, st), plan, c in zip(steps, plans, counters, strict=True)])
        return [t if t.machine is on else replace(t, machine=on) for t in kept[1]]

    def stages(on: Machine) -> list:
        """Each stage's device timed on ``on`` from the counts replayed once."""
        return [time_stage(on.interconnect, sharded_update(t, share), comm, k)
                for t, comm in zip(device_steps_on(on), comms, strict=True)]

    def pipeline(on: Machine) -> tuple[list[StageTimes], int, StepTiming]:
        """The stages timed on ``on``, the slowest stage's index and the device step it sets."""
        times = stages(on)
        return (times, *time_pipeline(times, par.pp, k, par.interleave))

    def joules_of(burst: tuple[list[StageTimes], int, StepTiming], on: Machine) -> float:
        # the busiest device sets the clock: a synchronous step waits for it
        return max(dynamic_joules_of(replace(t.timing, machine=on), t.comms) for t in burst[0])

    (times, b, device), retime = at_power_limit(machine, pipeline, lambda p: p[2].seconds, joules_of)
    step = steps[b][1]
    groups = _whole_step(build_groups(case, step, device, fallback, retime), par, steps, times, b, device,
                         network.connections)
    if reused:
        kernels = sum(len(p.replays) for p in plans)
        groups = replace(groups, warnings=[*groups.warnings, SHAPE_REUSE_WARNING.format(reused=reused, kernels=kernels)])
    if config.serving:  # every replica's tokens; the per-device rate beside them
        groups = replace(groups, serving=serving_figures(step, device.seconds, machine.memory.capacity,
                                                         devices=par.devices, replicas=par.replicas))
    return finished(groups, machine)


def _whole_step(result: Groups, par: Parallel, steps: list, times: list, b: int, device: StepTiming,
                connections: int) -> Groups:
    """Turn the slowest device's result (stage ``b``'s, as :func:`time_pipeline` chose it)
    into the step's: FLOPs and throughput over every device, its communication, each
    stage's slot and ledger, ZeRO's per-device ledger."""
    machine = device.machine
    seconds = device.seconds
    replicas = par.tp * par.cp * par.dp  # devices running each stage kind's step (cp on other tokens)
    flops = sum(st.count * replicas * t.timing.flops for (st, _), t in zip(steps, times, strict=True))
    recompute = sum(st.count * replicas * t.timing.iterations * sum(x.flops for x in t.timing.kernels
                                                                    if x.phase == "recompute")
                    for (st, _), t in zip(steps, times, strict=True))
    per_device = flops / seconds / par.devices if seconds > 0 else 0.0
    model = (flops - recompute) / seconds / par.devices if seconds > 0 else 0.0
    stage_rows = []
    for (st, step), t in zip(steps, times, strict=True):
        ledger = shard_ledger(step.ledger, par).as_dict()
        stage_rows.append({"stage": st.name, "count": st.count, "layers": st.layers,
                           "shards": shard_summary(step, st, par),
                           "slot_seconds": t.slot, "update_seconds": t.update,
                           "communication_seconds": t.exposed_step, "ledger": ledger,
                           "fits": ledger["peak"] <= machine.memory.capacity})
    ledger = stage_rows[b]["ledger"]
    fits = all(r["fits"] for r in stage_rows)
    cfg = steps[b][1].config
    tokens = par.dp * par.cp * cfg.accumulate * steps[b][1].tokens  # each cp device: S / cp of each sequence
    examples = par.dp * cfg.accumulate * cfg.batch
    comms = [{"name": c.name, "kind": c.kind, "group": c.group, "bytes": c.bytes, "count": c.count,
              "seconds": c.seconds, "exposed": c.exposed, "sent_bytes": c.sent, "overlap": c.overlap}
             for c in times[b].comms]
    rates = replace(result.rates, flops=flops, achieved_flops=per_device, fraction_of_peak=per_device / device.peak,
                    mfu=model / device.peak, hfu=per_device / device.peak, model_flops=flops - recompute)
    devices = Devices(
        devices=par.devices, parallel=par.as_dict(), interconnect_bytes=sum(c.sent for c in times[b].comms),
        communication=comms, stages=stage_rows,
        bubble_fraction=bubble_fraction(par.pp, cfg.accumulate, par.interleave),
        global_step={"devices": par.devices, "examples": examples, "tokens": tokens, "seconds": seconds,
                     "examples_per_second": examples / seconds if seconds > 0 else 0.0,
                     "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
                     "tokens_per_second_per_device": tokens / seconds / par.devices if seconds > 0 else 0.0})
    unstated: set[str] = set()
    kinds = [(st.count * replicas, device_joules(t.timing, t.comms, unstated))
             for (st, _), t in zip(steps, times, strict=True)]
    updates = examples * connections if cfg.training else 0  # the whole network's, every replica's examples
    energy = energy_table(machine, kinds, seconds, par.devices, tokens=tokens, connection_updates=updates,
                          unstated=unstated)
    warnings = with_power_warning(machine, [w for w in result.warnings if "at its peak" not in w], energy)
    if not fits:
        worst = max(stage_rows, key=lambda r: r["ledger"]["peak"])
        warnings.insert(0, capacity_warning(worst["ledger"]["peak"], machine, f"a device of stage {worst['stage']}"))
    return replace(result, rates=rates, devices=devices, warnings=warnings, energy=energy,
                   ledger=Ledger(ledger, {"memory": machine.memory.capacity, "fits": fits}))
