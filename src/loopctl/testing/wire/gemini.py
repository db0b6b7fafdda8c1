"""Gemini replies: the ``GenerateContentResponse`` object and the chunks of ``streamGenerateContent``.

Shapes from https://ai.google.dev/api/generate-content#generatecontentresponse and the recordings
``gemini/*`` (see ``tests/fixtures/provider-traffic/INDEX.md``). Signatures follow ``docs/wire-format.md``
("Extension keys"): a ``ThinkingPart(text="", signature=s)`` is the ``thoughtSignature`` of the part
after it; one with text is a ``{"text", "thought": true}`` part (with its own signature when it has one).
Where the API puts signatures (https://ai.google.dev/gemini-api/docs/thought-signatures): on the first
``functionCall`` of parallel calls, on each call of sequential steps, and on the last part of a reply
without calls; a script places its signature parts accordingly. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from loopctl.message import CompactionPart, ServerToolCallPart, ServerToolResultPart, TextPart, ThinkingPart
from loopctl.response import ModelResponse, StopReason, Usage
from loopctl.testing.wire._common import Counts, ReplyContext, counted, reply_parts, split, tool_arguments

__all__ = ["body", "dumps", "events"]

_FINISH = {
    StopReason.END_TURN: "STOP",
    StopReason.TOOL_CALL: "STOP",  # Gemini has no tool-call finish reason; the functionCall parts tell
    StopReason.MAX_TOKENS: "MAX_TOKENS",
    StopReason.STOP_SEQUENCE: "STOP",
    StopReason.REFUSAL: "SAFETY",
}


def dumps(value: Any) -> bytes:
    """Gemini's JSON style: a space after each colon, none after commas (as in its recorded streams).

    ``value`` is any JSON value; the result is UTF-8 bytes.
    """
    return json.dumps(value, separators=(",", ": "), ensure_ascii=False).encode()


def _usage(reported: Usage | Counts, *, thoughts: int | None = None, candidates: int | None = None) -> dict[str, Any]:
    """``usageMetadata``; ``thoughts`` / ``candidates`` override the final counts for an earlier chunk.

    candidatesTokenCount leaves out the thoughts, which thoughtsTokenCount reports; zero counts are omitted
    (recordings gemini/text, gemini/thinking-stream)."""
    usage = counted(reported)
    if thoughts is None:
        thoughts = usage.reasoning_tokens
    if candidates is None:
        candidates = max(0, usage.output_tokens - usage.reasoning_tokens)
    meta: dict[str, Any] = {"promptTokenCount": usage.input_tokens}
    if candidates:
        meta["candidatesTokenCount"] = candidates
    meta["totalTokenCount"] = usage.input_tokens + candidates + thoughts
    meta["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": usage.input_tokens}]
    if usage.cache_read_tokens:
        meta["cachedContentTokenCount"] = usage.cache_read_tokens
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    return meta


def _parts(response: ModelResponse, *, stream: bool) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(kind, part)`` pairs, kind ``"thought"``, ``"text"`` or ``"call"``, with signatures attached. Calls
    carry no ``id``: the Gemini API sends none (recordings gemini/tools-parallel*).

    A call cut off by the output limit (listed in ``invalid_tool_calls``): streamed, it opens the way
    streamed arguments do (``{"name", "willContinue": true}``, recording vertex-stream-partial-args-parallel)
    and is never continued; a whole reply carries whole parts only, so it is left out."""
    pending: str | None = None
    for part in reply_parts("gemini", response.message):
        if isinstance(part, ThinkingPart):
            if part.text:
                thought: dict[str, Any] = {"text": part.text, "thought": True}
                if part.signature:
                    thought["thoughtSignature"] = part.signature
                yield "thought", thought
            elif part.signature:
                pending = part.signature
            continue
        out: dict[str, Any]
        if isinstance(part, (ServerToolCallPart, ServerToolResultPart, CompactionPart)):
            # Code execution parts go out as they came (their signature on them); grounding metadata rides on
            # the candidate (see _metadata), its result with it.
            if part.raw is not None and ("executableCode" in part.raw or "codeExecutionResult" in part.raw):
                yield "native", dict(part.raw)
            continue
        if isinstance(part, TextPart):
            kind, out = "text", {"text": part.text}
        else:
            cut = tool_arguments(response, part)[1]
            if cut and not stream:
                continue
            call: dict[str, Any] = (
                {"name": part.name, "willContinue": True} if cut else {"name": part.name, "args": part.input}
            )
            kind, out = "call", {"functionCall": call}
        if pending is not None:
            out["thoughtSignature"] = pending
            pending = None
        yield kind, out
    if pending is not None:
        # A signature with nothing after it rides on an empty text part (recording gemini3-tool-signature).
        yield "text", {"text": "", "thoughtSignature": pending}


def _chunk(parts: list[dict[str, Any]], response: ModelResponse, ctx: ReplyContext) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
        "modelVersion": response.model or ctx.model,
        "responseId": ctx.token,
    }


def _metadata(response: ModelResponse) -> dict[str, Any]:
    """The candidate metadata the reply's native parts carry (``groundingMetadata``, ``urlContextMetadata``)."""
    out: dict[str, Any] = {}
    for part in response.message.parts:
        if isinstance(part, ServerToolCallPart) and part.provider == "gemini" and part.raw is not None:
            out.update({k: v for k, v in part.raw.items() if k in ("groundingMetadata", "urlContextMetadata")})
    return out


def _finish(response: ModelResponse) -> str:
    return response.raw_stop_reason or _FINISH[response.stop_reason]


def body(response: ModelResponse, ctx: ReplyContext) -> dict[str, Any]:
    """The non-streamed ``GenerateContentResponse``: one candidate with its parts (``thought`` parts,
    ``text``, ``functionCall`` with ``thoughtSignature`` where scripted), ``finishReason`` and
    ``usageMetadata``.

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    out = _chunk([p for _, p in _parts(response, stream=False)], response, ctx)
    out["candidates"][0]["finishReason"] = _finish(response)
    out["candidates"][0].update(_metadata(response))
    out["usageMetadata"] = _usage(response.usage)
    return out


def events(response: ModelResponse, ctx: ReplyContext) -> list[dict[str, Any]]:
    """The streamed chunks, each a whole ``GenerateContentResponse``: text and thoughts in several pieces (a
    thought's signature with its last piece); consecutive ``functionCall`` parts whole in one chunk (Gemini
    does not stream arguments, as recorded); every chunk carries the ``usageMetadata`` so far (cumulative,
    grown in proportion to the characters sent, so a decoder must keep the last one rather than add them
    up); the last chunk the final usage and the ``finishReason``.

    ``response`` is the scripted reply; ``ctx`` (a :class:`~loopctl.testing.wire.ReplyContext`) the request it
    answers (model, ids, what it asked for).
    """
    chunks: list[list[dict[str, Any]]] = []
    sizes: list[tuple[int, int]] = []  # (thought characters, other characters) per chunk
    calls: list[dict[str, Any]] = []

    def flush_calls() -> None:
        if calls:
            chunks.append(list(calls))
            sizes.append((0, sum(len(str(c["functionCall"])) for c in calls)))
            calls.clear()

    for kind, part in _parts(response, stream=True):
        if kind == "call":
            calls.append(part)
            continue
        flush_calls()
        if kind == "native":  # whole, in a chunk of its own (gemini/native-code-execution-stream)
            chunks.append([part])
            sizes.append((0, len(str(part))))
            continue
        pieces = split(part["text"])
        for n, piece in enumerate(pieces):
            out = {**part, "text": piece}
            if n < len(pieces) - 1:
                out.pop("thoughtSignature", None)
            chunks.append([out])
            sizes.append((len(piece), 0) if kind == "thought" else (0, len(piece)))
    flush_calls()
    if not chunks:
        chunks.append([])
        sizes.append((0, 0))
    usage = counted(response.usage)
    final = _usage(usage)
    total_thought = sum(t for t, _ in sizes)
    total_other = sum(o for _, o in sizes) or 1
    thoughts_so_far = other_so_far = 0
    out_chunks = []
    for n, (parts, (thought_chars, other_chars)) in enumerate(zip(chunks, sizes, strict=True)):
        chunk = _chunk(parts, response, ctx)
        thoughts_so_far += thought_chars
        other_so_far += other_chars
        if n == len(chunks) - 1:
            chunk["candidates"][0]["finishReason"] = _finish(response)
            chunk["candidates"][0].update(_metadata(response))
            chunk["usageMetadata"] = final
        else:
            # Unsent thoughts (no includeThoughts) were all spent before the first chunk (gemini/text-stream).
            thoughts = (
                usage.reasoning_tokens * thoughts_so_far // total_thought if total_thought else usage.reasoning_tokens
            )
            candidates = max(0, usage.output_tokens - usage.reasoning_tokens) * other_so_far // total_other
            chunk["usageMetadata"] = _usage(usage, thoughts=thoughts, candidates=candidates)
        out_chunks.append(chunk)
    return out_chunks
