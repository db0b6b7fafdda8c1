#!/usr/bin/env python3
"""Gemini codec throughput, measured against google-genai in the same run.

1. Stream decoding: every recorded Gemini SSE body (tests/fixtures/provider-traffic/gemini), repeated to
   about 4 MB and fed in 4 KiB network-sized chunks. loopctl: ``gemini.StreamDecoder`` (SSE framing, JSON,
   neutral events, and the accumulated ``ModelResponse``). google-genai: its own stream path over an
   ``httpx2.Response`` of the same bytes -- ``HttpResponse._iter_response_stream`` (SSE lines),
   ``json.loads``, ``_GenerateContentResponse_from_mldev`` and ``GenerateContentResponse._from_response``
   for each event, as ``Models.generate_content_stream`` does (the SDK has no accumulator: its chat keeps
   each chunk's ``Content``).
2. Request building for a 1,000-message conversation (text, Gemini thinking + parallel calls, results),
   per call, with no cache, with a warm ``ConversionCache``, and with a cache while the conversation grows
   by one turn per call (an agent loop).

Run: /work/venv/bin/python bench/bench_gemini_codec.py [--mb 4] [--repeat 5]. Figures vary run to run on a
shared machine; compare the ratios, which are measured side by side.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)
import httpx2  # noqa: E402
from google.genai import _api_client, models, types  # noqa: E402

from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart  # noqa: E402
from loopctl.providers import ConversionCache, gemini  # noqa: E402

TRAFFIC = ROOT / "tests" / "fixtures" / "provider-traffic" / "gemini"
CHUNK = 4096


def recorded_streams() -> list[bytes]:
    bodies = [p.read_bytes() for p in sorted(TRAFFIC.glob("*.response.sse"))]
    for p in sorted(TRAFFIC.glob("*.response.chunks.jsonl")):
        lines = [ln for ln in p.read_text().splitlines() if ln.strip()]
        bodies.append(b"".join(b"data: " + ln.encode() + b"\r\n\r\n" for ln in lines))
    return bodies


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def chunks_of(body: bytes) -> list[bytes]:
    return [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)]


def loopctl_decode(bodies: list[list[bytes]]) -> int:
    events = 0
    for pieces in bodies:
        decoder = gemini.StreamDecoder()
        for piece in pieces:
            events += len(decoder.feed(piece))
        decoder.finish()
    return events


def sdk_decode(bodies: list[list[bytes]]) -> int:
    parsed = 0
    for pieces in bodies:
        # The same 4 KiB reads as loopctl gets.
        response = httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_Chunked(pieces))
        http = _api_client.HttpResponse({}, response_stream=response)
        for text in http._iter_response_stream():
            data = json.loads(text)
            converted = models._GenerateContentResponse_from_mldev(data)
            types.GenerateContentResponse._from_response(response=converted, kwargs={})
            parsed += 1
    return parsed


class _Chunked(httpx2.SyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Any:
        return iter(self._pieces)


def bench_streams(mb: float, repeat: int) -> None:
    base = recorded_streams()
    size = sum(len(b) for b in base)
    copies = max(1, int(mb * 1_000_000 / size))
    bodies = [chunks_of(b) for b in base] * copies
    total = size * copies
    sse_events = sum(b.count(b"data:") for b in base) * copies
    neutral_events = loopctl_decode(bodies)
    assert sdk_decode(bodies[: len(base)]) == sum(b.count(b"data:") for b in base)

    ours = best_of(repeat, lambda: loopctl_decode(bodies))
    theirs = best_of(repeat, lambda: sdk_decode(bodies))
    print(
        f"Stream decoding: {len(base)} recorded Gemini streams x {copies} = {total / 1e6:.2f} MB, {sse_events} SSE events"
    )
    print(
        f"  loopctl StreamDecoder  {total / ours / 1e6:8.2f} MB/s  {sse_events / ours:10.0f} SSE events/s  "
        f"{neutral_events / ours:10.0f} neutral events/s  ({ours * 1000:.1f} ms)"
    )
    print(
        f"  google-genai parsing   {total / theirs / 1e6:8.2f} MB/s  {sse_events / theirs:10.0f} SSE events/s  "
        f"{'':>26}  ({theirs * 1000:.1f} ms)"
    )
    print(f"  ratio: loopctl is {theirs / ours:.2f}x the SDK's speed (target >= 1.0)")


def conversation(turns: int) -> list[Message]:
    """``turns`` rounds of: user text, assistant (Gemini thinking signature + text + 2 calls), user results."""
    signature = base64.b64encode(bytes(range(256)) * 2).decode()
    out: list[Message] = [Message.user("Plan the trip. " * 20)]
    for t in range(turns):
        out.append(
            Message.new(
                Role.ASSISTANT,
                [
                    ThinkingPart(text="", signature=signature, provider="gemini"),
                    TextPart(text=f"Step {t}: checking two things."),
                    ToolCallPart(id=f"r{t}_0", name="search", input={"q": f"query {t}", "limit": 5}),
                    ToolCallPart(id=f"r{t}_1", name="weather", input={"city": "Paris", "day": t}),
                ],
            )
        )
        out.append(
            Message.new(
                Role.USER,
                [
                    ToolResultPart(call_id=f"r{t}_0", name="", output="result " * 40),
                    ToolResultPart(call_id=f"r{t}_1", name="weather", output='{"temp": 21, "sky": "clear"}'),
                ],
            )
        )
    return out


def bench_requests(repeat: int, size: int = 1000, calls: int = 50) -> None:
    messages = conversation(size // 2)[:size]
    model = "gemini-3-pro-preview"

    def plain() -> None:
        for _ in range(calls):
            gemini.build_request(messages, model=model, system="You plan trips.")

    cache = ConversionCache()
    gemini.build_request(messages, model=model, system="You plan trips.", cache=cache)

    def cached() -> None:
        for _ in range(calls):
            gemini.build_request(messages, model=model, system="You plan trips.", cache=cache)

    longer = conversation(size // 2 + calls)

    def growing() -> None:
        grow_cache = ConversionCache()
        gemini.build_request(longer[:size], model=model, cache=grow_cache)
        for k in range(calls):
            gemini.build_request(longer[: size + 2 * (k + 1)], model=model, cache=grow_cache)

    assert gemini.build_request(messages, model=model, system="You plan trips.", cache=cache) == gemini.build_request(
        messages, model=model, system="You plan trips."
    )
    no_cache = best_of(repeat, plain) / calls
    warm = best_of(repeat, cached) / calls
    grow = best_of(repeat, growing) / (calls + 1)
    size = len(json.dumps(gemini.build_request(messages, model=model)))
    print(f"Request building: {len(messages)} messages ({size / 1e6:.2f} MB of JSON), per call")
    print(f"  no cache                      {no_cache * 1000:8.2f} ms")
    print(f"  warm ConversionCache          {warm * 1000:8.2f} ms   ({no_cache / warm:.1f}x faster)")
    print(f"  cache, +1 turn per call       {grow * 1000:8.2f} ms   ({no_cache / grow:.1f}x faster)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="stream bytes to decode per measurement (MB)")
    parser.add_argument("--repeat", type=int, default=5, help="measurements per figure (the best is kept)")
    _smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.repeat = 0.05, 1
    print(f"Python {sys.version.split()[0]}, google-genai {__import__('google.genai').genai.__version__}")
    bench_streams(args.mb, args.repeat)
    bench_requests(args.repeat, *((20, 3) if args.smoke else ()))


if __name__ == "__main__":
    main()
