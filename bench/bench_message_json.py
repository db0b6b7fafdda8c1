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

import _smoke
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
REPEAT = 10

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


def best(fn: Callable[[], Any], *, gc_on: bool, repeat: int | None = None) -> float:
    """The fastest of ``repeat`` runs, in seconds. ``gc_on=False`` turns the cyclic garbage collector off while
    timing (timeit's convention); ``gc_on=True`` leaves it running, as it does in a real program, where
    building hundreds of thousands of objects triggers collections that walk everything alive."""
    times = []
    for _ in range(REPEAT if repeat is None else repeat):
        gc.collect()
        if not gc_on:
            gc.disable()
        try:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        finally:
            gc.enable()
    return min(times)


def tracked_objects_made(fn: Callable[[], Any]) -> int:
    """How many objects the cyclic garbage collector tracks in what ``fn`` returns (models, dicts, sets...)."""
    gc.collect()
    before = len(gc.get_objects())
    result = fn()
    gc.collect()
    made = len(gc.get_objects()) - before
    del result
    return made


def time_in_gc(fn: Callable[[], Any]) -> tuple[float, float, int]:
    """One run of ``fn`` with the collector on: (total seconds, seconds spent collecting, full collections)."""
    spent = [0.0, 0.0]
    full = [0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            spent[1] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - spent[1]
            full[0] += info["generation"] == 2

    gc.collect()
    gc.callbacks.append(watch)
    try:
        t0 = time.perf_counter()
        fn()
        total = time.perf_counter() - t0
    finally:
        gc.callbacks.remove(watch)
    return total, spent[0], full[0]


FLOOR_DUMP = "orjson.dumps(plain dicts) [floor]"
FLOOR_LOAD = "orjson.loads(bytes) [floor]"
OURS_DUMP = "loopctl dumps_conversation_bytes"
OURS_LOAD = "loopctl loads_conversation(bytes)"
STR_DUMP = "loopctl dumps_conversation (str)"
STR_LOAD = "loopctl loads_conversation(str)"
PEER_DUMP = "pydantic-ai dump_json"
PEER_LOAD = "pydantic-ai validate_json"


def main() -> None:
    global N_MESSAGES, REPEAT
    if _smoke.smoke_requested():
        N_MESSAGES, REPEAT = 200, 1
    conv = build_conversation()
    data = dumps_conversation_bytes(conv)
    text = data.decode()
    assert loads_conversation(data) == conv
    assert loads_conversation(text) == conv
    mb = len(data) / 1e6
    plain = orjson.loads(data)
    assert orjson.dumps(plain) == data
    n_parts = sum(len(m.parts) for m in conv)
    texts = [p.text for m in conv for p in m.parts if isinstance(p, TextPart | ThinkingPart)]
    non_latin1 = sum(1 for t in texts if max(t, default="a") > "\xff")

    jobs: dict[str, tuple[Callable[[], Any], int]] = {
        OURS_DUMP: (lambda: dumps_conversation_bytes(conv), len(data)),
        STR_DUMP: (lambda: dumps_conversation(conv), len(data)),
        FLOOR_DUMP: (lambda: orjson.dumps(plain), len(data)),
        OURS_LOAD: (lambda: loads_conversation(data), len(data)),
        STR_LOAD: (lambda: loads_conversation(text), len(data)),
        FLOOR_LOAD: (lambda: orjson.loads(data), len(data)),
    }
    print(f"conversation: {len(conv)} messages, {n_parts} parts, {mb:.1f} MB as loopctl JSON")
    print(f"  {len(texts)} text/thinking strings, {non_latin1} of them with characters outside Latin-1")
    peer = not _smoke.peer_missing("pydantic-ai", "pydantic_ai")
    if peer:
        from pydantic_ai.messages import ModelMessagesTypeAdapter as PA

        pa_conv = to_pydantic_ai(conv)
        pa_data = PA.dump_json(pa_conv)
        assert len(PA.validate_json(pa_data)) == len(pa_conv)
        jobs[PEER_DUMP] = (lambda: PA.dump_json(pa_conv), len(pa_data))
        jobs[PEER_LOAD] = (lambda: PA.validate_json(pa_data), len(pa_data))
        print(f"  pydantic-ai equivalent: {len(pa_data) / 1e6:.1f} MB as JSON (it adds timestamps and kinds)")
    print(f"python {sys.version.split()[0]}, best of {REPEAT} runs; MB/s over each library's own JSON size\n")

    for gc_on in (True, False):
        results = {name: best(fn, gc_on=gc_on) for name, (fn, _) in jobs.items()}
        print(f"--- garbage collector {'ON (as in a real program)' if gc_on else 'OFF (timeit convention)'}")
        print(f"{'':38} {'seconds':>8} {'MB/s':>8}")
        for name, secs in results.items():
            print(f"{name:38} {secs:8.4f} {jobs[name][1] / 1e6 / secs:8.1f}")

        def ratio(a: str, b: str, res: dict[str, float] = results) -> float:
            return res[a] / res[b]

        print(f"serialize / orjson floor:  {ratio(OURS_DUMP, FLOOR_DUMP):5.2f}x  (target <= 3x)")
        if peer:
            print(f"serialize / pydantic-ai:   {ratio(OURS_DUMP, PEER_DUMP):5.2f}x  (target < 1x)")
        print(f"load / orjson floor:       {ratio(OURS_LOAD, FLOOR_LOAD):5.2f}x  (target <= 5x)")
        if peer:
            print(f"load / pydantic-ai:        {ratio(OURS_LOAD, PEER_LOAD):5.2f}x")
        print(
            f"str API: serialize / floor {ratio(STR_DUMP, FLOOR_DUMP):5.2f}x, load / floor {ratio(STR_LOAD, FLOOR_LOAD):5.2f}x"
        )
        print()

    print("--- where the time goes")
    decode = best(data.decode, gc_on=False)
    print(f"bytes -> str of the whole document (the str API's extra cost): {decode:.4f} s; one emoji anywhere")
    print("  makes CPython store the whole document at 4 bytes per character")
    for name in (OURS_LOAD, FLOOR_LOAD, *([PEER_LOAD] if peer else [])):
        fn = jobs[name][0]
        total, in_gc, full = time_in_gc(fn)
        made = tracked_objects_made(fn)
        print(
            f"{name:38} makes {made:7d} GC-tracked objects; one run with GC on: {total:.4f} s, "
            f"{in_gc:.4f} s of it collecting ({full} full collections)"
        )


if __name__ == "__main__":
    main()
