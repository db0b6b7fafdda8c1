"""Sessions that persist: a conversation's machine plus what is needed to continue it.

A session file is one JSON object (``docs/wire-format.md``, "Session files"):
``{"format_version": 1, "kind": "loopctl-session", "model": ..., "root": ..., "system_prompt": ...,
"machine": <the LoopMachine's JSON object>}``. Saves are atomic (a crash leaves the previous save intact); a
file that cannot be read raises :class:`~loopctl.errors.ConversationFileError` naming the file and the
problem, and never changes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loopctl._fs import atomic_write_bytes
from loopctl.engine.machine import LoopMachine
from loopctl.errors import ConversationFileError, InvalidMessage
from loopctl.message.model import _dumps_bytes
from loopctl.stream import loads_exact

__all__ = ["SESSION_FORMAT_VERSION", "Session"]

SESSION_FORMAT_VERSION = 1
"""The session file format this release writes and the newest it reads. Same policy as conversation files:
older versions stay readable, a newer one is refused."""


@dataclass
class Session:
    """A saved conversation and its settings: the :class:`~loopctl.engine.LoopMachine`, the model spec it
    ran with (``"anthropic:claude-sonnet-4-5"``...), the tools' root folder, the system prompt, and free-form
    ``metadata`` (JSON values)."""

    machine: LoopMachine
    model: str | None = None
    root: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The session file's bytes. Raises ``InvalidMessage`` for metadata that JSON cannot hold (a lone
        surrogate, a value that is no JSON value), and ``TypeError`` for a field that is no string."""
        doc = {
            "format_version": SESSION_FORMAT_VERSION,
            "kind": "loopctl-session",
            "model": self.model,
            "root": self.root,
            "system_prompt": self.system_prompt,
            # Written as the machine is: integers of any size exactly (orjson alone stops at 64 bits).
            "metadata": orjson.Fragment(_dumps_bytes(self.metadata)),
            "machine": orjson.Fragment(self.machine.to_json()),
        }
        return orjson.dumps(doc)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the session to ``path`` atomically (parent folders are created); a new session file is
        private to its owner (0o600), as it holds the whole conversation."""
        atomic_write_bytes(path, self.to_bytes(), new_mode=0o600)

    @classmethod
    def from_bytes(cls, data: bytes | str, *, source: str = "<session>") -> Session:
        """Read a session; raises ``ConversationFileError`` naming ``source`` for anything unreadable.

        ``data`` is the file's JSON (bytes or text).
        """
        try:
            doc = loads_exact(data)  # a tool input's integers past 64 bits stay exact
        except orjson.JSONDecodeError as exc:
            raise ConversationFileError(source, f"not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("kind") != "loopctl-session":
            raise ConversationFileError(source, 'not a loopctl session file (expected "kind": "loopctl-session")')
        version = doc.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ConversationFileError(source, "missing or invalid format_version")
        if version > SESSION_FORMAT_VERSION:
            raise ConversationFileError(
                source,
                f"format_version {version} is newer than this release of loopctl reads ({SESSION_FORMAT_VERSION}); "
                "upgrade loopctl to read it",
            )
        machine_doc = doc.get("machine")
        if not isinstance(machine_doc, dict):
            raise ConversationFileError(source, "the session has no machine object")
        try:
            machine = LoopMachine.from_json(_dumps_bytes(machine_doc))
        except ConversationFileError as exc:
            raise ConversationFileError(source, f"machine: {exc.problem}") from None
        except InvalidMessage as exc:
            raise ConversationFileError(
                source, f"machine: bad message at {exc.path or '<message>'}: {exc.expected}"
            ) from None
        for key in ("model", "root", "system_prompt"):
            if doc.get(key) is not None and not isinstance(doc[key], str):
                raise ConversationFileError(source, f"{key} must be a string or null")
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ConversationFileError(source, "metadata must be an object")
        return cls(machine, doc.get("model"), doc.get("root"), doc.get("system_prompt"), metadata)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Session:
        """Read the session file at ``path`` (errors as :meth:`from_bytes`, naming the file)."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise ConversationFileError(str(p), f"cannot read the file ({exc.strerror})") from None
        return cls.from_bytes(data, source=str(p))
