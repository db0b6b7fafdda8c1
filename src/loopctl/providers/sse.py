"""Server-sent events framing, per the WHATWG HTML standard, section 9.2.6 ("Interpreting an event stream").

Incremental: bytes go in split anywhere (even between the CR and LF of one line end, or inside a UTF-8
character), events come out whole. Lines end with CR, LF or CRLF; a line starting with ``:`` is a comment;
``data`` lines of one event are joined with ``"\\n"``; one optional space after the colon is dropped; an
empty line dispatches the event; a leading byte-order mark is skipped; at the end of the stream an event
without its closing empty line is discarded (it is incomplete). Event types and ``[DONE]`` sentinels are the
codec's business.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import codecs
import re

from loopctl._frozen import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its ``event`` type (``"message"`` when none was named), ``data`` and ``id``."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Turns a byte stream into :class:`ServerSentEvent` values.

    :meth:`feed` takes any chunk and returns the events completed by it; :meth:`close` marks the end and
    reports whether an incomplete event was dropped.
    """

    __slots__ = ("_data", "_event", "_id", "_pending", "_pending_cr", "_started", "_tail", "_text")

    def __init__(self) -> None:
        # The bytes of a UTF-8 character the last chunk ended inside of (what an incremental decoder buffers;
        # ``codecs.utf_8_decode`` directly, without the decoder object's Python frames per chunk).
        self._tail = b""
        # The pieces of the line not yet ended, joined once when its line end arrives: a long line fed in
        # small chunks costs time linear in its length (joining on every chunk was quadratic).
        self._pending: list[str] = []
        self._pending_cr = False
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._text = False

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode ``chunk`` and return the events it completes (possibly none).

        Cost: linear in the chunk's length (each character is scanned for line ends once, and a line split
        over many chunks is joined once, when it ends)."""
        if self._tail:
            chunk = self._tail + chunk
        text, used = codecs.utf_8_decode(chunk, "replace", False)
        self._tail = chunk[used:]
        if not self._started and text:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        if self._pending_cr:
            # The previous chunk ended on CR: a LF now belongs to the same line end.
            self._pending_cr = False
            if text.startswith("\n"):
                text = text[1:]
        if not text:
            return []
        if "\n" not in text and "\r" not in text:
            self._pending.append(text)  # the line goes on
            return []
        if "\r" not in text:
            # The common case: LF line ends only.
            lines = text.split("\n")
            rest = lines.pop()
        else:
            lines = []
            start = 0
            for m in _EOL.finditer(text):
                lines.append(text[start : m.start()])
                start = m.end()
            if start == len(text) and text.endswith("\r"):
                self._pending_cr = True
            rest = text[start:]
        if self._pending:
            self._pending.append(lines[0])
            lines[0] = "".join(self._pending)
            self._pending = []
        if rest:
            self._pending.append(rest)
        events: list[ServerSentEvent] = []
        for line in lines:
            # The empty line that dispatches an event and the "data:" lines are read here, without a call per
            # line (a typical stream has no other); the rest in _field.
            if not line:
                if self._data:
                    events.append(ServerSentEvent(self._event or "message", "\n".join(self._data), self._id))
                    self._data = []
                self._event = ""
            elif line.startswith("data:"):
                self._text = True
                self._data.append(line[6:] if line.startswith(" ", 5) else line[5:])
            else:
                self._field(line)
        return events

    def close(self) -> bool:
        """End of stream. Returns True if an incomplete event (no closing empty line) was discarded."""
        tail = codecs.utf_8_decode(self._tail, "replace", True)[0]
        self._tail = b""
        incomplete = bool(self._pending or tail or self._data or self._event)
        self._pending = []
        self._data = []
        self._event = ""
        return incomplete

    @property
    def saw_field(self) -> bool:
        """True once any ``data``/``event`` field was read: the body really is an event stream."""
        return self._text

    def _field(self, line: str) -> None:
        """Read a line that is neither empty nor a ``data:`` line (both read in :meth:`feed`): a comment, or a
        field (``data`` with no colon, ``event``, ``id``, ``retry`` or an unknown one). Never an event."""
        if line[0] == ":":
            return
        colon = line.find(":")
        if colon == -1:
            name, value = line, ""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value.startswith(" "):
                value = value[1:]
        if name == "data":
            self._text = True
            self._data.append(value)
        elif name == "event":
            self._text = True
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        # "retry" and unknown fields are ignored, as the standard says.
