"""Cutting text short for markers and transcripts without breaking a character.

A Python ``str`` is a sequence of code points, so slicing never splits a UTF-8 sequence; what a careless cut
can still break is a surrogate pair (text decoded from JSON ``\\ud83d\\ude00`` escapes by a lenient reader)
and a user-perceived character (a grapheme cluster: a letter and its combining accents, an emoji with a
skin-tone modifier, a ZWJ family, a flag made of two regional indicators, CR LF). :func:`safe_cut_index`
moves a cut off every such boundary with a bounded look-around (cheap, no Unicode segmentation tables);
the rest of this module is built on it.

Pure: no I/O.
"""

from __future__ import annotations

import unicodedata

__all__ = ["ELLIPSIS", "clip", "clip_known_ends", "clip_middle", "safe_cut_index"]

ELLIPSIS = "…"
"""Appended to text that was cut short."""

#: No grapheme cluster this module protects is longer; a longer run of joiners is cut anyway.
_MAX_BACKOFF = 32

_ZWJ = "\u200d"


def _extends(ch: str) -> bool:
    """True for a code point that continues the cluster before it (so a cut must not fall before it)."""
    o = ord(ch)
    if 0xDC00 <= o <= 0xDFFF:  # low surrogate: second half of a pair
        return True
    if ch == _ZWJ or 0xFE00 <= o <= 0xFE0F or 0xE0100 <= o <= 0xE01EF:  # joiner, variation selectors
        return True
    if 0x1F3FB <= o <= 0x1F3FF or 0xE0020 <= o <= 0xE007F:  # emoji modifiers, tag characters
        return True
    return o >= 0x300 and unicodedata.category(ch) in ("Mn", "Me", "Mc")


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def safe_cut_index(text: str, index: int) -> int:
    """The largest ``i <= index`` where ``text[:i]`` ends on a character boundary that splits no surrogate
    pair, no grapheme cluster this module knows (see the module docstring) and no CR LF.

    Gives up after 32 code points and returns the plain index then (a pathological run of combining marks).
    """
    if index <= 0:
        return 0
    if index >= len(text):
        return len(text)
    i = index
    floor = max(0, index - _MAX_BACKOFF)
    while i > floor:
        before, at = text[i - 1], text[i]
        if _extends(at) or before == _ZWJ or (before == "\r" and at == "\n"):
            i -= 1
            continue
        if _is_regional_indicator(at) and _is_regional_indicator(before):
            # Flags pair regional indicators from the start of the run; cut only between pairs.
            run = 0
            j = i - 1
            while j >= 0 and _is_regional_indicator(text[j]):
                run += 1
                j -= 1
            if run % 2:
                i -= 1
                continue
        return i
    return index if i == floor and floor > 0 else i


def clip(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` code points, else its longest safe prefix of at most
    ``limit - 1`` code points followed by :data:`ELLIPSIS`."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return ELLIPSIS
    return text[: safe_cut_index(text, limit - 1)] + ELLIPSIS


def clip_middle(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` code points, else its head and tail around a note saying how many
    characters were cut, e.g. ``"abc…[4,000 characters cut]…xyz"``; both cuts are safe."""
    if len(text) <= limit:
        return text
    return clip_known_ends(text, "", len(text), limit)


def clip_known_ends(head: str, tail: str, size: int, limit: int) -> str:
    """What :func:`clip_middle` makes of a text of ``size`` code points (more than ``limit``) known only by its
    beginning ``head`` and its end ``tail``, the middle between them not held: a text read as it arrives with
    only its ends kept. Each end must hold at least what :func:`clip_middle` keeps of it; ``tail`` may be
    ``""`` when ``head`` is the whole text."""
    keep = max(0, limit - 40)
    head_end = safe_cut_index(head, keep * 2 // 3)
    tail_keep = keep - keep * 2 // 3
    if tail:
        end, offset = tail, size - len(tail)  # where the tail begins in the whole text
    else:
        end, offset = head, 0
    tail_start = safe_cut_index(end, len(end) - tail_keep) if tail_keep else len(end)
    tail_start = max(offset + tail_start, head_end)  # the tail's cut, in the whole text, never before the head's
    cut = tail_start - head_end
    return f"{head[:head_end]}{ELLIPSIS}[{cut:,} characters cut]{ELLIPSIS}{end[tail_start - offset :]}"


