"""Figure 9, the activation high-water: live bytes by tensor class while each kernel of the
training step runs, without and with √L checkpointing (no simulation: the step's lifetimes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model_version import MODEL_VERSION
from ..study.tables import HIGHWATER_CLASSES
from ._style import COLOURS, _empty, _finish, _plt, axis, custom, e, empty_spec, fmt, hover, spec

NUMBER = 9
NAME = "activation_highwater"
TITLE = "Activation high-water: live bytes by tensor class over the step"
CAPTION = ("Live bytes by tensor class while each kernel of the training step runs, "
           "forward rising, backward falling, without and with √L checkpointing.")
TABLES = ("live",)
NEEDS = "a network whose training step builds"
OPT_IN = False

CLASS_COLOURS = {"weights": "#4c72b0", "gradients": "#8172b3", "optimizer": "#937860", "activations": "#c44e52",
                 "workspace": "#dd8452", "input": "#8c8c8c"}
MIB = 2 ** 20
CURSOR_STEPS = 120  # positions of the report's cursor through the step


def draw(data: Mapping[str, Any]):
    table = data.get("live") or []
    if not table:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    cks = list(dict.fromkeys(r["checkpoint"] for r in table))
    fig, axes = plt.subplots(1, len(cks), figsize=(6 * len(cks), 4.6), sharey=True, squeeze=False)
    for ax, ck in zip(axes[0], cks, strict=True):
        sub = [r for r in table if r["checkpoint"] == ck]
        xs = [r["index"] for r in sub]
        classes = [c for c in HIGHWATER_CLASSES if any(r.get(c) for r in sub)]
        ax.stackplot(xs, [[r[c] / MIB for r in sub] for c in classes], labels=classes,
                     colors=[CLASS_COLOURS[c] for c in classes], alpha=0.85)
        peak = max(sub, key=lambda r: r["activations"])
        ax.set_title(f"checkpoint {ck}: activations peak at {peak['activations'] / MIB:.0f} MiB "
                     f"({peak['kernel']})", fontsize=9)
        ax.set_xlabel("kernel of the step, in order (forward, then backward and update)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("live bytes (MiB)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    _finish(fig, f"{table[0]['network']} at batch {table[0]['batch']}: live bytes per tensor class while each "
            f"kernel runs, from the lifetimes memwall {MODEL_VERSION} derives (workloads/liveness.py); no "
            "simulation needed.")
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    """One panel a checkpointing, classes stacked; a slider moves a cursor through the step."""
    table = data.get("live") or []
    if not table:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    cks = list(dict.fromkeys(r["checkpoint"] for r in table))
    classes = [c for c in HIGHWATER_CLASSES if any(r.get(c) for r in table)]
    traces = []
    for j, ck in enumerate(cks):
        s = [r for r in table if r["checkpoint"] == ck]
        for k, c in enumerate(classes):
            traces.append({"type": "scatter", "mode": "lines", "stackgroup": ck, "name": f"{c} ({ck})",
                           "legendgroup": ck, "xaxis": f"x{j + 1 if j else ''}", "yaxis": f"y{j + 1 if j else ''}",
                           "x": [r["index"] for r in s], "y": [(r.get(c) or 0) / MIB for r in s],
                           "line": {"color": COLOURS[k % 10], "width": 0.5},
                           "customdata": custom(s, ("checkpoint", "kernel", "phase", lambda r, c=c: fmt(
                               (r.get(c) or 0) / MIB), lambda r: fmt(r["total"] / MIB))),
                           "hovertemplate": hover(("checkpoint", "kernel", "phase", f"{c} MiB", "all live MiB"))})
    n = max([r["index"] for r in table] + [1])
    layout: dict[str, Any] = {"grid": {"rows": 1, "columns": len(cks), "pattern": "independent"}}
    for j, ck in enumerate(cks):
        tag = j + 1 if j else ""
        layout[f"xaxis{tag}"] = axis(f"kernel (checkpoint {ck})", range=[0, n])
        layout[f"yaxis{tag}"] = axis("live bytes (MiB)")
    layout["shapes"] = [{"type": "line", "xref": f"x{j + 1 if j else ''}", "yref": "paper", "x0": 0, "x1": 0,
                         "y0": 0, "y1": 1, "line": {"color": "#000", "width": 1}} for j in range(len(cks))]
    stride = max(1, round(n / CURSOR_STEPS))
    steps = [{"label": str(i), "method": "relayout",
              "args": [{f"shapes[{j}].{end}": i for j in range(len(cks)) for end in ("x0", "x1")}]}
             for i in range(0, n + 1, stride)]
    layout["sliders"] = [{"steps": steps, "currentvalue": {"prefix": "cursor at kernel "}, "pad": {"t": 50}}]
    return spec(traces, height=540, **layout)


def prose(data: Mapping[str, Any]) -> str:
    hw = data.get("live") or []
    if not hw:
        return ""
    bits = []
    for ck in dict.fromkeys(r["checkpoint"] for r in hw):
        sub = [r for r in hw if r["checkpoint"] == ck]
        peak = max(sub, key=lambda r: r["activations"])
        bits.append(f"checkpoint {e(ck)}: activations peak at {peak['activations'] / MIB:.0f} MiB, "
                    f"all live bytes at {max(r['total'] for r in sub) / MIB:.0f} MiB")
    return f"{e(hw[0]['network'])} at batch {hw[0]['batch']}: " + "; ".join(bits) + "."
