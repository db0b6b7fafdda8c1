"""Test helper: read a recorded Anthropic Messages request body back into loopctl messages.

The inverse of ``loopctl.providers.anthropic.build_request`` for what the recordings hold, so that a
follow-up request can be rebuilt from the messages alone. Thinking blocks read back as Anthropic's
(``provider="anthropic"``); a ``tool_result`` gets the ``name`` of the ``tool_use`` it answers. Server tool
blocks and compaction blocks read back as the codec reads them in a reply (their provider-native parts, the
block kept whole), and text with citations keeps them.
Also the normalizations used when comparing a built body with a recorded one.
"""

from __future__ import annotations

from typing import Any

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
from loopctl.providers.anthropic import _native_part


def read_system(body: dict[str, Any]) -> str | None:
    """The top-level ``system`` as one string (text blocks joined with ``"\\n"``), or ``None``."""
    system = body.get("system")
    if system is None or isinstance(system, str):
        return system
    return "\n".join(block["text"] for block in system)


def read_messages(body: dict[str, Any]) -> list[Message]:
    """The ``messages`` of a recorded request as loopctl messages."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        parts: list[MessagePart] = []
        for block in content:
            kind = block["type"]
            if kind == "text":
                if block.get("citations"):
                    parts.append(TextPart(text=block["text"], citations=tuple(block["citations"]), provider="anthropic"))
                else:
                    parts.append(TextPart(text=block["text"]))
            elif kind == "image":
                source = block["source"]
                parts.append(ImagePart(source=ImageSource(media_type=source["media_type"], data=source["data"])))
            elif kind == "thinking":
                parts.append(ThinkingPart(text=block["thinking"], signature=block["signature"], provider="anthropic"))
            elif kind == "redacted_thinking":
                parts.append(ThinkingPart(text="", redacted=block["data"], provider="anthropic"))
            elif kind == "tool_use":
                names[block["id"]] = block["name"]
                parts.append(ToolCallPart(id=block["id"], name=block["name"], input=block["input"]))
            elif kind == "tool_result":
                parts.append(
                    ToolResultPart(
                        call_id=block["tool_use_id"],
                        name=names.get(block["tool_use_id"], ""),
                        output=_read_output(block.get("content", "")),
                        is_error=block.get("is_error"),
                    )
                )
            elif (native := _native_part(block, kind)) is not None:
                parts.append(native)
            else:
                raise AssertionError(f"the reader does not know block type {kind!r}")
        out.append(Message.new(Role(message["role"]), parts))
    return out


def _read_output(content: Any) -> ToolContent:
    if isinstance(content, str):
        return ToolContent.from_string(content)
    parts: list[TextPart | ImagePart] = []
    for block in content:
        if block["type"] == "text":
            parts.append(TextPart(text=block["text"]))
        else:
            source = block["source"]
            parts.append(ImagePart(source=ImageSource(media_type=source["media_type"], data=source["data"])))
    return ToolContent.from_multipart(parts)


def normalized(value: Any) -> Any:
    """A request fragment with what the recorders themselves added taken out, for comparison.

    Normalizations (everything else must match exactly):
    - ``cache_control`` keys are dropped: each recording client placed its own breakpoints (and Mirascope
      writes ``"cache_control": null`` on unmarked blocks); ours follow our own placement policy, checked
      by the caching tests instead;
    - ``"citations": null`` is dropped: Mirascope writes the SDK's unset optional field explicitly;
    - a string ``content`` reads as one text block: the API documents ``"content": "x"`` as shorthand for
      ``[{"type": "text", "text": "x"}]`` (SDK ``MessageCreateParams.messages``), and our builder always
      writes blocks.
    """
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "cache_control" or (key == "citations" and item is None):
                continue
            if key == "content" and isinstance(item, str) and "role" in value:
                item = [{"type": "text", "text": item}]
            out[key] = normalized(item)
        return out
    return value
