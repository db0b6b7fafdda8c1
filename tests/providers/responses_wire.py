"""Test helpers for the OpenAI Responses codec: read a recorded request's ``input`` back into messages, and
validate a built body against the official SDK's request type.

The reader is the inverse of the builder for the shapes the recordings use: easy messages (string or content
list), ``developer``/``system`` messages, output ``message`` items, ``reasoning``, ``function_call`` and
``function_call_output`` items, and the items of built-in tools and compaction (read as the codec reads them
in a reply). Consecutive items of one side (assistant: reasoning, output messages, easy
assistant messages, function calls; user: user messages and function outputs) form one message, as one
reply or one user turn does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from openai.types.responses import response_create_params
from pydantic import TypeAdapter

from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.providers.openai_responses import NATIVE_ITEMS, _native_parts

_ASSISTANT_ITEMS = {"reasoning", "function_call"}


def _side(item: dict[str, Any]) -> Role:
    kind = item.get("type")
    if kind in _ASSISTANT_ITEMS or kind in NATIVE_ITEMS:
        return Role.ASSISTANT
    if kind == "function_call_output":
        return Role.USER
    role = item["role"]
    if role in ("system", "developer"):
        return Role.SYSTEM
    return Role(role)


def _image(url: str) -> ImagePart:
    head, data = url.split(",", 1)
    media_type = head.removeprefix("data:").removesuffix(";base64")
    return ImagePart(source=ImageSource(media_type=media_type, data=data))


def _user_content(content: Any) -> list[MessagePart]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    parts: list[MessagePart] = []
    for piece in content:
        if piece["type"] == "input_text":
            parts.append(TextPart(text=piece["text"]))
        elif piece["type"] == "input_image":
            parts.append(_image(piece["image_url"]))
        else:
            raise AssertionError(f"reader: unknown content {piece['type']!r}")
    return parts


def _parts(item: dict[str, Any]) -> list[MessagePart]:
    kind = item.get("type")
    if kind == "reasoning":
        texts = [s["text"] for s in item["summary"]] or [""]
        return [
            ThinkingPart(
                text=t,
                signature=item.get("encrypted_content") if k == 0 else None,
                provider="openai",
                item_id=item["id"],
            )
            for k, t in enumerate(texts)
        ]
    if kind == "function_call":
        return [
            ToolCallPart(
                id=item["call_id"],
                name=item["name"],
                input=json.loads(item["arguments"] or "{}"),
                item_id=item.get("id"),
            )
        ]
    if kind in NATIVE_ITEMS:
        return _native_parts(item, "input", ())
    if kind == "function_call_output":
        output = item["output"]
        content = ToolContent(output) if isinstance(output, str) else ToolContent(tuple(_user_content(output)))
        return [ToolResultPart(call_id=item["call_id"], output=content)]
    if item.get("role") == "assistant":
        if "id" in item:
            return [
                TextPart(text=c["text"], item_id=item["id"], citations=tuple(c["annotations"]), provider="openai")
                if c.get("annotations")
                else TextPart(text=c["text"], item_id=item["id"])
                for c in item["content"]
            ]
        return [TextPart(text=item["content"])]
    return _user_content(item["content"])


def read_input(items: list[dict[str, Any]]) -> list[Message]:
    """The messages a recorded ``input`` list stands for."""
    messages: list[Message] = []
    role: Role | None = None
    parts: list[MessagePart] = []
    for item in items:
        side = _side(item)
        if side is Role.SYSTEM or side is not role:
            if role is not None:
                messages.append(Message.new(role, parts))
            role, parts = side, []
        parts.extend(_parts(item))
        if side is Role.SYSTEM:
            messages.append(Message.new(Role.SYSTEM, parts))
            role, parts = None, []
    if role is not None:
        messages.append(Message.new(role, parts))
    return messages


def tool_results(items: list[dict[str, Any]]) -> Message:
    """The ``function_call_output`` items of a follow-up ``input``, as one user message."""
    return Message.new(Role.USER, [p for i in items if i.get("type") == "function_call_output" for p in _parts(i)])


# --- the SDK's request type ---------------------------------------------------------------------------------

_PARAMS = {
    False: TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming),
    True: TypeAdapter(response_create_params.ResponseCreateParamsStreaming),
}


def _materialize(value: Any) -> Any:
    # The SDK types its lists as Iterable, which pydantic validates lazily: walk every iterator so each item
    # is validated, and rebuild plain values to compare with the input.
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [_materialize(v) for v in value]
    return value


def validate_with_sdk(body: dict[str, Any]) -> None:
    """Raise unless ``body`` validates strictly against openai-python's ``ResponseCreateParams`` TypedDicts
    with nothing dropped or coerced (TypedDicts ignore unknown keys, so the validated value must equal the
    input exactly)."""
    adapter = _PARAMS[bool(body.get("stream"))]
    validated = _materialize(adapter.validate_python(body, strict=True))
    if validated != body:
        raise AssertionError(f"the SDK type dropped or changed something:\n{validated}\n!=\n{body}")
