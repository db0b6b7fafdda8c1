"""Prompt caching (``docs/providers.md``, "Prompt caching"): Anthropic's breakpoints and their time to live,
OpenAI's cache key and retention, the cache reads and writes in ``Usage`` and their price, and the event a
request that does not extend the previous one's prefix raises (a cache bust)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from loopctl.engine import BareLoop, Hook, PromptCacheBust, RunConfig, SessionConfig
from loopctl.errors import UnsupportedContent
from loopctl.message import Message, MessagePart, Role
from loopctl.pricing import price
from loopctl.providers import ModelRequest, anthropic, openai_chat, openai_responses
from loopctl.providers.cache import PrefixWatch, prompt_cache_key
from loopctl.response import Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolSchema, tool

ECHO = ToolSchema("echo", "Echo.", {"type": "object", "properties": {"x": {"type": "string"}}})
CONVERSATION = [
    Message.user("first question"),
    Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "echo", {"x": "a"})]),
    Message.new(Role.USER, [MessagePart.tool_result("c1", "echo", "a")]),
    Message.assistant("answer one"),
    Message.user("second question"),
]


def controls(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every cache_control of a body, with where it stands."""
    out = [(f"tools[{i}]", t["cache_control"]) for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    out += [(f"system[{i}]", b["cache_control"]) for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for mi, m in enumerate(body["messages"]):
        out += [
            (f"messages[{mi}][{bi}]", b["cache_control"]) for bi, b in enumerate(m["content"]) if "cache_control" in b
        ]
    return out


class TestAnthropicBreakpoints:
    def test_automatic_breakpoints_sit_on_the_stable_prefix_and_the_last_user_turns(self) -> None:
        """The prompt-caching docs: the prefix is tools, system, messages; at most four breakpoints; a
        breakpoint on the last user turn caches the conversation so far, the one before catches a turn that
        added more."""
        body = anthropic.build_request(CONVERSATION, model="m", system="Be brief.", tools=[ECHO])
        assert controls(body) == [
            ("tools[0]", {"type": "ephemeral"}),
            ("system[0]", {"type": "ephemeral"}),
            ("messages[2][0]", {"type": "ephemeral"}),
            ("messages[4][0]", {"type": "ephemeral"}),
        ]

    def test_a_ttl_goes_on_every_breakpoint_and_the_prefix_may_live_longer(self) -> None:
        body = anthropic.build_request(CONVERSATION, model="m", system="s", tools=[ECHO], cache_ttl="1h")
        assert {c["ttl"] for _, c in controls(body)} == {"1h"}
        mixed = anthropic.build_request(CONVERSATION, model="m", system="s", tools=[ECHO], prefix_cache_ttl="1h")
        assert [c.get("ttl") for _, c in controls(mixed)] == ["1h", "1h", None, None]

    def test_a_one_hour_breakpoint_after_a_five_minute_one_is_refused(self) -> None:
        # "Cache entries with longer TTL must appear before shorter TTLs" (prompt-caching docs).
        with pytest.raises(UnsupportedContent, match="cache_ttl '1h' is longer than prefix_cache_ttl '5m'"):
            anthropic.build_request(CONVERSATION, model="m", cache_ttl="1h", prefix_cache_ttl="5m")
        with pytest.raises(UnsupportedContent, match="cache_ttl must be '5m' or '1h'"):
            anthropic.build_request(CONVERSATION, model="m", cache_ttl="2h")  # type: ignore[arg-type]

    def test_manual_breakpoints_replace_the_automatic_ones(self) -> None:
        body = anthropic.build_request(
            CONVERSATION, model="m", system="s", tools=[ECHO], cache_breakpoints=["system", 0, 3], cache_ttl="1h"
        )
        assert controls(body) == [
            ("system[0]", {"type": "ephemeral", "ttl": "1h"}),
            ("messages[0][0]", {"type": "ephemeral", "ttl": "1h"}),
            ("messages[3][0]", {"type": "ephemeral", "ttl": "1h"}),
        ]
        with pytest.raises(UnsupportedContent, match="at most 4 breakpoints"):
            anthropic.build_request(CONVERSATION, model="m", cache_breakpoints=[0, 1, 2, 3, 4])
        with pytest.raises(UnsupportedContent, match="'tools' given, but the request has no tools"):
            anthropic.build_request(CONVERSATION, model="m", cache_breakpoints=["tools"])
        with pytest.raises(UnsupportedContent, match="9 is not 'tools', 'system' or a message index"):
            anthropic.build_request(CONVERSATION, model="m", cache_breakpoints=[9])

    def test_manual_breakpoints_are_the_same_bytes_incrementally(self) -> None:
        from loopctl.message.model import _dumps_bytes
        from loopctl.providers.base import RequestCache

        cache = RequestCache()
        for k in range(1, len(CONVERSATION) + 1):
            options: dict[str, Any] = {"model": "m", "system": "s", "cache_breakpoints": [0]}
            assert anthropic.encode_request(CONVERSATION[:k], cache=cache, **options) == _dumps_bytes(
                anthropic.build_request(CONVERSATION[:k], **options)
            )

    def test_the_one_hour_writes_are_read_from_usage_and_priced_higher(self) -> None:
        body = {
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 3000,
                "cache_read_input_tokens": 5000,
                "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
                "output_tokens": 5,
            },
        }
        usage = anthropic.parse_response(body).usage
        assert usage == Usage(
            input_tokens=8010,
            output_tokens=5,
            cache_read_tokens=5000,
            cache_write_tokens=3000,
            cache_write_1h_tokens=2000,
        )
        assert (usage + usage).cache_write_1h_tokens == 4000
        assert usage.to_dict()["cache_write_1h_tokens"] == 2000 and "cache_write_1h_tokens" not in Usage().to_dict()
        hour = price(usage, "claude-sonnet-4-5", provider="anthropic")
        five = price(
            Usage(input_tokens=8010, output_tokens=5, cache_read_tokens=5000, cache_write_tokens=3000),
            "claude-sonnet-4-5",
            provider="anthropic",
        )
        assert hour is not None and five is not None
        # 2,000 tokens written for an hour at $6/M instead of five minutes at $3.75/M.
        assert hour - five == Decimal("0.0045")


class TestOpenAICacheFields:
    def test_an_auto_key_is_stable_for_a_conversation_and_differs_between_them(self) -> None:
        first = openai_responses.build_request(CONVERSATION[:1], model="m", system="s", prompt_cache_key="auto")
        later = openai_responses.build_request(CONVERSATION, model="m", system="s", prompt_cache_key="auto")
        other = openai_responses.build_request(
            [Message.user("another task")], model="m", system="s", prompt_cache_key="auto"
        )
        assert first["prompt_cache_key"] == later["prompt_cache_key"] == prompt_cache_key(CONVERSATION, "s")
        assert first["prompt_cache_key"].startswith("loopctl-") and len(first["prompt_cache_key"]) == 40
        assert other["prompt_cache_key"] != first["prompt_cache_key"]

    def test_key_retention_and_options_on_both_apis(self) -> None:
        for codec in (openai_chat, openai_responses):
            body = codec.build_request(
                CONVERSATION,
                model="m",
                prompt_cache_key="tenant-7",
                prompt_cache_retention="24h",
                prompt_cache_options={"mode": "implicit"},
            )
            assert (body["prompt_cache_key"], body["prompt_cache_retention"], body["prompt_cache_options"]) == (
                "tenant-7",
                "24h",
                {"mode": "implicit"},
            )
            assert "prompt_cache_key" not in codec.build_request(CONVERSATION, model="m")
            with pytest.raises(UnsupportedContent, match="'in_memory' or '24h'"):
                codec.build_request(CONVERSATION, model="m", prompt_cache_retention="1d")  # type: ignore[arg-type]

    def test_the_clients_send_a_key_to_openai_only(self) -> None:
        from loopctl.transport import OpenAIChatClient, OpenAIResponsesClient

        own = OpenAIResponsesClient("gpt-5", api_key="k")
        compatible = OpenAIChatClient("llama", base_url="http://127.0.0.1:9/v1")
        request = ModelRequest(messages=CONVERSATION)
        assert own.build(request, stream=False)["prompt_cache_key"] == prompt_cache_key(CONVERSATION, None)
        assert "prompt_cache_key" not in compatible.build(request, stream=False)


class TestCacheBust:
    def test_the_watch_names_what_changed(self) -> None:
        watch = PrefixWatch()
        assert watch.check(CONVERSATION[:3], "s", [ECHO]) is None
        assert watch.check(CONVERSATION, "s", [ECHO]) is None  # extends it
        edited = [CONVERSATION[0], Message.assistant("rewritten"), *CONVERSATION[2:]]
        bust = watch.check(edited, "s", [ECHO])
        assert bust is not None and (bust.what, bust.index, bust.reason) == (
            "messages",
            1,
            "messages[1] (assistant) changed",
        )
        assert watch.check(edited, "t", [ECHO]).reason == "the system prompt changed"  # type: ignore[union-attr]
        dropped = watch.check(edited, "t", [])
        assert dropped is not None and dropped.reason == "the tools changed (-echo)"
        assert watch.check(edited[:2], "t", []).reason == "the conversation lost messages from messages[2] on"  # type: ignore[union-attr]
        # Equal messages that are new objects (a session read back from a file) extend the prefix.
        assert watch.check([Message.from_json(m.to_json()) for m in edited[:2]], "t", []) is None

    async def test_a_hook_that_edits_an_early_message_raises_a_cache_bust_event(self) -> None:
        events: list[Any] = []

        class Redact(Hook):
            def before_model(self, request: ModelRequest) -> ModelRequest | None:
                if len(request.messages) < 3:
                    return None
                first = Message.user("first question [redacted]")
                return ModelRequest(messages=[first, *request.messages[1:]], system=request.system, tools=request.tools)

        @tool
        def echo(x: str) -> str:
            """Echo."""
            return x

        client = ScriptedClient(
            [Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "echo", {"x": "a"})]), "done", "again"]
        )
        loop = BareLoop(client, [echo], SessionConfig(system_prompt="s"), hooks=[Redact()], observers=[events.append])
        await loop.run("first question", RunConfig(loop_detection=None))
        busts = [e for e in events if isinstance(e, PromptCacheBust)]
        # Call 1 sends the question; call 2 (the tool result) has three messages, and the hook rewrote the first:
        # the cache built by call 1 is of no use.
        assert [(b.turn, b.what, b.index, b.reason) for b in busts] == [
            (2, "messages", 0, "messages[0] (user) changed")
        ]
        events.clear()
        await loop.run("next", RunConfig(loop_detection=None))
        # The hook edits the first message the same way every time: the next run's request extends the last.
        assert [e for e in events if isinstance(e, PromptCacheBust)] == []

    async def test_the_bust_is_an_attribute_of_the_chat_span(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from loopctl.telemetry import OTelObserver

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        observer = OTelObserver(tracer_provider=provider)
        loop = BareLoop(ScriptedClient(["one", "two"]), [], SessionConfig(system_prompt="a"), observers=[observer])
        await loop.run("hi")
        loop.config = SessionConfig(system_prompt="b")  # the next run sends another system prompt
        await loop.run("again")
        chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
        assert [dict(s.attributes or {}).get("loopctl.prompt_cache.bust") for s in chats] == [
            None,
            "the system prompt changed",
        ]
