"""A program the approval tests run as a separate process: one side of a deferred approval.

    python -m tests.engine.approval_worker start STORE SESSION BASE_URL OUT_FILE
    python -m tests.engine.approval_worker approve STORE SESSION BASE_URL OUT_FILE CALL_ID

``start`` runs a loop over the stored session (SQLite at STORE) whose permission callback defers every call of
``append_line``; the run pauses and the process exits, printing the run's outcome and pending call ids as
JSON. ``approve`` loads the session in a fresh process, approves CALL_ID and continues the run, printing its
outcome and how many lines OUT_FILE holds. The model is the real OpenAI client pointed at a fake provider
server (BASE_URL) that the test runs.

    python -m tests.engine.approval_worker race STORE SESSION OUT_FILE CALL_ID READY_FILE GO_FILE
    python -m tests.engine.approval_worker crash STORE SESSION OUT_FILE CALL_ID

``race`` loads the session, writes READY_FILE, waits for GO_FILE to exist, then approves CALL_ID (a scripted
model answers "Done."; the tool takes 0.3 s after its line is written, as a real side effect takes time) and
prints the outcome, or the type of the error ``run`` raised. ``crash`` approves CALL_ID and dies (SIGKILL)
inside the tool, right after its line is written: before the run could save its result.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import orjson

from loopctl.engine import Approve, BareLoop, Defer, RunConfig
from loopctl.errors import LoopError
from loopctl.store import SQLiteStore
from loopctl.testing import ScriptedClient
from loopctl.tool import tool
from loopctl.transport import OpenAIChatClient


def make_tool(out: Path, *, then: str | None = None) -> object:
    @tool
    def append_line(text: str) -> str:
        """Append a line to the output file."""
        with out.open("a") as f:
            f.write(text + "\n")
        if then == "sleep":
            time.sleep(0.3)
        elif then == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"appended {text!r}"

    return append_line


def scripted(mode: str, store_path: str, session: str, out: str, call_id: str, *files: str) -> dict[str, object]:
    store = SQLiteStore(store_path)
    try:
        tools = [make_tool(Path(out), then="sleep" if mode == "race" else "die")]
        loop = BareLoop(ScriptedClient(["Done."]), tools, store=store, session_id=session)
        if mode == "race":
            ready, go = map(Path, files)
            ready.touch()
            while not go.exists():
                time.sleep(0.005)
        try:
            run = loop.run_sync(approvals={call_id: Approve()})
        except LoopError as exc:
            return {"raised": type(exc).__name__, "error": str(exc)}
        return {"outcome": run.outcome.kind.value, "error_type": run.outcome.error_type}
    finally:
        store.close()


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
    if sys.argv[1] in ("race", "crash"):
        sys.stdout.write(orjson.dumps(scripted(*sys.argv[1:])).decode() + "\n")
    else:
        asyncio.run(main(*sys.argv[1:]))
