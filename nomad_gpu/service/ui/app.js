// nomad-gpu dashboard: polls the service's JSON API (the one the CLI reads) and redraws in place.
// Plain JavaScript, no build step. Every text from the API is set with textContent, never as HTML.
"use strict";

const TOKEN_KEY = "nomad-gpu-token";
const params = new URLSearchParams(location.search);
const POLL_MS = Math.max(250, Number(params.get("poll_ms")) || 2000);
const HISTORY_EVERY_MS = 30000;
const SWEEPS_EVERY_MS = Math.max(5 * POLL_MS, 2500);
const TRIALS_LISTED = 50;
const $ = (id) => document.getElementById(id);

const QUEUE_ROWS = 20;
const view = { entries: [], nodes: [], status: {}, teams: [], sweeps: new Map(), selected: null, allRows: false,
  openSweeps: new Set(), openDevices: new Set(), job: null };
let lastHistory = 0;
let lastSweeps = 0;
let timer = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A redraw replaces elements: the one that had keyboard focus is found again by what it stands for
// (a device, a link, a sweep) and focused, so a keyboard user never loses their place.
function focusKey(node) {
  if (!node || node === document.body) return null;
  if (node.dataset && node.dataset.device) return `[data-device="${CSS.escape(node.dataset.device)}"]`;
  if (node.tagName === "A") return `a[href="${CSS.escape(node.getAttribute("href"))}"]`;
  if (node.tagName === "SUMMARY") return `tr[data-sweep="${CSS.escape(node.closest("tr").dataset.sweep)}"] summary`;
  if (node.id) return `#${CSS.escape(node.id)}`;
  return null;
}

function redraw(container, children) {
  const had = container.contains(document.activeElement) ? focusKey(document.activeElement) : null;
  container.replaceChildren(...children);
  if (had) {
    const again = container.querySelector(had);
    if (again) again.focus({ preventScroll: true });
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

class Refused extends Error {}

async function api(path, method = "GET", asText = false) {
  // the header a state change without a body must carry (a page of another site cannot send it)
  const headers = { Accept: asText ? "text/plain" : "application/json", "X-Nomad-Gpu-Client": "dashboard" };
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, { method, headers, cache: "no-store" });
  if (response.status === 401) throw new Refused("the service refused the token (401): enter a valid API token");
  if (asText && response.ok) return response.text();
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
  return body;
}

// ---- formatting --------------------------------------------------------------------------------
function duration(seconds) {
  let s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor(s / 3600) % 24).padStart(2, "0")}h`;
}

function shortModel(model) {
  return String(model || "").replace(/^NVIDIA\s+/, "").replace(/-SXM\d*|-PCIE|-PCIe/g, "");
}

function requestOf(entry) {
  const parts = [];
  for (const g of (entry.spec && entry.spec.groups) || []) {
    const count = Number(g.count || 1);
    if (g.gpu) {
      const models = g.gpu.models || [];
      const name = models.length ? models.map(shortModel).join("/") : "GPU";
      parts.push(`${Number(g.gpu.count || 1) * count} x ${name}`);
    } else if (g.mig) {
      parts.push(`${Number(g.mig.count || 1) * count} x mig ${g.mig.profile}`);
    } else if (g.share) {
      parts.push(`${count > 1 ? count + " x " : ""}share ${Number(g.share.milli || 0)}m`);
    } else if (g.class || entry.spec.class || g.gpu_memory) {  // a workload class chooses the kind
      parts.push(`${g.class || entry.spec.class || "hpo"}${g.gpu_memory ? " " + g.gpu_memory : ""}`);
    }
  }
  return parts.length ? parts.join(" + ") : "cpu only";
}

function nodeName(id) {
  const node = view.nodes.find((n) => n.id === id);
  return node ? node.name || node.id : id;
}

function isLive(entry) { return entry.state === "admitted" || entry.state === "running"; }

// What an ETA rests on when it is not the specs' own `runtime`: "estimate from class training default".
function estimateOf(entry) {
  const basis = typeof entry.eta_basis === "string" ? entry.eta_basis : "";
  return basis.startsWith("estimate") ? basis : "";
}

// A running entry's end: the service's (from `runtime`, or the operator's default for its class or
// template, said as an estimate), else the spec's `runtime` counted from its admission.
function endsIn(entry, now) {
  if (typeof entry.eta === "number") {
    const left = entry.eta - now, est = estimateOf(entry);
    const text = left > 0 ? `ends in ${duration(left)}` : "over its estimate";
    return est ? `~${text} (${est})` : text;
  }
  const runtime = Number(entry.spec && entry.spec.runtime);
  if (!runtime || !entry.admitted_at) return "";
  const left = entry.admitted_at + runtime - now;
  return left > 0 ? `ends in ${duration(left)}` : `over its ${duration(runtime)} estimate`;
}

// A queued entry's start: "in 12m", "~in 2h (estimate from class training default)", "unknown".
function startsIn(entry, now) {
  if (entry.held) return "held";
  if (typeof entry.eta !== "number") {
    return entry.eta === undefined || entry.eta === null ? "unknown" : String(entry.eta);
  }
  const left = entry.eta - now, est = estimateOf(entry);
  const text = left < 1 ? "now" : `in ${duration(left)}`;
  return est ? `~${text} (${est})` : text;
}

// An ETA's time kept on one line, what an estimate rests on free to wrap under it (a phone is narrow).
function etaParts(text) {
  const m = /^(.*?) (\(estimate .*\))$/.exec(text);
  return m ? [el("span", { class: "when" }, m[1]), " ", el("span", { class: "basis" }, m[2])] : [text];
}

// ---- queue -------------------------------------------------------------------------------------
function fillSelect(select, values, keep) {
  const current = select.value;
  const fixed = Array.from(select.options).slice(0, keep);
  const wanted = [...new Set(values)].sort();
  const have = Array.from(select.options).slice(keep).map((o) => o.value);
  if (have.join("\n") === wanted.join("\n")) return;
  select.replaceChildren(...fixed, ...wanted.map((v) => el("option", { value: v }, v)));
  select.value = wanted.includes(current) || fixed.some((o) => o.value === current) ? current : "";
}

function renderQueue() {
  const now = Date.now() / 1000;
  fillSelect($("f-team"), view.entries.map((e) => e.team), 1);
  fillSelect($("f-sweep"), view.entries.filter((e) => e.sweep).map((e) => e.sweep), 2);
  const team = $("f-team").value, state = $("f-state").value, sweep = $("f-sweep").value;
  const shown = view.entries.filter((e) => (!team || e.team === team)
    && (!state || (state === "live" ? isLive(e) : e.state === state))
    && (!sweep || (sweep === "-" ? !e.sweep : e.sweep === sweep)));
  const rows = shown.slice(0, view.allRows ? shown.length : QUEUE_ROWS).map((e) => {
    const waited = (e.admitted_at || now) - e.submitted_at;
    let where;
    if (isLive(e)) {
      const byNode = new Map();
      const links = new Map();  // how a multi-GPU set's GPUs are joined: "NVLink", "PCIe", ...
      for (const p of e.placements || []) {
        const ids = byNode.get(p.node) || [];
        ids.push(...(p.instance_ids || []).map((i) => (p.share_milli ? `${i} (${p.share_milli}m)` : i)));
        byNode.set(p.node, ids);
        if (p.link) links.set(p.node, `${(p.instance_ids || []).length} x ${shortModel(p.device_name)}, ${p.link}`);
      }
      // a count, with the device IDs on demand: an 8-GPU entry must not squeeze the other columns
      where = [...byNode].map(([node, ids]) => el("div", {},
        el("span", {}, `on ${nodeName(node)}`), links.has(node) ? el("span", { class: "link" }, ` (${links.get(node)})`)
          : null, " ", el("details", { class: "devs", dataset: { devices: ids.length },
          open: view.openDevices.has(`${e.id}/${node}`), ontoggle: (ev) => {  // stays open across redraws
            if (ev.currentTarget.open) view.openDevices.add(`${e.id}/${node}`);
            else view.openDevices.delete(`${e.id}/${node}`);
          } },
          el("summary", {}, `${ids.length} device${ids.length === 1 ? "" : "s"}`),
          el("span", { class: "devices" }, ids.join(", ")))));
      if (!where.length) where = ["admitted, being placed"];
      for (const c of new Set((e.placements || []).map((p) => p.choice).filter(Boolean))) {
        where.push(el("div", { class: "choice" }, c));  // what a workload class chose, and why
      }
      for (const note of e.device_health || []) {  // a device under it turned unhealthy; Nomad lets it run
        where.push(el("div", { class: "unhealthy-note" }, note));
      }
      for (const [name, addr] of Object.entries(e.addresses || {})) {  // where it is reached, once running
        where.push(el("div", { class: "address", dataset: { port: name } }, `${name} ${addr}`));
      }
      const u = e.usage;  // the device plugin's figures, where the node reports them
      if (u && (u.gpu_util_pct !== null || u.gpu_memory_used_mib !== null)) {
        const parts = [];
        if (u.gpu_util_pct !== null) parts.push(`GPU ${u.gpu_util_pct} %`);
        if (u.gpu_memory_used_mib !== null) {
          parts.push(`memory ${(u.gpu_memory_used_mib / 1024).toFixed(1)}`
            + (u.gpu_memory_total_mib ? ` of ${(u.gpu_memory_total_mib / 1024).toFixed(1)} GiB` : " GiB"));
        }
        where.push(el("div", { class: "usage" }, parts.join(" · "), u.idle ? el("strong", {}, " · idle") : null));
      }
    } else {
      // the service gives every waiting entry its reason (throttled, after:, held, not decided yet)
      where = [el("span", { class: "reason" }, e.reason || "not decided yet")];
    }
    const eta = isLive(e) ? endsIn(e, now) : startsIn(e, now);
    // the place in the order the scheduler decides in; "–" for one it does not consider (held, after:,
    // beyond its sweep's max_parallel)
    const position = e.state === "queued" ? (typeof e.position === "number" ? String(e.position) : "–") : "";
    return el("tr", { dataset: { entry: e.id, state: e.state } },
      el("td", { "data-label": "Job" }, el("div", {}, el("button", { type: "button", class: "open",
        "aria-label": `${e.name} (${e.id}): details`, onclick: () => openJob(e.id) }, e.name)),
        el("div", { class: "devices" }, e.id)),
      el("td", { "data-label": "Team" }, e.team),
      el("td", { "data-label": "State" }, el("span", { class: `state ${e.state}` }, e.state),
        // queued, but no node of the fleet could ever run it (the service's wait reason says why)
        e.state === "queued" && String(e.reason || "").startsWith("unschedulable:")
          ? el("span", { class: "badge never" }, "unschedulable") : null),
      el("td", { "data-label": "Position", class: "num pos" }, position),
      el("td", { "data-label": "Priority", class: "num" }, e.priority),
      el("td", { "data-label": "Request" }, requestOf(e)),
      el("td", { "data-label": "Waited", class: "num" }, duration(waited)),
      el("td", { "data-label": "Why / where", class: "why" }, where),
      el("td", { "data-label": "ETA", class: "eta" }, ...etaParts(eta)));
  });
  redraw($("queue-rows"), rows);
  $("queue-empty").hidden = rows.length > 0;
  $("queue-count").textContent = shown.length ? `Showing ${rows.length} of ${shown.length}.` : "";
  const more = $("queue-more");
  more.hidden = shown.length <= QUEUE_ROWS;
  more.textContent = view.allRows ? `Show the first ${QUEUE_ROWS}` : `Show all ${shown.length}`;
}

// ---- one job ---------------------------------------------------------------------------------------
// The detail view: the entry as the service keeps it, what Nomad holds for it (allocations, the HCL it
// registered, the log's last lines) and the actions its state allows. Refreshed with the page.
const LOG_LINES = 20;
const ACTIONS = { queued: ["hold", "release", "cancel"], admitted: ["requeue", "cancel"], running: ["requeue", "cancel"] };

function openJob(id) {
  view.job = { id, hcl: null };
  // nothing of the job shown before may stand for this one while its own answers are on the way
  $("job-h").textContent = `Job ${id}`;
  for (const part of ["job-facts", "job-actions"]) redraw($(part), []);
  $("job-hcl").textContent = "…";
  $("job-log").textContent = "…";
  $("job").hidden = false;
  refreshJob().then(() => $("job-h").focus && $("job").scrollIntoView({ block: "nearest" }));
}

function closeJob() {
  view.job = null;
  $("job").hidden = true;
}

async function act(id, action) {
  try {
    if (action === "cancel") await api(`/v1/jobs/${encodeURIComponent(id)}`, "DELETE");
    else await api(`/v1/jobs/${encodeURIComponent(id)}/${action}`, "POST");
    $("job-alert").hidden = true;
  } catch (err) {
    $("job-alert").textContent = `${action}: ${err.message}`;
    $("job-alert").hidden = false;
  }
  await refreshJob();
}

async function refreshJob() {
  if (!view.job) return;
  const id = view.job.id, path = `/v1/jobs/${encodeURIComponent(id)}`;
  const e = await api(path);
  const sent = e.state !== "queued" && !(e.state === "cancelled" && !e.admitted_at) && e.state !== "dependency-failed";
  const [nomad, hcl, log] = await Promise.all([
    sent ? api(`${path}/allocations`).catch(() => null) : null,
    sent && view.job.hcl === null ? api(`${path}/hcl`).catch((err) => ({ hcl: `(not read: ${err.message})` })) : null,
    sent ? api(`${path}/logs?type=stdout`, "GET", true).catch((err) => `(not read: ${err.message})`) : null]);
  if (!view.job || view.job.id !== id) return;  // closed, or another job opened, while these were read
  if (hcl) view.job.hcl = hcl.hcl;
  const now = Date.now() / 1000;
  const facts = [["Job", `${e.name} (${e.id})`], ["Team", e.team], ["State", e.state + (e.held ? ", held" : "")],
    ["Reason", e.reason || "–"], ["Request", requestOf(e)], ["Submitted", new Date(e.submitted_at * 1000).toLocaleString()],
    ["Waited", duration((e.admitted_at || now) - e.submitted_at)]];
  if (isLive(e) && endsIn(e, now)) facts.push(["Ends", endsIn(e, now)]);
  if ((e.spec.after || []).length) facts.push(["After", e.spec.after.join(", ")]);
  for (const p of e.placements || []) {
    facts.push([`Placement ${p.group}[${p.index}]`, `${nodeName(p.node)}: ${(p.instance_ids || []).join(", ") || "no GPU"}`]);
  }
  for (const note of e.device_health || []) facts.push(["Unhealthy device", note]);
  if (nomad) facts.push(["Nomad job", `${nomad.nomad_job_id} (namespace ${nomad.namespace})`]);
  const facts_ = facts.map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {}, v)));
  if (nomad && nomad.nomad_ui) {  // Nomad's own page of the job, where its agent serves a UI
    facts_.push(el("div", {}, el("dt", {}, "Nomad UI"),
      el("dd", {}, el("a", { href: nomad.nomad_ui, rel: "noopener", target: "_blank" }, "open the job in Nomad's UI"))));
  }
  for (const [name, addr] of Object.entries(e.addresses || {})) {  // the host:port Nomad assigned each port
    facts_.push(el("div", { class: "address", dataset: { port: name } }, el("dt", {}, `Address ${name}`),
      el("dd", {}, el("a", { href: `http://${addr}/`, rel: "noopener", target: "_blank" }, addr))));
  }
  $("job-h").textContent = `Job ${e.name}`;
  redraw($("job-facts"), facts_);
  redraw($("job-actions"), (ACTIONS[e.state] || []).filter((a) => (a === "hold" ? !e.held : a === "release" ? e.held : true))
    .map((a) => el("button", { type: "button", dataset: { action: a }, onclick: () => act(id, a) }, a)));
  $("job-hcl").textContent = view.job.hcl || (sent ? "…" : "not sent to Nomad yet");
  $("job-log").textContent = log === null ? (sent ? "…" : "no allocation yet")
    : String(log).split("\n").slice(-LOG_LINES - 1).join("\n") || "(empty)";
}

// ---- cluster -----------------------------------------------------------------------------------
function holderText(holders) {
  return holders.map((h) => (h.milli && h.milli < 1000 ? `${h.entry} (${h.team}, ${h.milli}m)` : `${h.entry} (${h.team})`))
    .join(", ");
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
    : shared ? `${usedMilli}m of 1000m` : holders.map((h) => h.entry).join(" ");
  const text = describe(node, gpu, shared ? "shared GPU" : "GPU", holders, state);
  if (view.selected === gpu.id) $("cell-detail").textContent = text; // the selection follows its device
  const cls = `cell ${state}${shared && state === "free" ? " share" : ""}`;
  const button = el("button", { type: "button", class: cls, title: text, "aria-pressed": String(view.selected === gpu.id),
    dataset: { device: gpu.id, state, entry: holders.map((h) => h.entry).join(" ") },
    onclick: (ev) => { select(text, gpu.id); markPressed(ev.currentTarget); } },
  el("span", { class: "idx" }, `GPU ${index}`), el("span", { class: "what" }, label),
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

// MIG instances whose placements are not published (the stock plugin): grouped by model, layout unknown.
function migCell(node, model, slices, off) {
  const items = slices.map((m) => el("li", {}, migButton(node, m, off)));
  const used = slices.filter((m) => (m.holders || []).length).length;
  return el("li", { class: "cell mig" }, el("span", { class: "idx" }, `${shortModel(model)} MIG: ${used}/${slices.length} in use`),
    el("ul", { class: "slices" }, items),
    el("span", { class: "layout-note" }, "layout not known: the node's device plugin publishes no placements"));
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
    r && el("span", { class: "relayout", role: "status" },
      `re-layout in progress: ${(r.creates && r.creates.length ? r.creates : r.layout || []).join(", ")}`
      + (r.phase ? ` (${r.phase})` : "")));
}

let drawnCluster = "";

function renderCluster() {
  const key = JSON.stringify([view.nodes, view.selected]);
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
      el("ul", { class: "cells", "aria-label": `Devices of ${node.name || node.id}` }, cells));
  });
  redraw($("nodes"), tiles);
}

// ---- teams, sweeps, history ------------------------------------------------------------------------
function bar(value, quota, fair, scale) {
  const b = el("div", { class: "bar", "aria-hidden": "true" }, el("span", { class: "in" }));
  const pct = (v) => `${Math.min(100, (100 * v) / (scale || 1))}%`;
  b.firstChild.style.setProperty("width", pct(value));
  if (fair) { const m = el("span", { class: "mark" }); m.style.setProperty("left", pct(fair)); b.append(m); }
  if (quota !== null && quota !== undefined) {
    const q = el("span", { class: "mark quota" }); q.style.setProperty("left", pct(quota)); b.append(q);
  }
  return b;
}

function renderTeams(capacity) {
  const num = (v) => (v === null || v === undefined ? "none" : Number(v).toFixed(Number(v) % 1 ? 2 : 0));
  $("team-rows").replaceChildren(...view.teams.map((t) => el("tr", {},
    el("th", { scope: "row", "data-label": "Team" }, t.team),
    el("td", { class: "num", "data-label": "In use" }, `${num(t.in_use_gpu)} GPU`),
    el("td", { class: "num", "data-label": "Quota" }, t.quota_gpu === null ? "no quota" : `${num(t.quota_gpu)} GPU`),
    el("td", { class: "num", "data-label": "Fair share" }, `${num(t.fair_share_gpu)} GPU`),
    el("td", { class: "num", "data-label": "Queued" }, t.queued),
    el("td", { class: "num", "data-label": "Running" }, t.live),
    el("td", { "data-label": "Use" }, bar(t.in_use_gpu, t.quota_gpu, t.fair_share_gpu, capacity)))));
}

async function refreshSweeps() {
  // the service's list of the token's sweeps (GET /v1/sweeps), not what this tab happened to see
  const listed = (await api("/v1/sweeps")).sweeps.slice(0, 20);
  const open = await Promise.all(listed.filter((s) => view.openSweeps.has(s.id))
    .map((s) => api(`/v1/sweeps/${encodeURIComponent(s.id)}`).catch(() => null)));
  for (const detail of open) if (detail) view.sweeps.set(detail.sweep, detail);
  const rows = listed.map((s) => {
    const st = s.states || {}, id = s.id;
    const done = st.complete || 0, ended = (st.failed || 0) + (st.cancelled || 0) + (st["dependency-failed"] || 0);
    const detail = view.openSweeps.has(id) ? view.sweeps.get(id) : null;
    const trials = detail ? (detail.trials || []).slice(0, TRIALS_LISTED).map((t) => el("li", {}, `${t.name}: `,
      el("span", { class: `state ${t.state}` }, t.state))) : [el("li", {}, "…")];
    const more = detail && detail.total > TRIALS_LISTED ? el("li", {}, `… and ${detail.total - TRIALS_LISTED} more`) : null;
    return el("tr", { dataset: { sweep: id, done: done + ended } }, el("th", { scope: "row", "data-label": "Sweep" },
      el("details", { open: view.openSweeps.has(id), ontoggle: (ev) => {
        const was = view.openSweeps.has(id);
        if (ev.currentTarget.open) view.openSweeps.add(id); else view.openSweeps.delete(id);
        if (ev.currentTarget.open && !was) refreshSweeps().catch(() => {});
      } }, el("summary", {}, `${s.name} `, el("span", { class: "devices" }, `${id} · ${s.team}`)),
      el("ul", { class: "trials" }, trials, more))),
      el("td", { class: "num", "data-label": "Trials" }, s.trials),
      el("td", { class: "num", "data-label": "Done" }, done),
      el("td", { class: "num", "data-label": "Running" }, (st.admitted || 0) + (st.running || 0)),
      el("td", { class: "num", "data-label": "Queued" }, st.queued || 0),
      el("td", { class: "num", "data-label": "Failed or cancelled" }, ended),
      el("td", { "data-label": "Progress" }, el("progress", { max: s.trials, value: done + ended,
        "aria-label": `${id}: ${done + ended} of ${s.trials} trials ended` })));
  });
  redraw($("sweep-rows"), rows);
  $("sweeps-empty").hidden = rows.length > 0;
  document.querySelector("table.sweeps").hidden = rows.length === 0;
}

async function refreshHistory() {
  const h = await api("/v1/history");
  window.NomadGpuCharts.draw($("chart"), h);
  const last = h.minutes[h.minutes.length - 1];
  const caption = $("chart-caption");
  caption.replaceChildren(
    el("span", { class: "key s-gpus", "aria-hidden": "true" }), "GPUs in use",
    el("span", { class: "key s-queued", "aria-hidden": "true" }), "queue depth",
    el("span", { class: "key s-admitted", "aria-hidden": "true" }), "admissions per minute. ",
    last ? `Last minute: ${last.gpus_in_use} GPUs in use, ${last.queued} queued, ${last.admitted} admitted `
      + `(${h.minutes.length} minutes recorded).` : "No samples yet.");
}

// ---- the loop ------------------------------------------------------------------------------------
function showAlert(text) {
  $("alert").textContent = text || "";
  $("alert").hidden = !text;
}

function clearData() {
  view.entries = []; view.nodes = []; view.teams = []; view.sweeps.clear();
  drawnCluster = "";
  for (const id of ["queue-rows", "nodes", "team-rows", "sweep-rows"]) $(id).replaceChildren();
}

async function refresh() {
  const [status, jobs, inventory, teams] = await Promise.all([api("/v1/status"),
    api("/v1/jobs?state=queued,admitted,running&eta=true"), api("/v1/inventory"), api("/v1/teams")]);
  Object.assign(view, { status, entries: jobs.entries, nodes: inventory.nodes, teams: teams.teams });
  let newSweep = false;  // a sweep not listed yet: read the list now, not at the next sweep read
  for (const e of view.entries) {
    if (e.sweep && !view.sweeps.has(e.sweep)) { view.sweeps.set(e.sweep, null); newSweep = true; }
  }
  $("s-queued").textContent = status.queued;
  $("s-live").textContent = status.live;
  const inUse = Object.values(status.team_usage_gpu || {}).reduce((a, b) => a + Number(b), 0);
  $("s-gpus").textContent = `${Math.round(inUse * 100) / 100} of ${Math.round(teams.capacity_gpu * 100) / 100}`;
  $("s-nodes").textContent = status.nodes;
  $("s-nomad").textContent = status.nomad_reachable ? "reachable" : "unreachable: admissions paused";
  renderQueue();
  renderCluster();
  renderTeams(teams.capacity_gpu);
  await refreshJob().catch((err) => { $("job-alert").textContent = err.message; $("job-alert").hidden = false; });
  const now = Date.now();
  if (newSweep || now - lastSweeps >= SWEEPS_EVERY_MS) { lastSweeps = now; await refreshSweeps(); }
  if (now - lastHistory >= HISTORY_EVERY_MS) { lastHistory = now; await refreshHistory(); }
}

let delay = POLL_MS;

async function tick() {
  clearTimeout(timer);
  const started = performance.now();
  try {
    await refresh();
    // a refresh that takes long (a very long queue, a busy service) spaces the next ones out
    delay = Math.max(POLL_MS, 4 * (performance.now() - started));
    showAlert("");
    $("conn").textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = "true";
  } catch (err) {
    if (err instanceof Refused) {
      sessionStorage.removeItem(TOKEN_KEY); // a refused token is not kept for the next load
      clearData();
      document.body.dataset.loaded = "refused";
      $("conn").textContent = "not signed in";
      showAlert(err.message);
      $("token").focus();
      return; // wait for a new token
    }
    $("conn").textContent = "service unreachable, retrying";
    showAlert(`Could not refresh: ${err.message}`);
  }
  timer = setTimeout(tick, delay);
}

function start() {
  $("poll-s").textContent = String(POLL_MS / 1000);
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = $("token").value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    lastHistory = 0; lastSweeps = 0;
    tick();
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); clearData(); tick(); });
  for (const id of ["f-team", "f-state", "f-sweep"]) $(id).addEventListener("change", renderQueue);
  $("filters").addEventListener("submit", (ev) => ev.preventDefault());
  $("queue-more").addEventListener("click", () => { view.allRows = !view.allRows; renderQueue(); });
  $("job-close").addEventListener("click", closeJob);
  tick();
}

start();
