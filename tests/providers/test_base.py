"""What every codec's stream decoder shares (``loopctl.providers.base.SSEStreamDecoder``): bodies that are
not the event stream that was asked for."""

from __future__ import annotations

from types import ModuleType

import pytest

from loopctl.errors import ProviderProtocolError, StreamTruncated
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses

CODECS = [anthropic, gemini, openai_chat, openai_responses]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize(
    "body",
    [b"<html><body>502 Bad Gateway</body></html>", b"Service Unavailable\n", b"\x00\xff\xfe binary junk"],
)
def test_a_body_that_is_not_an_event_stream_is_a_protocol_error_not_a_cut_stream(
    codec: ModuleType, body: bytes
) -> None:
    # It was StreamTruncated ("the stream ended before the reply was complete"), which is retryable: the
    # engine retried a proxy's error page up to max_retries times and then reported a dropped stream.
    with pytest.raises(ProviderProtocolError, match="the reply is not an event stream: b'") as info:
        codec.parse_stream([body[:5], body[5:]])
    assert not info.value.retryable


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("body", [b"", b"\n\n", b": keep-alive\n\n", b"\xef\xbb\xbf: ping\n\n", b"event: ping\n"])
def test_an_event_stream_that_ends_early_is_still_a_cut_stream(codec: ModuleType, body: bytes) -> None:
    with pytest.raises(StreamTruncated):
        codec.parse_stream([body])


@pytest.mark.parametrize("codec", [anthropic, gemini], ids=["anthropic", "gemini"])
def test_json_that_is_no_error_in_place_of_a_stream_is_a_protocol_error_not_a_server_error(codec: ModuleType) -> None:
    # A whole reply from a proxy that ignored `stream: true` read as ServerError "HTTP 500 (HTTP 500)", a
    # retryable error with no text.
    with pytest.raises(ProviderProtocolError, match="the stream body is JSON but not an error object") as info:
        codec.parse_stream([b'{"id": "msg_1", "type": "message", "content": []}'])
    assert not info.value.retryable


def _events(*objs: object) -> list[bytes]:
    import json

    return [b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)]


START = {"type": "message_start", "message": {"id": "m", "usage": {}}}
TEXT = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}


@pytest.mark.parametrize(
    "stream",
    [
        _events({"type": "message_start", "message": "m"}),
        _events(START, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": 5}}),
        _events(START, TEXT, {"type": "content_block_delta", "index": 0, "delta": "x"}),
        _events(START, TEXT, {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 7}},
                {"type": "message_stop"}),
        _events(START, {"type": "content_block_start", "index": [0], "content_block": TEXT["content_block"]}),
        _events({"type": "message_start", "message": {"usage": {"input_tokens": 1, "cache_read_input_tokens": "2"}}}),
        _events(START, {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": 5}}),
    ],
)  # fmt: skip
def test_an_event_of_the_wrong_shape_is_the_providers_protocol_error(stream: list[bytes]) -> None:
    # Each raised a bare TypeError or AttributeError (or InvalidMessage, the caller's error) out of the
    # client, which ended the run by raising instead of failing it.
    with pytest.raises(ProviderProtocolError, match=r"^anthropic: a reply of an unexpected shape \("):
        anthropic.parse_stream(stream)
