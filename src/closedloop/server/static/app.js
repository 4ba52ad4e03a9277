// closedloop dashboard: runs, a live chart of one run's control signals, the handover queue.
// The API key stays in sessionStorage and travels only in the Authorization header, so the
// event stream is read with fetch (EventSource cannot send headers) and parsed here.
"use strict";

(function () {
  const KEY_ITEM = "closedloop.apiKey";
  const SESSION_ITEM = "closedloop.dashboardSession";
  const REFRESH_MS = 1500;
  const $ = (id) => document.getElementById(id);

  const state = {
    key: sessionStorage.getItem(KEY_ITEM),
    runs: [],
    selected: null, // {session_id, id}
    points: [],
    stream: null, // AbortController of the event stream
    handover: null, // the handover shown
    timer: null,
  };
  let chart = null;

  // --- API ----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, detail) { super(detail); this.status = status; }
  }

  async function api(path, options = {}) {
    const headers = { Authorization: "Bearer " + state.key, Accept: "application/json" };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method: options.method || "GET",
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      cache: "no-store",
    });
    if (response.status === 204) return null;
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    if (!response.ok) {
      const detail = (data && data.detail) || response.statusText || "request failed";
      if (response.status === 401) signOut("The key was refused: " + detail);
      throw new ApiError(response.status, detail);
    }
    return data;
  }

  // --- small DOM helpers (text only: nothing from the server is parsed as HTML) -------

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function short(text, n) {
    const s = String(text ?? "");
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }

  function statusBadge(run) {
    const ok = run.success === true ? " ok" : run.success === false ? " fail" : "";
    const label = run.status === "done" && run.halt_reason ? "done · " + run.halt_reason : run.status;
    return el("span", label, "status " + run.status + ok);
  }

  // --- sign in / out --------------------------------------------------------------------

  function show(signedIn) {
    $("login").hidden = signedIn;
    $("app").hidden = !signedIn;
    $("who").hidden = !signedIn;
  }

  function signOut(message) {
    sessionStorage.removeItem(KEY_ITEM);
    state.key = null;
    stopStream();
    clearTimeout(state.timer);
    show(false);
    $("login-error").textContent = message || "";
    $("api-key").value = "";
  }

  async function signIn(key) {
    state.key = key;
    const me = await api("/v1/me");
    sessionStorage.setItem(KEY_ITEM, key);
    $("who-name").textContent = "key " + me.name + " (" + me.key_id + ")";
    $("login-error").textContent = "";
    show(true);
    chart.draw();
    await loadAgents();
    refresh();
  }

  // --- runs -----------------------------------------------------------------------------

  async function loadAgents() {
    const data = await api("/v1/agents");
    const select = $("agent");
    select.replaceChildren();
    for (const agent of data.agents) {
      const option = el("option", agent.name + (agent.available ? "" : " (needs --world)"));
      option.value = agent.name;
      option.disabled = !agent.available;
      option.title = agent.description || "";
      select.append(option);
    }
  }

  function renderRuns() {
    const body = $("runs-table").querySelector("tbody");
    body.replaceChildren();
    $("runs-empty").hidden = state.runs.length > 0;
    for (const run of state.runs) {
      const row = el("tr");
      row.dataset.runId = run.id;
      if (state.selected && state.selected.id === run.id) row.classList.add("selected");
      const name = el("td", short(run.task, 28), "task");
      name.title = run.task + "\n" + run.id;
      row.append(name, el("td", run.agent), el("td"), el("td", run.steps, "num"));
      row.children[2].append(statusBadge(run));
      row.addEventListener("click", () => selectRun(run));
      body.append(row);
    }
  }

  async function dashboardSession() {
    const known = sessionStorage.getItem(SESSION_ITEM);
    if (known) {
      try { await api("/v1/sessions/" + known); return known; } catch (_) { /* expired */ }
    }
    const created = await api("/v1/sessions", { method: "POST", body: { metadata: { via: "dashboard" } } });
    sessionStorage.setItem(SESSION_ITEM, created.id);
    return created.id;
  }

  async function startRun(event) {
    event.preventDefault();
    $("new-run-error").textContent = "";
    try {
      const sid = await dashboardSession();
      const run = await api("/v1/sessions/" + sid + "/runs", {
        method: "POST", body: { agent: $("agent").value, task: $("task").value },
      });
      $("task").value = "";
      selectRun(run);
      refresh();
    } catch (error) {
      $("new-run-error").textContent = error.message;
    }
  }

  function renderRunMeta(run) {
    $("run-title").textContent = short(run.task, 80);
    $("run-title").title = run.task;
    const parts = [run.agent, run.id, run.status + (run.halt_reason ? " (" + run.halt_reason + ")" : "")];
    if (run.steps) parts.push(run.steps + " steps");
    $("run-meta").textContent = parts.join(" · ");
    $("run-answer").textContent = run.answer ? "Answer: " + run.answer : (run.message || "");
  }

  function renderActuators(point) {
    const dl = $("actuators");
    dl.replaceChildren();
    if (!point) return;
    const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? v : v.toFixed(3)) : String(v));
    const rows = [
      ["step", point.step + (point.tool ? " · " + point.tool : " · " + point.step_type)],
      ["e / u / f_est", [point.e, point.u, point.f_est].map(fmt).join(" / ")],
      ["protocol", point.protocol],
    ];
    for (const [k, v] of Object.entries(point.actuators || {})) rows.push([k, fmt(v)]);
    for (const [k, v] of rows) dl.append(el("dt", k), el("dd", v));
  }

  function selectRun(run) {
    state.selected = { session_id: run.session_id, id: run.id };
    state.points = [];
    chart.setPoints([]);
    renderActuators(null);
    if (window.ClosedloopPlain) window.ClosedloopPlain.renderPlain($("plain"), []);
    renderRunMeta(run);
    renderRuns();
    follow(run.session_id, run.id);
  }

  // --- the event stream ---------------------------------------------------------------

  function stopStream() {
    if (state.stream) state.stream.abort();
    state.stream = null;
  }

  function onEvent(type, data, selected) {
    if (!state.selected || state.selected.id !== selected) return;
    if (type === "step") {
      state.points[data.step] = data;
      chart.setPoints(state.points);
      renderActuators(data);
      if (window.ClosedloopPlain) window.ClosedloopPlain.renderPlain($("plain"), state.points);
      const run = state.runs.find((r) => r.id === selected);
      if (run && (run.steps || 0) < data.step + 1) { run.steps = data.step + 1; renderRuns(); }
    } else if (type === "status" || type === "end" || type === "waiting") {
      const run = state.runs.find((r) => r.id === selected);
      if (run) { Object.assign(run, data); renderRunMeta(run); renderRuns(); }
    }
  }

  async function follow(sessionId, runId) {
    stopStream();
    const controller = new AbortController();
    state.stream = controller;
    let lastId = -1;
    let ended = false;
    let waiting = false;
    while (!controller.signal.aborted && !ended) {
      try {
        const headers = { Authorization: "Bearer " + state.key, Accept: "text/event-stream" };
        if (lastId >= 0) headers["Last-Event-ID"] = String(lastId);
        const response = await fetch(
          "/v1/sessions/" + sessionId + "/runs/" + runId + "/events",
          { headers, signal: controller.signal, cache: "no-store" },
        );
        if (!response.ok) {
          if (response.status === 401) signOut("The key was refused.");
          return;
        }
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let type = "message", data = "", id = null;
            for (const line of frame.split("\n")) {
              if (line.startsWith(":")) continue;
              const colon = line.indexOf(":");
              const field = colon < 0 ? line : line.slice(0, colon);
              const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
              if (field === "event") type = text;
              else if (field === "data") data += text;
              else if (field === "id") id = text;
            }
            if (!data) continue;
            if (id !== null) lastId = Number(id);
            onEvent(type, JSON.parse(data), runId);
            if (type === "end") ended = true;
            waiting = type === "waiting";
          }
        }
      } catch (error) {
        if (controller.signal.aborted) return;
      }
      // A run waiting on a person closes its stream; look again until it is decided.
      if (!ended) await new Promise((resolve) => setTimeout(resolve, waiting ? 3000 : 1000));
    }
  }

  // --- handovers ----------------------------------------------------------------------

  function renderHandovers(items) {
    const list = $("ho-list");
    list.replaceChildren();
    $("ho-count").textContent = String(items.length);
    $("ho-count").classList.toggle("zero", items.length === 0);
    $("ho-empty").hidden = items.length > 0;
    for (const item of items) {
      const li = el("li", short(item.task || item.task_id, 60));
      li.dataset.handoverId = item.id;
      if (state.handover && state.handover.id === item.id) li.classList.add("selected");
      li.append(el("small", short(item.reason, 90)));
      li.addEventListener("click", () => openHandover(item.id));
      list.append(li);
    }
  }

  function describeObserved(step) {
    const obs = step.observation || {};
    const action = step.action ? step.action.tool + " " + JSON.stringify(step.action.arguments) : (step.final_answer ? "final: " + step.final_answer : step.step_type);
    const seen = obs.status ? " → " + obs.status + (obs.confidence !== undefined ? " (confidence " + Number(obs.confidence).toFixed(2) + ")" : "") : "";
    return "step " + step.step + ": " + short(action, 120) + seen + " · e=" + Number(step.e).toFixed(2) + " f_est=" + Number(step.f_est).toFixed(2);
  }

  async function openHandover(id) {
    const item = await api("/v1/handovers/" + encodeURIComponent(id).replace(/%2F/g, "/"));
    state.handover = item;
    $("ho-detail").hidden = false;
    $("ho-title").textContent = short(item.task || item.task_id, 120);
    $("ho-reason").textContent = item.reason + " · " + item.status;
    const checks = $("ho-checks");
    checks.replaceChildren();
    for (const check of item.failed_checks || []) checks.append(el("li", short(check, 200)));
    if (!checks.children.length) checks.append(el("li", "none recorded"));
    $("ho-fix").textContent = item.suggested_fix || "no past success to draw on";
    const observed = $("ho-observed");
    observed.replaceChildren();
    for (const step of (item.audit && item.audit.observed) || []) observed.append(el("li", describeObserved(step)));
    const action = item.pending_action;
    $("ho-action").textContent = action
      ? (action.kind === "tool" ? "call " + action.tool : "final answer: " + short(action.answer, 200))
      : "none (the model's proposal did not validate)";
    $("ho-args").value = action && action.kind === "tool" ? JSON.stringify(action.arguments || {}, null, 2) : "";
    $("ho-args").disabled = !(action && action.kind === "tool");
    $("ho-edit").disabled = $("ho-args").disabled || item.status !== "pending";
    $("ho-approve").disabled = item.status !== "pending";
    $("ho-reject").disabled = item.status !== "pending";
    $("ho-message").textContent = "";
    renderHandoverSelection();
  }

  function renderHandoverSelection() {
    for (const li of $("ho-list").children) {
      li.classList.toggle("selected", state.handover && li.dataset.handoverId === state.handover.id);
    }
  }

  async function decide(kind) {
    const item = state.handover;
    if (!item) return;
    const body = { note: $("ho-note").value };
    if (kind === "edit") {
      let args;
      try { args = JSON.parse($("ho-args").value); } catch (error) {
        $("ho-message").textContent = "The arguments are not valid JSON: " + error.message;
        return;
      }
      body.edits = { arguments: args };
    }
    for (const id of ["ho-approve", "ho-edit", "ho-reject"]) $(id).disabled = true;
    try {
      const out = await api("/v1/handovers/" + item.id + "/" + kind, { method: "POST", body });
      const verb = { approve: "approved", edit: "edited and approved", reject: "rejected" }[kind];
      await openHandover(item.id);
      $("ho-message").textContent = verb + (out.run ? " · run " + out.run.id + " " +
        (kind === "reject" ? "ended" : "resumed") : "");
      $("ho-note").value = "";
      if (out.run) selectRun(out.run);
      refresh();
    } catch (error) {
      $("ho-message").textContent = error.message;
      await openHandover(item.id).catch(() => {});
    }
  }

  // --- provider limits ----------------------------------------------------------------

  function renderLimits(providers) {
    const list = $("limits");
    list.replaceChildren();
    $("limits-empty").hidden = providers.length > 0;
    for (const p of providers) {
      const rows = [
        ["provider", p.provider + (p.shared ? " (shared by all workers)" : " (this worker)")],
        ["limit", Number(p.limit).toFixed(1)],
        ["in flight", p.inflight],
        ["429s / 503s seen", p.rejected],
        ["retry budget", Number(p.retry_tokens).toFixed(1) + " retries"],
        ["circuit breaker", p.breaker + (p.times_opened ? " · opened " + p.times_opened + "×" : "")],
        ["queueing delay", Number(p.delay_ratio).toFixed(2) + " × base" + (p.congested ? " · congested" : "")],
        ["capacity deficit", (100 * Number(p.capacity_deficit)).toFixed(0) + " %"],
      ];
      for (const [name, value] of rows) {
        list.append(el("dt", name), el("dd", value));
      }
    }
  }

  // --- refresh loop -------------------------------------------------------------------

  async function refresh() {
    clearTimeout(state.timer);
    if (!state.key) return;
    try {
      const [runs, handovers, limits] = await Promise.all([
        api("/v1/runs?limit=50"), api("/v1/handovers"), api("/v1/limits"),
      ]);
      state.runs = runs.runs;
      renderRuns();
      renderHandovers(handovers.handovers);
      renderLimits(limits.providers);
      if (state.selected) {
        const run = state.runs.find((r) => r.id === state.selected.id);
        if (run) renderRunMeta(run);
      }
    } catch (error) {
      if (!state.key) return;
    }
    state.timer = setTimeout(refresh, document.hidden ? REFRESH_MS * 4 : REFRESH_MS);
  }

  // --- start ----------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    chart = new window.ControlChart($("chart"));
    $("login-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const key = $("api-key").value.trim();
      $("login-button").disabled = true;
      try { await signIn(key); } catch (error) {
        if (state.key) signOut(error.message);
      } finally { $("login-button").disabled = false; }
    });
    $("sign-out").addEventListener("click", () => signOut(""));
    $("new-run").addEventListener("submit", startRun);
    $("ho-approve").addEventListener("click", () => decide("approve"));
    $("ho-edit").addEventListener("click", () => decide("edit"));
    $("ho-reject").addEventListener("click", () => decide("reject"));
    if (state.key) signIn(state.key).catch(() => signOut("")); else show(false);
  });
})();
