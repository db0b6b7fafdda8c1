"""MCP prompts and resources in loopctl's terms. Pure: no I/O.

- A prompt (``prompts/get``: ``GetPromptResult``) becomes an :class:`MCPPrompt`: its description and its
  messages as :class:`~loopctl.message.Message` values (text, images; an embedded resource as its text or
  image, a resource link or audio as a one-line note: :mod:`loopctl.mcp.convert`'s rules), ready to put in a
  conversation.
- A resource's contents (``resources/read``: ``ReadResourceResult``) become a
  :class:`~loopctl.tool.ToolOutput` by the same rules: text as ``[resource URI]`` and its text, a textual blob
  decoded, an image as an image part.
"""

from __future__ import annotations

from typing import Any

import mcp_types

from loopctl._frozen import dataclass
from loopctl.mcp.convert import to_tool_output
from loopctl.message import Message, Retention, Role
from loopctl.tool import ToolOutput

__all__ = ["MCPPrompt", "prompt_of", "resource_output"]


@dataclass(frozen=True, slots=True)
class MCPPrompt:
    """A server's prompt, filled in: ``name``, the server's ``description`` and the ``messages``."""

    name: str
    description: str
    messages: tuple[Message, ...]


def prompt_of(name: str, result: mcp_types.GetPromptResult) -> MCPPrompt:
    """The :class:`MCPPrompt` of a ``prompts/get`` result: ``name`` is the prompt's name, ``result`` the
    server's answer; its messages become loopctl :class:`~loopctl.message.Message` s (user or assistant, every
    content type mapped as a tool result's would be)."""
    messages = []
    for message in result.messages:
        output = to_tool_output(mcp_types.CallToolResult(content=[message.content]))
        parts = output.tool_content().parts
        messages.append(Message.new(Role.ASSISTANT if message.role == "assistant" else Role.USER, parts))
    return MCPPrompt(name, result.description or "", tuple(messages))


def resource_output(result: Any, retention: Retention | None = None) -> ToolOutput:
    """The contents of a ``resources/read`` result (anything with ``contents``) as a tool output tagged
    ``retention``."""
    blocks = [mcp_types.EmbeddedResource(type="resource", resource=c) for c in getattr(result, "contents", None) or ()]
    if not blocks:
        return ToolOutput("", retention=retention)
    return to_tool_output(mcp_types.CallToolResult(content=list(blocks)), retention)
