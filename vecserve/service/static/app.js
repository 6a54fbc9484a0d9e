// vecserve explorer: plain ES module, no dependencies. Every answer comes from the
// service's own JSON endpoints; the state lives in the URL's query string.

const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";
const KEY = "vecserve-api-key";
const FIELDS = ["model", "word", "topn", "approx", "w1", "w2", "a", "b", "c", "odd"];
const SECTIONS = {
  neighbours: ["word", "topn", "approx"],
  similarity: ["w1", "w2"],
  analogy: ["a", "b", "c"],
  odd: ["odd"],
};

let state = {};
let models = [];
let defaultModel = null;

// -- errors ------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(readable(status, body));
    this.status = status;
    this.body = body;
  }
}

const quote = (w) => `“${w}”`;

function readable(status, body) {
  const b = body || {};
  const detail = typeof b.detail === "string" ? b.detail : "";
  switch (b.error) {
    case "TokenNotFound": {
      const missing = b.missing && b.missing.length ? b.missing : [b.token];
      const where = b.model ? ` of model ${quote(b.model)}` : "";
      return missing.length === 1
        ? `The word ${quote(missing[0])} is not in the vocabulary${where}.`
        : `These words are not in the vocabulary${where}: ${missing.map(quote).join(", ")}.`;
    }
    case "ModelNotFound":
      return `There is no model named ${quote(b.model || "?")} in this service.`;
    case "NotReady":
      return `The service is not ready yet (${detail}). Try again in a few seconds.`;
    case "StoreUnavailable":
      return `The service cannot reach Redis right now, so it cannot answer: ${detail}`;
    case "Unauthorized":
      return `The API key was refused: ${detail}`;
    case "QueryRejected":
    case "BadQuery":
      return `The service rejected the query: ${detail}`;
    case "ValidationError":
    case "RequestValidationError":
      return `The request was not valid: ${validation(b)}`;
  }
  if (status === 503) return `The service is unavailable (503): ${detail || "try again soon"}.`;
  if (status === 422) return `The request was not valid: ${validation(b)}`;
  return `${b.error || "Error"} (${status}): ${detail || "no detail given"}`;
}

function validation(b) {
  const list = Array.isArray(b.detail) ? b.detail : b.errors || [];
  if (!list.length) return typeof b.detail === "string" ? b.detail : "bad input";
  return list.map((e) => `${(e.loc || []).slice(-1)[0] || "input"}: ${e.msg}`).join("; ");
}

function show(el, message) {
  const global = $("#global-error");
  // a section does not repeat what the page already says at the top (Redis down)
  const repeat = el !== global && !global.hidden && message === global.textContent;
  el.textContent = repeat ? "" : message || "";
  el.hidden = !message || repeat;
}

// -- the API, with the key asked once per tab ----------------------------------------------

let keyPrompt = null;

function askKey(refused) {
  if (keyPrompt) return keyPrompt;
  const form = $("#key-form");
  $("#key-message").textContent = refused
    ? "That API key was refused. Enter another one."
    : "This service asks for an API key. It is kept in this tab only (sessionStorage) " +
      "and sent as Authorization: Bearer.";
  form.hidden = false;
  $("#api-key").value = "";
  $("#api-key").focus();
  keyPrompt = new Promise((resolve) => {
    form.onsubmit = (ev) => {
      ev.preventDefault();
      const key = $("#api-key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      form.hidden = true;
      keyPrompt = null;
      resolve(key);
    };
  });
  return keyPrompt;
}

async function api(path, { params, body } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  for (;;) {
    const headers = { Accept: "application/json" };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(url, {
        method: body ? "POST" : "GET",
        headers,
        body: body ? JSON.stringify(body) : undefined,
      });
    } catch {
      throw new ApiError(0, {
        error: "Unreachable",
        detail: "the vecserve service did not answer (is it running?)",
      });
    }
    if (resp.status === 401) {
      if (key) sessionStorage.removeItem(KEY);
      await askKey(Boolean(key));
      continue;
    }
    let data = null;
    try {
      data = await resp.json();
    } catch {
      data = { error: "BadResponse", detail: `the service answered ${resp.status} without JSON` };
    }
    if (!resp.ok) throw new ApiError(resp.status, data);
    return data;
  }
}

// -- state in the URL --------------------------------------------------------------------

function readURL() {
  const q = new URLSearchParams(location.search);
  const s = {};
  for (const f of FIELDS) if (q.has(f) && q.get(f) !== "") s[f] = q.get(f);
  return s;
}

function writeURL(s, push) {
  const q = new URLSearchParams();
  for (const f of FIELDS) if (s[f] !== undefined && s[f] !== "") q.set(f, s[f]);
  const url = `${location.pathname}${q.toString() ? `?${q}` : ""}`;
  if (url === `${location.pathname}${location.search}`) return;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

function fillForms(s) {
  for (const f of ["word", "w1", "w2", "a", "b", "c"]) $(`#${f}`).value = s[f] || "";
  $("#odd-words").value = s.odd || "";
  $("#topn").value = s.topn || "10";
  $("#approx").checked = s.approx === "1";
  if (s.model) $("#model").value = s.model;
}

const changed = (a, b, keys) => keys.some((k) => (a[k] || "") !== (b[k] || ""));

/** Go to state `next`: URL (pushed when `push`), forms, and the sections that changed. */
async function go(next, { push = true, all = false } = {}) {
  const prev = state;
  state = next;
  writeURL(state, push);
  fillForms(state);
  const modelChanged = all || changed(prev, next, ["model"]);
  if (modelChanged) modelOK = await showModel();
  const jobs = [];
  for (const [name, keys] of Object.entries(SECTIONS)) {
    if (modelChanged || changed(prev, next, keys)) jobs.push(RUN[name]());
  }
  await Promise.all(jobs);
  document.body.dataset.ready = "1";
}

const modelParam = () => state.model || undefined;

// -- models ------------------------------------------------------------------------------

async function loadModels() {
  show($("#global-error"), "");
  try {
    const ready = await fetch("/readyz").then((r) => r.json().then((j) => [r.status, j]));
    const [status, body] = ready;
    defaultModel = body.default_model || null;
    if (status === 503) show($("#global-error"), readable(status, body));
  } catch {
    show($("#global-error"), "The vecserve service did not answer (is it running?).");
  }
  try {
    models = (await api("/models")).models;
  } catch (err) {
    show($("#global-error"), err.message);
    models = [];
  }
  const select = $("#model");
  select.replaceChildren();
  for (const m of models) {
    const opt = document.createElement("option");
    opt.value = m.name;
    opt.textContent = `${m.name} — ${m.count.toLocaleString("en")} words, ${m.dim}-d, ${m.codec}`;
    select.append(opt);
  }
  if (!models.length) {
    const opt = document.createElement("option");
    opt.textContent = "(no model)";
    opt.value = "";
    select.append(opt);
  }
  if (!models.length && $("#global-error").hidden) {
    show($("#global-error"), "No model is loaded in this service yet: load one with `vecserve load`.");
  }
}

function fact(dt, dd) {
  const div = document.createElement("div");
  const t = document.createElement("dt");
  const d = document.createElement("dd");
  t.textContent = dt;
  d.textContent = dd;
  div.append(t, d);
  return div;
}

function annText(ann) {
  if (!ann) return "not available";
  if (ann.state === "ready") {
    const r = typeof ann.recall_at_10 === "number" ? `, recall@10 ${ann.recall_at_10.toFixed(3)}` : "";
    return `ready${r}`;
  }
  if (ann.state === "exact-fallback") return "answers exactly (recall target not met cheaply)";
  if (ann.state === "building" && ann.progress) {
    return `building (${Math.round(100 * (ann.progress.share || 0))}%)`;
  }
  if (!ann.enabled) return "not enabled";
  return ann.state;
}

let modelDetail = null;
let modelOK = true;

async function showModel() {
  const facts = $("#model-facts");
  facts.replaceChildren();
  modelDetail = null;
  show($("#model-error"), "");
  const name = state.model || defaultModel || (models[0] && models[0].name);
  if (!name) {
    // no model listed: none loaded yet, or the models could not be read (said above)
    facts.append(fact("model", "none to show"));
    return true;
  }
  const select = $("#model");
  if (![...select.options].some((o) => o.value === name)) {
    const opt = document.createElement("option");
    opt.value = name;
    opt.textContent = `${name} (unknown)`;
    select.append(opt);
  }
  select.value = name;
  try {
    const m = await api(`/models/${encodeURIComponent(name)}`);
    modelDetail = m;
    facts.append(
      fact("name", m.name),
      fact("words", m.count.toLocaleString("en")),
      fact("dimension", String(m.dim)),
      fact("codec", m.codec),
      fact("generation", String(m.generation)),
      fact("source", m.source || "—"),
      fact("approximate search", annText(m.ann)),
    );
    if (m.ngram_buckets) {
      facts.append(
        fact("subwords", `${m.min_n}–${m.max_n}-grams, ${m.ngram_buckets.toLocaleString("en")} buckets`),
      );
    }
    return true;
  } catch (err) {
    const names = models.map((x) => quote(x.name)).join(", ");
    const more = err.body && err.body.error === "ModelNotFound" && names ? ` Models here: ${names}.` : "";
    show($("#model-error"), err.message + more);
    // an unknown model: the sections would all repeat this message; other errors (Redis
    // down, not ready) may pass, so the sections still try and say what they get
    return !(err.body && err.body.error === "ModelNotFound");
  }
}

// -- sections ----------------------------------------------------------------------------

const fmt = (x) => (typeof x === "number" ? x.toFixed(4) : String(x));

// fastText models answer words outside their vocabulary from character n-grams; the
// service names those words in `subwords`, and the page says so beside the answer
function subwordNote(words) {
  if (!words || !words.length) return null;
  const span = document.createElement("span");
  span.className = "subwords";
  const list = words.map(quote).join(", ");
  span.textContent = `${list}: not in the vocabulary, built from character n-grams`;
  const tag = document.createElement("abbr");
  tag.className = "tag";
  tag.textContent = "subwords";
  tag.title = "Not in the model's vocabulary: the vector was built from the word's character n-grams, as fastText does.";
  span.prepend(tag, " ");
  return span;
}

function wordButton(word) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "link";
  b.textContent = word;
  b.title = `Explore ${word}`;
  b.addEventListener("click", () => explore(word));
  return b;
}

function explore(word) {
  go({ ...state, word });
  $("#word").focus();
}

async function runNeighbours() {
  const table = $("#neighbours-table");
  const err = $("#neighbours-error");
  const mode = $("#neighbours-mode");
  show(err, "");
  show(mode, "");
  table.hidden = true;
  $("#map-figure").hidden = true;
  if (!state.word || !modelOK) return;
  const topn = Math.max(1, Math.min(100, parseInt(state.topn || "10", 10) || 10));
  const approx = state.approx === "1";
  // a sentence (words with spaces between): its vector from /embed, the mean of its tokens
  const sentence = /\s/.test(state.word.trim());
  let positive = [state.word];
  let res;
  let pooled = "";
  try {
    if (sentence) {
      const emb = await api("/embed", {
        params: { model: modelParam() },
        body: { texts: [state.word] },
      });
      if (!emb.tokens[0]) {
        show(err, `None of the words of ${quote(state.word)} is in the model.`);
        return;
      }
      positive = [emb.vectors[0]];
      pooled = ` The sentence's vector: the mean of its ${emb.tokens[0]} known tokens (${emb.unknown[0]} unknown).`;
    }
    res = await api("/most_similar", {
      params: { model: modelParam() },
      body: { positive, topn, approx },
    });
  } catch (e) {
    show(err, e.message);
    return;
  }
  const results = res.results || [];
  let how = `Exact cosine similarity, model ${quote(res.model)} generation ${res.generation}.`;
  if (res.approximate) {
    const ann = modelDetail && modelDetail.ann;
    const r = ann && typeof ann.recall_at_10 === "number" ? ann.recall_at_10.toFixed(3) : "unknown";
    const kind = ann && ann.params && ann.params.kind ? ` (${ann.params.kind.toUpperCase()})` : "";
    how = `Approximate search${kind}, measured recall@10 ${r}; cosines re-scored exactly.`;
  } else if (approx) {
    how = `Asked for approximate search, answered exactly (approximate index: ${res.approximate_status}).`;
  }
  show(mode, how + pooled);
  const note = subwordNote(res.subwords);
  if (note) mode.append(" ", note);
  const tbody = table.querySelector("tbody");
  tbody.replaceChildren();
  results.forEach(([word, score], i) => {
    const tr = document.createElement("tr");
    const rank = document.createElement("td");
    rank.className = "rank";
    rank.textContent = String(i + 1);
    const w = document.createElement("td");
    w.className = "word";
    w.append(wordButton(word));
    const c = document.createElement("td");
    c.className = "num";
    const box = document.createElement("div");
    box.className = "cos";
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${Math.max(0, score) * 6}rem`;
    const val = document.createElement("span");
    val.className = "score";
    val.textContent = fmt(score);
    box.append(bar, val);
    c.append(box);
    tr.append(rank, w, c);
    tbody.append(tr);
  });
  table.hidden = false;
  if (sentence) return; // the map places words; a sentence is none
  try {
    await drawMap(state.word, results);
  } catch (e) {
    show(err, `The map could not be drawn: ${e.message}`);
  }
}

async function runSimilarity() {
  const out = $("#similarity-result");
  const err = $("#similarity-error");
  show(err, "");
  out.textContent = "";
  if (!state.w1 || !state.w2 || !modelOK) return;
  try {
    const res = await api("/similarity", { params: { model: modelParam(), w1: state.w1, w2: state.w2 } });
    out.replaceChildren(
      `cosine(${quote(state.w1)}, ${quote(state.w2)}) = `,
      Object.assign(document.createElement("strong"), { textContent: fmt(res.similarity) }),
    );
    const note = subwordNote(res.subwords);
    if (note) out.append(" ", note);
  } catch (e) {
    show(err, e.message);
  }
}

async function runAnalogy() {
  const out = $("#analogy-result");
  const err = $("#analogy-error");
  show(err, "");
  out.replaceChildren();
  if (!state.a || !state.b || !state.c || !modelOK) return;
  try {
    const res = await api("/analogy", {
      params: { model: modelParam(), a: state.a, b: state.b, c: state.c, topn: 5 },
    });
    const p = document.createElement("p");
    p.className = "answer";
    p.append(`${quote(state.a)} is to ${quote(state.b)} as ${quote(state.c)} is to `);
    const strong = document.createElement("strong");
    strong.textContent = res.answer ?? "(no answer)";
    p.append(strong);
    out.append(p);
    const rest = (res.results || []).slice(1);
    if (rest.length) {
      const ol = document.createElement("ol");
      ol.start = 2;
      for (const [w, s] of rest) {
        const li = document.createElement("li");
        li.append(wordButton(w), ` ${fmt(s)}`);
        ol.append(li);
      }
      out.append(ol);
    }
  } catch (e) {
    show(err, e.message);
  }
}

async function runOdd() {
  const out = $("#odd-result");
  const err = $("#odd-error");
  show(err, "");
  out.textContent = "";
  if (!state.odd || !modelOK) return;
  const words = state.odd.split(/\s+/).filter(Boolean);
  try {
    const res = await api("/doesnt_match", { params: { model: modelParam() }, body: { words } });
    out.replaceChildren(
      "The odd one out: ",
      Object.assign(document.createElement("strong"), { textContent: res.word }),
    );
    if (res.ignored && res.ignored.length) {
      out.append(` (not in the vocabulary, ignored: ${res.ignored.map(quote).join(", ")})`);
    }
  } catch (e) {
    show(err, e.message);
  }
}

const RUN = { neighbours: runNeighbours, similarity: runSimilarity, analogy: runAnalogy, odd: runOdd };

// -- the map: PCA of the word and its neighbours, in SVG ------------------------------------

/** The rows of `X` (n x d, arrays) projected on their two principal components. */
export function pca2(X) {
  const n = X.length;
  const d = n ? X[0].length : 0;
  const mean = new Float64Array(d);
  for (const row of X) for (let j = 0; j < d; j++) mean[j] += row[j] / n;
  const C = X.map((row) => Float64Array.from(row, (v, j) => v - mean[j]));
  // Gram matrix G = C C^T (n x n): its top eigenvectors, scaled, are the coordinates.
  const G = C.map((a) => C.map((b) => a.reduce((s, v, j) => s + v * b[j], 0)));
  const coords = X.map(() => [0, 0]);
  for (let k = 0; k < 2; k++) {
    let v = Float64Array.from({ length: n }, (_, i) => 1 + ((i * 7919) % 13) / 13);
    let lambda = 0;
    for (let it = 0; it < 300; it++) {
      const w = G.map((row) => row.reduce((s, g, j) => s + g * v[j], 0));
      const norm = Math.hypot(...w);
      if (norm < 1e-12) break;
      const next = w.map((x) => x / norm);
      const delta = next.reduce((s, x, i) => s + Math.abs(x - v[i]), 0);
      v = Float64Array.from(next);
      lambda = norm;
      if (delta < 1e-10) break;
    }
    // deterministic sign: the first point (the word itself) on the positive side
    const sign = v[0] < 0 ? -1 : 1;
    for (let i = 0; i < n; i++) coords[i][k] = sign * v[i] * Math.sqrt(lambda);
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) G[i][j] -= lambda * v[i] * v[j];
    }
  }
  return coords;
}

function el(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.append(e);
  return e;
}

async function drawMap(word, results) {
  const svg = $("#map");
  svg.replaceChildren();
  if (!results.length) return;
  const words = [word, ...results.map(([w]) => w)];
  const res = await api("/vectors", {
    params: { model: modelParam() },
    body: { words, missing: "error" },
  });
  const xy = pca2(res.vectors);
  const W = 640;
  const H = 460;
  const pad = { l: 90, r: 90, t: 34, b: 34 };
  const xs = xy.map((p) => p[0]);
  const ys = xy.map((p) => p[1]);
  const span = (a) => Math.max(...a) - Math.min(...a) || 1;
  const sx = (x) => pad.l + ((x - Math.min(...xs)) / span(xs)) * (W - pad.l - pad.r);
  const sy = (y) => H - pad.b - ((y - Math.min(...ys)) / span(ys)) * (H - pad.t - pad.b);
  el("line", { class: "axis", x1: sx(0), x2: sx(0), y1: pad.t / 2, y2: H - pad.b / 2 }, svg);
  el("line", { class: "axis", y1: sy(0), y2: sy(0), x1: pad.l / 2, x2: W - pad.l / 2 }, svg);
  const cosine = new Map(results);
  const placed = [];
  const dots = xy.map(([x, y]) => [sx(x), sy(y)]);
  // the query word's label is placed first (it gets the best spot), drawn last (on top)
  labelSpot(dots[0][0], dots[0][1], words[0], true, placed, dots);
  const order = [...words.keys()].slice(1).concat([0]);
  for (const i of order) {
    const w = words[i];
    const isQuery = i === 0;
    const x = sx(xy[i][0]);
    const y = sy(xy[i][1]);
    const label = isQuery ? `${w} (the word)` : `${w}, cosine ${fmt(cosine.get(w))}`;
    const g = el("g", {
      class: isQuery ? "pt query" : "pt neighbour",
      tabindex: "0",
      role: "button",
      "aria-label": isQuery ? label : `${label}. Explore ${w}`,
      "data-word": w,
      transform: `translate(${x.toFixed(1)},${y.toFixed(1)})`,
    }, svg);
    el("title", {}, g).textContent = label;
    el("circle", { r: isQuery ? 8 : 6 }, g);
    const spot = isQuery ? placed[0].spot : labelSpot(x, y, w, false, placed, dots);
    el("text", { x: spot.dx, y: spot.dy, "text-anchor": spot.anchor }, g).textContent = w;
    const enter = () => tip(svg, x, y, isQuery ? w : `${w} · cosine ${fmt(cosine.get(w))}`);
    g.addEventListener("mouseenter", enter);
    g.addEventListener("focus", enter);
    g.addEventListener("mouseleave", () => tip(svg));
    g.addEventListener("blur", () => tip(svg));
    if (!isQuery) {
      g.addEventListener("click", () => explore(w));
      g.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" || ev.key === " ") {
          ev.preventDefault();
          explore(w);
        }
      });
    }
  }
  $("#map-figure").hidden = false;
}

const SPOTS = [
  { dx: 11, dy: 4, anchor: "start" },
  { dx: -11, dy: 4, anchor: "end" },
  { dx: 0, dy: -11, anchor: "middle" },
  { dx: 0, dy: 20, anchor: "middle" },
  { dx: 9, dy: -8, anchor: "start" },
  { dx: 9, dy: 16, anchor: "start" },
  { dx: -9, dy: -8, anchor: "end" },
  { dx: -9, dy: 16, anchor: "end" },
];

/** Where to put a point's label: the first of SPOTS whose box hits no label already
 * placed, no other point and stays inside the map; else the one that overlaps least. */
function labelSpot(x, y, word, bold, placed, dots) {
  const w = (bold ? 9 : 7.6) * [...word].length;
  const h = bold ? 15 : 13;
  let best = null;
  for (const spot of SPOTS) {
    const left = spot.anchor === "start" ? x + spot.dx : spot.anchor === "end" ? x + spot.dx - w : x - w / 2;
    const box = { l: left, r: left + w, t: y + spot.dy - h + 2, b: y + spot.dy + 3 };
    let cost = 0;
    for (const p of placed) {
      const ox = Math.min(box.r, p.box.r) - Math.max(box.l, p.box.l);
      const oy = Math.min(box.b, p.box.b) - Math.max(box.t, p.box.t);
      if (ox > 0 && oy > 0) cost += ox * oy;
    }
    for (const [px, py] of dots) {
      if ((px !== x || py !== y) && px > box.l - 6 && px < box.r + 6 && py > box.t - 6 && py < box.b + 6) {
        cost += 60;
      }
    }
    if (box.l < 2 || box.r > 638 || box.t < 2 || box.b > 458) cost += 10000;
    if (best === null || cost < best.cost) best = { cost, spot, box };
    if (cost === 0) break;
  }
  placed.push(best);
  return best.spot;
}

function tip(svg, x, y, text) {
  svg.querySelector(".tip")?.remove();
  if (text === undefined) return;
  const g = el("g", { class: "tip", "pointer-events": "none" }, svg);
  const t = el("text", { x: 0, y: 0 }, g);
  t.textContent = text;
  const w = 7.4 * [...text].length + 16;
  const tx = Math.min(Math.max(x - w / 2, 4), 640 - w - 4);
  const ty = y < 50 ? y + 16 : y - 40;
  el("rect", { x: tx, y: ty, width: w, height: 24, rx: 4 }, g).after(t);
  t.setAttribute("x", tx + 8);
  t.setAttribute("y", ty + 16);
}

// -- wiring ------------------------------------------------------------------------------

function formState(keys, values) {
  const next = { ...state };
  for (const k of keys) {
    if (values[k] === undefined || values[k] === "") delete next[k];
    else next[k] = values[k];
  }
  return next;
}

function wire() {
  $("#neighbours-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    go(formState(SECTIONS.neighbours, {
      word: $("#word").value.trim(),
      topn: $("#topn").value === "10" ? "" : $("#topn").value,
      approx: $("#approx").checked ? "1" : "",
    }));
  });
  $("#similarity-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    go(formState(SECTIONS.similarity, { w1: $("#w1").value.trim(), w2: $("#w2").value.trim() }));
  });
  $("#analogy-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    go(formState(SECTIONS.analogy, {
      a: $("#a").value.trim(), b: $("#b").value.trim(), c: $("#c").value.trim(),
    }));
  });
  $("#odd-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    go(formState(SECTIONS.odd, { odd: $("#odd-words").value.trim().split(/\s+/).join(" ") }));
  });
  $("#model").addEventListener("change", () => go({ ...state, model: $("#model").value }));
  $("#model-form").addEventListener("submit", (ev) => ev.preventDefault());
  window.addEventListener("popstate", () => go(readURL(), { push: false }));
}

async function main() {
  wire();
  await loadModels();
  await go(readURL(), { push: false, all: true });
}

main();
