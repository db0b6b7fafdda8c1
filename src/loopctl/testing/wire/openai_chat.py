"""OpenAI Chat Completions replies: the ``chat.completion`` object and the ``chat.completion.chunk`` stream.

Shapes from the API reference (https://platform.openai.com/docs/api-reference/chat) and the recordings
``openai/chat-*`` (see ``tests/fixtures/provider-traffic/INDEX.md``). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopctl.message import TextPart, ThinkingPart, ToolCallPart
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing.wire._common import Counts, ReplyContext, counted, reply_parts, split, tool_arguments

__all__ = ["body", "events"]

_FINISH = {
    StopReason.END_TURN: "stop",
    StopReason.TOOL_CALL: "tool_calls",
    StopReason.MAX_TOKENS: "length",
    StopReason.STOP_SEQUENCE: "stop",
    StopReason.REFUSAL: "stop",  # the refusal text rides in message.refusal; finish_reason stays "stop"
}


def _usage(reported: Usage | Counts) -> dict[str, Any]:
    usage = counted(reported)
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _head(response: ModelResponse, ctx: ReplyContext, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{ctx.token}",
        "object": kind,
        "created": ctx.created,
        "model": response.model or ctx.model,
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def body(response: ModelResponse, ctx: ReplyContext) -> dict[str, Any]:
    """The non-streamed ``chat.completion``. Text parts are joined into ``content`` (Chat has one content
    string); a ``REFUSAL`` puts the text in ``refusal`` instead; compatible-server reasoning goes in
    ``reasoning_content``; tool calls in ``tool_calls`` with their arguments as JSON text.

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    parts = reply_parts("openai-chat", response.message)
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    refused = response.stop_reason is StopReason.REFUSAL
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if refused or not text else text,
        "refusal": text if refused else None,
        "annotations": [],
    }
    reasoning = "".join(p.text for p in parts if isinstance(p, ThinkingPart))
    if reasoning:
        message["reasoning_content"] = reasoning
    calls = [p for p in parts if isinstance(p, ToolCallPart)]
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": tool_arguments(response, c)[0]}}
            for c in calls
        ]
    finish = response.raw_stop_reason or _FINISH[response.stop_reason]
    return {
        **_head(response, ctx, "chat.completion"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": _usage(response.usage),
    }


def events(response: ModelResponse, ctx: ReplyContext) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply (``data: [DONE]`` is added by the framing).

    Order as recorded (``openai/chat-tools-parallel-stream``): a first chunk with ``role``; reasoning and
    text (or refusal) deltas; per tool call one chunk with ``index``, ``id``, ``name`` and ``"arguments": ""``
    then chunks with only ``index`` and argument fragments; a chunk with an empty delta and the
    ``finish_reason``; then, only when the request set ``stream_options.include_usage``, a usage chunk with
    ``"choices": []``, every earlier chunk then carrying ``"usage": null`` (API reference,
    ``ChatCompletionStreamOptions.include_usage``).

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    parts = reply_parts("openai-chat", response.message)
    refused = response.stop_reason is StopReason.REFUSAL
    options = ctx.request.get("stream_options")
    include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
    head = _head(response, ctx, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        c = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return c

    has_text = any(isinstance(p, TextPart) and p.text for p in parts)
    first: dict[str, Any] = {"role": "assistant", "content": "" if has_text and not refused else None}
    if has_text:
        first["refusal"] = None
    chunks = [chunk(first)]
    index = 0
    for part in parts:
        if isinstance(part, ThinkingPart):
            chunks += [chunk({"reasoning_content": piece}) for piece in split(part.text) if piece]
        elif isinstance(part, TextPart):
            key = "refusal" if refused else "content"
            chunks += [chunk({key: piece}) for piece in split(part.text) if piece]
        elif isinstance(part, ToolCallPart):
            arguments = tool_arguments(response, part)[0]
            function = {"name": part.name, "arguments": ""}
            chunks.append(
                chunk({"tool_calls": [{"index": index, "id": part.id, "type": "function", "function": function}]})
            )
            chunks += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in split(arguments, 8)
                if piece
            ]
            index += 1
    chunks.append(chunk({}, response.raw_stop_reason or _FINISH[response.stop_reason]))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(response.usage)})
    return chunks
