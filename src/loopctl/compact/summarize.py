"""The summarizing compactor: the older part of the conversation goes to a model as a transcript, and a
summary replaces it.

Sans-IO in two steps, like the loop machine: :meth:`SummarizingCompactor.start` returns a
:class:`SummaryPlan` whose ``request`` (a :class:`~loopctl.providers.ModelRequest`) the driver sends;
:meth:`SummaryPlan.finish` takes the reply (its text, the :class:`~loopctl.response.ModelResponse`, or the
failure) and returns the new conversation. A failed call leaves the conversation untouched.

What the rules (``docs/compaction.md``, "Retention classes"; ``docs/compaction.md``, "The passes") make of each part of
the older stretch:

- a leading system message is kept as it is and never summarized;
- untagged tool results appear in the transcript (long ones cut in the middle, never inside a character);
- ``Requery`` results appear only as a marker naming the tool call and its input
  (:data:`REQUERY_OMITTED`), so the summary cannot restate what it never saw;
- ``Durable`` results appear in full, and are also kept verbatim, with their calls, after the summary;
- thinking ages out: it is not in the transcript, and the kept ``Durable`` calls lose theirs (and their
  provider item ids with it: ``structure.durable_copy``).

The recent tail is kept verbatim (it holds at least the budget's protected tail and grows while the
result, with room for the summary, fits the target).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopctl._frozen import dataclass
from loopctl.compact.budget import ContextBudget
from loopctl.compact.counting import TokenCounter, message_tokens
from loopctl.compact.keep import KeepPlan, plan_keep
from loopctl.compact.structure import Layout, calls_of, describe_call, scan
from loopctl.compact.textcut import clip_middle, safe_cut_index
from loopctl.errors import CompactionOverflow
from loopctl.message import (
    ImagePart,
    Message,
    Retention,
    Role,
    TextPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.providers.base import ModelRequest
from loopctl.response import ModelResponse

__all__ = [
    "REQUERY_OMITTED",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTIONS",
    "SUMMARY_SYSTEM_PROMPT",
    "SummarizingCompactor",
    "SummaryPlan",
    "transcript",
]

SUMMARY_SYSTEM_PROMPT = (
    "You compact the history of an AI agent's run. You write a summary that replaces the older part of the "
    "conversation, so that the agent can continue its task from the summary and the recent messages alone."
)
"""The system prompt of the summary request."""

SUMMARY_INSTRUCTIONS = (
    "Summarize the transcript below for the agent that will continue this conversation. Keep: the user's "
    "goals and constraints, decisions made and why, facts learned (names, paths, numbers, identifiers), what "
    "was done and what remains, and open questions. Do not restate tool output that the transcript marks as "
    "omitted: say which call would fetch it again. Tool results marked durable are kept verbatim after your "
    "summary, so refer to them instead of copying them. Write plain prose or short lists, no preamble."
)
"""The instructions that precede the transcript in the summary request."""

SUMMARY_HEADER = "[Summary of the earlier conversation, written when it was compacted]\n"
"""The first line of the user message that carries the summary in the new conversation."""

REQUERY_OMITTED = "[output omitted from this transcript; re-run {call} to see it]"
"""What a ``Requery`` result becomes in the transcript; ``{call}`` is ``name(<JSON input>)``."""

TRANSCRIPT_ITEM_CHARS = 4_000
"""Default longest text (characters) one transcript item keeps; longer ones are cut in the middle."""


@dataclass(frozen=True, slots=True)
class SummaryPlan:
    """A summary in progress: the ``request`` to send, and what to build from the reply.

    ``original``: the conversation as it was (returned unchanged when the call fails). ``summarized``: the
    stretch of it that the summary replaces (its ``Durable`` results are kept besides). ``room``: tokens
    the summary message may take (the request's ``max_tokens`` is the same number). ``tokens_before``: the
    conversation's size when the plan was made.
    """

    request: ModelRequest
    original: tuple[Message, ...]
    summarized: tuple[Message, ...]
    room: int
    tokens_before: int
    _keep: KeepPlan
    _counter: TokenCounter

    def finish(self, reply: str | ModelResponse | BaseException | None) -> list[Message]:
        """The new conversation: leading system message(s), the summary as a user message
        (:data:`SUMMARY_HEADER` + text), the ``Durable`` results of the summarized part with their calls,
        then the recent tail.

        ``reply``: the summary text, or the model's response, or the exception the call raised (or
        ``None``). A failure, or a reply without text, returns the original conversation untouched. A
        summary longer than :attr:`room` is cut (never inside a character) so the result fits the target.
        """
        if isinstance(reply, ModelResponse):
            text = reply.message.text_content()
        elif isinstance(reply, str):
            text = reply
        else:
            return list(self.original)
        text = text.strip()
        if not text:
            return list(self.original)
        summary = self._fit(text)
        return self._keep.assemble(self.original, [summary])

    def _fit(self, text: str) -> Message:
        msg = Message.user(SUMMARY_HEADER + text)
        for _ in range(8):
            size = message_tokens(self._counter, msg)
            if size <= self.room:
                return msg
            keep = int(len(text) * self.room / size * 0.95)
            text = text[: safe_cut_index(text, max(0, keep - 1))] + "…"
            msg = Message.user(SUMMARY_HEADER + text)
        return Message.user(SUMMARY_HEADER + "…")  # fits: the room is at least SummarizingCompactor.min_room


class SummarizingCompactor:
    """Summarize the older part of a conversation with a model call (sans-IO; see the module docstring).

    ``max_summary_tokens``: the most the summary may take (default 4,000), also the request's
    ``max_tokens``. ``min_summary_tokens``: the least room a summary needs (256, or ``max_summary_tokens`` if
    smaller); when even that does not
    fit next to what must be kept, :meth:`start` raises :class:`~loopctl.errors.CompactionOverflow`.
    ``item_chars``: longest text of one transcript item (4,000 characters; ``Durable`` results are never
    cut). ``instructions`` / ``system_prompt``: the request's prompt (:data:`SUMMARY_INSTRUCTIONS`,
    :data:`SUMMARY_SYSTEM_PROMPT`). ``temperature``: passed on to the request (``None``: provider default).
    """

    def __init__(
        self,
        *,
        max_summary_tokens: int = 4_000,
        min_summary_tokens: int | None = None,
        item_chars: int = TRANSCRIPT_ITEM_CHARS,
        instructions: str = SUMMARY_INSTRUCTIONS,
        system_prompt: str = SUMMARY_SYSTEM_PROMPT,
        temperature: float | None = None,
    ) -> None:
        if min_summary_tokens is None:
            min_summary_tokens = min(256, max_summary_tokens)
        if not 0 < min_summary_tokens <= max_summary_tokens:
            raise ValueError(
                "SummarizingCompactor needs 0 < min_summary_tokens <= max_summary_tokens, got "
                f"{min_summary_tokens} and {max_summary_tokens}"
            )
        self.max_summary_tokens = max_summary_tokens
        self.min_summary_tokens = min_summary_tokens
        self.item_chars = item_chars
        self.instructions = instructions
        self.system_prompt = system_prompt
        self.temperature = temperature

    def __repr__(self) -> str:
        return f"SummarizingCompactor(max_summary_tokens={self.max_summary_tokens})"

    def min_room(self, counter: TokenCounter) -> int:
        """The least room, in tokens, a summary needs: ``min_summary_tokens``, and never less than the
        summary message with a one-character summary (its header and framing) under ``counter``."""
        return max(self.min_summary_tokens, message_tokens(counter, Message.user(SUMMARY_HEADER + "…")))

    def start(self, messages: Sequence[Message], budget: ContextBudget) -> SummaryPlan | None:
        """Plan a summary of ``messages`` down to ``budget.target_tokens``.

        Returns ``None`` when there is nothing to summarize (the conversation fits the target, or only the
        leading system messages, ``Durable`` results and the protected tail are left). Raises
        :class:`~loopctl.errors.CompactionOverflow` when those kept parts plus :meth:`min_room` exceed the
        target.
        """
        counter = budget.counter
        if not messages or counter.count(messages) <= budget.target_tokens:
            return None
        layout = scan(messages)
        head = 0
        while head < len(messages) and messages[head].role is Role.SYSTEM:
            head += 1

        def plan(reserve: int) -> KeepPlan:
            return plan_keep(
                messages,
                counter=counter,
                target=budget.target_tokens,
                protected_tail=budget.protected_tail,
                head_end=head,
                keep_thinking=False,
                reserve=reserve,
                what="summary",
                layout=layout,
            )

        floor = self.min_room(counter)
        try:
            kept = plan(max(self.max_summary_tokens, floor))
        except CompactionOverflow:
            kept = plan(floor)
        if not kept.dropped:
            return None
        room = max(floor, min(self.max_summary_tokens, kept.room))
        older = messages[kept.head_end : kept.keep_from]
        text = transcript(older, layout, offset=kept.head_end, item_chars=self.item_chars, messages=messages)
        request = ModelRequest(
            messages=[Message.user(f"{self.instructions}\n\n<transcript>\n{text}\n</transcript>")],
            system=self.system_prompt,
            max_tokens=room,
            temperature=self.temperature,
        )
        return SummaryPlan(request, tuple(messages), tuple(older), room, kept.tokens_before, kept, counter)


def transcript(
    older: Sequence[Message],
    layout: Layout,
    *,
    offset: int = 0,
    item_chars: int = TRANSCRIPT_ITEM_CHARS,
    messages: Sequence[Message] | None = None,
) -> str:
    """The transcript of ``older`` (which starts at index ``offset`` of ``messages``, the conversation
    ``layout`` describes): one line per part, e.g. ``User: ...``, ``Assistant called read_file({...})``,
    ``Result of read_file({...}): ...``. Thinking is left out; ``Requery`` results are
    :data:`REQUERY_OMITTED`; ``Durable`` results are complete; any other text is cut in the middle to
    ``item_chars`` characters (never inside a character)."""
    messages = messages if messages is not None else older
    lines: list[str] = []
    for i, m in enumerate(older):
        speaker = {Role.USER: "User", Role.ASSISTANT: "Assistant", Role.SYSTEM: "System"}[m.role]
        calls = calls_of(messages, layout, i + offset) if any(isinstance(p, ToolResultPart) for p in m.parts) else {}
        for part in m.parts:
            if isinstance(part, TextPart):
                lines.append(f"{speaker}: {clip_middle(part.text, item_chars)}")
            elif isinstance(part, ImagePart):
                lines.append(f"{speaker}: [image: {part.source.media_type}]")
            elif isinstance(part, ToolCallPart):
                lines.append(f"Assistant called {describe_call(part.name, part.input, item_chars)}")
            elif isinstance(part, ToolResultPart):
                call = calls.get(part.call_id)
                name = describe_call(call.name, call.input) if call else f"{part.name or 'tool'}(…)"
                status = "Error from" if part.is_error else "Result of"
                note = ""
                if part.retention is Retention.REQUERY:
                    body = REQUERY_OMITTED.format(call=name)
                elif part.retention is Retention.DURABLE:
                    body = _content_text(part.output, None)
                    note = " (durable, kept verbatim after the summary)"
                else:
                    body = _content_text(part.output, item_chars)
                lines.append(f"{status} {name}{note}: {body}")
    return "\n".join(lines)


def _content_text(output: ToolContent, limit: int | None) -> str:
    chunks = [p.text if isinstance(p, TextPart) else f"[image: {p.source.media_type}]" for p in output.parts]
    text = "\n".join(chunks)
    return text if limit is None else clip_middle(text, limit)
