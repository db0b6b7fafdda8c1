#!/usr/bin/env python3
"""Agent-loop overhead: loopctl against LangGraph, pydantic-ai and the OpenAI Agents SDK, in one run.

The workload and the method are those of the peer harness in ../shared/bench/anchors_overhead.py, whose
adapters for the peers this script imports (so the peers run exactly as measured there):

- W(N): one run; a scripted model (instant, no network, turn derived from len(history) in O(1)) answers N
  times with one ``echo`` tool call (a 200-character argument the tool returns), then a final answer.
- C(K): K concurrent W(5) runs on one event loop.
- The floor: W(N)'s turn with its essential work alone (the reply, the pairing check, the tool, its result made
  as the engine makes it, both messages counted; ``setup_floor``), so what the engine adds to a turn shows.

Each measurement runs in a fresh subprocess after a W(2) warm-up, the repetitions interleaved (each framework
once in each repetition, so a machine's drifting speed moves all alike). Reported: per-turn overhead (wall / model
calls), the mean time of one turn over the first and the last 10% of turns, peak RSS, C(K) wall time,
loopctl's ratio to each peer, and the cold ``import loopctl`` time (and whether any provider SDK got
imported). Telemetry is off everywhere.

    python3 make.py bench bench/bench_engine.py          # or, in a venv with the peers installed:
    python bench/bench_engine.py [--ns 10,100,500,1000] [--k 1000] [--peers langgraph,pydantic_ai,openai_agents]

The peer harness is looked up in $LOOPCTL_PEER_HARNESS, then ../shared/bench next to the checkout; without
it (or without the peers installed) only loopctl is measured.

``--instructions`` counts instead of timing: the instructions per model call of loopctl (and of
``--before-src``'s, and of the floor) under valgrind's cachegrind, which repeat to the instruction from run to
run where wall and CPU times on a shared machine move by tens of percent (docs/performance.md, sections 9 to
13): a process makes the W(2) warm-up then K runs of W(N) (K = ``--instr-k``, by default 3 up to N = 100 and 1
above), less the same process making none, over K x (N + 1) model calls; ``PYTHONHASHSEED=0``. Needs
``valgrind`` (Debian's package; ``make.py test`` installs it in CI, where the smoke run counts W(3)).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# LOOPCTL_SRC: another checkout's src folder, for a "before" measured in the same run (--before-src).
sys.path.insert(0, os.environ.get("LOOPCTL_SRC") or str(ROOT / "src"))
BEFORE = "loopctl@before"
FLOOR = "floor"  # the turn's essential work alone (setup_floor)

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)

PAYLOAD = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
FINAL = "done"
# The module each peer's adapter imports: a peer that is not installed is skipped, one that is and fails fails.
PEER_MODULES = {"langgraph": "langgraph", "pydantic_ai": "pydantic_ai", "openai_agents": "agents"}


def _harness() -> ModuleType | None:
    candidates = [
        os.environ.get("LOOPCTL_PEER_HARNESS", ""),
        str(ROOT.parent / "shared" / "bench"),
        str(ROOT.parent.parent / "shared" / "bench"),
    ]
    for c in candidates:
        path = Path(c) / "anchors_overhead.py" if c else None
        if path and path.exists():
            spec = importlib.util.spec_from_file_location("anchors_overhead", path)
            assert spec and spec.loader
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    return None


H = _harness()
CALL_TIMES: list[float] = []
RECORD = False
TOOL_CALLS = 0


def _note() -> None:
    if RECORD:
        CALL_TIMES.append(time.perf_counter())


def _workload(n: int) -> tuple[Any, Any]:
    """W(N)'s scripted model and tool, shared by loopctl and the floor: ``reply(messages)`` asks for one ``echo``
    call (the 200-character payload) while fewer than ``n`` turns were made, then answers; ``echo`` returns its
    text and counts the calls."""
    from loopctl.message import Message, Role, ToolCallPart
    from loopctl.response import ModelResponse, StopReason, Usage
    from loopctl.tool import tool

    usage = Usage(input_tokens=100, output_tokens=20)
    final = ModelResponse(Message.assistant(FINAL), usage, StopReason.END_TURN)

    def reply(messages: Any) -> ModelResponse:
        _note()
        turn = (len(messages) - 1) // 2  # [user] -> [user, call, result] -> ...
        if turn < n:
            msg = Message(
                role=Role.ASSISTANT, parts=(ToolCallPart(id=f"call_{turn}", name="echo", input={"text": PAYLOAD}),)
            )
            return ModelResponse(msg, usage, StopReason.TOOL_CALL)
        return final

    @tool
    async def echo(text: str) -> str:
        """Echo the input text back."""
        global TOOL_CALLS
        TOOL_CALLS += 1
        return text

    return reply, echo


def setup_loopctl(n: int) -> Any:
    from loopctl.engine import BareLoop, RunConfig, SessionConfig
    from loopctl.testing import ScriptedClient

    reply, echo = _workload(n)

    # W(1000) holds ~2,000 messages; a 1M-token window keeps compaction out of a workload the peers run
    # without any (the context is still counted every turn).
    config = SessionConfig(system_prompt="You are a test agent.", context_window=1_000_000)
    # The fake model asks for the same echo call every turn: loop detection (on by default) would end the run
    # LOOP_DETECTED after a few turns. The peers detect no loops, so the workload runs without it.
    run_config = RunConfig(max_turns=n + 5, stream=False, loop_detection=None)

    async def run_once() -> tuple[str, int]:
        loop = BareLoop(ScriptedClient(lambda request: reply(request.messages), keep_requests=False), [echo], config)
        run = await loop.run("go", run_config)
        return run.output, len(loop.history)

    return run_once


def setup_floor(n: int) -> Any:
    """The floor of the W(N) turn with every check of the message model and the wire kept, and nothing of the
    engine's: the workload's reply (the same ``Message`` and ``ToolCallPart``, validated), the providers' pairing
    check of the request's new messages, the tool's coroutine stepped once, its result part and the results
    message made as the engine makes them, and both messages counted. No machine, records, usage, limits,
    hooks, prices or cache watch: what the engine adds to a turn is loopctl's per-turn time minus this one."""
    from loopctl.compact.counting import HeuristicTokenCounter
    from loopctl.message import Message, MessageView, Role, ToolContent, ToolResultPart
    from loopctl.message.model import assemble
    from loopctl.providers._common import check_pairing

    reply, echo = _workload(n)
    ToolContent.from_string("x")  # builds the model (defer_build), so its validator can be read
    validate_content = ToolContent.__pydantic_validator__.validate_python

    async def run_once() -> tuple[str, int]:
        items = [Message.user("go")]
        counter = HeuristicTokenCounter()
        tokens = counter.count(items)
        while True:
            view = MessageView(items, len(items))
            check_pairing(view, "floor", len(items) - 2 if len(items) > 1 else 0)
            msg = reply(view).message
            items.append(msg)
            tokens += counter.message_tokens(msg)
            calls = msg.tool_calls()
            if not calls:
                return msg.text_content(), len(items)
            parts = []
            for call in calls:
                coro = echo.call(call.input, None)  # type: ignore[arg-type]  # a plain function tool reads none
                try:
                    coro.send(None)
                    raise AssertionError("the echo tool waited")
                except StopIteration as done:
                    value = done.value
                parts.append(
                    assemble(
                        ToolResultPart,
                        type="tool_result",
                        call_id=call.id,
                        name=call.name,
                        output=validate_content(value),
                        is_error=False,
                        retention=None,
                    )
                )
            results = assemble(Message, role=Role.USER, parts=tuple(parts))
            items.append(results)
            tokens += counter.message_tokens(results)

    return run_once


def _tool_calls() -> int:
    return TOOL_CALLS + (H.TOOL_CALLS if H else 0)


def _adapter(fw: str, n: int) -> Any:
    if fw in ("loopctl", BEFORE):
        return setup_loopctl(n)
    if fw == FLOOR:
        return setup_floor(n)
    assert H is not None
    return H.ADAPTERS[fw](n)


def _set_record(on: bool) -> None:
    global RECORD
    RECORD = on
    if H is not None:
        H.RECORD_CALL_TIMES = on


def _calls() -> list[float]:
    return CALL_TIMES + (H.CALL_TIMES if H else [])


def _clear() -> None:
    CALL_TIMES.clear()
    if H is not None:
        H.CALL_TIMES.clear()


def _status_kb(key: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


async def task_series(fw: str, ns: list[int]) -> dict[str, Any]:
    warm = _adapter(fw, 2)
    await warm()
    rows = []
    for n in ns:
        run_once = _adapter(fw, n)
        batch = max(1, 100 // (n + 1))
        gc.collect()
        rss0 = _status_kb("VmRSS")
        reset = _reset_hwm()
        wall = 0.0
        firsts, lasts = [], []
        for _ in range(batch):
            _clear()
            _set_record(True)
            c0 = _tool_calls()
            t0 = time.perf_counter()
            out, msgs = await run_once()
            t1 = time.perf_counter()
            _set_record(False)
            assert out == FINAL, out
            assert _tool_calls() - c0 == n, (_tool_calls() - c0, n)
            times = _calls()
            assert len(times) == n + 1, (len(times), n + 1)
            gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
            k = max(1, len(gaps) // 10)
            firsts.append(statistics.fmean(gaps[:k]) if gaps else 0.0)
            lasts.append(statistics.fmean(gaps[-k:]) if gaps else 0.0)
            wall += t1 - t0
        hwm = _status_kb("VmHWM")
        rows.append(
            {
                "n": n,
                "calls": n + 1,
                "msgs": msgs,
                "wall": wall / batch,
                "first": statistics.median(firsts),
                "last": statistics.median(lasts),
                "rss_kb": (hwm - rss0) if reset else -1,
            }
        )
    return {"rows": rows}


async def task_conc(fw: str, k: int, n: int) -> dict[str, Any]:
    warm = _adapter(fw, 2)
    await warm()
    run_once = _adapter(fw, n)
    gc.collect()
    rss0 = _status_kb("VmRSS")
    reset = _reset_hwm()
    c0 = _tool_calls()
    t0 = time.perf_counter()
    results = await asyncio.gather(*(run_once() for _ in range(k)))
    wall = time.perf_counter() - t0
    assert all(r[0] == FINAL for r in results)
    assert _tool_calls() - c0 == k * n
    hwm = _status_kb("VmHWM")
    return {"wall": wall, "rss_kb": (hwm - rss0) if reset else -1}


def import_time(what: str = "import loopctl") -> dict[str, Any]:
    """Median time of ``what`` in 5 fresh processes, bytecode cached as an installed package has it (one
    warm-up run writes it to a temporary folder; the environment may forbid writing it next to the source)."""
    code = (
        f"import time, sys; t=time.perf_counter(); {what}; d=time.perf_counter()-t; "
        "import json; print(json.dumps({'s': d, 'sdks': sorted(m for m in ('openai','anthropic','google.genai') "
        "if m in sys.modules)}))"
    )
    samples = []
    sdks: list[str] = []
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPATH=str(ROOT / "src"), PYTHONPYCACHEPREFIX=cache)
        for i in range(6):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
            res = json.loads(out.stdout)
            if i:
                samples.append(res["s"])
            sdks = res["sdks"]
    return {"median_ms": statistics.median(samples) * 1000, "sdks": sdks}


BEFORE_SRC = ""


def run_worker(args: list[str], timeout: float = 900) -> dict[str, Any] | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    env = dict(os.environ, LOOPCTL_SRC=BEFORE_SRC) if args[0] == BEFORE else None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"  ! {args}: timed out", flush=True)
        return None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    print(f"  ! {args}: failed\n{p.stderr[-2000:]}", flush=True)
    return None


async def task_runs(fw: str, n: int, k: int) -> None:
    """The W(2) warm-up, then ``k`` runs of W(``n``): what ``--instructions`` counts (nothing timed)."""
    warm = _adapter(fw, 2)
    await warm()
    run_once = _adapter(fw, n)
    c0 = _tool_calls()
    for _ in range(k):
        out, _msgs = await run_once()
        assert out == FINAL, out
    assert _tool_calls() - c0 == k * n


def worker(argv: list[str]) -> None:
    fw, task, *nums = argv
    ns = [int(x) for x in nums]
    if task == "series":
        res = asyncio.run(task_series(fw, ns))
    elif task == "runs":
        asyncio.run(task_runs(fw, ns[0], ns[1]))
        return
    else:
        res = asyncio.run(task_conc(fw, ns[0], ns[1]))
    print("RESULT " + json.dumps(res), flush=True)


def _instructions_run(fw: str, n: int, k: int) -> int | None:
    """The instructions (cachegrind's ``I refs``) of a worker process making the W(2) warm-up and ``k`` runs of
    W(``n``) with ``fw``; ``None`` when it failed (said)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if fw == BEFORE:
        env["LOOPCTL_SRC"] = BEFORE_SRC
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, str(Path(__file__).resolve()), "--worker", fw, "runs", str(n), str(k),
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    if found and p.returncode == 0:
        return int(found[1].replace(",", ""))
    print(f"  ! {fw} W({n}) x {k} under cachegrind: exit {p.returncode}\n{p.stderr[-2000:]}", flush=True)
    return None


def instructions(fw: str, n: int, k: int) -> float | None:
    """Instructions per model call of W(``n``) with ``fw``: (the warm-up and ``k`` runs) less (the warm-up
    alone), over ``k * (n + 1)`` model calls."""
    with_runs, without = _instructions_run(fw, n, k), _instructions_run(fw, n, 0)
    if with_runs is None or without is None:
        return None
    return (with_runs - without) / (k * (n + 1))


def instruction_table(fws: list[str], ns: list[int], k: int | None) -> None:
    """Print the instructions per model call of each of ``fws`` at each N (``k``: runs per count; ``None``: 3
    up to N = 100, else 1), with loopctl's ratio to its ``--before-src`` and what the engine adds to the floor."""
    print(
        "\nInstructions per model call (valgrind cachegrind, PYTHONHASHSEED=0): the W(2) warm-up then K runs of "
        "W(N), less the warm-up alone, over K x (N + 1) model calls"
    )
    print(f"{'framework':<15}{'N':>6}{'K':>4}{'instructions':>14}")
    for fw in fws:  # writes the bytecode caches a source changed since (or never run) lacks, outside the count
        env = dict(os.environ, LOOPCTL_SRC=BEFORE_SRC) if fw == BEFORE else None
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", fw, "runs", "2", "0"]
        subprocess.run(cmd, capture_output=True, env=env, check=False)
    got: dict[tuple[str, int], float] = {}
    for n in ns:
        runs = k if k is not None else (3 if n <= 100 else 1)
        for fw in fws:
            per_call = instructions(fw, n, runs)
            if per_call is None:
                _smoke.fail(f"{fw}: instructions of W({n})")
                continue
            got[fw, n] = per_call
            print(f"{fw:<15}{n:>6}{runs:>4}{per_call:>14,.0f}", flush=True)
    for n in ns:
        ours = got.get(("loopctl", n))
        before, least = got.get((BEFORE, n)), got.get((FLOOR, n))
        if ours is not None and before:
            print(f"  N={n:<5} loopctl / loopctl@before {ours / before:.3f}")
        if ours is not None and least is not None:
            print(
                f"  N={n:<5} the engine adds {ours - least:,.0f} instructions a model call to the floor's {least:,.0f}"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="10,100,500,1000")
    ap.add_argument("--peer-ns", default="10,100,500", help="W(N) sizes for the peers (W(1000) is slow there)")
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peers", default="langgraph,pydantic_ai,openai_agents")
    ap.add_argument("--no-conc-peers", action="store_true", help="skip the peers' C(K) (slow: 35-90 s each)")
    ap.add_argument("--before-src", default="", help="also measure loopctl from this src folder (loopctl@before)")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor: a turn's essential work alone")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per model call under valgrind's cachegrind instead of timing (repeatable)",
    )
    ap.add_argument("--instr-k", type=int, default=None, help="runs of W(N) per count (default: 3 up to N=100, else 1)")
    _smoke.add_flag(ap)
    a = ap.parse_args()
    if a.smoke:
        a.ns, a.peer_ns, a.k, a.reps = "3,10", "3", 5, 1
    global BEFORE_SRC
    BEFORE_SRC = a.before_src
    mine = ["loopctl", *([BEFORE] if a.before_src else [])]
    floor = [] if a.no_floor else [FLOOR]
    ns = [int(x) for x in a.ns.split(",")]
    if a.instructions or a.smoke:
        if shutil.which("valgrind") is None:
            if a.instructions:
                sys.exit("--instructions needs valgrind (Debian: apt-get install valgrind)")
            print("instructions not counted: valgrind is not installed", flush=True)
            if os.environ.get("CI") == "true":  # make.py test installs it there: the count must run
                _smoke.fail("valgrind is not installed in CI")
        elif a.smoke:  # loopctl alone, one run of W(3): the counting works (each count is two processes)
            instruction_table(["loopctl"], [3], 1)
        else:
            instruction_table([*mine, *floor], ns, a.instr_k)
        if a.instructions:
            _smoke.finish()
            return
    peer_ns = [int(x) for x in a.peer_ns.split(",")]
    peers = [p for p in a.peers.split(",") if p]
    if H is None:
        print("peer harness not found (set LOOPCTL_PEER_HARNESS): measuring loopctl only")
        peers = []
    else:
        ok = []
        for p in peers:
            if _smoke.peer_missing(p, PEER_MODULES.get(p, p)):
                continue
            if run_worker([p, "series", "2"], 300) is not None:
                ok.append(p)
            else:
                _smoke.fail(f"{p}: the peer is installed but its W(2) warm-up failed")
        peers = ok

    imp = import_time()
    print(
        f"cold `import loopctl`: {imp['median_ms']:.1f} ms (median of 5); provider SDKs imported: "
        f"{imp['sdks'] or 'none'}  [target < 100 ms, none]"
    )
    eng = import_time("from loopctl.engine import BareLoop")
    print(f"cold `from loopctl.engine import BareLoop`: {eng['median_ms']:.1f} ms (median of 5)")

    series: dict[str, dict[int, list[dict[str, Any]]]] = {}
    fws = [*mine, *floor, *peers]
    for fw in fws:
        series[fw] = {n: [] for n in (ns if fw in mine or fw in floor else peer_ns)}
    # Repetition by repetition, each framework once in each: a machine whose speed drifts during the run (a
    # shared one's does, by tens of percent) moves every framework's figures alike, not those measured last.
    for _ in range(a.reps):
        for fw in fws:
            sizes = list(series[fw])
            r = run_worker([fw, "series", *map(str, sizes)])
            if r:
                for row in r["rows"]:
                    series[fw][row["n"]].append(row)
            else:
                _smoke.fail(f"{fw}: W({','.join(map(str, sizes))})")
    med = statistics.median

    def per_turn(fw: str, n: int) -> float | None:
        rows = series.get(fw, {}).get(n) or []
        return med([r["wall"] / r["calls"] for r in rows]) if rows else None

    print(
        "\nW(N): per-turn overhead (wall / model calls), ms; turn @start / @end = mean turn time over the first / last 10%"
    )
    print(f"{'framework':<15}{'N':>6}{'per-turn':>10}{'@start':>9}{'@end':>9}{'end/start':>10}{'peak RSS KB':>13}")
    for fw, by_n in series.items():
        for n, rows in by_n.items():
            if not rows:
                continue
            first, last = med([r["first"] for r in rows]), med([r["last"] for r in rows])
            print(
                f"{fw:<15}{n:>6}{per_turn(fw, n) * 1e3:>10.3f}{first * 1e3:>9.3f}{last * 1e3:>9.3f}"
                f"{(last / first if first else float('nan')):>10.2f}{med([r['rss_kb'] for r in rows]):>13.0f}"
            )
    if peers:
        print("\nloopctl per-turn overhead as a fraction of each peer's (target <= 0.10 of the best peer at every N)")
        for n in ns:
            ours = per_turn("loopctl", n)
            cells = []
            for p in [*mine[1:], *peers]:
                theirs = per_turn(p, n)
                cells.append(f"{p} {ours / theirs:.3f}" if ours and theirs else f"{p} n/a")
            print(f"  N={n:<5} " + "  ".join(cells))

    if floor:
        print(
            "\nThe floor: a turn's essential work alone (the workload's reply, the pairing check, the tool, its result "
            "made as the engine makes it, both messages counted; setup_floor); what the engine adds is the rest"
        )
        for n in ns:
            ours, least = per_turn("loopctl", n), per_turn(FLOOR, n)
            if ours and least:
                print(
                    f"  N={n:<5} loopctl {ours * 1e3:.3f} ms, floor {least * 1e3:.3f} ms: the engine adds "
                    f"{(ours - least) * 1e3:.3f} ms a turn (loopctl / floor {ours / least:.2f})"
                )

    print(f"\nC({a.k}): {a.k} concurrent W(5) runs on one event loop (loopctl's: median of {a.reps} processes)")
    conc: dict[str, float] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    conc_fws = [*mine, *([] if a.no_conc_peers else peers)]
    for rep in range(a.reps):  # loopctl's (and --before-src's) repeated, interleaved; a peer's once (35-90 s)
        for fw in conc_fws:
            if rep and fw not in mine:
                continue
            r = run_worker([fw, "conc", str(a.k), "5"], 1800)
            if r:
                runs.setdefault(fw, []).append(r)
            else:
                _smoke.fail(f"{fw}: C({a.k})")
    for fw in conc_fws:
        if fw in runs:
            wall = med([r["wall"] for r in runs[fw]])
            rss = med([r["rss_kb"] for r in runs[fw]])
            conc[fw] = wall
            print(
                f"  {fw:<15} {wall:8.2f} s   {wall / (a.k * 6) * 1e3:.3f} ms/model call   peak RSS {rss / a.k:.0f} KB/run"
            )
    if "loopctl" in conc:
        for p in [*mine[1:], *peers]:
            if p in conc:
                print(f"  loopctl / {p}: {conc['loopctl'] / conc[p]:.3f}")
    _smoke.finish()


if __name__ == "__main__":
    main()
