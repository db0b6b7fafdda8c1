"""Cutting text for markers and transcripts never splits a character, a surrogate pair or a grapheme."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.compact import clip, clip_middle, safe_cut_index

FAMILY = "👩\u200d👩\u200d👧"  # one grapheme, five code points
THUMB = "👍🏽"  # emoji + skin-tone modifier
FLAGS = "🇫🇷🇩🇪"  # two flags, four regional indicators
ACCENT = "e\u0301"  # e + combining acute
VS16 = "❤\ufe0f"


@pytest.mark.parametrize(
    ("text", "index", "expected"),
    [
        ("ab" + ACCENT + "cd", 3, 2),  # before the combining mark: back off before the e
        ("ab" + FAMILY, 4, 2),  # inside the ZWJ sequence
        ("ab" + FAMILY, 3, 2),  # right after a ZWJ
        ("ab" + THUMB, 3, 2),  # between emoji and modifier
        ("ab" + FLAGS, 3, 2),  # inside the first flag
        ("ab" + FLAGS, 4, 4),  # between the two flags: fine
        ("ab" + FLAGS, 5, 4),  # inside the second flag
        ("ab\r\ncd", 3, 2),  # inside CR LF
        ("ab" + VS16, 3, 2),  # before a variation selector
        ("a\ud83d\ude00b", 2, 1),  # a surrogate pair held as two code points
        ("abcdef", 3, 3),
        ("abc", 10, 3),
        ("abc", 0, 0),
    ],
)
def test_cut_never_splits_a_character_or_grapheme(text: str, index: int, expected: int) -> None:
    assert safe_cut_index(text, index) == expected


def test_clip_adds_an_ellipsis_within_the_limit() -> None:
    assert clip("hello world", 20) == "hello world"
    assert clip("hello world", 6) == "hello…"
    assert clip("ab" + FAMILY + "cd", 5) == "ab…"


def test_clip_middle_says_how_much_was_cut() -> None:
    text = "H" * 5000 + FAMILY * 100 + "T" * 5000
    out = clip_middle(text, 1000)
    assert len(out) <= 1000
    assert out.startswith("H")
    assert out.endswith("T")
    cut = len(text) - len(out.split("…")[0]) - len(out.split("…")[-1])
    assert f"[{cut:,} characters cut]" in out


def test_clip_middle_cuts_safely_on_both_sides() -> None:
    text = FAMILY * 400
    out = clip_middle(text, 200)
    head, tail = out.split("…")[0], out.split("…")[-1]
    assert len(head) % len(FAMILY) == 0
    assert len(tail) % len(FAMILY) == 0


@given(st.data())
def test_any_cut_lands_on_the_nearest_boundary_before_it(data: st.DataObject) -> None:
    # Build the text from known clusters so the valid boundaries are known exactly.
    pieces = data.draw(
        st.lists(st.sampled_from(["a", "é", ACCENT, FAMILY, THUMB, "🇫🇷", "\r\n", "漢", VS16]), max_size=40)
    )
    joined = "".join(pieces)
    boundaries = {0}
    pos = 0
    for p in pieces:
        pos += len(p)
        boundaries.add(pos)
    index = data.draw(st.integers(0, len(joined)))
    cut = safe_cut_index(joined, index)
    assert cut <= index
    assert cut in boundaries
    assert not any(b for b in boundaries if cut < b <= index)  # the nearest boundary, not an earlier one


@given(st.text(), st.integers(0, 200))
def test_clipped_text_is_valid_unicode(text: str, limit: int) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    for out in (clip(text, limit), clip_middle(text, max(limit, 60))):
        out.encode("utf-8")
