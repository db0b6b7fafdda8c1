#!/usr/bin/env python3
"""HTTP/2 or HTTP/1.1 for the clients? The client's cost of one model call over each, measured in one run.

One local server in its own process speaks both: HTTP/1.1 (``bench/wire_server.py``) and HTTP/2 with prior
knowledge (h2c, this file's ``--serve-h2``, on the ``h2`` library). The same streamed Chat Completions call
(the body of a W(N) request, a streamed tool call back) is sent with httpx2 over each, sequentially and as K
concurrent calls on one client (where HTTP/2 multiplexes one connection and HTTP/1.1 opens a pool).
Reported: the client process's CPU time and the wall time per call. HTTP/2 is worth turning on only if it
costs the client less: the providers' servers answer either.

    .venv-bench/bin/python bench/bench_http2.py [--ns 10,300] [--k 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _smoke  # noqa: E402
import wire_server  # noqa: E402  (the same replies as the HTTP/1.1 server)

# --- the HTTP/2 server -----------------------------------------------------------------------------------------


class _H2Conn(asyncio.Protocol):
    """One h2c connection: each stream's body collected, then answered as ``wire_server.reply`` would."""

    def __init__(self) -> None:
        import h2.config
        import h2.connection

        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.bodies: dict[int, bytearray] = {}
        self.paths: dict[int, bytes] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(2**30)
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        import h2.events

        assert self.transport is not None
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.paths[event.stream_id] = dict(event.headers)[b":path"]
                self.bodies[event.stream_id] = bytearray()
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self._answer(event.stream_id)
        self.transport.write(self.conn.data_to_send())

    def _answer(self, stream_id: int) -> None:
        raw = wire_server.reply(self.paths.pop(stream_id).split(b"?")[0], bytes(self.bodies.pop(stream_id)))
        head, _, body = raw.partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head:  # undo the HTTP/1.1 chunking: h2 frames the data itself
            out, rest = bytearray(), body
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line, 16)
                if size == 0:
                    break
                out += rest[:size]
                rest = rest[size + 2 :]
            body = bytes(out)
        status = head.split(b" ")[1]
        ctype = b"text/event-stream" if b"event-stream" in head else b"application/json"
        self.conn.send_headers(stream_id, [(b":status", status), (b"content-type", ctype)])
        self.conn.send_data(stream_id, body, end_stream=True)


async def _serve_h2() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_H2Conn, "127.0.0.1", 0, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


# --- the client side ---------------------------------------------------------------------------------------------


def _body(n: int) -> bytes:
    from loopctl.message import Message, MessagePart, Role
    from loopctl.providers import openai_chat
    from loopctl.tool import ToolSchema

    history = [Message.user("go")]
    for i in range(n):
        history.append(Message.new(Role.ASSISTANT, [MessagePart.tool_call(f"call_{i}", "echo", {"text": "x" * 200})]))
        history.append(Message.new(Role.USER, [MessagePart.tool_result(f"call_{i}", "echo", "x" * 200, False)]))
    echo = ToolSchema("echo", "Echo.", {"type": "object", "properties": {"text": {"type": "string"}}})
    body = openai_chat.build_request(history, model="w1000000", tools=[echo], stream=True)
    return json.dumps(body, separators=(",", ":")).encode()


async def _measure(http: Any, url: str, body: bytes, calls: int, k: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call for ``calls`` calls, ``k`` at a time."""

    async def one() -> None:
        async with http.stream("POST", url, content=body, headers={"content-type": "application/json"}) as r:
            async for _ in r.aiter_bytes():
                pass

    for _ in range(5):
        await one()
    w0, p0 = time.perf_counter(), time.process_time()
    for _ in range(calls // k):
        await asyncio.gather(*(one() for _ in range(k)))
    done = calls // k * k
    return (time.process_time() - p0) / done * 1e3, (time.perf_counter() - w0) / done * 1e3


async def _client(ports: dict[str, int], ns: list[int], k: int, smoke: bool = False) -> None:
    import httpx2

    clients = {
        "HTTP/1.1": httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=1000)),
        "HTTP/2": httpx2.AsyncClient(timeout=60, http1=False, http2=True),
    }
    rows: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
    for n in ns:
        body = _body(n)
        calls = k if smoke else max(k, 3000 // (n + 10))
        for _ in range(1 if smoke else 3):  # alternate, the machine's load drifts
            for name, http in clients.items():
                url = f"http://127.0.0.1:{ports[name]}/v1/chat/completions"
                for conc in (1, k):
                    rows.setdefault((name, n, conc), []).append(await _measure(http, url, body, calls, conc))
    print("\n| protocol | N (body KB) | concurrent | client CPU ms per call | wall ms per call |\n|---|---:|---:|---:|---:|")
    for (name, n, conc), got in rows.items():
        kb = len(_body(n)) / 1024
        print(f"| {name} | {n} ({kb:.0f}) | {conc} | {statistics.median(c for c, _ in got):.3f} | "
              f"{statistics.median(w for _, w in got):.3f} |")  # fmt: skip
    for http in clients.values():
        await http.aclose()


def main() -> None:
    """Start both servers, measure, print the table."""
    if "--serve-h2" in sys.argv:
        asyncio.run(_serve_h2())
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="10,300")
    ap.add_argument("--k", type=int, default=50)
    _smoke.add_flag(ap)
    a = ap.parse_args()
    if a.smoke:
        a.ns, a.k = "3", 2
    if _smoke.peer_missing("HTTP/2 (both protocols)", "h2"):
        return
    servers = {
        "HTTP/1.1": subprocess.Popen([sys.executable, str(HERE / "wire_server.py")], stdout=subprocess.PIPE, text=True),
        "HTTP/2": subprocess.Popen([sys.executable, __file__, "--serve-h2"], stdout=subprocess.PIPE, text=True),
    }
    try:
        ports = {name: int(p.stdout.readline().split()[1]) for name, p in servers.items() if p.stdout}
        asyncio.run(_client(ports, [int(x) for x in a.ns.split(",")], a.k, a.smoke))
    finally:
        for p in servers.values():
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
