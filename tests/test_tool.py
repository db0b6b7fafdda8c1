"""Tools a developer can debug: ModelRetry's words reach the model as they are, ToolOutput(is_error=True), the
three docstring styles, Annotated descriptions; a tool that defers its own call; a tool's own spend counted."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from loopctl.engine import Approve, BareLoop, OutcomeKind, RunConfig, UsageLimits
from loopctl.message import Message, MessagePart, Role, ToolResultPart
from loopctl.response import Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import (
    ApprovalRequired,
    FunctionTool,
    ModelRetry,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    schema_of,
    tool,
)


def _call(name: str, args: dict[str, object], call_id: str = "c1") -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(call_id, name, args)])


def _result(client: ScriptedClient, request: int) -> ToolResultPart:
    parts = [p for p in client.requests[request].messages[-1].parts if isinstance(p, ToolResultPart)]
    assert len(parts) == 1
    return parts[0]


@tool
def lookup(user: str) -> str:
    """Look a user up."""
    if user != "alice":
        raise ModelRetry(f"No user {user!r}; the users are alice and carol.")
    return "alice: admin"


@tool
def broken(user: str) -> str:
    """Fails."""
    raise KeyError(user)


@tool
def soft_fail(path: str) -> ToolOutput:
    """Reports a failure it expected."""
    return ToolOutput(f"{path} does not exist", is_error=True)


async def test_model_retry_reaches_the_model_as_is_and_other_exceptions_keep_their_prefix() -> None:
    client = ScriptedClient(
        [_call("lookup", {"user": "bob"}), _call("broken", {"user": "x"}, "c2"), _call("soft_fail", {"path": "a"}, "c3"), "ok"]
    )
    run = await BareLoop(client, [lookup, broken, soft_fail]).run("who?")
    assert run.ok
    retry, failed, soft = _result(client, 1), _result(client, 2), _result(client, 3)
    assert (str(retry.output), retry.is_error) == ("No user 'bob'; the users are alice and carol.", True)
    assert str(failed.output).startswith("Tool 'broken' failed: KeyError:")
    assert (str(soft.output), soft.is_error) == ("a does not exist", True)


GOOGLE = '''Send a message.

    More about it.

    Args:
        to: who gets it
        body: the text,
            on two lines
    '''

NUMPY = '''Send a message.

    More about it.

    Parameters
    ----------
    to : str
        who gets it
    body : str
        the text,
        on two lines
    '''

SPHINX = '''Send a message.

    More about it.

    :param to: who gets it
    :param body: the text,
        on two lines
    '''


@pytest.mark.parametrize("doc", [GOOGLE, NUMPY, SPHINX], ids=["google", "numpy", "sphinx"])
def test_every_docstring_style_gives_the_same_description_and_parameter_docs(doc: str) -> None:
    def send(to: str, body: str) -> str:
        return to + body

    send.__doc__ = doc
    t = tool(send)
    assert t.description == "Send a message.\n\nMore about it."
    props = t.input_schema["properties"]
    assert props["to"]["description"] == "who gets it"
    assert props["body"]["description"] == "the text, on two lines"


def test_an_annotated_field_description_is_kept_and_wins_over_the_docstring() -> None:
    @tool
    def search(
        query: Annotated[str, Field(description="words to look for", min_length=1)],
        limit: Annotated[int, Field(ge=1)] = 10,
    ) -> str:
        """Search.

        Args:
            query: not this one
            limit: how many at most
        """
        return query

    props = search.input_schema["properties"]
    assert props["query"] == {"description": "words to look for", "minLength": 1, "type": "string"}
    assert props["limit"] == {"default": 10, "description": "how many at most", "minimum": 1, "type": "integer"}


async def test_a_tool_may_defer_its_own_call_and_runs_again_once_approved() -> None:
    calls: list[str] = []

    @tool
    def transfer(amount: int) -> str:
        """Move money."""
        calls.append("ran")
        if len(calls) == 1:
            raise ApprovalRequired(f"{amount} is above the limit")
        return "moved"

    client = ScriptedClient([_call("transfer", {"amount": 500}), "done"])
    loop = BareLoop(client, [transfer])
    paused = await loop.run("pay")
    assert paused.outcome.kind is OutcomeKind.AWAITING_APPROVAL
    assert [(p.id, p.reason) for p in paused.pending_approvals] == [("c1", "500 is above the limit")]
    run = await loop.run(approvals={"c1": Approve()})
    assert run.ok and calls == ["ran", "ran"]
    assert str(_result(client, 1).output) == "moved"


async def test_a_tools_own_spend_counts_in_the_runs_usage_cost_and_limits() -> None:
    @tool
    def summarize(ctx: ToolContext[None], text: str) -> str:
        """Summarizes with a model of its own."""
        ctx.record_usage(Usage(input_tokens=1000, output_tokens=200), cost=Decimal("0.5"), requests=1)
        return "short"

    usage = Usage(input_tokens=10, output_tokens=5)
    client = ScriptedClient([_call("summarize", {"text": "long"}), "done"], usage=usage)
    run = await BareLoop(client, [summarize]).run("go")
    assert run.usage == Usage(input_tokens=1020, output_tokens=210)
    assert run.turns[0].tool_calls[0].spent is not None
    assert run.cost is None  # the scripted model's own replies have no price: the total is unknown

    client = ScriptedClient([_call("summarize", {"text": "long"}), "done"], usage=usage)
    limited = await BareLoop(client, [summarize]).run("go", RunConfig(limits=UsageLimits(total_tokens=500)))
    assert limited.outcome.kind is OutcomeKind.LIMIT_REACHED
    assert limited.outcome.limit is not None and limited.outcome.limit.spent == 1215
    assert len(client.requests) == 1  # the limit ended the run before a second model call
    assert any(isinstance(p, ToolResultPart) for p in limited.messages[-1].parts)  # the result kept


def test_the_model_retry_event_is_now_model_call_retry_and_the_old_name_warns() -> None:
    import loopctl.engine
    import loopctl.engine.events
    from loopctl.engine import ModelCallRetry

    with pytest.warns(DeprecationWarning, match="ModelCallRetry"):
        old = loopctl.engine.ModelRetry  # type: ignore[attr-defined]
    assert old is ModelCallRetry
    with pytest.warns(DeprecationWarning, match="ModelCallRetry"):
        assert loopctl.engine.events.ModelRetry is ModelCallRetry  # type: ignore[attr-defined]
    assert issubclass(ModelRetry, Exception)  # loopctl.tool.ModelRetry: the exception a tool raises


@pytest.mark.parametrize(
    ("statement", "old_name"),
    [
        ("from loopctl.engine import ModelRetry", "loopctl.engine.ModelRetry"),
        ("import loopctl.engine\nloopctl.engine.ModelRetry", "loopctl.engine.ModelRetry"),
        ("from loopctl.engine.events import ModelRetry", "loopctl.engine.events.ModelRetry"),
    ],
)
def test_the_old_event_name_warns_once_at_the_line_that_reads_it(statement: str, old_name: str) -> None:
    # The warning named loopctl/engine/__init__.py as its place, which Python's default filters hide
    # (they show a DeprecationWarning only when __main__ triggers it): `from loopctl.engine import
    # ModelRetry` in a script warned nobody. And the import's own hasattr warned a second time.
    code = compile(statement, "user_script.py", "exec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(code, {"__name__": "__main__"})
    assert [(w.category, w.filename, w.lineno) for w in caught] == [
        (DeprecationWarning, "user_script.py", statement.count("\n") + 1)
    ]
    assert str(caught[0].message).startswith(f"{old_name} is now ModelCallRetry")


def test_a_tool_with_no_description_is_logged_once_when_made(caplog: pytest.LogCaptureFixture) -> None:
    def undocumented(x: int) -> int:
        return x

    def documented(x: int) -> int:
        """Echo x."""
        return x

    with caplog.at_level("WARNING", logger="loopctl.tool"):
        tool(undocumented)
        tool(documented)
        tool(undocumented, description="")  # said on purpose: no warning
        tool(undocumented, description="Echo x.")
    assert [r.getMessage() for r in caplog.records] == [
        "tool 'undocumented' has no description: give its function a docstring, or description=..."
    ]


def test_a_function_with_positional_only_parameters_runs() -> None:
    # The tool is called by keyword; a positional-only parameter cannot be passed so: it gets its value by
    # position (the context too, when it is positional-only).
    def add(a: int, b: int = 2, /, *, scale: int = 1) -> int:
        """Adds."""
        return (a + b) * scale

    async def tagged(ctx: ToolContext[Any], text: str, /) -> str:
        """Tags."""
        return f"{ctx.call_id}:{text}"

    t = FunctionTool(add, inline=True)
    assert asyncio.run(t.call({"a": 1}, None)) == 3  # type: ignore[arg-type]
    assert asyncio.run(t.call({"a": 1, "b": 4, "scale": 10}, None)) == 50  # type: ignore[arg-type]
    assert asyncio.run(t.call({"a": 1.0}, None)) == 3  # type: ignore[arg-type]  # the input model's path
    threaded = FunctionTool(add)
    assert asyncio.run(threaded.call({"a": 5}, None)) == 7  # type: ignore[arg-type]
    assert asyncio.run(FunctionTool(tagged).call({"text": "x"}, ToolContext("c9", "tagged"))) == "c9:x"


# --- the docstring read as docstring_parser reads it -----------------------------------------------------------

_DOC_LINES = (
    "Summary line.",
    "",
    "A longer description, over",
    "two lines.",
    "Args:",
    "    path: the file",
    "    limit (int, optional): how many. Defaults to 3.",
    "    *rest: the others",
    "Returns:",
    "    the text",
    "Raises:",
    "    ValueError: when it is bad",
    "Yields:",
    "Example:",
    "    >>> read('x')",
    "Note:",
    "Attributes:",
    ":param path: the file",
    ":type path: str",
    ":returns: the text",
    "@param path: the file",
    "@return: the text",
    "Parameters",
    "----------",
    "path : str",
    "    the file",
    "Returns",
    "-------",
    ".. deprecated:: 1.0",
    "  indented: text",
    "-",
    "..",
    ":",
    "@",
    "weird: colon",
    "\tTabbed:",
    # whole sections, each style's
    "Args:\n    path: the file\n    limit: how many",
    "Parameters\n----------\npath : str\n    the file\nlimit : int, optional",
    "Returns\n-------\nint\n    the count",
    ":param path: the file\n:returns: the text",
    "@param path: the file\n@return: the text",
)


def _read(doc: str, parse: Callable[[str], Any]) -> Any:
    """What ``parse(doc)`` gives that a tool could see (or the error it raises: ``ParseError``, or another of
    docstring_parser's own, as an ``IndexError`` for some reST)."""
    try:
        d = parse(doc)
    except Exception as exc:  # compared, whatever it is
        return (type(exc).__name__, str(exc))
    meta = [
        (type(m).__name__, m.args, m.description, *(getattr(m, a, None) for a in ("arg_name", "type_name", "default")))
        for m in d.meta
    ]
    blanks = (d.blank_after_short_description, d.blank_after_long_description)
    return d.style, d.short_description, d.long_description, blanks, meta


def _agree(doc: str) -> None:
    import docstring_parser

    from loopctl.tool import _parsed

    assert _read(doc, _parsed) == _read(doc, docstring_parser.parse), doc


def test_a_docstring_is_read_as_docstring_parser_reads_it_for_every_docstring_of_loopctl_and_some_of_python() -> None:
    # loopctl.tool._parsed skips the style parsers that cannot find a section (docs/performance.md, section 12)
    import importlib
    import inspect

    names = ["loopctl.tool", "loopctl.tools.files", "loopctl.engine.loop", "loopctl.message.model", "loopctl.cli.run"]
    modules = [importlib.import_module(n) for n in [*names, "inspect", "json", "pathlib", "re", "dataclasses"]]
    docs = {
        inspect.getdoc(obj) or ""
        for module in modules
        for obj in [module, *vars(module).values()]
        if callable(obj) or inspect.ismodule(obj)
    }
    assert len(docs) > 200
    for doc in docs:
        _agree(doc)


@given(st.lists(st.sampled_from(_DOC_LINES), max_size=12), st.sampled_from(["", "    ", "\t"]))
@settings(max_examples=300, deadline=None)
def test_a_docstring_is_read_as_docstring_parser_reads_it_for_drawn_docstrings(lines: list[str], indent: str) -> None:
    _agree("\n".join(lines[:1] + [indent + line for line in lines[1:]]))


def test_a_function_tools_schema_is_one_object_until_a_field_it_was_made_of_is_replaced() -> None:
    # A client converts a request's tools once per schema object (RequestCache.tools): each BareLoop or agent
    # run rebuilds its registry, so a new ToolSchema per run converted the same tools again every run.
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    first = schema_of(lookup)
    assert schema_of(lookup) is first
    assert ToolRegistry([lookup]).schemas[0] is first
    lookup.description = "Look a key up, case-blind."
    changed = schema_of(lookup)
    assert changed is not first
    assert (changed.name, changed.description, changed.input_schema) == (
        "lookup",
        "Look a key up, case-blind.",
        first.input_schema,
    )
    lookup.input_schema = {"type": "object", "properties": {}}
    assert schema_of(lookup).input_schema == {"type": "object", "properties": {}}


def test_a_function_tools_schema_edited_in_place_is_a_new_schema_of_the_new_contents() -> None:
    # The schema object was kept while the input_schema dict was the same object: an enum added in place
    # between two runs kept the old ToolSchema, so a client's tools conversion (kept per schema object)
    # sent the old schema again.
    @tool
    def pick(colour: str) -> str:
        """Pick a colour."""
        return colour

    first = schema_of(pick)
    pick.input_schema["properties"]["colour"]["enum"] = ["red", "blue"]  # type: ignore[index]
    changed = schema_of(pick)
    assert changed is not first
    assert changed.input_schema["properties"]["colour"] == {"type": "string", "enum": ["red", "blue"]}
    assert schema_of(pick) is changed  # unchanged since: the same object again
    pick.input_schema["properties"]["colour"]["enum"][0] = True  # type: ignore[index]
    assert schema_of(pick) is not changed  # 1 == True, but not the same JSON


def test_a_function_tool_whose_schema_orjson_cannot_write_gets_a_fresh_schema_each_time() -> None:
    @tool
    def count(n: int) -> str:
        """Count."""
        return str(n)

    count.input_schema["properties"]["n"]["maximum"] = 2**70  # type: ignore[index]
    first = schema_of(count)
    assert first.input_schema["properties"]["n"]["maximum"] == 2**70
    assert schema_of(count) is not first
