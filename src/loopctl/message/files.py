"""Conversation files: a list of messages as one JSON document, with a format version.

Format (``docs/wire-format.md``): ``{"format_version": 1, "messages": [<message>, ...]}``. A bare JSON array
of messages, as the Rust original writes, is also read. A file whose ``format_version`` is newer than this
release knows is refused with an error that says so, never half-read. Writes are atomic: the new content goes
to a temporary file in the same folder, is flushed to disk, and replaces the old file in one rename, so a
crash mid-write leaves the old file intact.

Only :func:`save_conversation` and :func:`load_conversation` touch the file system.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

import orjson
from pydantic import BaseModel, ConfigDict, StrictInt, TypeAdapter, ValidationError

from loopctl._fs import atomic_write_bytes
from loopctl.errors import ConversationFileError
from loopctl.message.model import NATIVE_PART_TYPES, Message, _dumps_bytes, _invalid

__all__ = [
    "FORMAT_VERSION",
    "NATIVE_FORMAT_VERSION",
    "dumps_conversation",
    "dumps_conversation_bytes",
    "load_conversation",
    "loads_conversation",
    "save_conversation",
]

FORMAT_VERSION = 1
"""The conversation file format this release writes for a conversation of the five core part kinds.

Policy (``docs/wire-format.md``): the version is bumped only when a file written by the new release could be
misread by an older one (a key changes meaning, a required key appears, a part kind older releases cannot
skip). Adding an optional key that is omitted when unset is not a bump. Every older version stays readable;
a newer one is refused."""

NATIVE_FORMAT_VERSION = 2
"""The version written for a conversation that holds a provider-native part (``server_tool_call``,
``server_tool_result``, ``compaction``: ``docs/wire-format.md``, "Provider-native parts"), which a release
reading only version 1 cannot read; the newest version this release reads. A conversation without one is
still written as version 1, byte for byte as before."""


class _ConversationFile(BaseModel):
    model_config = ConfigDict(extra="ignore", hide_input_in_errors=True, defer_build=True)
    format_version: StrictInt
    messages: tuple[Message, ...]


_FILE = TypeAdapter(_ConversationFile)
_BARE = TypeAdapter(tuple[Message, ...], config=ConfigDict(defer_build=True))


def dumps_conversation(messages: Iterable[Message]) -> str:
    """The conversation as compact JSON text: ``{"format_version": 1, "messages": [...]}`` (version 2 when
    a message holds a provider-native part: :data:`NATIVE_FORMAT_VERSION`).

    Raises ``InvalidMessage`` (path ``messages[i]...``) for a string that cannot be written as UTF-8."""
    return dumps_conversation_bytes(messages).decode()


def dumps_conversation_bytes(messages: Iterable[Message]) -> bytes:
    """:func:`dumps_conversation` as UTF-8 bytes, without the cost of building a ``str`` (which for text
    outside Latin-1 is most of the cost).

    ``messages`` is the conversation. A conversation holding a provider-native part is written as format
    version 2 (:data:`NATIVE_FORMAT_VERSION`), any other as version 1.
    """
    dicts = [m.to_dict() for m in messages]
    version = FORMAT_VERSION
    for d in dicts:
        if any(p["type"] in NATIVE_PART_TYPES for p in d["parts"]):
            version = NATIVE_FORMAT_VERSION
            break
    return _dumps_bytes({"format_version": version, "messages": dicts})


def loads_conversation(data: str | bytes, *, source: str = "<string>") -> list[Message]:
    """Read a conversation from JSON text: the versioned object, or a bare array of messages.

    Every failure raises ``ConversationFileError`` naming ``source``: text that is not JSON (or not valid
    Unicode), a document of the wrong shape, a ``format_version`` newer than :data:`NATIVE_FORMAT_VERSION` (the
    error says so), or a bad message inside (the text gives its path, ``messages[3].parts[1].source.data``,
    and what was expected; the ``InvalidMessage`` is chained as ``__cause__``)."""
    head = data.lstrip()[:1]
    if head in ("[", b"["):
        try:
            return list(_BARE.validate_json(data))
        except ValidationError as exc:
            _reraise(exc, data, source, bare=True)
    if head not in ("{", b"{"):
        raise ConversationFileError(
            source, "expected a JSON object with format_version and messages, or a JSON array of messages"
        )
    try:
        doc = _FILE.validate_json(data)
    except ValidationError as exc:
        _reraise(exc, data, source, bare=False)
    _check_version(doc.format_version, source)
    return list(doc.messages)


def _check_version(version: int, source: str) -> None:
    if version > NATIVE_FORMAT_VERSION:
        raise ConversationFileError(
            source,
            f"format_version {version} is newer than this release of loopctl reads ({NATIVE_FORMAT_VERSION}); "
            "upgrade loopctl to read it",
        )
    if version < 1:
        raise ConversationFileError(source, f"format_version {version} is not a valid version (expected 1)")


def _reraise(exc: ValidationError, data: str | bytes, source: str, *, bare: bool) -> NoReturn:
    err = exc.errors(include_url=False, include_input=False)[0]
    if err["type"] == "json_invalid":
        raise ConversationFileError(source, f"not valid JSON ({err['msg']})") from None
    if err["type"] == "string_unicode":
        raise ConversationFileError(source, "not valid Unicode text (a lone surrogate)") from None
    if not bare:
        # A newer file may have a different shape: say "newer version" rather than "bad message".
        try:
            version = orjson.loads(data).get("format_version")
        except (orjson.JSONDecodeError, AttributeError):
            version = None
        if isinstance(version, int) and not isinstance(version, bool):
            _check_version(version, source)
        loc = tuple(err["loc"])
        if loc and loc[0] == "format_version":
            if err["type"] == "missing":
                raise ConversationFileError(source, "format_version is missing (expected 1)") from None
            raise ConversationFileError(source, "format_version must be an integer (expected 1)") from None
        if loc and loc[0] == "messages" and len(loc) == 1:
            if err["type"] == "missing":
                raise ConversationFileError(source, "messages is missing (expected an array of messages)") from None
            raise ConversationFileError(source, "messages must be an array of messages") from None
        bad = _invalid(exc, "")
    else:
        bad = _invalid(exc, "messages")
    raise ConversationFileError(source, str(bad)) from bad


def save_conversation(path: str | os.PathLike[str], messages: Iterable[Message]) -> None:
    """Write the conversation to ``path`` atomically: a temporary file in the same folder, flushed to disk,
    then renamed over ``path`` in one step (and the folder flushed, so the rename survives a power cut).

    The text is built before the file system is touched, so a message that cannot be written raises
    ``InvalidMessage`` and leaves any existing file as it was; any failure while writing removes the
    temporary file and leaves the old file intact. A new file gets the permissions ``open()`` would give it
    (0o666 less the umask); a replaced file keeps its own.

    ``messages`` is the conversation to write.
    """
    atomic_write_bytes(path, dumps_conversation_bytes(messages), make_parents=False)


def load_conversation(path: str | os.PathLike[str]) -> list[Message]:
    """Read a conversation file; every failure (unreadable, not JSON, wrong shape, newer version, bad
    message) raises ``ConversationFileError`` naming the file, as :func:`loads_conversation` does.

    ``path`` is the file to read.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConversationFileError(str(p), f"cannot read the file ({exc.strerror})") from None
    return loads_conversation(raw, source=str(p))
