"""Benchmark: the conversation wire form (``loopctl.message``) against its floor and a peer.

Builds one deterministic 10,000-message conversation of realistic mixed parts and reports, in one run:

- loopctl ``dumps_conversation_bytes`` / ``loads_conversation`` (bytes API) and ``dumps_conversation`` /
  ``loads_conversation`` (str API) throughput in MB/s over the whole conversation;
- the floor: ``orjson`` dumping and loading the same data as plain dicts (no model objects);
- the peer: pydantic-ai's ``ModelMessagesTypeAdapter`` dumping and loading an equivalent conversation (same
  texts, tool calls, returns, thinking with signatures; images as ``BinaryContent``).

Targets (issue 2): serialization within 3x of the orjson floor and faster than pydantic-ai; loading within
5x of the floor. Each figure is the best of several runs (the least disturbed one), wall clock.

Text mix: mostly ASCII prose and code; about one text in eight carries typographic punctuation or an emoji
(characters outside Latin-1, which makes CPython build a 2- or 4-byte-wide ``str``), and a few carry accented
Latin-1 letters. That is what model output tends to look like: ASCII with em dashes, curly quotes and the
odd emoji.

Run: ``/work/venv/bin/python bench/bench_message_json.py`` (or ``python3 make.py bench``).
"""

from __future__ import annotations

import base64
import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import orjson

from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
    dumps_conversation,
    dumps_conversation_bytes,
    loads_conversation,
)

N_MESSAGES = 10_000
REPEAT = 5

_WORDS = str.split(
    "the of and to in is that for it as with was on be by this are from or an at which have not but had "
    "function return value file path read write test error result model tool call message part conversation "
    "request response stream token cache provider assistant user system thinking signature input output data"
)
_CODE = [
    "def handler(event, context):\n    return {'status': 200, 'body': json.dumps(event)}\n",
    "for (let i = 0; i < items.length; i++) {\n  total += items[i].price * items[i].qty;\n}\n",
    'fn main() {\n    println!("{}", std::env::args().count());\n}\n',
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '7 days';\n",
]
_FANCY = ["\u2014", "\u201cquoted\u201d", "\u2019s", "\u2026", "\U0001f680", "\u2192", "\u00e9t\u00e9", "na\u00efve"]


def _prose(rng: random.Random, size: int) -> str:
    out: list[str] = []
    n = 0
    fancy = rng.random() < 0.125
    while n < size:
        if rng.random() < 0.08:
            chunk = rng.choice(_CODE)
        else:
            chunk = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 18))).capitalize() + ". "
            if fancy and rng.random() < 0.2:
                chunk += rng.choice(_FANCY) + " "
            elif rng.random() < 0.03:
                chunk += "caf\u00e9 "
        out.append(chunk)
        n += len(chunk)
    return "".join(out)


def _signature(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(rng.randint(200, 600))).decode()


def build_conversation(seed: int = 7) -> list[Message]:
    """A 10,000-message agent session: user prompts, assistant turns with thinking (signed), text and tool
    calls, user turns with tool results (a few carrying images), a few pasted images."""
    rng = random.Random(seed)
    image_data = [base64.b64encode(rng.randbytes(rng.randint(20_000, 60_000))).decode() for _ in range(4)]
    msgs: list[Message] = [Message.new(Role.SYSTEM, [TextPart(text=_prose(rng, 1500))])]
    call_n = 0
    images_left = 12
    while len(msgs) < N_MESSAGES:
        if rng.random() < 0.2 or msgs[-1].role is Role.SYSTEM:
            parts: list[Any] = [TextPart(text=_prose(rng, rng.randint(500, 4000)))]
            if images_left and rng.random() < 0.05:
                images_left -= 1
                parts.append(ImagePart(source=ImageSource(media_type="image/png", data=rng.choice(image_data))))
            msgs.append(Message.new(Role.USER, parts))
        parts = [
            ThinkingPart(text=_prose(rng, rng.randint(200, 2000)), signature=_signature(rng), provider="anthropic")
        ]
        if rng.random() < 0.6:
            parts.append(TextPart(text=_prose(rng, rng.randint(100, 1500))))
        calls = []
        for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
            call_n += 1
            call = ToolCallPart(
                id=f"toolu_{call_n:08d}{rng.randbytes(6).hex()}",
                name=rng.choice(["read_file", "grep", "run_tests", "write_file"]),
                input={
                    "path": f"src/pkg/module_{rng.randint(1, 200)}.py",
                    "pattern": rng.choice(_WORDS),
                    "context_lines": rng.randint(0, 10),
                    "recursive": rng.random() < 0.5,
                },
            )
            calls.append(call)
            parts.append(call)
        msgs.append(Message.new(Role.ASSISTANT, parts))
        if calls:
            results: list[Any] = []
            for call in calls:
                output: Any = _prose(rng, rng.randint(300, 5000))
                if images_left and rng.random() < 0.02:
                    images_left -= 1
                    src = ImageSource(media_type="image/png", data=rng.choice(image_data))
                    output = ToolContent.from_multipart([TextPart(text="screenshot"), ImagePart(source=src)])
                results.append(
                    ToolResultPart(
                        call_id=call.id,
                        name=call.name,
                        output=output,
                        is_error=rng.random() < 0.05,
                        retention=rng.choice([None, None, Retention.REQUERY, Retention.DURABLE]),
                    )
                )
            msgs.append(Message.new(Role.USER, results))
    return msgs[:N_MESSAGES]


# --- the peer: pydantic-ai ----------------------------------------------------------------------------------


def to_pydantic_ai(msgs: list[Message]) -> list[Any]:
    """The same conversation in pydantic-ai's message classes (system and user text as request parts)."""
    from pydantic_ai import messages as pm

    def binary(src: ImageSource) -> Any:
        return pm.BinaryContent(data=base64.b64decode(src.data), media_type=src.media_type)

    out: list[Any] = []
    for m in msgs:
        if m.role is Role.ASSISTANT:
            rparts: list[Any] = []
            for p in m.parts:
                if isinstance(p, ThinkingPart):
                    rparts.append(pm.ThinkingPart(content=p.text, signature=p.signature, provider_name=p.provider))
                elif isinstance(p, TextPart):
                    rparts.append(pm.TextPart(content=p.text))
                elif isinstance(p, ToolCallPart):
                    rparts.append(pm.ToolCallPart(tool_name=p.name, args=p.input, tool_call_id=p.id))  # type: ignore[arg-type]
            out.append(pm.ModelResponse(parts=rparts, model_name="claude"))
            continue
        qparts: list[Any] = []
        for p in m.parts:
            if m.role is Role.SYSTEM and isinstance(p, TextPart):
                qparts.append(pm.SystemPromptPart(content=p.text))
            elif isinstance(p, TextPart):
                qparts.append(pm.UserPromptPart(content=p.text))
            elif isinstance(p, ImagePart):
                qparts.append(pm.UserPromptPart(content=[binary(p.source)]))
            elif isinstance(p, ToolResultPart):
                if p.output.is_string():
                    content: Any = str(p.output)
                else:
                    content = [sub.text if isinstance(sub, TextPart) else binary(sub.source) for sub in p.output.parts]
                qparts.append(pm.ToolReturnPart(tool_name=p.name, content=content, tool_call_id=p.call_id))
        out.append(pm.ModelRequest(parts=qparts))
    return out


# --- timing -------------------------------------------------------------------------------------------------


def best(fn: Callable[[], Any], repeat: int = REPEAT) -> float:
    """The fastest of ``repeat`` runs, in seconds (garbage collection off while timing, as timeit does)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        finally:
            gc.enable()
    return min(times)


def main() -> None:
    conv = build_conversation()
    data = dumps_conversation_bytes(conv)
    text = data.decode()
    assert loads_conversation(data) == conv
    mb = len(data) / 1e6
    plain = orjson.loads(data)
    n_parts = sum(len(m.parts) for m in conv)
    non_latin1 = sum(
        1 for m in conv for p in m.parts if isinstance(p, TextPart | ThinkingPart) and max(p.text, default="a") > "\xff"
    )

    from pydantic_ai.messages import ModelMessagesTypeAdapter as PA

    pa_conv = to_pydantic_ai(conv)
    pa_data = PA.dump_json(pa_conv)
    assert len(PA.validate_json(pa_data)) == len(pa_conv)

    results: dict[str, float] = {
        "loopctl dumps_conversation_bytes": best(lambda: dumps_conversation_bytes(conv)),
        "loopctl dumps_conversation (str)": best(lambda: dumps_conversation(conv)),
        "orjson.dumps(plain dicts) [floor]": best(lambda: orjson.dumps(plain)),
        "pydantic-ai dump_json": best(lambda: PA.dump_json(pa_conv)),
        "loopctl loads_conversation(bytes)": best(lambda: loads_conversation(data)),
        "loopctl loads_conversation(str)": best(lambda: loads_conversation(text)),
        "orjson.loads(bytes) [floor]": best(lambda: orjson.loads(data)),
        "pydantic-ai validate_json": best(lambda: PA.validate_json(pa_data)),
    }

    print(f"conversation: {len(conv)} messages, {n_parts} parts, {mb:.1f} MB as loopctl JSON")
    print(f"  text/thinking parts with characters outside Latin-1: {non_latin1}")
    print(f"  pydantic-ai equivalent: {len(pa_data) / 1e6:.1f} MB as JSON (adds timestamps, kinds)")
    print(f"python {sys.version.split()[0]}, best of {REPEAT} runs\n")
    print(f"{'':38} {'seconds':>8} {'MB/s':>8}")
    for name, secs in results.items():
        size = len(pa_data) if name.startswith("pydantic-ai") else len(data)
        print(f"{name:38} {secs:8.4f} {size / 1e6 / secs:8.1f}")

    def ratio(a: str, b: str) -> float:
        return results[a] / results[b]

    dump, load = "loopctl dumps_conversation_bytes", "loopctl loads_conversation(bytes)"
    print()
    print(f"serialize / orjson floor:  {ratio(dump, 'orjson.dumps(plain dicts) [floor]'):5.2f}x  (target <= 3x)")
    print(f"serialize / pydantic-ai:   {ratio(dump, 'pydantic-ai dump_json'):5.2f}x  (target < 1x)")
    print(f"load / orjson floor:       {ratio(load, 'orjson.loads(bytes) [floor]'):5.2f}x  (target <= 5x)")
    print(f"load / pydantic-ai:        {ratio(load, 'pydantic-ai validate_json'):5.2f}x")
    strd, strl = "loopctl dumps_conversation (str)", "loopctl loads_conversation(str)"
    print(f"str API: serialize / floor {ratio(strd, 'orjson.dumps(plain dicts) [floor]'):5.2f}x, ", end="")
    print(f"load / floor {ratio(strl, 'orjson.loads(bytes) [floor]'):5.2f}x")


if __name__ == "__main__":
    main()
