"""Untrusted text made inert for a terminal: the one function the CLI shows model and tool text through.

Whatever a model or a tool produced (paths, arguments, results, thinking, text, error texts, a saved
conversation) may hold control sequences: ESC starts ANSI/VT sequences that move the cursor, erase lines,
hide text (``ESC[8m``) or write the clipboard (OSC 52); C1 controls (U+0080-U+009F) do the same on terminals
that read 8-bit controls; CR and backspace overwrite what was shown. Other characters change what the eye
reads without being seen: bidirectional overrides and isolates (the "Trojan Source" trick, CVE-2021-42574),
zero-width spaces and joiners, invisible "tag" characters (U+E0000-U+E007F) that can smuggle text, the soft
hyphen, Hangul fillers, line and paragraph separators. :func:`inert` writes each of them as a visible escape
(``\\x1b``, ``\\u202e``, ``\\U000e0041``), so the text shows what it holds and does nothing else.
"""

from __future__ import annotations

import functools
import re

__all__ = ["TAB_SIZE", "expand_tabs", "inert"]

TAB_SIZE = 8
"""Columns between tab stops when the CLI expands tabs (a terminal's default)."""

# C0 controls but tab and newline (newline is handled per mode), DEL and the C1 controls; lone surrogates
# (undecodable bytes of a file name, a cut pair), which no terminal encoding can write; then the invisible
# format characters: soft hyphen, combining grapheme joiner, Arabic letter mark, Hangul fillers, Mongolian
# vowel separator, zero-width space, LRM/RLM, line/paragraph separators, bidi embeddings/overrides and
# isolates, word joiner and invisible operators, deprecated format controls, BOM, interlinear annotation,
# and the tag characters.
_UNSAFE = (
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff"
    "\u00ad\u034f\u061c\u115f\u1160\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u206f"
    "\u3164\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f]"
)
# Zero-width (non-)joiners are part of emoji sequences and of Indic and Persian writing, between two
# non-ASCII characters; next to ASCII (or at an end) they only hide a difference ("notes\u200d.txt").
_JOINER = "(?:(?<=[\x00-\x7f])|^)[\u200c\u200d]|[\u200c\u200d](?=[\x00-\x7f]|$)"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """:data:`_UNSAFE` and :data:`_JOINER`, compiled when text is first made inert: ``loopctl run`` prints
    nothing before its first request (docs/performance.md, section 12)."""
    return re.compile(_UNSAFE), re.compile(_JOINER)


_NEWLINE = re.compile("\n")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0D:
        return "\\r"
    if code == 0x0A:
        return "\\n"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control and invisible formatting character written as a visible escape (see the
    module docstring); tabs stay. Newlines stay unless ``one_line`` (for a path, a name, a prompt), where
    they become ``\\n``; a CR before a newline is dropped in multi-line text (Windows line ends) and escaped
    anywhere else. Printable text, any script or emoji, is returned unchanged."""
    if not one_line:
        text = text.replace("\r\n", "\n")
    unsafe, joiner = _patterns()
    out = unsafe.sub(_escape, text)
    if "\u200c" in out or "\u200d" in out:
        out = joiner.sub(_escape, out)
    if one_line and "\n" in out:
        out = _NEWLINE.sub(_escape, out)
    return out


def expand_tabs(text: str, column: int = 0, size: int = TAB_SIZE) -> tuple[str, int]:
    """``text`` with each tab replaced by spaces up to the next multiple of ``size`` columns, counted from the
    start of ``text``'s own lines (its first line starts at ``column``: where a stream left off), and the column
    the text ends at. Wide characters (CJK, emoji) take two columns, as a terminal shows them. A terminal, or
    rich, counts from wherever the text happens to be printed: after a label, or after the previous piece of a
    stream, so the same text came out at different widths."""
    from rich.cells import cell_len

    if "\t" not in text:
        last = text.rfind("\n")
        return text, (column + cell_len(text) if last < 0 else cell_len(text[last + 1 :]))
    out: list[str] = []
    for n, line in enumerate(text.split("\n")):
        if n:
            out.append("\n")
            column = 0
        for k, piece in enumerate(line.split("\t")):
            if k:
                pad = size - column % size
                out.append(" " * pad)
                column += pad
            out.append(piece)
            column += cell_len(piece)
    return "".join(out), column
