// The Agent Sandbox console: plain JavaScript, no build step.
//
// The API key lives in sessionStorage (this tab only) and travels as the X-API-KEY header,
// never in a URL. The list is a long poll of api/state (the gateway answers when the view
// changes); rows are keyed by sandbox id and only changed cells are touched, so a thousand
// sandboxes re-render in milliseconds.
"use strict";

(() => {
  const KEY_STORAGE = "agent-sandbox-console-key";
  const KEY_PATTERN = /^e2b_[0-9a-f]{40}$/;
  const RETRY_MS = 2000;
  const $ = (id) => document.getElementById(id);

  const ui = {
    signIn: $("sign-in"), form: $("key-form"), key: $("api-key"), keyError: $("key-error"),
    console: $("console"), who: $("who"), signOut: $("sign-out"), status: $("status"),
    count: $("count"), filter: $("filter"), rows: $("sandboxes").tBodies[0], empty: $("empty"),
    pools: $("pools").tBodies[0], details: $("details"), detailsTitle: $("details-title"),
    dName: $("d-name"), facts: $("d-facts"), events: $("events").tBodies[0],
    eventsNote: $("events-note"), log: $("log"), logNote: $("log-note"),
    refresh: $("refresh"), close: $("close"),
    actions: Array.from(document.querySelectorAll("[data-action]")),
  };

  let key = sessionStorage.getItem(KEY_STORAGE);
  let polling = null; // AbortController of the running poll loop
  let rows = new Map(); // id -> {tr, cells, data}
  let current = { sandboxes: [], pools: [] };
  let selected = null; // id of the sandbox shown in the details panel
  let busy = false; // an action is in flight
  // read by the browser test, which prints the figures (and by anyone curious, in devtools)
  window.consoleStats = { renders: 0, firstRenderMs: 0, lastRenderMs: 0, rows: 0 };
  const KINDS = { gateway: "gateway", "pool-member": "pool member", sandbox: "Sandbox" };

  // -- formatting -------------------------------------------------------------------------
  function duration(ms) {
    if (!(ms >= 0)) return "—";
    const s = Math.floor(ms / 1000);
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${s % 60}s`;
    const h = Math.floor(m / 60);
    if (h < 24) return `${h}h ${m % 60}m`;
    return `${Math.floor(h / 24)}d ${h % 24}h`;
  }
  const since = (iso) => (iso ? duration(Date.now() - Date.parse(iso)) : "—");
  const idle = (r) => (r.state === "Running" ? since(r.activeAt) : "—");
  const setText = (el, text) => { if (el.textContent !== text) el.textContent = text; };

  // -- talking to the gateway -------------------------------------------------------------
  async function api(path, options = {}) {
    const headers = Object.assign({ "X-API-KEY": key }, options.headers || {});
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (response.status === 401) {
      signOut("The gateway refused this API key.");
      throw new Error("unauthorized");
    }
    return response;
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      return body.message || `HTTP ${response.status}`;
    } catch (_) {
      return `HTTP ${response.status}`;
    }
  }

  async function poll(signal) {
    let tag = null;
    while (!signal.aborted) {
      try {
        const headers = tag ? { "X-Console-Known": tag } : {};
        const response = await api("api/state", { headers, signal });
        if (response.status === 204) continue; // nothing changed during the poll
        if (!response.ok) throw new Error(await errorText(response));
        const data = await response.json();
        tag = data.tag;
        render(data);
      } catch (err) {
        if (signal.aborted) return;
        announce(`Connection to the gateway lost (${err.message}); retrying.`);
        await new Promise((done) => setTimeout(done, RETRY_MS));
      }
    }
  }

  // -- the list ---------------------------------------------------------------------------
  function newRow(id) {
    const tr = document.createElement("tr");
    tr.dataset.id = id;
    const head = document.createElement("th");
    head.scope = "row";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "row";
    button.textContent = id;
    head.append(button);
    tr.append(head);
    const cells = {};
    for (const name of ["state", "kind", "template", "pool", "age", "idle", "reason"]) {
      const td = document.createElement("td");
      if (name === "reason") td.className = "wrap";
      tr.append(td);
      cells[name] = td;
    }
    const badge = document.createElement("span");
    cells.state.append(badge);
    cells.badge = badge;
    return { tr, cells, button, data: null };
  }

  function fillRow(row, r) {
    const c = row.cells;
    setText(c.badge, r.state);
    const cls = `state state-${r.state}`;
    if (c.badge.className !== cls) c.badge.className = cls;
    setText(c.kind, KINDS[r.kind] || r.kind);
    setText(c.template, r.template || "—");
    setText(c.pool, r.pool || "—");
    setText(c.age, since(r.created));
    setText(c.idle, idle(r));
    setText(c.reason, r.reason || "");
    row.data = r;
  }

  function matches(r, needle) {
    if (!needle) return true;
    return [r.id, r.state, r.template, r.pool].some((v) => v && v.toLowerCase().includes(needle));
  }

  function render(data) {
    const started = performance.now();
    current = data;
    ui.who.textContent = `Namespace ${data.namespace}`;
    const seen = new Set();
    let previous = null;
    const needle = ui.filter.value.trim().toLowerCase();
    let shown = 0;
    for (const r of data.sandboxes) {
      seen.add(r.id);
      let row = rows.get(r.id);
      if (!row) {
        row = newRow(r.id);
        rows.set(r.id, row);
      }
      if (row.data !== r) fillRow(row, r);
      const visible = matches(r, needle);
      if (row.tr.hidden === visible) row.tr.hidden = !visible;
      if (visible) shown += 1;
      // move only rows that are out of place: a steady list costs no DOM writes
      const expected = previous ? previous.nextSibling : ui.rows.firstChild;
      if (expected !== row.tr) ui.rows.insertBefore(row.tr, expected);
      previous = row.tr;
    }
    for (const [id, row] of rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        rows.delete(id);
      }
    }
    const total = data.sandboxes.length;
    setText(ui.count, needle ? `(${shown} of ${total})` : `(${total})`);
    ui.empty.hidden = total !== 0;
    renderPools(data.pools);
    renderSelected();
    const stats = window.consoleStats;
    if (stats.renders === 0) {
      announce(`${total} ${total === 1 ? "sandbox" : "sandboxes"} in namespace ${data.namespace}.`);
    }
    stats.renders += 1;
    stats.lastRenderMs = performance.now() - started;
    if (stats.renders === 1) stats.firstRenderMs = stats.lastRenderMs;
    stats.rows = total;
  }

  function renderPools(pools) {
    ui.pools.replaceChildren(...pools.map((p) => {
      const tr = document.createElement("tr");
      const head = document.createElement("th");
      head.scope = "row";
      head.textContent = p.name;
      const state = document.createElement("span");
      state.className = `state state-${p.state}`;
      state.textContent = p.state;
      const cells = [p.template || "—", `${p.ready} of ${p.replicas}`, state, since(p.created)];
      tr.append(head, ...cells.map((value) => {
        const td = document.createElement("td");
        td.append(value);
        return td;
      }));
      return tr;
    }));
  }

  function tick() {
    for (const row of rows.values()) {
      if (!row.data || row.tr.hidden) continue;
      setText(row.cells.age, since(row.data.created));
      setText(row.cells.idle, idle(row.data));
    }
  }

  function applyFilter() {
    render(current);
  }

  // -- the details panel ------------------------------------------------------------------
  function rowData(id) {
    const row = rows.get(id);
    return row ? row.data : null;
  }

  function select(id) {
    if (selected && rows.has(selected)) rows.get(selected).tr.removeAttribute("aria-current");
    selected = id;
    rows.get(id).tr.setAttribute("aria-current", "true");
    ui.details.hidden = false;
    renderSelected();
    ui.detailsTitle.focus();
    loadDetails();
  }

  function closeDetails() {
    const id = selected;
    if (id && rows.has(id)) rows.get(id).tr.removeAttribute("aria-current");
    selected = null;
    ui.details.hidden = true;
    if (id && rows.has(id)) rows.get(id).button.focus();
  }

  let lastState = null;
  function renderSelected() {
    if (!selected) return;
    const r = rowData(selected);
    if (!r) {
      announce(`Sandbox ${selected} is gone.`);
      selected = null;
      ui.details.hidden = true;
      return;
    }
    setText(ui.dName, r.id);
    const facts = [
      ["State", r.state], ["Kind", r.kind], ["Claim", r.claim], ["Sandbox", r.sandbox],
      ["Pod", r.pod], ["Pool", r.pool], ["Template", r.template], ["Created", r.created],
      ["Age", since(r.created)], ["Idle", idle(r)], ["Reason", r.reason],
    ];
    ui.facts.replaceChildren(...facts.flatMap(([label, value]) => {
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      dd.textContent = value || "—";
      return [dt, dd];
    }));
    for (const button of ui.actions) {
      const action = button.dataset.action;
      const why = r.actions[action];
      button.disabled = busy || Boolean(why);
      button.title = why || "";
      const note = $(`why-${action}`);
      note.hidden = !why;
      setText(note, why ? `${button.textContent}: ${why}` : "");
    }
    if (lastState !== null && lastState !== `${r.id}:${r.state}`) loadDetails();
    lastState = `${r.id}:${r.state}`;
  }

  async function loadDetails() {
    const id = selected;
    if (!id) return;
    ui.eventsNote.textContent = "Loading events…";
    let response;
    try {
      response = await api(`api/sandboxes/${encodeURIComponent(id)}`);
    } catch (err) {
      ui.eventsNote.textContent = `Could not load events: ${err.message}`;
      return;
    }
    if (id !== selected) return;
    if (!response.ok) {
      ui.eventsNote.textContent = await errorText(response);
      return;
    }
    const body = await response.json();
    ui.events.replaceChildren(...body.events.map((e) => {
      const tr = document.createElement("tr");
      const when = e.count > 1 ? `${since(e.time)} ago (×${e.count})` : `${since(e.time)} ago`;
      for (const [i, value] of [when, e.type, e.reason, e.object, e.message].entries()) {
        const cell = document.createElement(i === 0 ? "th" : "td");
        if (i === 0) cell.scope = "row";
        if (i === 4) cell.className = "wrap";
        cell.textContent = value;
        tr.append(cell);
      }
      return tr;
    }));
    ui.eventsNote.textContent = body.eventsError || (body.events.length ? "" : "No recent events.");
    ui.log.textContent = body.log.lines.join("\n");
    ui.log.hidden = body.log.lines.length === 0;
    ui.logNote.textContent = body.log.unavailable || (body.log.lines.length ? "" : "The log is empty.");
  }

  const PAST = { suspend: "Suspended", resume: "Resumed", delete: "Deleted" };
  const PRESENT = {
    suspend: "Suspending", resume: "Resuming", delete: "Deleting", snapshot: "Taking a snapshot of",
  };

  async function act(action) {
    const id = selected;
    if (!id || busy) return;
    if (action === "delete" && !window.confirm(`Delete sandbox ${id}? This cannot be undone.`)) return;
    busy = true;
    renderSelected();
    announce(`${PRESENT[action]} ${id}…`);
    const path = `api/sandboxes/${encodeURIComponent(id)}`;
    try {
      const response = action === "delete"
        ? await api(path, { method: "DELETE" })
        : await api(`${path}/${action}`, { method: "POST" });
      if (!response.ok) {
        announce(`${action} ${id} failed: ${await errorText(response)}`);
      } else if (action === "snapshot") {
        const taken = await response.json();
        announce(`Snapshot ${taken.snapshotID} of ${id} is ready: ${taken.image}.`);
      } else {
        announce(`${PAST[action]} ${id}.`);
      }
    } catch (err) {
      announce(`${action} ${id} failed: ${err.message}`);
    } finally {
      busy = false;
      renderSelected();
      // the pressed button was disabled while busy, which drops the focus: bring it back
      if (selected && !ui.details.contains(document.activeElement)) ui.detailsTitle.focus();
    }
  }

  function announce(text) {
    ui.status.textContent = text;
  }

  // -- signing in and out -----------------------------------------------------------------
  function signIn(value) {
    key = value;
    sessionStorage.setItem(KEY_STORAGE, key);
    ui.signIn.hidden = true;
    ui.console.hidden = false;
    ui.signOut.hidden = false;
    announce("Loading sandboxes…");
    polling = new AbortController();
    poll(polling.signal).then(() => undefined);
    ui.filter.focus();
  }

  function signOut(message) {
    if (polling) polling.abort();
    polling = null;
    key = null;
    sessionStorage.removeItem(KEY_STORAGE);
    rows = new Map();
    window.consoleStats = { renders: 0, firstRenderMs: 0, lastRenderMs: 0, rows: 0 };
    ui.rows.replaceChildren();
    ui.pools.replaceChildren();
    selected = null;
    ui.details.hidden = true;
    ui.console.hidden = true;
    ui.signOut.hidden = true;
    ui.who.textContent = "";
    ui.signIn.hidden = false;
    ui.keyError.textContent = message || "";
    ui.key.value = "";
    ui.key.focus();
  }

  ui.form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = ui.key.value.trim();
    if (!KEY_PATTERN.test(value)) {
      ui.keyError.textContent = "An API key is e2b_ followed by 40 lowercase hexadecimal digits.";
      ui.key.setAttribute("aria-invalid", "true");
      ui.key.focus();
      return;
    }
    ui.key.removeAttribute("aria-invalid");
    ui.keyError.textContent = "";
    signIn(value);
  });
  ui.signOut.addEventListener("click", () => signOut(""));
  ui.filter.addEventListener("input", applyFilter);
  ui.rows.addEventListener("click", (event) => {
    const button = event.target.closest("button.row");
    if (button) select(button.closest("tr").dataset.id);
  });
  // arrow keys move between the rows' buttons (one Tab stop per row is too many for 1,000)
  ui.rows.addEventListener("keydown", (event) => {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const tr = event.target.closest("tr");
    if (!tr) return;
    let next = event.key === "ArrowDown" ? tr.nextElementSibling : tr.previousElementSibling;
    while (next && next.hidden) {
      next = event.key === "ArrowDown" ? next.nextElementSibling : next.previousElementSibling;
    }
    if (next) {
      event.preventDefault();
      next.querySelector("button.row").focus();
    }
  });
  for (const button of ui.actions) button.addEventListener("click", () => act(button.dataset.action));
  ui.refresh.addEventListener("click", loadDetails);
  ui.close.addEventListener("click", closeDetails);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && selected) closeDetails();
  });
  setInterval(tick, 1000);

  if (key && KEY_PATTERN.test(key)) signIn(key);
  else ui.key.focus();
})();
