// agent2rl viewer: the pages' script. Read-only: it only GETs the viewer's JSON API.
// Live pages poll a cheap summary and refetch the rest only when its version changes.
"use strict";

const POLL_MS = 2000;

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t * 1000);
  return d.toLocaleTimeString([], { hour12: false });
}
function fmtDur(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(sec).padStart(2, "0")}s` : `${sec}s`;
}
function fmtNum(x, digits) {
  if (x === null || x === undefined) return "–";
  if (typeof x === "number" && digits !== undefined) return x.toFixed(digits);
  return typeof x === "number" ? x.toLocaleString() : String(x);
}
async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) {
    let msg = `${r.status}`;
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.json();
}
function showError(el, err) {
  el.innerHTML = `<span class="error">${esc(err.message || err)}</span>`;
}

// ------------------------------------------------------------------------------------------
// Index: runs and studies

async function indexPage() {
  const runsEl = document.getElementById("runs"), studiesEl = document.getElementById("studies");
  let offset = 0;
  async function refresh() {
    let data;
    try { data = await getJSON(`/api/runs?offset=${offset}`); } catch (e) { showError(runsEl, e); return; }
    document.getElementById("root").textContent = data.root;
    studiesEl.innerHTML = data.studies.length ? `<table><tr><th>study</th><th>slots</th><th>status</th></tr>${data.studies.map((s) =>
      `<tr class="study-row"><td><a href="/study/${encodeURIComponent(s.id)}">${esc(s.name)}</a></td><td>${s.slots}</td>` +
      `<td>${Object.entries(s.counts).map(([k, v]) => `<span class="badge ${esc(k)}">${esc(k)} ${v}</span>`).join(" ")}</td></tr>`).join("")}</table>`
      : '<span class="muted">none</span>';
    runsEl.innerHTML = data.runs.length ? `<table><tr><th>run</th><th>status</th><th>task</th><th>agent</th><th>model</th>` +
      `<th>time left</th><th>submissions</th><th>best</th><th>baseline</th><th>LLM calls</th><th>tokens</th><th>cost</th><th>env steps</th></tr>` +
      data.runs.map((r) => `<tr class="run-row" data-run="${esc(r.run_id)}"><td><a class="run-link" href="/run/${encodeURIComponent(r.run_id)}">${esc(r.run_id)}</a></td>` +
        `<td><span class="badge ${esc(r.status)}">${esc(r.status)}</span></td><td>${esc(r.task)}</td><td>${esc(r.agent)}${r.driver ? " / " + esc(r.driver) : ""}</td>` +
        `<td>${esc(r.model)}</td><td>${r.live ? fmtDur(r.time_left_s) : "–"}</td><td class="n-subs">${r.submissions}</td>` +
        `<td class="best">${fmtNum(r.best, 4)}</td><td>${fmtNum(r.baseline, 4)}</td><td>${r.llm_calls}</td>` +
        `<td>${fmtNum(r.input_tokens + r.output_tokens)}</td><td>$${fmtNum(r.cost_usd, 4)}</td><td>${fmtNum(r.env_steps)}</td></tr>`).join("") + "</table>"
      : '<span class="muted">no runs yet</span>';
    runsEl.insertAdjacentHTML("beforeend", pager(data.offset, data.runs.length, data.total));
  }
  runsEl.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-offset]");
    if (b) { offset = Number(b.dataset.offset); refresh(); }
  });
  await refresh();
  setInterval(refresh, POLL_MS * 2);
}

function pager(offset, shown, total) {
  if (total <= shown && offset === 0) return "";
  const prev = offset > 0 ? `<button data-offset="${Math.max(0, offset - 200)}">newer</button>` : "";
  const next = offset + shown < total ? `<button data-offset="${offset + shown}">older</button>` : "";
  return `<div class="controls pager">${prev}<span class="muted">${offset + 1}–${offset + shown} of ${total}</span>${next}</div>`;
}

// ------------------------------------------------------------------------------------------
// Study: slots pending / running / done / failed with progress

async function studyPage() {
  const name = decodeURIComponent(location.pathname.split("/").pop());
  const slotsEl = document.getElementById("slots");
  let offset = 0;
  slotsEl.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-offset]");
    if (b) { offset = Number(b.dataset.offset); refresh(); }
  });
  async function refresh() {
    let data;
    try { data = await getJSON(`/api/study/${encodeURIComponent(name)}?offset=${offset}`); } catch (e) { showError(slotsEl, e); return; }
    document.getElementById("title").textContent = `study: ${data.name}`;
    document.title = `agent2rl study: ${data.name}`;
    document.getElementById("counts").innerHTML = ["pending", "running", "finished", "failed"].map((k) =>
      `<div class="stat count-${k}"><b>${data.counts[k] || 0}</b><span>${k}</span></div>`).join("");
    slotsEl.innerHTML = `<table><tr><th>#</th><th>slot</th><th>status</th><th>progress</th><th>attempts</th><th>run</th><th>submissions</th><th>best</th><th>error</th></tr>` +
      data.slots.map((s) => `<tr class="slot-row" data-status="${esc(s.status)}"><td>${s.id}</td><td>${esc(s.key)}</td>` +
        `<td><span class="badge ${esc(s.status)}">${esc(s.status)}</span></td>` +
        `<td>${s.progress === null ? "–" : `<span class="progress"><div style="width:${Math.round(s.progress * 100)}%"></div></span>`}</td>` +
        `<td>${s.attempts}</td><td>${s.run_id ? `<a href="/run/${encodeURIComponent(s.run_id)}">${esc(s.run_id)}</a>` : "–"}</td>` +
        `<td>${fmtNum(s.submissions)}</td><td>${fmtNum(s.best, 4)}</td><td class="error">${esc(s.error || "")}</td></tr>`).join("") + "</table>" +
      pager(data.offset, data.slots.length, data.total);
  }
  await refresh();
  setInterval(refresh, POLL_MS * 2);
}

// ------------------------------------------------------------------------------------------
// Run: stats, charts, one timeline

const state = { runId: null, version: null, filter: "all", hits: null, shown: 500, openDiffs: new Set(), openLLM: new Set(), charts: {} };

function evMatchesFilter(e) {
  switch (state.filter) {
    case "all": return true;
    case "error": return Boolean(e.error) || (e.kind === "submission" && e.status === "failed");
    case "tool": return e.kind === "llm" && e.tool_calls && e.tool_calls.length > 0;
    default: return e.kind === state.filter;
  }
}

function renderEvent(e) {
  const err = e.error ? ` err` : "";
  let body = "", head = "";
  if (e.kind === "llm") {
    const tok = `${fmtNum(e.input_tokens)} in / ${fmtNum(e.output_tokens)} out`;
    head = `<span class="kind">LLM</span><span>${esc(e.model || "")}</span><span class="muted">${esc(e.api || "")} ${esc(e.endpoint || "")}</span>` +
      `<span>${tok}</span><span class="muted">${fmtNum(e.latency_s, 2)} s</span><span class="badge ${e.status >= 400 ? "error" : ""}">${e.status}</span>` +
      (e.seq !== null && e.seq !== undefined ? `<button class="link llm-raw" data-index="${e.index}">raw</button>` : "");
    body = (e.input || []).map((m) => `<div class="msg in"><span class="role">${esc(m.role)}:</span> ${esc(m.text)}</div>`).join("") +
      (e.text ? `<div class="msg out"><span class="role">assistant:</span> ${esc(e.text)}</div>` : "") +
      (e.tool_calls || []).map((c) => `<span class="tool">${esc(c.name)}(${esc(c.arguments)})</span>`).join("") +
      (state.openLLM.has(e.index) ? `<pre class="json" data-llm="${e.index}">loading…</pre>` : "");
  } else if (e.kind === "submission") {
    const score = e.score === null || e.score === undefined ? "–" : e.score.toFixed(4);
    head = `<span class="kind">submission #${e.id.slice(4)}</span><span>${esc(e.path)}</span>` +
      `<span class="badge ${esc(e.status)}">${esc(e.status)}</span><span class="score" data-score="${e.score ?? ""}">score ${score}</span>` +
      (e.eval_seconds ? `<span class="muted">eval ${fmtNum(e.eval_seconds, 1)} s</span>` : "") +
      (e.snapshot_id ? `<button class="link code-link" data-target="${esc(e.snapshot_id)}">code ${esc((e.snapshot || "").slice(0, 8))}</button>` : "");
  } else if (e.kind === "snapshot") {
    head = `<span class="kind">code</span><span>${esc(e.message)}</span><span class="muted">${esc(e.sha.slice(0, 8))} ${esc(e.stat || "")}</span>` +
      `<button class="link diff-toggle" data-sha="${esc(e.sha)}">${state.openDiffs.has(e.sha) ? "hide diff" : "diff"}</button>`;
    body = state.openDiffs.has(e.sha) ? `<pre class="diff" data-sha="${esc(e.sha)}">loading…</pre>` : "";
  } else if (e.kind === "env") {
    head = `<span class="kind">rollout</span><span>${esc(e.game_id)}</span><span class="muted">${esc(e.task_type || "")}</span>` +
      `<span>${e.steps} steps</span><span>reward ${fmtNum(e.reward, 2)}</span>${e.won ? '<span class="badge completed">won</span>' : ""}`;
  } else if (e.kind === "rejection") {
    head = `<span class="kind">rejected</span><span>${esc(e.path || "")}</span>`;
  } else {
    head = `<span class="kind">harness</span><span>${esc(e.text)}</span>`;
  }
  const errLine = e.error ? `<div class="error">${esc(e.error)}</div>` : "";
  return `<div class="ev ev-${e.kind}${err}" id="${esc(e.id)}" data-kind="${e.kind}"><div class="head"><span class="t">${fmtTime(e.t)}</span>${head}</div>${body}${errLine}</div>`;
}

const WINDOW = 500;

function visibleEvents() {
  return (state.events || []).filter((e) => evMatchesFilter(e) && (state.hits === null || state.hits.has(e.id)));
}

// Only the newest `state.shown` events that pass the filters are in the page (a 12-hour run
// has tens of thousands); "show earlier" adds more.
function applyFilters() {
  const el = document.getElementById("timeline");
  const visible = visibleEvents();
  const from = Math.max(0, visible.length - state.shown);
  const more = from > 0 ? `<div class="controls"><button id="show-earlier">show ${Math.min(from, WINDOW)} earlier</button><span class="muted">${from} earlier events</span></div>` : "";
  const note = state.dropped ? `<div class="muted">${state.dropped} earliest events not loaded</div>` : "";
  el.innerHTML = note + more + (visible.length ? visible.slice(from).map(renderEvent).join("") : '<span class="muted">nothing to show</span>');
  if (state.hits !== null) for (const id of state.hits) document.getElementById(id)?.classList.add("match");
  fillOpenPanels();
}

function colorDiff(text) {
  return text.split("\n").map((l) => {
    const c = l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : l.startsWith("@@") ? "hunk" : "";
    return c ? `<span class="${c}">${esc(l)}</span>` : esc(l);
  }).join("\n");
}

async function fillOpenPanels() {
  for (const pre of document.querySelectorAll("pre.diff[data-sha]")) {
    if (pre.dataset.loaded) continue;
    pre.dataset.loaded = "1";
    try {
      const r = await fetch(`/api/run/${encodeURIComponent(state.runId)}/diff/${pre.dataset.sha}`);
      pre.innerHTML = r.ok ? colorDiff(await r.text()) : esc((await r.json()).error);
    } catch (err) { pre.textContent = String(err); }
  }
  for (const pre of document.querySelectorAll("pre.json[data-llm]")) {
    if (pre.dataset.loaded) continue;
    pre.dataset.loaded = "1";
    try {
      const line = await getJSON(`/api/run/${encodeURIComponent(state.runId)}/llm/${pre.dataset.llm}`);
      pre.textContent = JSON.stringify(line, null, 2);
    } catch (err) { pre.textContent = String(err); }
  }
}

function renderTimeline(data) {
  state.events = data.events;
  state.dropped = data.dropped;
  applyFilters();
}

function renderStats(s) {
  document.getElementById("title").textContent = s.run_id;
  document.title = `agent2rl run: ${s.run_id}`;
  const st = document.getElementById("status");
  st.textContent = s.status;
  st.className = `badge ${s.status}`;
  const res = s.resources || {};
  const stats = [
    ["time left", s.live ? fmtDur(s.time_left_s) : "ended", "time-left"],
    ["submissions", `${s.submissions}${s.evaluating ? ` (${s.evaluating} grading)` : ""}`, "submissions"],
    ["best", fmtNum(s.best, 4), "best"],
    ["baseline", fmtNum(s.baseline, 4), "baseline"],
    ["LLM calls", `${s.llm_calls}${s.llm_errors ? ` (${s.llm_errors} errors)` : ""}`, "llm-calls"],
    ["tokens in / out", `${fmtNum(s.input_tokens)} / ${fmtNum(s.output_tokens)}`, "tokens"],
    ["cost", `$${fmtNum(s.cost_usd, 4)}`, "cost"],
    ["env steps", fmtNum(s.env_steps), "env-steps"],
    ["code snapshots", fmtNum(s.snapshots), "snapshots"],
    ["CPU / RSS", res.t ? `${fmtNum(res.cpu_percent, 0)}% / ${fmtNum((res.rss_bytes || 0) / 2 ** 20, 0)} MiB` : "–", "resources"],
    ["task / agent", `${s.task} / ${s.agent}${s.driver ? " (" + s.driver + ")" : ""}`, "task"],
  ];
  document.getElementById("stats").innerHTML = stats.map(([k, v, id]) => `<div class="stat" id="stat-${id}"><b>${esc(v)}</b><span>${esc(k)}</span></div>`).join("");
}

function chart(id, title, series, data) {
  const el = document.getElementById(id);
  if (state.charts[id]) { state.charts[id].destroy(); delete state.charts[id]; }
  if (!data[0].length) { el.innerHTML = `<div class="empty">${esc(title)}: no data yet</div>`; return; }
  el.innerHTML = "";
  if (typeof uPlot === "undefined") { el.textContent = "charting library missing"; return; }
  const opts = {
    title, width: 420, height: 220,
    cursor: { drag: { x: true, y: false } },  // drag to zoom, double-click to reset
    series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2, points: { show: s.points !== false }, scale: s.scale || "y", value: (u, v) => v === null || v === undefined ? "–" : (+v).toFixed(s.digits ?? 3) }))],
    axes: [{}, { scale: "y" }, ...(series.some((s) => s.scale === "y2") ? [{ scale: "y2", side: 1, grid: { show: false } }] : [])],
    scales: { x: { time: true } },
  };
  state.charts[id] = new uPlot(opts, data, el);
}

async function renderCharts() {
  let c;
  try { c = await getJSON(`/api/run/${encodeURIComponent(state.runId)}/charts`); } catch (e) { return; }
  const xs = c.scores.map((r) => r[0]);
  let best = -Infinity;
  const bests = c.scores.map((r) => (best = Math.max(best, r[1])));
  chart("chart-scores", "score by submission", [
    { label: "score", color: "#2da44e" },
    { label: "best so far", color: "#0b63c5", points: false },
    { label: "baseline", color: "#8a939c", points: false },
  ], [xs, c.scores.map((r) => r[1]), bests, xs.map(() => c.baseline)]);
  chart("chart-tokens", "LLM tokens (cumulative)", [{ label: "tokens", color: "#6f8cff", points: false, digits: 0 }],
    [c.tokens.map((r) => r[0]), c.tokens.map((r) => r[1])]);
  chart("chart-resources", "resource use", [
    { label: "CPU %", color: "#f0a030", points: false, digits: 0 },
    { label: "RSS MiB", color: "#b07cff", points: false, scale: "y2", digits: 0 },
  ], [c.resources.map((r) => r[0]), c.resources.map((r) => r[1]), c.resources.map((r) => r[2])]);
}

async function runPage() {
  state.runId = decodeURIComponent(location.pathname.split("/").pop());
  const tl = document.getElementById("timeline");
  async function full() {
    let data;
    try { data = await getJSON(`/api/run/${encodeURIComponent(state.runId)}/timeline`); } catch (e) { showError(tl, e); return null; }
    renderStats(data.summary);
    renderTimeline(data);
    state.version = data.summary.version;
    await renderCharts();
    return data.summary;
  }
  let summary = await full();
  document.getElementById("filters").addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-filter]");
    if (!b) return;
    state.filter = b.dataset.filter;
    for (const x of document.querySelectorAll("#filters button")) x.classList.toggle("on", x === b);
    applyFilters();
  });
  const search = document.getElementById("search");
  search.addEventListener("keydown", async (ev) => {
    if (ev.key !== "Enter") return;
    const q = search.value.trim();
    const info = document.getElementById("search-info");
    if (!q) { state.hits = null; info.textContent = ""; applyFilters(); return; }
    try {
      const r = await getJSON(`/api/run/${encodeURIComponent(state.runId)}/search?q=${encodeURIComponent(q)}`);
      state.hits = new Set(r.ids);
      info.textContent = `${r.ids.length} match${r.ids.length === 1 ? "" : "es"}`;
    } catch (e) { info.textContent = e.message; }
    applyFilters();
  });
  tl.addEventListener("click", (ev) => {
    const t = ev.target;
    if (t.id === "show-earlier") {
      state.shown += WINDOW;
      applyFilters();
    } else if (t.classList.contains("diff-toggle")) {
      const sha = t.dataset.sha;
      if (state.openDiffs.has(sha)) state.openDiffs.delete(sha); else state.openDiffs.add(sha);
      const e = state.events.find((x) => x.sha === sha);
      document.getElementById(e.id).outerHTML = renderEvent(e);
      fillOpenPanels();
    } else if (t.classList.contains("code-link")) {
      // From a submission to the code that produced it: open its snapshot's diff.
      const e = state.events.find((x) => x.id === t.dataset.target);
      if (!e) return;
      state.openDiffs.add(e.sha);
      if (!evMatchesFilter(e) || state.hits !== null) {
        state.hits = null;
        document.querySelector('#filters button[data-filter="all"]').click();
      }
      const visible = visibleEvents();
      state.shown = Math.max(state.shown, visible.length - visible.indexOf(e));
      applyFilters();
      document.getElementById(e.id).scrollIntoView({ block: "center" });
    } else if (t.classList.contains("llm-raw")) {
      const i = Number(t.dataset.index);
      if (state.openLLM.has(i)) state.openLLM.delete(i); else state.openLLM.add(i);
      const e = state.events.find((x) => x.kind === "llm" && x.index === i);
      document.getElementById(e.id).outerHTML = renderEvent(e);
      fillOpenPanels();
    }
  });
  // Live: the summary every POLL_MS; the timeline and charts only when it changed.
  const timer = setInterval(async () => {
    let s;
    try { s = await getJSON(`/api/run/${encodeURIComponent(state.runId)}/summary`); } catch (e) { return; }
    renderStats(s);
    if (s.version !== state.version) summary = await full();
    if (!s.live && summary && !summary.live) clearInterval(timer);
  }, POLL_MS);
}

const page = document.body.dataset.page;
if (page === "index") indexPage();
else if (page === "study") studyPage();
else if (page === "run") runPage();
