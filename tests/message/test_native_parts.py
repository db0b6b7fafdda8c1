"""The provider-native parts' wire form (``docs/wire-format.md``, "Provider-native parts"): round trips, byte
stability, the keys written only when set, the conversation file's version, and the rules of placement."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loopctl.errors import InvalidMessage
from loopctl.message import (
    FORMAT_VERSION,
    NATIVE_FORMAT_VERSION,
    CompactionPart,
    ConversationRule,
    Message,
    MessagePart,
    Retention,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ToolCallPart,
    check_conversation,
    dumps_conversation,
    loads_conversation,
)
from loopctl.stream import loads_exact
from tests.strategies import conversations, messages, native_conversations, native_messages

SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
CALL = ServerToolCallPart(
    id="srvtoolu_1",
    name="web_search",
    input={"query": "weather"},
    provider="anthropic",
    raw={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "weather"}},
)
RESULT = ServerToolResultPart(
    call_id="srvtoolu_1",
    name="web_search",
    output="Weather <https://w.example>",
    provider="anthropic",
    raw={"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
)


def test_the_wire_shapes_are_exactly_as_documented() -> None:
    assert CALL.to_json() == (
        '{"type":"server_tool_call","id":"srvtoolu_1","name":"web_search","input":{"query":"weather"},'
        '"provider":"anthropic","raw":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search",'
        '"input":{"query":"weather"}}}'
    )
    bare = ServerToolResultPart(call_id="c", name="n", output="o", provider="openai")
    assert bare.to_json() == ('{"type":"server_tool_result","call_id":"c","name":"n","output":"o","provider":"openai"}')
    full = bare.model_copy(update={"is_error": True, "retention": Retention.DURABLE, "raw": {"k": 1}})
    assert full.to_json() == (
        '{"type":"server_tool_result","call_id":"c","name":"n","output":"o","provider":"openai","is_error":true,'
        '"retention":{"type":"durable"},"raw":{"k":1}}'
    )
    compaction = CompactionPart(provider="openai", raw={"type": "compaction", "encrypted_content": "x"})
    assert compaction.to_json() == (
        '{"type":"compaction","provider":"openai","summary":"","raw":{"type":"compaction","encrypted_content":"x"}}'
    )
    cited = TextPart(text="hi", citations=({"type": "url_citation", "url": "u"},), provider="openai")
    assert cited.to_json() == (
        '{"type":"text","text":"hi","citations":[{"type":"url_citation","url":"u"}],"provider":"openai"}'
    )


def test_a_text_without_citations_keeps_its_old_shape() -> None:
    assert TextPart(text="hi").to_json() == '{"type":"text","text":"hi"}'
    assert TextPart(text="hi", item_id="msg_1").to_json() == '{"type":"text","text":"hi","item_id":"msg_1"}'


def test_display_is_one_chunk_per_native_part() -> None:
    message = Message.new(Role.ASSISTANT, [CALL, RESULT, CompactionPart(provider="anthropic", summary="s", raw={})])
    assert str(message) == (
        '[Server Tool: web_search with input: {"query":"weather"}]\n'
        "[Server Tool Result: Weather <https://w.example>]\n"
        "[Compaction by anthropic: s]"
    )


def test_bad_native_input_is_refused_with_its_path() -> None:
    with pytest.raises(InvalidMessage, match=r"parts\[0\]\.provider: a value is required"):
        Message.from_dict(
            {"role": "assistant", "parts": [{"type": "server_tool_call", "id": "a", "name": "b", "input": {}}]}
        )
    with pytest.raises(InvalidMessage, match=r"raw\.x: expected a finite number"):
        ServerToolCallPart(id="a", name="b", input={}, provider="p", raw={"x": float("inf")})
    with pytest.raises(InvalidMessage, match=r"parts\[0\]\.raw: expected an object"):
        Message.from_dict({"role": "assistant", "parts": [{"type": "compaction", "provider": "p", "raw": [1]}]})
    with pytest.raises(InvalidMessage, match=r"citations\[0\]\.t: expected a string that is valid Unicode"):
        TextPart(text="x", citations=({"t": "\udc80"},))


@given(native_messages())
@example(  # an integer past 64 bits, which orjson.loads reads as a float: the test read the JSON with it
    Message.new(
        Role.ASSISTANT,
        [
            ToolCallPart(id="call_0", name="A", input=-(2**63) - 1),
            CompactionPart(provider="openai", raw={"id": "cmp_0", "type": "compaction", "encrypted_content": "0"}),
        ],
    )
)
@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
def test_a_message_with_native_parts_round_trips_and_is_byte_stable(message: Message) -> None:
    text = message.to_json()
    again = Message.from_json(text)
    assert again == message
    assert again.to_json() == text
    assert Message.from_dict(loads_exact(text.encode())) == message


@given(st.lists(messages(), max_size=4))
@settings(max_examples=100, deadline=None, suppress_health_check=SLOW)
def test_a_conversation_without_native_parts_is_written_as_before(conversation: list[Message]) -> None:
    """Version 1, and the same bytes as the guide's shapes: nothing of this feature shows."""
    body = dumps_conversation(conversation)
    assert body == '{"format_version":1,"messages":[' + ",".join(m.to_json() for m in conversation) + "]}"
    assert loads_conversation(body) == conversation


@given(native_conversations())
@settings(max_examples=60, deadline=None, suppress_health_check=SLOW)
def test_a_conversation_with_native_parts_is_version_2_and_reads_back(conversation: list[Message]) -> None:
    body = dumps_conversation(conversation)
    has_native = any(
        isinstance(p, (ServerToolCallPart, ServerToolResultPart, CompactionPart)) for m in conversation for p in m.parts
    )
    version = NATIVE_FORMAT_VERSION if has_native else FORMAT_VERSION
    assert body.startswith(f'{{"format_version":{version},')
    assert loads_conversation(body) == conversation
    assert check_conversation(conversation) == []


def test_a_version_1_file_still_reads_and_a_release_reading_only_1_refuses_2() -> None:
    plain = [Message.user("hi")]
    assert (
        loads_conversation('{"format_version":1,"messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}')
        == plain
    )
    native = dumps_conversation([Message.user("q"), Message.new(Role.ASSISTANT, [CALL, RESULT])])
    assert native.startswith('{"format_version":2,')


@pytest.mark.parametrize("part", [CALL, RESULT, CompactionPart(provider="openai", raw={})])
@pytest.mark.parametrize("role", [Role.USER, Role.SYSTEM])
def test_native_parts_ride_only_in_assistant_messages(part: MessagePart, role: Role) -> None:
    problems = check_conversation([Message.new(role, [part])])
    assert [(p.path, p.rule) for p in problems] == [("messages[0].parts[0]", ConversationRule.NATIVE_OUTSIDE_ASSISTANT)]


def test_a_server_tool_call_is_not_a_tool_call_the_engine_runs() -> None:
    message = Message.new(Role.ASSISTANT, [CALL, RESULT, TextPart(text="It is sunny.")])
    assert message.tool_calls() == [] and message.tool_call_parts() == []
    assert message.text_content() == "It is sunny."
    # And a conversation may end on it: nothing waits for a result the user side would send.
    assert check_conversation([Message.user("q"), message]) == []


def test_retention_applies_to_server_results() -> None:
    tagged = RESULT.with_retention("durable")
    assert tagged.retention is Retention.DURABLE and RESULT.retention is None
    assert CALL.with_retention("durable") is CALL


@given(conversations())
@settings(max_examples=30, deadline=None, suppress_health_check=SLOW)
def test_existing_conversations_are_untouched(conversation: list[Message]) -> None:
    assert dumps_conversation(conversation).startswith('{"format_version":1,')
