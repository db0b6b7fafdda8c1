"""The CLI's transcript as an observer of real runs: through each real client against the fake server, it
shows all the text and thinking that streamed, and tool calls and results one line each."""

from __future__ import annotations

import io
from pathlib import Path

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
        "  ✓ echo(hello): hello  [1 line]",
        "All done here.",
    ]


def test_a_tool_argument_past_64_bits_is_shown_exactly() -> None:
    # _short() wrote arguments with orjson, which raises TypeError for an integer past 64 bits: the transcript
    # (an observer) crashed the run.
    from loopctl.engine import ToolCallStarted

    out = io.StringIO()
    transcript = Transcript(Console(file=out, width=200, highlight=False))
    big = 2**70 + 1
    call = MessagePart.tool_call("c1", "seek", {"offset": big, "nested": {"ids": [-big]}})
    transcript(ToolCallStarted(1, call))
    assert out.getvalue().splitlines() == [f'→ seek(offset={big}, nested={{"ids":[{-big}]}})']


async def test_a_run_whose_tool_takes_a_huge_integer_finishes_with_the_transcript_on() -> None:
    from loopctl.testing import ScriptedClient

    @tool
    def seek(offset: int) -> str:
        """Seek."""
        return f"at {offset}"

    big = 2**70
    client = ScriptedClient([Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "seek", {"offset": big})]), "ok"])
    out = io.StringIO()
    run = await BareLoop(client, [seek], observers=[Transcript(Console(file=out, width=200))]).run("go")
    assert run.ok
    assert f"  ✓ seek({big}): at {big}  [1 line]" in out.getvalue().splitlines()


def test_each_result_line_names_its_call_when_parallel_calls_finish_out_of_order() -> None:
    # A result line said only "✓ read_file: ...": with parallel reads finishing out of order, which file it
    # was could not be told. The label is the tool and its main argument, inert like the call line.
    from loopctl.engine import ToolCallFinished

    out = io.StringIO()
    transcript = Transcript(Console(file=out, width=200, highlight=False))
    calls = [
        MessagePart.tool_call("c1", "read_file", {"path": "a.py"}),
        MessagePart.tool_call("c2", "read_file", {"path": "evil\x1b[2K.py", "offset": 3}),
        MessagePart.tool_call("c3", "list_files", {}),
    ]
    for call, text, failed in [(calls[1], "gone", True), (calls[0], "x = 1", False), (calls[2], "a.py", False)]:
        transcript(ToolCallFinished(1, call, MessagePart.tool_result(call.id, call.name, text, failed), 0.0))
    assert out.getvalue().splitlines() == [
        "  ✗ read_file(evil\\x1b[2K.py): gone  [1 line]",
        "  ✓ read_file(a.py): x = 1  [1 line]",
        "  ✓ list_files(): a.py  [1 line]",
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
async def test_a_tool_the_provider_ran_gets_one_inert_line(stream: bool) -> None:
    """A web search Anthropic ran itself, its result's title carrying terminal escapes: one line per call,
    shown when its result arrives, the escapes made inert."""
    from loopctl.message import ServerToolCallPart, ServerToolResultPart

    hostile = "Evil \x1b]52;c;cHduZWQ=\x07title\x1b[2J"
    call = ServerToolCallPart(
        id="srvtoolu_1",
        name="web_search",
        input={"query": "news"},
        provider="anthropic",
        raw={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
    )
    result = ServerToolResultPart(
        call_id="srvtoolu_1",
        name="web_search",
        output="",
        provider="anthropic",
        raw={
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "title": hostile, "url": "https://x", "encrypted_content": "E"}],
        },
    )
    reply = Message.new(Role.ASSISTANT, [call, result, TextPart(text="Here is the news.")])
    out = io.StringIO()
    transcript = Transcript(Console(file=out, width=300, highlight=False))
    with FakeProviderServer([reply]) as server:
        client = make_client("anthropic", server)
        run = await BareLoop(client, [], observers=[transcript]).run("news?", RunConfig(stream=stream))
        await client.aclose()
    assert run.ok
    lines = out.getvalue().splitlines()
    assert lines == [
        "⌁ web_search(news) at anthropic: Evil \\x1b]52;c;cHduZWQ=\\x07title\\x1b[2J <https://x>",
        "Here is the news.",
    ]
    assert "\x1b" not in out.getvalue()


# --- tabs (issue 18, item 21) ---------------------------------------------------------------------------------


def test_streamed_text_expands_its_tabs_the_same_however_the_stream_was_cut() -> None:
    # Each streamed piece was printed on its own, so a tab expanded from wherever the piece began: the same
    # table came out at different widths depending on where the deltas were cut.
    from loopctl.engine import ModelStreamEvent
    from loopctl.stream import TextDelta

    text = "name\tsize\nfoo.py\t120\nbar_long_name.py\t7\n"
    shown = set()
    for cut in (1, 3, 5, 7, 11):
        out = io.StringIO()
        transcript = Transcript(Console(file=out, width=200, highlight=False))
        for i in range(0, len(text), cut):
            transcript(ModelStreamEvent(1, TextDelta(index=0, text=text[i : i + cut])))
        transcript.close()
        shown.add(out.getvalue())
    assert shown == {"name    size\nfoo.py  120\nbar_long_name.py        7\n\n"}


def test_a_tab_in_a_result_line_is_shown_as_a_mark_not_a_jump() -> None:
    from loopctl.engine import ToolCallFinished

    out = io.StringIO()
    transcript = Transcript(Console(file=out, width=200, highlight=False))
    for path in ("a.tsv", "a_much_longer_name.tsv"):
        call = MessagePart.tool_call("c1", "read_file", {"path": path})
        transcript(ToolCallFinished(1, call, MessagePart.tool_result("c1", "read_file", "x\ty", False), 0.0))
    assert out.getvalue().splitlines() == [
        "  ✓ read_file(a.tsv): x⇥y  [1 line]",
        "  ✓ read_file(a_much_longer_name.tsv): x⇥y  [1 line]",
    ]


def test_a_read_file_result_keeps_its_columns_in_sessions_show_and_show(tmp_path: Path) -> None:
    # The first line of a tool result followed "[Tool Result: ", so its tabs jumped to other columns than the
    # next lines'. A result of several lines now starts on a line of its own, its tabs counted from there.
    from click.testing import CliRunner

    from loopctl.cli import main
    from loopctl.engine import LoopMachine
    from loopctl.session import Session
    from loopctl.store import SQLiteStore

    m = LoopMachine()
    m.accept_input("list the sizes")
    m.model_response(Message.new(Role.ASSISTANT, [MessagePart.tool_call("c1", "read_file", {"path": "s.tsv"})]),
                     {"read_file"}, 5)  # fmt: skip
    table = "name\tsize\nfoo.py\t120\nbar_long_name.py\t7"
    m.tool_results([Message.new(Role.USER, [MessagePart.tool_result("c1", "read_file", table)])])
    m.model_response(Message.assistant("a\tb"), set(), 9)
    Session(m, model="demo", root="/w").save(tmp_path / "s.json")
    with SQLiteStore(tmp_path / "s.db") as store:
        store.import_file(tmp_path / "s.json", session_id="s")
    expected = ["[Tool Result:", "name    size", "foo.py  120", "bar_long_name.py        7]"]
    for args in (["sessions", "--store", str(tmp_path / "s.db"), "show", "s"], ["show", str(tmp_path / "s.json")]):
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        out = result.output.splitlines()
        start = out.index("[Tool Result:")
        assert out[start : start + 4] == expected
        assert "a       b" in out


def test_show_prints_a_tool_the_provider_ran_inert(tmp_path: Path) -> None:
    """``loopctl show`` of a session that used Anthropic's web search: the call and its result are shown (not
    dropped, not refused), a hostile title's escapes made inert."""
    from click.testing import CliRunner

    from loopctl.cli import main
    from loopctl.engine import LoopMachine
    from loopctl.message import ServerToolCallPart, ServerToolResultPart
    from loopctl.session import Session

    hostile = "Evil \x1b]52;c;cHduZWQ=\x07title"
    call = ServerToolCallPart(
        id="srvtoolu_1",
        name="web_search",
        input={"query": "news"},
        provider="anthropic",
        raw={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}},
    )
    result = ServerToolResultPart(
        call_id="srvtoolu_1",
        name="web_search",
        output=hostile,
        provider="anthropic",
        raw={"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    )
    m = LoopMachine()
    m.accept_input("news?")
    m.model_response(Message.new(Role.ASSISTANT, [call, result, TextPart(text="Here is the news.")]), set(), 5)
    Session(m, model="demo", root="/w").save(tmp_path / "s.json")
    out = CliRunner().invoke(main, ["show", str(tmp_path / "s.json")], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "web_search" in out.output and "news" in out.output
    assert "Evil \\x1b]52;c;cHduZWQ=\\x07title" in out.output
    assert "\x1b" not in out.output and "Here is the news." in out.output
