#!/usr/bin/env python3
"""Compaction passes at scale: prune and truncate conversations of 10k, 100k and 1M messages.

Workload: a conversation of N messages shaped like an agent run: a first user message, then turns of an
assistant message (a short text and one ``read_file`` call with a small JSON input) and the user message
with its result (400 characters; 60% untagged, 30% ``Requery``, 10% ``Durable`` with a 60-character
output), a user text turn every 50 turns, a final answer. The budget's window is scaled so the conversation
sits at 85% of it (above the threshold), so the prune pass must free 29% of the tokens and the truncating
compactor must cut to 56% while keeping every ``Durable`` pair.

Measured, in milliseconds per pass (best of 5 runs, 3 at 1M messages; a pass never mutates its input, so
every run starts from the same conversation). As ``timeit`` does, the cyclic garbage collector is paused
while a pass is timed: with a large live heap one full collection costs more than the pass (about 600 ms
over a 100k-message history on this machine), and whether the pass happens to trigger one depends on the
heap's history, not on the pass. The same passes with the collector on are reported too (``gc on``).

- ``count``: one ``HeuristicTokenCounter.count`` of the conversation, cold (fresh counter) and warm (the
  engine counts after every turn, so in a run the per-message cache is full);
- ``prune``: ``prune(messages, need=budget.room_needed(tokens), ...)``, warm and cold counter;
- ``truncate``: ``TruncatingCompactor().compact(messages, budget)``, warm and cold counter;
- the peer, when installed: langchain-core's ``trim_messages`` (strategy ``last``, approximate token
  counter, ``start_on="human"``) cutting the same conversation, as LangChain messages, to the same size. It
  is not retention-aware (it cannot keep the ``Durable`` results), so it is a reference for speed only.

Targets (issue 5): under 1 s per pass at 100k messages, and t(1M) / t(100k) <= 12.

    python3 make.py bench bench/bench_compact.py      # or: python bench/bench_compact.py [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)

from loopctl.compact import ContextBudget, HeuristicTokenCounter, TruncatingCompactor, prune  # noqa: E402
from loopctl.message import (  # noqa: E402
    Message,
    Retention,
    Role,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    check_conversation,
)

OUTPUT = ("def handler(event):\n    return process(event)\n" * 10)[:400]
NOTE = "Decision: keep the v2 schema; the migration runs on Monday."


def build(n: int) -> list[Message]:
    """A valid conversation of exactly ``n`` messages (see the module docstring)."""
    out = [Message.user("Review every handler in the repository and list the ones that swallow errors.")]
    turn = 0
    while len(out) < n - 1:
        turn += 1
        if turn % 50 == 0:
            out.append(Message.user(f"Also check module {turn}."))
            continue
        cid = f"call_{turn:07d}"
        kind = turn % 10
        retention = Retention.DURABLE if kind == 0 else Retention.REQUERY if kind <= 3 else None
        out.append(
            Message.new(
                Role.ASSISTANT,
                [
                    TextPart(text="Reading the next file."),
                    ToolCallPart(id=cid, name="read_file", input={"path": f"src/h{turn}.py"}),
                ],
            )
        )
        output = NOTE if retention is Retention.DURABLE else OUTPUT
        out.append(
            Message.new(Role.USER, [ToolResultPart(call_id=cid, name="read_file", output=output, retention=retention)])
        )
    out = out[: n - 1]
    if out[-1].role is Role.ASSISTANT:  # never end on an unanswered call
        out.pop()
        out.append(Message.user("Continue."))
    out.append(Message.assistant("Found 12 handlers that swallow errors."))
    return out


def budget_for(messages: list[Message], counter: HeuristicTokenCounter) -> ContextBudget:
    tokens = HeuristicTokenCounter().count(messages)
    return ContextBudget(window=int(tokens / 0.85), counter=counter)


def best(fn: Callable[[], Any], runs: int, *, collector: bool = False) -> tuple[float, Any]:
    """Best wall time of ``runs`` calls, in milliseconds, and the last result; the cyclic garbage collector
    is paused while timing unless ``collector``."""
    times = []
    result = None
    for _ in range(runs):
        result = None
        gc.collect()
        if not collector:
            gc.disable()
        try:
            t0 = time.perf_counter()
            result = fn()
            times.append((time.perf_counter() - t0) * 1000)
        finally:
            gc.enable()
    return min(times), result


def peer_messages(messages: list[Message]) -> list[Any] | None:
    try:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    except ImportError:
        return None
    out: list[Any] = []
    for m in messages:
        if m.role is Role.ASSISTANT:
            calls = [{"id": c.id, "name": c.name, "args": c.input} for c in m.tool_calls()]
            out.append(AIMessage(content=m.text_content(), tool_calls=calls))
        else:
            results = m.tool_results()
            if results:
                out.extend(ToolMessage(content=str(r.output), tool_call_id=r.call_id) for r in results)
            else:
                out.append(HumanMessage(content=m.text_content()))
    return out


def peer_trim(lc_messages: list[Any], max_tokens: int) -> list[Any]:
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    return trim_messages(
        lc_messages,
        max_tokens=max_tokens,
        token_counter=count_tokens_approximately,
        strategy="last",
        start_on="human",
        include_system=True,
        allow_partial=False,
    )


def measure(n: int, runs: int, with_peer: bool) -> dict[str, float]:
    t0 = time.perf_counter()
    messages = build(n)
    built = time.perf_counter() - t0
    warm = HeuristicTokenCounter()
    budget = budget_for(messages, warm)
    compactor = TruncatingCompactor()
    row: dict[str, float] = {"build_s": built}

    row["count_cold"], tokens = best(lambda: HeuristicTokenCounter().count(messages), runs)
    warm.count(messages)
    row["count_warm"], _ = best(lambda: warm.count(messages), runs)
    need = budget.room_needed(tokens)

    row["prune_warm"], pruned = best(
        lambda: prune(messages, need=need, counter=warm, protected_tail=budget.protected_tail), runs
    )
    row["prune_cold"], _ = best(
        lambda: prune(messages, need=need, counter=HeuristicTokenCounter(), protected_tail=budget.protected_tail), runs
    )
    row["truncate_warm"], truncated = best(lambda: compactor.compact(messages, budget), runs)

    def cold_truncate() -> list[Message]:
        return compactor.compact(messages, ContextBudget(window=budget.window, counter=HeuristicTokenCounter()))

    row["truncate_cold"], _ = best(cold_truncate, runs)
    row["prune_gc_on"], _ = best(
        lambda: prune(messages, need=need, counter=warm, protected_tail=budget.protected_tail), runs, collector=True
    )
    row["truncate_gc_on"], _ = best(lambda: compactor.compact(messages, budget), runs, collector=True)

    # Sanity, outside the timings: the passes did their job.
    assert budget.measure(pruned) <= budget.target_tokens, "prune fell short"
    assert budget.measure(truncated) <= budget.target_tokens, "truncation missed the target"
    if n <= 100_000:
        assert check_conversation(truncated) == []
    row["tokens"] = tokens
    row["kept"] = len(truncated)
    row["pruned"] = sum(1 for a, b in zip(messages, pruned, strict=True) if a is not b)

    if with_peer:
        lc = peer_messages(messages)
        if lc is not None:
            row["peer_trim"], _ = best(lambda: peer_trim(lc, budget.target_tokens), runs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--no-peer", action="store_true")
    _smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.sizes = "300"
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"Python {sys.version.split()[0]}; best of 5 runs (3 at >= 1M messages); milliseconds per pass; "
        "garbage collector paused while timing, except the gc_on columns\n"
    )
    rows = {}
    with_peer = not args.no_peer and not _smoke.peer_missing("langchain-core trim_messages", "langchain_core")
    for n in sizes:
        rows[n] = measure(n, runs=3 if n >= 1_000_000 else 5, with_peer=with_peer)
        gc.collect()
        r = rows[n]
        print(
            f"N={n:>9,}  tokens={int(r['tokens']):>12,}  results pruned={int(r['pruned']):>7,}  "
            f"kept after truncation={int(r['kept']):>7,}  (built in {r['build_s']:.1f} s)"
        )
        cols = ["count_cold", "count_warm", "prune_warm", "prune_cold", "truncate_warm", "truncate_cold"]
        cols += ["prune_gc_on", "truncate_gc_on"]
        if "peer_trim" in r:
            cols.append("peer_trim")
        print("    " + "  ".join(f"{c}={r[c]:9.1f}" for c in cols))
        if "peer_trim" in r:
            print(f"    truncate_warm / peer trim_messages = {r['truncate_warm'] / r['peer_trim']:.2f}")
    if 100_000 in rows and 1_000_000 in rows:
        work = rows[1_000_000]["pruned"] / rows[100_000]["pruned"]
        print(f"\nScaling t(1M) / t(100k) (target <= 12; the work itself grows {work:.2f}x):")
        for c in [
            "count_cold",
            "count_warm",
            "prune_warm",
            "prune_cold",
            "truncate_warm",
            "truncate_cold",
            "prune_gc_on",
            "truncate_gc_on",
        ]:
            print(f"    {c:14} {rows[1_000_000][c] / rows[100_000][c]:6.2f}")
    if 100_000 in rows:
        passes = ["prune_warm", "prune_cold", "truncate_warm", "truncate_cold", "prune_gc_on", "truncate_gc_on"]
        worst = max(rows[100_000][c] for c in passes)
        print(f"\nSlowest pass at 100k messages: {worst:.0f} ms (target < 1000 ms)")


if __name__ == "__main__":
    main()
