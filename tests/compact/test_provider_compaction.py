"""Provider-side compaction strategies (``loopctl.compact.provider``): how each codec sends them, checked
against real recorded requests (``tests/fixtures/provider-traffic/*/native-compact*``, from pydantic-ai's
cassettes: ``INDEX.md``), and what a conversation holding a provider's compaction sends to that provider
(only what it still reads) and to the others (never the compaction).

Rules: platform.claude.com/docs/en/build-with-claude/compaction and .../context-editing;
developers.openai.com/api/docs/guides/compaction. ``docs/compaction.md``, "Provider-side compaction".
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loopctl.compact.provider import (
    COMPACTED_PLACEHOLDER,
    AnthropicClearToolUses,
    AnthropicCompaction,
    OpenAICompactEndpoint,
    OpenAICompaction,
    durable_after,
    durable_tool_names,
    provider_window,
    resolve,
    window_start,
)
from loopctl.errors import UnsupportedContent
from loopctl.message import (
    CompactionPart,
    Message,
    Retention,
    Role,
    TextPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from tests.conftest import Recording
from tests.providers.anthropic_reader import normalized


def _user_text(request: dict[str, Any], index: int) -> str:
    content = request["messages"][index]["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content if b["type"] == "text")


# --- Anthropic ----------------------------------------------------------------------------------------------


def test_anthropic_compaction_is_the_recorded_edit_and_its_beta() -> None:
    recorded = Recording("anthropic", "native-compaction").request
    strategy = AnthropicCompaction(trigger_tokens=50_000)
    body = anthropic.build_request(
        [Message.user(_user_text(recorded, 0))],
        model="claude-sonnet-4-6",
        system=recorded["system"],
        max_tokens=4096,
        prompt_cache=False,
        context_management=strategy,
    )
    assert body["context_management"] == recorded["context_management"]
    assert anthropic.beta_flags(context_management=strategy) == ("compact-2026-01-12",)
    assert Recording("anthropic", "native-compaction").meta["url"].endswith("/v1/messages?beta=true")


def test_anthropic_followup_sends_the_compaction_block_first_and_nothing_the_api_drops() -> None:
    """The recorded follow-up (a 200) sent the long first message, then the reply with its compaction block.
    The API reads nothing before that block, so the codec sends a short placeholder in its place; the
    assistant turn goes back exactly as recorded."""
    first = Recording("anthropic", "native-compaction")
    followup = Recording("anthropic", "native-compaction-followup").request
    reply = anthropic.parse_response(first.response_json).message
    conversation = [Message.user(_user_text(first.request, 0)), reply, Message.user("What did I ask you to do?")]
    body = anthropic.build_request(
        conversation,
        model="claude-sonnet-4-6",
        system=followup["system"],
        max_tokens=4096,
        prompt_cache=False,
        context_management=AnthropicCompaction(trigger_tokens=50_000),
    )
    assert body["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": COMPACTED_PLACEHOLDER.text_content()}],
    }
    assert normalized(body["messages"][1:]) == normalized(followup["messages"][1:])
    recorded_block = first.response_json["content"][0]
    assert orjson.dumps(body["messages"][1]["content"][0]) == orjson.dumps(recorded_block)  # as received
    assert len(orjson.dumps(body)) < len(orjson.dumps(followup)) // 10  # the dropped 55,000 tokens stay home
    assert body["context_management"] == followup["context_management"]


def test_anthropic_context_editing_edit_and_beta() -> None:
    clear = AnthropicClearToolUses(
        trigger_tokens=30_000, keep_tool_uses=2, clear_at_least_tokens=5_000, exclude_tools=("memory",)
    )
    body = anthropic.build_request([Message.user("hi")], model="m", context_management=clear)
    assert body["context_management"] == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 30_000},
                "keep": {"type": "tool_uses", "value": 2},
                "clear_at_least": {"type": "input_tokens", "value": 5_000},
                "exclude_tools": ["memory"],
            }
        ]
    }
    assert anthropic.beta_flags(context_management=clear) == ("context-management-2025-06-27",)
    by_uses = AnthropicClearToolUses(trigger_tool_uses=10, clear_tool_inputs=("bash",)).edit()
    assert by_uses == {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 10},
        "clear_tool_inputs": ["bash"],
    }
    assert AnthropicClearToolUses().edit() == {"type": "clear_tool_uses_20250919"}


def test_anthropic_compaction_with_context_editing_sends_both_edits_and_both_betas() -> None:
    strategy = AnthropicCompaction(instructions="Keep file paths.", clear_tool_uses=AnthropicClearToolUses())
    body = anthropic.build_request([Message.user("hi")], model="m", context_management=strategy)
    assert body["context_management"]["edits"] == [
        {"type": "clear_tool_uses_20250919"},
        {"type": "compact_20260112", "instructions": "Keep file paths."},
    ]
    assert anthropic.beta_flags(context_management=strategy) == (
        "compact-2026-01-12",
        "context-management-2025-06-27",
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: AnthropicCompaction(trigger_tokens=49_999),  # the API's minimum is 50,000
        lambda: AnthropicCompaction(instructions="  "),
        lambda: AnthropicClearToolUses(trigger_tokens=1, trigger_tool_uses=1),
        lambda: AnthropicClearToolUses(keep_tool_uses=-1),
        lambda: OpenAICompaction(threshold_tokens=0),
        lambda: OpenAICompaction(threshold_tokens=True),
    ],
)
def test_impossible_settings_are_refused_when_made(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def test_a_manual_breakpoint_index_still_names_the_same_message_after_a_compaction() -> None:
    reply = anthropic.parse_response(Recording("anthropic", "native-compaction").response_json).message
    conversation = [Message.user("long " * 100), reply, Message.user("next")]
    body = anthropic.build_request(conversation, model="m", cache_breakpoints=[2])
    assert "cache_control" in body["messages"][2]["content"][-1]
    with pytest.raises(UnsupportedContent, match="before the compaction block"):
        anthropic.build_request(conversation, model="m", cache_breakpoints=[0])


# --- OpenAI Responses ---------------------------------------------------------------------------------------


def _read_items(items: list[dict[str, Any]]) -> list[Message]:
    """Recorded ``{"role", "content": str}`` input items as messages."""
    roles = {"user": Role.USER, "assistant": Role.ASSISTANT}
    return [Message(role=roles[i["role"]], parts=(TextPart(text=i["content"]),)) for i in items]


def test_openai_compaction_is_the_recorded_context_management() -> None:
    recorded = Recording("openai", "native-compaction").request
    body = openai_responses.build_request(
        _read_items(recorded["input"]), model="gpt-4.1", context_management=OpenAICompaction(threshold_tokens=1000)
    )
    assert body["context_management"] == recorded["context_management"]
    assert body["input"] == recorded["input"]


def test_openai_followup_starts_at_the_compaction_item() -> None:
    """The reply's compaction item goes back exactly; what came before it (the earlier turns and the reply's
    own text, which the item carries) is left out, as the guide allows."""
    first = Recording("openai", "native-compaction")
    followup = Recording("openai", "native-compaction-followup").request
    reply = openai_responses.parse_response(first.response_json).message
    conversation = [*_read_items(first.request["input"]), reply, Message.user("What is 2+2?")]
    body = openai_responses.build_request(conversation, model="gpt-4.1", context_management=OpenAICompaction(1000))
    recorded_item = next(i for i in followup["input"] if i.get("type") == "compaction")
    assert body["input"] == [recorded_item, {"role": "user", "content": "What is 2+2?"}]
    assert orjson.dumps(body["input"][0]) == orjson.dumps(recorded_item)


def test_openai_chaining_is_never_pruned() -> None:
    """With ``previous_response_id`` only the new input goes, whatever the conversation holds ("If you use
    previous_response_id chaining, do not manually prune")."""
    reply = openai_responses.parse_response(Recording("openai", "native-compaction").response_json).message
    conversation = [Message.user("a"), reply, Message.user("b")]
    body = openai_responses.build_request(conversation, model="m", previous_response_id="resp_1", continue_from=2)
    assert body["input"] == [{"role": "user", "content": "b"}]


def test_the_compact_endpoint_request_and_its_recorded_window() -> None:
    recorded = Recording("openai", "native-compact-endpoint")
    messages = _read_items(recorded.request["input"])
    body = openai_responses.build_compact_request(
        messages, model="gpt-4o-mini", system=recorded.request["instructions"]
    )
    assert body == recorded.request
    window, usage = openai_responses.parse_compacted(recorded.response_json)
    assert [m.role for m in window] == [Role.USER, Role.USER, Role.ASSISTANT]
    assert [m.text_content() for m in window[:2]] == ["What is 2+2?", "And 3+3?"]
    compaction = window[2].parts[0]
    assert isinstance(compaction, CompactionPart) and compaction.provider == "openai"
    assert compaction.raw == recorded.response_json["output"][2]
    assert usage.input_tokens == recorded.response_json["usage"]["input_tokens"]


def test_the_compacted_window_is_passed_on_whole() -> None:
    """ "Do not prune the compact response": the user messages before the endpoint's compaction item go with
    it, then the new input; the item itself exactly as received."""
    recorded = Recording("openai", "native-compact-endpoint")
    window, _ = openai_responses.parse_compacted(recorded.response_json)
    body = openai_responses.build_request(
        [*window, Message.user("And 5+5?")], model="gpt-4o-mini", system="Short.", system_as_instructions=True
    )
    assert body["input"] == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "user", "content": "And 3+3?"},
        recorded.response_json["output"][2],
        {"role": "user", "content": "And 5+5?"},
    ]


# --- the strategies where their provider is not -------------------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "strategy", "options"),
    [
        (anthropic, OpenAICompaction(), {}),
        (anthropic, OpenAICompactEndpoint(), {}),
        (openai_responses, AnthropicCompaction(), {}),
        (openai_responses, OpenAICompactEndpoint(), {}),
        (openai_chat, OpenAICompaction(), {}),
        (gemini, AnthropicClearToolUses(), {}),
    ],
)
def test_a_strategy_its_provider_does_not_run_is_refused_before_sending(
    codec: Any, strategy: object, options: dict[str, Any]
) -> None:
    with pytest.raises(UnsupportedContent, match="context_management"):
        codec.build_request([Message.user("hi")], model="gemini-2.5-flash", context_management=strategy, **options)


def test_a_compaction_never_reaches_another_provider() -> None:
    """A conversation compacted by Anthropic, sent to the others: no compaction, and everything else there
    (the other providers read the whole conversation)."""
    reply = anthropic.parse_response(Recording("anthropic", "native-compaction").response_json).message
    conversation = [Message.user("first"), reply, Message.user("next")]
    for body in (
        openai_responses.build_request(conversation, model="m"),
        openai_chat.build_request(conversation, model="m"),
        gemini.build_request(conversation, model="gemini-2.5-flash"),
    ):
        raw = orjson.dumps(body)
        assert b"compaction" not in raw and b"first" in raw and b"Hello!" in raw


# --- the pure helpers ---------------------------------------------------------------------------------------


def _compaction(provider: str) -> CompactionPart:
    return CompactionPart(provider=provider, summary="s", raw={"type": "compaction", "content": "s"})


def test_the_window_starts_at_the_provider_s_own_last_compaction() -> None:
    system = Message(role=Role.SYSTEM, parts=(TextPart(text="rules"),))
    early = Message(role=Role.ASSISTANT, parts=(_compaction("anthropic"),))
    late = Message(role=Role.ASSISTANT, parts=(TextPart(text="t"), _compaction("anthropic")))
    other = Message(role=Role.ASSISTANT, parts=(_compaction("openai"),))
    messages = [system, Message.user("a"), early, Message.user("b"), late, Message.user("c"), other]
    assert window_start(messages, "anthropic") == (4, 1)
    window = provider_window(messages, "anthropic", lead=True)
    assert window[0] is system and window[1] is COMPACTED_PLACEHOLDER
    assert window[2].parts == (late.parts[1],) and list(window[3:]) == messages[5:]
    assert provider_window(messages, "gemini") is messages
    assert window_start(messages, "gemini") == (0, 0)


def test_durable_results_and_their_calls_are_what_follows_a_provider_window() -> None:
    call = ToolCallPart(id="c1", name="read", input={})
    kept = ToolResultPart(call_id="c1", name="read", output=ToolContent("x"), retention=Retention.DURABLE)
    other_call = ToolCallPart(id="c2", name="ls", input={})
    other = ToolResultPart(call_id="c2", name="ls", output=ToolContent("y"))
    messages = [
        Message.user("go"),
        Message(role=Role.ASSISTANT, parts=(call, other_call)),
        Message(role=Role.USER, parts=(kept, other)),
        Message.assistant("done"),
    ]
    copies = durable_after(messages)
    assert [m.parts for m in copies] == [(call,), (kept,)]
    assert durable_tool_names(messages) == ["read"]


def test_resolve_fills_the_trigger_and_keeps_durable_tools() -> None:
    clear = AnthropicClearToolUses(exclude_tools=("memory",))
    strategy = resolve(AnthropicCompaction(clear_tool_uses=clear), threshold_tokens=160_000, durable_tools=["read"])
    assert isinstance(strategy, AnthropicCompaction)
    assert strategy.trigger_tokens == 160_000
    assert strategy.clear_tool_uses is not None and strategy.clear_tool_uses.exclude_tools == ("memory", "read")
    small = resolve(AnthropicCompaction(), threshold_tokens=1_000)
    assert isinstance(small, AnthropicCompaction) and small.trigger_tokens == 50_000  # the API's minimum
    given = AnthropicCompaction(trigger_tokens=70_000)
    assert resolve(given, threshold_tokens=1) is given
    openai = resolve(OpenAICompaction(), threshold_tokens=8_000)
    assert isinstance(openai, OpenAICompaction) and openai.threshold_tokens == 8_000


def test_the_window_follows_a_conversation_that_grows_shrinks_and_is_replaced() -> None:
    """``window_start`` reads only what was appended since its last call on the same conversation; a
    conversation cut or rebuilt (a local pass, another list) is read afresh."""
    compaction = Message(role=Role.ASSISTANT, parts=(_compaction("openai"),))
    messages = [Message.user("a"), Message.assistant("b")]
    assert window_start(messages, "openai") == (0, 0)
    messages += [compaction, Message.user("c")]
    assert window_start(messages, "openai") == (2, 0)
    messages.append(Message.assistant("d"))
    assert window_start(messages, "openai") == (2, 0)
    cut = [messages[0], messages[4]]  # the compaction dropped by a local pass
    assert window_start(cut, "openai") == (0, 0)
    cut += [Message.user("e"), Message.assistant("f"), Message.user("g")]
    assert window_start(cut, "openai") == (0, 0)
    edited = [messages[0], messages[1], Message.assistant("not a compaction"), *messages[3:]]
    assert window_start(edited, "openai") == (0, 0)
