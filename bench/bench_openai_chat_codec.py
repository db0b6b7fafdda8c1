"""Benchmark of the OpenAI Chat Completions codec (loopctl.providers.openai_chat).

1. Stream decoding: the recorded Chat streams (tests/fixtures/provider-traffic/openai/chat-*.response.sse),
   each decoded again and again until a few MB have gone through, fed in network-sized chunks. Peer, measured
   in the same run on the same chunks: the openai SDK's own path, ``openai.Stream`` over an HTTP response built
   from the bytes, accumulating into the SDK's ``ChatCompletion`` with ``ChatCompletionStreamState``.
2. Request building: a 1,000-message agent conversation, per call, without and with a ``ConversionCache``
   (the cached case is an agent loop: each call adds an assistant turn and its results).

Run: /work/venv/bin/python bench/bench_openai_chat_codec.py [--mb 4] [--chunk 1024]
Prints figures; no assertion (performance is measured here, never in timed tests).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import loopctl  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)
import httpx2  # noqa: E402
import openai  # noqa: E402
from openai import Stream  # noqa: E402
from openai.lib.streaming.chat import ChatCompletionStreamState  # noqa: E402
from openai.types.chat import ChatCompletionChunk  # noqa: E402

from loopctl.message import Message, Role, TextPart, ToolCallPart, ToolResultPart  # noqa: E402
from loopctl.providers import ConversionCache, openai_chat  # noqa: E402
from loopctl.tool import ToolSchema  # noqa: E402

TRAFFIC = ROOT / "tests" / "fixtures" / "provider-traffic" / "openai"


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    """The fastest of ``runs`` timings (seconds) and what ``fn`` counted."""
    best = float("inf")
    count = 0
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return best, count


def bench_streams(megabytes: float, chunk_size: int) -> None:
    bodies = [p.read_bytes() for p in sorted(TRAFFIC.glob("chat-*.response.sse"))]
    per_round = sum(len(b) for b in bodies)
    rounds = max(1, int(megabytes * 1_000_000 / per_round))
    streams = [chunked(b, chunk_size) for b in bodies] * rounds
    total = per_round * rounds

    def ours() -> int:
        events = 0
        for chunks in streams:
            decoder = openai_chat.StreamDecoder()
            for c in chunks:
                events += len(decoder.feed(c))
            decoder.finish()
        return events

    client = openai.OpenAI(api_key="bench", base_url="http://127.0.0.1:9/v1", max_retries=0)
    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")

    def sdk() -> int:
        n = 0
        for chunks in streams:
            response = httpx2.Response(200, content=iter(chunks), request=request)
            state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
            for chunk in Stream(cast_to=ChatCompletionChunk, response=response, client=client):
                state.handle_chunk(chunk)
                n += 1
            state.get_final_completion()
        return n

    def sdk_decode_only() -> int:
        n = 0
        for chunks in streams:
            response = httpx2.Response(200, content=iter(chunks), request=request)
            for _ in Stream(cast_to=ChatCompletionChunk, response=response, client=client):
                n += 1
        return n

    t_ours, events = best_of(5, ours)
    t_sdk, sdk_chunks = best_of(5, sdk)
    t_sdk_decode, _ = best_of(5, sdk_decode_only)
    mb = total / 1e6
    print(
        f"stream decoding: {len(bodies)} recorded Chat streams x {rounds} = {mb:.2f} MB, fed in {chunk_size}-byte chunks"
    )
    print(
        f"  loopctl StreamDecoder      {t_ours * 1e3:8.1f} ms  {mb / t_ours:7.1f} MB/s  {events / t_ours:10,.0f} events/s"
    )
    print(
        f"  openai SDK Stream + state  {t_sdk * 1e3:8.1f} ms  {mb / t_sdk:7.1f} MB/s  {sdk_chunks / t_sdk:10,.0f} chunks/s"
    )
    print(
        f"  openai SDK Stream alone    {t_sdk_decode * 1e3:8.1f} ms  {mb / t_sdk_decode:7.1f} MB/s  {sdk_chunks / t_sdk_decode:10,.0f} chunks/s"
    )
    print(
        f"  ratio: loopctl is {t_sdk / t_ours:.2f}x the SDK's speed with its accumulator, {t_sdk_decode / t_ours:.2f}x its bare"
    )
    print(f"         Stream (SSE + JSON + ChatCompletionChunk objects); {events} events from {sdk_chunks} chunks")


def conversation(n: int) -> Iterator[Message]:
    """An agent conversation: a user task, then turns of (assistant text + 2 calls, user with 2 results)."""
    yield Message.user("Fix the failing tests in this repository. " * 20)
    turn = 0
    while True:
        turn += 1
        calls = [
            ToolCallPart(id=f"call_{turn}_a", name="read_file", input={"path": f"src/module_{turn}.py"}),
            ToolCallPart(id=f"toolu_01{turn:022d}", name="grep", input={"pattern": "def test_", "max": 50}),
        ]
        yield Message.new(Role.ASSISTANT, [TextPart(text=f"Looking at module {turn}."), *calls])
        yield Message.new(
            Role.USER,
            [
                ToolResultPart(call_id=calls[0].id, name="read_file", output="x = 1\n" * 200),
                ToolResultPart(call_id=calls[1].id, name="grep", output="tests/test_a.py:3: def test_a():\n" * 20),
            ],
        )
        if 2 * turn + 1 >= n:
            return


def bench_requests(size: int, calls: int) -> None:
    history = list(conversation(size + 2 * calls))
    base = history[:size]
    tools = [ToolSchema("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})]

    def without_cache() -> int:
        for i in range(calls):
            openai_chat.build_request(history[: size + 2 * i], model="gpt-4o", system="You fix code.", tools=tools)
        return calls

    def with_cache() -> int:
        cache = ConversionCache()
        openai_chat.build_request(base, model="gpt-4o", system="You fix code.", tools=tools, cache=cache)  # warm
        for i in range(calls):
            openai_chat.build_request(
                history[: size + 2 * i], model="gpt-4o", system="You fix code.", tools=tools, cache=cache
            )
        return calls

    t_plain, _ = best_of(3, without_cache)
    t_cached, _ = best_of(3, with_cache)
    print(f"request building: {size}-message conversation, {calls} calls (each adds an assistant turn and its results)")
    print(f"  without cache   {t_plain / calls * 1e3:8.3f} ms per call")
    print(f"  with cache      {t_cached / calls * 1e3:8.3f} ms per call")
    print(f"  ratio: the cache makes a call {t_plain / t_cached:.1f}x faster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="megabytes of stream to decode per run")
    parser.add_argument("--chunk", type=int, default=1024, help="bytes per fed chunk")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=50)
    _smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.messages, args.calls = 0.05, 20, 3
    bench_streams(args.mb, args.chunk)
    bench_requests(args.messages, args.calls)


if __name__ == "__main__":
    main()
