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
