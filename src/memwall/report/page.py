"""The interactive HTML report of a sweep: one self-contained file, nothing fetched.

Owns: turning a sweep folder (``results.json``, ``machines.json``, and each figure's
data in ``figures/NAME.json``) into ``report.html``, which opens from disk in any
browser with no server and no network. Every registered figure (:mod:`memwall.figures`)
is rendered the same way: its number, title, caption and prose, and its plotly spec,
drawn in the page by plotly.js embedded from the ``plotly`` Python package (hover names
machine and case with the numbers, legends toggle series, axes zoom). The page's own
script (``html/app.js``) only draws the specs and adds the widgets: a machine picker and
a sortable, filterable results table. The PNG and SVG figures stay in ``figures/`` for
papers.
"""

from __future__ import annotations

import html
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..canonical import finite
from ..errors import InputError
from ..execute.store import read_rows
from ..figures import FIGURES, heading
from ..figures.stall_breakdown import breakdown_spec, parts, share
from ..model_version import MODEL_VERSION
from ..simulation.row import column
from ..study import draw
from ..study.identity import is_path
from ..study.tables import stall_levels
from ..text import printable
from ..units import format_byte_rate

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

def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any, fmt: str = ".3g") -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, fmt)
    return _e(value)


def _is_text(key: str) -> bool:
    declared = column(key)
    return key in TEXT_COLS or (declared is not None and declared.type == "text")


def _table(rows: Sequence[Mapping[str, Any]], cols: Sequence[tuple[str, str]], table_id: str = "",
           sortable: bool = False) -> str:
    """An HTML table; ``sortable`` cells carry their raw value for the page's sort and filter,
    and its headers their column's key (the filter's ``column:text``)."""
    head = "".join(f"<th{' class=' + chr(39) + 't' + chr(39) if _is_text(k) else ''} data-key='{_e(k)}'>"
                   f"{_e(label)}</th>" for k, label in cols)
    body = []
    for r in rows:
        cells = []
        for k, _ in cols:
            v = r.get(k)
            cls = " class='t'" if _is_text(k) else ""
            shown = _e(v) if _is_text(k) else _cell(k, v)
            raw = f" data-v='{_e('' if v is None else v)}'" if sortable else ""
            cells.append(f"<td{cls}{raw}>{shown}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    ident = f" id='{table_id}'" if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cell(key: str, value: Any) -> str:
    """A value as its column's declaration types it: whole numbers whole (a year is 2022,
    not 2.02e+03), flags yes/no, other numbers to three figures."""
    declared = column(key)
    if declared is not None and value is not None and not isinstance(value, bool):
        if declared.type == "int" and isinstance(value, (int, float)) and float(value).is_integer():
            return str(int(value))
    if declared is not None and declared.type == "flag" and isinstance(value, bool):
        return "yes" if value else "no"
    return _num(value)


# The results table's columns, in order; labels, units and types come from the row's
# declaration (memwall.simulation.row.ROW). A column only some rows have (serving, devices)
# is shown when any row has it.
RESULTS_TABLE = ("machine", "year", "kind", "balance", "network", "batch", "seq_len", "checkpoint", "updates",
                 "phase", "context", "weights", "devices", "seconds", "stall_fraction", "memory_ratio",
                 "fraction_of_peak", "cups", "tokens_per_second", "tokens_per_second_per_device", "bound_class", "bound")


def results_columns(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(key, header) of the results table's columns that these rows fill."""
    out = []
    for key in RESULTS_TABLE:
        c = column(key)
        if c is None or not any(r.get(key) is not None for r in rows):
            continue
        out.append((key, f"{c.label} ({c.unit})" if c.unit and c.unit not in ("tokens", c.label) else c.label))
    return out


TEXT_COLS = {"machine", "name", "kind", "network", "checkpoint", "updates", "phase", "bound", "bound_class", "status", "error",
             "dtype", "key", "source", "status_", "derivation", "value", "id", "workload", "metric", "notes"}


def _stall_bar(row: Mapping[str, Any], levels: Sequence[str]) -> str:
    spans = "".join(f"<span title='{_e(name)} {share(row, col):.1%}' style='width:{100 * share(row, col):.2f}%;"
                    f"background:{colour}'></span>" for name, col, colour in parts(levels) if share(row, col))
    return f"<div class='bar'>{spans}</div>"


def label(spec: Any) -> str:
    """What the report shows for a machine or network: a user file by its name, never its
    path; a synthetic machine as its base and bandwidth (``h100-sxm @ 98.9 GB/s``, and
    ``, every level scaled`` for ``BASE@hier=X``)."""
    text = "" if spec is None else str(spec)
    base, at, rest = text.rpartition("@")
    head, tail = (base, at + rest) if at and "/" not in rest else (text, "")
    for prefix, what in (("@bw=", ""), ("@hier=", ", every level scaled")):
        if tail.startswith(prefix):
            try:
                tail = f" @ {format_byte_rate(float(tail[len(prefix):]))}{what}"
            except ValueError:
                pass
    return (Path(head).name if is_path(head) else head) + tail


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

    return (files("memwall.report") / "html" / "app.js").read_text(encoding="utf-8")


def _inline(text: str) -> str:
    # Inside <script>, only "</" can end the element early.
    return text.replace("</", "<\\/")


def _json_script(value: Any) -> str:
    """``value`` as JSON text to embed in a ``<script type='application/json'>`` element.

    Every ``<``, ``>`` and ``&`` is written as its ``\\u`` escape (JSON holds them only
    inside strings, where the escape reads back as the same character), so no name or
    message can write ``</script>`` or ``<!--<script>``: the latter would put the HTML
    parser in its double-escaped state and swallow the page's own script after it."""
    text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


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
    missing = [n for n, module in FIGURES.items() if not module.OPT_IN and draw.figure_data(folder, n) is None]
    if missing:
        draw.write_figures(folder, rows, only=missing, command="memwall report")
    text = render(rows, folder)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise write_error(target, err, field="--output") from None
    return target


def figures(folder: Path) -> list[dict[str, Any]]:
    """Each registered figure, in order, as the page shows it: its name, heading, caption,
    prose (HTML) and plotly spec, from the data stored in ``folder`` (none: the figure's
    own note of what it needs)."""
    out = []
    for name, module in FIGURES.items():
        stored = draw.figure_data(folder, name)
        data = finite(_labelled(stored["data"])) if stored else {}
        try:
            shown = {"prose": module.prose(data), "spec": finite(module.plotly(data))}
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as err:
            # figures/NAME.json was edited or damaged: the page says so and goes on
            where = folder / "figures" / f"{name}.json"
            print(printable(f"memwall report: warning: {where}: its data cannot be drawn ({type(err).__name__}: "
                            f"{err}); shown empty: run `memwall sweep --out {folder}` again to redraw it"),
                  file=sys.stderr)
            data = {}
            shown = {"prose": f"<p class='muted'>{_e(where)} could not be drawn: rerun the sweep.</p>",
                     "spec": finite(module.plotly(data))}
        out.append({"name": name, "heading": heading(name), "caption": module.CAPTION, **shown, "data": data})
    return out


def machine_specs(ok: Sequence[Mapping[str, Any]], machines: Sequence[str],
                  levels: Sequence[str]) -> dict[str, Any]:
    """The machine picker's plot: per machine, its stall breakdown across networks and batches."""
    return {m: breakdown_spec([r for r in ok if r["machine"] == m],
                              lambda r: f"{r['network']} b{r['batch']} {r['checkpoint']} {r['updates']} {r['phase']}",
                              levels, horizontal=False) for m in machines}


def _labelled(value: Any) -> Any:
    """``value`` with every machine or network named as :func:`label` shows it: the page
    names a user's profile or preset file by its name, never by its path."""
    if isinstance(value, Mapping):
        return {k: label(v) if k in ("machine", "network") and isinstance(v, str) else _labelled(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_labelled(v) for v in value]
    return value


def render(rows: Sequence[Mapping[str, Any]], folder: Path) -> str:
    """The report's HTML text, from the rows and the figure data stored in ``folder``."""
    from ..data import data_version

    rows = [{**r, "machine": label(r["machine"]),
             "network": label(r["network"]) if r.get("network") is not None else None} for r in rows]
    ok = [r for r in rows if r.get("status") == "ok"]
    failed = [r for r in rows if r.get("status") != "ok"]
    levels = stall_levels(ok)
    real = [r for r in rows if not r.get("synthetic")]
    machines = list(dict.fromkeys(r["machine"] for r in real))
    shown = figures(folder)
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
    for fig in shown:
        name, text = fig["name"], f" {fig['prose']}" if fig["prose"] else ""
        out.append(f"<figure id='fig-{name}'><div class='plot' id='plot-{name}' data-figure='{name}'></div>"
                   f"<figcaption><b>{_e(fig['heading'])}.</b> {_e(fig['caption'])}{text}</figcaption></figure>")

    validation = next(f["data"] for f in shown if f["name"] == "validation")
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
    out.append("<div class='controls'>filter: <input id='results-filter' placeholder='h100 phase:decode "
               "context:8192'> (every word must match; column:text looks in that column; click a header to "
               "sort)</div>")
    out.append(_table(ok, results_columns(ok), "results-table", sortable=True))
    if failed:
        out.append("<h2 id='failed'>Failed cases</h2>")
        out.append(_table(failed, [("machine", "machine"), ("network", "network"), ("batch", "batch"),
                                   ("checkpoint", "checkpoint"), ("updates", "updates"), ("phase", "phase"),
                                   ("error", "reason")]))
    out.append("<p class='muted'>Gholami et al., \"AI and Memory Wall\", IEEE Micro 44(3), 2024, for the "
               "growth rates in figure 1. Machine figures: era_data/machines, each with its source and status.</p>")
    page = {"figures": {f["name"]: f["spec"] for f in shown}, "machines": finite(machine_specs(ok, machines, levels))}
    blob = _json_script(page)
    out.append(f"<script type='application/json' id='memwall-data'>{blob}</script>")
    out.append(f"<script>{_inline(_app_js())}</script>")
    out.append("</body></html>\n")
    return "\n".join(out)


def _machine_section(mid: str, rows: Sequence[Mapping[str, Any]], ok: Sequence[Mapping[str, Any]],
                     levels: Sequence[str]) -> str:
    mrows = [r for r in ok if r["machine"] == mid]
    first = next(r for r in rows if r["machine"] == mid)
    out = [f"<section class='machine-section' data-machine='{_e(mid)}'>",
           f"<h3 id='m-{_e(mid)}'>{_e((first.get('name') if not is_path(mid) else None) or mid)} "
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
