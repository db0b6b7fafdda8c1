#!/usr/bin/env python3
"""What ``OTelObserver`` costs per turn: one run of N turns (a scripted model, one tool call per turn, no
network) without the observer, with an observer that does nothing (the engine's cost of making events), with it and no SDK configured (the API's no-op provider), with the SDK and an
in-memory exporter, and with content capture on top. Prints the per-turn time of each and its ratio to the
run without telemetry (no peer is measured here: the peers' instrumentations are not comparable one to one).

    python bench/bench_telemetry.py [--turns 500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import _smoke

from loopctl.engine import BareLoop, RunConfig
from loopctl.message import Message, MessagePart, Role
from loopctl.providers import ModelRequest
from loopctl.testing import ScriptedClient
from loopctl.tool import tool


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


def script(turns: int) -> Any:
    def reply(request: ModelRequest) -> Message:
        n = len(request.messages) // 2 + 1
        if n > turns:
            return Message.assistant("done")
        return Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"c{n}", "echo", {"text": "x" * 200})])

    return reply


def one(turns: int, observers: list[Any]) -> float:
    loop = BareLoop(ScriptedClient(script(turns)), [echo], observers=observers)
    started = time.perf_counter()
    # The scripted model asks for the same echo call every turn: loop detection (on by default) would end the
    # run LOOP_DETECTED after a few turns, so the workload runs without it (as bench_engine.py's does).
    run = asyncio.run(loop.run("go", RunConfig(max_turns=turns + 2, stream=True, loop_detection=None)))
    elapsed = time.perf_counter() - started
    assert run.ok, run.outcome
    return elapsed / (turns + 1)


def sdk_observer(capture: bool) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopctl.telemetry import OTelObserver

    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return OTelObserver(tp, MeterProvider(metric_readers=[InMemoryMetricReader()]), capture)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    _smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.turns, args.repeat = 5, 1
    from loopctl.telemetry import OTelObserver

    cases = {
        "no telemetry": list,
        "an observer that does nothing": lambda: [lambda event: None],
        "OTelObserver, no SDK (no-op)": lambda: [OTelObserver()],
        "OTelObserver, SDK in-memory": lambda: [sdk_observer(False)],
        "OTelObserver, SDK + content": lambda: [sdk_observer(True)],
    }
    one(20, [])  # warm-up
    # The cases take turns within each repeat, so a change in the machine's load falls on all of them alike.
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, make in cases.items():
            times[name].append(one(args.turns, make()))
    print(f"{args.turns} turns, one tool call each; median of {args.repeat} runs")
    base = statistics.median(times["no telemetry"])
    for name, values in times.items():
        per_turn = statistics.median(values)
        print(f"  {name:32s} {per_turn * 1e6:9.1f} us/turn   x{per_turn / base:5.2f}")


if __name__ == "__main__":
    main()
