"""A streaming loop: print the answer as it arrives, and see each tool call start and finish.

The scripted model stands in for a real one (no key needed).
"""

from __future__ import annotations

import asyncio

from loopctl.engine import BareLoop, ToolCallFinished, ToolCallStarted
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import ScriptedClient
from loopctl.tool import tool


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


async def main() -> None:
    model = ScriptedClient(
        [
            Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "add", {"a": 2, "b": 40})]),
            "2 + 40 is 42.",
            "Again: 2 + 40 is 42.",
        ]
    )
    loop = BareLoop(model, [add])
    async with loop.stream("What is 2 + 40?") as stream:
        async for event in stream:
            if isinstance(event, ToolCallStarted):
                print(f"-> {event.call.name}({event.call.input})")
            elif isinstance(event, ToolCallFinished):
                print(f"<- {event.result.output}")
        run = await stream.result()
    print(run.outcome.kind.value, run.output)

    async with loop.stream("Say it again.") as stream:  # only the answer's text, as it streams
        async for text in stream.text():
            print(text, end="", flush=True)
        print()


asyncio.run(main())
