"""Sampling: an MCP server asks the host's model for a completion (``sampling/createMessage``, MCP 2025-11-25,
"Sampling"), in loopctl's terms. Pure: no I/O.

A server's request becomes a :class:`SamplingRequest` holding a :class:`~loopctl.providers.ModelRequest` (the
conversation, ``systemPrompt`` as the system prompt, ``maxTokens``, ``temperature``, ``stopSequences``, and the
``tools`` / ``toolChoice`` of tool use in sampling), which the host's :class:`~loopctl.providers.ModelClient`
answers; the :class:`~loopctl.response.ModelResponse` goes back as a ``CreateMessageResult`` (or, when the
request offered tools, a ``CreateMessageResultWithTools`` whose content may hold ``tool_use`` blocks).

Content maps as follows: ``text`` to text parts, ``image`` to image parts, ``tool_use`` to tool calls and
``tool_result`` to tool results (their text and images; the tool's name is the one its call gave); ``audio``,
which no codec sends, becomes a one-line note. Of the reply, text and tool calls go back (several text parts
joined); thinking stays with the host. ``modelPreferences`` and ``includeContext`` are advisory (the spec:
"the client MAY ignore"): the host's client answers whatever it is, and the hints are passed on in
:attr:`SamplingRequest.model_hints` for a handler that picks among clients.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from typing import Any, TypeAlias

import mcp_types

from loopctl._frozen import dataclass
from loopctl.mcp.convert import SENDABLE_IMAGES, to_tool_output
from loopctl.message import ImagePart, ImageSource, Message, MessagePart, Role, TextPart, ToolCallPart
from loopctl.providers import ModelRequest
from loopctl.response import ModelResponse, StopReason
from loopctl.tool import ToolChoice, ToolSchema

__all__ = [
    "REJECTED",
    "SamplingError",
    "SamplingHandler",
    "SamplingRequest",
    "to_model_request",
    "to_sampling_result",
]

REJECTED = -1
"""The JSON-RPC error code of a refused sampling request (the spec's example: "User rejected sampling
request")."""


class SamplingError(ValueError):
    """A sampling request loopctl cannot turn into a model request (a ``tool_result`` whose call is not in the
    conversation, image data that is not base64...); the text says what, and the server gets it as an
    error."""


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """A server's ``sampling/createMessage`` in loopctl's terms.

    ``server`` is the server's name; ``request`` the model request to send (the server's messages, system prompt,
    ``max_tokens``, ``temperature``, ``stop``, tools and tool choice); ``model_hints`` the names of
    ``modelPreferences.hints``, in order; ``cost_priority`` / ``speed_priority`` / ``intelligence_priority``
    its priorities (0 to 1, ``None`` when not given); ``include_context`` its ``includeContext`` (``"none"``,
    ``"thisServer"``, ``"allServers"``; loopctl adds no context); ``metadata`` what it asked to pass to the
    provider (not passed: provider-specific, and untrusted); ``tool_call_id`` the id of the model's tool call
    during which the server asked (``None`` when no call of that server was running)."""

    server: str
    request: ModelRequest
    model_hints: tuple[str, ...] = ()
    cost_priority: float | None = None
    speed_priority: float | None = None
    intelligence_priority: float | None = None
    include_context: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None


SamplingHandler: TypeAlias = Callable[[SamplingRequest], Awaitable["ModelRequest | ModelResponse | None"]]
"""Decides a sampling request: return the :class:`~loopctl.providers.ModelRequest` to send to the sampling
client (the request as it came, or edited), a :class:`~loopctl.response.ModelResponse` to answer with
(without calling a model), or ``None`` to refuse it (the server gets error -1, "the user rejected the
sampling request")."""


# --- MCP -> loopctl ----------------------------------------------------------------------------------------------


def _image(block: mcp_types.ImageContent) -> TextPart | ImagePart:
    if block.mime_type not in SENDABLE_IMAGES:
        return TextPart(text=f"[an image of type {block.mime_type} was left out: models read PNG, JPEG, GIF and WebP]")
    try:
        return ImagePart(source=ImageSource.new_base64(block.mime_type, block.data))
    except ValueError as exc:
        raise SamplingError(f"an image block's data is not base64 ({exc})") from None


def _part(block: Any, calls: Mapping[str, str], where: str) -> MessagePart:
    kind = getattr(block, "type", None)
    if kind == "text":
        return TextPart(text=block.text)
    if kind == "image":
        return _image(block)
    if kind == "audio":
        return TextPart(text=f"[audio of type {block.mime_type} was left out: the model does not read audio]")
    if kind == "tool_use":
        return ToolCallPart(id=block.id, name=block.name, input=dict(block.input))
    if kind == "tool_result":
        name = calls.get(block.tool_use_id)
        if name is None:
            raise SamplingError(f"{where}: a tool_result answers {block.tool_use_id!r}, which no tool_use made")
        output = to_tool_output(
            mcp_types.CallToolResult(content=list(block.content), structured_content=block.structured_content)
        )
        return MessagePart.tool_result(block.tool_use_id, name, output.tool_content(), bool(block.is_error))
    raise SamplingError(f"{where}: a {kind or 'content'} block loopctl does not read")


def _tool_choice(choice: mcp_types.ToolChoice | None) -> ToolChoice | None:
    if choice is None or choice.mode is None:
        return None
    return choice.mode


def to_model_request(params: mcp_types.CreateMessageRequestParams) -> ModelRequest:
    """The :class:`~loopctl.providers.ModelRequest` of a ``sampling/createMessage`` request's params. Raises
    :class:`SamplingError` naming the message and block loopctl cannot read."""
    calls: dict[str, str] = {}
    messages: list[Message] = []
    for i, message in enumerate(params.messages):
        parts = []
        for j, block in enumerate(message.content_as_list):
            part = _part(block, calls, f"messages[{i}].content[{j}]")
            if isinstance(part, ToolCallPart):
                calls[part.id] = part.name
            parts.append(part)
        messages.append(Message.new(Role.ASSISTANT if message.role == "assistant" else Role.USER, parts))
    tools = tuple(
        ToolSchema(t.name, t.description or t.title or "", t.input_schema or {"type": "object", "properties": {}})
        for t in params.tools or ()
    )
    return ModelRequest(
        messages=messages,
        system=params.system_prompt or None,
        tools=tools,
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        stop=list(params.stop_sequences) if params.stop_sequences else None,
        tool_choice=_tool_choice(params.tool_choice) if tools else None,
    )


def sampling_request(
    server: str, params: mcp_types.CreateMessageRequestParams, tool_call_id: str | None = None
) -> SamplingRequest:
    """The :class:`SamplingRequest` of ``server``'s request ``params`` (raises :class:`SamplingError`)."""
    prefs = params.model_preferences
    hints = tuple(h.name for h in (prefs.hints or ()) if h.name) if prefs is not None else ()
    return SamplingRequest(
        server=server,
        request=to_model_request(params),
        model_hints=hints,
        cost_priority=prefs.cost_priority if prefs is not None else None,
        speed_priority=prefs.speed_priority if prefs is not None else None,
        intelligence_priority=prefs.intelligence_priority if prefs is not None else None,
        include_context=params.include_context,
        metadata=dict(params.metadata or {}),
        tool_call_id=tool_call_id,
    )


# --- loopctl -> MCP ----------------------------------------------------------------------------------------------

_STOP = {
    StopReason.END_TURN: "endTurn",
    StopReason.TOOL_CALL: "toolUse",
    StopReason.MAX_TOKENS: "maxTokens",
    StopReason.STOP_SEQUENCE: "stopSequence",
    StopReason.REFUSAL: "refusal",
}


def to_sampling_result(
    response: ModelResponse, model: str, *, with_tools: bool
) -> mcp_types.CreateMessageResult | mcp_types.CreateMessageResultWithTools:
    """The ``sampling/createMessage`` result for ``response``, answered by ``model``. ``with_tools``: the request
    offered tools, so the content is a list that may hold ``tool_use`` blocks (``CreateMessageResultWithTools``);
    else it is one text block (``CreateMessageResult``), as servers of earlier versions read it."""
    text = "".join(p.text for p in response.message.parts if isinstance(p, TextPart))
    stop = _STOP.get(response.stop_reason, "endTurn")
    if not with_tools:
        return mcp_types.CreateMessageResult(
            role="assistant", content=mcp_types.TextContent(type="text", text=text), model=model, stop_reason=stop
        )
    content: list[mcp_types.SamplingMessageContentBlock] = []
    if text:
        content.append(mcp_types.TextContent(type="text", text=text))
    for p in response.message.parts:
        if isinstance(p, ToolCallPart):
            arguments = dict(p.input) if isinstance(p.input, dict) else {}
            content.append(mcp_types.ToolUseContent(type="tool_use", id=p.id, name=p.name, input=arguments))
    if not content:
        content.append(mcp_types.TextContent(type="text", text=""))
    return mcp_types.CreateMessageResultWithTools(role="assistant", content=content, model=model, stop_reason=stop)

