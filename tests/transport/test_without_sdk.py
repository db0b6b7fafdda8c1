"""``OpenAIChatClient.without_sdk`` (issue 23: the demo's client, made without importing the ``openai`` SDK)
sends what the SDK-configured client sends to a server of one's own: the same body bytes, the key as a bearer
token, JSON content type, the output limit as ``max_tokens``; and it decodes the same reply."""

from __future__ import annotations

import pytest

from loopctl.errors import AuthenticationError
from loopctl.message import Message
from loopctl.providers import ModelRequest
from loopctl.testing import ErrorReply, FakeProviderServer
from loopctl.transport import OpenAIChatClient
from tests.transport.test_one_stack import loaded_after

REQUEST = ModelRequest(messages=[Message.user("hi")], system="Be brief.", max_tokens=100)


@pytest.mark.parametrize("stream", [True, False])
async def test_it_sends_the_sdk_configured_clients_body_and_reads_the_same_reply(stream: bool) -> None:
    with FakeProviderServer(["Hello there.", "Hello there."]) as server:
        plain = OpenAIChatClient.without_sdk("m", base_url=server.openai_base_url, api_key="k-1")
        sdk = OpenAIChatClient("m", base_url=server.openai_base_url, api_key="k-1")
        try:
            got = [await plain.generate(REQUEST, stream=stream), await sdk.generate(REQUEST, stream=stream)]
        finally:
            await plain.aclose()
            await sdk.aclose()
    first, second = server.requests
    assert first.raw == second.raw
    assert first.body["max_tokens"] == 100 and "max_completion_tokens" not in first.body
    assert (first.path, second.path) == ("/v1/chat/completions", "/v1/chat/completions")
    for request in (first, second):
        assert request.headers["authorization"] == "Bearer k-1"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["accept"] == "application/json"
    assert got[0].message == got[1].message
    assert got[0].message.text_content() == "Hello there."
    assert got[0].usage == got[1].usage


async def test_its_errors_are_typed_and_its_key_redacted() -> None:
    reply = ErrorReply(status=401, message="Incorrect API key provided: k-secret-1")
    with FakeProviderServer([reply]) as server:
        client = OpenAIChatClient.without_sdk(
            "m", base_url=server.openai_base_url, api_key="k-secret-1", default_headers={"X-Probe": "1"}
        )
        with pytest.raises(AuthenticationError) as caught:
            await client.generate(REQUEST, stream=True)
        await client.aclose()
    assert "k-secret-1" not in str(caught.value)
    assert server.requests[0].headers["x-probe"] == "1"


def test_making_one_imports_no_sdk() -> None:
    code = (
        "from loopctl.transport import OpenAIChatClient\n"
        "OpenAIChatClient.without_sdk('m', base_url='http://127.0.0.1:9/v1', api_key='k')"
    )
    assert loaded_after(code, ("openai", "anthropic", "httpx2")) == ["httpx2"]
