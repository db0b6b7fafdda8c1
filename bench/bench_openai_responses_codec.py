"""Benchmark of the OpenAI Responses codec (run: /work/venv/bin/python bench/bench_openai_responses_codec.py).

1. Stream decoding: the recorded Responses streams (tests/fixtures/provider-traffic/openai/responses-*.sse),
   repeated to a few MB and fed in 8 KiB chunks, decoded into a ModelResponse by loopctl's StreamDecoder;
   the peer, measured in the same run on the same bytes, is openai-python's own path: its ``Stream`` SSE
   decoder over an ``httpx2.Response`` built from the bytes, accumulated by ``ResponseStream`` into the
   SDK's final ``ParsedResponse`` (what ``client.responses.stream(...).get_final_response()`` does). The
   SDK's bare ``Stream`` (events parsed into pydantic models, no accumulation) is reported too.
2. Request building: a 1,000-message conversation (user turns, assistant turns with reasoning, text and
   tool calls, tool results with images) built per call without a cache, and with a warm ConversionCache
   (the conversation growing by one turn per call, as an agent loop does).

Prints figures and ratios; asserts nothing (performance is measured here, never in tests).
"""

from __future__ import annotations

import base64
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import _smoke  # noqa: E402  (bench/, the script's folder, is on the path)
import httpx2  # noqa: E402 - the SDK's own HTTP library (a fork of httpx)
from openai import OpenAI, omit  # noqa: E402
from openai._streaming import Stream  # noqa: E402
from openai.lib.streaming.responses._responses import ResponseStream  # noqa: E402
from openai.types.responses import ResponseStreamEvent  # noqa: E402

from loopctl.message import (  # noqa: E402
    ImagePart,
    ImageSource,
    Message,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.providers import openai_responses as codec  # noqa: E402
from loopctl.providers.base import ConversionCache  # noqa: E402
from loopctl.tool import ToolSchema  # noqa: E402

TRAFFIC = ROOT / "tests" / "fixtures" / "provider-traffic" / "openai"
SMOKE = _smoke.smoke_requested()  # --smoke: tiny sizes (50 KB of streams, 20 messages, 3 calls, 1 round)
TARGET_BYTES = 50 * 1024 if SMOKE else 4 * 1024 * 1024
CHUNK = 8192
ROUNDS = 1 if SMOKE else 5
MESSAGES = 20 if SMOKE else 1000


def best(fn: Callable[[], object], rounds: int = ROUNDS) -> float:
    """The best wall time of ``rounds`` runs, in seconds (GC off while timing)."""
    times = []
    for _ in range(rounds):
        gc.collect()
        gc.disable()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        gc.enable()
    return min(times)


# --- 1. stream decoding ----------------------------------------------------------------------------------------


def load_streams() -> tuple[list[bytes], int]:
    bodies = [p.read_bytes() for p in sorted(TRAFFIC.glob("responses-*.response.sse"))]
    out: list[bytes] = []
    while sum(map(len, out)) < TARGET_BYTES:
        out.extend(bodies)
    events = sum(b.count(b"\ndata:") + b.startswith(b"data:") for b in out)
    return out, events


def chunks(body: bytes) -> list[bytes]:
    return [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)]


def loopctl_decode(streams: list[list[bytes]]) -> None:
    for pieces in streams:
        codec.parse_stream(pieces)


CLIENT = OpenAI(api_key="sk-bench", base_url="http://127.0.0.1:9/v1", max_retries=0)


def sdk_stream(body: list[bytes]) -> Stream[ResponseStreamEvent]:
    response = httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=iter(body))
    return Stream(cast_to=ResponseStreamEvent, response=response, client=CLIENT)  # type: ignore[arg-type]


def sdk_accumulate(streams: list[list[bytes]]) -> None:
    for pieces in streams:
        stream = ResponseStream(raw_stream=sdk_stream(pieces), text_format=omit, input_tools=omit, starting_after=None)
        stream.get_final_response()


def sdk_events_only(streams: list[list[bytes]]) -> None:
    for pieces in streams:
        for _ in sdk_stream(pieces):
            pass


def bench_streams() -> None:
    bodies, events = load_streams()
    total = sum(map(len, bodies))
    streams = [chunks(b) for b in bodies]
    # Same answers first: loopctl's message and the SDK's final response agree on every stream.
    for pieces in streams[: len(list(TRAFFIC.glob("responses-*.response.sse")))]:
        ours = codec.parse_stream(pieces)
        final = ResponseStream(raw_stream=sdk_stream(pieces), text_format=omit, input_tools=omit, starting_after=None)
        sdk = final.get_final_response()
        assert ours.id == sdk.id
        assert ours.usage.output_tokens == (sdk.usage.output_tokens if sdk.usage else 0)
        assert ours.message.text_content() == sdk.output_text

    mb = total / 1e6
    t_ours = best(lambda: loopctl_decode(streams))
    t_sdk = best(lambda: sdk_accumulate(streams))
    t_raw = best(lambda: sdk_events_only(streams))
    print(f"Stream decoding: {len(bodies)} recorded Responses streams, {mb:.2f} MB, {events} events, {CHUNK} B chunks")
    print(f"  {'':44} {'seconds':>8} {'events/s':>12} {'MB/s':>8}")
    for label, t in (
        ("loopctl StreamDecoder -> ModelResponse", t_ours),
        ("openai-python Stream + ResponseStream (final)", t_sdk),
        ("openai-python Stream only (events, no accum.)", t_raw),
    ):
        print(f"  {label:44} {t:8.3f} {events / t:12,.0f} {mb / t:8.1f}")
    print(
        f"  loopctl is {t_sdk / t_ours:.1f}x the SDK's accumulating decoder, {t_raw / t_ours:.1f}x its bare event parsing"
    )


# --- 2. request building ------------------------------------------------------------------------------------------

PNG = base64.b64encode(bytes(range(256)) * 8).decode()


def conversation(n_messages: int) -> list[Message]:
    """A long agent conversation: each round is a user turn or tool results, then an assistant turn."""
    out: list[Message] = [Message.user("Refactor the parser and run the tests.")]
    turn = 0
    while len(out) < n_messages:
        turn += 1
        call_ids = [f"call_{turn}_{k}" for k in range(2)]
        out.append(
            Message.new(
                Role.ASSISTANT,
                [
                    ThinkingPart(
                        text=f"Step {turn}: look at the files." * 3,
                        signature="gAAAAAB" + "x" * 800,
                        provider="openai",
                        item_id=f"rs_{turn}",
                    ),
                    TextPart(text=f"Reading files, round {turn}.", item_id=f"msg_{turn}"),
                    *(
                        ToolCallPart(
                            id=c,
                            name="read_file",
                            input={"path": f"src/mod_{turn}_{k}.py", "lines": [1, 200]},
                            item_id=f"fc_{c}",
                        )
                        for k, c in enumerate(call_ids)
                    ),
                ],
            )
        )
        if len(out) >= n_messages:
            break
        results = [
            ToolResultPart(call_id=c, name="read_file", output="def f():\n    return 1\n" * 40) for c in call_ids
        ]
        if turn % 10 == 0:
            image = ImagePart(source=ImageSource(media_type="image/png", data=PNG))
            results[0] = results[0].model_copy(
                update={"output": ToolContent.from_multipart([TextPart(text="screenshot"), image])}
            )
        out.append(Message.new(Role.USER, results))
    return out[:n_messages]


TOOLS = [
    ToolSchema(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
]


def bench_build() -> None:
    history = conversation(MESSAGES)
    n_calls = 3 if SMOKE else 50
    # Without a cache: every call converts all 1,000 messages.
    t_plain = best(
        lambda: [
            codec.build_request(history, model="gpt-5", system="Be careful.", tools=TOOLS) for _ in range(n_calls)
        ],
        rounds=3,
    )

    # With a cache, as an agent loop uses it: the same history object grows by one message per call.
    def cached_loop() -> None:
        cache = ConversionCache()
        codec.build_request(
            history[: MESSAGES - n_calls], model="gpt-5", system="Be careful.", tools=TOOLS, cache=cache
        )
        for k in range(MESSAGES - n_calls + 1, MESSAGES + 1):
            codec.build_request(history[:k], model="gpt-5", system="Be careful.", tools=TOOLS, cache=cache)

    t_cached = best(cached_loop, rounds=3)
    cache = ConversionCache()
    warm = codec.build_request(history, model="gpt-5", cache=cache)
    assert warm == codec.build_request(history, model="gpt-5")
    per_plain = t_plain / n_calls * 1e3
    # The cached loop includes one cold build of 950 messages; report the warm per-call time without it.
    cold = best(
        lambda: codec.build_request(
            history[: MESSAGES - n_calls], model="gpt-5", system="Be careful.", tools=TOOLS, cache=ConversionCache()
        ),
        rounds=3,
    )
    per_cached = max(t_cached - cold, 0.0) / n_calls * 1e3
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        codec.build_request(history, model="gpt-5", system="Be careful.", tools=TOOLS, cache=cache)
        samples.append(time.perf_counter() - start)
    print(
        f"Request building: {MESSAGES:,}-message conversation (reasoning, text, 2 calls per assistant turn, results, images)"
    )
    print(f"  no cache                       {per_plain:8.3f} ms per call")
    print(f"  warm ConversionCache (+1 msg)  {per_cached:8.3f} ms per call")
    print(f"  warm ConversionCache (same)    {statistics.median(samples) * 1e3:8.3f} ms per call (median of 20)")
    print(f"  cache speed-up                 {per_plain / max(per_cached, 1e-9):8.1f}x")


if __name__ == "__main__":
    bench_streams()
    print()
    bench_build()
