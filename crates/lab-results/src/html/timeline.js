// The trace timeline of `labctl report html`: reads the Chrome trace-event
// JSON in #trace-data and draws one lane per (node, QP) with a slice per
// event (a post runs to its completion) and an arrow per flow between nodes.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var doc = JSON.parse(document.getElementById("trace-data").textContent);
  var events = doc.traceEvents || [];
  var host = document.getElementById("timeline");
  var processNames = {}, threadNames = {}, lanes = {}, order = [];
  events.forEach(function (e) {
    if (e.ph === "M" && e.name === "process_name") processNames[e.pid] = e.args.name;
    if (e.ph === "M" && e.name === "thread_name") threadNames[e.pid + "/" + e.tid] = e.args.name;
  });
  function lane(pid, tid) {
    var key = pid + "/" + tid;
    if (!(key in lanes)) { lanes[key] = { pid: pid, tid: tid }; order.push(key); }
    return key;
  }
  var end = 0;
  events.forEach(function (e) {
    if (e.ph === "X" || e.ph === "s" || e.ph === "f") {
      lane(e.pid, e.tid);
      end = Math.max(end, e.ts + (e.ph === "X" ? e.dur : 0));
    }
  });
  order.sort(function (a, b) {
    var x = lanes[a], y = lanes[b];
    return x.pid - y.pid || x.tid - y.tid;
  });
  var LABEL = 260, WIDTH = 1200, LANE = 28, TOP = 30;
  var span = end > 0 ? end : 1;
  function x(ts) { return LABEL + (ts / span) * (WIDTH - LABEL - 10); }
  function y(key) { return TOP + order.indexOf(key) * LANE; }
  function el(name, attrs, parent) {
    var n = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    parent.appendChild(n);
    return n;
  }
  var height = TOP + order.length * LANE + 20;
  var svg = el("svg", { width: WIDTH, height: height, viewBox: "0 0 " + WIDTH + " " + height,
    "class": "timeline", role: "img" }, host);
  var defs = el("defs", {}, svg);
  var marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" }, defs);
  el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#555" }, marker);
  // The time axis: about 5 ticks at a 1-2-5 step, in the unit that suits
  // the span (µs, ms or s), labelled with as few decimals as the step needs.
  var unit = span >= 2e6 ? [1e6, "s"] : span >= 2e3 ? [1e3, "ms"] : [1, "µs"];
  var raw = span / unit[0] / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).find(function (s) { return s >= raw; });
  var decimals = Math.max(0, -Math.floor(Math.log10(step)));
  for (var t = 0; t * unit[0] <= span * 1.0001; t += step) {
    var tx = x(t * unit[0]);
    el("line", { x1: tx, x2: tx, y1: TOP - 6, y2: height - 20, stroke: "#ddd" }, svg);
    el("text", { x: tx, y: TOP - 10, "class": "tick", "text-anchor": "middle" }, svg).textContent =
      t.toFixed(decimals) + " " + unit[1];
  }
  var colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
  order.forEach(function (key, i) {
    var l = lanes[key];
    // "server server" (role and node named alike) reads as "server".
    var proc = (processNames[l.pid] || "pid " + l.pid).split(" ");
    var who = proc.length === 2 && proc[0] === proc[1] ? proc[0] : proc.join(" ");
    var name = who + " · " + (threadNames[key] || "tid " + l.tid);
    if (i % 2 === 0) el("rect", { x: 0, y: y(key), width: WIDTH, height: LANE, fill: "#f6f6f6" }, svg);
    el("text", { x: 4, y: y(key) + LANE / 2 + 4, "class": "lane" }, svg).textContent = name;
  });
  var drawn = {};
  events.forEach(function (e) {
    if (e.ph !== "X") return;
    var key = lane(e.pid, e.tid);
    var w = Math.max(1.5, x(e.ts + e.dur) - x(e.ts));
    var r = el("rect", { x: x(e.ts), y: y(key) + 4, width: w, height: LANE - 8,
      fill: colours[(e.pid - 1) % colours.length], "class": "slice", "data-pid": e.pid,
      "data-node": processNames[e.pid] || "" }, svg);
    el("title", {}, r).textContent = e.name + " @" + e.ts.toFixed(3) + " µs, " + e.dur.toFixed(3) + " µs";
    drawn[e.pid] = (drawn[e.pid] || 0) + 1;
  });
  var starts = {};
  events.forEach(function (e) { if (e.ph === "s") starts[e.id] = e; });
  events.forEach(function (e) {
    if (e.ph !== "f" || !(e.id in starts)) return;
    var s = starts[e.id];
    var a = el("line", { x1: x(s.ts), y1: y(lane(s.pid, s.tid)) + LANE / 2, x2: x(e.ts),
      y2: y(lane(e.pid, e.tid)) + LANE / 2, stroke: "#555", "stroke-width": 1,
      "marker-end": "url(#arrow)", "class": "flow" }, svg);
    el("title", {}, a).textContent = e.name;
  });
  host.setAttribute("data-drawn", JSON.stringify(drawn));
})();
