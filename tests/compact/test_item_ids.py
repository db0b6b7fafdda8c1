"""A compaction never leaves a provider item id without the item it is paired with.

OpenAI Responses stores a reply's items: a ``reasoning`` item (``rs_…``) and the items after it
(``function_call`` ``fc_…``, ``message`` ``msg_…``) are checked as a chain; an item sent with its id but
without its reasoning item is a 400 ("Item 'fc_…' of type 'function_call' was provided without its required
'reasoning' item", ``docs/providers/openai_responses.md``). A compaction that keeps a ``Durable`` call kept
its ``fc_…`` id while the reasoning went: the summary ages thinking out, and truncation kept only the
thinking right before a call, so a Durable call that is not first in its message lost it. Now the thinking
that opens a group of calls goes with each kept call of the group (the pair is kept), and a kept part whose
predecessor did not survive next to it loses its item id (the id goes with the pair); the Responses codec
then leaves out a reasoning item whose following item has no id.
"""

from __future__ import annotations

from loopctl.compact import SummarizingCompactor, TruncatingCompactor
from loopctl.message import Message, Retention, Role, ThinkingPart, ToolCallPart, check_conversation
from loopctl.providers import anthropic, openai_responses
from tests.compact.build import assistant, calls, exact_budget, result, results, tool_turn, user
from tests.providers.responses_wire import validate_with_sdk

D = Retention.DURABLE
BIG = "x" * 4_000
REASONING = ThinkingPart(text="Read both.", signature="gAAAAB-encrypted", provider="openai", item_id="rs_1")
FC_1 = ToolCallPart(id="call_1", name="read_file", input={"path": "a.py"}, item_id="fc_1")
FC_2 = ToolCallPart(id="call_2", name="save_note", input={"text": "root cause"}, item_id="fc_2")
REPLY_ORDER = ["rs_1", "fc_1", "fc_2"]  # the reply's items, as the API stored them


def conversation(durable: str) -> list[Message]:
    """A Responses reply with reasoning and two parallel calls; the result of ``durable`` is Durable."""
    return [
        user("Find the bug."),
        calls(REASONING, FC_1, FC_2),
        results(
            result("call_1", BIG, retention=D if durable == "call_1" else None),
            result("call_2", "the token expires", name="save_note", retention=D if durable == "call_2" else None),
        ),
        *tool_turn("call_3", BIG),
        *tool_turn("call_4", BIG),
        assistant("Fixed."),
    ]


def responses_ids(messages: list[Message]) -> list[str]:
    """The ids of this reply's items, in the order a Responses request sends them (the body validated with
    the SDK's request type)."""
    body = openai_responses.build_request(messages, model="gpt-5", store=True)
    validate_with_sdk(body)
    ids = []
    for item in body["input"]:
        if item.get("type") in ("reasoning", "function_call") and item.get("id") in REPLY_ORDER:
            ids.append(item["id"])
    return ids


def assert_api_would_accept(ids: list[str]) -> None:
    # The items of one stored reply must come as its chain from the reasoning item: a prefix of it (an
    # empty one when the ids went with the pair).
    assert ids == REPLY_ORDER[: len(ids)], f"{ids} is no prefix of the reply's chain {REPLY_ORDER}"


def test_truncation_keeps_a_second_durable_call_with_its_thinking_and_without_its_item_id() -> None:
    convo = conversation("call_2")
    out = TruncatingCompactor(notice=None).compact(convo, exact_budget(1_400))
    assert check_conversation(out) == []
    copy = next(m for m in out if m.role is Role.ASSISTANT and m.tool_calls())
    assert copy.parts == (REASONING, FC_2.model_copy(update={"item_id": None}))
    ids = responses_ids(out)
    assert ids == []  # before: ["fc_2"], an fc_ id without its reasoning item
    assert_api_would_accept(ids)


def test_truncation_keeps_a_first_durable_call_paired_with_its_reasoning() -> None:
    convo = conversation("call_1")
    out = TruncatingCompactor(notice=None).compact(convo, exact_budget(2_400))
    copy = next(m for m in out if m.role is Role.ASSISTANT and m.tool_calls())
    assert copy.parts == (REASONING, FC_1)  # both ids kept: the pair is whole
    ids = responses_ids(out)
    assert ids == ["rs_1", "fc_1"]
    assert_api_would_accept(ids)


def test_a_summary_drops_the_item_id_of_a_durable_call_whose_thinking_aged_out() -> None:
    for durable, call in (("call_1", FC_1), ("call_2", FC_2)):
        convo = conversation(durable)
        plan = SummarizingCompactor(max_summary_tokens=100).start(convo, exact_budget(1_500))
        assert plan is not None
        out = plan.finish("The bug is an expired token.")
        assert check_conversation(out) == []
        copy = next(m for m in out if m.role is Role.ASSISTANT and m.tool_calls())
        assert copy.parts == (call.model_copy(update={"item_id": None}),)  # thinking aged out, its id with it
        ids = responses_ids(out)
        assert ids == []  # before: ["fc_1"] / ["fc_2"]
        assert_api_would_accept(ids)


def test_anthropic_thinking_stays_with_a_durable_call_that_is_not_first() -> None:
    # The same rule keeps Anthropic's signed thinking with the second tool_use of a parallel turn (it was
    # dropped: only the first call kept the thinking before it).
    thinking = ThinkingPart(text="Read both.", signature="EqQBCkgIARABGAIiQL", provider="anthropic")
    first = ToolCallPart(id="toolu_1", name="read_file", input={"path": "a.py"})
    second = ToolCallPart(id="toolu_2", name="save_note", input={"text": "root cause"})
    convo = [
        user("Find the bug."),
        calls(thinking, first, second),
        results(result("toolu_1", BIG), result("toolu_2", "the token expires", name="save_note", retention=D)),
        *tool_turn("toolu_3", BIG),
        *tool_turn("toolu_4", BIG),
        assistant("Fixed."),
    ]
    out = TruncatingCompactor(notice=None).compact(convo, exact_budget(1_400))
    copy = next(m for m in out if m.role is Role.ASSISTANT and m.tool_calls())
    assert copy.parts == (thinking, second)
    body = anthropic.build_request(out, model="claude-sonnet-4-5", prompt_cache=False)
    kept = next(
        m for m in body["messages"] if m["role"] == "assistant" and any(b["type"] == "tool_use" for b in m["content"])
    )
    assert [b["type"] for b in kept["content"]] == ["thinking", "tool_use"]


def test_a_message_kept_whole_keeps_its_ids_and_is_the_same_object() -> None:
    convo = [
        user("Find the bug."),
        calls(REASONING, FC_1, FC_2),
        results(result("call_1", "a", retention=D), result("call_2", "b", retention=D)),
        *tool_turn("call_3", BIG),
        *tool_turn("call_4", BIG),
        assistant("Fixed."),
    ]
    out = TruncatingCompactor(notice=None).compact(convo, exact_budget(1_400))
    assert any(m is convo[1] for m in out)
    assert_api_would_accept(responses_ids(out))
