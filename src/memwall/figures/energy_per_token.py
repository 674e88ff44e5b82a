"""Figure 17, the energy knee beside the time knee: joules per token of decode against batch,
one line a machine, beside seconds per token against batch, from the sweep's decode rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..study.tables import ok_rows
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
    hover,
    label,
    sources,
    spec,
)

NUMBER = 17
NAME = "energy_per_token"
TITLE = "Decode: joules per token against batch, beside seconds per token"
CAPTION = ("Joules per token of a decode step (all devices' joules ÷ the step's tokens, 1 / tokens_per_joule) "
           "against batch, one line a machine and a line style a context, beside seconds per token (the step's "
           "seconds ÷ its tokens). Batching shares the weight reads across sequences, so both fall until the step "
           "turns compute-bound (a star, the time knee) or, for energy, until arithmetic joules overtake main "
           "memory's (a diamond, the energy knee); static power × seconds falls with the seconds. The joules are the "
           "energy model's counts × the profiles' energy figures, most of them estimates (figure 15); machines "
           "whose profile states no [energy] are left out, not drawn as zero, and named below the panels.")
TABLES = ("tokens", "lacking")
NEEDS = "decode cases at several batch sizes on machines with [energy] figures"
OPT_IN = False

Row = Mapping[str, Any]


def _arithmetic(r: Row) -> float:
    return sum(v for k, v in r.items() if k.startswith("joules_arithmetic.") and v is not None)


def from_rows(rows: Sequence[Row]) -> dict[str, Any]:
    """The tables, from a sweep's rows: ``tokens``, one row a decode case of a machine with
    [energy] (joules and seconds per token, the arithmetic and main-memory joules per
    token, the bound class); ``lacking``, the machines whose decode rows have no joules."""
    tokens, lacking = [], {}
    for r in ok_rows(rows):
        if r.get("phase") != "decode" or not r.get("tokens_per_second"):
            continue
        if not r.get("tokens_per_joule"):
            lacking.setdefault(r["machine"], {"machine": r["machine"], "name": r.get("name"), "year": r.get("year")})
            continue
        per = 1 / r["tokens_per_joule"]  # joules per token
        share = per / r["joules"] if r.get("joules") else None  # a token's share of the step's joules
        memory = r.get("joules_memory")
        tokens.append({"machine": r["machine"], "name": r.get("name"), "year": r["year"], "network": r["network"],
                       "batch": r["batch"], "context": r.get("context"), "devices": r.get("devices", 1),
                       "joules_per_token": per, "seconds_per_token": 1 / r["tokens_per_second"],
                       "arithmetic_per_token": _arithmetic(r) * share if share is not None else None,
                       "memory_per_token": memory * share if share is not None and memory is not None else None,
                       "static_per_token": (r["joules_static"] * share if share is not None
                                            and r.get("joules_static") is not None else None),
                       "data_movement_share": r.get("data_movement_share"), "watts_average": r.get("watts_average"),
                       "bound_class": r.get("bound_class"), "bound": r.get("bound")})
    tokens.sort(key=lambda t: (t["year"], t["machine"], t["context"] or 0, t["batch"]))
    return {"tokens": tokens, "lacking": list(lacking.values())}


def energy_knee(r: Row) -> bool:
    """Arithmetic joules at least main memory's: past the energy knee."""
    a, m = r.get("arithmetic_per_token"), r.get("memory_per_token")
    return a is not None and m is not None and a > 0 and a >= m


def _lines(tokens: Sequence[Row]):
    machines = list(dict.fromkeys(r["machine"] for r in tokens))
    contexts = sorted({r["context"] or 0 for r in tokens})
    for k, m in enumerate(machines):
        for i, ctx in enumerate(contexts):
            sub = sorted((r for r in tokens if r["machine"] == m and (r["context"] or 0) == ctx),
                         key=lambda r: r["batch"])
            if sub:
                yield k, i, ctx, sub


def _lacking_note(data: Mapping[str, Any]) -> str:
    lacking = data.get("lacking") or []
    if not lacking:
        return ""
    return ("Left out (no [energy] in the profile): " + ", ".join(r["machine"] for r in lacking) + ".")


def draw(data: Mapping[str, Any]):
    tokens = data.get("tokens") or []
    if not tokens or len({r["batch"] for r in tokens}) < 2:
        return _empty(f"{NUMBER}. {TITLE}", NEEDS)
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), sharex=True)
    styles = ["-", "--", ":", "-."]
    for k, i, _, sub in _lines(tokens):
        colour, ls = cmap(k % 10), styles[i % 4]
        xs = [r["batch"] for r in sub]
        left.plot(xs, [r["joules_per_token"] for r in sub], color=colour, ls=ls, marker="o", ms=3)
        right.plot(xs, [r["seconds_per_token"] for r in sub], color=colour, ls=ls, marker="o", ms=3)
        for r in sub:
            if energy_knee(r):
                left.plot(r["batch"], r["joules_per_token"], "D", color=colour, ms=7, mfc="none")
            if r.get("bound_class") == "compute":
                right.plot(r["batch"], r["seconds_per_token"], "*", color=colour, ms=11)
    for ax, ylabel, title in ((left, "joules per token (all devices)", "Energy: joules per token"),
                              (right, "seconds per token (step seconds ÷ its tokens)", "Time: seconds per token")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences decoding together)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{tokens[0]['network']}: {title}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    from matplotlib.lines import Line2D

    machines = {r["machine"]: label(r) for r in tokens}
    contexts = sorted({r["context"] or 0 for r in tokens})
    handles = [Line2D([], [], color=cmap(k % 10), marker="o", ms=3, label=name)
               for k, name in enumerate(machines.values())]
    handles += [Line2D([], [], color="#333333", ls=styles[i % 4], label=f"context {ctx}")
                for i, ctx in enumerate(contexts)]
    left.legend(handles=handles, fontsize=6, loc="lower left")
    _finish(fig, sources("Diamond: arithmetic joules at least main memory's (the energy knee). Star: a "
                         "compute-bound step (the time knee). Joules: the energy model (docs/energy.md) on the "
                         "profiles' energy figures, most of them estimates. " + _lacking_note(data)))
    return fig


def plotly(data: Mapping[str, Any]) -> dict[str, Any]:
    tokens = data.get("tokens") or []
    if not tokens or len({r["batch"] for r in tokens}) < 2:
        return empty_spec(f"{NUMBER}. {TITLE}", NEEDS)
    cols = ("machine", "network", "batch", "context", "joules_per_token", "seconds_per_token", "arithmetic_per_token",
            "memory_per_token", "static_per_token", "data_movement_share", "watts_average", bound_label)
    names = ("machine", "network", "batch", "context", "J/token", "s/token", "arithmetic J/token",
             "main memory J/token", "static J/token", "movement share", "W per device", "binds")
    traces: list[dict[str, Any]] = []
    for k, i, ctx, sub in _lines(tokens):
        for axes, key, symbol in (("", "joules_per_token", lambda r: "diamond-open" if energy_knee(r) else "circle"),
                                  ("2", "seconds_per_token",
                                   lambda r: "star" if r.get("bound_class") == "compute" else "circle")):
            traces.append({"type": "scatter", "mode": "lines+markers", "name": f"{sub[0]['machine']}, context {ctx}",
                           "legendgroup": f"{sub[0]['machine']}-{ctx}", "showlegend": axes == "",
                           "xaxis": "x" + axes, "yaxis": "y" + axes,
                           "x": [r["batch"] for r in sub], "y": [r[key] for r in sub],
                           "line": {"color": COLOURS[k % 10], "dash": ["solid", "dash", "dot", "dashdot"][i % 4]},
                           "marker": {"size": 8, "symbol": [symbol(r) for r in sub]},
                           "customdata": custom(sub, cols), "hovertemplate": hover(names)})
    return spec(traces, xaxis=axis("batch", True, domain=[0, 0.45]), yaxis=axis("joules per token", True),
                xaxis2=axis("batch", True, domain=[0.55, 1], anchor="y2"),
                yaxis2=axis("seconds per token", True, anchor="x2"))


def prose(data: Mapping[str, Any]) -> str:
    tokens = data.get("tokens") or []
    if not tokens:
        return ""
    bits = []
    for _, _, ctx, sub in _lines(tokens):
        first, last = sub[0], sub[-1]
        knee = next((r["batch"] for r in sub if energy_knee(r)), None)
        turn = next((r["batch"] for r in sub if r.get("bound_class") == "compute"), None)
        bits.append(f"{e(first['machine'])} at context {ctx}: {first['joules_per_token']:.3g} J per token at batch "
                    f"{first['batch']}, {last['joules_per_token']:.3g} at batch {last['batch']} "
                    f"(×{first['joules_per_token'] / last['joules_per_token']:.3g} fewer; seconds per token "
                    f"×{first['seconds_per_token'] / last['seconds_per_token']:.3g} fewer); "
                    + (f"arithmetic joules pass main memory's at batch {knee}" if knee is not None
                       else "arithmetic joules stay below main memory's")
                    + (f", compute-bound from batch {turn}" if turn is not None else ""))
    out = "By the energy model: " + "; ".join(bits) + "."
    note = _lacking_note(data)
    return out + (" " + e(note) if note else "")
