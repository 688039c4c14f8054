// A small SVG line chart for the dashboard's history: three series over the last 24 hours.
// Each series has its own colour and dash pattern; the figure's caption carries the numbers in text.
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";
  const W = 960, H = 220, PAD = { left: 40, right: 12, top: 10, bottom: 24 };

  function svg(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function clock(t) {
    const d = new Date(t * 1000);
    return `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
  }

  function draw(container, history) {
    const minutes = history.minutes || [];
    const end = Math.floor((history.now || Date.now() / 1000) / 60) * 60 + 60;
    // the recorded stretch, at least ten minutes wide, at most the window (24 h)
    const span = Math.min(history.window_s || 86400, Math.max(600, end - (minutes.length ? minutes[0].t : end)));
    const start = end - span;
    const top = Math.max(1, ...minutes.map((m) => Math.max(m.gpus_in_use, m.queued, m.admitted)));
    const x = (t) => PAD.left + ((t - start) / span) * (W - PAD.left - PAD.right);
    const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": "GPUs in use, queue depth and admissions per minute over time" });
    root.append(svg("line", { class: "axis", x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom }));
    root.append(svg("line", { class: "axis", x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom }));
    root.append(svg("text", { x: PAD.left - 4, y: PAD.top + 8, "text-anchor": "end" }, String(Math.ceil(top))));
    root.append(svg("text", { x: PAD.left - 4, y: H - PAD.bottom, "text-anchor": "end" }, "0"));
    for (let i = 0; i <= 4; i++) {
      const t = start + (span * i) / 4;
      root.append(svg("text", { x: x(t), y: H - 6, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" },
        clock(t)));
    }
    for (const [key, cls] of [["gpus_in_use", "s-gpus"], ["queued", "s-queued"], ["admitted", "s-admitted"]]) {
      // a gap in the records (the service was down) breaks the line instead of bridging it
      let d = "", prev = null;
      for (const m of minutes) {
        d += `${prev !== null && m.t - prev <= 60 ? "L" : "M"}${x(m.t + 30).toFixed(1)},${y(m[key]).toFixed(1)} `;
        prev = m.t;
      }
      if (d) root.append(svg("path", { class: cls, d: d.trim() }));
      const last = minutes[minutes.length - 1];
      if (last) root.append(svg("circle", { class: cls, cx: x(last.t + 30), cy: y(last[key]), r: 3 }));
    }
    container.replaceChildren(root);
  }

  window.NomadGpuCharts = { draw };
})();
