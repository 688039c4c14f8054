// The dashboard's cluster view: a tile per node, a cell per GPU (whole, shared), a tile per MIG GPU (by
// placement where the plugin publishes placements, else by compute slices), each node's GPU utilisation.
// Loaded before app.js, whose helpers (el, $, redraw, view, shortModel) it uses once the page refreshes.
"use strict";

// A holder by its job's name where this page knows it (every running entry the token may see), else its ID.
function holderName(h) { return view.names.get(h.entry) || h.entry; }

function holderText(holders) {
  return holders.map((h) => {
    const who = view.names.has(h.entry) ? `${view.names.get(h.entry)} [${h.entry}]` : h.entry;
    return h.milli && h.milli < 1000 ? `${who} (${h.team}, ${h.milli}m)` : `${who} (${h.team})`;
  }).join(", ");
}

function describe(node, device, kind, holders, state) {
  const who = holders.length ? `held by ${holderText(holders)}` : "free";
  return `${node.name || node.id}, ${kind} ${device.id}: ${state === "unhealthy" ? `${unhealthyText(device)}, ` : ""}`
    + `${state === "draining" ? "node draining or down, " : ""}${who}`;
}

// why the device plugin says a device is unhealthy, and since when the service has seen it so
function unhealthyText(device) {
  const since = device.unhealthy_since ? ` since ${new Date(device.unhealthy_since * 1000).toLocaleString()}` : "";
  return `unhealthy${since}${device.health ? ` (${device.health})` : ""}`;
}

function select(text, id) {
  view.selected = id;
  $("cell-detail").textContent = text;
}

function gpuCell(node, gpu, index, off, why) {
  const holders = gpu.holders || [];
  const shared = gpu.mode !== "whole";
  const usedMilli = shared ? Math.max(0, 1000 - Number(gpu.free_milli || 0)) : 0;
  let state = holders.length ? (shared ? "share" : "used") : "free";
  if (!gpu.healthy) state = "unhealthy";
  else if (off && !holders.length) state = "draining";
  const label = state === "unhealthy" ? "unhealthy" : state === "draining" ? why
    : state === "free" ? (shared ? "0m shared" : "free")
    : shared ? `${usedMilli}m of 1000m` : holders.map(holderName).join(" ");
  const text = describe(node, gpu, shared ? "shared GPU" : "GPU", holders, state);
  if (view.selected === gpu.id) $("cell-detail").textContent = text; // the selection follows its device
  const cls = `cell ${state}${shared && state === "free" ? " share" : ""}`;
  const button = el("button", { type: "button", class: cls, title: text, "aria-pressed": String(view.selected === gpu.id),
    dataset: { device: gpu.id, state, entry: holders.map((h) => h.entry).join(" ") },
    onclick: (ev) => { select(text, gpu.id); markPressed(ev.currentTarget); } },
  el("span", { class: "idx" }, `GPU ${index}`), el("span", { class: "what" }, label),
  shared && holders.length ? el("span", { class: "who" }, holders.map(holderName).join(", ")) : null,
  el("span", { class: "sr" }, text));
  if (shared && usedMilli > 0) {
    const fill = el("span", { class: "fill", "aria-hidden": "true" });
    fill.style.setProperty("height", `${Math.min(100, usedMilli / 10)}%`);
    button.prepend(fill);
  }
  return el("li", {}, button);
}

function markPressed(target) {
  for (const b of document.querySelectorAll("#nodes [aria-pressed]")) b.setAttribute("aria-pressed", String(b === target));
}

function migButton(node, m, off, where, relaying) {
  const holders = m.holders || [];
  const state = relaying ? "relaying" : !m.healthy ? "unhealthy" : holders.length ? "used" : off ? "draining" : "free";
  const text = relaying ? `${node.name || node.id}, MIG ${m.profile} ${m.id}${where || ""}: idle, being re-laid`
    : describe(node, m, `MIG ${m.profile}${where || ""}`, holders, state);
  if (view.selected === m.id) $("cell-detail").textContent = text;
  return el("button", { type: "button", class: `slice ${state}`, title: text,
    "aria-pressed": String(view.selected === m.id), dataset: { device: m.id, state, entry: holders.map((h) => h.entry).join(" ") },
    onclick: (ev) => { select(text, m.id); markPressed(ev.currentTarget); } },
  relaying ? `${m.profile} ↻` : holders.length ? `${m.profile} ✓` : m.healthy ? m.profile : `${m.profile} ✕`,
  el("span", { class: "sr" }, text));
}

// Who holds a MIG GPU's instances, by job name: "in use: 3g.40gb train-llm, 1g.10gb notebook".
function inUseLine(members) {
  const used = members.filter((m) => (m.holders || []).length);
  return used.length ? el("span", { class: "inuse" }, "in use: " + used.map((m) => `${m.profile} `
    + m.holders.map(holderName).join(", ")).join("; ")) : null;
}

// One physical MIG GPU whose plugin publishes no placements (the stock plugin) but whose instances share a
// PCI bus ID: its compute slices (7) as grid columns, each instance spanning its own in the node's order
// and slices no instance was made of dashed, as `inventory --devices` draws it (`[aaa|bb|.|-]`).
function migBusCell(node, gpu, off) {
  const byId = new Map(node.migs.map((m) => [m.id, m]));
  const members = gpu.instances.map((id) => byId.get(id)).filter(Boolean);
  const width = Number(gpu.slices) || 7;
  let at = 0;
  const items = members.map((m) => {
    const size = Math.max(1, Number(m.compute_slices) || 1);
    const li = el("li", { dataset: { size: String(size) } }, migButton(node, m, off, ` on GPU ${gpu.pci_bus_id}`));
    li.style.setProperty("grid-column", `${at + 1} / span ${size}`);
    at += size;
    return li;
  });
  for (; at < width; at++) {
    const li = el("li", { class: "uncovered" }, el("span", { class: "sr" }, `compute slice ${at}: not partitioned`));
    li.style.setProperty("grid-column", `${at + 1} / span 1`);
    items.push(li);
  }
  const used = members.filter((m) => (m.holders || []).length).length;
  const label = `${shortModel(gpu.model)} ${gpu.pci_bus_id}`;
  const grid = el("ul", { class: "layout", "aria-label": `${label}: its ${width} compute slices, instances in the `
    + "node's order" }, items);
  grid.style.setProperty("grid-template-columns", `repeat(${Math.max(width, at)}, minmax(0, 1fr))`);
  return el("li", { class: "cell mig", dataset: { bus: gpu.pci_bus_id } },
    el("span", { class: "idx" }, `${label}: ${used}/${members.length} in use`), grid, inUseLine(members),
    el("span", { class: "layout-note" }, NOT_PLACED));
}

const NOT_PLACED = "layout not known: the node's device plugin publishes no placements";

// MIG instances of no known physical GPU (no placements, no bus ID): grouped by model, layout unknown.
function migCell(node, model, slices, off) {
  const items = slices.map((m) => el("li", {}, migButton(node, m, off)));
  const used = slices.filter((m) => (m.holders || []).length).length;
  return el("li", { class: "cell mig" }, el("span", { class: "idx" }, `${shortModel(model)} MIG: ${used}/${slices.length} in use`),
    el("ul", { class: "slices" }, items),
    el("span", { class: "layout-note" }, NOT_PLACED));
}

// One physical MIG GPU by placement: its memory slices as 8 grid columns, each instance spanning its own.
function migGpuCell(node, gpu, off) {
  const byId = new Map(node.migs.map((m) => [m.id, m]));
  const members = gpu.instances.map((id) => byId.get(id)).filter((m) => m && Number.isInteger(m.start));
  const width = Number(gpu.memory_slices) || 8;
  const covered = new Set();
  const relaid = new Set((gpu.relayout && gpu.relayout.destroys) || []); // idle instances the re-layout replaces
  const items = members.map((m) => {
    const size = Math.max(1, Number(m.memory_slices) || 1);
    for (let k = m.start; k < m.start + size; k++) covered.add(k);
    const li = el("li", { dataset: { start: String(m.start), size: String(size) } },
      migButton(node, m, off, ` at slices ${m.start}-${m.start + size - 1}`, relaid.has(m.id)));
    li.style.setProperty("grid-column", `${m.start + 1} / span ${size}`);
    return li;
  });
  for (let k = 0; k < width; k++) {
    if (covered.has(k)) continue;
    const li = el("li", { class: "uncovered", dataset: { start: String(k) } }, el("span", { class: "sr" }, `slice ${k}: no instance`));
    li.style.setProperty("grid-column", `${k + 1} / span 1`);
    items.push(li);
  }
  const used = members.filter((m) => (m.holders || []).length).length;
  const r = gpu.relayout;
  const label = `${shortModel(gpu.model)} ${String(gpu.uuid).slice(0, 12)}`;
  return el("li", { class: "cell mig", dataset: { gpu: gpu.uuid } },
    el("span", { class: "idx" }, `${label}: ${used}/${members.length} in use`),
    el("ul", { class: "layout", "aria-label": `${label} by placement, slices 0 to ${width - 1}` }, items),
    inUseLine(members),
    r && el("span", { class: "relayout", role: "status" },
      `re-layout in progress: ${(r.creates && r.creates.length ? r.creates : r.layout || []).join(", ")}`
      + (r.phase ? ` (${r.phase})` : "")));
}

// The node's GPU utilisation: the mean of what its busy devices' plugin reports (GET /v1/inventory).
function utilLine(node) {
  const pct = node.gpu_util_pct, n = node.gpu_util_devices || 0;
  if (typeof pct !== "number") {
    const busy = node.gpus.some((g) => (g.holders || []).length) || node.migs.some((m) => (m.holders || []).length);
    return el("p", { class: "util", dataset: { util: "" } },
      busy ? "GPU utilisation: not reported by the device plugin" : "GPU utilisation: nothing running");
  }
  const name = node.name || node.id;
  return el("p", { class: "util", dataset: { util: String(pct) } }, el("span", {}, `GPU utilisation ${pct} %`),
    el("meter", { min: 0, max: 100, value: pct, "aria-label": `${name}: GPU utilisation ${pct} %` }),
    el("span", { class: "basis" }, `mean of ${n} busy device${n === 1 ? "" : "s"}`));
}

let drawnCluster = "";

function renderCluster() {
  const key = JSON.stringify([view.nodes, view.selected, [...view.names]]);
  if (key === drawnCluster) return; // unchanged: keep the elements (and whatever the user is on)
  drawnCluster = key;
  const byName = [...view.nodes].sort((a, b) => (a.name || a.id).localeCompare(b.name || b.id));
  const tiles = byName.map((node) => {
    const off = !node.schedulable;
    const why = node.draining ? "draining" : node.status !== "ready" ? node.status : !node.eligible ? "ineligible"
      : off ? "unschedulable" : "";
    const cells = node.gpus.map((g, i) => gpuCell(node, g, i, off, why));
    const placed = (node.mig_gpus || []).filter((g) => g.uuid); // per physical GPU, by placement
    const onPlaced = new Set(placed.flatMap((g) => g.instances)
      .filter((id) => node.migs.some((m) => m.id === id && Number.isInteger(m.start))));
    for (const g of placed) cells.push(migGpuCell(node, g, off));
    const byBus = (node.mig_gpus || []).filter((g) => !g.uuid && g.pci_bus_id); // by PCI bus: one tile per GPU
    for (const g of byBus) cells.push(migBusCell(node, g, off));
    for (const g of byBus) for (const id of g.instances) onPlaced.add(id);
    const byModel = new Map();
    for (const m of node.migs.filter((x) => !onPlaced.has(x.id))) {
      byModel.set(m.device.split(" MIG ")[0], [...(byModel.get(m.device.split(" MIG ")[0]) || []), m]);
    }
    for (const [model, slices] of byModel) cells.push(migCell(node, model, slices, off));
    const models = [...new Set(node.gpus.map((g) => shortModel(g.model)))].join(", ");
    const free = node.gpus.filter((g) => g.healthy && !(g.holders || []).length).length;
    const freeMig = node.migs.filter((m) => m.healthy && !(m.holders || []).length).length;
    return el("article", { class: `node${off ? " off" : ""}`, "aria-labelledby": `node-${node.id}`, dataset: { node: node.id } },
      el("h3", { id: `node-${node.id}` }, node.name || node.id),
      el("p", { class: "meta" }, [node.datacenter, node.node_pool, models,
        node.gpus.length && `${free}/${node.gpus.length} GPUs free`,
        node.migs.length && `${freeMig}/${node.migs.length} MIG instances free`,
        !node.gpus.length && !node.migs.length && "no GPU", why && `⚠ ${why}`].filter(Boolean).join(" · ")),
      utilLine(node),
      el("ul", { class: "cells", "aria-label": `Devices of ${node.name || node.id}` }, cells));
  });
  redraw($("nodes"), tiles);
}
