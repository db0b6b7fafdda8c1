"""AG-UI (the Agent-User Interaction protocol, https://docs.ag-ui.com): an agent's runs as AG-UI events.

:class:`AGUIApp` (``agent.to_ag_ui()``) is an ASGI app that answers a POST of a ``RunAgentInput`` at its root
path with the run's events as Server-Sent Events, typed and encoded by the protocol's own Python package
(``ag-ui-protocol``: ``ag_ui.core``, ``ag_ui.encoder``); the tests read them with ``@ag-ui/client``, which
checks their order. The mapping:

==============================================  ================================================================
loopctl event                                   AG-UI events
==============================================  ================================================================
the request                                     ``RUN_STARTED`` (``threadId``, ``runId``, ``input``)
``TurnStarted``/``TurnFinished``                ``STEP_STARTED``/``STEP_FINISHED`` (``"turn N"``)
text streamed                                   ``TEXT_MESSAGE_START``/``_CONTENT``/``_END``
thinking streamed                               ``REASONING_START``, ``REASONING_MESSAGE_START``/``_CONTENT``/
                                                ``_END``, ``REASONING_END``
a tool call streamed                            ``TOOL_CALL_START``, ``TOOL_CALL_ARGS``, ``TOOL_CALL_END``
``ToolCallFinished``                            ``TOOL_CALL_RESULT`` (the result's text; an error result is
                                                the text the model reads)
``ReplyDiscarded`` (the call is sent again)     ``MESSAGES_SNAPSHOT``: the conversation without what the failed
                                                attempt streamed, which the client's messages drop
a sub-agent's run (``SubAgentEvent``)           ``SUBAGENT_STARTED``/``_FINISHED`` around its text and tool
                                                events, each with ``subagentRunId``
the run paused on calls that need approval      ``RUN_FINISHED`` with outcome ``interrupt``: one interrupt per
                                                call (``id``: its approval id, ``toolCallId``, ``reason``
                                                ``"tool_approval"``, the tool and its whole input in
                                                ``metadata``, the answer's JSON Schema)
the run's end                                   ``RUN_FINISHED`` (``result``: the output; ``usage``), outcome
                                                ``cancelled`` for a cancelled run; ``RUN_ERROR`` (``message``,
                                                ``code``: the outcome) for a failed one
==============================================  ================================================================

The thread id is the session id: with a session store the conversation is that stored session; without one
the last ``keep`` conversations are held in memory. A thread the server does not hold yet starts from the
messages the client sent before its last one. A request whose last message is the user's runs it; a request
with ``resume`` entries continues the paused run: ``{"interruptId": <id>, "status": "resolved", "payload":
{"approved": true}}`` (or ``{"approved": false, "reason": ...}``, or ``{"input": {...}}`` to run the call
with another input); ``"cancelled"`` denies the call. The input's ``tools`` (the front end's) are offered to the
model for the run (:class:`FrontendTool`): a call of one ends the run with the call pending (outcome ``success``,
``pendingToolCallIds``), and the client's ``tool`` message in the next request is its result. ``state``,
``context`` and ``forwardedProps`` are given to a ``deps`` callable as the request's parsed input
(``deps(request, input)``). Shared state: when the deps have a ``state`` attribute (say, the input's ``state``
put there by that callable), a tool that changes ``ctx.deps.state`` sends the client a ``STATE_SNAPSHOT`` after
its ``TOOL_CALL_RESULT``, and the run's end one if the state differs from the input's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import orjson

from loopctl._lazy import LazyModule
from loopctl.engine.events import (
    LoopEvent,
    ModelCallFailed,
    ModelStreamEvent,
    ReplyDiscarded,
    RunAborted,
    RunFinished,
    RunStarted,
    SubAgentEvent,
    ToolCallFinished,
    TurnFinished,
    TurnStarted,
)
from loopctl.engine.permission import Approval, Approve, Deny
from loopctl.message import ImagePart, Message, MessagePart, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.server_limits import BODY_TIMEOUT
from loopctl.stream import PartFinished, PartStarted, TextDelta, ThinkingDelta, ToolCallDelta
from loopctl.ui._common import (
    MAX_BODY_BYTES,
    SSE_HEADERS,
    Attempt,
    BadRequest,
    BodyTooLarge,
    BodyTooSlow,
    Conversations,
    OpenPart,
    PostApp,
    RunRequest,
    check_body_limits,
    decision_from_payload,
    image_from_data_url,
    json_safe,
    read_body,
    require_web_extra,
    tool_output_text,
    user_message,
    whole_parts,
)

if TYPE_CHECKING:
    import ag_ui.core
    import starlette.requests
    import starlette.responses

    import loopctl.agent
    import loopctl.engine
    import loopctl.store
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    ag_ui = LazyModule("ag_ui")
    loopctl = LazyModule("loopctl")
    starlette = LazyModule("starlette")


__all__ = ["APPROVAL_SCHEMA", "AGUIApp", "AGUIEvents", "FrontendTool", "read_run_input"]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the call (true) or not (false)."},
        "reason": {"type": "string", "description": "For a denied call: what the model reads."},
        "input": {"type": "object", "description": "Run the call with this input instead of the model's."},
    },
}
"""The JSON Schema of an answer to an approval interrupt (its ``responseSchema``)."""


_CLIENT_RESULTS: ContextVar[Mapping[str, str] | None] = ContextVar("loopctl_agui_client_results", default=None)


class FrontendTool:
    """A tool the front end declares (``RunAgentInput.tools``): the model may call it, and the call waits for
    the client, which runs it: the run ends with the call pending (``RUN_FINISHED``, ``pendingToolCallIds``),
    and the client's next request sends its result as a ``tool`` message, which is the call's result.
    ``name``, ``description`` and ``parameters`` (a JSON Schema; none: no arguments) are the front end's."""

    requires_approval = True

    def __init__(self, name: str, description: str, parameters: Any) -> None:
        self.name = name
        self.description = description
        self.input_schema: Mapping[str, Any] = (
            parameters if isinstance(parameters, Mapping) else {"type": "object", "properties": {}}
        )

    async def call(self, input: Any, context: Any) -> Any:  # noqa: A002 - the Tool protocol's name
        """The result the front end sent for this call (``context.call_id``) in the request that continues the
        run; an error result when it sent none. ``input`` is the model's (the front end ran it)."""
        from loopctl.tool import ToolOutput

        results = _CLIENT_RESULTS.get() or {}
        if context.call_id in results:
            return results[context.call_id]
        return ToolOutput(f"the front end sent no result for {self.name}", is_error=True)


class AGUIEvents:
    """Turns one run's :data:`~loopctl.engine.events.LoopEvent` s into AG-UI events (``ag_ui.core`` models).

    ``feed(event)`` returns the events for ``event``; :meth:`start` the first, :meth:`end` those that close
    the run, :meth:`fail` those of a run that raised. ``thread_id`` and ``run_id`` name the run in its
    events; ``input`` is the request (echoed in ``RUN_STARTED``; its messages start the snapshot a discarded
    reply sends; its ``tools`` are the front end's)."""

    def __init__(self, thread_id: str, run_id: str, input: ag_ui.core.RunAgentInput | None = None) -> None:  # noqa: A002
        from ag_ui import core

        self.core = core
        self.thread_id = thread_id
        self.run_id = run_id
        self.input = input
        self._attempt: Attempt | None = None
        self._attempts = 0
        self._step: str | None = None
        self._committed: list[Any] = []  # this run's messages, as AG-UI messages (for a snapshot)
        self._sub: dict[str, AGUIEvents] = {}  # a sub-agent's translator, by its subagent run id
        self.client_answered: set[str] = set()  # calls whose result the client sent (not echoed back to it)
        self.frontend_tools: frozenset[str] = frozenset(t.name for t in (input.tools or [])) if input else frozenset()
        self.subagent_run_id: str | None = None
        self._started_calls: set[str] = set()  # the tool calls this stream announced
        self._finished = False

    def _ev(self, kind: str, /, **fields: Any) -> Any:
        if self.subagent_run_id is not None and kind not in ("RunStartedEvent", "RunFinishedEvent", "RunErrorEvent"):
            fields.setdefault("subagent_run_id", self.subagent_run_id)
        if kind == "ToolCallStartEvent":
            self._started_calls.add(fields["tool_call_id"])
        return getattr(self.core, kind)(timestamp=time.time_ns() // 1_000_000, **fields)

    # --- events ---------------------------------------------------------------------------------------------

    def start(self) -> list[ag_ui.core.BaseEvent]:
        """``RUN_STARTED``."""
        return [self._ev("RunStartedEvent", thread_id=self.thread_id, run_id=self.run_id, input=self.input)]

    def feed(self, event: LoopEvent) -> list[ag_ui.core.BaseEvent]:
        """The AG-UI events for ``event`` (often none)."""
        if isinstance(event, ModelStreamEvent):
            return self._stream_event(event)
        if isinstance(event, TurnStarted):
            out = self._close_step()
            self._attempts += 1
            self._attempt = Attempt(self._attempts)
            self._step = f"turn {event.turn}"
            return [*out, self._ev("StepStartedEvent", step_name=self._step)]
        if isinstance(event, ReplyDiscarded):
            out = self._close_open()
            self._attempts += 1
            self._attempt = Attempt(self._attempts)
            return [*out, self._snapshot()]
        if isinstance(event, TurnFinished):
            return self._turn_finished(event)
        if isinstance(event, ModelCallFailed):
            return self._close_open()
        if isinstance(event, ToolCallFinished):
            if event.call.id in self.client_answered:  # the front end's own result: it has it already
                return []
            return self._tool_finished(event.call, event.result)
        if isinstance(event, SubAgentEvent):
            return self._sub_agent(event)
        return []

    def end(self, run: Any) -> list[ag_ui.core.BaseEvent]:
        """The events after the run ended with ``run`` (a :class:`~loopctl.engine.Run`)."""
        if self._finished:
            return []
        self._finished = True
        out = self._close_step()
        for sub_id in list(self._sub):
            out.append(self._ev("SubagentFinishedEvent", subagent_run_id=sub_id))
            del self._sub[sub_id]
        kind = run.outcome.kind.value
        usage = [
            self.core.TokenUsage(
                input_tokens=run.usage.input_tokens,
                output_tokens=run.usage.output_tokens,
                total_tokens=run.usage.total_tokens,
                cached_input_tokens=run.usage.cache_read_tokens,
                reasoning_tokens=run.usage.reasoning_tokens,
            )
        ]
        if kind == "awaiting_approval":
            client = [p for p in run.pending_approvals if not p.via and p.name in self.frontend_tools]
            asked = [p for p in run.pending_approvals if p not in client]
            if not asked:  # only calls of the front end's tools: a completed run the client answers
                outcome: Any = self.core.RunFinishedSuccessOutcome(pending_tool_call_ids=[p.call.id for p in client])
                return [
                    *out,
                    self._ev(
                        "RunFinishedEvent", thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=usage
                    ),
                ]
            interrupts = [
                self.core.Interrupt(
                    id=p.id,
                    reason="tool_approval",
                    message=f"Allow {p.name}{f' ({p.reason})' if p.reason else ''}?",
                    tool_call_id=p.via[0] if p.via else p.call.id,
                    response_schema=APPROVAL_SCHEMA,
                    metadata={"toolName": p.name, "input": p.input, "agent": p.agent or None, "callId": p.call.id},
                )
                for p in asked
            ]
            outcome = self.core.RunFinishedInterruptOutcome(interrupts=interrupts)
            return [
                *out,
                self._ev(
                    "RunFinishedEvent", thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=usage
                ),
            ]
        if kind == "cancelled":
            outcome = self.core.RunFinishedCancelledOutcome()
            return [
                *out,
                self._ev(
                    "RunFinishedEvent", thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=usage
                ),
            ]
        if kind in ("completed", "max_tokens", "refused"):
            result = run.output if kind == "completed" else run.text
            return [
                *out,
                self._ev(
                    "RunFinishedEvent",
                    thread_id=self.thread_id,
                    run_id=self.run_id,
                    result=json_safe(result),
                    usage=usage,
                ),
            ]
        message = run.outcome.error or kind
        return [*out, self._ev("RunErrorEvent", message=message, code=kind, usage=usage)]

    def fail(self, error: BaseException) -> list[ag_ui.core.BaseEvent]:
        """The events that end a run that raised ``error`` instead of returning."""
        if self._finished:
            return []
        self._finished = True
        return [self._ev("RunErrorEvent", message=f"{type(error).__name__}: {error}", code="error")]

    # --- helpers --------------------------------------------------------------------------------------------

    def _part_id(self, index: int) -> str:
        prefix = f"{self.subagent_run_id}-" if self.subagent_run_id else ""
        return f"{prefix}{self.run_id}-{self._attempts}-{index}"

    def _parent_message(self) -> str | None:
        a = self._attempt
        if a is None:
            return None
        return next((p.id for p in a.parts.values() if p.kind == "text"), None)

    def _stream_event(self, event: ModelStreamEvent) -> list[ag_ui.core.BaseEvent]:
        e = event.event
        a = self._attempt
        if a is None:
            return []
        if isinstance(e, PartStarted):
            p = e.part
            if isinstance(p, ToolCallPart):
                a.parts[e.index] = OpenPart(p.id, "tool", p.name)
                a.open.add(e.index)
                return [
                    self._ev(
                        "ToolCallStartEvent",
                        tool_call_id=p.id,
                        tool_call_name=p.name,
                        parent_message_id=self._parent_message(),
                    )
                ]
            text = getattr(p, "text", "") or ""
            if p.is_text():
                return self._open_text(a, e.index, text)
            if p.is_thinking():
                return self._open_reasoning(a, e.index, text)
            return []
        if isinstance(e, TextDelta):
            part = a.parts.get(e.index)
            if part is None:
                return self._open_text(a, e.index, e.text)
            return [self._ev("TextMessageContentEvent", message_id=part.id, delta=e.text)] if e.text else []
        if isinstance(e, ThinkingDelta):
            part = a.parts.get(e.index)
            if part is None:
                return self._open_reasoning(a, e.index, e.text)
            return [self._ev("ReasoningMessageContentEvent", message_id=part.id, delta=e.text)] if e.text else []
        if isinstance(e, ToolCallDelta):
            part = a.parts.get(e.index)
            if part is None or part.kind != "tool" or not e.arguments:
                return []
            a.args.add(e.index)
            return [self._ev("ToolCallArgsEvent", tool_call_id=part.id, delta=e.arguments)]
        if isinstance(e, PartFinished):
            if e.index not in a.open or a.parts[e.index].kind == "tool":  # a call ends with its whole input
                return []
            a.open.discard(e.index)
            return self._closing(a.parts[e.index])
        return []

    def _open_text(self, a: Attempt, index: int, text: str) -> list[ag_ui.core.BaseEvent]:
        pid = self._part_id(index)
        a.parts[index] = OpenPart(pid, "text")
        a.open.add(index)
        out = [self._ev("TextMessageStartEvent", message_id=pid, role="assistant")]
        if text:
            out.append(self._ev("TextMessageContentEvent", message_id=pid, delta=text))
        return out

    def _open_reasoning(self, a: Attempt, index: int, text: str) -> list[ag_ui.core.BaseEvent]:
        pid = self._part_id(index)
        a.parts[index] = OpenPart(pid, "reasoning")
        a.open.add(index)
        out = [
            self._ev("ReasoningStartEvent", message_id=pid),
            self._ev("ReasoningMessageStartEvent", message_id=pid, role="reasoning"),
        ]
        if text:
            out.append(self._ev("ReasoningMessageContentEvent", message_id=pid, delta=text))
        return out

    def _closing(self, part: OpenPart) -> list[ag_ui.core.BaseEvent]:
        if part.kind == "text":
            return [self._ev("TextMessageEndEvent", message_id=part.id)]
        if part.kind == "reasoning":
            return [
                self._ev("ReasoningMessageEndEvent", message_id=part.id),
                self._ev("ReasoningEndEvent", message_id=part.id),
            ]
        return [self._ev("ToolCallEndEvent", tool_call_id=part.id)]

    def _close_open(self, *, keep_tools: bool = False) -> list[ag_ui.core.BaseEvent]:
        a = self._attempt
        if a is None:
            return []
        out: list[ag_ui.core.BaseEvent] = []
        for i in sorted(a.open):
            if keep_tools and a.parts[i].kind == "tool":
                continue
            out += self._closing(a.parts[i])
            a.open.discard(i)
        return out

    def _close_step(self) -> list[ag_ui.core.BaseEvent]:
        out = self._close_open()
        if self._step is not None:
            out.append(self._ev("StepFinishedEvent", step_name=self._step))
            self._step = None
        return out

    def _turn_finished(self, event: TurnFinished) -> list[ag_ui.core.BaseEvent]:
        a = self._attempt or Attempt(0)
        out = self._close_open(keep_tools=True)
        text_id: str | None = None
        texts: list[str] = []
        calls: list[Any] = []
        for i, p in whole_parts(event.message):
            streamed = a.parts.get(i)
            if isinstance(p, ToolCallPart):
                args = orjson.dumps(p.input).decode()
                calls.append(self.core.ToolCall(id=p.id, function=self.core.FunctionCall(name=p.name, arguments=args)))
                if streamed is not None and i not in a.args:  # streamed without argument fragments
                    out += [self._ev("ToolCallArgsEvent", tool_call_id=p.id, delta=args)]
                if streamed is not None:
                    out += [self._ev("ToolCallEndEvent", tool_call_id=p.id)]
                    a.open.discard(i)
                else:  # not streamed: the whole call at once
                    out += [
                        self._ev(
                            "ToolCallStartEvent",
                            tool_call_id=p.id,
                            tool_call_name=p.name,
                            parent_message_id=text_id or self._parent_message(),
                        ),
                        self._ev("ToolCallArgsEvent", tool_call_id=p.id, delta=args),
                        self._ev("ToolCallEndEvent", tool_call_id=p.id),
                    ]
            elif p.is_text():
                text = getattr(p, "text", "")
                texts.append(text)
                if streamed is None:
                    pid = self._part_id(i)
                    out += [
                        self._ev("TextMessageStartEvent", message_id=pid, role="assistant"),
                        self._ev("TextMessageContentEvent", message_id=pid, delta=text),
                        self._ev("TextMessageEndEvent", message_id=pid),
                    ]
                    text_id = text_id or pid
                else:
                    text_id = text_id or streamed.id
            elif p.is_thinking() and streamed is None:
                pid = self._part_id(i)
                out += [
                    *self._open_reasoning(Attempt(0), i, getattr(p, "text", "")),
                    self._ev("ReasoningMessageEndEvent", message_id=pid),
                    self._ev("ReasoningEndEvent", message_id=pid),
                ]
        self._committed.append(
            self.core.AssistantMessage(
                id=text_id or f"{self.run_id}-{self._attempts}",
                role="assistant",
                content="\n".join(texts) or None,
                tool_calls=calls or None,
            )
        )
        return out

    def _tool_finished(self, call: ToolCallPart, result: ToolResultPart) -> list[ag_ui.core.BaseEvent]:
        out: list[ag_ui.core.BaseEvent] = []
        if call.id not in self._started_calls:  # a call of the run this one continues: announced again first
            out = [
                self._ev("ToolCallStartEvent", tool_call_id=call.id, tool_call_name=call.name),
                self._ev("ToolCallArgsEvent", tool_call_id=call.id, delta=orjson.dumps(call.input).decode()),
                self._ev("ToolCallEndEvent", tool_call_id=call.id),
            ]
        content = tool_output_text(result)
        mid = f"result-{call.id}"
        self._committed.append(
            self.core.ToolMessage(
                id=mid, role="tool", tool_call_id=call.id, content=content, error=content if result.is_error else None
            )
        )
        return [
            *out,
            self._ev("ToolCallResultEvent", message_id=mid, tool_call_id=call.id, content=content, role="tool"),
        ]

    def _snapshot(self) -> ag_ui.core.BaseEvent:
        before = list(self.input.messages) if self.input is not None else []
        return self.core.MessagesSnapshotEvent(messages=[*before, *self._committed])

    def _sub_agent(self, event: SubAgentEvent) -> list[ag_ui.core.BaseEvent]:
        sub_id = f"{event.call_id}@{event.agent}"
        inner = event.event
        translator = self._sub.get(sub_id)
        out: list[ag_ui.core.BaseEvent] = []
        if translator is None:
            if isinstance(inner, RunFinished):
                return []
            translator = AGUIEvents(self.thread_id, self.run_id)
            translator.subagent_run_id = sub_id
            self._sub[sub_id] = translator
            out.append(
                self._ev(
                    "SubagentStartedEvent",
                    subagent_run_id=sub_id,
                    name=event.path[-1],
                    parent_tool_call_id=event.call_id,
                )
            )
        if isinstance(inner, RunStarted):
            return out
        if isinstance(inner, RunFinished):
            out += translator._close_step()
            del self._sub[sub_id]
            out.append(self._ev("SubagentFinishedEvent", subagent_run_id=sub_id))
            return out
        if isinstance(inner, ReplyDiscarded):  # a sub-agent's retried call: its open parts are closed
            out += translator._close_open()
            translator._attempts += 1
            translator._attempt = Attempt(translator._attempts)
            return out
        return out + translator.feed(inner)


# --- the request -------------------------------------------------------------------------------------------


def read_run_input(body: Any) -> tuple[ag_ui.core.RunAgentInput, RunRequest]:
    """The parsed ``RunAgentInput`` and what to run. Raises :class:`~loopctl.ui._common.BadRequest` saying
    what is wrong (the protocol package's validation message for a body that is no ``RunAgentInput``)."""
    from ag_ui.core import RunAgentInput
    from pydantic import ValidationError

    try:
        run_input = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        raise BadRequest(f"the body is not a RunAgentInput: {exc.errors(include_url=False)[:3]}") from None
    approvals: dict[str, Approval] = {}
    for i, entry in enumerate(run_input.resume or []):
        where = f"resume[{i}]"
        if entry.status == "cancelled":
            approvals[entry.interrupt_id] = Deny("The user cancelled this tool call.")
        else:
            approvals[entry.interrupt_id] = decision_from_payload(entry.payload, f"{where}.payload")
    messages = run_input.messages
    first_result = len(messages)
    while first_result > 0 and messages[first_result - 1].role == "tool":
        first_result -= 1
    from ag_ui.core import ToolMessage

    results = {m.tool_call_id: _text(m.content) for m in messages[first_result:] if isinstance(m, ToolMessage)}
    if approvals or results:  # a paused run continued: decisions, and the front end's tool results
        for call_id in results:
            approvals.setdefault(call_id, Approve())
        return run_input, RunRequest(None, approvals, client_results=results)
    if not messages or messages[-1].role != "user":
        raise BadRequest(
            "the last message must be the user's (or tool messages answering the front end's tool calls, or "
            "resume entries answering interrupts)"
        )
    prompt = _user(messages[-1], len(messages) - 1)
    return run_input, RunRequest(prompt, seed=history_from_agui(messages[:-1]))


def _user(message: Any, index: int) -> Message:
    content = message.content
    if isinstance(content, str):
        return user_message([content], [])
    texts: list[str] = []
    images: list[ImagePart] = []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if part.type == "text":
            texts.append(part.text)
        elif part.type == "image":
            source = part.source
            if source.type == "data":
                images.append(image_from_data_url(f"data:{source.mime_type};base64,{source.value}", where))
            else:
                raise BadRequest(f"{where}: only images given as data are accepted (the server fetches no URL)")
    return user_message(texts, images)


def history_from_agui(messages: Sequence[Any]) -> list[Message]:
    """loopctl messages from AG-UI messages (a thread the server does not hold yet): user text and images,
    assistant text and tool calls, tool results. System, developer, reasoning and activity messages are left
    out (the agent has its own instructions; a provider reads only its own signed reasoning)."""
    out: list[Message] = []
    results: list[MessagePart] = []
    for i, m in enumerate(messages):
        if m.role == "tool":
            results.append(ToolResultPart(call_id=m.tool_call_id, output=_text(m.content), is_error=bool(m.error)))
            continue
        if results:
            out.append(Message.new(Role.USER, results))
            results = []
        if m.role == "user":
            out.append(_user(m, i))
        elif m.role == "assistant":
            parts: list[MessagePart] = [TextPart(text=m.content)] if m.content else []
            for call in m.tool_calls or []:
                try:
                    args = orjson.loads(call.function.arguments or "{}")
                except orjson.JSONDecodeError:
                    raise BadRequest(f"messages[{i}]: the arguments of tool call {call.id!r} are not JSON") from None
                parts.append(ToolCallPart(id=call.id, name=call.function.name, input=args))
            if parts:
                out.append(Message.new(Role.ASSISTANT, parts))
    if results:
        out.append(Message.new(Role.USER, results))
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(getattr(p, "text", "") for p in content)


# --- the app -----------------------------------------------------------------------------------------------


class AGUIApp(PostApp):
    """An ASGI app serving ``agent`` over AG-UI (see the module docstring): POST ``/`` with a
    ``RunAgentInput`` (at any path: ``app.add_route("/agent", agent.to_ag_ui(), methods=["POST"])`` in
    Starlette or FastAPI, ``app.mount(...)``, or served alone).

    ``store``: the session store behind the thread ids (default: conversations in memory, the last
    ``keep``). ``deps``: the runs' deps, or a callable ``deps(request, run_input)`` returning them (the
    Starlette ``Request`` and the parsed ``RunAgentInput``: its ``state``, ``context``, ``forwarded_props``).
    ``config``: the runs' :class:`~loopctl.engine.RunConfig`. ``max_body_bytes``: the largest request body
    read (default 32 MiB); a larger one is answered 413 before it is read whole. ``body_timeout``: seconds a
    body may take, plus one per 500 bytes received (default 20); a slower one is answered 408."""

    def __init__(
        self,
        agent: loopctl.agent.Agent[Any, Any],
        *,
        store: loopctl.store.SessionStore | None = None,
        deps: Any = None,
        config: loopctl.engine.RunConfig | None = None,
        keep: int = 1000,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout: float = BODY_TIMEOUT,
    ) -> None:
        require_web_extra("an AG-UI app (agent.to_ag_ui())", "starlette", "ag_ui")
        check_body_limits("agent.to_ag_ui()", max_body_bytes, body_timeout)
        from ag_ui.encoder import EventEncoder

        self.agent = agent
        self.conversations = Conversations(agent, store, keep)
        self.deps = deps
        self.config = config
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self._encoder = EventEncoder()
        self._with_tools: dict[
            tuple[Any, ...], loopctl.agent.Agent[Any, Any]
        ] = {}  # the agent with a front end's tools

    async def handle(self, request: starlette.requests.Request) -> starlette.responses.Response:
        """Answer one POST: ``request`` is a Starlette (or FastAPI) ``Request``; the response is the run's stream,
        or a JSON ``{"error": ...}`` with status 400 (a body that is no request of the protocol) or 409 (the
        conversation is running a run already)."""
        from starlette.responses import JSONResponse, StreamingResponse

        from loopctl.errors import SessionBusy

        try:
            body = orjson.loads(await read_body(request, self.max_body_bytes, self.body_timeout))
        except BodyTooLarge as exc:
            return JSONResponse({"error": str(exc)}, status_code=413)
        except BodyTooSlow as exc:
            return JSONResponse({"error": str(exc)}, status_code=408)
        except orjson.JSONDecodeError as exc:
            return JSONResponse({"error": f"the body is not JSON ({exc})"}, status_code=400)
        try:
            run_input, wanted = read_run_input(body)
            agent = self._agent_for(run_input)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        # Before the thread is loaded or made from the client's history: deps may refuse the id (HTTPException).
        deps = self.deps(request, run_input) if callable(self.deps) else self.deps
        try:
            conv = await self.conversations.get(run_input.thread_id, lambda: wanted.seed, agent)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except SessionBusy as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        translator = AGUIEvents(run_input.thread_id, run_input.run_id or str(uuid.uuid4()), run_input)
        translator.client_answered = set(wanted.client_results)
        events = self._events(conv, wanted, deps, translator)
        token = _CLIENT_RESULTS.set(wanted.client_results)  # read by the front end's tools, in the run's task
        try:
            first = await anext(events)
        except SessionBusy as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        finally:
            _CLIENT_RESULTS.reset(token)
        return StreamingResponse(_prepend(first, events), media_type="text/event-stream", headers=SSE_HEADERS)

    def _agent_for(self, run_input: ag_ui.core.RunAgentInput) -> loopctl.agent.Agent[Any, Any]:
        """The agent of this request: the app's, with the front end's tools (``run_input.tools``) added."""
        if not run_input.tools:
            return self.agent
        key = tuple(
            (t.name, t.description, orjson.dumps(t.parameters, option=orjson.OPT_SORT_KEYS)) for t in run_input.tools
        )
        cached = self._with_tools.get(key)
        if cached is not None:
            return cached
        taken = {getattr(t, "name", None) for t in self.agent.tool_list}
        clash = sorted(t.name for t in run_input.tools if t.name in taken)
        if clash:
            raise BadRequest(f"the front end's tools {clash} have the names of the agent's own tools")
        frontend = [FrontendTool(t.name, t.description, t.parameters) for t in run_input.tools]
        try:
            made = self.agent.replace(tools=[*self.agent.tools, *frontend])
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"the front end's tools cannot be used: {exc}") from None
        if len(self._with_tools) >= 64:
            self._with_tools.pop(next(iter(self._with_tools)))
        self._with_tools[key] = made
        return made

    async def _events(self, conv: Any, wanted: RunRequest, deps: Any, translator: AGUIEvents) -> AsyncIterator[bytes]:
        from loopctl.errors import ApprovalError

        encode = self._encoder.encode
        state = _SharedState(deps, translator)
        sent = False
        try:
            async with conv.stream(
                wanted.prompt, deps=deps, approvals=wanted.approvals or None, config=self.config
            ) as stream:
                iterator = stream.__aiter__()
                try:
                    first: LoopEvent | None = await anext(iterator)
                except StopAsyncIteration:
                    first = None
                except ApprovalError as exc:
                    raise BadRequest(str(exc)) from None
                sent = True
                yield "".join(encode(e) for e in translator.start()).encode()
                try:
                    event = first
                    while event is not None:
                        out = translator.feed(event)
                        if isinstance(event, (ToolCallFinished, RunFinished)):
                            out += state.changed()
                        if isinstance(event, RunFinished):
                            out += translator.end(event.run)
                        elif isinstance(event, RunAborted):
                            out += translator.fail(event.error)
                        if out:
                            yield "".join(encode(e) for e in out).encode()
                        event = await anext(iterator, None)
                except Exception as exc:
                    tail = translator.fail(exc)
                    if tail:
                        yield "".join(encode(e) for e in tail).encode()
        except Exception:
            if not sent:
                raise


class _SharedState:
    """AG-UI's shared state: when the run's deps have a ``state`` attribute (the input's ``state``, which a tool
    may change through ``ctx.deps.state``), a ``STATE_SNAPSHOT`` of it after each tool call that changed it, and
    at the run's end when it differs from what the client last saw."""

    def __init__(self, deps: Any, translator: AGUIEvents) -> None:
        self.deps = deps
        self.translator = translator
        self.active = hasattr(deps, "state")
        given = translator.input.state if translator.input is not None else None
        self.last = self._dump(json_safe(given)) if self.active else b""

    @staticmethod
    def _dump(value: Any) -> bytes:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)

    def changed(self) -> list[ag_ui.core.BaseEvent]:
        if not self.active:
            return []
        snapshot = json_safe(self.deps.state)
        dumped = self._dump(snapshot)
        if dumped == self.last:
            return []
        self.last = dumped
        return [self.translator._ev("StateSnapshotEvent", snapshot=snapshot)]


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
