"""A program the approval tests run as a separate process: one side of a deferred approval.

    python -m tests.engine.approval_worker start STORE SESSION BASE_URL OUT_FILE
    python -m tests.engine.approval_worker approve STORE SESSION BASE_URL OUT_FILE CALL_ID

``start`` runs a loop over the stored session (SQLite at STORE) whose permission callback defers every call of
``append_line``; the run pauses and the process exits, printing the run's outcome and pending call ids as
JSON. ``approve`` loads the session in a fresh process, approves CALL_ID and continues the run, printing its
outcome and how many lines OUT_FILE holds. The model is the real OpenAI client pointed at a fake provider
server (BASE_URL) that the test runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

from loopctl.engine import Approve, BareLoop, Defer, RunConfig
from loopctl.store import SQLiteStore
from loopctl.tool import tool
from loopctl.transport import OpenAIChatClient


def make_tool(out: Path) -> object:
    @tool
    def append_line(text: str) -> str:
        """Append a line to the output file."""
        with out.open("a") as f:
            f.write(text + "\n")
        return f"appended {text!r}"

    return append_line


async def main(mode: str, store_path: str, session: str, base_url: str, out: str, *rest: str) -> None:
    store = SQLiteStore(store_path)
    client = OpenAIChatClient("gpt-4o", base_url=base_url, api_key="test")
    try:
        tools = [make_tool(Path(out))]
        if mode == "start":
            loop = BareLoop(client, tools, store=store, session_id=session, permission=lambda call: Defer("writes"))
            run = await loop.run("write the line", RunConfig(stream=True))
            report = {"outcome": run.outcome.kind.value, "pending": [p.id for p in run.pending_approvals]}
        else:
            loop = BareLoop(client, tools, store=store, session_id=session)
            run = await loop.run(approvals={rest[0]: Approve()}, config=RunConfig(stream=True))
            lines = Path(out).read_text().splitlines() if Path(out).exists() else []
            report = {
                "outcome": run.outcome.kind.value,
                "text": run.text,
                "lines": lines,
                "resumed": [(r.call.id, r.ran, str(r.result.output)) for r in run.resumed_calls],
            }
    finally:
        await client.aclose()
        store.close()
    sys.stdout.write(orjson.dumps(report).decode() + "\n")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
