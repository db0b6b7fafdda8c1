"""The Vercel AI SDK's UI message stream protocol: an agent's runs for ``useChat`` front ends.

:class:`AISDKApp` (``agent.to_ai_sdk()``) is an ASGI app that answers a POST at its root path, whose body is
what the AI SDK's ``DefaultChatTransport`` sends (``{"id": <chat id>, "messages": [UIMessage...], "trigger":
"submit-message", ...}``), with the run as a UI message stream: Server-Sent Events, one JSON chunk each,
ending with ``data: [DONE]``, under the header ``x-vercel-ai-ui-message-stream: v1``. The chunks follow the
AI SDK's published protocol (https://ai-sdk.dev/docs/ai-sdk-ui/stream-protocol, "Data Stream Protocol";
checked in the tests by the ``ai`` package's own stream parser and ``Chat`` state):

==============================================  ================================================================
loopctl event                                   chunks
==============================================  ================================================================
``RunStarted``                                  ``start`` (``messageId``)
``TurnStarted`` (one model call)                ``start-step`` (the previous step's ``finish-step`` first)
text, thinking streamed                         ``text-start``/``-delta``/``-end``, ``reasoning-start``/...
a tool call streamed                            ``tool-input-start``, ``tool-input-delta``; its whole input as
                                                ``tool-input-available`` when the reply is complete
``ReplyDiscarded`` (the call is sent again)     ``reset-step``: the client drops what the attempt showed
``ToolCallFinished``                            ``tool-output-available`` (``output``: the result's text), or
                                                ``tool-output-error`` for an error result; images as ``file``
``ToolCallDeferred`` (needs approval)           ``tool-approval-request`` (``approvalId``: the call's approval
                                                id, ``"<call>"`` or ``"<parent call>/<call>"`` for a
                                                sub-agent's, whose ``toolCallId`` is the parent's call)
a call denied when the run goes on              ``tool-output-denied``
each turn's usage, cost, latency                ``data-loopctl-turn`` (transient: ``onData`` only)
the run's end                                   ``finish`` (``finishReason``; ``messageMetadata``: outcome,
                                                usage, cost, duration); a failed run: ``error`` first
==============================================  ================================================================

The chat id is the session id: with a session store the conversation is that stored session (loaded at each
request; a chat the store does not hold yet starts from the messages the client sent before its new one);
without one, the last ``keep`` conversations are held in memory. A request whose last message is the user's
runs it; one whose last message is the assistant's, with tool parts in the ``approval-responded`` state
(``addToolApprovalResponse``), continues the paused run with those decisions (approved: the call runs;
denied: the model reads the reason). Errors before the run (a body that is not a chat request, a chat that is
running already) are answered with HTTP 400 or 409 and a JSON ``{"error": ...}``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
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
    SubAgentEvent,
    ToolCallDeferred,
    ToolCallFinished,
    ToolCallStarted,
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
    data_url,
    image_from_data_url,
    json_safe,
    read_body,
    require_web_extra,
    sse,
    tool_output_text,
    user_message,
    whole_parts,
)

if TYPE_CHECKING:
    import starlette.requests
    import starlette.responses

    import loopctl.agent
    import loopctl.engine
    import loopctl.store
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")
    starlette = LazyModule("starlette")


__all__ = ["UI_MESSAGE_STREAM_HEADERS", "AISDKApp", "UIMessageStream", "read_chat_request"]

UI_MESSAGE_STREAM_HEADERS = {
    "content-type": "text/event-stream",
    "x-vercel-ai-ui-message-stream": "v1",
    **SSE_HEADERS,
}
"""The response headers of a UI message stream (the protocol requires ``x-vercel-ai-ui-message-stream: v1``)."""

_FINISH = {
    "completed": "stop",
    "max_tokens": "length",
    "refused": "content-filter",
    "awaiting_approval": "tool-calls",
}


class UIMessageStream:
    """Turns one run's :data:`~loopctl.engine.events.LoopEvent` s into UI message stream chunks (JSON objects).

    ``feed(event)`` returns the chunks for ``event``; :meth:`end` those that close the stream after the run
    (``finish``), :meth:`fail` those of a run that raised. ``message_id`` is the assistant message's id;
    ``details``: send the transient ``data-loopctl-*`` parts too (each turn's usage and latency, each tool
    call's duration)."""

    def __init__(self, message_id: str | None = None, *, details: bool = True) -> None:
        self.message_id = message_id or f"msg_{secrets.token_hex(8)}"
        self.details = details
        self._attempt: Attempt | None = None
        self._attempts = 0
        self._step_open = False
        self._streamed_calls: set[str] = set()
        self._tool_started: dict[str, float] = {}
        self._finished = False

    # --- chunks ---------------------------------------------------------------------------------------------

    def start(self) -> list[dict[str, Any]]:
        """The stream's first chunk."""
        return [{"type": "start", "messageId": self.message_id}]

    def feed(self, event: LoopEvent) -> list[dict[str, Any]]:
        """The chunks for ``event`` (often none)."""
        if isinstance(event, ModelStreamEvent):
            return self._stream_event(event)
        if isinstance(event, TurnStarted):
            out = self._close_step()
            self._attempts += 1
            self._attempt = Attempt(self._attempts)
            self._step_open = True
            return [*out, {"type": "start-step"}]
        if isinstance(event, ReplyDiscarded):
            self._attempts += 1
            self._attempt = Attempt(self._attempts)
            return [{"type": "reset-step"}]
        if isinstance(event, TurnFinished):
            return self._turn_finished(event)
        if isinstance(event, ModelCallFailed):
            return self._close_open()
        if isinstance(event, ToolCallStarted):
            self._tool_started[event.call.id] = time.monotonic()
            if event.modified and self.details:
                return [self._data("tool-input", {"toolCallId": event.call.id, "input": event.input, "modified": True})]
            return []
        if isinstance(event, ToolCallFinished):
            return self._tool_finished(event.call, event.result, event.duration)
        if isinstance(event, ToolCallDeferred):
            return self._deferred(event.call, event.call.id, event.reason)
        if isinstance(event, SubAgentEvent):
            return self._sub_agent(event)
        return []

    def end(self, run: Any) -> list[dict[str, Any]]:
        """The chunks after the run ended with ``run`` (a :class:`~loopctl.engine.Run`)."""
        if self._finished:
            return []
        self._finished = True
        out = self._close_step()
        for r in getattr(run, "resumed_calls", ()):
            if not r.ran and r.call.id not in self._streamed_calls:
                out.append({"type": "tool-output-denied", "toolCallId": r.call.id})
        kind = run.outcome.kind.value
        if kind not in _FINISH and kind != "cancelled":
            out.append({"type": "error", "errorText": run.outcome.error or kind})
        meta: dict[str, Any] = {
            "outcome": kind,
            "usage": _usage(run.usage),
            "cost": None if run.cost is None else str(run.cost),
            "duration": round(run.duration, 4),
        }
        if run.pending_approvals:
            meta["pendingApprovals"] = [p.id for p in run.pending_approvals]
        if kind == "completed" and run.output is not None and not isinstance(run.output, str):
            meta["output"] = json_safe(run.output)
        if kind == "cancelled":
            out.append({"type": "abort", "reason": "cancelled"})
        out.append(
            {
                "type": "finish",
                "finishReason": _FINISH.get(kind, "error" if kind != "cancelled" else "other"),
                "messageMetadata": meta,
            }
        )
        return out

    def fail(self, error: BaseException) -> list[dict[str, Any]]:
        """The chunks that end a stream whose run raised ``error`` instead of returning."""
        if self._finished:
            return []
        self._finished = True
        return [
            *self._close_step(),
            {"type": "error", "errorText": f"{type(error).__name__}: {error}"},
            {"type": "finish", "finishReason": "error"},
        ]

    # --- helpers --------------------------------------------------------------------------------------------

    def _data(self, name: str, data: Any, *, transient: bool = True) -> dict[str, Any]:
        return {"type": f"data-loopctl-{name}", "data": data, "transient": transient}

    def _part_id(self, index: int) -> str:
        assert self._attempt is not None
        return f"{self.message_id}-{self._attempts}-{index}"

    def _stream_event(self, event: ModelStreamEvent) -> list[dict[str, Any]]:
        e = event.event
        a = self._attempt
        if a is None:
            return []
        if isinstance(e, PartStarted):
            p = e.part
            if isinstance(p, ToolCallPart):
                a.parts[e.index] = OpenPart(p.id, "tool", p.name)
                a.open.add(e.index)
                self._streamed_calls.add(p.id)
                return [{"type": "tool-input-start", "toolCallId": p.id, "toolName": p.name}]
            text = getattr(p, "text", "") or ""
            kind = "text" if p.is_text() else "reasoning" if p.is_thinking() else ""
            if not kind:
                return []
            pid = self._part_id(e.index)
            a.parts[e.index] = OpenPart(pid, kind)
            a.open.add(e.index)
            out: list[dict[str, Any]] = [{"type": f"{kind}-start", "id": pid}]
            if text:
                out.append({"type": f"{kind}-delta", "id": pid, "delta": text})
            return out
        if isinstance(e, (TextDelta, ThinkingDelta)):
            part = a.parts.get(e.index)
            if part is None:
                kind = "text" if isinstance(e, TextDelta) else "reasoning"
                part = a.parts[e.index] = OpenPart(self._part_id(e.index), kind)
                a.open.add(e.index)
                return [
                    {"type": f"{kind}-start", "id": part.id},
                    {"type": f"{kind}-delta", "id": part.id, "delta": e.text},
                ]
            return [{"type": f"{part.kind}-delta", "id": part.id, "delta": e.text}] if e.text else []
        if isinstance(e, ToolCallDelta):
            part = a.parts.get(e.index)
            if part is None or part.kind != "tool" or not e.arguments:
                return []
            return [{"type": "tool-input-delta", "toolCallId": part.id, "inputTextDelta": e.arguments}]
        if isinstance(e, PartFinished):
            part = a.parts.get(e.index)
            if part is None or e.index not in a.open or part.kind == "tool":
                return []
            a.open.discard(e.index)
            return [{"type": f"{part.kind}-end", "id": part.id}]
        return []

    def _close_open(self) -> list[dict[str, Any]]:
        a = self._attempt
        if a is None:
            return []
        out = []
        for i in sorted(a.open):
            part = a.parts[i]
            if part.kind != "tool":
                out.append({"type": f"{part.kind}-end", "id": part.id})
        a.open.clear()
        return out

    def _close_step(self) -> list[dict[str, Any]]:
        out = self._close_open()
        if self._step_open:
            out.append({"type": "finish-step"})
            self._step_open = False
        return out

    def _turn_finished(self, event: TurnFinished) -> list[dict[str, Any]]:
        a = self._attempt or Attempt(0)
        out = self._close_open()
        for i, p in whole_parts(event.message):
            if isinstance(p, ToolCallPart):
                if i not in a.parts:
                    out.append({"type": "tool-input-start", "toolCallId": p.id, "toolName": p.name})
                    self._streamed_calls.add(p.id)
                out.append({"type": "tool-input-available", "toolCallId": p.id, "toolName": p.name, "input": p.input})
            elif i not in a.parts:  # not streamed (stream=False): the whole part at once
                kind = "text" if p.is_text() else "reasoning"
                pid = self._part_id(i)
                out += [
                    {"type": f"{kind}-start", "id": pid},
                    {"type": f"{kind}-delta", "id": pid, "delta": getattr(p, "text", "")},
                    {"type": f"{kind}-end", "id": pid},
                ]
        if self.details:
            out.append(
                self._data(
                    "turn",
                    {
                        "turn": event.turn,
                        "usage": _usage(event.usage),
                        "duration": round(event.duration, 4),
                        "model": event.response.model if event.response is not None else None,
                        "stopReason": str(event.stop_reason.value),
                    },
                )
            )
        return out

    def _tool_finished(self, call: ToolCallPart, result: ToolResultPart, duration: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if call.id not in self._streamed_calls:  # a call of a continued run: its part is in an earlier message
            self._streamed_calls.add(call.id)
        if result.is_error:
            out.append({"type": "tool-output-error", "toolCallId": call.id, "errorText": tool_output_text(result)})
        else:
            out.append({"type": "tool-output-available", "toolCallId": call.id, "output": tool_output_text(result)})
        for image in result.output.images():
            out.append({"type": "file", "url": data_url(image), "mediaType": image.source.media_type})
        if self.details:
            out.append(self._data("tool", {"toolCallId": call.id, "duration": round(duration, 4)}))
        return out

    def _deferred(
        self, call: ToolCallPart, tool_call_id: str, reason: str | None, approval_id: str = ""
    ) -> list[dict[str, Any]]:
        chunk: dict[str, Any] = {
            "type": "tool-approval-request",
            "approvalId": approval_id or call.id,
            "toolCallId": tool_call_id,
        }
        if reason:
            chunk["reason"] = reason
        return [chunk]

    def _sub_agent(self, event: SubAgentEvent) -> list[dict[str, Any]]:
        inner = event.event
        if isinstance(inner, ToolCallDeferred):
            # The call awaited is the sub-agent's; the client's tool part is the parent's call that runs it.
            return self._deferred(inner.call, event.call_id, inner.reason, f"{event.call_id}/{inner.call.id}")
        if self.details and isinstance(inner, (ToolCallStarted, ToolCallFinished)):
            data: dict[str, Any] = {
                "agent": event.agent,
                "parent": event.call_id,
                "toolCallId": inner.call.id,
                "toolName": inner.call.name,
            }
            if isinstance(inner, ToolCallFinished):
                data.update(
                    output=tool_output_text(inner.result),
                    error=bool(inner.result.is_error),
                    duration=round(inner.duration, 4),
                )
            return [self._data("subagent-tool", data)]
        return []


def _usage(usage: Any) -> dict[str, int]:
    """The AI SDK's usage object (``LanguageModelUsage``: each count a number or absent); a count the provider
    did not report is left out, not sent as ``0`` or ``null`` (``loopctl.response.Usage``: unknown is not zero)."""
    counts = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cachedInputTokens": usage.cache_read_tokens,
        "reasoningTokens": usage.reasoning_tokens,
        "totalTokens": usage.total_tokens,
    }
    return {k: v for k, v in counts.items() if v is not None}


# --- the request -------------------------------------------------------------------------------------------


def read_chat_request(body: Any) -> tuple[str, RunRequest]:
    """The chat id and what to run, from a chat request body (``DefaultChatTransport``'s:
    ``{"id", "messages", "trigger"}``). Raises :class:`~loopctl.ui._common.BadRequest` saying what is wrong."""
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be a JSON object with the chat's id and messages")
    chat_id = body.get("id") or body.get("chatId")
    if not isinstance(chat_id, str) or not chat_id:
        raise BadRequest('"id" (the chat id) must be a non-empty string')
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest('"messages" must be a non-empty array of UI messages')
    trigger = body.get("trigger", "submit-message")
    if trigger not in ("submit-message", None):
        raise BadRequest(
            f"trigger {trigger!r} is not supported: the server keeps the conversation, so a reply is regenerated "
            "by forking the session before it (loopctl sessions fork --at)"
        )
    last = messages[-1]
    if not isinstance(last, Mapping):
        raise BadRequest("messages[-1] must be a UI message object")
    role = last.get("role")
    if role == "user":
        return chat_id, RunRequest(_user(last, len(messages) - 1), seed=history_from_ui_messages(messages[:-1]))
    if role == "assistant":
        approvals = _approvals(last, len(messages) - 1)
        if not approvals:
            raise BadRequest(
                "the last message is the assistant's and answers no approval request: send a user message, or "
                "tool parts in the approval-responded state"
            )
        mid = last.get("id")
        return chat_id, RunRequest(None, approvals, message_id=mid if isinstance(mid, str) and mid else None)
    raise BadRequest(f"messages[-1].role must be 'user' or 'assistant', got {role!r}")


def _parts(message: Mapping[str, Any], where: str) -> list[Any]:
    parts = message.get("parts")
    if parts is None and isinstance(message.get("content"), str):  # an AI SDK 4 message
        return [{"type": "text", "text": message["content"]}]
    if not isinstance(parts, list):
        raise BadRequest(f"{where}.parts must be an array")
    return parts


def _user(message: Mapping[str, Any], index: int) -> Message:
    where = f"messages[{index}]"
    texts: list[str] = []
    images: list[ImagePart] = []
    for j, part in enumerate(_parts(message, where)):
        if not isinstance(part, Mapping):
            raise BadRequest(f"{where}.parts[{j}] must be an object")
        if part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise BadRequest(f"{where}.parts[{j}].text must be a string")
            texts.append(text)
        elif part.get("type") == "file":
            url, media = part.get("url"), part.get("mediaType")
            if not isinstance(url, str) or not isinstance(media, str) or not media.startswith("image/"):
                raise BadRequest(f"{where}.parts[{j}]: only image files are accepted (mediaType image/...)")
            images.append(image_from_data_url(url, f"{where}.parts[{j}].url"))
    return user_message(texts, images)


def _approvals(message: Mapping[str, Any], index: int) -> dict[str, Approval]:
    out: dict[str, Approval] = {}
    for j, part in enumerate(_parts(message, f"messages[{index}]")):
        if not isinstance(part, Mapping) or part.get("state") != "approval-responded":
            continue
        approval = part.get("approval")
        if not isinstance(approval, Mapping) or not isinstance(approval.get("id"), str):
            raise BadRequest(f"messages[{index}].parts[{j}].approval must be an object with an id")
        if approval.get("approved") is True:
            out[approval["id"]] = Approve()
        else:
            reason = approval.get("reason")
            out[approval["id"]] = Deny(reason if isinstance(reason, str) else "")
    return out


def history_from_ui_messages(messages: Sequence[Any]) -> list[Message]:
    """loopctl messages from UI messages (a chat the server does not hold yet): user text and images;
    assistant text and the tool calls that have an output (each step a reply, then its results). Reasoning
    is left out (a provider reads only its own, signed). Raises :class:`BadRequest` for a malformed one."""
    out: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise BadRequest(f"messages[{i}] must be an object")
        if m.get("role") == "user":
            try:
                out.append(_user(m, i))
            except BadRequest as exc:
                if "holds no text" not in str(exc):
                    raise
        elif m.get("role") == "assistant":
            out.extend(_assistant(m, i))
    return out


def _assistant(message: Mapping[str, Any], index: int) -> list[Message]:
    steps: list[list[Any]] = [[]]
    for part in _parts(message, f"messages[{index}]"):
        if isinstance(part, Mapping) and part.get("type") == "step-start" and steps[-1]:
            steps.append([])
        elif isinstance(part, Mapping):
            steps[-1].append(part)
    out: list[Message] = []
    for step in steps:
        reply: list[MessagePart] = []
        results: list[MessagePart] = []
        for part in step:
            kind = part.get("type", "")
            if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
                reply.append(TextPart(text=part["text"]))
            elif (kind.startswith("tool-") or kind == "dynamic-tool") and part.get("state") in (
                "output-available",
                "output-error",
                "output-denied",
            ):
                name = part.get("toolName") if kind == "dynamic-tool" else kind[len("tool-") :]
                call_id = part.get("toolCallId")
                if not isinstance(name, str) or not isinstance(call_id, str):
                    continue
                reply.append(ToolCallPart(id=call_id, name=name, input=part.get("input") or {}))
                state = part["state"]
                output = part.get("output") if state == "output-available" else part.get("errorText") or "denied"
                text = output if isinstance(output, str) else orjson.dumps(output).decode()
                results.append(
                    ToolResultPart(call_id=call_id, name=name, output=text, is_error=state != "output-available")
                )
        if reply:
            out.append(Message.new(Role.ASSISTANT, reply))
        if results:
            out.append(Message.new(Role.USER, results))
    return out


# --- the app -----------------------------------------------------------------------------------------------


class AISDKApp(PostApp):
    """An ASGI app serving ``agent`` over the AI SDK's UI message stream protocol (see the module docstring):
    POST a chat request body (at any path: ``app.add_route("/api/chat", agent.to_ai_sdk(), methods=["POST"])``
    in Starlette or FastAPI, ``app.mount(...)``, or served alone).

    ``store``: the session store behind the chat ids (default: conversations in memory, the last ``keep``).
    ``deps``: the runs' deps, or a callable of the Starlette ``Request`` returning them (per request: the
    user's identity, a database handle). ``config``: the runs' :class:`~loopctl.engine.RunConfig`.
    ``max_body_bytes``: the largest request body read (default 32 MiB); a larger one is answered 413 before it
    is read whole. ``body_timeout``: seconds a body may take, plus one per 500 bytes received (default 20); a
    slower one is answered 408."""

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
        require_web_extra("an AI SDK app (agent.to_ai_sdk())", "starlette")
        check_body_limits("agent.to_ai_sdk()", max_body_bytes, body_timeout)
        self.agent = agent
        self.conversations = Conversations(agent, store, keep)
        self.deps = deps
        self.config = config
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

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
            chat_id, wanted = read_chat_request(body)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        # Before the chat is loaded or made from the client's history: deps may refuse the id (HTTPException).
        deps = self.deps(request) if callable(self.deps) else self.deps
        try:
            conv = await self.conversations.get(chat_id, lambda: wanted.seed)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        events = stream_run(conv, wanted, deps, self.config, UIMessageStream(wanted.message_id))
        try:
            first = await anext(events)
        except SessionBusy as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        except BadRequest as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return StreamingResponse(_prepend(first, events), headers=UI_MESSAGE_STREAM_HEADERS)


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()  # type: ignore[attr-defined]


async def stream_run(
    conv: Any,
    wanted: RunRequest,
    deps: Any,
    config: loopctl.engine.RunConfig | None,
    encoder: UIMessageStream,
    *,
    observe: Callable[[LoopEvent], list[dict[str, Any]]] | None = None,
) -> AsyncIterator[bytes]:
    """The run ``wanted`` asks for on ``conv``, as UI message stream bytes. The first item is yielded once
    the run has started (a busy conversation or approvals that do not fit raise before anything is sent);
    ``observe`` adds chunks of its own per event (the web UI's details)."""
    from loopctl.errors import ApprovalError

    sent = False
    try:
        async with conv.stream(wanted.prompt, deps=deps, approvals=wanted.approvals or None, config=config) as stream:
            iterator = stream.__aiter__()
            try:
                first: LoopEvent | None = await anext(iterator)
            except StopAsyncIteration:
                first = None
            except ApprovalError as exc:  # decisions that do not fit: refused before anything ran
                raise BadRequest(str(exc)) from None
            sent = True
            yield b"".join(sse(c) for c in encoder.start())
            try:
                event = first
                while event is not None:
                    chunks = encoder.feed(event)
                    if observe is not None:
                        chunks += observe(event)
                    if isinstance(event, RunFinished):
                        chunks += encoder.end(event.run)
                    elif isinstance(event, RunAborted):
                        chunks += encoder.fail(event.error)
                    if chunks:
                        yield b"".join(sse(c) for c in chunks)
                    event = await anext(iterator, None)
            except Exception as exc:  # a run that raised (an observer's bug): the client reads it as the error
                tail = encoder.fail(exc)
                if tail:
                    yield b"".join(sse(c) for c in tail)
            yield sse("[DONE]")
    except Exception:
        if not sent:
            raise
        # The run's error was sent as the stream's error chunk; the response is complete.
