"""Redirects a pool follows: the next request goes where the server says, but no header holding the API key
leaves the origin (httpx strips only ``Authorization``; Gemini's key is in ``x-goog-api-key``), a redirect loop
ends in a typed error, and a redirect a pool does not follow is not taken for a reply."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from loopctl.errors import ProviderProtocolError
from loopctl.message import Message
from loopctl.providers.base import ModelRequest
from loopctl.testing import ErrorReply, FakeProviderServer
from tests.fake_clients import KINDS, make_client

KEY = "test-key"  # make_client's key
REQUEST = ModelRequest(messages=[Message.user("hi")], max_tokens=10)


def client_for(kind: str, server: FakeProviderServer, **kw: Any) -> Any:
    # The SDK clients' own pools follow redirects; Gemini's own pool does not, so it gets one that does, as a
    # caller may hand in.
    if kind == "gemini":
        kw["http_client"] = httpx2.AsyncClient(follow_redirects=True, **kw.pop("pool", {}))
    return make_client(kind, server, **kw)


def moved_to(url: str, status: int = 307) -> ErrorReply:
    return ErrorReply(status=status, headers={"location": url}, body={"moved": url})


def holding_key(headers: Any) -> dict[str, str]:
    return {name: value for name, value in headers.items() if KEY in value}


@pytest.mark.parametrize("kind", KINDS)
async def test_no_header_holding_the_key_follows_a_redirect_to_another_origin(kind: str) -> None:
    with FakeProviderServer(["from the other host"]) as other, FakeProviderServer([]) as first:
        client = client_for(kind, first)
        path = client.api_url.removeprefix(first.base_url)
        first.add(moved_to(other.base_url + path))
        reply = await client.generate(REQUEST, stream=False)
        await client.aclose()
    assert reply.message.text_content() == "from the other host"
    (asked,) = first.requests
    (followed,) = other.requests
    assert holding_key(asked.headers)  # the API itself got the key
    assert holding_key(followed.headers) == {}
    assert followed.raw == asked.raw  # a 307 sends the same body again


@pytest.mark.parametrize("kind", KINDS)
async def test_a_redirect_within_the_origin_keeps_the_key(kind: str) -> None:
    with FakeProviderServer([]) as server:
        client = client_for(kind, server)
        server.add(moved_to(client.api_url, 308), "same host")
        reply = await client.generate(REQUEST, stream=False)
        await client.aclose()
    assert reply.message.text_content() == "same host"
    first, second = server.requests
    assert holding_key(second.headers) == holding_key(first.headers) != {}


async def test_a_redirect_loop_is_a_typed_error_naming_the_count() -> None:
    with FakeProviderServer([]) as server:
        client = client_for("gemini", server, pool={"max_redirects": 2})
        server.add(*[moved_to(client.api_url)] * 3)
        with pytest.raises(ProviderProtocolError, match="more than 2 redirects"):
            await client.generate(REQUEST, stream=False)
        await client.aclose()
    assert len(server.requests) == 3


async def test_a_pool_that_follows_no_redirects_is_left_so() -> None:
    with FakeProviderServer([]) as other, FakeProviderServer([]) as first:
        client = make_client("gemini", first)  # its own pool: redirects not followed
        first.add(moved_to(other.base_url + "/elsewhere"))
        for stream in (False, True):  # a 3xx was taken for a reply: an empty one from Gemini's whole form
            with pytest.raises(ProviderProtocolError, match=r"HTTP 307, a redirect to '.*/elsewhere', not followed"):
                await client.generate(REQUEST, stream=stream)
            first.add(moved_to(other.base_url + "/elsewhere"))
        await client.aclose()
    assert other.requests == []


async def test_another_endpoints_post_follows_redirects_the_same_way() -> None:
    # Gemini's cache creation and the Responses API's conversations and compaction go through _post.
    with FakeProviderServer([]) as other, FakeProviderServer([]) as first:
        client = client_for("gemini", first)
        first.add(moved_to(other.base_url + "/v1beta/cachedContents"))
        raw = await client._post(client.api_url, b'{"model": "models/gemini-test", "contents": []}')
        await client.aclose()
    assert raw.status_code == 200 and raw.json()["name"].startswith("cachedContents/")
    assert holding_key(first.requests[0].headers)
    assert holding_key(other.requests[0].headers) == {}
