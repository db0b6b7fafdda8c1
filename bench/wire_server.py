#!/usr/bin/env python3
"""A stateless local model server for the wire benchmark: OpenAI Chat Completions and Anthropic Messages over
HTTP/1.1 with keep-alive, in its own process.

    python bench/wire_server.py [--port 0]        # prints "port <n>" on its first line, then serves

Every reply is derived from the request alone, so the server holds no state and costs the same at every
turn for every client: the model name ``w<N>`` says how many tool-calling turns the run has, and the number
of tool results already in the request says which turn this is (``"role":"tool"`` messages for Chat,
``"tool_result"`` blocks for Anthropic; counted on the raw bytes, never parsed). Before turn N the reply is
one call of the ``echo`` tool (a 200-character ``text``), after it a final text ``done``; both streamed when
the request asks for ``"stream": true`` (SSE, one chunk of the chunked body per event, written together), a
whole JSON body otherwise. The event shapes are the providers' documented ones (platform.openai.com/docs/
api-reference/chat-streaming, docs.anthropic.com/en/api/messages-streaming).

OpenAI Responses too (``POST /v1/responses``, SSE or JSON), and its WebSocket mode (``GET /v1/responses``
upgraded: each ``response.create`` text message answered with the same events as text messages;
platform.openai.com/docs/guides/websocket-mode). A Responses request says its turn by its
``previous_response_id`` (``resp_<turn>_...``: the turn after that one) or, sent whole, by its count of
``function_call_output`` items; the server keeps nothing (a real server keeps the chain; this one needs only
the turn).

Plain asyncio (a ``Protocol``, no framework), so the server adds as little as it can to every client's time.
For the benchmark's timing it notes when each request arrived (``time.monotonic()``, the same clock in every
process); ``GET /_marks`` returns those times as a JSON list and forgets them. It also counts the bytes each
model request took on the wire (an HTTP request's head and body; a WebSocket message's frames, headers
included); ``/_bytes`` returns them the same way. The notes never change a reply.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import re
import sys
import time

PAYLOAD = ("The quick brown fox jumps over the lazy dog. " * 5)[:200]
FINAL = "done"
_MODEL = re.compile(rb'"model"\s*:\s*"w(\d+)"')
_ARGS = json.dumps({"text": PAYLOAD})
MARKS: list[float] = []
BYTES: list[int] = []
_PREVIOUS = re.compile(rb'"previous_response_id"\s*:\s*"resp_(\d+)_')
_IDS = itertools.count()
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_USAGE_CHAT = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def _sse(obj: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


def _chunked(pieces: list[bytes]) -> bytes:
    out = bytearray()
    for p in pieces:
        out += b"%x\r\n" % len(p) + p + b"\r\n"
    out += b"0\r\n\r\n"
    return bytes(out)


def _chunk(turn: int, model: str, delta: dict[str, object], finish: str | None) -> dict[str, object]:
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def chat_stream(turn: int, n: int, model: str) -> list[bytes]:
    """The SSE events of a streamed Chat reply for ``turn`` of a W(``n``) run."""
    if turn < n:
        call = {"index": 0, "id": f"call_{turn}", "type": "function", "function": {"name": "echo", "arguments": ""}}
        events = [
            _chunk(turn, model, {"role": "assistant", "content": None, "tool_calls": [call]}, None),
            _chunk(turn, model, {"tool_calls": [{"index": 0, "function": {"arguments": _ARGS}}]}, None),
            _chunk(turn, model, {}, "tool_calls"),
        ]
    else:
        events = [
            _chunk(turn, model, {"role": "assistant", "content": ""}, None),
            _chunk(turn, model, {"content": FINAL}, None),
            _chunk(turn, model, {}, "stop"),
        ]
    usage = {"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "created": 0, "model": model,
             "choices": [], "usage": _USAGE_CHAT}  # fmt: skip
    return [*(_sse(e) for e in events), _sse(usage), b"data: [DONE]\n\n"]


def chat_json(turn: int, n: int, model: str) -> dict[str, object]:
    """A whole Chat reply for ``turn`` of a W(``n``) run."""
    if turn < n:
        message: dict[str, object] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{turn}", "type": "function", "function": {"name": "echo", "arguments": _ARGS}}
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": FINAL}, "stop"
    return {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": _USAGE_CHAT}  # fmt: skip


def anthropic_stream(turn: int, n: int, model: str) -> list[bytes]:
    """The SSE events of a streamed Anthropic reply for ``turn`` of a W(``n``) run."""
    start = {"type": "message_start", "message": {"id": f"msg_{turn}", "type": "message", "role": "assistant",
             "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": 100, "output_tokens": 1}}}  # fmt: skip
    if turn < n:
        block = {"type": "tool_use", "id": f"toolu_{turn}", "name": "echo", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": _ARGS}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": FINAL}
        stop = "end_turn"
    events = [
        ("message_start", start),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [_sse(body, name) for name, body in events]


def anthropic_json(turn: int, n: int, model: str) -> dict[str, object]:
    """A whole Anthropic reply for ``turn`` of a W(``n``) run."""
    if turn < n:
        content: list[object] = [
            {"type": "tool_use", "id": f"toolu_{turn}", "name": "echo", "input": {"text": PAYLOAD}}
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": FINAL}], "end_turn"
    return {"id": f"msg_{turn}", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 20}}  # fmt: skip


def _responses_usage() -> dict[str, object]:
    return {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120}  # fmt: skip


def _response(rid: str, model: str, status: str, output: list[object]) -> dict[str, object]:
    return {"id": rid, "object": "response", "created_at": 0, "status": status, "model": model, "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "usage": _responses_usage() if status == "completed" else None}  # fmt: skip


def responses_turn(body: bytes) -> int:
    """The turn a Responses request asks for: the one after its ``previous_response_id``'s, else the number
    of tool results it sends."""
    m = _PREVIOUS.search(body)
    return int(m.group(1)) + 1 if m else body.count(b'"function_call_output"')


def responses_events(turn: int, n: int, model: str) -> list[dict[str, object]]:
    """The stream events of a Responses reply for ``turn`` of a W(``n``) run (openai-python
    ``ResponseStreamEvent`` shapes); the last is ``response.completed`` holding the whole response."""
    rid = f"resp_{turn}_{next(_IDS)}"
    if turn < n:
        fid = f"fc_{turn}"
        item: dict[str, object] = {"type": "function_call", "id": fid, "call_id": f"call_{turn}", "name": "echo",
                                   "arguments": "", "status": "in_progress"}  # fmt: skip
        done = {**item, "arguments": _ARGS, "status": "completed"}
        middle: list[dict[str, object]] = [
            {"type": "response.function_call_arguments.delta", "item_id": fid, "output_index": 0, "delta": _ARGS},
            {"type": "response.function_call_arguments.done", "item_id": fid, "output_index": 0, "arguments": _ARGS},
        ]
    else:
        mid = f"msg_{turn}"
        item = {"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": FINAL, "annotations": []}
        done = {**item, "status": "completed", "content": [part]}
        at = {"item_id": mid, "output_index": 0, "content_index": 0}
        middle = [
            {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **at, "delta": FINAL, "logprobs": []},
            {"type": "response.output_text.done", **at, "text": FINAL, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": part},
        ]
    events = [
        {"type": "response.created", "response": _response(rid, model, "in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        *middle,
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {"type": "response.completed", "response": _response(rid, model, "completed", [done])},
    ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def reply(path: bytes, body: bytes) -> bytes:
    """The whole HTTP response (head and body) to a POST of ``body`` to ``path``."""
    m = _MODEL.search(body)
    if m is None:
        return _head(400, b"application/json", b'{"error":{"message":"model must be w<N>","type":"invalid"}}')
    n = int(m.group(1))
    model = f"w{n}"
    stream = b'"stream":true' in body or b'"stream": true' in body
    if path.endswith(b"/chat/completions"):
        turn = body.count(b'"tool"')  # the role of each tool message; nothing else in a bench request says "tool"
        if stream:
            return _head_chunked(chat_stream(turn, n, model))
        return _head(200, b"application/json", json.dumps(chat_json(turn, n, model)).encode())
    if path.endswith(b"/responses"):
        events = responses_events(responses_turn(body), n, model)
        if stream:
            return _head_chunked([_sse(e, str(e["type"])) for e in events])
        return _head(200, b"application/json", json.dumps(events[-1]["response"]).encode())
    if path.endswith(b"/messages"):
        turn = body.count(b'"tool_result"')
        if stream:
            return _head_chunked(anthropic_stream(turn, n, model))
        return _head(200, b"application/json", json.dumps(anthropic_json(turn, n, model)).encode())
    return _head(404, b"application/json", b'{"error":{"message":"no such endpoint","type":"not_found"}}')


def _head(status: int, ctype: bytes, body: bytes) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}[status]
    return (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (status, reason, ctype, len(body))
            + body)  # fmt: skip


def _head_chunked(events: list[bytes]) -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + _chunked(events))  # fmt: skip


class _Conn(asyncio.Protocol):
    """One keep-alive connection: requests in order, each answered as soon as its body is in."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.need = -1  # body bytes still expected; -1 while reading a head
        self.path = b""
        self.head_size = 0
        self.transport: asyncio.Transport | None = None
        self.websocket = False
        self.message = bytearray()  # a WebSocket message's payload so far (fragments)
        self.message_size = 0  # its frames' bytes so far

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.websocket:
            self._frames()
            return
        while True:
            if self.need < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end])
                del self.buf[: end + 4]
                self.head_size = end + 4
                lines = head.split(b"\r\n")
                self.path = lines[0].split(b" ")[1].split(b"?")[0]
                self.need = 0
                key = b""
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        self.need = int(value)
                    elif name == b"sec-websocket-key":
                        key = value.strip()
                if key:
                    self._upgrade(key)
                    return
            if len(self.buf) < self.need:
                return
            body = bytes(self.buf[: self.need])
            del self.buf[: self.need]
            self.need = -1
            assert self.transport is not None
            if self.path == b"/_marks":
                marks = json.dumps(MARKS).encode()
                MARKS.clear()
                self.transport.write(_head(200, b"application/json", marks))
                continue
            if self.path == b"/_bytes":
                sizes = json.dumps(BYTES).encode()
                BYTES.clear()
                self.transport.write(_head(200, b"application/json", sizes))
                continue
            MARKS.append(time.monotonic())
            BYTES.append(self.head_size + len(body))
            self.transport.write(reply(self.path, body))

    # --- the WebSocket mode (RFC 6455, what the Responses API's WebSocket mode needs) -----------------------

    def _upgrade(self, key: bytes) -> None:
        accept = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest())
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                             b"sec-websocket-accept: " + accept + b"\r\n\r\n")  # fmt: skip
        self.websocket = True
        self.need = -1
        if self.buf:
            self._frames()

    def _frames(self) -> None:
        """Read the client's frames (masked, RFC 6455 section 5.2): answer pings, close on a close, and each
        whole text message as a ``response.create``."""
        buf = self.buf
        assert self.transport is not None
        while len(buf) >= 2:
            fin, opcode = buf[0] & 0x80, buf[0] & 0x0F
            length, at = buf[1] & 0x7F, 2
            if length == 126:
                if len(buf) < 4:
                    return
                length, at = int.from_bytes(buf[2:4], "big"), 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length, at = int.from_bytes(buf[2:10], "big"), 10
            masked = buf[1] & 0x80
            end = at + (4 if masked else 0) + length
            if len(buf) < end:
                return
            payload = bytes(buf[end - length : end])
            if masked:
                mask = buf[at : at + 4]
                pad = (mask * (length // 4 + 1))[:length]
                payload = (int.from_bytes(payload, "big") ^ int.from_bytes(pad, "big")).to_bytes(length, "big")
            size = end
            del buf[:end]
            if opcode == 0x9:  # ping
                self.transport.write(_frame(0xA, payload))
            elif opcode == 0x8:  # close
                self.transport.write(_frame(0x8, payload[:2]))
                self.transport.close()
                return
            elif opcode in (0x0, 0x1, 0x2):
                self.message += payload
                self.message_size += size
                if fin:
                    message, self.message = bytes(self.message), bytearray()
                    MARKS.append(time.monotonic())
                    BYTES.append(self.message_size)
                    self.message_size = 0
                    self.transport.write(_ws_reply(message))


def _frame(opcode: int, payload: bytes) -> bytes:
    """A server frame (unmasked, final)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 1 << 16:
        head = bytes((0x80 | opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 127)) + n.to_bytes(8, "big")
    return head + payload


def _ws_reply(message: bytes) -> bytes:
    """The frames answering one WebSocket message: a ``response.create``'s events, one text message each."""
    m = _MODEL.search(message)
    if m is None or b'"response.create"' not in message:
        error = {"type": "error", "status": 400, "error": {"type": "invalid_request_error", "message": "bad request"}}
        return _frame(0x1, json.dumps(error).encode())
    n = int(m.group(1))
    events = responses_events(responses_turn(message), n, f"w{n}")
    return b"".join(_frame(0x1, json.dumps(e, separators=(",", ":")).encode()) for e in events)


async def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` (0: a free one) until killed; print the port first."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Conn, "127.0.0.1", port, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    """Parse the command line and serve."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
