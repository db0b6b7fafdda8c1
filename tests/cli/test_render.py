"""The CLI's transcript as an observer of real runs: through each real client against the fake server, it
shows all the text and thinking that streamed, and tool calls and results one line each."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from loopctl.cli.render import Transcript
from loopctl.engine import BareLoop, RunConfig
from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart
from loopctl.testing import FakeProviderServer
from loopctl.tool import tool
from tests.fake_clients import KINDS, THINKING_OF, make_client


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("show_thinking", [True, False], ids=["thinking", "no-thinking"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
async def test_the_transcript_shows_all_the_text_and_thinking_streamed_or_not(
    kind: str, show_thinking: bool, stream: bool
) -> None:
    # Gemini starts a part with its first piece of text (in PartStarted), the others with an empty part and
    # deltas: either way the whole text must show. A reply that was not streamed shows when it arrives.
    first = Message.new(
        Role.ASSISTANT,
        [
            ThinkingPart(text="Weighing the options carefully.", signature="c2ln", provider=THINKING_OF[kind]),
            TextPart(text="Echoing the word now, ünïcödé included."),
            MessagePart.tool_call("c1", "echo", {"text": "hello"}),
        ],
    )
    out = io.StringIO()
    transcript = Transcript(Console(file=out, width=200, highlight=False), show_thinking=show_thinking)
    with FakeProviderServer([first, "All done here."]) as server:
        client = make_client(kind, server)
        run = await BareLoop(client, [echo], observers=[transcript]).run(
            "go", RunConfig(reasoning_effort="low", stream=stream)
        )
        await client.aclose()
    assert run.ok
    thinking = ["Weighing the options carefully."] if show_thinking else []
    assert out.getvalue().splitlines() == [
        *thinking,
        "Echoing the word now, ünïcödé included.",
        "→ echo(text=hello)",
        "  ✓ echo: hello  [1 line]",
        "All done here.",
    ]
