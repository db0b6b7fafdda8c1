"""The OpenAI Chat codec against every recorded Chat Completions exchange (tests/fixtures/provider-traffic/openai/
chat-*, see INDEX.md): replies parse value by value, errors raise their typed error, streams decode the same
however the bytes are split, recorded requests rebuild, and each ``X`` / ``X-followup`` pair rebuilds the
follow-up's ``messages`` exactly."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from loopctl.errors import InvalidRequest, ModelNotFound, ProviderError, StreamTruncated
from loopctl.message import ImagePart, Message, Role, TextPart, ToolCallPart
from loopctl.providers import openai_chat
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import ResponseFinished
from tests.conftest import Recording, recordings
from tests.providers.chat_reader import messages_from_chat, tools_from_chat

CHAT = recordings("openai", "chat-")
STREAMS = [n for n in CHAT if Recording("openai", n).has("response.sse")]
ERRORS = [n for n in CHAT if Recording("openai", n).meta["status"] != 200]
FOLLOWUPS = [n for n in CHAT if n.endswith("-followup")]


def test_the_recordings_are_all_here() -> None:
    assert len(CHAT) == 12
    assert len(STREAMS) == 4
    assert ERRORS == ["chat-error-400-unsupported-parameter", "chat-error-404-model-not-found"]
    assert FOLLOWUPS == ["chat-tools-parallel-stream-followup"]


def reply_of(name: str) -> ModelResponse:
    rec = Recording("openai", name)
    if rec.has("response.sse"):
        return openai_chat.parse_stream([rec.response_sse])
    return openai_chat.parse_response(rec.response_json)


# --- replies, value by value ---------------------------------------------------------------------------------


def usage(i: int, o: int, cached: int = 0, reasoning: int = 0) -> Usage:
    return Usage(input_tokens=i, output_tokens=o, cache_read_tokens=cached, reasoning_tokens=reasoning)


def text_reply(text: str) -> Message:
    return Message.new(Role.ASSISTANT, [TextPart(text=text)])


def calls_reply(*calls: tuple[str, str, Any]) -> Message:
    return Message.new(Role.ASSISTANT, [ToolCallPart(id=i, name=n, input=a) for i, n, a in calls])


EXPECTED: dict[str, tuple[Message, Usage, StopReason, str, str, str]] = {
    "chat-cached-tokens": (
        text_reply(
            'Ah, "I see what you did there." A classic Lando Calrissian sentiment! If you feel the deal is getting '
            'worse, perhaps I can assist in "altering" the protocol to better suit your needs. Just let me know what '
            'you\u2019d like to change, and we\'ll make sure it becomes "most impressive" once more. "This is the Way!"'
        ),
        usage(3806, 76, cached=3072),
        StopReason.END_TURN,
        "stop",
        "gpt-4o-2024-08-06",
        "chatcmpl-CoIcXY3krAcb2J97MInzAZ3o6cd1j",
    ),
    "chat-image-base64": (
        text_reply(
            "The image is the Wikipedia globe logo, made of puzzle pieces with various letters and symbols on them."
        ),
        usage(269, 20),
        StopReason.END_TURN,
        "stop",
        "gpt-4o-2024-08-06",
        "chatcmpl-CTcmXQSAcvq0OI4BFBk8OOL5tScCz",
    ),
    "chat-o3-mini-reasoning-usage": (
        text_reply("Hello there! How can I help you today?"),
        usage(7, 87, reasoning=64),
        StopReason.END_TURN,
        "stop",
        "o3-mini-2025-01-31",
        "chatcmpl-Dr3KNfXKBS1oDOrhqYDuLYdjX9PM4",
    ),
    # All 50 completion tokens went to reasoning; content "" is no part at all (silence).
    "chat-reasoning-usage-length": (
        Message.new(Role.ASSISTANT, []),
        usage(13, 50, reasoning=50),
        StopReason.MAX_TOKENS,
        "length",
        "gpt-5-mini-2025-08-07",
        "chatcmpl-CpaLHgmC7LxzicBE9T45Vp9hyIjK1",
    ),
    "chat-text": (
        text_reply("\\(4200 + 42 = 4242\\)."),
        usage(16, 12),
        StopReason.END_TURN,
        "stop",
        "gpt-4o-2024-08-06",
        "chatcmpl-CRkJFgcA6BuMrBur38ZHUXgT6zRjg",
    ),
    "chat-text-stream": (
        text_reply("4200 + 42 equals 4242."),
        usage(16, 10),
        StopReason.END_TURN,
        "stop",
        "gpt-4o-2024-08-06",
        "chatcmpl-CoDWl5rS0pF10P0W0TDVgY3NA26dk",
    ),
    "chat-tool-single-stream": (
        calls_reply(("call_XMCeFQhycnbf6lUnTOMd5K4r", "get_book_info", {"isbn": "0-7653-1178-X"})),
        usage(140, 22),
        StopReason.TOOL_CALL,
        "tool_calls",
        "gpt-4o-2024-08-06",
        "chatcmpl-CoDZYVa9bAmXMNhpvLH9KVLXtHDBO",
    ),
    "chat-tools-parallel": (
        calls_reply(
            ("call_v6LacIrChvs6ITVpIZqy5tFc", "secret_retrieval_tool", {"password": "mellon"}),
            ("call_onyWzk4mLTGKzW9cthmf4Llq", "secret_retrieval_tool", {"password": "radiance"}),
        ),
        usage(75, 53),
        StopReason.TOOL_CALL,
        "tool_calls",
        "gpt-4o-2024-08-06",
        "chatcmpl-CRkQLoUbXLK7jHgn0ahxbdvo6XWOD",
    ),
    "chat-tools-parallel-stream": (
        calls_reply(
            ("call_M26z19sncd7b4LBgzKRRbaUE", "secret_retrieval_tool", {"password": "mellon"}),
            ("call_KPXe5NX7IcKkaBUhc6dto2QV", "secret_retrieval_tool", {"password": "radiance"}),
        ),
        usage(75, 53),
        StopReason.TOOL_CALL,
        "tool_calls",
        "gpt-4o-2024-08-06",
        "chatcmpl-CoDWpGC47t2wtJ7PYJq9LCn0IZunc",
    ),
    "chat-tools-parallel-stream-followup": (
        text_reply(
            'The secrets associated with the passwords are:\n\n- "mellon": Welcome to Moria!\n- "radiance": Life before Death'
        ),
        usage(149, 28),
        StopReason.END_TURN,
        "stop",
        "gpt-4o-2024-08-06",
        "chatcmpl-CoDWqisNQ3ulIXyQYcUImFvlKIK2N",
    ),
}


def test_every_successful_recording_has_expected_values() -> None:
    assert sorted(EXPECTED) == sorted(set(CHAT) - set(ERRORS))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_reply_parses_value_by_value(name: str) -> None:
    message, use, stop, raw, model, response_id = EXPECTED[name]
    reply = reply_of(name)
    assert reply.message == message
    assert reply.usage == use
    assert reply.stop_reason is stop
    assert reply.raw_stop_reason == raw
    assert reply.model == model
    assert reply.id == response_id
    assert reply.invalid_tool_calls == ()


# --- errors ----------------------------------------------------------------------------------------------------


def test_recorded_400_unsupported_parameter_is_invalid_request() -> None:
    rec = Recording("openai", "chat-error-400-unsupported-parameter")
    error = openai_chat.error_from_http(400, json.dumps(rec.response_json).encode())
    assert type(error) is InvalidRequest
    assert error.status == 400
    assert error.provider == "openai"
    assert error.provider_message == "Unsupported parameter: 'stop' is not supported with this model."
    assert error.retryable is False
    assert error.body == rec.response_json


def test_recorded_404_model_not_found_is_model_not_found() -> None:
    rec = Recording("openai", "chat-error-404-model-not-found")
    error = openai_chat.error_from_http(404, rec.response_json)
    assert type(error) is ModelNotFound
    assert error.status == 404
    assert error.provider_message == (
        "The model `this-model-does-not-exist-12345` does not exist or you do not have access to it."
    )


@pytest.mark.parametrize("name", ERRORS)
def test_recorded_error_body_sent_to_a_stream_decoder_raises_from_finish(name: str) -> None:
    rec = Recording("openai", name)
    raw = rec._path("response.json").read_bytes()
    decoder = openai_chat.StreamDecoder()
    assert decoder.feed(raw) == []
    with pytest.raises(ProviderError) as info:
        decoder.finish()
    assert info.value.provider_message == rec.response_json["error"]["message"]
    assert isinstance(info.value, InvalidRequest)


@pytest.mark.parametrize("name", ERRORS)
def test_recorded_error_body_given_to_parse_response_raises(name: str) -> None:
    rec = Recording("openai", name)
    with pytest.raises(InvalidRequest) as info:
        openai_chat.parse_response(rec.response_json)
    assert info.value.provider_message == rec.response_json["error"]["message"]


# --- streams: the split never matters ---------------------------------------------------------------------------


def split_lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def split_bytes(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_stream_decodes_the_same_whole_by_line_and_byte_by_byte(name: str) -> None:
    data = Recording("openai", name).response_sse
    whole = openai_chat.parse_stream([data])
    assert openai_chat.parse_stream(split_lines(data)) == whole
    assert openai_chat.parse_stream(split_bytes(data)) == whole


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_stream_events_are_the_same_however_split(name: str) -> None:
    data = Recording("openai", name).response_sse

    def events(chunks: list[bytes]) -> list[Any]:
        decoder = openai_chat.StreamDecoder()
        return [e for chunk in chunks for e in decoder.feed(chunk)]

    whole = events([data])
    assert events(split_bytes(data)) == whole
    assert whole[-1] == ResponseFinished(EXPECTED[name][2], EXPECTED[name][3])


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_stream_cut_before_done_is_truncated(name: str) -> None:
    data = Recording("openai", name).response_sse
    cut = data[: data.rindex(b"data: [DONE]")]
    with pytest.raises(StreamTruncated):
        openai_chat.parse_stream([cut])


# --- requests --------------------------------------------------------------------------------------------------

# Normalizations, for what the recording frameworks added that is not conversation:
# - Mirascope replays a prior reply as the SDK's message object, so its assistant messages carry the reply's
#   empty ``"annotations": []``; it is removed from the recorded side.
# - Mirascope sets ``image_url.detail: "auto"`` (the API's default); the rebuild passes the same option.
# - Mirascope sends ``"strict": false`` in each tool; loopctl leaves it out (false is the API's default).
# Everything else in ``messages`` must match exactly.


def recorded_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for m in request["messages"]:
        if m["role"] == "assistant" and m.get("annotations") == []:
            m = {k: v for k, v in m.items() if k != "annotations"}
        out.append(m)
    return out


def recorded_detail(request: dict[str, Any]) -> Any:
    details = {
        item["image_url"].get("detail")
        for m in request["messages"]
        if isinstance(m.get("content"), list)
        for item in m["content"]
        if item["type"] == "image_url"
    }
    assert len(details) <= 1
    return details.pop() if details else None


def without_strict_false(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        function = {k: v for k, v in tool["function"].items() if not (k == "strict" and v is False)}
        out.append({**tool, "function": function})
    return out


@pytest.mark.parametrize("name", CHAT)
def test_recorded_request_rebuilds(name: str) -> None:
    request = Recording("openai", name).request
    body = openai_chat.build_request(
        messages_from_chat(request["messages"]),
        model=request["model"],
        image_detail=recorded_detail(request),
        tools=tools_from_chat(request.get("tools", [])),
        max_tokens=request.get("max_completion_tokens"),
        stop=request.get("stop"),
        stream=bool(request.get("stream")),
    )
    assert body["messages"] == recorded_messages(request)
    assert body["model"] == request["model"]
    if "tools" in request:
        assert body["tools"] == without_strict_false(request["tools"])
    for key in ("max_completion_tokens", "stop", "stream_options"):
        assert body.get(key) == request.get(key)
    assert body.get("stream", False) == request.get("stream", False)


@pytest.mark.parametrize("name", FOLLOWUPS)
def test_followup_rebuilds_from_the_conversation_the_reply_and_the_results(name: str) -> None:
    """``X.request`` + the parsed reply of ``X`` + the follow-up's tool results -> the follow-up's messages.

    Normalizations: none. The recorded follow-up carries the calls exactly as the model streamed them
    (``{"password": "mellon"}``, Python-style spacing), which is how loopctl writes arguments.
    """
    first = name.removesuffix("-followup")
    before = messages_from_chat(Recording("openai", first).request["messages"])
    reply = reply_of(first).message
    recorded = Recording("openai", name).request
    tail = messages_from_chat(recorded["messages"][len(before) + 1 :])
    assert [m.role for m in tail] == [Role.USER]
    assert all(p.is_tool_result() for p in tail[0].parts)
    body = openai_chat.build_request([*before, reply, *tail], model=recorded["model"], stream=True)
    assert body["messages"] == recorded["messages"]
    assert body["stream"] is True
    assert body["stream_options"] == recorded["stream_options"]


def test_image_recording_round_trips_the_png_bytes() -> None:
    request = Recording("openai", "chat-image-base64").request
    [message] = messages_from_chat(request["messages"])
    image = message.parts[1]
    assert isinstance(image, ImagePart)
    assert base64.b64decode(image.source.data)[:8] == b"\x89PNG\r\n\x1a\n"
    body = openai_chat.build_request([message], model="gpt-4o", image_detail="auto")
    assert body["messages"][0]["content"][1] == request["messages"][0]["content"][1]
    plain = openai_chat.build_request([message], model="gpt-4o")
    assert plain["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": image_url_of(request)}}


def image_url_of(request: dict[str, Any]) -> str:
    url: str = request["messages"][0]["content"][1]["image_url"]["url"]
    return url
