"""Fixtures for the MCP tests: the test server (``tests/mcp/server.py``) as a stdio subprocess or as a real
streamable-HTTP server process on 127.0.0.1, and a model scripted through a real client and the fake
provider server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from loopctl.engine import BareLoop, Run, RunConfig
from loopctl.mcp import MCPServerHTTP, MCPServerStdio
from loopctl.message import Message, MessagePart, Role
from loopctl.testing import FakeProviderServer
from tests.fake_clients import make_client

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(Path(__file__).with_name("server.py"))
START_TIMEOUT = 60.0  # seconds for a server process to start (the SDK is a large import on a busy machine)


def stdio_server(**options: Any) -> MCPServerStdio:
    """The test server as a subprocess of this process, over stdin and stdout."""
    options.setdefault("connect_timeout", START_TIMEOUT)
    return MCPServerStdio(sys.executable, [SERVER], cwd=ROOT, **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HTTPServerProcess:
    """The test server as a real streamable-HTTP server process on 127.0.0.1 (started, killed, restarted)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SERVER, "http", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the MCP test server did not start listening")

    def kill(self) -> None:
        """Kill the process (SIGKILL: as a crash, and as uvicorn does not wait for open streams then)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def client(self, **options: Any) -> MCPServerHTTP:
        options.setdefault("connect_timeout", START_TIMEOUT)
        return MCPServerHTTP(self.url, **options)


@pytest.fixture(scope="module")
def http_process() -> Iterator[HTTPServerProcess]:
    """One HTTP server process shared by a module's tests (tests that restart it use their own)."""
    server = HTTPServerProcess()
    server.start()
    yield server
    server.kill()


@pytest.fixture
def own_http_process() -> Iterator[HTTPServerProcess]:
    server = HTTPServerProcess()
    server.start()
    yield server
    server.kill()


def calls(*specs: tuple[str, str, dict[str, Any]]) -> Message:
    return Message.new(Role.ASSISTANT, [MessagePart.tool_call(i, n, x) for i, n, x in specs])


class Model:
    """A scripted model behind a real OpenAI client and the fake provider server, driving a ``BareLoop``."""

    def __init__(self, script: Sequence[Any], tools: Sequence[Any]) -> None:
        self.server = FakeProviderServer(script)
        self.tools = tools
        self.loop: BareLoop | None = None

    def __enter__(self) -> Model:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(None, None, None)

    async def run(
        self, prompt: str | None = "go", config: RunConfig | None = None, *, observers: Sequence[Any] = (), **kw: Any
    ) -> Run:
        """A run of the loop (made at the first run); ``kw`` goes to ``loop.run`` (``approvals=``...)."""
        client = make_client("openai", self.server)
        try:
            if self.loop is None:
                self.loop = BareLoop(client, self.tools, observers=list(observers))
            else:
                self.loop.client = client
            return await self.loop.run(prompt, config or RunConfig(retry_initial_delay=0.001), **kw)
        finally:
            await client.aclose()

    def tool_names(self, request: int) -> list[str]:
        """The tool names the model was offered in request ``request`` (Chat Completions wire form)."""
        return [t["function"]["name"] for t in self.server.requests[request].body.get("tools", [])]
