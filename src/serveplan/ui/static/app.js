// serveplan web planner: forms built from /api/schema (the CLI's options), state in the URL,
// work done by the server's jobs, results drawn with plotly.js.
"use strict";

const TABS = [["plan", "Plan"], ["day", "Day plan"], ["simulate", "Simulate"], ["step", "Step"], ["offload", "Offload"]];
const KINDS = { plan: ["plan"], day: ["day"], simulate: ["simulate"], step: ["step"], offload: ["offload", "frontier"] };
const CHOICE_LISTS = { model: "model", hardware: "hardware", gpu: "gpu", host: "host", scenario: "scenario",
                       dtype: "dtype", phase: "phase", scheduler: "scheduler", schedulers: "schedulers",
                       engine: "engine", dataset: "dataset", "kv-dtype": "kv-dtype", "spec-method": "spec-method",
                       traffic: "traffic", policy: "policy" };
const PLOT_CFG = { displaylogo: false, responsive: true };
const COLORS = { collocated: "#2f5fb3", disaggregated: "#dd8452", bad: "#b42318" };

const state = { schema: null, panel: "plan", running: [], checkTimer: null, lastPlan: null };
const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid != null) e.append(kid);
  return e;
};
const fmt = (v, d = 3) => (v == null || Number.isNaN(v)) ? "-" : Number(v).toFixed(d);
// the SLO tolerance the goodput search applied (BestServe Algorithm 9's tau), said beside every goodput
const tolOf = (doc) => { const s = doc.settings || {}; return s.slo_tolerance ?? s.relaxation; };
const tolShort = (doc) => { const t = tolOf(doc); return t == null ? "SLO" : (t === 0 ? "strict SLO" : `SLO +${Math.round(t * 100)}%`); };
const tolText = (doc) => { const t = tolOf(doc); return t == null ? "" : (t === 0 ? "strictly (tolerance 0)" : `within +${Math.round(t * 100)}% of each target (tolerance ${t})`); };
const ms = (v, d = 1) => (v == null || Number.isNaN(v)) ? "-" : (v * 1e3).toLocaleString(undefined, { maximumFractionDigits: d, minimumFractionDigits: d });
// the P10-P90 band of comparable validated rows (serveplan validate), or "extrapolated"
const bandText = (c) => {
  if (!c || !c.band) return "";
  const b = c.band;
  if (b.p10 == null || b.p90 == null || !c.value) return "extrapolated";
  if (b.n === 0) return "exact";
  return `x${(b.p10 / c.value).toFixed(2)}-${(b.p90 / c.value).toFixed(2)} (n=${b.n})`;
};
const bandNote = (conf, keys) => "confidence (P10-P90 of measured / predicted on comparable validated rows): "
  + keys.filter(([, k]) => conf && conf[k]).map(([label, k]) => {
    const t = bandText(conf[k]);
    return t === "extrapolated" || t === "exact" ? `${label} ${conf[k].band.basis}` : `${label} ${t}: ${conf[k].band.basis}`;
  }).join("; ");
const bytes = (b) => { if (b == null) return "-"; const u = ["B", "KB", "MB", "GB", "TB"]; let i = 0; while (b >= 1000 && i < u.length - 1) { b /= 1000; i++; } return `${b.toFixed(b >= 100 ? 0 : 1)} ${u[i]}`; };

// ------------------------------------------------------------------ forms and URL state
function fields() { return state.schema.panels[KINDS[state.panel][0]].fields; }

function buildForm(values) {
  const form = $("#form");
  form.replaceChildren();
  for (const f of fields()) {
    let input;
    if (f.kind === "switch") {
      input = el("input", { type: "checkbox", name: f.name });
      input.checked = ["1", "on", "true"].includes(String(values[f.name] ?? "").toLowerCase());
    } else if (f.kind === "tristate") {
      input = el("select", { name: f.name }, el("option", { value: "", text: f.name === "compress" || f.name === "cpu-attention" ? "search both" : "default" }),
                 el("option", { value: "on", text: "on" }), el("option", { value: "off", text: "off" }));
      input.value = values[f.name] ?? "";
    } else {
      input = el("input", { type: "text", name: f.name, spellcheck: "false" });
      if (CHOICE_LISTS[f.name]) input.setAttribute("list", `list-${CHOICE_LISTS[f.name]}`);
      input.value = values[f.name] ?? f.value;
      input.placeholder = f.default || "";
    }
    input.addEventListener("input", onInput);
    input.addEventListener("change", onInput);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); run(); } });
    const wide = ["model", "hardware", "rate-sweep", "scenario", "strategy"].includes(f.name);
    if (f.kind === "switch") form.append(el("label", { class: "switch", title: f.help }, input, f.name));
    else form.append(el("label", { class: wide ? "wide" : "", title: f.help }, f.unit ? `${f.name} (${f.unit})` : f.name, input));
  }
  for (const [key, list] of Object.entries(state.schema.choices)) {
    if (document.getElementById(`list-${key}`)) continue;
    document.body.append(el("datalist", { id: `list-${key}` }, ...list.map((v) => el("option", { value: v }))));
  }
}

function formValues() {
  const out = {};
  for (const f of fields()) {
    const input = $(`#form [name="${f.name}"]`);
    out[f.name] = f.kind === "switch" ? (input.checked ? "on" : "") : input.value.trim();
  }
  return out;
}

function urlFor(values, run) {
  const q = new URLSearchParams({ panel: state.panel });
  for (const f of fields()) {
    const v = values[f.name];
    if (v !== "" && v !== f.value) q.set(f.name, v);
    else if (v === "" && f.value !== "" && f.kind === "text") q.set(f.name, "");
  }
  if (run) q.set("run", "1");
  return `${location.pathname}?${q}`;
}

function onInput() {
  history.replaceState(null, "", urlFor(formValues(), false));
  $("#share-link").hidden = true;
  clearTimeout(state.checkTimer);
  state.checkTimer = setTimeout(check, 250);
}

async function check() {
  const values = formValues();
  const q = new URLSearchParams(values);
  const r = await fetch(`/api/check/${KINDS[state.panel][0]}?${q}`);
  const body = await r.json();
  if (r.ok) { showError(null); $("#command").textContent = body.command; }
  else showError(body.error);
  return r.ok;
}

function showError(text) {
  const box = $("#error");
  box.hidden = !text;
  box.textContent = text ? `error: ${text}` : "";
  for (const input of document.querySelectorAll("#form [name]")) {
    const bad = text && new RegExp(`(^|[^a-z-])(--)?${input.name}([= ']|$)`).test(text);
    input.setAttribute("aria-invalid", bad ? "true" : "false");
  }
}

function selectPanel(panel, values = {}) {
  state.panel = panel;
  for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b.dataset.panel === panel));
  buildForm(values);
  $("#results").replaceChildren(el("p", { class: "hint", id: "placeholder", text: "Set the inputs and press Run." }));
  showError(null);
  history.replaceState(null, "", urlFor(formValues(), false));
  check();
}

// ------------------------------------------------------------------ jobs
async function run() {
  await cancelAll();
  const values = formValues();
  history.replaceState(null, "", urlFor(values, false));
  showError(null);
  setBusy(true, "starting");
  const kinds = KINDS[state.panel];
  try {
    const outs = await Promise.all(kinds.map((k) => runKind(k, values)));
    if (outs.some((o) => o === null)) return;
    const [main, second] = outs;
    $("#command").textContent = main.status.command;
    RENDER[state.panel](main, second);
  } finally {
    setBusy(false);
  }
}

async function runKind(kind, values) {
  const r = await fetch(`/api/run/${kind}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(values) });
  let status = await r.json();
  if (!r.ok) { showError(status.error); return null; }
  state.running.push(status.job);
  while (status.state === "running") {
    await new Promise((res) => setTimeout(res, 150));
    const s = await fetch(`/api/jobs/${status.job}`);
    status = await s.json();
    if (!s.ok) { showError(status.error); return null; }
    progress(status);
  }
  state.running = state.running.filter((j) => j !== status.job);
  if (status.state === "cancelled") { showError(null); $("#progress .text").textContent = "cancelled"; return null; }
  if (status.state === "error") { showError(status.error); return null; }
  const [doc, extra] = await Promise.all([fetch(`/api/jobs/${status.job}/result`).then((x) => x.json()),
                                          fetch(`/api/jobs/${status.job}/extra`).then((x) => x.json())]);
  return { status, doc, extra };
}

function progress(s) {
  const frac = s.total ? s.done / s.total : 0;
  $("#progress .fill").style.width = `${Math.round(100 * frac)}%`;
  const what = state.panel === "plan" || state.panel === "day" ? "strategies" : "runs";
  $("#progress .text").textContent = s.total ? `${s.done} / ${s.total} ${what}, ${s.elapsed_s.toFixed(1)} s` : `${s.elapsed_s.toFixed(1)} s`;
}

function setBusy(busy, text) {
  $("#run").disabled = busy;
  $("#cancel").disabled = !busy;
  if (busy) { $("#progress").hidden = false; $("#progress .fill").style.width = "0"; $("#progress .text").textContent = text || ""; }
  else if ($("#progress .text").textContent !== "cancelled") $("#progress").hidden = true;
}

async function cancelAll() {
  const ids = state.running.splice(0);
  await Promise.all(ids.map((id) => fetch(`/api/jobs/${id}`, { method: "DELETE" })));
}

// ------------------------------------------------------------------ Plan
function frontier(points) {
  // upper-right Pareto set: no other point has both more tokens/s per user and per device
  const sorted = [...points].sort((a, b) => b.x - a.x || b.y - a.y);
  const out = []; let best = -Infinity;
  for (const p of sorted) if (p.y > best) { out.push(p); best = p.y; }
  return out.sort((a, b) => a.x - b.x);
}

function orDash(v, digits) { return v == null ? "-" : Number(v).toFixed(digits); }

function costEnergyText(doc, best) {
  // the best strategy's cost and energy, with the price's source and what "planned rate" means here
  const st = doc.settings, p = st.price;
  const by = { cost: "lowest $ per million output tokens", energy: "lowest joules per output token" }[doc.objective] || "goodput per device";
  const cost = best.usd_per_hour != null && p
    ? `$${best.usd_per_hour.toFixed(2)}/h for the fleet at $${p.usd_per_gpu_hour}/GPU-h (${p.tier.replace("_", "-")}, ${p.provider || p.read_from}${p.date ? ", " + p.date : ""}), $${best.usd_per_mtok_output.toFixed(3)} per million output tokens and $${best.usd_per_mtok_total.toFixed(3)} per million input+output tokens at its goodput, $${Math.round(best.usd_per_month).toLocaleString()}/month at ${fmt(best.planned_rps, 2)} req/s`
    : `no ${st.price_tier.replace("_", "-")} price for ${st.hardware} (set Price)`;
  const energy = best.power_w_per_device != null
    ? `${best.power_w_per_device.toFixed(0)} W per device, ${best.j_per_output_token.toFixed(3)} J per output token (${best.j_per_token.toFixed(3)} per input+output token)`
    : "no board power for this device";
  return `Ranked by ${by}. ${best.name}: ${cost}; ${energy}. Planned rate: ${st.planned_rate}.`;
}

function renderPlan(main) {
  const res = $("#results");
  res.replaceChildren();
  state.lastPlan = main;
  const docs = main.doc.scenarios || [main.doc];
  docs.forEach((doc, i) => {
    const st = doc.settings, slo = st.slo, pct = slo.percentile;
    const best = doc.strategies[0];
    const eng = st.engine ? `${st.engine.engine} ${st.engine.version} (${st.engine.scheduler})` : "no engine";
    const byName = Object.fromEntries(doc.strategies.map((r, k) => [r.name, [r, k + 1]]));
    const shown = (doc.ranking || doc.strategies.map((r) => r.name)).map((n) => byName[n]);
    const whole = [doc.best_collocated, doc.best_disaggregated].filter((n) => n);
    const verdict = doc.best_collocated && doc.best_disaggregated
      ? ` Best collocated ${doc.best_collocated}, best disaggregated ${doc.best_disaggregated} (both simulated whole): ${byName[doc.best_collocated][0].goodput_per_device >= byName[doc.best_disaggregated][0].goodput_per_device ? "collocated" : "disaggregated"} wins here.` : "";
    const card = el("div", { class: "card" },
      el("h2", { text: `${st.model} (${st.weight_dtype || "?"} weights, ${st.kv_dtype || "?"} KV) on up to ${st.budget || `${st.devices} x ${st.hardware}`}, engine ${eng}, ${st.workload}, SLO P${pct} TTFT ${slo.ttft_s} s / TPOT ${slo.tpot_s * 1e3} ms` }),
      el("p", { class: "summary", id: i === 0 ? "best" : null, text: `best: ${best.name} with ${fmt(best.goodput_per_device)} req/s per device (${fmt(best.goodput_rps, 2)} req/s on ${best.num_devices} devices); ${doc.num_evaluated} strategies settled, ${doc.num_simulations} simulations, ${doc.elapsed_s.toFixed(1)} s. Goodput: the highest rate meeting the SLO ${tolText(doc)}.${verdict} * = Pareto-optimal; (b) = an analytic bound, pruned.` }));
    // cost and energy beside goodput (docs/cost-energy.md): $ per million output tokens at the goodput,
    // W per device and J per output token at the planned rate
    const head = ["#", "strategy", "devices", `goodput req/s (${tolShort(doc)})`, "per device", "$/Mtok out", "W/device", "J/tok out", `TTFT P${pct} s`, `TPOT P${pct} ms`, "tok/s/device", "binds", "bottleneck"];
    const LEFT = [1, 11, 12];
    const table = el("table", { id: i === 0 ? "ranking" : null }, el("thead", {}, el("tr", {}, ...head.map((h, j) => el("th", { class: LEFT.includes(j) ? "l" : "", text: h })))));
    const body = el("tbody");
    shown.forEach(([r, rank], k) => {
      const tr = el("tr", { "data-strategy": r.name },
        ...[rank, r.name + (r.pareto ? " *" : "") + (whole.includes(r.name) ? " (w)" : ""), r.num_devices, fmt(r.goodput_rps, 2), fmt(r.goodput_per_device),
            orDash(r.usd_per_mtok_output, 3), orDash(r.power_w_per_device, 0), orDash(r.j_per_output_token, 3), fmt(r.ttft_p_s), ms(r.tpot_p_s),
            (r.output_tokens_per_s / r.num_devices).toFixed(0), r.binding_slo, r.bottleneck].map((v, j) => el("td", { class: LEFT.includes(j) ? "l" : "", text: String(v) })));
      if (i === 0) tr.addEventListener("click", () => choose(main.status.job, r.name, tr));
      if (i === 0 && k === 0) tr.classList.add("chosen");
      body.append(tr);
    });
    for (const p of doc.pruned.filter((p) => p.kind === "bound" && p.bound_rps != null).slice(0, 5)) {
      body.append(el("tr", { class: "bound", "data-strategy": p.name, "data-bound": "1" }, ...["-", `${p.name} (b)`, p.num_devices, `<= ${fmt(p.bound_rps, 2)}`, `<= ${fmt(p.bound_per_device)}`, "", "", "", "", "", "", "", "pruned by its bound"].map((v, j) => el("td", { class: LEFT.includes(j) ? "l" : "", text: String(v) }))));
    }
    table.append(body);
    card.append(el("div", { class: "scroll" }, table));
    const notes = [];
    notes.push(costEnergyText(doc, best));
    if (best && best.confidence) notes.push(bandNote(best.confidence, [["goodput", "goodput_rps"], [`P${pct} TTFT`, "ttft_p_s"], [`P${pct} TPOT`, "tpot_p_s"]]));
    if (doc.rejected.length) notes.push(`${doc.rejected.length} strategies miss the SLO even at 0.1 req/s: ` + doc.rejected.slice(0, 3).map((r) => `${r.name} (${r.reason})`).join("; ") + (doc.rejected.length > 3 ? " ..." : ""));
    if (doc.pruned.length) notes.push(`${doc.pruned.length} layouts pruned before simulation: ` + doc.pruned.slice(0, 4).map((p) => `${p.name} (${p.reason})`).join("; ") + (doc.pruned.length > 4 ? " ..." : ""));
    for (const n of notes) card.append(el("p", { class: "note", text: n }));
    res.append(card);
    if (i === 0) {
      const plot = el("div", { class: "plot", id: "frontier" });
      res.append(el("div", { class: "card" }, el("h2", { text: "Throughput per device against speed per user (at each strategy's goodput)" }), plot));
      drawFrontier(plot, doc);
    }
  });
  const dep = el("div", { class: "card", id: "deploy-card" });
  res.append(dep);
  if (main.doc.deploy || (main.doc.scenarios && main.doc.scenarios[0].deploy)) renderDeploy(main.doc.deploy || main.doc.scenarios[0].deploy);
}

function drawFrontier(div, doc) {
  const traces = [];
  for (const arch of ["collocated", "disaggregated"]) {
    const pts = doc.strategies.filter((r) => (r.scheduler === "disaggregated") === (arch === "disaggregated") && r.tpot_p_s > 0)
      .map((r) => ({ x: 1 / r.tpot_p_s, y: r.output_tokens_per_s / r.num_devices, name: r.name }));
    if (!pts.length) continue;
    traces.push({ x: pts.map((p) => p.x), y: pts.map((p) => p.y), text: pts.map((p) => p.name), mode: "markers", type: "scatter",
                  name: arch, marker: { color: COLORS[arch], size: 8, symbol: arch === "disaggregated" ? "square" : "circle" },
                  hovertemplate: "%{text}<br>%{x:.1f} tok/s/user, %{y:.0f} tok/s/device<extra></extra>" });
    const f = frontier(pts);
    traces.push({ x: f.map((p) => p.x), y: f.map((p) => p.y), mode: "lines", type: "scatter", name: `${arch} frontier`,
                  line: { color: COLORS[arch], width: 2 }, hoverinfo: "skip" });
  }
  Plotly.newPlot(div, traces, { margin: { l: 60, r: 10, t: 10, b: 45 }, legend: { orientation: "h", y: 1.12 },
    xaxis: { title: { text: "output tokens/s per user (1 / TPOT at the SLO percentile)" } },
    yaxis: { title: { text: "output tokens/s per device" }, rangemode: "tozero" } }, PLOT_CFG);
}

async function choose(job, name, tr) {
  for (const row of document.querySelectorAll("#ranking tbody tr")) row.classList.toggle("chosen", row === tr);
  const r = await fetch(`/api/jobs/${job}/deploy?strategy=${encodeURIComponent(name)}`);
  const body = await r.json();
  if (!r.ok) { showError(body.error); return; }
  renderDeploy(body);
}

function renderDeploy(dep) {
  const card = $("#deploy-card");
  const pre = el("pre", { class: "deploy", id: "deploy" });
  const tabs = el("div", { class: "engine-tabs" });
  const label = { vllm: "vLLM", sglang: "SGLang", trtllm: "TensorRT-LLM" }[dep.engine] || dep.engine;
  const views = {};
  views[`${label} ${dep.version}`] = dep.instances.map((x) => `# node ${x.node}: ${x.role} instance ${x.index + 1}\n${x.shell}`).join("\n\n")
    + (dep.router ? `\n\n# router (node 0)\n${dep.router}` : "");
  for (const [name, text] of Object.entries(dep.files)) views[name] = text;
  for (const name of Object.keys(views)) {
    tabs.append(el("button", { type: "button", "aria-selected": "false", onclick: (e) => {
      for (const b of tabs.children) b.setAttribute("aria-selected", String(b === e.target));
      pre.textContent = views[name];
    } }, name));
  }
  tabs.firstChild.setAttribute("aria-selected", "true");
  pre.textContent = views[Object.keys(views)[0]];
  card.replaceChildren(el("h2", { text: `Deploy ${dep.strategy} with ${label} ${dep.version} (${dep.nodes} node${dep.nodes > 1 ? "s" : ""})` }), tabs, pre, ...dep.notes.map((n) => el("p", { class: "note", text: n })));
}

// ------------------------------------------------------------------ Simulate
function renderLevels(d) {
  const res = $("#results"), cfg = d.config;
  const head = ["clients", "TTFT mean ms", "TTFT P90 ms", "TPOT mean ms", "tok/s/user", "tok/s/GPU", "req/s", "preemptions"];
  const table = el("table", { id: "levels" }, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
    el("tbody", {}, ...d.concurrency_sweep.map((r) => el("tr", {}, ...[r.concurrency, ms(r.ttft_mean_s), ms(r.ttft_p90_s), ms(r.tpot_mean_s), fmt(r.tokens_per_s_per_user, 1), (r.output_tokens_per_s_per_device || 0).toFixed(0), fmt(r.throughput_rps), r.preemptions].map((v) => el("td", { text: String(v) }))))));
  res.append(el("div", { class: "card" }, el("h2", { text: `${cfg.model} on ${cfg.num_devices} x ${cfg.hardware}, ${cfg.strategy}, closed loop` }), table,
    el("p", { class: "note", text: "statistics over each run's steady window; no SLO is judged in a closed loop" }),
    el("p", { class: "note", id: "confidence", text: bandNote((d.confidence || [])[0], [["TTFT", "ttft_mean_s"], ["TPOT", "tpot_mean_s"], ["throughput", "output_tokens_per_s"]]) })));
}

function renderSimulate(main) {
  const d = main.doc, cfg = d.config, res = $("#results");
  res.replaceChildren();
  if (d.concurrency_sweep) { renderLevels(d); return; }
  const online = !cfg.offline && !cfg.concurrency;
  const load = cfg.offline ? "offline" : cfg.concurrency ? `concurrency ${cfg.concurrency}` : `rate ${cfg.rate} req/s`;
  const rows = [["TTFT", d.ttft_s, cfg.slo.ttft_s, "ttft"], ["TPOT", d.tpot_s, cfg.slo.tpot_s, "tpot"],
    ...(d.itl_s ? [["ITL", d.itl_s, null, null]] : []), ["E2E", d.e2e_s, null, "e2e"], ["queueing", d.queue_s, null, null]];
  const conf = d.confidence || {};
  const table = el("table", { id: "latency" }, el("thead", {}, el("tr", {}, ...["latency (ms)", "mean", "P50", "P90", "P99", "SLO", "P10-P90 band"].map((h, j) => el("th", { class: j ? "" : "l", text: h })))),
    el("tbody", {}, ...rows.map(([n, s, t, key]) => el("tr", {}, el("td", { class: "l", text: n }), ...["mean", "p50", "p90", "p99"].map((k) => el("td", { text: ms(s[k]) })), el("td", { text: t ? ms(t, 0) : "" }),
      el("td", { class: "band", text: key ? bandText(conf[`${key}_p90_s`]) : "" })))));
  const slo = online ? `; SLO met by ${(100 * d.slo_attainment).toFixed(1)}% of requests (TTFT ${(100 * d.ttft_attainment).toFixed(1)}%, TPOT ${(100 * d.tpot_attainment).toFixed(1)}%)` : "; no SLO judged (no arrival rate to hold it against)";
  res.append(el("div", { class: "card" }, el("h2", { text: `${cfg.model} on ${cfg.num_devices} x ${cfg.hardware}, ${cfg.engine || "no engine"}, ${cfg.strategy}, ${load}, ${d.num_requests} requests` }), table,
    el("p", { class: "note", text: `throughput ${fmt(d.throughput_rps)} req/s, ${d.output_tokens_per_s.toFixed(0)} output tok/s (${(d.output_tokens_per_s / cfg.num_devices).toFixed(0)} per GPU)${slo}${d.overloaded ? "; OVERLOADED" : ""}` }),
    el("p", { class: "note", id: "confidence", text: bandNote(conf, [["TTFT", "ttft_p90_s"], ["TPOT", "tpot_p90_s"], ["E2E", "e2e_p90_s"], ["throughput", "output_tokens_per_s"]]) })));
  const h1 = el("div", { class: "plot short", id: "hist-ttft" }), h2 = el("div", { class: "plot short", id: "hist-tpot" });
  res.append(el("div", { class: "card" }, el("h2", { text: "Latency distributions" }), el("div", { class: "grid2" }, h1, h2)));
  hist(h1, main.extra.requests.ttft_s, "TTFT (ms)", cfg.slo.ttft_s);
  hist(h2, main.extra.requests.tpot_s, "TPOT (ms)", cfg.slo.tpot_s);
  if (d.rate_sweep && d.rate_sweep.length) {
    const s = [...d.rate_sweep].sort((a, b) => a.rate - b.rate);
    const p1 = el("div", { class: "plot", id: "sweep-ttft" }), p2 = el("div", { class: "plot", id: "sweep-tpot" });
    res.append(el("div", { class: "card" }, el("h2", { text: "Percentiles against arrival rate" }), el("div", { class: "grid2" }, p1, p2)));
    for (const [div, key, slo, label] of [[p1, "ttft", cfg.slo.ttft_s, "TTFT (ms)"], [p2, "tpot", cfg.slo.tpot_s, "TPOT (ms)"]]) {
      Plotly.newPlot(div, [
        { x: s.map((r) => r.rate), y: s.map((r) => r[`${key}_p90_s`] * 1e3), name: "P90", mode: "lines+markers" },
        { x: s.map((r) => r.rate), y: s.map((r) => r[`${key}_p99_s`] * 1e3), name: "P99", mode: "lines+markers" },
        { x: [s[0].rate, s[s.length - 1].rate], y: [slo * 1e3, slo * 1e3], name: "SLO", mode: "lines", line: { dash: "dot", color: COLORS.bad } },
      ], { margin: { l: 60, r: 10, t: 10, b: 45 }, xaxis: { title: { text: "arrival rate (req/s)" } }, yaxis: { title: { text: label }, type: "log" }, legend: { orientation: "h", y: 1.12 } }, PLOT_CFG);
    }
  }
}

function hist(div, values, label, slo) {
  Plotly.newPlot(div, [{ x: values.map((v) => v * 1e3), type: "histogram", nbinsx: 60, marker: { color: COLORS.collocated }, name: label }],
    { margin: { l: 50, r: 10, t: 10, b: 45 }, bargap: 0.02, xaxis: { title: { text: label } }, yaxis: { title: { text: "requests" } },
      shapes: [{ type: "line", x0: slo * 1e3, x1: slo * 1e3, yref: "paper", y0: 0, y1: 1, line: { color: COLORS.bad, dash: "dot" } }],
      annotations: [{ x: slo * 1e3, yref: "paper", y: 1, text: "SLO", showarrow: false, font: { color: COLORS.bad, size: 11 } }] }, PLOT_CFG);
}

// ------------------------------------------------------------------ Step
function renderStep(main) {
  const d = main.doc, res = $("#results"), roof = main.extra.roofline;
  res.replaceChildren();
  const what = d.phase === "prefill" ? `prefill step, batch ${d.batch}, input ${d.input_len}` : `decode step, batch ${d.batch}, context ${d.context_len}`;
  const mods = el("div", { class: "plot short", id: "modules" });
  res.append(el("div", { class: "card" }, el("h2", { text: `${d.model} on ${d.hardware} (tp ${d.tp}, pp ${d.pp}, dp ${d.dp}, ep ${d.ep}, ${d.dtype}): ${what}: ${ms(d.total_s, 2)} ms` }), mods));
  if (d.static) {
    const st = d.static;
    res.lastChild.append(el("p", { class: "note", id: "static", text: `static batch ${st.batch} x (${st.input_len} in, ${st.output_len} out): TTFT ${ms(st.ttft_s)} ms, ITL ${ms(st.itl_s, 2)} ms, E2E ${ms(st.e2e_s)} ms, ${Math.round(st.output_tokens_per_s).toLocaleString()} output tok/s` }));
  }
  if (d.confidence) {
    const keys = d.static ? [["TTFT", "static_ttft_s"], ["ITL", "static_itl_s"], ["E2E", "static_e2e_s"], ["throughput", "static_output_tokens_per_s"]]
      : [[d.phase === "prefill" ? "step (as TTFT)" : "step (as TPOT)", "step_s"]];
    res.lastChild.append(el("p", { class: "note", id: "confidence", text: bandNote(d.confidence, keys) }));
  }
  const names = d.modules.map((m) => `${m.name}${m.group !== "dense" ? ` [${m.group}]` : ""} (${m.count}x)`);
  Plotly.newPlot(mods, ["dispatch_s", "compute_s", "comm_s"].map((k, i) => ({
    y: names, x: d.modules.map((m) => m[k] * m.count * 1e3), type: "bar", orientation: "h", name: ["dispatch", "compute", "communicate"][i],
  })), { barmode: "stack", height: 250, margin: { l: 190, r: 10, t: 10, b: 45 }, xaxis: { title: { text: "time per step, all layers (ms)" } }, yaxis: { autorange: "reversed" }, legend: { orientation: "h", y: 1.12 } }, PLOT_CFG);
  const ops = el("div", { class: "plot", id: "operators" }), rl = el("div", { class: "plot", id: "roofline" });
  res.append(el("div", { class: "card" }, el("h2", { text: "Operators (one layer): time and roofline point" }), el("div", { class: "grid2" }, ops, rl)));
  const sorted = [...d.ops].sort((a, b) => b.time_s - a.time_s).slice(0, 24);
  Plotly.newPlot(ops, [{ y: sorted.map((o) => o.name), x: sorted.map((o) => o.time_s * 1e3), type: "bar", orientation: "h",
    marker: { color: sorted.map((o) => o.bound === "compute" ? COLORS.collocated : COLORS.disaggregated) }, hovertemplate: "%{y}: %{x:.4f} ms<extra></extra>" }],
    { margin: { l: 170, r: 10, t: 10, b: 45 }, xaxis: { title: { text: "time (ms); blue compute-, orange memory-bound" } }, yaxis: { autorange: "reversed", tickfont: { size: 9 }, dtick: 1 } }, PLOT_CFG);
  const pts = d.ops.filter((o) => o.flops > 0 && o.bytes > 0 && o.time_s > 0);
  const xs = pts.map((o) => o.flops / o.bytes), ridge = roof.peak_flops / roof.memory_bandwidth;
  const lo = Math.min(...xs, ridge) / 4, hi = Math.max(...xs, ridge) * 4;
  Plotly.newPlot(rl, [
    { x: xs, y: pts.map((o) => o.flops / o.time_s / 1e12), text: pts.map((o) => o.name), mode: "markers", type: "scatter", name: "operators",
      marker: { color: pts.map((o) => o.bound === "compute" ? COLORS.collocated : COLORS.disaggregated), size: 7 }, hovertemplate: "%{text}<br>%{x:.1f} FLOP/B, %{y:.1f} TFLOP/s<extra></extra>" },
    { x: [lo, ridge, hi], y: [lo * roof.memory_bandwidth / 1e12, roof.peak_flops / 1e12, roof.peak_flops / 1e12], mode: "lines", name: `roof (${roof.dtype})`, line: { color: "#444" } },
  ], { margin: { l: 60, r: 10, t: 10, b: 45 }, showlegend: false, xaxis: { type: "log", title: { text: "arithmetic intensity (FLOP/byte)" } }, yaxis: { type: "log", title: { text: "achieved TFLOP/s per device" } } }, PLOT_CFG);
  const m = d.memory, kv = m.kv_capacity_tokens * m.kv_bytes_per_token, usable = m.device_memory_bytes * m.memory_utilization;
  const mem = el("div", { class: "plot", id: "memory" });
  res.append(el("div", { class: "card" }, el("h2", { text: `Memory per device: ${bytes(m.device_memory_bytes)}, ${Math.round(100 * m.memory_utilization)}% usable; KV cache holds ${m.kv_capacity_tokens.toLocaleString()} tokens` }), mem));
  Plotly.newPlot(mem, [["weights", m.weights_bytes], ["activations", m.activation_bytes], ["KV cache", kv], ["reserved", m.device_memory_bytes - usable]].map(([n, v]) => ({
    x: [v / 1e9], y: ["device"], name: n, type: "bar", orientation: "h", hovertemplate: `${n}: %{x:.2f} GB<extra></extra>` })),
    { barmode: "stack", height: 160, margin: { l: 60, r: 10, t: 10, b: 40 }, xaxis: { title: { text: "GB" } }, legend: { orientation: "h", y: 1.3 } }, PLOT_CFG);
}

// ------------------------------------------------------------------ Offload
const TENSOR_COLORS = { weights: "#2f5fb3", kv_cache: "#dd8452", activations: "#55a868" };

function renderOffload(main, fr) {
  const p = main.doc, res = $("#results");
  res.replaceChildren();
  const pol = p.policy;
  const legend = el("div", { class: "legend" }, ...Object.entries(TENSOR_COLORS).map(([k, c]) => el("span", {}, el("i", { style: `background:${c}` }), k.replace("_", " "))));
  const tiers = el("div", { class: "tiers", id: "placement" });
  for (const tier of ["gpu", "cpu", "disk"]) {
    const cap = p.capacity_bytes[tier] ?? p.capacity_bytes[`${tier}_prefill`] ?? 0;
    const used = Object.keys(TENSOR_COLORS).reduce((s, k) => s + p.placement_bytes[k][tier], 0);
    const scale = Math.max(cap, used) || 1;
    const track = el("div", { class: "track" }, ...Object.entries(TENSOR_COLORS).map(([k, c]) => {
      const b = p.placement_bytes[k][tier];
      return el("div", { class: "seg", style: `width:${(100 * b / scale).toFixed(2)}%;background:${c}`, title: `${k}: ${bytes(b)}` }, b / scale > 0.08 ? bytes(b) : "");
    }));
    tiers.append(el("div", { class: "tier" }, el("div", { class: "name", text: tier.toUpperCase() }), track,
      el("div", { class: "caption", text: `${bytes(used)} placed of ${bytes(cap)} capacity` })));
  }
  res.append(el("div", { class: "card" },
    el("h2", { text: `${p.model} on ${p.gpu} + ${p.host}: ${p.input_len} + ${p.output_len} tokens: ${p.throughput_tokens_per_s.toPrecision(4)} token/s, ${p.latency_s.toPrecision(4)} s per block` }),
    el("p", { class: "summary", text: `policy: GPU batch ${pol.gpu_batch_size} x ${pol.num_gpu_batches} batches = block ${pol.block_size}; weights ${pol.wg}/${pol.wc}/${pol.wd}% GPU/CPU/disk, KV ${pol.cg}/${pol.cc}/${pol.cd}%, activations ${pol.hg}/${pol.hc}/${pol.hd}%; ${pol.compress ? "4-bit compression" : "FP16"}, ${pol.cpu_attention ? "CPU" : "GPU"} attention` }),
    legend, tiers));
  if (fr) {
    const div = el("div", { class: "plot", id: "offload-frontier" });
    res.append(el("div", { class: "card" }, el("h2", { text: "Latency-throughput frontier" }), div));
    const pts = fr.doc.points;
    Plotly.newPlot(div, [{ x: pts.map((q) => q.latency_s), y: pts.map((q) => q.throughput_tokens_per_s), mode: "lines+markers", type: "scatter",
      text: pts.map((q) => `block ${q.policy.block_size}${q.policy.compress ? ", 4-bit" : ""}`), hovertemplate: "%{text}<br>%{x:.3g} s, %{y:.4g} token/s<extra></extra>", line: { shape: "hv" } },
      { x: [p.latency_s], y: [p.throughput_tokens_per_s], mode: "markers", marker: { size: 12, color: COLORS.bad, symbol: "star" }, name: "this plan" }],
      { margin: { l: 60, r: 10, t: 10, b: 45 }, showlegend: false, xaxis: { type: "log", title: { text: "latency per block (s)" } }, yaxis: { type: "log", title: { text: "generated tokens/s" } } }, PLOT_CFG);
  }
}

// ------------------------------------------------------------------ Day plan
const pct = (v) => v == null ? "-" : `${(100 * v).toFixed(2)}%`;

function renderDay(main) {
  // the day plan (serveplan day-plan): devices over time against the peak's, the rate over time,
  // and the simulated SLO attainment of the autoscaled day beside its GPU-hours, dollars and energy
  const d = main.doc, res = $("#results"), u = d.unit, tr = d.traffic, su = d.scale_up, pol = d.policy;
  res.replaceChildren();
  const nd = u.num_devices;
  const a = d.autoscaled, p = d.peak;
  const saved = p.gpu_hours > 0 ? 1 - a.gpu_hours / p.gpu_hours : 0;
  const row = (name, c) => el("tr", {}, el("td", { class: "l", text: name }), el("td", { text: String(c.peak_replicas) }),
    el("td", { text: c.gpu_hours.toFixed(1) }), el("td", { text: c.usd == null ? "-" : `$${c.usd.toFixed(2)}` }),
    el("td", { text: c.kwh == null ? "-" : c.kwh.toFixed(1) }), el("td", { text: pct(c.simulation ? c.simulation.attainment : null) }),
    el("td", { class: "l", text: c.simulation ? `${c.simulation.requests_simulated.toLocaleString()} requests, ${c.simulation.mode}` : "-" }));
  const table = el("table", { id: "day-summary" }, el("thead", {}, el("tr", {}, ...["fleet", "peak replicas", "GPU-hours", "cost", "kWh", `SLO attainment (P${d.slo_percentile})`, "simulated"].map((h, j) => el("th", { class: j === 0 || j === 6 ? "l" : "", text: h })))),
    el("tbody", {}, row("autoscaled", a), row("provisioned for the peak", p)));
  res.append(el("div", { class: "card" },
    el("h2", { text: `${tr.name}: ${tr.num_intervals} intervals of ${tr.interval_s} s, mean ${fmt(tr.mean_rps, 2)} req/s, peak ${fmt(tr.peak_rps, 2)} req/s` }),
    el("p", { class: "summary", id: "day-verdict", text: `replica ${u.name} (${nd} device${nd > 1 ? "s" : ""}, goodput ${fmt(u.goodput_rps, 2)} req/s); ${pol.policy} policy, min ${pol.min_replicas}, scale-up ${su.total_s.toFixed(1)} s, scale-down delay ${pol.scale_down_delay_s} s: autoscaling uses ${(100 * saved).toFixed(1)}% fewer GPU-hours than provisioning for the peak.` }),
    table,
    el("p", { class: "note", text: `scale-up: weights ${(su.weights_bytes_per_device / 1e9).toFixed(1)} GB per device at ${(su.load_bandwidth / 1e9).toFixed(1)} GB/s (${su.load_source}) + start-up ${su.startup_s} s (${su.startup_source})${su.given ? "; total given" : ""}. ${(d.notes || []).join(" ")}` })));
  const div = el("div", { class: "plot", id: "day-chart" });
  res.append(el("div", { class: "card" }, el("h2", { text: "Devices and rate over the day" }), div));
  const iv = d.intervals, hours = iv.map((r) => r.start_s / 3600);
  hours.push(tr.duration_s / 3600);
  const stairs = (ys) => ys.concat([ys[ys.length - 1]]);
  const att = iv.map((r) => r.attainment == null ? null : 100 * r.attainment);
  Plotly.newPlot(div, [
    { x: hours, y: stairs(iv.map((r) => r.devices_provisioned)), name: "devices (autoscaled)", line: { shape: "hv", color: COLORS.collocated } },
    { x: hours, y: stairs(iv.map(() => p.peak_replicas * nd)), name: "devices (peak)", line: { shape: "hv", dash: "dash", color: COLORS.bad } },
    { x: hours, y: stairs(iv.map((r) => r.rate_rps)), name: "rate (req/s)", yaxis: "y2", line: { shape: "hv", color: "#3a923a" } },
    { x: iv.map((r) => (r.start_s + tr.interval_s / 2) / 3600), y: att, name: "SLO attainment %", yaxis: "y3", mode: "markers", marker: { size: 5, color: COLORS.disaggregated } },
  ], { margin: { l: 55, r: 110, t: 10, b: 45 }, xaxis: { title: { text: "hours" }, domain: [0, 0.9] },
       yaxis: { title: { text: "devices" }, rangemode: "tozero" },
       yaxis2: { title: { text: "requests/s" }, overlaying: "y", side: "right", rangemode: "tozero" },
       yaxis3: { title: { text: "attainment %" }, overlaying: "y", side: "right", position: 0.97, anchor: "free", range: [0, 101] },
       legend: { orientation: "h", y: 1.12 } }, PLOT_CFG);
}

const RENDER = { plan: renderPlan, day: renderDay, simulate: renderSimulate, step: renderStep, offload: renderOffload };

// ------------------------------------------------------------------ start
async function start() {
  const r = await fetch("/api/schema");
  state.schema = await r.json();
  $("#version").textContent = `v${state.schema.version}`;
  for (const [panel, label] of TABS) {
    $("#tabs").append(el("button", { type: "button", role: "tab", id: `tab-${panel}`, "data-panel": panel, onclick: () => selectPanel(panel) }, label));
  }
  const q = new URLSearchParams(location.search);
  const panel = KINDS[q.get("panel")] ? q.get("panel") : "plan";
  const values = {};
  for (const [k, v] of q) if (k !== "panel" && k !== "run") values[k] = v;
  selectPanel(panel, values);
  $("#run").addEventListener("click", run);
  $("#cancel").addEventListener("click", async () => { await cancelAll(); });
  $("#share").addEventListener("click", () => {
    const link = $("#share-link");
    link.value = new URL(urlFor(formValues(), true), location.href).href;
    link.hidden = false;
    link.select();
    navigator.clipboard?.writeText(link.value).catch(() => {});
  });
  if (q.get("run") === "1") run();
}

start();
