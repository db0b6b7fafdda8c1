"""mypy --strict checks an agent's deps: a tool whose ``ToolContext[D]`` does not fit the agent's deps type, a
run given no deps or deps of another type, are type errors; the right ones pass clean. Runs mypy on a small
file with the project's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GOOD = '''
from dataclasses import dataclass

from pydantic import BaseModel

from loopctl import Agent
from loopctl.agent import Conversation
from loopctl.engine import Run
from loopctl.testing import ScriptedClient
from loopctl.tool import FunctionTool, ToolContext, tool


@dataclass
class Deps:
    user: str


class Answer(BaseModel):
    text: str


@tool
def whoami(ctx: ToolContext[Deps]) -> str:
    """The user's name."""
    return ctx.deps.user


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool(requires_approval=True)
def delete(ctx: ToolContext[Deps], path: str) -> str:
    """Delete."""
    return ctx.deps.user + path


with_deps = Agent(ScriptedClient(["hi"]), tools=[whoami, add, delete], deps_type=Deps, output_type=Answer)
plain = Agent(ScriptedClient(["hi"]), tools=[add])
researcher = Agent(ScriptedClient(["hi"]), tools=[whoami], deps_type=Deps, name="researcher")
boss = Agent(ScriptedClient(["hi"]), tools=[researcher, researcher.as_tool(name="r2"), plain], deps_type=Deps)
t: FunctionTool[Deps] = whoami
u: FunctionTool[object] = add


async def main() -> None:
    run: Run[Answer] = await with_deps.run("x", deps=Deps("ada"))
    answer: Answer = run.output
    text: str = (await plain.run("x")).output
    conv: Conversation[Deps, Answer] = with_deps.session("s")
    again: Run[Answer] = await conv.run("y", deps=Deps("bob"))
    sync: Run[str] = plain.run_sync("z")
    async with with_deps.stream("x", deps=Deps("c")) as stream:
        streamed: Run[Answer] = await stream.result()
    print(answer, text, again, sync, streamed, await boss.run("q", deps=Deps("d")))
'''

BAD = '''
from dataclasses import dataclass

from loopctl import Agent
from loopctl.testing import ScriptedClient
from loopctl.tool import ToolContext, tool


@dataclass
class Deps:
    user: str


@dataclass
class Other:
    n: int


@tool
def whoami(ctx: ToolContext[Deps]) -> str:
    """The user's name."""
    return ctx.deps.user


@tool
def count(ctx: ToolContext[Other]) -> int:
    """A number."""
    return ctx.deps.n


agent = Agent(ScriptedClient(["hi"]), tools=[whoami], deps_type=Deps)
mixed = Agent(ScriptedClient(["hi"]), tools=[whoami, count], deps_type=Deps)  # BAD: a tool of other deps
undeclared = Agent(ScriptedClient(["hi"]), tools=[count], deps_type=Deps)  # BAD: deps_type that the tool does not take


async def main() -> None:
    await agent.run("x")  # BAD: no deps
    await agent.run("x", deps=Other(1))  # BAD: deps of another type
    agent.run_sync("x", deps=None)  # BAD: None for deps
    await agent.session("s").run("y")  # BAD: no deps on a conversation
    await agent.run("x", deps=Deps("ok"))
'''


def _mypy(*files: Path) -> str:
    # The checkout's cache (warm after the docs' mypy run: the suite's mypy tests share one worker, the "mypy"
    # xdist group): a cold cache of its own made this test check loopctl and its libraries from scratch.
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--config-file", str(ROOT / "pyproject.toml"),
         *map(str, files)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.stdout


def _errors_of(out: str, file: Path) -> list[str]:
    """mypy's error lines about ``file``, by its name: from a shared cache, mypy replays an unchanged module's
    errors under the path it had when it was checked (an earlier test's folder)."""
    return [line for line in out.splitlines() if Path(line.split(":", 1)[0]).name == file.name and ": error:" in line]


@pytest.mark.xdist_group("mypy")
def test_mypy_strict_catches_missing_and_wrong_deps_and_passes_the_right_ones(tmp_path: Path) -> None:
    good, bad = tmp_path / "agent_typing_good.py", tmp_path / "agent_typing_bad.py"
    good.write_text(GOOD)
    bad.write_text(BAD)
    out = _mypy(good, bad)
    assert _errors_of(out, good) == []
    lines = BAD.splitlines()
    flagged = {int(line.split(":")[1]) for line in _errors_of(out, bad)}
    expected = {n for n, text in enumerate(lines, 1) if "# BAD" in text}
    assert flagged == expected, out
