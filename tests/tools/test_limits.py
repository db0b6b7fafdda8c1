"""The file tools' limits: every line of a big file can be read and searched, and a pattern that backtracks
catastrophically neither freezes the event loop nor keeps running after its call has ended."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopctl.engine import BareLoop, RunConfig
from loopctl.message import Message, MessagePart, Role, ToolResultPart
from loopctl.testing import ScriptedClient
from loopctl.tools.files import FileTools
from tests.tools.test_files import call

CATASTROPHIC = r"(a|aa)+$"  # exponential backtracking on a line of a's that does not end the pattern's way


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """A 1.3 MB file of 20,000 numbered lines; line 15,001 holds the only NEEDLE."""
    root = tmp_path / "proj"
    root.mkdir()
    lines = [f"line {i:05d} " + "." * 60 for i in range(20_000)]
    lines[15_000] = "line 15000 NEEDLE"
    (root / "big.txt").write_text("\n".join(lines) + "\n")
    return root


async def test_read_file_reaches_lines_past_the_size_cap(big: Path) -> None:
    # The offset applied only inside the first 100 KB: line 15,001 of a 1.3 MB file could not be read.
    out = await call(FileTools(big), "read_file", path="big.txt", offset=15_000, limit=2)
    assert (out.is_error, out.content) == (False, f"15001\tline 15000 NEEDLE\n15002\tline 15001 {'.' * 60}")


async def test_read_file_says_where_to_read_on_when_the_cap_stops_it(big: Path) -> None:
    out = await call(FileTools(big, max_read_bytes=1000), "read_file", path="big.txt", offset=100)
    lines = str(out.content).splitlines()
    assert lines[0] == f"  101\tline 00100 {'.' * 60}"
    assert len(lines) == 1 + 1000 // 72  # 72 bytes a line (with its newline), then the note
    assert lines[-1] == "... (stopped at the size cap of 1,000 bytes; read on with offset=113)"
    more = await call(FileTools(big, max_read_bytes=1000), "read_file", path="big.txt", offset=113, limit=1)
    assert more.content == f"  114\tline 00113 {'.' * 60}"


async def test_read_file_past_the_end_says_how_many_lines_there_are(big: Path) -> None:
    out = await call(FileTools(big), "read_file", path="big.txt", offset=25_000)
    assert out.content == "(offset 25000 is past the end: the file has 20000 lines)"


async def test_search_finds_text_past_the_read_cap_that_edit_file_finds(big: Path) -> None:
    # search read only the first 100 KB of each file: "no match" for text that edit_file then replaced.
    ft = FileTools(big)
    assert (await call(ft, "search", pattern="NEEDLE")).content == "big.txt:15001: line 15000 NEEDLE"
    edited = await call(ft, "edit_file", path="big.txt", old="NEEDLE", new="PIN")
    assert (edited.is_error, edited.content) == (False, "edited big.txt: replaced 6 characters with 3")


async def test_lines_are_split_at_newlines_only_as_editors_and_grep_count_them(tmp_path: Path) -> None:
    # str.splitlines() also split at \x0c, \x1c, \x85, \u2028...: read_file and search numbered lines
    # differently from every editor.
    (tmp_path / "f.txt").write_text("one\x0ctwo\u2028three\nfour\r\nfive")
    ft = FileTools(tmp_path)
    assert (
        await call(ft, "read_file", path="f.txt")
    ).content == "    1\tone\x0ctwo\u2028three\n    2\tfour\n    3\tfive"
    assert (await call(ft, "search", pattern="five")).content == "f.txt:3: five"


async def test_binary_files_are_named_not_shown_and_not_searched(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"TODO\x00\x01\x02" * 10)
    (tmp_path / "notes.txt").write_text("TODO: real\n")
    ft = FileTools(tmp_path)
    assert (await call(ft, "read_file", path="blob.bin")).content == "(a binary file of 70 bytes; not shown)"
    assert (await call(ft, "search", pattern="TODO")).content == "notes.txt:1: TODO: real"


async def test_a_catastrophic_pattern_is_an_error_result_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("fine\n" + "a" * 40 + "!\n")
    started = time.monotonic()
    out = await call(FileTools(tmp_path, match_timeout=0.2), "search", pattern=CATASTROPHIC)
    assert time.monotonic() - started < 20  # the line alone would take hours (a margin for a loaded machine)
    assert (out.is_error, out.content) == (
        True,
        f"Error: the pattern {CATASTROPHIC!r} took over 0.2 s on one line (a.txt:2); it backtracks too much: "
        "simplify it",
    )


async def test_a_slow_search_stops_at_its_time_limit_with_the_hits_so_far(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("aa\n" + ("a" * 26 + "!\n") * 100)  # each line: about 0.2 s
    out = await call(FileTools(tmp_path, search_timeout=0.5), "search", pattern=CATASTROPHIC)
    assert out.content == "a.txt:1: aa\n... (stopped after 0.5 s, in a.txt; search a narrower path)"


async def test_a_catastrophic_search_leaves_the_event_loop_running_and_a_tool_timeout_stops_it(
    tmp_path: Path,
) -> None:
    # re holds the GIL while it backtracks: the event loop froze (a 0.5 s tool timeout took 12 s, Ctrl-C could
    # not fire), and the search went on in its thread after the call had "timed out".
    (tmp_path / "a.txt").write_text(("a" * 26 + "!\n") * 100)  # about 20 s of matching, 0.2 s a line
    call_ = MessagePart.tool_call("c1", "search", {"pattern": CATASTROPHIC})
    client = ScriptedClient([Message.new(Role.ASSISTANT, [call_]), "gave up"])
    loop = BareLoop(client, FileTools(tmp_path))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    def others() -> float:  # the CPU time of the threads other than this one: the search's worker
        return time.process_time() - time.thread_time()

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    searched = others()
    run = await loop.run("search", RunConfig(tool_timeout=0.5))
    elapsed = time.monotonic() - started
    searched = others() - searched
    task.cancel()
    assert run.ok
    (result,) = list(run.turns[0].tool_calls)
    assert isinstance(result.result, ToolResultPart)
    assert str(result.result.output) == "Tool 'search' timed out after 0.5 s and was stopped."
    assert elapsed < 5  # not the 20 s of matching (a margin for a loaded CI machine)
    # The loop ran all along: about 50 ticks in 0.5 s on an idle machine. A search that held the GIL let it run
    # only between two lines (0.2 s of the worker's CPU each): a tick a line at most, and one before the search.
    # Read against the CPU the worker had, not as a rate in wall time: on a loaded machine the loop had 4 ticks
    # in the 0.5 s (the assertion was 5); at load 7, 26-30 ticks while the worker had 0.1 s of CPU.
    assert ticks > 2 + searched / 0.2, (ticks, searched)
    # The worker stops at its next line: the CPU time of the threads other than this one (the search's worker)
    # stops growing after a line's time (0.2 s), not the 20 s of matching left. Read in CPU time, not wall
    # time: on a loaded machine a line took more than the 0.6 s the test waited before reading the CPU used.
    used = others()
    deadline = time.monotonic() + 30
    while True:
        before = others()
        await asyncio.sleep(0.2)
        if others() - before < 0.002:  # idle (a worker given even 1% of a core in 0.2 s uses more)
            break
        assert time.monotonic() < deadline, "the search went on after its call timed out"
    assert others() - used < 1.0


LINE_PATTERNS = [
    r"a", r"^a", r"b$", r"a\s*$", r"\bab\b", r"a[^b]*b", r"(?<=a )b", r"(?<!a)b", r"(?<!\s)b", r"a\s+b", r"^$", r"(?i)A#",
    r"a(?!\s)", r"\Aa", r"b\Z", r"[^a]", r"a.*b", r"(?s)a.b", r"\s", r"#\n?a", r"(?>a\s*)$", r"a\s*+$", r"^\s*$",
]  # fmt: skip


@settings(max_examples=100, deadline=None)
@example(lines=["ab\r", "\r", "a"], pattern="b$", piece=7)  # CRLF line ends
@example(lines=["ab\r", "\r", "a"], pattern="^$", piece=1 << 20)
@example(lines=["a ", "b"], pattern=r"(?<!\s)b", piece=1 << 20)  # a lookbehind that would see the line end
@example(lines=["a ", "b"], pattern=r"a\s*+$", piece=64)
@given(
    lines=st.lists(st.text(alphabet="ab #\t\r", max_size=7), max_size=30),
    pattern=st.sampled_from(LINE_PATTERNS),
    piece=st.sampled_from([7, 64, 1 << 20]),
)
def test_search_finds_exactly_the_lines_that_match_alone(lines: list[str], pattern: str, piece: int) -> None:
    # The search runs the pattern over whole chunks of lines to be fast; its hits must still be exactly the
    # lines the pattern matches on their own (as grep reads them), in every chunking.
    import io
    import threading

    import regex

    from loopctl.tools import files as files_module

    data = "\n".join(lines).encode()
    # Lines end at "\n", a CR before it included (CRLF); the last one may have no end (and keeps a lone CR).
    split = data.decode().split("\n")
    texts = [line.removesuffix("\r") for line in split[:-1]] + ([split[-1]] if split[-1] else [])
    expected = [f"f.txt:{n}: {line.strip()}" for n, line in enumerate(texts, 1) if regex.search(pattern, line)]
    search = files_module._Search(pattern, time.monotonic() + 60, 5.0, 10_000, threading.Event())
    old = files_module._PIECE
    files_module._PIECE = piece
    try:
        search.file(io.BytesIO(data), "f.txt")
    finally:
        files_module._PIECE = old
    assert search.hits == expected
