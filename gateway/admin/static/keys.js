// tiergate keys page: issue (raw key shown once, with copy), list, edit scope, revoke;
// and the audit log. Talks to /admin/api/keys, /admin/api/tenants, /admin/api/audit.
// usd() comes from money.js.
"use strict";

const $ = (id) => document.getElementById(id);
const when = (iso) => (iso ? iso.replace("T", " ").slice(0, 16) : "–");
const list = (text) => {
  const items = text.split(",").map((s) => s.trim()).filter(Boolean);
  return items.length ? items : null;
};
const number = (text) => (text.trim() === "" ? null : Number(text));
const epoch = (local) => (local ? Date.parse(local + "Z") / 1000 : null); // the input is UTC
let keys = [];

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) {
    location.reload(); // the session ended: back to the login form
    throw new Error("session ended");
  }
  const data = await res.json();
  if (!res.ok) throw new Error(data.error ? data.error.message : res.statusText);
  return data;
}

function scopeFields(prefix) {
  const budget = number($(prefix + "budget").value);
  const rpm = number($(prefix + "rpm").value);
  return {
    allowed_tiers: list($(prefix + "tiers").value),
    allowed_models: list($(prefix + "models").value),
    budget: budget === null ? null : { limit_usd: budget, window: "daily" },
    rate_limit: rpm === null ? null : { requests_per_minute: rpm },
    expires_at: epoch($(prefix + "expires").value),
  };
}

function scopeText(k) {
  const parts = [];
  if (k.allowed_tiers) parts.push("tiers: " + k.allowed_tiers.join(", "));
  if (k.allowed_models) parts.push("models: " + k.allowed_models.join(", "));
  if (k.budget) parts.push(`budget: ${usd(k.budget.limit_usd)}/${k.budget.window}`);
  if (k.rate_limit && k.rate_limit.requests_per_minute) parts.push(`${k.rate_limit.requests_per_minute} req/min`);
  return parts.length ? parts.join("; ") : "all";
}

function button(text, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.addEventListener("click", onClick);
  return b;
}

function drawKeys() {
  const body = $("keys").tBodies[0];
  body.replaceChildren();
  for (const k of keys) {
    const tr = body.insertRow();
    tr.dataset.id = k.id;
    const cells = [k.name || "–", k.id, k.tenant, "…" + k.last4, k.status, scopeText(k),
      when(k.created_at), when(k.expires_at), when(k.last_used_at), usd(k.spend_usd)];
    for (const text of cells) tr.insertCell().textContent = text;
    const actions = tr.insertCell();
    if (k.status !== "revoked") {
      actions.append(button("Edit scope", () => startEdit(k)), " ", button("Revoke", () => revoke(k)));
    }
  }
  if (!keys.length) {
    const cell = body.insertRow().insertCell();
    cell.colSpan = 11;
    cell.className = "empty";
    cell.textContent = "No API-managed keys yet.";
  }
}

function drawAudit(entries) {
  const body = $("audit").tBodies[0];
  body.replaceChildren();
  for (const e of entries) {
    const tr = body.insertRow();
    const change = e.after && e.before ? Object.keys(e.after).filter((f) => JSON.stringify(e.after[f]) !== JSON.stringify(e.before[f])).join(", ") : "";
    const at = new Date(e.at * 1000).toISOString().replace("T", " ").slice(0, 19);
    for (const text of [at, e.actor, e.action, e.target, change]) tr.insertCell().textContent = text;
  }
}

async function refresh() {
  try {
    const [tenants, listed, audit] = await Promise.all([
      api("GET", "/admin/api/tenants"), api("GET", "/admin/api/keys"), api("GET", "/admin/api/audit?limit=50"),
    ]);
    const select = $("tenant");
    const chosen = select.value;
    select.replaceChildren(...tenants.data.map((t) => new Option(t.name, t.name)));
    if (chosen) select.value = chosen;
    keys = listed.data;
    drawKeys();
    drawAudit(audit.data);
    $("status").textContent = `${keys.length} keys, updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = String(Date.now());
  } catch (err) {
    $("status").textContent = `Could not load: ${err.message}`;
  }
}

async function create(event) {
  event.preventDefault();
  const body = { tenant: $("tenant").value, name: $("name").value, ...scopeFields("") };
  for (const field of Object.keys(body)) if (body[field] === null) delete body[field];
  try {
    const made = await api("POST", "/admin/api/keys", body);
    $("raw-key").textContent = made.key; // the only time this key is ever shown
    $("copied").textContent = "";
    $("issued").hidden = false;
    $("create").reset();
    await refresh();
    $("status").textContent = `Issued ${made.id}`;
  } catch (err) {
    $("status").textContent = `Could not issue the key: ${err.message}`;
  }
}

async function copyKey() {
  try {
    await navigator.clipboard.writeText($("raw-key").textContent);
    $("copied").textContent = "Copied.";
  } catch (err) {
    $("copied").textContent = `Copy failed (${err.message}): select the key and copy it by hand.`;
  }
}

function dismissKey() {
  $("raw-key").textContent = "";
  $("issued").hidden = true;
}

function startEdit(k) {
  $("edit").hidden = false;
  $("edit").dataset.id = k.id;
  $("edit-id").textContent = k.name ? `${k.name} (${k.id})` : k.id;
  $("edit-tiers").value = (k.allowed_tiers || []).join(", ");
  $("edit-models").value = (k.allowed_models || []).join(", ");
  $("edit-budget").value = k.budget ? k.budget.limit_usd : "";
  $("edit-rpm").value = k.rate_limit && k.rate_limit.requests_per_minute ? k.rate_limit.requests_per_minute : "";
  $("edit-expires").value = k.expires_at ? k.expires_at.slice(0, 16) : "";
  $("edit-tiers").focus();
}

async function saveEdit(event) {
  event.preventDefault();
  const id = $("edit").dataset.id;
  try {
    await api("PATCH", `/admin/api/keys/${encodeURIComponent(id)}`, scopeFields("edit-"));
    $("edit").hidden = true;
    await refresh();
    $("status").textContent = `Saved the scope of ${id}`;
  } catch (err) {
    $("status").textContent = `Could not save: ${err.message}`;
  }
}

async function revoke(k) {
  if (!confirm(`Revoke ${k.name || k.id}? Every replica refuses it within a second.`)) return;
  try {
    await api("DELETE", `/admin/api/keys/${encodeURIComponent(k.id)}`);
    await refresh();
    $("status").textContent = `Revoked ${k.id}`;
  } catch (err) {
    $("status").textContent = `Could not revoke: ${err.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("create").addEventListener("submit", create);
  $("copy").addEventListener("click", copyKey);
  $("dismiss").addEventListener("click", dismissKey);
  $("edit").addEventListener("submit", saveEdit);
  $("edit-cancel").addEventListener("click", () => { $("edit").hidden = true; });
  refresh();
});
