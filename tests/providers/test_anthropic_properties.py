"""Property tests for the Anthropic Messages codec.

For generated valid conversations (``tests.strategies.conversations``: every provider's thinking, split
tool results, system messages mid-conversation, images), ``build_request`` must return a body that:

- validates strictly against the official SDK's request type, ``anthropic.types.MessageCreateParams``
  (a pydantic ``TypeAdapter``, strict; unknown keys refused at every level; each content block checked
  against the SDK's request block types only, since the SDK's content union also admits its response
  models);
- keeps the API's invariants: roles alternate, no empty content list, no empty or blank text anywhere,
  tool results open their user message and pair one-to-one with the previous message's ``tool_use``
  blocks, ids match ``^[a-zA-Z0-9_-]+$``, at most four cache breakpoints and none on thinking, thinking
  only at the start of an assistant message and only Anthropic's own signed or redacted blocks;
- is the same with and without a ``ConversionCache``.

The stream decoder must give the same reply however the bytes are split, and read back any reply encoded
as an event stream.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Iterator
from typing import Any, Union, get_args

import anthropic.types
import anthropic.types.message_content_param as content_param
import orjson
import pytest
import typing_extensions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, TypeAdapter

from loopctl.errors import UnsupportedContent
from loopctl.message import (
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    check_conversation,
)
from loopctl.providers.anthropic import StreamDecoder, build_request, parse_stream
from loopctl.providers.base import ConversionCache
from loopctl.tool import ForceTool, ToolSchema
from tests import strategies
from tests.conftest import Recording, recordings


def _forbid_unknown_keys() -> None:
    """Make every SDK request TypedDict refuse unknown keys (pydantic's TypedDict default ignores them).

    The SDK never validates its TypedDicts at run time, so this only tightens what this test checks;
    types that set their own pydantic config (``InputSchemaTyped`` allows extra keys on purpose) keep it.
    """
    for name, module in list(sys.modules.items()):
        if not name.startswith("anthropic.types") or name.startswith("anthropic.types.beta"):
            continue
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and typing_extensions.is_typeddict(obj)
                and "__pydantic_config__" not in obj.__dict__
            ):
                obj.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]


_forbid_unknown_keys()
PARAMS = TypeAdapter(anthropic.types.MessageCreateParams, config=ConfigDict(strict=True, extra="forbid"))
# The request block types of MessageContentParam, without the response models (``ContentBlock``) the SDK
# also admits there.
_block_union = get_args(get_args(get_args(content_param.MessageContentParam)[1])[0])
BLOCK = TypeAdapter(Union[tuple(t for t in _block_union if t is not anthropic.types.ContentBlock)])  # type: ignore[misc]
ID = re.compile(r"^[a-zA-Z0-9_-]+$")
THINKING = ("thinking", "redacted_thinking")


def _consume(value: Any) -> Any:
    """pydantic validates ``Iterable[...]`` fields lazily: walk the result so every item is validated."""
    if isinstance(value, Iterator):
        return [_consume(v) for v in value]
    if isinstance(value, dict):
        return {k: _consume(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_consume(v) for v in value]
    return value


def validate_with_sdk(body: dict[str, Any]) -> None:
    _consume(PARAMS.validate_python(body, strict=True))
    for message in body["messages"]:
        for block in message["content"]:
            _consume(BLOCK.validate_python(block, strict=True))


def _object_inputs(conversation: list[Message]) -> list[Message]:
    """Anthropic's ``tool_use.input`` is an object; the shared generator also draws scalars and arrays,
    which the codec refuses with UnsupportedContent (tested on its own). Wrap those here."""
    out = []
    for m in conversation:
        parts: list[MessagePart] = []
        for p in m.parts:
            if isinstance(p, ToolCallPart) and not isinstance(p.input, dict):
                p = p.model_copy(update={"input": {"value": p.input}})
            parts.append(p)
        out.append(Message.new(m.role, parts))
    return out


conversations = strategies.conversations().map(_object_inputs)
tool_schemas = st.lists(
    st.builds(
        ToolSchema,
        name=strategies.identifier,
        description=st.one_of(st.just(""), strategies.short_text),
        input_schema=st.just({"type": "object", "properties": {"x": {"type": "string"}}}),
    ),
    max_size=3,
    unique_by=lambda t: t.name,
)
options = st.fixed_dictionaries(
    {
        "system": st.one_of(st.none(), st.just(""), strategies.text),
        "max_tokens": st.one_of(st.none(), st.integers(1, 40000)),
        "reasoning_effort": st.sampled_from([None, "minimal", "low", "medium", "high"]),
        "prompt_cache": st.booleans(),
        "stream": st.booleans(),
        "stop": st.one_of(st.none(), st.lists(strategies.nonempty_text, max_size=2)),
        "choice": st.sampled_from([None, "auto", "none", "required", "force"]),
    }
)


def _build(
    conversation: list[Message], tools: list[ToolSchema], opts: dict[str, Any], cache: ConversionCache | None = None
) -> dict[str, Any]:
    choice = opts["choice"]
    if choice == "force":
        choice = ForceTool(tools[0].name) if tools else "auto"
    return build_request(
        conversation,
        model="claude-sonnet-4-5",
        system=opts["system"],
        tools=tools,
        max_tokens=opts["max_tokens"],
        stop=opts["stop"],
        tool_choice=choice,
        reasoning_effort=opts["reasoning_effort"],
        stream=opts["stream"],
        prompt_cache=opts["prompt_cache"],
        cache=cache,
    )


def _blank(text: str) -> bool:
    return not text.strip()


def check_invariants(body: dict[str, Any], conversation: list[Message]) -> None:
    messages = body["messages"]
    roles = [m["role"] for m in messages]
    assert all(r in ("user", "assistant") for r in roles), roles
    assert all(a != b for a, b in itertools.pairwise(roles)), f"roles do not alternate: {roles}"
    for block in body.get("system", []):
        assert not _blank(block["text"])

    anthropic_payloads = {
        p.signature if p.redacted is None else p.redacted
        for m in conversation
        for p in m.parts
        if isinstance(p, ThinkingPart) and p.provider == "anthropic"
    }
    breakpoints = sum("cache_control" in t for t in body.get("tools", []))
    breakpoints += sum("cache_control" in b for b in body.get("system", []))
    for mi, message in enumerate(messages):
        content = message["content"]
        assert content, f"messages[{mi}] has an empty content list"
        kinds = [b["type"] for b in content]
        for bi, block in enumerate(content):
            if "cache_control" in block:
                breakpoints += 1
                assert block["type"] not in THINKING
                assert not (block["type"] == "tool_result" and "content" not in block)
            if block["type"] == "text":
                assert not _blank(block["text"]), f"blank text at messages[{mi}].content[{bi}]"
            elif block["type"] == "tool_use":
                assert ID.match(block["id"]), block["id"]
                assert isinstance(block["input"], dict)
            elif block["type"] == "tool_result":
                assert ID.match(block["tool_use_id"])
                inner = block.get("content")
                if isinstance(inner, str):
                    assert not _blank(inner)
                elif inner is not None:
                    assert inner
                    assert all(not _blank(b["text"]) for b in inner if b["type"] == "text")
            elif block["type"] in THINKING:
                assert message["role"] == "assistant"
                assert all(k in THINKING for k in kinds[:bi]), f"thinking after other content: {kinds}"
                assert (block.get("signature") or block.get("data")) in anthropic_payloads
        if message["role"] == "user":
            n_results = sum(k == "tool_result" for k in kinds)
            assert all(k == "tool_result" for k in kinds[:n_results]), f"tool results not first: {kinds}"
            ids = [b["tool_use_id"] for b in content if b["type"] == "tool_result"]
            if ids:
                assert mi > 0
                asked = [b["id"] for b in messages[mi - 1]["content"] if b["type"] == "tool_use"]
                assert sorted(ids) == sorted(asked), f"messages[{mi}] answers {ids}, asked {asked}"
        else:
            asked = [b["id"] for b in content if b["type"] == "tool_use"]
            if asked and mi + 1 < len(messages):
                answered = [b["tool_use_id"] for b in messages[mi + 1]["content"] if b["type"] == "tool_result"]
                assert sorted(answered) == sorted(asked)
    assert breakpoints <= 4

    thinking = body.get("thinking")
    if thinking is not None:
        assert 1024 <= thinking["budget_tokens"] < body["max_tokens"]
        assert "temperature" not in body
    if body.get("tool_choice", {}).get("type") in ("any", "tool"):
        assert thinking is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(conversation=conversations, tools=tool_schemas, opts=options)
def test_built_bodies_validate_against_the_sdk_and_keep_the_invariants(
    conversation: list[Message], tools: list[ToolSchema], opts: dict[str, Any]
) -> None:
    assert check_conversation(conversation) == []
    body = _build(conversation, tools, opts)
    validate_with_sdk(body)
    check_invariants(body, conversation)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(conversation=conversations, tools=tool_schemas, opts=options)
def test_body_is_identical_with_and_without_a_conversion_cache(
    conversation: list[Message], tools: list[ToolSchema], opts: dict[str, Any]
) -> None:
    def outcome(messages: list[Message], cache: ConversionCache | None = None) -> bytes | str:
        try:
            return orjson.dumps(_build(messages, tools, opts, cache))
        except UnsupportedContent as exc:  # the same error either way (say, nothing to send)
            return str(exc)

    plain = outcome(conversation)
    cache = ConversionCache()
    assert outcome(conversation, cache) == plain
    assert outcome(conversation, cache) == plain  # warm
    assert outcome(conversation[:-1], cache) == outcome(conversation[:-1])


@settings(max_examples=50, deadline=None)
@given(conversation=strategies.conversations(images=False))
def test_tool_input_that_is_not_an_object_is_refused_not_sent(conversation: list[Message]) -> None:
    scalar = any(isinstance(p, ToolCallPart) and not isinstance(p.input, dict) for m in conversation for p in m.parts)
    if scalar:
        with pytest.raises(UnsupportedContent, match=r"\.input: Anthropic tool_use input must be a JSON object"):
            build_request(conversation, model="m")
    else:
        check_invariants(build_request(conversation, model="m"), conversation)


# --- stream decoder -----------------------------------------------------------------------------------------

STREAMS = [n for n in recordings("anthropic") if Recording("anthropic", n).has("response.sse")]
WHOLE = {n: parse_stream([Recording("anthropic", n).response_sse]) for n in STREAMS}


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(STREAMS), cuts=st.lists(st.floats(0, 1), max_size=12))
def test_any_split_of_a_recorded_stream_decodes_the_same(name: str, cuts: list[float]) -> None:
    data = Recording("anthropic", name).response_sse
    points = sorted({int(c * len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert parse_stream(chunks) == WHOLE[name]


def _pieces(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=4))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@st.composite
def encoded_replies(draw: st.DrawFn) -> tuple[Message, bytes]:
    """A reply Anthropic could send, and its event stream (deltas cut at random, pings sprinkled)."""
    parts: list[MessagePart] = []
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"id": "msg_x", "model": "claude-x", "usage": {"input_tokens": 3, "output_tokens": 1}},
        }
    ]
    n_thinking = draw(st.integers(0, 2))
    for i in range(n_thinking + draw(st.integers(0, 3))):
        index = len(parts)
        if i < n_thinking:
            if draw(st.booleans()):
                data = draw(strategies.nonempty_text)
                parts.append(ThinkingPart(text="", redacted=data, provider="anthropic"))
                events.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "redacted_thinking", "data": data},
                    }
                )
            else:
                text, sig = draw(strategies.text), draw(strategies.nonempty_text)
                parts.append(ThinkingPart(text=text, signature=sig, provider="anthropic"))
                events.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                    }
                )
                events += [
                    {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": p}}
                    for p in _pieces(draw, text)
                ]
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": sig},
                    }
                )
        elif draw(st.booleans()):
            text = draw(strategies.text)
            parts.append(TextPart(text=text))
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            events += [
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}
                for p in _pieces(draw, text)
            ]
        else:
            value = draw(strategies.json_object)
            call_id = f"toolu_{index}"
            parts.append(ToolCallPart(id=call_id, name="f", input=value))
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": "f", "input": {}},
                }
            )
            args = orjson.dumps(value).decode()
            events += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": p},
                }
                for p in ["", *_pieces(draw, args)]
            ]
        events.append({"type": "content_block_stop", "index": index})
        if draw(st.booleans()):
            events.append({"type": "ping"})
    stop = "tool_use" if any(isinstance(p, ToolCallPart) for p in parts) else "end_turn"
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 42}}
    )
    events.append({"type": "message_stop"})
    body = b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), orjson.dumps(e)) for e in events)
    return Message.new(Role.ASSISTANT, parts), body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=encoded_replies(), cut=st.integers(1, 64))
def test_decoder_reads_back_any_encoded_reply(reply: tuple[Message, bytes], cut: int) -> None:
    message, body = reply
    decoder = StreamDecoder()
    for i in range(0, len(body), cut):
        decoder.feed(body[i : i + cut])
    response = decoder.finish()
    assert response.message == message
    assert response.usage.output_tokens == 42
    assert response.id == "msg_x"
