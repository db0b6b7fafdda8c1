"""``OTelObserver`` end to end: real runs (a real client against the fake provider server) exported to the
OpenTelemetry SDK's in-memory span exporter and metric reader; the span tree, names, kinds and attributes are
checked value by value against the GenAI conventions (``docs/telemetry.md``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from loopctl.engine import (
    BareLoop,
    CompactionFinished,
    Deny,
    LoopEvent,
    OutcomeKind,
    Run,
    RunConfig,
    SessionConfig,
    TurnFinished,
)
from loopctl.message import Message, MessagePart, Role, ToolCallPart
from loopctl.telemetry import OTelObserver
from loopctl.telemetry import attributes as a
from loopctl.testing import ErrorReply, FakeProviderServer
from loopctl.tool import tool
from tests.fake_clients import make_client

SECRET = "sk-telemetry-secret-0123456789"
CONTENT_KEYS = {
    a.GEN_AI_INPUT_MESSAGES,
    a.GEN_AI_OUTPUT_MESSAGES,
    a.GEN_AI_SYSTEM_INSTRUCTIONS,
    a.GEN_AI_TOOL_DEFINITIONS,
    a.GEN_AI_TOOL_CALL_ARGUMENTS,
    a.GEN_AI_TOOL_CALL_RESULT,
}
WEATHER = "sunny and warm " * 150
current_spans: list[str] = []


@tool
async def lookup(city: str) -> str:
    """Look up the weather in a city."""
    current_spans.append(getattr(trace.get_current_span(), "name", "?"))
    await asyncio.sleep(0.05 if city == "Paris" else 0.01)
    return f"{city}: {WEATHER}"


@tool
async def boom(text: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot handle {text}")


@tool
async def hang(seconds: float) -> str:
    """Sleeps."""
    await asyncio.sleep(seconds)
    return "woke"


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, x) for i, n, x in specs])


# A retried first call, three parallel calls (one fails), one more call, then the answer. The window makes the
# second round's results cross the prune line, so a prune pass runs before the third call.
SCRIPT = [
    ErrorReply.overloaded(),
    calls(("c1", "lookup", {"city": "Paris"}), ("c2", "lookup", {"city": "Rome"}), ("c3", "boom", {"text": "x"})),
    calls(("c4", "lookup", {"city": "Oslo"})),
    "It is sunny everywhere.",
]
CONFIG = RunConfig(max_tokens=512, temperature=0.2, stop=["END"], retry_initial_delay=0.001, retry_max_delay=0.01)


class Telemetry:
    """An SDK tracer provider with the in-memory exporter, and a meter provider with the in-memory reader."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def observer(self, **kw: Any) -> OTelObserver:
        return OTelObserver(self.tracer_provider, self.meter_provider, **kw)

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def points(self, name: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        assert data is not None
        out: list[HistogramDataPoint] = []
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        out += [p for p in metric.data.data_points if isinstance(p, HistogramDataPoint)]
        return out


@pytest.fixture
def tel() -> Telemetry:
    return Telemetry()


async def run_loop(
    observer: OTelObserver,
    script: Sequence[Any] = SCRIPT,
    *,
    kind: str = "anthropic",
    tools: Sequence[Any] = (lookup, boom),
    config: RunConfig = CONFIG,
    window: int = 3000,
    **kw: Any,
) -> tuple[Run, list[LoopEvent]]:
    events: list[LoopEvent] = []
    with FakeProviderServer(script) as server:
        client = make_client(kind, server, api_key=SECRET)
        loop = BareLoop(
            client,
            tools,
            SessionConfig(system_prompt="Be brief.", context_window=window),
            observers=[events.append, observer],
            **kw,
        )
        try:
            run = await loop.run("weather?", config)
        finally:
            await client.aclose()
    return run, events


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()}


def by_name(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def turns(events: Sequence[LoopEvent]) -> list[TurnFinished]:
    return [e for e in events if isinstance(e, TurnFinished)]


# --- the span tree -------------------------------------------------------------------------------------------


async def test_a_run_is_one_invoke_agent_span_over_its_chat_tool_and_compaction_spans(tel: Telemetry) -> None:
    current_spans.clear()
    run, _events = await run_loop(tel.observer(agent_name="weather-bot", conversation_id="conv-7"))
    assert run.outcome.kind is OutcomeKind.COMPLETED
    spans = tel.spans()
    assert [(s.name, s.kind) for s in spans] == [
        ("invoke_agent weather-bot", SpanKind.INTERNAL),
        ("chat claude-test-1", SpanKind.CLIENT),
        ("execute_tool lookup", SpanKind.INTERNAL),
        ("execute_tool lookup", SpanKind.INTERNAL),
        ("execute_tool boom", SpanKind.INTERNAL),
        ("chat claude-test-1", SpanKind.CLIENT),
        ("execute_tool lookup", SpanKind.INTERNAL),
        ("compact prune", SpanKind.INTERNAL),
        ("chat claude-test-1", SpanKind.CLIENT),
    ]
    root, *children = spans
    assert root.parent is None
    assert root.context is not None
    trace_id, root_id = root.context.trace_id, root.context.span_id
    for child in children:
        assert child.context is not None and child.context.trace_id == trace_id
        assert child.parent is not None and child.parent.span_id == root_id, child.name

    # The tool spans were the current span while each tool ran (so spans the tool makes nest under them);
    # after the run nothing of ours is current any more.
    assert current_spans == ["execute_tool lookup", "execute_tool lookup", "execute_tool lookup"]
    assert not trace.get_current_span().is_recording()

    # The three calls of the first round ran in parallel: siblings whose lifetimes overlap.
    first_round = children[1:4]
    assert max(s.start_time or 0 for s in first_round) < min(s.end_time or 0 for s in first_round)

    assert attrs(root) == {
        a.GEN_AI_OPERATION_NAME: "invoke_agent",
        a.GEN_AI_PROVIDER_NAME: "anthropic",
        a.GEN_AI_AGENT_NAME: "weather-bot",
        a.GEN_AI_REQUEST_MODEL: "claude-test-1",
        a.GEN_AI_CONVERSATION_ID: "conv-7",
        a.LOOPCTL_OUTCOME: "completed",
        a.LOOPCTL_TURNS: 3,
        a.LOOPCTL_RUN_INPUT_TOKENS: run.usage.input_tokens,
        a.LOOPCTL_RUN_OUTPUT_TOKENS: run.usage.output_tokens,
    }
    assert root.status.status_code is StatusCode.UNSET


async def test_each_chat_span_carries_the_request_settings_the_response_and_its_usage(tel: Telemetry) -> None:
    run, events = await run_loop(tel.observer(conversation_id="conv-7"))
    chats = by_name(tel.spans(), "chat claude-test-1")
    finished = turns(events)
    assert len(chats) == len(finished) == 3
    reasons = [["tool_call"], ["tool_call"], ["stop"]]
    for span, turn, reason in zip(chats, finished, reasons, strict=True):
        response = turn.response
        assert response is not None and response.id and response.model
        assert attrs(span) == {
            a.GEN_AI_OPERATION_NAME: "chat",
            a.GEN_AI_PROVIDER_NAME: "anthropic",
            a.GEN_AI_REQUEST_MODEL: "claude-test-1",
            a.GEN_AI_REQUEST_MAX_TOKENS: 512,
            a.GEN_AI_REQUEST_TEMPERATURE: 0.2,
            a.GEN_AI_REQUEST_STOP_SEQUENCES: ["END"],
            a.GEN_AI_REQUEST_STREAM: True,
            a.GEN_AI_CONVERSATION_ID: "conv-7",
            a.GEN_AI_RESPONSE_ID: response.id,
            a.GEN_AI_RESPONSE_MODEL: response.model,
            a.GEN_AI_RESPONSE_FINISH_REASONS: reason,
            a.GEN_AI_USAGE_INPUT_TOKENS: turn.usage.input_tokens,
            a.GEN_AI_USAGE_OUTPUT_TOKENS: turn.usage.output_tokens,
            a.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: span.attributes[a.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK],  # type: ignore[index]
        }
        assert response.id.startswith("msg_")
        assert 0 < span.attributes[a.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] < 5  # type: ignore[index,operator]
    # Usage is the provider's report, and it adds up to the run's.
    assert next(t.usage.input_tokens for t in finished) > 0
    assert sum(t.usage.input_tokens for t in finished) == run.usage.input_tokens

    # The retry happened inside the first chat span: one span, one retry event naming the error.
    first = chats[0]
    assert [(e.name, dict(e.attributes or {})) for e in first.events] == [
        (
            a.LOOPCTL_RETRY_EVENT,
            {a.LOOPCTL_RETRY_ATTEMPT: 1, a.LOOPCTL_RETRY_DELAY: first.events[0].attributes[a.LOOPCTL_RETRY_DELAY],  # type: ignore[index]
             a.ERROR_TYPE: "Overloaded"},
        )
    ]
    assert first.status.status_code is StatusCode.UNSET
    assert [len(c.events) for c in chats[1:]] == [0, 0]


async def test_tool_spans_name_the_call_and_a_failing_tool_sets_error_type(tel: Telemetry) -> None:
    await run_loop(tel.observer())
    tools = [s for s in tel.spans() if s.name.startswith("execute_tool")]
    described = {"lookup": "Look up the weather in a city.", "boom": "Always fails."}
    assert [(attrs(s)[a.GEN_AI_TOOL_NAME], attrs(s)[a.GEN_AI_TOOL_CALL_ID]) for s in tools] == [
        ("lookup", "c1"),
        ("lookup", "c2"),
        ("boom", "c3"),
        ("lookup", "c4"),
    ]
    for s in tools:
        name = attrs(s)[a.GEN_AI_TOOL_NAME]
        expected = {
            a.GEN_AI_OPERATION_NAME: "execute_tool",
            a.GEN_AI_TOOL_NAME: name,
            a.GEN_AI_TOOL_CALL_ID: attrs(s)[a.GEN_AI_TOOL_CALL_ID],
            a.GEN_AI_TOOL_TYPE: "function",
            a.GEN_AI_TOOL_DESCRIPTION: described[name],
        }
        if name == "boom":
            expected[a.ERROR_TYPE] = "tool_error"
        assert attrs(s) == expected
    failed = tools[2]
    assert (failed.status.status_code, failed.status.description) == (StatusCode.ERROR, "tool_error")
    assert [s.status.status_code for s in tools if s is not failed] == [StatusCode.UNSET] * 3


async def test_a_compaction_pass_is_its_own_span_with_the_token_estimates(tel: Telemetry) -> None:
    _, events = await run_loop(tel.observer())
    (passed,) = [e for e in events if isinstance(e, CompactionFinished)]
    (span,) = by_name(tel.spans(), "compact prune")
    assert attrs(span) == {
        a.LOOPCTL_COMPACTION_KIND: "prune",
        a.LOOPCTL_COMPACTION_REASON: "prune_line",
        a.LOOPCTL_COMPACTION_TOKENS_BEFORE: passed.tokens_before,
        a.LOOPCTL_COMPACTION_TOKENS_AFTER: passed.tokens_after,
    }
    assert passed.tokens_before > 1000  # a real estimate of the conversation, over the prune line


# --- content -------------------------------------------------------------------------------------------------


async def test_no_content_is_recorded_by_default_and_never_the_api_key(tel: Telemetry) -> None:
    await run_loop(tel.observer())
    spans = tel.spans()
    assert len(spans) == 9
    for s in spans:
        assert not CONTENT_KEYS & set(attrs(s)), s.name
        assert "weather?" not in json.dumps(attrs(s)) and "sunny" not in json.dumps(attrs(s))
        assert SECRET not in json.dumps(attrs(s))
        assert "cannot handle" not in (s.status.description or "")


async def test_content_is_recorded_in_the_conventions_json_shapes_when_asked(tel: Telemetry) -> None:
    await run_loop(tel.observer(capture_content=True))
    spans = tel.spans()
    root = spans[0]
    chats = by_name(spans, "chat claude-test-1")
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    for s in spans:
        assert SECRET not in json.dumps(attrs(s)), s.name

    user = {"role": "user", "parts": [{"type": "text", "content": "weather?"}]}
    assert json.loads(root.attributes[a.GEN_AI_INPUT_MESSAGES]) == [user]  # type: ignore[arg-type,index]
    assert json.loads(root.attributes[a.GEN_AI_OUTPUT_MESSAGES]) == [  # type: ignore[arg-type,index]
        {"role": "assistant", "parts": [{"type": "text", "content": "It is sunny everywhere."}], "finish_reason": "stop"}
    ]

    first, second, _ = chats
    assert json.loads(first.attributes[a.GEN_AI_INPUT_MESSAGES]) == [user]  # type: ignore[arg-type,index]
    assert json.loads(first.attributes[a.GEN_AI_SYSTEM_INSTRUCTIONS]) == [  # type: ignore[arg-type,index]
        {"type": "text", "content": "Be brief."}
    ]
    definitions = json.loads(first.attributes[a.GEN_AI_TOOL_DEFINITIONS])  # type: ignore[arg-type,index]
    assert [(d["type"], d["name"], d["description"]) for d in definitions] == [
        ("function", "lookup", "Look up the weather in a city."),
        ("function", "boom", "Always fails."),
    ]
    assert definitions[0]["parameters"]["properties"]["city"]["type"] == "string"
    tool_call = {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"city": "Paris"}}
    assert json.loads(first.attributes[a.GEN_AI_OUTPUT_MESSAGES]) == [  # type: ignore[arg-type,index]
        {
            "role": "assistant",
            "parts": [
                tool_call,
                {"type": "tool_call", "id": "c2", "name": "lookup", "arguments": {"city": "Rome"}},
                {"type": "tool_call", "id": "c3", "name": "boom", "arguments": {"text": "x"}},
            ],
            "finish_reason": "tool_call",
        }
    ]
    sent = json.loads(second.attributes[a.GEN_AI_INPUT_MESSAGES])  # type: ignore[arg-type,index]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[2]["parts"] == [
        {"type": "tool_call_response", "id": "c1", "response": f"Paris: {WEATHER}"},
        {"type": "tool_call_response", "id": "c2", "response": f"Rome: {WEATHER}"},
        {"type": "tool_call_response", "id": "c3", "response": "Tool 'boom' failed: ValueError: cannot handle x"},
    ]

    paris, _rome, failed, oslo = tools
    assert json.loads(paris.attributes[a.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"city": "Paris"}  # type: ignore[arg-type,index]
    assert json.loads(paris.attributes[a.GEN_AI_TOOL_CALL_RESULT]) == f"Paris: {WEATHER}"  # type: ignore[arg-type,index]
    assert json.loads(oslo.attributes[a.GEN_AI_TOOL_CALL_RESULT]) == f"Oslo: {WEATHER}"  # type: ignore[arg-type,index]
    # A failed call has no result (the conventions record results of successful calls); its error text, which
    # is the tool's output, is the status description.
    assert a.GEN_AI_TOOL_CALL_RESULT not in attrs(failed)
    assert failed.status.description == "Tool 'boom' failed: ValueError: cannot handle x"


# --- metrics -------------------------------------------------------------------------------------------------


async def test_token_usage_and_duration_metrics_are_recorded_per_model_call(tel: Telemetry) -> None:
    _, events = await run_loop(tel.observer())
    finished = turns(events)
    model = finished[0].response.model  # type: ignore[union-attr]
    base = {
        a.GEN_AI_OPERATION_NAME: "chat",
        a.GEN_AI_PROVIDER_NAME: "anthropic",
        a.GEN_AI_REQUEST_MODEL: "claude-test-1",
        a.GEN_AI_RESPONSE_MODEL: model,
    }
    usage = {dict(p.attributes or {})[a.GEN_AI_TOKEN_TYPE]: p for p in tel.points(a.GEN_AI_CLIENT_TOKEN_USAGE)}
    assert set(usage) == {"input", "output"}
    for token_type, point in usage.items():
        assert dict(point.attributes or {}) == {**base, a.GEN_AI_TOKEN_TYPE: token_type}
        assert point.count == 3
        assert list(point.explicit_bounds) == list(a.TOKEN_USAGE_BUCKETS)
    assert usage["input"].sum == sum(t.usage.input_tokens for t in finished)
    assert usage["output"].sum == sum(t.usage.output_tokens for t in finished)

    (duration,) = tel.points(a.GEN_AI_CLIENT_OPERATION_DURATION)
    assert dict(duration.attributes or {}) == base
    assert duration.count == 3
    assert list(duration.explicit_bounds) == list(a.DURATION_BUCKETS)
    # Each call's duration covers its retries: the first call includes a failed attempt.
    assert 0 < duration.sum < 30


# --- failures --------------------------------------------------------------------------------------------------


async def test_a_failed_model_call_ends_its_span_and_the_run_with_the_error_type(tel: Telemetry) -> None:
    run, _ = await run_loop(tel.observer(), [ErrorReply(status=400, message="bad field")], tools=())
    assert run.outcome.kind is OutcomeKind.FAILED
    root, chat = tel.spans()
    error_type = run.outcome.error_type
    assert error_type == "InvalidRequest"
    assert (chat.name, attrs(chat)[a.ERROR_TYPE], chat.status.status_code) == (
        "chat claude-test-1",
        error_type,
        StatusCode.ERROR,
    )
    assert "bad field" in (chat.status.description or "")
    assert a.GEN_AI_RESPONSE_ID not in attrs(chat)
    assert (attrs(root)[a.ERROR_TYPE], attrs(root)[a.LOOPCTL_OUTCOME], root.status.status_code) == (
        error_type,
        "failed",
        StatusCode.ERROR,
    )
    (duration,) = tel.points(a.GEN_AI_CLIENT_OPERATION_DURATION)
    assert dict(duration.attributes or {})[a.ERROR_TYPE] == error_type
    assert tel.points(a.GEN_AI_CLIENT_TOKEN_USAGE) == []


async def test_a_cancelled_run_ends_every_open_span_as_cancelled(tel: Telemetry) -> None:
    cancel = asyncio.Event()
    script = [calls(("h1", "hang", {"seconds": 30}), ("h2", "hang", {"seconds": 31})), "never"]  # two calls: identical ones run once
    events: list[LoopEvent] = []
    with FakeProviderServer(script) as server:
        client = make_client("anthropic", server)
        loop = BareLoop(client, [hang], observers=[events.append, tel.observer()])

        async def stop_soon() -> None:
            await asyncio.sleep(0.3)
            cancel.set()

        stopper = asyncio.ensure_future(stop_soon())
        run = await loop.run("wait", RunConfig(), cancel=cancel)
        await stopper
        await client.aclose()
    assert run.outcome.kind is OutcomeKind.CANCELLED
    spans = tel.spans()
    assert [s.name for s in spans] == ["invoke_agent", "chat claude-test-1", "execute_tool hang", "execute_tool hang"]
    root, chat, *tools = spans
    assert [attrs(t).get(a.ERROR_TYPE) for t in tools] == ["cancelled", "cancelled"]
    assert (attrs(root)[a.ERROR_TYPE], attrs(root)[a.LOOPCTL_OUTCOME]) == ("cancelled", "cancelled")
    assert a.ERROR_TYPE not in attrs(chat)


async def test_a_task_cancelled_mid_call_still_ends_the_run_and_chat_spans(tel: Telemetry) -> None:
    from loopctl.testing import Delay

    with FakeProviderServer([Delay(30, "late")]) as server:
        client = make_client("anthropic", server)
        loop = BareLoop(client, observers=[tel.observer()])
        task = asyncio.ensure_future(loop.run("hi"))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.aclose()
    root, chat = tel.spans()
    assert (root.name, attrs(root)[a.ERROR_TYPE]) == ("invoke_agent", "cancelled")
    assert (chat.name, attrs(chat)[a.ERROR_TYPE]) == ("chat claude-test-1", "cancelled")


async def test_a_denied_call_is_a_tool_span_with_error_type_denied(tel: Telemetry) -> None:
    def deny(call: ToolCallPart) -> Deny:
        return Deny("not today")

    run, _ = await run_loop(
        tel.observer(), [calls(("d1", "lookup", {"city": "Paris"})), "ok"], tools=(lookup,), permission=deny
    )
    assert run.ok
    (span,) = by_name(tel.spans(), "execute_tool lookup")
    assert (attrs(span)[a.ERROR_TYPE], attrs(span)[a.GEN_AI_TOOL_CALL_ID]) == ("denied", "d1")


# --- providers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "name", "provider"),
    [
        ("openai", "chat gpt-4o", "openai"),
        ("openai-responses", "chat gpt-5", "openai"),
        ("gemini", "generate_content gemini-3-pro", "gcp.gemini"),
    ],
)
async def test_each_provider_has_its_conventional_operation_and_provider_name(
    tel: Telemetry, kind: str, name: str, provider: str
) -> None:
    run, events = await run_loop(tel.observer(), ["hello"], kind=kind, tools=(), config=RunConfig())
    assert run.ok
    root, chat = tel.spans()
    op = name.split(maxsplit=1)[0]
    assert (root.name, attrs(root)[a.GEN_AI_PROVIDER_NAME]) == ("invoke_agent", provider)
    assert (chat.name, attrs(chat)[a.GEN_AI_OPERATION_NAME], attrs(chat)[a.GEN_AI_PROVIDER_NAME]) == (
        name,
        op,
        provider,
    )
    (turn,) = turns(events)
    assert attrs(chat)[a.GEN_AI_RESPONSE_ID] == turn.response.id  # type: ignore[union-attr]


# --- no cost when nothing is configured ------------------------------------------------------------------------


async def test_without_a_configured_sdk_the_observer_records_nothing_and_the_run_is_unchanged() -> None:
    # The global provider is the API's no-op one (these tests never install an SDK globally).
    observer = OTelObserver(capture_content=True)
    current_spans.clear()
    run, _ = await run_loop(observer)
    assert run.ok
    # The run was not followed at all: no span was ever made current around the tools.
    assert current_spans == ["?", "?", "?"]
    assert observer._runs.get() is None
    assert not trace.get_current_span().is_recording()


async def test_an_observer_failure_is_logged_and_never_ends_the_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            raise_on = super().get_tracer(*args, **kwargs)

            class T:
                def start_span(self, *a: Any, **k: Any) -> Any:
                    raise RuntimeError("exporter on fire")

                def __getattr__(self, name: str) -> Any:
                    return getattr(raise_on, name)

            return T()

    run, _ = await run_loop(OTelObserver(Broken()))
    assert run.ok and run.output == "It is sunny everywhere."
    assert any("OTelObserver failed on RunStarted" in r.getMessage() for r in caplog.records)
