"""The static HTML report of a sweep: one self-contained file, figures embedded.

Owns: turning a sweep folder (``results.json`` and ``figures/``) into ``report.html``,
which opens from disk in any browser with no server and no network: figures are PNG
data URIs, styles are inline, the one small script only counts the figures that drew.
It holds the figures with what each shows, the results table, and a section per machine
with its stall breakdown and the provenance of its profile's figures.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import MODEL_VERSION
from ..errors import InputError
from . import figures as fg
from .store import RESULTS_JSON, read_rows

CAPTIONS = {
    "balance_drift": "Machine balance (peak FLOP/s ÷ main-memory bytes/s) by year and kind, with the "
    "fitted growth of peak arithmetic and of memory bandwidth per two years beside Gholami et al.'s "
    "3.0× and 1.6×. Higher balance means more arithmetic per byte is needed to keep the machine busy.",
    "regime_flip": "Per-example training (batch 1): each point is one machine. Stall fraction near 0 "
    "means arithmetic-bound, near 1 means waiting on memory. Dotted lines mark each network's "
    "arithmetic intensity with no cache reuse; the flip is expected where the balance passes it. "
    "Launch overhead is neither arithmetic nor stall: small networks on accelerators are overhead-bound "
    "(figure 3) and stay low here.",
    "stall_breakdown": "Where one network's per-example training step spends its cycles on each machine: "
    "arithmetic, then the stall attributed to each memory level, then fixed overhead.",
    "batch_window": "Fraction of peak against batch (in tokens) on modern machines; dotted lines mark "
    "about 2 × balance tokens, where a step with bf16 weights and fp32 gradients should turn compute-bound.",
    "capacity_ledger": "Bytes of saved activations against bytes of parameters as the batch grows; they "
    "cross at batch = width for a chain of square layers, and √L checkpointing moves the crossover right.",
    "synthetic_balance": "One compute engine with its memory bandwidth swept over four decades: stall "
    "fraction against balance, with nothing else changed.",
    "validation": "memwall's prediction for each published measurement of era_data/measurements "
    "(GEMMs, CUPS of the 1980s machines, a Megatron-LM floor) against the measured value, log-log; "
    "the grey band is within 2x. The table below gives each case with its source note.",
    "decode": "A GQA transformer decoding one token a sequence against a KV cache of a short and a long "
    "context: tokens per second of all sequences against batch. Batching shares the weight reads, so "
    "tokens/s climbs until the cache, which grows with batch × context, takes over; a star marks a "
    "compute-bound step, a cross a batch that does not fit beside the weights.",
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

SCRIPT = """
window.addEventListener('load', function () {
  var imgs = document.querySelectorAll('img.figure');
  var ok = 0;
  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) ok++; });
  document.body.setAttribute('data-figures-loaded', String(ok));
});
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


def _table(rows: Sequence[Mapping[str, Any]], cols: Sequence[tuple[str, str]]) -> str:
    head = "".join(f"<th class='t'>{_e(label)}</th>" if k in TEXT_COLS else f"<th>{_e(label)}</th>"
                   for k, label in cols)
    body = []
    for r in rows:
        cells = []
        for k, _ in cols:
            v = r.get(k)
            cells.append(f"<td class='t'>{_e(v)}</td>" if k in TEXT_COLS else f"<td>{_num(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


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
    return json.loads(path.read_text(encoding="utf-8"))


def _figure_data(folder: Path, name: str) -> str:
    data = (folder / f"{name}.png").read_bytes()
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _provenance(machine_id: str) -> tuple[dict[str, Any] | None, str | None]:
    base = machine_id.split("@")[0]
    try:
        from ..profiles import load_machine

        return load_machine(base).as_dict(), None
    except Exception as err:  # the report still shows the results without the profile
        return None, f"profile {base} could not be loaded: {err}"


def build_report(folder: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Write ``folder/report.html`` (or ``out``) from the sweep in ``folder``; returns its path."""
    folder = Path(folder)
    if not (folder / RESULTS_JSON).is_file():
        raise InputError(f"no {RESULTS_JSON} here; run `memwall sweep --out {folder}` first", file=str(folder))
    rows = read_rows(folder)
    figdir = folder / "figures"
    if not all((figdir / f"{n}.png").is_file() for n in fg.NAMES):
        fg.write_figures(folder, rows)
    target = Path(out) if out else folder / "report.html"
    target.write_text(render(rows, figdir), encoding="utf-8")
    return target


def render(rows: Sequence[Mapping[str, Any]], figdir: Path) -> str:
    """The report's HTML text."""
    ok = [r for r in rows if r.get("status") == "ok"]
    failed = [r for r in rows if r.get("status") != "ok"]
    levels = fg.stall_levels(ok)
    real = [r for r in rows if not r.get("synthetic")]
    machines = list(dict.fromkeys(r["machine"] for r in real))
    from ..data import data_version


    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           "<title>memwall sweep report</title>", f"<style>{STYLE}</style>",
           f"<script>{SCRIPT}</script></head><body>",
           "<h1>memwall: where backprop's time goes, machine by machine</h1>",
           f"<p class='muted'>memwall {_e(MODEL_VERSION)}, era_data {_e(data_version())}. {len(rows)} cases "
           f"({len(ok)} ok, {len(failed)} failed) on {len(machines)} machines"
           f"{' and ' + str(len({r['machine'] for r in rows}) - len(machines)) + ' synthetic ones' if len(real) < len(rows) else ''}."
           " Times are simulated: the memory traffic of each step replayed through the machine's "
           "memory hierarchy and timed by its profile's model.</p>",
           "<nav><a href='#figures'>Figures</a><a href='#results'>Results</a><a href='#machines'>Machines</a>"
           + ("<a href='#failed'>Failed cases</a>" if failed else "") + "</nav>",
           "<h2 id='figures'>Figures</h2>"]
    for name in fg.NAMES:
        out.append(f"<figure id='fig-{name}'><img class='figure' alt='{_e(fg.TITLES[name])}' "
                   f"src='{_figure_data(figdir, name)}'><figcaption><b>{_e(fg.TITLES[name])}.</b> "
                   f"{_e(CAPTIONS[name])}</figcaption></figure>")

    out.append("<h2 id='results'>Results</h2>")
    cols = [("machine", "machine"), ("year", "year"), ("kind", "kind"), ("balance", "balance (FLOP/B)"),
            ("network", "network"), ("batch", "batch"), ("checkpoint", "checkpoint"), ("updates", "updates"),
            ("phase", "phase"), ("seconds", "seconds"), ("stall_fraction", "stall"),
            ("fraction_of_peak", "of peak"), ("cups", "CUPS"), ("bound", "bound")]
    out.append(_table(ok, cols))

    validation = _validation(figdir.parent)
    if validation:
        summary = validation["summary"]
        out.append("<h2 id='validation'>Validation against published measurements</h2>")
        out.append(f"<p>{_e(summary.get('cases'))} cases; predicted ÷ measured within 2× for "
                   f"{_num(summary.get('share_within_2x'))} of the point checks, median |log2 ratio| "
                   f"{_num(summary.get('median_abs_log2_ratio'))}, worst {_num(summary.get('worst_abs_log2_ratio'))} "
                   f"({_e(summary.get('worst_case'))}); bound checks held: {_e(summary.get('bounds_held'))} of "
                   f"{_e(summary.get('bound_cases'))}. "
                   "Each note says what was measured and, where the prediction misses, why.</p>")
        out.append(_table(validation["cases"], [
            ("id", "case"), ("machine", "machine"), ("workload", "workload"), ("metric", "metric"),
            ("measured", "measured"), ("predicted", "predicted"), ("ratio", "ratio"), ("bound", "bound"),
            ("status", "status"), ("notes", "note")]))

    out.append("<h2 id='machines'>Machines</h2>")
    for mid in machines:
        mrows = [r for r in ok if r["machine"] == mid]
        first = next(r for r in rows if r["machine"] == mid)
        out.append(f"<h3 id='m-{_e(mid)}'>{_e(first.get('name') or mid)} ({_e(first['year'])}, {_e(first['kind'])})</h3>")
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

    if failed:
        out.append("<h2 id='failed'>Failed cases</h2>")
        out.append(_table(failed, [("machine", "machine"), ("network", "network"), ("batch", "batch"),
                                   ("checkpoint", "checkpoint"), ("updates", "updates"), ("phase", "phase"),
                                   ("error", "reason")]))
    out.append("<p class='muted'>Gholami et al., \"AI and Memory Wall\", IEEE Micro 44(3), 2024, for the "
               "growth rates in figure 1. Machine figures: era_data/machines, each with its source and status.</p>")
    out.append("</body></html>\n")
    return "\n".join(out)
