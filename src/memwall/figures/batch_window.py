"""Figure 4, the batch window: fraction of peak against batch on modern machines, with the
turn the step's own bytes per parameter predict, the seed's estimate, the floor per
optimizer step and the critical batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..study.tables import BYTES_PER_TOKEN_DP
from ._style import (
    COLOURS,
    _empty,
    _finish,
    _plt,
    axis,
    bound_label,
    custom,
    e,
    empty_spec,
    fmt,
    hover,
    interval_band,
    label,
    sources,
    spec,
)
from .regime_flip import against_seed

NUMBER = 4
NAME = "batch_window"
TITLE = "The batch window: fraction of peak against batch"
CAPTION = ("Fraction of peak against batch (in tokens) on modern machines; dotted lines mark "
           "T_min = β · b_w / (F/P), the turn the step's own bytes per parameter per micro-batch (b_w) predict. "
           "These cases run one micro-batch per optimizer step, unfused; dashed lines are the seed model's "
           "estimate of the same steps (each operand moved once, no cache, no dispatch); the shaded band is each "
           "prediction's interval (docs/intervals.md).")
TABLES = ("rows", "model", "wide")
NEEDS = "mini-batch training at several batch sizes on modern machines"
OPT_IN = False

Row = Mapping[str, Any]


def _turns(sub: Sequence[Row], seed_turn: float) -> str:
    """The seed's predicted turn beside the simulated one: the first batch whose binding
    class is compute (docs/timing.md, "The binding resource"), or the last batch run."""
    simulated = next((r["tokens"] for r in sub if r.get("bound_class") == "compute"), None)
    said = (f"compute-bound from {simulated:.0f} tokens" if simulated is not None
            else f"not compute-bound by {sub[-1]['tokens']:.0f} tokens")
    return f"seed's turn ≈{seed_turn:.0f} tokens; {said}"


def _machines(ax, sel: Sequence[Row], model: Sequence[Row], cmap) -> None:
    machines = list(dict.fromkeys(r["machine"] for r in sorted(sel, key=lambda r: (r["year"], r["machine"]))))
    for k, m in enumerate(machines):
        sub = sorted((r for r in sel if r["machine"] == m), key=lambda r: r["tokens"])
        colour = cmap(k % 10)
        turn = next((t["t_min"] for t in model if t["machine"] == m), 2 * sub[0]["balance"])
        xs, ys = [r["tokens"] for r in sub], [r["fraction_of_peak"] for r in sub]
        ax.plot(xs, ys, marker="o", ms=4, color=colour, label=f"{label(sub[0])}: {_turns(sub, turn)}")
        interval_band(ax, xs, ys, sub, colour)  # the fraction of peak is a rate: the seconds' interval inverted
        seed = [(r["tokens"], r["seed_fraction_of_peak"]) for r in sub if r.get("seed_fraction_of_peak")]
        ax.plot([x for x, _ in seed], [y for _, y in seed], color=colour, ls="--", lw=0.8, alpha=0.7)
        ax.axvline(turn, color=colour, ls=":", lw=1)
        opt = next((t for t in model if t["machine"] == m and t.get("t_opt")), None)
        if opt:
            ax.axvline(opt["t_step"], color=colour, ls="-.", lw=0.8)
            ax.plot([opt["t_opt"]], [0.02], marker="^", ms=8, color=colour, clip_on=False)


def _wide(ax, wide: Sequence[Row]) -> None:
    for (net, fusion), style in zip(dict.fromkeys((r["network"], r.get("fusion", "none")) for r in wide),
                                    ("-", "--", "-.", ":"), strict=False):
        sub = sorted((r for r in wide if (r["network"], r.get("fusion", "none")) == (net, fusion)),
                     key=lambda r: r["tokens"])
        ceiling = sub[0]["d_model"] / (sub[0]["d_model"] + sub[0]["d_min"]) if sub[0].get("d_min") else None
        ax.plot([r["tokens"] for r in sub], [r["fraction_of_peak"] for r in sub], color="k", ls=style, marker="s",
                ms=3, label=f"{net} (d = {sub[0]['d_model']:.0f}) on {sub[0]['name']}, fusion {fusion}"
                + (f": ceiling d/(d+d_min) = {ceiling:.2f}" if ceiling else ""))
        if ceiling:
            ax.axhline(ceiling, color="k", ls=style, lw=0.6, alpha=0.5)


def _note(model: Sequence[Row], crit: Row | None) -> str:
    crit_note = ""
    if crit:
        crit_note = (f" Dash-dot: the seed's floor per optimizer step, T_step = β · (b_update + b_comm) / (F/P), "
                     f"with the gradient all-reduce of {BYTES_PER_TOKEN_DP} replicas (b_comm = "
                     f"{crit['b_comm']:.1f} B/param). Black: the critical batch at the loss Kaplan et al.'s fit "
                     f"gives this network ({crit['loss']:.2f} nats; B_crit = B*/L^(1/α_B), their eq. 1.4); "
                     "triangles: the time-optimal batch between them, √(T_step · B_crit), as the seed takes it. "
                     "These cases run one micro-batch per optimizer step, so tokens per micro-batch are "
                     "tokens per optimizer step.")
    seed_note = crit_note + (" Dashed: the seed model's fraction of peak (compute or memory, whichever is longer, each "
                             "operand moved once); the simulation falls below it by the dispatch, waves and cache "
                             "misses it leaves out.")
    if model:
        wb = model[0]
        note = (f"Dotted: T_min = β · b_w / (F/P), with the step's own b_w = {wb['b_w']:.1f} B of weights and "
                f"gradients per parameter per micro-batch and F/P = {wb['flops_per_token']:.2f} FLOP per "
                f"parameter per token ({wb['b_update']:.1f} B/param more per optimizer step). These cases run "
                "one micro-batch per optimizer step, unfused (memwall inspect --accumulate K --fusion full "
                "shows what each changes).")
    else:
        note = "Dotted: 2 × balance tokens (the step's own bytes per parameter were not available)."
    return note + seed_note


def draw(data: Mapping[str, Any]):
    sel, model, wide = data.get("rows") or [], data.get("model") or (), data.get("wide") or ()
    if len({r["batch"] for r in sel}) < 2:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 6))
    _machines(ax, sel, model, plt.get_cmap("tab10"))
    _wide(ax, wide)
    crit = next((t for t in model if t.get("b_crit")), None)
    if crit:
        ax.axvline(crit["b_crit"], color="k", lw=1.2)
        ax.annotate(f"critical batch ≈{crit['b_crit']:.3g} tokens", (crit["b_crit"], 0.95), fontsize=7,
                    xytext=(-4, 0), textcoords="offset points", ha="right")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("batch (tokens per weight visit: sequences × sequence length)")
    ax.set_ylabel("fraction of peak FLOP/s")
    ax.set_title(f"{sel[0]['network']}: fraction of peak against batch, and where the step turns compute-bound")
    ax.grid(True, which="major", alpha=0.3)
    # Beside the axes, not over the curves.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    _finish(fig, sources(_note(model, crit)))
    return fig


def _line(name: str, x: float, colour: str, dash: str, text: str, width: float = 1) -> dict[str, Any]:
    return {"type": "scatter", "mode": "lines", "name": name, "x": [x, x], "y": [0, 1],
            "line": {"dash": dash, "width": width, "color": colour}, "hovertemplate": text + "<extra></extra>"}


def _machine_traces(sel: Sequence[Row], model: Sequence[Row]) -> list[dict[str, Any]]:
    traces = []
    for k, m in enumerate(dict.fromkeys(r["machine"] for r in sel)):
        s = sorted((r for r in sel if r["machine"] == m), key=lambda r: r["tokens"])
        name, colour = s[0].get("name") or m, COLOURS[k % 10]
        traces.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": [r["tokens"] for r in s],
                       "y": [r["fraction_of_peak"] for r in s], "line": {"color": colour},
                       "customdata": custom(s, ("name", "network", "batch", "tokens", "fraction_of_peak", "seconds",
                                                bound_label)),
                       "hovertemplate": hover(("machine", "network", "batch", "tokens", "of peak", "seconds",
                                               "binds"))})
        seed = [r for r in s if r.get("seed_fraction_of_peak")]
        if seed:
            traces.append({"type": "scatter", "mode": "lines", "name": f"{name}: seed model",
                           "x": [r["tokens"] for r in seed], "y": [r["seed_fraction_of_peak"] for r in seed],
                           "line": {"dash": "dash", "width": 1, "color": colour},
                           "customdata": custom(seed, ("tokens", "seed_fraction_of_peak", "fraction_of_peak")),
                           "hovertemplate": hover(("tokens", "seed: of peak", "simulated: of peak"))})
    for k, t in enumerate(model):
        name, colour = t.get("name") or t["machine"], COLOURS[k % 10]
        traces.append(_line(f"{name}: T_min {fmt(t['t_min'])} tokens", t["t_min"], colour, "dot",
                            f"T_min = β·b_w/(F/P) = {fmt(t['balance'])} × {fmt(t['b_w'])} / "
                            f"{fmt(t['flops_per_token'])} = {fmt(t['t_min'])} tokens"))
        if t.get("t_step"):
            traces.append(_line(f"{name}: floor per optimizer step {fmt(t['t_step'])} tokens", t["t_step"], colour,
                                "dashdot", f"T_step = β·(b_update + b_comm)/(F/P) = {fmt(t['t_step'])} tokens"))
        if t.get("t_opt"):
            traces.append({"type": "scatter", "mode": "markers", "x": [t["t_opt"]], "y": [0.02],
                           "name": f"{name}: time-optimal batch {fmt(t['t_opt'])} tokens",
                           "marker": {"symbol": "triangle-up", "size": 11, "color": colour},
                           "hovertemplate": f"√(T_step · B_crit) = {fmt(t['t_opt'])} tokens<extra></extra>"})
    return traces


def _wide_traces(wide: Sequence[Row]) -> list[dict[str, Any]]:
    traces = []
    dashes = ("solid", "dash", "dashdot", "dot")
    for i, (net, fusion) in enumerate(dict.fromkeys((r["network"], r.get("fusion") or "none") for r in wide)):
        s = sorted((r for r in wide if (r["network"], r.get("fusion") or "none") == (net, fusion)),
                   key=lambda r: r["tokens"])
        ceiling = s[0]["d_model"] / (s[0]["d_model"] + s[0]["d_min"]) if s[0].get("d_min") else None
        traces.append({"type": "scatter", "mode": "lines+markers",
                       "name": f"{net} (d = {fmt(s[0]['d_model'])}) on {s[0].get('name') or s[0]['machine']}, "
                               f"fusion {fusion}",
                       "x": [r["tokens"] for r in s], "y": [r["fraction_of_peak"] for r in s],
                       "line": {"color": "#000", "dash": dashes[i % 4]}, "marker": {"symbol": "square", "size": 5},
                       "customdata": custom(s, ("network", lambda r: r.get("fusion"), "tokens", "fraction_of_peak",
                                                "d_min")),
                       "hovertemplate": hover(("network", "fusion", "tokens", "of peak", "d_min"))})
        if ceiling:
            traces.append({"type": "scatter", "mode": "lines", "name": f"ceiling d/(d+d_min) = {fmt(ceiling)}, "
                                                                       f"fusion {fusion}",
                           "x": [s[0]["tokens"], s[-1]["tokens"]], "y": [ceiling, ceiling],
                           "line": {"color": "#777", "width": 1, "dash": dashes[i % 4]}, "hoverinfo": "name"})
    return traces


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    sel, model = data.get("rows") or [], data.get("model") or []
    if len({r["batch"] for r in sel}) < 2:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    traces = _machine_traces(sel, model) + _wide_traces(data.get("wide") or [])
    crit = next((t for t in model if t.get("b_crit")), None)
    if crit:
        traces.append({"type": "scatter", "mode": "lines", "x": [crit["b_crit"], crit["b_crit"]], "y": [0, 1],
                       "name": f"critical batch {fmt(crit['b_crit'])} tokens (Kaplan et al. 2020 at loss "
                               f"{fmt(crit['loss'])})",
                       "line": {"color": "#000", "width": 1.5}, "hoverinfo": "name"})
    return spec(traces, xaxis=axis("batch (tokens per weight visit)", True),
                yaxis=axis("fraction of peak FLOP/s", range=[0, 1.02]))


def prose(data: Mapping[str, Any]) -> str:
    win = data.get("rows") or []
    if not win:
        return ""
    best = max(win, key=lambda r: r["fraction_of_peak"])
    out = (f"{e(best['network'])} reaches its highest fraction of peak, {best['fraction_of_peak']:.2f}, "
           f"on {e(best['name'])} at {best['tokens']} tokens.")
    out += against_seed(win, "fraction_of_peak", "seed_fraction_of_peak", "the seed model's fraction of peak",
                        "below 1 by the dispatch, waves, tile padding and misses the seed leaves "
                        "out, above it where the caches hold what the seed streams.")
    model = data.get("model") or []
    if model:
        out += (f" The step moves b_w = {model[0]['b_w']:.2f} B per parameter per micro-batch, "
                "so the turns are at " + ", ".join(f"{m['t_min']:.0f} tokens ({e(m['name'])})" for m in model) + ".")
    return out
