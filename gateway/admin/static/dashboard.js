// tiergate cost dashboard: fetch /admin/api/*, draw with Chart.js, refresh on a timer.
// usd(), moneyAxis() and moneyTooltip() come from money.js.
"use strict";

const $ = (id) => document.getElementById(id);
// Okabe–Ito: distinguishable with the common colour-vision deficiencies.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
const charts = {};
let timer = null;

const isoDay = (d) => d.toISOString().slice(0, 10);

function setRange(days) {
  const end = new Date();
  const start = new Date(end.getTime() - (days - 1) * 86400000);
  $("start").value = isoDay(start);
  $("end").value = isoDay(end);
}

async function getJSON(path) {
  const query = new URLSearchParams({ start: $("start").value, end: $("end").value });
  const res = await fetch(`/admin/api/${path}?${query}`, { credentials: "same-origin" });
  if (res.status === 401) {
    location.reload(); // the session ended: back to the login form
    throw new Error("session ended");
  }
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? body.error.message : res.statusText);
  return body;
}

function datasets(series, extra = {}) {
  return Object.entries(series).map(([label, data], i) => ({
    label, data, backgroundColor: PALETTE[i % PALETTE.length], borderColor: PALETTE[i % PALETTE.length], ...extra,
  }));
}

// Screen readers get the numbers through the canvas's label.
function describe(chart) {
  const { labels, datasets: sets } = chart.data;
  const parts = sets.map((s) => `${s.label}: ` + s.data.map((v, i) => `${labels[i]} ${v ?? "none"}`).join(", "));
  chart.canvas.setAttribute("aria-label", `${chart.canvas.dataset.title}. ${parts.join("; ")}`);
}

function draw(id, type, labels, sets, options = {}) {
  const canvas = $(id);
  canvas.dataset.title ??= canvas.getAttribute("aria-label");
  const data = { labels, datasets: sets };
  if (charts[id]) {
    charts[id].data = data;
    charts[id].update();
  } else {
    charts[id] = new Chart(canvas, {
      type, data,
      options: { animation: false, maintainAspectRatio: false, plugins: { legend: { position: "bottom" } }, ...options },
    });
  }
  describe(charts[id]);
}

const stacked = { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } };
const horizontal = { indexAxis: "y", scales: { x: { beginAtZero: true } } };
// Money charts: axis ticks and tooltips through usd() (Chart.js would print 6.000000E-6).
const money = (options) => {
  const axis = options.indexAxis === "y" ? "x" : "y";
  const scales = { ...(options.scales || {}) };
  scales[axis] = { ...(scales[axis] || {}), ...moneyAxis() };
  return { ...options, scales, plugins: { legend: { position: "bottom" }, tooltip: moneyTooltip() } };
};

function drawOverview(o) {
  const t = o.totals;
  $("kpi-cost").textContent = usd(t.cost_usd);
  $("kpi-requests").textContent = t.requests.toLocaleString();
  $("kpi-routing").textContent = usd(t.saved_routing_usd);
  // Next to the money: what routing is expected to cost in answer quality.
  const e = o.objective && o.objective.expected;
  $("kpi-quality").textContent = e
    ? `${(100 * e.quality_given_up).toFixed(1)} pts (${(100 * e.quality).toFixed(1)} vs ${(100 * e.quality_always_largest).toFixed(1)} % acceptable, last ${(o.objective.window_s / 3600).toFixed(1)} h)`
    : "–";
  $("kpi-cache").textContent = usd(t.saved_cache_usd);
  $("kpi-batch").textContent = `${usd(t.saved_batch_usd)} (${t.batch_requests.toLocaleString()} lines)`;
  const x = o.escalation;
  $("kpi-escalation").textContent = x.judged
    ? `${(100 * x.rate).toFixed(1)} % re-asked (${x.escalated.toLocaleString()} of ${x.judged.toLocaleString()}), ${x.kept.toLocaleString()} kept, +${usd(x.added_usd)}`
    : "–";
  $("kpi-hit").textContent = (100 * o.cache.hit_rate).toFixed(1) + " %";
  $("kpi-denied").textContent = `${t.denied_budget} / ${t.denied_rate_limit}`;

  draw("chart-spend", "bar", o.days, datasets(o.spend), money(stacked));
  draw("chart-tiers", "line", o.days, datasets(o.requests_by_tier), { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } });
  draw("chart-mix", "doughnut", Object.keys(o.tier_mix), [{ label: "requests", data: Object.values(o.tier_mix), backgroundColor: PALETTE }]);
  draw("chart-savings", "bar", ["Always large", "tiergate"], datasets({
    "Spent": [t.baseline_usd, t.cost_usd],
    "Saved by routing": [0, t.saved_routing_usd],
    "Saved by caching": [0, t.saved_cache_usd],
    "Saved by batch prices": [0, t.saved_batch_usd],
  }), money({ ...horizontal, scales: { x: { stacked: true, beginAtZero: true }, y: { stacked: true } } }));
  const c = o.cache;
  draw("chart-cache", "doughnut", ["exact hit", "semantic hit", "miss", "bypass"],
    [{ label: "requests", data: [c.exact, c.semantic, c.miss, c.bypass], backgroundColor: PALETTE }]);

  const rows = o.budgets;
  const budgetSets = { "Used (USD)": rows.map((r) => r.used_usd) };
  if (rows.some((r) => r.limit_usd !== null)) budgetSets["Limit (USD)"] = rows.map((r) => r.limit_usd);
  draw("chart-budget", "bar", rows.map((r) => `${r.tenant} (${r.window})`), datasets(budgetSets), money(horizontal));
  draw("chart-tenants", "bar", o.top_tenants.map((r) => r.tenant), datasets({ "Spend (USD)": o.top_tenants.map((r) => r.cost_usd) }), money(horizontal));
  draw("chart-models", "bar", o.top_models.map((r) => r.model), datasets({ "Requests": o.top_models.map((r) => r.requests) }),
    { indexAxis: "y", scales: { x: { beginAtZero: true, ticks: { precision: 0 } } } });
}

function drawLatency(latency) {
  const tiers = Object.keys(latency);
  const pick = (name) => tiers.map((tier) => latency[tier][name]);
  draw("chart-latency", "bar", tiers, datasets({
    "latency p50": pick("latency_p50_ms"), "latency p99": pick("latency_p99_ms"),
    "TTFT p50": pick("ttft_p50_ms"), "TTFT p99": pick("ttft_p99_ms"),
  }), { scales: { y: { beginAtZero: true } } });
}

const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + " %");

function drawShare(share) {
  const body = $("tier-share").tBodies[0];
  body.replaceChildren();
  if (!share) return;
  for (const r of share.tiers) {
    const tr = body.insertRow();
    for (const text of [r.tier, pct(r.target), pct(r.actual), r.requests.toLocaleString()]) {
      tr.insertCell().textContent = text;
    }
  }
  const [low, high] = share.thresholds.map((v) => v.toFixed(3));
  const hours = (share.window_s / 3600).toFixed(1);
  $("share-caption").textContent = `Tier share: target vs actual, last ${hours} h ` +
    `(${share.samples} scores; thresholds ${low} / ${high} from ${share.source.replace("_", " ")})`;
}

function drawDenials(denials) {
  const body = $("denials").tBodies[0];
  body.replaceChildren();
  for (const r of denials) {
    const tr = body.insertRow();
    const when = new Date(r.ts * 1000).toISOString().replace("T", " ").slice(0, 19);
    for (const text of [when, r.tenant, r.key_id, r.reason.replace("_", " "), r.tier, r.request_id]) {
      tr.insertCell().textContent = text;
    }
  }
  if (!denials.length) {
    const cell = body.insertRow().insertCell();
    cell.colSpan = 6;
    cell.className = "empty";
    cell.textContent = "No denials in this range.";
  }
}

// Batches per tenant: progress, spend at batch prices, and what interactive prices would have cost.
function drawBatches(body) {
  const table = $("batches").tBodies[0];
  table.replaceChildren();
  for (const t of body.tenants) {
    for (const b of t.batches) {
      const when = new Date(b.created_at * 1000).toISOString().replace("T", " ").slice(0, 19);
      const progress = `${b.done.toLocaleString()} / ${b.total.toLocaleString()}` +
        (b.failed + b.cancelled + b.expired ? ` (${b.failed + b.cancelled + b.expired} not answered)` : "");
      const cells = [t.tenant, b.id, b.endpoint, b.status.replace("_", " "), progress, when,
        usd(b.cost_usd), usd(b.interactive_usd), usd(b.saved_usd)];
      const tr = table.insertRow();
      for (const text of cells) tr.insertCell().textContent = text;
    }
  }
  if (!body.tenants.length) {
    const cell = table.insertRow().insertCell();
    cell.colSpan = 9;
    cell.className = "empty";
    cell.textContent = "No batches.";
  }
}

const ms = (v) => (v === null || v === undefined ? "–" : `≤ ${v}`);

// Rows of cells into a table's body, or one cell saying there is nothing.
function fillTable(id, rows, empty) {
  const body = $(id).tBodies[0];
  body.replaceChildren();
  for (const cells of rows) {
    const tr = body.insertRow();
    for (const text of cells) tr.insertCell().textContent = typeof text === "number" ? text.toLocaleString() : text;
  }
  if (!rows.length) {
    const cell = body.insertRow().insertCell();
    cell.colSpan = $(id).tHead.rows[0].cells.length;
    cell.className = "empty";
    cell.textContent = empty;
  }
}

function drawTools(t, recent) {
  $("kpi-tools").textContent = `${t.calls.toLocaleString()} (${usd(t.cost_usd)})`;
  fillTable("tools", t.tools.map((r) => [r.tool, r.calls, r.errors,
    r.mean_ms === null ? "–" : r.mean_ms.toFixed(1), usd(r.cost_usd)]), "No MCP tool calls in this range.");
  fillTable("tool-calls", recent.map((r) => [
    new Date(r.ts * 1000).toISOString().replace("T", " ").slice(0, 19), r.tenant, r.key_id,
    `${r.server}.${r.tool}`, r.status.replace("_", " "), r.duration_ms.toFixed(1), r.result_bytes, usd(r.cost_usd),
  ]), "No MCP tool calls in this range.");
}

function drawCache(cache) {
  const body = $("cache-tenants").tBodies[0];
  body.replaceChildren();
  const tenants = cache ? Object.entries(cache.tenants) : [];
  for (const [tenant, row] of tenants) {
    const s = row.shared;
    const refused = Object.entries(s.refused).map(([k, v]) => `${k.replace("_", " ")} ${v}`).join(", ");
    const v = s.verifier;
    const tr = body.insertRow();
    for (const text of [tenant, s.lookups, s.exact_hits, s.semantic_hits, refused || "none",
      v.calls, `${ms(v.p50_ms)} / ${ms(v.p99_ms)}`]) {
      tr.insertCell().textContent = typeof text === "number" ? text.toLocaleString() : text;
    }
  }
  if (!tenants.length) {
    const cell = body.insertRow().insertCell();
    cell.colSpan = 7;
    cell.className = "empty";
    cell.textContent = cache ? "No tenant uses the cache." : "The prompt cache is off.";
  }
}

async function cacheFigures() {
  const res = await fetch("/admin/api/cache", { credentials: "same-origin" });
  return res.ok ? res.json() : null; // 503: the cache is off or its store is down
}

// routing.feedback: labels gathered, and each refit's hold-out numbers before and after.
const num = (v, digits = 3) => (v === null || v === undefined ? "\u2013" : v.toFixed(digits));

function beforeAfter(metrics, name, fmt) {
  const before = metrics[`${name}_serving`] ?? metrics[`${name}_base`];
  return `${fmt(before)} \u2192 ${fmt(metrics[`${name}_refit`])}`;
}

function drawFeedback(f) {
  $("feedback").hidden = !f.enabled;
  if (!f.enabled) return;
  const tiers = f.tiers.filter((t) => f.labels.ever.some((r) => r.tier === t)); // cheapest first
  const count = (tier, verdict) => f.labels.ever
    .filter((r) => r.tier === tier && r.verdict === verdict).reduce((n, r) => n + r.count, 0);
  draw("chart-labels", "bar", tiers, datasets({
    "acceptable": tiers.map((t) => count(t, "good")), "not acceptable": tiers.map((t) => count(t, "bad")),
  }), { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } } });
  const bySource = (source) => f.labels.ever.filter((r) => r.source === source).reduce((n, r) => n + r.count, 0);
  $("feedback-summary").textContent = `${f.labels.kept.toLocaleString()} labels kept (at most ` +
    `${f.labels.max.toLocaleString()}); ever: ${bySource("judge").toLocaleString()} from the judge, ` +
    `${bySource("client").toLocaleString()} from clients. Shadow share ${pct(f.sample)}; ` +
    `serving version ${f.serving_version}.`;
  const body = $("refits").tBodies[0];
  body.replaceChildren();
  for (const r of f.refits) {
    const m = r.metrics;
    const when = new Date(r.ts * 1000).toISOString().replace("T", " ").slice(0, 19);
    const cells = [when, r.decision.replace("_", " "), `${r.trained} / ${r.held_out}`,
      beforeAfter(m, "loss", num), beforeAfter(m, "accuracy", pct),
      beforeAfter(m, "pairs_accuracy", pct), beforeAfter(m, "pairs_cost", pct), String(r.version), r.reason];
    const tr = body.insertRow();
    for (const text of cells) tr.insertCell().textContent = text;
  }
  if (!f.refits.length) {
    const cell = body.insertRow().insertCell();
    cell.colSpan = 9;
    cell.className = "empty";
    cell.textContent = "No refit yet.";
  }
}

// guardrails: counts by type and action on this replica (never a value), the screen's time.
function drawGuardrails(g) {
  const found = g.detections.reduce((n, r) => n + r.count, 0);
  const blocked = g.detections.filter((r) => r.action === "block").reduce((n, r) => n + r.count, 0);
  const types = [...new Set(g.detections.map((r) => r.type))].sort().join(", ");
  $("kpi-guardrails").textContent = g.screens
    ? `${found.toLocaleString()} found${types ? ` (${types})` : ""}, ${blocked.toLocaleString()} blocked, ` +
      `${Math.round(g.screen_mean_us)} \u00b5s a screen`
    : "\u2013";
}

async function refresh() {
  $("status").textContent = "Loading…";
  try {
    const [overview, denials, cache, feedback, tools, batches, guard] = await Promise.all(
      [getJSON("overview"), getJSON("denials"), cacheFigures(), getJSON("feedback"), getJSON("tool_calls"),
        getJSON("batches"), getJSON("guardrails")]);
    drawOverview(overview);
    drawLatency(overview.latency);
    drawShare(overview.tier_share);
    drawDenials(denials.denials);
    drawBatches(batches);
    drawTools(overview.tool_calls, tools.tool_calls);
    drawCache(cache);
    drawFeedback(feedback);
    drawGuardrails(guard);
    $("status").textContent = `${overview.range.start} to ${overview.range.end} (UTC), updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = `${overview.range.start}/${overview.range.end}`;
  } catch (err) {
    $("status").textContent = `Could not load: ${err.message}`;
  }
}

function schedule() {
  clearInterval(timer);
  const seconds = Number($("refresh").value);
  if (seconds > 0) timer = setInterval(() => { if (!document.hidden) refresh(); }, seconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  setRange(7);
  for (const button of document.querySelectorAll("button[data-days]")) {
    button.addEventListener("click", () => { setRange(Number(button.dataset.days)); refresh(); });
  }
  $("start").addEventListener("change", refresh);
  $("end").addEventListener("change", refresh);
  $("refresh").addEventListener("change", schedule);
  schedule();
  refresh();
});
