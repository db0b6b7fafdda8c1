"""ScriptedClient refuses a conversation whose tool calls and results do not pair, as every provider's API
and TestModel do: a test on it fails where a real model would."""

from __future__ import annotations

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import Message, MessagePart, Role
from loopctl.providers import ModelRequest
from loopctl.testing import ScriptedClient


async def test_a_call_without_its_result_is_refused_before_a_reply_is_taken() -> None:
    # It answered the next step of its script: a test passed that every provider would have failed with a 400.
    broken = [
        Message.user("Read a.txt"),
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "read_file", {"path": "a.txt"})]),
        Message.assistant("It says hello."),
    ]
    model = ScriptedClient(["never given"])
    with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\]: tool call 'c1' has no result"):
        await model.generate(ModelRequest(messages=broken))
    assert model.requests == []  # refused before it was kept or a step was used
    await model.generate(ModelRequest(messages=[Message.user("hi")]))  # the script's step is still there


async def test_a_paired_conversation_is_answered() -> None:
    paired = [
        Message.user("Read a.txt"),
        Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "read_file", {"path": "a.txt"})]),
        Message.new(Role.USER, [MessagePart.tool_result("c1", "read_file", "hello")]),
    ]
    reply = await ScriptedClient(["It says hello."]).generate(ModelRequest(messages=paired))
    assert reply.message == Message.assistant("It says hello.")
