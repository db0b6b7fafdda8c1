"""``loopctl run --otel``: the CLI in a real process exports its spans and metrics over OTLP/HTTP to the
endpoint of the standard variable (a real receiver on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopctl.telemetry.otlp import DEFAULT_FLUSH_TIMEOUT, configure_otlp
from tests.telemetry.otlp_receiver import OTLPReceiver

ROOT = Path(__file__).resolve().parents[2]


def run_cli(tmp_path: Path, endpoint: str, *extra: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "sample-project", project)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "loopctl-test",
        "LOOPCTL_DEMO_DELAY": "0",
        "PYTHONPATH": str(ROOT / "src"),
    }
    if capture:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
    cmd = [sys.executable, "-m", "loopctl", "run", "collect the TODOs", "--model", "demo", "--root", str(project)]
    cmd += ["--yes", "--session", str(tmp_path / "s.json"), "--otel", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, check=False)


def test_otel_exports_the_runs_spans_and_metrics_over_otlp(tmp_path: Path) -> None:
    with OTLPReceiver() as receiver:
        done = run_cli(tmp_path, receiver.endpoint)
    assert done.returncode == 0, done.stderr
    spans = receiver.spans()
    names = [name for name, _ in spans]
    assert names.count("invoke_agent loopctl") == 1
    assert names.count("chat demo-model") == 5  # the demo model's five turns
    assert {n for n in names if n.startswith("execute_tool")} >= {"execute_tool write_file", "execute_tool search"}
    (root,) = [attrs for name, attrs in spans if name == "invoke_agent loopctl"]
    assert root["gen_ai.agent.name"] == "loopctl"
    assert root["gen_ai.conversation.id"] == "s"  # the session file's name
    assert root["loopctl.run.outcome"] == "completed"
    assert receiver.service_names() == {"loopctl-test"}
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= receiver.metric_names()
    # No content without the capture variable.
    assert all("gen_ai.input.messages" not in attrs for _, attrs in spans)


def test_the_capture_variable_records_content(tmp_path: Path) -> None:
    with OTLPReceiver() as receiver:
        done = run_cli(tmp_path, receiver.endpoint, capture=True)
    assert done.returncode == 0, done.stderr
    first = next(attrs for name, attrs in receiver.spans() if name == "chat demo-model")
    messages = json.loads(first["gen_ai.input.messages"])
    assert messages == [{"role": "user", "parts": [{"type": "text", "content": "collect the TODOs"}]}]


def test_a_protocol_other_than_http_protobuf_is_a_clear_error(tmp_path: Path) -> None:
    with OTLPReceiver() as receiver:
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        try:
            project = tmp_path / "p"
            project.mkdir()
            done = subprocess.run(
                [sys.executable, "-m", "loopctl", "run", "x", "--model", "demo", "--root", str(project), "--otel"],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "PYTHONPATH": str(ROOT / "src")},
                check=False,
                cwd=tmp_path,
            )
        finally:
            del os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"]
    assert done.returncode == 2
    assert "--otel: OTEL_EXPORTER_OTLP_PROTOCOL='grpc': loopctl exports OTLP over http/protobuf only" in done.stderr


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there any more: connections are refused


def test_a_collector_that_is_down_costs_one_warning_line_not_retries(tmp_path: Path) -> None:
    # Before: ~20 s of exporter retries at exit, each printed to stderr.
    endpoint = f"http://127.0.0.1:{closed_port()}"
    done = run_cli(tmp_path, endpoint)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"warning: --otel: telemetry could not be exported to {endpoint}/v1/traces (connection refused)"
    ]


def test_the_flush_at_exit_is_bounded_when_the_collector_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    # The exporters retry a refused connection for 10 s per signal; the flush gives up at the first failure.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    export = configure_otlp()
    export.tracer_provider.get_tracer("test").start_span("lost").end()
    export.meter_provider.get_meter("test").create_counter("lost").add(1)
    started = time.monotonic()
    problem = export.shutdown()
    elapsed = time.monotonic() - started
    assert problem is not None and problem.endswith("/v1/traces (connection refused)")
    assert elapsed < DEFAULT_FLUSH_TIMEOUT + 2  # before: 20 s and more


def test_a_collector_that_answers_is_flushed_without_a_word(monkeypatch: pytest.MonkeyPatch) -> None:
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        export = configure_otlp()
        export.tracer_provider.get_tracer("test").start_span("kept").end()
        assert export.shutdown() is None
        assert [name for name, _ in receiver.spans()] == ["kept"]
