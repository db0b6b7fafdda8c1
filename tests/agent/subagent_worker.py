"""A program the sub-agent tests run as a separate process: one side of a sub-agent's approval.

    python -m tests.agent.subagent_worker start STORE SESSION LOG
    python -m tests.agent.subagent_worker approve STORE SESSION LOG KEY

``boss`` delegates to ``researcher`` (a sub-agent) whose ``delete`` tool requires approval. ``start`` runs the
boss on the stored session (SQLite at STORE) until the sub-agent's call pauses it and exits, printing the
outcome and the pending approvals as JSON. ``approve`` continues the run in a fresh process with ``{KEY:
Approve()}``. Every model call and every run of ``delete`` appends a line to LOG (``model boss ...``,
``model researcher ...``, ``delete /tmp/x``), so a repeated call shows.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from loopctl import Agent
from loopctl.engine import Approve
from loopctl.message import Message, MessagePart, Role, TextPart, ToolResultPart
from loopctl.providers import ModelRequest
from loopctl.store import SQLiteStore
from loopctl.testing import ScriptedClient
from loopctl.tool import tool


def build(log: Path) -> Agent[None, str]:
    def note(line: str) -> None:
        with log.open("a") as f:
            f.write(line + "\n")

    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        note(f"delete {path}")
        return f"deleted {path}"

    def last_text(request: ModelRequest) -> str:
        last = request.messages[-1]
        texts = [p.text for p in last.parts if isinstance(p, TextPart)]
        results = [str(p.output) for p in last.parts if isinstance(p, ToolResultPart)]
        return " ".join(texts + results)

    def researcher_model(request: ModelRequest) -> Any:
        seen = last_text(request)
        note(f"model researcher {seen}")
        if seen.startswith("deleted"):
            return "The file is gone."
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call("k1", "delete", {"path": "/tmp/x"})])

    def boss_model(request: ModelRequest) -> Any:
        seen = last_text(request)
        note(f"model boss {seen}")
        if "gone" in seen:
            return "Cleaned up: the file is gone."
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call("p1", "researcher", {"input": "delete /tmp/x"})])

    researcher = Agent(ScriptedClient(researcher_model), tools=[delete], name="researcher", description="Cleans up.")
    return Agent(ScriptedClient(boss_model), tools=[researcher], name="boss")


async def main(argv: list[str]) -> None:
    mode, store_path, session, log = argv[:4]
    boss = build(Path(log))
    with SQLiteStore(store_path) as store:
        conv = boss.session(session, store=store)
        if mode == "start":
            run = await conv.run("Clean up /tmp/x")
        else:
            run = await conv.run(approvals={argv[4]: Approve()})
    out = {
        "outcome": run.outcome.kind.value,
        "output": run.text,
        "pending": [[p.id, p.agent, p.name] for p in run.pending_approvals],
    }
    sys.stdout.write(orjson.dumps(out).decode() + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
