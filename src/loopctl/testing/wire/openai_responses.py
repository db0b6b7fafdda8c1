"""OpenAI Responses replies: the ``response`` object and its ``response.*`` event stream.

Shapes from the API reference (https://platform.openai.com/docs/api-reference/responses and
.../responses-streaming) and the recordings ``openai/responses-*`` (see
``tests/fixtures/provider-traffic/INDEX.md``). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopctl.message import (
    CompactionPart,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
)
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing.wire._common import (
    Counts,
    ReplyContext,
    ReplyPart,
    counted,
    fake_signature,
    reply_parts,
    split,
    tool_arguments,
)

__all__ = ["body", "events"]


def _usage(reported: Usage | Counts) -> dict[str, Any]:
    usage = counted(reported)
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _items(response: ModelResponse, ctx: ReplyContext) -> list[dict[str, Any]]:
    """The output items, in part order.

    Consecutive thinking parts with the same ``item_id`` form one ``reasoning`` item (one summary each);
    consecutive text parts with the same ``item_id`` form one ``message`` item (one ``output_text`` each, or
    ``refusal`` content for a ``REFUSAL`` stop); a tool call is a ``function_call`` item whose ``call_id`` is
    the part's id and whose ``id`` its ``item_id``. ``encrypted_content`` is written only when the request's
    ``include`` lists ``reasoning.encrypted_content`` (the API's rule), minted when unscripted.
    """
    include = ctx.request.get("include") or ()
    encrypted = "reasoning.encrypted_content" in include
    refused = response.stop_reason is StopReason.REFUSAL
    items: list[dict[str, Any]] = []
    last: ReplyPart | None = None
    for n, part in enumerate(reply_parts("openai-responses", response.message)):
        joins = (
            isinstance(last, (TextPart, ThinkingPart))
            and type(last) is type(part)
            and last.item_id == getattr(part, "item_id", None)
        )
        if isinstance(part, (ServerToolCallPart, ServerToolResultPart, CompactionPart)):
            # A provider-run tool's item holds its result: the call's raw item is the item; a result with no
            # item of its own (raw None) is carried by it.
            if part.raw is not None:
                items.append(dict(part.raw))
            last = part
            continue
        if isinstance(part, ThinkingPart):
            if not joins:
                items.append({"id": part.item_id or f"rs_{ctx.token}_{n}", "type": "reasoning", "summary": []})
            if part.text:
                items[-1]["summary"].append({"type": "summary_text", "text": part.text})
            if encrypted:
                items[-1]["encrypted_content"] = part.signature or fake_signature(part.text)
        elif isinstance(part, TextPart):
            if not joins:
                message_id = part.item_id or f"msg_{ctx.token}_{n}"
                items.append(
                    {"id": message_id, "type": "message", "status": "completed", "role": "assistant", "content": []}
                )
            annotations = list(part.citations) if part.citations is not None else []
            content = (
                {"type": "refusal", "refusal": part.text}
                if refused
                else {"type": "output_text", "text": part.text, "annotations": annotations, "logprobs": []}
            )
            items[-1]["content"].append(content)
        else:
            arguments, cut = tool_arguments(response, part)
            items.append(
                {
                    "id": part.item_id or f"fc_{ctx.token}_{n}",
                    "type": "function_call",
                    "status": "incomplete" if cut else "completed",
                    "arguments": arguments,
                    "call_id": part.id,
                    "name": part.name,
                }
            )
        last = part
    return items


def _tools(request: Mapping[str, Any]) -> list[Any]:
    # The API echoes the tools with their defaults filled in (strict is true unless the request said not).
    return [
        {"description": None, "strict": True, **t} if isinstance(t, Mapping) and t.get("type") == "function" else t
        for t in request.get("tools") or []
    ]


def body(
    response: ModelResponse, ctx: ReplyContext, *, output: list[dict[str, Any]] | None = None, final: bool = True
) -> dict[str, Any]:
    """The ``response`` object, echoing the request's settings as the API does. A ``MAX_TOKENS`` stop gives
    ``status: "incomplete"`` and ``incomplete_details.reason = "max_output_tokens"``. ``final=False`` gives
    the ``in_progress`` shell that ``response.created`` carries (no output, no usage).

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).  output replaces the output items built from response (the stream
    builds them as it goes).
    """
    req = ctx.request
    incomplete = final and response.stop_reason is StopReason.MAX_TOKENS
    reasoning = req.get("reasoning")
    settings: Mapping[str, Any] = reasoning if isinstance(reasoning, Mapping) else {}
    if not final:
        status = "in_progress"
    else:
        status = "incomplete" if incomplete else "completed"
    return {
        "id": f"resp_{ctx.token}",
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": response.raw_stop_reason or "max_output_tokens"} if incomplete else None,
        "instructions": req.get("instructions"),
        "max_output_tokens": req.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": response.model or ctx.model,
        "output": (_items(response, ctx) if output is None else output) if final else [],
        "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "previous_response_id": req.get("previous_response_id"),
        "reasoning": {"effort": settings.get("effort"), "summary": settings.get("summary")},
        "service_tier": "default",
        "store": req.get("store", True),
        "temperature": req.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": req.get("tool_choice", "auto"),
        "tools": _tools(req),
        "top_p": req.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": _usage(response.usage) if final else None,
        "user": None,
        "metadata": {},
    }


def events(response: ModelResponse, ctx: ReplyContext) -> list[dict[str, Any]]:
    """The streamed events, each with its ``type`` and ``sequence_number``, in the recorded order:
    ``response.created``, ``response.in_progress``; per item ``response.output_item.added``, its part and
    delta events (``reasoning_summary_part.*`` and ``reasoning_summary_text.*``; ``content_part.*`` and
    ``output_text.*`` or ``refusal.*``; ``function_call_arguments.*``) and ``response.output_item.done``;
    then ``response.completed`` (``response.incomplete`` for a ``MAX_TOKENS`` stop) with the usage.

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    items = _items(response, ctx)
    out: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        out.append({"type": kind, "sequence_number": len(out), **fields})

    emit("response.created", response=body(response, ctx, final=False))
    emit("response.in_progress", response=body(response, ctx, final=False))
    for index, item in enumerate(items):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            emit("response.output_item.added", output_index=index, item={**item, "summary": []})
            for s, summary in enumerate(item["summary"]):
                emit("response.reasoning_summary_part.added", **at, summary_index=s, part={**summary, "text": ""})
                for piece in split(summary["text"]):
                    emit("response.reasoning_summary_text.delta", **at, summary_index=s, delta=piece)
                emit("response.reasoning_summary_text.done", **at, summary_index=s, text=summary["text"])
                emit("response.reasoning_summary_part.done", **at, summary_index=s, part=summary)
        elif item["type"] == "message":
            emit(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            for c, content in enumerate(item["content"]):
                key = "refusal" if content["type"] == "refusal" else "text"
                prefix = "response.refusal" if key == "refusal" else "response.output_text"
                extra: dict[str, Any] = {} if key == "refusal" else {"logprobs": []}
                emit("response.content_part.added", **at, content_index=c, part={**content, key: ""})
                for piece in split(content[key]):
                    emit(f"{prefix}.delta", **at, content_index=c, delta=piece, **extra)
                emit(f"{prefix}.done", **at, content_index=c, **{key: content[key]}, **extra)
                emit("response.content_part.done", **at, content_index=c, part=content)
        elif item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in split(item["arguments"], 8):
                emit("response.function_call_arguments.delta", **at, delta=piece)
            emit("response.function_call_arguments.done", **at, arguments=item["arguments"])
        else:  # a provider-run tool's item (or a compaction): added in progress, its results at done
            added = {k: v for k, v in item.items() if k in ("id", "type", "server_label", "name")}
            emit("response.output_item.added", output_index=index, item={**added, "status": "in_progress"})
        emit("response.output_item.done", output_index=index, item=item)
    final = body(response, ctx, output=items)
    emit("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)
    return out
