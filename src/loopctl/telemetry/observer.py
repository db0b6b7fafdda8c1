""":class:`OTelObserver`: a run's events as OpenTelemetry spans and metrics, by the GenAI conventions.

An observer (``BareLoop(..., observers=[OTelObserver()])``) turns the engine's typed events
(:mod:`loopctl.engine.events`) into this span tree::

    invoke_agent {agent_name}          INTERNAL  the run
    ├── chat {model}                   CLIENT    each model call, its retries inside (generate_content for Gemini)
    ├── execute_tool {tool}            INTERNAL  each tool call; parallel calls are siblings
    │   └── invoke_agent {sub-agent}   INTERNAL  a sub-agent's run (its events arrive as SubAgentEvent)
    └── compact {kind}                 INTERNAL  each prune or compaction pass (loopctl's own span)

and records the metrics ``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration`` and (streamed)
``gen_ai.client.operation.time_to_first_chunk`` per model call, ``gen_ai.execute_tool.duration`` per tool call
and ``gen_ai.invoke_agent.duration`` per run. A token count the provider did not report is left out (the
conventions: a count that was not obtained MUST NOT be reported), never recorded as 0. Names and shapes follow
the OpenTelemetry GenAI semantic conventions (``docs/telemetry.md`` lists every attribute;
:mod:`loopctl.telemetry.attributes` holds the names).

Only the OpenTelemetry *API* is used; the application configures the SDK (or nothing: then the API's no-op
provider makes every span non-recording and the observer skips the work of building attributes). When
``opentelemetry-api`` is not installed the observer warns once and records nothing; a run is never affected.
Message content (``gen_ai.input.messages``, ``gen_ai.output.messages``, the system prompt, tool definitions,
tool arguments and results) is recorded only with ``capture_content=True``; API keys and HTTP headers are never
seen by the observer at all. A failure inside the observer is logged, never raised into the run.

The span of the operation in progress is made current (``opentelemetry.context.attach``) for its duration, in
the task that runs it, so spans the HTTP client or an MCP session create nest under it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
import warnings
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

import orjson

from loopctl.engine.events import (
    CompactionFinished,
    CompactionStarted,
    LoopEvent,
    ModelCallFailed,
    ModelCallRetry,
    ModelFallback,
    ModelStreamEvent,
    PromptCacheBust,
    RunAborted,
    RunFinished,
    RunStarted,
    SubAgentEvent,
    ToolCallDeferred,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
)
from loopctl.engine.machine import OutcomeKind
from loopctl.engine.run import Run
from loopctl.response import Usage
from loopctl.telemetry import attributes as a
from loopctl.telemetry.messages import (
    FINISH_REASONS,
    input_messages,
    output_message,
    system_instructions,
    tool_definitions,
    tool_result,
)

try:
    from opentelemetry import context as _context
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
except ImportError:  # the [otel] extra is not installed: the observer records nothing
    _OTEL = False
else:
    _OTEL = True

__all__ = ["OTelObserver"]

_log = logging.getLogger("loopctl.telemetry")

_INSTRUMENTATION = "loopctl"

# Run outcomes that are errors of the invoke_agent operation (error.type is the value given).
_FAILED_OUTCOMES = {
    OutcomeKind.CANCELLED: a.ERROR_CANCELLED,
    OutcomeKind.CONTEXT_OVERFLOW: "context_overflow",
    OutcomeKind.MAX_TURNS: "max_turns",
    OutcomeKind.LIMIT_REACHED: "limit_reached",
    OutcomeKind.LOOP_DETECTED: "loop_detected",
    OutcomeKind.OUTPUT_INVALID: "output_invalid",
}


def _dumps(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop
        return None


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for a ``ModelClient.provider`` (``"gemini"`` -> ``"gcp.gemini"``)."""
    return a.PROVIDER_NAMES.get(provider, provider)


def operation_name(provider: str) -> str:
    """``gen_ai.operation.name`` of a model call: ``generate_content`` for Gemini, else ``chat``."""
    return a.OP_GENERATE_CONTENT if provider == "gemini" else a.OP_CHAT


def server_attributes(api_url: object) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of the URL a model call goes to (the port the URL names, or 443
    / 80 by its scheme); nothing when there is no URL."""
    if not isinstance(api_url, str) or not api_url:
        return {}
    try:
        parts = urllib.parse.urlsplit(api_url)
        port = parts.port
    except ValueError:  # not a URL, or a port that is not a number
        return {}
    if not parts.hostname:
        return {}
    if port is None:
        port = {"https": 443, "http": 80}.get(parts.scheme)
    return {a.SERVER_ADDRESS: parts.hostname, **({a.SERVER_PORT: port} if port is not None else {})}


@dataclass(slots=True)
class _Op:
    """One open span: the span, the context token that made it current, and the task that holds the token."""

    span: Span
    token: Token[Any] | None
    task: asyncio.Task[Any] | None
    started: float  # time.perf_counter()
    metric_attrs: dict[str, Any] = field(default_factory=dict)
    attempt_started: float = 0.0
    first_chunk: bool = False
    time_to_first_chunk: float | None = None  # seconds, once the stream's first event came


_SILENT: Any = object()
"""The run state of a run followed by no configured provider (nothing is recorded)."""


@dataclass(slots=True)
class _RunState:
    """What the observer holds for one run (one per task that runs a loop, found through a context var)."""

    run: _Op
    var_token: Token[_RunState | None] | None = None
    provider: str = ""
    model: str = ""
    chat: _Op | None = None
    compaction: _Op | None = None
    tools: dict[str, _Op] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    converted: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # message id -> its JSON (content)


class OTelObserver:
    """An observer that records each run as OpenTelemetry GenAI spans and metrics.

    ``tracer_provider`` / ``meter_provider``: where spans and metrics go (default: the global providers set
    by the application's OpenTelemetry setup; none set means no-op). ``capture_content``: also record the
    messages sent and received, the system prompt, tool definitions, tool arguments and results, as JSON
    strings (off by default: they may hold personal data). ``agent_name`` names the ``invoke_agent`` span
    (``gen_ai.agent.name``); ``conversation_id`` is recorded as ``gen_ai.conversation.id`` on every span of
    the runs it observes (use one observer per conversation, or leave it out).

    One observer may watch several loops, even concurrently: each run's state lives in the context of the
    task running it. Without ``opentelemetry-api`` installed it warns once (``RuntimeWarning``) and does
    nothing.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
        *,
        agent_name: str | None = None,
        conversation_id: str | None = None,
    ) -> None:
        self.capture_content = capture_content
        self.agent_name = agent_name
        self.conversation_id = conversation_id
        self._runs: ContextVar[_RunState | None] = ContextVar(f"loopctl_otel_run_{id(self):x}", default=None)
        self.enabled = _OTEL
        if not _OTEL:
            warnings.warn(
                "opentelemetry-api is not installed, so OTelObserver records nothing (pip install 'pyloopctl[otel]')",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        from loopctl import __version__

        self._meter_provider = meter_provider
        self._tracer = _trace.get_tracer(_INSTRUMENTATION, __version__, tracer_provider=tracer_provider)
        meter = _metrics.get_meter(_INSTRUMENTATION, __version__, meter_provider=meter_provider)
        self._token_usage = meter.create_histogram(
            a.GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(a.TOKEN_USAGE_BUCKETS),
        )
        self._duration = meter.create_histogram(
            a.GEN_AI_CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(a.DURATION_BUCKETS),
        )
        self._first_chunk = meter.create_histogram(
            a.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk, measured from when the client issues the generation "
            "request to when the first chunk is received in the response stream.",
            explicit_bucket_boundaries_advisory=list(a.DURATION_BUCKETS),
        )
        self._agent_duration = meter.create_histogram(
            a.GEN_AI_INVOKE_AGENT_DURATION,
            unit="s",
            description="The end-to-end duration of a single agent invocation.",
            explicit_bucket_boundaries_advisory=list(a.INVOKE_AGENT_DURATION_BUCKETS),
        )
        self._tool_duration = meter.create_histogram(
            a.GEN_AI_EXECUTE_TOOL_DURATION,
            unit="s",
            description="The duration of a single tool execution.",
            explicit_bucket_boundaries_advisory=list(a.DURATION_BUCKETS),
        )

    def __repr__(self) -> str:
        return f"OTelObserver(capture_content={self.capture_content}, agent_name={self.agent_name!r})"

    def __call__(self, event: LoopEvent) -> None:
        """Record ``event``. Never raises: a failure is logged to the ``loopctl.telemetry`` logger."""
        if not self.enabled or (self._runs.get() is _SILENT and type(event) not in _RUN_ENDS):
            return
        handler = _HANDLERS.get(type(event))
        if handler is None:
            return
        try:
            handler(self, event)
        except Exception:  # telemetry must never end a run
            _log.exception("OTelObserver failed on %s", type(event).__name__)

    # --- spans -----------------------------------------------------------------------------------------------

    def _start(self, name: str, kind: Any, attrs: dict[str, Any], parent: _Op | None) -> _Op:
        ctx = _trace.set_span_in_context(parent.span) if parent is not None else None
        span = self._tracer.start_span(name, context=ctx, kind=kind, attributes=attrs)
        token = _context.attach(_trace.set_span_in_context(span))
        now = time.perf_counter()
        return _Op(span, token, _task(), now, attempt_started=now)

    @staticmethod
    def _end(op: _Op, error_type: str | None = None, description: str | None = None) -> None:
        if error_type is not None:
            op.span.set_attribute(a.ERROR_TYPE, error_type)
            op.span.set_status(Status(StatusCode.ERROR, description or error_type))
        op.span.end()
        # Only the task that made the span current can undo it (each task has its own context).
        if op.token is not None and op.task is _task():
            _context.detach(op.token)
        op.token = None

    def _common(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.conversation_id is not None:
            attrs[a.GEN_AI_CONVERSATION_ID] = self.conversation_id
        return attrs

    # --- the run ---------------------------------------------------------------------------------------------

    def _sub_agent(self, e: SubAgentEvent) -> None:
        """A sub-agent's event: recorded as the sub-agent's own run, whose spans nest under the ``execute_tool``
        span of the call that runs it (current in the task that runs the sub-agent)."""
        inner = e.event
        if isinstance(inner, RunStarted):
            self._run_started(inner, agent=e.path[-1])
            return
        handler = _HANDLERS.get(type(inner))
        if handler is not None and not isinstance(inner, SubAgentEvent):
            handler(self, inner)

    def _run_started(self, e: RunStarted, agent: str | None = None) -> None:
        agent_name = agent or self.agent_name or e.agent or None
        attrs = {a.GEN_AI_OPERATION_NAME: a.OP_INVOKE_AGENT, a.GEN_AI_PROVIDER_NAME: provider_name(e.provider)}
        if agent_name:
            attrs[a.GEN_AI_AGENT_NAME] = agent_name
        if e.model:
            attrs[a.GEN_AI_REQUEST_MODEL] = e.model
        name = f"{a.OP_INVOKE_AGENT} {agent_name}" if agent_name else a.OP_INVOKE_AGENT
        span = self._tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=self._common(attrs))
        if not span.is_recording() and not self._metrics_configured():
            # Nothing is configured (the API's no-op providers): the run is not followed at all.
            self._runs.set(_SILENT)
            return
        token = _context.attach(_trace.set_span_in_context(span))
        now = time.perf_counter()
        op = _Op(span, token, _task(), now, attempt_started=now)
        if self.capture_content and op.span.is_recording():
            op.span.set_attribute(a.GEN_AI_INPUT_MESSAGES, _dumps(input_messages([e.input])))
        state = _RunState(op, provider=e.provider, model=e.model)
        state.var_token = self._runs.set(state)

    def _metrics_configured(self) -> bool:
        """Whether metrics go anywhere: a meter provider was given, or the application set a global one (the
        API's default is a proxy to a no-op until then)."""
        provider = self._meter_provider or _metrics.get_meter_provider()
        return not isinstance(provider, _metrics.NoOpMeterProvider) and type(provider).__name__ != "_ProxyMeterProvider"

    def _run_finished(self, e: RunFinished) -> None:
        state = self._runs.get()
        if state is _SILENT:
            self._runs.set(None)
            return
        if state is None:
            return
        self._close_open(state, a.ERROR_CANCELLED)
        span = state.run.span
        run = e.run
        error_type: str | None = None
        description: str | None = None
        if isinstance(run, Run):
            if span.is_recording():
                span.set_attribute(a.LOOPCTL_OUTCOME, run.outcome.kind.value)
                span.set_attribute(a.LOOPCTL_TURNS, len(run.turns))
                if run.usage.input_tokens is not None:
                    span.set_attribute(a.LOOPCTL_RUN_INPUT_TOKENS, run.usage.input_tokens)
                if run.usage.output_tokens is not None:
                    span.set_attribute(a.LOOPCTL_RUN_OUTPUT_TOKENS, run.usage.output_tokens)
                if self.capture_content and run.turns:
                    last = run.turns[-1]
                    span.set_attribute(
                        a.GEN_AI_OUTPUT_MESSAGES, _dumps([output_message(last.output, last.stop_reason)])
                    )
            if span.is_recording() and run.cost is not None and run.turns:
                span.set_attribute(a.LOOPCTL_RUN_COST, str(run.cost))
            kind = run.outcome.kind
            if kind in (OutcomeKind.FAILED, OutcomeKind.FALLBACK_EXHAUSTED):
                error_type = run.outcome.error_type or "_OTHER"
                description = run.outcome.error
            elif kind in _FAILED_OUTCOMES:
                error_type = _FAILED_OUTCOMES[kind]
        self._finish_run(state, error_type, description)

    def _run_aborted(self, e: RunAborted) -> None:
        state = self._runs.get()
        if state is _SILENT:
            self._runs.set(None)
            return
        if state is None:
            return
        cancelled = isinstance(e.error, asyncio.CancelledError)
        error_type = a.ERROR_CANCELLED if cancelled else type(e.error).__qualname__
        self._close_open(state, error_type)
        self._finish_run(state, error_type, None if cancelled else str(e.error) or error_type)

    def _finish_run(self, state: _RunState, error_type: str | None, description: str | None) -> None:
        # The run's context var and context token were set in this task, after each other: undo both.
        if state.var_token is not None:
            try:
                self._runs.reset(state.var_token)
            except ValueError:  # finished in another context than it started: leave that context alone
                self._runs.set(None)
        self._end(state.run, error_type, description)
        metric_attrs: dict[str, Any] = {}
        if self.agent_name:
            metric_attrs[a.GEN_AI_AGENT_NAME] = self.agent_name
        if state.model:
            metric_attrs[a.GEN_AI_REQUEST_MODEL] = state.model
        if error_type is not None:
            metric_attrs[a.ERROR_TYPE] = error_type
        self._agent_duration.record(time.perf_counter() - state.run.started, metric_attrs)

    def _close_open(self, state: _RunState, error_type: str) -> None:
        """End whatever the run left open (a cancelled run stops its model call and tools mid-way)."""
        for op in (state.compaction, state.chat):
            if op is not None:
                self._end(op, error_type)
        for op in state.tools.values():
            self._end(op, error_type)
            self._record_tool(op, error_type)
        state.compaction = state.chat = None
        state.tools.clear()

    # --- model calls -----------------------------------------------------------------------------------------

    def _turn_started(self, e: TurnStarted) -> None:
        state = self._runs.get()
        if state is None:
            return
        provider = e.provider or state.provider
        model = e.model or state.model
        op_name = operation_name(provider)
        attrs: dict[str, Any] = {a.GEN_AI_OPERATION_NAME: op_name, a.GEN_AI_PROVIDER_NAME: provider_name(provider)}
        if model:
            attrs[a.GEN_AI_REQUEST_MODEL] = model
        request = e.request
        if request is not None:
            if request.max_tokens is not None:
                attrs[a.GEN_AI_REQUEST_MAX_TOKENS] = request.max_tokens
            if request.temperature is not None:
                attrs[a.GEN_AI_REQUEST_TEMPERATURE] = request.temperature
            if request.stop:
                attrs[a.GEN_AI_REQUEST_STOP_SEQUENCES] = list(request.stop)
            if request.reasoning_effort is not None:
                attrs[a.LOOPCTL_REASONING_EFFORT] = request.reasoning_effort
            state.descriptions = {t.name: t.description for t in request.tools}
            if request.output_format is not None:  # the request asks for a JSON object (NativeOutput)
                attrs[a.GEN_AI_OUTPUT_TYPE] = a.OUTPUT_TYPE_JSON
        if e.stream:
            attrs[a.GEN_AI_REQUEST_STREAM] = True
        server = server_attributes(e.api_url)
        attrs.update(server)  # at span creation: the conventions list them among the sampling attributes
        name = f"{op_name} {model}" if model else op_name
        op = self._start(name, SpanKind.CLIENT, self._common(attrs), state.run)
        op.metric_attrs = {
            k: attrs[k] for k in (a.GEN_AI_OPERATION_NAME, a.GEN_AI_PROVIDER_NAME, a.GEN_AI_REQUEST_MODEL) if k in attrs
        }
        op.metric_attrs.update(server)
        if self.capture_content and request is not None and op.span.is_recording():
            converted = input_messages(request.messages, state.converted)
            op.span.set_attribute(a.GEN_AI_INPUT_MESSAGES, _dumps(converted))
            if request.system:
                op.span.set_attribute(a.GEN_AI_SYSTEM_INSTRUCTIONS, _dumps(system_instructions(request.system)))
            if request.tools:
                op.span.set_attribute(a.GEN_AI_TOOL_DEFINITIONS, _dumps(tool_definitions(request.tools)))
        state.chat = op

    def _prompt_cache_bust(self, e: PromptCacheBust) -> None:
        state = self._runs.get()
        op = state.chat if state is not None else None
        if op is None:
            return
        op.span.set_attribute(a.LOOPCTL_PROMPT_CACHE_BUST, e.reason)
        if e.index is not None:
            op.span.set_attribute(a.LOOPCTL_PROMPT_CACHE_BUST_INDEX, e.index)

    def _model_stream_event(self, e: ModelStreamEvent) -> None:
        state = self._runs.get()
        op = state.chat if state is not None else None
        if op is None or op.first_chunk:
            return
        op.first_chunk = True
        op.time_to_first_chunk = time.perf_counter() - op.attempt_started
        op.span.set_attribute(a.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, op.time_to_first_chunk)

    def _model_retry(self, e: ModelCallRetry) -> None:
        state = self._runs.get()
        op = state.chat if state is not None else None
        if op is None:
            return
        op.span.add_event(
            a.LOOPCTL_RETRY_EVENT,
            {
                a.LOOPCTL_RETRY_ATTEMPT: e.attempt,
                a.LOOPCTL_RETRY_DELAY: e.delay,
                a.ERROR_TYPE: type(e.error).__qualname__,
            },
        )
        # The next attempt is sent after the delay; its stream's first chunk is timed from then.
        op.first_chunk = False
        op.time_to_first_chunk = None
        op.attempt_started = time.perf_counter() + e.delay

    def _model_fallback(self, e: ModelFallback) -> None:
        state = self._runs.get()
        op = state.chat if state is not None else None
        if op is None:
            return
        op.span.add_event(
            a.LOOPCTL_FALLBACK_EVENT,
            {
                a.LOOPCTL_FALLBACK_FROM: f"{e.from_provider}:{e.from_model}",
                a.LOOPCTL_FALLBACK_TO: f"{e.to_provider}:{e.to_model}",
                a.ERROR_TYPE: type(e.error).__qualname__,
            },
        )
        # The call now goes to another client: the span and its metrics name it.
        op.span.set_attribute(a.GEN_AI_PROVIDER_NAME, provider_name(e.to_provider))
        op.span.set_attribute(a.GEN_AI_REQUEST_MODEL, e.to_model)
        server = server_attributes(e.to_api_url)
        for key, value in server.items():
            op.span.set_attribute(key, value)
        metric_attrs = {k: v for k, v in op.metric_attrs.items() if k not in (a.SERVER_ADDRESS, a.SERVER_PORT)}
        op.metric_attrs = {
            **metric_attrs,
            a.GEN_AI_PROVIDER_NAME: provider_name(e.to_provider),
            a.GEN_AI_REQUEST_MODEL: e.to_model,
            **server,
        }
        op.first_chunk = False
        op.time_to_first_chunk = None
        op.attempt_started = time.perf_counter()

    def _turn_finished(self, e: TurnFinished) -> None:
        state = self._runs.get()
        op = state.chat if state is not None else None
        if state is None or op is None:
            return
        state.chat = None
        span = op.span
        usage = e.usage
        response = e.response
        metric_attrs = dict(op.metric_attrs)
        if response is not None and response.model:
            metric_attrs[a.GEN_AI_RESPONSE_MODEL] = response.model
        if span.is_recording():
            if response is not None:
                if response.id:
                    span.set_attribute(a.GEN_AI_RESPONSE_ID, response.id)
                if response.model:
                    span.set_attribute(a.GEN_AI_RESPONSE_MODEL, response.model)
            span.set_attribute(a.GEN_AI_RESPONSE_FINISH_REASONS, [FINISH_REASONS[e.stop_reason]])
            # Each count as the provider reported it; one it did not report is left out, never recorded as 0.
            for key, value in (
                (a.GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens),
                (a.GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens),
                (a.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read_tokens),
                (a.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_write_tokens),
                (a.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, usage.reasoning_tokens),
            ):
                if value is not None:
                    span.set_attribute(key, value)
            if self.capture_content:
                span.set_attribute(a.GEN_AI_OUTPUT_MESSAGES, _dumps([output_message(e.message, e.stop_reason)]))
        self._end(op)
        state.usage = state.usage + usage
        self._duration.record(time.perf_counter() - op.started, metric_attrs)
        if op.time_to_first_chunk is not None:  # streamed calls only (the conventions: not for others)
            self._first_chunk.record(op.time_to_first_chunk, metric_attrs)
        for token_type, count in ((a.TOKEN_TYPE_INPUT, usage.input_tokens), (a.TOKEN_TYPE_OUTPUT, usage.output_tokens)):
            if count is not None:
                self._token_usage.record(count, {**metric_attrs, a.GEN_AI_TOKEN_TYPE: token_type})

    def _model_call_failed(self, e: ModelCallFailed) -> None:
        state = self._runs.get()
        op = state.chat if state is not None else None
        if state is None or op is None:
            return
        state.chat = None
        error_type = a.ERROR_CANCELLED if e.error is None else type(e.error).__qualname__
        self._end(op, error_type, None if e.error is None else str(e.error) or error_type)
        self._duration.record(time.perf_counter() - op.started, {**op.metric_attrs, a.ERROR_TYPE: error_type})

    # --- tools -----------------------------------------------------------------------------------------------

    def _tool_attrs(self, state: _RunState, name: str, call_id: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            a.GEN_AI_OPERATION_NAME: a.OP_EXECUTE_TOOL,
            a.GEN_AI_TOOL_NAME: name,
            a.GEN_AI_TOOL_CALL_ID: call_id,
            a.GEN_AI_TOOL_TYPE: "function",
        }
        description = state.descriptions.get(name)
        if description:
            attrs[a.GEN_AI_TOOL_DESCRIPTION] = description
        return self._common(attrs)

    def _tool_started(self, e: ToolCallStarted) -> None:
        state = self._runs.get()
        if state is None:
            return
        call = e.call
        attrs = self._tool_attrs(state, call.name, call.id)
        op = self._start(f"{a.OP_EXECUTE_TOOL} {call.name}", SpanKind.INTERNAL, attrs, state.run)
        op.metric_attrs = {a.GEN_AI_TOOL_NAME: call.name, a.GEN_AI_TOOL_TYPE: "function"}
        if self.agent_name:
            op.metric_attrs[a.GEN_AI_AGENT_NAME] = self.agent_name
        if self.capture_content and op.span.is_recording():
            op.span.set_attribute(a.GEN_AI_TOOL_CALL_ARGUMENTS, _dumps(call.input))
        state.tools[call.id] = op

    def _tool_deferred(self, e: ToolCallDeferred) -> None:
        """A call deferred for approval (before it ran, or by the tool itself: a sub-agent that paused): its span,
        if it started, ends without an error, marked deferred."""
        state = self._runs.get()
        if state is None:
            return
        op = state.tools.pop(e.call.id, None)
        if op is not None:
            op.span.set_attribute(a.LOOPCTL_TOOL_DEFERRED, True)
            self._end(op)

    def _tool_finished(self, e: ToolCallFinished) -> None:
        state = self._runs.get()
        if state is None:
            return
        call, result = e.call, e.result
        op = state.tools.pop(call.id, None)
        denied = op is None  # the permission callback answered it: no ToolCallStarted, the tool never ran
        if op is None:
            attrs = self._tool_attrs(state, call.name, call.id)
            span = self._tracer.start_span(
                f"{a.OP_EXECUTE_TOOL} {call.name}",
                context=_trace.set_span_in_context(state.run.span),
                kind=SpanKind.INTERNAL,
                attributes=attrs,
            )
            op = _Op(span, None, None, time.perf_counter())
        if not result.is_error:
            if self.capture_content and op.span.is_recording():
                op.span.set_attribute(a.GEN_AI_TOOL_CALL_RESULT, _dumps(tool_result(result.output)))
            self._end(op)
            self._record_tool(op, None)
            return
        error_type = a.ERROR_DENIED if denied else a.ERROR_TOOL
        # The error text is the tool's output, so it is content: shown only when content is captured.
        self._end(op, error_type, str(result.output) if self.capture_content else None)
        if not denied:  # a denied call never ran: no execution to time
            self._record_tool(op, error_type)

    def _record_tool(self, op: _Op, error_type: str | None) -> None:
        """``gen_ai.execute_tool.duration`` of a call that ran (its span's duration)."""
        self._tool_duration.record(time.perf_counter() - op.started, {**op.metric_attrs, **self._error(error_type)})

    @staticmethod
    def _error(error_type: str | None) -> dict[str, Any]:
        return {a.ERROR_TYPE: error_type} if error_type is not None else {}

    # --- compaction ------------------------------------------------------------------------------------------

    def _compaction_started(self, e: CompactionStarted) -> None:
        state = self._runs.get()
        if state is None:
            return
        attrs = {a.LOOPCTL_COMPACTION_REASON: e.reason, a.LOOPCTL_COMPACTION_TOKENS_BEFORE: e.tokens_before}
        state.compaction = self._start("compact", SpanKind.INTERNAL, self._common(attrs), state.run)

    def _compaction_finished(self, e: CompactionFinished) -> None:
        state = self._runs.get()
        if state is None:
            return
        op = state.compaction
        state.compaction = None
        if op is None:
            op = self._start("compact", SpanKind.INTERNAL, self._common({}), state.run)
        op.span.update_name(f"compact {e.kind}")
        op.span.set_attribute(a.LOOPCTL_COMPACTION_KIND, e.kind)
        op.span.set_attribute(a.LOOPCTL_COMPACTION_REASON, e.reason)
        op.span.set_attribute(a.LOOPCTL_COMPACTION_TOKENS_BEFORE, e.tokens_before)
        op.span.set_attribute(a.LOOPCTL_COMPACTION_TOKENS_AFTER, e.tokens_after)
        self._end(op)


_RUN_ENDS = (RunFinished, RunAborted)

_HANDLERS: dict[type, Any] = {
    RunStarted: OTelObserver._run_started,
    TurnStarted: OTelObserver._turn_started,
    PromptCacheBust: OTelObserver._prompt_cache_bust,
    ModelStreamEvent: OTelObserver._model_stream_event,
    ModelCallRetry: OTelObserver._model_retry,
    ModelFallback: OTelObserver._model_fallback,
    TurnFinished: OTelObserver._turn_finished,
    ModelCallFailed: OTelObserver._model_call_failed,
    ToolCallStarted: OTelObserver._tool_started,
    ToolCallFinished: OTelObserver._tool_finished,
    ToolCallDeferred: OTelObserver._tool_deferred,
    SubAgentEvent: OTelObserver._sub_agent,
    CompactionStarted: OTelObserver._compaction_started,
    CompactionFinished: OTelObserver._compaction_finished,
    RunFinished: OTelObserver._run_finished,
    RunAborted: OTelObserver._run_aborted,
}
