// The Inlet console: one page, hash routes, plain JavaScript (no build step). It reads the
// node's own endpoints: /v1/cluster, /v1/topics, /v1/tables, /v1/groups, /v1/schemas, /metrics,
// /v1/history (the last hour the charts start from) and POST /v1/query. With authentication on, it logs in for a bearer token
// (/iceberg/v1/oauth/tokens) and keeps it for the browser tab.
"use strict";

const page = document.getElementById("page");
let timers = [];

function clearTimers() {
  timers.forEach(clearInterval);
  timers = [];
}

// Runs `f` now and every `ms` while the page is shown; a failed run shows its reason in the
// page's status line instead of an unhandled rejection.
function every(ms, f) {
  const run = () => Promise.resolve().then(f).then(
    () => { const s = document.getElementById("poll-status"); if (s) s.textContent = ""; },
    (e) => { const s = document.getElementById("poll-status"); if (s) s.textContent = String(e.message || e); });
  run();
  timers.push(setInterval(run, ms));
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function token() { return sessionStorage.getItem("inlet.token"); }

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, Object.assign({}, options, { headers }));
  const text = await response.text();
  if (response.status === 401) {
    showLogin();
    throw new Error("log in first");
  }
  let body = text;
  try { body = JSON.parse(text); } catch (_) { /* text */ }
  if (!response.ok) throw new Error((body && body.error && (body.error.message || body.error)) || text || response.statusText);
  return body;
}

function sql(query) {
  return api("/v1/query", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ sql: query }),
  });
}

function showLogin() {
  const dialog = document.getElementById("login");
  if (!dialog.open) dialog.showModal();
}

document.getElementById("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = new FormData(e.target);
  const body = new URLSearchParams({
    grant_type: "client_credentials", client_id: form.get("user"), client_secret: form.get("password"),
  });
  const r = await fetch("/iceberg/v1/oauth/tokens", { method: "POST", body });
  const answer = await r.json().catch(() => ({}));
  if (!r.ok) {
    document.getElementById("login-error").textContent = answer.error_description || "refused";
    return;
  }
  sessionStorage.setItem("inlet.token", answer.access_token);
  document.getElementById("login").close();
  route();
});

function fmtNumber(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + units[i];
}
function fmtTime(ms) { return ms === null || ms === undefined ? "–" : new Date(Number(ms)).toISOString().replace(".000", ""); }

function tableOf(columns, rows, { numeric = [], id } = {}) {
  const t = h("table", id ? { id } : {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: numeric.includes(c) ? "num" : "" }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((cell, i) => h("td", { class: numeric.includes(columns[i]) ? "num" : "" }, cell))))));
  return t;
}

function card(label, value, id) {
  return h("div", { class: "card" }, h("div", { class: "value", id }, value), h("div", { class: "label" }, label));
}

// A line chart of series [{name, color, points: [[t, v]]}] as SVG; its value axis starts at 0,
// or (zero: false, for times such as watermarks) at the smallest value.
function chart(series, { width = 560, height = 160, id, zero = true } = {}) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  if (id) svg.setAttribute("id", id);
  const all = series.flatMap((s) => s.points);
  if (all.length > 1) {
    const t0 = Math.min(...all.map((p) => p[0])); const t1 = Math.max(...all.map((p) => p[0]));
    const vmin = zero ? 0 : Math.min(...all.map((p) => p[1]));
    const span = Math.max(1, Math.max(...all.map((p) => p[1])) - vmin);
    for (const s of series) {
      const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      line.setAttribute("stroke", s.color);
      line.setAttribute("points", s.points.map(([t, v]) =>
        `${((t - t0) / Math.max(1, t1 - t0)) * (width - 10) + 5},${height - 5 - ((v - vmin) / span) * (height - 10)}`).join(" "));
      svg.append(line);
    }
  }
  return svg;
}

// Sums of the counters in Prometheus text, by metric name.
function counters(text, names) {
  const out = Object.fromEntries(names.map((n) => [n, 0]));
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const name = line.split(/[{ ]/)[0];
    if (name in out) out[name] += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return out;
}

async function metricsText() {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const r = await fetch("/metrics", { headers });
  if (r.status === 401) { showLogin(); throw new Error("log in first"); }
  return r.text();
}

// The node's last hour of series under `prefix` (`/v1/history`); empty when the node keeps none
// or the viewer may not read them, so a chart then starts when the page opened.
async function history(prefix) {
  try {
    const r = await api(`/v1/history?prefix=${encodeURIComponent(prefix)}`);
    return r.series || {};
  } catch (_) { return {}; }
}

// Keeps a chart's live points within the last hour.
function trim(points, now) {
  while (points.length && points[0][0] < now - 3600000) points.shift();
}

function failure(e) { return h("p", { class: "error" }, String(e.message || e)); }

// --- pages ------------------------------------------------------------------------------------

async function overview() {
  const [cluster, topics, tables] = await Promise.all([api("/v1/cluster"), api("/v1/topics"), api("/v1/tables")]);
  const live = (cluster.nodes || []).filter((n) => n.live).length;
  const throughput = h("div", {});
  page.replaceChildren(
    h("h1", {}, "Overview"),
    h("div", { class: "cards" },
      card("nodes live", `${live} of ${(cluster.nodes || []).length}`, "nodes-live"),
      card("topics", topics.length, "topic-count"),
      card("table topics", Object.keys(tables).length, "table-count"),
      card("records produced", "–", "records-produced")),
    h("h2", {}, "Throughput"), throughput);
  const past = await history("node:");
  const points = { in: (past["node:produced_bytes_per_s"] || []).slice(), out: (past["node:fetched_bytes_per_s"] || []).slice() };
  let last = null;
  every(2000, async () => {
    const m = counters(await metricsText(), ["inlet_kafka_produced_bytes_total", "inlet_kafka_fetched_bytes_total", "inlet_kafka_produced_records_total"]);
    const now = Date.now();
    document.getElementById("records-produced").textContent = fmtNumber(m.inlet_kafka_produced_records_total);
    if (last) {
      const dt = (now - last.t) / 1000;
      points.in.push([now, (m.inlet_kafka_produced_bytes_total - last.m.inlet_kafka_produced_bytes_total) / dt]);
      points.out.push([now, (m.inlet_kafka_fetched_bytes_total - last.m.inlet_kafka_fetched_bytes_total) / dt]);
      trim(points.in, now); trim(points.out, now);
    }
    last = { t: now, m };
    const rate = (p) => (p.length ? fmtBytes(p[p.length - 1][1]) + "/s" : "–");
    throughput.replaceChildren(
      h("p", { class: "legend" }, h("span", { style: "color:#0b6bcb" }, `in ${rate(points.in)}`), h("span", { style: "color:#9a6700" }, `out ${rate(points.out)}`)),
      chart([{ color: "#0b6bcb", points: points.in }, { color: "#9a6700", points: points.out }], { id: "throughput-chart" }));
  });
}

async function topicsPage() {
  const topics = await api("/v1/topics");
  page.replaceChildren(h("h1", {}, "Topics"), tableOf(
    ["topic", "partitions", "records", "table"],
    topics.map((t) => [t.name, t.partitions.length,
      fmtNumber(t.partitions.reduce((s, p) => s + ((p.end || 0) - (p.start || 0)), 0)),
      t.table ? h("a", { href: `#/tables/${t.table}` }, t.table) : "–"]),
    { numeric: ["partitions", "records"], id: "topics" }));
}

async function tablesPage() {
  const tables = await api("/v1/tables");
  const names = Object.keys(tables).sort();
  page.replaceChildren(h("h1", {}, "Table topics"), names.length === 0 ? h("p", { class: "muted" }, "No table topics on this node.") : tableOf(
    ["table", "records behind", "commits", "failed commits", "last commit", "watermark", "dead-letter files"],
    names.map((n) => {
      const s = tables[n];
      return [h("a", { href: `#/tables/${n}` }, n), fmtNumber(s.records_behind), fmtNumber(s.commits), fmtNumber(s.failed_commits),
        fmtTime(s.last_commit_ms), fmtTime(s.watermark_ms), fmtNumber(s.pending_dead_letter_files)];
    }),
    { numeric: ["records behind", "commits", "failed commits", "dead-letter files"], id: "tables" }));
}

function sizeBuckets(files) {
  const bounds = [[1 << 20, "< 1 MiB"], [8 << 20, "1–8 MiB"], [32 << 20, "8–32 MiB"], [128 << 20, "32–128 MiB"], [Infinity, "≥ 128 MiB"]];
  const counts = bounds.map(() => 0);
  for (const f of files) counts[bounds.findIndex(([b]) => f.file_size_in_bytes < b)]++;
  return bounds.map(([, label], i) => [label, counts[i]]);
}

const COLORS = ["#0b6bcb", "#1a7f37", "#9a6700", "#b42318", "#6f42c1", "#0e7490", "#a16207", "#be185d"];

async function tablePage(name) {
  const dot = name.lastIndexOf(".");
  const [ns, table] = [name.slice(0, dot), name.slice(dot + 1)];
  const quoted = name.replace(/'/g, "''");
  const statusPath = `/v1/tables/${encodeURIComponent(ns)}/${encodeURIComponent(table)}`;
  const watermarkPath = `/v1/watermarks/${encodeURIComponent(ns)}/${encodeURIComponent(table)}`;
  const [status, snapshots, files, topics] = await Promise.all([
    api(statusPath),
    sql(`SELECT committed_at, CAST(snapshot_id AS VARCHAR) AS snapshot_id, operation, summary['added-records'] AS added_records, summary['total-records'] AS total_records, summary['added-data-files'] AS added_files FROM snapshots('${quoted}') ORDER BY committed_at DESC LIMIT 10`),
    sql(`SELECT content, file_path, record_count, file_size_in_bytes FROM files('${quoted}')`),
    api("/v1/topics"),
  ]);
  const topic = topics.find((t) => t.table === name);
  const deadLetters = topic && topic.dead_letter_table;
  let lastErrors = [];
  if (deadLetters) {
    // The dead-letter table exists once it took its first file.
    const dlq = deadLetters.replace(/'/g, "''");
    const exists = await sql(`SELECT count(*) AS n FROM information_schema.tables WHERE table_schema || '.' || table_name = '${dlq}'`);
    if (exists.length && Number(exists[0].n) > 0) {
      lastErrors = await sql(`SELECT "partition", "offset", error FROM ${deadLetters} ORDER BY "offset" DESC LIMIT 5`);
    }
  }
  const partitions = Object.keys(status.end_offsets || {}).sort((a, b) => a - b);
  const watermark = h("div", {});
  const lag = h("div", {});
  page.replaceChildren(
    h("h1", {}, name),
    h("div", { class: "cards" },
      card("records behind", fmtNumber(status.records_behind), "records-behind"),
      card("rows", fmtNumber(snapshots.length ? snapshots[0].total_records : 0), "table-rows"),
      card("files", fmtNumber(files.length), "table-files"),
      card("commits since start", fmtNumber(status.commits), "table-commits"),
      card("dead-letter files waiting", fmtNumber(status.pending_dead_letter_files), "dead-letters")),
    h("h2", {}, "Partitions"),
    tableOf(["partition", "committed", "end", "behind", "unconverted bytes"], partitions.map((p) => {
      const c = (status.committed_offsets || {})[p] || 0; const e = status.end_offsets[p];
      return [p, fmtNumber(c), fmtNumber(e), fmtNumber(e - c), fmtBytes((status.lag_bytes || {})[p])];
    }), { numeric: ["partition", "committed", "end", "behind", "unconverted bytes"], id: "partitions" }),
    h("h2", {}, "Watermark per partition"), watermark,
    h("h2", {}, "Commit lag and freshness"), lag,
    h("h2", {}, "Last commits"),
    tableOf(["committed at", "snapshot", "operation", "records added", "files added", "rows after"],
      snapshots.map((s) => [s.committed_at, s.snapshot_id, s.operation, fmtNumber(s.added_records), fmtNumber(s.added_files), fmtNumber(s.total_records)]),
      { numeric: ["records added", "files added", "rows after"], id: "snapshots" }),
    h("h2", {}, "File sizes"),
    tableOf(["size", "files"], sizeBuckets(files), { numeric: ["files"], id: "file-sizes" }),
    h("h2", {}, "Dead letters"),
    !deadLetters ? h("p", { class: "muted", id: "dead-letter-errors" }, "This table topic keeps no dead-letter table (table.topic.errors.tolerance=none).")
      : lastErrors.length === 0 ? h("p", { class: "muted", id: "dead-letter-errors" }, `No record in ${deadLetters}.`)
        : tableOf(["partition", "offset", "error"], lastErrors.map((r) => [r.partition, r.offset, r.error]), { id: "dead-letter-errors" }),
    ...(status.held_by_dead_letters ? [h("p", { class: "error" }, "Commits are held: the dead-letter table refuses its files.")] : []));
  // The last hour from the node's history, then a point every 2 s while the page is open.
  const past = await history(`table:${name}:`);
  const byPartition = {};
  const partitionPrefix = `table:${name}:partition_watermark_ms:`;
  for (const [series, points] of Object.entries(past)) {
    if (series.startsWith(partitionPrefix)) byPartition[series.slice(partitionPrefix.length)] = points.slice();
  }
  const tableWatermark = (past[`table:${name}:watermark_ms`] || []).slice();
  const behind = (past[`table:${name}:records_behind`] || []).slice();
  const age = (past[`table:${name}:seconds_since_commit`] || []).slice();
  every(2000, async () => {
    const [s, w] = await Promise.all([api(statusPath), api(watermarkPath)]);
    const now = Date.now();
    for (const [p, ms] of Object.entries(w.partitions || {})) {
      (byPartition[p] = byPartition[p] || []).push([now, ms]);
      trim(byPartition[p], now);
    }
    if (w.watermark_ms !== null && w.watermark_ms !== undefined) tableWatermark.push([now, w.watermark_ms]);
    behind.push([now, s.records_behind || 0]);
    age.push([now, s.seconds_since_commit || 0]);
    trim(tableWatermark, now); trim(behind, now); trim(age, now);
    const parts = Object.keys(byPartition).sort((a, b) => a - b);
    watermark.replaceChildren(
      h("p", { id: "watermark" }, `table: ${fmtTime(w.watermark_ms)}`),
      h("p", { class: "legend", id: "partition-watermarks" },
        h("span", { style: "color:#555" }, "table"),
        parts.map((p, i) =>
          h("span", { style: `color:${COLORS[i % COLORS.length]}` }, `partition ${p}: ${fmtTime(w.partitions[p])}`))),
      chart([{ color: "#555", points: tableWatermark }, ...parts.map((p, i) => ({ color: COLORS[i % COLORS.length], points: byPartition[p] }))],
        { height: 120, id: "watermark-chart", zero: false }));
    lag.replaceChildren(
      h("p", { class: "legend" },
        h("span", { style: "color:#b42318" }, `records behind ${fmtNumber(s.records_behind)}`),
        h("span", { style: "color:#6f42c1" }, `seconds since the last commit ${s.seconds_since_commit === null ? "–" : s.seconds_since_commit.toFixed(1)}`)),
      chart([{ color: "#b42318", points: behind }], { height: 80, id: "behind-chart" }),
      chart([{ color: "#6f42c1", points: age }], { height: 80, id: "freshness-chart" }));
  });
}

async function schemasPage() {
  const subjects = await api("/v1/schemas");
  page.replaceChildren(h("h1", {}, "Schemas"), tableOf(
    ["subject", "versions", "latest id", "type", "compatibility"],
    subjects.map((s) => [h("a", { href: `#/schemas/${encodeURIComponent(s.subject)}` }, s.subject), s.versions.join(", "), s.id, s.type, s.compatibility]),
    { id: "schemas" }));
}

async function schemaPage(subject) {
  const subjects = await api("/v1/schemas");
  const s = subjects.find((x) => x.subject === subject);
  if (!s) throw new Error(`no subject ${subject}`);
  const path = `/v1/schemas/${encodeURIComponent(subject)}`;
  const latest = await api(`${path}/versions/latest`);
  const pick = (id, v) => h("select", { id }, s.versions.map((n) => { const o = h("option", { value: n }, `version ${n}`); if (n === v) o.selected = true; return o; }));
  const from = pick("diff-from", s.versions[Math.max(0, s.versions.length - 2)]);
  const to = pick("diff-to", s.versions[s.versions.length - 1]);
  const lines = h("pre", { id: "diff" });
  const show = async () => {
    const d = await api(`${path}/diff?from=${from.value}&to=${to.value}`);
    lines.replaceChildren(...(d.lines.length ? d.lines : ["no field changes"]).map((l) =>
      h("div", { class: l.startsWith("+") ? "diff-add" : l.startsWith("-") ? "diff-del" : l.startsWith("~") ? "diff-chg" : "" }, l)));
  };
  from.addEventListener("change", show); to.addEventListener("change", show);
  let text = latest.schema;
  try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* Protobuf */ }
  page.replaceChildren(
    h("h1", {}, subject),
    h("p", { class: "muted" }, `${s.type}, compatibility ${s.compatibility}, latest version ${latest.version} (id ${latest.id})`),
    h("h2", {}, "Field changes"), h("p", {}, from, " → ", to), lines,
    h("h2", {}, "Latest schema"), h("pre", { id: "schema-text" }, text));
  await show();
}

async function groupsPage() {
  const groups = await api("/v1/groups");
  if (groups.length === 0) {
    page.replaceChildren(h("h1", {}, "Consumer groups"), h("p", { class: "muted" }, "No consumer group on this node."));
    return;
  }
  const cell = (v) => (v === null || v === undefined ? "–" : typeof v === "number" ? fmtNumber(v) : v);
  const past = await history("group:");
  const lagChart = (g) => {
    const points = (past[`group:${g.group}:lag`] || []).concat([[Date.now(), g.lag]]);
    return h("div", {}, h("p", { class: "legend" }, h("span", { style: "color:#b42318" }, `lag over the last hour, now ${fmtNumber(g.lag)}`)),
      chart([{ color: "#b42318", points }], { height: 80, id: `group-lag-${g.group}` }));
  };
  page.replaceChildren(h("h1", {}, "Consumer groups"),
    tableOf(["group", "state", "members", "lag"], groups.map((g) => [g.group, g.state, g.members.length, fmtNumber(g.lag)]),
      { numeric: ["members", "lag"], id: "groups" }),
    ...groups.flatMap((g) => [
      h("h2", {}, g.group),
      lagChart(g),
      g.members.length === 0 ? h("p", { class: "muted" }, "No members.")
        : tableOf(["member", "client id", "host", "partitions"], g.members.map((m) => [m.member, m.client_id, m.host, m.partitions]),
          { numeric: ["partitions"] }),
      tableOf(["topic", "partition", "committed", "end", "lag", "member"],
        g.partitions.map((p) => [p.topic, p.partition, cell(p.committed), cell(p.end), cell(p.lag), p.member || "–"]),
        { numeric: ["partition", "committed", "end", "lag"], id: `group-${g.group}` }),
    ]));
}

function sqlPage() {
  const box = h("textarea", { id: "sql-text", spellcheck: "false" }, "SELECT 1 AS one");
  const out = h("div", { id: "sql-result" });
  const run = async () => {
    out.replaceChildren(h("p", { class: "muted" }, "running…"));
    try {
      const rows = await sql(box.value);
      const columns = rows.length ? Object.keys(rows[0]) : [];
      out.replaceChildren(h("p", { class: "muted" }, `${rows.length} rows`),
        tableOf(columns, rows.map((r) => columns.map((c) => (r[c] === null ? "null" : typeof r[c] === "object" ? JSON.stringify(r[c]) : r[c])))));
    } catch (e) { out.replaceChildren(failure(e)); }
  };
  page.replaceChildren(h("h1", {}, "SQL"), h("p", { class: "muted" }, "Read-only queries over the node's tables (namespace.table), as inlet query runs them."),
    box, h("p", {}, h("button", { id: "sql-run", onclick: run }, "Run")), out);
}

async function clusterPage() {
  const c = await api("/v1/cluster");
  const owned = c.owned_by_this_node || {};
  const partitions = Object.entries(c.partitions || {}).flatMap(([topic, ps]) => ps.map((p) => [topic, p.partition, p.owner, p.epoch, p.weight]));
  page.replaceChildren(h("h1", {}, "Cluster"),
    tableOf(["node", "kafka", "http", "live", "lease expires", "this node"],
      (c.nodes || []).map((n) => [n.node_id, n.kafka, n.http, n.live ? "yes" : "no", fmtTime(n.lease_expires_ms), n.this_node ? "yes" : ""]), { id: "nodes" }),
    h("h2", {}, "Partition owners"),
    tableOf(["topic", "partition", "owner", "epoch", "weight"], partitions, { numeric: ["partition", "epoch", "weight"], id: "owners" }),
    h("h2", {}, "Group owners"),
    (c.groups || []).length === 0 ? h("p", { class: "muted", id: "group-owners" }, "No consumer group has been coordinated yet.")
      : tableOf(["group", "owner", "epoch"], c.groups.map((g) => [g.group, `node ${g.owner}`, g.epoch]), { numeric: ["epoch"], id: "group-owners" }),
    h("h2", {}, "This node runs"),
    h("p", {}, `groups: ${(owned.groups || []).join(", ") || "none"}; tables: ${(owned.tables || []).join(", ") || "none"}`),
    h("h2", {}, "Moves in the last hour"),
    (c.moves || []).length === 0 ? h("p", { class: "muted", id: "moves" }, "No partition or group changed node in the last hour.")
      : tableOf(["at", "kind", "what", "from", "to", "epoch"], c.moves.map((m) => [fmtTime(m.at_ms), m.kind,
        m.topic !== null && m.topic !== undefined ? `${m.topic}/${m.partition}` : m.name,
        m.from === null ? "–" : `node ${m.from}`, m.to === null ? "given up" : `node ${m.to}`, m.epoch]),
      { numeric: ["epoch"], id: "moves" }));
}

// --- routing ----------------------------------------------------------------------------------

async function route() {
  clearTimers();
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ""));
  const [section, ...rest] = hash.split("/");
  const arg = rest.join("/");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === (section || "overview"));
  page.replaceChildren(h("p", { class: "muted" }, "loading…"));
  try {
    switch (section) {
      case "": await overview(); break;
      case "topics": await topicsPage(); break;
      case "tables": await (arg ? tablePage(arg) : tablesPage()); break;
      case "schemas": await (arg ? schemaPage(arg) : schemasPage()); break;
      case "groups": await groupsPage(); break;
      case "sql": sqlPage(); break;
      case "cluster": await clusterPage(); break;
      default: page.replaceChildren(h("h1", {}, "Not found"), h("p", {}, `No page ${hash}.`));
    }
    page.dataset.loaded = hash || "overview";
  } catch (e) {
    page.replaceChildren(failure(e));
    page.dataset.loaded = "error";
  }
}

window.addEventListener("hashchange", route);
route();
