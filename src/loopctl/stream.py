"""Provider-neutral stream events, and the accumulator that turns them into a :class:`ModelResponse`.

A provider's stream decoder reads its wire format and emits these events; the same events go to observers
(the CLI prints text and thinking deltas as they come). Events address parts by ``index``: the position of
the part in the final message, allocated in order as parts start (0, 1, 2, ...).

Rules the accumulator keeps:
- text and thinking deltas are joined once, at the end (no quadratic string building);
- a thinking signature is latched (set, not appended) once per block, and replayed verbatim later;
- a tool call's streamed argument fragments are joined and parsed at the end: ``""`` reads as ``{}``;
  text that is not JSON (a call cut off by ``max_tokens``) becomes ``input={}`` plus an
  :class:`~loopctl.response.InvalidToolCall` on the response;
- a stream that never reached :class:`ResponseFinished` is truncated: :meth:`StreamAccumulator.finish`
  raises :class:`~loopctl.errors.StreamTruncated`, never a half-built message.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias, Union

import orjson

from loopctl._frozen import dataclass
from loopctl.errors import ProviderProtocolError, StreamTruncated
from loopctl.message import (
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from loopctl.message.model import MAX_INPUT_DEPTH, assemble, json_depth
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage

__all__ = [
    "PartFinished",
    "PartStarted",
    "PartUpdated",
    "ResponseFinished",
    "ResponseStarted",
    "StreamAccumulator",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ThinkingSignature",
    "ToolCallDelta",
    "UsageReported",
    "dumps_exact",
    "loads_exact",
]


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    """The reply began: the provider's response id and the model that answers, when known."""

    id: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class PartStarted:
    """A new part at ``index`` (always the next free index), with its initial content.

    A :class:`~loopctl.message.ToolCallPart` starts with its id and name; its ``input`` stands unless
    :class:`ToolCallDelta` fragments follow. A redacted thinking block arrives whole here.
    """

    index: int
    part: MessagePart


@dataclass(frozen=True, slots=True)
class PartUpdated:
    """The part at ``index`` is now ``part``: a block that arrived in pieces is complete (a provider-side tool
    call whose input streamed in, a compaction summary, the citations of a text). Deltas already received for
    that index still apply on top of it (a text part's deltas extend ``part.text``); the part keeps its kind's
    place, so an update may not change what kind of part stands at ``index``."""

    index: int
    part: MessagePart


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More text for the :class:`~loopctl.message.TextPart` at ``index``."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """More reasoning text for the :class:`~loopctl.message.ThinkingPart` at ``index``."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingSignature:
    """The signature of the thinking part at ``index``, latched as received (replaces any earlier one)."""

    index: int
    signature: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of the JSON arguments of the tool call at ``index``."""

    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class PartFinished:
    """The part at ``index`` is complete (a hint for observers; the accumulator needs no such event)."""

    index: int


@dataclass(frozen=True, slots=True)
class UsageReported:
    """Token usage so far; each report replaces the previous one (providers report running totals)."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class ResponseFinished:
    """The reply is complete, with the normalized stop reason and the provider's raw value."""

    stop_reason: StopReason
    raw_stop_reason: str | None = None


StreamEvent: TypeAlias = Union[
    ResponseStarted,
    PartStarted,
    PartUpdated,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    PartFinished,
    UsageReported,
    ResponseFinished,
]
"""Any of the stream events above."""


_NO_USAGE = Usage()  # frozen: one value serves every accumulator before its first report


class StreamAccumulator:
    """Builds a :class:`~loopctl.response.ModelResponse` from :data:`StreamEvent` values.

    ``provider`` names the API in errors. Feed events with :meth:`add`; call :meth:`finish` once at the end.
    Raises :class:`~loopctl.errors.ProviderProtocolError` for an event that addresses a part that does not
    exist or has another kind (the decoder, or the provider, broke the protocol).
    """

    __slots__ = ("_chunks", "_id", "_model", "_parts", "_provider", "_raw_stop", "_stop", "_usage")

    def __init__(self, provider: str = "") -> None:
        self._provider = provider
        self._parts: list[MessagePart] = []
        self._chunks: list[list[str] | None] = []
        self._usage = _NO_USAGE
        self._stop: StopReason | None = None
        self._raw_stop: str | None = None
        self._id: str | None = None
        self._model: str | None = None

    @property
    def finished(self) -> bool:
        """True once a :class:`ResponseFinished` event was added."""
        return self._stop is not None

    @property
    def usage(self) -> Usage:
        """The latest usage reported."""
        return self._usage

    def add(self, event: StreamEvent) -> None:
        """Apply one event."""
        if isinstance(event, (TextDelta, ThinkingDelta, ToolCallDelta)):
            self._delta(event.index, type(event)).append(
                event.arguments if isinstance(event, ToolCallDelta) else event.text
            )
        elif isinstance(event, PartStarted):
            if event.index != len(self._parts):
                raise self._error(f"part {event.index} started, but the next part is {len(self._parts)}")
            self._parts.append(event.part)
            self._chunks.append(None)
        elif isinstance(event, PartUpdated):
            current = self._part(event.index, MessagePart)
            if type(event.part) is not type(current):
                kinds = f"a {type(current).__name__}, into a {type(event.part).__name__}"
                raise self._error(f"an update turns part {event.index}, {kinds}")
            self._parts[event.index] = event.part
        elif isinstance(event, ThinkingSignature):
            part = self._part(event.index, ThinkingPart)
            self._parts[event.index] = part.model_copy(update={"signature": event.signature})
        elif isinstance(event, UsageReported):
            self._usage = event.usage
        elif isinstance(event, ResponseStarted):
            self._id = event.id if event.id is not None else self._id
            self._model = event.model if event.model is not None else self._model
        elif isinstance(event, ResponseFinished):
            self._stop = event.stop_reason
            self._raw_stop = event.raw_stop_reason

    def finish(self) -> ModelResponse:
        """The complete response. Raises :class:`~loopctl.errors.StreamTruncated` if the stream never
        finished."""
        if self._stop is None:
            raise StreamTruncated("the stream ended before the reply was complete", provider=self._provider)
        message, invalid = self._build()
        return ModelResponse(
            message=message,
            usage=self._usage,
            stop_reason=self._stop,
            raw_stop_reason=self._raw_stop,
            model=self._model,
            id=self._id,
            invalid_tool_calls=tuple(invalid),
        )

    # --- internals -------------------------------------------------------------------------------------

    def _delta(self, index: int, kind: type) -> list[str]:
        self._part(index, _KIND[kind])
        chunks = self._chunks[index]
        if chunks is None:
            chunks = self._chunks[index] = []
        return chunks

    def _part(self, index: int, kind: type[Any]) -> Any:
        if not 0 <= index < len(self._parts):
            raise self._error(f"an event for part {index}, which was never started")
        part = self._parts[index]
        if not isinstance(part, kind):
            raise self._error(f"an event for a {kind.__name__} at part {index}, which is a {type(part).__name__}")
        return part

    def _error(self, what: str) -> ProviderProtocolError:
        return ProviderProtocolError(f"stream protocol error: {what}", provider=self._provider)

    def _build(self) -> tuple[Message, list[InvalidToolCall]]:
        parts: list[MessagePart] = []
        invalid: list[InvalidToolCall] = []
        for part, chunks in zip(self._parts, self._chunks, strict=True):
            if chunks is not None:
                joined = "".join(chunks)
                if isinstance(part, (TextPart, ThinkingPart)):
                    part = part.model_copy(update={"text": part.text + joined})
                elif isinstance(part, ToolCallPart):
                    value, error = parse_arguments(joined)
                    if error is not None:
                        invalid.append(InvalidToolCall(part.id, part.name, joined, error))
                    if type(part) is ToolCallPart:
                        # What parse_arguments returns is what the input's validation would keep: a fresh
                        # value of the JSON types read by orjson (which refuses lone surrogates, NaN and
                        # infinities), no deeper than MAX_INPUT_DEPTH; the other fields were validated when
                        # the part started.
                        part = assemble(
                            ToolCallPart,
                            type="tool_call",
                            id=part.id,
                            name=part.name,
                            input=value,
                            item_id=part.item_id,
                            provider=part.provider,
                        )
                    else:
                        part = part.model_copy(update={"input": value})
            parts.append(part)
        return Message(role=Role.ASSISTANT, parts=tuple(parts)), invalid


_KIND: dict[type, type[MessagePart]] = {TextDelta: TextPart, ThinkingDelta: ThinkingPart, ToolCallDelta: ToolCallPart}


# A run of 19 or more digits may be an integer past 64 bits, which orjson reads as a float. The run is found
# by mapping every byte to "0" (a digit) or " " and searching for 19 zeros: two C passes, several times
# faster than a regular expression on the small events of a stream (which all go through here).
_DIGIT_OR_NOT = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


def loads_exact(text: str | bytes | bytearray) -> Any:
    """JSON text as Python values, integers of any size kept exactly (orjson reads one past 64 bits as a
    lossy float, so such text is read again by the standard library). Raises ``orjson.JSONDecodeError`` for
    text that is not JSON, including NaN/Infinity literals and lone surrogates, as orjson does, and for text
    with such an integer nested deeper than the standard library can read (about a thousand levels, less the
    caller's stack; orjson stops at 1,024)."""
    value = orjson.loads(text)
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if len(raw) >= 19 and _LONG_RUN in raw.translate(_DIGIT_OR_NOT):
        try:
            return json.loads(text)  # orjson accepted it, so it holds no NaN, Infinity or lone surrogate
        except RecursionError:  # the standard library's reader recurses per level: a typed refusal, not a crash
            doc = text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")
            raise orjson.JSONDecodeError("nested too deep to read its integers exactly", doc, 0) from None
    return value


def dumps_exact(value: Any) -> str:
    """Compact JSON text of a JSON value, integers of any size written exactly (orjson refuses one past 64
    bits, so such a value is written by the standard library, in the same compact shape). Raises
    ``TypeError`` or ``ValueError`` for a value JSON cannot hold, or nested deeper than the standard library
    can write (about a thousand levels: orjson writes 254 and reads 1,024, so a value it read may be one)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except RecursionError:  # the standard library's writer recurses per level: a typed refusal, not a crash
            raise ValueError("nested too deep to write as JSON") from None


def parse_arguments(text: str) -> tuple[Any, str | None]:
    """Parse tool-call arguments sent as JSON text.

    Returns ``(value, None)``; ``""`` (or only whitespace) reads as ``{}``. Text that is not JSON, or JSON
    nested deeper than :data:`~loopctl.message.model.MAX_INPUT_DEPTH` (a tool call's ``input`` may not be),
    returns ``({}, reason)`` so the caller can record an :class:`~loopctl.response.InvalidToolCall`.
    """
    if not text.strip():
        return {}, None
    try:
        value = loads_exact(text)
    except orjson.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    if json_depth(value) > MAX_INPUT_DEPTH:
        return {}, f"arguments are nested deeper than {MAX_INPUT_DEPTH} levels"
    return value, None
