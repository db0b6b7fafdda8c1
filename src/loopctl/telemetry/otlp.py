"""OpenTelemetry SDK setup for programs that own their process (the ``loopctl`` CLI's ``--otel``).

:func:`configure_otlp` builds a tracer provider and a meter provider that export over OTLP/HTTP (protobuf),
configured by the standard environment variables the exporters read themselves:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``), ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME`` (default here ``loopctl``), ``OTEL_RESOURCE_ATTRIBUTES``...
(https://opentelemetry.io/docs/specs/otel/protocol/exporter/). A library never calls this: it is the
application's choice where telemetry goes. Needs the ``[otlp]`` extra (the SDK and the OTLP/HTTP exporter).

A collector that is down or slow never holds the program up: the exporters' own retry messages are kept off
the terminal (the first problem is remembered), and :meth:`OTLPExport.shutdown` flushes within a time limit,
gives up at once when the collector is refusing connections, and says what went wrong in one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_FLUSH_TIMEOUT", "OTLPExport", "configure_otlp"]

DEFAULT_FLUSH_TIMEOUT = 3.0
"""Seconds :meth:`OTLPExport.shutdown` waits for the last spans and metrics to be exported."""

# The loggers of the SDK's export machinery: retries, failed batches, "already shut down" notices.
_EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk.metrics._internal.export",
)


def _reason(message: str) -> str:
    """A short reason from an exporter's log message (the messages hold whole urllib3 error chains)."""
    lowered = message.lower()
    if "connection refused" in lowered or "newconnectionerror" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return "unknown host"
    if "timed out" in lowered or "timeout" in lowered:
        return "timed out"
    code = re.search(r"\bcode: (\d{3})\b", message)
    if code:
        return f"HTTP {code.group(1)}"
    return message.splitlines()[0][:200] if message else "unknown error"


class _ExportProblems(logging.Filter):
    """Keeps the export machinery's warnings off the terminal. ``reason``: the first problem met; ``failed``:
    a batch was given up on; ``retrying``: set by every failed attempt (the collector is not answering)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self.failed = False
        self.retrying = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        if "already shutdown" in message or "Shutdown in progress" in message:
            return False
        if message.startswith("Transient error"):
            self.reason = self.reason or _reason(message)
        else:  # a batch given up on ("Failed to export ..."), or another problem of the exporter
            self.failed = True
            if not message.startswith("Failed to export") or self.reason is None:
                self.reason = self.reason or _reason(message)
        self.retrying.set()
        return False


@dataclass(slots=True)
class OTLPExport:
    """The providers :func:`configure_otlp` made; :meth:`shutdown` flushes and stops both (call it before the
    process exits, or the last spans are lost)."""

    tracer_provider: Any
    meter_provider: Any
    span_exporter: Any = None
    metric_exporter: Any = None
    endpoint: str = ""
    """Where spans go (for messages)."""
    _problems: _ExportProblems = field(default_factory=_ExportProblems)

    def shutdown(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> str | None:
        """Export what is buffered, then stop the exporters, within about ``timeout`` seconds, and at once when
        an export attempt fails meanwhile (the collector is down: its retries would only wait). Returns
        ``None`` when every export went through, else one line saying what was not exported and why."""
        problems = self._problems
        problems.retrying.clear()
        done = threading.Event()

        def stop() -> None:
            try:
                self.tracer_provider.shutdown()
                self.meter_provider.shutdown(timeout_millis=timeout * 1000)
            except Exception as exc:  # an exporter's bug must not end the program: report it
                problems.failed = True
                problems.reason = problems.reason or f"{type(exc).__name__}: {exc}"
            finally:
                done.set()

        # A daemon thread: whatever the exporters do, the program can leave.
        threading.Thread(target=stop, name="loopctl-otlp-shutdown", daemon=True).start()
        waited = 0.0
        while not done.wait(0.05):
            waited += 0.05
            if problems.retrying.is_set() or waited >= timeout:
                # Stop the retries in flight: their backoff wakes up and gives up.
                for exporter in (self.span_exporter, self.metric_exporter):
                    if exporter is not None:
                        with contextlib.suppress(Exception):
                            exporter.shutdown()
                done.wait(1.0)
                problems.failed = True
                problems.reason = problems.reason or f"no answer within {timeout:g} s"
                break
        for name in _EXPORT_LOGGERS:
            logging.getLogger(name).removeFilter(problems)
        if not problems.failed:
            return None
        return f"telemetry could not be exported to {self.endpoint or 'the collector'} ({problems.reason})"


def configure_otlp(service_name: str = "loopctl") -> OTLPExport:
    """Providers exporting spans (batched) and metrics (periodically, and at shutdown) over OTLP/HTTP.

    The providers are returned, not installed globally; pass them to
    :class:`~loopctl.telemetry.OTelObserver`. ``OTEL_SERVICE_NAME`` overrides ``service_name``. Raises
    ``ImportError`` naming the extra when the SDK or the exporter is not installed, and ``ValueError`` when
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or its traces/metrics variants) asks for a protocol other than
    ``http/protobuf``. The providers are not shut down at exit by the SDK: call :meth:`OTLPExport.shutdown`.
    """
    for signal in ("", "TRACES_", "METRICS_"):
        var = f"OTEL_EXPORTER_OTLP_{signal}PROTOCOL"
        protocol = os.environ.get(var, "").strip()
        if protocol and protocol != "http/protobuf":
            raise ValueError(f"{var}={protocol!r}: loopctl exports OTLP over http/protobuf only")
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError(
            f"OTLP export needs the OpenTelemetry SDK and exporter: pip install 'pyloopctl[otlp]' ({exc})"
        ) from exc
    problems = _ExportProblems()
    for name in _EXPORT_LOGGERS:
        logging.getLogger(name).addFilter(problems)
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service_name})
    # No atexit shutdown of their own: it would wait out the exporters' retries (10 s each) at exit.
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    span_exporter = OTLPSpanExporter()
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    metric_exporter = OTLPMetricExporter()
    reader = PeriodicExportingMetricReader(metric_exporter)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    endpoint = str(getattr(span_exporter, "_endpoint", "") or "")
    return OTLPExport(tracer_provider, meter_provider, span_exporter, metric_exporter, _mask(endpoint), problems)


def _mask(endpoint: str) -> str:
    """The endpoint as shown in messages: no credentials, no query."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(endpoint)
    except ValueError:
        return "the collector"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
