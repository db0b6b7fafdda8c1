"""The demo model of ``loopctl run --model demo``, driven by fake request sequences in each wire format with
real file tools over a copy of ``examples/sample-project``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from loopctl.testing import FakeProviderServer
from loopctl.testing.demo import DemoScript, ToolExchange, tool_exchanges
from loopctl.testing.wire import APIS

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample-project"
TOOLS = ("list_files", "read_file", "search", "write_file", "edit_file")

EXPECTED_TODO_MD = """\
# TODO

5 TODO comments found in 4 files (collected by loopctl's demo model).

## config.toml

- [ ] line 3: let the user pick the output columns

## docs/usage.md

- [ ] line 5: document the exit codes

## textutils.py

- [ ] line 6: treat hyphenated words as one word

## wordcount.py

- [ ] line 10: count a last line that has no trailing newline
- [ ] line 17: accept several files and print a total line
"""


# --- file tools like the CLI's (plain-text results) -------------------------------------------------------


def run_tool(root: Path, name: str, args: dict[str, Any]) -> tuple[str, bool]:
    """``(result text, is_error)``."""
    if name == "list_files":
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        return "\n".join(files), False
    if name == "read_file":
        path = root / args["path"]
        return (path.read_text(), False) if path.is_file() else (f"error: no such file: {args['path']}", True)
    if name == "search":
        hits = []
        for p in sorted(root.rglob("*")):
            if p.is_file():
                for n, line in enumerate(p.read_text().splitlines(), 1):
                    if args["pattern"] in line:
                        hits.append(f"{p.relative_to(root).as_posix()}:{n}: {line.strip()}")
        return "\n".join(hits) or f"no match for {args['pattern']!r}", False  # as FileTools says it
    if name == "write_file":
        (root / args["path"]).write_text(args["content"])
        return f"wrote {len(args['content'])} characters to {args['path']}", False
    return f"error: unknown tool {name}", True


# --- request bodies in each wire format (just enough for the demo to read) ----------------------------------


def tool_specs(api: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {}}
    if api == "openai-chat":
        return [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]
    if api == "gemini":
        return [{"functionDeclarations": [{"name": n, "parameters": schema} for n in names]}]
    if api == "openai-responses":
        return [{"type": "function", "name": n, "parameters": schema} for n in names]
    return [{"name": n, "input_schema": schema} for n in names]


def body_for(api: str, history: list[Message], names: tuple[str, ...] = TOOLS) -> dict[str, Any]:
    """The request body a client for ``api`` would send for ``history``."""
    tools = tool_specs(api, names)
    if api == "openai-chat":
        messages: list[dict[str, Any]] = []
        for m in history:
            if m.role is Role.ASSISTANT:
                calls = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.input)}}
                    for c in m.tool_calls()
                ]
                messages.append(
                    {
                        "role": "assistant",
                        "content": m.text_content() or None,
                        **({"tool_calls": calls} if calls else {}),
                    }
                )
            elif m.tool_results():
                messages += [
                    {"role": "tool", "tool_call_id": r.call_id, "content": str(r.output)} for r in m.tool_results()
                ]
            else:
                messages.append({"role": "user", "content": m.text_content()})
        return {"model": "demo", "messages": messages, "tools": tools}
    if api == "openai-responses":
        items: list[dict[str, Any]] = []
        for m in history:
            for p in m.parts:
                if isinstance(p, TextPart):
                    role = "assistant" if m.role is Role.ASSISTANT else "user"
                    items.append({"role": role, "content": p.text})
                elif isinstance(p, ToolCallPart):
                    items.append(
                        {"type": "function_call", "call_id": p.id, "name": p.name, "arguments": json.dumps(p.input)}
                    )
                elif isinstance(p, ToolResultPart):
                    items.append({"type": "function_call_output", "call_id": p.call_id, "output": str(p.output)})
        return {"model": "demo", "input": items, "tools": tools}
    if api == "anthropic":
        messages = []
        for m in history:
            blocks: list[dict[str, Any]] = []
            for p in m.parts:
                if isinstance(p, TextPart):
                    blocks.append({"type": "text", "text": p.text})
                elif isinstance(p, ToolCallPart):
                    blocks.append({"type": "tool_use", "id": p.id, "name": p.name, "input": p.input})
                elif isinstance(p, ToolResultPart):
                    blocks.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": p.call_id,
                            "content": str(p.output),
                            "is_error": p.failed(),
                        }
                    )
            messages.append({"role": m.role.value, "content": blocks})
        return {"model": "demo", "max_tokens": 1024, "messages": messages, "tools": tools}
    contents = []
    for m in history:
        parts: list[dict[str, Any]] = []
        for p in m.parts:
            if isinstance(p, TextPart):
                parts.append({"text": p.text})
            elif isinstance(p, ToolCallPart):
                parts.append({"functionCall": {"name": p.name, "args": p.input}})
            elif isinstance(p, ToolResultPart):
                key = "error" if p.failed() else "output"
                parts.append({"functionResponse": {"name": p.name, "response": {key: str(p.output)}}})
        contents.append({"role": "model" if m.role is Role.ASSISTANT else "user", "parts": parts})
    return {"contents": contents, "tools": tools}


def drive(
    api: str,
    root: Path,
    ask: Callable[[dict[str, Any]], Message],
    *,
    tool: Callable[[str, dict[str, Any]], tuple[str, bool]] | None = None,
    turns: int | None = None,
    body: Callable[[str, list[Message]], dict[str, Any]] = body_for,
) -> list[Message]:
    """Run the loop: ask the model, run its tools, feed the results back, until it answers with no call (or
    after ``turns`` model calls). ``body`` builds each request body."""
    history = [Message.user("Summarize the TODOs.")]
    for turn in range(1, 11):
        reply = ask(body(api, history))
        history.append(reply)
        calls = reply.tool_calls()
        if not calls or turn == turns:
            return history
        results = []
        for c in calls:
            text, failed = (tool or (lambda n, a: run_tool(root, n, a)))(c.name, dict(c.input))  # type: ignore[arg-type]
            results.append(ToolResultPart(call_id=c.id, name=c.name, output=text, is_error=failed))
        history.append(Message.new(Role.USER, results))
    raise AssertionError("the demo did not finish")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "sample-project"
    shutil.copytree(SAMPLE, root)
    return root


# --- the task, end to end ----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_the_demo_lists_reads_searches_writes_todo_md_and_answers(api: Any, project: Path) -> None:
    script = DemoScript()
    history = drive(api, project, lambda body: script.reply(api, body))
    turns = [[c.name for c in m.tool_calls()] for m in history if m.role is Role.ASSISTANT]
    assert turns == [["list_files"], ["read_file"] * 3, ["search"], ["write_file"], []]
    reads = [c.input["path"] for c in history[3].tool_calls()]
    assert reads == ["README.md", "textutils.py", "wordcount.py"]  # a README first, then the code
    assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD
    final = history[-1].text_content()
    assert final == (
        "Done. TODO.md lists the 5 TODO comments I found in config.toml, docs/usage.md, textutils.py and "
        "wordcount.py, grouped by file."
    )
    assert "README.md starts with “wordcount”" in history[5].text_content()


def test_a_second_run_skips_its_own_todo_md(project: Path) -> None:
    for _ in range(2):
        history = drive("openai-responses", project, lambda body: DemoScript().reply("openai-responses", body))
    assert "TODO.md" not in [c.input["path"] for c in history[3].tool_calls()]
    assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD


def test_the_demo_over_http_through_the_fake_server(project: Path) -> None:
    with FakeProviderServer(DemoScript()) as server:

        def ask(body: dict[str, Any]) -> Message:
            r = httpx2.post(server.base_url + "/v1/messages", json=body, timeout=10)
            parts = []
            for block in r.json()["content"]:
                if block["type"] == "text":
                    parts.append(TextPart(text=block["text"]))
                elif block["type"] == "tool_use":
                    parts.append(ToolCallPart(id=block["id"], name=block["name"], input=block["input"]))
            return Message.new(Role.ASSISTANT, parts)

        history = drive("anthropic", project, ask)
    assert len(server.requests) == 5
    assert (project / "TODO.md").read_text() == EXPECTED_TODO_MD
    assert history[-1].text_content().startswith("Done. TODO.md lists the 5 TODO comments")


# --- it reads the real tool results ------------------------------------------------------------------------


def test_the_demo_reads_the_files_the_listing_names_in_any_common_layout(project: Path) -> None:
    listing = "./src/app.py\nsrc/\nREADME.rst  (1.2 KB)\n  lib/util.js\nTODO.md\n"

    def tool(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        return (listing, False) if name == "list_files" else ("", False)

    history = drive("anthropic", project, lambda body: DemoScript().reply("anthropic", body), tool=tool, turns=2)
    assert [c.input["path"] for c in history[3].tool_calls()] == ["README.rst", "src/app.py", "lib/util.js"]


def test_the_todo_summary_holds_exactly_the_hits_the_search_returned(project: Path) -> None:
    hits = "\n".join(
        [
            "a/b.py:12:    # TODO: first thing",
            "c.md:3: <!-- TODO second thing -->",
            "TODO.md:5: - [ ] line 1: an old summary",
            "d.rs:40-// TODO(ana): third thing",
            "  e.txt:7: todo lowercase is not a marker",
            "3 matches",
        ]
    )
    written: list[str] = []

    def tool(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        if name == "search":
            return hits, False
        if name == "write_file":
            written.append(args["content"])
        return run_tool(project, name, args)

    drive("openai-chat", project, lambda body: DemoScript().reply("openai-chat", body), tool=tool)
    assert written == [
        "# TODO\n\n3 TODO comments found in 3 files (collected by loopctl's demo model).\n\n"
        "## a/b.py\n\n- [ ] line 12: first thing\n\n## c.md\n\n- [ ] line 3: second thing\n\n"
        "## d.rs\n\n- [ ] line 40: third thing\n"
    ]


def test_a_refused_write_is_reported_in_the_final_answer(project: Path) -> None:
    def tool(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        if name == "write_file":
            return "Permission denied by the user.", True
        return run_tool(project, name, args)

    history = drive("anthropic", project, lambda body: DemoScript().reply("anthropic", body), tool=tool)
    assert history[-1].text_content() == (
        "I could not write TODO.md (Permission denied by the user.). It would have listed 5 TODO comments."
    )
    assert not (project / "TODO.md").exists()


def codec_body(api: str, history: list[Message]) -> dict[str, Any]:
    """The request body the real codec builds (neither API has an error flag: both mark a failed result's
    text)."""
    from loopctl.providers import openai_chat, openai_responses
    from loopctl.tool import ToolSchema

    module = openai_chat if api == "openai-chat" else openai_responses
    return module.build_request(history, model="demo", tools=[ToolSchema(n) for n in TOOLS])


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses"])
def test_the_clis_refusal_is_read_as_a_failed_write_on_wires_without_an_error_flag(api: Any, project: Path) -> None:
    refusal = "write_file was not approved: the CLI cannot ask (stdin is not a terminal); run with --yes"

    def tool(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        return (refusal, True) if name == "write_file" else run_tool(project, name, args)

    history = drive(api, project, lambda body: DemoScript().reply(api, body), tool=tool, body=codec_body)
    assert history[-1].text_content() == (
        "I could not write TODO.md (write_file was not approved: the CLI cannot ask (stdin is not a terminal); "
        "run with --yes). It would have listed 5 TODO comments."
    )
    exchanges = tool_exchanges(api, codec_body(api, history[:-1]))
    assert (exchanges[-1].output, exchanges[-1].is_error) == (refusal, True)  # both mark the failure in the text


def test_a_search_without_hits_ends_without_writing(project: Path) -> None:
    # FileTools' own wording, which names the pattern: it was read as a TODO without a place.
    def tool(name: str, args: dict[str, Any]) -> tuple[str, bool]:
        return ("no match for 'TODO'", False) if name == "search" else run_tool(project, name, args)

    history = drive("gemini", project, lambda body: DemoScript().reply("gemini", body), tool=tool)
    assert history[-1].text_content() == "The search found no TODO comments, so there is nothing to write."
    assert not (project / "TODO.md").exists()


def test_without_its_tools_the_demo_says_which_are_missing() -> None:
    body = body_for("anthropic", [Message.user("hi")], names=("list_files", "read_file"))
    reply = DemoScript().reply("anthropic", body)
    assert reply.tool_calls() == []
    assert reply.text_content().endswith("this request does not offer search, write_file.")


@pytest.mark.parametrize("api", APIS)
def test_the_same_request_gets_the_same_reply(api: Any, project: Path) -> None:
    history = drive(api, project, lambda body: DemoScript().reply(api, body), turns=3)[:-1]
    body = body_for(api, history)
    assert DemoScript().reply(api, body) == DemoScript().reply(api, json.loads(json.dumps(body)))


@pytest.mark.parametrize(
    ("api", "shape"),
    [("anthropic", "signed"), ("openai-responses", "signed"), ("gemini", "thought+signature"), ("openai-chat", "none")],
)
def test_each_turn_thinks_the_way_the_endpoints_provider_does(api: Any, shape: str) -> None:
    reply = DemoScript().reply(api, body_for(api, [Message.user("go")]))
    thinking = [p for p in reply.parts if isinstance(p, ThinkingPart)]
    if shape == "none":
        assert thinking == []
    elif shape == "signed":
        assert len(thinking) == 1 and thinking[0].signature and thinking[0].provider in ("anthropic", "openai")
        assert reply.parts[0] is thinking[0]
    else:
        summary, signature = thinking
        assert summary.text and summary.signature is None and summary.provider == "gemini"
        assert signature.text == "" and signature.signature
        assert reply.parts.index(signature) == reply.parts.index(reply.tool_calls()[0]) - 1


# --- reading requests --------------------------------------------------------------------------------------


def test_tool_exchanges_pair_calls_and_results_in_every_format() -> None:
    history = [
        Message.user("go"),
        Message.new(Role.ASSISTANT, [ToolCallPart(id="c1", name="read_file", input={"path": "a"}), ToolCallPart(id="c2", name="read_file", input={"path": "b"})]),
        Message.new(Role.USER, [ToolResultPart(call_id="c1", name="read_file", output="A"), ToolResultPart(call_id="c2", name="read_file", output="B", is_error=True)]),
        Message.new(Role.ASSISTANT, [ToolCallPart(id="c3", name="search", input={"pattern": "x"})]),
    ]  # fmt: skip
    for api in APIS:
        got = tool_exchanges(api, body_for(api, history))
        assert [(e.name, dict(e.input), e.output) for e in got] == [
            ("read_file", {"path": "a"}, "A"),
            ("read_file", {"path": "b"}, "B"),
            ("search", {"pattern": "x"}, None),
        ], api
        assert got[1].is_error is (api in ("anthropic", "gemini")), api  # only these wires carry the flag
        assert isinstance(got[0], ToolExchange)
