"""Test helper: a recorded Chat Completions request read back into loopctl messages."""

from __future__ import annotations

import binascii
import json
from typing import Any

from loopctl.message import ImagePart, ImageSource, Message, MessagePart, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.tool import ToolSchema


def image_from_url(url: str) -> ImagePart:
    head, _, data = url.partition(",")
    assert head.startswith("data:"), url[:40]
    assert head.endswith(";base64"), url[:40]
    binascii.a2b_base64(data, strict_mode=True)
    return ImagePart(source=ImageSource(media_type=head[5:-7], data=data))


def parts_of(content: Any) -> list[MessagePart]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)]
    out: list[MessagePart] = []
    for item in content:
        if item["type"] == "text":
            out.append(TextPart(text=item["text"]))
        else:
            assert item["type"] == "image_url"
            out.append(image_from_url(item["image_url"]["url"]))
    return out


def messages_from_chat(chat: list[dict[str, Any]]) -> list[Message]:
    """Chat ``messages`` back into loopctl messages: consecutive ``tool`` messages become one user message of
    tool results (named after the call they answer)."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for m in chat:
        role = m["role"]
        if role == "tool":
            result = ToolResultPart(
                call_id=m["tool_call_id"], name=names.get(m["tool_call_id"], ""), output=m["content"]
            )
            if out and out[-1].role is Role.USER and out[-1].parts and out[-1].parts[-1].is_tool_result():
                out[-1] = Message.new(Role.USER, [*out[-1].parts, result])
            else:
                out.append(Message.new(Role.USER, [result]))
        elif role == "assistant":
            parts = parts_of(m.get("content"))
            for call in m.get("tool_calls", []):
                names[call["id"]] = call["function"]["name"]
                parts.append(
                    ToolCallPart(
                        id=call["id"], name=call["function"]["name"], input=json.loads(call["function"]["arguments"])
                    )
                )
            out.append(Message.new(Role.ASSISTANT, parts))
        else:
            out.append(Message.new(Role(role), parts_of(m["content"])))
    return out


def tools_from_chat(tools: list[dict[str, Any]]) -> list[ToolSchema]:
    return [
        ToolSchema(t["function"]["name"], t["function"].get("description", ""), t["function"]["parameters"])
        for t in tools
    ]
