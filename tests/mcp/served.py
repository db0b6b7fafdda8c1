"""Tools and an agent for ``loopctl mcp serve`` and ``loopctl a2a serve`` in the tests (``--agent
tests.mcp.served:agent``, run from the repository's root). The agent's model is a scripted function of the
conversation, so what it answers shows what it saw:

- ``delete PATH`` calls ``delete`` (which requires approval), then answers ``done: <the tool's result>``;
- ``wait SECONDS`` calls ``sleep`` (to cancel a run part way);
- anything else answers ``seen N: TEXT``, N the user messages of the conversation so far.

Every reply reports 10 input and 5 output tokens at 1 and 2 USD per million.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loopctl import Agent
from loopctl.message import Message, MessagePart, Role
from loopctl.providers.base import ModelRequest
from loopctl.response import Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import tool

DELETED: list[str] = []


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file (pretend)."""
    DELETED.append(path)
    return f"deleted {path}"


@tool
async def sleep(seconds: float) -> str:
    """Wait."""
    await asyncio.sleep(seconds)
    return "slept"


@tool
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


def brain(request: ModelRequest) -> Any:
    messages = list(request.messages)
    last = messages[-1]
    results = last.tool_results()
    if results:
        return "done: " + "; ".join(str(r.output) for r in results)
    text = last.text_content()
    n = len(messages)
    if text.startswith("delete "):
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"d{n}", "delete", {"path": text[7:]})])
    if text.startswith("wait "):
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"w{n}", "sleep", {"seconds": float(text[5:])})])
    seen = sum(1 for m in messages if m.role is Role.USER and m.text_content())
    return f"seen {seen}: {text}"


agent = Agent(
    ScriptedClient(brain, usage=Usage(input_tokens=10, output_tokens=5), price=("1", "2"), keep_requests=False),
    tools=[delete, sleep],
    name="helper",
    description="Answers, deletes files (with approval) and waits.",
)

tools = [shout, delete]
