"""Property tests for the OpenAI Responses codec.

- Every valid conversation builds a body that validates strictly against openai-python's
  ``ResponseCreateParams`` TypedDicts and keeps the API's invariants (calls and outputs paired one to one,
  each reasoning item followed by its item, only this provider's reasoning replayed, safe call ids).
- A generated reply parses to a message that rebuilds into the very items it came from.
- A generated reply streamed as events decodes, however the bytes are split, to what the non-streamed
  reply parses to.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart, ToolCallPart, check_conversation
from loopctl.providers import openai_responses as codec
from loopctl.providers.base import ConversionCache
from tests.providers.responses_wire import validate_with_sdk
from tests.strategies import conversations, json_object, short_text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def responses_conversations(draw: st.DrawFn) -> list[Message]:
    """Valid conversations whose assistant text and tool calls sometimes carry Responses item ids (as replies
    decoded by this codec do), so reasoning items meet their following items."""
    out: list[Message] = []
    for m, message in enumerate(draw(conversations())):
        if message.role is not Role.ASSISTANT:
            out.append(message)
            continue
        parts: list[MessagePart] = []
        for k, part in enumerate(message.parts):
            if isinstance(part, (TextPart, ToolCallPart)) and draw(st.integers(0, 3)) > 0:
                prefix = "msg" if isinstance(part, TextPart) else "fc"
                part = part.model_copy(update={"item_id": f"{prefix}_{m}_{k}"})
            parts.append(part)
        out.append(Message.new(Role.ASSISTANT, parts))
    return out


@SETTINGS
@given(responses_conversations(), st.booleans(), st.booleans(), st.sampled_from([None, True, False]))
def test_valid_conversations_build_bodies_the_sdk_type_accepts(
    conversation: list[Message], stream: bool, as_instructions: bool, store: bool | None
) -> None:
    assert check_conversation(conversation) == []
    body = codec.build_request(
        conversation,
        model="gpt-5",
        system="You are terse.",
        system_as_instructions=as_instructions,
        stream=stream,
        store=store,
        reasoning_effort="low",
    )
    validate_with_sdk(body)
    items: list[dict[str, Any]] = body["input"]

    # Calls and outputs pair one to one, each output after its call.
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert len(set(calls)) == len(calls)
    assert sorted(outputs) == sorted(calls)
    for n, item in enumerate(items):
        if item.get("type") == "function_call_output":
            assert any(i.get("type") == "function_call" and i["call_id"] == item["call_id"] for i in items[:n])
        if "call_id" in item:
            assert len(item["call_id"]) <= 64
            assert item["call_id"].isascii()

    # Each reasoning item is this provider's and is followed by its item, which carries an id.
    ours = {
        (p.item_id, p.signature)
        for m in conversation
        for p in m.parts
        if isinstance(p, ThinkingPart) and p.provider == "openai" and p.item_id is not None
    }
    for n, item in enumerate(items):
        if item.get("type") == "reasoning":
            assert any(item["id"] == i for i, _ in ours)
            if "encrypted_content" in item:
                assert (item["id"], item["encrypted_content"]) in ours
            elif store is False:
                raise AssertionError("a reasoning item without encrypted content was sent with store=false")
            following = items[n + 1]
            assert following.get("type") in ("function_call", "message")
            assert "id" in following

    # (Foreign signatures cannot travel: every encrypted_content sent was checked above to be this
    # provider's.) Easy messages are never empty.
    for item in items:
        if "role" in item and "type" not in item:
            assert item["content"] != ""


@SETTINGS
@given(responses_conversations(), responses_conversations())
def test_the_body_is_the_same_with_and_without_a_cache(first: list[Message], more: list[Message]) -> None:
    cache = ConversionCache()
    for conversation in (first, first + more, more):
        plain = codec.build_request(conversation, model="m", system="s")
        cached = codec.build_request(conversation, model="m", system="s", cache=cache)
        assert cached == plain


# --- generated replies ---------------------------------------------------------------------------------------

ids = st.integers(0, 10**12).map(lambda n: f"{n:016x}")
summary_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)


@st.composite
def output_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A reply's ``output``: reasoning items (each followed by a message or a call), messages, calls."""
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            item: dict[str, Any] = {
                "id": f"rs_{draw(ids)}{n}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": t} for t in draw(st.lists(summary_text, max_size=3))],
            }
            if draw(st.booleans()):
                item["encrypted_content"] = draw(st.text("abcdefgAB0123456789-_=", min_size=1, max_size=60))
            out.append(item)
        if draw(st.booleans()):
            texts = draw(st.lists(short_text, min_size=1, max_size=2))
            out.append(
                {
                    "id": f"msg_{draw(ids)}{n}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
                }
            )
        else:
            out.append(
                {
                    "id": f"fc_{draw(ids)}{n}",
                    "type": "function_call",
                    "call_id": f"call_{draw(ids)}{n}",
                    "name": "tool",
                    "arguments": orjson.dumps(draw(json_object)).decode(),
                }
            )
    return out


def _reply(output: list[dict[str, Any]]) -> dict[str, Any]:
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 1},
    }
    return {"id": "resp_x", "model": "gpt-5", "status": "completed", "error": None, "output": output, "usage": usage}


@SETTINGS
@given(output_items())
def test_a_parsed_reply_rebuilds_into_the_items_it_came_from(output: list[dict[str, Any]]) -> None:
    message = codec.parse_response(_reply(output)).message
    assert all(p.provider == "openai" for p in message.parts if isinstance(p, ThinkingPart))
    body = codec.build_request([Message.user("go"), message], model="gpt-5")
    validate_with_sdk(body)
    assert body["input"][1:] == output


# --- generated streams ------------------------------------------------------------------------------------------


def _events(output: list[dict[str, Any]], rng: st.DataObject) -> list[dict[str, Any]]:
    """The events the API sends for ``output`` (deltas cut at drawn places)."""

    def pieces(text: str) -> list[str]:
        cuts = sorted(rng.draw(st.lists(st.integers(0, len(text)), max_size=3)))
        bounds = [0, *cuts, len(text)]
        return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]

    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_x", "model": "gpt-5", "status": "in_progress"}}
    ]
    for n, item in enumerate(output):
        kind = item["type"]
        added = (
            {**item, "summary": []}
            if kind == "reasoning"
            else {**item, "content": []}
            if kind == "message"
            else {**item, "arguments": ""}
        )
        if kind == "reasoning":
            added["encrypted_content"] = "incomplete"  # the value in .added is not the final one
        events.append({"type": "response.output_item.added", "output_index": n, "item": added})
        if kind == "reasoning":
            for s, summary in enumerate(item["summary"]):
                events.append(
                    {
                        "type": "response.reasoning_summary_part.added",
                        "output_index": n,
                        "summary_index": s,
                        "item_id": item["id"],
                    }
                )
                for piece in pieces(summary["text"]):
                    events.append(
                        {
                            "type": "response.reasoning_summary_text.delta",
                            "output_index": n,
                            "summary_index": s,
                            "delta": piece,
                        }
                    )
        elif kind == "message":
            for c, content in enumerate(item["content"]):
                events.append(
                    {
                        "type": "response.content_part.added",
                        "output_index": n,
                        "content_index": c,
                        "part": {"type": "output_text", "text": ""},
                    }
                )
                for piece in pieces(content["text"]):
                    events.append(
                        {
                            "type": "response.output_text.delta",
                            "output_index": n,
                            "content_index": c,
                            "delta": piece,
                            "obfuscation": "zz",
                        }
                    )
                events.append(
                    {
                        "type": "response.output_text.done",
                        "output_index": n,
                        "content_index": c,
                        "text": content["text"],
                    }
                )
        else:
            for piece in pieces(item["arguments"]):
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "output_index": n,
                        "item_id": item["id"],
                        "delta": piece,
                    }
                )
            events.append(
                {"type": "response.function_call_arguments.done", "output_index": n, "arguments": item["arguments"]}
            )
        events.append({"type": "response.output_item.done", "output_index": n, "item": item})
    events.append({"type": "response.completed", "response": _reply(output)})
    for k, e in enumerate(events):
        e["sequence_number"] = k
    return events


@SETTINGS
@given(output_items(), st.data())
def test_a_streamed_reply_decodes_like_the_reply_however_it_is_split(
    output: list[dict[str, Any]], data: st.DataObject
) -> None:
    events = _events(output, data)
    raw = "".join(f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events).encode()
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=12))))
    bounds = [0, *cuts, len(raw)]
    chunks = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    streamed = codec.parse_stream(chunks)
    assert streamed == codec.parse_response(_reply(output))
    assert streamed.message.role is Role.ASSISTANT
    assert all(p.item_id is not None for p in streamed.message.parts if isinstance(p, TextPart))
