"""OpenTelemetry SDK setup for programs that own their process (the ``loopctl`` CLI's ``--otel``).

:func:`configure_otlp` builds a tracer provider and a meter provider that export over OTLP/HTTP (protobuf),
configured by the standard environment variables the exporters read themselves:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (default ``http://localhost:4318``), ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME`` (default here ``loopctl``), ``OTEL_RESOURCE_ATTRIBUTES``...
(https://opentelemetry.io/docs/specs/otel/protocol/exporter/). A library never calls this: it is the
application's choice where telemetry goes. Needs the ``[otlp]`` extra (the SDK and the OTLP/HTTP exporter).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["OTLPExport", "configure_otlp"]


@dataclass(frozen=True, slots=True)
class OTLPExport:
    """The providers :func:`configure_otlp` made; :meth:`shutdown` flushes and stops both (call it before the
    process exits, or the last spans are lost)."""

    tracer_provider: Any
    meter_provider: Any

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporters."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def configure_otlp(service_name: str = "loopctl") -> OTLPExport:
    """Providers exporting spans (batched) and metrics (periodically, and at shutdown) over OTLP/HTTP.

    The providers are returned, not installed globally; pass them to
    :class:`~loopctl.telemetry.OTelObserver`. ``OTEL_SERVICE_NAME`` overrides ``service_name``. Raises
    ``ImportError`` naming the extra when the SDK or the exporter is not installed, and ``ValueError`` when
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` (or its traces/metrics variants) asks for a protocol other than
    ``http/protobuf``.
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
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service_name})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    return OTLPExport(tracer_provider, meter_provider)
