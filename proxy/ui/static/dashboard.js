// routefit dashboard: polls /routefit/ui/data and /routefit/ui/requests and draws plain SVG. No dependencies, no build.
// Every value from the server is written with textContent or as an SVG attribute, never as HTML.
"use strict";

const DATA_URL = "/routefit/ui/data";
const LOG_URL = "/routefit/ui/requests";
const SESSION_URL = "/routefit/ui/session";
const POLL_MS = 3000;
const SVG = "http://www.w3.org/2000/svg";
// Fit actions come named by the server (data.actions, one per strategy, in order): a new
// strategy is drawn without a change here, in the next of ACTION_COLOURS (dashboard.css).
const ACTION_COLOURS = 6;
const actionClass = (i) => "c-action-" + (i % ACTION_COLOURS);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

const fmt = {
  int: (v) => (v == null ? "–" : Math.round(v).toLocaleString("en-US")),
  pct: (v) => (v == null ? "–" : (v * 100).toFixed(1) + "%"),
  pct0: (v) => (v == null ? "–" : Math.round(v * 100) + "%"),
  signedPct: (v) => (v == null ? "–" : (v >= 0 ? "+" : "") + (v * 100).toFixed(1) + "%"),
  factor: (v) => (v == null ? "–" : v.toFixed(3)),
  clock: (t) => new Date(t * 1000).toLocaleTimeString("en-GB"),
  short: (t) => new Date(t * 1000).toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" }),
  day: (t) => new Date(t * 1000).toLocaleString("en-GB", { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }),
  usd: (v) => (v == null ? "–" : v === 0 ? "$0" : v < 0.01 ? "$" + v.toFixed(4) : "$" + v.toFixed(2)),
  ms: (v) => (v == null ? "–" : v < 1000 ? Math.round(v) + " ms" : (v / 1000).toFixed(1) + " s"),
  secs: (v) => (v == null ? "–" : v < 1 ? Math.round(v * 1000) + " ms" : v.toFixed(2) + " s"),
  span: (s) => (s < 3600 ? s / 60 + " min" : s < 86400 ? s / 3600 + " h" : s / 86400 + " d"),
};
const SERIES_COLOURS = 8;
const seriesClass = (i) => "s" + (i % SERIES_COLOURS);

// A line/scatter chart over time. series: [{cls, points: [[t, v]], dots}]
function timeChart(series, opts) {
  const W = 300, H = 100, L = 40, R = 6, T = 6, B = 16;
  const svg = svgEl("svg", { class: "chart", viewBox: `0 0 ${W} ${H}` });
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) {
    const t = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" });
    t.textContent = "no data yet";
    svg.append(t);
    return svg;
  }
  let t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]));
  if (t1 - t0 < 1) t1 = t0 + 1;
  let y0 = opts.min != null ? opts.min : Math.min(...all.map((p) => p[1]));
  let y1 = opts.max != null ? opts.max : Math.max(...all.map((p) => p[1]));
  if (opts.zero) { y0 = Math.min(y0, 0); y1 = Math.max(y1, 0); }
  if (y1 - y0 < 1e-9) { y0 -= 0.05; y1 += 0.05; }
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  svg.append(svgEl("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  svg.append(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  for (const v of [y0, y1]) {
    const label = svgEl("text", { x: L - 3, y: y(v) + 3, "text-anchor": "end", class: "tick" });
    label.textContent = opts.format(v);
    svg.append(label);
  }
  for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
    const label = svgEl("text", { x: x(t), y: H - 4, "text-anchor": anchor, class: "tick" });
    label.textContent = fmt.clock(t);
    svg.append(label);
  }
  if (opts.zero && y0 < 0 && y1 > 0) {
    svg.append(svgEl("line", { class: "zero", x1: L, x2: W - R, y1: y(0), y2: y(0) }));
  }
  for (const s of series) {
    if (s.dots || s.points.length === 1) {
      for (const [t, v] of s.points) svg.append(svgEl("circle", { class: s.cls, cx: x(t), cy: y(v), r: 1.8 }));
    } else if (s.points.length) {
      const d = s.points.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join("");
      svg.append(svgEl("path", { class: "line " + s.cls, d }));
    }
  }
  return svg;
}

// Stacked bars of fit actions per time bin. fits: recent fit entries of one route.
function actionChart(fits, actions) {
  const W = 300, H = 100, L = 40, R = 6, T = 6, B = 16;
  const svg = svgEl("svg", { class: "chart", viewBox: `0 0 ${W} ${H}` });
  if (fits.length === 0) {
    const t = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" });
    t.textContent = "no fits yet";
    svg.append(t);
    return svg;
  }
  const t0 = Math.min(...fits.map((f) => f.time)), t1 = Math.max(...fits.map((f) => f.time));
  const nbins = 24, span = Math.max(t1 - t0, 1) / nbins;
  const bins = Array.from({ length: nbins }, () => actions.map(() => 0));
  for (const f of fits) {
    const i = Math.min(nbins - 1, Math.floor((f.time - t0) / span));
    actions.forEach((a, k) => { bins[i][k] += (f.actions[a.name] || { count: 0 }).count; });
  }
  const top = Math.max(1, ...bins.map((b) => b.reduce((s, v) => s + v, 0)));
  const bw = (W - L - R) / nbins;
  svg.append(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  const label = svgEl("text", { x: L - 3, y: T + 6, "text-anchor": "end", class: "tick" });
  label.textContent = fmt.int(top);
  svg.append(label);
  bins.forEach((b, i) => {
    let base = H - B;
    b.forEach((v, k) => {
      const h = (v / top) * (H - T - B);
      if (h > 0) {
        svg.append(svgEl("rect", { class: actionClass(k), x: L + i * bw + 1, y: base - h, width: bw - 2, height: h }));
        base -= h;
      }
    });
  });
  return svg;
}

function rolling(points, n) {
  const out = [];
  let sum = 0;
  points.forEach(([t, v], i) => {
    sum += v;
    if (i >= n) sum -= points[i - n][1];
    out.push([t, sum / Math.min(i + 1, n)]);
  });
  return out;
}

function figure(name, chart, keys) {
  const caption = el("figcaption", {}, el("span", {}, name));
  for (const [cls, label] of keys) caption.append(el("span", { class: "key " + cls }, label));
  return el("figure", { "data-chart": name }, chart, caption);
}

function stat(label, value, figureName) {
  return el("div", { class: "stat" }, el("span", { class: "label" }, label),
    el("span", { class: "value", "data-figure": figureName }, value));
}

function routeCard(r, data) {
  const cal = r.calibration || { factors: {}, samples: 0, relative_error: null };
  const err = cal.relative_error || {};
  const served = Object.entries(r.requests).reduce((s, [k, v]) => s + (k === "200" ? v : 0), 0);
  const failed = Object.entries(r.requests).reduce((s, [k, v]) => s + (k === "200" ? 0 : v), 0);
  const card = el("article", { class: "card", "data-route": r.alias },
    el("h3", {}, r.alias, el("span", { class: "model" }, "→ " + r.model)),
    el("div", { class: "facts" },
      `window ${fmt.int(r.window)} · max output ${fmt.int(r.max_output)} · tokenizer ${r.tokenizer} · ` +
      `${r.transport} · ${r.exact ? "exact meter" : "approximate meter (calibrated)"}`),
    el("div", { class: "stats" },
      stat("requests ok", fmt.int(served), "requests"),
      stat("errors", fmt.int(failed), "errors"),
      stat("samples", fmt.int(cal.samples), "samples"),
      stat("error p50 · p95", `${fmt.signedPct(err.p50)} · ${fmt.signedPct(err.p95)}`, "error"),
      stat("anchor hits", fmt.pct(r.anchored_share), "anchored"),
      stat("cache hits", fmt.pct(r.cache_hit_ratio), "cache")));
  const factors = ["text", "framing", "images"].map((part, i) => ({
    cls: "c-" + part,
    points: data.history.filter((h) => h.factors[r.alias]).map((h) => [h.time, h.factors[r.alias][i]]),
  }));
  const fits = data.fits.filter((f) => f.route === r.alias);
  card.append(el("div", { class: "charts" },
    figure("calibration factors", timeChart(factors, { format: fmt.factor }),
      [["c-text", `text ${fmt.factor(cal.factors.text)}`], ["c-framing", `framing ${fmt.factor(cal.factors.framing)}`],
       ["c-images", `images ${fmt.factor(cal.factors.images)}`]]),
    figure("estimate error", timeChart([{ cls: "c-error", points: r.series.error, dots: true }],
      { zero: true, format: fmt.signedPct }), [["c-error", "(estimate − actual) / actual"]]),
    figure("anchor & cache hits", timeChart([
      { cls: "c-anchor", points: rolling(r.series.anchored, 10) },
      { cls: "c-cache", points: r.series.cache }], { min: 0, max: 1, format: fmt.pct0 }),
      [["c-anchor", "anchored (rolling 10)"], ["c-cache", "provider cache hits"]]),
    figure("fit actions", actionChart(fits, data.actions), data.actions.map((a, k) => [actionClass(k),
      `${a.verb} ${fmt.int(r.fit_actions[a.name] || 0)}`]))));
  return card;
}

function teamCard(team) {
  const card = el("div", { class: "team", "data-team": team.id }, el("h3", {}, team.id));
  if (team.error) { card.append(el("p", { class: "error" }, team.error)); return card; }
  if (!team.windows.length) { card.append(el("span", { class: "muted" }, "no quotas")); return card; }
  for (const w of team.windows) {
    const share = w.limit ? Math.min(1, w.used / w.limit) : 0;
    const money = w.name === "usd_per_month";
    const show = (v) => (money ? "$" + (v / 1e6).toFixed(2) : fmt.int(v));
    card.append(el("div", { class: "window", "data-window": w.name },
      el("span", {}, w.name.replace(/_/g, " ")),
      el("span", { "data-figure": "usage" }, `${show(w.used)} / ${show(w.limit)} (${fmt.pct(share)})`)));
    const fill = el("div", { class: share >= 1 ? "full" : share >= 0.8 ? "warn" : "" });
    fill.style.width = (share * 100).toFixed(1) + "%";
    card.append(el("div", { class: "bar" }, fill));
  }
  return card;
}

function fitRow(f, actions) {
  const taken = actions.filter((a) => f.actions[a.name] && f.actions[a.name].count);
  const acts = taken.map((a) => `${a.verb} ${f.actions[a.name].count} ${a.noun}`).join(", ") || "none";
  const removed = taken.reduce((s, a) => s + f.actions[a.name].tokens_removed, 0);
  return el("tr", {}, el("td", {}, fmt.clock(f.time)), el("td", { class: "name" }, f.route),
    el("td", { class: "num" }, fmt.int(f.budget)),
    el("td", { class: "num" }, `${fmt.int(f.estimate_before)} → ${fmt.int(f.estimate_after)}`), el("td", {}, acts),
    el("td", { class: "num" }, fmt.int(removed)));
}

function pill(label, value, bad, name) {
  return el("span", { class: "pill" + (bad ? " bad" : ""), "data-pill": name || label }, label + " ", el("b", {}, value));
}

const keyName = (k) => (k.key_id === "-" ? "(no key)" : k.key_id);

// Stacked USD bars per time bin, one series per team (or per key).
function spendChart(spend, by) {
  const W = 900, H = 150, L = 46, R = 6, T = 6, B = 16;
  const svg = svgEl("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, "data-chart": "spend" });
  const rows = (by === "keys" ? spend.keys : spend.teams).filter((s) => s.usd > 0);
  const legend = el("div", { class: "legend" });
  if (!rows.length) {
    const t = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" });
    t.textContent = spend.records ? "no priced requests in the log" : "no requests in the log yet";
    svg.append(t);
    return [svg, legend];
  }
  const shown = rows.slice(0, SERIES_COLOURS - 1);
  if (rows.length > shown.length) {
    const rest = rows.slice(shown.length);
    shown.push({ team: `${rest.length} more`, key_id: `${rest.length} more`, usd: rest.reduce((s, r) => s + r.usd, 0),
      series: spend.teams[0].series.map((_, i) => rest.reduce((s, r) => s + r.series[i], 0)) });
  }
  const totals = Array.from({ length: spend.bins }, (_, i) => shown.reduce((s, r) => s + r.series[i], 0));
  const top = Math.max(...totals) || 1;
  const bw = (W - L - R) / spend.bins;
  svg.append(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  for (const v of [0, top]) {
    const label = svgEl("text", { x: L - 4, y: T + (1 - v / top) * (H - T - B) + 3, "text-anchor": "end", class: "tick" });
    label.textContent = fmt.usd(v);
    svg.append(label);
  }
  const ticks = Math.min(spend.bins, 6);
  for (let k = 0; k < ticks; k++) {
    const i = Math.round((k * (spend.bins - 1)) / Math.max(ticks - 1, 1));
    const t = spend.start + i * spend.bin_seconds;
    const label = svgEl("text", { x: L + (i + 0.5) * bw, y: H - 5, "text-anchor": "middle", class: "tick" });
    label.textContent = spend.bin_seconds >= 86400 ? fmt.day(t) : fmt.short(t);
    svg.append(label);
  }
  for (let i = 0; i < spend.bins; i++) {
    let base = H - B;
    shown.forEach((r, k) => {
      const h = (r.series[i] / top) * (H - T - B);
      if (h > 0) {
        svg.append(svgEl("rect", { class: seriesClass(k), x: L + i * bw + 1, y: base - h, width: Math.max(bw - 2, 1), height: h }));
        base -= h;
      }
    });
  }
  shown.forEach((r, k) => legend.append(el("span", { class: "key " + seriesClass(k) },
    `${by === "keys" ? keyName(r) + " (" + r.team + ")" : r.team} ${fmt.usd(r.usd)}`)));
  return [svg, legend];
}

function renderSpend(data) {
  const spend = data.spend;
  const note = document.getElementById("spend-note");
  const box = document.getElementById("spend-chart");
  if (spend.error) {
    note.textContent = "";
    box.replaceChildren(el("p", { class: "error" }, spend.error));
    document.querySelector("#keys tbody").replaceChildren();
    return;
  }
  const by = document.getElementById("spend-by").value;
  const [svg, legend] = spendChart(spend, by);
  note.textContent = `USD at the routes' prices · ${fmt.usd(spend.usd)} in ${fmt.int(spend.records)} logged requests` +
    (spend.since ? ` since ${fmt.day(spend.since)}` : "") + ` · bars of ${fmt.span(spend.bin_seconds)}`;
  box.replaceChildren(svg, legend);
  document.querySelector("#keys tbody").replaceChildren(...spend.keys.map((k) =>
    el("tr", { "data-key": k.key_id },
      el("td", { class: "mono" }, keyName(k)), el("td", {}, k.team),
      el("td", { class: "num" }, fmt.int(k.requests)),
      el("td", { class: "num" + (k.errors ? " status-4" : "") }, fmt.int(k.errors)),
      el("td", { class: "num" }, `${fmt.int(k.prompt_tokens)} · ${fmt.int(k.output_tokens)}`),
      el("td", { class: "num", "data-figure": "usd" }, k.unpriced === k.requests && k.requests ? "unpriced" : fmt.usd(k.usd)),
      el("td", { class: "muted" }, k.last ? fmt.clock(k.last) : "never"))));
}

function logLink(label, route, status) {
  const b = el("button", { type: "button", class: "link" }, label);
  b.addEventListener("click", () => {
    const form = document.getElementById("log-filters");
    setOptions(form.elements.route, [route], route);
    setOptions(form.elements.status, [status], status);
    form.elements.route.value = route;
    form.elements.status.value = status;
    loadLog();
    form.scrollIntoView({ block: "start" });
  });
  return b;
}

function renderErrors(data) {
  const e = data.errors;
  const kinds = Object.entries(data.error_kinds).filter(([, v]) => v).map(([k, v]) => `${k} ${fmt.int(v)}`);
  document.getElementById("error-kinds").textContent = kinds.length ? "by kind: " + kinds.join(" · ") : "none so far";
  document.querySelector("#errors thead").replaceChildren(el("tr", {}, el("th", {}, "route"),
    el("th", { class: "num" }, "requests"), el("th", { class: "num" }, "errors"),
    ...e.statuses.map((s) => el("th", { class: "num status-" + s[0] }, s))));
  document.querySelector("#errors tbody").replaceChildren(...e.routes.map((r) =>
    el("tr", { "data-route": r.route },
      el("td", { class: "name" }, r.route === "-" ? "(no route)" : r.route),
      el("td", { class: "num" }, fmt.int(r.requests)),
      el("td", { class: "num", "data-figure": "errors" }, r.errors ? fmt.int(r.errors) : "–"),
      ...e.statuses.map((s) => el("td", { class: "num", "data-status": s },
        r.by_status[s] ? (r.route === "-" ? fmt.int(r.by_status[s]) : logLink(fmt.int(r.by_status[s]), r.route, s)) : "")))));
}

const KEY_BADGES = {
  missing: (k) => ["bad", `MISSING: ${k.env} unset`],
  set: (k) => ["ok", k.env ? k.env : "in config"],
  client: () => ["", "client's own"],
  local: () => ["", "simulator: none needed"],
  none: () => ["", "none named"],
};
const HEALTH = { ok: "ok", degraded: "warn", failing: "bad", idle: "", unknown: "" };

function renderDeployments(data) {
  const d = data.deployments;
  const routes = Object.fromEntries(data.routes.map((r) => [r.alias, r]));
  const missing = data.routes.filter((r) => r.key.state === "missing").length;
  document.getElementById("deploy-note").textContent = (missing ? `${missing} without a provider key · ` : "") +
    (d.exported ? "attempts since start, this worker" : "this gateway exports no per-deployment metrics");
  const rows = [];
  // routes that cannot serve (no provider key) first
  const order = [...d.routes].sort((a, b) =>
    (routes[b.alias].key.state === "missing") - (routes[a.alias].key.state === "missing"));
  for (const r of order) {
    const key = routes[r.alias].key;
    const [cls, label] = KEY_BADGES[key.state](key);
    r.deployments.forEach((dep, i) => {
      const failed = Object.entries(dep.failed).map(([k, v]) => `${k} ${fmt.int(v)}`).join(", ");
      const state = dep.state === "unknown" ? "no metrics" : dep.state === "idle" ? "no traffic" : dep.state;
      rows.push(el("tr", { class: i ? "sub" : "", "data-deployment": dep.id, "data-route": r.alias },
        el("td", { class: "name" }, r.alias),
        el("td", {}, i ? "" : el("span", { class: "badge wrap " + cls, "data-figure": "key" }, label)),
        el("td", { class: "mono id" }, dep.id), el("td", { class: "id" }, dep.model),
        el("td", { class: "num" }, fmt.int(dep.ok)),
        el("td", { class: failed ? "status-5" : "muted" }, failed || "–"),
        el("td", { class: "num" }, fmt.int(dep.cooldowns)),
        el("td", { class: "num" }, `${fmt.secs(dep.latency_mean)} · ${fmt.secs(dep.latency_p95)}`),
        el("td", {}, el("span", { class: "badge " + HEALTH[dep.state], "data-figure": "health" }, state))));
    });
  }
  document.querySelector("#deployments tbody").replaceChildren(...rows);
}

// A select's options: "all" then the values, keeping the current choice (even if gone).
function setOptions(select, values, keep) {
  const current = keep !== undefined ? keep : select.value;
  const wanted = [...new Set([...values, ...(current ? [current] : [])])];
  const have = [...select.options].slice(1).map((o) => o.value);
  if (have.join("\n") === wanted.join("\n")) return;
  while (select.options.length > 1) select.remove(1);
  for (const v of wanted) select.append(el("option", { value: v }, v === "-" ? "(none)" : v));
  select.value = current;
}

function renderFilters(data) {
  const form = document.getElementById("log-filters");
  const teams = data.spend.teams ? data.spend.teams.map((t) => t.team) : [];
  setOptions(form.elements.team, [...new Set([...data.teams.map((t) => t.id), ...teams])].sort());
  setOptions(form.elements.key, data.spend.keys ? data.spend.keys.map((k) => k.key_id) : []);
  setOptions(form.elements.route, data.routes.map((r) => r.alias));
  const codes = data.errors.statuses.filter((s) => ![...form.elements.status.options].some((o) => o.value === s));
  for (const s of codes) form.elements.status.append(el("option", { value: s }, s));
}

function logRow(r, actions) {
  const taken = actions.filter((a) => r.actions[a.name]);
  const acts = taken.map((a) => `${a.verb} ${r.actions[a.name].count} ${a.noun}`).join(", ");
  return el("tr", { "data-status": String(r.status), "data-route": r.route || "-" },
    el("td", {}, fmt.clock(r.time)), el("td", {}, r.team || "–"),
    el("td", { class: "mono" }, r.key_id || "–"), el("td", { class: "name" }, r.route || "–"),
    el("td", { class: "id" }, r.deployment || "–"),
    el("td", { class: "num status-" + String(r.status)[0] }, String(r.status)),
    el("td", { class: "id" }, r.error_code || ""),
    el("td", { class: "num" }, r.prompt_tokens == null && r.output_tokens == null ? "–"
      : `${fmt.int(r.prompt_tokens)} · ${fmt.int(r.output_tokens)}`),
    el("td", { class: "num" }, fmt.usd(r.cost_usd)),
    el("td", { class: "num" }, fmt.ms(r.latency_ms)),
    el("td", {}, acts));
}

let actionsKnown = [];

async function loadLog() {
  const form = document.getElementById("log-filters");
  const params = new URLSearchParams({ limit: "200" });
  for (const name of ["team", "key", "route", "status"]) {
    if (form.elements[name].value) params.set(name, form.elements[name].value);
  }
  if (form.elements.since.value) params.set("since", String(Date.now() / 1000 - Number(form.elements.since.value)));
  const response = await fetch(LOG_URL + "?" + params, { credentials: "same-origin", cache: "no-store" });
  if (!response.ok) throw new Error(`${LOG_URL} answered ${response.status}`);
  const found = (await response.json()).data;
  document.querySelector("#log tbody").replaceChildren(...found.map((r) => logRow(r, actionsKnown)));
  document.getElementById("log-note").textContent = found.length
    ? `newest ${found.length}${found.length === 200 ? " (of more)" : ""} · every worker's, from the store`
    : "no request matches";
}

function render(data) {
  const requests = data.routes.reduce((s, r) => s + Object.values(r.requests).reduce((a, b) => a + b, 0), 0);
  const errors = data.errors.routes.reduce((s, r) => s + r.errors, 0);
  const keyless = data.routes.filter((r) => r.key.state === "missing").length;
  document.getElementById("pills").replaceChildren(
    pill("routes", String(data.routes.length)),
    pill("requests", fmt.int(requests)),
    pill("errors", fmt.int(errors), false),
    pill("spend", data.spend.error ? "?" : fmt.usd(data.spend.usd)),
    ...(keyless ? [pill("routes without a key", String(keyless), true, "keyless")] : []),
    pill("store", `${data.store.name} ${data.store.up ? "up" : "DOWN"}`, !data.store.up),
    pill("anchor hit rate", fmt.pct(data.anchor.lookups ? data.anchor.hit_rate : null)),
    pill("mode", data.open ? "open (no teams)" : "teams"));
  actionsKnown = data.actions;
  renderSpend(data);
  renderErrors(data);
  renderDeployments(data);
  renderFilters(data);
  document.getElementById("routes").replaceChildren(...data.routes.map((r) => routeCard(r, data)));
  const teams = document.getElementById("teams");
  teams.replaceChildren(...data.teams.map(teamCard));
  if (!data.teams.length) teams.append(el("p", { class: "muted" }, "no teams configured: routefit runs open"));
  document.querySelector("#fits tbody").replaceChildren(...data.fits.slice(0, 50).map((f) => fitRow(f, data.actions)));
  document.getElementById("updated").textContent = "updated " + fmt.clock(data.time);
  document.getElementById("content").hidden = false;
  document.getElementById("login").hidden = true;
  document.getElementById("error").hidden = true;
}

let timer = null;
let last = null;

async function refresh() {
  clearTimeout(timer);
  try {
    // Ask first whether this browser may read the figures: a 401 would be a console error.
    const session = await fetch(SESSION_URL, { credentials: "same-origin", cache: "no-store" });
    if (!session.ok) throw new Error(`${SESSION_URL} answered ${session.status}`);
    const state = await session.json();
    document.getElementById("logout").hidden = !state.session;
    if (!state.authorized) {
      document.getElementById("login").hidden = false;
      document.getElementById("content").hidden = true;
      document.getElementById("updated").textContent = "signed out";
      return;
    }
    const response = await fetch(DATA_URL, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok) throw new Error(`${DATA_URL} answered ${response.status}`);
    last = await response.json();
    render(last);
    await loadLog();
    document.body.dataset.loaded = "true";
  } catch (exc) {
    const box = document.getElementById("error");
    box.textContent = "cannot load figures: " + exc.message;
    box.hidden = false;
  }
  timer = setTimeout(refresh, POLL_MS);
}

async function signIn(event) {
  event.preventDefault();
  const key = document.getElementById("key");
  const response = await fetch(SESSION_URL, {
    method: "POST", credentials: "same-origin",
    headers: { "content-type": "application/json" }, body: JSON.stringify({ key: key.value }),
  });
  key.value = "";
  if (!response.ok) {
    document.getElementById("login-error").textContent = "that is not the admin key";
    return;
  }
  document.getElementById("login-error").textContent = "";
  refresh();
}

async function signOut() {
  await fetch(SESSION_URL, { method: "DELETE", credentials: "same-origin" });
  refresh();
}

document.getElementById("login-form").addEventListener("submit", signIn);
document.getElementById("logout").addEventListener("click", signOut);
document.getElementById("spend-by").addEventListener("change", () => last && renderSpend(last));
const filters = document.getElementById("log-filters");
const reload = () => loadLog().catch((exc) => {
  const box = document.getElementById("error");
  box.textContent = "cannot load the request log: " + exc.message;
  box.hidden = false;
});
filters.addEventListener("change", reload);
filters.addEventListener("reset", () => setTimeout(reload, 0));
filters.addEventListener("submit", (event) => { event.preventDefault(); reload(); });
refresh();
