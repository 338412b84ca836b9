// The memory inspector: a page over the service's JSON API, written for this project (no
// framework, no build step). Every piece of data goes into the page as text (textContent,
// createElement), never as HTML; the page's Content-Security-Policy runs no inline script.
"use strict";

(() => {
  const KEY_STORE = "memory-service.inspector.key";
  const LEGS_FALLBACK = ["bm25", "dense"];
  const KIND_COLOURS = {
    fact: "#3465a4", preference: "#c17d11", event: "#4e9a06", procedure: "#75507b",
  };
  const SVG = "http://www.w3.org/2000/svg";
  const TIMELINE_PAGE = 1000;
  const TIMELINE_MAX_PAGES = 20;
  const DAY_MS = 86400000;
  // A gap of more than this between recorded days splits the facts into groups: the chart
  // draws the biggest group and names the facts outside it, so one fact decades away (old
  // data imported, a clock gone wrong) cannot squeeze the rest into a strip.
  const GROUP_GAP_DAYS = 365;
  const MAX_BARS = 92; // more days than this are drawn per week, month or year
  const LEGEND_SLOT = 90; // px per kind in the legend: "preference" at 10 px fits
  const TABLE_COLUMNS = 7;

  const state = {
    key: null,
    me: null,
    owner: null, // {scope, user_id, agent_id, label}
    view: "facts",
    cursors: [null], // keyset pages: the cursor of each page seen so far
    page: 0,
    nextCursor: null,
  };

  const $ = (id) => document.getElementById(id);

  // -- building the page from data, as text ------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (name === "text") node.textContent = String(value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children) node.append(child);
    return node;
  }

  function clear(node) {
    node.replaceChildren();
    return node;
  }

  function when(iso) {
    if (!iso) return "";
    return iso.replace("T", " ").replace(/(\.\d+)?(Z|\+00:00)$/, " UTC");
  }

  function fixed(x, digits = 3) {
    return x === null || x === undefined ? "" : Number(x).toFixed(digits);
  }

  function count(n, noun) {
    return `${n} ${noun}${n === 1 ? "" : "s"}`;
  }

  // A time in a table cell: to the minute, on one line; the exact time on hover.
  function shortWhen(iso) {
    if (!iso) return el("span", {});
    return el("time", { datetime: iso, title: when(iso), class: "when", text: when(iso).slice(0, 16) });
  }

  // -- status and errors -------------------------------------------------------------------

  function say(text) {
    $("status").textContent = text;
  }

  function fail(error) {
    const box = $("error");
    box.textContent = error.status === 401
      ? `This API key was refused (${error.message}). Check the key and enter it again.`
      : `${error.code}: ${error.message}`;
    box.hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error").textContent = "";
  }

  async function guarded(work) {
    clearError();
    try {
      return await work();
    } catch (error) {
      fail(error);
      return undefined;
    }
  }

  // -- the JSON API --------------------------------------------------------------------------

  async function api(method, path, { params, body, key } = {}) {
    const url = new URL(path, window.location.origin);
    for (const [name, value] of Object.entries(params || {})) {
      if (value === null || value === undefined || value === "") continue;
      if (Array.isArray(value)) value.forEach((v) => url.searchParams.append(name, v));
      else url.searchParams.set(name, String(value));
    }
    const headers = { Authorization: `Bearer ${key || state.key}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const error = new Error((data && data.error && data.error.message) || response.statusText);
      error.status = response.status;
      error.code = (data && data.error && data.error.code) || `http_${response.status}`;
      throw error;
    }
    return data;
  }

  function may(action) {
    return Boolean(state.me && state.me.may.includes(action));
  }

  function ownerParams() {
    const o = state.owner;
    const params = { user_id: o.user_id };
    if (o.scope !== "user") {
      params.scope = o.scope;
      if (o.agent_id) params.agent_id = o.agent_id;
    }
    return params;
  }

  // -- the key -------------------------------------------------------------------------------

  async function openWithKey(key) {
    clearError();
    let me;
    try {
      me = await api("GET", "/v1/me", { key });
    } catch (error) {
      fail(error);
      sessionStorage.removeItem(KEY_STORE);
      $("app").hidden = true;
      $("whoami").hidden = true;
      return;
    }
    state.key = key;
    state.me = me;
    sessionStorage.setItem(KEY_STORE, key);
    $("key-input").value = "";
    $("key-forget").hidden = false;
    const who = $("whoami");
    who.textContent = `Tenant ${me.tenant_id} · role ${me.role}${me.user_id ? ` (user ${me.user_id} only)` : ""} · key ${me.key_id}`;
    who.hidden = false;
    applyPermissions();
    $("app").hidden = false;
    say(`Signed in to tenant ${me.tenant_id}.`);
    await loadOwners();
  }

  function applyPermissions() {
    for (const node of document.querySelectorAll("[data-may]")) {
      node.hidden = !may(node.dataset.may);
    }
    // a personal key reaches its own user alone: another user's id would only be refused
    $("open-user-form").hidden = Boolean(state.me && state.me.user_id);
  }

  function forgetKey() {
    sessionStorage.removeItem(KEY_STORE);
    state.key = null;
    state.me = null;
    state.owner = null;
    $("app").hidden = true;
    $("whoami").hidden = true;
    $("key-forget").hidden = true;
    say("Key forgotten.");
  }

  // -- users and scopes ----------------------------------------------------------------------

  async function loadOwners() {
    const list = clear($("owner-list"));
    const data = await guarded(() => api("GET", "/v1/users"));
    if (!data) return;
    // the API counts the facts stored, superseded and expired ones included: said so, as
    // the list (which hides those) says how many it leaves out
    const entry = (owner, label, stored) => {
      owner.stored = stored;
      const button = el("button", {
        type: "button",
        class: "owner",
        "data-scope": owner.scope,
        "data-owner": ownerId(owner),
        onclick: () => pickOwner(owner),
      }, el("span", { class: "owner-name", text: label }),
      el("span", {
        class: "count", text: `${stored} stored`,
        title: `${count(stored, "fact")} stored, superseded and expired ones included`,
      }));
      list.append(el("li", {}, button));
    };
    if (!data.users.length) list.append(el("li", { class: "help", text: "No users yet." }));
    for (const u of data.users) {
      entry({ scope: "user", user_id: u.user_id, label: u.user_id }, u.user_id, u.facts);
    }
    const someone = () => (state.owner && state.owner.user_id) || (data.users[0] || {}).user_id || "inspector";
    for (const a of data.agents) {
      const label = `agent ${a.agent_id}`;
      entry({ scope: "agent", agent_id: a.agent_id, label, get user_id() { return someone(); } }, label, a.facts);
    }
    entry({ scope: "tenant", label: `tenant ${state.me.tenant_id}`, get user_id() { return someone(); } },
      `tenant ${state.me.tenant_id} (shared)`, data.tenant_facts);
  }

  function ownerId(owner) {
    if (owner.scope === "user") return owner.user_id;
    return owner.scope === "agent" ? owner.agent_id : "";
  }

  function pickOwner(owner) {
    state.owner = {
      scope: owner.scope, user_id: owner.user_id, agent_id: owner.agent_id, label: owner.label, stored: owner.stored,
    };
    for (const b of document.querySelectorAll("#owner-list button")) {
      const same = b.dataset.scope === owner.scope && b.dataset.owner === ownerId(owner);
      b.setAttribute("aria-current", same ? "true" : "false");
    }
    $("no-owner").hidden = true;
    $("owner-view").hidden = false;
    $("owner-title").textContent = owner.scope === "user" ? `User ${owner.user_id}` : owner.label;
    const userOnly = owner.scope === "user";
    $("tab-sessions").hidden = !userOnly;
    $("tab-manage").hidden = !userOnly || !may("write_memory");
    $("receipt").hidden = true;
    if (!userOnly && ["sessions", "manage"].includes(state.view)) state.view = "facts";
    resetPages();
    show(state.view);
  }

  // -- tabs ------------------------------------------------------------------------------------

  const LOADERS = {
    facts: () => loadFacts(),
    search: () => undefined,
    memory: () => loadMemoryDoc(),
    sessions: () => loadSessions(),
    timeline: () => loadTimeline(),
    manage: () => undefined,
  };

  function tabs() {
    return [...document.querySelectorAll("#tabs [role=tab]")].filter((t) => !t.hidden);
  }

  function show(view) {
    state.view = view;
    for (const tab of document.querySelectorAll("#tabs [role=tab]")) {
      const selected = tab.dataset.view === view;
      tab.setAttribute("aria-selected", selected ? "true" : "false");
      tab.tabIndex = selected ? 0 : -1;
      $(tab.getAttribute("aria-controls")).hidden = !selected;
    }
    if (state.owner) LOADERS[view]();
  }

  function onTabKey(event) {
    const list = tabs();
    const at = list.indexOf(document.activeElement);
    if (at < 0) return;
    let next = null;
    if (event.key === "ArrowRight") next = list[(at + 1) % list.length];
    else if (event.key === "ArrowLeft") next = list[(at - 1 + list.length) % list.length];
    else if (event.key === "Home") next = list[0];
    else if (event.key === "End") next = list[list.length - 1];
    if (next) {
      event.preventDefault();
      next.focus();
      show(next.dataset.view);
    }
  }

  // -- facts -----------------------------------------------------------------------------------

  function resetPages() {
    state.cursors = [null];
    state.page = 0;
    state.nextCursor = null;
  }

  function tagList(text) {
    return text.split(",").map((t) => t.trim()).filter(Boolean);
  }

  function asUtc(value, dateOnly) {
    if (!value) return null;
    return dateOnly ? `${value}T00:00:00Z` : `${value.length === 16 ? `${value}:00` : value}Z`;
  }

  function filterParams() {
    const form = $("filter-form");
    const data = new FormData(form);
    return {
      kind: data.getAll("kind"),
      tags_any: tagList(data.get("tags_any") || ""),
      tags_all: tagList(data.get("tags_all") || ""),
      min_importance: data.get("min_importance") || null,
      created_after: asUtc(data.get("created_after"), true),
      created_before: asUtc(data.get("created_before"), true),
      as_of: asUtc(data.get("as_of"), false),
      include_inactive: data.get("include_inactive") ? "true" : null,
      limit: data.get("limit") || "50",
    };
  }

  async function loadFacts() {
    const params = { ...ownerParams(), ...filterParams() };
    const cursor = state.cursors[state.page];
    if (cursor) params.cursor = cursor;
    const page = await guarded(() => api("GET", "/v1/memories", { params }));
    if (!page) return;
    state.nextCursor = page.next_cursor;
    const body = clear($("facts-body"));
    for (const fact of page.items) body.append(factRow(fact));
    if (!page.items.length) {
      body.append(el("tr", {}, el("td", { colspan: TABLE_COLUMNS, class: "help", text: "No facts match." })));
    }
    $("facts-caption").textContent = `Facts of ${state.owner.label} (page ${state.page + 1})`;
    $("page-info").textContent = `Page ${state.page + 1}, ${page.items.length} shown${hiddenNote(params, page)}`;
    $("page-prev").disabled = state.page === 0;
    $("page-next").disabled = !page.next_cursor;
  }

  // With no filter, one page and the inactive ones left out, the facts the list does not
  // show are the stored ones (the sidebar's count) it hides: superseded or expired.
  function hiddenNote(params, page) {
    const narrowed = params.kind.length || params.tags_any.length || params.tags_all.length
      || params.min_importance || params.created_after || params.created_before || params.as_of;
    const hidden = (state.owner.stored || 0) - page.items.length;
    if (narrowed || params.include_inactive || state.page || page.next_cursor || hidden <= 0) return "";
    return `; ${hidden} more stored (superseded or expired): tick "superseded and expired too" to see them`;
  }

  function provenance(fact) {
    const s = fact.source;
    const cell = el("td", { class: "provenance" });
    // near-duplicates merged into the fact when they were recorded: each wording as said
    for (const p of fact.phrasings || []) {
      const from = p.source && p.source.origin ? ` (${p.source.origin})` : "";
      cell.append(el("div", { class: "phrasing", text: `also recorded as: ${p.text}${from}` }));
    }
    if (!s) return cell;
    if (s.origin) cell.append(el("div", { text: `origin: ${s.origin}` }));
    if (s.session_id) {
      const seqs = s.messages.length ? ` (messages ${s.messages.map((m) => `#${m}`).join(", ")})` : "";
      const link = el("button", {
        type: "button",
        class: "link session-link",
        "data-session": s.session_id,
        onclick: () => openSession(s.session_id),
        text: `session ${s.session_id}`,
      });
      cell.append(el("div", {}, link, seqs));
    }
    if (s.text) cell.append(el("blockquote", { class: "said", text: s.text }));
    return cell;
  }

  // Seven columns, so that a laptop's screen holds them all: what belongs together shares
  // a cell (kind and importance, key and tags, everything that changes with time).
  function factRow(fact) {
    const row = el("tr", { "data-id": fact.id });
    const line = (...parts) => el("div", {}, ...parts);
    const status = el("td", { class: "state" });
    if (fact.valid_to) status.append(line("closed ", shortWhen(fact.valid_to)));
    if (fact.expires_at) status.append(line("expires ", shortWhen(fact.expires_at)));
    if (fact.last_accessed_at) status.append(line(`recalled ${fact.access_count}×, last `, shortWhen(fact.last_accessed_at)));
    status.append(line(`confidence ${fixed(fact.confidence, 2)}`));
    const scope = fact.scope === "agent" ? `agent ${fact.agent_id}` : fact.scope;
    row.append(
      el("td", { class: "text", text: fact.text }),
      el("td", { class: "kind" }, line(fact.kind), line(`importance ${fact.importance}`),
        fact.scope === "user" ? null : line(`scope ${scope}`)),
      el("td", { class: "key" }, fact.key ? line(el("code", { text: fact.key })) : null,
        ...fact.tags.map((t) => el("span", { class: "tag", text: t }))),
      el("td", { class: "created" }, shortWhen(fact.created_at)),
      status,
      provenance(fact),
    );
    const actions = el("td", { class: "actions" });
    const writable = fact.scope === "user" ? may("write_memory") : may("write_shared_memory");
    if (writable && fact.scope === "user") {
      actions.append(el("button", { type: "button", class: "edit", onclick: () => editFact(row, fact), text: "Edit" }));
    }
    if (writable) {
      actions.append(el("button", { type: "button", class: "delete", onclick: () => deleteFact(fact), text: "Delete" }));
    }
    row.append(actions);
    return row;
  }

  function editFact(row, fact) {
    const existing = row.nextElementSibling;
    if (existing && existing.classList.contains("editor")) {
      existing.remove();
      return;
    }
    const id = `edit-${fact.id}`;
    const field = (label, name, input) => {
      input.id = `${id}-${name}`;
      input.name = name;
      return el("div", { class: "field" }, el("label", { for: input.id, text: label }), input);
    };
    const kind = el("select", {}, ...["fact", "preference", "event", "procedure"].map(
      (k) => el("option", { value: k, selected: k === fact.kind, text: k })));
    const form = el("form", { class: "edit-form" },
      field("Text", "text", el("textarea", { rows: 3 })),
      field("Key", "key", el("input", { spellcheck: "false" })),
      field("Kind", "kind", kind),
      field("Importance", "importance", el("input", { type: "number", min: 1, max: 10 })),
      field("Tags (comma-separated)", "tags", el("input", {})),
      el("p", { class: "help", text: "A new text or key records a new fact with this one's metadata and provenance, then deletes this one: a fact's text and id never change." }),
      el("button", { type: "submit", text: "Save" }),
      el("button", { type: "button", onclick: () => editor.remove(), text: "Cancel" }));
    form.elements.text.value = fact.text;
    form.elements.key.value = fact.key || "";
    form.elements.importance.value = fact.importance;
    form.elements.tags.value = fact.tags.join(", ");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      saveFact(fact, form);
    });
    const editor = el("tr", { class: "editor" }, el("td", { colspan: TABLE_COLUMNS }, form));
    row.after(editor);
    form.elements.text.focus();
  }

  async function saveFact(fact, form) {
    const text = form.elements.text.value.trim();
    const key = form.elements.key.value.trim() || null;
    const changes = {};
    if (form.elements.kind.value !== fact.kind) changes.kind = form.elements.kind.value;
    const importance = Number(form.elements.importance.value);
    if (importance !== fact.importance) changes.importance = importance;
    const tags = tagList(form.elements.tags.value);
    if (tags.join("\u0000") !== fact.tags.join("\u0000")) changes.tags = tags;
    const user = state.owner.user_id;
    const done = await guarded(async () => {
      if (text !== fact.text || key !== (fact.key || null)) {
        const replacement = {
          text, key, kind: changes.kind || fact.kind, importance: changes.importance || fact.importance,
          confidence: fact.confidence, tags: changes.tags || fact.tags,
        };
        if (fact.expires_at) replacement.expires_at = fact.expires_at;
        if (fact.source) replacement.source = fact.source;
        const recorded = await api("POST", "/v1/memories", { body: { user_id: user, facts: [replacement] } });
        const newId = recorded.results[0].id;
        if (newId !== fact.id) {
          await api("DELETE", `/v1/memories/${encodeURIComponent(fact.id)}`, { params: { user_id: user } });
        }
        return `Recorded the new fact ${newId}; the old one is deleted.`;
      }
      if (!Object.keys(changes).length) return "Nothing changed.";
      await api("PATCH", `/v1/memories/${encodeURIComponent(fact.id)}`, { body: { user_id: user, ...changes } });
      return `Saved ${Object.keys(changes).join(", ")}.`;
    });
    if (done) {
      say(done);
      await loadFacts();
    }
  }

  async function deleteFact(fact) {
    const params = { ...ownerParams() };
    const done = await guarded(() => api("DELETE", `/v1/memories/${encodeURIComponent(fact.id)}`, { params }));
    if (done) {
      say(`Deleted 1 fact: ${fact.text}`);
      await loadFacts();
    }
  }

  // -- search, explained --------------------------------------------------------------------

  async function runSearch() {
    const query = $("search-query").value;
    const topK = Number($("search-k").value) || 5;
    const base = { ...ownerParams(), query, top_k: topK };
    delete base.scope;
    if (state.owner.scope !== "user") base.scopes = [state.owner.scope];
    const hybrid = await guarded(() => api("POST", "/v1/memories/search", { body: base }));
    if (!hybrid) return;
    const legs = hybrid.hits.length ? Object.keys(hybrid.hits[0].ranks) : LEGS_FALLBACK;
    const alone = {};
    await Promise.all(legs.map(async (leg) => {
      try {
        alone[leg] = await api("POST", "/v1/memories/search", { body: { ...base, mode: leg } });
      } catch (error) {
        alone[leg] = { error };
      }
    }));
    renderHits(hybrid, legs);
    renderAlone(hybrid, legs, alone, topK);
  }

  function renderHits(hybrid, legs) {
    const head = clear($("search-head"));
    const cols = ["#", "Text", "Fused score"];
    for (const leg of legs) cols.push(`${leg} rank`, `${leg} score`);
    cols.push("Scope", "Kind", "Created", "Confidence");
    head.append(el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c }))));
    const body = clear($("search-body"));
    hybrid.hits.forEach((hit, i) => {
      const row = el("tr", { "data-id": hit.id, class: "hit" },
        el("td", { class: "num", text: i + 1 }),
        el("td", { class: "text", text: hit.text }),
        el("td", { class: "num fused", text: fixed(hit.score, 4) }));
      for (const leg of legs) {
        const rank = hit.ranks[leg];
        row.append(
          el("td", { class: "num leg-rank", "data-leg": leg, text: rank === null ? "—" : rank }),
          el("td", { class: "num leg-score", "data-leg": leg, text: hit.scores[leg] === null ? "—" : fixed(hit.scores[leg], 4) }));
      }
      row.append(
        el("td", { text: hit.scope === "agent" ? `agent ${hit.agent_id}` : hit.scope }),
        el("td", { text: hit.kind }),
        el("td", { text: when(hit.created_at) }),
        el("td", { class: "num", text: fixed(hit.confidence, 2) }));
      body.append(row);
    });
    $("search-table").hidden = false;
    if (!hybrid.hits.length) {
      body.append(el("tr", {}, el("td", { colspan: cols.length, class: "help", text: "Nothing recalled." })));
    }
  }

  function renderAlone(hybrid, legs, alone, topK) {
    const box = clear($("alone"));
    const fused = new Set(hybrid.hits.map((h) => h.id));
    const seenAlone = new Set();
    for (const leg of legs) {
      const column = el("section", { class: "leg", "data-leg": leg, "aria-label": `${leg} alone` },
        el("h3", { text: `${leg} alone (top ${topK})` }));
      const result = alone[leg];
      if (result.error) {
        column.append(el("p", { class: "help", text: `not available alone: ${result.error.message}` }));
      } else {
        const list = el("ol", {});
        for (const hit of result.hits) {
          seenAlone.add(hit.id);
          const note = fused.has(hit.id) ? "" : " (not in hybrid's top k)";
          list.append(el("li", { "data-id": hit.id, class: fused.has(hit.id) ? "" : "dropped" },
            el("span", { class: "text", text: hit.text }),
            el("span", { class: "score", text: ` ${fixed(hit.scores[leg] ?? hit.score, 4)}${note}` })));
        }
        if (!result.hits.length) list.append(el("li", { class: "help", text: "nothing" }));
        column.append(list);
      }
      box.append(column);
    }
    const added = hybrid.hits.filter((h) => !seenAlone.has(h.id)).length;
    $("search-summary").textContent = `${hybrid.hits.length} recalled; ${added} of them in no retriever's own top ${topK} (what fusion added).`;
  }

  // -- MEMORY.md ---------------------------------------------------------------------------------

  // A tiny Markdown reader for MEMORY.md: headings, bullets, paragraphs, `code` and **bold**,
  // every piece as text nodes. HTML comments (the bullets' metadata) are left out.
  function inline(text) {
    const out = [];
    const pattern = /(`[^`]+`|\*\*[^*]+\*\*)/g;
    let last = 0;
    for (const match of text.matchAll(pattern)) {
      if (match.index > last) out.push(document.createTextNode(text.slice(last, match.index)));
      const token = match[0];
      out.push(token.startsWith("`") ? el("code", { text: token.slice(1, -1) }) : el("strong", { text: token.slice(2, -2) }));
      last = match.index + token.length;
    }
    if (last < text.length) out.push(document.createTextNode(text.slice(last)));
    return out;
  }

  function renderMarkdown(markdown) {
    const root = document.createDocumentFragment();
    const plain = markdown.replace(/<!--[\s\S]*?-->/g, "");
    let list = null;
    let paragraph = null;
    for (const raw of plain.split("\n")) {
      const line = raw.trimEnd();
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      const bullet = /^\s*[-*]\s+(.*)$/.exec(line);
      if (heading) {
        list = paragraph = null;
        root.append(el(`h${Math.min(heading[1].length + 2, 6)}`, {}, ...inline(heading[2])));
      } else if (bullet) {
        paragraph = null;
        if (!list) root.append((list = el("ul", {})));
        list.append(el("li", {}, ...inline(bullet[1])));
      } else if (!line.trim()) {
        list = paragraph = null;
      } else {
        list = null;
        if (!paragraph) root.append((paragraph = el("p", {})));
        else paragraph.append(" ");
        paragraph.append(...inline(line.trim()));
      }
    }
    return root;
  }

  async function loadMemoryDoc() {
    const doc = await guarded(() => api("GET", `/v1/users/${encodeURIComponent(state.owner.user_id)}/memory-md`, {
      params: state.owner.scope === "user" ? {} : { scope: state.owner.scope, agent_id: state.owner.agent_id },
    }));
    if (!doc) return;
    const box = clear($("memory-doc"));
    if (!doc.text.trim()) {
      box.append(el("p", { class: "help", text: "No MEMORY.md yet: maintenance writes it when it consolidates." }));
    } else {
      box.append(renderMarkdown(doc.text));
    }
    $("memory-meta").textContent = `${doc.name}; ${count(doc.snapshots.length, "snapshot")} kept${doc.snapshots.length ? ` (latest ${doc.snapshots[doc.snapshots.length - 1]})` : ""}.`;
  }

  // -- sessions ----------------------------------------------------------------------------------

  async function loadSessions() {
    const data = await guarded(() => api("GET", "/v1/sessions", { params: { user_id: state.owner.user_id } }));
    if (!data) return;
    const list = clear($("session-list"));
    for (const s of data.sessions) {
      list.append(el("li", {}, el("button", {
        type: "button", class: "session", "data-session": s.session_id,
        onclick: () => openSession(s.session_id),
        text: `${s.session_id}: ${count(s.message_count, "message")}, updated ${when(s.updated_at)}`,
      })));
    }
    if (!data.sessions.length) list.append(el("li", { class: "help", text: "No stored sessions." }));
  }

  async function openSession(sessionId) {
    if (state.view !== "sessions") show("sessions");
    const user = state.owner.user_id;
    const detail = clear($("session-detail"));
    const s = await guarded(() => api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}`, { params: { user_id: user } }));
    if (!s) return;
    detail.append(el("h3", { text: `Session ${s.session_id}` }),
      el("p", { class: "help", text: `version ${s.version}; ${count(s.message_count, "message")} kept; ${count(s.compaction_count, "compaction")}; created ${when(s.created_at)}, updated ${when(s.updated_at)}` }));
    if (s.summary && Object.keys(s.summary).length) {
      const dl = el("dl", { class: "summary" });
      for (const [name, text] of Object.entries(s.summary)) dl.append(el("dt", { text: name }), el("dd", { text }));
      detail.append(el("h4", { text: "Summary" }), dl);
    }
    const messages = el("ol", { class: "messages" });
    for (const m of s.messages) {
      const item = el("li", { class: `message role-${m.role}`, "data-seq": m.seq ?? "" },
        el("div", { class: "who", text: `#${m.seq ?? "?"} ${m.role}${m.name ? ` (${m.name})` : ""}${m.mark ? ` [${m.mark}]` : ""}` }),
        el("div", { class: "content", text: m.content }));
      for (const call of m.tool_calls || []) {
        item.append(el("div", { class: "tool-call", text: `calls ${call.function.name}(${call.function.arguments})` }));
      }
      if (m.metadata && typeof m.metadata.ref === "string") item.append(evictedButton(sessionId, m.metadata.ref));
      messages.append(item);
    }
    detail.append(el("h4", { text: "Messages" }), messages);
    if (s.tool_trail.length) {
      const trail = el("ul", { class: "trail" });
      for (const t of s.tool_trail) {
        const item = el("li", {}, `${t.name}(${t.arguments}) at ${when(t.at)}${t.result_chars ? `, ${t.result_chars} characters` : ""}`);
        if (t.result_ref) item.append(" ", evictedButton(sessionId, t.result_ref));
        trail.append(item);
      }
      detail.append(el("h4", { text: "Tool calls kept after compaction" }), trail);
    }
    detail.focus();
  }

  function evictedButton(sessionId, ref) {
    const out = el("pre", { class: "evicted", hidden: true });
    const button = el("button", {
      type: "button", class: "link",
      onclick: async () => {
        const data = await guarded(() => api("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/tool-results`, {
          params: { user_id: state.owner.user_id, ref },
        }));
        if (data) {
          out.textContent = data.text;
          out.hidden = false;
        }
      },
      text: `Show the evicted tool result ${ref}`,
    });
    return el("div", {}, button, out);
  }

  // -- facts over time -----------------------------------------------------------------------------

  async function allFacts() {
    const facts = [];
    let cursor = null;
    for (let i = 0; i < TIMELINE_MAX_PAGES; i++) {
      const params = { ...ownerParams(), include_inactive: "true", limit: TIMELINE_PAGE };
      if (cursor) params.cursor = cursor;
      const page = await api("GET", "/v1/memories", { params });
      facts.push(...page.items);
      cursor = page.next_cursor;
      if (!cursor) break;
    }
    return facts;
  }

  const dayOf = (iso) => Date.parse(`${iso.slice(0, 10)}T00:00:00Z`) / DAY_MS;
  const isoDay = (n) => new Date(n * DAY_MS).toISOString().slice(0, 10);

  // The facts the chart draws: the biggest group of recorded days with no gap over
  // GROUP_GAP_DAYS between them (a tie: the latest), and the facts outside it.
  function grouped(facts) {
    const dated = facts.filter((f) => f.created_at).map((f) => ({ fact: f, day: dayOf(f.created_at) }));
    dated.sort((a, b) => a.day - b.day);
    const groups = [];
    for (const d of dated) {
      const last = groups[groups.length - 1];
      if (last && d.day - last[last.length - 1].day <= GROUP_GAP_DAYS) last.push(d);
      else groups.push([d]);
    }
    let best = groups[0] || [];
    for (const g of groups) if (g.length >= best.length) best = g;
    const inside = new Set(best);
    return { inside: best, outside: dated.filter((d) => !inside.has(d)) };
  }

  // The chart's bars: one per day, or per week, month or year once the days would be more
  // than MAX_BARS; every bar between the first and the last, empty ones too.
  function binned(inside) {
    if (!inside.length) return { unit: "day", bins: [] };
    const first = inside[0].day;
    const last = inside[inside.length - 1].day;
    const monthOf = (n) => { const d = new Date(n * DAY_MS); return d.getUTCFullYear() * 12 + d.getUTCMonth(); };
    const units = [
      ["day", (n) => n, (k) => isoDay(k)],
      ["week", (n) => Math.floor((n + 3) / 7), (k) => isoDay(k * 7 - 3)], // weeks from Monday
      ["month", monthOf, (k) => `${Math.floor(k / 12)}-${String((k % 12) + 1).padStart(2, "0")}-01`],
      ["year", (n) => new Date(n * DAY_MS).getUTCFullYear(), (k) => `${k}-01-01`],
    ];
    const [unit, key, label] = units.find(([, k]) => k(last) - k(first) < MAX_BARS) || units[3];
    const bins = [];
    for (let k = key(first); k <= key(last); k++) bins.push({ day: label(k), counts: {} });
    for (const d of inside) {
      const counts = bins[key(d.day) - key(first)].counts;
      counts[d.fact.kind] = (counts[d.fact.kind] || 0) + 1;
    }
    return { unit, bins };
  }

  function outsideNote(outside) {
    const note = $("chart-outside");
    note.hidden = !outside.length;
    if (!outside.length) return;
    const shown = outside.slice(0, 5).map((d) => `${isoDay(d.day)} (${d.fact.kind})`).join(", ");
    const more = outside.length > 5 ? `, and ${outside.length - 5} more` : "";
    note.textContent = `${count(outside.length, "fact")} outside the chart, recorded more than ${GROUP_GAP_DAYS} days from the rest: ${shown}${more}.`;
  }

  async function loadTimeline() {
    const facts = await guarded(allFacts);
    if (!facts) return;
    const { inside, outside } = grouped(facts);
    const { unit, bins } = binned(inside);
    const chart = clear($("chart"));
    const table = clear($("chart-table"));
    outsideNote(outside);
    if (!bins.length) {
      chart.append(el("p", { class: "help", text: "No facts yet." }));
      return;
    }
    const kinds = Object.keys(KIND_COLOURS).filter((k) => bins.some((d) => d.counts[k]));
    const total = (d) => kinds.reduce((n, k) => n + (d.counts[k] || 0), 0);
    const top = Math.max(...bins.map(total));
    const [left, bottom, pad, h] = [40, 40, 10, 200];
    // a bar is 14-48 px wide, the chart at most 900 px (no scaling down on a laptop) and
    // wide enough for the legend
    const slot = Math.min(48, Math.max(14, Math.floor(850 / bins.length)));
    const w = Math.max(320, left + kinds.length * LEGEND_SLOT + pad, bins.length * slot + left + pad);
    const bar = (w - left - pad) / bins.length;
    const barWidth = Math.max(1, Math.min(bar, 48) - 2);
    const per = unit === "day" ? "day" : `${unit} (bars start on the ${unit}'s first day)`;
    const plot = svg("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img", "aria-labelledby": "chart-title", class: "bars" },
      svg("title", { id: "chart-title", text: `Facts recorded per ${per} by kind: ${inside.length} facts over ${count(bins.length, unit)}, at most ${top} in one ${unit}` }));
    const y = (n) => h - bottom - (n / top) * (h - bottom - pad);
    plot.append(svg("line", { x1: left, y1: y(0), x2: w - pad, y2: y(0), stroke: "#555" }),
      svg("line", { x1: left, y1: y(0), x2: left, y2: y(top), stroke: "#555" }),
      svg("text", { x: left - 6, y: y(top) + 4, "text-anchor": "end", class: "axis", text: top }),
      svg("text", { x: left - 6, y: y(0), "text-anchor": "end", class: "axis", text: 0 }));
    const spacing = unit === "month" ? 50 : 40; // px a date label needs
    const every = Math.max(1, Math.ceil(spacing / bar));
    const labelled = (i) => i % every === 0 || (i === bins.length - 1 && (i % every) * bar >= spacing);
    const tick = (day) => (unit === "day" || unit === "week" ? day.slice(5) : unit === "month" ? day.slice(0, 7) : day.slice(0, 4));
    bins.forEach((d, i) => {
      let base = 0;
      for (const k of kinds) {
        const n = d.counts[k] || 0;
        if (!n) continue;
        plot.append(svg("rect", {
          x: left + i * bar + (bar - barWidth) / 2, y: y(base + n), width: barWidth, height: y(base) - y(base + n),
          fill: KIND_COLOURS[k], "data-day": d.day, "data-kind": k,
        }, svg("title", { text: `${d.day}: ${n} ${k}` })));
        base += n;
      }
      if (labelled(i)) {
        plot.append(svg("text", { x: left + i * bar + bar / 2, y: h - bottom + 16, "text-anchor": "middle", class: "axis", text: tick(d.day) }));
      }
    });
    kinds.forEach((k, i) => {
      plot.append(svg("rect", { x: left + i * LEGEND_SLOT, y: h - 14, width: 10, height: 10, fill: KIND_COLOURS[k] }),
        svg("text", { x: left + i * LEGEND_SLOT + 14, y: h - 5, class: "axis legend", text: k }));
    });
    chart.append(plot);
    table.append(el("caption", { text: `Facts recorded per ${unit}` }),
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: unit }), ...kinds.map((k) => el("th", { scope: "col", text: k })))));
    const body = el("tbody", {});
    for (const d of bins.filter((x) => total(x))) {
      body.append(el("tr", {}, el("th", { scope: "row", text: d.day }), ...kinds.map((k) => el("td", { class: "num", text: d.counts[k] || 0 }))));
    }
    table.append(body);
  }

  // -- forget and erase ----------------------------------------------------------------------------

  function confirmed(input) {
    if (input.value.trim() === state.owner.user_id) return true;
    fail({ code: "not_confirmed", message: `type ${state.owner.user_id} to confirm` });
    return false;
  }

  async function forgetFacts() {
    if (!confirmed($("forget-confirm"))) return;
    const user = state.owner.user_id;
    const done = await guarded(() => api("DELETE", `/v1/users/${encodeURIComponent(user)}/memories`));
    if (done) {
      $("forget-confirm").value = "";
      say(`Forgot ${done.deleted} facts of ${user}.`);
      await loadOwners();
    }
  }

  async function eraseUser() {
    if (!confirmed($("erase-confirm"))) return;
    const user = state.owner.user_id;
    const receipt = await guarded(() => api("DELETE", `/v1/users/${encodeURIComponent(user)}`));
    if (!receipt) return;
    $("erase-confirm").value = "";
    const fields = clear($("receipt-fields"));
    for (const name of ["tenant_id", "user_id", "erased_at", "by", "total", "left_behind"]) {
      fields.append(el("dt", { text: name }), el("dd", { "data-field": name, text: name === "erased_at" ? when(receipt[name]) : receipt[name] }));
    }
    const table = clear($("receipt-table"));
    table.append(el("caption", { text: "Removed, per store" }),
      el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "store" }), el("th", { scope: "col", text: "items" }))));
    const body = el("tbody", {});
    for (const [store, n] of Object.entries(receipt.removed)) {
      body.append(el("tr", { "data-store": store }, el("th", { scope: "row", text: store }), el("td", { class: "num", text: n })));
    }
    table.append(body);
    $("receipt").hidden = false;
    say(`Erased ${user}: ${receipt.total} items removed.`);
    await loadOwners();
  }

  // -- wiring ------------------------------------------------------------------------------------

  function start() {
    $("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const key = $("key-input").value.trim();
      if (key) openWithKey(key);
    });
    $("key-forget").addEventListener("click", forgetKey);
    $("open-user-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const user = $("open-user").value.trim();
      if (!user) return;
      state.view = "facts"; // a listing: an id the API refuses is told at once
      pickOwner({ scope: "user", user_id: user, label: user });
    });
    for (const tab of document.querySelectorAll("#tabs [role=tab]")) {
      tab.addEventListener("click", () => show(tab.dataset.view));
    }
    $("tabs").addEventListener("keydown", onTabKey);
    $("filter-form").addEventListener("submit", (event) => {
      event.preventDefault();
      resetPages();
      loadFacts();
    });
    $("page-next").addEventListener("click", () => {
      if (!state.nextCursor) return;
      state.page += 1;
      state.cursors[state.page] = state.nextCursor;
      loadFacts();
    });
    $("page-prev").addEventListener("click", () => {
      if (state.page === 0) return;
      state.page -= 1;
      loadFacts();
    });
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      runSearch();
    });
    $("forget-form").addEventListener("submit", (event) => {
      event.preventDefault();
      forgetFacts();
    });
    $("erase-form").addEventListener("submit", (event) => {
      event.preventDefault();
      eraseUser();
    });
    show("facts");
    const saved = sessionStorage.getItem(KEY_STORE);
    if (saved) openWithKey(saved);
  }

  start();
})();
