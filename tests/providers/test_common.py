"""Rules every request builder keeps (``loopctl.providers._common``): a request a provider would refuse for a
reason visible in the conversation is never sent; the builder raises ``UnsupportedContent`` naming where.

Each case below was sent as is before, and each provider answers it with a 400 (sources in
``check_pairing``'s and ``nothing_to_send``'s docstrings).
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import Message, MessagePart, Role, TextPart, ToolCallPart, ToolResultPart, check_conversation
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.providers._common import check_pairing

CODECS = {"anthropic": anthropic, "gemini": gemini, "openai_chat": openai_chat, "openai_responses": openai_responses}
MODEL = {"anthropic": "claude-x", "gemini": "gemini-2.5-flash", "openai_chat": "gpt-4o", "openai_responses": "gpt-5"}


def build(name: str, messages: list[Message], **kw: Any) -> dict[str, Any]:
    codec: ModuleType = CODECS[name]
    body: dict[str, Any] = codec.build_request(messages, model=MODEL[name], **kw)
    return body


def calls(*ids: str) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, "read", {"path": "a"}) for i in ids])


def results(*ids: str) -> Message:
    return Message.new(Role.USER, [MessagePart.tool_result(i, "read", "text") for i in ids])


BROKEN = {
    # A compaction (or a hand edit) removed the call and kept its result.
    "result_of_a_removed_call": (
        [Message.user("go"), Message.assistant("I looked."), results("call_1")],
        r"^messages\[2\]\.parts\[0\]: the tool result for 'call_1' answers no tool call of the assistant message "
        r"before it \(was its call removed\?\); .* refuses such a request \[tool_result_answers_an_earlier_call\]$",
    ),
    "result_with_nothing_before_it": (
        [results("call_1"), Message.user("go")],
        r"^messages\[0\]\.parts\[0\]: the tool result for 'call_1' answers no tool call",
    ),
    "call_left_unanswered": (
        [Message.user("go"), calls("call_1", "call_2"), results("call_1"), Message.assistant("done")],
        r"^messages\[1\]\.parts\[1\]: tool call 'call_2' has no result before the next assistant message "
        r"\(messages\[3\]\); .* \[tool_call_answered_before_next_assistant\]$",
    ),
    "call_left_unanswered_by_the_next_input": (
        # a session forked (or cut) right after a reply that called tools, then given new input
        [Message.user("go"), calls("call_1"), Message.user("go on")],
        r"^messages\[1\]\.parts\[0\]: tool call 'call_1' has no result in the messages after it \(up to "
        r"messages\[2\]\); .* \[tool_call_answered_before_next_assistant\]$",
    ),
    "call_left_half_answered_at_the_end": (
        [Message.user("go"), calls("call_1", "call_2"), results("call_1")],
        r"^messages\[1\]\.parts\[1\]: tool call 'call_2' has no result in the messages after it",
    ),
    "one_id_twice_in_a_message": (
        [Message.user("go"), calls("call_1", "call_1"), results("call_1")],
        r"^messages\[1\]\.parts\[1\]: tool-call id 'call_1' is used twice in one message; .* "
        r"\[tool_call_ids_unique_within_turn\]$",
    ),
    "a_call_answered_twice": (
        [Message.user("go"), calls("call_1"), results("call_1"), results("call_1")],
        r"^messages\[3\]\.parts\[0\]: tool call 'call_1' is answered twice; .* \[tool_call_answered_once\]$",
    ),
}


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_tool_pairing_is_refused_naming_the_part(name: str, case: str) -> None:
    messages, pattern = BROKEN[case]
    with pytest.raises(UnsupportedContent, match=pattern):
        build(name, messages)


@pytest.mark.parametrize("name", CODECS)
def test_the_first_of_several_unanswered_calls_is_the_one_named(name: str) -> None:
    # The calls were kept in a set, so which one the error named depended on the process's string hashing
    # (PYTHONHASHSEED): the same request gave another message in another process.
    ids = [f"call_{i}" for i in range(20)]
    messages = [Message.user("go"), calls(*ids), results(ids[0], ids[3]), Message.assistant("done")]
    with pytest.raises(UnsupportedContent, match=r"^messages\[1\]\.parts\[1\]: tool call 'call_1' has no result"):
        build(name, messages)


@pytest.mark.parametrize("name", CODECS)
def test_results_spread_over_messages_and_calls_still_waiting_are_fine(name: str) -> None:
    build(name, [Message.user("go"), calls("a", "b"), results("a"), Message.user("and"), results("b")])
    build(name, [Message.user("go"), calls("a", "b")])  # the last reply's calls may wait for their results
    build(name, [Message.user("go"), calls("a"), results("a"), calls("a"), results("a")])  # ids may recur later


NOTHING = {
    "no_messages": [],
    "only_empty_messages": [Message.new(Role.USER, []), Message.new(Role.ASSISTANT, [])],
}
# A conversation of one empty prompt is sent where the API takes it (tests/providers/test_empty_prompt.py).


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("case", NOTHING)
def test_a_request_with_nothing_to_send_is_refused(name: str, case: str) -> None:
    if name == "openai_chat" and case != "no_messages":
        pytest.skip('Chat sends an empty message as it is (content ""), not dropped')
    with pytest.raises(UnsupportedContent, match=r"^messages: nothing to send to "):
        build(name, NOTHING[case])


@pytest.mark.parametrize("name", ["anthropic", "gemini"])
def test_only_system_messages_are_nothing_to_send_where_system_is_folded_out(name: str) -> None:
    only_system = [Message.new(Role.SYSTEM, [TextPart(text="be brief")])]
    with pytest.raises(UnsupportedContent, match=r"^messages: nothing to send to (Anthropic|Gemini): the 1 message"):
        build(name, only_system, system="also this")


def test_anthropic_whitespace_only_text_is_refused() -> None:
    with pytest.raises(UnsupportedContent, match=r"^messages\[0\]: the prompt is empty; Anthropic refuses"):
        build("anthropic", [Message.user("   \n")])


def test_responses_with_only_instructions_is_sent() -> None:
    body = build("openai_responses", [], system="hi", system_as_instructions=True)
    assert (body["instructions"], body["input"]) == ("hi", [])


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("anthropic", "read.file"),
        ("anthropic", "réad_😀"),
        ("anthropic", "x" * 129),
        ("openai_responses", "read.file"),
        ("openai_responses", "x" * 65),
        ("gemini", "1read"),
        ("gemini", "read file"),
        ("gemini", "réad"),
    ],
)
def test_a_tool_name_the_api_refuses_is_refused_naming_the_tool(name: str, bad: str) -> None:
    # Sent as is, for a 400 such as "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'".
    from loopctl.tool import ToolSchema

    tools = [ToolSchema("ok_tool"), ToolSchema(bad)]
    with pytest.raises(UnsupportedContent, match=rf"^tools\[1\]\.name: {re.escape(repr(bad))} is not a name"):
        build(name, [Message.user("go")], tools=tools)


@pytest.mark.parametrize(
    ("name", "good"), [("anthropic", "a-b_C9"), ("openai_responses", "a-b_C9"), ("gemini", "_ns.read:v-2")]
)
def test_tool_names_the_api_accepts_pass(name: str, good: str) -> None:
    from loopctl.tool import ToolSchema

    build(name, [Message.user("go")], tools=[ToolSchema(good)])


@pytest.mark.parametrize(
    ("messages", "start", "last"),
    [
        ([], 0, -1),
        ([Message.user("go")], 0, -1),
        ([Message.user("go"), Message.assistant("hi")], 0, 1),
        ([Message.user("go"), calls("c1"), results("c1")], 0, 1),
        ([Message.user("go"), calls("c1"), results("c1"), calls("c2"), results("c2")], 0, 3),
        ([Message.user("go"), calls("c1"), results("c1"), calls("c2"), results("c2")], 1, 3),
        ([Message.user("go"), calls("c1"), results("c1"), calls("c2"), results("c2")], 3, 3),
        ([Message.user("go"), calls("c1"), results("c1"), Message.user("more"), Message.user("again")], 1, 1),
        ([Message.user("go"), Message.assistant("a"), Message.user("b"), Message.assistant("c")], 0, 3),
    ],
)
def test_the_pairing_check_returns_its_last_assistant_message(messages: list[Message], start: int, last: int) -> None:
    """Where the next incremental check may start (``ScriptedClient`` keeps it): the last assistant message at or
    after ``start``, -1 when there is none."""
    assert check_pairing(messages, "test", start) == last


class _TracedCall(ToolCallPart):
    """A call part of an application's own kind (it may carry what it traces); a call to every codec."""


class _TracedResult(ToolResultPart):
    """A result part of an application's own kind."""


@pytest.mark.parametrize("name", sorted(CODECS))
def test_calls_and_results_of_a_subclass_pair_as_the_parts_themselves(name: str) -> None:
    """A call or result made by a subclass of ``ToolCallPart`` / ``ToolResultPart`` pairs as the parts themselves
    (``check_conversation``, the machine and the codecs read them with ``isinstance``): a paired conversation
    is sent, and a broken one refused naming the subclass's part. Before, the pairing check read only the exact
    classes: a result answering a subclass's call was refused as answering none, and a subclass's result
    left its call unanswered."""
    call = Message(role=Role.ASSISTANT, parts=(_TracedCall(id="c1", name="read", input={"path": "a"}),))
    answer = Message(role=Role.USER, parts=(_TracedResult(call_id="c1", name="read", output="text"),))
    paired = [Message.user("go"), call, answer, Message.assistant("done")]
    assert check_conversation(paired) == []
    assert check_pairing(paired, "test") == 3
    build(name, paired)
    build(name, [Message.user("go"), call, results("c1")])
    build(name, [Message.user("go"), calls("c1"), answer])
    unanswered = [Message.user("go"), call, Message.assistant("done")]
    with pytest.raises(UnsupportedContent, match=r"^messages\[1\]\.parts\[0\]: tool call 'c1' has no result"):
        build(name, unanswered)
    with pytest.raises(UnsupportedContent, match=r"^messages\[2\]\.parts\[1\]: tool call 'c1' is answered twice"):
        check_pairing([Message.user("go"), call, Message(role=Role.USER, parts=(*answer.parts, *answer.parts))], "t")
