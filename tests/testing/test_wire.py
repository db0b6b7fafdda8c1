"""The fake server's encoders, without a socket: each API's body and events, checked against the official
SDKs' types, against the key structure of the recorded real traffic, and against each other (a stream
reassembled says what the non-streamed body says)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.errors import ContextOverflow, ModelNotFound, Overloaded, RateLimited, UnsupportedContent
from loopctl.message import ImagePart, ImageSource, Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers._common import classify_http_error, parse_retry_after
from loopctl.providers.sse import SSEDecoder
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from loopctl.testing.wire import (
    APIS,
    ErrorReply,
    ReplyContext,
    anthropic,
    encode_error,
    encode_reply,
    error_body,
    fake_signature,
    gemini,
    openai_chat,
    openai_responses,
    split,
    stream_error_frame,
)
from loopctl.testing.wire._common import MAX_PIECES
from tests import strategies as S
from tests.conftest import Recording

CTX = ReplyContext(model="fake-model", token="t1", created=1_700_000_000)
ALL_THINKING = (
    ThinkingPart(text="anthropic thoughts", signature="c2lnLWE=", provider="anthropic"),
    ThinkingPart(text="openai summary", signature="ZW5j", provider="openai", item_id="rs_1"),
    ThinkingPart(text="gemini thought", provider="gemini"),
    ThinkingPart(text="compatible reasoning", provider="openai-compatible"),
    ThinkingPart(text="unsigned, unknown origin"),
)


def reply(*parts: Any, **kw: Any) -> ModelResponse:
    return ModelResponse(Message.new(Role.ASSISTANT, parts), **kw)


def sse_data(body: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    events = decoder.feed(body)
    assert decoder.close() is False
    return [(e.event, e.data) for e in events]


# --- splitting ---------------------------------------------------------------------------------------------


@given(st.text(max_size=300) | st.text(min_size=500, max_size=3000), st.integers(1, 20))
def test_split_joins_back_and_cuts_anything_longer_than_one_character(text: str, size: int) -> None:
    pieces = split(text, size)
    assert "".join(pieces) == text
    assert len(pieces) >= 2 or len(text) < 2
    assert len(pieces) <= MAX_PIECES
    assert all(len(p) <= max(size, -(-len(text) // MAX_PIECES)) for p in pieces)


def test_a_long_text_goes_in_at_most_max_pieces_deltas() -> None:
    # A 10,000-character write_file argument was 1,250 deltas: 12.5 s of the demo's 10 ms delays.
    text = "abcdefghij" * 1000
    pieces = split(text, 8)
    assert len(pieces) == MAX_PIECES == 64
    assert "".join(pieces) == text
    assert {len(p) for p in pieces[:-1]} == {157}
    assert split("x" * 100, 8) == ["x" * 8] * 12 + ["xxxx"]  # short texts keep their piece size


def test_fake_signature_is_deterministic_standard_base64() -> None:
    assert fake_signature("x") == fake_signature("x") != fake_signature("y")
    assert len(fake_signature("x")) == 44 and fake_signature("x").endswith("=")


# --- reassembling streams (test-side decoders, independent of the codecs) ----------------------------------


def chat_from_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    content, refusal, reasoning, calls, finish = "", "", "", {}, None
    for c in chunks:
        for choice in c["choices"]:
            d = choice["delta"]
            content += d.get("content") or ""
            refusal += d.get("refusal") or ""
            reasoning += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                slot["id"] = tc.get("id", slot["id"])
                slot["name"] = tc.get("function", {}).get("name", slot["name"])
                slot["arguments"] += tc["function"].get("arguments", "")
            finish = choice["finish_reason"] or finish
    return {
        "content": content,
        "refusal": refusal,
        "reasoning": reasoning,
        "calls": list(calls.values()),
        "finish": finish,
    }


def chat_from_body(body: dict[str, Any]) -> dict[str, Any]:
    m = body["choices"][0]["message"]
    calls = [{"id": c["id"], **c["function"]} for c in m.get("tool_calls", [])]
    return {
        "content": m["content"] or "",
        "refusal": m["refusal"] or "",
        "reasoning": m.get("reasoning_content", ""),
        "calls": calls,
        "finish": body["choices"][0]["finish_reason"],
    }


def responses_from_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output items rebuilt from the deltas alone."""
    items: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["type"] == "response.output_item.added":
            items[e["output_index"]] = json.loads(json.dumps(e["item"]))
        elif e["type"] == "response.reasoning_summary_part.added":
            items[e["output_index"]]["summary"].append({"type": "summary_text", "text": ""})
        elif e["type"] == "response.reasoning_summary_text.delta":
            items[e["output_index"]]["summary"][e["summary_index"]]["text"] += e["delta"]
        elif e["type"] == "response.content_part.added":
            items[e["output_index"]]["content"].append(e["part"])
        elif e["type"] == "response.output_text.delta":
            items[e["output_index"]]["content"][e["content_index"]]["text"] += e["delta"]
        elif e["type"] == "response.refusal.delta":
            items[e["output_index"]]["content"][e["content_index"]]["refusal"] += e["delta"]
        elif e["type"] == "response.function_call_arguments.delta":
            items[e["output_index"]]["arguments"] += e["delta"]
        elif e["type"] == "response.output_item.done":
            # status and encrypted_content are final only here, as in the recordings
            for key in ("status", "encrypted_content"):
                if key in e["item"]:
                    items[e["output_index"]][key] = e["item"][key]
    return [items[i] for i in sorted(items)]


def anthropic_from_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for e in events:
        if e["type"] == "content_block_start":
            blocks[e["index"]] = dict(e["content_block"])
        elif e["type"] == "content_block_delta":
            d, b = e["delta"], blocks[e["index"]]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                partial[e["index"]] = partial.get(e["index"], "") + d["partial_json"]
        elif e["type"] == "content_block_stop" and e["index"] in partial:
            blocks[e["index"]]["input"] = json.loads(partial[e["index"]] or "{}")
    return [blocks[i] for i in sorted(blocks)]


def gemini_from_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parts joined the way a decoder should: consecutive text pieces of the same kind concatenate."""
    parts: list[dict[str, Any]] = []
    for c in chunks:
        for p in c["candidates"][0]["content"]["parts"]:
            last = parts[-1] if parts else None
            joinable = (
                last is not None
                and "text" in p
                and "text" in last
                and last.get("thought") == p.get("thought")
                and "thoughtSignature" not in last
            )
            if joinable:
                last["text"] += p["text"]
                if "thoughtSignature" in p:
                    last["thoughtSignature"] = p["thoughtSignature"]
            else:
                parts.append(dict(p))
    return parts


@st.composite
def replies(draw: st.DrawFn) -> ModelResponse:
    part = st.one_of(
        S.text_part,
        S.thinking_part(),
        st.builds(ThinkingPart, text=st.just(""), signature=S.nonempty_text, provider=st.just("gemini")),
        st.builds(ToolCallPart, id=S.call_id, name=S.identifier, input=S.json_object),
    )
    parts = [
        p.model_copy(update={"signature": base64.b64encode(p.signature.encode()).decode()})
        if isinstance(p, ThinkingPart) and p.provider == "gemini" and p.signature
        else p
        for p in draw(st.lists(part, max_size=5))
    ]  # Gemini signatures are base64 bytes on the wire (the SDK decodes them)
    usage = Usage(*draw(st.tuples(*[st.integers(0, 10**6)] * 5)))
    stop = draw(st.sampled_from(list(StopReason)))
    return ModelResponse(Message.new(Role.ASSISTANT, parts), usage=usage, stop_reason=stop)


@settings(max_examples=60, deadline=None)
@given(replies())
def test_a_reassembled_stream_says_what_the_json_body_says(response: ModelResponse) -> None:
    ctx = ReplyContext(model="m", request={"include": ["reasoning.encrypted_content"]})
    assert chat_from_chunks(openai_chat.events(response, ctx)) == chat_from_body(openai_chat.body(response, ctx))
    events = openai_responses.events(response, ctx)
    assert responses_from_events(events) == openai_responses.body(response, ctx)["output"]
    assert events[-1]["response"] == openai_responses.body(response, ctx)
    assert anthropic_from_events(anthropic.events(response, ctx)) == anthropic.body(response, ctx)["content"]
    chunks = gemini.events(response, ctx)
    body = gemini.body(response, ctx)
    assert gemini_from_chunks(chunks) == gemini_from_chunks([body])
    assert chunks[-1]["usageMetadata"] == body["usageMetadata"]
    assert chunks[-1]["candidates"][0]["finishReason"] == body["candidates"][0]["finishReason"]


@settings(max_examples=40, deadline=None)
@given(replies())
def test_every_body_and_event_validates_as_the_official_sdk_types(response: ModelResponse) -> None:
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import RawMessageStreamEvent
    from google.genai.types import GenerateContentResponse
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    ctx = ReplyContext(model="m", request={"stream_options": {"include_usage": True}})
    ChatCompletion.model_validate(openai_chat.body(response, ctx))
    for chunk in openai_chat.events(response, ctx):
        ChatCompletionChunk.model_validate(chunk)
    Response.model_validate(openai_responses.body(response, ctx))
    responses_event = TypeAdapter(ResponseStreamEvent)
    for event in openai_responses.events(response, ctx):
        responses_event.validate_python(event)
    AnthropicMessage.model_validate(anthropic.body(response, ctx))
    anthropic_event = TypeAdapter(RawMessageStreamEvent)
    for event in anthropic.events(response, ctx):
        if event["type"] != "ping":  # the SDK skips pings before validating
            anthropic_event.validate_python(event)
    GenerateContentResponse.model_validate(gemini.body(response, ctx))
    for chunk in gemini.events(response, ctx):
        GenerateContentResponse.model_validate(chunk)


# --- fidelity to the recorded traffic ----------------------------------------------------------------------

# Keys the real API sends that the fake server leaves out (telemetry, cache keys, newer or older settings).
IGNORED_MISSING = {
    "obfuscation",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "top_logprobs",
    "completed_at",
    "frequency_penalty",
    "presence_penalty",
    "cache_creation",
    "finishMessage",
    "billing",
    "content_filters",
    "moderation",
    "container",
    "context_management",
}
# Keys the fake server sends that some recordings predate (present in the SDKs' current types).
KNOWN_EXTRA = {"cache_write_tokens", "refusal", "annotations", "logprobs", "service_tier", "usage", "verbosity"}


# Values that are the caller's data, not the API's structure.
USER_DATA = {"args", "input", "parameters", "metadata"}


def key_diff(ours: Any, real: Any, path: str = "") -> list[str]:
    """Keys missing from ``ours`` or invented by it, compared with a recorded object, recursively."""
    problems: list[str] = []
    if path.rsplit(".", 1)[-1] in USER_DATA:
        return problems
    if isinstance(ours, dict) and isinstance(real, dict):
        for k in real.keys() - ours.keys() - IGNORED_MISSING:
            problems.append(f"missing {path}.{k}")
        for k in ours.keys() - real.keys() - KNOWN_EXTRA:
            problems.append(f"extra {path}.{k}")
        for k in ours.keys() & real.keys():
            problems += key_diff(ours[k], real[k], f"{path}.{k}")
    elif isinstance(ours, list) and isinstance(real, list) and ours and real and isinstance(real[0], dict):
        problems += key_diff(ours[0], real[0], f"{path}[0]")
    return problems


def recorded_events(provider: str, name: str) -> list[dict[str, Any]]:
    return [json.loads(data) for _, data in sse_data(Recording(provider, name).response_sse) if data != "[DONE]"]


def kind_of(api: str, event: dict[str, Any]) -> tuple[Any, ...]:
    """What an event is, finely enough that two events of one kind have the same keys."""
    if api == "anthropic":
        inner = event.get("delta", event.get("content_block", {}))
        return (event["type"], inner.get("type"))
    if api == "openai-responses":
        return (event["type"], event.get("item", event.get("part", {})).get("type"))
    if api == "openai-chat":
        if not event["choices"]:
            return ("usage",)
        delta = event["choices"][0]["delta"]
        return ("chunk", tuple(sorted(delta)), "tool_calls" in delta and "id" in delta["tool_calls"][0])
    parts = event["candidates"][0]["content"]["parts"]
    return ("chunk", tuple(sorted(parts[0])), "finishReason" in event["candidates"][0])


THOUGHTFUL = Usage(input_tokens=30, output_tokens=100, reasoning_tokens=60)

FIDELITY_CASES = [
    ("anthropic", "anthropic", "tools-parallel-stream", reply(TextPart(text="I'll look."), ToolCallPart(id="toolu_1", name="t", input={"password": "x"}), ToolCallPart(id="toolu_2", name="t", input={"password": "y"}), stop_reason=StopReason.TOOL_CALL)),
    ("anthropic", "anthropic", "thinking-stream", reply(ThinkingPart(text="hmm", signature="c2ln", provider="anthropic"), TextPart(text="3"))),
    ("anthropic", "anthropic", "redacted-thinking-stream", reply(ThinkingPart(text="", redacted="EqkE", provider="anthropic"), TextPart(text="hi"))),
    ("openai-chat", "openai", "chat-text-stream", reply(TextPart(text="4200 + 42 = 4242"))),
    ("openai-chat", "openai", "chat-tools-parallel-stream", reply(ToolCallPart(id="call_1", name="t", input={"a": 1}), ToolCallPart(id="call_2", name="t", input={"a": 2}), stop_reason=StopReason.TOOL_CALL)),
    ("openai-responses", "openai", "responses-text-stream", reply(TextPart(text="4242"))),
    ("openai-responses", "openai", "responses-tools-parallel-stream", reply(ToolCallPart(id="call_1", name="t", input={"a": 1}), ToolCallPart(id="call_2", name="t", input={"a": 2}))),
    ("openai-responses", "openai", "responses-reasoning-tool-stream", reply(ThinkingPart(text="", signature="gAAA", provider="openai"), ToolCallPart(id="call_1", name="t", input={"a": 1}))),
    ("openai-responses", "openai", "responses-reasoning-summary-stream", reply(ThinkingPart(text="**Exploring**", provider="openai"), TextPart(text="3"))),
    ("gemini", "gemini", "text-stream", reply(TextPart(text="To find the sum, align the numbers."), usage=THOUGHTFUL)),
    ("gemini", "gemini", "tools-parallel-stream", reply(ThinkingPart(text="", signature="CikB", provider="gemini"), ToolCallPart(id="a", name="t", input={"password": "x"}), ToolCallPart(id="b", name="t", input={"password": "y"}), usage=THOUGHTFUL)),
    ("gemini", "gemini", "thinking-stream", reply(ThinkingPart(text="**Analyzing**", provider="gemini"), TextPart(text="3"), usage=Usage(30, 60, reasoning_tokens=60))),
]  # fmt: skip


@pytest.mark.parametrize(("api", "provider", "name", "response"), FIDELITY_CASES, ids=[c[2] for c in FIDELITY_CASES])
def test_streamed_events_have_the_keys_of_the_recorded_events_of_the_same_kind(
    api: Any, provider: str, name: str, response: ModelResponse
) -> None:
    request = Recording(provider, name).request
    ctx = ReplyContext(model="m", request=request)
    module = {
        "anthropic": anthropic,
        "openai-chat": openai_chat,
        "openai-responses": openai_responses,
        "gemini": gemini,
    }[api]
    ours = module.events(response, ctx)
    real = recorded_events(provider, name)
    real_by_kind = {kind_of(api, e): e for e in real}
    ours_by_kind = {kind_of(api, e): e for e in ours}
    matched = ours_by_kind.keys() & real_by_kind.keys()
    assert len(matched) >= min(3, len(real_by_kind)), (
        f"too few event kinds in common: ours {sorted(ours_by_kind)} real {sorted(real_by_kind)}"
    )
    for kind in matched:
        assert key_diff(ours_by_kind[kind], real_by_kind[kind]) == [], kind
    # the recorded event types all appear (pings aside), in the same first-seen order
    real_types = list(dict.fromkeys(e.get("type", "chunk") for e in real if e.get("type") != "ping"))
    our_types = list(dict.fromkeys(e.get("type", "chunk") for e in ours if e.get("type") != "ping"))
    assert our_types == real_types


NON_STREAM_CASES = [
    ("anthropic", "anthropic", "text", reply(TextPart(text="4200 + 42 = 4242"))),
    ("openai-chat", "openai", "chat-text", reply(TextPart(text="4242"))),
    ("openai-chat", "openai", "chat-tools-parallel", reply(ToolCallPart(id="call_1", name="t", input={"a": 1}), stop_reason=StopReason.TOOL_CALL)),
    ("openai-responses", "openai", "responses-text", reply(TextPart(text="4242"))),
    ("openai-responses", "openai", "responses-reasoning-tool", reply(ThinkingPart(text="sum", signature="gAAA", provider="openai"), ToolCallPart(id="call_1", name="t", input={"a": 1}))),
    ("gemini", "gemini", "text", reply(TextPart(text="4242"), usage=THOUGHTFUL)),
    ("gemini", "gemini", "tools-parallel", reply(ThinkingPart(text="", signature="CtIC", provider="gemini"), ToolCallPart(id="a", name="t", input={"p": 1}), usage=THOUGHTFUL)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("api", "provider", "name", "response"), NON_STREAM_CASES, ids=[c[2] for c in NON_STREAM_CASES]
)
def test_json_bodies_have_the_keys_of_the_recorded_bodies(
    api: Any, provider: str, name: str, response: ModelResponse
) -> None:
    recording = Recording(provider, name)
    ctx = ReplyContext(model="m", request=recording.request)
    ours = json.loads(encode_reply(api, response, ctx, stream=False).body)
    assert key_diff(ours, recording.response_json) == []


# --- rules of each API -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "kept"),
    [("anthropic", "anthropic thoughts"), ("openai-responses", "openai summary"), ("gemini", "gemini thought"), ("openai-chat", "compatible reasoning")],
)  # fmt: skip
def test_only_thinking_minted_by_the_endpoints_provider_is_sent(api: Any, kept: str) -> None:
    body = encode_reply(api, reply(*ALL_THINKING, TextPart(text="answer")), CTX, stream=False).body.decode()
    for part in ALL_THINKING:
        assert (part.text in body) == (part.text == kept), part.text
    assert "answer" in body


def test_a_reply_with_an_image_or_a_tool_result_is_refused_as_unsupported_content() -> None:
    image = ImagePart(source=ImageSource(media_type="image/png", data="AAAA"))
    with pytest.raises(UnsupportedContent, match=r"parts\[0\]: .*'image'"):
        encode_reply("anthropic", reply(image), CTX, stream=False)


def test_chat_sends_a_usage_chunk_only_when_the_request_asks_for_it() -> None:
    response = reply(TextPart(text="hi"), usage=Usage(10, 2, cache_read_tokens=4, reasoning_tokens=1))
    plain = openai_chat.events(response, CTX)
    assert all(c["choices"] for c in plain) and all("usage" not in c for c in plain)
    ctx = ReplyContext(model="m", request={"stream_options": {"include_usage": True}})
    asked = openai_chat.events(response, ctx)
    assert asked[-1]["choices"] == [] and all(c["usage"] is None for c in asked[:-1])
    assert asked[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 4
    assert asked[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 1
    assert asked[-1]["usage"]["total_tokens"] == 12


def test_chat_stream_ends_with_the_done_sentinel_after_the_finish_reason() -> None:
    frames = encode_reply("openai-chat", reply(TextPart(text="hi")), CTX, stream=True).pieces
    assert frames[-1] == b"data: [DONE]\n\n"
    assert json.loads(frames[-2][len(b"data: ") :])["choices"][0]["finish_reason"] == "stop"


def test_chat_tool_call_chunks_name_the_call_once_then_carry_only_argument_fragments() -> None:
    calls = [
        ToolCallPart(id="call_a", name="f", input={"x": "long value"}),
        ToolCallPart(id="call_b", name="g", input={}),
    ]
    chunks = openai_chat.events(reply(*calls, stop_reason=StopReason.TOOL_CALL), CTX)
    deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    heads = [d for d in deltas if "id" in d]
    assert [(h["index"], h["id"], h["function"]) for h in heads] == [
        (0, "call_a", {"name": "f", "arguments": ""}),
        (1, "call_b", {"name": "g", "arguments": ""}),
    ]
    fragments = [d["function"]["arguments"] for d in deltas if "id" not in d and d["index"] == 0]
    assert len(fragments) >= 2 and "".join(fragments) == '{"x":"long value"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_chat_refusal_rides_in_the_refusal_field() -> None:
    body = openai_chat.body(reply(TextPart(text="I can't help with that."), stop_reason=StopReason.REFUSAL), CTX)
    message = body["choices"][0]["message"]
    assert message["content"] is None and message["refusal"] == "I can't help with that."


def test_responses_sends_encrypted_content_only_when_included() -> None:
    response = reply(ThinkingPart(text="sum", signature="ENC", provider="openai", item_id="rs_9"), TextPart(text="x"))
    plain = openai_responses.body(response, CTX)["output"][0]
    assert plain == {"id": "rs_9", "type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}]}
    ctx = ReplyContext(model="m", request={"include": ["reasoning.encrypted_content"]})
    assert openai_responses.body(response, ctx)["output"][0]["encrypted_content"] == "ENC"
    unsigned = reply(ThinkingPart(text="sum", provider="openai"))
    assert openai_responses.body(unsigned, ctx)["output"][0]["encrypted_content"] == fake_signature("sum")


def test_responses_function_call_items_carry_the_call_id_and_the_item_id() -> None:
    call = ToolCallPart(id="call_1", name="f", input={"a": 1}, item_id="fc_77")
    item = openai_responses.body(reply(call), CTX)["output"][0]
    assert (item["id"], item["call_id"], item["arguments"], item["status"]) == (
        "fc_77",
        "call_1",
        '{"a":1}',
        "completed",
    )


def test_responses_merges_parts_of_one_item_and_splits_parts_of_different_items() -> None:
    response = reply(
        ThinkingPart(text="one", provider="openai", item_id="rs_1"),
        ThinkingPart(text="two", provider="openai", item_id="rs_1"),
        TextPart(text="a", item_id="msg_1"),
        TextPart(text="b", item_id="msg_2"),
    )
    output = openai_responses.body(response, CTX)["output"]
    assert [(i["id"], len(i.get("summary", i.get("content")))) for i in output] == [
        ("rs_1", 2),
        ("msg_1", 1),
        ("msg_2", 1),
    ]


def test_responses_max_tokens_stop_is_an_incomplete_response() -> None:
    events = openai_responses.events(reply(TextPart(text="cut"), stop_reason=StopReason.MAX_TOKENS), CTX)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["status"] == "incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_responses_refusal_is_refusal_content() -> None:
    events = openai_responses.events(reply(TextPart(text="No."), stop_reason=StopReason.REFUSAL), CTX)
    kinds = [e["type"] for e in events]
    assert "response.refusal.delta" in kinds and "response.output_text.delta" not in kinds
    assert events[-1]["response"]["output"][0]["content"] == [{"type": "refusal", "refusal": "No."}]


def test_anthropic_input_tokens_exclude_the_cached_part() -> None:
    usage = Usage(input_tokens=1000, output_tokens=5, cache_read_tokens=600, cache_write_tokens=300)
    body = anthropic.body(reply(TextPart(text="x"), usage=usage), CTX)
    assert body["usage"] | {} == {
        "input_tokens": 100,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 600,
        "output_tokens": 5,
        "service_tier": "standard",
    }
    events = anthropic.events(reply(TextPart(text="x"), usage=usage), CTX)
    assert events[0]["message"]["usage"]["output_tokens"] == 1
    assert events[-2]["usage"]["output_tokens"] == 5


def test_anthropic_thinking_gets_its_signature_in_one_delta_before_its_stop() -> None:
    events = anthropic.events(reply(ThinkingPart(text="deep thought", signature="SIG", provider="anthropic")), CTX)
    block = [e for e in events if e.get("index") == 0]
    assert block[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert [e["delta"]["type"] for e in block if e["type"] == "content_block_delta"][-1] == "signature_delta"
    assert block[-1]["type"] == "content_block_stop"
    assert block[-2]["delta"] == {"type": "signature_delta", "signature": "SIG"}


def test_anthropic_signs_unsigned_thinking_like_the_api_always_does() -> None:
    body = anthropic.body(reply(ThinkingPart(text="t", provider="anthropic")), CTX)
    assert body["content"][0]["signature"] == fake_signature("t")


def test_anthropic_redacted_thinking_arrives_whole_in_its_start_event() -> None:
    events = anthropic.events(reply(ThinkingPart(text="", redacted="OPAQUE", provider="anthropic")), CTX)
    assert events[1]["content_block"] == {"type": "redacted_thinking", "data": "OPAQUE"}
    assert not [e for e in events if e["type"] == "content_block_delta"]


def test_anthropic_empty_tool_input_gets_one_empty_json_delta() -> None:
    events = anthropic.events(reply(ToolCallPart(id="toolu_1", name="now", input={})), CTX)
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert deltas == [{"type": "input_json_delta", "partial_json": ""}]


def test_anthropic_stop_sequence_names_the_requested_sequence() -> None:
    ctx = ReplyContext(model="m", request={"stop_sequences": ["END"]})
    body = anthropic.body(reply(TextPart(text="x"), stop_reason=StopReason.STOP_SEQUENCE), ctx)
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "END")


def argument_fragments(api: str, events: list[dict[str, Any]]) -> str:
    """The streamed argument text of the first tool call."""
    if api == "openai-chat":
        deltas = [c["choices"][0]["delta"] for c in events if c["choices"]]
        return "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d)
    if api == "openai-responses":
        return "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    return "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")


@pytest.mark.parametrize(
    "module", [openai_chat, openai_responses, anthropic], ids=["openai-chat", "openai-responses", "anthropic"]
)
def test_a_cut_off_tool_call_streams_its_raw_arguments(module: Any) -> None:
    call = ToolCallPart(id="call_1", name="write", input={})
    bad = InvalidToolCall(id="call_1", name="write", arguments='{"path": "a.txt", "content": "hal', error="cut")
    response = ModelResponse(
        Message.new(Role.ASSISTANT, [call]), stop_reason=StopReason.MAX_TOKENS, invalid_tool_calls=(bad,)
    )
    api = module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    assert argument_fragments(api, module.events(response, CTX)) == bad.arguments


def test_a_gemini_call_cut_off_opens_as_streamed_arguments_that_never_finish() -> None:
    whole = ToolCallPart(id="a", name="write", input={"path": "a.txt"})
    cut = ToolCallPart(id="b", name="write", input={})
    bad = InvalidToolCall(id="b", name="write", arguments='{"path": "b.t', error="cut")
    response = ModelResponse(
        Message.new(Role.ASSISTANT, [whole, cut]), stop_reason=StopReason.MAX_TOKENS, invalid_tool_calls=(bad,)
    )
    last = gemini.events(response, CTX)[-1]["candidates"][0]
    assert last["content"]["parts"] == [
        {"functionCall": {"name": "write", "args": {"path": "a.txt"}}},
        {"functionCall": {"name": "write", "willContinue": True}},
    ]
    assert last["finishReason"] == "MAX_TOKENS"
    # A whole (non-streamed) reply carries whole parts only.
    assert gemini.body(response, CTX)["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "write", "args": {"path": "a.txt"}}}
    ]


def test_gemini_signature_goes_on_the_part_after_it_and_a_trailing_one_on_an_empty_text() -> None:
    response = reply(
        ThinkingPart(text="summary", provider="gemini"),
        ThinkingPart(text="", signature="U0lH", provider="gemini"),
        ToolCallPart(id="x", name="f", input={"a": 1}),
        ToolCallPart(id="y", name="f", input={"a": 2}),
        ThinkingPart(text="", signature="TEFTVA==", provider="gemini"),
    )
    parts = gemini.body(response, CTX)["candidates"][0]["content"]["parts"]
    assert parts == [
        {"text": "summary", "thought": True},
        {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "U0lH"},
        {"functionCall": {"name": "f", "args": {"a": 2}}},
        {"text": "", "thoughtSignature": "TEFTVA=="},
    ]


def test_gemini_streams_parallel_calls_whole_in_one_chunk() -> None:
    calls = [ToolCallPart(id="x", name="f", input={"a": 1}), ToolCallPart(id="y", name="g", input={"b": 2})]
    chunks = gemini.events(reply(TextPart(text="Calling both."), *calls), CTX)
    assert [p["functionCall"]["name"] for p in chunks[-1]["candidates"][0]["content"]["parts"]] == ["f", "g"]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])


def test_gemini_usage_reports_thoughts_apart_from_candidates() -> None:
    usage = Usage(input_tokens=30, output_tokens=100, reasoning_tokens=80, cache_read_tokens=10)
    meta = gemini.body(reply(TextPart(text="3"), usage=usage), CTX)["usageMetadata"]
    assert (meta["candidatesTokenCount"], meta["thoughtsTokenCount"], meta["totalTokenCount"]) == (20, 80, 130)
    assert meta["cachedContentTokenCount"] == 10


def test_gemini_stream_framing_is_data_lines_separated_by_crlf_crlf() -> None:
    pieces = encode_reply("gemini", reply(TextPart(text="hello")), CTX, stream=True).pieces
    assert all(p.startswith(b"data: {") and p.endswith(b"}\r\n\r\n") and b"event:" not in p for p in pieces)
    assert b'"parts": [{"text": "he' in pieces[0]  # Gemini's own JSON spacing


@pytest.mark.parametrize("stop", list(StopReason))
def test_each_stop_reason_has_each_apis_word(stop: StopReason) -> None:
    r = reply(TextPart(text="x"), stop_reason=stop)
    words = (
        openai_chat.body(r, CTX)["choices"][0]["finish_reason"],
        openai_responses.body(r, CTX)["status"],
        anthropic.body(r, CTX)["stop_reason"],
        gemini.body(r, CTX)["candidates"][0]["finishReason"],
    )
    expected = {
        StopReason.END_TURN: ("stop", "completed", "end_turn", "STOP"),
        StopReason.TOOL_CALL: ("tool_calls", "completed", "tool_use", "STOP"),
        StopReason.MAX_TOKENS: ("length", "incomplete", "max_tokens", "MAX_TOKENS"),
        StopReason.STOP_SEQUENCE: ("stop", "completed", "stop_sequence", "STOP"),
        StopReason.REFUSAL: ("stop", "completed", "refusal", "SAFETY"),
    }
    assert words == expected[stop]


def test_a_raw_stop_reason_is_sent_as_given() -> None:
    r = reply(TextPart(text="x"), stop_reason=StopReason.END_TURN, raw_stop_reason="pause_turn")
    assert anthropic.body(r, CTX)["stop_reason"] == "pause_turn"


# --- errors ------------------------------------------------------------------------------------------------

RECORDED_ERRORS = [
    ("anthropic", "anthropic", "error-404-not-found"),
    ("anthropic", "anthropic", "error-400-invalid-request"),
    ("openai-chat", "openai", "chat-error-404-model-not-found"),
    ("openai-chat", "openai", "chat-error-400-unsupported-parameter"),
    ("openai-responses", "openai", "responses-error-400-on-stream-request"),
    ("gemini", "gemini", "error-404-on-stream-request"),
]


@pytest.mark.parametrize(("api", "provider", "name"), RECORDED_ERRORS, ids=[c[2] for c in RECORDED_ERRORS])
def test_error_bodies_have_the_shape_of_the_recorded_ones(api: Any, provider: str, name: str) -> None:
    recording = Recording(provider, name)
    status, body = error_body(api, ErrorReply(status=recording.meta["status"]))
    assert status == recording.meta["status"]
    assert key_diff(body, recording.response_json) == []


@pytest.mark.parametrize("api", APIS)
def test_a_rate_limit_is_429_with_the_providers_hint_and_classifies_as_rate_limited(api: Any) -> None:
    encoded = encode_error(api, ErrorReply.rate_limited(retry_after=2.5), model="m")
    assert encoded.status == 429
    body = json.loads(encoded.body)
    headers = dict(encoded.headers)
    if api == "gemini":
        assert body["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert body["error"]["details"] == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"}]
        assert "retry-after" not in headers
    else:
        assert parse_retry_after(headers) == 2.5
    error = body["error"]
    kind = error.get("status") or error["type"]
    assert isinstance(classify_http_error(api, 429, message=error["message"], error_type=kind), RateLimited)


@pytest.mark.parametrize(("api", "status", "kind"), [("anthropic", 529, "overloaded_error"), ("openai-chat", 503, "server_error"), ("openai-responses", 503, "server_error"), ("gemini", 503, "UNAVAILABLE")])  # fmt: skip
def test_an_overload_is_anthropics_529_and_a_503_elsewhere(api: Any, status: int, kind: str) -> None:
    got_status, body = error_body(api, ErrorReply.overloaded())
    error = body["error"]
    assert (got_status, error.get("status") or error["type"]) == (status, kind)
    assert isinstance(classify_http_error(api, status, message=error["message"], error_type=kind), Overloaded)


@pytest.mark.parametrize("api", APIS)
def test_a_context_overflow_reads_as_one_in_each_providers_words(api: Any) -> None:
    status, body = error_body(api, ErrorReply.context_overflow())
    error = body["error"]
    code = error.get("code") if isinstance(error.get("code"), str) else None
    assert isinstance(classify_http_error(api, status, message=error["message"], error_type=code), ContextOverflow)


def test_a_404_names_the_model_and_classifies_as_model_not_found() -> None:
    status, body = error_body("anthropic", ErrorReply(status=404), model="claude-x")
    assert body["error"] == {"type": "not_found_error", "message": "The model claude-x does not exist."}
    assert isinstance(classify_http_error("anthropic", status, message="", error_type="not_found_error"), ModelNotFound)


def test_an_explicit_body_and_headers_are_sent_as_given() -> None:
    encoded = encode_error("openai-chat", ErrorReply(status=418, body=b"teapot", headers={"x-a": "1"}))
    assert (encoded.status, encoded.body, encoded.headers) == (418, b"teapot", (("x-a", "1"),))


def test_an_error_on_a_gemini_stream_request_is_json_labelled_as_an_event_stream() -> None:
    assert encode_error("gemini", ErrorReply(status=404), stream=True).content_type == "text/event-stream"
    assert encode_error("anthropic", ErrorReply(status=404), stream=True).content_type == "application/json"


def test_mid_stream_error_frames_follow_each_apis_format() -> None:
    from openai.types.responses import ResponseErrorEvent

    error = ErrorReply.overloaded()
    frame: Callable[..., bytes] = stream_error_frame
    [(event, data)] = sse_data(frame("anthropic", error))
    assert event == "error"
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": error_body("anthropic", error)[1]["error"]["message"]},
    }
    [(event, data)] = sse_data(frame("openai-responses", error, sequence_number=7))
    assert event == "error" and ResponseErrorEvent.model_validate_json(data).sequence_number == 7
    [(event, data)] = sse_data(frame("openai-chat", error))
    assert event == "message" and json.loads(data)["error"]["type"] == "server_error"
    assert frame("gemini", error).endswith(b"\r\n\r\n")
