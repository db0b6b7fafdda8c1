"""Property tests: every valid conversation gives a body the official SDK accepts, and Gemini's invariants hold;
every reply's signatures go back on the parts they came on.

What the SDK check does: google-genai has no TypedDict for the REST body, but its pydantic models
(``types.Content``, ``types.Tool``, ``types.ToolConfig``, ``types.GenerationConfig``) are the REST shapes with
camelCase aliases (``alias_generator=to_camel``) and ``extra="forbid"``. Each key of our body is validated
from JSON with ``strict=True`` against the model of that REST field, so a misspelled or snake_case key, an
unknown field, a wrong JSON type, or bytes (``thoughtSignature``, ``inlineData.data``) that are not base64 all
fail. The body may hold no key besides those five.
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

import orjson
from google.genai import types
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from loopctl.message import Message, Role, ThinkingPart, ToolResultPart, check_conversation
from loopctl.providers import ConversionCache, gemini
from loopctl.tool import ForceTool, ToolSchema
from tests.strategies import conversations, identifier, json_object, nonempty_text

_SDK: dict[str, TypeAdapter[Any]] = {
    "contents": TypeAdapter(list[types.Content]),
    "systemInstruction": TypeAdapter(types.Content),
    "tools": TypeAdapter(list[types.Tool]),
    "toolConfig": TypeAdapter(types.ToolConfig),
    "generationConfig": TypeAdapter(types.GenerationConfig),
}

_options = st.fixed_dictionaries(
    {},
    optional={
        "system": nonempty_text,
        "max_tokens": st.integers(1, 65536),
        "temperature": st.floats(0, 2),
        "stop": st.lists(nonempty_text, min_size=1, max_size=3),
        "reasoning_effort": st.sampled_from(["minimal", "low", "medium", "high"]),
        "tool_choice": st.sampled_from(["auto", "none", "required", ForceTool("lookup")]),
        "include_thoughts": st.booleans(),
    },
)
_tools = st.lists(
    st.builds(
        ToolSchema,
        name=identifier,
        description=st.text(max_size=20),
        input_schema=st.just({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
    ),
    max_size=2,
)


def validate_with_the_sdk(body: dict[str, Any]) -> None:
    assert set(body) <= set(_SDK), set(body) - set(_SDK)
    for key, value in body.items():
        _SDK[key].validate_json(orjson.dumps(value), strict=True)


def check_invariants(body: dict[str, Any], conversation: list[Message]) -> None:
    contents = body["contents"]
    roles = [c["role"] for c in contents]
    assert set(roles) <= {"user", "model"}
    assert all(a != b for a, b in itertools.pairwise(roles)), "roles alternate"
    gemini_signatures = {
        p.signature for m in conversation for p in m.parts if isinstance(p, ThinkingPart) and p.provider == "gemini"
    }
    responses = 0
    for content in contents:
        assert content["parts"], "no content without parts"
        seen_other = False
        for part in content["parts"]:
            assert part.get("text") != "" or "thoughtSignature" in part, "no empty unsigned text"
            if "thoughtSignature" in part:
                assert part["thoughtSignature"] in gemini_signatures | {gemini.SKIP_SIGNATURE}
            if "functionCall" in part:
                assert content["role"] == "model"
                assert "id" not in part["functionCall"]  # generated calls have no Gemini-minted ids
            if "functionResponse" in part:
                responses += 1
                response = part["functionResponse"]
                assert content["role"] == "user"
                assert not seen_other, "functionResponse parts come first"
                assert response["name"]
                assert list(response["response"]) in (["output"], ["error"])
                assert "id" not in response
            else:
                seen_other = True
    assert responses == sum(isinstance(p, ToolResultPart) for m in conversation for p in m.parts)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.sampled_from(["gemini-3-pro-preview", "gemini-2.5-flash"]), _options, _tools)
def test_every_valid_conversation_gives_a_body_the_sdk_accepts(
    conversation: list[Message], model: str, options: dict[str, Any], tools: list[ToolSchema]
) -> None:
    assert check_conversation(conversation) == []
    body = gemini.build_request(conversation, model=model, tools=tools, **options)
    validate_with_the_sdk(body)
    check_invariants(body, conversation)
    cache = ConversionCache()
    assert gemini.build_request(conversation, model=model, tools=tools, cache=cache, **options) == body
    assert gemini.build_request(conversation, model=model, tools=tools, cache=cache, **options) == body


# --- replies: signatures go back where they came ---------------------------------------------------------

_signature = st.binary(min_size=1, max_size=48).map(lambda b: base64.b64encode(b).decode())


@st.composite
def reply_parts(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Reply parts as Gemini sends them, in a sequence the decoder keeps part for part: no two unsigned
    texts (or unsigned thoughts) in a row, since consecutive unsigned pieces are one part."""
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["text", "thought", "call", "signed-empty"]))
        signed = draw(st.booleans())
        if kind == "signed-empty":
            part: dict[str, Any] = {"text": "", "thoughtSignature": draw(_signature)}
        elif kind == "call":
            call: dict[str, Any] = {"name": draw(identifier), "args": draw(json_object)}
            if draw(st.booleans()):
                # Gemini's ids are unique within a reply (a reply that repeats one cannot be run or replayed).
                call["id"] = draw(st.from_regex(r"fc_[a-z0-9]{4}", fullmatch=True)) + f"_{len(out)}"
            part = {"functionCall": call}
        else:
            part = {"text": draw(nonempty_text)}
            if kind == "thought":
                part["thought"] = True
        if signed and kind != "signed-empty":
            part["thoughtSignature"] = draw(_signature)
        unsigned_text = kind in ("text", "thought") and not signed
        if (
            unsigned_text
            and out
            and out[-1].get("thought") == part.get("thought")
            and "text" in out[-1]
            and "thoughtSignature" not in out[-1]
        ):
            continue
        out.append(part)
    return out


def reply(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP"}], "responseId": "r1"}


@given(reply_parts())
def test_each_reply_part_is_replayed_as_received_signatures_on_the_same_parts(parts: list[dict[str, Any]]) -> None:
    message = gemini.parse_response(reply(parts)).message
    body = gemini.build_request([Message.user("q"), message], model="gemini-2.5-flash")
    assert body["contents"][1]["parts"] == [
        {**p, "functionCall": {**p["functionCall"]}} if "functionCall" in p else p for p in parts
    ]
    minted = [p["functionCall"].get("id") for p in parts if "functionCall" in p]
    assert [c.provider == "gemini" for c in message.tool_calls()] == [m is not None for m in minted]


@given(reply_parts(), st.data())
def test_a_stream_of_the_same_parts_decodes_like_the_whole_reply_however_split(
    parts: list[dict[str, Any]], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(parts) - 1)), max_size=len(parts))))
    groups = [parts[a:b] for a, b in zip([0, *cuts], [*cuts, len(parts)], strict=True) if parts[a:b]]
    chunks = [{"candidates": [{"content": {"parts": g, "role": "model"}}], "responseId": "r1"} for g in groups]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    raw = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)
    sizes = data.draw(st.lists(st.integers(1, 64), min_size=1, max_size=40))
    pieces, pos = [], 0
    for size in sizes:
        pieces.append(raw[pos : pos + size])
        pos += size
    pieces.append(raw[pos:])
    streamed = gemini.parse_stream(pieces)
    whole = gemini.parse_response(reply(parts))
    assert streamed.message == whole.message
    assert streamed.stop_reason == whole.stop_reason
    assume(streamed.message.role is Role.ASSISTANT)
