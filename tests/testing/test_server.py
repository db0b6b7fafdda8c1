"""The fake provider server over real HTTP: each API's replies read by httpx2 and by the official SDKs,
errors, cut streams, mid-stream errors, recorded replay, request recording, ports and shutdown."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import httpx2
import pytest

from loopctl.errors import RateLimited
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers._common import classify_http_error, parse_retry_after
from loopctl.providers.sse import SSEDecoder
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing import (
    CutStream,
    Delay,
    ErrorReply,
    FakeProviderServer,
    FakeServerError,
    RecordedRequest,
    Replay,
    StreamError,
)
from tests.conftest import TRAFFIC, Recording, recordings

SIGNATURE = "c2lnbmF0dXJl"  # base64 of b"signature"


def answer(provider: str) -> Message:
    """A reply with thinking signed by ``provider``, text split over deltas and a tool call."""
    return Message.new(
        Role.ASSISTANT,
        [
            ThinkingPart(text="Let me think about it.", signature=SIGNATURE, provider=provider),
            TextPart(text="Checking the file now."),
            ToolCallPart(id="call_1", name="read_file", input={"path": "notes.txt"}),
        ],
    )


# Per API: path, request body, thinking provider.
ENDPOINTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "openai-chat": ("/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, "openai-compatible"),
    "openai-responses": ("/v1/responses", {"model": "gpt-5", "input": "hi", "include": ["reasoning.encrypted_content"]}, "openai"),
    "anthropic": ("/v1/messages", {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}, "anthropic"),
    "gemini": ("/v1beta/models/gemini-2.5-flash:generateContent", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, "gemini"),
}  # fmt: skip


def post(server: FakeProviderServer, api: str, *, stream: bool) -> httpx2.Response:
    path, body, _ = ENDPOINTS[api]
    if stream and api == "gemini":
        path = path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    elif stream:
        body = {**body, "stream": True}
    return httpx2.post(server.base_url + path, json=body, timeout=10)


def events(body: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    out = [(e.event, e.data) for e in decoder.feed(body)]
    assert decoder.close() is False, "the stream ended inside an event"
    return out


# --- the four APIs, read by httpx2 and validated with the SDKs' types ----------------------------------------


@pytest.mark.parametrize("api", list(ENDPOINTS))
def test_each_api_answers_a_json_request_with_its_reply_object(api: str) -> None:
    from anthropic.types import Message as AnthropicMessage
    from google.genai.types import GenerateContentResponse
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

    with FakeProviderServer([answer(ENDPOINTS[api][2])]) as server:
        r = post(server, api, stream=False)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert int(r.headers["content-length"]) == len(r.content)
    body = r.json()
    if api == "openai-chat":
        message = ChatCompletion.model_validate(body).choices[0].message
        assert (message.content, message.tool_calls[0].function.arguments) == (
            "Checking the file now.",
            '{"path":"notes.txt"}',
        )
    elif api == "openai-responses":
        reasoning, text, call = Response.model_validate(body).output
        assert (reasoning.encrypted_content, text.content[0].text, call.call_id) == (
            SIGNATURE,
            "Checking the file now.",
            "call_1",
        )
    elif api == "anthropic":
        thinking, text, tool_use = AnthropicMessage.model_validate(body).content
        assert (thinking.signature, text.text, tool_use.input) == (
            SIGNATURE,
            "Checking the file now.",
            {"path": "notes.txt"},
        )
    else:
        thought, text, call = GenerateContentResponse.model_validate(body).candidates[0].content.parts
        assert (thought.thought_signature, text.text, call.function_call.args) == (
            b"signature",
            "Checking the file now.",
            {"path": "notes.txt"},
        )


@pytest.mark.parametrize("api", list(ENDPOINTS))
def test_each_api_answers_a_stream_request_with_server_sent_events(api: str) -> None:
    with FakeProviderServer([answer(ENDPOINTS[api][2])]) as server, open_stream(server, api) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["transfer-encoding"] == "chunked"
        received = list(r.iter_raw())
    frames = events(b"".join(received))
    assert len(received) >= len(frames)  # one chunk written per event (a chunk may arrive in pieces)
    if api == "openai-chat":
        assert frames[-1] == ("message", "[DONE]")
    elif api in ("anthropic", "openai-responses"):
        assert all(name == json.loads(data)["type"] for name, data in frames)
    text = "".join(_text_deltas(api, [json.loads(d) for _, d in frames if d != "[DONE]"]))
    assert text == "Checking the file now."


def open_stream(server: FakeProviderServer, api: str) -> Any:
    """``httpx2.stream`` of a streamed request to ``api`` (a context manager giving the response)."""
    path, body, _ = ENDPOINTS[api]
    if api == "gemini":
        path = path.replace(":generateContent", ":streamGenerateContent?alt=sse")
    else:
        body = {**body, "stream": True}
    return httpx2.stream("POST", server.base_url + path, json=body, timeout=10)


def _text_deltas(api: str, objs: list[dict[str, Any]]) -> list[str]:
    if api == "openai-chat":
        return [o["choices"][0]["delta"].get("content") or "" for o in objs if o["choices"]]
    if api == "openai-responses":
        return [o["delta"] for o in objs if o["type"] == "response.output_text.delta"]
    if api == "anthropic":
        return [
            o["delta"]["text"]
            for o in objs
            if o["type"] == "content_block_delta" and o["delta"]["type"] == "text_delta"
        ]
    return [
        p["text"] for o in objs for p in o["candidates"][0]["content"]["parts"] if "text" in p and not p.get("thought")
    ]


# --- the official SDKs, end to end --------------------------------------------------------------------------


def test_the_openai_sdk_reads_chat_completions_streamed_and_not() -> None:
    openai = pytest.importorskip("openai")
    with FakeProviderServer([answer("openai"), answer("openai")]) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        reply = client.chat.completions.create(model="gpt-4o", messages=messages)
        options = {"include_usage": True}
        with client.chat.completions.stream(model="gpt-4o", messages=messages, stream_options=options) as stream:
            streamed = stream.get_final_completion()
    for completion in (reply, streamed):
        message = completion.choices[0].message
        assert message.content == "Checking the file now."
        assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
            ("call_1", "read_file", '{"path":"notes.txt"}')
        ]
        assert completion.choices[0].finish_reason == "tool_calls"
    assert streamed.usage is not None and streamed.usage.total_tokens > 0  # asked for with include_usage
    assert server.requests[0].headers["authorization"] == "Bearer test-key"


def test_the_openai_sdk_reads_responses_streamed_and_not() -> None:
    openai = pytest.importorskip("openai")
    with FakeProviderServer([answer("openai"), answer("openai")]) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=0)
        reply = client.responses.create(model="gpt-5", input="hi", include=["reasoning.encrypted_content"])
        with client.responses.stream(model="gpt-5", input="hi", include=["reasoning.encrypted_content"]) as stream:
            streamed = stream.get_final_response()
    for response in (reply, streamed):
        assert [o.type for o in response.output] == ["reasoning", "message", "function_call"]
        assert response.output[0].encrypted_content == SIGNATURE
        assert response.output[0].summary[0].text == "Let me think about it."
        assert response.output_text == "Checking the file now."
        assert (response.output[2].call_id, response.output[2].arguments) == ("call_1", '{"path":"notes.txt"}')


def test_the_anthropic_sdk_reads_messages_streamed_and_not() -> None:
    anthropic = pytest.importorskip("anthropic")
    with FakeProviderServer([answer("anthropic"), answer("anthropic")]) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-test", max_retries=0)
        kw: dict[str, Any] = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
        reply = client.messages.create(**kw)
        with client.messages.stream(**kw) as stream:
            streamed = stream.get_final_message()
    for message in (reply, streamed):
        thinking, text, tool_use = message.content
        assert (thinking.thinking, thinking.signature) == ("Let me think about it.", SIGNATURE)
        assert text.text == "Checking the file now."
        assert (tool_use.id, tool_use.name, tool_use.input) == ("call_1", "read_file", {"path": "notes.txt"})
        assert message.stop_reason == "tool_use"
    headers = server.requests[0].headers
    assert "anthropic-version" in headers and "sk-test" in (headers.get("x-api-key") or headers["authorization"])


def test_the_google_genai_sdk_reads_generate_content_streamed_and_not() -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    with FakeProviderServer([answer("gemini"), answer("gemini")]) as server:
        client = genai.Client(api_key="g-key", http_options=types.HttpOptions(base_url=server.base_url))
        reply = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
        chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert reply.function_calls[0].args == {"path": "notes.txt"}
    assert reply.candidates[0].content.parts[0].thought_signature == b"signature"
    streamed_text = "".join(p.text for c in chunks for p in c.candidates[0].content.parts if p.text and not p.thought)
    assert streamed_text == "Checking the file now."
    assert chunks[-1].function_calls[0].name == "read_file"
    assert chunks[-1].candidates[0].finish_reason == "STOP"
    assert server.requests[1].query == {"alt": "sse"} and server.requests[1].stream
    assert server.requests[0].headers["x-goog-api-key"] == "g-key"


async def test_the_server_serves_async_clients_too() -> None:
    with FakeProviderServer(["one", "two"]) as server:
        async with httpx2.AsyncClient(base_url=server.base_url) as client:
            first = await client.post("/v1/messages", json=ENDPOINTS["anthropic"][1])
            second = await client.post("/v1/messages", json=ENDPOINTS["anthropic"][1])
    assert [r.json()["content"][0]["text"] for r in (first, second)] == ["one", "two"]


# --- what a step can be ----------------------------------------------------------------------------------------


def test_steps_are_used_in_order_whatever_the_endpoint() -> None:
    with FakeProviderServer(["first", "second"]) as server:
        a = post(server, "anthropic", stream=False).json()["content"][0]["text"]
        b = post(server, "openai-chat", stream=False).json()["choices"][0]["message"]["content"]
        assert server.remaining == 0
    assert (a, b) == ("first", "second")


def test_a_model_response_step_sets_usage_stop_reason_and_model() -> None:
    step = ModelResponse(
        Message.assistant("cut"), usage=Usage(12, 34), stop_reason=StopReason.MAX_TOKENS, model="claude-real"
    )
    with FakeProviderServer([step]) as server:
        body = post(server, "anthropic", stream=False).json()
    assert (body["model"], body["stop_reason"], body["usage"]["input_tokens"], body["usage"]["output_tokens"]) == (
        "claude-real",
        "max_tokens",
        12,
        34,
    )


def test_a_message_step_estimates_usage_from_sizes_and_reports_the_requested_model() -> None:
    with FakeProviderServer([Message.assistant("x" * 400)]) as server:
        body = post(server, "openai-chat", stream=False).json()
        raw = server.requests[0].raw
    assert body["model"] == "gpt-4o"
    assert body["usage"]["prompt_tokens"] == len(raw) // 4
    assert body["usage"]["completion_tokens"] == len(Message.assistant("x" * 400).to_json()) // 4


def test_a_callable_step_gets_the_parsed_body_and_a_responder_the_whole_request() -> None:
    seen: list[Any] = []

    class Echo:
        def respond(self, request: RecordedRequest) -> str:
            seen.append(request)
            return f"{request.api} {request.model}"

    def by_body(body: dict[str, Any]) -> str:
        seen.append(body)
        return "user said " + body["messages"][0]["content"]

    with FakeProviderServer([by_body, Echo()]) as server:
        first = post(server, "anthropic", stream=False).json()["content"][0]["text"]
        second = post(server, "gemini", stream=False).json()["candidates"][0]["content"]["parts"][0]["text"]
    assert (first, second) == ("user said hi", "gemini gemini-2.5-flash")
    assert seen[0] == ENDPOINTS["anthropic"][1] and isinstance(seen[1], RecordedRequest)


def test_a_single_callable_answers_every_request() -> None:
    with FakeProviderServer(lambda body: f"n={len(body['messages'])}") as server:
        replies = [post(server, "anthropic", stream=False).json()["content"][0]["text"] for _ in range(3)]
    assert replies == ["n=1"] * 3


def test_steps_added_later_are_used_after_the_first_ones() -> None:
    with FakeProviderServer(["a"]) as server:
        server.add("b", "c")
        assert server.remaining == 3
        texts = [post(server, "anthropic", stream=False).json()["content"][0]["text"] for _ in range(3)]
    assert texts == ["a", "b", "c"]


def test_a_delay_step_waits_then_answers_with_its_then() -> None:
    with FakeProviderServer([Delay(0.2, "late")]) as server:
        with pytest.raises(httpx2.ReadTimeout):
            httpx2.post(server.base_url + "/v1/messages", json=ENDPOINTS["anthropic"][1], timeout=0.05)
        server.add(Delay(0.01, "late"))
        r = post(server, "anthropic", stream=False)
    assert r.json()["content"][0]["text"] == "late"


# --- errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic"])
def test_a_rate_limit_is_a_429_with_a_retry_after_header(api: str) -> None:
    with FakeProviderServer([ErrorReply.rate_limited(retry_after=3)]) as server:
        r = post(server, api, stream=True)
    assert r.status_code == 429 and r.headers["content-type"] == "application/json"
    assert r.headers["retry-after"] == "3" and parse_retry_after(r.headers) == 3.0
    error = r.json()["error"]
    assert isinstance(classify_http_error(api, 429, message=error["message"], error_type=error["type"]), RateLimited)


def test_a_gemini_rate_limit_puts_the_retry_delay_in_the_body() -> None:
    with FakeProviderServer([ErrorReply.rate_limited(retry_after=22)]) as server:
        r = post(server, "gemini", stream=True)
    assert r.status_code == 429 and r.headers["content-type"] == "text/event-stream"
    assert r.json()["error"]["details"][0]["retryDelay"] == "22s"
    assert r.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


def test_anthropic_overload_is_a_529_the_sdk_reads_as_overloaded() -> None:
    anthropic = pytest.importorskip("anthropic")
    with FakeProviderServer([ErrorReply.overloaded()]) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 529
    assert caught.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "The model is overloaded. Please try again later."}, "request_id": "req_fake"}  # fmt: skip


def test_the_openai_sdk_retries_a_rate_limit_after_the_retry_after_wait_then_succeeds() -> None:
    openai = pytest.importorskip("openai")
    with FakeProviderServer([ErrorReply.rate_limited(retry_after=0.01), "after the wait"]) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=1)
        reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "after the wait"
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1"]


# --- cut streams and mid-stream errors ------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(ENDPOINTS))
def test_a_cut_stream_drops_the_connection_mid_body(api: str) -> None:
    received = bytearray()

    def read_all(r: httpx2.Response) -> None:
        for chunk in r.iter_raw():
            received.extend(chunk)

    with (
        FakeProviderServer([CutStream(answer(ENDPOINTS[api][2]), after_events=3)]) as server,
        open_stream(server, api) as r,
    ):
        assert r.status_code == 200
        with pytest.raises(httpx2.RemoteProtocolError):
            read_all(r)
    assert len(events(bytes(received))) == 3


def test_a_clean_cut_ends_the_http_body_without_the_final_events() -> None:
    with FakeProviderServer([CutStream(answer("anthropic"), after_events=4, clean=True)]) as server:
        r = post(server, "anthropic", stream=True)
    names = [name for name, _ in events(r.content)]
    assert r.status_code == 200 and len(names) == 4 and "message_stop" not in names


def test_a_partial_cut_leaves_half_an_event_in_the_client() -> None:
    with FakeProviderServer([CutStream("hello there", after_events=2, partial=True, clean=True)]) as server:
        r = post(server, "openai-chat", stream=True)
    decoder = SSEDecoder()
    assert len(decoder.feed(r.content)) == 2
    assert decoder.close() is True  # an incomplete event was left over


def test_a_cut_json_reply_sends_half_its_declared_length_then_drops() -> None:
    with FakeProviderServer([CutStream("a complete answer")]) as server, pytest.raises(httpx2.RemoteProtocolError):
        post(server, "anthropic", stream=False)


def test_a_cut_stream_then_a_retry_gets_the_next_step() -> None:
    with FakeProviderServer([CutStream("lost", after_events=1), "found"]) as server:
        with pytest.raises(httpx2.RemoteProtocolError):
            post(server, "anthropic", stream=True)
        r = post(server, "anthropic", stream=True)
    assert "".join(_text_deltas("anthropic", [json.loads(d) for _, d in events(r.content)])) == "found"


def test_the_anthropic_sdk_raises_on_a_mid_stream_error_event() -> None:
    anthropic = pytest.importorskip("anthropic")
    with FakeProviderServer([StreamError(answer("anthropic"), ErrorReply.overloaded(), after_events=3)]) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        stream = client.messages.stream(model="c", max_tokens=10, messages=messages)
        with stream as events_, pytest.raises(anthropic.APIStatusError, match="overloaded"):
            events_.get_final_message()


def test_the_openai_sdk_raises_on_a_chat_stream_error_object() -> None:
    openai = pytest.importorskip("openai")
    with FakeProviderServer([StreamError("partial answer", ErrorReply(status=500), after_events=2)]) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="k", max_retries=0)
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        with pytest.raises(openai.APIError, match="Internal server error"):
            list(stream)


def test_a_stream_error_step_on_a_json_request_is_an_http_error() -> None:
    with FakeProviderServer([StreamError("x", ErrorReply.rate_limited())]) as server:
        assert post(server, "anthropic", stream=False).status_code == 429


# --- replay ----------------------------------------------------------------------------------------------------

ALL_RECORDINGS = [(p, n) for p in ("anthropic", "openai", "gemini") for n in recordings(p)]


@pytest.mark.parametrize(("provider", "name"), ALL_RECORDINGS, ids=[f"{p}/{n}" for p, n in ALL_RECORDINGS])
def test_a_replayed_recording_is_served_verbatim_with_its_status_and_content_type(provider: str, name: str) -> None:
    recording = Recording(provider, name)
    meta = recording.meta
    with FakeProviderServer([Replay(TRAFFIC / provider / name)]) as server:
        r = httpx2.post(server.base_url + "/v1/messages", json={"model": "m"}, timeout=10)
    expected = (
        recording.response_sse
        if recording.has("response.sse") or recording.has("response.chunks.jsonl")
        else recording.base.joinpath(f"{name}.response.json").read_bytes()
    )
    if recording.has("response.chunks.jsonl"):
        assert [json.loads(d) for _, d in events(r.content)] == [json.loads(d) for _, d in events(expected)]
    else:
        assert r.content == expected
    assert r.status_code == (meta["status"] if isinstance(meta["status"], int) else 200)
    assert r.headers["content-type"] == (meta["response_content_type"] or "text/event-stream")


def test_a_replayed_stream_can_be_cut() -> None:
    with FakeProviderServer(
        [CutStream(Replay(TRAFFIC / "anthropic" / "text-stream"), after_events=2, clean=True)]
    ) as server:
        r = post(server, "anthropic", stream=True)
    assert [name for name, _ in events(r.content)] == ["message_start", "content_block_start"]


# --- request recording and routing ----------------------------------------------------------------------------


def test_every_request_is_recorded_with_method_path_query_headers_and_body() -> None:
    with FakeProviderServer(["a", "b"]) as server:
        httpx2.post(
            server.base_url + "/v1/messages?beta=true", json=ENDPOINTS["anthropic"][1], headers={"X-Api-Key": "k1"}
        )
        post(server, "gemini", stream=True)
    first, second = server.requests
    assert (first.method, first.path, first.query, first.api, first.model, first.stream) == (
        "POST", "/v1/messages", {"beta": "true"}, "anthropic", "claude-x", False,
    )  # fmt: skip
    assert first.headers["x-api-key"] == "k1" and first.body == ENDPOINTS["anthropic"][1]
    assert json.loads(first.raw) == first.body
    assert (second.path, second.api, second.model, second.stream) == (
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini", "gemini-2.5-flash", True,
    )  # fmt: skip


def test_an_openai_compatible_base_path_is_accepted() -> None:
    with FakeProviderServer(["compatible"]) as server:
        r = httpx2.post(server.base_url + "/api/openai/v1/chat/completions", json=ENDPOINTS["openai-chat"][1])
    assert r.json()["choices"][0]["message"]["content"] == "compatible"


def test_a_gemini_stream_without_alt_sse_is_one_json_array() -> None:
    with FakeProviderServer(["hello world"]) as server:
        r = httpx2.post(server.base_url + "/v1beta/models/g:streamGenerateContent", json=ENDPOINTS["gemini"][1])
    chunks = r.json()
    assert isinstance(chunks, list) and len(chunks) >= 2
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "hello world"


def test_an_unknown_path_is_a_404_and_uses_no_step() -> None:
    with FakeProviderServer(["unused"]) as server:
        r = httpx2.post(server.base_url + "/v2/embeddings", json={})
        assert server.remaining == 1
    assert r.status_code == 404 and server.requests[0].api is None


def test_a_body_that_is_not_json_is_a_400_in_the_apis_shape() -> None:
    with FakeProviderServer(["unused"]) as server:
        r = httpx2.post(
            server.base_url + "/v1/messages", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_small_writes_split_events_and_utf8_characters_yet_the_stream_parses() -> None:
    text = "héllo wörld — 漢字 🚀 " * 3
    with FakeProviderServer([text], chunk_size=5) as server, open_stream(server, "anthropic") as r:
        pieces = list(r.iter_raw())
    assert max(len(p) for p in pieces) <= 5
    frames = [json.loads(d) for _, d in events(b"".join(pieces))]
    assert "".join(_text_deltas("anthropic", frames)) == text


def test_an_event_delay_still_delivers_the_whole_stream() -> None:
    with FakeProviderServer(["slow but whole"], event_delay=0.001) as server:
        r = post(server, "openai-responses", stream=True)
    assert "".join(_text_deltas("openai-responses", [json.loads(d) for _, d in events(r.content)])) == "slow but whole"


# --- script failures --------------------------------------------------------------------------------------------


def test_running_out_of_script_answers_400_and_raises_when_the_server_closes() -> None:
    server = FakeProviderServer(["only"]).start()
    post(server, "anthropic", stream=False)
    r = post(server, "anthropic", stream=False)
    assert r.status_code == 400 and "script" in r.json()["error"]["message"]
    with pytest.raises(FakeServerError, match="script has 1 replies; request 2 has none"):
        server.__exit__(None, None, None)


def test_a_failing_callable_answers_500_and_is_raised_at_exit_with_its_cause() -> None:
    def broken(body: dict[str, Any]) -> str:
        raise KeyError("no such field")

    server = FakeProviderServer([broken])
    with pytest.raises(FakeServerError) as caught, server:
        assert post(server, "openai-chat", stream=False).status_code == 500
    assert isinstance(caught.value.__cause__, KeyError)


def test_failures_can_be_inspected_instead_of_raised() -> None:
    with FakeProviderServer([], raise_failures=False) as server:
        post(server, "anthropic", stream=False)
    assert len(server.failures) == 1


def test_a_step_of_the_wrong_type_is_a_failure() -> None:
    with FakeProviderServer([Message.user("not a reply")], raise_failures=False) as server:
        assert post(server, "anthropic", stream=False).status_code == 500
    assert isinstance(server.failures[0], TypeError)


# --- ports and shutdown -----------------------------------------------------------------------------------------


def test_port_zero_binds_a_free_port_on_loopback() -> None:
    with FakeProviderServer() as a, FakeProviderServer() as b:
        assert a.port != b.port and a.port > 0 and b.port > 0
        assert a.base_url == f"http://127.0.0.1:{a.port}"
        assert a.openai_base_url == a.base_url + "/v1"


def test_closing_stops_listening_and_joins_every_thread() -> None:
    before = threading.active_count()
    server = FakeProviderServer(["a"]).start()
    port = server.port
    with httpx2.Client() as client:  # a keep-alive connection left open across close()
        client.post(f"http://127.0.0.1:{port}/v1/messages", json=ENDPOINTS["anthropic"][1])
        server.close()
        server.close()  # twice is fine
    assert threading.active_count() == before
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.port


def test_closing_interrupts_a_pending_delay() -> None:
    server = FakeProviderServer([Delay(30, "never")], raise_failures=False).start()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            post(server, "anthropic", stream=False)
        except httpx2.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    while not server.requests:
        threading.Event().wait(0.01)
    server.close()  # returns promptly: the delay waits on the stop signal
    caller.join(timeout=5)
    assert not caller.is_alive()


def test_a_header_sent_twice_is_recorded_with_both_values_in_order() -> None:
    # The record kept the last value of a repeated header, which hid a client sending one twice.
    with FakeProviderServer(["ok"]) as server, socket.create_connection(("127.0.0.1", server.port)) as sock:
        body = b'{"model": "m", "messages": []}'
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nUser-Agent: one/1\r\nuser-agent: two/2\r\n"
            b"X-Single: s\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        assert sock.recv(12) == b"HTTP/1.1 200"
    (recorded,) = server.requests
    assert recorded.headers["user-agent"] == "one/1, two/2"
    assert recorded.headers["x-single"] == "s"
