"""Gemini explicit caching (``ExplicitCache``, ai.google.dev/gemini-api/docs/caching) through the real client and
the fake server: a long stable start is cached once, later requests read from it and send only what follows,
a cache the server no longer has is forgotten and the request sent whole."""

from __future__ import annotations

from loopctl.engine import BareLoop, RunConfig, SessionConfig
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import FakeProviderServer
from loopctl.tool import tool
from loopctl.transport import GeminiClient
from loopctl.transport.gemini import ExplicitCache

MANUAL = "Follow the house style. " * 2_000  # about 12,000 tokens of stable system prompt


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def call(n: int) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{n}", "lookup", {"key": f"k{n}"})])


def generate_requests(server: FakeProviderServer) -> list[dict]:
    return [r.body for r in server.requests if r.api == "gemini" and "cachedContents" not in r.path]


def test_a_long_stable_prefix_is_cached_once_and_read_from() -> None:
    with FakeProviderServer([call(1), call(2), "done"]) as server:
        client = GeminiClient(
            "gemini-2.5-flash",
            api_key="k",
            base_url=server.base_url,
            explicit_cache=ExplicitCache(min_tokens=4_000, ttl=600),
        )
        run = BareLoop(client, [lookup], SessionConfig(system_prompt=MANUAL)).run_sync("go", RunConfig(stream=False))
    assert run.output == "done"
    creates = [r for r in server.requests if r.path.endswith("/cachedContents")]
    assert len(creates) == 1 and client.cache_creates == 1
    cache = creates[0].body
    assert cache["model"] == "models/gemini-2.5-flash" and cache["ttl"] == "600s"
    assert cache["systemInstruction"] == {"parts": [{"text": MANUAL}]}
    assert "tools" in cache
    sent = generate_requests(server)
    # The first call has nothing before its newest message to cache: sent whole.
    assert "cachedContent" not in sent[0] and "systemInstruction" in sent[0]
    # Later calls read the cache: no system prompt nor tools, only the contents after the cached ones.
    for body in sent[1:]:
        assert body["cachedContent"] == "cachedContents/fake000002"
        assert "systemInstruction" not in body and "tools" not in body
    assert len(sent[2]["contents"]) == len(sent[1]["contents"]) + 2
    # Call 2 caches the question and the first call; it sends the first tool result alone.
    assert [c["role"] for c in cache["contents"]] == ["user", "model"]
    assert [list(p) for c in sent[1]["contents"] for p in c["parts"]] == [["functionResponse"]]


def test_a_cache_the_server_dropped_is_forgotten_and_the_request_sent_whole() -> None:
    with FakeProviderServer([call(1), call(2), "done"]) as server:
        client = GeminiClient(
            "gemini-2.5-flash", api_key="k", base_url=server.base_url, explicit_cache=ExplicitCache(min_tokens=4_000)
        )
        loop = BareLoop(client, [lookup], SessionConfig(system_prompt=MANUAL))

        original = server._provider_state

        def expire_after_first_use(request, token):  # type: ignore[no-untyped-def]
            out = original(request, token)
            if isinstance(request.body, dict) and request.body.get("cachedContent") and out is None:
                server.cached_contents.clear()  # the next request names a cache that is gone
            return out

        server._provider_state = expire_after_first_use  # type: ignore[method-assign]
        run = loop.run_sync("go", RunConfig(stream=False))
    assert run.output == "done"
    sent = generate_requests(server)
    # Call 3 named the dropped cache (404), and went again whole, with its system prompt.
    assert "cachedContent" in sent[2] and "cachedContent" not in sent[3] and "systemInstruction" in sent[3]


def test_a_short_prefix_is_not_cached() -> None:
    with FakeProviderServer([call(1), "done"]) as server:
        client = GeminiClient("gemini-2.5-flash", api_key="k", base_url=server.base_url, explicit_cache=ExplicitCache())
        BareLoop(client, [lookup], SessionConfig(system_prompt="short")).run_sync("go", RunConfig(stream=False))
    assert not any(r.path.endswith("/cachedContents") for r in server.requests)
    assert all("cachedContent" not in b for b in generate_requests(server))
