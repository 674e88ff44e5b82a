// memwall report: draws every figure from the data embedded in this page with the
// embedded plotly.js; no request leaves the file. Counts what rendered and what failed
// on <body> (data-figures-rendered, data-errors) so a headless browser can check it.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("memwall-data").textContent);
  var rendered = 0, errors = [];
  var CONFIG = {responsive: true, displaylogo: false, scrollZoom: true};
  var COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf"];
  function note() {
    document.body.setAttribute("data-figures-rendered", String(rendered));
    document.body.setAttribute("data-errors", String(errors.length));
  }
  window.addEventListener("error", function (e) { errors.push(String(e.message)); note(); });
  function fmt(v) { return (v === null || v === undefined) ? "" : (typeof v === "number" ? Number(v.toPrecision(4)).toString() : String(v)); }
  function uniq(xs) { var s = []; xs.forEach(function (x) { if (s.indexOf(x) < 0) s.push(x); }); return s; }
  function by(rows, key) { var out = {}; rows.forEach(function (r) { var k = r[key]; (out[k] = out[k] || []).push(r); }); return out; }
  function plot(id, traces, layout) {
    var el = document.getElementById(id);
    if (!el) return;
    layout = Object.assign({margin: {t: 40, r: 20, b: 55, l: 70}, hovermode: "closest",
                            legend: {font: {size: 10}}, height: 460}, layout);
    try {
      Plotly.newPlot(el, traces, layout, CONFIG).then(function () {
        if (!el.getAttribute("data-rendered")) { el.setAttribute("data-rendered", "1"); rendered++; note(); }
      }, function (err) { errors.push(id + ": " + err); note(); });
    } catch (err) { errors.push(id + ": " + err); note(); }
  }
  function ax(title, log) { return {title: {text: title}, type: log ? "log" : "linear", exponentformat: "power"}; }
  function hover(fields) {
    return fields.map(function (f) { return f[0] + ": %{customdata[" + f[1] + "]}"; }).join("<br>") + "<extra></extra>";
  }

  var F = D.figures;
  // 1. balance drift
  (function () {
    var t = (F.balance_drift || {}).machines || [], fits = (F.balance_drift || {}).fits || [];
    var traces = [];
    uniq(t.map(function (r) { return r.kind; })).forEach(function (kind, k) {
      var s = t.filter(function (r) { return r.kind === kind; });
      traces.push({type: "scatter", mode: "markers", name: kind, x: s.map(function (r) { return r.year; }),
        y: s.map(function (r) { return r.balance; }), marker: {size: 8, color: COLOURS[k % 10]},
        customdata: s.map(function (r) { return [r.name, r.year, fmt(r.peak), fmt(r.bandwidth), fmt(r.balance), r.dtype]; }),
        hovertemplate: hover([["machine", 0], ["year", 1], ["peak FLOP/s", 2], ["memory B/s", 3], ["balance FLOP/B", 4], ["dtype", 5]])});
    });
    fits.forEach(function (f, k) {
      // balance = b0 * g^((year - y0)/2): drawn through the fit's geometric-mean point
      var s = t.filter(function (r) { return f.ids.indexOf(r.id) >= 0; });
      if (!s.length) return;
      var my = s.reduce(function (a, r) { return a + r.year; }, 0) / s.length;
      var ml = s.reduce(function (a, r) { return a + Math.log10(r.balance); }, 0) / s.length;
      var xs = [f.first_year, f.last_year];
      traces.push({type: "scatter", mode: "lines", name: "fit, " + f.label + ": ×" + fmt(f.balance_growth) + "/2 yr",
        x: xs, y: xs.map(function (x) { return Math.pow(10, ml + Math.log10(f.balance_growth) * (x - my) / 2); }),
        line: {dash: ["dot", "dash", "solid", "dashdot"][k % 4], color: "#444"}, hoverinfo: "name"});
    });
    plot("plot-balance_drift", traces, {xaxis: ax("year of introduction"), yaxis: ax("machine balance (FLOP per byte of main memory)", true)});
  })();

  // 2. regime flip (memory_ratio where the sweep has it) and 6. synthetic balance
  function flip(id, rows, connect) {
    var useRatio = rows.some(function (r) { return r.memory_ratio !== null && r.memory_ratio !== undefined; });
    var key = useRatio ? "memory_ratio" : "stall_fraction";
    var groups = by(rows, "network"), traces = [], k = 0;
    Object.keys(groups).forEach(function (net) {
      var s = groups[net].slice().sort(function (a, b) { return a.balance - b.balance; });
      traces.push({type: "scatter", mode: connect ? "lines+markers" : "markers", name: net, x: s.map(function (r) { return r.balance; }),
        y: s.map(function (r) { return r[key]; }),
        marker: {size: 8, color: COLOURS[k % 10], symbol: s.map(function (r) { return r.weights_on_chip ? "circle-open" : "circle"; })},
        customdata: s.map(function (r) { return [r.name || r.machine, net, fmt(r.balance), fmt(r.stall_fraction), fmt(r.memory_ratio), fmt(r.overhead_fraction), fmt(r.seconds), r.bound, r.weights_on_chip ? "yes (hollow)" : "no"]; }),
        hovertemplate: hover([["machine", 0], ["network", 1], ["balance", 2], ["stall fraction", 3], ["memory ÷ arithmetic time", 4], ["overhead share", 5], ["seconds", 6], ["bound", 7], ["weights fit on chip", 8]])});
      var seed = s.filter(function (r) { return r.seed_memory_ratio; });
      if (useRatio && seed.length) traces.push({type: "scatter", mode: "lines", name: net + ": seed model β / I",
        x: seed.map(function (r) { return r.balance; }), y: seed.map(function (r) { return r.seed_memory_ratio; }),
        line: {dash: "dash", width: 1, color: COLOURS[k % 10]}, hoverinfo: "name"});
      var I = (D.intensity || {})[net];
      if (I) traces.push({type: "scatter", mode: "lines", name: net + ": no-reuse intensity " + fmt(I), x: [I, I],
        y: useRatio ? [1e-4, 1e4] : [0, 1], line: {dash: "dot", color: COLOURS[k % 10]}, hoverinfo: "name"});
      k++;
    });
    plot(id, traces, {xaxis: ax("machine balance (FLOP/B) at the workload's dtype", true),
      yaxis: useRatio ? ax("memory time ÷ arithmetic time (1 is the flip)", true) : Object.assign(ax("stall fraction"), {range: [-0.03, 1.03]})});
  }
  flip("plot-regime_flip", (F.regime_flip || {}).rows || [], false);
  flip("plot-synthetic_balance", (F.synthetic_balance || {}).rows || [], true);

  // 3. stall breakdown, and the machine picker's breakdown
  function breakdown(id, rows, labelOf, levels, horizontal) {
    var parts = [["compute", "compute_fraction", "#55a868"]];
    levels.forEach(function (lv, k) { parts.push(["stall: " + lv, "stall_" + lv, D.stall_colours[k % D.stall_colours.length]]); });
    parts.push(["overhead (launch, start-up)", "overhead_fraction", "#4c72b0"]);
    var labels = rows.map(labelOf);
    var traces = parts.map(function (p) {
      var vals = rows.map(function (r) { return r[p[1]] || 0; });
      var t = {type: "bar", name: p[0], marker: {color: p[2]},
        customdata: rows.map(function (r, i) { return [labels[i], fmt(vals[i]), fmt(r.seconds), r.bound]; }),
        hovertemplate: hover([["case", 0], [p[0] + " share", 1], ["seconds", 2], ["bound", 3]])};
      if (horizontal) { t.orientation = "h"; t.x = vals; t.y = labels; } else { t.x = labels; t.y = vals; }
      return t;
    });
    var lay = {barmode: "stack", height: Math.max(360, horizontal ? 22 * rows.length + 120 : 460)};
    if (horizontal) { lay.xaxis = Object.assign(ax("share of the step's cycles"), {range: [0, 1]}); lay.yaxis = {autorange: "reversed", automargin: true}; }
    else { lay.yaxis = Object.assign(ax("share of the step's cycles"), {range: [0, 1]}); lay.xaxis = {automargin: true}; }
    plot(id, traces, lay);
  }
  (function () {
    var rows = (F.stall_breakdown || {}).rows || [];
    var nets = uniq(rows.map(function (r) { return r.network; }));
    var net = nets.indexOf("nettalk") >= 0 ? "nettalk" : nets[0];
    rows = rows.filter(function (r) { return r.network === net; }).sort(function (a, b) { return a.year - b.year; });
    breakdown("plot-stall_breakdown", rows, function (r) { return (r.name || r.machine) + " (" + r.year + ")"; }, D.levels, true);
  })();

  // 4. batch window
  (function () {
    var groups = by((F.batch_window || {}).rows || [], "machine"), traces = [];
    Object.keys(groups).forEach(function (m, k) {
      var s = groups[m].slice().sort(function (a, b) { return a.tokens - b.tokens; });
      traces.push({type: "scatter", mode: "lines+markers", name: s[0].name || m, x: s.map(function (r) { return r.tokens; }),
        y: s.map(function (r) { return r.fraction_of_peak; }), line: {color: COLOURS[k % 10]},
        customdata: s.map(function (r) { return [r.name || m, r.network, r.batch, r.tokens, fmt(r.fraction_of_peak), fmt(r.seconds), r.bound]; }),
        hovertemplate: hover([["machine", 0], ["network", 1], ["batch", 2], ["tokens", 3], ["of peak", 4], ["seconds", 5], ["bound", 6]])});
      var seed = s.filter(function (r) { return r.seed_fraction_of_peak; });
      if (seed.length) traces.push({type: "scatter", mode: "lines", name: (s[0].name || m) + ": seed model",
        x: seed.map(function (r) { return r.tokens; }), y: seed.map(function (r) { return r.seed_fraction_of_peak; }),
        line: {dash: "dash", width: 1, color: COLOURS[k % 10]},
        customdata: seed.map(function (r) { return [r.tokens, fmt(r.seed_fraction_of_peak), fmt(r.fraction_of_peak)]; }),
        hovertemplate: hover([["tokens", 0], ["seed: of peak", 1], ["simulated: of peak", 2]])});
    });
    ((F.batch_window || {}).model || []).forEach(function (t, k) {
      traces.push({type: "scatter", mode: "lines", name: (t.name || t.machine) + ": T_min " + fmt(t.t_min) + " tokens",
        x: [t.t_min, t.t_min], y: [0, 1], line: {dash: "dot", color: COLOURS[k % 10]},
        hovertemplate: "T_min = β·b_w/(F/P) = " + fmt(t.balance) + " × " + fmt(t.b_w) + " / " + fmt(t.flops_per_token) + " = " + fmt(t.t_min) + " tokens<extra></extra>"});
      if (t.t_step) traces.push({type: "scatter", mode: "lines", name: (t.name || t.machine) + ": floor per optimizer step " + fmt(t.t_step) + " tokens",
        x: [t.t_step, t.t_step], y: [0, 1], line: {dash: "dashdot", width: 1, color: COLOURS[k % 10]},
        hovertemplate: "T_step = β·(b_update + b_comm)/(F/P) = " + fmt(t.t_step) + " tokens<extra></extra>"});
      if (t.t_opt) traces.push({type: "scatter", mode: "markers", name: (t.name || t.machine) + ": time-optimal batch " + fmt(t.t_opt) + " tokens",
        x: [t.t_opt], y: [0.02], marker: {symbol: "triangle-up", size: 11, color: COLOURS[k % 10]},
        hovertemplate: "√(T_step · B_crit) = " + fmt(t.t_opt) + " tokens<extra></extra>"});
    });
    var wide = (F.batch_window || {}).wide || [], dashes = ["solid", "dash", "dashdot", "dot"];
    uniq(wide.map(function (r) { return r.network + " fusion " + (r.fusion || "none"); })).forEach(function (key, i) {
      var s = wide.filter(function (r) { return r.network + " fusion " + (r.fusion || "none") === key; }).sort(function (a, b) { return a.tokens - b.tokens; });
      var ceiling = s[0].d_min ? s[0].d_model / (s[0].d_model + s[0].d_min) : null;
      traces.push({type: "scatter", mode: "lines+markers", name: s[0].network + " (d = " + s[0].d_model + ") on " + (s[0].name || s[0].machine) + ", fusion " + (s[0].fusion || "none"),
        x: s.map(function (r) { return r.tokens; }), y: s.map(function (r) { return r.fraction_of_peak; }),
        line: {color: "#000", dash: dashes[i % 4]}, marker: {symbol: "square", size: 5},
        customdata: s.map(function (r) { return [r.network, r.fusion, r.tokens, fmt(r.fraction_of_peak), fmt(r.d_min)]; }),
        hovertemplate: hover([["network", 0], ["fusion", 1], ["tokens", 2], ["of peak", 3], ["d_min", 4]])});
      if (ceiling) traces.push({type: "scatter", mode: "lines", name: "ceiling d/(d+d_min) = " + fmt(ceiling) + ", fusion " + (s[0].fusion || "none"),
        x: [s[0].tokens, s[s.length - 1].tokens], y: [ceiling, ceiling], line: {color: "#777", width: 1, dash: dashes[i % 4]}, hoverinfo: "name"});
    });
    var crit = ((F.batch_window || {}).model || []).filter(function (t) { return t.b_crit; })[0];
    if (crit) traces.push({type: "scatter", mode: "lines", name: "critical batch " + fmt(crit.b_crit) + " tokens (Kaplan et al. 2020 at loss " + fmt(crit.loss) + ")",
      x: [crit.b_crit, crit.b_crit], y: [0, 1], line: {color: "#000", width: 1.5}, hoverinfo: "name"});
    plot("plot-batch_window", traces, {xaxis: ax("batch (tokens per weight visit)", true), yaxis: Object.assign(ax("fraction of peak FLOP/s"), {range: [0, 1.02]})});
  })();

  // 5. capacity ledger
  (function () {
    var t = (F.capacity_ledger || {}).ledger || [], traces = [];
    var none = t.filter(function (r) { return r.checkpoint === "none"; });
    traces.push({type: "scatter", mode: "lines", name: "parameters (weights)", x: none.map(function (r) { return r.batch; }),
      y: none.map(function (r) { return r.weights; }), line: {width: 3}});
    uniq(t.map(function (r) { return r.checkpoint; })).forEach(function (ck) {
      var s = t.filter(function (r) { return r.checkpoint === ck; });
      traces.push({type: "scatter", mode: "lines+markers", name: "saved activations, checkpoint " + ck,
        x: s.map(function (r) { return r.batch; }), y: s.map(function (r) { return r.activations; }),
        customdata: s.map(function (r) { return [r.network, r.batch, ck, fmt(r.activations), fmt(r.weights), fmt(r.peak)]; }),
        hovertemplate: hover([["network", 0], ["batch", 1], ["checkpoint", 2], ["activations B", 3], ["weights B", 4], ["peak B", 5]])});
    });
    plot("plot-capacity_ledger", traces, {xaxis: ax("batch (examples)", true), yaxis: ax("bytes held at the step's peak (B)", true)});
  })();

  // 7. validation
  (function () {
    var rows = ((F.validation || {}).cases || []).filter(function (r) { return r.predicted && r.measured; });
    var groups = by(rows, "metric"), traces = [], lo = Infinity, hi = 0;
    rows.forEach(function (r) { lo = Math.min(lo, r.measured, r.predicted); hi = Math.max(hi, r.measured, r.predicted); });
    lo /= 4; hi *= 4;
    traces.push({type: "scatter", mode: "lines", name: "within 2×", x: [lo, hi, hi, lo], y: [lo / 2, hi / 2, hi * 2, lo * 2],
      fill: "toself", fillcolor: "rgba(0,0,0,0.08)", line: {width: 0}, hoverinfo: "skip"});
    traces.push({type: "scatter", mode: "lines", name: "predicted = measured", x: [lo, hi], y: [lo, hi], line: {color: "#666", width: 1}, hoverinfo: "skip"});
    Object.keys(groups).forEach(function (metric) {
      var s = groups[metric];
      traces.push({type: "scatter", mode: "markers", name: metric, x: s.map(function (r) { return r.measured; }), y: s.map(function (r) { return r.predicted; }),
        marker: {size: 9}, customdata: s.map(function (r) { return [r.id, r.machine, r.workload, fmt(r.measured), fmt(r.predicted), fmt(r.ratio), r.check]; }),
        hovertemplate: hover([["case", 0], ["machine", 1], ["workload", 2], ["measured", 3], ["predicted", 4], ["ratio", 5], ["check", 6]])});
    });
    plot("plot-validation", traces, {xaxis: ax("measured (metric's unit)", true), yaxis: ax("predicted by memwall (same unit)", true)});
  })();

  // 8. roofline explorer, with its own machine picker
  var R = F.roofline || {points: [], roofs: []};
  function roofline(machine) {
    var pts = R.points.filter(function (p) { return p.machine === machine && p.intensity; });
    var roof = R.roofs.filter(function (r) { return r.machine === machine; })[0];
    var traces = [], groups = by(pts, "network");
    Object.keys(groups).forEach(function (net, k) {
      var s = groups[net];
      traces.push({type: "scatter", mode: "markers", name: net, x: s.map(function (p) { return p.intensity; }), y: s.map(function (p) { return p.achieved_flops; }),
        marker: {size: 7, color: COLOURS[k % 10], symbol: s.map(function (p) { return p.intensity_level === "memory" ? "circle" : "circle-open"; })},
        customdata: s.map(function (p) { return [p.name, net + " batch " + p.batch + " (" + p.checkpoint + ")", p.kernel + " [" + p.phase + ", " + p.op + "]", fmt(p.intensity) + " vs " + p.intensity_level, fmt(p.achieved_flops), fmt(p.seconds), p.bound]; }),
        hovertemplate: hover([["machine", 0], ["case", 1], ["kernel", 2], ["FLOP/B", 3], ["achieved FLOP/s", 4], ["seconds", 5], ["bound", 6]])});
    });
    if (roof && pts.length) {
      var xs = pts.map(function (p) { return p.intensity; });
      var x0 = Math.min.apply(null, xs) / 10, x1 = Math.max.apply(null, xs) * 10;
      var peak = roof.peak_flops[roof.primary_dtype];
      traces.push({type: "scatter", mode: "lines", name: "peak " + fmt(peak) + " FLOP/s", x: [x0, x1], y: [peak, peak], line: {color: "#222"}});
      var lines = [["memory", roof.memory_bandwidth]];
      roof.levels.slice().reverse().forEach(function (lv) { if (lv.bandwidth) lines.push([lv.name, lv.bandwidth]); });
      lines.forEach(function (l, j) {
        var knee = peak / l[1], x = [x0, Math.max(x0, Math.min(knee, x1)), x1];
        traces.push({type: "scatter", mode: "lines", name: l[0] + " ceiling " + fmt(l[1]) + " B/s", x: x,
          y: x.map(function (v) { return Math.min(peak, v * l[1]); }), line: {color: j ? "#999" : "#222", dash: j ? "dash" : "solid"}});
      });
    }
    plot("plot-roofline", traces, {xaxis: ax("arithmetic intensity (FLOP per byte of main-memory traffic)", true), yaxis: ax("achieved FLOP/s", true)});
  }
  (function () {
    var sel = document.getElementById("roofline-machine");
    var ms = uniq(R.points.map(function (p) { return p.machine; }));
    ms.forEach(function (m) { var o = document.createElement("option"); o.value = m; o.textContent = m; sel.appendChild(o); });
    if (ms.indexOf(D.roofline_machine) >= 0) sel.value = D.roofline_machine;
    sel.addEventListener("change", function () { roofline(sel.value); });
    roofline(sel.value);
  })();

  // 9. activation high-water, played as an animation
  (function () {
    var t = (F.activation_highwater || {}).live || [];
    var cks = uniq(t.map(function (r) { return r.checkpoint; }));
    var classes = D.highwater_classes.filter(function (c) { return t.some(function (r) { return r[c]; }); });
    var traces = [];
    cks.forEach(function (ck, j) {
      var s = t.filter(function (r) { return r.checkpoint === ck; });
      classes.forEach(function (c, k) {
        traces.push({type: "scatter", mode: "lines", stackgroup: ck, name: c + " (" + ck + ")", legendgroup: ck,
          xaxis: j ? "x2" : "x", yaxis: j ? "y2" : "y", x: s.map(function (r) { return r.index; }),
          y: s.map(function (r) { return r[c] / 1048576; }), line: {color: COLOURS[k % 10], width: 0.5},
          customdata: s.map(function (r) { return [ck, r.kernel, r.phase, fmt(r[c] / 1048576), fmt(r.total / 1048576)]; }),
          hovertemplate: hover([["checkpoint", 0], ["kernel", 1], ["phase", 2], [c + " MiB", 3], ["all live MiB", 4]])});
      });
    });
    var n = Math.max.apply(null, t.map(function (r) { return r.index; }).concat([1]));
    var layout = {grid: {rows: 1, columns: Math.max(1, cks.length), pattern: "independent"},
      xaxis: Object.assign(ax("kernel (checkpoint " + cks[0] + ")"), {range: [0, n]}),
      xaxis2: Object.assign(ax("kernel (checkpoint " + (cks[1] || "") + ")"), {range: [0, n]}),
      yaxis: ax("live bytes (MiB)"), yaxis2: ax("live bytes (MiB)"),
      shapes: [{type: "line", xref: "x", yref: "paper", x0: 0, x1: 0, y0: 0, y1: 1, line: {color: "#000", width: 1}},
               {type: "line", xref: "x2", yref: "paper", x0: 0, x1: 0, y0: 0, y1: 1, line: {color: "#000", width: 1}}]};
    plot("plot-activation_highwater", traces, layout);
    var btn = document.getElementById("highwater-play"), timer = null;
    btn.addEventListener("click", function () {
      if (timer) { clearInterval(timer); timer = null; btn.textContent = "play"; return; }
      var i = 0; btn.textContent = "pause";
      timer = setInterval(function () {
        i = (i + Math.max(1, Math.round(n / 120))) % (n + 1);
        Plotly.relayout("plot-activation_highwater", {"shapes[0].x0": i, "shapes[0].x1": i, "shapes[1].x0": i, "shapes[1].x1": i});
      }, 60);
    });
  })();

  // 10. decode: tokens per second against batch, one trace per machine and context
  (function () {
    var t = ((F.decode || {}).rows || []).filter(function (r) { return r.status === "ok" && r.tokens_per_second; });
    var traces = [], k = 0;
    uniq(t.map(function (r) { return r.context; })).forEach(function (ctx, i) {
      uniq(t.map(function (r) { return r.machine; })).forEach(function (m) {
        var s = t.filter(function (r) { return r.machine === m && r.context === ctx; }).sort(function (a, b) { return a.batch - b.batch; });
        if (!s.length) return;
        traces.push({type: "scatter", mode: "lines+markers", name: m + ", context " + ctx,
          x: s.map(function (r) { return r.batch; }), y: s.map(function (r) { return r.tokens_per_second; }),
          line: {dash: i ? "dot" : "solid", color: COLOURS[k++ % 10]},
          marker: {symbol: s.map(function (r) { return r.bound === "compute" ? "star" : (r.max_batch_that_fits != null && r.batch > r.max_batch_that_fits ? "x" : "circle"); }), size: 8},
          customdata: s.map(function (r) { return [r.machine, r.network, r.batch, ctx, fmt(r.tokens_per_second), r.bound, r.max_batch_that_fits]; }),
          hovertemplate: hover([["machine", 0], ["network", 1], ["batch", 2], ["context", 3], ["tokens/s", 4], ["bound", 5], ["largest batch that fits", 6]])});
      });
    });
    plot("plot-decode", traces, {xaxis: ax("batch (sequences decoding together)", true), yaxis: ax("tokens per second (all sequences)", true)});
  })();

  // 11. last-level capacity: memory bytes against the last cache level's capacity
  (function () {
    var t = (F.llc_capacity || {}).capacity || [], traces = [];
    uniq(t.map(function (r) { return r.machine + " / " + r.network; })).forEach(function (name, k) {
      var s = t.filter(function (r) { return r.machine + " / " + r.network === name; }).sort(function (a, b) { return a.capacity - b.capacity; });
      traces.push({type: "scatter", mode: "lines+markers", name: s[0].network + " on " + s[0].machine + " (" + s[0].level + ")",
        x: s.map(function (r) { return r.capacity; }), y: s.map(function (r) { return Math.max(r.memory_bytes, 1); }),
        line: {color: COLOURS[k % 10]}, marker: {size: s.map(function (r) { return r.actual ? 12 : 4; }), symbol: s.map(function (r) { return r.actual ? "circle-open" : "circle"; })},
        customdata: s.map(function (r) { return [r.machine, r.network, fmt(r.capacity), fmt(r.memory_bytes), r.actual ? "yes" : ""]; }),
        hovertemplate: hover([["machine", 0], ["network", 1], ["capacity B", 2], ["memory bytes", 3], ["the machine's own", 4]])});
    });
    plot("plot-llc_capacity", traces, {xaxis: ax("last-level cache capacity (B)", true), yaxis: ax("main-memory bytes of one training step (1 = none)", true)});
  })();

  // 13. bytes per token, stacked
  (function () {
    var t = ((F.bytes_per_token || {}).bytes || []).slice().sort(function (a, b) { return a.tokens - b.tokens; });
    var parts = [["weights", "weights and gradients"], ["optimizer", "optimizer state"], ["communication", "gradient all-reduce"], ["activations", "activations"]];
    var traces = parts.map(function (p, k) {
      return {type: "scatter", mode: "lines", stackgroup: "bytes", name: p[1], x: t.map(function (r) { return r.tokens; }),
        y: t.map(function (r) { return r[p[0]]; }), line: {color: D.stall_colours[k]},
        customdata: t.map(function (r) { return [r.network, r.batch, r.tokens, fmt(r[p[0]])]; }),
        hovertemplate: hover([["network", 0], ["batch", 1], ["tokens", 2], [p[1] + " B/token", 3]])};
    });
    plot("plot-bytes_per_token", traces, {xaxis: ax("tokens per micro-batch", true), yaxis: ax("bytes per token (stacked)", true)});
  })();

  // The machine picker: that machine's breakdown across networks and batches, and its section.
  (function () {
    var sel = document.getElementById("machine-picker");
    function show() {
      var m = sel.value;
      var rows = D.rows.filter(function (r) { return r.machine === m && r.status === "ok"; });
      breakdown("plot-machine", rows, function (r) { return r.network + " b" + r.batch + " " + r.checkpoint + " " + r.updates + " " + r.phase; }, D.levels, false);
      document.querySelectorAll(".machine-section").forEach(function (s) { s.style.display = s.getAttribute("data-machine") === m ? "" : "none"; });
    }
    sel.addEventListener("change", show);
    show();
  })();

  // The results table: click a header to sort, type to filter.
  (function () {
    var table = document.getElementById("results-table"), body = table.tBodies[0];
    var filter = document.getElementById("results-filter");
    filter.addEventListener("input", function () {
      var q = filter.value.toLowerCase();
      Array.prototype.forEach.call(body.rows, function (tr) { tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none"; });
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.style.cursor = "pointer";
      th.addEventListener("click", function () {
        var asc = th.getAttribute("data-sort") !== "asc";
        th.setAttribute("data-sort", asc ? "asc" : "desc");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col].getAttribute("data-v"), y = b.cells[col].getAttribute("data-v");
          var nx = parseFloat(x), ny = parseFloat(y);
          var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  })();
  note();
})();
