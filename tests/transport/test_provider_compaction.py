"""Provider-side compaction end to end: the real clients against the fake provider server (real HTTP and
SSE), the engine running the loop with a strategy from ``loopctl.compact.provider``, the session saved and
resumed, and the compacted conversation moved to another provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loopctl.compact import AnthropicClearToolUses, AnthropicCompaction, OpenAICompactEndpoint, OpenAICompaction
from loopctl.compact.provider import COMPACTED_PLACEHOLDER
from loopctl.engine import BareLoop, CompactionFinished, CompactionStarted, RunConfig, SessionConfig
from loopctl.message import CompactionPart, Message, Retention, Role, TextPart, ToolCallPart
from loopctl.session import Session
from loopctl.testing import FakeProviderServer, Replay
from loopctl.tool import ToolOutput, tool
from loopctl.transport import AnthropicClient, GeminiClient, OpenAIResponsesClient
from tests.conftest import TRAFFIC

NO_LOOPS = RunConfig(loop_detection=None)
BIG = "The quick brown fox jumps over the lazy dog. " * 4500  # about 50,000 tokens


@pytest.fixture(autouse=True)
def no_keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _compactions(events: list[Any]) -> list[Any]:
    """The compaction passes that ran (the prune line's pass, which drops no message, left out)."""
    return [
        e
        for e in events
        if isinstance(e, (CompactionStarted, CompactionFinished))
        and "prune" not in (e.reason, getattr(e, "kind", ""))
        and e.reason != "prune_line"
    ]


async def test_anthropic_compaction_survives_save_and_resume_and_never_goes_elsewhere(tmp_path: Path) -> None:
    """A conversation past the session's threshold: no local pass runs (the provider compacts at its
    trigger), the first reply (Anthropic's recorded compaction reply) opens with the compaction block, and from
    then on only the block and what follows it is sent. The session saved to a file and loaded by a new loop
    replays the block exactly; the same conversation continued on OpenAI Responses and Gemini carries no
    compaction at all."""
    events: list[Any] = []
    config = SessionConfig(system_prompt="Be brief.", context_window=60_000, compactor=AnthropicCompaction())
    script = [Replay(TRAFFIC / "anthropic" / "native-compaction-stream"), "You asked me to say hello.", "Hi.", "a", "b"]
    with FakeProviderServer(script) as server:
        client = AnthropicClient("claude-sonnet-4-6", api_key="k", base_url=server.base_url)
        loop = BareLoop(client, [], config, observers=[events.append])
        await loop.run(BIG + "Now say hello.", NO_LOOPS)
        second = await loop.run("What did I ask you to do?", NO_LOOPS)
        assert second.output == "You asked me to say hello."
        assert _compactions(events) == []  # 50,000 tokens is past this session's threshold (48,000)

        path = tmp_path / "session.json"
        Session(loop.into_machine(), model="anthropic:claude-sonnet-4-6").save(path)
        restarted = Session.load(path)
        client2 = AnthropicClient("claude-sonnet-4-6", api_key="k", base_url=server.base_url)
        await BareLoop.from_machine(restarted.machine, client2, [], config).run("And now?", NO_LOOPS)

        elsewhere = [
            OpenAIResponsesClient("gpt-5", api_key="k", base_url=server.openai_base_url),
            GeminiClient("gemini-2.5-flash", api_key="k", base_url=server.base_url),
        ]
        for other in elsewhere:
            await BareLoop.from_machine(restarted.machine, other, []).run("Anything else?", NO_LOOPS)

    first, after, resumed, openai, google = server.requests
    assert first.body["context_management"] == {
        "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]
    }
    assert "compact-2026-01-12" in first.headers["anthropic-beta"]
    block = orjson.loads(orjson.dumps(restarted.machine.history[1].parts[0].raw))  # type: ignore[union-attr]
    assert block["type"] == "compaction" and block["content"].startswith("The user provided a very long context")
    for request in (after, resumed):
        messages = request.body["messages"]
        assert messages[0]["content"][0]["text"] == COMPACTED_PLACEHOLDER.text_content()
        assert orjson.dumps(messages[1]["content"][0]) == orjson.dumps(block)
        assert len(request.raw) < 5_000  # the 200,000 characters before the block stay home
    assert b"The quick brown fox" in path.read_bytes() and b'"type":"compaction"' in path.read_bytes()
    for request in (openai, google):
        assert b"compaction" not in request.raw and b"The quick brown fox" in request.raw


async def test_anthropic_context_editing_keeps_durable_tools_from_clearing() -> None:
    @tool
    async def remember(key: str) -> ToolOutput:
        """Remember something for good."""
        return ToolOutput(f"remembered {key}", retention=Retention.DURABLE)

    call = Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="toolu_1", name="remember", input={"key": "k"}),))
    with FakeProviderServer([call, "ok", "fine"]) as server:
        client = AnthropicClient("claude-sonnet-4-6", api_key="k", base_url=server.base_url)
        strategy = AnthropicClearToolUses(keep_tool_uses=1, exclude_tools=("memory",))
        loop = BareLoop(client, [remember], SessionConfig(compactor=strategy))
        await loop.run("remember k", NO_LOOPS)
        await loop.run("again", NO_LOOPS)
    edits = [r.body["context_management"]["edits"][0] for r in server.requests]
    assert edits[0] == {
        "type": "clear_tool_uses_20250919",
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": ["memory"],
    }
    assert edits[-1]["exclude_tools"] == ["memory", "remember"]
    assert all(r.headers["anthropic-beta"] == "context-management-2025-06-27" for r in server.requests)


async def test_openai_compaction_item_goes_back_and_what_it_replaced_does_not() -> None:
    compaction = CompactionPart(
        provider="openai", raw={"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAAB-opaque"}
    )
    reply = Message(role=Role.ASSISTANT, parts=(TextPart(text="Long story."), compaction))
    with FakeProviderServer([reply, "Four."]) as server:
        client = OpenAIResponsesClient("gpt-4.1", api_key="k", base_url=server.openai_base_url)
        loop = BareLoop(client, [], SessionConfig(compactor=OpenAICompaction(threshold_tokens=1000)))
        await loop.run("Tell me a story.", NO_LOOPS)
        await loop.run("What is 2+2?", NO_LOOPS)
    first, second = server.requests
    assert first.body["context_management"] == [{"type": "compaction", "compact_threshold": 1000}]
    assert second.body["input"] == [compaction.raw, {"role": "user", "content": "What is 2+2?"}]


def test_a_strategy_for_another_provider_is_refused_when_the_loop_is_made() -> None:
    client = OpenAIResponsesClient("gpt-5", api_key="k", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="AnthropicCompaction is compaction by anthropic"):
        BareLoop(client, [], SessionConfig(compactor=AnthropicCompaction()))


async def test_the_compact_endpoint_replaces_the_conversation_and_keeps_durable_results() -> None:
    """Past the threshold the engine sends the conversation to ``POST /v1/responses/compact`` (the fake
    server answers as OpenAI does: the user messages, then one opaque compaction item) and goes on with that
    window, the durable tool result and its call after it; the next request sends the window whole."""

    @tool
    async def read(path: str) -> ToolOutput:
        """Read a file."""
        return ToolOutput(f"contents of {path}: hello", retention=Retention.DURABLE)

    events: list[Any] = []
    call = Message(role=Role.ASSISTANT, parts=(ToolCallPart(id="call_1", name="read", input={"path": "a.txt"}),))
    story = "Once upon a time. " * 356  # about 1,600 tokens
    with FakeProviderServer([call, story, "Done."]) as server:
        client = OpenAIResponsesClient("gpt-4o-mini", api_key="k", base_url=server.openai_base_url)
        config = SessionConfig(system_prompt="Short.", context_window=4_000, compactor=OpenAICompactEndpoint())
        loop = BareLoop(client, [read], config, observers=[events.append])
        await loop.run("Read a.txt and tell a story.", NO_LOOPS)
        assert _compactions(events) == []
        third = await loop.run("Now summarize it. " + "Please. " * 1000, NO_LOOPS)
        assert third.output == "Done."

    paths = [r.path for r in server.requests]
    assert paths == ["/v1/responses", "/v1/responses", "/v1/responses/compact", "/v1/responses"]
    compact = server.requests[2].body
    assert compact["instructions"] == "Short." and len(compact["input"]) == 5
    finished = [e for e in _compactions(events) if isinstance(e, CompactionFinished)]
    assert [(e.kind, e.reason) for e in finished] == [("provider", "threshold")]
    assert finished[0].tokens_after < finished[0].tokens_before
    item = next(iter(server.compactions))
    system, *sent = server.requests[3].body["input"]
    assert system == {"role": "developer", "content": "Short."}
    kinds = [i.get("type", "message") for i in sent]
    assert kinds == ["message", "message", "compaction", "function_call", "function_call_output"]
    assert sent[2]["id"] == item and sent[4]["output"] == "contents of a.txt: hello"
    assert [m.role for m in loop.history[:3]] == [Role.USER, Role.USER, Role.ASSISTANT]
    assert isinstance(loop.history[2].parts[0], CompactionPart)
