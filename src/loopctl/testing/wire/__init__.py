"""Encoders for the fake provider server: a scripted reply in each provider's own wire format.

From a :class:`~loopctl.response.ModelResponse` (an assistant message, usage, stop reason) to the JSON body
and the SSE events the real API would send, one module per API with the same two functions,
``body(response, ctx) -> dict`` and ``events(response, ctx) -> list[dict]``:
:mod:`~loopctl.testing.wire.openai_chat`, :mod:`~loopctl.testing.wire.openai_responses`,
:mod:`~loopctl.testing.wire.anthropic`, :mod:`~loopctl.testing.wire.gemini`; errors in
:mod:`~loopctl.testing.wire.errors`. :func:`encode_reply` adds the SSE framing and the content type.

Rules every encoder keeps:

- only the thinking parts a real provider would have minted go out (``ThinkingPart.provider`` equal to the
  API's :data:`THINKING_PROVIDER`), the others are dropped;
- text, thinking and tool arguments are split into several deltas, so stream decoders must join them;
- a tool call listed in ``ModelResponse.invalid_tool_calls`` is sent with its raw cut-off ``arguments`` where
  the wire carries arguments as text (a ``max_tokens`` stop in the middle of a call);
- ids derive from ``ReplyContext.token`` and part positions, so the same reply gives the same bytes.

Pure: no I/O, no clock (the caller passes ids and the creation time in :class:`ReplyContext`).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from loopctl.response import ModelResponse
from loopctl.testing.wire._common import (
    API,
    APIS,
    THINKING_PROVIDER,
    Encoded,
    ReplyContext,
    dumps,
    fake_signature,
    split,
)
from loopctl.testing.wire.errors import ErrorKind, ErrorReply, encode_error, error_body, stream_error_frame

__all__ = [
    "API",
    "APIS",
    "THINKING_PROVIDER",
    "Encoded",
    "ErrorKind",
    "ErrorReply",
    "ReplyContext",
    "encode_error",
    "encode_reply",
    "error_body",
    "fake_signature",
    "frame",
    "split",
    "stream_error_frame",
]

# Each API's encoder, imported when a reply is first encoded in it (the demo's server speaks only one).
_MODULES = {
    "openai-chat": "loopctl.testing.wire.openai_chat",
    "openai-responses": "loopctl.testing.wire.openai_responses",
    "anthropic": "loopctl.testing.wire.anthropic",
    "gemini": "loopctl.testing.wire.gemini",
}


def _encoder(api: str) -> ModuleType | None:
    name = _MODULES.get(api)
    return None if name is None else importlib.import_module(name)


def frame(api: API, events: Sequence[Mapping[str, Any]]) -> tuple[bytes, ...]:
    """The SSE bytes of ``events``, one piece per event: Chat ``data:`` lines closed by ``data: [DONE]``
    (recording openai/chat-text-stream); Gemini ``data:`` lines separated by CRLF CRLF with no sentinel
    (gemini/text-stream); Responses and Anthropic an ``event:`` line naming the ``type``, then ``data:``.

    ``api`` is one of :data:`APIS`; the result has one ``bytes`` piece per event.
    """
    if api == "openai-chat":
        return (*(b"data: " + dumps(e) + b"\n\n" for e in events), b"data: [DONE]\n\n")
    if api == "gemini":
        from loopctl.testing.wire import gemini

        return tuple(b"data: " + gemini.dumps(e) + b"\r\n\r\n" for e in events)
    return tuple(f"event: {e['type']}\ndata: ".encode() + dumps(e) + b"\n\n" for e in events)


def encode_reply(api: API, response: ModelResponse, ctx: ReplyContext, *, stream: bool) -> Encoded:
    """``response`` as ``api`` sends it: a JSON body, or SSE events (one piece each) when ``stream``.

    The JSON layout follows the recordings (OpenAI and Gemini indent theirs, Anthropic's is compact). Raises
    :class:`~loopctl.errors.UnsupportedContent` for a reply part no model sends (an image, a tool result)
    and ``ValueError`` for an unknown ``api``.

    ``ctx`` (a :class:`ReplyContext`) is the request being answered: its model, ids and options.
    """
    module = _encoder(api)
    if module is None:
        raise ValueError(f"unknown API {api!r}; expected one of {APIS}")
    if stream:
        content_type = "text/event-stream" if api == "gemini" else "text/event-stream; charset=utf-8"
        return Encoded(200, content_type, frame(api, module.events(response, ctx)), True)
    payload = module.body(response, ctx)
    if api == "anthropic":
        return Encoded(200, "application/json", (dumps(payload),))
    content_type = "application/json; charset=UTF-8" if api == "gemini" else "application/json"
    return Encoded(200, content_type, (json.dumps(payload, indent=2, ensure_ascii=False).encode(),))
