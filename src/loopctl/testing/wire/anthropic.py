"""Anthropic Messages replies: the ``message`` object and its event stream.

Shapes from https://docs.claude.com/en/api/messages and https://docs.claude.com/en/api/messages-streaming,
and the recordings ``anthropic/*`` (see ``tests/fixtures/provider-traffic/INDEX.md``). Pure: no I/O, no
clock.
"""

from __future__ import annotations

from typing import Any

from loopctl.message import CompactionPart, ServerToolCallPart, ServerToolResultPart, TextPart, ThinkingPart
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing.wire._common import (
    Counts,
    ReplyContext,
    counted,
    dumps,
    fake_signature,
    reply_parts,
    split,
    tool_arguments,
)

__all__ = ["body", "events"]

_STOP = {
    StopReason.END_TURN: "end_turn",
    StopReason.TOOL_CALL: "tool_use",
    StopReason.MAX_TOKENS: "max_tokens",
    StopReason.STOP_SEQUENCE: "stop_sequence",
    StopReason.REFUSAL: "refusal",
}


def _usage(reported: Usage | Counts, *, output_tokens: int | None = None) -> dict[str, Any]:
    usage = counted(reported)
    # Anthropic's input_tokens leaves out the cached part, reported beside it (docs, "Prompt caching").
    uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    return {
        "input_tokens": uncached,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens if output_tokens is None else output_tokens,
    }


def _blocks(response: ModelResponse) -> list[tuple[dict[str, Any], str]]:
    """``(content block, streamed JSON text)`` per block; the text is a tool input's JSON, or the cut-off
    fragment of an invalid call (whose non-streamed block then carries ``{}``, having nothing parseable)."""
    blocks: list[tuple[dict[str, Any], str]] = []
    for part in reply_parts("anthropic", response.message):
        if isinstance(part, ThinkingPart):
            if part.redacted is not None:
                blocks.append(({"type": "redacted_thinking", "data": part.redacted}, ""))
            else:
                signature = part.signature or fake_signature(part.text)
                blocks.append(({"type": "thinking", "thinking": part.text, "signature": signature}, ""))
        elif isinstance(part, TextPart):
            text: dict[str, Any] = {"type": "text", "text": part.text}
            if part.citations is not None:
                text["citations"] = list(part.citations)
            blocks.append((text, ""))
        elif isinstance(part, ServerToolCallPart):
            assert part.raw is not None
            blocks.append((part.raw, dumps(part.input).decode()))
        elif isinstance(part, (ServerToolResultPart, CompactionPart)):
            assert part.raw is not None
            blocks.append((part.raw, ""))
        else:
            arguments, cut = tool_arguments(response, part)
            tool_use = {"type": "tool_use", "id": part.id, "name": part.name, "input": {} if cut else part.input}
            blocks.append((tool_use, arguments))
    return blocks


def _stop(response: ModelResponse, ctx: ReplyContext) -> tuple[str, str | None]:
    reason = response.raw_stop_reason or _STOP[response.stop_reason]
    sequences = ctx.request.get("stop_sequences") or []
    return reason, (sequences[0] if reason == "stop_sequence" and sequences else None)


def body(response: ModelResponse, ctx: ReplyContext) -> dict[str, Any]:
    """The non-streamed ``message``: content blocks ``thinking`` (with its signature, minted when unscripted
    since the API always signs), ``redacted_thinking``, ``text`` and ``tool_use``; ``stop_reason``; ``usage``
    with the cached tokens split out of ``input_tokens``.

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    reason, sequence = _stop(response, ctx)
    return {
        "id": f"msg_{ctx.token}",
        "type": "message",
        "role": "assistant",
        "model": response.model or ctx.model,
        "content": [block for block, _ in _blocks(response)],
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {**_usage(response.usage), "service_tier": "standard"},
    }


def events(response: ModelResponse, ctx: ReplyContext) -> list[dict[str, Any]]:
    """The streamed events: ``message_start`` (empty content, the input usage), then per block
    ``content_block_start`` / ``content_block_delta`` / ``content_block_stop`` (a ``ping`` after the first
    start, as recorded), ``message_delta`` with ``stop_reason`` and the cumulative usage, ``message_stop``.

    Deltas as recorded: a thinking block starts with ``"signature": ""``, gets ``thinking_delta`` pieces and
    one ``signature_delta`` before its stop; ``redacted_thinking`` arrives whole in its start event; a
    ``tool_use`` block starts with ``"input": {}`` and gets ``input_json_delta`` fragments, the first one
    ``""`` (an empty input gets only that one, as in ``anthropic/thinking-tool-use-stream``).

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    reason, sequence = _stop(response, ctx)
    start = {**body(response, ctx), "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**_usage(response.usage, output_tokens=1), "service_tier": "standard"}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, (block, arguments) in enumerate(_blocks(response)):

        def delta(payload: dict[str, Any], i: int = i) -> None:
            out.append({"type": "content_block_delta", "index": i, "delta": payload})

        kind = block["type"]
        if kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            out.append({"type": "content_block_start", "index": i, "content_block": empty})
            for piece in split(block["thinking"]):
                delta({"type": "thinking_delta", "thinking": piece})
            delta({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "redacted_thinking":
            out.append({"type": "content_block_start", "index": i, "content_block": block})
        elif kind == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            if "citations" in block:
                opening["citations"] = []
            out.append({"type": "content_block_start", "index": i, "content_block": opening})
            for citation in block.get("citations") or ():
                delta({"type": "citations_delta", "citation": citation})
            for piece in split(block["text"]):
                delta({"type": "text_delta", "text": piece})
        elif kind in ("server_tool_use", "mcp_tool_use"):
            # As recorded (anthropic/native-web-search-stream): the input streams as JSON text.
            out.append({"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
            delta({"type": "input_json_delta", "partial_json": ""})
            for piece in split(arguments, 8):
                delta({"type": "input_json_delta", "partial_json": piece})
        elif kind == "compaction":
            # As recorded (anthropic/native-compaction-stream): the summary in one compaction_delta.
            out.append({"type": "content_block_start", "index": i, "content_block": {**block, "content": None}})
            if isinstance(block.get("content"), str):
                delta({"type": "compaction_delta", "content": block["content"]})
        elif kind != "tool_use":  # a server tool result block arrives whole
            out.append({"type": "content_block_start", "index": i, "content_block": block})
        else:
            out.append({"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
            delta({"type": "input_json_delta", "partial_json": ""})
            if arguments != "{}":
                for piece in split(arguments, 8):
                    delta({"type": "input_json_delta", "partial_json": piece})
        if i == 0:
            out.append({"type": "ping"})
        out.append({"type": "content_block_stop", "index": i})
    out.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": _usage(response.usage),
        }
    )
    out.append({"type": "message_stop"})
    return out
