"""Hypothesis strategies shared by the test suite: messages, parts and valid conversations.

``messages()`` draws any message the model can hold (parts of any kind in any role, every optional and
extension key, integers past 64 bits in tool inputs), for wire-form round-trips. ``conversations()`` draws conversations that ``check_conversation`` accepts: tool calls only in
assistant messages and answered in the user message(s) that follow, images only on the user side, thinking
only in assistant messages; thinking parts carry signatures from any provider (or none), so request
builders meet foreign and unsigned reasoning too.
"""

from __future__ import annotations

import base64
from typing import Any

from hypothesis import strategies as st

from loopctl.message import (
    CompactionPart,
    ImagePart,
    ImageSource,
    Message,
    Retention,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)

# Text: ASCII-heavy with non-ASCII, emoji and the odd very long string; never lone surrogates.
_alphabet = st.characters(codec="utf-8", exclude_categories=("Cs",))
short_text = st.text(_alphabet, max_size=40)
text = st.one_of(
    short_text,
    st.text(st.sampled_from('abc xyz é漢字🚀\n\t"\\{}'), max_size=200),
    st.builds(lambda s, n: s * n, st.text(_alphabet, min_size=1, max_size=5), st.integers(1000, 5000)),
)
nonempty_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Zs", "Cc")), min_size=1, max_size=40)
identifier = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True)
call_id = st.one_of(
    st.from_regex(r"(call|toolu|fc)_[A-Za-z0-9]{6,24}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30),
)

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    short_text,
)
json_value: st.SearchStrategy[Any] = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(short_text, inner, max_size=4)),
    max_leaves=12,
)
json_object = st.dictionaries(identifier, json_value, max_size=4)
# For wire round-trips only: integers JSON allows but a double cannot hold, and any string as a key.
wide_json_value: st.SearchStrategy[Any] = st.recursive(
    st.one_of(json_scalar, st.integers(-(2**100), 2**100)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(short_text, inner, max_size=4)),
    max_leaves=12,
)
item_id = st.one_of(st.none(), st.from_regex(r"(msg|fc)_[a-f0-9]{8,24}", fullmatch=True))

_PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()
image_source = st.builds(
    ImageSource,
    media_type=st.sampled_from(["image/png", "image/jpeg", "image/webp", "image/gif"]),
    data=st.one_of(st.just(_PNG), st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode())),
)
text_part = st.builds(TextPart, text=text)
image_part = st.builds(ImagePart, source=image_source)
retention = st.sampled_from([None, Retention.REQUERY, Retention.DURABLE])
providers = st.sampled_from([None, "anthropic", "gemini", "openai"])


@st.composite
def thinking_part(draw: st.DrawFn) -> ThinkingPart:
    provider = draw(providers)
    if draw(st.booleans()) and provider == "anthropic":
        return ThinkingPart(text="", redacted=draw(nonempty_text), provider=provider)
    signature = draw(st.one_of(st.none(), nonempty_text))
    item_id = draw(st.one_of(st.none(), st.from_regex(r"rs_[a-f0-9]{8}", fullmatch=True)))
    return ThinkingPart(
        text=draw(text), signature=signature, provider=provider, item_id=item_id if provider == "openai" else None
    )


tool_content = st.one_of(
    text.map(ToolContent.from_string),
    st.lists(st.one_of(text_part, image_part), max_size=3).map(ToolContent.from_multipart),
)


@st.composite
def tool_call_part(draw: st.DrawFn, id: str | None = None, *, wire: bool = False) -> ToolCallPart:
    """A tool call; ``wire=True`` adds what only wire round-trips need (an ``item_id``, very large integers)."""
    if wire:
        return ToolCallPart(
            id=id or draw(call_id), name=draw(identifier), input=draw(wide_json_value), item_id=draw(item_id)
        )
    return ToolCallPart(id=id or draw(call_id), name=draw(identifier), input=draw(st.one_of(json_object, json_value)))


@st.composite
def tool_result_part(draw: st.DrawFn, call: ToolCallPart | None = None) -> ToolResultPart:
    return ToolResultPart(
        call_id=call.id if call else draw(call_id),
        name=(call.name if call and draw(st.booleans()) else draw(st.one_of(st.just(""), identifier))),
        output=draw(tool_content),
        is_error=draw(st.sampled_from([None, True, False])),
        retention=draw(retention),
    )


any_part = st.one_of(text_part, image_part, tool_call_part(), thinking_part(), tool_result_part())
# Every key the wire form has, extensions included: for round-trips, not for request builders.
wire_part = st.one_of(
    any_part, st.builds(TextPart, text=text, item_id=item_id), tool_call_part(wire=True), thinking_part()
)


def messages() -> st.SearchStrategy[Message]:
    """Any message the model can hold, valid in a conversation or not, using every wire key."""
    return st.builds(Message, role=st.sampled_from(list(Role)), parts=st.lists(wire_part, max_size=5).map(tuple))


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 6, images: bool = True) -> list[Message]:
    """A conversation that ``check_conversation`` accepts."""
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message.new(Role.SYSTEM, [TextPart(text=draw(nonempty_text))]))
    user_parts: list[Any] = [TextPart(text=draw(nonempty_text))]
    if images and draw(st.booleans()):
        user_parts.append(draw(image_part))
    out.append(Message.new(Role.USER, user_parts))
    counter = 0
    for _ in range(draw(st.integers(0, max_turns))):
        parts: list[Any] = []
        if draw(st.booleans()):
            parts.append(draw(thinking_part()))
        if draw(st.booleans()):
            parts.append(TextPart(text=draw(text)))
        calls: list[ToolCallPart] = []
        for _ in range(draw(st.integers(0, 3))):
            counter += 1
            call = draw(tool_call_part(id=f"{draw(call_id)}{counter}"))
            calls.append(call)
            parts.append(call)
        if not parts:
            parts.append(TextPart(text=draw(nonempty_text)))
        out.append(Message.new(Role.ASSISTANT, parts))
        if draw(st.integers(0, 9)) == 0:
            out.append(Message.new(Role.SYSTEM, [TextPart(text=draw(nonempty_text))]))
        if calls:
            results = [draw(tool_result_part(call=c)) for c in calls]
            if not images:
                results = [r.model_copy(update={"output": ToolContent.from_string(str(r.output))}) for r in results]
            # Sometimes the history splits one turn's results over two user messages.
            if len(results) > 1 and draw(st.booleans()):
                cut = draw(st.integers(1, len(results) - 1))
                out.append(Message.new(Role.USER, results[:cut]))
                out.append(Message.new(Role.USER, results[cut:]))
            else:
                extra = [TextPart(text=draw(nonempty_text))] if draw(st.booleans()) else []
                out.append(Message.new(Role.USER, [*results, *extra]))
        else:
            user = [TextPart(text=draw(nonempty_text))]
            if images and draw(st.booleans()):
                user.append(draw(image_part))  # type: ignore[arg-type]
            out.append(Message.new(Role.USER, user))
    return out


# --- provider-native parts (docs/wire-format.md, "Provider-native parts") -------------------------------------


@st.composite
def native_pair(draw: st.DrawFn, n: int = 0) -> list[Any]:
    """A provider-side tool call and its result (or a compaction), in the shapes a provider sends them: an
    Anthropic ``server_tool_use`` and its result block, an OpenAI Responses item holding both (the result part
    without a block of its own), a Gemini ``executableCode`` and ``codeExecutionResult`` part; sometimes
    without their blocks (pruned), sometimes with a retention class. ``n`` keeps ids apart."""
    provider = draw(st.sampled_from(["anthropic", "openai", "gemini"]))
    if draw(st.integers(0, 5)) == 0 and provider != "gemini":
        raw = (
            {"type": "compaction", "content": draw(text)}
            if provider == "anthropic"
            else {"id": f"cmp_{n}", "type": "compaction", "encrypted_content": draw(nonempty_text)}
        )
        return [CompactionPart(provider=provider, summary=raw.get("content", ""), raw=raw)]
    # Names and inputs the providers' own request types accept back (the SDKs type them).
    name = (
        draw(st.sampled_from(["web_search", "web_fetch", "code_execution", "bash_code_execution"]))
        if provider == "anthropic"
        else draw(identifier)
    )
    call_input = draw(json_object) if provider != "openai" else {"type": "search", "query": draw(short_text)}
    output = draw(text)
    keep = draw(st.integers(0, 4)) > 0  # the blocks kept, as received (else: pruned)
    failed = draw(st.sampled_from([None, True]))
    if provider == "anthropic":
        cid = f"srvtoolu_{n}{draw(identifier)}"
        call_raw: dict[str, Any] | None = {"type": "server_tool_use", "id": cid, "name": name, "input": call_input}
        result_raw: dict[str, Any] | None = {
            "type": "web_search_tool_result",
            "tool_use_id": cid,
            "content": [{"type": "web_search_result", "title": output, "url": "https://x", "encrypted_content": "E0"}],
        }
    elif provider == "openai":
        cid = f"ws_{n}{draw(identifier)}"
        call_raw = {"id": cid, "type": "web_search_call", "status": "completed", "action": call_input}
        result_raw = None
    else:
        cid = f"code{n}"
        call_raw = {"executableCode": {"code": output, "language": "PYTHON", "id": cid}, "thoughtSignature": "c2ln"}
        result_raw = {"codeExecutionResult": {"id": cid, "outcome": "OUTCOME_OK", "output": output}}
    call = ServerToolCallPart(id=cid, name=name, input=call_input, provider=provider, raw=call_raw if keep else None)
    result = ServerToolResultPart(
        call_id=cid,
        name=name,
        output=output,
        provider=provider,
        is_error=failed,
        retention=draw(retention),
        raw=result_raw if keep else None,
    )
    title = draw(short_text)
    citation = (  # each provider's own shape (SDK CitationWebSearchResultLocationParam, AnnotationURLCitation)
        {
            "type": "web_search_result_location",
            "url": "https://x",
            "title": title,
            "encrypted_index": "E0",
            "cited_text": "c",
        }
        if provider == "anthropic"
        else {"type": "url_citation", "url": "https://x", "title": title, "start_index": 0, "end_index": 1}
    )
    cited = TextPart(text=draw(nonempty_text), citations=(citation,), provider=provider)
    return [call, result, *([cited] if draw(st.booleans()) and provider != "gemini" else [])]


def native_messages() -> st.SearchStrategy[Message]:
    """Any message holding provider-native parts among the others (for wire round-trips)."""
    return st.builds(
        lambda parts, natives: Message.new(Role.ASSISTANT, [*parts, *natives]),
        st.lists(wire_part, max_size=3),
        native_pair(),
    )


@st.composite
def native_conversations(draw: st.DrawFn, max_turns: int = 5) -> list[Message]:
    """A valid conversation (``conversations()``) whose assistant messages sometimes hold provider-native
    parts, placed after the message's thinking and before its text and calls, as the providers send them."""
    out: list[Message] = []
    for n, message in enumerate(draw(conversations(max_turns=max_turns, images=False))):
        if message.role is Role.ASSISTANT and draw(st.booleans()):
            natives = draw(native_pair(n))
            lead = [p for p in message.parts if isinstance(p, ThinkingPart)]
            rest = [p for p in message.parts if not isinstance(p, ThinkingPart)]
            message = Message.new(Role.ASSISTANT, [*lead, *natives, *rest])
        out.append(message)
    return out
