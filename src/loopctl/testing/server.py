"""A fake provider server: real HTTP and SSE on 127.0.0.1, speaking four providers' wire formats.

Tests (and ``loopctl run --model demo``) start it in-process and point a real client at it::

    with FakeProviderServer([Message.assistant("hi"), ErrorReply.rate_limited(retry_after=0.1)]) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test")
        ...
        assert server.requests[0].body["model"] == "gpt-4o"

Endpoints: ``POST /v1/chat/completions`` (OpenAI Chat Completions), ``POST /v1/responses`` (OpenAI
Responses), ``POST /v1/messages`` (Anthropic Messages), ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse`` (Gemini; without ``alt=sse`` the stream is a JSON array, as Gemini does).
Any path prefix is accepted before these (an OpenAI-compatible base URL such as ``/openai/v1``).

Every request takes the next step of the script, whatever the endpoint (see :data:`Step`). Every request is
recorded in :attr:`FakeProviderServer.requests`. Replies are encoded by :mod:`loopctl.testing.wire`. With
``local=LocalServer(...)`` the server plays llama.cpp, vLLM or Ollama (:mod:`loopctl.testing.wire.local`).

Built on the standard library's ``ThreadingHTTPServer`` (no dependency, starts in milliseconds): HTTP/1.1
with keep-alive, ``Content-Length`` for JSON bodies and chunked transfer for event streams, so a cut stream
is a connection closed before the final zero-length chunk, as a dropped connection looks to a client.
"""

from __future__ import annotations

import base64
import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeAlias, Union, runtime_checkable
from urllib.parse import parse_qsl, unquote, urlsplit

from loopctl._frozen import dataclass
from loopctl.errors import LoopError
from loopctl.message import Message, Role
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing.scripted import Delay, ScriptExhausted
from loopctl.testing.wire import (
    API,
    Encoded,
    ErrorReply,
    ReplyContext,
    encode_error,
    encode_reply,
    stream_error_frame,
)
from loopctl.testing.wire.local import LocalServer

__all__ = [
    "CutStream",
    "FakeProviderServer",
    "FakeServerError",
    "RecordedRequest",
    "Replay",
    "Responder",
    "Step",
    "StreamError",
]


class _Closing(Exception):
    """The server is shutting down while a step waits; the connection is dropped, nothing is recorded."""


class FakeServerError(LoopError):
    """A script step failed inside the fake server (a callable raised, a step had the wrong type, or the
    script ran out). Raised when the server's ``with`` block ends; the original error is the ``__cause__``."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received.

    ``path`` has no query string (``query`` holds it, first value per name); ``headers`` have lower-case
    names, and a name sent more than once has its values joined by ``", "`` in the order sent (RFC 9110,
    section 5.3), so a header sent twice shows; ``body`` is the parsed JSON (``None`` when the body is not
    JSON); ``api`` is the wire format the path selected (``None`` for an unknown path); ``model`` comes from
    the body or, for Gemini, the path; ``stream`` tells whether a streamed reply was asked for.
    """

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any
    raw: bytes
    api: API | None
    model: str | None
    stream: bool
    websocket: bool = False
    """True for a ``response.create`` message of the Responses API's WebSocket mode (``method`` is ``"WS"``)."""


def _header_map(lines: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A request's header lines as one value per lower-cased name, repeated names' values joined by ``", "``."""
    headers: dict[str, str] = {}
    for name, value in lines:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


@runtime_checkable
class Responder(Protocol):
    """A script step that sees the whole :class:`RecordedRequest` (a plain callable sees only the body)."""

    def respond(self, request: RecordedRequest) -> Any:
        """Return the step to answer ``request`` with."""
        ...


@dataclass(frozen=True, slots=True)
class CutStream:
    """Answer with ``reply`` but stop after ``after_events`` SSE events (a JSON body: after half its bytes).

    ``partial=True`` also sends the first half of the next event, so the client holds an incomplete event.
    ``clean=False`` (the default) drops the connection without ending the chunked body, as a network failure
    does (``httpx2.RemoteProtocolError`` in the client); ``clean=True`` ends the body properly, so the client
    sees a well-formed HTTP reply whose event stream lacks its final events.
    """

    reply: Any
    after_events: int = 2
    partial: bool = False
    clean: bool = False


@dataclass(frozen=True, slots=True)
class StreamError:
    """Answer with ``reply`` streamed, but after ``after_events`` events send ``error`` as the provider's
    mid-stream error frame (Anthropic ``event: error``, Responses ``event: error``, a ``data:`` error object
    for Chat and Gemini) and end the stream. A non-streamed request gets ``error`` as an HTTP error."""

    reply: Any
    error: ErrorReply = field(default_factory=ErrorReply.overloaded)
    after_events: int = 2


@dataclass(frozen=True, slots=True)
class Replay:
    """Serve a recorded response verbatim: ``base`` is a recording's path without its suffix (for example
    ``tests/fixtures/provider-traffic/anthropic/text-stream``). The body is ``<base>.response.sse``,
    ``.response.json`` or ``.response.chunks.jsonl`` (framed as Gemini ``data:`` lines); the status and
    content type come from ``<base>.meta.json``. A streamed body is sent one SSE event per chunk."""

    base: str | Path

    def load(self) -> Encoded:
        """Read the recording; raises ``FileNotFoundError`` when it has no response file."""
        base = Path(self.base)
        meta_path = base.with_name(base.name + ".meta.json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        status = meta.get("status")
        status = status if isinstance(status, int) else 200
        sse, js, lines = (
            base.with_name(base.name + s) for s in (".response.sse", ".response.json", ".response.chunks.jsonl")
        )
        if sse.exists():
            body, stream = sse.read_bytes(), True
        elif lines.exists():
            rows = [line for line in lines.read_text().splitlines() if line.strip()]
            body, stream = b"".join(b"data: " + r.encode() + b"\r\n\r\n" for r in rows), True
        elif js.exists():
            body, stream = js.read_bytes(), False
        else:
            raise FileNotFoundError(f"{base}: no .response.sse, .response.json or .response.chunks.jsonl")
        content_type = meta.get("response_content_type") or ("text/event-stream" if stream else "application/json")
        pieces = _split_events(body) if stream else (body,)
        return Encoded(status, content_type, pieces, stream)


def _split_events(body: bytes) -> tuple[bytes, ...]:
    """Cut an SSE body after each blank line (LF LF, CRLF CRLF or CR CR), keeping every byte."""
    pieces: list[bytes] = []
    start = i = 0
    while i < len(body):
        for sep in (b"\r\n\r\n", b"\n\n", b"\r\r"):
            if body.startswith(sep, i):
                i += len(sep)
                pieces.append(body[start:i])
                start = i
                break
        else:
            i += 1
    if start < len(body):
        pieces.append(body[start:])
    return tuple(pieces)


Step: TypeAlias = Union[
    Message, ModelResponse, str, ErrorReply, CutStream, StreamError, Replay, Delay, Responder, Callable[..., Any]
]
"""One scripted reply: an assistant ``Message`` (stop reason ``tool_call`` when it has tool calls, else
``end_turn``; usage estimated from the sizes, 4 bytes a token), a full ``ModelResponse``, plain text, an
:class:`~loopctl.testing.wire.ErrorReply`, a :class:`CutStream`, a :class:`StreamError`, a :class:`Replay`,
a :class:`~loopctl.testing.Delay` (wait, then answer with its ``then``), a :class:`Responder`, or a callable
taking the parsed request body (a dict) and returning any of these."""


_ROUTES: tuple[tuple[str, API], ...] = (
    ("/chat/completions", "openai-chat"),
    ("/responses", "openai-responses"),
    ("/messages", "anthropic"),
)


def _route(path: str) -> tuple[API | None, str | None, bool | None]:
    """``(api, model from the path, stream from the path)`` for a request path."""
    for suffix, api in _ROUTES:
        if path.endswith(suffix):
            return api, None, None
    head, _, method = path.rpartition(":")
    if "/models/" in head and method in ("generateContent", "streamGenerateContent"):
        return "gemini", unquote(head.rsplit("/models/", 1)[1]), method == "streamGenerateContent"
    return None, None, None


@dataclass(slots=True)
class _Outgoing:
    encoded: Encoded
    keep: int | None = None  # pieces to send before a cut (None: all)
    partial: bool = False
    clean: bool = True
    trailer: bytes = b""  # a mid-stream error frame sent after the kept pieces


class FakeProviderServer:
    """The fake provider server; use it as a context manager (or :meth:`start` / :meth:`close`).

    ``script`` is a list of :data:`Step` used in order (more can be :meth:`add`-ed later), or one callable
    or :class:`Responder` used for every request. ``port=0`` picks a free port. ``event_delay`` (seconds)
    pauses between streamed events (to watch a stream, or to cancel mid-stream); ``chunk_size`` (bytes)
    re-cuts a streamed body into fixed-size writes that split events and UTF-8 characters. When the ``with``
    block ends, a failed step (see :class:`FakeServerError`) is raised unless ``raise_failures=False``.

    ``local`` makes the server play a local model server (:class:`~loopctl.testing.wire.local.LocalServer`:
    llama.cpp, vLLM or Ollama): it answers that server's own endpoints (``/props``, ``/v1/models``,
    ``/api/ps``, ``/api/show``) and refuses a request too big for its context with that server's own error
    body, without taking a step of the script.
    ``host`` is the address to listen on (loopback by default); ``default_model`` is the model named in replies
    when the request names none.
    """

    def __init__(
        self,
        script: Iterable[Step] | Callable[..., Any] | Responder = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        event_delay: float = 0.0,
        chunk_size: int | None = None,
        default_model: str = "fake-model",
        raise_failures: bool = True,
        local: LocalServer | None = None,
    ) -> None:
        self._fn: Any = script if callable(script) or isinstance(script, Responder) else None
        self._steps: list[Any] = [] if self._fn is not None else list(script)  # type: ignore[arg-type]
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._address = (host, port)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.event_delay = event_delay
        self.chunk_size = chunk_size
        self.default_model = default_model
        self.raise_failures = raise_failures
        self.local = local
        self.requests: list[RecordedRequest] = []
        """Every request received, in order."""
        self.failures: list[BaseException] = []
        """Errors raised while answering (each also answered with an HTTP 500 or 400)."""
        self.stored_responses: set[str] = set()
        """The Responses ids the server holds (each reply of a request without ``store: false``); a request
        whose ``previous_response_id`` is not here is answered 400 ``previous_response_not_found``, as the API
        does for an expired or unknown one. Clear it to expire them."""
        self.websocket_connections = 0
        """How many WebSocket connections were opened (the Responses API's WebSocket mode)."""
        self.conversations: dict[str, list[Any]] = {}
        """Conversations made with ``POST …/conversations`` (id -> the input items sent to it)."""
        self.compactions: dict[str, list[Any]] = {}
        """Compactions made by ``POST …/responses/compact`` (the compaction item's id -> the input items it
        stands for). Such requests take no script step: the reply is the input's user messages, then one
        ``compaction`` item, as OpenAI's endpoint answers."""
        self.cached_contents: dict[str, Any] = {}
        """Gemini cached contents made with ``POST …/cachedContents`` (name -> the request body); a
        ``generateContent`` naming one that is not here is answered 404, as an expired cache is. Such requests
        take no script step."""

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> FakeProviderServer:
        """Bind and serve in a background thread; returns ``self``."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer(self._address, _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-provider-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, drop open connections and wait for the handler threads. Safe to call twice."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stop.set()
        httpd.shutdown()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        if exc_type is None and self.raise_failures and self.failures:
            first = self.failures[0]
            raise FakeServerError(f"the fake server failed to answer a request: {first!r}") from first

    # --- addresses -------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (raises ``RuntimeError`` before :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError("the fake server is not running; use it in a `with` block or call start()")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the base URL for the anthropic and google-genai SDKs."""
        return f"http://{self._address[0]}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``<base_url>/v1``: the base URL for the openai SDK (which appends ``/chat/completions``)."""
        return f"{self.base_url}/v1"

    # --- script ----------------------------------------------------------------------------------------

    def add(self, *steps: Step) -> None:
        """Append steps to the script."""
        with self._lock:
            self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        """Scripted steps not used yet (0 for a callable script)."""
        with self._lock:
            return len(self._steps) - self._next

    def _take(self, request: RecordedRequest) -> Any:
        with self._lock:
            if self._fn is not None:
                return self._fn
            if self._next >= len(self._steps):
                n = len(self._steps)
                raise ScriptExhausted(f"the script has {n} replies; request {len(self.requests)} has none")
            step = self._steps[self._next]
            self._next += 1
            return step

    def _answer(self, request: RecordedRequest) -> _Outgoing | None:
        """The reply to ``request``: record it, run the script, encode, and note any failure. ``None``: the
        server is closing, drop the connection."""
        with self._lock:
            self.requests.append(request)
            token = f"fake{len(self.requests):06d}"
        state = self._provider_state(request, token)
        if state is not None:
            return state
        api = request.api
        local = self.local
        if local is not None:
            found = local.info(request.method, request.path, request.body)
            if found is not None:
                return _json_reply(*found)
        if api is None:
            body = {"error": {"message": f"fake server: no endpoint at {request.path}", "type": "not_found"}}
            return _Outgoing(Encoded(404, "application/json", (json.dumps(body).encode(),)))
        if request.body is None or not isinstance(request.body, dict):
            error = ErrorReply(status=400, message="fake server: the request body is not a JSON object")
            return _Outgoing(encode_error(api, error, stream=request.stream))
        if local is not None:
            refused = local.refusal(max(1, len(request.raw) // 4), _max_tokens(request.body))
            if refused is not None:  # the server refuses it before the model runs: no step is taken
                return _json_reply(*refused)
        try:
            out = self._resolve(self._take(request), request, api, token)
            if api == "openai-responses" and out.encoded.status < 400 and request.body.get("store") is not False:
                with self._lock:
                    self.stored_responses.add(f"resp_{token}")
            return out
        except _Closing:
            return None
        except Exception as exc:  # a script bug: answer, and raise it in the test at the end
            with self._lock:
                self.failures.append(exc)
            exhausted = isinstance(exc, ScriptExhausted)
            error = ErrorReply(status=400 if exhausted else 500, message=f"fake server: {exc}")
            return _Outgoing(encode_error(api, error, stream=request.stream))

    def _compact(self, body: dict[str, Any], token: str, size: int) -> _Outgoing:
        """``POST /v1/responses/compact``: the user messages of ``input``, then one opaque ``compaction``
        item (openai-python ``CompactedResponse``; developers.openai.com/api/docs/guides/compaction)."""
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
        kept: list[Any] = []
        for item in items:
            if not isinstance(item, dict) or item.get("role") != "user" or item.get("type", "message") != "message":
                continue
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": "input_text", "text": content}]
            kept.append({"type": "message", "role": "user", "content": content})
        item_id = f"cmp_{token}"
        sealed = base64.b64encode(json.dumps({"items": len(items)}).encode()).decode()
        compaction = {"type": "compaction", "id": item_id, "encrypted_content": f"gAAAA{sealed}"}
        with self._lock:
            self.compactions[item_id] = items
        reply = {
            "id": f"resp_{token}",
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*kept, compaction],
            "usage": {
                "input_tokens": max(1, size // 4),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 64,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": max(1, size // 4) + 64,
            },
        }
        return _Outgoing(Encoded(200, "application/json", (json.dumps(reply).encode(),)))

    def _provider_state(self, request: RecordedRequest, token: str) -> _Outgoing | None:
        """The endpoints that keep provider-side state rather than take a script step: Gemini's
        ``cachedContents`` (and a ``generateContent`` naming a cache it does not have: 404); OpenAI's
        ``conversations``, and a Responses request continuing a response or a conversation the server does not
        hold (``previous_response_not_found``, 400 as the API answers; a conversation: 404)."""
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "POST" and request.path.endswith("/responses/compact"):
            return self._compact(body, token, len(request.raw))
        if request.method == "POST" and request.path.endswith("/conversations"):
            made = f"conv_{token}"
            with self._lock:
                self.conversations[made] = list(body.get("items") or [])
            reply = {"id": made, "object": "conversation", "created_at": int(time.time()), "metadata": {}}
            return _Outgoing(Encoded(200, "application/json", (json.dumps(reply).encode(),)))
        if request.api == "openai-responses":
            previous = body.get("previous_response_id")
            conversation = body.get("conversation")
            with self._lock:
                lost_previous = (
                    isinstance(previous, str) and previous not in self.stored_responses and not request.websocket
                )
                lost_conversation = isinstance(conversation, str) and conversation not in self.conversations
                if isinstance(conversation, str) and not lost_conversation:
                    self.conversations[conversation].extend(body.get("input") or [])
            if lost_previous:
                error = ErrorReply(
                    status=400,
                    message=f"Previous response with id '{previous}' not found.",
                    error_type="invalid_request_error",
                    code="previous_response_not_found",
                )
                return _Outgoing(encode_error("openai-responses", error, stream=request.stream))
            if lost_conversation:
                error = ErrorReply(status=404, message=f"Conversation with id '{conversation}' not found.")
                return _Outgoing(encode_error("openai-responses", error, stream=request.stream))
        if request.method == "POST" and request.path.endswith("/cachedContents"):
            name = f"cachedContents/{token}"
            with self._lock:
                self.cached_contents[name] = body
            reply = {
                "name": name,
                "model": body.get("model"),
                "usageMetadata": {"totalTokenCount": len(request.raw) // 4},
            }
            return _Outgoing(Encoded(200, "application/json", (json.dumps(reply).encode(),)))
        cached = body.get("cachedContent")
        if request.api == "gemini" and isinstance(cached, str):
            with self._lock:
                known = cached in self.cached_contents
            if not known:
                error = ErrorReply(status=404, message=f"CachedContent not found (or permission denied): {cached}")
                return _Outgoing(encode_error("gemini", error, stream=request.stream))
        return None

    def _resolve(self, step: Any, request: RecordedRequest, api: API, token: str) -> _Outgoing:
        while True:
            if isinstance(step, Delay):
                if self._stop.wait(step.seconds):
                    raise _Closing
                step = step.then
            elif isinstance(step, Responder):
                step = step.respond(request)
            elif callable(step) and not isinstance(step, (Message, ModelResponse)):
                step = step(request.body)
            else:
                break
        if isinstance(step, CutStream):
            out = self._resolve(step.reply, request, api, token)
            n = len(out.encoded.pieces)
            keep = min(step.after_events, n - 1) if out.encoded.stream else 0
            return _Outgoing(
                out.encoded, keep=max(0, keep), partial=step.partial or not out.encoded.stream, clean=step.clean
            )
        if isinstance(step, StreamError):
            if not request.stream:
                return _Outgoing(encode_error(api, step.error, model=request.model or ""))
            out = self._resolve(step.reply, request, api, token)
            keep = min(step.after_events, len(out.encoded.pieces))
            frame = stream_error_frame(api, step.error, sequence_number=keep, model=request.model or "")
            return _Outgoing(out.encoded, keep=keep, trailer=frame)
        if isinstance(step, ErrorReply):
            return _Outgoing(encode_error(api, step, stream=request.stream, model=request.model or ""))
        if isinstance(step, Replay):
            return _Outgoing(step.load())
        response = self._as_response(step, request)
        ctx = ReplyContext(
            model=request.model or self.default_model,
            token=token,
            created=int(time.time()),
            request=request.body,
        )
        return _Outgoing(encode_reply(api, response, ctx, stream=request.stream))

    @staticmethod
    def _as_response(step: Any, request: RecordedRequest) -> ModelResponse:
        if isinstance(step, ModelResponse):
            return step
        if isinstance(step, str):
            step = Message.assistant(step)
        if not isinstance(step, Message) or step.role is not Role.ASSISTANT:
            raise TypeError(f"a scripted reply must be an assistant Message or another Step, got {step!r}")
        stop = StopReason.TOOL_CALL if step.tool_calls() else StopReason.END_TURN
        usage = Usage(input_tokens=max(1, len(request.raw) // 4), output_tokens=max(1, len(step.to_json()) // 4))
        return ModelResponse(message=step, usage=usage, stop_reason=stop)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads: a clean shutdown
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog: many clients connecting at once (the default 5 refused some)
    owner: FakeProviderServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked transfer for streams
    timeout = 60  # seconds a connection may sit idle
    server: _HTTPServer
    server_version = "loopctl-fake-provider/1"

    def setup(self) -> None:
        super().setup()
        # Headers and body (and each event) are separate small writes; without this, Nagle's algorithm and
        # the client's delayed ACK hold every reply back for ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.owner._lock:
            self.server.owner._conns.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.owner._lock:
                self.server.owner._conns.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        """Silent: tests read :attr:`FakeProviderServer.requests` instead."""

    def do_GET(self) -> None:
        if self.headers.get("upgrade", "").lower() == "websocket":
            self._websocket()
            return
        self._handle()

    # --- the Responses API's WebSocket mode ------------------------------------------------------------------

    def _websocket(self) -> None:
        """Speak the Responses WebSocket mode on this connection (platform.openai.com/docs/guides/websocket-mode):
        each ``response.create`` text message takes the next script step, and the reply's stream events go back
        one JSON text message each; an error reply is an ``error`` event (``{"type": "error", "status", "error"}``).
        The connection holds the responses it made in memory (``previous_response_id`` works here even with
        ``store: false``, as the API's does); an unknown one is the ``previous_response_not_found`` error event.
        A :class:`CutStream` closes the TCP connection after its events, as a dropped network does. Built on
        the ``websockets`` library's sans-I/O protocol, over the socket this handler already holds."""
        from websockets.http11 import Request
        from websockets.server import ServerProtocol

        owner = self.server.owner
        protocol = ServerProtocol(max_size=None)
        # The protocol parses the upgrade request itself: hand it the request line and headers already read.
        head = f"GET {self.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in self.headers.items()) + "\r\n"
        protocol.receive_data(head.encode("latin-1"))
        parsed = [e for e in protocol.events_received() if isinstance(e, Request)]
        if not parsed:
            return
        handshake = protocol.accept(parsed[0])
        protocol.send_response(handshake)
        self._ws_flush(protocol)
        self.close_connection = True
        if handshake.status_code != 101:
            return
        with owner._lock:
            owner.websocket_connections += 1
        held: set[str] = set()  # the responses this connection holds
        url = urlsplit(self.path)
        # A reader thread answers pings (the protocol does) and queues the client's messages, so keep-alive
        # works while a turn is being answered, as on the real API; this thread answers the messages in order.
        self._ws_lock = threading.Lock()
        inbox: queue.Queue[bytes | None] = queue.Queue()
        reader = threading.Thread(target=self._ws_read, args=(protocol, inbox), name="fake-ws-reader", daemon=True)
        reader.start()
        try:
            while True:
                raw = inbox.get()
                if raw is None or not self._ws_turn(protocol, raw, held, url):
                    return
        finally:
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            reader.join(timeout=5)

    def _ws_read(self, protocol: Any, inbox: queue.Queue[bytes | None]) -> None:
        from websockets.frames import Frame, Opcode
        from websockets.protocol import State

        try:
            while protocol.state is not State.CLOSED:
                try:
                    data = self.rfile.read1(65536)
                except (OSError, ValueError):
                    return
                with self._ws_lock:
                    if not data:
                        protocol.receive_eof()
                    else:
                        protocol.receive_data(data)
                    for frame in protocol.events_received():
                        if isinstance(frame, Frame) and frame.opcode is Opcode.TEXT:
                            inbox.put(bytes(frame.data))
                    self._ws_flush(protocol)
                if not data:
                    return
        finally:
            inbox.put(None)

    def _ws_turn(self, protocol: Any, raw: bytes, held: set[str], url: Any) -> bool:
        """Answer one client message; ``False`` when the connection was dropped."""
        owner = self.server.owner
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("type") != "response.create":
            self._ws_error(protocol, 400, "invalid_request_error", "expected a response.create message", None)
            return True
        body = {k: v for k, v in message.items() if k != "type"}
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and previous not in held:
            with owner._lock:
                known = previous in owner.stored_responses
            if not known:
                with owner._lock:
                    owner.requests.append(self._ws_request(body, raw, url))
                self._ws_error(
                    protocol,
                    400,
                    "invalid_request_error",
                    f"Previous response with id '{previous}' not found.",
                    "previous_response_not_found",
                )
                return True
        out = owner._answer(self._ws_request({**body, "stream": True}, raw, url))
        if out is None:
            self._drop()
            return False
        enc = out.encoded
        if not enc.stream:  # an error reply (or a JSON body): one error event
            try:
                error = json.loads(enc.body).get("error") or {}
            except (ValueError, AttributeError):
                error = {}
            self._ws_send(protocol, json.dumps({"type": "error", "status": enc.status, "error": error}))
            return True
        pieces = list(enc.pieces if out.keep is None else enc.pieces[: out.keep])
        if out.trailer:
            pieces.append(out.trailer)
        for n, piece in enumerate(pieces):
            if n and owner.event_delay and owner._stop.wait(owner.event_delay):
                self._drop()
                return False
            for line in piece.decode().splitlines():
                if line.startswith("data:"):
                    data = line[5:].strip()
                    if data and data != "[DONE]":
                        event = json.loads(data)
                        response = event.get("response") if isinstance(event, dict) else None
                        if isinstance(response, dict) and isinstance(response.get("id"), str):
                            held.add(response["id"])
                        if isinstance(event, dict) and event.get("type") == "error" and "error" not in event:
                            # The HTTP stream's error event carries its fields flat; the WebSocket one nests them.
                            inner = {k: v for k, v in event.items() if k not in ("type", "sequence_number")}
                            data = json.dumps({"type": "error", "status": 500, "error": inner})
                        self._ws_send(protocol, data)
        if out.keep is not None and not out.trailer:
            self._drop()  # a cut: the connection goes away mid-reply
            return False
        return True

    def _ws_request(self, body: dict[str, Any], raw: bytes, url: Any) -> RecordedRequest:
        return RecordedRequest(
            method="WS",
            path=url.path,
            query=dict(parse_qsl(url.query)),
            headers=_header_map(self.headers.items()),
            body=body,
            raw=raw,
            api="openai-responses",
            model=body.get("model") if isinstance(body.get("model"), str) else None,
            stream=True,
            websocket=True,
        )

    def _ws_error(self, protocol: Any, status: int, kind: str, message: str, code: str | None) -> None:
        error = {"type": kind, "code": code, "message": message, "param": "previous_response_id" if code else None}
        self._ws_send(protocol, json.dumps({"type": "error", "status": status, "error": error}))

    def _ws_send(self, protocol: Any, text: str) -> None:
        with self._ws_lock:
            protocol.send_text(text.encode())
            self._ws_flush(protocol)

    def _ws_flush(self, protocol: Any) -> None:
        for chunk in protocol.data_to_send():
            if chunk:
                self.wfile.write(chunk)
            else:  # the protocol asks for the TCP connection to be closed
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_WR)

    def do_POST(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _handle(self) -> None:
        owner = self.server.owner
        url = urlsplit(self.path)
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        query = dict(parse_qsl(url.query))
        api, path_model, path_stream = _route(url.path) if self.command == "POST" else (None, None, None)
        if api == "gemini":
            stream = bool(path_stream)
            model = path_model
        else:
            stream = isinstance(body, dict) and body.get("stream") is True
            model = body.get("model") if isinstance(body, dict) and isinstance(body.get("model"), str) else None
        request = RecordedRequest(
            method=self.command,
            path=url.path,
            query=query,
            headers=_header_map(self.headers.items()),
            body=body,
            raw=raw,
            api=api,
            model=model,
            stream=stream,
        )
        out = owner._answer(request)
        if out is None:
            self.close_connection = True
            return
        if api == "gemini" and stream and out.encoded.stream and query.get("alt") != "sse":
            out = _as_json_array(out)
        try:
            self._send(out)
        except OSError:
            self.close_connection = True  # the client went away, or the server is closing

    def _send(self, out: _Outgoing) -> None:
        owner = self.server.owner
        enc = out.encoded
        self.send_response(enc.status)
        self.send_header("content-type", enc.content_type)
        self.send_header("x-request-id", "req_fake")  # OpenAI's name
        self.send_header("request-id", "req_fake")  # Anthropic's
        for name, value in enc.headers:
            self.send_header(name, value)
        if not enc.stream:
            body = enc.body
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if out.keep is None:
                self.wfile.write(body)
            else:  # a cut JSON body: half of it, then the connection drops
                self.wfile.write(body[: len(body) // 2])
                self._drop()
            return
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        pieces = list(enc.pieces if out.keep is None else enc.pieces[: out.keep])
        if out.keep is not None and out.partial and out.keep < len(enc.pieces):
            nxt = enc.pieces[out.keep]
            pieces.append(nxt[: max(1, len(nxt) // 2)])
        if out.trailer:
            pieces.append(out.trailer)
        if owner.chunk_size:
            joined = b"".join(pieces)
            pieces = [joined[i : i + owner.chunk_size] for i in range(0, len(joined), owner.chunk_size)]
        for n, piece in enumerate(pieces):
            if n and owner.event_delay and owner._stop.wait(owner.event_delay):
                self._drop()
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        if out.keep is not None and not out.clean and not out.trailer:
            self._drop()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the connection mid-reply, as a network failure does."""
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _json_reply(status: int, body: Any) -> _Outgoing:
    return _Outgoing(Encoded(status, "application/json; charset=utf-8", (json.dumps(body).encode(),)))


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    """The output token limit a request asks for (Chat ``max_completion_tokens`` or ``max_tokens``, Anthropic
    ``max_tokens``), or ``None``."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _as_json_array(out: _Outgoing) -> _Outgoing:
    """A Gemini stream asked for without ``alt=sse``: the chunks as one JSON array (Gemini's default)."""
    chunks = []
    for piece in out.encoded.pieces:
        text = piece.decode()
        if text.startswith("data: "):
            chunks.append(json.loads(text[len("data: ") :]))
    body = json.dumps(chunks, indent=2).encode()
    return _Outgoing(Encoded(out.encoded.status, "application/json; charset=UTF-8", (body,)))
