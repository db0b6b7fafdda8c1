"""A run's spans for ``loopctl web``'s waterfall, kept in memory: no collector to run.

:class:`SpanCollector` is an OpenTelemetry SDK span processor. ``loopctl web`` gives its agent an
:class:`~loopctl.telemetry.OTelObserver` over a tracer provider holding this processor; each finished span is
kept under its trace (one run, one trace: the ``invoke_agent`` span is the root), and each trace under the
session whose run made it: the session is read from :data:`WEB_SESSION` when the root span starts (the web app
sets it in the task that starts the run; the run's task inherits it). The last ``keep`` traces are kept.
"""

from __future__ import annotations

import collections
import threading
from contextvars import ContextVar
from typing import Any

__all__ = ["WEB_SESSION", "SpanCollector", "make_tracer_provider"]

WEB_SESSION: ContextVar[str | None] = ContextVar("loopctl_web_session", default=None)
"""The session id of the run being started (set by the web app around ``conversation.stream``)."""

_SHOWN_ATTRIBUTES = (
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.provider.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.agent.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "error.type",
)


class SpanCollector:
    """Finished spans by trace, and traces by session (see the module docstring). Thread-safe: the SDK may
    end spans on any thread."""

    def __init__(self, keep: int = 500) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._traces: collections.OrderedDict[int, list[dict[str, Any]]] = collections.OrderedDict()
        self._session_of: dict[int, str] = {}

    # --- the SDK's SpanProcessor interface ---------------------------------------------------------------

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        ctx = span.get_span_context()
        if span.parent is not None:
            return
        session = WEB_SESSION.get()
        if session is not None:
            with self._lock:
                self._session_of[ctx.trace_id] = session

    def on_end(self, span: Any) -> None:
        ctx = span.get_span_context()
        attrs = dict(span.attributes or {})
        record = {
            "spanId": f"{ctx.span_id:016x}",
            "parentId": f"{span.parent.span_id:016x}" if span.parent is not None else None,
            "name": span.name,
            "start": span.start_time,
            "end": span.end_time,
            "status": span.status.status_code.name.lower(),
            "error": span.status.description,
            "attributes": {k: _plain(attrs[k]) for k in _SHOWN_ATTRIBUTES if k in attrs},
        }
        with self._lock:
            self._traces.setdefault(ctx.trace_id, []).append(record)
            self._traces.move_to_end(ctx.trace_id)
            while len(self._traces) > self.keep:
                old, _ = self._traces.popitem(last=False)
                self._session_of.pop(old, None)

    def _on_ending(self, span: Any) -> None:
        """Called by newer SDKs before a span ends: nothing to do."""

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Spans are kept as they end: nothing to flush."""
        return True

    # --- reading -----------------------------------------------------------------------------------------

    def traces(self, session: str) -> list[dict[str, Any]]:
        """The traces of ``session``'s runs, oldest first: ``{"traceId", "start", "end", "spans": [...]}``,
        each span ``{"spanId", "parentId", "name", "start", "end" (Unix ns), "status", "error",
        "attributes"}``, in start order."""
        with self._lock:
            found = [(t, list(spans)) for t, spans in self._traces.items() if self._session_of.get(t) == session]
        out = []
        for trace_id, spans in found:
            spans.sort(key=lambda s: s["start"])
            out.append(
                {
                    "traceId": f"{trace_id:032x}",
                    "start": min(s["start"] for s in spans),
                    "end": max(s["end"] for s in spans),
                    "spans": spans,
                }
            )
        out.sort(key=lambda t: t["start"])
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return value
    return list(value) if isinstance(value, (tuple, list)) else str(value)


def make_tracer_provider(collector: SpanCollector) -> Any:
    """An SDK ``TracerProvider`` whose spans go to ``collector`` only (synchronously: nothing is exported)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider(resource=Resource.create({"service.name": "loopctl-web"}))
    provider.add_span_processor(collector)  # type: ignore[arg-type]
    return provider
