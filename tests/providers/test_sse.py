"""Server-sent events framing (``loopctl.providers.sse``): the WHATWG rules, whatever the chunking, in linear
work.

Performance figures are in ``bench/bench_sse.py``; the test here measures allocation, not time: a feed that
copies the buffered line again (the quadratic decoder) allocates as much as the line so far.
"""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from loopctl.providers.sse import ServerSentEvent, SSEDecoder


def decode(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    decoder.close()
    return events


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


STREAM = (
    "\ufeff: comment\r\n"
    "event: delta\r\ndata: one\r\ndata:two\r\n\r\n"
    'id: 7\ndata: {"x": "é漢🙂"}\n\n'
    "data\rdata: after a bare CR\r\r"
    "retry: 10\nunknown: field\ndata: last\n\n"
    "data: incomplete at the end"
).encode()

EXPECTED = [
    ServerSentEvent("delta", "one\ntwo"),
    ServerSentEvent("message", '{"x": "é漢🙂"}', "7"),
    ServerSentEvent("message", "\nafter a bare CR", "7"),
    ServerSentEvent("message", "last", "7"),
]


def test_whole_stream_decodes_by_the_standards_rules() -> None:
    assert decode([STREAM]) == EXPECTED


def test_byte_by_byte_is_the_same_as_whole() -> None:
    # Every line end split between its CR and LF, every UTF-8 character split inside.
    assert decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunking_is_the_same_as_whole(cuts: list[int]) -> None:
    assert decode(split(STREAM, cuts)) == EXPECTED


def test_a_long_line_in_small_chunks_is_read_whole() -> None:
    line = "x" * 300_000 + "漢"
    data = f"data: {line}\r\n\r\ndata: next\n\n".encode()
    events = decode([data[i : i + 1000] for i in range(0, len(data), 1000)])
    assert events == [ServerSentEvent("message", line), ServerSentEvent("message", "next")]


def test_close_reports_an_incomplete_event_and_a_half_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.close() is True
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: half") == [ServerSentEvent("message", "a")]
    assert decoder.close() is True
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n\xe6\xbc") == [ServerSentEvent("message", "a")]  # cut inside a character
    assert decoder.close() is True
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n") == [ServerSentEvent("message", "a")]
    assert decoder.close() is False


def test_a_feed_allocates_in_proportion_to_its_chunk_not_to_the_line_so_far() -> None:
    # One 2 MB line in 1 KB chunks. The decoder that joined its buffer with each new chunk copied the whole
    # line so far on every feed (4 MB in 1 KB chunks took 2 s, whole 0.04 s): its largest allocation in one
    # feed grew to the size of the line. Each feed may now allocate about its own chunk; only the feed that
    # ends the line joins it, once.
    chunk = 1024
    data = b"data: " + b"y" * 2_000_000
    decoder = SSEDecoder()
    tracemalloc.start()
    try:
        largest = 0
        for i in range(0, len(data), chunk):
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            assert decoder.feed(data[i : i + chunk]) == []
            largest = max(largest, tracemalloc.get_traced_memory()[1] - before)
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        events = decoder.feed(b"\n\n")
        joined = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert events == [ServerSentEvent("message", "y" * 2_000_000)]
    assert largest < 20 * chunk, largest
    assert joined >= 2_000_000  # the one join (and the event's data), at the end


def test_data_lines_keep_all_but_one_leading_space_and_other_fields_are_not_data() -> None:
    stream = b"data:\n\ndata:  two\ndataX: not data\ndata\n\n: c\nevent: e\ndata: x\n\n"
    assert decode([stream]) == [
        ServerSentEvent("message", ""),
        ServerSentEvent("message", " two\n"),
        ServerSentEvent("e", "x"),
    ]


@given(st.lists(st.integers(min_value=0), max_size=12))
def test_bytes_that_are_not_utf8_read_as_replacement_characters_in_any_chunking(cuts: list[int]) -> None:
    stream = b"data: a\xffb\xe6\xbc\n\ndata: \xf0\x9f\x99\x82\n\n"
    assert decode(split(stream, cuts)) == [
        ServerSentEvent("message", "a\ufffdb\ufffd"),
        ServerSentEvent("message", "\U0001f642"),
    ]
