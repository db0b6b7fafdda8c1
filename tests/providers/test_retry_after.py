"""``Retry-After`` as an HTTP-date (RFC 9110 section 10.2.3), read by every provider's error mapping.

The codecs read no clock: ``error_from_http(..., now=...)`` takes the caller's "now" (Unix seconds) and
turns the date into the seconds left; the clients pass ``time.time()``. A date was ignored before
(``retry_after=None``), so the engine backed off on its own schedule instead of the provider's.
"""

from __future__ import annotations

import email.utils
import time
from types import ModuleType
from typing import Any

import pytest

from loopctl.errors import Overloaded, RateLimited
from loopctl.message import Message
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.providers._common import parse_retry_after
from loopctl.providers.base import ModelRequest
from loopctl.testing import ErrorReply, FakeProviderServer
from tests.fake_clients import KINDS, make_client

CODECS = [anthropic, gemini, openai_chat, openai_responses]
NOW = 1_445_412_450.0  # Wed, 21 Oct 2015 07:27:30 GMT
DATE = "Wed, 21 Oct 2015 07:28:00 GMT"  # 30 s later
BODY = {
    "anthropic": b'{"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}',
    "gemini": b'{"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}',
    "openai_chat": b'{"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}',
    "openai_responses": b'{"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}',
}


def name(codec: ModuleType) -> str:
    return codec.__name__.rsplit(".", 1)[-1]


@pytest.mark.parametrize("codec", CODECS, ids=name)
@pytest.mark.parametrize("status", [429, 503])
def test_an_http_date_is_the_seconds_from_now_to_it(codec: ModuleType, status: int) -> None:
    error = codec.error_from_http(status, BODY[name(codec)], {"Retry-After": DATE}, now=NOW)
    assert isinstance(error, (RateLimited, Overloaded))
    assert error.retry_after == 30.0


@pytest.mark.parametrize("codec", CODECS, ids=name)
def test_a_date_in_the_past_means_now_and_seconds_still_read_without_now(codec: ModuleType) -> None:
    body = BODY[name(codec)]
    assert codec.error_from_http(429, body, {"retry-after": DATE}, now=NOW + 3600).retry_after == 0.0
    assert codec.error_from_http(429, body, {"retry-after": "12"}).retry_after == 12.0
    # Without "now" the codec cannot tell how far a date is; it says nothing rather than guess.
    assert codec.error_from_http(429, body, {"retry-after": DATE}).retry_after is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (DATE, 30.0),
        ("Wed, 21 Oct 2015 07:28:00 -0000", 30.0),  # no zone given: still GMT, not the local zone
        ("Wednesday, 21-Oct-15 07:28:00 GMT", 30.0),  # the obsolete RFC 850 form, which a recipient must read
        ("soon", None),
        ("", None),
        ("  7 ", 7.0),
        ("-3", 0.0),
    ],
)
def test_parse_retry_after_reads_seconds_and_dates(value: str, expected: float | None) -> None:
    assert parse_retry_after({"Retry-After": value}, now=NOW) == expected


def test_retry_after_ms_wins_over_a_date() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": DATE}, now=NOW) == 1.5


@pytest.mark.parametrize("kind", KINDS)
async def test_each_client_turns_a_date_into_seconds(kind: str) -> None:
    when = email.utils.formatdate(time.time() + 40, usegmt=True)
    reply = ErrorReply.rate_limited(retry_after=None, headers={"Retry-After": when})
    with FakeProviderServer([reply]) as server:
        client: Any = make_client(kind, server)
        with pytest.raises(RateLimited) as caught:
            await client.generate(ModelRequest(messages=[Message.user("hi")]), stream=False)
        await client.aclose()
    retry_after = caught.value.retry_after
    assert retry_after is not None and 30.0 <= retry_after <= 40.0  # whole seconds on the wire, and time passed
