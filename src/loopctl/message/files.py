"""Conversation files: a list of messages as one JSON document, with a format version.

Format (``docs/wire-format.md``): ``{"format_version": 1, "messages": [<message>, ...]}``. A bare JSON array
of messages, as the Rust original writes, is also read. A file whose ``format_version`` is newer than this
release knows is refused with an error that says so, never half-read. Writes are atomic: the new content goes
to a temporary file in the same folder, is flushed to disk, and replaces the old file in one rename, so a
crash mid-write leaves the old file intact.

Only :func:`save_conversation` and :func:`load_conversation` touch the file system.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, StrictInt, TypeAdapter, ValidationError

from loopctl.errors import ConversationFileError
from loopctl.message.model import Message, _dumps_bytes, _invalid

__all__ = [
    "FORMAT_VERSION",
    "dumps_conversation",
    "dumps_conversation_bytes",
    "load_conversation",
    "loads_conversation",
    "save_conversation",
]

FORMAT_VERSION = 1
"""The conversation file format this release writes, and the newest it reads.

Policy (``docs/wire-format.md``): the version is bumped only when a file written by the new release could be
misread by an older one (a key changes meaning, a required key appears). Adding an optional key that is
omitted when unset is not a bump. Every older version stays readable; a newer one is refused."""


class _ConversationFile(BaseModel):
    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True)
    format_version: StrictInt
    messages: tuple[Message, ...]


_FILE = TypeAdapter(_ConversationFile)
_BARE = TypeAdapter(tuple[Message, ...])


def dumps_conversation(messages: Iterable[Message]) -> str:
    """The conversation as compact JSON text: ``{"format_version": 1, "messages": [...]}``.

    Raises ``InvalidMessage`` (path ``messages[i]...``) for a string that cannot be written as UTF-8."""
    return dumps_conversation_bytes(messages).decode()


def dumps_conversation_bytes(messages: Iterable[Message]) -> bytes:
    """:func:`dumps_conversation` as UTF-8 bytes, without the cost of building a ``str`` (which for text
    outside Latin-1 is most of the cost)."""
    body = {"format_version": FORMAT_VERSION, "messages": [m.to_dict() for m in messages]}
    return _dumps_bytes(body)


def loads_conversation(data: str | bytes, *, source: str = "<string>") -> list[Message]:
    """Read a conversation from JSON text: the versioned object, or a bare array of messages.

    Raises ``ConversationFileError`` for text that is not JSON, a document of the wrong shape, or a
    ``format_version`` newer than :data:`FORMAT_VERSION`; ``InvalidMessage`` (path ``messages[3].parts[1]...``)
    for a bad message inside."""
    raw = data.encode() if isinstance(data, str) else data
    head = raw.lstrip()[:1]
    if head == b"[":
        try:
            return list(_BARE.validate_json(raw))
        except ValidationError as exc:
            _reraise(exc, raw, source, bare=True)
    if head != b"{":
        raise ConversationFileError(source, "expected a JSON object with format_version and messages, or a JSON array")
    try:
        doc = _FILE.validate_json(raw)
    except ValidationError as exc:
        _reraise(exc, raw, source, bare=False)
    _check_version(doc.format_version, source)
    return list(doc.messages)


def _check_version(version: int, source: str) -> None:
    if version > FORMAT_VERSION:
        raise ConversationFileError(
            source,
            f"format_version {version} is newer than this release of loopctl reads ({FORMAT_VERSION}); "
            "upgrade loopctl to read it",
        )
    if version < 1:
        raise ConversationFileError(source, f"format_version {version} is not a valid version (expected 1)")


def _reraise(exc: ValidationError, raw: bytes, source: str, *, bare: bool) -> None:
    err = exc.errors(include_url=False, include_input=False)[0]
    if err["type"] == "json_invalid":
        raise ConversationFileError(source, f"not valid JSON ({err['msg']})") from None
    if not bare:
        # A newer file may have a different shape: say "newer version" rather than "bad message".
        try:
            version = orjson.loads(raw).get("format_version")
        except (orjson.JSONDecodeError, AttributeError):
            version = None
        if isinstance(version, int) and not isinstance(version, bool):
            _check_version(version, source)
        loc = tuple(err["loc"])
        if loc and loc[0] == "format_version":
            raise ConversationFileError(source, "format_version must be an integer (expected 1)") from None
        if loc == ("messages",):
            raise ConversationFileError(source, "messages must be an array of messages") from None
        raise _invalid(exc, "") from None
    raise _invalid(exc, "messages") from None


def save_conversation(path: str | os.PathLike[str], messages: Iterable[Message]) -> None:
    """Write the conversation to ``path`` atomically (temp file, fsync, rename).

    The text is built before the file is touched, so a message that cannot be written raises
    ``InvalidMessage`` and leaves any existing file as it was."""
    text = dumps_conversation_bytes(messages)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def load_conversation(path: str | os.PathLike[str]) -> list[Message]:
    """Read a conversation file; errors as :func:`loads_conversation`, naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConversationFileError(str(p), f"cannot read the file ({exc.strerror})") from None
    return loads_conversation(raw, source=str(p))
