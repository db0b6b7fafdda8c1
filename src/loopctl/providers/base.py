"""What every provider module shares: the neutral request, the client protocol, and the stream-decoder base.

A provider module (``openai_chat``, ``openai_responses``, ``anthropic``, ``gemini``) is a pure codec:

- ``build_request(messages, *, model, system=None, tools=(), max_tokens=None, temperature=None, stop=None,
  tool_choice=None, reasoning_effort=None, stream=False, extra=None, ...) -> dict``: the JSON body;
- ``parse_response(body) -> ModelResponse`` for a non-streamed reply (an error body raises);
- ``StreamDecoder`` (``feed(chunk) -> list[StreamEvent]``, ``finish() -> ModelResponse``) and
  ``parse_stream(chunks) -> ModelResponse``;
- ``error_from_http(status, body, headers, *, now=None) -> ProviderError`` for a non-2xx reply (``now``, the
  caller's clock in Unix seconds, reads a ``Retry-After`` HTTP-date).

A client (the only place with I/O) turns a :class:`ModelRequest` into one of those bodies, sends it, and
decodes the reply. Pure module: no I/O, no clock.
"""

from __future__ import annotations

import operator
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import orjson

from loopctl._frozen import dataclass, hot
from loopctl.errors import ProviderError, ProviderProtocolError
from loopctl.message import Message
from loopctl.message.model import _dumps_bytes
from loopctl.providers.sse import ServerSentEvent, SSEDecoder
from loopctl.response import ModelResponse
from loopctl.stream import StreamAccumulator, StreamEvent, loads_exact
from loopctl.tool import ToolChoice, ToolSchema, check_tool_choice

__all__ = [
    "ConversionCache",
    "LaidOutPrefix",
    "RequestCache",
    "ITEMS_MARK",
    "encode_built",
    "held_messages",
    "write_items",
    "write_spliced",
    "EventCallback",
    "ModelClient",
    "ModelRequest",
    "OutputFormat",
    "ReasoningEffort",
    "SSEStreamDecoder",
    "malformed_reply",
]

ReasoningEffort: TypeAlias = Literal["minimal", "low", "medium", "high"]
"""How hard a reasoning model should think; each codec maps it to its provider's control."""

EventCallback: TypeAlias = Callable[[StreamEvent], None]
"""Called with each stream event as it is decoded."""


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """A JSON Schema the reply's text must follow: the provider's schema-constrained output
    (:class:`loopctl.output.NativeOutput`). ``schema`` is a JSON Schema object in full JSON Schema (each codec
    converts it to its provider's dialect); ``name`` and ``description`` name it where the API takes them
    (OpenAI); ``strict`` asks OpenAI for strict mode (its strict dialect: ``providers/_openai_strict.py``).
    What each codec sends: ``docs/output.md``. A codec whose API has no such output raises
    :class:`~loopctl.errors.UnsupportedContent` naming ``NativeOutput`` before sending."""

    name: str
    schema: Mapping[str, Any]
    description: str | None = None
    strict: bool = True


@dataclass(frozen=True, slots=True)
@hot  # made every turn: the cheaper __init__ (loopctl._frozen.hot)
class ModelRequest:
    """One model call, provider-neutral: the conversation, the system prompt, the tools and the generation
    settings. ``max_tokens`` is in tokens; ``temperature`` as the provider takes it; ``extra`` is merged into
    the provider's body last (anything the provider accepts that has no option here). ``output_format``
    constrains the reply's text to a schema (typed output in ``NativeOutput`` mode). ``native_tools`` are
    built-in tools the provider runs itself (:mod:`loopctl.providers.native`), refused by a codec whose
    provider has no such tool (:class:`~loopctl.errors.UnsupportedContent`). Raises ``ValueError`` for a
    ``tool_choice`` that is not a :data:`~loopctl.tool.ToolChoice`."""

    messages: Sequence[Message]
    system: str | None = None
    tools: Sequence[ToolSchema] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    stop: Sequence[str] | None = None
    tool_choice: ToolChoice | None = None
    reasoning_effort: ReasoningEffort | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    output_format: OutputFormat | None = None
    native_tools: Sequence[Any] = ()
    """Built-in tools the provider runs itself (:mod:`loopctl.providers.native`: ``WebSearch()``...)."""
    context_management: Any = None
    """A provider-side compaction strategy that rides on the request (:mod:`loopctl.compact.provider`:
    ``AnthropicCompaction()``...), refused by a codec whose provider it is not for."""

    def __post_init__(self) -> None:
        check_tool_choice(self.tool_choice)

    def options(self) -> dict[str, Any]:
        """The settings as the keyword arguments every codec's ``build_request`` takes (all but the
        messages); ``output_format`` only when set."""
        options: dict[str, Any] = {
            "system": self.system,
            "tools": self.tools,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stop": self.stop,
            "tool_choice": self.tool_choice,
            "reasoning_effort": self.reasoning_effort,
            "extra": self.extra,
        }
        if self.output_format is not None:
            options["output_format"] = self.output_format
        if self.native_tools:
            options["native_tools"] = self.native_tools
        if self.context_management is not None:
            options["context_management"] = self.context_management
        return options


@runtime_checkable
class ModelClient(Protocol):
    """Anything that answers a :class:`ModelRequest` with a :class:`~loopctl.response.ModelResponse`.

    ``generate`` streams when ``stream`` is true, calling ``on_event`` with each decoded event; it raises
    :class:`~loopctl.errors.ProviderError` subclasses (``retryable`` tells which are worth another try).
    """

    provider: str
    model: str

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """Send ``request`` and return the reply.

        ``stream=True`` asks the provider for a streamed reply and calls ``on_event`` with each
        :mod:`loopctl.stream` event as it arrives; the reply comes back whole either way. Raises the
        :class:`~loopctl.errors.ProviderError` subclasses for what the provider said.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


_HEAD = 256
# How an event stream's first line starts (WHATWG HTML 9.2.6: a comment, or a known field name followed by a
# colon or the end of the line).
_SSE_LINE = re.compile(rb"(?::|(?:data|event|id|retry)(?::|\r|\n|$))")


# What a decoder raises when a reply has the right syntax but not the shape it reads (a number where text
# belongs, a string where an object does): the provider's protocol error, never the caller's InvalidMessage
# (a ValueError) nor a bare TypeError.
_SHAPE_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError)


def malformed_reply(provider: str, exc: BaseException, data: str | bytes) -> ProviderProtocolError:
    """The error for a reply (or stream event) whose shape a codec could not read: names the provider, what
    failed and the start of the data.

    ``exc`` is what the codec raised while reading ``data``; it becomes the error's cause.
    """
    shown = f": {data[:200]!r}" if data else ""
    return ProviderProtocolError(
        f"a reply of an unexpected shape ({type(exc).__name__}: {exc}){shown}", provider=provider
    )


class SSEStreamDecoder:
    """Base of the codecs' ``StreamDecoder``: SSE framing, error bodies, and the accumulator.

    A subclass sets :attr:`provider` and implements :meth:`on_event` (one SSE event in, neutral events out)
    and :meth:`error_body` (an error JSON body to a typed error). A body that is plain JSON rather than an
    event stream (providers answer a stream request that way when they reject it) is collected and raised
    from :meth:`finish` as a typed error, never decoded as a half-built message.
    """

    provider: str = ""

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self.accumulator = StreamAccumulator(self.provider)
        self._mode: Literal["?", "sse", "json"] = "?"
        self._json = bytearray()
        self._head = b""  # the first bytes of an event stream, to tell one from a page of something else

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Decode ``chunk`` (split anywhere) and return the events it completes."""
        if self._mode == "?":
            head = chunk.lstrip()
            if not head:
                self._json += chunk
                return []
            if head[:1] in (b"{", b"["):
                self._mode = "json"
            else:
                self._mode = "sse"
                if self._json:
                    chunk = bytes(self._json) + chunk
                    self._json = bytearray()
        if self._mode == "json":
            self._json += chunk
            return []
        if len(self._head) < _HEAD:
            self._head = (self._head + chunk.lstrip() if not self._head else self._head + chunk)[:_HEAD]
        out: list[StreamEvent] = []
        for sse in self._sse.feed(chunk):
            try:
                events = self.on_event(sse)
                for event in events:
                    self.accumulator.add(event)
            except ProviderError:
                raise
            except _SHAPE_ERRORS as exc:
                raise malformed_reply(self.provider, exc, sse.data) from exc
            out.extend(events)
        return out

    def feed_event(self, data: str | bytes) -> list[StreamEvent]:
        """Decode one event that arrived whole, without SSE framing (a WebSocket message: the Responses API's
        WebSocket mode sends each stream event as one JSON text message) and return its neutral events.

        ``data`` is the event's JSON text (or its UTF-8 bytes; a byte that is not UTF-8 reads as U+FFFD, as in
        :meth:`feed`).
        """
        text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
        try:
            events = self.on_event(ServerSentEvent("message", text))
            for event in events:
                self.accumulator.add(event)
        except ProviderError:
            raise
        except _SHAPE_ERRORS as exc:
            raise malformed_reply(self.provider, exc, text) from exc
        return events

    def finish(self) -> ModelResponse:
        """The complete reply; raises the provider's typed error for an error body or event,
        :class:`~loopctl.errors.StreamTruncated` for a stream cut short, and
        :class:`~loopctl.errors.ProviderProtocolError` for a body that is not an event stream at all (an HTML
        page from a proxy: retrying it is not worth it, and it was not cut short)."""
        if self._mode == "json":
            try:
                body = loads_exact(self._json)
            except orjson.JSONDecodeError:
                raise ProviderProtocolError(
                    "the stream body is neither an event stream nor JSON", provider=self.provider
                ) from None
            try:
                error = self.error_body(body)
            except _SHAPE_ERRORS as exc:
                raise malformed_reply(self.provider, exc, bytes(self._json)) from exc
            raise error
        self._sse.close()
        if not self._sse.saw_field and self._head and not _SSE_LINE.match(self._head.removeprefix(b"\xef\xbb\xbf")):
            raise ProviderProtocolError(
                f"the reply is not an event stream: {self._head[:200]!r}", provider=self.provider
            )
        try:
            return self.accumulator.finish()
        except ProviderError:
            raise
        except _SHAPE_ERRORS as exc:
            raise malformed_reply(self.provider, exc, "") from exc

    def on_event(self, event: ServerSentEvent) -> list[StreamEvent]:
        """Translate one SSE event into neutral events (and raise on an error event)."""
        raise NotImplementedError

    def error_body(self, body: Any) -> ProviderError:
        """The typed error for an error body received in place of a stream."""
        raise NotImplementedError

    @classmethod
    def parse(cls, chunks: Iterable[bytes]) -> ModelResponse:
        """Decode a whole stream: feed every chunk, then :meth:`finish`.

        ``chunks`` are the stream's bytes, split anywhere.
        """
        decoder = cls()
        for chunk in chunks:
            decoder.feed(chunk)
        return decoder.finish()


class ConversionCache:
    """Remembers what each message converted to, so a long conversation is converted once, not per call.

    Messages are immutable, so a message object's conversion never changes; entries are keyed by the object
    itself (its ``id``, with the object held so the id cannot be reused) plus a ``key`` naming whatever
    request option changes the conversion (for example whether thinking may be replayed). Entries for
    messages that stop appearing (after a compaction) are dropped by :meth:`sweep`, which a request builder
    calls once per build.
    """

    __slots__ = ("_entries", "_seen")

    def __init__(self) -> None:
        self._entries: dict[tuple[int, Any], tuple[Message, Any]] = {}
        self._seen: set[tuple[int, Any]] = set()

    def get(self, message: Message, key: Any = None) -> Any | None:
        """The cached conversion of ``message`` under ``key``, or ``None``."""
        k = (id(message), key)
        entry = self._entries.get(k)
        if entry is not None and entry[0] is message:
            self._seen.add(k)
            return entry[1]
        return None

    def put(self, message: Message, value: Any, key: Any = None) -> None:
        """Remember ``value`` as the conversion of ``message`` under ``key``."""
        k = (id(message), key)
        self._entries[k] = (message, value)
        self._seen.add(k)

    def sweep(self) -> None:
        """Forget the entries not used since the last sweep, when they have grown to outnumber the used ones
        (so a sweep costs, amortized, O(1) per used entry)."""
        if len(self._entries) > 2 * len(self._seen) + 64:
            self._entries = {k: v for k, v in self._entries.items() if k in self._seen}
        self._seen = set()

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(slots=True)
class LaidOutPrefix:
    """One conversation as a codec last sent it: ``messages`` (held, so that their identity can be checked)
    is the whole request; ``messages[:start]`` became ``count`` output items, already written as JSON in
    ``chunks`` (compact UTF-8; each chunk is one or more items, each followed by ``,``), which no
    message appended after ``messages`` can change. A request continues the prefix only when it starts with
    all of ``messages`` (the codecs' rules for where a layout is final hold for appends, not for another
    continuation of a shorter start). ``state`` is what the codec carries over to lay out what follows
    (system texts, where thinking was decided...). Built by a codec's incremental build, never changed once
    kept."""

    key: Any
    messages: list[Message]
    start: int
    chunks: tuple[bytes, ...] = ()
    count: int = 0
    state: Any = None


class RequestCache:
    """What a client keeps between calls so that building the next request body costs O(new messages), not
    O(history): the per-message conversions (:attr:`conversions`), the laid-out and serialized start of each
    conversation it serves (:class:`LaidOutPrefix`, one per conversation, keyed by its first message), and
    the converted tools.

    A conversation is recognized by identity: a request whose first messages are the very objects of the
    previous request of that conversation (messages are immutable) continues it, and only the messages from
    the prefix's ``start`` on are converted, checked and written. Anything else (a compaction, an edited or
    removed message, a fork, other options) lays the conversation out afresh. The bytes are the same either
    way (the codecs' property tests check it). At most :attr:`max_conversations` prefixes are kept, and
    prefixes of at most :attr:`max_bytes` written bytes in all (the messages they hold take several times
    that: a finished 20-turn conversation of 200-character tool calls holds about 11 KB of bytes and 73 KB in
    all), the least recently used dropped first; the most recent one is always kept, however large, so a
    single long conversation stays incremental. Pure: no I/O.
    """

    __slots__ = ("_bytes", "_prefixes", "_sizes", "_tools", "conversions", "max_bytes", "max_conversations")

    def __init__(self, max_conversations: int = 1024, max_bytes: int = 32 << 20) -> None:
        self.conversions = ConversionCache()
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        """The written bytes (summed over the kept prefixes' ``chunks``) past which the least recently used
        conversations are dropped: 32 MiB by default."""
        self._prefixes: OrderedDict[int, LaidOutPrefix] = OrderedDict()
        self._sizes: dict[int, int] = {}  # the bytes of each kept prefix's chunks, by the same key
        self._bytes = 0  # their sum
        self._tools: dict[Any, tuple[tuple[Any, ...], Any]] = {}

    def prefix(self, messages: Sequence[Message], key: Any) -> LaidOutPrefix | None:
        """The stored prefix that ``messages`` continue under ``key`` (same layout options), or ``None``.
        Costs one identity comparison per message of the prefix (C speed: no Python per message)."""
        if not messages:
            return None
        found = self._prefixes.get(id(messages[0]))
        if found is None or found.key != key:
            return None
        held = found.messages
        n = len(held)
        if n > len(messages) or held[0] is not messages[0]:
            return None
        if n > 1 and not all(map(operator.is_, messages[:n], held)):
            return None
        self._prefixes.move_to_end(id(messages[0]))
        return found

    def keep(self, prefix: LaidOutPrefix) -> None:
        """Store ``prefix`` (it replaces the one of the same conversation), then drop the least recently used
        prefixes past :attr:`max_conversations` or :attr:`max_bytes`."""
        if not prefix.messages:
            return
        k = id(prefix.messages[0])
        old = self._prefixes.get(k)
        before = self._sizes.pop(k, 0)
        self._bytes -= before
        chunks, held = prefix.chunks, (old.chunks if old is not None else ())
        n = len(held)
        # The usual case, an append: the new chunks start with the old ones (the same objects), so only the added
        # ones are measured.
        if n and len(chunks) >= n and chunks[n - 1] is held[-1]:
            size = before + sum(map(len, chunks[n:]))
        else:
            size = sum(map(len, chunks))
        self._prefixes[k] = prefix
        self._prefixes.move_to_end(k)
        self._sizes[k] = size
        self._bytes += size
        while len(self._prefixes) > self.max_conversations or (
            self._bytes > self.max_bytes and len(self._prefixes) > 1
        ):
            dropped, _ = self._prefixes.popitem(last=False)
            self._bytes -= self._sizes.pop(dropped)

    def forget(self, messages: Sequence[Message]) -> None:
        """Drop the prefix stored for the conversation that starts with ``messages[0]``."""
        if messages:
            found = self._prefixes.get(id(messages[0]))
            if found is not None and found.messages[0] is messages[0]:
                del self._prefixes[id(messages[0])]
                self._bytes -= self._sizes.pop(id(messages[0]))

    def tools(self, key: Any, tools: Sequence[Any], convert: Callable[[], Any]) -> Any:
        """``convert()``, the converted form of ``tools`` under ``key``, made once while the same tool objects
        (compared by identity; a :class:`~loopctl.tool.ToolSchema` is treated as immutable) come back. What
        ``convert`` raises is raised again on every call (nothing is kept)."""
        held = self._tools.get(key)
        if held is not None and len(held[0]) == len(tools) and all(map(operator.is_, held[0], tools)):
            return held[1]
        value = convert()
        if len(self._tools) >= 16:
            self._tools.clear()
        self._tools[key] = (tuple(tools), value)
        return value

    @property
    def held_bytes(self) -> int:
        """The written bytes of the kept prefixes (what :attr:`max_bytes` bounds)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._prefixes)


def held_messages(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as a list of the same objects (a slice: C speed for lists and the engine's views)."""
    held = messages[:]
    return held if isinstance(held, list) else list(held)


ITEMS_MARK: Any = orjson.Fragment(b"\x00")
"""Stands in a body for the array an incremental build writes itself (:func:`write_spliced`): orjson never
writes a NUL byte (it escapes one inside a string), so the mark is found without ambiguity."""


def write_items(items: Sequence[Any]) -> bytes:
    """``items`` written as JSON (the project's serializer), each followed by ``,`` (``b""`` for none)."""
    if not items:
        return b""
    written = _dumps_bytes(items)
    return written[1:-1] + b","


def encode_built(
    build: Callable[..., tuple[dict[str, Any], LaidOutPrefix | None, tuple[tuple[bytes, ...], list[Any]] | None]],
    messages: Sequence[Message],
    *,
    model: str,
    cache: RequestCache | None,
    **options: Any,
) -> bytes:
    """A codec's ``encode_request``: the bytes of the body its ``build`` lays out (``build(messages,
    model=, cache=None, requests=cache, **options)`` gives the body, the prefix to keep and the written parts
    of its items array, or ``None`` for a body laid out whole), keeping the prefix in ``cache`` for the next
    call of the same conversation."""
    body, prefix, parts = build(messages, model=model, cache=None, requests=cache, **options)
    out = write_spliced(body, *parts) if parts is not None else _dumps_bytes(body)
    if cache is not None and prefix is not None:
        cache.keep(prefix)
    return out


def write_spliced(body: Mapping[str, Any], chunks: Sequence[bytes], last: Sequence[Any]) -> bytes:
    """``body`` written as JSON with, in place of :data:`ITEMS_MARK`, the array of the items written in
    ``chunks`` (see :func:`write_items`) followed by ``last``: the bytes of the same body holding the
    whole list, assembled in one copy."""
    head, mark, end = _dumps_bytes(body).partition(b"\x00")
    if not mark:
        raise ValueError("the body holds no ITEMS_MARK")
    tail = _dumps_bytes(list(last))[1:-1] if last else b""
    if not tail and chunks:
        chunks = (*chunks[:-1], chunks[-1][:-1])  # no comma after the last item
    return b"".join((head, b"[", *chunks, tail, b"]", end))
