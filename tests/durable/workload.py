"""The scripted workloads the durable tests run on both engines: a model that answers from a script, by the
number of replies it has already given (so a recovered run, which does not call the model again for turns
already recorded, gets the right reply), and tools whose side effects land in files the test reads.

- ``append(text)`` appends a line to ``side-effects.log``: the side effect that must happen exactly once.
- ``block(tag)`` writes ``ready`` and waits forever, unless ``release`` exists: the call the test kills the
  worker in. An engine-specific ``before_ready`` hook lets it wait until the sibling calls are recorded.
- ``tag(text)`` returns its text and writes nothing: a call that costs no side effect.

The ``deleting`` model (:func:`deleting`) calls ``delete`` once a turn, each call with the id
:data:`REPEATED`, as an OpenAI-compatible server that sends no call ids does; :class:`Deleter` is its tool.

The ``approval`` scenario defers both ``append`` calls (:func:`defer_appends`); the test approves one and
denies the other after a restart. :class:`FileHooks` writes a line to ``hooks.log`` for each hook call, so a
test can count how often each ran across processes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from loopctl.engine import Approve, Defer, Hook
from loopctl.errors import ServerError
from loopctl.message import Message, Role, ToolCallPart
from loopctl.output import RejectOutput
from loopctl.providers.base import ModelRequest
from loopctl.response import Usage
from loopctl.testing import ScriptedClient
from loopctl.tool import FunctionTool, RunContext, ToolContext, tool

Call = tuple[str, dict[str, Any]]

SCENARIOS: dict[str, list[list[Call] | str]] = {
    # one side effect, then the call the worker dies in, then the answer
    "sequential": [[("append", {"text": "first"})], [("block", {"tag": "second"})], "done"],
    # three calls in parallel: two side effects and the call the worker dies in
    "parallel": [
        [("append", {"text": "p1"}), ("block", {"tag": "p2"}), ("append", {"text": "p3"})],
        "done",
    ],
    # no crash: three turns of cheap calls
    "plain": [[("tag", {"text": "a"}), ("tag", {"text": "b"})], [("tag", {"text": "c"})], "done"],
    # two side effects deferred for approval (one approved, one denied), one call that runs at once
    "approval": [
        [("append", {"text": "yes"}), ("append", {"text": "no"}), ("tag", {"text": "free"})],
        "done",
    ],
}

APPROVED, DENIED = "call-0-0", "call-0-1"
"""The ``approval`` scenario's deferred calls: the one the test approves and the one it denies."""

DENIAL = "not this one"


REPEATED = "call_chatcmpl_0"
"""The id an id-less OpenAI-compatible server's first call of every reply gets (Gemini's: ``gemini_0``)."""

TARGETS = ["/tmp/scratch", "/etc/important"]
"""What the ``deleting`` model deletes, one a turn."""


def deleting(request: ModelRequest) -> Message:
    """Turn n deletes ``TARGETS[n]``, every call with the id :data:`REPEATED`; then the answer ``done``."""
    n = replies_so_far(request)
    if n < len(TARGETS):
        return Message.new("assistant", [ToolCallPart(id=REPEATED, name="delete", input={"path": TARGETS[n]})])
    return Message.assistant("done")


class Deleter:
    """A ``delete`` tool (:attr:`tool`) that records each path it deleted in :attr:`deleted`; its first call
    sets :attr:`started` and waits for :attr:`gate`."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

        @tool
        async def delete(path: str) -> str:
            """Delete a file."""
            if not self.deleted:
                self.started.set()
                await self.gate.wait()
            self.deleted.append(path)
            return f"deleted {path}"

        self.tool = delete


def ask_first(call: ToolCallPart) -> Defer:
    """A permission callback: every call waits for a decision."""
    return Defer("it deletes a file")


def defer_appends(call: ToolCallPart) -> Defer | Approve:
    """A permission callback: every ``append`` waits for a decision; everything else runs."""
    return Defer("it writes a file") if call.name == "append" else Approve()


class FileHooks(Hook):
    """Hooks that append a line per call to ``hooks.log`` in ``workdir``: ``before_model``,
    ``after_model``, ``before_tool <name> <text>``, ``after_tool <name> <text>``."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "hooks.log"

    def _line(self, text: str) -> None:
        with self.path.open("a") as f:
            f.write(text + "\n")

    def before_model(self, request: ModelRequest) -> None:
        """One line per model call."""
        self._line("before_model")

    def after_model(self, response: Any) -> None:
        """One line per reply kept."""
        self._line("after_model")

    def before_tool(self, call: ToolCallPart) -> None:
        """One line per call, before the permission check."""
        self._line(f"before_tool {call.name} {_arg(call)}")

    def after_tool(self, call: ToolCallPart, result: Any) -> None:
        """One line per call that ran."""
        self._line(f"after_tool {call.name} {_arg(call)}")


def _arg(call: ToolCallPart) -> str:
    return str(call.input.get("text", call.input.get("tag", "")))


def hook_lines(workdir: Path) -> list[str]:
    """The lines of ``hooks.log`` (empty when there is none)."""
    path = workdir / "hooks.log"
    return path.read_text().splitlines() if path.exists() else []


def replies_so_far(request: ModelRequest) -> int:
    """How many model replies the conversation of ``request`` holds."""
    return sum(1 for m in request.messages if m.role is Role.ASSISTANT)


def reply_for(scenario: str, turn: int) -> Message | str:
    """The scripted reply of ``turn`` (from 0) in ``scenario``: tool calls with ids ``call-<turn>-<i>``."""
    step = SCENARIOS[scenario][turn]
    if isinstance(step, str):
        return Message.assistant(step)
    return Message.new(
        "assistant", [ToolCallPart(id=f"call-{turn}-{i}", name=n, input=args) for i, (n, args) in enumerate(step)]
    )


def model(scenario: str) -> ScriptedClient:
    """A scripted client playing ``scenario``."""
    return ScriptedClient(lambda request: reply_for(scenario, replies_so_far(request)))


def tools(workdir: Path, before_ready: Callable[[], Awaitable[None]] | None = None) -> list[FunctionTool]:
    """The workload's tools, writing under ``workdir``."""

    @tool
    def append(text: str) -> str:
        """Append a line to the side-effect log."""
        with (workdir / "side-effects.log").open("a") as f:
            f.write(text + "\n")
        return f"appended {text}"

    @tool
    async def block(tag: str) -> str:
        """Wait until released."""
        with (workdir / "side-effects.log").open("a") as f:
            f.write(f"block {tag}\n")
        if (workdir / "release").exists():
            return f"released {tag}"
        if before_ready is not None:
            await before_ready()
        (workdir / "ready").write_text(tag)
        await asyncio.sleep(3600)
        return "unreachable"

    @tool(name="tag")
    def tag_(text: str) -> str:
        """Return the text."""
        return text

    return [append, block, tag_]


class Verdict(BaseModel):
    """The typed output of the typed workload (module level: an engine may pickle the run that holds it)."""

    label: str
    score: int


@dataclass
class Deps:
    """The deps of the typed workload: ``user`` may reach a record (through instructions), ``secret`` never."""

    user: str
    secret: str


SECRET = "s3cr3t-token-never-recorded"


def final(call_id: str, **fields: Any) -> Message:
    """A reply calling the output tool ``final_result`` with ``fields``."""
    return Message.new("assistant", [ToolCallPart(id=call_id, name="final_result", input=fields)])


TYPED_REPLIES = [
    Message.new("assistant", [ToolCallPart(id="w1", name="whoami", input={})]),
    final("f1", label="ok", score=3),  # valid, but the validator rejects it
    final("f2", label="ok", score=5),
]
"""The typed workload: a tool that reads the deps, an answer the validator rejects, then the answer."""


class TypedWorkload:
    """The typed workload's parts, counting what runs: ``validated`` (each value the validator saw) and
    ``instructed`` (each evaluation of the instructions)."""

    def __init__(self) -> None:
        self.validated: list[int] = []
        self.instructed = 0
        self.deps = Deps(user="ada", secret=SECRET)

    def validator(self, value: Verdict) -> Verdict:
        """Reject scores under 5."""
        self.validated.append(value.score)
        if value.score < 5:
            raise RejectOutput("the score must be at least 5")
        return value

    def instructions(self, ctx: RunContext[Deps]) -> str:
        """Instructions from the deps."""
        self.instructed += 1
        return f"You help {ctx.deps.user}."

    def tools(self) -> list[FunctionTool]:
        """``whoami``, which reads the deps."""

        @tool
        def whoami(ctx: ToolContext[Deps]) -> str:
            """Who the run is for."""
            return f"{ctx.deps.user} (key of {len(ctx.deps.secret)} characters)"

        return [whoami]


class Anthropic(ScriptedClient):
    """A scripted model whose replies are priced as Anthropic's (the model the client names)."""

    provider = "anthropic"


PRICED = Usage(input_tokens=1000, output_tokens=100)
"""The usage of each priced reply."""


def priced_plain() -> Anthropic:
    """The ``plain`` scenario played by Anthropic's claude-sonnet-4-5, each reply using :data:`PRICED`."""
    return Anthropic(lambda r: reply_for("plain", replies_so_far(r)), model="claude-sonnet-4-5", usage=PRICED)


def down(request: ModelRequest) -> Any:
    """A model that is always down (HTTP 503)."""
    raise ServerError("down", provider="scripted", status=503)


def side_effects(workdir: Path) -> list[str]:
    """The lines of ``side-effects.log`` (empty when there is none)."""
    path = workdir / "side-effects.log"
    return path.read_text().splitlines() if path.exists() else []


def summary(run: Any, events: list[str] | None = None) -> dict[str, Any]:
    """A JSON summary of a :class:`~loopctl.engine.Run` a worker process prints for the test."""
    return {
        "outcome": run.outcome.kind.value,
        "error": run.outcome.error,
        "output": run.output if run.ok and isinstance(run.output, str) else run.text,
        "turns": len(run.turns),
        "results": [[str(r.result.output) for r in t.tool_calls] for t in run.turns],
        "events": events or [],
        "pending": [p.id for p in run.pending_approvals],
    }


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` (the worker's answer to the test)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)
