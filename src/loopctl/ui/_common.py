"""What both protocol apps share: the conversation behind a thread (or chat) id, the run's events read as
parts of one reply, the SSE framing, and the conversions between loopctl messages and the protocols' JSON.

Nothing here imports Starlette at module level: :mod:`loopctl.ui` is loaded only by code that serves a page.
"""

from __future__ import annotations

import base64
import binascii
import collections
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from loopctl.engine.permission import Approval, Approve, Deny, Modify
from loopctl.errors import LoopError
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from loopctl.server_limits import BODY_TIMEOUT, BodyRefused, read_bounded

if TYPE_CHECKING:
    from loopctl.agent import Agent, Conversation
    from loopctl.store import SessionStore

__all__ = [
    "MAX_BODY_BYTES",
    "BadRequest",
    "BodyTooLarge",
    "BodyTooSlow",
    "Conversations",
    "PostApp",
    "RunRequest",
    "decision_from_payload",
    "image_from_data_url",
    "json_safe",
    "sse",
    "require_web_extra",
    "tool_output_text",
]

SSE_HEADERS = {
    "cache-control": "no-cache, no-transform",
    "x-accel-buffering": "no",  # proxies (nginx) pass each event on at once
}

_DATA_URL = re.compile(
    r"^data:(?P<media>[\w.+-]+/[\w.+-]+)(?P<params>(;[\w.+-]+=[\w.+-]+)*);base64,(?P<data>.*)$", re.S
)


def require_web_extra(what: str, *modules: str) -> None:
    """Raise ``ImportError`` naming the ``[web]`` extra when one of ``modules`` (``"starlette"``, ``"ag_ui"``)
    is not installed: at the app's making, not at its first request. ``what`` names the app in the message."""
    import importlib

    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            missing.append(module)
    if missing:
        raise ImportError(
            f"{what} needs the [web] extra: pip install 'pyloopctl[web]' (not installed: {', '.join(missing)})"
        )


class BadRequest(LoopError):
    """A request body a protocol app cannot run: ``problem`` says what is wrong and where (answered with
    HTTP 400 and that text, before anything runs)."""


def sse(payload: Any) -> bytes:
    """One Server-Sent Event carrying ``payload`` as JSON (``data: {...}`` and a blank line; the WHATWG
    ``text/event-stream`` format). A ``str`` payload is sent as it is (the AI SDK's ``[DONE]``)."""
    if isinstance(payload, str):
        return b"data: " + payload.encode() + b"\n\n"
    return b"data: " + orjson.dumps(payload, default=_default) + b"\n\n"


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (pydantic models dumped, dataclasses and other objects as text), for a
    run's typed output in a protocol's result field."""
    try:
        return orjson.loads(orjson.dumps(value, default=_default))
    except TypeError:
        return str(value)


def tool_output_text(result: ToolResultPart) -> str:
    """A tool result's text (its text parts joined; an image is counted, not inlined)."""
    parts = result.output.parts
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    images = sum(1 for p in parts if isinstance(p, ImagePart))
    if images:
        texts.append(f"[{images} image{'s' if images > 1 else ''}]")
    return "\n".join(texts)


def data_url(part: ImagePart) -> str:
    """An image part as a ``data:`` URL."""
    return f"data:{part.source.media_type};base64,{part.source.data}"


def image_from_data_url(url: str, where: str) -> ImagePart:
    """An image part from a ``data:<type>;base64,...`` URL. A URL of any other scheme is refused with
    :class:`BadRequest` naming ``where``: the server fetches nothing a page names."""
    found = _DATA_URL.match(url)
    if found is None:
        raise BadRequest(f"{where}: only data: URLs with base64 content are accepted (got {url[:40]!r})")
    data = found["data"].strip()
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: the data: URL's content is not base64") from None
    return ImagePart(source=ImageSource.new_base64(found["media"], data))


def decision_from_payload(payload: Any, where: str) -> Approval:
    """A decision from its JSON form: ``{"approved": true}`` (or ``{"decision": "approve"}``),
    ``{"approved": false, "reason": "..."}`` (``"deny"``), ``{"input": {...}}`` (``"modify"``: run it with
    that input). Raises :class:`BadRequest` naming ``where`` for another shape."""
    if not isinstance(payload, Mapping):
        raise BadRequest(f"{where}: a decision is a JSON object, got {type(payload).__name__}")
    kind = payload.get("decision")
    if kind is None:
        if "input" in payload:
            kind = "modify"
        elif payload.get("approved") is True:
            kind = "approve"
        elif payload.get("approved") is False:
            kind = "deny"
    reason = payload.get("reason")
    if kind == "approve":
        return Approve()
    if kind == "deny":
        if reason is not None and not isinstance(reason, str):
            raise BadRequest(f"{where}: reason must be a string")
        return Deny(reason or "")
    if kind == "modify":
        return Modify(payload.get("input"))
    raise BadRequest(
        f'{where}: expected {{"approved": true}}, {{"approved": false, "reason": ...}} or {{"input": ...}}, '
        f"got {orjson.dumps(payload, default=str).decode()[:200]}"
    )


MAX_BODY_BYTES = 32 * 1024 * 1024
"""The largest request body the apps read by default (32 MiB: a prompt with a few large images, base64-encoded);
a larger one is refused with ``413`` before it is read whole (``max_body_bytes=`` of the apps changes it)."""


class BodyTooLarge(BadRequest):
    """A request body over the app's limit (answered with HTTP 413, before the rest of it is read)."""


class BodyTooSlow(BadRequest):
    """A request body that came too slowly (answered with HTTP 408): ``body_timeout`` seconds, plus one per
    :data:`~loopctl.server_limits.BODY_MIN_RATE` bytes received, passed before its end."""


def check_body_limits(what: str, max_body_bytes: Any, body_timeout: Any) -> None:
    """Raise ``ValueError``, naming ``what`` (the app) and the option, unless ``max_body_bytes`` is a whole number
    of bytes above 0 and ``body_timeout`` a number of seconds above 0 (a limit of 0 would refuse every body)."""
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise ValueError(f"{what}: max_body_bytes must be a whole number of bytes above 0, not {max_body_bytes!r}")
    if isinstance(body_timeout, bool) or not isinstance(body_timeout, int | float) or not body_timeout > 0:
        raise ValueError(f"{what}: body_timeout must be a number of seconds above 0, not {body_timeout!r}")


async def read_body(request: Any, limit: int, timeout: float = BODY_TIMEOUT) -> bytes:
    """The body of the Starlette ``request``, read up to ``limit`` bytes, within ``timeout`` seconds plus one
    per :data:`~loopctl.server_limits.BODY_MIN_RATE` bytes received (``docs/web.md``, "Server limits"). Raises
    :class:`BodyTooLarge` when its ``Content-Length`` says more (nothing is read) or when it grows past
    ``limit`` (the rest is not read), :class:`BodyTooSlow` when it is late (a client sending a byte at a time)."""
    try:
        return await read_bounded(
            request.stream(), limit=limit, timeout=timeout, length=request.headers.get("content-length"), who="this app"
        )
    except BodyRefused as refused:
        raise (BodyTooLarge if refused.status == 413 else BodyTooSlow)(str(refused)) from None


# --- the conversation behind an id ---------------------------------------------------------------------


class PostApp:
    """The ASGI entry the protocol apps share: a POST goes to :meth:`handle` (at whatever path the app is
    mounted or routed at), any other method is answered 405, and a lifespan (the app served alone) has
    nothing to start or stop."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """The ASGI entry: a POST runs (at whatever path the app is mounted or routed at); any other method is
        answered 405."""
        from starlette.requests import Request
        from starlette.responses import PlainTextResponse

        if scope["type"] == "lifespan":  # served alone: nothing to start or stop
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if request.method != "POST":
            response: Any = PlainTextResponse("POST a run request here", status_code=405, headers={"allow": "POST"})
        else:
            response = await self.handle(request)
        await response(scope, receive, send)

    async def handle(self, request: Any) -> Any:
        """Answer one POST (a Starlette ``Request``) with a Starlette response."""
        raise NotImplementedError


class Conversations:
    """The conversations of a protocol app: the sessions of ``store`` by id, or, without a store, the last
    ``keep`` conversations held in memory (the least recently used is dropped first)."""

    def __init__(self, agent: Agent[Any, Any], store: SessionStore | None, keep: int = 1000) -> None:
        from loopctl.store.base import check_store

        check_store(store)  # to_ai_sdk(store="chats.db") is refused when made, not at its first request
        self.agent = agent
        self.store = store
        self.keep = keep
        self._memory: collections.OrderedDict[str, Conversation[Any, Any]] = collections.OrderedDict()

    async def get(
        self,
        thread_id: str,
        seed: Callable[[], Sequence[Message]] | None = None,
        agent: Agent[Any, Any] | None = None,
    ) -> Conversation[Any, Any]:
        """The conversation ``thread_id``; a new one starts from ``seed()`` (the messages a client sent
        before its new one) when it has any. ``agent`` runs it instead of the app's agent (the app's agent
        with the front end's tools added, for this request)."""
        from loopctl.agent import Conversation
        from loopctl.errors import SessionNotFound

        agent = agent or self.agent

        if self.store is not None:
            try:
                await self.store.ainfo(thread_id)
            except SessionNotFound:
                history = list(seed()) if seed is not None else []
                if history:
                    from loopctl.engine import LoopMachine
                    from loopctl.session import Session

                    self.store.import_session(Session(LoopMachine(history)), session_id=thread_id)
            except ValueError as exc:  # an id the store cannot hold
                raise BadRequest(str(exc)) from None
            return agent.session(thread_id, store=self.store)
        conv = self._memory.get(thread_id)
        if conv is None:
            history = list(seed()) if seed is not None else []
            try:
                conv = Conversation(agent, thread_id, history=history or None)
            except ValueError as exc:  # a history the loop cannot continue (a call with no result)
                raise BadRequest(f"the messages before the new one: {exc}") from None
            self._memory[thread_id] = conv
            while len(self._memory) > self.keep:
                self._memory.popitem(last=False)
        else:
            self._memory.move_to_end(thread_id)
            if conv.root is not agent:  # this request's tools: the same conversation, run by this agent
                from loopctl.agent._conversation import _BUSY
                from loopctl.errors import SessionBusy

                if (id(conv),) in _BUSY:
                    raise SessionBusy(f"conversation {thread_id!r} is running a run already", session_id=thread_id)
                moved: Conversation[Any, Any] = Conversation(agent, thread_id)
                moved._machine = conv._machine
                moved._children = conv._children
                if conv._current is not conv.root:  # handed off: it goes on with that agent
                    moved._current = conv._current
                self._memory[thread_id] = conv = moved
        return conv


@dataclass
class RunRequest:
    """What a protocol request asks for: a new ``prompt`` (``None`` when it continues a paused run), the
    ``approvals`` that continue it, and the messages before the prompt (``seed``: a conversation the server
    does not know yet starts from them)."""

    prompt: Message | None
    approvals: dict[str, Approval] = field(default_factory=dict)
    seed: list[Message] = field(default_factory=list)
    message_id: str | None = None
    """The id of the client's message the reply goes on (a continued run's assistant message)."""
    client_results: dict[str, str] = field(default_factory=dict)
    """Results the front end sent for calls of its own tools (AG-UI ``tool`` messages), by call id."""


# --- a reply's parts, as the run streams them ---------------------------------------------------------------


@dataclass
class OpenPart:
    """A part of the reply being streamed: its protocol id and kind (``text``, ``reasoning``, ``tool``)."""

    id: str
    kind: str
    tool_name: str = ""


@dataclass
class Attempt:
    """The parts one attempt of a model call streamed, by index (a retry starts a new attempt)."""

    number: int
    parts: dict[int, OpenPart] = field(default_factory=dict)
    open: set[int] = field(default_factory=set)
    args: set[int] = field(default_factory=set)  # tool calls whose argument fragments streamed


def whole_parts(message: Message) -> list[tuple[int, MessagePart]]:
    """The parts of a reply a client shows (text with text, thinking with text, tool calls), with their
    indices."""
    out: list[tuple[int, MessagePart]] = []
    for i, p in enumerate(message.parts):
        text = p.text if isinstance(p, (TextPart, ThinkingPart)) else ""
        if isinstance(p, ToolCallPart) or text:
            out.append((i, p))
    return out


def user_message(texts: Sequence[str], images: Sequence[ImagePart]) -> Message:
    """A user message of ``texts`` and ``images``; :class:`BadRequest` when it would be empty."""
    parts: list[MessagePart] = [TextPart(text=t) for t in texts if t]
    parts.extend(images)
    if not parts:
        raise BadRequest("the new user message holds no text and no image")
    return Message.new(Role.USER, parts)
