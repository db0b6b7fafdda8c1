"""A minimal OTLP/HTTP receiver for tests: a real HTTP server on 127.0.0.1 that accepts ``POST /v1/traces``
and ``POST /v1/metrics`` (protobuf bodies, as the OTLP/HTTP exporter sends them) and decodes them with the
protocol's own generated classes (``opentelemetry-proto``)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OTLPReceiver:
    """``with OTLPReceiver() as r:`` serves on ``r.endpoint``; ``r.spans()`` and ``r.metric_names()`` decode."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                receiver.bodies.append((self.path, self.rfile.read(length)))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OTLPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[str, dict[str, Any]]]:
        """Every span received: ``(name, attributes)`` with plain values, in arrival order."""
        return [(r["name"], r["attributes"]) for r in self.span_records()]

    def span_records(self) -> list[dict[str, Any]]:
        """Every span received as ``{"name", "attributes", "trace_id", "span_id", "parent_id"}`` (ids in hex;
        ``parent_id`` is ``""`` for a root span), in arrival order."""
        out = []
        for path, body in self.bodies:
            if path != "/v1/traces":
                continue
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append(
                            {
                                "name": span.name,
                                "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_id": span.parent_span_id.hex(),
                            }
                        )
        return out

    def service_names(self) -> set[str]:
        names = set()
        for path, body in self.bodies:
            if path == "/v1/traces":
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for rs in request.resource_spans:
                    names |= {_value(kv.value) for kv in rs.resource.attributes if kv.key == "service.name"}
        return names

    def metric_names(self) -> set[str]:
        names = set()
        for path, body in self.bodies:
            if path == "/v1/metrics":
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                for rm in request.resource_metrics:
                    for sm in rm.scope_metrics:
                        names |= {m.name for m in sm.metrics}
        return names


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None
