"""Hypothesis strategies for compaction: long conversations with every retention class, and budgets sized to
them so that passes must cut, may fit, or must overflow.

``long_conversations()`` draws conversations that ``check_conversation`` accepts, shaped like agent runs:
an optional leading system message, a first user message, then many turns of an assistant message
(thinking, text, one to three tool calls, or a final answer) followed by the results (one or two user
messages, now and then a system message in between) or a user text turn. Tool outputs range from a word to
a few thousand characters (ASCII, accented, CJK, emoji), sometimes with images; retention is drawn from
untagged, ``Requery`` and ``Durable``; some messages are empty (silence, which the guide allows).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from loopctl.compact import ContextBudget, HeuristicTokenCounter
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Retention,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)

# A 1x1 PNG, base64: a real image, tiny on the wire.
_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg=="

_chunks = st.sampled_from(["lorem ipsum ", "déjà vu ", "漢字テキスト", "👩‍👩‍👧 ", "🇫🇷🇩🇪", "e\u0301 ", "line\r\n", "x"])


@st.composite
def sized_text(draw: st.DrawFn, max_repeat: int = 200) -> str:
    return draw(_chunks) * draw(st.integers(1, max_repeat)) + draw(st.text(max_size=10).filter(_valid))


def _valid(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_retention = st.sampled_from([None, None, Retention.REQUERY, Retention.DURABLE])


@st.composite
def long_conversations(draw: st.DrawFn, min_turns: int = 3, max_turns: int = 30) -> list[Message]:
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message.new(Role.SYSTEM, [TextPart(text=draw(sized_text(20)))]))
    out.append(Message.user(draw(sized_text(50))))
    n = 0
    for _ in range(draw(st.integers(min_turns, max_turns))):
        kind = draw(st.sampled_from(["tools", "tools", "tools", "answer", "user", "empty"]))
        if kind == "user":
            parts: list[Any] = [TextPart(text=draw(sized_text(40)))]
            if draw(st.integers(0, 4)) == 0:
                parts.append(ImagePart(source=ImageSource(media_type="image/png", data=_PNG)))
            out.append(Message.new(Role.USER, parts))
            continue
        if kind == "empty":
            out.append(Message.new(draw(st.sampled_from([Role.USER, Role.ASSISTANT])), []))
            continue
        parts = []
        calls: list[ToolCallPart] = []
        if draw(st.booleans()):
            parts.append(ThinkingPart(text=draw(sized_text(30)), signature="sig", provider="anthropic"))
        if draw(st.booleans()):
            parts.append(TextPart(text=draw(sized_text(20))))
        if kind == "tools":
            for _ in range(draw(st.integers(1, 3))):
                n += 1
                if calls and draw(st.booleans()):
                    parts.append(ThinkingPart(text="", signature=f"g{n}", provider="gemini"))
                c = ToolCallPart(
                    id=f"call_{n}",
                    name=draw(st.sampled_from(["read_file", "search", "save_note"])),
                    input={"arg": draw(sized_text(5))},
                )
                calls.append(c)
                parts.append(c)
        if not parts:
            parts.append(TextPart(text="Done."))
        out.append(Message.new(Role.ASSISTANT, parts))
        if not calls:
            continue
        if draw(st.integers(0, 9)) == 0:
            out.append(Message.new(Role.SYSTEM, [TextPart(text="reminder")]))
        results: list[MessagePart] = []
        for c in calls:
            output: str | ToolContent = draw(sized_text(300))
            if draw(st.integers(0, 6)) == 0:
                output = ToolContent.from_multipart(
                    [TextPart(text="screenshot"), ImagePart(source=ImageSource(media_type="image/png", data=_PNG))]
                )
            results.append(
                ToolResultPart(
                    call_id=c.id,
                    name=c.name,
                    output=output,
                    is_error=draw(st.sampled_from([None, False, True])),
                    retention=draw(_retention),
                )
            )
        if len(results) > 1 and draw(st.booleans()):
            cut = draw(st.integers(1, len(results) - 1))
            out.append(Message.new(Role.USER, results[:cut]))
            out.append(Message.new(Role.USER, results[cut:]))
        else:
            out.append(Message.new(Role.USER, results))
    return out


@st.composite
def budgets_for(draw: st.DrawFn, messages: list[Message]) -> ContextBudget:
    """A budget whose window puts ``messages`` anywhere from well under the target to far over it, with a
    protected tail from nothing to a few thousand tokens."""
    counter = HeuristicTokenCounter(draw(st.sampled_from(["default", "anthropic", "openai", "gemini"])))
    size = max(1, counter.count(messages))
    window = max(1, int(size * draw(st.floats(0.2, 2.0))))
    return ContextBudget(window=window, protected_tail=draw(st.sampled_from([0, 200, 2_000, 5_000])), counter=counter)
