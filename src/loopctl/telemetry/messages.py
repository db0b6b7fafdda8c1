"""loopctl messages in the JSON shapes of the GenAI conventions' ``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions`` and ``gen_ai.tool.definitions``.

Shapes from ``docs/gen-ai/gen-ai-input-messages.json`` and ``gen-ai-output-messages.json`` of
``open-telemetry/semantic-conventions-genai``: a message is ``{"role", "parts"}`` (an output message adds
``finish_reason``); parts are ``text`` (``content``), ``tool_call`` (``id``, ``name``, ``arguments``),
``tool_call_response`` (``id``, ``response``), ``reasoning`` (``content``), ``blob`` (``modality``,
``mime_type``, base64 ``content``), ``server_tool_call`` (``id``, ``name``, ``server_tool_call``),
``server_tool_call_response`` (``id``, ``server_tool_call_response``) and ``compaction`` (``content``). A user
message that holds only tool results has the role ``tool``, as in the conventions' examples. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from loopctl.message import (
    CompactionPart,
    ImagePart,
    Message,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.response import StopReason
from loopctl.tool import ToolSchema

__all__ = [
    "FINISH_REASONS",
    "input_message",
    "input_messages",
    "output_message",
    "system_instructions",
    "tool_definitions",
    "tool_result",
]

FINISH_REASONS: dict[StopReason, str] = {
    StopReason.END_TURN: "stop",
    StopReason.STOP_SEQUENCE: "stop",
    StopReason.TOOL_CALL: "tool_call",
    StopReason.MAX_TOKENS: "length",
    StopReason.REFUSAL: "content_filter",
}
""":class:`~loopctl.response.StopReason` to the conventions' ``FinishReason`` values."""


def _image(part: ImagePart) -> dict[str, Any]:
    return {"type": "blob", "modality": "image", "mime_type": part.source.media_type, "content": part.source.data}


def tool_result(output: ToolContent) -> Any:
    """A tool result's content: its text, or a list of ``text`` / ``blob`` parts for a multipart result.

    ``output`` is the tool result's content.
    """
    root = output.root
    if isinstance(root, str):
        return root
    return [{"type": "text", "content": p.text} if isinstance(p, TextPart) else _image(p) for p in root]


def _part(part: Any) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    if isinstance(part, ImagePart):
        return _image(part)
    if isinstance(part, ToolCallPart):
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.input}
    if isinstance(part, ToolResultPart):
        return {"type": "tool_call_response", "id": part.call_id, "response": tool_result(part.output)}
    if isinstance(part, ThinkingPart):
        # Redacted thinking has no readable text; its opaque payload is not content anyone can read.
        return {"type": "reasoning", "content": part.text} if part.text else None
    if isinstance(part, ServerToolCallPart):
        # The conventions' ServerToolCallPart / ServerToolCallResponsePart (a tool the provider ran itself);
        # the provider's opaque block (encrypted search results...) is not content anyone can read.
        return {
            "type": "server_tool_call",
            "id": part.id,
            "name": part.name,
            "server_tool_call": {"type": part.name, "input": part.input},
        }
    if isinstance(part, ServerToolResultPart):
        return {
            "type": "server_tool_call_response",
            "id": part.call_id,
            "server_tool_call_response": {"type": part.name, "output": part.output},
        }
    if isinstance(part, CompactionPart):
        return {"type": "compaction", "content": part.summary} if part.summary else None
    return None


def _parts(parts: Iterable[Any]) -> list[dict[str, Any]]:
    return [p for p in (_part(x) for x in parts) if p is not None]


def _role(message: Message) -> str:
    if message.role is Role.USER and message.parts and all(isinstance(p, ToolResultPart) for p in message.parts):
        return "tool"
    return message.role.value


def input_message(message: Message) -> dict[str, Any]:
    """One message of the conversation sent to the model."""
    return {"role": _role(message), "parts": _parts(message.parts)}


def input_messages(messages: Sequence[Message], memo: dict[int, tuple[Message, Any]] | None = None) -> list[Any]:
    """The conversation sent to the model, in order. ``memo`` (kept by the caller across calls, keyed by
    ``id``) saves converting the same immutable message again on every call of a run.

    ``messages`` is the conversation sent.
    """
    if memo is None:
        return [input_message(m) for m in messages]
    out = []
    for m in messages:
        hit = memo.get(id(m))
        if hit is None or hit[0] is not m:
            hit = memo[id(m)] = (m, orjson.Fragment(orjson.dumps(input_message(m), default=str)))
        out.append(hit[1])
    return out


def output_message(message: Message, stop_reason: StopReason) -> dict[str, Any]:
    """The model's reply as one output message (loopctl asks for one candidate).

    ``stop_reason`` is why the reply ended, written as the conventions' ``finish_reason``.
    """
    return {"role": "assistant", "parts": _parts(message.parts), "finish_reason": FINISH_REASONS[stop_reason]}


def system_instructions(system: str) -> list[dict[str, Any]]:
    """The system prompt as the conventions' list of text parts."""
    return [{"type": "text", "content": system}]


def tool_definitions(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """The tools offered to the model, as ``function`` definitions with their JSON Schema ``parameters``."""
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": dict(t.input_schema)}
        for t in tools
    ]
