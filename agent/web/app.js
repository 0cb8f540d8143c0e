// LM Warden dashboard: two views (models, stats) over the admin JSON API.
// Plain JavaScript on purpose: no framework, no build step, nothing fetched
// from anywhere but this warden. The DOM is built once per model and then
// only its text is updated, so a refresh never steals focus or scroll.
'use strict';

(() => {
  const REFRESH_MS = 2000;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // ---- number formatting: thousands separators, %, s and ms ----------------

  const nf = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
  const nf1 = new Intl.NumberFormat('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 });

  const fmt = {
    int: (v) => (v == null || !isFinite(v) ? '–' : nf.format(Math.round(v))),
    // share in 0..1 shown as a percentage with one decimal
    pct: (v) => (v == null || !isFinite(v) ? '–' : nf1.format(v * 100) + '%'),
    // tokens in thousands: 23.1k
    ktok: (v) => (v == null || !isFinite(v) ? '–' : nf1.format(v / 1000) + 'k'),
    // tokens a second: one decimal below 10 so that a trickle is not "0"
    rate: (v) => (v == null || !isFinite(v) ? '–' : v > 0 && v < 10 ? nf1.format(v) : nf.format(Math.round(v))),
    // a duration in seconds: 850 ms, 12.3 s, 4 min 10 s, 2 h 05 min
    dur: (s) => {
      if (s == null || !isFinite(s)) return '–';
      if (s < 1) return nf.format(Math.round(s * 1000)) + ' ms';
      if (s < 60) return (Number.isInteger(s) ? nf.format(s) : nf1.format(s)) + ' s';
      if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
      const h = Math.floor(s / 3600);
      return nf.format(h) + ' h ' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + ' min';
    },
    // a mean of counts over a slot: one decimal below 10
    mean: (v) => (v == null || !isFinite(v) ? '–' : v < 10 ? nf1.format(v) : nf.format(Math.round(v))),
    // seconds for latency axes and values: 45 ms, 0.21 s, 3.4 s, 12 s
    secs: (v) => {
      if (v == null || !isFinite(v)) return '–';
      if (v === 0) return '0';
      if (v < 0.1) return nf.format(Math.round(v * 1000)) + ' ms';
      if (v < 10) return (Math.round(v * 100) / 100).toString() + ' s';
      return nf.format(Math.round(v)) + ' s';
    },
    // wall-clock time in the browser's zone: 2026-11-30 17:05:10
    clock: (d, seconds = true) => {
      const p = (n) => String(n).padStart(2, '0');
      const t = p(d.getHours()) + ':' + p(d.getMinutes());
      return seconds ? t + ':' + p(d.getSeconds()) : t;
    },
    date: (d) => d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0'),
    zone: () => {
      const off = -new Date().getTimezoneOffset();
      if (off === 0) return 'UTC';
      const sign = off >= 0 ? '+' : '−';
      const a = Math.abs(off);
      return 'UTC' + sign + Math.floor(a / 60) + (a % 60 ? ':' + String(a % 60).padStart(2, '0') : '');
    },
  };

  // ---- API adapters: the one place that knows the JSON field names ---------

  const num = (...vs) => {
    for (const v of vs) if (typeof v === 'number' && isFinite(v)) return v;
    return null;
  };

  const observed = (r) => r.observed_at !== undefined && r.observed_at !== null;

  function readModels(body) {
    const list = body.models || [];
    const started = body.started_at || null; // not in ModelsResponse yet: see wardenStart
    return {
      startedAt: started ? new Date(started) : null,
      models: list.map((m) => {
        return {
          name: m.name,
          affinity: m.affinity === true,
          spillThreshold: num(m.spill_threshold),
          spillAuto: m.spill_threshold_auto === true,
          // no request of a known session yet: no share, rather than 0%
          sticky: (m.stayed ?? 1) + (m.moved ?? 1) > 0 ? num(m.sticky_share) : null,
          inFlight: num(m.in_flight),
          frontend: m.frontend || '',
          policy: m.effective_policy || m.policy || '',
          admission: m.cost ? {
            mode: m.cost.admission || 'off', parked: num(m.cost.parked),
            engaged: !!(m.cost.admission_state && m.cost.admission_state.engaged),
            oldestWait: m.cost.admission_state ? num(m.cost.admission_state.oldest_wait_s) : null,
            waitP95: m.cost.admission_state ? num(m.cost.admission_state.wait_p95_s) : null,
          } : null,
          answered: m.answered || {},
          sessions: num(m.sessions),
          conversations: m.conversations || null,
          // requests by what keyed their conversation (session, subagent, body, none)
          keyed: m.conversation_requests || null,
          replicas: (m.replicas || []).map((r, i) => ({
            index: num(r.index) ?? i,
            addr: r.url || r.addr || '',
            inFlight: num(r.in_flight),
            requests: r.requests ? Object.values(r.requests).reduce((a, b) => a + b, 0) : null,
            sessions: num(r.sessions),
            sticky: num(r.sticky),
            spilledIn: num(r.spilled_in),
            clientPinned: num(r.client_pinned),
            // a replica whose /metrics was never read has no numbers, not zeros
            running: observed(r) ? num(r.running) : null,
            waiting: observed(r) ? num(r.waiting) : null,
            kvUsed: observed(r) ? num(r.kv_used) : null,
            hitRate: observed(r) && r.prefix_hit_rate_known !== false ? num(r.prefix_hit_rate) : null,
            healthy: r.healthy === true,
            // the operator's drain, and why the replica takes no placements
            draining: r.draining === true,
            reason: r.reason || '',
            responses: r.responses || {},
            // policy cost: the live sessions' context against what they may hold
            live: r.cost ? num(r.cost.live_tokens) : null,
            budget: r.cost ? num(r.cost.live_budget_tokens) : null,
          })),
        };
      }),
    };
  }

  async function getJSON(url) {
    const res = await fetch(url, { cache: 'no-store', headers: { Accept: 'application/json' } });
    if (!res.ok) throw new Error(url + ': HTTP ' + res.status);
    return res.json();
  }

  // Admin writes need the warden's admin token (docs/admin.md). The page
  // is read-only until it is given one: the first write the warden refuses
  // (401) asks for it, and the tab keeps it (sessionStorage: this tab
  // only, gone when it closes).
  const TOKEN_KEY = 'lmwarden-admin-token';
  function adminToken() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }
  function keepToken(t) {
    try { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* private mode */ }
  }
  let tokenFile = '';

  async function setAffinity(model, on) {
    for (let attempt = 0; attempt < 3; attempt++) {
      const headers = { 'Content-Type': 'application/json' };
      const tok = adminToken();
      if (tok) headers.Authorization = 'Bearer ' + tok;
      const res = await fetch('/api/v1/models/' + encodeURIComponent(model) + '/affinity', {
        method: 'PUT', headers, body: JSON.stringify({ affinity: on }),
      });
      if (res.status === 401) {
        keepToken('');
        const where = tokenFile ? `On the warden's host, as root or the warden's user: cat ${tokenFile}` : 'It is in the warden\'s admin_token_file.';
        const given = window.prompt(`Changing affinity needs the warden's admin token.\n${where}\n\nPaste it (this tab keeps it until it closes), or cancel to stay read-only:`);
        if (!given || !given.trim()) throw new Error('read-only: no admin token given');
        keepToken(given.trim());
        continue;
      }
      if (!res.ok) throw new Error('HTTP ' + res.status + ': ' + (await res.text()).trim());
      return;
    }
    throw new Error('the warden refused the admin token');
  }

  // ---- tiny DOM helpers -----------------------------------------------------

  function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c);
    return e;
  }

  function svg(tag, attrs = {}, ...children) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    for (const c of children) e.append(c);
    return e;
  }

  // placeAt puts node at position i of parent, touching nothing when it is
  // already there: moving a node resets its scroll position, which would
  // throw a sideways-scrolled table back to the left on every refresh.
  function placeAt(parent, node, i) {
    const at = parent.children[i];
    if (at !== node) parent.insertBefore(node, at || null);
  }

  // conversationsText says what the live sessions are: main conversations,
  // subagents' own, and conversations keyed by the body's start.
  function conversationsText(c) {
    if (!c) return '';
    const parts = [];
    if (c.subagent) parts.push(fmt.int(c.subagent) + ' subagent' + (c.subagent === 1 ? '' : 's'));
    if (c.body) parts.push(fmt.int(c.body) + ' by body');
    return parts.length ? ' (' + fmt.int(c.session || 0) + ' main, ' + parts.join(', ') + ')' : '';
  }

  // noHeaderShare is the share of requests that came without any session
  // header (keyed by the body's start, or not keyed at all); null before any.
  function noHeaderShare(k) {
    if (!k) return null;
    const all = Object.values(k).reduce((a, b) => a + b, 0);
    return all > 0 ? ((k.body || 0) + (k.none || 0)) / all : null;
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  // A cell shows formatted text and keeps the API's raw value in data-value,
  // so tests and scripts can read both.
  function setCell(td, raw, text) {
    setText(td, text);
    td.dataset.value = raw == null ? '' : String(raw);
  }

  // ---- status line ------------------------------------------------------------

  const status = {
    node: null,
    ok() {
      this.node.classList.remove('stale');
      setText(this.node, 'updated ' + fmt.clock(new Date()) + ' · every ' + fmt.dur(REFRESH_MS / 1000));
    },
    fail(err) {
      this.node.classList.add('stale');
      setText(this.node, 'not updating: ' + err.message + ' (retrying)');
    },
  };

  // ---- models view ------------------------------------------------------------

  const COLUMNS = [
    // field, header, title (what the number means), formatter
    ['in_flight', 'In flight', 'Requests the warden has sent there and not yet seen end', 'int'],
    ['requests', 'Requests', 'Requests the warden has placed there since it started, of every kind', 'int'],
    ['sessions', 'Sessions', 'Live conversations pinned there', 'int'],
    ['sticky', 'Sticky', 'Requests of a known session that stayed on its replica', 'int'],
    ['spilled_in', 'Spilled in', 'Requests of sessions pinned elsewhere, moved here because their replica was at the spill threshold', 'int'],
    ['client_pinned', 'Client-pinned', 'Requests whose client named the replica (X-data-parallel-rank or X-Warden-Replica)', 'int'],
    ['running', 'Running', 'vLLM: vllm:num_requests_running', 'int'],
    ['waiting', 'Waiting', 'vLLM: vllm:num_requests_waiting', 'int'],
    ['kv_used', 'KV used', 'vLLM: vllm:kv_cache_usage_perc', 'pct'],
    ['prefix_hit_rate', 'Prefix hit rate', 'vLLM: delta of prefix-cache hits over delta of queries, recent window', 'pct'],
    ['live_context', 'Live context', 'Policy cost: context of the sessions live here (shared prefix once) / what admission lets them hold (fill × KV capacity), tokens', 'live'],
    ['healthy', 'Healthy', 'Answering /health and /metrics with vLLM\'s series; else why not (the last failed poll), or draining'],
  ];
  const FIELD_VALUE = {
    in_flight: (r) => r.inFlight, requests: (r) => r.requests, sessions: (r) => r.sessions, sticky: (r) => r.sticky, spilled_in: (r) => r.spilledIn,
    client_pinned: (r) => r.clientPinned, running: (r) => r.running, waiting: (r) => r.waiting,
    kv_used: (r) => r.kvUsed, prefix_hit_rate: (r) => r.hitRate, live_context: (r) => r.live,
  };

  const modelCards = new Map(); // name -> {root, pills, sw, tbody, rows}

  function buildModelCard(name) {
    const pill = (key) => el('span', { class: 'pill', 'data-pill': key });
    const pills = { affinity: pill('affinity'), policy: pill('policy'), admission: pill('admission'), spill: pill('spill_threshold'), sticky: pill('sticky'), inFlight: pill('in_flight') };
    const sw = el('button', { class: 'switch', type: 'button', role: 'switch', 'aria-checked': 'false', 'data-affinity-switch': name, title: 'Turn session affinity on or off for this model' },
      el('span', { class: 'track' }, el('span', { class: 'knob' })), el('span', { class: 'label', text: 'Affinity' }));
    sw.addEventListener('click', () => toggleAffinity(name, sw));

    const head = el('tr', {}, el('th', { scope: 'col', text: 'Replica' }));
    for (const [field, label, title] of COLUMNS) head.append(el('th', { scope: 'col', title, 'data-col': field, text: label }));
    const tbody = el('tbody');
    const root = el('article', { class: 'card', 'data-model': name },
      el('div', { class: 'card-head' },
        el('h2', { text: name }),
        el('div', { class: 'pills' }, pills.affinity, pills.policy, pills.admission, pills.spill, pills.sticky, pills.inFlight),
        sw),
      el('p', { class: 'sub', 'data-model-sub': name }),
      el('div', { class: 'table-wrap' }, el('table', { 'data-replica-table': name }, el('thead', {}, head), tbody)),
      el('p', { class: 'note', text: 'Requests, sticky, spilled in and client-pinned count requests since the warden started; in flight and sessions are now. ' +
        'Running, waiting, KV used and prefix hit rate are read from each replica\'s /metrics (hit rate over a recent window). Hover a heading for its definition.' }),
      el('p', { class: 'errors', 'data-errors': name }),
      buildHistory(name));
    return { root, pills, sw, tbody, rows: [], sub: root.querySelector('[data-model-sub]'), errors: root.querySelector('[data-errors]'), history: historyParts(root) };
  }

  function buildRow() {
    const tr = el('tr', {});
    const cells = { replica: el('td', { 'data-field': 'replica' }) };
    tr.append(cells.replica);
    for (const [field] of COLUMNS) {
      cells[field] = el('td', { 'data-field': field });
      tr.append(cells[field]);
    }
    return { tr, cells };
  }

  // renderHealth fills a replica's Healthy cell: the verdict, and beneath
  // it why the replica takes no placements (the poll that failed, or the
  // drain), so that an operator reads the cause here, not in the log.
  function renderHealth(td, r) {
    const verdict = !r.healthy ? '✗ no' : r.draining ? '‖ draining' : '✓ yes';
    if (td.dataset.value === String(r.healthy) && td.dataset.reason === r.reason && td.dataset.draining === String(r.draining)) return;
    td.replaceChildren(el('span', { class: 'verdict', text: verdict }),
      ...(r.reason ? [el('span', { class: 'reason', 'data-reason': '', text: r.reason })] : []));
    td.dataset.value = String(r.healthy);
    td.dataset.reason = r.reason;
    td.dataset.draining = String(r.draining);
    td.title = r.reason;
    td.className = !r.healthy ? 'down' : r.draining ? 'draining' : 'ok';
  }

  function renderModelCard(card, m) {
    setText(card.pills.affinity, 'Affinity ' + (m.affinity ? 'on' : 'off'));
    card.pills.affinity.classList.toggle('off', !m.affinity);
    card.pills.affinity.dataset.value = String(m.affinity);
    setText(card.pills.spill, 'Spill threshold ' + fmt.int(m.spillThreshold) + (m.spillAuto ? ' (auto)' : ''));
    card.pills.spill.dataset.value = m.spillThreshold == null ? '' : String(m.spillThreshold);
    setText(card.pills.sticky, 'Sticky ' + fmt.pct(m.sticky));
    card.pills.sticky.dataset.value = m.sticky == null ? '' : String(m.sticky);
    setText(card.pills.inFlight, 'In flight ' + fmt.int(m.inFlight));
    card.pills.inFlight.dataset.value = m.inFlight == null ? '' : String(m.inFlight);
    setText(card.pills.policy, 'Policy ' + (m.policy || '–'));
    card.pills.policy.dataset.value = m.policy;
    card.pills.admission.hidden = !m.admission;
    if (m.admission) {
      const a = m.admission;
      let text = 'Admission ' + a.mode;
      if (a.engaged) {
        text += ' · engaged · ' + fmt.int(a.parked) + ' parked';
        if (a.parked > 0) text += ' · oldest ' + fmt.dur(a.oldestWait);
        if (a.waitP95 != null) text += ' · wait p95 ' + fmt.dur(a.waitP95);
      }
      setText(card.pills.admission, text);
      card.pills.admission.dataset.value = a.mode;
      card.pills.admission.dataset.engaged = String(a.engaged);
      card.pills.admission.dataset.parked = String(a.parked ?? '');
      card.pills.admission.dataset.oldestWait = String(a.oldestWait ?? '');
      card.pills.admission.classList.toggle('off', a.engaged && a.parked > 0);
    }
    renderErrors(card.errors, m);
    if (!card.sw.disabled) card.sw.setAttribute('aria-checked', String(m.affinity));
    const sub = [];
    if (m.frontend) sub.push('frontend ' + m.frontend);
    if (m.policy) sub.push('placement: ' + m.policy);
    if (m.sessions != null) sub.push(fmt.int(m.sessions) + ' live session' + (m.sessions === 1 ? '' : 's') + conversationsText(m.conversations));
    const noHeader = noHeaderShare(m.keyed);
    if (noHeader != null) sub.push(fmt.pct(noHeader) + ' of requests without a session header');
    setText(card.sub, sub.join(' · '));

    while (card.rows.length < m.replicas.length) {
      const row = buildRow();
      card.rows.push(row);
      card.tbody.append(row.tr);
    }
    while (card.rows.length > m.replicas.length) card.rows.pop().tr.remove();

    m.replicas.forEach((r, i) => {
      const { tr, cells } = card.rows[i];
      tr.dataset.replicaRow = String(r.index);
      tr.classList.toggle('unhealthy', !r.healthy);
      tr.classList.toggle('draining', r.draining);
      if (cells.replica.dataset.value !== String(r.index) || cells.replica.title !== r.addr || cells.replica.dataset.healthy !== String(r.healthy) ||
        cells.replica.dataset.draining !== String(r.draining)) {
        // The replica column stays in view when the table scrolls: an
        // unhealthy or draining replica says so there too, not only in the
        // last column (whose reason may be wide).
        const mark = !r.healthy ? [el('span', { class: 'down-mark', text: '✗ down' })]
          : r.draining ? [el('span', { class: 'drain-mark', text: '‖ draining' })] : [];
        cells.replica.replaceChildren(el('span', { class: 'idx', text: String(r.index) }), el('span', { class: 'addr', text: r.addr.replace(/^https?:\/\//, '') }), ...mark);
        cells.replica.dataset.value = String(r.index);
        cells.replica.dataset.healthy = String(r.healthy);
        cells.replica.dataset.draining = String(r.draining);
        cells.replica.title = r.addr;
      }
      for (const [field, , , kind] of COLUMNS) {
        if (field === 'live_context') {
          setCell(cells.live_context, r.live, r.live == null ? '–' : fmt.ktok(r.live) + ' / ' + fmt.ktok(r.budget));
          continue;
        }
        if (field === 'healthy') {
          renderHealth(cells.healthy, r);
          continue;
        }
        const v = FIELD_VALUE[field](r);
        setCell(cells[field], v, fmt[kind](v));
      }
    });
  }

  async function toggleAffinity(name, sw) {
    const on = sw.getAttribute('aria-checked') !== 'true';
    const question = on
      ? `Turn affinity ON for "${name}"?\n\nSessions will be kept on the replica holding their prefix cache.`
      : `Turn affinity OFF for "${name}"?\n\nRequests will be spread the way vLLM's own balancer does it (lowest waiting×4 + running), ignoring where each session's cache lives.`;
    if (!window.confirm(question)) return;
    sw.disabled = true;
    try {
      await setAffinity(name, on);
      sw.setAttribute('aria-checked', String(on));
    } catch (err) {
      window.alert('Could not change affinity for "' + name + '": ' + err.message);
    } finally {
      sw.disabled = false;
    }
    refreshNow();
  }

  // The warden's start time: from the models response when it carries one,
  // else once from the stats series, which the warden makes with its models.
  let startedAt = null;
  async function wardenStart(data) {
    if (data.startedAt) return data.startedAt;
    if (!startedAt) {
      const s = await getJSON('/api/v1/stats?window=1s');
      if (s.started_at) startedAt = new Date(s.started_at);
    }
    return startedAt;
  }

  async function refreshModels() {
    const data = readModels(await getJSON('/api/v1/models'));
    await refreshWarden();
    data.startedAt = await wardenStart(data);
    const since = document.getElementById('since');
    if (data.startedAt && !isNaN(data.startedAt)) {
      const up = (Date.now() - data.startedAt.getTime()) / 1000;
      setText(since, 'Counters since ' + fmt.date(data.startedAt) + ' ' + fmt.clock(data.startedAt) + ' ' + fmt.zone() +
        ' (warden start, ' + fmt.dur(Math.max(0, up)) + ' ago).');
      since.dataset.since = data.startedAt.toISOString();
    } else {
      setText(since, 'Counters since the warden started.');
    }

    const container = document.getElementById('models');
    for (const e of container.querySelectorAll('.empty')) e.remove();
    const seen = new Set();
    for (const m of data.models) {
      seen.add(m.name);
      let card = modelCards.get(m.name);
      if (!card) {
        card = buildModelCard(m.name);
        modelCards.set(m.name, card);
      }
      placeAt(container, card.root, seen.size - 1);
      renderModelCard(card, m);
    }
    for (const [name, card] of modelCards) {
      if (!seen.has(name)) {
        card.root.remove();
        modelCards.delete(name);
      }
    }
    if (data.models.length === 0) container.replaceChildren(el('p', { class: 'empty', text: 'No models configured.' }));
    await refreshHistory(data);
  }

  // ---- the warden: datapath, readiness, build (GET /api/v1/warden) ---------------

  async function refreshWarden() {
    const w = await getJSON('/api/v1/warden');
    tokenFile = w.admin_token_file || tokenFile;
    const dp = document.querySelector('[data-warden="datapath"]');
    const name = (w.datapath && w.datapath.name) || '';
    setText(dp, 'Datapath ' + (name || '–'));
    dp.dataset.value = name;
    dp.title = (w.datapath && w.datapath.reason) || '';
    dp.classList.toggle('off', name === 'user' && /^auto:/.test(dp.title)); // auto fell back
    const ready = document.querySelector('[data-warden="ready"]');
    setText(ready, w.ready ? 'Ready' : 'Not ready');
    ready.dataset.value = String(w.ready === true);
    ready.title = (w.reasons || []).join('\n') || 'Every frontend listens and every model has a healthy, polled replica';
    ready.classList.toggle('down', w.ready !== true);
    const ver = document.querySelector('[data-warden="version"]');
    setText(ver, 'lmwarden ' + ((w.build && w.build.version) || '') + (w.build && w.build.revision ? ' · ' + w.build.revision.slice(0, 12) : ''));
  }

  // ---- errors by status code ------------------------------------------------------

  // codesText: "503 × 2 · 400 × 1", biggest first.
  function codesText(counts) {
    return Object.entries(counts).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || a[0] - b[0])
      .map(([c, n]) => c + ' × ' + fmt.int(n)).join(' · ');
  }

  function renderErrors(node, m) {
    const fromReplicas = {};
    for (const r of m.replicas) {
      for (const [c, n] of Object.entries(r.responses)) if (Number(c) >= 400) fromReplicas[c] = (fromReplicas[c] || 0) + n;
    }
    const own = codesText(m.answered), theirs = codesText(fromReplicas);
    node.dataset.answered = JSON.stringify(m.answered);
    node.dataset.replicaErrors = JSON.stringify(fromReplicas);
    node.classList.toggle('bad', own !== '' || theirs !== '');
    setText(node, own === '' && theirs === '' ? 'No error responses since the warden started.' :
      'Errors since the warden started: ' + (own ? 'answered by the warden ' + own : 'none answered by the warden') +
      (theirs ? '; from the replicas ' + theirs : '') + '.');
  }

  // ---- history: the last hour of every replica and of the time to first byte ------

  const SPARKS = [
    // key in the API point, label, colour (Okabe-Ito), formatter, fixed top (else the data's)
    ['running', 'Running', '#0072b2', 'mean', null],
    ['waiting', 'Waiting', '#e69f00', 'mean', null],
    ['kv_used', 'KV used', '#009e73', 'pct', 1],
    ['hit_rate', 'Hit rate', '#cc79a7', 'pct', 1],
  ];

  function buildHistory(name) {
    return el('section', { class: 'history', 'data-history': name },
      el('h3', { text: 'Last hour' }),
      el('p', { class: 'summary', 'data-ttfb-summary': name }),
      el('div', { class: 'legend' },
        el('span', {}, lineSwatch('#0072b2', false), 'p50'),
        el('span', {}, lineSwatch('#d55e00', true), 'p95'),
        el('span', {}, barSwatch('#d55e00'), 'errors (right axis)')),
      el('div', { class: 'chart', 'data-chart': 'ttfb' }),
      el('div', { class: 'replica-history', 'data-replica-histories': name }));
  }

  function historyParts(root) {
    return { root: root.querySelector('[data-history]'), summary: root.querySelector('[data-ttfb-summary]'),
      chart: root.querySelector('[data-chart="ttfb"]'), replicas: root.querySelector('[data-replica-histories]'), rows: [] };
  }

  function lineSwatch(stroke, dashed) {
    return svg('svg', { width: '22', height: '12', viewBox: '0 0 22 12', 'aria-hidden': 'true' },
      svg('line', { x1: '1', y1: '6', x2: '21', y2: '6', stroke, 'stroke-width': '2.5', 'stroke-dasharray': dashed ? '5 3' : 'none' }));
  }

  function barSwatch(fill) {
    return svg('svg', { width: '12', height: '12', viewBox: '0 0 12 12', 'aria-hidden': 'true' }, svg('rect', { x: '3', y: '2', width: '6', height: '10', fill, opacity: '.45' }));
  }

  // The history is fetched at most once a slot (the series only change then).
  let historyAt = 0, historyResp = null;
  async function refreshHistory(data) {
    const stepMs = historyResp ? historyResp.step_seconds * 1000 : 0;
    if (!historyResp || Date.now() - historyAt >= Math.min(stepMs, 10000)) {
      historyResp = await getJSON('/api/v1/stats?window=1h');
      historyAt = Date.now();
    }
    for (const m of data.models) {
      const card = modelCards.get(m.name);
      const series = (historyResp.models || []).find((x) => x.name === m.name);
      if (card) renderHistory(card.history, m, series, historyResp);
    }
  }

  // livePoints drops the slots before the warden started (keeping at least
  // MIN_SLOTS), as the stats page does.
  function livePoints(points, resp) {
    const started = resp.started_at ? new Date(resp.started_at).getTime() : 0;
    const firstLive = points.findIndex((p) => new Date(p.t).getTime() + resp.step_seconds * 1000 > started);
    return firstLive > 0 ? points.slice(Math.max(0, Math.min(firstLive, points.length - MIN_SLOTS))) : points;
  }

  function renderHistory(h, m, series, resp) {
    const pooled = series ? series.pooled : null;
    const sum = pooled ? pooled.summary : {};
    h.summary.dataset.responses = String(sum.responses ?? 0);
    h.summary.dataset.p50 = sum.first_byte_p50 == null ? '' : String(sum.first_byte_p50);
    h.summary.dataset.p95 = sum.first_byte_p95 == null ? '' : String(sum.first_byte_p95);
    setText(h.summary, sum.responses ? 'Time to first byte (measured by the warden) over the last hour: p50 ' + fmt.secs(sum.first_byte_p50) +
      ' · p95 ' + fmt.secs(sum.first_byte_p95) + ' over ' + fmt.int(sum.responses) + ' responses' :
      'Time to first byte: no response relayed in the last hour yet.');
    const points = pooled ? livePoints(pooled.points, resp) : [];
    drawLatency(h.chart, points, resp.step_seconds);

    while (h.rows.length < m.replicas.length) {
      const row = buildReplicaHistory();
      h.rows.push(row);
      h.replicas.append(row.root);
    }
    while (h.rows.length > m.replicas.length) h.rows.pop().root.remove();
    m.replicas.forEach((r, i) => {
      const row = h.rows[i];
      const rs = series && series.replicas.find((x) => x.replica === r.index);
      row.root.dataset.replicaHistory = String(r.index);
      row.root.classList.toggle('unhealthy', !r.healthy);
      setText(row.name, 'Replica ' + r.index);
      setText(row.addr, r.addr.replace(/^https?:\/\//, ''));
      setText(row.badge, !r.healthy ? '✗ UNHEALTHY' : r.draining ? '‖ draining' : '✓ healthy');
      row.badge.className = 'badge ' + (!r.healthy ? 'down' : r.draining ? 'draining' : 'ok');
      row.badge.dataset.value = String(r.healthy);
      setText(row.reason, r.reason);
      row.reason.hidden = !r.reason;
      row.reason.classList.toggle('draining', r.healthy && r.draining);
      const pts = rs ? livePoints(rs.points, resp) : [];
      for (const [key, label, colour, kind, top] of SPARKS) drawSpark(row.sparks[key], pts, key, label, colour, kind, top);
    });
  }

  function buildReplicaHistory() {
    const name = el('strong'), addr = el('span', { class: 'addr' }), badge = el('span', { class: 'badge' });
    const reason = el('span', { class: 'reason', 'data-reason': '' });
    const grid = el('div', { class: 'sparks' });
    const sparks = {};
    for (const [key, label] of SPARKS) {
      sparks[key] = { root: el('div', { class: 'spark', 'data-spark': key }), label: el('span', { class: 'spark-label', text: label }),
        value: el('span', { class: 'spark-value' }), plot: el('div', { class: 'spark-plot' }) };
      sparks[key].root.append(el('div', { class: 'spark-head' }, sparks[key].label, sparks[key].value), sparks[key].plot);
      grid.append(sparks[key].root);
    }
    const root = el('div', { class: 'replica-hist' }, el('div', { class: 'replica-hist-head' }, name, addr, badge, reason), grid);
    return { root, name, addr, badge, reason, sparks };
  }

  // drawSpark draws one metric's hour as a line (gaps where no poll came),
  // the latest value beside its label.
  function drawSpark(s, points, key, label, colour, kind, top) {
    const W = 200, H = 44, P = 2;
    const vals = points.map((p) => (typeof p[key] === 'number' && isFinite(p[key]) ? p[key] : null));
    const known = vals.filter((v) => v != null);
    const last = known.length ? known[known.length - 1] : null;
    const max = top ?? Math.max(1, ...known);
    s.root.dataset.points = String(known.length);
    s.root.dataset.last = last == null ? '' : String(last);
    s.root.dataset.max = String(Math.max(0, ...known));
    setText(s.value, fmt[kind](last) + (top == null && known.length ? ' (max ' + fmt[kind](Math.max(...known)) + ')' : ''));
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': label + ' over the last hour' });
    root.append(svg('line', { class: 'baseline', x1: 0, x2: W, y1: H - P, y2: H - P }));
    const x = (i) => (vals.length > 1 ? (i / (vals.length - 1)) * W : W / 2);
    const y = (v) => H - P - (Math.min(v, max) / max) * (H - 2 * P);
    let d = '';
    let pen = false;
    vals.forEach((v, i) => {
      if (v == null) { pen = false; return; }
      d += (pen ? 'L' : 'M') + x(i).toFixed(1) + ' ' + y(v).toFixed(1) + ' ';
      pen = true;
    });
    if (d) root.append(svg('path', { d, fill: 'none', stroke: colour, 'stroke-width': '1.8', 'vector-effect': 'non-scaling-stroke', 'stroke-linejoin': 'round' }));
    else {
      const t = svg('text', { class: 'nodata', x: W / 2, y: H / 2 + 4, 'text-anchor': 'middle' });
      t.textContent = 'no poll yet';
      root.append(t);
    }
    s.plot.replaceChildren(root);
  }

  // drawLatency draws the pooled p50 and p95 of the time to first byte per
  // slot (seconds, left axis) and the errors per slot as faint bars (right).
  function drawLatency(holder, points, stepSec) {
    // drawn at the width it is shown at, so that its text stays 11 px
    const W = Math.max(480, Math.round(holder.clientWidth) || 960), H = 180, L = 64, R = 44, T = 10, B = 24;
    const pw = W - L - R, ph = H - T - B;
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Time to first byte p50 and p95, and errors, per slot' });
    const p95 = points.map((p) => p.first_byte_p95), p50 = points.map((p) => p.first_byte_p50);
    const errs = points.map((p) => Object.values(p.errors || {}).reduce((a, b) => a + b, 0));
    const { step: tick, max } = niceScale(Math.max(0, ...p95.filter((v) => v != null)));
    const emax = niceScale(Math.max(0, ...errs)).max;
    const y = (v) => T + ph - (Math.min(v, max) / max) * ph;
    for (let i = 0; i * tick <= max + tick / 1e6; i++) {
      const v = i * tick;
      root.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      const t = svg('text', { class: 'axis', x: L - 6, y: y(v) + 4, 'text-anchor': 'end' });
      t.textContent = fmt.secs(v);
      root.append(t);
    }
    if (errs.some((e) => e > 0)) {
      const et = svg('text', { class: 'axis', x: W - R + 6, y: T + 8, 'text-anchor': 'start' });
      et.textContent = fmt.int(emax) + ' err';
      root.append(et);
    }
    const n = points.length, bw = n ? pw / n : pw;
    const x = (i) => L + (i + 0.5) * bw;
    timeAxis(root, points, stepSec, { W, H, L, R, T, ph });
    errs.forEach((e, i) => {
      if (!(e > 0)) return;
      const h = (e / emax) * ph;
      const g = svg('rect', { 'data-error-bar': '', x: L + i * bw + (bw >= 4 ? 0.5 : 0), width: Math.max(bw - 1, 0.8), y: T + ph - h, height: h, fill: '#d55e00', opacity: '.35' });
      g.append(svg('title', {}, fmt.clock(new Date(points[i].t)) + ': ' + codesText(points[i].errors)));
      root.append(g);
    });
    const line = (vals, colour, dash, key) => {
      let d = '', pen = false;
      vals.forEach((v, i) => {
        if (v == null) { pen = false; return; }
        d += (pen ? 'L' : 'M') + x(i).toFixed(1) + ' ' + y(v).toFixed(1) + ' ';
        pen = true;
      });
      if (d) root.append(svg('path', { d, 'data-line': key, fill: 'none', stroke: colour, 'stroke-width': '2.2', 'stroke-dasharray': dash, 'stroke-linejoin': 'round' }));
    };
    line(p95, '#d55e00', '6 4', 'p95');
    line(p50, '#0072b2', 'none', 'p50');
    // a dot where a slot has one response only (a line needs two)
    points.forEach((p, i) => {
      if (p.first_byte_p50 != null) root.append(svg('circle', { cx: x(i), cy: y(p.first_byte_p50), r: 2.2, fill: '#0072b2' },
        svg('title', {}, fmt.clock(new Date(p.t)) + ': p50 ' + fmt.secs(p.first_byte_p50) + ', p95 ' + fmt.secs(p.first_byte_p95) + ', ' + p.responses + ' responses')));
    });
    root.append(svg('line', { class: 'baseline', x1: L, x2: W - R, y1: T + ph, y2: T + ph }));
    if (!p50.some((v) => v != null)) {
      const t = svg('text', { class: 'nodata', x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle' });
      t.textContent = 'no response in this window';
      root.append(t);
    }
    holder.dataset.slots = String(p50.filter((v) => v != null).length);
    holder.replaceChildren(root);
  }

  // ---- stats view -------------------------------------------------------------

  const MIN_SLOTS = 60; // the narrowest time axis: 10 min of 10 s bars
  const statsCards = new Map(); // name -> {root, select, summary, prompt, completion, note}
  let chartSeq = 0;

  function buildStatsCard(name) {
    const select = el('select', { 'data-series-select': name, 'aria-label': 'Series' }, el('option', { value: 'pooled', text: 'All replicas' }));
    select.addEventListener('change', refreshNow);
    const legendSwatch = (fill, hatch) => {
      const s = svg('svg', { width: '16', height: '12', viewBox: '0 0 16 12', 'aria-hidden': 'true' });
      if (hatch) {
        s.append(svg('rect', { width: '16', height: '12', fill }));
        for (let x = -12; x < 16; x += 5) s.append(svg('line', { x1: x, y1: 12, x2: x + 12, y2: 0, stroke: '#fff', 'stroke-width': '1.6' }));
      } else s.append(svg('rect', { width: '16', height: '12', fill }));
      return s;
    };
    const root = el('article', { class: 'card', 'data-stats-model': name },
      el('div', { class: 'card-head' }, el('h2', { text: name }),
        el('label', { class: 'stats-controls' }, 'Series', select)),
      el('p', { class: 'summary', 'data-summary': name }),
      el('div', { class: 'chart-title', text: 'Prompt tokens per second' }),
      el('div', { class: 'legend' },
        el('span', {}, legendSwatch('#0072b2', true), 'Cached (prefix-cache hits, hatched)'),
        el('span', {}, legendSwatch('#e69f00', false), 'Computed (prefilled)')),
      el('div', { class: 'chart', 'data-chart': 'prompt' }),
      el('div', { class: 'chart-title', text: 'Completion tokens per second' }),
      el('div', { class: 'chart', 'data-chart': 'completion' }),
      el('p', { class: 'note' }));
    return {
      root, select,
      summary: root.querySelector('[data-summary]'),
      prompt: root.querySelector('[data-chart="prompt"]'),
      completion: root.querySelector('[data-chart="completion"]'),
      note: root.querySelector('.note'),
    };
  }

  // niceScale picks a round tick step (1, 2 or 5 times a power of ten) that
  // gives at most 5 intervals, and the axis top as a whole number of steps.
  function niceScale(v) {
    if (!(v > 0)) return { step: 1, max: 4 };
    const raw = v / 5;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    return { step, max: Math.ceil(v / step) * step };
  }

  // Label spacing on the time axis: the smallest round interval that gives
  // at most 7 labels over the window.
  function timeTick(spanSec) {
    for (const s of [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600]) if (spanSec / s <= 7) return s;
    return 3600;
  }

  // timeAxis draws the time labels under a chart of one slot a point
  // (frame: the chart's size, margins and plot height).
  function timeAxis(root, points, stepSec, { W, H, L, R, T, ph }) {
    const n = points.length;
    if (!n) return;
    const pw = W - L - R;
    const t0 = new Date(points[0].t).getTime() / 1000, span = n * stepSec, every = timeTick(span);
    for (let ts = Math.ceil(t0 / every) * every; ts <= t0 + span; ts += every) {
      const x = L + ((ts - t0) / span) * pw;
      root.append(svg('line', { class: 'grid', x1: x, x2: x, y1: T + ph, y2: T + ph + 4 }));
      // keep the labels at the ends inside the picture
      const anchor = x > W - R - 28 ? 'end' : x < L + 28 ? 'start' : 'middle';
      const t = svg('text', { class: 'axis', x, y: H - 6, 'text-anchor': anchor });
      t.textContent = fmt.clock(new Date(ts * 1000), every < 60);
      root.append(t);
    }
  }

  // drawBars renders stacked bars as inline SVG. series: [{key, value(p), fill}],
  // bottom first. Only slots with traffic get a bar group (data-bar).
  function drawBars(holder, points, stepSec, series, unit) {
    const W = 960, H = 200, L = 64, R = 10, T = 10, B = 24;
    const pw = W - L - R, ph = H - T - B;
    const id = 'c' + (++chartSeq);
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': series.map((s) => s.label).join(' and ') + ', ' + unit });
    const defs = svg('defs');
    for (const s of series) {
      if (!s.hatch) continue;
      const pat = svg('pattern', { id: id + s.key, patternUnits: 'userSpaceOnUse', width: '6', height: '6', patternTransform: 'rotate(45)' },
        svg('rect', { width: '6', height: '6', fill: s.fill }),
        svg('line', { x1: '0', y1: '0', x2: '0', y2: '6', stroke: '#ffffff', 'stroke-width': '2.2' }));
      defs.append(pat);
    }
    root.append(defs);

    const totals = points.map((p) => series.reduce((a, s) => a + s.value(p), 0));
    const { step: tick, max } = niceScale(Math.max(0, ...totals));
    const y = (v) => T + ph - (v / max) * ph;

    // horizontal grid and value labels
    for (let i = 0; i * tick <= max + tick / 1e6; i++) {
      const v = i * tick;
      root.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      const t = svg('text', { class: 'axis', x: L - 6, y: y(v) + 4, 'text-anchor': 'end' });
      t.textContent = tick >= 1 ? fmt.int(v) : fmt.rate(v);
      root.append(t);
    }

    const n = points.length;
    const bw = n ? pw / n : pw;
    const gap = bw >= 4 ? 1 : 0;
    timeAxis(root, points, stepSec, { W, H, L, R, T, ph });

    let bars = 0;
    points.forEach((p, i) => {
      if (!(totals[i] > 0)) return;
      bars++;
      const x = L + i * bw;
      const g = svg('g', { 'data-bar': '', 'data-t': p.t });
      let base = 0;
      const tip = [fmt.clock(new Date(p.t)) + ' +' + fmt.dur(stepSec)];
      for (const s of series) {
        const v = s.value(p);
        g.setAttribute('data-' + s.key, String(v));
        tip.push(s.label + ': ' + fmt.rate(v) + ' ' + unit);
        if (v > 0) {
          g.append(svg('rect', {
            'data-series': s.key, x: x + gap / 2, width: Math.max(bw - gap, 0.8),
            y: y(base + v), height: Math.max(y(base) - y(base + v), 0.5),
            fill: s.hatch ? `url(#${id + s.key})` : s.fill,
          }));
        }
        base += v;
      }
      if (p.hit_rate != null) tip.push('prefix hit rate: ' + fmt.pct(p.hit_rate));
      g.append(svg('title', {}, tip.join('\n')));
      root.append(g);
    });
    root.append(svg('line', { class: 'baseline', x1: L, x2: W - R, y1: T + ph, y2: T + ph }));
    if (!bars) {
      const t = svg('text', { class: 'nodata', x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle' });
      t.textContent = 'no traffic in this window';
      root.append(t);
    }
    // On a narrow screen the chart scrolls sideways: keep the newest bars in
    // view, unless the reader has scrolled away from them.
    const atEnd = holder.scrollLeft + holder.clientWidth >= holder.scrollWidth - 2;
    const left = holder.scrollLeft;
    holder.replaceChildren(root);
    holder.scrollLeft = atEnd ? holder.scrollWidth : left;
    holder.dataset.bars = String(bars);
  }

  function renderStatsCard(card, m, resp) {
    // keep the series selector in step with the replica count
    const want = m.replicas.length + 1;
    while (card.select.options.length < want) {
      const i = card.select.options.length - 1;
      card.select.append(el('option', { value: String(i), text: 'Replica ' + i }));
    }
    while (card.select.options.length > want) card.select.lastChild.remove();
    card.root.dataset.step = String(resp.step_seconds);
    const sel = card.select.value;
    const s = sel === 'pooled' ? m.pooled : (m.replicas[Number(sel)] || m.pooled);

    const windowText = resp.window_seconds >= 3600 ? 'the last hour' : 'the last ' + fmt.dur(resp.window_seconds);
    const sum = s.summary;
    const prompt = sum.prompt_cached_tokens + sum.prompt_computed_tokens;
    card.summary.replaceChildren(
      'Cache hit over ' + windowText + ': ',
      el('strong', { 'data-hit-rate': sum.hit_rate == null ? '' : String(sum.hit_rate), text: fmt.pct(sum.hit_rate) }),
      sum.hit_rate == null ? ' (no prefix-cache lookups yet)' :
        ` · ${fmt.int(sum.prompt_cached_tokens)} cached and ${fmt.int(sum.prompt_computed_tokens)} computed of ${fmt.int(prompt)} prompt tokens · ${fmt.int(sum.completion_tokens)} completion tokens`);

    // Before the warden started there is nothing to draw: start the axis at
    // its start (but show at least MIN_SLOTS slots), so that a young warden's
    // bars are not slivers at the right edge of an empty hour.
    let points = s.points;
    const started = resp.started_at ? new Date(resp.started_at).getTime() : 0;
    const firstLive = points.findIndex((p) => new Date(p.t).getTime() + resp.step_seconds * 1000 > started);
    if (firstLive > 0) points = points.slice(Math.max(0, Math.min(firstLive, points.length - MIN_SLOTS)));

    drawBars(card.prompt, points, resp.step_seconds, [
      { key: 'cached', label: 'cached', fill: '#0072b2', hatch: true, value: (p) => p.prompt_cached_tps },
      { key: 'computed', label: 'computed', fill: '#e69f00', value: (p) => p.prompt_computed_tps },
    ], 'tok/s');
    drawBars(card.completion, points, resp.step_seconds, [
      { key: 'completion', label: 'completion', fill: '#009e73', value: (p) => p.completion_tps },
    ], 'tok/s');
    setText(card.note, 'One bar per ' + fmt.dur(resp.step_seconds) + ', from the replicas\' own counters: cached = delta of prefix-cache hits, ' +
      'computed = delta of prompt tokens minus hits. The current ' + fmt.dur(resp.step_seconds) + ' are drawn once complete.');
  }

  async function refreshStats() {
    const resp = await getJSON('/api/v1/stats?window=1h');
    const container = document.getElementById('stats');
    for (const e of container.querySelectorAll('.empty')) e.remove();
    const seen = new Set();
    for (const m of resp.models || []) {
      seen.add(m.name);
      let card = statsCards.get(m.name);
      if (!card) {
        card = buildStatsCard(m.name);
        statsCards.set(m.name, card);
      }
      placeAt(container, card.root, seen.size - 1);
      renderStatsCard(card, m, resp);
    }
    for (const [name, card] of statsCards) {
      if (!seen.has(name)) {
        card.root.remove();
        statsCards.delete(name);
      }
    }
    if (!resp.models || resp.models.length === 0) {
      container.replaceChildren(el('p', { class: 'empty', text: 'No token counters read yet: the series start with the first two polls of a replica.' }));
    }
  }

  // ---- view switching and the refresh loop -------------------------------------

  const views = { models: refreshModels, stats: refreshStats };
  let timer = null;
  let generation = 0;

  function currentView() {
    const v = location.hash.replace(/^#\/?/, '');
    return views[v] ? v : 'models';
  }

  async function refreshNow() {
    clearTimeout(timer);
    const gen = ++generation;
    const view = currentView();
    try {
      await views[view]();
      if (gen === generation) status.ok();
    } catch (err) {
      if (gen === generation) status.fail(err);
    }
    if (gen === generation) timer = setTimeout(refreshNow, REFRESH_MS);
  }

  function showView() {
    const view = currentView();
    for (const sec of document.querySelectorAll('[data-view]')) sec.hidden = sec.dataset.view !== view;
    for (const a of document.querySelectorAll('[data-view-link]')) {
      if (a.dataset.viewLink === view) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    document.title = 'LM Warden · ' + (view === 'stats' ? 'Stats' : 'Models');
    refreshNow();
  }

  document.addEventListener('DOMContentLoaded', () => {
    status.node = document.getElementById('status');
    window.addEventListener('hashchange', showView);
    showView();
  });
})();
