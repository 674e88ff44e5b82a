"""``memwall step``: the kernels and the capacity ledger of one training step.

Owns the ``step`` subcommand: a network and a training configuration, printed as a
table of kernels (FLOPs, dims, tensors) and the ledger, or as JSON (``--json``).
"""

from __future__ import annotations

from typing import Any

from ..options import STEP, add_case_arguments, given_options, make_case
from ..simulation.step import case_config, case_network
from ..units import format_bytes
from ..workloads.step import Step, build_step
from . import add_command
from ._output import print_json

DESCRIPTION = (
    "Build one training step: kernels with exact FLOPs, tensors at addresses, "
    "and peak live bytes per tensor class."
)


def add_step_arguments(p: Any) -> None:
    """The options that pick a step (shared with ``memwall trace``): the network and every
    case option the step builder reads (memwall.options)."""
    p.add_argument("--network", required=True, metavar="ID", help="network id or preset .toml path")
    add_case_arguments(p, stages=(STEP,))
    p.add_argument("--expand-repeats", action="store_true", help="list every transformer layer instead of scaling one")


def step_from_args(args: Any) -> Step:
    case = make_case("", args.network, **given_options(args))  # refuses an option that does not apply
    return build_step(case_network(case), case_config(case, case_network(case)),
                      expand_repeats=args.expand_repeats)


def register(subparsers: Any) -> None:
    p = add_command(subparsers, "step", cmd_step, help="the kernels and capacity ledger of a training step",
                    description=DESCRIPTION)
    add_step_arguments(p)
    p.add_argument("--json", action="store_true", help="as JSON (flops, ledger, kernels)")


def _flops(x: float) -> str:
    for unit, div in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.4g} {unit}FLOP"
    return f"{x:.0f} FLOP"


def cmd_step(args: Any) -> int:
    step = step_from_args(args)
    if args.json:
        print_json(step.as_dict())
        return 0
    cfg = step.config
    print(f"{step.network.name}: batch {cfg.batch} ({cfg.updates}), {cfg.optimizer}, {cfg.dtype}, "
          f"checkpoint {cfg.checkpoint}, phase {cfg.phase}; {step.iterations} iteration(s) of {len(step.kernels)} kernels")
    print(f"{'phase':<9} {'op':<11} {'kernel':<30} {'dims':<22} {'repeat':>6} {'FLOPs/run':>16}")
    for k in step.kernels:
        dims = "x".join(map(str, k.dims)) if k.dims and k.op in ("gemm", "gemv", "attention") else f"{k.elements} el"
        if k.batch > 1:
            dims = f"{k.batch}*({dims})"
        print(f"{k.phase:<9} {k.op:<11} {k.name[:30]:<30} {dims:<22} {k.repeat:>6} {k.flops:>16,}")
    print("FLOPs per step: " + ", ".join(f"{p} {_flops(v)}" for p, v in step.flops.items()))
    if cfg.accumulate > 1:
        per = step.optimizer_step()
        print(f"per optimizer step ({per['micro_batches']} micro-batches, {cfg.gradient_dtype} gradients): "
              f"{_flops(per['flops'])}")
    traffic = step.as_dict()["activation_traffic"]
    if traffic is not None:
        print(f"activation traffic between kernels (seed model's a, fusion {cfg.fusion}): "
              f"{traffic['a']:.4g} B per d per token per layer")
    led = step.ledger
    print("ledger (peak live): " + ", ".join(f"{k} {format_bytes(v)}" for k, v in led.as_dict().items()))
    return 0
