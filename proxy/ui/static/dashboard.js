// routefit dashboard: polls /routefit/ui/data and draws plain SVG. No dependencies, no build.
// Every value from the server is written with textContent or as an SVG attribute, never as HTML.
"use strict";

const DATA_URL = "/routefit/ui/data";
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
};

// A line/scatter chart over time. series: [{cls, points: [[t, v]], dots}]
function timeChart(series, opts) {
  const W = 300, H = 120, L = 40, R = 6, T = 6, B = 16;
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
  const W = 300, H = 120, L = 40, R = 6, T = 6, B = 16;
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
      `${r.transport} transport · ${r.exact ? "exact meter" : "approximate meter (calibrated)"}`),
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
  const card = el("article", { class: "card", "data-team": team.id }, el("h3", {}, team.id));
  if (team.error) { card.append(el("p", { class: "error" }, team.error)); return card; }
  if (!team.windows.length) { card.append(el("p", { class: "muted" }, "no quotas")); return card; }
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
  return el("tr", {}, el("td", {}, fmt.clock(f.time)), el("td", {}, f.route),
    el("td", { class: "num" }, fmt.int(f.budget)), el("td", { class: "num" }, fmt.int(f.estimate_before)),
    el("td", { class: "num" }, fmt.int(f.estimate_after)), el("td", {}, acts),
    el("td", { class: "num" }, fmt.int(removed)));
}

function pill(label, value, bad) {
  return el("span", { class: "pill" + (bad ? " bad" : "") }, label + " ", el("b", {}, value));
}

function render(data) {
  const requests = data.routes.reduce((s, r) => s + Object.values(r.requests).reduce((a, b) => a + b, 0), 0);
  document.getElementById("pills").replaceChildren(
    pill("routes", String(data.routes.length)),
    pill("requests", fmt.int(requests)),
    pill("store", `${data.store.name} ${data.store.up ? "up" : "DOWN"}`, !data.store.up),
    pill("anchor hit rate", fmt.pct(data.anchor.lookups ? data.anchor.hit_rate : null)),
    pill("samples", fmt.int(data.samples.recorded)),
    pill("mode", data.open ? "open (no teams)" : "teams"));
  document.getElementById("routes").replaceChildren(...data.routes.map((r) => routeCard(r, data)));
  const teams = document.getElementById("teams");
  teams.replaceChildren(...data.teams.map(teamCard));
  if (!data.teams.length) teams.append(el("p", { class: "muted" }, "no teams configured: routefit runs open"));
  document.querySelector("#fits tbody").replaceChildren(...data.fits.slice(0, 30).map((f) => fitRow(f, data.actions)));
  document.getElementById("updated").textContent = "updated " + fmt.clock(data.time);
  document.getElementById("content").hidden = false;
  document.getElementById("login").hidden = true;
  document.getElementById("error").hidden = true;
  document.body.dataset.loaded = "true";
}

let timer = null;

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
    render(await response.json());
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
refresh();
