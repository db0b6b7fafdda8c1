"""The codecs' incremental build (``encode_request`` with a ``RequestCache``) writes exactly the bytes of a
fresh build (``build_request``, written by the project's serializer), whatever happened to the conversation
between two calls: growth by appends (cut anywhere: mid-turn, between split results, after a system
message), an empty prompt, a message edited or replaced deep in the kept prefix, a compaction that replaces
the start, a rollback, a fork sharing the first message, one request changed by a ``before_model`` hook
(messages replaced, dropped or added for that call only), other options, tools or output formats. An error
is the same error.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopctl.errors import LoopError
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from loopctl.message.model import _dumps_bytes
from loopctl.providers import anthropic, openai_chat, openai_responses
from loopctl.providers.base import OutputFormat, RequestCache
from loopctl.tool import ForceTool, ToolSchema
from tests import strategies

TOOLS_A = (ToolSchema("echo", "Echo the text.", {"type": "object", "properties": {"text": {"type": "string"}}}),)
TOOLS_B = (*TOOLS_A, ToolSchema("add", "Add.", {"type": "object", "properties": {"a": {"type": "integer"}}}))
SYSTEMS = [None, "", "You are a test agent.", "Другой системный текст"]
ANSWER = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}, "rank": {"type": "integer", "minimum": 0}},
    "required": ["city"],
}
FREE_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OUTPUT_FORMATS = [
    *[None] * 3,
    *[OutputFormat("answer", ANSWER)] * 2,
    *[OutputFormat("answer", ANSWER, description="The city ranked.", strict=False)] * 2,
    # A free-form map: strict mode and Anthropic refuse it (the same error either way), plain mode sends it.
    OutputFormat("tags", FREE_MAP, strict=False),
    OutputFormat("tags", FREE_MAP),
]


def _common_options(draw: st.DrawFn) -> dict[str, Any]:
    """The options every codec takes (``ModelRequest.options()``), drawn with the codec's own below."""
    return {
        "system": draw(st.sampled_from(SYSTEMS)),
        "tools": draw(st.sampled_from([(), TOOLS_A, TOOLS_B])),
        "stream": draw(st.booleans()),
        "temperature": draw(st.sampled_from([None, 0, 0.7])),
        "output_format": draw(st.sampled_from(OUTPUT_FORMATS)),
    }


def _chat_options(draw: st.DrawFn) -> dict[str, Any]:
    return {
        **_common_options(draw),
        "system_role": draw(st.sampled_from(["system", "developer"])),
        "replay_reasoning_content": draw(st.booleans()),
        "tool_choice": draw(st.sampled_from([None, "auto", ForceTool("echo")])),
        "strict_tools": draw(st.booleans()),
        "max_tokens": draw(st.sampled_from([None, 200])),
        "max_tokens_param": draw(st.sampled_from(["max_completion_tokens", "max_tokens"])),
        "stop": draw(st.sampled_from([None, ["\n\n"]])),
        "image_detail": draw(st.sampled_from([None, "low"])),
        "tool_call_id_max_length": draw(st.sampled_from([40, 9])),
        "extra": draw(st.sampled_from([None, {"seed": 7}, {"response_format": {"type": "json_object"}}])),
    }


def _anthropic_options(draw: st.DrawFn) -> dict[str, Any]:
    return {
        **_common_options(draw),
        "stop": draw(st.sampled_from([None, [], ["END"]])),
        "extra": draw(st.sampled_from([None, {"metadata": {"user_id": "u1"}}])),
        "prompt_cache": draw(st.booleans()),
        "reasoning_effort": draw(st.sampled_from([None, "low", "high"])),
        "max_tokens": draw(st.sampled_from([None, 1500, 50_000])),
        "tool_choice": draw(st.sampled_from([None, "auto", "required"])),
    }


def _responses_options(draw: st.DrawFn) -> dict[str, Any]:
    return {
        **_common_options(draw),
        "max_tokens": draw(st.sampled_from([None, 200])),
        "stop": draw(st.sampled_from([None, None, None, [], ["END"]])),  # a non-empty stop is refused
        "tool_choice": draw(st.sampled_from([None, "required", ForceTool("echo")])),
        "reasoning_summary": draw(st.sampled_from([None, "auto"])),
        "encrypted_reasoning": draw(st.sampled_from([None, False])),
        "extra": draw(st.sampled_from([None, {"text": {"verbosity": "low"}}])),
        "system_role": draw(st.sampled_from(["system", "developer"])),
        "system_as_instructions": draw(st.booleans()),
        "store": draw(st.sampled_from([None, True, False])),
        "reasoning_effort": draw(st.sampled_from([None, "low"])),
        "strict_tools": draw(st.booleans()),
    }


CODECS: list[tuple[ModuleType, Callable[[st.DrawFn], dict[str, Any]]]] = [
    (openai_chat, _chat_options),
    (anthropic, _anthropic_options),
    (openai_responses, _responses_options),
]


def _fresh(codec: ModuleType, messages: list[Message], options: dict[str, Any]) -> bytes | tuple[type, str]:
    try:
        return _dumps_bytes(codec.build_request(messages, model="m", **options))
    except LoopError as exc:
        return (type(exc), str(exc))


def _incremental(codec: ModuleType, messages: list[Message], options: dict[str, Any], cache: RequestCache) -> Any:
    try:
        return codec.encode_request(messages, model="m", cache=cache, **options)
    except LoopError as exc:
        return (type(exc), str(exc))


def _copy(message: Message, change: bool) -> Message:
    """A new object for ``message``: the same value, or with its text changed (its bytes change)."""
    parts = list(message.parts)
    if change:
        parts.append(TextPart(text="(edited)"))
    return Message.new(message.role, parts)


EMPTY_PROMPTS = ["empty", "blank", "empty then system"]
HOOKED = ["replace", "drop", "append", "redact last", "new list"]


def _empty_prompt(kind: str) -> list[Message]:
    """An empty prompt as a caller sends it: empty text, whitespace, or empty text then a system message."""
    if kind == "blank":
        return [Message.user("  ")]
    prompt = [Message.user("")]
    return [*prompt, Message.new(Role.SYSTEM, [TextPart(text="Answer briefly.")])] if kind != "empty" else prompt


def _hooked(messages: list[Message], how: str, i: int) -> list[Message]:
    """``messages`` as a ``before_model`` hook may send them instead: message ``i`` replaced by a redacted
    copy, dropped, a reminder appended, the last message redacted, or the same messages as new objects."""
    if not messages:
        return messages
    i %= len(messages)
    if how == "replace":
        return [*messages[:i], _copy(messages[i], True), *messages[i + 1 :]]
    if how == "drop":
        return [*messages[:i], *messages[i + 1 :]]
    if how == "append":
        return [*messages, Message.new(Role.SYSTEM, [TextPart(text="Reminder: be brief.")])]
    if how == "redact last":
        return [*messages[:-1], _copy(messages[-1], True)]
    return [_copy(m, False) for m in messages]


@st.composite
def timelines(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Steps on one growing conversation: ("grow", k) appends the next k messages of the source; ("edit", i,
    change) replaces message i by a copy; ("compact", i) replaces the first i messages by one summary;
    ("rollback", i) drops what follows message i; ("fork",) starts a second conversation from the same
    first message; ("options",) draws other options; ("empty", k) appends an empty prompt of kind k;
    ("hook", (how, i)) sends one request changed as a ``before_model`` hook may change it (the conversation
    itself stays as it was). A call is made after each step."""
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["grow"] * 6 + ["edit", "compact", "rollback", "fork", "options", "empty", "hook"]))
        if kind == "grow":
            steps.append(("grow", draw(st.integers(1, 4))))
        elif kind == "empty":
            steps.append(("empty", draw(st.sampled_from(EMPTY_PROMPTS))))
        elif kind == "hook":
            steps.append(("hook", (draw(st.sampled_from(HOOKED)), draw(st.integers(0, 40)))))
        elif kind == "edit":
            steps.append(("edit", (draw(st.integers(0, 40)), draw(st.booleans()))))
        elif kind in ("compact", "rollback"):
            steps.append((kind, draw(st.integers(0, 40))))
        else:
            steps.append((kind, None))
    return steps


@pytest.mark.parametrize(("codec", "option_strategy"), CODECS, ids=lambda c: getattr(c, "__name__", ""))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_incremental_bytes_equal_a_fresh_build(
    codec: ModuleType, option_strategy: Callable[[st.DrawFn], dict[str, Any]], data: st.DataObject
) -> None:
    source = data.draw(strategies.conversations(max_turns=10))
    steps = data.draw(timelines())
    options = data.draw(st.composite(option_strategy)())
    # A byte budget that drops prefixes as the conversation and its fork take turns (0 keeps only the latest).
    cache = RequestCache(max_bytes=data.draw(st.sampled_from([32 << 20, 0, 600])))
    current: list[Message] = source[:1]
    taken = 1
    other: list[Message] | None = None  # a fork of the conversation, sent interleaved
    for kind, arg in steps:
        if kind == "grow":
            current = current + source[taken : taken + arg]
            taken += arg
        elif kind == "edit" and current:
            i, change = arg
            i %= len(current)
            current = [*current[:i], _copy(current[i], change), *current[i + 1 :]]
        elif kind == "compact" and current:
            i = arg % len(current)
            current = [Message.user("Summary of the conversation so far."), *current[i:]]
        elif kind == "rollback" and current:
            current = current[: arg % len(current) + 1]
        elif kind == "fork":
            other = [*current[: max(1, len(current) // 2)], Message.user("a forked question")]
        elif kind == "options":
            options = data.draw(st.composite(option_strategy)())
        elif kind == "empty":
            current = current + _empty_prompt(arg)
        elif kind == "hook":
            how, i = arg
            hooked = _hooked(current, how, i)
            assert _incremental(codec, hooked, options, cache) == _fresh(codec, hooked, options)
        for conversation in (current, other):
            if conversation is None:
                continue
            assert _incremental(codec, conversation, options, cache) == _fresh(codec, conversation, options)
        # The same request again: the prefix kept by the call just made is reused.
        assert _incremental(codec, current, options, cache) == _fresh(codec, current, options)
        _check_held_bytes(cache)


def _check_held_bytes(cache: RequestCache) -> None:
    kept = list(cache._prefixes.values())
    assert cache.held_bytes == sum(len(chunk) for p in kept for chunk in p.chunks)
    assert len(kept) <= 1 or cache.held_bytes <= cache.max_bytes


def _tool_loop(turns: int, *, thinking: bool = False) -> list[Message]:
    messages = [Message.user("go")]
    for t in range(turns):
        parts: list[Any] = []
        if thinking:
            parts.append(ThinkingPart(text=f"think {t}", signature=f"sig{t}", provider="anthropic"))
        parts.append(ToolCallPart(id=f"call_{t}", name="echo", input={"text": "x" * 20}))
        messages.append(Message(role=Role.ASSISTANT, parts=tuple(parts)))
        messages.append(Message(role=Role.USER, parts=(ToolResultPart(call_id=f"call_{t}", name="echo", output="x"),)))
    return messages


@pytest.mark.parametrize("codec", [openai_chat, anthropic, openai_responses], ids=lambda c: c.__name__)
def test_a_tool_loop_keeps_all_but_its_last_turns_as_a_prefix(codec: ModuleType) -> None:
    messages = _tool_loop(30)
    cache = RequestCache()
    for n in range(1, len(messages) + 1):
        assert codec.encode_request(messages[:n], model="m", cache=cache, tools=TOOLS_A) == _dumps_bytes(
            codec.build_request(messages[:n], model="m", tools=TOOLS_A)
        )
    (prefix,) = cache._prefixes.values()
    # Chat and Responses keep everything before the last assistant message; Anthropic also leaves the last
    # two user turns (the cache breakpoints) out of the prefix.
    expected = len(messages) - 4 if codec is anthropic else len(messages) - 2
    assert prefix.start == expected
    assert prefix.count == expected


def test_anthropic_breakpoints_move_with_the_conversation_and_never_enter_the_prefix() -> None:
    messages = _tool_loop(6)
    cache = RequestCache()
    for n in range(2, len(messages) + 1):
        body = anthropic.encode_request(messages[:n], model="m", cache=cache)
        marked = body.count(b'"cache_control"')
        assert body == _dumps_bytes(anthropic.build_request(messages[:n], model="m"))
        users = sum(1 for m in messages[:n] if m.role is Role.USER)
        assert marked == min(2, users)


def test_anthropic_thinking_is_decided_by_a_turn_inside_the_prefix() -> None:
    """A long tool loop with thinking on: whether the first assistant turn opened with thinking (far
    inside the kept prefix) decides whether thinking is enabled, as in a fresh build."""
    for thinking in (True, False):
        messages = _tool_loop(12, thinking=thinking)
        cache = RequestCache()
        for n in range(1, len(messages) + 1):
            got = anthropic.encode_request(messages[:n], model="m", cache=cache, reasoning_effort="low")
            assert got == _dumps_bytes(anthropic.build_request(messages[:n], model="m", reasoning_effort="low"))
        assert (b'"thinking":{"type":"enabled"' in got) is thinking
        (prefix,) = cache._prefixes.values()
        assert prefix.state.plain == 0 and prefix.state.opens is thinking


def test_concurrent_conversations_keep_one_prefix_each() -> None:
    loops = [_tool_loop(5) for _ in range(3)]
    cache = RequestCache()
    for n in range(1, 12):
        for messages in loops:
            assert openai_chat.encode_request(messages[:n], model="m", cache=cache) == _dumps_bytes(
                openai_chat.build_request(messages[:n], model="m")
            )
    assert len(cache) == 3
    assert [p.start for p in cache._prefixes.values()] == [9, 9, 9]


def test_a_byte_budget_drops_the_least_recently_used_conversations_and_keeps_the_latest() -> None:
    # Each finished conversation's prefix (its messages and bytes) stayed until 1,024 newer ones came: a
    # client shared by many conversations held about 73 KB for each finished 20-turn one.
    loops = [_tool_loop(5) for _ in range(4)]
    sizes = []
    for messages in loops:
        alone = RequestCache()
        openai_chat.encode_request(messages, model="m", cache=alone)
        sizes.append(alone.held_bytes)
    assert len(set(sizes)) == 1 and sizes[0] > 0
    cache = RequestCache(max_bytes=2 * sizes[0])
    for messages in loops:
        for n in range(1, len(messages) + 1):
            assert openai_chat.encode_request(messages[:n], model="m", cache=cache) == _dumps_bytes(
                openai_chat.build_request(messages[:n], model="m")
            )
    assert len(cache) == 2
    kept = list(cache._prefixes.values())
    assert [p.messages[0] is m[0] for p, m in zip(kept, loops[2:], strict=True)] == [True, True]
    assert cache.held_bytes == 2 * sizes[0]
    tight = RequestCache(max_bytes=1)
    openai_chat.encode_request(loops[0], model="m", cache=tight)
    assert (len(tight), tight.held_bytes) == (1, sizes[0])  # the latest is kept, however large
    tight.forget(loops[0])
    assert (len(tight), tight.held_bytes) == (0, 0)


def test_a_call_whose_tools_fail_leaves_the_kept_prefix_as_it_was() -> None:
    messages = _tool_loop(4)
    cache = RequestCache()
    anthropic.encode_request(messages, model="m", cache=cache)
    (before,) = cache._prefixes.values()
    bad = (ToolSchema("not a name!", "", {"type": "object", "properties": {}}),)
    with pytest.raises(LoopError, match="not a name Anthropic accepts"):
        anthropic.encode_request([*messages, Message.user("more")], model="m", cache=cache, tools=bad)
    (after,) = cache._prefixes.values()
    assert after is before
    assert anthropic.encode_request(messages, model="m", cache=cache) == _dumps_bytes(
        anthropic.build_request(messages, model="m")
    )


def test_integers_past_64_bits_are_written_alike_in_a_fragment_and_in_a_whole_body() -> None:
    call = ToolCallPart(id="c1", name="echo", input={"n": 2**70, "f": 1e16, "m": -(2**64)})
    messages = [
        Message.user("go"),
        Message(role=Role.ASSISTANT, parts=(call,)),
        Message(role=Role.USER, parts=(ToolResultPart(call_id="c1", name="echo", output="ok"),)),
        Message(role=Role.ASSISTANT, parts=(TextPart(text="done"),)),
        Message.user("again"),
    ]
    cache = RequestCache()
    for n in range(1, len(messages) + 1):
        got = anthropic.encode_request(messages[:n], model="m", cache=cache)
        assert got == _dumps_bytes(anthropic.build_request(messages[:n], model="m"))
    assert b'"n":1180591620717411303424' in got and b'"m":-18446744073709551616' in got
