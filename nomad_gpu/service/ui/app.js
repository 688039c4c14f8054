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

const PAGE_ROWS = 20;
const HOURS_EVERY_MS = 30000;
// entries: the queue page shown; live: every admitted or running entry (their names label the GPU cells)
const view = { entries: [], live: [], names: new Map(), more: false, page: 0, nodes: [], status: {}, teams: [],
  sweeps: new Map(), sweepList: [], confirmSweep: null, selected: null, openSweeps: new Set(),
  openDevices: new Set(), job: null };
let lastHistory = 0;
let lastSweeps = 0;
let lastHours = 0;
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
  const sweepRow = node.closest && node.closest("tr[data-sweep]");
  if (sweepRow && node.tagName === "BUTTON") {  // a sweep's cancel, or its confirm step's answers
    const part = node.dataset.confirm ? `[data-confirm="${CSS.escape(node.dataset.confirm)}"]` : "button.cancel-sweep";
    return `tr[data-sweep="${CSS.escape(sweepRow.dataset.sweep)}"] ${part}`;
  }
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

// preempting: its GPUs are taken back for a waiting job; it holds them until Nomad stopped it
function isLive(entry) { return ["admitted", "running", "preempting"].includes(entry.state); }

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

// One page of the queue in the order the scheduler decides in (`sort=position`: queued entries by their
// place, then those it does not consider, then running), cut by the API's limit and offset; one entry
// more than a page tells whether a next page exists. The filters are the API's own.
function queueQuery() {
  const team = $("f-team").value, state = $("f-state").value, sweep = $("f-sweep").value;
  const q = new URLSearchParams({ state: state === "live" ? "admitted,running,preempting"
    : state || "queued,admitted,running,preempting",
    eta: "true", sort: "position" });
  if (team) q.set("team", team);
  if (sweep && sweep !== "-") q.set("sweep", sweep);
  if (sweep !== "-") { q.set("limit", String(PAGE_ROWS + 1)); q.set("offset", String(view.page * PAGE_ROWS)); }
  return `/v1/jobs?${q}`;
}

async function refreshQueue() {
  for (;;) {
    const query = queueQuery();
    let got = (await api(query)).entries;
    if (query !== queueQuery()) return;  // a filter or the page changed meanwhile: the next refresh reads it
    if ($("f-sweep").value === "-") {  // "not in a sweep" is no API filter: that list is paged here
      got = got.filter((e) => !e.sweep).slice(view.page * PAGE_ROWS, (view.page + 1) * PAGE_ROWS + 1);
    }
    if (got.length || view.page === 0) {
      view.more = got.length > PAGE_ROWS;
      view.entries = got.slice(0, PAGE_ROWS);
      return;
    }
    view.page -= 1;  // the page shown emptied (its entries ran or ended): show the last one left
  }
}

// A filter changed: the first page, at once from what this tab holds (the running entries are all here),
// then as the API answers.
function filtered() {
  const team = $("f-team").value, state = $("f-state").value, sweep = $("f-sweep").value;
  view.page = 0;
  view.entries = (state === "live" ? view.live : view.entries).filter((e) => (!team || e.team === team)
    && (!state || (state === "live" ? isLive(e) : e.state === state))
    && (!sweep || (sweep === "-" ? !e.sweep : e.sweep === sweep))).slice(0, PAGE_ROWS);
  renderQueue();
  tick();
}

function renderPager() {
  const first = view.page * PAGE_ROWS + 1, last = view.page * PAGE_ROWS + view.entries.length;
  const total = view.status.queued + view.status.live;
  const filtered = $("f-team").value || $("f-state").value || $("f-sweep").value;
  $("queue-count").textContent = !view.entries.length ? ""
    : `Entries ${first}–${last}${!filtered && view.who && view.who.admin && total >= last ? ` of ${total}` : ""}`
      + (view.page > 0 || view.more ? `, page ${view.page + 1}` : "");
  $("queue-prev").disabled = view.page === 0;
  $("queue-next").disabled = !view.more;
}

function renderQueue() {
  const now = Date.now() / 1000;
  fillSelect($("f-team"), view.teams.map((t) => t.team).filter((t) => t !== "another team"), 1);
  fillSelect($("f-sweep"), view.sweepList.map((s) => s.id), 2);
  const rows = view.entries.map((e) => {
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
      if (e.state === "preempting") {  // stopping with its checkpoint grace for the job its reason names
        where.push(el("div", { class: "preempting-note" }, e.reason || "preempting"));
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
      if (u && u.idle_note) {  // its class's idle reclaim: "idle 25 min: will be stopped in 5 min if a job is waiting"
        where.push(el("div", { class: "idle-note" }, u.idle_note));
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
  renderPager();
}

// ---- one job ---------------------------------------------------------------------------------------
// The detail view: the entry as the service keeps it, what Nomad holds for it (allocations, the HCL it
// registered, the log's last lines) and the actions its state allows. Refreshed with the page.
const LOG_LINES = 20;
const ACTIONS = { queued: ["hold", "release", "cancel"], admitted: ["requeue", "cancel"], running: ["requeue", "cancel"],
  preempting: ["cancel"] };

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
  if (e.preemptions) facts.push(["Preempted", `${e.preemptions} time(s), no retry used`]);
  for (const w of e.warnings || []) facts.push(["Warning", w]);
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

// a team of a cohort: what it borrows past its quota, or lends of its unused quota (docs/cohorts.md)
function lending(t, num) {
  if (!t.cohort) return "";
  if (t.borrowed_gpu > 0) return ` · borrows ${num(t.borrowed_gpu)} from ${t.cohort}`;
  if (t.lent_gpu > 0) return ` · lends ${num(t.lent_gpu)} to ${t.cohort}`;
  return ` · cohort ${t.cohort}`;
}

function renderTeams(capacity) {
  const num = (v) => (v === null || v === undefined ? "none" : Number(v).toFixed(Number(v) % 1 ? 2 : 0));
  $("team-rows").replaceChildren(...view.teams.map((t) => el("tr", {},
    el("th", { scope: "row", "data-label": "Team" }, t.team),
    el("td", { class: "num", "data-label": "In use" }, `${num(t.in_use_gpu)} GPU`),
    el("td", { class: "num", "data-label": "Quota" },
      t.quota_gpu === null ? "no quota" : `${num(t.quota_gpu)} GPU${lending(t, num)}`),
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
  view.sweepList = listed;
  renderSweeps();
}

// A sweep's unfinished trials cancelled in one action (DELETE /v1/sweeps/ID), after a confirm step in its row.
function cancelCell(s) {
  const st = s.states || {}, unfinished = (st.queued || 0) + (st.admitted || 0) + (st.running || 0);
  if (!unfinished) return "–";
  const trials = `${unfinished} unfinished trial${unfinished === 1 ? "" : "s"}`;
  if (view.confirmSweep !== s.id) {
    return el("button", { type: "button", class: "cancel-sweep", "aria-label": `Cancel sweep ${s.name} (${s.id})…`,
      onclick: () => { view.confirmSweep = s.id; renderSweeps(); focusIn(s.id, "[data-confirm=yes]"); } },
    "Cancel sweep…");
  }
  return el("div", { class: "confirm", role: "group", "aria-label": `Cancel sweep ${s.name}?` },
    el("span", {}, `Cancel ${trials} of ${s.name}? Running ones are stopped.`),
    el("button", { type: "button", class: "danger", dataset: { confirm: "yes" }, onclick: () => cancelSweep(s.id) },
      "Yes, cancel the sweep"),
    el("button", { type: "button", dataset: { confirm: "no" },
      onclick: () => { view.confirmSweep = null; renderSweeps(); focusIn(s.id, "button.cancel-sweep"); } }, "Keep it"));
}

function focusIn(sweep, css) {
  const target = document.querySelector(`#sweep-rows tr[data-sweep="${CSS.escape(sweep)}"] ${css}`);
  if (target) target.focus();
}

async function cancelSweep(id) {
  view.confirmSweep = null;
  try {
    await api(`/v1/sweeps/${encodeURIComponent(id)}`, "DELETE");
    $("sweeps-alert").hidden = true;
  } catch (err) {
    $("sweeps-alert").textContent = `cancel ${id}: ${err.message}`;
    $("sweeps-alert").hidden = false;
  }
  lastSweeps = 0;
  await tick();
}

function renderSweeps() {
  const rows = view.sweepList.map((s) => {
    const st = s.states || {}, id = s.id;
    const done = st.complete || 0, ended = (st.failed || 0) + (st.cancelled || 0) + (st["dependency-failed"] || 0) + (st.reclaimed || 0);
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
        "aria-label": `${id}: ${done + ended} of ${s.trials} trials ended` })),
      el("td", { "data-label": "Cancel", class: "cancel" }, cancelCell(s)));
  });
  redraw($("sweep-rows"), rows);
  $("sweeps-empty").hidden = rows.length > 0;
  document.querySelector("table.sweeps").hidden = rows.length === 0;
}

async function refreshHours() {
  const since = $("hours-since").value;
  const [byTeam, byClass] = await Promise.all([api(`/v1/usage?by=team&since=${encodeURIComponent(since)}`),
    api(`/v1/usage?by=class&since=${encodeURIComponent(since)}`)]);
  const helpers = { el, duration };
  window.NomadGpuHours.draw($("hours-team").tBodies[0], byTeam, "Team", helpers);
  window.NomadGpuHours.draw($("hours-class").tBodies[0], byClass, "Class", helpers);
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
  view.entries = []; view.live = []; view.names = new Map(); view.nodes = []; view.teams = []; view.sweeps.clear();
  view.sweepList = []; view.who = null; view.page = 0;
  drawnCluster = "";
  for (const id of ["queue-rows", "nodes", "team-rows", "sweep-rows"]) $(id).replaceChildren();
  for (const t of ["hours-team", "hours-class"]) $(t).tBodies[0].replaceChildren();
  $("who").hidden = true;
}

// Whose view this is: the token's team, or an admin's (every team).
function renderWho(who) {
  view.who = who;
  $("who").textContent = (who.user ? `${who.user}, ` : "") + (who.admin ? "admin: every team" : `team ${who.team}`);
  $("who").dataset.team = who.admin ? "" : who.team;
  $("who").hidden = false;
}

async function refresh() {
  const [status, live, inventory, teams, who] = await Promise.all([api("/v1/status"),
    api("/v1/jobs?state=admitted,running,preempting"), api("/v1/inventory"), api("/v1/teams"), api("/v1/whoami"),
    refreshQueue()]);
  Object.assign(view, { status, live: live.entries, nodes: inventory.nodes, teams: teams.teams });
  view.names = new Map([...view.live, ...view.entries].map((e) => [e.id, e.name]));
  renderWho(who);
  let newSweep = false;  // a sweep not listed yet: read the list now, not at the next sweep read
  for (const e of [...view.live, ...view.entries]) {
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
  if (now - lastHours >= HOURS_EVERY_MS) { lastHours = now; await refreshHours(); }
}

let delay = POLL_MS;

// One refresh at a time: a refresh asked for while one runs (a filter, a page, a cancel) follows it.
let inFlight = null;
let again = false;

function tick() {
  if (inFlight) { again = true; return inFlight; }
  inFlight = refreshOnce().finally(() => {
    inFlight = null;
    if (again) { again = false; tick(); }
  });
  return inFlight;
}

async function refreshOnce() {
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
    lastHistory = 0; lastSweeps = 0; lastHours = 0;
    tick();
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); clearData(); tick(); });
  for (const id of ["f-team", "f-state", "f-sweep"]) $(id).addEventListener("change", filtered);
  $("filters").addEventListener("submit", (ev) => ev.preventDefault());
  $("queue-prev").addEventListener("click", () => { view.page = Math.max(0, view.page - 1); tick(); });
  $("queue-next").addEventListener("click", () => { view.page += 1; tick(); });
  $("hours-since").addEventListener("change", () => { lastHours = 0; tick(); });
  $("hours-form").addEventListener("submit", (ev) => ev.preventDefault());
  $("job-close").addEventListener("click", closeJob);
  tick();
}

start();
