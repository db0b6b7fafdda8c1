"""The scripted demo model behind ``loopctl run --model demo``: a small real task, no API key.

:class:`DemoScript` is a :class:`~loopctl.testing.server.Responder` for the fake provider server. It reads
each request the way a model reads its context (the tool calls made so far and their results, in any of the
four wire formats) and answers with the next step of one task: list the project, read two or three files,
search for ``TODO``, write ``TODO.md`` summarizing the TODO lines the search really returned, then give a
short final answer. A project without TODO comments gets no ``TODO.md``: the demo answers that it found none
(an empty summary would only be a file to delete). Every answer is a function of the request alone, so a
retried request gets the same reply and a resumed session continues where it stopped.

Tools it calls (the CLI's built-ins): ``list_files(path=".")``, ``read_file(path)``,
``search(pattern, path=".")``, ``write_file(path, content)``; their results are read as plain text. A
listing is read for anything that looks like a file path with an extension (one path per line, relative to
the root, reads best; a tree drawn with indentation and bare names does not), a search result for
grep-style ``path:line: text`` lines only (any other line, such as the tool's ``no match for 'TODO'`` or a
count of hits, is not a hit).

Pure apart from reading the request: no I/O, no clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loopctl._frozen import dataclass
from loopctl.message import Message, MessagePart, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers.openai_chat import TOOL_ERROR_MARKER
from loopctl.testing.server import RecordedRequest
from loopctl.testing.wire import API, THINKING_PROVIDER, fake_signature

__all__ = ["DEMO_TASK", "REQUIRED_TOOLS", "DemoScript", "ToolExchange", "offered_tools", "tool_exchanges"]

DEMO_TASK = "Find the TODO comments in this project and write a summary of them to TODO.md."
"""The task the demo model performs (it performs it whatever the prompt says, and says so)."""

REQUIRED_TOOLS = ("list_files", "read_file", "search", "write_file")
"""The tools the demo needs the request to offer."""


@dataclass(frozen=True, slots=True)
class ToolExchange:
    """One tool call found in a request, with its result when the request carries one.

    ``output`` is the result as plain text (``None`` when unanswered); ``is_error`` is the result's error
    flag where the wire has one (Anthropic ``is_error``, a Gemini ``error`` key).
    """

    call_id: str
    name: str
    input: Mapping[str, Any]
    output: str | None = None
    is_error: bool = False


# --- reading requests ------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """Plain text of a tool result's content: a string, or a list of text blocks (any provider's)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(c) for c in content)
    if isinstance(content, Mapping):
        for key in ("text", "output", "result", "content", "error"):
            if key in content:
                return _text_of(content[key])
        return json.dumps(content)
    return "" if content is None else str(content)


def _args(value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value else {}
        except ValueError:
            return {}
    return value if isinstance(value, Mapping) else {}


def tool_exchanges(api: API, body: Mapping[str, Any]) -> list[ToolExchange]:
    """Every tool call in the request ``body`` of ``api``, in order, each with its result if present.

    Chat: assistant ``tool_calls`` and ``role: "tool"`` messages (a text starting with
    :data:`~loopctl.providers.openai_chat.TOOL_ERROR_MARKER` is an error, the marker removed); Responses:
    ``function_call`` and ``function_call_output`` input items (the same marker); Anthropic: ``tool_use`` and
    ``tool_result`` blocks; Gemini: ``functionCall`` and ``functionResponse`` parts, paired by ``id`` when
    present, else by order and name.
    """
    calls: list[ToolExchange] = []
    results: dict[str, tuple[str, bool]] = {}
    if api == "openai-chat":
        for m in body.get("messages") or []:
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                calls.append(ToolExchange(c.get("id", ""), fn.get("name", ""), _args(fn.get("arguments"))))
            if m.get("role") == "tool":
                # Chat's tool message has no error field: the codec marks a failed result's text instead.
                text = _text_of(m.get("content"))
                failed = text.startswith(TOOL_ERROR_MARKER)
                results[m.get("tool_call_id", "")] = (text.removeprefix(TOOL_ERROR_MARKER), failed)
    elif api == "openai-responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            if item.get("type") == "function_call":
                calls.append(ToolExchange(item.get("call_id", ""), item.get("name", ""), _args(item.get("arguments"))))
            elif item.get("type") == "function_call_output":
                # No error field here either: the codec marks a failed result's text as on Chat.
                text = _text_of(item.get("output"))
                results[item.get("call_id", "")] = (
                    text.removeprefix(TOOL_ERROR_MARKER),
                    text.startswith(TOOL_ERROR_MARKER),
                )
    elif api == "anthropic":
        for m in body.get("messages") or []:
            content = m.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use":
                    calls.append(ToolExchange(block.get("id", ""), block.get("name", ""), _args(block.get("input"))))
                elif block.get("type") == "tool_result":
                    output = (_text_of(block.get("content")), block.get("is_error") is True)
                    results[block.get("tool_use_id", "")] = output
    else:
        answers: list[tuple[str, str, str, bool]] = []  # (id, name, text, is_error)
        for content in body.get("contents") or []:
            for part in content.get("parts") or []:
                if "functionCall" in part:
                    fc = part["functionCall"]
                    call_id = fc.get("id") or f"gemini-{len(calls)}"
                    calls.append(ToolExchange(call_id, fc.get("name", ""), _args(fc.get("args"))))
                elif "functionResponse" in part:
                    fr = part["functionResponse"]
                    response = fr.get("response")
                    failed = isinstance(response, Mapping) and "error" in response and "output" not in response
                    answers.append((fr.get("id") or "", fr.get("name", ""), _text_of(response), failed))
        for call_id, name, text, failed in answers:
            match = next((c for c in calls if c.call_id == call_id), None) or next(
                (c for c in calls if c.name == name and c.call_id not in results), None
            )
            if match is not None:
                results[match.call_id] = (text, failed)
    out = []
    for call in calls:
        if call.call_id in results:
            text, failed = results[call.call_id]
            call = ToolExchange(call.call_id, call.name, call.input, text, failed)
        out.append(call)
    return out


def offered_tools(api: API, body: Mapping[str, Any]) -> list[str]:
    """The names of the tools the request offers (each API nests them its own way).

    ``api`` is one of :data:`~loopctl.testing.wire.APIS` and ``body`` the request body as JSON (a mapping).
    """
    names: list[str] = []
    for tool in body.get("tools") or []:
        if api == "openai-chat":
            names.append((tool.get("function") or {}).get("name", ""))
        elif api == "gemini":
            names += [
                d.get("name", "") for d in tool.get("functionDeclarations") or tool.get("function_declarations") or []
            ]
        else:
            names.append(tool.get("name", ""))
    return names


# --- reading tool results --------------------------------------------------------------------------------

_PATH = re.compile(r"[\w.\-/\\]*\w\.[A-Za-z][A-Za-z0-9]*\b")
_HIT = re.compile(r"^\s*(?P<path>[^\s:][^:]*?):(?P<line>\d+)[:\-]\s?(?P<text>.*)$")
_TODO = re.compile(r"\bTODO\b(?:\([^)]*\))?[\s:\-]*(?P<rest>.*)")  # TODO, TODO:, TODO(name):
_PRIORITY = ("readme", ".py", ".md", ".toml", ".txt", ".cfg", ".js", ".ts", ".rs", ".go")


def _files_in_listing(listing: str) -> list[str]:
    """The file paths named in a ``list_files`` result, in order: any token that looks like a path with an
    extension (directories, sizes and decorations are skipped)."""
    seen: list[str] = []
    for line in listing.splitlines():
        for token in _PATH.findall(line):
            token = token[2:] if token.startswith("./") else token
            if token not in seen and token != "TODO.md":
                seen.append(token)
    return seen


def _pick_files(files: Sequence[str], count: int = 3) -> list[str]:
    """Up to ``count`` files worth reading: a README first, then the shallowest source and text files."""

    def rank(path: str) -> tuple[int, int, int]:
        lower = path.lower()
        kind = next((i for i, p in enumerate(_PRIORITY) if p in lower), len(_PRIORITY))
        return (kind if kind == 0 else 1, path.count("/"), kind)

    return sorted(files, key=lambda p: (rank(p), files.index(p)))[:count]


@dataclass(frozen=True, slots=True)
class _Todo:
    path: str
    line: int
    text: str


def _todos(search_output: str) -> list[_Todo]:
    """The TODO hits of a ``search`` result: its ``path:line: text`` lines (grep style) whose text holds a
    TODO marker. Other lines are not hits (``no match for 'TODO'`` names the pattern, it does not find it);
    hits in ``TODO.md`` itself (from an earlier run) are skipped."""
    found: list[_Todo] = []
    for raw in search_output.splitlines():
        m = _HIT.match(raw)
        if m is None:
            continue
        path, line, text = m["path"].strip(), int(m["line"]), m["text"]
        todo = _TODO.search(text)
        if todo is None or path.endswith("TODO.md"):
            continue
        rest = re.sub(r"\s*(-->|\*/|#}|%>)\s*$", "", todo["rest"]).strip() or text.strip()
        found.append(_Todo(path, line, rest))
    return found


def _todo_markdown(todos: Sequence[_Todo]) -> str:
    """The ``TODO.md`` text: a heading, a count, then one section per file with one checkbox per TODO."""
    files = list(dict.fromkeys(t.path for t in todos))
    lines = [
        "# TODO",
        "",
        f"{len(todos)} TODO comment{'s' if len(todos) != 1 else ''} found in {len(files)} "
        f"file{'s' if len(files) != 1 else ''} (collected by loopctl's demo model).",
    ]
    for path in files:
        lines += ["", f"## {path}", ""]
        lines += [f"- [ ] line {t.line}: {t.text}" for t in todos if t.path == path]
    return "\n".join(lines) + "\n"


def _first_line(text: str, limit: int = 70) -> str:
    for line in text.splitlines():
        # read_file numbers its lines ("    1\t..."); the number is not part of the text.
        line = re.sub(r"^\s*\d+\t", "", line)
        line = line.strip().lstrip("#").strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _failed(exchange: ToolExchange) -> bool:
    """Whether a result reads as a failure: its error flag, or (Responses has no flag) its wording, the CLI's
    refusals included ("write_file was not approved: ...", "The user did not allow ...")."""
    text = (exchange.output or "").strip().lower()
    return (
        exchange.is_error
        or text.startswith(("error", "denied", "refused", "permission denied"))
        or "not approved" in text
        or "did not allow" in text
    )


# --- the script ------------------------------------------------------------------------------------------


class DemoScript:
    """The demo model: :meth:`respond` returns the next assistant :class:`~loopctl.message.Message` for a
    request to the fake server (a :class:`~loopctl.testing.server.Responder`).

    Its turns: (1) ``list_files(".")``; (2) ``read_file`` on up to ``read_count`` files named in the listing,
    in parallel; (3) ``search("TODO", ".")``; (4) ``write_file("TODO.md", ...)`` listing the hits of the
    search result; (5) a short final text, which says so if the write failed (refused by the user, say).
    When the search has no hit, (4) is the final text instead, saying that no TODO comment was found, and
    no file is written.
    Each turn carries a one-line thinking part signed for the endpoint's provider (none on Chat Completions,
    where OpenAI sends no reasoning). If the request lacks one of :data:`REQUIRED_TOOLS`, the reply is a text
    naming what is missing.
    """

    def __init__(self, *, read_count: int = 3) -> None:
        self.read_count = read_count

    def respond(self, request: RecordedRequest) -> Message:
        """The reply to ``request`` (its ``api`` says which wire format the body is in)."""
        api = request.api or "anthropic"
        body = request.body if isinstance(request.body, Mapping) else {}
        return self.reply(api, body)

    def reply(self, api: API, body: Mapping[str, Any]) -> Message:
        """The reply to a request ``body`` in ``api``'s format."""
        offered = offered_tools(api, body)
        missing = [t for t in REQUIRED_TOOLS if t not in offered]
        if missing:
            return Message.assistant(
                "I'm loopctl's scripted demo model and I need the tools "
                f"{', '.join(REQUIRED_TOOLS)}; this request does not offer {', '.join(missing)}."
            )
        done = tool_exchanges(api, body)
        by_name: dict[str, list[ToolExchange]] = {}
        for exchange in done:
            by_name.setdefault(exchange.name, []).append(exchange)
        if "list_files" not in by_name:
            return self._turn(
                api,
                1,
                "The task is to collect the TODO comments. I should see what the project holds first.",
                "I'm loopctl's scripted demo model (no API key needed). My task: collect this project's TODO "
                "comments into TODO.md. First, a look at the files.",
                [("list_files", {"path": "."})],
            )
        if "read_file" not in by_name:
            listing = by_name["list_files"][-1].output or ""
            files = _pick_files(_files_in_listing(listing), self.read_count)
            if not files:
                return self._turn(api, 2, "Nothing to read.", "The project looks empty; nothing to summarize.", [])
            return self._turn(
                api,
                2,
                f"The listing names {len(_files_in_listing(listing))} files; a few of them will show what this is.",
                f"I see {len(_files_in_listing(listing))} files. Let me read {_join(files)}.",
                [("read_file", {"path": f}) for f in files],
            )
        if "search" not in by_name:
            reads = by_name["read_file"]
            first = next((r for r in reads if r.output and not _failed(r)), None)
            seen = f"{first.input.get('path')} starts with “{_first_line(first.output or '')}”. " if first else ""
            return self._turn(
                api,
                3,
                "I have a feel for the code. Now the TODO comments, everywhere at once.",
                f"{seen}Now let me search the whole project for TODO comments.",
                [("search", {"pattern": "TODO", "path": "."})],
            )
        todos = _todos(by_name["search"][-1].output or "")
        if "write_file" not in by_name:
            if not todos:
                return Message.assistant("The search found no TODO comments, so there is nothing to write.")
            files = list(dict.fromkeys(t.path for t in todos))
            return self._turn(
                api,
                4,
                f"{len(todos)} hits in {len(files)} files; grouping them by file reads best.",
                f"Found {len(todos)} TODO comments in {len(files)} files. Writing them to TODO.md.",
                [("write_file", {"path": "TODO.md", "content": _todo_markdown(todos)})],
            )
        write = by_name["write_file"][-1]
        if _failed(write):
            return Message.assistant(
                f"I could not write TODO.md ({_first_line(write.output or 'no reason given', 120)}). "
                f"It would have listed {len(todos)} TODO comments."
            )
        files = list(dict.fromkeys(t.path for t in todos))
        return Message.assistant(
            f"Done. TODO.md lists the {len(todos)} TODO comments I found in {_join(files)}, grouped by file."
        )

    def _turn(
        self, api: API, turn: int, thought: str, text: str, calls: Iterable[tuple[str, dict[str, Any]]]
    ) -> Message:
        parts: list[MessagePart] = []
        provider = THINKING_PROVIDER[api]
        if api == "gemini":
            # Gemini: a thought summary, and the signature on the first call (docs/providers.md, "The
            # reasoning replay policy").
            parts.append(ThinkingPart(text=thought, provider=provider))
        elif api != "openai-chat":
            parts.append(ThinkingPart(text=thought, signature=fake_signature(thought), provider=provider))
        parts.append(TextPart(text=text))
        for i, (name, args) in enumerate(calls):
            if i == 0 and api == "gemini":
                parts.append(ThinkingPart(text="", signature=fake_signature(f"{turn}:{name}"), provider=provider))
            parts.append(ToolCallPart(id=f"call_demo_{turn}_{i}", name=name, input=args))
        return Message.new(Role.ASSISTANT, parts)


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
