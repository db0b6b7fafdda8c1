"""The app behind ``loopctl web``: a local chat with an agent and a browser of the session store.

:func:`create_app` makes the Starlette app; ``loopctl web`` (:mod:`loopctl.cli.web`) builds the agent (the
same model, file tools, store and MCP options as ``loopctl run``) and serves it with uvicorn. The page
(``loopctl/ui/static``, built from ``web/`` in the repository) is a client of this JSON and SSE API:

======================================  =====================================================================
``GET  /api/info``                      the model, the root folder, the store, whether writes are asked for
``GET  /api/sessions?q=``               the sessions, newest first (``q``: a search of ids, models and text)
``GET  /api/sessions/{id}``             a session: its messages (with node ids), its pending approvals (a
                                        file change with its diff), its fork tree, its runs' turns (usage,
                                        cost, latency) and spans
``POST /api/chat``                      a prompt, as the AI SDK's chat request (``{"id", "messages"}``): the
                                        run as a UI message stream (:mod:`loopctl.ui.ai_sdk`), plus
                                        ``data-loopctl-*`` parts for the page
``POST /api/sessions/{id}/approve``     decisions on a paused run (``{"decisions": {id: {"decision":
                                        "approve" | "deny" | "modify", "reason", "input"}}, "head"}``; ``head``:
                                        the session's head the decisions were made at, refused with 409 when
                                        it moved on, as call ids can repeat): the continued
                                        run, streamed as ``/api/chat`` streams it. A run paused in another
                                        process (stored in the same store) is continued here.
``POST /api/sessions/{id}/fork``        ``{"at": <node id> | null}``: a new session sharing the messages
``GET  /api/sessions/{id}/export``      the session file (``docs/wire-format.md``)
``GET  /api/dbos``, ``POST .../approve`` runs waiting on DBOS (``--dbos``), and decisions sent to them
======================================  =====================================================================

Safe by default (``docs/web.md``, "Security"): every request's ``Host`` must name the address served (a DNS
rebinding attack's page has another host name); every state-changing request (POST) must carry the page's
token in ``X-Loopctl-Token`` (a page of another site cannot read it, and cannot send the header without a
CORS preflight this app never answers) and, when the browser sends ``Origin``, come from this origin; with a
non-loopback bind, every API request needs ``Authorization: Bearer <access token>``. Every response has a
Content-Security-Policy without inline script or style, and nothing model- or tool-written is HTML: the page
renders text as text and Markdown through a sanitizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from loopctl._lazy import LazyModule
from loopctl.engine.events import LoopEvent, RunFinished, ToolCallStarted, TurnFinished
from loopctl.message import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from loopctl.ui._common import (
    MAX_BODY_BYTES,
    BadRequest,
    BodyTooLarge,
    BodyTooSlow,
    RunRequest,
    data_url,
    decision_from_payload,
    read_body,
    tool_output_text,
)
from loopctl.ui._spans import WEB_SESSION, SpanCollector
from loopctl.ui.ai_sdk import UI_MESSAGE_STREAM_HEADERS, UIMessageStream, read_chat_request, stream_run

if TYPE_CHECKING:
    import loopctl.agent
    import loopctl.engine
    import loopctl.store
    import loopctl.tools.files
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = ["CSP", "FORK_KEY", "STATIC_DIR", "WebSettings", "create_app", "loopback_hosts"]

STATIC_DIR = Path(__file__).parent / "static"
"""The built page (``web/`` in the repository, built by ``python3 make.py web``; shipped in the wheel)."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of every response: the page's own scripts and styles only (no inline script,
no ``eval``, nothing from another origin), images from the page or ``data:`` URLs, requests to this origin."""

FORK_KEY = "loopctl.fork"
"""The session metadata key of a fork made by the page: ``{"session": <forked session>, "node": <node id>,
"index": <the index of the last message kept>}``."""

_TOKEN_META = b'<meta name="loopctl-token" content="">'
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def loopback_hosts(port: int) -> set[str]:
    """The ``Host`` values a browser sends for this machine's loopback addresses on ``port``."""
    return {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}


@dataclass
class WebSettings:
    """What the app serves and how: ``allowed_hosts`` (exact ``Host`` header values; ``None``: any, for a
    non-loopback bind, which the access token guards instead), ``access_token`` (for a non-loopback bind:
    required on every API request), ``session_defaults`` (the model, root and system
    prompt a new session records, as ``loopctl run`` does), ``files`` (the file tools, for change previews),
    ``config`` (the runs' :class:`~loopctl.engine.RunConfig`), ``spans`` (the span collector of the agent's
    telemetry), ``dbos`` (a ``DBOSClient`` for runs waiting on DBOS), ``max_body_bytes`` (the largest request
    body the API reads; a larger one is answered ``413``)."""

    allowed_hosts: set[str] | None
    access_token: str | None = None
    session_defaults: Mapping[str, Any] = field(default_factory=dict)
    files: loopctl.tools.files.FileTools | None = None
    config: loopctl.engine.RunConfig | None = None
    spans: SpanCollector | None = None
    dbos: Any = None
    asks_writes: bool = True
    csrf_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    info: Mapping[str, Any] = field(default_factory=dict)
    max_body_bytes: int = MAX_BODY_BYTES


class _Guard:
    """The security checks of every request (the module docstring), as ASGI middleware."""

    def __init__(self, app: Any, settings: WebSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = self._problem(scope, headers)
        if problem is not None:
            status, text = problem
            await _send_plain(send, status, text)
            return

        async def secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                    (b"cross-origin-opener-policy", b"same-origin"),
                    (b"cross-origin-resource-policy", b"same-origin"),
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, secured)

    def _problem(self, scope: Any, headers: Mapping[str, str]) -> tuple[int, str] | None:
        s = self.settings
        host = headers.get("host", "")
        if s.allowed_hosts is not None and host not in s.allowed_hosts:
            return 421, f"Host {host!r} is not served here (loopctl web answers only {sorted(s.allowed_hosts)})"
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        if s.access_token is not None and path.startswith("/api/"):
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {s.access_token}".encode()):
                return 401, "this server needs its access token (Authorization: Bearer ...)"
        if method in _WRITE_METHODS:
            origin = headers.get("origin")
            served = s.allowed_hosts if s.allowed_hosts is not None else {host}
            if origin is not None and origin.removeprefix("http://").removeprefix("https://") not in served:
                return 403, f"cross-origin request refused (Origin {origin!r})"
            if headers.get("sec-fetch-site") == "cross-site":
                return 403, "cross-site request refused"
            token = headers.get("x-loopctl-token", "")
            if not hmac.compare_digest(token.encode(), s.csrf_token.encode()):
                return 403, "missing or wrong X-Loopctl-Token (the page's token): request refused"
        return None


async def _send_plain(send: Any, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"content-security-policy", CSP.encode()),
                (b"x-content-type-options", b"nosniff"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# --- the JSON forms the page reads -------------------------------------------------------------------------


def message_json(index: int, node: str | None, message: Message) -> dict[str, Any]:
    """A stored message for the page: its parts as JSON (text stays text: the page never reads it as HTML)."""
    parts: list[dict[str, Any]] = []
    for p in message.parts:
        if isinstance(p, TextPart):
            parts.append({"type": "text", "text": p.text})
        elif isinstance(p, ThinkingPart):
            if p.text:
                parts.append({"type": "reasoning", "text": p.text})
        elif isinstance(p, ToolCallPart):
            parts.append({"type": "tool-call", "id": p.id, "name": p.name, "input": p.input})
        elif isinstance(p, ToolResultPart):
            parts.append(
                {
                    "type": "tool-result",
                    "callId": p.call_id,
                    "name": p.name,
                    "output": tool_output_text(p),
                    "isError": bool(p.is_error),
                    "images": [data_url(i) for i in p.output.images()],
                }
            )
        elif isinstance(p, ImagePart):
            parts.append({"type": "image", "url": data_url(p)})
    return {"index": index, "node": node, "role": message.role.value, "parts": parts}


def _title(messages: Sequence[Message]) -> str:
    for m in messages:
        if m.role.value == "user":
            text = m.text_content().strip()
            if text:
                return text[:120]
    return ""


def _safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:100] or "session"


MAX_SESSIONS = 256
"""The sessions whose runs and diffs the server keeps in memory for the page (the least recently used are
forgotten: their conversations stay in the store; only the per-run figures and diff previews go)."""
MAX_RUNS = 100
"""The runs (turns, usage, cost, latency) kept per session for the page: the latest."""
MAX_DIFFS = 500
"""The file-change diffs kept per session for the page: the latest."""

_T = TypeVar("_T")


def _touch(table: dict[str, _T], sid: str, new: Callable[[], _T]) -> _T:
    """``table[sid]`` (made with ``new`` when missing), moved to the end as the most recently used; the
    oldest entries past :data:`MAX_SESSIONS` are dropped."""
    value = table.pop(sid) if sid in table else new()
    table[sid] = value
    while len(table) > MAX_SESSIONS:
        del table[next(iter(table))]
    return value


# --- the app -----------------------------------------------------------------------------------------------


class _Web:
    def __init__(
        self, agent: loopctl.agent.Agent[Any, Any], store: loopctl.store.SessionStore, settings: WebSettings
    ) -> None:
        self.agent = agent
        self.store = store
        self.s = settings
        self.runs: dict[str, list[dict[str, Any]]] = {}  # per session: each run's turns, tools and outcome
        self.diffs: dict[str, dict[str, dict[str, Any]]] = {}  # per session: each file change's diff, by call id
        self._index: bytes | None = None

    # --- pages -------------------------------------------------------------------------------------------

    async def index(self, request: Any) -> Any:
        from starlette.responses import Response

        if self._index is None:
            path = STATIC_DIR / "index.html"
            if not path.exists():
                return Response(
                    "the page is not built: run python3 make.py web in the repository",
                    status_code=500,
                    media_type="text/plain",
                )
            self._index = path.read_bytes()
        meta = f'<meta name="loopctl-token" content="{self.s.csrf_token}">'.encode()
        body = self._index.replace(_TOKEN_META, meta)
        return Response(body, media_type="text/html; charset=utf-8", headers={"cache-control": "no-store"})

    async def info(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({**self.s.info, "asksWrites": self.s.asks_writes, "dbos": self.s.dbos is not None})

    # --- sessions ----------------------------------------------------------------------------------------

    async def sessions(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        q = (request.query_params.get("q") or "").strip().lower()
        rows = await self.store.asessions()
        out = []
        for info in rows[:500]:
            try:
                loaded = await self.store.aload(info.id)
            except Exception:  # a corrupt session is listed, not fatal to the list
                loaded = None
            messages = loaded.messages if loaded is not None else ()
            state = info.state
            if q:
                hay = [info.id.lower(), (state.model or "").lower() if state else ""]
                hay += [m.text_content().lower() for m in messages]
                if not any(q in h for h in hay):
                    continue
            meta = dict(state.metadata) if state is not None else {}
            out.append(
                {
                    "id": info.id,
                    "length": info.length,
                    "outcome": state.outcome if state is not None else "unreadable",
                    "model": state.model if state is not None else None,
                    "title": _title(messages),
                    "createdAt": info.created_at,
                    "updatedAt": info.updated_at,
                    "forkOf": meta.get(FORK_KEY),
                    "parent": meta.get("loopctl.parent"),
                }
            )
        return JSONResponse(out)

    async def session_route(self, request: Any) -> Any:
        """``/api/sessions/{id}[/fork|/approve|/export]``, read from the raw path: a session id may hold ``/``
        (the page sends it as one encoded segment), so ``ab%2Fexport`` is session ``ab/export``, not the export
        of ``ab``. An id sent with bare slashes is read as before (the last segment names the action)."""
        from urllib.parse import unquote

        from starlette.responses import PlainTextResponse

        raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
        rest = raw.decode("latin-1").split("?", 1)[0].removeprefix("/api/sessions/")
        segments = rest.split("/")
        action = segments[-1] if len(segments) > 1 and segments[-1] in ("fork", "approve", "export") else ""
        verb = "GET" if request.method == "HEAD" else request.method
        if action in ("fork", "approve") and verb == "GET":
            action = ""  # a GET of ``x/fork`` reads the session of that id (forks and decisions are POSTs)
        if action:
            segments = segments[:-1]
        request.scope["path_params"] = {"sid": unquote("/".join(segments))}
        handler, method = {
            "": (self.session, "GET"),
            "export": (self.export, "GET"),
            "fork": (self.fork, "POST"),
            "approve": (self.approve, "POST"),
        }[action]
        if verb != method:  # a fork or a decision is never reached by a method the guard does not check
            return PlainTextResponse("Method Not Allowed", status_code=405, headers={"allow": method})
        return await handler(request)

    async def session(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        from loopctl.errors import SessionNotFound

        sid = request.path_params["sid"]
        try:
            loaded = await self.store.aload(sid)
        except (SessionNotFound, ValueError):
            return JSONResponse({"error": f"no session {sid!r}"}, status_code=404)
        st = loaded.state
        pending = await self._pending(sid) if st.outcome == "awaiting_approval" else []
        return JSONResponse(
            {
                "id": loaded.id,
                "head": loaded.head,
                "outcome": st.outcome,
                "model": st.model,
                "root": st.root,
                "metadata": json_metadata(st.metadata),
                "messages": [
                    message_json(i, n, m) for i, (n, m) in enumerate(zip(loaded.node_ids, loaded.messages, strict=True))
                ],
                "pending": pending,
                "tree": await self._tree(sid),
                "runs": self.runs.get(sid, []),
                "diffs": self.diffs.get(sid, {}),
                "traces": self.s.spans.traces(sid) if self.s.spans is not None else [],
            }
        )

    async def _pending(self, sid: str) -> list[dict[str, Any]]:
        conv = self.agent.session(sid, store=self.store)
        out = []
        for p in await conv.pending_approvals():
            item: dict[str, Any] = {"id": p.id, "name": p.name, "input": p.input, "reason": p.reason, "agent": p.agent}
            if self.s.files is not None:
                preview = self.s.files.preview(p.name, p.input)
                if preview is not None:
                    item["preview"] = {
                        "path": preview.path,
                        "action": preview.action,
                        "diff": preview.diff,
                        "problem": preview.problem,
                    }
            out.append(item)
        return out

    async def _tree(self, sid: str) -> dict[str, Any]:
        """The fork tree ``sid`` is in: from its root, each session with its forks (``{"id", "title", "at",
        "children"}``; ``at``: the index of the last message a fork kept)."""
        rows = await self.store.asessions()
        parent: dict[str, str] = {}
        at: dict[str, int | None] = {}
        for r in rows:
            link = r.state.metadata.get(FORK_KEY) if r.state is not None else None
            if isinstance(link, dict) and isinstance(link.get("session"), str):
                parent[r.id] = link["session"]
                at[r.id] = link.get("index")
        root = sid
        seen = {root}
        while root in parent and parent[root] not in seen:
            root = parent[root]
            seen.add(root)
        children: dict[str, list[str]] = {}
        for child, p in parent.items():
            children.setdefault(p, []).append(child)

        def node(s: str, depth: int) -> dict[str, Any]:
            kids = sorted(children.get(s, [])) if depth < 50 else []
            return {"id": s, "at": at.get(s), "children": [node(k, depth + 1) for k in kids]}

        return node(root, 0)

    async def fork(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        from loopctl.errors import SessionNotFound

        sid = request.path_params["sid"]
        body = await _json(request, self.s.max_body_bytes)
        node = body.get("at") if isinstance(body, dict) else None
        if node is not None and not isinstance(node, str):
            return JSONResponse({"error": '"at" must be a node id or null'}, status_code=400)
        try:
            loaded = await self.store.aload(sid)
            target = node or loaded.head
            if target is not None and target not in loaded.node_ids:
                return JSONResponse({"error": f"node {target!r} is not in session {sid!r}"}, status_code=400)
            info = await self.store.afork(sid, at=node)
        except (SessionNotFound, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        index = loaded.node_ids.index(target) if target is not None else None
        assert info.state is not None
        metadata = {**info.state.metadata, FORK_KEY: {"session": sid, "node": target, "index": index}}
        await asyncio.to_thread(
            self.store.append,
            info.id,
            [],
            expected_head=info.head,
            state=info.state.with_settings(metadata=metadata),
            expected_revision=info.revision,
        )
        return JSONResponse({"id": info.id, "length": info.length})

    async def export(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, Response

        from loopctl.errors import SessionNotFound

        sid = request.path_params["sid"]
        try:
            loaded = await self.store.aload(sid)
        except (SessionNotFound, ValueError):
            return JSONResponse({"error": f"no session {sid!r}"}, status_code=404)
        data = loaded.to_session().to_bytes()
        name = _safe_filename(sid)
        return Response(
            data,
            media_type="application/json",
            headers={"content-disposition": f'attachment; filename="{name}.loopctl-session.json"'},
        )

    # --- runs --------------------------------------------------------------------------------------------

    async def chat(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        # too large, not JSON: answered by the app's handlers (413, 400)
        body = await _json(request, self.s.max_body_bytes)
        try:
            chat_id, wanted = read_chat_request(body)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            await self._ensure_session(chat_id)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return await self._stream(chat_id, wanted)

    async def approve(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        sid = request.path_params["sid"]
        body = await _json(request, self.s.max_body_bytes)
        decisions = body.get("decisions") if isinstance(body, dict) else None
        if not isinstance(decisions, dict) or not decisions:
            return JSONResponse({"error": '"decisions" must be an object of call id: decision'}, status_code=400)
        try:
            approvals = {str(k): decision_from_payload(v, f"decisions[{k!r}]") for k, v in decisions.items()}
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        head = body.get("head")
        if head is not None:
            if not isinstance(head, str):
                return JSONResponse({"error": '"head" must be the node id the decisions were made at'}, status_code=400)
            # Call ids can repeat: a decision made on what the page read of one wait answers that wait only.
            from loopctl.errors import SessionNotFound

            try:
                current = (await self.store.ainfo(sid)).head
            except (SessionNotFound, ValueError):
                return JSONResponse({"error": f"no session {sid!r}"}, status_code=404)
            if current != head:
                return JSONResponse(
                    {"error": f"session {sid!r} moved on since these decisions were made (at {head!r}, now at "
                     f"{current!r}): reload it and decide what it waits for now"},
                    status_code=409,
                )  # fmt: skip
        message_id = body.get("messageId") if isinstance(body.get("messageId"), str) else None
        return await self._stream(sid, RunRequest(None, approvals, message_id=message_id))

    async def _ensure_session(self, sid: str) -> None:
        from loopctl.errors import SessionExists, SessionNotFound
        from loopctl.store import SessionState

        try:
            await self.store.ainfo(sid)
        except SessionNotFound:
            d = self.s.session_defaults
            state = SessionState.at_rest(0).with_settings(
                model=d.get("model"),
                root=d.get("root"),
                system_prompt=d.get("system_prompt"),
                metadata=d.get("metadata"),
            )
            with contextlib.suppress(SessionExists):  # created meanwhile by another request
                await self.store.acreate(sid, state=state)

    async def _stream(self, sid: str, wanted: RunRequest) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        from loopctl.errors import SessionBusy

        conv = self.agent.session(sid, store=self.store)
        encoder = UIMessageStream(wanted.message_id)
        token = WEB_SESSION.set(sid)
        try:
            events = stream_run(conv, wanted, None, self.s.config, encoder, observe=self._observer(sid))
            try:
                first = await anext(events)
            except SessionBusy as exc:
                return JSONResponse({"error": str(exc)}, status_code=409)
            except BadRequest as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
        finally:
            WEB_SESSION.reset(token)

        async def body() -> Any:
            try:
                yield first
                async for chunk in events:
                    yield chunk
            finally:
                await events.aclose()  # type: ignore[attr-defined]

        return StreamingResponse(body(), headers=UI_MESSAGE_STREAM_HEADERS)

    def _observer(self, sid: str) -> Callable[[LoopEvent], list[dict[str, Any]]]:
        """The page's extra parts per event: a file change's diff when its call starts, the run's turns (usage,
        cost, latency) when it ends."""
        files = self.s.files

        def observe(event: LoopEvent) -> list[dict[str, Any]]:
            if isinstance(event, ToolCallStarted) and files is not None:
                preview = files.preview(event.call.name, event.input)
                if preview is not None and preview.diff:
                    data = {
                        "toolCallId": event.call.id,
                        "path": preview.path,
                        "action": preview.action,
                        "diff": preview.diff,
                    }
                    diffs = _touch(self.diffs, sid, dict)
                    diffs[event.call.id] = data
                    while len(diffs) > MAX_DIFFS:
                        del diffs[next(iter(diffs))]
                    return [{"type": "data-loopctl-diff", "id": f"diff-{event.call.id}", "data": data}]
            if isinstance(event, TurnFinished):
                return []
            if isinstance(event, RunFinished):
                run = event.run
                record = {
                    "outcome": run.outcome.kind.value,
                    "error": run.outcome.error,
                    "duration": round(run.duration, 4),
                    "cost": None if run.cost is None else str(run.cost),
                    "usage": {"input": run.usage.input_tokens, "output": run.usage.output_tokens},
                    "turns": [
                        {
                            "turn": t.index,
                            "model": t.model,
                            "duration": round(t.duration, 4),
                            "cost": None if t.cost is None else str(t.cost),
                            "input": t.usage.input_tokens,
                            "output": t.usage.output_tokens,
                            "cached": t.usage.cache_read_tokens,
                            "tools": [
                                {
                                    "id": r.call.id,
                                    "name": r.call.name,
                                    "duration": round(r.duration, 4),
                                    "error": bool(r.result.is_error),
                                }
                                for r in t.tool_calls
                            ],
                        }
                        for t in run.turns
                    ],
                }
                runs = _touch(self.runs, sid, list)
                runs.append(record)
                del runs[:-MAX_RUNS]
                return [{"type": "data-loopctl-run", "data": record, "transient": True}]
            return []

        return observe

    # --- DBOS --------------------------------------------------------------------------------------------

    async def dbos_pending(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        client = self.s.dbos
        if client is None:
            return JSONResponse([])
        return JSONResponse(await asyncio.to_thread(dbos_waiting, client))

    async def dbos_approve(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        client = self.s.dbos
        if client is None:
            return JSONResponse({"error": "no DBOS system database (start loopctl web with --dbos)"}, status_code=404)
        wid = request.path_params["wid"]
        body = await _json(request, self.s.max_body_bytes)
        decisions = body.get("decisions") if isinstance(body, dict) else None
        if not isinstance(decisions, dict) or not decisions:
            return JSONResponse({"error": '"decisions" must be an object of call id: decision'}, status_code=400)
        try:
            sent = await asyncio.to_thread(dbos_send, client, wid, decisions)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"sent": sent})


def json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Session metadata as JSON the page can read (values JSON cannot hold are written as text)."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(dict(metadata), default=str))
    return out


def dbos_waiting(client: Any) -> list[dict[str, Any]]:
    """The DBOS runs of loopctl (``DBOSLoop``) waiting for approvals now, each with the calls it awaits and their
    binding keys (``loopctl.durable.dbos.PENDING_EVENT``)."""
    from loopctl.durable._payloads import loads
    from loopctl.durable.approvals import awaited_from_dict

    pending_event = "loopctl.pending"
    out = []
    for status in client.list_workflows(status=["PENDING", "ENQUEUED"], load_input=False, load_output=False):
        text = client.get_event(status.workflow_id, pending_event, timeout_seconds=0)
        if not isinstance(text, str):
            continue
        calls = [awaited_from_dict(p) for p in loads(text)]
        if not calls:
            continue
        out.append(
            {
                "workflowId": status.workflow_id,
                "name": status.name,
                "calls": [
                    {"id": c.call.id, "name": c.name, "input": c.input, "reason": c.reason, "key": c.key.to_dict()}
                    for c in calls
                ],
            }
        )
    return out


def dbos_send(client: Any, workflow_id: str, decisions: Mapping[str, Any]) -> list[str]:
    """Send ``decisions`` (call id: decision JSON) to the DBOS run ``workflow_id``, each bound to the wait the run
    lists now (``docs/durable.md``, "Approval binding"). Raises :class:`BadRequest` for a call it does not
    await."""
    from loopctl.durable._payloads import dumps, loads
    from loopctl.durable.approvals import awaited_from_dict, bound_to_dict

    text = client.get_event(workflow_id, "loopctl.pending", timeout_seconds=0)
    awaited = {c.call.id: c for c in (awaited_from_dict(p) for p in loads(text))} if isinstance(text, str) else {}
    bound = {}
    for call_id, payload in decisions.items():
        waiting = awaited.get(call_id)
        if waiting is None:
            raise BadRequest(f"the run {workflow_id!r} does not await call {call_id!r}")
        bound[waiting.key] = decision_from_payload(payload, f"decisions[{call_id!r}]")
    client.send(workflow_id, dumps({"approvals": bound_to_dict(bound)}), "loopctl.approvals")
    return sorted(decisions)


async def _json(request: Any, limit: int) -> Any:
    body = await read_body(request, limit)  # BodyTooLarge: 413
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadRequest("the body is not JSON") from None


def create_app(agent: loopctl.agent.Agent[Any, Any], store: loopctl.store.SessionStore, settings: WebSettings) -> Any:
    """The ``loopctl web`` app: ``agent``'s chat over ``store``, with the API of the module docstring and the
    built page, behind the security checks; ``settings`` (:class:`WebSettings`) say what it serves and to
    whom."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    web = _Web(agent, store, settings)

    async def bad_request(request: Request, exc: Exception) -> Any:
        status = 413 if isinstance(exc, BodyTooLarge) else 408 if isinstance(exc, BodyTooSlow) else 400
        return JSONResponse({"error": str(exc)}, status_code=status)

    routes: list[Any] = [
        Route("/", web.index),
        Route("/api/info", web.info),
        Route("/api/sessions", web.sessions),
        Route("/api/sessions/{rest:path}", web.session_route, methods=["GET", "POST"]),
        Route("/api/chat", web.chat, methods=["POST"]),
        Route("/api/dbos", web.dbos_pending),
        Route("/api/dbos/{wid:path}/approve", web.dbos_approve, methods=["POST"]),
    ]
    assets = STATIC_DIR / "assets"
    if assets.is_dir():
        routes.append(Mount("/assets", StaticFiles(directory=assets), name="assets"))
    app = Starlette(routes=routes, exception_handlers={BadRequest: bad_request})
    app.state.web = web
    return _Guard(app, settings)
