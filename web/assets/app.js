// kafka-audit dashboard: plain JavaScript, no library, no build step. It reads the
// public REST API only (/api/v1, see /api/openapi.json) and keeps its state in the URL
// hash (#/topic/NAME?range=6h, #/anomalies?page=2&kind=loss), so a link shows the same
// view to whoever opens it. All times are shown in UTC, like the API's windows.
'use strict';
(function () {
  // Relative, like the asset links: behind a reverse proxy that serves us under a
  // path prefix (say /kafka-audit/), every request stays under it.
  const API = 'api/v1';
  const TOKEN_KEY = 'kafka-audit.token';
  const REFRESH_KEY = 'kafka-audit.refresh';
  const MIN = 60000;
  const HOUR = 60 * MIN;
  const DAY = 24 * HOUR;
  const RANGES = [
    ['15m', 15 * MIN], ['30m', 30 * MIN], ['1h', HOUR], ['3h', 3 * HOUR], ['6h', 6 * HOUR], ['12h', 12 * HOUR],
    ['24h', DAY], ['3d', 3 * DAY], ['7d', 7 * DAY],
  ];
  const RANGE_MS = Object.fromEntries(RANGES);
  const DEFAULT_RANGE = '6h';
  const REFRESHES = [['0', 'off'], ['15', '15 s'], ['30', '30 s'], ['60', '1 min'], ['300', '5 min']];
  const DEFAULT_REFRESH = '30';
  // Severity order, as the API's Verdict enum.
  const VERDICTS = ['ok', 'pending', 'delayed', 'duplication', 'mismatch', 'stalled', 'loss'];
  const ANOMALIES = ['loss', 'stalled', 'mismatch', 'duplication', 'delayed'];
  const BAND_FILL = {
    loss: ['#c21d2b', 0.2], stalled: ['#3b434d', 0.16], mismatch: ['#7a3fc9', 0.17],
    duplication: ['#e86e14', 0.22], delayed: ['#d4a72c', 0.22],
  };
  const BAND_TEXT = {
    loss: '#c21d2b', stalled: '#3b434d', mismatch: '#7a3fc9', duplication: '#bc4c00', delayed: '#8a5a00',
  };
  // Not red or orange: those mean loss and duplication.
  const SERIES = ['#2f6fde', '#139a74', '#8b5cf6', '#0e93b0', '#d03f95', '#56657a', '#9c6b00'];
  const TABLE_LIMIT = 1000;
  const SVGNS = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);
  const severity = (v) => VERDICTS.indexOf(v);
  const isAnomaly = (v) => ANOMALIES.includes(v);

  // ---------------------------------------------------------------- DOM helpers

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
  }
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVGNS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  const store = {
    get(k) { try { return localStorage.getItem(k); } catch (_) { return null; } },
    set(k, v) { try { if (v === null) localStorage.removeItem(k); else localStorage.setItem(k, v); } catch (_) { /* private mode */ } },
  };

  // ---------------------------------------------------------------- formatting

  const pad = (n) => String(n).padStart(2, '0');
  function utc(ms) {
    const d = new Date(ms);
    return { y: d.getUTCFullYear(), mo: pad(d.getUTCMonth() + 1), d: pad(d.getUTCDate()), h: pad(d.getUTCHours()), mi: pad(d.getUTCMinutes()), s: pad(d.getUTCSeconds()) };
  }
  const fmtClock = (ms) => { const t = utc(ms); return `${t.h}:${t.mi}`; };
  const fmtClockSec = (ms) => { const t = utc(ms); return `${t.h}:${t.mi}:${t.s}`; };
  const fmtDay = (ms) => { const t = utc(ms); return `${t.mo}-${t.d}`; };
  const fmtFull = (ms) => { const t = utc(ms); return `${t.y}-${t.mo}-${t.d} ${t.h}:${t.mi}`; };
  /// Seconds only when the window is shorter than a minute (`09:53:00–09:53:30`),
  /// where minutes alone would label it `09:53–09:53`.
  function fmtWindow(start, end) {
    const clock = end - start < MIN ? fmtClockSec : fmtClock;
    return `${fmtDay(start)} ${clock(start)}–${clock(end)}`;
  }
  const int = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US'));
  function signed(n) {
    if (n === 0) return '0';
    return (n > 0 ? '+' : '−') + Math.abs(n).toLocaleString('en-US');
  }
  function compact(n) {
    const a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(a >= 1e10 ? 0 : 1) + 'G';
    if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
    if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + 'k';
    return String(Math.round(n * 100) / 100);
  }
  function pct(c) {
    if (c === null || c === undefined) return '–';
    let t = (c * 100).toFixed(2);
    // Never round a real difference away: 99.9996 % is not 100.00 %.
    if (c !== 1 && (t === '100.00' || t === '0.00')) t = (c * 100).toPrecision(7);
    return t + '%';
  }
  function ms(v) {
    if (v === null || v === undefined) return '–';
    if (v < 1000) return `${v < 10 ? v.toFixed(1) : Math.round(v)} ms`;
    if (v < 60000) return `${(v / 1000).toFixed(2)} s`;
    if (v < 3600000) return `${trim(v / 60000)} min`;
    return `${trim(v / 3600000)} h`;
  }
  const trim = (x) => x.toFixed(1).replace(/\.0$/, '');
  function badge(v) {
    return h('span', { class: `badge v-${v}`, 'data-verdict-badge': v }, v);
  }
  function diffCell(d) {
    return h('td', { class: 'num ' + (d < 0 ? 'neg' : d > 0 ? 'pos' : 'dim') }, signed(d));
  }

  // ---------------------------------------------------------------- URL state

  function route() {
    const raw = location.hash.replace(/^#/, '');
    const q = raw.indexOf('?');
    const path = q < 0 ? raw : raw.slice(0, q);
    const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
    const parts = path.split('/').filter(Boolean);
    if (parts[0] === 'topic' && parts.length > 1) {
      return { view: 'topic', topic: decodeURIComponent(parts.slice(1).join('/')), params };
    }
    if (parts[0] === 'anomalies') return { view: 'anomalies', params };
    return { view: 'topics', params };
  }

  function link(view, topic, params) {
    const p = new URLSearchParams();
    for (const [k, v] of params || []) if (v !== '' && v !== null && v !== undefined) p.set(k, v);
    const qs = p.toString();
    const path = view === 'topic' ? '/topic/' + encodeURIComponent(topic) : view === 'anomalies' ? '/anomalies' : '/';
    return '#' + path + (qs ? '?' + qs : '');
  }

  /// Only the range survives a move to another view.
  function rangeOnly(params) {
    const p = new URLSearchParams();
    for (const k of ['range', 'from', 'to']) if (params.has(k)) p.set(k, params.get(k));
    return p;
  }

  function withParam(params, key, value) {
    const p = new URLSearchParams(params);
    if (value === '' || value === null || value === undefined) p.delete(key); else p.set(key, value);
    return p;
  }

  /// Rewrites the URL without a reload (filters typed into a field).
  function replaceUrl(r, params) {
    history.replaceState(null, '', link(r.view, r.topic, params));
  }

  /// [from, to) in epoch ms; `from` aligned down to a window start so that every
  /// query of the page sees the same whole windows.
  function resolveRange(params, windowMs) {
    const from = Number(params.get('from'));
    const to = Number(params.get('to'));
    let r;
    if (params.has('from') && params.has('to') && Number.isFinite(from) && Number.isFinite(to) && from < to) {
      r = { from, to, key: 'custom' };
    } else {
      const key = RANGE_MS[params.get('range')] ? params.get('range') : DEFAULT_RANGE;
      const now = Date.now();
      r = { from: now - RANGE_MS[key], to: now, key };
    }
    if (windowMs > 0) r.from = Math.floor(r.from / windowMs) * windowMs;
    return r;
  }

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message, url) {
      super(message);
      this.status = status;
      this.url = url;
    }
  }

  async function api(path, params) {
    const qs = params ? new URLSearchParams(Object.entries(params).filter(([, v]) => v !== '' && v !== undefined && v !== null)).toString() : '';
    const url = API + path + (qs ? '?' + qs : '');
    const headers = { Accept: 'application/json' };
    const token = store.get(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    let r;
    try {
      r = await fetch(url, { headers, cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, `cannot reach the server (${e.message})`, url);
    }
    let body = null;
    try { body = await r.json(); } catch (_) { /* not JSON: keep the status line */ }
    if (!r.ok) {
      const msg = (body && body.error && body.error.message) || `${r.status} ${r.statusText}`;
      throw new ApiError(r.status, msg, url);
    }
    return body;
  }

  let topologyCache = null;
  function topology() {
    if (!topologyCache) {
      topologyCache = api('/topology').catch((e) => { topologyCache = null; throw e; });
    }
    return topologyCache;
  }

  // ---------------------------------------------------------------- page chrome

  function fillSelect(sel, options, value) {
    sel.replaceChildren(...options.map(([v, label]) => h('option', { value: v, selected: v === value }, label)));
  }

  function updateChrome(r) {
    const range = rangeOnly(r.params);
    $('nav-topics').href = link('topics', null, range);
    $('nav-anomalies').href = link('anomalies', null, range);
    $('brand').href = link('topics', null, range);
    $('nav-topics').classList.toggle('active', r.view !== 'anomalies');
    $('nav-anomalies').classList.toggle('active', r.view === 'anomalies');
    const custom = r.params.has('from') && r.params.has('to');
    const opts = RANGES.map(([k]) => [k, 'last ' + k]);
    if (custom) {
      opts.unshift(['custom', `${fmtFull(Number(r.params.get('from')))} – ${fmtFull(Number(r.params.get('to')))} UTC`]);
    }
    fillSelect($('range'), opts, custom ? 'custom' : (RANGE_MS[r.params.get('range')] ? r.params.get('range') : DEFAULT_RANGE));
    $('pin').disabled = custom;
    fillSelect($('refresh'), REFRESHES, refreshSetting());
  }

  function refreshSetting() {
    const v = store.get(REFRESH_KEY);
    return REFRESHES.some(([k]) => k === v) ? v : DEFAULT_REFRESH;
  }

  function setStatus(text, stale) {
    const el = $('status');
    el.textContent = text;
    el.classList.toggle('stale', Boolean(stale));
  }

  function showAuth(message) {
    $('auth-message').textContent = message;
    // Already open: do not steal the focus again at every refresh.
    if (!$('auth').hidden) return;
    $('auth').hidden = false;
    $('auth-token').value = store.get(TOKEN_KEY) || '';
    $('auth-token').focus();
  }

  function showError(e) {
    const el = $('error');
    if (!e) { el.hidden = true; el.textContent = ''; return; }
    const where = e.url ? ` (GET ${new URL(e.url, document.baseURI).pathname})` : '';
    el.textContent = (e.status ? `${e.status}: ` : '') + e.message + where;
    el.hidden = false;
  }

  // ---------------------------------------------------------------- rendering loop

  let generation = 0;
  let timer = null;

  function schedule(retrySoon) {
    clearTimeout(timer);
    // 503 is what a server answers before its first evaluation (e.g. right after
    // `kafka-audit demo` starts): retry in seconds, whatever the refresh setting.
    if (retrySoon) { timer = setTimeout(() => render(true), 3000); return; }
    const secs = Number(refreshSetting());
    if (secs > 0) timer = setTimeout(() => (document.hidden ? schedule() : render(true)), secs * 1000);
  }

  function saveFocus() {
    const a = document.activeElement;
    if (!a || !a.id || !$('view').contains(a)) return null;
    return { id: a.id, start: a.selectionStart, end: a.selectionEnd };
  }
  function restoreFocus(f) {
    const el = f && $(f.id);
    if (!el) return;
    el.focus();
    if (typeof f.start === 'number' && el.setSelectionRange) el.setSelectionRange(f.start, f.end);
  }

  async function render(refresh) {
    const gen = ++generation;
    let unavailable = false;
    clearTimeout(timer);
    const r = route();
    document.body.setAttribute('data-view', r.view);
    document.title = (r.view === 'topic' ? `${r.topic} · ` : r.view === 'anomalies' ? 'Anomalies · ' : 'Topics · ') + 'kafka-audit';
    updateChrome(r);
    if (!refresh) {
      setStatus('Loading…');
      if ($('view').getAttribute('data-for') !== location.hash) document.body.setAttribute('data-state', 'loading');
    }
    try {
      const topo = await topology();
      const range = resolveRange(r.params, topo.window_ms);
      const node = await VIEWS[r.view](r, range, topo);
      if (gen !== generation) return;
      const focus = saveFocus();
      const scroll = window.scrollY;
      $('view').replaceChildren(node);
      $('view').setAttribute('data-for', location.hash);
      if (refresh) window.scrollTo(0, scroll);
      restoreFocus(focus);
      reopenOffsets();
      showError(null);
      setStatus(`Updated ${fmtClockSec(Date.now())} UTC`);
      document.body.setAttribute('data-state', 'ready');
    } catch (e) {
      if (gen !== generation) return;
      if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
        showAuth(e.status === 401 ? `The API needs a bearer token: ${e.message}.` : `This token may not read the API: ${e.message}.`);
      }
      unavailable = e instanceof ApiError && e.status === 503;
      showError(e);
      // A failed refresh keeps the last good data on screen (the banner says it is
      // stale); a failed navigation must not leave the previous view looking current.
      if (!refresh && $('view').getAttribute('data-for') !== location.hash) {
        $('view').replaceChildren(h('div', { class: 'panel empty' }, 'This view could not be loaded; the reason is shown above.'));
        $('view').setAttribute('data-for', '');
      }
      setStatus(`Update failed ${fmtClockSec(Date.now())} UTC`, true);
      document.body.setAttribute('data-state', 'error');
      if (!(e instanceof ApiError)) console.error(e);
    } finally {
      if (gen === generation) schedule(unavailable);
    }
  }

  // ---------------------------------------------------------------- topics view

  /// Pages of `path` at the server's default page size (the largest it allows is
  /// configuration we cannot see), up to `maxPages`.
  async function pages(path, params, key, maxPages) {
    const items = [];
    let first = null;
    for (let page = 1; page <= maxPages; page++) {
      const res = await api(path, { ...params, page });
      first = first || res;
      items.push(...res[key]);
      if (items.length >= res.total || res[key].length === 0) break;
    }
    return { ...first, [key]: items };
  }

  function verdictFilterOptions() {
    return [['', 'All topics'], ['anomalous', 'Any anomaly'], ...ANOMALIES.map((v) => [v, v]),
      ['ok', 'Healthy'], ['pending', 'Awaiting a verdict']];
  }

  async function topicsView(r, range) {
    const q = { from: range.from, to: range.to };
    const [res, anomalies] = await Promise.all([
      pages('/topics', q, 'topics', 200),
      pages('/anomalies', q, 'anomalies', 10),
    ]);
    const kinds = new Map();
    for (const a of anomalies.anomalies) {
      const k = kinds.get(a.topic) || {};
      k[a.verdict] = (k[a.verdict] || 0) + 1;
      kinds.set(a.topic, k);
    }
    // Health is the worst *anomaly*: the newest windows of every live topic are still
    // open or settling (pending), which is normal and shown as a count of its own.
    const topics = res.topics.map((t) => ({ ...t, health: isAnomaly(t.worst) ? t.worst : 'ok' }))
      .sort((a, b) => severity(b.health) - severity(a.health) || b.anomalies - a.anomalies || a.topic.localeCompare(b.topic));

    const text = r.params.get('q') || '';
    const vf = r.params.get('verdict') || '';
    const rangeP = rangeOnly(r.params);

    const count = (pred) => topics.filter(pred).length;
    const tile = (cls, n, label, verdict) => h('a', {
      class: `tile ${cls}${n === 0 ? ' zero' : ''}`, href: link('topics', null, withParam(r.params, 'verdict', verdict)),
      'data-tile': verdict,
    }, h('div', { class: 'n' }, int(n)), h('div', { class: 'l' }, label));

    const tiles = h('div', { class: 'tiles' },
      tile('', topics.length, 'topics', ''),
      tile('t-loss', count((t) => t.health === 'loss'), 'with loss', 'loss'),
      tile('t-anomaly', count((t) => isAnomaly(t.health) && t.health !== 'loss'), 'with other anomalies', 'anomalous'),
      tile('t-ok', count((t) => t.health === 'ok'), 'healthy', 'ok'),
      tile('t-pending', count((t) => t.pending > 0), 'with windows awaiting a verdict', 'pending'));

    const input = h('input', { id: 'filter-q', type: 'search', placeholder: 'Filter topics  ( / )', value: text, 'aria-label': 'Filter topics by name', autocomplete: 'off', spellcheck: 'false' });
    const select = h('select', { id: 'filter-verdict', 'aria-label': 'Filter by worst verdict' });
    fillSelect(select, verdictFilterOptions(), vf);
    const shown = h('span', { class: 'sub' });
    const tbody = h('tbody');

    function fill() {
      const text = input.value.trim().toLowerCase();
      const v = select.value;
      const rows = topics.filter((t) => (!text || t.topic.toLowerCase().includes(text)) &&
        (!v || (v === 'anomalous' ? isAnomaly(t.health) : v === 'pending' ? t.pending > 0 : t.health === v)));
      tbody.replaceChildren(...rows.map((t) => {
        const href = link('topic', t.topic, rangeP);
        const k = kinds.get(t.topic) || {};
        return h('tr', {
          class: `clickable${isAnomaly(t.health) ? ` anomalous r-${t.health}` : ''}`,
          'data-topic': t.topic, 'data-health': t.health, 'data-worst': t.worst, 'data-anomalies': t.anomalies,
          onclick: (ev) => { if (!ev.target.closest('a')) location.hash = href; },
        },
        h('td', {}, badge(t.health)),
        h('td', { class: 'mono' }, h('a', { href }, t.topic)),
        h('td', { class: 'num' + (t.anomalies ? '' : ' dim') }, int(t.anomalies)),
        h('td', {}, h('span', { class: 'chips' }, ANOMALIES.filter((a) => k[a]).map((a) =>
          h('span', { class: `chip v-${a}`, title: `${k[a]} ${a} window × edge` }, `${a} ${k[a]}`)))),
        h('td', { class: 'num' + (t.pending ? '' : ' dim') }, int(t.pending)));
      }));
      if (rows.length === 0) {
        tbody.append(h('tr', {}, h('td', { colspan: 5, class: 'empty' },
          topics.length ? 'No topic matches the filter.' : 'No topic has audited windows in this range.')));
      }
      shown.textContent = rows.length === topics.length ? `${int(topics.length)} topics` : `${int(rows.length)} of ${int(topics.length)} topics`;
    }
    const sync = () => { replaceUrl(r, withParam(withParam(r.params, 'q', input.value.trim()), 'verdict', select.value)); fill(); };
    input.addEventListener('input', sync);
    select.addEventListener('change', sync);
    fill();

    const partial = anomalies.total > anomalies.anomalies.length
      ? h('div', { class: 'foot' }, `Anomaly kinds are counted from the first ${int(anomalies.anomalies.length)} of ${int(anomalies.total)} anomalies.`) : null;

    return h('div', { 'data-page': 'topics' },
      h('div', { class: 'page-head' },
        h('h1', {}, 'Topics'),
        h('span', { class: 'sub' }, `windows starting ${fmtFull(res.from)} – ${fmtFull(res.to)} UTC · verdicts evaluated ${fmtClockSec(res.evaluated_at)} UTC`)),
      tiles,
      h('section', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', {}, 'Health by topic'), shown, h('span', { class: 'spacer' }),
          h('div', { class: 'filters' }, input, select)),
        h('div', { class: 'panel-body flush' },
          h('table', { class: 'grid', id: 'topics-table' },
            h('thead', {}, h('tr', {},
              h('th', { title: 'Worst anomaly of the range, ok when none' }, 'Health'), h('th', {}, 'Topic'),
              h('th', { class: 'num', title: 'Window × edge comparisons with an anomalous verdict' }, 'Anomalies'),
              h('th', {}, 'By kind'),
              h('th', { class: 'num', title: 'Window × edge comparisons still open, settling or waiting for an auditor' }, 'Awaiting verdict'))),
            tbody),
          partial)));
  }

  // ---------------------------------------------------------------- topic view

  /// A tier keeps its colour whichever datacenter is shown: colours follow the
  /// topology's order of tiers.
  function tierColors(topo, tiers) {
    const names = topo.tiers.map((t) => t.name);
    for (const t of tiers) if (!names.includes(t)) names.push(t);
    return (tier) => SERIES[Math.max(0, names.indexOf(tier)) % SERIES.length];
  }

  function tierOrder(topo, rows) {
    const names = topo.tiers.map((t) => t.name);
    for (const r of rows) if (!names.includes(r.tier)) names.push(r.tier);
    return names.filter((n) => rows.some((r) => r.tier === n));
  }

  async function topicView(r, range, topo) {
    const topic = r.topic;
    const enc = encodeURIComponent(topic);
    const q = { from: range.from, to: range.to };
    // Optional datacenter: the chart and latency then show that datacenter's rows, and
    // the tables the edges that start or end there.
    const dc = r.params.get('dc') || '';
    const [win, cmp] = await Promise.all([
      api(`/topics/${enc}/windows`, { ...q, datacenter: dc }),
      api(`/topics/${enc}/compare`, q),
    ]);
    const windowMs = win.window_ms;
    const tiers = tierOrder(topo, win.windows);
    const dcs = [...new Set(cmp.edges.flatMap((e) => [...e.upstream_datacenters, e.datacenter]))].sort();
    const edges = dc ? cmp.edges.filter((e) => e.datacenter === dc || e.upstream_datacenters.includes(dc)) : cmp.edges;
    const worst = edges.reduce((w, e) => (severity(e.verdict) > severity(w) ? e.verdict : w), 'ok');
    const anomalous = edges.filter((e) => isAnomaly(e.verdict));
    const rangeP = rangeOnly(r.params);

    const head = h('div', { class: 'page-head' },
      h('a', { class: 'crumb', href: link('topics', null, rangeP) }, 'Topics /'),
      h('h1', { class: 'topic-name', id: 'topic-title' }, topic),
      badge(worst),
      h('span', { class: 'sub' }, `windows of ${ms(windowMs)} starting ${fmtFull(range.from)} – ${fmtFull(range.to)} UTC · grace ${ms(topo.grace_ms)}`),
      h('span', { class: 'spacer' }),
      dcs.length > 1 || dc ? dcSelect(r, dcs, dc) : null);

    if (win.windows.length === 0 && edges.every((e) => e.expected === 0 && e.observed === 0)) {
      return h('div', { 'data-page': 'topic' }, head,
        h('section', { class: 'panel' }, h('div', { class: 'empty' },
          `No tier reported topic ${topic} in this range. Check the name, or choose a longer range.`)));
    }

    // Windows before the first one any tier reported say nothing (0 expected, 0
    // observed): the default range starts the chart where data starts, and the verdict
    // table leaves them out. A link with a range of its own keeps the whole range.
    const reported = new Set(win.windows.map((w) => w.window_start));
    for (const e of edges) if (e.expected > 0 || e.observed > 0) reported.add(e.window_start);
    const firstData = [...reported].reduce((a, w) => Math.min(a, w), Infinity);
    const explicit = r.params.has('range') || (r.params.has('from') && r.params.has('to'));
    const chartFrom = explicit ? range.from : fitFrom(range, firstData, windowMs);
    const noData = (e) => e.expected === 0 && e.observed === 0 && !reported.has(e.window_start);

    // The completeness strip covers the chart's windows, one cell each.
    const gates = await completenessPanel(enc, edges, { ...q, from: chartFrom }, topo);
    return h('div', { 'data-page': 'topic', 'data-topic': topic },
      head,
      edgeSummary(edges, noData),
      chartPanel({ win, cmp: { ...cmp, edges }, tiers, colorOf: tierColors(topo, tiers), windowMs, range: { ...range, from: chartFrom }, fitted: chartFrom > range.from, topic }),
      gates,
      h('div', { class: 'cols' },
        latencyPanel(win, tiers, topo),
        anomalyListPanel(anomalous)),
      verdictPanel(r, edges, topic, { firstData, noData }));
  }

  /// Start of the default range's chart: one window before the first with data, and
  /// at least ten windows before the end, within the range.
  function fitFrom(range, firstData, windowMs) {
    if (!Number.isFinite(firstData)) return range.from;
    const last = Math.floor((range.to - 1) / windowMs) * windowMs;
    const from = Math.min(firstData - windowMs, last - 9 * windowMs);
    return Math.max(range.from, Math.floor(from / windowMs) * windowMs);
  }

  // ---------------------------------------------------------------- completeness gate

  /// Per downstream tier and datacenter, which windows a downstream job may publish:
  /// the answer of /completeness (final and at least the threshold of the tier's
  /// reference), one cell per window.
  async function completenessPanel(enc, edges, q, topo) {
    const seen = new Map();
    for (const e of edges) {
      const k = `${e.downstream}|${e.datacenter}|${e.upstream}`;
      if (!seen.has(k)) seen.set(k, e);
    }
    const several = (tier) => topo.edges.filter((x) => x.downstream === tier).length > 1;
    const order = topo.tiers.map((t) => t.name);
    const pairs = [...seen.values()].sort((a, b) => order.indexOf(a.downstream) - order.indexOf(b.downstream) ||
      a.datacenter.localeCompare(b.datacenter) || a.upstream.localeCompare(b.upstream));
    const results = await Promise.all(pairs.map((e) => api(`/topics/${enc}/completeness`, {
      ...q, tier: e.downstream, datacenter: e.datacenter, upstream: several(e.downstream) ? e.upstream : '',
    }).then((res) => ({ e, res }), (err) => ({ e, err }))));
    // 404: nothing is known of the topic at that tier pair (say, a mapped edge the
    // topic does not travel): no row rather than an error.
    const rows = results.filter((x) => !(x.err && x.err.status === 404)).map(({ e, res, err }) => {
      const label = h('td', { class: 'mono' }, e.downstream, ' ', h('span', { class: 'dc' }, e.datacenter),
        h('div', { class: 'dim gate-ref' }, `vs ${e.upstream} ${e.upstream_datacenters.join('+')}`));
      const attrs = { 'data-completeness-tier': e.downstream, 'data-datacenter': e.datacenter };
      if (err) return h('tr', attrs, label, h('td', { colspan: 2, class: 'neg' }, `Completeness unavailable: ${err.message}`));
      const cells = res.windows.map((w) => h('span', {
        class: `gate-cell g-${w.status}`,
        title: `${fmtWindow(w.window_start, w.window_end)} UTC: ${w.status}` +
          (w.no_data ? ', no data at either tier' : `, ${int(w.observed)} of ${int(w.reference)} (${pct(w.ratio)})`) +
          ` · ${w.lifecycle}${w.status === 'complete' ? '' : ` · ${w.reason}`}`,
        'data-gate-window': w.window_start, 'data-complete': w.complete ? 'true' : 'false', 'data-status': w.status,
        'data-no-data': w.no_data ? 'true' : null,
      }));
      return h('tr', { ...attrs, 'data-gate': res.status },
        label,
        h('td', { class: 'num' }, h('span', { class: `badge g-${res.status}` }, `${res.windows_complete}/${res.windows_total}`)),
        h('td', { class: 'gate-strip-cell' }, h('div', { class: 'gate-strip' }, cells)));
    });
    const threshold = results.find((x) => x.res);
    return h('section', { class: 'panel', id: 'completeness-panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Complete windows by tier'),
        h('span', { class: 'sub' }, `final and at least ${pct(threshold ? threshold.res.threshold : topo.completeness)} of the upstream tier · what kafka-audit wait gates on`),
        h('span', { class: 'spacer' }),
        h('div', { class: 'legend' },
          h('span', { class: 'item' }, h('span', { class: 'gate-cell g-complete' }), 'complete'),
          h('span', { class: 'item' }, h('span', { class: 'gate-cell g-pending' }), 'not final yet'),
          h('span', { class: 'item' }, h('span', { class: 'gate-cell g-incomplete' }), 'final, data missing'))),
      h('div', { class: 'panel-body flush scroll' }, h('table', { class: 'grid', id: 'completeness-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Tier (datacenter)'), h('th', { class: 'num' }, 'Complete'), h('th', {}, 'Windows, oldest first'))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 3, class: 'empty' }, 'No downstream tier in this view.'))))));
  }

  function dcSelect(r, dcs, dc) {
    const sel = h('select', { id: 'filter-dc', 'aria-label': 'Datacenter' });
    fillSelect(sel, [['', 'all datacenters'], ...dcs.map((d) => [d, d])], dc);
    sel.addEventListener('change', () => { location.hash = link('topic', r.topic, withParam(r.params, 'dc', sel.value)); });
    return h('label', { class: 'filters check' }, 'Datacenter', sel);
  }

  function edgeKey(e) {
    return `${e.upstream} → ${e.downstream}`;
  }

  /// The edge and, muted, its datacenters (upstream ones → downstream one).
  function edgeCell(e) {
    return h('td', { class: 'mono' }, edgeKey(e), ' ',
      h('span', { class: 'dc' }, `${e.upstream_datacenters.join(',')}→${e.datacenter}`));
  }

  function edgeSummary(edges, noData) {
    const groups = new Map();
    for (const e of edges) {
      if (noData(e) && e.verdict === 'ok') continue; // nobody reported: not a settled window
      const k = `${edgeKey(e)}|${e.datacenter}`;
      const g = groups.get(k) || { e, final: 0, expected: 0, observed: 0, kinds: {}, pending: 0 };
      if (e.lifecycle === 'final' && e.verdict !== 'pending' && e.verdict !== 'stalled') {
        g.final += 1; g.expected += e.expected; g.observed += e.observed;
      } else if (!isAnomaly(e.verdict)) g.pending += 1;
      if (isAnomaly(e.verdict)) g.kinds[e.verdict] = (g.kinds[e.verdict] || 0) + 1;
      groups.set(k, g);
    }
    const rows = [...groups.values()].map((g) => {
      const worstKind = ANOMALIES.find((a) => g.kinds[a]);
      const comp = g.expected === 0 ? (g.observed === 0 ? 1 : null) : g.observed / g.expected;
      return h('tr', { class: worstKind ? `anomalous r-${worstKind}` : '', 'data-edge': edgeKey(g.e), 'data-datacenter': g.e.datacenter },
        edgeCell(g.e),
        h('td', { class: 'num' }, int(g.final)),
        h('td', { class: 'num' }, int(g.expected)),
        h('td', { class: 'num' }, int(g.observed)),
        diffCell(g.observed - g.expected),
        h('td', { class: 'num' }, pct(comp)),
        h('td', {}, h('span', { class: 'chips' }, ANOMALIES.filter((a) => g.kinds[a]).map((a) => h('span', { class: `chip v-${a}` }, `${a} ${g.kinds[a]}`)),
          Object.keys(g.kinds).length ? null : h('span', { class: 'dim' }, 'none'))),
        h('td', { class: 'num' + (g.pending ? '' : ' dim') }, int(g.pending)));
    });
    return h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Edges'), h('span', { class: 'sub' }, 'totals over settled (final) windows')),
      h('div', { class: 'panel-body flush scroll' }, h('table', { class: 'grid', id: 'edges-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Edge (datacenters)'), h('th', { class: 'num' }, 'Final windows'),
          h('th', { class: 'num' }, 'Expected'), h('th', { class: 'num' }, 'Observed'), h('th', { class: 'num' }, 'Difference'),
          h('th', { class: 'num' }, 'Completeness'), h('th', {}, 'Anomalies'), h('th', { class: 'num', title: 'Windows still open, settling or waiting for an auditor' }, 'Awaiting verdict'))),
        h('tbody', {}, rows))));
  }

  // ---------------------------------------------------------------- the chart

  function niceStep(raw) {
    const mag = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 2.5, 5, 10].map((m) => m * mag).find((x) => x >= raw);
  }

  function timeStep(spanMs, px) {
    const steps = [10000, 15000, 30000, MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY];
    return steps.find((st) => (st / spanMs) * px >= 90) || steps[steps.length - 1];
  }

  function chartPanel({ win, cmp, tiers, colorOf, windowMs, range, fitted, topic }) {
    const first = Math.floor(range.from / windowMs) * windowMs;
    const wins = [];
    for (let w = first; w < range.to; w += windowMs) wins.push(w);
    const now = cmp.now;

    // Counts per tier and window, summed over datacenters (counts add exactly).
    const counts = new Map(tiers.map((t) => [t, new Map()]));
    for (const row of win.windows) {
      const m = counts.get(row.tier);
      if (m) m.set(row.window_start, (m.get(row.window_start) || 0) + row.count);
    }
    const edgesByWindow = new Map();
    for (const e of cmp.edges) {
      const l = edgesByWindow.get(e.window_start) || [];
      l.push(e);
      edgesByWindow.set(e.window_start, l);
    }
    const windowState = (w) => {
      const es = edgesByWindow.get(w) || [];
      const worst = es.reduce((acc, e) => (severity(e.verdict) > severity(acc) ? e.verdict : acc), 'ok');
      const anyData = tiers.some((t) => counts.get(t).has(w));
      return { es, worst, anyData, pending: es.some((e) => e.verdict === 'pending') };
    };

    const viewWidth = $('view').clientWidth || 1200;
    const W = Math.max(640, viewWidth - 26);
    const H = 300;
    const M = { l: 58, r: 14, t: 24, b: 26 };
    const pw = W - M.l - M.r;
    const ph = H - M.t - M.b;
    const x0 = wins[0];
    const x1 = wins[wins.length - 1] + windowMs;
    const X = (t) => M.l + ((t - x0) / (x1 - x0)) * pw;
    let max = 0;
    for (const m of counts.values()) for (const c of m.values()) max = Math.max(max, c);
    const step = Math.max(1, niceStep(Math.max(max, 1) * 1.08 / 4));
    const top = Math.max(step, Math.ceil((max * 1.08) / step) * step);
    const Y = (c) => M.t + ph - (c / top) * ph;
    const wpx = pw / wins.length;

    const svg = s('svg', {
      class: 'chart', id: 'counts-chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
      'aria-label': `Messages per window by tier for ${topic}`, 'data-chart': 'counts', 'data-windows': wins.length,
    });
    const defs = s('defs', {},
      s('pattern', { id: 'hatch-pending', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
        s('rect', { class: 'hatch-bg', width: 6, height: 6, fill: '#ffffff' }), s('line', { class: 'hatch-line', x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#dde1e6', 'stroke-width': 3 })),
      s('pattern', { id: 'hatch-nodata', width: 5, height: 5, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(-45)' },
        s('rect', { class: 'nodata-bg', width: 5, height: 5, fill: '#f4f5f7' }), s('line', { class: 'nodata-line', x1: 0, y1: 0, x2: 0, y2: 5, stroke: '#c3c9d1', 'stroke-width': 1 })));
    svg.append(defs);

    // Bands behind everything: anomalies, then windows still waiting, then windows nobody reported.
    const bands = s('g', { class: 'bands' });
    const labels = s('g', { class: 'band-labels' });
    let nodata = 0;
    for (const w of wins) {
      const st = windowState(w);
      const bx = X(w);
      const bw = Math.max(1, X(w + windowMs) - bx);
      if (isAnomaly(st.worst)) {
        const [fill, op] = BAND_FILL[st.worst];
        const diff = st.es.filter((e) => e.verdict === st.worst).reduce((a, e) => a + e.difference, 0);
        bands.append(s('rect', {
          x: bx, y: M.t, width: bw, height: ph, fill, 'fill-opacity': op,
          class: `band band-${st.worst}`, 'data-band': st.worst, 'data-window': w,
        }));
        bands.append(s('rect', { x: bx, y: M.t - 4, width: bw, height: 4, fill, 'data-band-marker': st.worst }));
        const text = st.worst === 'loss' || st.worst === 'duplication'
          ? compact(diff).replace('-', '−').replace(/^(\d)/, '+$1') : st.worst.slice(0, 5);
        // Only where it fits (about 6.5 px per character at this size).
        if (text.length * 6.5 + 2 <= bw + 8) {
          labels.append(s('text', { x: bx + bw / 2, y: M.t - 8, class: `band-label l-${st.worst}`, fill: BAND_TEXT[st.worst] }, text));
        }
      } else if (st.pending) {
        bands.append(s('rect', { x: bx, y: M.t, width: bw, height: ph, fill: 'url(#hatch-pending)', class: 'band band-pending', 'data-band': 'pending', 'data-window': w }));
      } else if (!st.anyData && w < now) {
        nodata += 1;
        bands.append(s('rect', { x: bx, y: M.t, width: bw, height: ph, fill: 'url(#hatch-nodata)', class: 'band band-nodata', 'data-gap': 'all', 'data-window': w }));
      }
    }
    svg.append(bands);

    // Axes and grid.
    const axis = s('g', { class: 'axis' });
    for (let v = 0; v <= top + 1e-9; v += step) {
      const y = Y(v);
      axis.append(s('line', { class: v === 0 ? 'baseline' : 'gridline', x1: M.l, x2: W - M.r, y1: y, y2: y }));
      axis.append(s('text', { x: M.l - 6, y: y + 3.5, 'text-anchor': 'end' }, compact(v)));
    }
    const tstep = timeStep(x1 - x0, pw);
    for (let t = Math.ceil(x0 / tstep) * tstep; t <= x1; t += tstep) {
      const x = X(t);
      axis.append(s('line', { class: 'gridline', x1: x, x2: x, y1: M.t, y2: M.t + ph }));
      if (x < M.l + 14 || x > W - M.r - 14) continue;
      const midnight = t % DAY === 0;
      axis.append(s('text', { x, y: H - 8, 'text-anchor': 'middle', 'font-weight': midnight ? 600 : null },
        midnight || tstep >= DAY ? fmtDay(t) : tstep < MIN ? fmtClockSec(t) : fmtClock(t)));
    }
    svg.append(axis);
    svg.append(labels);

    // One step line per tier: each window is a flat segment over [start, end); a
    // window without a row breaks the line and gets a gap marker on the axis.
    const series = s('g', { class: 'series-group' });
    const points = s('g', { class: 'points' });
    const gaps = s('g', { class: 'gaps' });
    let tierGaps = 0;
    tiers.forEach((tier, i) => {
      const color = colorOf(tier);
      const m = counts.get(tier);
      let d = '';
      let prev = null;
      for (const w of wins) {
        if (!m.has(w)) {
          prev = null;
          const st = windowState(w);
          // A tier missing where another tier reported is a gap of that tier.
          if (st.anyData && w < now) {
            tierGaps += 1;
            const cx = X(w) + wpx / 2;
            const cy = M.t + ph - 7 - i * 9;
            gaps.append(s('g', { class: 'gap', 'data-gap': tier, 'data-window': w },
              s('title', {}, `${tier}: no row for ${fmtWindow(w, w + windowMs)}`),
              s('path', { d: `M${cx - 3.5},${cy - 3.5}L${cx + 3.5},${cy + 3.5}M${cx - 3.5},${cy + 3.5}L${cx + 3.5},${cy - 3.5}`, stroke: color, 'stroke-width': 2 })));
          }
          continue;
        }
        const c = m.get(w);
        const y = Y(c).toFixed(1);
        const xa = X(w).toFixed(1);
        const xb = X(w + windowMs).toFixed(1);
        d += prev === null ? `M${xa},${y}H${xb}` : `V${y}H${xb}`;
        prev = c;
        // Beyond ~2000 windows the points are sub-pixel noise and cost more than they show.
        if (wins.length <= 2000) points.append(s('circle', {
          class: 'point', cx: (X(w) + wpx / 2).toFixed(1), cy: y, r: Math.max(1.2, Math.min(3, wpx / 5)), fill: color,
          stroke: '#fff', 'stroke-width': wpx > 8 ? 1 : 0,
          'data-point': '', 'data-tier': tier, 'data-window': w, 'data-count': c,
        }));
      }
      // Earlier (upstream) tiers are drawn wider and lighter underneath, so where the
      // counts are equal both lines stay visible (a halo around the downstream one).
      const under = tiers.length - 1 - i;
      series.append(s('path', {
        class: 'series', d, stroke: color, 'stroke-width': 2 + under * 3.5,
        'stroke-opacity': under ? 0.4 : 1, 'data-series': tier,
      }));
    });
    svg.append(series, gaps, points);

    // Hover: one transparent overlay (not one element per window, so a long range of
    // short windows stays light), a highlighted column, a cursor line and a tooltip.
    const wrap = h('div', { class: 'chart-wrap' });
    const tip = h('div', { class: 'tip', hidden: true });
    const cursor = s('line', { class: 'cursor', y1: M.t, y2: M.t + ph, x1: 0, x2: 0, visibility: 'hidden' });
    const column = s('rect', { class: 'hover-column', x: 0, y: M.t, width: 0, height: ph, visibility: 'hidden' });
    const overlay = s('rect', { class: 'hit', x: M.l, y: M.t, width: pw, height: ph });
    const windowAt = (ev) => {
      const box = svg.getBoundingClientRect();
      const x = ((ev.clientX - box.left) * W) / box.width;
      const i = Math.floor((x - M.l) / wpx);
      return i >= 0 && i < wins.length ? wins[i] : null;
    };
    let shown = null;
    overlay.addEventListener('mousemove', (ev) => {
      const w = windowAt(ev);
      if (w !== null && w !== shown) { shown = w; showTip(w, X(w)); }
    });
    overlay.addEventListener('mouseleave', () => {
      shown = null;
      tip.hidden = true;
      cursor.setAttribute('visibility', 'hidden');
      column.setAttribute('visibility', 'hidden');
    });
    overlay.addEventListener('click', (ev) => { const w = windowAt(ev); if (w !== null) focusWindow(w); });
    svg.insertBefore(column, svg.querySelector('.series-group'));
    svg.append(cursor, overlay);

    function showTip(w, bx) {
      const st = windowState(w);
      const cx = bx + wpx / 2;
      cursor.setAttribute('x1', cx);
      cursor.setAttribute('x2', cx);
      cursor.setAttribute('visibility', 'visible');
      column.setAttribute('x', bx);
      column.setAttribute('width', Math.max(1, wpx));
      column.setAttribute('visibility', 'visible');
      const lifecycle = st.es.length ? st.es[0].lifecycle : (w + windowMs > now ? 'open' : '');
      tip.replaceChildren();
      append(tip, [
        h('div', { class: 't-head' }, `${fmtWindow(w, w + windowMs)} UTC`, lifecycle ? h('span', { class: 'dim' }, `  ${lifecycle}`) : null),
        h('table', {}, tiers.map((t) => h('tr', {},
          h('td', {}, h('span', { class: 'sw-line', 'data-color': t }), ' ', t),
          h('td', { class: 'num' }, counts.get(t).has(w) ? int(counts.get(t).get(w)) : 'no row')))),
        st.es.map((e) => h('div', { class: 'edge' }, badge(e.verdict), ` ${edgeKey(e)} ${e.datacenter}: `,
          `${signed(e.difference)} (${pct(e.completeness)})`))]);
      tip.querySelectorAll('.sw-line').forEach((el) => { el.style.background = colorOf(el.getAttribute('data-color')); });
      tip.hidden = false;
      const scale = wrap.clientWidth / W;
      const left = cx * scale;
      tip.style.top = `${M.t * scale + 8}px`;
      if (left + 260 > wrap.clientWidth) {
        tip.style.left = '';
        tip.style.right = `${wrap.clientWidth - left + 12}px`;
      } else {
        tip.style.right = '';
        tip.style.left = `${left + 12}px`;
      }
    }
    wrap.append(svg, tip);

    // Legend, with only the marks that appear.
    const present = new Set([...bands.querySelectorAll('[data-band]')].map((b) => b.getAttribute('data-band')));
    const legend = h('div', { class: 'legend', id: 'chart-legend' },
      tiers.map((t) => {
        const sw = h('span', { class: 'sw-line' });
        sw.style.background = colorOf(t);
        return h('span', { class: 'item' }, sw, t);
      }),
      ANOMALIES.filter((a) => present.has(a)).map((a) => h('span', { class: 'item' }, h('span', { class: `sw-band ${a}` }), a)),
      present.has('pending') ? h('span', { class: 'item' }, h('span', { class: 'sw-band pending' }), 'open / settling / waiting') : null,
      nodata ? h('span', { class: 'item' }, h('span', { class: 'sw-band nodata' }), 'no data') : null,
      tierGaps ? h('span', { class: 'item' }, h('span', { class: 'sw-gap' }, '×'), 'tier missing a window') : null);

    return h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Messages per window by tier'),
        fitted ? h('span', { class: 'sub', id: 'chart-fitted', 'data-from': x0 }, `from ${fmtClockSec(x0)} UTC, just before the first data`) : null,
        h('span', { class: 'spacer' }), legend),
      h('div', { class: 'panel-body' }, wrap));
  }

  function focusWindow(w) {
    const row = document.querySelector(`#verdicts-table tr[data-window="${w}"]`);
    if (!row) return;
    row.scrollIntoView({ block: 'center', behavior: 'smooth' });
    document.querySelectorAll(`#verdicts-table tr[data-window="${w}"]`).forEach((tr) => {
      tr.classList.remove('flash');
      void tr.offsetWidth; // restart the animation
      tr.classList.add('flash');
    });
  }

  // ---------------------------------------------------------------- latency, anomalies, verdicts

  function latencyPanel(win, tiers, topo) {
    const objective = Object.fromEntries(topo.tiers.map((t) => [t.name, t.latency_p99_objective_ms]));
    const rows = tiers.map((t) => {
      const p = win.tiers[t];
      const obj = objective[t];
      const over = p && obj !== null && obj !== undefined && p.p99_ms > obj;
      return h('tr', { 'data-latency-tier': t, class: over ? 'anomalous r-delayed' : '' },
        h('td', { class: 'mono' }, t),
        h('td', { class: 'num' }, p ? int(p.count) : '–'),
        h('td', { class: 'num' }, p ? ms(p.p50_ms) : '–'),
        h('td', { class: 'num' }, p ? ms(p.p95_ms) : '–'),
        h('td', { class: 'num' + (over ? ' neg' : '') }, p ? ms(p.p99_ms) : '–'),
        h('td', { class: 'num' }, p ? ms(p.max_ms) : '–'),
        h('td', { class: 'num dim' }, obj === null || obj === undefined ? 'none' : ms(obj)));
    });
    return h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Latency by tier'), h('span', { class: 'sub' }, 'observed − event time, histograms merged over the range')),
      h('div', { class: 'panel-body flush scroll' }, h('table', { class: 'grid', id: 'latency-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Tier'), h('th', { class: 'num' }, 'Messages'), h('th', { class: 'num' }, 'p50'),
          h('th', { class: 'num' }, 'p95'), h('th', { class: 'num' }, 'p99'), h('th', { class: 'num' }, 'Max'), h('th', { class: 'num' }, 'p99 objective'))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No latency samples in this range.'))))));
  }

  function anomalyListPanel(anomalous) {
    const sorted = anomalous.slice().sort((a, b) => b.window_start - a.window_start || severity(b.verdict) - severity(a.verdict));
    const rows = sorted.slice(0, 12).map((e) => h('tr', {
      class: `clickable anomalous r-${e.verdict}`, 'data-verdict': e.verdict, 'data-window': e.window_start,
      onclick: () => focusWindow(e.window_start),
    },
    h('td', {}, badge(e.verdict)),
    h('td', {}, fmtWindow(e.window_start, e.window_end)),
    h('td', { class: 'mono' }, edgeKey(e), ' ', h('span', { class: 'dc' }, e.datacenter)),
    diffCell(e.difference),
    h('td', { class: 'num' }, pct(e.completeness))));
    return h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Anomalous windows'), h('span', { class: 'sub' }, anomalous.length ? `${anomalous.length}, newest first` : '')),
      h('div', { class: 'panel-body flush scroll' }, h('table', { class: 'grid', id: 'topic-anomalies' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Verdict'), h('th', {}, 'Window (UTC)'), h('th', {}, 'Edge'), h('th', { class: 'num' }, 'Difference'), h('th', { class: 'num' }, 'Completeness'))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No anomaly in this range.')))),
      sorted.length > 12 ? h('div', { class: 'foot' }, `${sorted.length - 12} more in the table below.`) : null));
  }

  const UNTIMED_TITLE = 'Messages with no tier-invariant time (no payload or header time, no usable record timestamp), '
    + 'counted by each auditor\'s own observation time, upstream / downstream: shown, not judged';

  /// The observation-time counts of both sides of an edge window (not in Expected or
  /// Observed, never compared).
  function untimedCell(e) {
    const up = e.upstream_observation_time_count || 0;
    const down = e.downstream_observation_time_count || 0;
    return h('td', { class: up || down ? 'num' : 'num dim', title: UNTIMED_TITLE, 'data-untimed': `${up}|${down}` },
      `${int(up)} / ${int(down)}`);
  }

  /// `noData`: no tier reported this window (0 expected, 0 observed), shown as such
  /// rather than as a healthy "ok, complete".
  /// `so_far` as people read it (docs/web.md, Replication evidence).
  const SO_FAR = { loss: 'loss proven', in_flight: 'in flight', ok: 'ok so far' };

  function verdictRow(e, topic, withTopic, noData) {
    const anomaly = isAnomaly(e.verdict);
    const empty = Boolean(noData) && e.verdict === 'ok';
    const cells = [
      h('td', {}, fmtWindow(e.window_start, e.window_end)),
      withTopic ? h('td', { class: 'mono' }, h('a', { href: link('topic', e.topic, rangeOnly(route().params)) }, e.topic)) : null,
      edgeCell(e),
      h('td', { class: 'num' }, int(e.expected)),
      h('td', { class: 'num' }, int(e.observed)),
      diffCell(e.difference),
      h('td', { class: 'num' }, pct(e.completeness)),
      h('td', {}, e.checksums_match ? h('span', { class: 'dim' }, 'match') : h('span', { class: 'neg' }, 'differ')),
      untimedCell(e),
      h('td', {}, h('span', { class: `lifecycle ${e.lifecycle}` }, e.lifecycle),
        e.so_far ? h('span', { class: 'dim', 'data-so-far': e.so_far, title: 'What the replicator\'s evidence shows before the window is final; a loss proven then stays a loss (docs/web.md, Replication evidence)' }, ` · ${SO_FAR[e.so_far] || e.so_far}`) : null),
      h('td', {}, empty ? h('span', { class: 'badge v-nodata', 'data-verdict-badge': 'nodata' }, 'no data') : badge(e.verdict)),
      h('td', { class: 'reason' }, empty ? 'no tier reported this window' : e.reason),
    ];
    if (!withTopic) {
      const btn = h('button', { type: 'button', class: 'linkish', 'data-offsets': `${e.window_start}|${topic}`, title: 'Partition offsets behind this window, per tier' }, 'show');
      btn.addEventListener('click', (ev) => { ev.stopPropagation(); toggleOffsets(btn, topic, e.window_start); });
      cells.push(h('td', {}, btn));
    }
    return h('tr', {
      class: anomaly ? `anomalous r-${e.verdict}` : '',
      'data-verdict': e.verdict, 'data-window': e.window_start, 'data-edge': edgeKey(e), 'data-datacenter': e.datacenter,
      'data-nodata': empty,
    }, cells);
  }

  // Offset rows the reader opened stay open across refreshes.
  const openOffsets = new Set();
  function reopenOffsets() {
    document.querySelectorAll('#verdicts-table button[data-offsets]').forEach((b) => {
      const key = b.getAttribute('data-offsets');
      // One detail row per window, under its first edge row.
      if (openOffsets.has(key) && !document.querySelector(`tr.detail[data-offsets="${CSS.escape(key)}"]`)) {
        toggleOffsets(b, key.slice(key.indexOf('|') + 1), Number(key.slice(0, key.indexOf('|'))), true);
      }
    });
  }

  async function toggleOffsets(btn, topic, w, reopen) {
    const key = `${w}|${topic}`;
    const tr = btn.closest('tr');
    // Every edge row of a window toggles the same detail row.
    const open = document.querySelector(`tr.detail[data-offsets="${CSS.escape(key)}"]`);
    if (open) { open.remove(); openOffsets.delete(key); return; }
    if (!reopen) openOffsets.add(key);
    const cell = h('td', { colspan: tr.children.length }, 'Loading offsets…');
    tr.after(h('tr', { class: 'detail', 'data-offsets': key }, cell));
    try {
      const res = await api(`/topics/${encodeURIComponent(topic)}/windows/${w}/offsets`);
      cell.replaceChildren(...res.offsets.map((o) => h('div', { class: 'mono' },
        `${o.tier} ${o.datacenter}: `,
        o.partitions.length ? o.partitions.map((p) => `p${p.partition} ${p.min}–${p.max}`).join(', ') : 'no offsets recorded')));
    } catch (e) {
      cell.textContent = e.status === 404 ? 'No tier has reported this window.' : `Offsets unavailable: ${e.message}`;
    }
  }

  function verdictPanel(r, edges, topic, { firstData, noData }) {
    const only = r.params.get('only') === '1';
    // Windows before the first data, nobody reported and nothing is wrong with: left out.
    const before = (e) => e.window_start < firstData && noData(e) && !isAnomaly(e.verdict);
    const hidden = new Set(edges.filter(before).map((e) => e.window_start)).size;
    edges = edges.filter((e) => !before(e));
    const box = h('input', { type: 'checkbox', id: 'only-anomalies', checked: only });
    const tbody = h('tbody');
    const foot = h('div', { class: 'foot' });
    const sorted = edges.slice().sort((a, b) => b.window_start - a.window_start || edgeKey(a).localeCompare(edgeKey(b)) || a.datacenter.localeCompare(b.datacenter));
    function fill() {
      const list = box.checked ? sorted.filter((e) => isAnomaly(e.verdict)) : sorted;
      tbody.replaceChildren(...list.slice(0, TABLE_LIMIT).map((e) => verdictRow(e, topic, false, noData(e))));
      if (list.length === 0) tbody.append(h('tr', {}, h('td', { colspan: 13, class: 'empty' }, box.checked ? 'No anomalous window in this range.' : 'No window in this range.')));
      foot.textContent = list.length > TABLE_LIMIT ? `Showing the newest ${int(TABLE_LIMIT)} of ${int(list.length)} rows; choose a shorter range for the rest.` : `${int(list.length)} rows`;
      if (hidden) foot.append(h('span', { id: 'verdicts-nodata', 'data-windows': hidden }, ` · ${int(hidden)} earlier ${hidden === 1 ? 'window' : 'windows'} without data from any tier not listed`));
    }
    box.addEventListener('change', () => { replaceUrl(r, withParam(r.params, 'only', box.checked ? '1' : '')); fill(); });
    fill();
    return h('section', { class: 'panel' },
      h('div', { class: 'panel-head' }, h('h2', {}, 'Verdicts per window and edge'), h('span', { class: 'sub' }, 'newest first'),
        h('span', { class: 'spacer' }), h('label', { class: 'check' }, box, 'anomalies only')),
      h('div', { class: 'panel-body flush' }, h('table', { class: 'grid', id: 'verdicts-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Window (UTC)'), h('th', {}, 'Edge (datacenters)'),
          h('th', { class: 'num' }, 'Expected'), h('th', { class: 'num' }, 'Observed'), h('th', { class: 'num' }, 'Difference'),
          h('th', { class: 'num' }, 'Completeness'), h('th', {}, 'Checksums'),
          h('th', { class: 'num', title: UNTIMED_TITLE }, 'Untimed (up / down)'), h('th', {}, 'Lifecycle'), h('th', {}, 'Verdict'),
          h('th', {}, 'Reason'), h('th', {}, 'Offsets'))),
        tbody), foot));
  }

  // ---------------------------------------------------------------- anomalies view

  /// Page `page` of the anomalies, newest window first. The API lists them oldest
  /// first, so our page p is the slice [total − p·size, total − (p−1)·size) of its
  /// order, which lies on at most two of its pages (at its default page size: its
  /// maximum is configuration the page cannot see).
  async function newestFirst(q, page) {
    const first = await api('/anomalies', { ...q, page: 1 });
    const size = first.page_size;
    const hi = first.total - (page - 1) * size;
    const lo = Math.max(0, hi - size);
    if (hi <= 0) return { ...first, items: [] };
    const p0 = Math.floor(lo / size) + 1;
    const p1 = Math.floor((hi - 1) / size) + 1;
    const got = [];
    for (let p = p0; p <= p1; p++) got.push(...(p === 1 ? first : await api('/anomalies', { ...q, page: p })).anomalies);
    const offset = (p0 - 1) * size;
    return { ...first, items: got.slice(lo - offset, hi - offset).reverse() };
  }

  async function anomaliesView(r, range) {
    const kind = r.params.get('kind') || '';
    const page = Math.max(1, parseInt(r.params.get('page'), 10) || 1);
    const res = await newestFirst({ from: range.from, to: range.to, kind }, page);
    const pageCount = Math.max(1, Math.ceil(res.total / res.page_size));
    const select = h('select', { id: 'filter-kind', 'aria-label': 'Anomaly kind' });
    fillSelect(select, [['', 'All kinds'], ...ANOMALIES.map((a) => [a, a])], kind);
    select.addEventListener('change', () => { location.hash = link('anomalies', null, withParam(withParam(r.params, 'kind', select.value), 'page', '')); });
    const pageLink = (p, label, id) => h('a', {
      id, href: link('anomalies', null, withParam(r.params, 'page', p > 1 ? String(p) : '')),
      class: p < 1 || p > pageCount || p === page ? 'disabled' : '',
    }, label);
    const pager = h('div', { class: 'pager', id: 'pager', 'data-page': page, 'data-pages': pageCount },
      pageLink(page - 1, '‹ Previous', 'page-prev'), h('span', { class: 'sub' }, `page ${page} of ${pageCount}`), pageLink(page + 1, 'Next ›', 'page-next'));
    const rows = res.items.map((e) => verdictRow(e, e.topic, true));
    return h('div', { 'data-page': 'anomalies' },
      h('div', { class: 'page-head' },
        h('h1', {}, 'Anomalies'),
        h('span', { class: 'sub' }, `${int(res.total)} window × edge comparisons · windows starting ${fmtFull(res.from)} – ${fmtFull(res.to)} UTC · evaluated ${fmtClockSec(res.evaluated_at)} UTC`)),
      h('section', { class: 'panel' },
        h('div', { class: 'panel-head' }, h('h2', {}, 'Anomalous windows'), h('span', { class: 'sub' }, 'newest first'), h('span', { class: 'spacer' }), h('div', { class: 'filters' }, select), pager),
        h('div', { class: 'panel-body flush' }, h('table', { class: 'grid', id: 'anomalies-table' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Window (UTC)'), h('th', {}, 'Topic'), h('th', {}, 'Edge (datacenters)'),
            h('th', { class: 'num' }, 'Expected'), h('th', { class: 'num' }, 'Observed'), h('th', { class: 'num' }, 'Difference'),
            h('th', { class: 'num' }, 'Completeness'), h('th', {}, 'Checksums'),
            h('th', { class: 'num', title: UNTIMED_TITLE }, 'Untimed (up / down)'), h('th', {}, 'Lifecycle'), h('th', {}, 'Verdict'), h('th', {}, 'Reason'))),
          h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 12, class: 'empty' },
            res.total ? 'No anomaly on this page.' : `No ${kind || 'anomaly'} in this range.`)))))));
  }

  const VIEWS = { topics: topicsView, topic: topicView, anomalies: anomaliesView };

  // ---------------------------------------------------------------- wiring

  function init() {
    window.addEventListener('hashchange', () => render(false));
    $('range').addEventListener('change', (ev) => {
      const r = route();
      let p = withParam(withParam(r.params, 'from', ''), 'to', '');
      p = withParam(p, 'page', '');
      p = withParam(p, 'range', ev.target.value === DEFAULT_RANGE ? '' : ev.target.value);
      location.hash = link(r.view, r.topic, p);
    });
    $('pin').addEventListener('click', async () => {
      const r = route();
      const topo = await topology().catch(() => ({ window_ms: 0 }));
      const range = resolveRange(r.params, topo.window_ms);
      let p = withParam(r.params, 'range', '');
      p = withParam(withParam(p, 'from', String(range.from)), 'to', String(range.to));
      location.hash = link(r.view, r.topic, p);
    });
    $('refresh').addEventListener('change', (ev) => { store.set(REFRESH_KEY, ev.target.value); schedule(); });
    $('token-button').addEventListener('click', () => ($('auth').hidden ? showAuth('Bearer token for the API (kept in this browser only).') : ($('auth').hidden = true)));
    $('auth').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('auth-token').value.trim();
      store.set(TOKEN_KEY, t || null);
      $('auth').hidden = true;
      topologyCache = null;
      render(false);
    });
    $('auth-forget').addEventListener('click', () => { store.set(TOKEN_KEY, null); $('auth-token').value = ''; topologyCache = null; render(false); });
    $('auth-close').addEventListener('click', () => { $('auth').hidden = true; });
    document.addEventListener('keydown', (ev) => {
      const f = $('filter-q');
      if (ev.key === '/' && f && document.activeElement !== f && !/^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName)) {
        ev.preventDefault();
        f.focus();
      }
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden && Number(refreshSetting()) > 0) render(true); });
    render(false);
  }

  init();
}());
