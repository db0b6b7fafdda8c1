#!/usr/bin/env python3
"""The session store: bytes written and time per appended turn as a session grows to 10,000 messages, and
the time to load it, against today's JSON session file and LangGraph's ``SqliteSaver``.

Workload: one session grown the way ``BareLoop`` saves it. Runs of 10 tool-calling turns: the user's input,
then per turn an assistant message (a thinking block of 200-600 characters with a signature, a short text,
one ``read_file`` call) and the user message with its result, then a final answer; 22 messages a run, until
the session holds 10,000 messages. Tool outputs follow a fixed cycle of 25 sizes (300 to 4,000 characters,
and one 30,000-character file per cycle), so any 50 consecutive turns carry the same amount of content and
windows early and late in the session compare like with like. The machine is fed as the driver feeds it and
saved where the driver saves: before each model call and when a run ends. A *turn* is the save that adds a
reply and its tool results (2 messages).

Stores measured, each in the same run:

- ``sqlite``: :class:`loopctl.store.SQLiteStore` (WAL, ``synchronous=FULL``), through ``SessionBinding``;
- ``postgres``: :class:`loopctl.store.PostgresStore` on a throwaway local server with its default durability
  settings (``fsync``, synchronous commit, full page writes on), over a Unix socket;
- ``json``: today's session file (``loopctl.session.Session.save``, atomic rewrite of the whole file), as
  the CLI autosaves it (here once per save point; the CLI saves after every tool call too);
- ``langgraph``: LangGraph's ``SqliteSaver`` checkpointing a ``StateGraph(MessagesState)`` whose turn is an
  ``agent`` node (the reply) then a ``tools`` node (its results), as LangGraph's own ReAct agent runs; one
  ``invoke`` per turn, the same messages as LangChain messages.

The JSON file and LangGraph write O(history) bytes per turn, so growing them one turn at a time to 10,000
messages would write tens of gigabytes: they are measured at sample sizes instead (the state seeded with the
session's first N messages, not measured, then the next turn measured, 5 times, median).

How bytes are counted: for the two SQLite-file stores and the JSON file, the ``wchar`` counter of
``/proc/self/io`` (bytes this process handed to ``write(2)`` and kin: WAL frames, checkpoints into the
database file, the temporary file of an atomic rewrite), read before and after each save. For PostgreSQL the
server's own counter: WAL bytes generated (``pg_wal_lsn_diff`` of ``pg_current_wal_insert_lsn()``), which
is what the server must write for the commit; the relations' size growth is reported beside it.

Targets (issue 13): bytes written per turn O(new messages), at the 10,000th message within 2x of the first
turns'; at least 10x fewer bytes per turn than LangGraph at 10,000 messages; loading a 10,000-message session
under 100 ms.

    python3 make.py bench bench/bench_store.py     # or: .venv-bench/bin/python bench/bench_store.py
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)

from loopctl.engine import LoopMachine  # noqa: E402
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart  # noqa: E402
from loopctl.session import Session  # noqa: E402
from loopctl.store import SessionBinding, SessionStore, SQLiteStore  # noqa: E402
from loopctl.store.base import _collector_paused  # noqa: E402

N_MESSAGES = 10_000
TURNS_PER_RUN = 10
WINDOW = 50  # turns averaged at the start and at the end
SAMPLES = (22, 1_000, 5_000, 10_000)  # session sizes (messages) at which the O(history) peers are measured
OUTPUT_SIZES = [300, 1200, 500, 2500, 800, 4000, 350, 1800, 600, 30_000, 900, 2200, 400, 1500, 700, 3200,
                450, 1000, 2800, 550, 1300, 650, 3600, 750, 1100]  # fmt: skip
WORDS = str.split(
    "the of and to in is that for it as with was on be by this are from or an at which have not but had "
    "function return value file path read write test error result model tool call message part conversation "
    "request response stream token cache provider assistant user system thinking signature input output data"
)


# --- the workload ------------------------------------------------------------------------------------------


def prose(rng: random.Random, size: int) -> str:
    out: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


class Workload:
    """The session's messages, generated in the order the driver would see them (deterministic)."""

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.turn = 0

    def user_input(self, run: int) -> Message:
        return Message.user(f"Task {run}: " + prose(self.rng, 120))

    def reply(self) -> Message:
        self.turn += 1
        rng = self.rng
        return Message.new(
            Role.ASSISTANT,
            [
                ThinkingPart(
                    text=prose(rng, rng.randint(200, 600)),
                    signature=base64.b64encode(rng.randbytes(150)).decode(),
                    provider="anthropic",
                ),
                TextPart(text=prose(rng, rng.randint(40, 160))),
                ToolCallPart(id=f"toolu_{self.turn:06d}", name="read_file", input={"path": f"src/mod_{self.turn}.py"}),
            ],
        )

    def results(self, reply: Message) -> Message:
        call = reply.tool_calls()[0]
        size = OUTPUT_SIZES[(self.turn - 1) % len(OUTPUT_SIZES)]
        return Message.new(Role.USER, [ToolResultPart(call_id=call.id, name=call.name, output=prose(self.rng, size))])

    def final(self) -> Message:
        return Message.assistant(prose(self.rng, 300))


def drive(n_messages: int, save: Callable[[LoopMachine, int], None]) -> LoopMachine:
    """Feed a machine like ``BareLoop`` until it holds ``n_messages``, calling ``save(machine, new)`` where the
    driver saves (``new``: messages added since the previous save)."""
    w = Workload()
    m = LoopMachine()
    run = 0
    while len(m.full_history()) < n_messages:
        run += 1
        m.accept_input(w.user_input(run))
        save(m, 1)
        for _ in range(TURNS_PER_RUN):
            reply = w.reply()
            m.model_response(reply, {"read_file"}, 0)
            m.tool_results([w.results(reply)])
            save(m, 2)
        m.model_response(w.final(), set(), 0)
        save(m, 1)
    return m


def conversation(n_messages: int) -> list[Message]:
    return list(drive(n_messages, lambda m, new: None).full_history())


# --- counters ----------------------------------------------------------------------------------------------


def wchar() -> int:
    """Bytes this process has written (``wchar`` of ``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


class PgWal:
    """The PostgreSQL server's WAL position, read on a connection of its own."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)

    def __call__(self) -> int:
        row = self.conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").fetchone()
        assert row is not None
        return int(row[0])

    def relation_bytes(self) -> int:
        row = self.conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c WHERE c.relname LIKE 'loopctl_%' "
            "AND c.relkind = 'r'"
        ).fetchone()
        assert row is not None
        return int(row[0] or 0)


# --- our stores: grown one turn at a time -------------------------------------------------------------------


def grow(store: SessionStore, counter: Callable[[], int]) -> dict[str, Any]:
    binding = SessionBinding(store, "bench", model="anthropic:claude", root="/work", system_prompt="be careful")
    turns: list[tuple[int, int, float]] = []  # (messages after, bytes, seconds) for each turn's save
    total = {"bytes": 0, "seconds": 0.0}

    def save(m: LoopMachine, new: int) -> None:
        b0, t0 = counter(), time.perf_counter()
        binding.save(m)
        dt, db = time.perf_counter() - t0, counter() - b0
        total["bytes"] += db
        total["seconds"] += dt
        if new == 2:
            turns.append((len(m.full_history()), db, dt))

    machine = drive(N_MESSAGES, save)
    t0 = time.perf_counter()
    loaded = SessionBinding(store, "bench").load()
    load_ms = (time.perf_counter() - t0) * 1000
    assert loaded is not None and loaded.to_json() == machine.to_json()
    wall, cpu = best_of(lambda: SessionBinding(store, "bench").load(), 5, cpu=True)
    return {"turns": turns, "total": total, "load_ms": wall, "load_cpu_ms": cpu, "first_load_ms": load_ms,
            "messages": len(machine.full_history())}  # fmt: skip


def best_of(fn: Callable[[], Any], runs: int, *, cpu: bool = False) -> Any:
    """The best wall-clock milliseconds of ``runs`` calls; with ``cpu``, also the best process CPU time (less
    sensitive to other programs on a shared machine)."""
    best = best_cpu = float("inf")
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        del out  # freed outside the timing
    return (best * 1000, best_cpu * 1000) if cpu else best * 1000


# --- the peers: measured at sample sizes --------------------------------------------------------------------


def json_turn(prefix: list[Message], nxt: list[Message], folder: Path) -> tuple[int, float]:
    """Bytes and seconds of the save after one more turn, the session file holding ``prefix`` before it."""
    m = LoopMachine(prefix)
    path = folder / "session.json"
    Session(m, model="anthropic:claude", root="/work", system_prompt="be careful").save(path)
    m2 = LoopMachine([*prefix, *nxt])
    s = Session(m2, model="anthropic:claude", root="/work", system_prompt="be careful")
    b0, t0 = wchar(), time.perf_counter()
    s.save(path)
    return wchar() - b0, time.perf_counter() - t0


def to_langchain(msgs: list[Message]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for m in msgs:
        if m.role is Role.ASSISTANT:
            blocks: list[Any] = []
            for p in m.parts:
                if isinstance(p, ThinkingPart):
                    blocks.append({"type": "thinking", "thinking": p.text, "signature": p.signature})
                elif isinstance(p, TextPart):
                    blocks.append({"type": "text", "text": p.text})
            calls = [{"name": c.name, "args": c.input, "id": c.id, "type": "tool_call"} for c in m.tool_calls()]
            out.append(AIMessage(content=blocks, tool_calls=calls))
        elif m.tool_results():
            out += [ToolMessage(content=str(r.output), tool_call_id=r.call_id) for r in m.tool_results()]
        else:
            out.append(HumanMessage(content=m.text_content()))
    return out


class LangGraphAgent:
    """A two-node agent graph (``agent`` answers, ``tools`` answers its calls) on ``SqliteSaver``."""

    def __init__(self, path: Path) -> None:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.next: list[Any] = []
        g = StateGraph(MessagesState)
        g.add_node("agent", lambda state: {"messages": [self.next[0]]})
        g.add_node("tools", lambda state: {"messages": self.next[1:]})
        g.add_edge(START, "agent")
        g.add_edge("agent", "tools")
        g.add_edge("tools", END)
        self.graph = g.compile(checkpointer=self.saver)

    def seed(self, thread: str, msgs: list[Any]) -> None:
        self.graph.update_state({"configurable": {"thread_id": thread}}, {"messages": msgs}, as_node="tools")

    def turn(self, thread: str, msgs: list[Any]) -> None:
        self.next = msgs
        self.graph.invoke({"messages": []}, {"configurable": {"thread_id": thread}})

    def load(self, thread: str) -> int:
        return len(self.graph.get_state({"configurable": {"thread_id": thread}}).values["messages"])


def peers(msgs: list[Message], with_langgraph: bool) -> dict[str, dict[int, tuple[float, float]]]:
    """``{peer: {size: (median bytes, median ms) of one turn}}``."""
    out: dict[str, dict[int, tuple[float, float]]] = {"json": {}, "langgraph": {}}
    # A turn starts after a run's input or a previous turn: the boundaries where the driver saves.
    for size in SAMPLES:
        cut = min(size, len(msgs) - 2)
        while msgs[cut].role is not Role.ASSISTANT or not msgs[cut].tool_calls():
            cut -= 1
        prefix, nxt = msgs[:cut], msgs[cut : cut + 2]
        samples = []
        with tempfile.TemporaryDirectory() as d:
            for _ in range(5):
                samples.append(json_turn(prefix, nxt, Path(d)))
        out["json"][size] = (statistics.median(b for b, _ in samples), statistics.median(t for _, t in samples) * 1000)
        if with_langgraph:
            lc_prefix, lc_next = to_langchain(prefix), to_langchain(nxt)
            with tempfile.TemporaryDirectory() as d:
                agent = LangGraphAgent(Path(d) / "lg.db")
                lg = []
                for k in range(5):
                    agent.seed(f"t{k}", lc_prefix)
                    b0, t0 = wchar(), time.perf_counter()
                    agent.turn(f"t{k}", lc_next)
                    lg.append((wchar() - b0, time.perf_counter() - t0))
                out["langgraph"][size] = (
                    statistics.median(b for b, _ in lg),
                    statistics.median(t for _, t in lg) * 1000,
                )
                if size == SAMPLES[-1]:
                    out["langgraph_load_ms"] = {0: (best_of(lambda a=agent: a.load("t0"), 5), 0.0)}
                agent.conn.close()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "session.json"
        Session(LoopMachine(msgs), model="anthropic:claude").save(path)
        out["json_load_ms"] = {0: (best_of(lambda: Session.load(path), 5), 0.0)}
        out["json_file_bytes"] = {0: (float(path.stat().st_size), 0.0)}
    return out


# --- report ------------------------------------------------------------------------------------------------


def window(turns: list[tuple[int, int, float]], at_end: bool) -> tuple[float, float]:
    part = turns[-WINDOW:] if at_end else turns[:WINDOW]
    return statistics.mean(b for _, b, _ in part), statistics.mean(t for _, _, t in part) * 1000


def near(turns: list[tuple[int, int, float]], size: int) -> tuple[float, float]:
    """Mean bytes and ms of the :data:`WINDOW` turns ending at the first turn past ``size`` messages."""
    idx = next((i for i, (n, _, _) in enumerate(turns) if n >= size), len(turns) - 1)
    part = turns[max(0, idx - WINDOW + 1) : idx + 1]
    return statistics.mean(b for _, b, _ in part), statistics.mean(t for _, _, t in part) * 1000


_LOAD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from loopctl.store import PostgresStore, SessionBinding, SQLiteStore
store = SQLiteStore(sys.argv[3]) if sys.argv[2] == "sqlite" else PostgresStore(sys.argv[3])
SessionBinding(store, "bench").load()
best = (float("inf"), float("inf"))
for _ in range(5):
    w, c = time.perf_counter(), time.process_time()
    machine = SessionBinding(store, "bench").load()
    best = min(best, ((time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3))
    del machine  # freed outside the timing: a program keeps what it loaded
print(best[0], best[1])
"""


def load_with(src: str, kind: str, where: str) -> tuple[float, float]:
    """Best of 5 loads (wall ms, CPU ms) of the benchmark's session by the loopctl of another src folder, in a
    fresh process (the "before" of a change, on the same stored session)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _LOAD, src, kind, where], capture_output=True, text=True, check=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def fresh_loads(before_src: str, kind: str, where: str, rounds: int) -> dict[str, tuple[float, float]]:
    """``fresh`` (this checkout) and, with ``before_src``, ``before``: each the best (by CPU) of ``rounds``
    :func:`load_with` processes, the two alternated (the first process to read a freshly grown store measured
    10 to 30% slower, whichever code it ran)."""
    got: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        got.setdefault("fresh", []).append(load_with(str(ROOT / "src"), kind, where))
        if before_src:
            got.setdefault("before", []).append(load_with(before_src, kind, where))
    return {name: min(runs, key=lambda r: r[1]) for name, runs in got.items()}


def has_langgraph() -> bool:
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def set_size(n: int) -> None:
    global N_MESSAGES, SAMPLES
    N_MESSAGES = n
    SAMPLES = (*(s for s in SAMPLES if s < n), n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--messages", type=int, default=N_MESSAGES, help="grow the session to this size")
    _smoke.add_flag(parser)
    parser.add_argument(
        "--before-src", default="", help="also load the grown session with the loopctl of this src folder"
    )
    args = parser.parse_args()
    if args.smoke:
        args.messages = 300
    set_size(args.messages)
    rounds = 1 if args.smoke else 3
    print(f"Python {sys.version.split()[0]}; a session grown to {N_MESSAGES:,} messages, one save at a time\n")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "sessions.db"
        store = SQLiteStore(path)
        results["sqlite"] = grow(store, wchar)
        store.close()
        results["sqlite"].update(fresh_loads(args.before_src, "sqlite", str(path), rounds))
        results["sqlite"]["file_bytes"] = sum(p.stat().st_size for p in Path(d).iterdir())
    if not args.no_postgres:
        from loopctl.store import PostgresStore
        from loopctl.testing.postgres import PostgresServer

        with PostgresServer(durable=True) as pg:
            wal = PgWal(pg.dsn())
            store = PostgresStore(pg.dsn())
            results["postgres"] = grow(store, wal)
            results["postgres"]["file_bytes"] = wal.relation_bytes()
            store.close()
            results["postgres"].update(fresh_loads(args.before_src, "postgres", pg.dsn(), rounds))
            wal.conn.close()
    msgs = conversation(N_MESSAGES)
    content = sum(len(m.to_json().encode()) for m in msgs)
    with_langgraph = not args.no_peers and not _smoke.peer_missing(
        "LangGraph SqliteSaver", "langgraph", "langgraph.checkpoint.sqlite", "langchain_core"
    )
    peer = peers(msgs, with_langgraph=with_langgraph)

    print(f"Session: {len(msgs):,} messages, {content / 1e6:.1f} MB of conversation-file JSON\n")
    print("Bytes written and milliseconds per appended turn (a reply and its tool results), mean of "
          f"{WINDOW} turns ending at each size; the peers at the same sizes (median of 5):")  # fmt: skip
    header = f"  {'messages':>9}" + "".join(f"  {name + ' B':>14}  {name + ' ms':>12}" for name in
                                            ["sqlite", "postgres", "json", "langgraph"])  # fmt: skip
    print(header)
    for size in SAMPLES:
        row = f"  {size:>9,}"
        for name in ("sqlite", "postgres"):
            if name in results:
                b, t = near(results[name]["turns"], size)
                row += f"  {b:>14,.0f}  {t:>12.2f}"
            else:
                row += f"  {'-':>14}  {'-':>12}"
        for name in ("json", "langgraph"):
            if size in peer.get(name, {}):
                b, t = peer[name][size]
                row += f"  {b:>14,.0f}  {t:>12.2f}"
            else:
                row += f"  {'-':>14}  {'-':>12}"
        print(row)

    print("\nGrowth (target: the last turns' bytes within 2x of the first turns'):")
    for name, r in results.items():
        first_b, first_t = window(r["turns"], at_end=False)
        last_b, last_t = window(r["turns"], at_end=True)
        first_turn = r["turns"][0][1]
        print(
            f"  {name:9} first turn {first_turn:,} B; first {WINDOW} turns {first_b:,.0f} B, {first_t:.2f} ms; "
            f"last {WINDOW} turns {last_b:,.0f} B, {last_t:.2f} ms; ratio {last_b / first_b:.2f}x"
        )
    lg = peer.get("langgraph", {})
    if lg:
        print(f"\nAgainst LangGraph SqliteSaver at {SAMPLES[-1]:,} messages (target: >= 10x fewer bytes per turn):")
        for name, r in results.items():
            b, _ = near(r["turns"], SAMPLES[-1])
            print(f"  {name:9} {lg[SAMPLES[-1]][0] / b:8.0f}x fewer bytes per turn")
        jb = peer["json"][SAMPLES[-1]][0]
        print(f"  (the JSON file: {jb / near(results['sqlite']['turns'], SAMPLES[-1])[0]:.0f}x more than sqlite)")

    print(f"\nLoading the {N_MESSAGES:,}-message session into a machine (best of 5 loads, in this process, and of 3 alternated fresh processes each; target < 100 ms):")
    for name, r in results.items():
        print(
            f"  {name:9} {r['load_ms']:8.1f} ms wall, {r['load_cpu_ms']:.1f} ms CPU in this process  "
            f"(first load {r['first_load_ms']:.1f} ms)"
        )
        wall, cpu = r["fresh"]
        print(f"  {name:9} {wall:8.1f} ms wall, {cpu:.1f} ms CPU in a fresh process")
        if "before" in r:
            wall, cpu = r["before"]
            print(f"  {name + '@before':9} {wall:8.1f} ms wall, {cpu:.1f} ms CPU: the same session, loaded by --before-src (fresh process)")
    datas = [m.to_json().encode() for m in msgs]

    def read_all() -> None:
        with _collector_paused:  # as the load does
            [Message.from_json(d) for d in datas]

    floor_wall, floor_cpu = best_of(read_all, 5, cpu=True)
    print(
        f"  {'floor':9} {floor_wall:8.1f} ms wall, {floor_cpu:.1f} ms CPU: Message.from_json of every message's bytes "
        "(collector paused, as the load does), what any reader of these messages pays"
    )
    parse_wall, parse_cpu = best_of(lambda: [orjson.loads(d) for d in datas], 5, cpu=True)
    print(f"  {'parse':9} {parse_wall:8.1f} ms wall, {parse_cpu:.1f} ms CPU: orjson.loads of the same bytes (no Message built)")
    if "json_load_ms" in peer:
        print(f"  {'json':9} {peer['json_load_ms'][0][0]:8.1f} ms")
    if "langgraph_load_ms" in peer:
        print(f"  {'langgraph':9} {peer['langgraph_load_ms'][0][0]:8.1f} ms  (get_state)")

    print("\nTotals over the whole growth:")
    for name, r in results.items():
        unit = "WAL bytes" if name == "postgres" else "bytes written"
        print(
            f"  {name:9} {r['total']['bytes'] / 1e6:8.1f} MB {unit} in {r['total']['seconds']:.1f} s; "
            f"stored {r['file_bytes'] / 1e6:.1f} MB ({'relations' if name == 'postgres' else 'db + wal files'})"
        )
    if "json_file_bytes" in peer:
        print(f"  {'json':9} file of {peer['json_file_bytes'][0][0] / 1e6:.1f} MB, rewritten whole at every save")


if __name__ == "__main__":
    main()
