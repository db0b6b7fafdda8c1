"""Benchmark of the SSE framing (loopctl.providers.sse.SSEDecoder).

1. One long line: a 4 MB ``data:`` line fed whole and in 1 KB chunks. The cost must not depend on the
   chunking (a decoder that joins its buffer with each chunk is quadratic: 2 s in 1 KB chunks, 0.04 s whole).
2. Many small events: every recorded stream (tests/fixtures/provider-traffic/*/*.response.sse) decoded
   again and again until a few MB have gone through, in network-sized chunks.

Peer, measured in the same run on the same chunks: the openai SDK's SSE decoder
(``openai._streaming.SSEDecoder.iter_bytes``, the one the OpenAI and Anthropic SDKs' streams share in form).

Run: .venv/bin/python bench/bench_sse.py [--mb 4] [--chunk 1024]
Prints figures; no assertion (performance is measured here, never in timed tests).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import loopctl  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402
from bench_openai_chat_codec import best_of, chunked  # noqa: E402  (bench/ is on the path when run)
from openai._streaming import SSEDecoder as OpenAISSEDecoder  # noqa: E402

from loopctl.providers.sse import SSEDecoder  # noqa: E402

TRAFFIC = ROOT / "tests" / "fixtures" / "provider-traffic"


def ours(streams: list[list[bytes]]) -> Callable[[], int]:
    def run() -> int:
        events = 0
        for chunks in streams:
            decoder = SSEDecoder()
            for chunk in chunks:
                events += len(decoder.feed(chunk))
            decoder.close()
        return events

    return run


def openai_sdk(streams: list[list[bytes]]) -> Callable[[], int]:
    def run() -> int:
        events = 0
        for chunks in streams:
            for _ in OpenAISSEDecoder().iter_bytes(iter(chunks)):
                events += 1
        return events

    return run


def report(title: str, total: int, runs: int, cases: dict[str, Callable[[], int]]) -> None:
    print(title)
    times: dict[str, float] = {}
    for name, fn in cases.items():
        seconds, events = best_of(runs, fn)
        times[name] = seconds
        print(f"  {name:<34} {seconds * 1000:9.1f} ms  {total / seconds / 1e6:8.1f} MB/s  ({events} events)")
    base = times[next(iter(cases))]
    for name, seconds in list(times.items())[1:]:
        print(f"  {name} / {next(iter(cases))}: {seconds / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="megabytes per case (default 4)")
    parser.add_argument("--chunk", type=int, default=1024, help="chunk size in bytes (default 1024)")
    _smoke.add_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.mb = 0.05

    size = int(args.mb * 1_000_000)
    line = b"data: " + b"x" * size + b"\n\n"
    whole, small = [[line]], [chunked(line, args.chunk)]
    report(
        f"one {args.mb:g} MB line",
        len(line),
        3,
        {
            "loopctl, whole": ours(whole),
            f"loopctl, {args.chunk} B chunks": ours(small),
            "openai SDK, whole": openai_sdk(whole),
            f"openai SDK, {args.chunk} B chunks": openai_sdk(small),
        },
    )

    bodies = [p.read_bytes() for p in sorted(TRAFFIC.glob("*/*.response.sse"))]
    per_round = sum(len(b) for b in bodies)
    rounds = max(1, size // per_round)
    streams = [chunked(b, args.chunk) for b in bodies] * rounds
    report(
        f"{len(bodies)} recorded streams x {rounds} ({per_round * rounds / 1e6:.1f} MB), {args.chunk} B chunks",
        per_round * rounds,
        5,
        {"loopctl": ours(streams), "openai SDK": openai_sdk(streams)},
    )


if __name__ == "__main__":
    main()
