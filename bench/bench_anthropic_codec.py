"""Benchmark the Anthropic Messages codec against the official SDK, measured in the same run.

    /work/venv/bin/python bench/bench_anthropic_codec.py [--mb 4] [--repeat 5]

1. Stream decoding: the recorded Anthropic event streams (tests/fixtures/provider-traffic/anthropic/*.sse),
   repeated to a few MB, each decoded as its own response, fed in 16 KiB chunks. Ours:
   ``loopctl.providers.anthropic.StreamDecoder`` (SSE framing, neutral events, accumulated into a
   ``ModelResponse``). Peer: the SDK's ``anthropic._streaming.Stream`` over an ``httpx2`` response built from
   the same chunks (SSE decoding plus its typed event models), accumulated into the SDK's message snapshot
   with ``anthropic.lib.streaming._messages.accumulate_event`` (what ``client.messages.stream()`` does).
   Reported: SSE events per second, MB per second, and the ratio ours / SDK (> 1 means faster).
2. Request building: a 1,000-message agent conversation (thinking, tool calls, tool results), built per
   call without a cache and with a warm ``ConversionCache`` (the agent-loop case: the same history plus one
   new message per call).

Best of ``--repeat`` runs is reported for each figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)
import anthropic  # noqa: E402
import httpx2  # noqa: E402  (the HTTP library this SDK release is built on)
from anthropic._streaming import Stream  # noqa: E402
from anthropic.lib.streaming._messages import accumulate_event  # noqa: E402
from anthropic.types import RawMessageStreamEvent  # noqa: E402

from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart  # noqa: E402
from loopctl.providers.anthropic import StreamDecoder, build_request  # noqa: E402
from loopctl.providers.base import ConversionCache  # noqa: E402
from loopctl.tool import ToolSchema  # noqa: E402

TRAFFIC = ROOT / "tests" / "fixtures" / "provider-traffic" / "anthropic"
CHUNK = 16 * 1024


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def load_streams(megabytes: float) -> tuple[list[list[bytes]], int, int]:
    """The recorded streams repeated to ``megabytes``: (chunked streams, total bytes, total SSE events)."""
    recorded = [p.read_bytes() for p in sorted(TRAFFIC.glob("*.response.sse"))]
    streams: list[list[bytes]] = []
    total = events = 0
    while total < megabytes * 1_000_000:
        for data in recorded:
            streams.append([data[i : i + CHUNK] for i in range(0, len(data), CHUNK)])
            total += len(data)
            events += data.replace(b"\r\n", b"\n").count(b"\n\n")
    return streams, total, events


def decode_ours(streams: list[list[bytes]]) -> None:
    for chunks in streams:
        decoder = StreamDecoder()
        for chunk in chunks:
            decoder.feed(chunk)
        decoder.finish()


def decode_sdk(streams: list[list[bytes]], client: anthropic.Anthropic) -> None:
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    for chunks in streams:
        response = httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=iter(chunks), request=request
        )
        stream = Stream(cast_to=RawMessageStreamEvent, response=response, client=client)
        snapshot = None
        buffers: dict[int, bytes] = {}
        for event in stream:
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)


def decode_sdk_events_only(streams: list[list[bytes]], client: anthropic.Anthropic) -> None:
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    for chunks in streams:
        response = httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=iter(chunks), request=request
        )
        for _ in Stream(cast_to=RawMessageStreamEvent, response=response, client=client):
            pass


def conversation(n: int) -> Iterator[Message]:
    """``n`` messages of an agent loop: a system note, a user task, then turns of [thinking + text + tool
    call] and [tool result]."""
    yield Message.new(Role.SYSTEM, [TextPart(text="Project rules: keep the tests green.")])
    yield Message.user("Refactor the parser module and run the tests. " * 5)
    i = 0
    while True:
        i += 1
        yield Message.new(
            Role.ASSISTANT,
            [
                ThinkingPart(
                    text=f"Step {i}: I should look at file {i}. " * 8, signature="Eq" + "A" * 300, provider="anthropic"
                ),
                TextPart(text=f"Reading file {i}."),
                ToolCallPart(id=f"toolu_{i:024d}", name="read_file", input={"path": f"src/module_{i}.py"}),
            ],
        )
        yield Message.new(
            Role.USER,
            [ToolResultPart(call_id=f"toolu_{i:024d}", name="read_file", output="def f():\n    return 1\n" * 20)],
        )
        if 2 * i + 2 >= n:
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="stream bytes to decode per run (MB)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the best is reported")
    parser.add_argument("--messages", type=int, default=1000, help="conversation size for request building")
    _smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.repeat, args.messages = 0.05, 1, 20

    streams, total, events = load_streams(args.mb)
    client = anthropic.Anthropic(api_key="bench-no-network")
    print(
        f"stream decoding: {len(streams)} responses, {total / 1e6:.2f} MB, {events} SSE events, {CHUNK // 1024} KiB chunks"
    )
    ours = best_of(args.repeat, lambda: decode_ours(streams))
    sdk = best_of(args.repeat, lambda: decode_sdk(streams, client))
    sdk_raw = best_of(args.repeat, lambda: decode_sdk_events_only(streams, client))
    for label, seconds in (
        ("loopctl StreamDecoder", ours),
        ("SDK Stream + accumulate", sdk),
        ("SDK Stream, events only", sdk_raw),
    ):
        print(
            f"  {label:26s} {seconds * 1e3:8.1f} ms  {events / seconds / 1e3:8.1f} k events/s  {total / seconds / 1e6:7.1f} MB/s"
        )
    print(f"  ratio ours/SDK (accumulated): {sdk / ours:.2f}x faster   (events only: {sdk_raw / ours:.2f}x)")

    history = list(conversation(args.messages))
    tools = [ToolSchema("read_file", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}})]
    calls = 3 if args.smoke else 50

    def plain() -> None:
        for _ in range(calls):
            build_request(history, model="claude-sonnet-4-5", system="You are a coding agent.", tools=tools)

    cache = ConversionCache()
    build_request(history, model="claude-sonnet-4-5", cache=cache)
    grown = [*history]

    def cached() -> None:
        for k in range(calls):
            grown.append(
                Message.user(f"next {k}") if grown[-1].role is Role.ASSISTANT else Message.assistant(f"ok {k}")
            )
            build_request(grown, model="claude-sonnet-4-5", system="You are a coding agent.", tools=tools, cache=cache)

    no_cache = best_of(args.repeat, plain) / calls
    with_cache = best_of(args.repeat, cached) / calls
    print(f"request building: {len(history)} messages, per call")
    print(f"  without cache  {no_cache * 1e3:7.2f} ms")
    print(f"  with cache     {with_cache * 1e3:7.2f} ms   ({no_cache / with_cache:.1f}x faster)")


if __name__ == "__main__":
    main()
