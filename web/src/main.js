// The page of `loopctl web`: a chat with the agent and a browser of the session store (docs/web.md).
// Everything a model or a tool wrote is shown as text (Preact escapes it), but the model's answers, which are
// Markdown, go through the sanitizer of markdown.js. The CSP allows no inline script or style.
import { h, render } from "preact";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import htm from "htm";
import { download, getJSON, postJSON, readStream } from "./api.js";
import { renderMarkdown } from "./markdown.js";
import { applyChunk, newLive } from "./live.js";

const html = htm.bind(h);

function newId() {
  const d = new Date();
  const p = (n) => String(n).padStart(2, "0");
  const rand = Array.from(crypto.getRandomValues(new Uint8Array(3)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `web-${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}-${rand}`;
}

function currentSession() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

function fmtTime(t) {
  return new Date(t * 1000).toLocaleString();
}

function fmtSeconds(s) {
  if (s == null) return "";
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

function fmtCost(c) {
  if (c == null) return "cost unknown";
  const n = Number(c);
  return n < 0.01 ? `$${n.toFixed(5)}` : `$${n.toFixed(3)}`;
}

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

// --- pieces ---------------------------------------------------------------------------------------------------

function Markdown({ text }) {
  const ref = useRef(null);
  useEffect(() => {
    // The only HTML the page inserts: sanitized Markdown (markdown.js).
    if (ref.current) ref.current.innerHTML = renderMarkdown(text);
  }, [text]);
  return html`<div class="md" ref=${ref}></div>`;
}

function Diff({ diff }) {
  const lines = diff.split("\n");
  return html`<pre class="diff">${lines.map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "head" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx";
    return html`<span class=${`d-line d-${kind}`}>${line || " "}</span>`;
  })}</pre>`;
}

function Reasoning({ text }) {
  return html`<details class="reasoning" open><summary>thinking</summary><div class="reasoning-text">${text}</div></details>`;
}

function ToolCall({ call, result, duration, diff }) {
  const state = result ? (result.isError ? "error" : "done") : call.state || "running";
  return html`<div class=${`tool tool-${state}`} data-tool=${call.name} data-call=${call.id}>
    <div class="tool-head">
      <span class="tool-name">${call.name}</span>
      <span class="tool-state">${state === "running" ? "running…" : state === "error" ? "failed" : state === "awaiting" ? "awaiting approval" : "done"}</span>
      ${duration != null && html`<span class="tool-duration">${fmtSeconds(duration)}</span>`}
    </div>
    <details class="tool-input"><summary>input</summary><pre>${pretty(call.input)}</pre></details>
    ${diff && html`<details class="tool-diff" open><summary>${diff.action} ${diff.path}</summary><${Diff} diff=${diff.diff} /></details>`}
    ${result && html`<div class="tool-result"><pre>${result.output}</pre>${(result.images || []).map((src) => html`<img class="tool-image" src=${src} alt="image from the tool" />`)}</div>`}
  </div>`;
}

function Approval({ item, onDecide, busy }) {
  const [mode, setMode] = useState(null);
  const [reason, setReason] = useState("");
  const [input, setInput] = useState(pretty(item.input));
  const [problem, setProblem] = useState(null);
  const send = (decision) => {
    if (decision.decision === "modify") {
      try {
        decision.input = JSON.parse(input);
      } catch (e) {
        setProblem(`not JSON: ${e.message}`);
        return;
      }
    }
    onDecide(item.id, decision);
  };
  return html`<div class="approval" data-approval=${item.id}>
    <div class="approval-head"><strong>${item.name}</strong> wants to run${item.reason ? html` — <span>${item.reason}</span>` : ""}${item.agent ? html` <span class="dim">(${item.agent})</span>` : ""}</div>
    ${item.preview && item.preview.problem && html`<div class="problem">${item.preview.problem}</div>`}
    ${item.preview && item.preview.diff && html`<${Diff} diff=${item.preview.diff} />`}
    <details><summary>the whole input</summary><pre>${pretty(item.input)}</pre></details>
    ${mode === "deny" && html`<input class="reason" placeholder="what the model reads (optional)" value=${reason} onInput=${(e) => setReason(e.target.value)} />`}
    ${mode === "modify" && html`<textarea class="modify" rows="8" value=${input} onInput=${(e) => setInput(e.target.value)}></textarea>`}
    ${problem && html`<div class="problem">${problem}</div>`}
    <div class="buttons">
      <button class="approve" disabled=${busy} onClick=${() => send({ decision: "approve" })}>Approve</button>
      ${mode === "deny"
        ? html`<button class="deny" disabled=${busy} onClick=${() => send({ decision: "deny", reason })}>Deny</button>`
        : html`<button class="secondary" disabled=${busy} onClick=${() => setMode("deny")}>Deny…</button>`}
      ${mode === "modify"
        ? html`<button class="secondary" disabled=${busy} onClick=${() => send({ decision: "modify" })}>Run with this input</button>`
        : html`<button class="secondary" disabled=${busy} onClick=${() => setMode("modify")}>Modify…</button>`}
    </div>
  </div>`;
}

// Stored messages, as turns the page shows: each tool call with its result.
function StoredMessages({ messages, durations, onFork, external, diffs }) {
  const results = { ...external };
  for (const m of messages) for (const p of m.parts) if (p.type === "tool-result") results[p.callId] = p;
  return messages.map((m) => {
    const shown = m.parts.filter((p) => p.type !== "tool-result");
    if (!shown.length) return null;
    return html`<div class=${`msg msg-${m.role}`} data-node=${m.node} data-index=${m.index}>
      <div class="msg-meta"><span>${m.role}</span><button class="link fork-here" title="start a new session from here" onClick=${() => onFork(m.node)}>fork here</button></div>
      ${shown.map((p) =>
        p.type === "text" ? (m.role === "assistant" ? html`<${Markdown} text=${p.text} />` : html`<div class="user-text">${p.text}</div>`)
        : p.type === "reasoning" ? html`<${Reasoning} text=${p.text} />`
        : p.type === "image" ? html`<img class="msg-image" src=${p.url} alt="image" />`
        : p.type === "tool-call" ? html`<${ToolCall} call=${p} result=${results[p.id]} duration=${durations[p.id] ?? results[p.id]?.duration} diff=${diffs[p.id]} />`
        : null,
      )}
    </div>`;
  });
}

function LiveMessage({ live }) {
  return html`<div class="msg msg-assistant live">
    <div class="msg-meta"><span>assistant</span>${live.status === "streaming" && html`<span class="spinner">streaming…</span>`}</div>
    ${live.parts.map((p) =>
      p.type === "text" ? html`<${Markdown} text=${p.text} />`
      : p.type === "reasoning" ? html`<${Reasoning} text=${p.text} />`
      : p.type === "file" ? html`<img class="msg-image" src=${p.url} alt="image" />`
      : p.type === "tool"
        ? html`<${ToolCall} call=${{ id: p.toolCallId, name: p.toolName, input: p.input, state: p.state }} result=${p.result} duration=${p.duration} diff=${p.diff} />`
        : null,
    )}
    ${live.error && html`<div class="problem">${live.error}</div>`}
  </div>`;
}

function Waterfall({ traces }) {
  if (!traces.length) return html`<p class="dim">No spans yet: the runs made by this server show theirs here.</p>`;
  return traces.map((t, n) => {
    const span = Math.max(t.end - t.start, 1);
    const depth = {};
    for (const s of t.spans) depth[s.spanId] = s.parentId && depth[s.parentId] != null ? depth[s.parentId] + 1 : 0;
    return html`<div class="trace"><div class="dim">run ${n + 1} · ${fmtSeconds((t.end - t.start) / 1e9)}</div>
      ${t.spans.map((s) => html`<div class="span-row" title=${JSON.stringify(s.attributes)}>
        <div class="span-name" style=${{ paddingLeft: `${depth[s.spanId] * 10}px` }}>${s.name}</div>
        <div class="span-track"><div class=${`span-bar span-${s.status}`} style=${{ marginLeft: `${((s.start - t.start) / span) * 100}%`, width: `${Math.max(((s.end - s.start) / span) * 100, 0.5)}%` }}></div></div>
        <div class="span-time">${fmtSeconds((s.end - s.start) / 1e9)}</div>
      </div>`)}
    </div>`;
  });
}

function Runs({ runs }) {
  if (!runs.length) return html`<p class="dim">No runs yet in this server's lifetime.</p>`;
  return runs.map((r, n) => html`<div class="run">
    <div><strong>run ${n + 1}</strong> · ${r.outcome} · ${fmtSeconds(r.duration)} · ${fmtCost(r.cost)} · ${r.usage.input} in / ${r.usage.output} out</div>
    <table class="turns"><thead><tr><th>turn</th><th>model</th><th>in</th><th>out</th><th>cost</th><th>latency</th><th>tools</th></tr></thead>
    <tbody>${r.turns.map((t) => html`<tr class="turn-row"><td>${t.turn}</td><td>${t.model}</td><td>${t.input}</td><td>${t.output}</td><td>${fmtCost(t.cost)}</td><td>${fmtSeconds(t.duration)}</td>
      <td>${t.tools.map((x) => html`<span class=${x.error ? "chip chip-error" : "chip"}>${x.name} ${fmtSeconds(x.duration)}</span>`)}</td></tr>`)}</tbody></table>
  </div>`);
}

function Tree({ node, current, titles }) {
  return html`<ul class="tree"><li>
    <a class=${node.id === current ? "current" : ""} href=${`#/s/${encodeURIComponent(node.id)}`}>${titles[node.id] || node.id}</a>${node.at != null ? html` <span class="dim">(from message ${node.at})</span>` : ""}
    ${node.children.map((c) => html`<${Tree} node=${c} current=${current} titles=${titles} />`)}
  </li></ul>`;
}

function DbosPanel({ onError }) {
  const [waiting, setWaiting] = useState([]);
  const load = useCallback(() => getJSON("/api/dbos").then(setWaiting, onError), [onError]);
  useEffect(() => {
    load();
  }, [load]);
  const decide = async (wid, callId, decision) => {
    try {
      await postJSON(`/api/dbos/${encodeURIComponent(wid)}/approve`, { decisions: { [callId]: decision } });
      await load();
    } catch (e) {
      onError(e);
    }
  };
  return html`<div><h3>Runs waiting on DBOS</h3>${waiting.length === 0 && html`<p class="dim">none</p>`}
    ${waiting.map((w) => w.calls.map((c) => html`<${Approval} item=${{ ...c, agent: w.workflowId }} onDecide=${(_, d) => decide(w.workflowId, c.id, d)} />`))}
    <button class="secondary" onClick=${load}>Refresh</button></div>`;
}

// --- the app --------------------------------------------------------------------------------------------------

function App() {
  const [info, setInfo] = useState(null);
  const [sessions, setSessions] = useState([]);
  const [query, setQuery] = useState("");
  const [sid, setSid] = useState(currentSession());
  const fresh = useRef(null); // the id of a chat started here and not stored yet
  const [detail, setDetail] = useState(null);
  const [live, setLive] = useState(null);
  const [pendingPrompt, setPendingPrompt] = useState(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const [tab, setTab] = useState("runs");
  const [prompt, setPrompt] = useState("");
  const [images, setImages] = useState([]);
  const endRef = useRef(null);
  const onError = useCallback((e) => setError(String(e.message || e)), []);

  const loadSessions = useCallback(
    (q = query) => getJSON(`/api/sessions${q ? `?q=${encodeURIComponent(q)}` : ""}`).then(setSessions, onError),
    [query, onError],
  );
  const loadDetail = useCallback(
    (id) => (id ? getJSON(`/api/sessions/${encodeURIComponent(id)}`).then(setDetail, () => setDetail(null)) : setDetail(null)),
    [],
  );

  useEffect(() => {
    getJSON("/api/info").then(setInfo, onError);
    loadSessions("");
    const onHash = () => setSid(currentSession());
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);
  useEffect(() => {
    if (sid && sid === fresh.current) return;
    setLive(null);
    setPendingPrompt(null);
    loadDetail(sid);
  }, [sid]);
  useEffect(() => {
    const t = setTimeout(() => loadSessions(query), 200);
    return () => clearTimeout(t);
  }, [query]);
  useEffect(() => {
    endRef.current?.scrollIntoView({ block: "end" });
  }, [live, detail]);

  const stream = async (id, request) => {
    setBusy(true);
    setError(null);
    const state = newLive();
    setLive({ ...state });
    try {
      const response = await request();
      await readStream(response, (chunk) => {
        applyChunk(state, chunk);
        setLive({ ...state, parts: [...state.parts], external: { ...state.external } });
      });
    } catch (e) {
      onError(e);
    } finally {
      state.status = "done";
      setBusy(false);
      await loadDetail(id);
      fresh.current = null;
      setLive(null);
      setPendingPrompt(null);
      loadSessions();
    }
  };

  const send = async () => {
    const text = prompt.trim();
    if ((!text && !images.length) || busy) return;
    let id = sid;
    if (!id) {
      id = newId();
      fresh.current = id;
      history.replaceState(null, "", `#/s/${encodeURIComponent(id)}`);
      setSid(id);
    }
    const parts = [];
    if (text) parts.push({ type: "text", text });
    for (const img of images) parts.push({ type: "file", mediaType: img.mediaType, url: img.url });
    setPrompt("");
    setImages([]);
    setPendingPrompt({ text, images });
    const body = { id, messages: [{ id: `u-${Date.now()}`, role: "user", parts }], trigger: "submit-message" };
    await stream(id, () => postJSON("/api/chat", body));
  };

  const decide = async (callId, decision) => {
    if (!sid) return;
    // The head the decision was made at: the server refuses it once the session moved on (call ids can repeat).
    const body = { decisions: { [callId]: decision }, head: detail ? detail.head : undefined };
    await stream(sid, () => postJSON(`/api/sessions/${encodeURIComponent(sid)}/approve`, body));
  };

  const fork = async (node) => {
    try {
      const r = await (await postJSON(`/api/sessions/${encodeURIComponent(sid)}/fork`, { at: node ?? null })).json();
      location.hash = `#/s/${encodeURIComponent(r.id)}`;
      loadSessions();
    } catch (e) {
      onError(e);
    }
  };

  const attach = (e) => {
    for (const file of e.target.files) {
      const reader = new FileReader();
      reader.onload = () => setImages((list) => [...list, { mediaType: file.type, url: reader.result, name: file.name }]);
      reader.readAsDataURL(file);
    }
    e.target.value = "";
  };

  const durations = useMemo(() => {
    const out = {};
    for (const r of detail?.runs ?? []) for (const t of r.turns) for (const x of t.tools) out[x.id] = x.duration;
    return out;
  }, [detail]);
  const titles = useMemo(() => Object.fromEntries(sessions.map((s) => [s.id, s.title || s.id])), [sessions]);

  return html`<div class="layout">
    <aside class="sidebar">
      <div class="brand">loopctl <span class="dim">web</span></div>
      <button class="new-chat" onClick=${() => (location.hash = "")}>New chat</button>
      <input class="search" type="search" placeholder="Search sessions" value=${query} onInput=${(e) => setQuery(e.target.value)} />
      <ul class="sessions">
        ${sessions.map((s) => html`<li class=${s.id === sid ? "current" : ""} data-session=${s.id}>
          <a href=${`#/s/${encodeURIComponent(s.id)}`}>
            <div class="s-title">${s.title || "(no prompt)"}</div>
            <div class="s-meta dim">${s.id} · ${s.length} msgs · <span class=${`outcome o-${s.outcome}`}>${s.outcome}</span>${s.forkOf ? " · fork" : ""}</div>
          </a></li>`)}
      </ul>
      ${info && html`<div class="info dim">${info.model} · ${info.root}<br />store ${info.store}</div>`}
    </aside>
    <main class="chat">
      <header class="chat-head">
        <div class="chat-title">${sid ? (titles[sid] || sid) : "New chat"}</div>
        ${detail && html`<div class="chat-actions">
          <span class=${`outcome o-${detail.outcome}`}>${detail.outcome}</span>
          <button class="secondary" onClick=${() => fork(null)}>Fork</button>
          <button class="secondary" onClick=${() => download(`/api/sessions/${encodeURIComponent(sid)}/export`, `${sid}.loopctl-session.json`).catch(onError)}>Export</button>
        </div>`}
      </header>
      ${error && html`<div class="problem banner" role="alert">${error}<button class="link" onClick=${() => setError(null)}>dismiss</button></div>`}
      <div class="messages">
        ${!sid && !live && html`<div class="empty dim">Ask the agent something. It works in ${info ? info.root : "its root folder"}; file changes wait for your approval here.</div>`}
        ${detail && html`<${StoredMessages} messages=${detail.messages} durations=${durations} onFork=${fork} external=${live ? live.external : {}} diffs=${detail.diffs || {}} />`}
        ${pendingPrompt && html`<div class="msg msg-user"><div class="msg-meta"><span>user</span></div><div class="user-text">${pendingPrompt.text}</div></div>`}
        ${live && html`<${LiveMessage} live=${live} />`}
        ${!live && detail && detail.pending.length > 0 && html`<div class="approvals"><h3>Waiting for your decision</h3>
          ${detail.pending.map((p) => html`<${Approval} item=${p} busy=${busy} onDecide=${decide} />`)}</div>`}
        <div ref=${endRef}></div>
      </div>
      <form class="composer" onSubmit=${(e) => {
        e.preventDefault();
        send();
      }}>
        ${images.length > 0 && html`<div class="attached">${images.map((i) => html`<span class="chip">${i.name}</span>`)}</div>`}
        <textarea name="prompt" rows="3" placeholder="Message the agent (Enter sends, Shift+Enter for a new line)" value=${prompt} disabled=${busy}
          onInput=${(e) => setPrompt(e.target.value)}
          onKeyDown=${(e) => {
            if (e.key === "Enter" && !e.shiftKey) {
              e.preventDefault();
              send();
            }
          }}></textarea>
        <div class="composer-buttons">
          <label class="secondary file-label">Image<input type="file" accept="image/*" multiple onChange=${attach} /></label>
          <button type="submit" class="send" disabled=${busy}>Send</button>
        </div>
      </form>
    </main>
    <aside class="panel">
      <nav class="tabs">
        ${["runs", "spans", "tree"].concat(info && info.dbos ? ["dbos"] : []).map((t) => html`<button class=${t === tab ? "tab current" : "tab"} onClick=${() => setTab(t)}>${t}</button>`)}
      </nav>
      <div class="panel-body">
        ${tab === "runs" && html`<${Runs} runs=${detail?.runs ?? []} />`}
        ${tab === "spans" && html`<${Waterfall} traces=${detail?.traces ?? []} />`}
        ${tab === "tree" && (detail ? html`<${Tree} node=${detail.tree} current=${sid} titles=${titles} />` : html`<p class="dim">No session.</p>`)}
        ${tab === "dbos" && html`<${DbosPanel} onError=${onError} />`}
      </div>
    </aside>
  </div>`;
}

render(html`<${App} />`, document.getElementById("app"));
