"""Built-in tools end to end: the real clients against the fake provider server (real HTTP and SSE), the
engine running the loop, a session saved to a file and resumed in a new loop (a restart)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loopctl.engine import BareLoop, RunConfig, SessionConfig
from loopctl.message import Message, Role, ServerToolCallPart, ServerToolResultPart, TextPart
from loopctl.providers.native import RemoteMCP, WebSearch
from loopctl.session import Session
from loopctl.testing import FakeProviderServer, Replay
from loopctl.transport import AnthropicClient, OpenAIResponsesClient
from tests.conftest import TRAFFIC

NO_LOOPS = RunConfig(loop_detection=None)


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_a_session_that_used_web_search_resumes_after_a_restart(tmp_path: Path) -> None:
    """Turn 1 replays Anthropic's recorded web search reply (streamed); the session is saved; a new loop
    (a new process would do the same) loads it and asks again: the second request carries the first reply's
    server_tool_use and web_search_tool_result blocks exactly, and the web_search tool again."""
    with FakeProviderServer([Replay(TRAFFIC / "anthropic" / "native-web-search-stream"), "Nothing new."]) as server:
        client = AnthropicClient("claude-sonnet-4-0", api_key="k", base_url=server.base_url, native_tools=[WebSearch()])
        loop = BareLoop(client, [], SessionConfig(system_prompt="Be brief."))
        first = loop.run_sync("What are the top world news today?", NO_LOOPS)
        assert first.output.startswith("Let me search for more specific breaking news stories")
        calls = [p for p in loop.history[-1].parts if isinstance(p, ServerToolCallPart)]
        assert [c.input for c in calls] == [
            {"query": "top world news today"},
            {"query": "breaking news headlines August 14 2025"},
        ]
        path = tmp_path / "session.json"
        Session(loop.into_machine(), model="anthropic:claude-sonnet-4-0").save(path)
        assert b'"type":"server_tool_call"' in path.read_bytes()

        restarted = Session.load(path)
        client2 = AnthropicClient(
            "claude-sonnet-4-0", api_key="k", base_url=server.base_url, native_tools=[WebSearch()]
        )
        loop2 = BareLoop.from_machine(restarted.machine, client2, [], SessionConfig(system_prompt="Be brief."))
        second = loop2.run_sync("Anything newer?", NO_LOOPS)
        assert second.output == "Nothing new."

    sent = server.requests[1].body
    assistant = sent["messages"][1]["content"]
    history_reply = restarted.machine.history[1]
    raws = [p.raw for p in history_reply.parts if isinstance(p, (ServerToolCallPart, ServerToolResultPart))]
    server_blocks = [b for b in assistant if b["type"] in ("server_tool_use", "web_search_tool_result")]
    assert [orjson.dumps(b) for b in server_blocks] == [orjson.dumps(r) for r in raws]
    assert server_blocks[1]["content"][0]["encrypted_content"].startswith("EtweCioIBhgC")
    assert sent["tools"] == [
        {"type": "web_search_20250305", "name": "web_search", "cache_control": {"type": "ephemeral"}}
    ]
    # The first reply's text kept its citations, and they go back with it.
    assert any(isinstance(p, TextPart) and p.citations for p in history_reply.parts)
    assert any("citations" in b for b in assistant if b["type"] == "text")


def test_the_same_conversation_continues_on_another_provider_as_notes() -> None:
    """A web search run on Anthropic continued on OpenAI Responses: the server blocks become notes, the
    request is one the Responses API takes."""
    with FakeProviderServer([Replay(TRAFFIC / "anthropic" / "native-web-search-stream"), "ok"]) as server:
        anthropic_client = AnthropicClient("claude-sonnet-4-0", api_key="k", base_url=server.base_url)
        loop = BareLoop(anthropic_client, [])
        loop.run_sync("news?", NO_LOOPS)
        responses = OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url)
        moved = BareLoop.from_machine(loop.into_machine(), responses, [])
        assert moved.run_sync("and?", NO_LOOPS).output == "ok"
    items = server.requests[1].body["input"]
    notes = [i["content"] for i in items if i.get("role") == "assistant" and isinstance(i.get("content"), str)]
    assert notes[0] == '[web_search ran at anthropic with input: {"query":"top world news today"}]'
    assert notes[1].startswith("[web_search result: World news - breaking news, video, headlines and opinion | CNN")
    assert not any(i.get("type") in ("server_tool_use", "web_search_tool_result") for i in items)


@pytest.mark.parametrize("stream", [True, False])
def test_the_fake_server_replies_with_scripted_native_parts_and_the_client_reads_them_back(stream: bool) -> None:
    call = ServerToolCallPart(
        id="ws_1",
        name="web_search",
        input={"type": "search", "query": "q"},
        provider="openai",
        raw={
            "id": "ws_1",
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
    )
    result = ServerToolResultPart(call_id="ws_1", name="web_search", output="search completed", provider="openai")
    cited = TextPart(
        text="Answer.",
        item_id="msg_1",
        citations=({"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 6},),
        provider="openai",
    )
    with FakeProviderServer([Message.new(Role.ASSISTANT, [call, result, cited])]) as server:
        client = OpenAIResponsesClient(
            "gpt-5", api_key="k", base_url=server.openai_base_url, native_tools=[WebSearch()]
        )
        loop = BareLoop(client, [])
        run = loop.run_sync("q", RunConfig(stream=stream, loop_detection=None))
    assert loop.history[-1].parts == (call, result, cited)
    assert run.output == "Answer."
    assert server.requests[0].body["tools"] == [{"type": "web_search"}]


def test_the_anthropic_client_adds_the_beta_flag_a_tool_needs_to_the_given_ones() -> None:
    with FakeProviderServer(["ok", "ok"]) as server:
        client = AnthropicClient(
            "claude-sonnet-4-5",
            api_key="k",
            base_url=server.base_url,
            default_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
            native_tools=[RemoteMCP("deepwiki", "https://mcp.deepwiki.com/mcp")],
        )
        BareLoop(client, []).run_sync("hi", NO_LOOPS)
        plain = AnthropicClient("claude-sonnet-4-5", api_key="k", base_url=server.base_url)
        BareLoop(plain, []).run_sync("hi", NO_LOOPS)
    assert server.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14,mcp-client-2025-04-04"
    assert server.requests[0].body["mcp_servers"] == [
        {"type": "url", "url": "https://mcp.deepwiki.com/mcp", "name": "deepwiki"}
    ]
    assert "anthropic-beta" not in server.requests[1].headers
