// The GPU-hours panel: what each team and each workload class used over a window, from GET /v1/usage
// (rows of key, gpu_hours, jobs, attempts, mean_wait_s, p95_wait_s, failures). Most used first, each
// with a bar scaled to the largest row, and the figures in text beside it.
"use strict";

(function () {
  function hours(value) {
    const v = Number(value) || 0;  // two significant figures below 0.01: a short day's use is not "0.00"
    if (v === 0) return "0";
    return v < 0.01 ? v.toPrecision(2) : v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  // one table body from one report; `h` is the page's helpers: el(tag, attrs, ...children), duration(s)
  function draw(tbody, report, label, h) {
    const rows = [...(report.rows || [])].sort((a, b) => b.gpu_hours - a.gpu_hours || a.key.localeCompare(b.key));
    const most = Math.max(...rows.map((r) => Number(r.gpu_hours) || 0), 0);
    const out = rows.map((r) => {
      const bar = h.el("span", { class: "bar", "aria-hidden": "true" }, h.el("span", { class: "in" }));
      bar.firstChild.style.setProperty("width", `${most > 0 ? (100 * r.gpu_hours) / most : 0}%`);
      return h.el("tr", { dataset: { key: r.key, hours: String(r.gpu_hours) } },
        h.el("th", { scope: "row", "data-label": label }, r.key === "-" ? `no ${label.toLowerCase()}` : r.key || "–"),
        h.el("td", { "data-label": "GPU-hours", class: "num gpu-hours" },
          h.el("span", { class: "hcell" }, h.el("span", {}, hours(r.gpu_hours)), bar)),
        h.el("td", { "data-label": "Jobs", class: "num" }, r.jobs),
        h.el("td", { "data-label": "Failures", class: "num" }, r.failures),
        h.el("td", { "data-label": "Mean wait", class: "num" },
          r.mean_wait_s === null || r.mean_wait_s === undefined ? "–" : h.duration(r.mean_wait_s)));
    });
    if (!out.length) {
      out.push(h.el("tr", { class: "none" },
        h.el("td", { colspan: 5, "data-label": label }, "no GPU time in this window")));
    }
    tbody.replaceChildren(...out);
  }

  window.NomadGpuHours = { draw };
})();
