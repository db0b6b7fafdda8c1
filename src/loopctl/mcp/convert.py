"""MCP tool results and names in loopctl's terms. Pure: no I/O.

A ``tools/call`` result (MCP specification, "Tools": ``CallToolResult`` with ``content`` blocks, optional
``structuredContent`` and ``isError``) becomes a :class:`~loopctl.tool.ToolOutput`:

- ``text`` blocks become text; ``image`` blocks become image parts (PNG, JPEG, GIF and WebP, the types every
  provider reads; another type becomes a note saying it was left out); an embedded text resource becomes its
  text under a ``[resource URI]`` line, an embedded image blob an image part; audio, other blobs and resource
  links become one-line notes (no provider reads them as tool output);
- with no content blocks, ``structuredContent`` becomes its JSON text (the specification asks servers to send
  the same JSON as a text block too, so when both are there the blocks are used);
- ``isError`` sets ``is_error``: the model reads it as a failed call.

Tool names: providers accept ``[a-zA-Z0-9_-]``, at most 64 characters (OpenAI's rule, the strictest), so an
MCP name with other characters (``fs.read``, ``a/b``) is rewritten with ``_``; a collision gets ``_2``, ``_3``...
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from loopctl.message import ImagePart, ImageSource, Retention, TextPart
from loopctl.tool import ToolOutput

__all__ = ["MAX_TOOL_NAME", "SENDABLE_IMAGES", "exposed_names", "to_tool_output"]

MAX_TOOL_NAME = 64
"""The longest tool name every provider accepts (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``)."""

SENDABLE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Image types every provider reads in a tool result."""

_BAD = re.compile(r"[^a-zA-Z0-9_-]")


def exposed_names(names: Sequence[str], prefix: str | None = None) -> list[str]:
    """The names the model sees for MCP tools ``names`` (in order): ``{prefix}_{name}`` when a prefix is
    given, characters providers refuse replaced with ``_``, cut to :data:`MAX_TOOL_NAME`, made unique."""
    out: list[str] = []
    taken: set[str] = set()
    for name in names:
        base = _BAD.sub("_", f"{prefix}_{name}" if prefix else name)[:MAX_TOOL_NAME] or "tool"
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            suffix = f"_{n}"
            candidate = base[: MAX_TOOL_NAME - len(suffix)] + suffix
        taken.add(candidate)
        out.append(candidate)
    return out


def _image(mime_type: str, data: str) -> TextPart | ImagePart:
    if mime_type not in SENDABLE_IMAGES:
        return TextPart(text=f"[an image of type {mime_type} was left out: models read PNG, JPEG, GIF and WebP]")
    try:
        return ImagePart(source=ImageSource.new_base64(mime_type, data))
    except ValueError:  # not base64: the server broke the protocol
        return TextPart(text=f"[an image of type {mime_type} was left out: its data is not base64]")


def _block(block: Any) -> TextPart | ImagePart:
    kind = getattr(block, "type", None)
    if kind == "text":
        return TextPart(text=str(block.text))
    if kind == "image":
        return _image(str(block.mime_type), str(block.data))
    if kind == "audio":
        return TextPart(text=f"[audio of type {block.mime_type} was left out: models do not read audio results]")
    if kind == "resource_link":
        what = f"{block.name} <{block.uri}>"
        return TextPart(text=f"[resource link: {what}{f': {block.description}' if block.description else ''}]")
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return TextPart(text=f"[resource {resource.uri}]\n{text}")
        mime_type = str(getattr(resource, "mime_type", None) or "application/octet-stream")
        if mime_type.startswith("image/"):
            return _image(mime_type, str(resource.blob))
        return TextPart(text=f"[resource {resource.uri} of type {mime_type} was left out: binary data]")
    return TextPart(text=f"[a {kind or 'content'} block was left out: loopctl does not read it]")


def _joined(parts: Iterable[TextPart | ImagePart]) -> str | list[TextPart | ImagePart]:
    parts = list(parts)
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return parts


def to_tool_output(result: Any, retention: Retention | None = None) -> ToolOutput:
    """A ``CallToolResult`` (anything with ``content``, ``structured_content`` and ``is_error``) as a
    :class:`~loopctl.tool.ToolOutput` tagged ``retention``.

    ``result`` is the server's reply to ``tools/call``.
    """
    blocks = list(getattr(result, "content", None) or ())
    structured = getattr(result, "structured_content", None)
    content: str | list[TextPart | ImagePart]
    if blocks:
        content = _joined(_block(b) for b in blocks)
    elif structured is not None:
        content = orjson.dumps(structured, default=str).decode()
    else:
        content = ""
    return ToolOutput(content, is_error=bool(getattr(result, "is_error", False)), retention=retention)
