"""The four real clients end to end against the fake provider server (real HTTP and SSE on 127.0.0.1):
replies decoded value by value, the exact request bodies, typed errors, cut streams, refused connections,
timeouts, keys from the environment, and ``from_string``."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from loopctl.errors import (
    AuthenticationError,
    ConnectionFailed,
    ContextOverflow,
    InvalidBaseURL,
    InvalidRequest,
    MissingAPIKey,
    ModelNotFound,
    Overloaded,
    ProviderProtocolError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    StreamTruncated,
)
from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers.base import ModelRequest
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.stream import PartStarted, TextDelta
from loopctl.testing import CutStream, Delay, ErrorReply, FakeProviderServer, StreamError
from loopctl.tool import ToolSchema
from loopctl.transport import (
    AnthropicClient,
    GeminiClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    from_string,
)
from tests.fake_clients import KINDS, MODEL_OF, THINKING_OF, make_client

SIGNATURE = "c2lnbmF0dXJl"  # base64 of b"signature"
READ_FILE = ToolSchema(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
ARGS = {"path": "notes.txt", "n": [1, 2.5, None, True], "ü": "🚀"}
USAGE = Usage(input_tokens=1200, output_tokens=345, cache_read_tokens=1000, reasoning_tokens=100)
KEY_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GOOGLE_API_KEY",
            "GEMINI_API_KEY", "GEMINI_BASE_URL")  # fmt: skip

both_modes = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
every_client = pytest.mark.parametrize("kind", KINDS)


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads a real key or base URL from the developer's environment."""
    for name in KEY_VARS:
        monkeypatch.delenv(name, raising=False)


def request(**kw: Any) -> ModelRequest:
    return ModelRequest(messages=[Message.user("hi")], tools=[READ_FILE], max_tokens=100, **kw)


def scripted_reply(kind: str) -> ModelResponse:
    """A reply with thinking signed for ``kind``'s provider, text, and a tool call. Gemini signs the call (its
    signature rides on the ``functionCall`` part, ai.google.dev/gemini-api/docs/thought-signatures)."""
    provider = THINKING_OF[kind]
    if kind == "gemini":
        parts: list[MessagePart] = [
            ThinkingPart(text="Let me think it over.", provider=provider),
            TextPart(text="Checking the file now."),
            ThinkingPart(text="", signature=SIGNATURE, provider=provider),
            ToolCallPart(id="call_1", name="read_file", input=ARGS),
        ]
    else:
        parts = [
            ThinkingPart(text="Let me think it over.", signature=SIGNATURE, provider=provider),
            TextPart(text="Checking the file now."),
            ToolCallPart(id="call_1", name="read_file", input=ARGS),
        ]
    return ModelResponse(Message.new(Role.ASSISTANT, parts), usage=USAGE, stop_reason=StopReason.TOOL_CALL)


def expected_message(kind: str) -> Message:
    """What each client decodes :func:`scripted_reply` into, part by part."""
    thinking = "Let me think it over."
    text = "Checking the file now."
    if kind == "openai":  # Chat carries reasoning text (reasoning_content) but no signature
        parts: list[MessagePart] = [
            ThinkingPart(text=thinking, provider="openai-compatible"),
            TextPart(text=text),
            ToolCallPart(id="call_1", name="read_file", input=ARGS),
        ]
    elif kind == "openai-responses":  # every output item keeps its id
        parts = [
            ThinkingPart(text=thinking, signature=SIGNATURE, provider="openai", item_id="rs_fake000001_0"),
            TextPart(text=text, item_id="msg_fake000001_1"),
            ToolCallPart(id="call_1", name="read_file", input=ARGS, item_id="fc_fake000001_2"),
        ]
    elif kind == "anthropic":
        parts = [
            ThinkingPart(text=thinking, signature=SIGNATURE, provider="anthropic"),
            TextPart(text=text),
            ToolCallPart(id="call_1", name="read_file", input=ARGS),
        ]
    else:  # Gemini sends no call ids: the decoder mints <responseId>_<n>
        parts = [
            ThinkingPart(text=thinking, provider="gemini"),
            TextPart(text=text),
            ThinkingPart(text="", signature=SIGNATURE, provider="gemini"),
            ToolCallPart(id="fake000001_0", name="read_file", input=ARGS),
        ]
    return Message.new(Role.ASSISTANT, parts)


def streamed_text(events: list[Any]) -> str:
    """The text an observer saw: a part may start with text (Gemini's first piece), then deltas follow."""
    out = []
    for e in events:
        if isinstance(e, PartStarted) and isinstance(e.part, TextPart):
            out.append(e.part.text)
        elif isinstance(e, TextDelta):
            out.append(e.text)
    return "".join(out)


# Per client: the raw stop reason, the response id, and the reasoning tokens its usage reports.
RAW_STOP = {"openai": "tool_calls", "openai-responses": "completed", "anthropic": "tool_use", "gemini": "STOP"}
RESPONSE_ID = {"openai": "chatcmpl-fake000001", "openai-responses": "resp_fake000001", "anthropic": "msg_fake000001",
               "gemini": "fake000001"}  # fmt: skip


# --- replies ---------------------------------------------------------------------------------------------


@every_client
@both_modes
async def test_each_client_decodes_the_reply_value_by_value(kind: str, stream: bool) -> None:
    events: list[Any] = []
    with FakeProviderServer([scripted_reply(kind)]) as server:
        client = make_client(kind, server)
        reply = await client.generate(request(reasoning_effort="low"), stream=stream, on_event=events.append)
        await client.aclose()
    assert reply.message == expected_message(kind)
    # Anthropic reports no separate count of thinking tokens (they are part of output_tokens): not reported,
    # so unknown; Chat Completions and Gemini report no cache writes.
    reasoning = None if kind == "anthropic" else 100
    written = 0 if kind in ("anthropic", "openai-responses") else None
    assert reply.usage == Usage(
        input_tokens=1200, output_tokens=345, cache_read_tokens=1000, cache_write_tokens=written, reasoning_tokens=reasoning
    )
    assert (reply.stop_reason, reply.raw_stop_reason) == (StopReason.TOOL_CALL, RAW_STOP[kind])
    assert (reply.model, reply.id) == (MODEL_OF[kind], RESPONSE_ID[kind])
    assert reply.invalid_tool_calls == ()
    assert streamed_text(events) == ("Checking the file now." if stream else "")
    if stream:
        assert len([e for e in events if isinstance(e, TextDelta)]) >= 1  # text arrives in pieces


@every_client
async def test_a_text_reply_ends_the_turn(kind: str) -> None:
    with FakeProviderServer(["Just text, ünïcödé 🚀."]) as server:
        client = make_client(kind, server)
        reply = await client.generate(request())
        await client.aclose()
    assert [type(p) for p in reply.message.parts] == [TextPart]
    assert reply.message.text_content() == "Just text, ünïcödé 🚀."
    assert reply.stop_reason is StopReason.END_TURN


# --- what goes over the wire -------------------------------------------------------------------------------


PATHS = {
    ("openai", True): "/v1/chat/completions",
    ("openai", False): "/v1/chat/completions",
    ("openai-responses", True): "/v1/responses",
    ("openai-responses", False): "/v1/responses",
    ("anthropic", True): "/v1/messages",
    ("anthropic", False): "/v1/messages",
    ("gemini", True): "/v1beta/models/gemini-3-pro:streamGenerateContent",
    ("gemini", False): "/v1beta/models/gemini-3-pro:generateContent",
}


def key_sent(kind: str, headers: Any) -> str | None:
    """The API key a request carried: OpenAI ``Authorization: Bearer``; Anthropic ``x-api-key`` (anthropic
    SDK 2.x sends ``Authorization: Bearer`` instead); Gemini ``x-goog-api-key``."""
    if kind == "gemini":
        return headers.get("x-goog-api-key")
    value = headers.get("authorization") or ""
    if kind == "anthropic" and "x-api-key" in headers:
        return headers["x-api-key"]
    return value.removeprefix("Bearer ") if value.startswith("Bearer ") else None


@every_client
@both_modes
async def test_the_request_the_server_receives_is_exactly_the_codecs_body(kind: str, stream: bool) -> None:
    # `extra` holds a key the SDKs know (sent as a keyword) and one they do not (sent through extra_body): both
    # must land in the body as given, and nothing else may be added.
    extra = {"metadata": {"user_id": "u-1"}, "x_probe": {"nested": [1, "two"]}}
    req = ModelRequest(
        messages=[Message.user("hi")],
        system="Be brief.",
        tools=[READ_FILE],
        max_tokens=100,
        temperature=0.5,
        extra=extra,
    )
    with FakeProviderServer(["ok"]) as server:
        client = make_client(kind, server)
        await client.generate(req, stream=stream)
        expected = client.build(req, stream)
        await client.aclose()
    (received,) = server.requests
    assert received.body == expected
    assert received.body["x_probe"] == {"nested": [1, "two"]}
    assert received.body["metadata"] == {"user_id": "u-1"}
    assert (received.method, received.path) == ("POST", PATHS[kind, stream])
    assert received.query == ({"alt": "sse"} if kind == "gemini" and stream else {})
    assert received.stream is stream
    assert key_sent(kind, received.headers) == "test-key"


@every_client
@pytest.mark.parametrize("status", [429, 500, 503])
async def test_the_sdks_own_retries_are_off_one_request_per_error(kind: str, status: int) -> None:
    with FakeProviderServer([ErrorReply(status=status, retry_after=0)]) as server:
        client = make_client(kind, server)
        with pytest.raises((RateLimited, ServerError, Overloaded)):
            await client.generate(request())
        await client.aclose()
    assert len(server.requests) == 1


# --- typed errors ------------------------------------------------------------------------------------------

ERRORS: dict[str, tuple[ErrorReply, type[Exception]]] = {
    "rate-limit": (ErrorReply.rate_limited(retry_after=7), RateLimited),
    "overloaded": (ErrorReply.overloaded(), Overloaded),
    "bad-request": (ErrorReply(status=400), InvalidRequest),
    "bad-key": (ErrorReply(status=401), AuthenticationError),
    "no-model": (ErrorReply(status=404), ModelNotFound),
    "too-long": (ErrorReply.context_overflow(), ContextOverflow),
    "server": (ErrorReply(status=500), ServerError),
}


@every_client
@both_modes
@pytest.mark.parametrize("case", list(ERRORS))
async def test_http_errors_map_to_the_typed_errors(kind: str, stream: bool, case: str) -> None:
    reply, error_type = ERRORS[case]
    with FakeProviderServer([reply]) as server:
        client = make_client(kind, server)
        with pytest.raises(error_type) as caught:
            await client.generate(request(), stream=stream)
        await client.aclose()
    error = caught.value
    assert type(error) is error_type  # not merely a subclass: a 400 is no ContextOverflow
    assert error.status == {"overloaded": 529 if kind == "anthropic" else 503}.get(case, error.status)
    if case == "rate-limit":
        assert error.retry_after == 7.0  # type: ignore[attr-defined]
        assert error.status == 429
    assert error.retryable is (case in ("rate-limit", "overloaded", "server"))


@every_client
async def test_anthropic_529_and_a_503_elsewhere_are_overloaded(kind: str) -> None:
    with FakeProviderServer([ErrorReply.overloaded(retry_after=2)]) as server:
        client = make_client(kind, server)
        with pytest.raises(Overloaded) as caught:
            await client.generate(request())
        await client.aclose()
    assert caught.value.status == (529 if kind == "anthropic" else 503)
    assert caught.value.retry_after == 2.0


@every_client
async def test_an_error_event_in_the_middle_of_a_stream_is_a_typed_retryable_error(kind: str) -> None:
    with FakeProviderServer([StreamError("a reply that fails half way", ErrorReply.overloaded(), 3)]) as server:
        client = make_client(kind, server)
        with pytest.raises((Overloaded, ServerError)) as caught:
            await client.generate(request())
        await client.aclose()
    assert caught.value.retryable is True
    assert "overloaded" in str(caught.value)


# --- broken transport ----------------------------------------------------------------------------------------


@every_client
@pytest.mark.parametrize("clean", [False, True], ids=["dropped", "ended-early"])
async def test_a_stream_cut_mid_reply_is_stream_truncated(kind: str, clean: bool) -> None:
    seen: list[Any] = []
    with FakeProviderServer([CutStream("a long reply that never finishes", after_events=3, clean=clean)]) as server:
        client = make_client(kind, server)
        with pytest.raises(StreamTruncated) as caught:
            await client.generate(request(), on_event=seen.append)
        await client.aclose()
    assert caught.value.retryable is True
    assert seen  # the events before the cut were delivered: a retry must start the message afresh


@every_client
async def test_a_json_reply_cut_mid_body_is_stream_truncated(kind: str) -> None:
    with FakeProviderServer([CutStream("a whole reply that is cut in half")]) as server:
        client = make_client(kind, server)
        with pytest.raises(StreamTruncated) as caught:
            await client.generate(request(), stream=False)
        await client.aclose()
    assert caught.value.retryable is True
    assert "broke off" in str(caught.value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@every_client
@both_modes
async def test_a_refused_connection_is_connection_failed(kind: str, stream: bool) -> None:
    client = make_client(kind, f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ConnectionFailed) as caught:
        await client.generate(request(), stream=stream)
    await client.aclose()
    assert caught.value.retryable is True
    assert caught.value.provider == client.provider


@every_client
@both_modes
async def test_no_reply_within_the_timeout_is_provider_timeout(kind: str, stream: bool) -> None:
    with FakeProviderServer([Delay(5, "too late")]) as server:
        client = make_client(kind, server, timeout=0.1)
        with pytest.raises(ProviderTimeout) as caught:
            await client.generate(request(), stream=stream)
        await client.aclose()
    assert caught.value.retryable is True
    assert "no reply in time" in str(caught.value)


@every_client
async def test_a_stream_that_stalls_past_the_timeout_is_provider_timeout(kind: str) -> None:
    with FakeProviderServer(["a reply long enough to stall between its events"], event_delay=1.0) as server:
        client = make_client(kind, server, timeout=0.1)
        with pytest.raises(ProviderTimeout) as caught:
            await client.generate(request())
        await client.aclose()
    assert caught.value.retryable is True
    assert "the stream stalled" in str(caught.value)


# --- keys and base URLs ----------------------------------------------------------------------------------------

KEY_VAR = {"openai": "OPENAI_API_KEY", "openai-responses": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY",
           "gemini": "GOOGLE_API_KEY or GEMINI_API_KEY"}  # fmt: skip


@every_client
def test_a_missing_key_names_the_environment_variable(kind: str) -> None:
    with pytest.raises(MissingAPIKey) as caught:
        from_string(f"{kind}:some-model")
    assert caught.value.env_var == KEY_VAR[kind]
    assert (
        str(caught.value)
        == f"{kind if kind != 'openai-responses' else 'openai'}: no API key: set the {KEY_VAR[kind]} environment variable"
    )


@pytest.mark.parametrize("kind", ["openai", "openai-responses", "anthropic"])
@pytest.mark.parametrize("where", ["argument", "environment"])
async def test_a_client_given_a_base_url_needs_no_key(kind: str, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 18, item 25: anthropic: with a base_url (llama.cpp's Anthropic-compatible endpoint) still demanded
    # ANTHROPIC_API_KEY, where the OpenAI clients need none for a server of one's own.
    key_var, url_var = ENV[kind]
    monkeypatch.delenv(key_var, raising=False)
    with FakeProviderServer(["no key needed"]) as server:
        url = server.base_url + ("/v1" if kind.startswith("openai") else "")
        if where == "environment":
            monkeypatch.setenv(url_var, url)
            client = from_string(f"{kind}:{MODEL_OF[kind]}")
        else:
            monkeypatch.delenv(url_var, raising=False)
            client = from_string(f"{kind}:{MODEL_OF[kind]}", base_url=url)
        reply = await client.generate(request())
        await client.aclose()
    assert reply.message.text_content() == "no key needed"
    headers = server.requests[0].headers
    if kind == "anthropic":
        assert "x-api-key" not in headers and "authorization" not in headers  # no key is made up
    else:
        assert headers["authorization"] == "Bearer not-needed"  # the openai SDK insists on a key


ENV = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openai-responses": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "gemini": ("GEMINI_API_KEY", "GEMINI_BASE_URL"),
}


@every_client
async def test_the_key_and_base_url_come_from_the_providers_usual_variables(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_var, url_var = ENV[kind]
    with FakeProviderServer(["from the environment"]) as server:
        monkeypatch.setenv(key_var, "env-key")
        monkeypatch.setenv(url_var, server.base_url + ("/v1" if kind.startswith("openai") else ""))
        client = from_string(f"{kind}:{MODEL_OF[kind]}")
        reply = await client.generate(request())
        await client.aclose()
    assert reply.message.text_content() == "from the environment"
    assert key_sent(kind, server.requests[0].headers) == "env-key"


@every_client
@pytest.mark.parametrize(
    ("url", "suggestion"),
    [("localhost:11434/v1", "http://localhost:11434/v1"), ("ftp://host/v1", None), ("http://", None),
     ("http://[::1/v1", None), ("http://host:port/v1", None), (" http://host/v1", "http://host/v1")],
)  # fmt: skip
def test_a_base_url_that_is_not_an_http_url_is_refused_when_the_client_is_made(
    kind: str, url: str, suggestion: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 'localhost:11434/v1' (the scheme left out) was sent to as given: every request ConnectionFailed, retried;
    # ' http://host/v1' went to '%20http://host/v1/...'; 'http://host:port/v1' raised httpx2's own InvalidURL.
    with pytest.raises(InvalidBaseURL) as given:
        from_string(f"{kind}:{MODEL_OF[kind]}", base_url=url, api_key="k")
    assert (given.value.url, given.value.suggestion, given.value.source) == (url, suggestion, "base_url")
    assert "is not an http:// or https:// URL with a host (a port, if any, a number" in str(given.value)
    key_var, url_var = ENV[kind]
    monkeypatch.setenv(key_var, "env-key")
    monkeypatch.setenv(url_var, url)
    with pytest.raises(InvalidBaseURL, match=f"from {url_var}") as read:
        from_string(f"{kind}:{MODEL_OF[kind]}")
    assert read.value.source == url_var


def test_google_api_key_wins_over_gemini_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # google-genai's order: GOOGLE_API_KEY first (googleapis/python-genai, _api_client.py get_env_api_key).
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
    client = from_string("gemini:gemini-3-pro")
    assert isinstance(client, GeminiClient)
    assert client._headers["x-goog-api-key"] == "google-key"


@pytest.mark.parametrize("kind", ["openai", "openai-responses"])
async def test_an_openai_compatible_server_by_base_url_needs_no_key(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProviderServer(["local model here", "and again"]) as server:
        client = from_string(f"{kind}:llama-3", base_url=server.openai_base_url)
        first = await client.generate(request())
        await client.aclose()
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)  # the same through the environment
        client = from_string(f"{kind}:llama-3")
        second = await client.generate(request())
        await client.aclose()
    assert (first.message.text_content(), second.message.text_content()) == ("local model here", "and again")
    assert [r.model for r in server.requests] == ["llama-3", "llama-3"]


# --- from_string ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "cls", "model"),
    [
        ("openai:gpt-4o", OpenAIChatClient, "gpt-4o"),
        ("openai-responses:gpt-5", OpenAIResponsesClient, "gpt-5"),
        ("anthropic:claude-test-1", AnthropicClient, "claude-test-1"),
        ("gemini:gemini-3-pro", GeminiClient, "gemini-3-pro"),
        ("openai:org/model:tag", OpenAIChatClient, "org/model:tag"),  # the model keeps its own colons
    ],
)
async def test_from_string_picks_the_client_by_prefix(spec: str, cls: type, model: str) -> None:
    client = from_string(spec, api_key="k")
    assert type(client) is cls
    assert client.model == model
    await client.aclose()


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", "mistral:large", ":gpt-4o", "Anthropic:claude", ""])
def test_from_string_refuses_a_bad_spec_naming_the_prefixes(spec: str) -> None:
    with pytest.raises(
        ValueError,
        match="expected one of openai:MODEL, openai-responses:MODEL, openai-responses-ws:MODEL, anthropic:MODEL, gemini:MODEL",
    ) as caught:
        from_string(spec, api_key="k")
    assert repr(spec) in str(caught.value)


async def test_from_string_passes_options_to_the_client() -> None:
    with FakeProviderServer(["ok"]) as server:
        client = from_string(
            "anthropic:claude-x", api_key="k", base_url=server.base_url, codec_options={"prompt_cache": False}
        )
        await client.generate(request())
        await client.aclose()
    assert "cache_control" not in server.requests[0].raw.decode()


def test_a_whole_reply_keeps_a_tool_inputs_integers_past_64_bits_exactly() -> None:
    # The reply body was read with orjson, which turns 2**70 + 1 into 1.1805916207174113e+21 (2**70): the tool ran with
    # a different number than the model wrote.
    from loopctl.transport import AnthropicClient

    body = (
        b'{"type": "message", "role": "assistant", "model": "m", "stop_reason": "tool_use", "usage": {},'
        b' "content": [{"type": "tool_use", "id": "toolu_1", "name": "pick", "input": {"id": 1180591620717411303425}}]}'
    )
    response = AnthropicClient("m", api_key="k")._parse(body)
    assert response.message.tool_calls()[0].input == {"id": 2**70 + 1}


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("anthropic", b'{"type": "message", "content": [{"type": "text", "text": 5}]}'),
        ("anthropic", b'{"type": "message", "content": [], "usage": [1]}'),
        ("openai-responses", b'{"status": "completed", "output": [], "usage": {"input_tokens": "x"}}'),
    ],
)
def test_a_whole_reply_of_the_wrong_shape_is_the_providers_protocol_error(kind: str, body: bytes) -> None:
    # InvalidMessage (the caller's error), AttributeError and ValueError escaped the client.
    client = make_client(kind, "http://127.0.0.1:9")
    with pytest.raises(ProviderProtocolError, match=r"a reply of an unexpected shape"):
        client._parse(body)
