"""The driver: the hands of an agent run.

:class:`BareLoop` asks the :class:`~loopctl.engine.LoopMachine` what to do, does it (calls the model, runs
tools, runs compaction passes), feeds the outcome back, and repeats until the machine says ``Done``. It
decides nothing the machine decides; it is the only part of the engine that touches the network, the clock
and tools.
"""

from __future__ import annotations

import asyncio
import binascii
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from tenacity import RetryCallState, wait_random_exponential

from loopctl.compact import ContextBudget, SummarizingCompactor, clip_middle, message_tokens
from loopctl.engine.config import RunConfig, SessionConfig
from loopctl.engine.events import (
    CompactionFinished,
    LoopEvent,
    ModelRetry,
    ModelStreamEvent,
    Observer,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
)
from loopctl.engine.machine import (
    CallLLM,
    CallTools,
    Compact,
    CompactReason,
    Done,
    LoopMachine,
    MachinePolicy,
    MachineState,
    Prune,
    exception_text,
)
from loopctl.engine.permission import Approve, Deny, Modify, PermissionCallback
from loopctl.engine.run import Run, ToolCallRecord, Turn
from loopctl.errors import CompactionOverflow, ContextOverflow, LoopError
from loopctl.message import ImagePart, Message, Role, TextPart, ToolCallPart, ToolContent, ToolResultPart
from loopctl.providers.base import ModelClient, ModelRequest
from loopctl.response import ModelResponse, Usage
from loopctl.stream import StreamEvent
from loopctl.tool import Tool, ToolContext, ToolInputError, ToolRegistry, to_tool_output

__all__ = ["BareLoop"]

_T = TypeVar("_T")

CALIBRATION_DRIFT = 0.05
"""How far (a fraction of the reported input tokens) the running estimate may drift from what the provider
reports before the counter is calibrated again."""


class _Cancelled(Exception):
    """The cancel signal fired during an await."""


class BareLoop:
    """Runs agent loops over one conversation: a model client, tools, and a session's settings.

    ``client`` is any :class:`~loopctl.providers.ModelClient` (the real clients, or
    :class:`~loopctl.testing.ScriptedClient`). ``tools`` are :class:`~loopctl.tool.Tool` values (or a
    :class:`~loopctl.tool.ToolRegistry`). ``observers`` receive typed events. ``permission`` decides each tool
    call before it runs. The conversation lives in a :class:`~loopctl.engine.LoopMachine`; successive runs
    continue it. One run at a time per loop.
    """

    def __init__(
        self,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool] = (),
        config: SessionConfig | None = None,
        *,
        observers: Sequence[Observer] = (),
        permission: PermissionCallback | None = None,
        machine: LoopMachine | None = None,
    ) -> None:
        self.client = client
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.config = config or SessionConfig()
        self.observers = list(observers)
        self.permission = permission
        self._machine = machine or LoopMachine()
        self._budget = _make_budget(self.config)
        self._counter = self._budget.counter
        self._compactor = self.config.compactor
        self._calibrated_at = -1  # history length at the last calibration (-1: never)
        set_request = getattr(self._counter, "set_request", None)
        if set_request is not None:
            # The system prompt and tool schemas are sent with every request: count them once.
            set_request(system=self.config.system_prompt, tools=self.tools.schemas)
        self._running = False

    # --- sessions ------------------------------------------------------------------------------------------

    @property
    def machine(self) -> LoopMachine:
        """The machine holding the conversation (do not feed it while a run is active)."""
        return self._machine

    @property
    def history(self) -> Sequence[Message]:
        """The committed conversation."""
        return self._machine.history

    def into_machine(self) -> LoopMachine:
        """A copy of the machine, to save (``to_json``) and resume elsewhere with :meth:`from_machine`."""
        return LoopMachine.from_json(self._machine.to_json())

    @classmethod
    def from_machine(
        cls,
        machine: LoopMachine,
        client: ModelClient,
        tools: ToolRegistry | Iterable[Tool] = (),
        config: SessionConfig | None = None,
        **kwargs: Any,
    ) -> BareLoop:
        """A loop that continues ``machine``'s conversation."""
        return cls(client, tools, config, machine=machine, **kwargs)

    # --- running -------------------------------------------------------------------------------------------

    def run_sync(self, input: str | Message, config: RunConfig | None = None) -> Run:  # noqa: A002
        """:meth:`run` on a fresh event loop. Raises ``RuntimeError`` inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(input, config))
        raise RuntimeError("run_sync() cannot be called inside a running event loop; await run() instead")

    async def run(
        self,
        input: str | Message,  # noqa: A002 - the issue's name
        config: RunConfig | None = None,
        *,
        cancel: asyncio.Event | None = None,
    ) -> Run:
        """Run the loop on ``input`` until the model answers without tool calls, a limit is reached, the run
        fails, or ``cancel`` is set. Returns the :class:`~loopctl.engine.Run` record; errors end the run
        (see ``run.outcome``) rather than raise, except ``asyncio.CancelledError``, which is re-raised after
        the machine has salvaged the conversation."""
        if self._running:
            raise RuntimeError("this loop is already running; start another BareLoop for concurrent runs")
        self._running = True
        try:
            return await self._run(input, config or RunConfig(), cancel)
        finally:
            self._running = False

    async def _run(self, input: str | Message, cfg: RunConfig, cancel: asyncio.Event | None) -> Run:  # noqa: A002
        m = self._machine
        policy = MachinePolicy(
            max_turns=cfg.max_turns,
            context_window=self._budget.window,
            compact_threshold=self._budget.threshold,
            auto_compact=self.config.auto_compact,
            emergency=self._budget.emergency,
            prune_threshold=self._budget.prune_line,
            prune_target=self._budget.target_tokens / self._budget.window,
        )
        started = time.perf_counter()
        m.accept_input(input)
        first = m.pending[-1]
        count = self._counter.count
        emit = self._emit if self.observers else None
        turns: list[Turn] = []
        usage = Usage()
        turn_input: list[Message] = [first]
        names = self.tools.names
        last: ModelResponse | None = None
        last_duration = 0.0
        try:  # from here on, whatever escapes ends the run in the machine first
            m.context_tokens = count(m.full_history())
            if emit:
                emit(RunStarted(first))
            while True:
                if cancel is not None and cancel.is_set():
                    m.cancel()
                step = m.next_step(policy)
                if isinstance(step, CallLLM):
                    t0 = time.perf_counter()
                    try:
                        response = await self._call_model(step.turn, cfg, cancel, emit)
                    except _Cancelled:
                        m.cancel()
                        continue
                    except ContextOverflow as exc:
                        m.fail(exc, overflow=True)
                        continue
                    except LoopError as exc:
                        m.fail(exc)
                        continue
                    last_duration = time.perf_counter() - t0
                    last = response
                    usage = usage + response.usage
                    msg = response.message
                    try:
                        m.model_response(
                            msg,
                            names,
                            self._context_after_reply(m.full_history(), m.context_tokens, msg, response.usage),
                            stop_reason=response.stop_reason,
                            invalid_calls=[(c.id, c.error) for c in response.invalid_tool_calls],
                        )
                    except LoopError as exc:  # a reply the machine cannot take (one call id used twice)
                        m.fail(exc)
                        continue
                    if emit:
                        emit(TurnFinished(step.turn, msg, response.usage, response.stop_reason, last_duration))
                    turns.append(self._turn(step.turn, turn_input, response, (), last_duration))
                    turn_input = []
                    if msg.tool_calls() and m.state is MachineState.AWAITING_MODEL:
                        # The machine answered every call itself (unknown tools, cut-off calls).
                        committed = m.full_history()[-1]  # O(1): pending would copy the run's messages
                        answered = self._with_machine_results(msg, committed, [])
                        turns[-1] = self._turn(step.turn, turns[-1].input, response, answered, last_duration)
                        turn_input = [committed]
                elif isinstance(step, CallTools):
                    try:
                        records = await self._run_tools(step, cfg, cancel, emit)
                    except _Cancelled:
                        m.cancel()
                        continue
                    results = [r.result for r in records]
                    message = Message(role=Role.USER, parts=tuple(results))
                    before_results = m.context_tokens
                    m.tool_results([message])
                    committed = m.full_history()[-1]  # O(1): pending would copy the run's messages
                    m.context_tokens = before_results + message_tokens(self._counter, committed)
                    assert last is not None
                    all_records = self._with_machine_results(last.message, committed, records)
                    turns[-1] = self._turn(step.turn, turns[-1].input, last, all_records, last_duration)
                    turn_input = [committed]
                elif isinstance(step, Prune):
                    self._prune(step, emit)
                elif isinstance(step, Compact):
                    await self._compact(step, emit)
                elif isinstance(step, Done):
                    break
        except asyncio.CancelledError:
            m.cancel()
            raise
        except BaseException as exc:
            if m.state not in (MachineState.TERMINAL, MachineState.START):
                m.fail(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            raise
        run = Run(
            outcome=m.outcome,
            output=_final_text(m.history),
            turns=tuple(turns),
            usage=usage,
            duration=time.perf_counter() - started,
        )
        if emit:
            emit(RunFinished(run))
        return run

    # --- the model -----------------------------------------------------------------------------------------

    async def _call_model(
        self,
        turn: int,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Callable[[LoopEvent], None] | None,
    ) -> ModelResponse:
        history = self._machine.full_history()
        request = ModelRequest(
            messages=history,
            system=self.config.system_prompt,
            tools=self.tools.schemas,
            max_tokens=cfg.max_tokens,
            temperature=cfg.temperature,
            stop=cfg.stop,
            tool_choice=cfg.tool_choice,
            reasoning_effort=cfg.reasoning_effort,
            extra=cfg.extra,
        )
        on_event: Callable[[StreamEvent], None] | None = None
        if emit is not None:
            e = emit

            def on_event(event: StreamEvent) -> None:
                e(ModelStreamEvent(turn, event))

            emit(TurnStarted(turn, len(history)))
        attempt = 0
        while True:
            try:
                coro = self.client.generate(request, stream=cfg.stream, on_event=on_event)
                return await _race(coro, cancel)
            except LoopError as exc:
                if not exc.retryable or attempt >= cfg.max_retries:
                    raise
                attempt += 1
                delay = _retry_delay(exc, attempt, cfg)
                if emit is not None:
                    emit(ModelRetry(turn, attempt, exc, delay))
                await _race(asyncio.sleep(delay), cancel)

    # --- tools ---------------------------------------------------------------------------------------------

    async def _run_tools(
        self,
        step: CallTools,
        cfg: RunConfig,
        cancel: asyncio.Event | None,
        emit: Callable[[LoopEvent], None] | None,
    ) -> list[ToolCallRecord]:
        calls = step.calls
        if len(calls) == 1 or cfg.tool_dispatch == "sequential":
            out = []
            for call in calls:
                out.append(await _race(self._run_one(step.turn, call, cfg, emit), cancel))
            return out
        sem = asyncio.Semaphore(max(1, cfg.max_concurrency))

        async def limited(call: ToolCallPart) -> ToolCallRecord:
            async with sem:
                return await self._run_one(step.turn, call, cfg, emit)

        tasks = [asyncio.ensure_future(limited(c)) for c in calls]
        try:
            return list(await _race(asyncio.gather(*tasks), cancel))
        except BaseException:
            # gather does not stop the other calls when one raises: stop them, so no tool is still running
            # (and acting) after the run has ended.
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _run_one(
        self, turn: int, call: ToolCallPart, cfg: RunConfig, emit: Callable[[LoopEvent], None] | None
    ) -> ToolCallRecord:
        tool = self.tools.get(call.name)
        assert tool is not None  # the machine answers unknown tools itself
        args = call.input
        if self.permission is not None:
            decision = self.permission(call)
            if inspect.isawaitable(decision):
                decision = await decision
            if decision is False or isinstance(decision, Deny):
                reason = decision.reason if isinstance(decision, Deny) else Deny().reason
                result = ToolResultPart(call_id=call.id, name=call.name, output=reason, is_error=True)
                if emit:
                    emit(ToolCallFinished(turn, call, result, 0.0))
                return ToolCallRecord(call, result, 0.0, ran=False)
            if isinstance(decision, Modify):
                args = decision.input
            elif not (decision is True or isinstance(decision, Approve)):
                raise TypeError(f"a permission callback returned {decision!r}; expected Approve, Deny or Modify")
        if emit:
            emit(ToolCallStarted(turn, call))
        t0 = time.perf_counter()
        result = await self._execute(tool, call, args, cfg.tool_timeout, cfg.max_tool_output_chars)
        duration = time.perf_counter() - t0
        if emit:
            emit(ToolCallFinished(turn, call, result, duration))
        return ToolCallRecord(call, result, duration)

    async def _execute(
        self, tool: Tool, call: ToolCallPart, args: Any, timeout: float | None, max_chars: int | None
    ) -> ToolResultPart:
        context = ToolContext(call.id, call.name)
        try:
            if timeout is None:
                value = await tool.call(args, context)
            else:
                async with asyncio.timeout(timeout):
                    value = await tool.call(args, context)
        except ToolInputError as exc:
            return _error_result(call, f"Invalid input for tool {call.name!r}: {exc}")
        except TimeoutError:
            return _error_result(call, f"Tool {call.name!r} timed out after {timeout:g} s and was stopped.")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's failure is the model's to read, not the loop's to die of
            return _error_result(call, f"Tool {call.name!r} failed: {type(exc).__name__}: {exception_text(exc)}")
        try:
            out = to_tool_output(value)
            content = out.tool_content()  # text with a lone surrogate comes back with U+FFFD in its place
            if max_chars is not None:
                content = _clipped(content, max_chars)
            for image in content.images():
                problem = _image_problem(image)
                if problem is not None:
                    return _error_result(call, f"Tool {call.name!r} returned an image that cannot be sent: {problem}")
            return ToolResultPart(
                call_id=call.id,
                name=call.name,
                output=content,
                is_error=out.is_error,
                retention=out.retention,
            )
        except LoopError as exc:
            return _error_result(call, f"Tool {call.name!r} returned output that cannot be sent: {exc}")
        except Exception:  # str() of a value that is not JSON raised
            return _error_result(
                call,
                f"Tool {call.name!r} returned output that cannot be sent: a {type(value).__name__} value that is "
                "neither JSON nor printable",
            )

    # --- compaction ----------------------------------------------------------------------------------------

    def _prune(self, step: Prune, emit: Callable[[LoopEvent], None] | None) -> None:
        m = self._machine
        before = m.context_tokens
        messages = list(m.full_history())
        pruned = self._budget.prune(messages, step.needed)
        after = self._counter.count(pruned) if pruned is not messages else before
        m.prune_result(pruned, before, after)
        if emit:
            emit(CompactionFinished("prune", "prune_line", before, after))

    async def _compact(self, step: Compact, emit: Callable[[LoopEvent], None] | None) -> None:
        """Run the session's compactor; a summarizing one gets its model call here (the emergency line
        truncates at once, and so does a summary that failed or saved nothing)."""
        m = self._machine
        before = m.context_tokens
        messages = list(m.full_history())
        kind = "truncate"
        compacted: list[Message] | None = None
        try:
            compactor = self._compactor
            if isinstance(compactor, SummarizingCompactor):
                if step.reason is CompactReason.THRESHOLD:
                    compacted = await self._summarize(compactor, messages)
                    kind = "summarize"
                compactor = None  # the fallback: truncation, which needs no model call
            if compacted is None:
                kind = "truncate"
                compacted = self._budget.compact(messages, compactor)
        except CompactionOverflow as exc:
            m.fail(exc, overflow=True)
            if emit:
                emit(CompactionFinished(kind, step.reason.value, before, exc.tokens_after or before))
            return
        if compacted is None:
            m.compaction_noop(before, before)
            after = before
        else:
            after = self._counter.count(compacted)
            m.compaction_result(compacted, before, after)
        if emit:
            emit(CompactionFinished(kind, step.reason.value, before, after))

    async def _summarize(self, compactor: SummarizingCompactor, messages: list[Message]) -> list[Message] | None:
        """A summary pass: the compactor plans the request, the client sends it, the compactor builds the new
        conversation from the reply. ``None`` when there was nothing to summarize or the call failed."""
        plan = compactor.start(messages, self._budget)
        if plan is None:
            return None
        try:
            reply: Any = await self.client.generate(plan.request, stream=False)
        except LoopError as exc:
            reply = exc
        out: list[Message] = plan.finish(reply)
        before = self._counter.count(messages)
        return out if self._counter.count(out) < before else None

    def _context_after_reply(self, sent: Sequence[Message], estimate: int, reply: Message, usage: Usage) -> int:
        """The conversation's size, in tokens, once ``reply`` joins ``sent`` (estimated at ``estimate``).

        The counter is calibrated on the provider's reported input tokens after the first reply, and again
        when the estimate has drifted more than :data:`CALIBRATION_DRIFT` from the report and the history has
        grown by a quarter since the last calibration (a calibration is a pass over the history; spacing them
        geometrically keeps the cost amortized O(1) per turn). Otherwise the reply's tokens are added.
        """
        counter = self._counter
        reported = usage.input_tokens
        calibrate = getattr(counter, "calibrate", None)
        if reported > 0 and calibrate is not None:
            drifted = abs(reported - estimate) > CALIBRATION_DRIFT * reported
            if self._calibrated_at < 0 or (drifted and len(sent) >= 1.25 * self._calibrated_at):
                calibrate(sent, reported, reply=reply, output_tokens=usage.output_tokens)
                self._calibrated_at = len(sent)
                return counter.count([*sent, reply])
        return estimate + message_tokens(counter, reply)

    # --- helpers -------------------------------------------------------------------------------------------

    def _emit(self, event: LoopEvent) -> None:
        for observer in self.observers:
            observer(event)

    @staticmethod
    def _turn(
        index: int,
        turn_input: Sequence[Message],
        response: ModelResponse,
        records: Sequence[ToolCallRecord],
        duration: float,
    ) -> Turn:
        return Turn(
            index=index,
            input=tuple(turn_input),
            output=response.message,
            tool_calls=tuple(records),
            usage=response.usage,
            stop_reason=response.stop_reason,
            duration=duration,
        )

    @staticmethod
    def _with_machine_results(
        reply: Message, committed: Message, records: Sequence[ToolCallRecord]
    ) -> tuple[ToolCallRecord, ...]:
        """Records for every call of the turn in call order, including those the machine answered itself."""
        ran = {r.call.id: r for r in records}
        results = {p.call_id: p for p in committed.parts if isinstance(p, ToolResultPart)}
        out = []
        for call in reply.tool_calls():
            rec = ran.get(call.id)
            if rec is None:
                rec = ToolCallRecord(call, results[call.id], 0.0, ran=False)
            else:
                rec = ToolCallRecord(call, results.get(call.id, rec.result), rec.duration, rec.ran)
            out.append(rec)
        return tuple(out)


async def _race(aw: Awaitable[_T], cancel: asyncio.Event | None) -> _T:
    """Await ``aw``, or raise :class:`_Cancelled` (cancelling ``aw``) as soon as ``cancel`` is set."""
    if cancel is None:
        return await aw
    if cancel.is_set():
        if inspect.iscoroutine(aw):
            aw.close()
        raise _Cancelled
    task = asyncio.ensure_future(aw)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        waiter.cancel()
        task.add_done_callback(_retrieve)  # its CancelledError is ours; asyncio must not log it as lost
        raise
    if task in done:
        waiter.cancel()
        return task.result()
    task.cancel()
    # Wait for the cancelled task to unwind (its outcome no longer matters) without swallowing a
    # cancellation of our own.
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
    raise _Cancelled


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _retry_delay(exc: LoopError, attempt: int, cfg: RunConfig) -> float:
    """Seconds to wait before retry ``attempt`` (from 1): the provider's ``retry_after`` when it gave one
    (capped at ``cfg.retry_max_delay``), else exponential backoff with full jitter (tenacity's)."""
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, (int, float)) and retry_after >= 0:
        return float(min(retry_after, cfg.retry_max_delay))
    wait = wait_random_exponential(multiplier=cfg.retry_initial_delay, max=cfg.retry_max_delay)
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
    state.attempt_number = attempt
    return float(wait(state))


def _clipped(content: ToolContent, limit: int) -> ToolContent:
    """``content`` with each text longer than ``limit`` characters cut in the middle, with a note saying how
    much was cut (``compact.clip_middle``: never inside a character). One huge tool output would otherwise
    fill the window before the model has seen it, and the run could not be compacted."""
    root = content.root
    if isinstance(root, str):
        return content if len(root) <= limit else ToolContent.from_string(clip_middle(root, limit))
    if all(not isinstance(p, TextPart) or len(p.text) <= limit for p in root):
        return content
    return ToolContent.from_multipart(
        [TextPart(text=clip_middle(p.text, limit)) if isinstance(p, TextPart) else p for p in root]
    )


# The image types every provider reads (Anthropic IMAGE_MEDIA_TYPES, OpenAI's PNG/JPEG/GIF/WebP, Gemini's
# inlineData), each with the first bytes of its format. Anthropic checks that the bytes match the declared
# type ("Image does not match the provided media type"); every provider refuses bytes that are no image.
_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # then 4 bytes of size, then WEBP
}


def _image_problem(image: ImagePart) -> str | None:
    """Why a tool's image could not be sent to a provider, or ``None``. An image stays in the conversation,
    so one no provider reads would make every later request of it fail: such an image becomes the tool's
    error result instead."""
    media_type = image.source.media_type
    magic = _IMAGE_MAGIC.get(media_type)
    if magic is None:
        return f"its media type {media_type!r} is not one of {', '.join(_IMAGE_MAGIC)}"
    head = binascii.a2b_base64(image.source.data[:24])
    if not head.startswith(magic) or (media_type == "image/webp" and head[8:12] != b"WEBP"):
        return f"its bytes are not {media_type.removeprefix('image/').upper()} data"
    return None


def _error_result(call: ToolCallPart, text: str) -> ToolResultPart:
    return ToolResultPart(call_id=call.id, name=call.name, output=text, is_error=True)


def _final_text(history: Sequence[Message]) -> str:
    for i in range(len(history) - 1, -1, -1):
        msg = history[i]
        if msg.role is Role.ASSISTANT:
            return "".join(p.text for p in msg.parts if isinstance(p, TextPart))
    return ""


def _make_budget(config: SessionConfig) -> ContextBudget:
    if config.budget is not None:
        budget: ContextBudget = config.budget
        return budget
    return ContextBudget(window=config.context_window, threshold=config.compact_threshold)
