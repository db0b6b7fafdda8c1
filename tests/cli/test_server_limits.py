"""The servers loopctl runs hold bounded work for a hostile client: ``loopctl web``, ``loopctl a2a serve`` and
``loopctl mcp serve --http``, each started as a user starts it (a real process, real sockets), with small limits
given on the command line. A body over ``--max-body-bytes`` is answered 413 (a JSON error) before it is read
whole; a head or a body that trickles in byte by byte (slowloris) is cut off with 408 after
``--header-timeout`` / ``--body-timeout``; a connection that says nothing is closed; past ``--max-connections``
a request is answered 503."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from loopctl.server_limits import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    KEEP_ALIVE_TIMEOUT,
    LINGER_SECONDS,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    ServerLimits,
    uvicorn_config,
)
from tests.a2a.conftest import ROOT, free_port, wait_for_port

LIMITS = ["--max-body-bytes", "10000", "--header-timeout", "1", "--body-timeout", "1", "--max-connections", "4"]


@dataclass
class Served:
    kind: str
    host: str  # the Host header value it answers
    port: int
    path: str  # the endpoint that reads a JSON body


def _start(kind: str, tmp: Path) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "LOOPCTL_DEMO_DELAY": "0"}
    if kind == "web":
        command = ["web", "--model", "demo", "--port", "0", "--root", str(tmp), "--store", str(tmp / "s.db")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopctl", *command, *LIMITS],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            proc.kill()
            raise RuntimeError(f"loopctl web printed {url!r}")
        return proc, int(url.rsplit(":", 1)[1].strip("/"))
    port = free_port()
    if kind == "a2a":
        command = ["a2a", "serve", "--agent", "tests.mcp.served:agent", "--port", str(port)]
    else:
        command = ["mcp", "serve", "--http", "--tools", "files", "--root", str(tmp), "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopctl", *command, *LIMITS],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_port(proc, port)  # type: ignore[arg-type]
    return proc, port


@pytest.fixture(scope="module", params=["web", "a2a", "mcp"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    kind: str = request.param
    proc, port = _start(kind, tmp_path_factory.mktemp(kind))
    try:
        path = {"web": "/api/chat", "a2a": "/", "mcp": "/mcp"}[kind]
        yield Served(kind, f"127.0.0.1:{port}", port, path)
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


def post_headers(served: Served, length: int | None) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    headers["origin"] = f"http://{served.host}"
    if length is not None:
        headers["content-length"] = str(length)
    return headers


def read_response(sock: socket.socket, within: float) -> bytes:
    """What the server sends until it closes the connection (``b""`` if it only closed), or until ``within``
    seconds have passed (then ``TimeoutError``)."""
    sock.settimeout(within)
    got = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise TimeoutError(f"the connection is still open after {within} s (got {got[:200]!r})")


def test_a_body_over_the_limit_is_refused_before_it_is_read(served: Served) -> None:
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"text": "x" * 20_000}}).encode()
    response = httpx.post(served_url(served), content=big, headers=post_headers(served, None))
    assert response.status_code == 413, response.text
    assert "10000 bytes" in response.json()["error"]

    # A chunked body (no Content-Length) is refused once it passes the limit, whatever it would be: an endless one
    # is answered 413 after the rest was read and dropped for LINGER_SECONDS (so the client reads the answer).
    def chunks() -> Iterator[bytes]:
        while True:
            yield b"x" * 1000

    started = time.monotonic()
    streamed = httpx.post(served_url(served), content=chunks(), headers=post_headers(served, None), timeout=30)
    assert streamed.status_code == 413 and "10000 bytes" in streamed.json()["error"]
    assert time.monotonic() - started < LINGER_SECONDS + 5


def served_url(served: Served) -> str:
    return f"http://{served.host}{served.path}"


def test_a_head_sent_byte_by_byte_is_cut_off(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.sendall(f"POST {served.path} HTTP/1.1\r\nHost: {served.host}\r\n".encode())
        started = time.monotonic()
        with contextlib.suppress(OSError):
            for _ in range(40):  # 40 x 0.1 s: more than the 1 s the server gives
                sock.sendall(b"X")
                time.sleep(0.1)
        answer = read_response(sock, 5)
        assert time.monotonic() - started < 5
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_a_connection_that_says_nothing_is_closed(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        started = time.monotonic()
        read_response(sock, 5)
        assert time.monotonic() - started < 5


def test_a_body_sent_byte_by_byte_is_answered_408(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        head = f"POST {served.path} HTTP/1.1\r\nHost: {served.host}\r\nOrigin: http://{served.host}\r\n"
        head += "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        sock.sendall(f"{head}Content-Length: 5000\r\n\r\n".encode())
        started = time.monotonic()
        with contextlib.suppress(OSError):
            for _ in range(40):
                sock.sendall(b" ")
                time.sleep(0.1)
        answer = read_response(sock, 5)
        assert time.monotonic() - started < 5
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"the request body came too slowly" in answer


def test_past_max_connections_a_request_is_answered_503(served: Served) -> None:
    statuses = []
    for _ in range(5):  # the idle connections are closed after the 1 s head timeout: on a loaded machine, again
        idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(4)]
        try:
            time.sleep(0.1)  # accepted by the server
            statuses.append(httpx.get(f"http://{served.host}/", headers={"host": served.host}).status_code)
        finally:
            for sock in idle:
                sock.close()
        if statuses[-1] == 503:
            break
    assert statuses[-1] == 503, statuses
    deadline = time.monotonic() + 5
    while True:
        after = httpx.get(f"http://{served.host}/", headers={"host": served.host})
        if after.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after.status_code != 503


def test_the_defaults_reach_uvicorn() -> None:
    config = uvicorn_config(lambda *_: None)
    assert (config.timeout_keep_alive, config.limit_concurrency, config.h11_max_incomplete_event_size) == (
        KEEP_ALIVE_TIMEOUT, MAX_CONNECTIONS + 1, MAX_HEADER_BYTES,
    )  # fmt: skip
    assert (config.app.limits.max_body_bytes, config.app.limits.header_timeout) == (MAX_BODY_BYTES, HEADER_TIMEOUT)
    assert config.app.limits.body_timeout == BODY_TIMEOUT
    with pytest.raises(ValueError, match="header_timeout"):
        ServerLimits(header_timeout=0)


@contextlib.contextmanager
def _serving(app: object, limits: ServerLimits) -> Iterator[int]:
    """``app`` served by uvicorn within ``limits`` (:func:`uvicorn_config`) on a free port, in a thread."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, limits, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_websocket_outlives_the_head_deadline() -> None:
    # The upgrade request's head arrives whole: the head deadline is over, the WebSocket protocol has the
    # connection. It was left armed: after header_timeout, a 408 response was written into the WebSocket stream.
    import asyncio

    import websockets
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:
            await websocket.send_text("echo " + await websocket.receive_text())

    app = Starlette(routes=[WebSocketRoute("/ws", echo)])

    async def talk(port: int) -> list[str]:
        got = []
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as ws:
            for i in range(5):  # 2 s: four times the head deadline
                await ws.send(f"m{i}")
                got.append(str(await ws.recv()))
                await asyncio.sleep(0.4)
        return got

    with _serving(app, ServerLimits(header_timeout=0.5, keep_alive_timeout=1)) as port:
        assert asyncio.run(talk(port)) == [f"echo m{i}" for i in range(5)]


@pytest.mark.parametrize(
    "command",
    [
        ["a2a", "serve", "--agent", "tests.mcp.served:agent"],
        ["mcp", "serve", "--http", "--tools", "files"],
        ["web", "--model", "demo"],
    ],
)
@pytest.mark.parametrize("option", ["--header-timeout", "--body-timeout"])
def test_a_timeout_that_is_not_a_number_is_a_usage_error(command: list[str], option: str) -> None:
    # click's FloatRange lets "nan" through (every comparison with it is false): ServerLimits then raised a
    # ValueError, shown as a traceback, after the command had started loading its agent.
    from click.testing import CliRunner

    from loopctl.cli import main

    result = CliRunner().invoke(main, [*command, "--port", "1", option, "nan"])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert f"Invalid value for '{option}': 'nan' is not a number of seconds." in result.output


def test_a_limit_too_large_for_the_event_loops_timers_is_refused() -> None:
    # Before: accepted; then every response's keep-alive timer (or every connection's head timer, every body's
    # deadline) raised OverflowError in the server: each request logged an ASGI exception and lost its connection.
    from click.testing import CliRunner

    from loopctl.cli import main

    huge = 10**400
    for name in ("keep_alive_timeout", "header_timeout", "body_timeout"):
        with pytest.raises(ValueError, match=f"ServerLimits: {name} is too large"):
            ServerLimits(**{name: huge})
    command = ["a2a", "serve", "--agent", "tests.mcp.served:agent", "--port", "1", "--keep-alive-timeout", str(huge)]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Invalid value for '--keep-alive-timeout'" in result.output and "1<=x<=1000000000" in result.output
    result = CliRunner().invoke(main, [*command[:-2], "--max-body-bytes", str(huge)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "--max-body-bytes is too large (more than a float holds)" in result.output


def test_max_connections_counts_the_connection_that_asks() -> None:
    # uvicorn's limit_concurrency counts the connection asking among the open ones. Before: it was given
    # max_connections as it is, so --max-connections 1 answered every request 503, and N served N - 1.
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    limits = ServerLimits(max_connections=2, header_timeout=30, keep_alive_timeout=30)
    with _serving(app, limits) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}") as asking:
        assert asking.get("/").status_code == 200  # its connection alone, under max_connections=2
        with socket.create_connection(("127.0.0.1", port)):
            time.sleep(0.2)  # accepted
            assert asking.get("/").status_code == 200  # two connections: as many as max_connections
            with socket.create_connection(("127.0.0.1", port)):
                time.sleep(0.2)
                assert asking.get("/").status_code == 503  # three: past it
