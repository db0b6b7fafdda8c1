"""``ScriptedClient`` refuses a request a provider would refuse for its tool-call pairing, as every codec does
(issue 18, item 11): tests built on it see a conversation that cannot be continued."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.errors import UnsupportedContent
from loopctl.message import Message, MessageView, Role, ToolCallPart, ToolResultPart
from loopctl.providers import ModelRequest
from loopctl.providers._common import check_pairing
from loopctl.providers.anthropic import build_request
from loopctl.testing import ScriptedClient

CALL = Message.new(Role.ASSISTANT, [ToolCallPart(id="c1", name="send", input={})])
RESULT = Message.new(Role.USER, [ToolResultPart(call_id="c1", name="send", output="sent")])

BROKEN = {
    "new input after an unanswered call": [Message.user("go"), CALL, Message.user("go on")],
    "a result of no call": [Message.user("go"), Message.assistant("hm"), RESULT],
    "a call answered twice": [Message.user("go"), CALL, RESULT, RESULT],
    "a call unanswered before the next reply": [Message.user("go"), CALL, Message.assistant("x"), Message.user("y")],
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_request_the_codecs_refuse_is_refused_naming_the_part(case: str) -> None:
    messages = BROKEN[case]
    client = ScriptedClient(["never"])
    with pytest.raises(UnsupportedContent) as refused:
        asyncio.run(client.generate(ModelRequest(messages=messages)))
    assert "ScriptedClient, as every provider, refuses such a request" in str(refused.value)
    with pytest.raises(UnsupportedContent) as by_codec:  # the same rule, the same part, as a real codec
        build_request(messages, model="claude-x")
    assert str(refused.value).split(";")[0] == str(by_codec.value).split(";")[0]
    assert client.calls == 0 and client.requests == []


def test_sound_requests_are_answered() -> None:
    client = ScriptedClient(["a", "b"])
    answered = asyncio.run(client.generate(ModelRequest(messages=[Message.user("go"), CALL, RESULT])))
    assert answered.message.text_content() == "a"
    # the last reply's calls may still wait (a request is never made so, but the rule allows it)
    waiting = asyncio.run(client.generate(ModelRequest(messages=[Message.user("go"), CALL])))
    assert waiting.message.text_content() == "b"


def test_a_request_that_continues_a_checked_one_is_checked_from_its_last_reply_on() -> None:
    client = ScriptedClient(["a", "b", "c"])
    first = [Message.user("go"), CALL]
    asyncio.run(client.generate(ModelRequest(messages=first)))
    # the same objects continued: the reply's calls are checked again, with what follows them
    with pytest.raises(UnsupportedContent, match=r"^messages\[1\]\.parts\[0\]: tool call 'c1' has no result"):
        asyncio.run(client.generate(ModelRequest(messages=[*first, Message.user("go on")])))
    second = [*first, RESULT, Message.assistant("x"), Message.user("more")]
    assert asyncio.run(client.generate(ModelRequest(messages=second))).message.text_content() == "b"
    with pytest.raises(UnsupportedContent, match=r"^messages\[5\]\.parts\[0\]: the tool result for 'c1' answers no"):
        asyncio.run(client.generate(ModelRequest(messages=[*second, RESULT])))
    assert client.calls == 2


_KINDS = st.sampled_from(["user", "reply", "call", "calls", "result", "result_other", "results"])


def _message(kind: str, i: int) -> Message:
    if kind == "user":
        return Message.user(f"u{i}")
    if kind == "reply":
        return Message.assistant(f"a{i}")
    if kind in ("call", "calls"):
        ids = [f"c{i}"] if kind == "call" else [f"c{i}", f"d{i}"]
        return Message.new(Role.ASSISTANT, [ToolCallPart(id=x, name="send", input={}) for x in ids])
    # a result of the latest call made so far, of an older one, or of both of the latest two calls
    target = {"result": [f"c{i - 1}"], "result_other": [f"c{max(0, i - 3)}"], "results": [f"c{i - 1}", f"d{i - 1}"]}
    return Message.new(Role.USER, [ToolResultPart(call_id=x, name="send", output="ok") for x in target[kind]])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_KINDS, st.booleans()), min_size=1, max_size=24))
def test_requests_of_a_growing_view_are_judged_as_a_whole_check_judges_them(steps: list[tuple[str, bool]]) -> None:
    """An engine's requests (views of one append-only list, checked incrementally, from the last reply of the
    request before or from the reply after a request whose last reply was answered) are refused with the
    error a check of the whole request gives, and pass when it passes."""
    client = ScriptedClient(lambda request: "ok", keep_requests=False)
    items: list[Message] = []
    for i, (kind, ask) in enumerate(steps):
        items.append(_message(kind, i))
        if not ask and i < len(steps) - 1:
            continue
        view = MessageView(items, len(items))
        try:
            check_pairing(list(view), "ScriptedClient, as every provider,")
            whole = None
        except UnsupportedContent as exc:
            whole = str(exc)
        try:
            client._check(view)
            incremental = None
        except UnsupportedContent as exc:
            incremental = str(exc)
        assert incremental == whole, (i, [m.role.value for m in items])
