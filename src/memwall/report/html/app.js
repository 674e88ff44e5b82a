// memwall report: draws every figure's plotly spec (made in Python by memwall.figures and
// embedded in this page) with the embedded plotly.js, and adds the widgets: the machine
// picker and the results table's sort and filter. No request leaves the file. Counts what
// rendered and what failed on <body> (data-figures-rendered, data-errors) so a headless
// browser can check it.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("memwall-data").textContent);
  var rendered = 0, errors = [];
  var CONFIG = {responsive: true, displaylogo: false, scrollZoom: true};
  function note() {
    document.body.setAttribute("data-figures-rendered", String(rendered));
    document.body.setAttribute("data-errors", String(errors.length));
  }
  window.addEventListener("error", function (e) { errors.push(String(e.message)); note(); });
  function plot(el, spec) {
    if (!el || !spec) return;
    try {
      Plotly.newPlot(el, spec.data, spec.layout, CONFIG).then(function () {
        if (!el.getAttribute("data-rendered")) { el.setAttribute("data-rendered", "1"); rendered++; note(); }
      }, function (err) { errors.push(el.id + ": " + err); note(); });
    } catch (err) { errors.push(el.id + ": " + err); note(); }
  }

  // Every figure, from its spec.
  Array.prototype.forEach.call(document.querySelectorAll(".plot[data-figure]"), function (el) {
    plot(el, D.figures[el.getAttribute("data-figure")]);
  });

  // The machine picker: that machine's breakdown across networks and batches, and its section.
  (function () {
    var sel = document.getElementById("machine-picker");
    function show() {
      var m = sel.value;
      plot(document.getElementById("plot-machine"), D.machines[m]);
      document.querySelectorAll(".machine-section").forEach(function (s) { s.style.display = s.getAttribute("data-machine") === m ? "" : "none"; });
    }
    sel.addEventListener("change", show);
    show();
  })();

  // The results table: click a header to sort, type to filter.
  (function () {
    var table = document.getElementById("results-table"), body = table.tBodies[0];
    var filter = document.getElementById("results-filter");
    // Every word must match: plain words anywhere in the row, "column:text" in that column
    // (its key or its header, e.g. phase:decode, machine:h100, context:8192).
    var keys = Array.prototype.map.call(table.tHead.rows[0].cells, function (th) {
      return [String(th.getAttribute("data-key") || ""), th.textContent.toLowerCase()];
    });
    function column(name) {
      for (var i = 0; i < keys.length; i++) { if (keys[i][0] === name || keys[i][1] === name) { return i; } }
      return -1;
    }
    filter.addEventListener("input", function () {
      var terms = filter.value.toLowerCase().split(/\s+/).filter(function (t) { return t; });
      Array.prototype.forEach.call(body.rows, function (tr) {
        var text = tr.textContent.toLowerCase();
        var shown = terms.every(function (t) {
          var at = t.indexOf(":"), col = at > 0 ? column(t.slice(0, at)) : -1;
          if (col >= 0) { return tr.cells[col].textContent.toLowerCase().indexOf(t.slice(at + 1)) >= 0; }
          return text.indexOf(t) >= 0;
        });
        tr.style.display = shown ? "" : "none";
      });
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
