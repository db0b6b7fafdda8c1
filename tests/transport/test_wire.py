"""What the four clients put on the wire, checked on the bytes a real server receives: the codec's body
serialized once (integers past 64 bits exact), the headers the SDK itself would send, custom headers, one
kept-alive connection, a cancel that closes the stream, and an API key that never shows."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from typing import Any

import pytest

from loopctl.engine import BareLoop, Hook, RunConfig, SessionConfig
from loopctl.errors import AuthenticationError, ConnectionFailed, ProviderError
from loopctl.message import Message, MessagePart, Role
from loopctl.message.model import _dumps_bytes
from loopctl.providers.base import ModelRequest, OutputFormat
from loopctl.stream import StreamEvent
from loopctl.testing import ErrorReply, FakeProviderServer, StreamError
from loopctl.tool import ToolSchema, tool
from tests.fake_clients import KINDS, make_client
from tests.transport.test_clients import free_port

every_client = pytest.mark.parametrize("kind", KINDS)
both_modes = pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
sdk_clients = pytest.mark.parametrize("kind", ["openai", "openai-responses", "anthropic"])

BIG = 2**70 + 1  # past 64 bits: orjson cannot write it, the standard library can
PICK = ToolSchema("pick", "Pick a row.", {"type": "object", "properties": {"id": {"type": "integer"}}})


def big_int_history() -> list[Message]:
    return [
        Message.user("Pick row 1180591620717411303425, ünïcödé 🚀"),
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("call_1", "pick", {"id": BIG, "note": "é"})]),
        Message.new(Role.USER, [MessagePart.tool_result("call_1", "pick", "picked", False)]),
    ]


@every_client
@both_modes
async def test_the_bytes_sent_are_the_codecs_body_written_once_with_big_integers_exact(kind: str, stream: bool) -> None:
    # GeminiClient wrote the body with plain orjson, so a history holding 2**70 + 1 raised a bare TypeError.
    req = ModelRequest(messages=big_int_history(), system="Be brief.", tools=[PICK], max_tokens=50)
    with FakeProviderServer(["ok"]) as server:
        client = make_client(kind, server)
        reply = await client.generate(req, stream=stream)
        sent = client.encode(req, stream)
        body = client.build(req, stream)
        await client.aclose()
    assert reply.message.text_content() == "ok"
    (received,) = server.requests
    assert received.raw == sent == _dumps_bytes(body)
    assert b"1180591620717411303425" in received.raw
    assert received.headers["content-type"] == "application/json"
    assert received.headers["content-length"] == str(len(sent))


@sdk_clients
async def test_the_headers_are_the_ones_the_sdk_itself_sends(kind: str) -> None:
    # loopctl sends through the SDK's HTTP client with headers it read once from the SDK; an SDK call made the
    # usual way (which runs the SDK's whole request pipeline) must carry the same ones.
    with FakeProviderServer(["ours", "the sdk's"]) as server:
        client = make_client(kind, server, default_headers={"x-team": "blue"})
        await client.generate(ModelRequest(messages=[Message.user("hi")], max_tokens=10), stream=False)
        sdk: Any = client._sdk_client
        if kind == "openai":
            await sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        elif kind == "openai-responses":
            await sdk.responses.create(model="gpt-5", input="hi")
        else:
            await sdk.messages.create(
                model="claude-test-1", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        await client.aclose()
    ours, theirs = (dict(r.headers) for r in server.requests)
    per_request = {"content-length", "x-stainless-retry-count", "x-stainless-read-timeout", "x-stainless-timeout",
                   "idempotency-key"}  # fmt: skip
    assert {k: v for k, v in ours.items() if k not in per_request} == {
        k: v for k, v in theirs.items() if k not in per_request
    }
    assert ours["x-team"] == "blue"
    assert sdk.custom_auth is None  # no per-request auth that a header read once could miss


@every_client
async def test_custom_headers_and_base_url_reach_the_server(kind: str) -> None:
    with FakeProviderServer(["ok"]) as server:
        client = make_client(kind, server, default_headers={"x-team": "blue", "x-trace": "t-1"})
        await client.generate(ModelRequest(messages=[Message.user("hi")]))
        await client.aclose()
    (received,) = server.requests
    assert (received.headers["x-team"], received.headers["x-trace"]) == ("blue", "t-1")
    assert received.api is not None  # the base URL and the endpoint path were joined right


@every_client
async def test_a_header_given_in_another_case_replaces_the_clients_own_and_is_sent_once(kind: str) -> None:
    # A name is one header whatever its case. The SDKs lay a caller's default_headers over their own as a plain
    # dict, so `user-agent` went out beside `User-Agent` (two values of a field that takes one), and a Gemini
    # `Content-Type` beside the client's `content-type`.
    given = {"user-agent": "my-app/1.0", "Content-Type": "application/json; charset=utf-8", "X-Team": "blue"}
    with FakeProviderServer(["ok"]) as server:
        client = make_client(kind, server, default_headers=given)
        await client.generate(ModelRequest(messages=[Message.user("hi")], max_tokens=10), stream=False)
        await client.aclose()
    (received,) = server.requests
    assert received.headers["user-agent"] == "my-app/1.0"
    # The SDKs lay the caller's headers last; Gemini's client lays its key and content type over them.
    own = "application/json" if kind == "gemini" else "application/json; charset=utf-8"
    assert received.headers["content-type"] == own
    assert received.headers["x-team"] == "blue"


def test_merge_headers_folds_names_by_case_the_later_layer_winning_in_its_own_spelling() -> None:
    from loopctl.transport._http import merge_headers

    omit = object()  # the SDKs' marker for a header they leave out
    merged = merge_headers(
        {"User-Agent": "sdk/1", "Accept": "application/json", "X-Drop": "v"},
        {"user-agent": "mine/2", "x-drop": omit, "ACCEPT": "text/plain"},
        {"Authorization": "Bearer k"},
    )
    assert merged == {"user-agent": "mine/2", "ACCEPT": "text/plain", "Authorization": "Bearer k"}
    assert merge_headers() == {}


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
async def test_a_pool_handed_in_keeps_its_own_headers_and_each_request_carries_the_clients(library: str) -> None:
    # A pool the client made sends the client's headers as its defaults (merged once, not per call); a pool the
    # caller handed in is shared with their code, so it must not start sending the API key to other hosts.
    # An httpx pool (the older library, of the same API) is handed in as an httpx2 one is.
    import importlib

    from loopctl.transport import GeminiClient

    http = importlib.import_module(library)
    with FakeProviderServer(["one", "two"]) as server:
        async with http.AsyncClient(headers={"x-app": "mine"}) as pool:
            client = GeminiClient("gemini-test", api_key="g-key", base_url=server.base_url, http_client=pool)
            assert isinstance(client._targets[0], http.URL)  # parsed once, by the pool's own library
            await client.generate(ModelRequest(messages=[Message.user("hi")]), stream=True)
            await client.generate(ModelRequest(messages=[Message.user("hi")]), stream=False)
            assert dict(pool.headers) == {**dict(http.AsyncClient().headers), "x-app": "mine"}
        own = GeminiClient("gemini-test", api_key="g-key", base_url=server.base_url)
        assert own._http.headers["x-goog-api-key"] == "g-key"
        await own.aclose()
    assert [r.headers["x-goog-api-key"] for r in server.requests] == ["g-key", "g-key"]
    assert [r.headers["x-app"] for r in server.requests] == ["mine", "mine"]
    assert [(r.path.rpartition("/")[2], dict(r.query), r.stream) for r in server.requests] == [
        ("gemini-test:streamGenerateContent", {"alt": "sse"}, True),
        ("gemini-test:generateContent", {}, False),
    ]


async def test_a_pool_from_a_package_that_reexports_another_librarys_names_is_typed_by_its_own_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The pool's library was the first package in its classes' modules with a TimeoutException and a URL: a
    # helper package re-exporting httpx2's names, whose pool is an httpx client, was taken for a library and
    # the client could not be made (AttributeError: no TransportError), or typed errors by the wrong library.
    import types

    import httpx
    import httpx2

    from loopctl.transport import GeminiClient

    helper = types.ModuleType("wrapkit")
    helper.URL = httpx2.URL  # type: ignore[attr-defined]
    helper.TimeoutException = httpx2.TimeoutException  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wrapkit", helper)
    pool_class = type("Pool", (httpx.AsyncClient,), {"__module__": "wrapkit"})
    async with pool_class() as pool:
        client = GeminiClient(
            "gemini-test", api_key="g-key", base_url=f"http://127.0.0.1:{free_port()}", http_client=pool
        )
        assert client._transport_errors == (httpx.TransportError,)
        with pytest.raises(ConnectionFailed):
            await client.generate(ModelRequest(messages=[Message.user("hi")]))


async def test_a_tool_schema_edited_in_place_between_two_runs_reaches_the_wire_edited() -> None:
    # A FunctionTool's ToolSchema is one object across runs and the client keeps its tools' conversion per
    # schema object: an enum added to the tool's input_schema in place was not sent on the next run.
    from loopctl.transport import OpenAIChatClient

    @tool
    def pick(colour: str) -> str:
        """Pick a colour."""
        return colour

    with FakeProviderServer(["one", "two"]) as server:
        client = OpenAIChatClient.without_sdk("gpt-test", base_url=server.openai_base_url, api_key="k")
        await BareLoop(client, [pick]).run("first")
        pick.input_schema["properties"]["colour"]["enum"] = ["red", "blue"]  # type: ignore[index]
        await BareLoop(client, [pick]).run("second")
        await client.aclose()
    assert [r.body["tools"][0]["function"]["parameters"]["properties"]["colour"] for r in server.requests] == [
        {"type": "string"},
        {"type": "string", "enum": ["red", "blue"]},
    ]


async def test_beta_flags_a_request_needs_replace_the_pools_given_header_once_whatever_its_case() -> None:
    # The client's headers are the pool's defaults; a request that needs beta flags sends its own
    # anthropic-beta, which must replace the default (given here as "Anthropic-Beta") rather than go beside
    # it: one header line per request, read off the raw request.
    from loopctl.providers.native import RemoteMCP
    from loopctl.transport import AnthropicClient

    heads: list[list[tuple[str, str]]] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = [line.decode().split(":", 1) for line in head.split(b"\r\n")[1:] if line]
            fields = [(name.lower(), value.strip()) for name, value in lines]
            heads.append(fields)
            await reader.readexactly(int(dict(fields)["content-length"]))
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = AnthropicClient(
        "claude-test", api_key="a-key", base_url=f"http://127.0.0.1:{port}", default_headers={"Anthropic-Beta": "given"}
    )
    mcp = RemoteMCP("wiki", "https://mcp.example/mcp")
    for native in ((mcp,), (), (mcp,)):
        with pytest.raises(ProviderError):
            await client.generate(ModelRequest(messages=[Message.user("hi")], native_tools=native), stream=False)
    await client.aclose()
    server.close()
    assert [[v for k, v in head if k == "anthropic-beta"] for head in heads] == [
        ["given,mcp-client-2025-04-04"],
        ["given"],
        ["given,mcp-client-2025-04-04"],
    ]
    keys = [[v for k, v in head if k in ("x-api-key", "authorization")] for head in heads]
    assert [len(sent) for sent in keys] == [1, 1, 1]  # the SDK's one credential header (its form is the SDK's)
    assert all(sent[0].endswith("a-key") for sent in keys)


@every_client
async def test_calls_share_one_kept_alive_connection(kind: str) -> None:
    connections = 0

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            body = b"{}"
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n" + body
            )
            await writer.drain()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = make_client(kind, f"http://127.0.0.1:{port}")
    for _ in range(3):
        with pytest.raises(ProviderError):
            await client.generate(ModelRequest(messages=[Message.user("hi")]), stream=False)
    await client.aclose()
    server.close()
    assert connections == 1


@every_client
async def test_a_cancel_mid_stream_stops_reading_and_the_client_stays_usable(kind: str) -> None:
    seen: list[StreamEvent] = []
    first = asyncio.Event()

    def on_event(event: StreamEvent) -> None:
        seen.append(event)
        first.set()

    long_reply = " ".join(f"word{i}" for i in range(200))
    with FakeProviderServer([long_reply, "again"], event_delay=0.05, chunk_size=16) as server:
        client = make_client(kind, server)
        task = asyncio.ensure_future(client.generate(ModelRequest(messages=[Message.user("hi")]), on_event=on_event))
        await asyncio.wait_for(first.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        count = len(seen)
        await asyncio.sleep(0.2)
        assert len(seen) == count  # nothing read after the cancel
        reply = await client.generate(ModelRequest(messages=[Message.user("hi")]))
        await client.aclose()
    assert reply.message.text_content() == "again"
    assert len(server.requests) == 2


# --- the key stays secret ---------------------------------------------------------------------------------------

SECRET = "sk-test-SECRET-0123456789abcdef"


def _texts(error: BaseException) -> list[str]:
    out = [str(error), repr(error), *map(str, error.args)]
    if isinstance(error, ProviderError):
        out += [str(error.provider_message), repr(error.body)]
    return out


@every_client
@both_modes
async def test_an_api_key_never_appears_in_a_repr_a_log_line_or_an_error_message(
    kind: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx2's and the SDKs' included
    quoting = f"Incorrect API key provided: {SECRET}. You can find your API key at the console."
    script = [
        "fine",
        ErrorReply(status=401, message=quoting),
        StreamError("half a reply", ErrorReply(status=500, message=f"upstream refused {SECRET}"), 2),
    ]
    errors: list[BaseException] = []
    with FakeProviderServer(script) as server:
        client = make_client(kind, server, api_key=SECRET)
        req = ModelRequest(messages=[Message.user("hi")])
        await client.generate(req, stream=stream)
        with pytest.raises(AuthenticationError) as refused:
            await client.generate(req, stream=stream)
        errors.append(refused.value)
        with pytest.raises(ProviderError) as failed:
            await client.generate(req, stream=stream)
        errors.append(failed.value)
        shown = [repr(client), str(client)]
        await client.aclose()
    unreachable = make_client(kind, f"http://127.0.0.1:{free_port()}", api_key=SECRET)
    with pytest.raises(ConnectionFailed) as caught:
        await unreachable.generate(req, stream=stream)
    errors.append(caught.value)
    await unreachable.aclose()
    assert key_was_sent(kind, server.requests[0].headers)
    assert "Incorrect API key provided: [redacted]" in str(refused.value)
    texts = shown + [t for e in errors for t in _texts(e)] + [r.getMessage() for r in caplog.records]
    assert caplog.records  # the SDKs and httpx2 did log
    assert [t for t in texts if SECRET in t] == []


def key_was_sent(kind: str, headers: Any) -> bool:
    return SECRET in " ".join(headers.get(h, "") for h in ("authorization", "x-api-key", "x-goog-api-key"))


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


class Redactor(Hook):
    """A ``before_model`` hook that changes some requests for that call only, as a moderation or redaction
    hook does: the prompt redacted, a tool result redacted, a reminder appended with a typed output format,
    every message copied. Keeps each request it returned."""

    def __init__(self) -> None:
        self.sent: list[ModelRequest] = []

    def before_model(self, request: ModelRequest) -> ModelRequest:
        messages = list(request.messages)
        how = len(self.sent) % 5
        if how == 1:  # the first message (the key of the conversation's kept prefix) replaced
            messages[0] = Message.user("[redacted prompt]")
        elif how == 2:  # a tool result deep in the kept prefix replaced
            i = next(i for i, m in enumerate(messages) if m.role is Role.USER and m.tool_results())
            first = messages[i].tool_results()[0]
            messages[i] = Message.new(
                Role.USER, [MessagePart.tool_result(first.call_id, first.name, "[redacted]", first.is_error)]
            )
        elif how == 3:  # a reminder added at the end, and a typed output asked for
            messages.append(Message.new(Role.SYSTEM, [MessagePart.text("Reminder: answer in JSON.")]))
            request = dataclasses.replace(request, output_format=OutputFormat("answer", ANSWER_SCHEMA))
        elif how == 4:  # the same messages, as new objects
            messages = [Message.new(m.role, m.parts) for m in messages]
        request = dataclasses.replace(request, messages=messages)
        self.sent.append(request)
        return request


ANSWER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@every_client
@both_modes
async def test_a_request_changed_by_a_before_model_hook_is_sent_as_a_fresh_build_of_it(kind: str, stream: bool) -> None:
    # The incremental build reuses the bytes of the previous request of a conversation only when the request
    # starts with those very messages; a hook's changes (for one call, then the history again) must never
    # reuse a stale prefix, nor the hook's request be reused by the next one.
    turns = 11
    script = [
        Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"call_{t}", "echo", {"text": f"t{t}"})])
        for t in range(turns)
    ]
    hook = Redactor()
    with FakeProviderServer([*script, Message.assistant('{"city": "Oslo"}')]) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [echo], SessionConfig(system_prompt="Be brief."), hooks=[hook])
        run = await loop.run("Echo eleven times.", RunConfig(stream=stream))
        expected = [_dumps_bytes(client.build(request, stream)) for request in hook.sent]
        await client.aclose()
    assert run.ok, run.error
    assert len(server.requests) == len(hook.sent) == turns + 1
    for n, (received, body) in enumerate(zip(server.requests, expected, strict=True)):
        assert received.raw == body, f"request {n} (hook case {n % 5})"
    assert b"[redacted prompt]" in server.requests[1].raw and b"[redacted prompt]" not in server.requests[2].raw
    assert b"Reminder: answer in JSON." in server.requests[3].raw and b"Reminder" not in server.requests[4].raw
