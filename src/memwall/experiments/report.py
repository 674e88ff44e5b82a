"""The interactive HTML report of a sweep: one self-contained file, nothing fetched.

Owns: turning a sweep folder (``results.json``, ``machines.json``, and each figure's
data in ``figures/NAME.json``) into ``report.html``, which opens from disk in any
browser with no server and no network. Every figure is redrawn in the page by plotly.js,
embedded from the ``plotly`` Python package (hover names machine and case with the
numbers, legends toggle series, axes zoom); the page's own script (``html/app.js``)
adds a machine picker, a sortable and filterable results table and the high-water
animation. The prose's numbers are computed here from the same data. The PNG and SVG
figures stay in ``figures/`` for papers.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import MODEL_VERSION
from ..errors import InputError
from . import figures as fg
from .store import read_rows

# The figures the page draws, in order (the validation figure's data is validation.json).
PAGE_FIGURES = ("balance_drift", "regime_flip", "stall_breakdown", "batch_window", "capacity_ledger",
                "synthetic_balance", "validation", "roofline", "activation_highwater", "decode", "llc_capacity",
                "bytes_per_token")

CAPTIONS = {
    "balance_drift": "Machine balance (peak FLOP/s ÷ main-memory bytes/s) by year and kind, with the "
    "fitted growth of peak arithmetic and of memory bandwidth per two years beside Gholami et al.'s "
    "3.0× and 1.6×. Higher balance means more arithmetic per byte is needed to keep the machine busy.",
    "regime_flip": "Per-example training (batch 1): each point is one machine, at its memory time ÷ "
    "arithmetic time (memory_ratio; 1 is the flip, above it the step waits on memory more than it computes). "
    "Dotted lines mark each network's arithmetic intensity with no cache reuse, where the flip is expected "
    "as balance passes it; hollow points are cases whose weights fit in the machine's largest on-chip level. "
    "Launch and vector start-up are neither memory nor arithmetic: the sweep's rows give them as "
    "dispatch_fraction and overhead_fraction (figure 3 shows them).",
    "stall_breakdown": "Where one network's per-example training step spends its cycles on each machine: "
    "arithmetic, then the stall attributed to each memory level, then fixed overhead.",
    "batch_window": "Fraction of peak against batch (in tokens) on modern machines; dotted lines mark "
    "T_min = β · b_w / (F/P), the turn the step's own bytes per parameter per micro-batch (b_w) predict. "
    "These cases run one micro-batch per optimizer step, unfused; dashed lines are the seed model's "
    "estimate of the same steps (each operand moved once, no cache, no dispatch).",
    "capacity_ledger": "Bytes of saved activations against bytes of parameters as the batch grows; they "
    "cross at batch = width for a chain of square layers, and √L checkpointing moves the crossover right.",
    "synthetic_balance": "One compute engine with its memory bandwidth swept over four decades: stall "
    "fraction against balance, with nothing else changed.",
    "validation": "memwall's prediction for each published measurement of era_data/measurements "
    "(GEMMs, CUPS of the 1980s machines, a Megatron-LM floor) against the measured value, log-log; "
    "the grey band is within 2x. The table below gives each case with its source note.",
    "roofline": "Every kernel of each stored step on one machine: FLOPs per byte of main-memory traffic "
    "against achieved FLOP/s, under the peak and each memory level's bandwidth ceiling.",
    "activation_highwater": "Live bytes by tensor class while each kernel of the training step runs, "
    "forward rising, backward falling, without and with √L checkpointing.",
    "decode": "A GQA transformer decoding one token a sequence against a KV cache of a short and a long "
    "context: tokens per second of all sequences against batch. Batching shares the weight reads, so "
    "tokens/s climbs until the cache, which grows with batch × context, takes over; a star marks a "
    "compute-bound step, a cross a batch that does not fit beside the weights.",
    "llc_capacity": "Main-memory bytes of one training step against the capacity of the last cache level, "
    "every capacity from one replay (LRU stack distances), per network of an era on a machine of its era; a "
    "circle marks the machine's actual capacity. Where a curve falls to zero the step fits in that cache.",
    "bytes_per_token": "Bytes per token of a training step, stacked by what they are: weights and gradients "
    "(every micro-batch), optimizer state and the gradient all-reduce (every optimizer step), and activations "
    "between kernels, each operand once as the kernels name it. The first three fall as 1/T; activations do "
    "not, so past their crossing more batch buys no intensity.",
}

STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em;line-height:1.4}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
figure{margin:1.5em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444}
table{border-collapse:collapse;font-size:.8em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f4f4f4}td.t,th.t{text-align:left}
.bar{display:flex;height:14px;width:240px;border:1px solid #bbb}
.bar span{display:block;height:100%}
.muted{color:#666;font-size:.85em}.err{color:#a00}
nav a{margin-right:.8em}
"""

STYLE += """
.plot{width:100%;min-height:360px;border:1px solid #eee}
.controls{margin:.4em 0;font-size:.9em}
#results-filter{width:24em}
th[data-sort=asc]::after{content:" ▲"}th[data-sort=desc]::after{content:" ▼"}
"""

COMPUTE_COLOUR = "#55a868"
OVERHEAD_COLOUR = "#4c72b0"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any, fmt: str = ".3g") -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, fmt)
    return _e(value)


def _table(rows: Sequence[Mapping[str, Any]], cols: Sequence[tuple[str, str]], table_id: str = "",
           sortable: bool = False) -> str:
    """An HTML table; ``sortable`` cells carry their raw value for the page's sort and filter."""
    head = "".join(f"<th class='t'>{_e(label)}</th>" if k in TEXT_COLS else f"<th>{_e(label)}</th>"
                   for k, label in cols)
    body = []
    for r in rows:
        cells = []
        for k, _ in cols:
            v = r.get(k)
            cls = " class='t'" if k in TEXT_COLS else ""
            shown = _e(v) if k in TEXT_COLS else _num(v)
            raw = f" data-v='{_e('' if v is None else v)}'" if sortable else ""
            cells.append(f"<td{cls}{raw}>{shown}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    ident = f" id='{table_id}'" if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


TEXT_COLS = {"machine", "name", "kind", "network", "checkpoint", "updates", "phase", "bound", "status", "error",
             "dtype", "key", "source", "status_", "derivation", "value", "id", "workload", "metric", "notes"}


def _stall_bar(row: Mapping[str, Any], levels: Sequence[str]) -> str:
    parts = [(COMPUTE_COLOUR, "compute", row.get("compute_fraction"))]
    parts += [(fg.STALL_COLOURS[k % len(fg.STALL_COLOURS)], f"stall: {lv}", row.get(f"stall_{lv}"))
              for k, lv in enumerate(levels)]
    parts += [(OVERHEAD_COLOUR, "overhead", row.get("overhead_fraction"))]
    spans = "".join(f"<span title='{_e(name)} {float(v):.1%}' style='width:{100 * float(v):.2f}%;"
                    f"background:{colour}'></span>" for colour, name, v in parts if v)
    return f"<div class='bar'>{spans}</div>"


def _validation(folder: Path) -> dict[str, Any] | None:
    """The sweep's validation.json (written with the figures), if there is one."""
    path = folder / "validation.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"damaged ({type(err).__name__}); delete it or run the sweep again",
                         file=str(path)) from None
    if not (isinstance(data, dict) and isinstance(data.get("summary"), dict)
            and isinstance(data.get("cases"), list) and all(isinstance(c, dict) for c in data["cases"])):
        raise InputError("expected {\"cases\": [...], \"summary\": {...}} as the sweep writes it",
                         file=str(path))
    return data


def _is_path(spec: str) -> bool:
    return spec.endswith(".toml") or "/" in spec or "\\" in spec


def label(spec: Any) -> str:
    """What the report shows for a machine or network: a user file by its name, never its path."""
    text = "" if spec is None else str(spec)
    base, at, rest = text.rpartition("@")
    head, tail = (base, at + rest) if at and "/" not in rest else (text, "")
    return (Path(head).name if _is_path(head) else head) + tail


def _provenance(machine_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """A shipped profile's content; a user's profile file is not opened (the report reads
    only what the sweep wrote and the shipped data, whatever paths results.json names)."""
    base = machine_id.split("@")[0]
    from ..profiles import load_machine, machine_ids

    if base not in machine_ids():
        return None, f"{label(base)} is not a shipped profile: its provenance is not shown"
    try:
        return load_machine(base).as_dict(), None
    except Exception as err:  # the report still shows the results without the profile
        return None, f"profile {base} could not be loaded: {err}"


def plotly_js() -> str:
    """plotly.js, minified, as shipped inside the ``plotly`` Python package (nothing is
    imported from plotly's Python side: only this file is read)."""
    from importlib.resources import files

    try:
        return (files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise InputError("the interactive report embeds plotly.js from the plotly package: "
                         "pip install plotly", field="plotly") from err


def _app_js() -> str:
    from importlib.resources import files

    return (files("memwall.experiments") / "html" / "app.js").read_text(encoding="utf-8")


def _inline(text: str) -> str:
    # Inside <script>, only "</" can end the element early.
    return text.replace("</", "<\\/")


def build_report(folder: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Write ``folder/report.html`` (or ``out``) from the sweep in ``folder``; returns its path.

    Figures not yet drawn (their data missing from ``figures/``) are drawn first; drawn
    ones are reused as they are."""
    from ..paths import writable_file, write_error

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"no results.json: no such folder; run `memwall sweep --out {folder}` first"
                         if not folder.exists()
                         else "not a folder: give the folder `memwall sweep --out` wrote", file=str(folder))
    target = writable_file(out if out is not None else folder / "report.html", field="--output")
    rows = read_rows(folder)
    missing = [n for n in fg.NAMES if n != "validation" and fg.figure_data(folder, n) is None]
    if not (folder / "validation.json").is_file():
        missing.append("validation")
    if missing:
        fg.write_figures(folder, rows, only=missing)
    text = render(rows, folder)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise write_error(target, err, field="--output") from None
    return target


def page_data(rows: Sequence[Mapping[str, Any]], folder: Path) -> dict[str, Any]:
    """Everything the page's script draws from, as one JSON-able dict."""
    figures: dict[str, Any] = {}
    for name in PAGE_FIGURES:
        if name == "validation":
            figures[name] = _validation(folder) or {"cases": []}
            continue
        stored = fg.figure_data(folder, name)
        figures[name] = stored["data"] if stored else {}
    drift = figures.get("balance_drift") or {}
    table = drift.get("machines", [])
    rules = {fit: keep for fit, _, keep in fg.ERA_FITS}
    for f in drift.get("fits", []):
        keep = rules.get(f["fit"])
        f["ids"] = [r["id"] for r in table if keep and keep(r)]
    ok = [r for r in rows if r.get("status") == "ok"]
    points = (figures.get("roofline") or {}).get("points", [])
    present = {p["machine"] for p in points}
    return {
        "rows": list(rows), "figures": figures, "levels": fg.stall_levels(ok),
        "intensity": fg.no_reuse_intensity([r for r in ok if not r.get("synthetic")]),
        "stall_colours": fg.STALL_COLOURS, "highwater_classes": list(fg.HIGHWATER_CLASSES),
        "roofline_machine": next((m for m in fg.ROOFLINE_MACHINES if m in present), None),
    }


def _labelled(value: Any) -> Any:
    """``value`` with every machine or network named as :func:`label` shows it: the page
    names a user's profile or preset file by its name, never by its path."""
    if isinstance(value, Mapping):
        return {k: label(v) if k in ("machine", "network") and isinstance(v, str) else _labelled(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_labelled(v) for v in value]
    return value


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _against_seed(rows: Sequence[Mapping[str, Any]], simulated: str, seed: str, what: str, why: str) -> str:
    """A sentence: how far the simulation's figure is from the seed model's, over ``rows``."""
    ratios = sorted(r[simulated] / r[seed] for r in rows if r.get(simulated) and r.get(seed))
    if not ratios:
        return ""
    median = ratios[len(ratios) // 2]
    return f" Against {what}, the simulated value is {ratios[0]:.2g}–{ratios[-1]:.2g}× it (median {median:.2g}×): {why}"


def prose(data: Mapping[str, Any]) -> dict[str, str]:
    """One paragraph per figure whose numbers come from the sweep's data (name -> HTML)."""
    F = data["figures"]
    out: dict[str, str] = {}
    fits = {f["fit"]: f for f in (F.get("balance_drift") or {}).get("fits", [])}
    if fits:
        bits = [f"{_e(f['label'])} ({f['machines']} machines, {f['first_year']}–{f['last_year']}): peak "
                f"×{f['peak_growth']:.2f}, bandwidth ×{f['bandwidth_growth']:.2f}, balance "
                f"×{f['balance_growth']:.2f}" for f in fits.values()]
        out["balance_drift"] = ("Growth per two years, each number from the fit named: " + "; ".join(bits)
                                + f". Gholami et al. give ×{fg.GHOLAMI['peak']:.1f} and ×{fg.GHOLAMI['bandwidth']:.1f} "
                                "(balance ×1.88) for server hardware of the last two decades.")
    flip = (F.get("regime_flip") or {}).get("rows", [])
    if flip:
        key = "memory_ratio" if any(r.get("memory_ratio") is not None for r in flip) else "stall_fraction"
        bits = []
        for net in dict.fromkeys(r["network"] for r in flip):
            sub = [r for r in flip if r["network"] == net and r.get(key) is not None]
            if sub:
                lo, hi = min(sub, key=lambda r: r[key]), max(sub, key=lambda r: r[key])
                bits.append(f"{_e(net)} from {lo[key]:.3g} ({_e(lo.get('name'))}) to {hi[key]:.3g} ({_e(hi.get('name'))})")
        what = "memory time ÷ arithmetic time" if key == "memory_ratio" else "stall fraction"
        out["regime_flip"] = f"Across the machines, {what} runs: " + "; ".join(bits) + "."
        out["regime_flip"] += _against_seed(flip, "memory_ratio", "seed_memory_ratio",
                                            "the seed model's β / I (every operand from main memory once)",
                                            "below 1 where caches give reuse the seed does not count, above it where "
                                            "a miss repeats or latency, not bandwidth, sets the memory time.")
    win = (F.get("batch_window") or {}).get("rows", [])
    if win:
        best = max(win, key=lambda r: r["fraction_of_peak"])
        out["batch_window"] = (f"{_e(best['network'])} reaches its highest fraction of peak, {best['fraction_of_peak']:.2f}, "
                               f"on {_e(best['name'])} at {best['tokens']} tokens.")
        out["batch_window"] += _against_seed(win, "fraction_of_peak", "seed_fraction_of_peak",
                                             "the seed model's fraction of peak",
                                             "below 1 by the dispatch, waves, tile padding and misses the seed leaves "
                                             "out, above it where the caches hold what the seed streams.")
        model = (F.get("batch_window") or {}).get("model") or []
        if model:
            out["batch_window"] += (f" The step moves b_w = {model[0]['b_w']:.2f} B per parameter per micro-batch, "
                                    "so the turns are at " + ", ".join(
                                        f"{m['t_min']:.0f} tokens ({_e(m['name'])})" for m in model) + ".")
    val = F.get("validation") or {}
    summ = val.get("summary") or {}
    if summ.get("point_cases"):
        out["validation"] = (f"{summ['point_cases']} point checks: {summ['share_within_2x']:.0%} within 2×, median "
                             f"|log2 ratio| {summ['median_abs_log2_ratio']:.2f} ({2 ** summ['median_abs_log2_ratio']:.2f}×), "
                             f"worst {_e(summ['worst_case'])} ({2 ** summ['worst_abs_log2_ratio']:.2f}×).")
    roof = F.get("roofline") or {}
    pts = roof.get("points", [])
    if pts:
        bound = sum(1 for p in pts if p.get("bound") == "compute")
        out["roofline"] = (f"{len(pts)} kernels on {len({p['machine'] for p in pts})} machines; "
                           f"{bound} of them compute-bound. Pick a machine to see its kernels under its roofs.")
    hw = (F.get("activation_highwater") or {}).get("live", [])
    if hw:
        bits = []
        for ck in dict.fromkeys(r["checkpoint"] for r in hw):
            sub = [r for r in hw if r["checkpoint"] == ck]
            peak = max(sub, key=lambda r: r["activations"])
            bits.append(f"checkpoint {_e(ck)}: activations peak at {peak['activations'] / 2 ** 20:.0f} MiB, "
                        f"all live bytes at {max(r['total'] for r in sub) / 2 ** 20:.0f} MiB")
        out["activation_highwater"] = f"{_e(hw[0]['network'])} at batch {hw[0]['batch']}: " + "; ".join(bits) + "."
    return out


def render(rows: Sequence[Mapping[str, Any]], folder: Path) -> str:
    """The report's HTML text, from the rows and the figure data stored in ``folder``."""
    from ..data import data_version

    rows = [{**r, "machine": label(r["machine"]),
             "network": label(r["network"]) if r.get("network") is not None else None} for r in rows]
    ok = [r for r in rows if r.get("status") == "ok"]
    failed = [r for r in rows if r.get("status") != "ok"]
    levels = fg.stall_levels(ok)
    real = [r for r in rows if not r.get("synthetic")]
    machines = list(dict.fromkeys(r["machine"] for r in real))
    data = _clean(_labelled(page_data(rows, folder)))
    words = prose(data)
    n_synth = len({r["machine"] for r in rows}) - len(machines)
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           "<title>memwall sweep report</title>", f"<style>{STYLE}</style>",
           f"<script>{_inline(plotly_js())}</script></head><body>",
           "<h1>memwall: where backprop's time goes, machine by machine</h1>",
           f"<p class='muted'>memwall {_e(MODEL_VERSION)}, era_data {_e(data_version())}. {len(rows)} cases "
           f"({len(ok)} ok, {len(failed)} failed) on {len(machines)} machines"
           f"{' and ' + str(n_synth) + ' synthetic ones' if n_synth else ''}."
           " Times are simulated: the memory traffic of each step replayed through the machine's "
           "memory hierarchy and timed by its profile's model. Hover a point for its machine, case and "
           "numbers; click a legend entry to hide it; drag to zoom, double-click to reset. The same figures "
           "as PNG and SVG, with each one's data as CSV, are in <code>figures/</code>.</p>",
           "<nav><a href='#figures'>Figures</a><a href='#machines'>Machines</a><a href='#results'>Results</a>"
           + ("<a href='#failed'>Failed cases</a>" if failed else "") + "</nav>",
           "<h2 id='figures'>Figures</h2>"]
    for name in PAGE_FIGURES:
        controls = ""
        if name == "roofline":
            controls = "<div class='controls'>machine: <select id='roofline-machine'></select></div>"
        elif name == "activation_highwater":
            controls = "<div class='controls'><button id='highwater-play'>play</button> a cursor through the step</div>"
        text = f" {words[name]}" if name in words else ""
        out.append(f"<figure id='fig-{name}'>{controls}<div class='plot' id='plot-{name}'></div>"
                   f"<figcaption><b>{_e(fg.TITLES[name])}.</b> {_e(CAPTIONS[name])}{text}</figcaption></figure>")

    validation = data["figures"].get("validation") or {}
    if validation.get("cases"):
        summary = validation["summary"]
        out.append("<h3 id='validation'>Validation cases</h3>")
        out.append(f"<p>{_e(summary.get('cases'))} cases; bound checks held: {_e(summary.get('bounds_held'))} of "
                   f"{_e(summary.get('bound_cases'))}. Each note says what was measured and, where the prediction "
                   "misses, why.</p>")
        out.append("<details><summary>the cases</summary>" + _table(validation["cases"], [
            ("id", "case"), ("machine", "machine"), ("workload", "workload"), ("metric", "metric"),
            ("measured", "measured"), ("predicted", "predicted"), ("ratio", "ratio"), ("bound", "bound"),
            ("status", "status"), ("notes", "note")]) + "</details>")

    out.append("<h2 id='machines'>Machines</h2>")
    options = "".join(f"<option value='{_e(m)}'>{_e(next(r for r in rows if r['machine'] == m).get('name') or m)}"
                      f"</option>" for m in machines)
    out.append(f"<div class='controls'>machine: <select id='machine-picker'>{options}</select> — its stall "
               "breakdown across networks and batches</div><div class='plot' id='plot-machine'></div>")
    for mid in machines:
        out.append(_machine_section(mid, rows, ok, levels))

    out.append("<h2 id='results'>Results</h2>")
    out.append("<div class='controls'>filter: <input id='results-filter' placeholder='machine, network, bound…'> "
               "(click a column's header to sort)</div>")
    cols = [("machine", "machine"), ("year", "year"), ("kind", "kind"), ("balance", "balance (FLOP/B)"),
            ("network", "network"), ("batch", "batch"), ("checkpoint", "checkpoint"), ("updates", "updates"),
            ("phase", "phase"), ("seconds", "seconds"), ("stall_fraction", "stall"),
            ("memory_ratio", "memory ÷ arithmetic"), ("fraction_of_peak", "of peak"), ("cups", "CUPS"),
            ("bound", "bound")]
    out.append(_table(ok, cols, "results-table", sortable=True))
    if failed:
        out.append("<h2 id='failed'>Failed cases</h2>")
        out.append(_table(failed, [("machine", "machine"), ("network", "network"), ("batch", "batch"),
                                   ("checkpoint", "checkpoint"), ("updates", "updates"), ("phase", "phase"),
                                   ("error", "reason")]))
    out.append("<p class='muted'>Gholami et al., \"AI and Memory Wall\", IEEE Micro 44(3), 2024, for the "
               "growth rates in figure 1. Machine figures: era_data/machines, each with its source and status.</p>")
    blob = _inline(json.dumps(data, allow_nan=False, separators=(",", ":")))
    out.append(f"<script type='application/json' id='memwall-data'>{blob}</script>")
    out.append(f"<script>{_inline(_app_js())}</script>")
    out.append("</body></html>\n")
    return "\n".join(out)


def _machine_section(mid: str, rows: Sequence[Mapping[str, Any]], ok: Sequence[Mapping[str, Any]],
                     levels: Sequence[str]) -> str:
    mrows = [r for r in ok if r["machine"] == mid]
    first = next(r for r in rows if r["machine"] == mid)
    out = [f"<section class='machine-section' data-machine='{_e(mid)}'>",
           f"<h3 id='m-{_e(mid)}'>{_e((first.get('name') if not _is_path(mid) else None) or mid)} "
           f"({_e(first['year'])}, {_e(first['kind'])})</h3>"]
    profile, problem = _provenance(mid)
    if profile:
        peak = profile["peak_flops"].get(profile["primary_dtype"])
        out.append(f"<p>Peak {_num(peak)} FLOP/s ({_e(profile['primary_dtype'])}), main memory "
                   f"{_num(profile['memory']['bandwidth'])} B/s: balance {_num(first.get('machine_balance'))} "
                   f"FLOP/B. Timing model {_e(profile['timing']['model'])}, schedule "
                   f"{_e(profile['schedule']['family'])}. Weakest headline status: {_e(profile['status'])}.</p>")
    if mrows:
        out.append("<table><thead><tr><th class='t'>network</th><th>batch</th><th class='t'>config</th>"
                   "<th>seconds</th><th>stall</th><th class='t'>cycles: compute | stall by level | overhead"
                   "</th>" + "".join(f"<th>stall {_e(lv)}</th>" for lv in levels) + "</tr></thead><tbody>")
        for r in mrows:
            out.append(f"<tr><td class='t'>{_e(r['network'])}</td><td>{_num(r['batch'])}</td>"
                       f"<td class='t'>{_e(r['checkpoint'])}, {_e(r['updates'])}, {_e(r['phase'])}</td>"
                       f"<td>{_num(r['seconds'])}</td><td>{_num(r['stall_fraction'])}</td>"
                       f"<td class='t'>{_stall_bar(r, levels)}</td>"
                       + "".join(f"<td>{_num(r.get(f'stall_{lv}'))}</td>" for lv in levels) + "</tr>")
        out.append("</tbody></table>")
    if profile:
        prov = [{"key": k, "value": v.get("value"), "status_": v.get("status"),
                 "source": v.get("citation") or v.get("source"), "derivation": v.get("derivation")}
                for k, v in sorted(profile.get("provenance", {}).items())]
        out.append("<details><summary>Provenance of this profile's figures</summary>")
        out.append(_table(prov, [("key", "figure"), ("value", "value"), ("status_", "status"),
                                 ("source", "source"), ("derivation", "derivation")]))
        out.append("</details>")
    else:
        out.append(f"<p class='err'>{_e(problem)}</p>")
    out.append("</section>")
    return "\n".join(out)
