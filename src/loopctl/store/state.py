"""The state a session keeps beside its head: the machine without its messages, and the session's settings.

A state document is a session file (``docs/wire-format.md``, "Machine and session files") whose machine
gives the *lengths* of ``history`` and ``pending`` instead of the messages, which are the chain up to the
head (``LoopMachine.to_json(messages=False)``)::

    {"format_version": 1, "kind": "loopctl-session-state", "model": ..., "root": ..., "system_prompt": ...,
     "metadata": {...}, "machine": {"format_version": 3, "state": "terminal", "turn": 3, ...,
                                    "history": 12, "pending": 0, ...}}

It is rewritten with every move of the head, so it stays small: O(1) in the conversation's length (the tool
calls of the turn in flight are its largest part). Version policy: ``docs/sessions.md``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

import orjson

from loopctl._frozen import dataclass
from loopctl.engine.machine import LoopMachine, MachineState
from loopctl.errors import ConversationFileError, InvalidMessage
from loopctl.message import Message
from loopctl.message.model import _dumps_bytes
from loopctl.session import Session
from loopctl.stream import loads_exact

__all__ = ["STATE_FORMAT_VERSION", "SessionState"]

STATE_FORMAT_VERSION = 1
"""The state document format this release writes and the newest it reads."""

_KIND = "loopctl-session-state"


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session's state beside its head: the machine's fields other than its messages (``machine``: the
    JSON object of ``LoopMachine.to_json(messages=False)``, parsed), and the session's settings: the model
    spec it runs with, the tools' root folder, the system prompt, and free-form ``metadata`` (JSON values).

    :attr:`message_count` is the number of messages the machine holds, which must be the length of the chain
    up to the head it is stored with.
    """

    machine: Mapping[str, Any]
    model: str | None = None
    root: str | None = None
    system_prompt: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        machine: LoopMachine,
        *,
        model: str | None = None,
        root: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionState:
        """The state of ``machine`` (its messages left out) with these settings.

        ``model``, ``root``, ``system_prompt`` and ``metadata`` are the session's settings (a model spec, the file
        tools' folder, the system prompt, any JSON object of the application's).
        """
        return cls(orjson.loads(machine.to_json(messages=False)), model, root, system_prompt, dict(metadata or {}))

    @classmethod
    def at_rest(cls, length: int, like: SessionState | None = None) -> SessionState:
        """A machine at rest (``start``: no run yet) holding ``length`` messages of history, with the settings
        of ``like``: the state of a plain appended chain, a fork at an earlier node, an imported
        conversation."""
        doc = dict(orjson.loads(LoopMachine().to_json(messages=False)))
        doc["history"] = length
        if like is None:
            return cls(doc)
        return cls(doc, like.model, like.root, like.system_prompt, like.metadata)

    @classmethod
    def of_session(cls, session: Session) -> SessionState:
        """The state of a :class:`~loopctl.session.Session` (a session file's contents)."""
        return cls.of(
            session.machine,
            model=session.model,
            root=session.root,
            system_prompt=session.system_prompt,
            metadata=session.metadata,
        )

    @property
    def message_count(self) -> int:
        """How many messages the machine holds (history and pending)."""
        return int(self.machine["history"]) + int(self.machine["pending"])

    @property
    def in_flight(self) -> bool:
        """True when the state was saved during a run (the writer may have stopped mid-run); a run paused for
        approvals is at rest, not in flight."""
        return self.machine["state"] not in (
            MachineState.START.value,
            MachineState.TERMINAL.value,
            MachineState.AWAITING_APPROVAL.value,
        )

    @property
    def outcome(self) -> str:
        """How the last run ended (``"completed"``, ``"failed"``...; ``"idle"`` before the first;
        ``"awaiting_approval"`` while it is paused), or ``"running"`` for a state saved mid-run."""
        if self.in_flight:
            return "running"
        return str(self.machine["outcome"]["kind"])

    def with_settings(
        self,
        *,
        model: str | None = None,
        root: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionState:
        """A copy with the given settings replaced (``None`` keeps the current one).

        ``model``, ``root``, ``system_prompt`` and ``metadata`` as in :meth:`of`.
        """
        return SessionState(
            self.machine,
            self.model if model is None else model,
            self.root if root is None else root,
            self.system_prompt if system_prompt is None else system_prompt,
            self.metadata if metadata is None else dict(metadata),
        )

    def restore(self, messages: Sequence[Message]) -> LoopMachine:
        """The machine, with ``messages`` (the chain up to the head) as its history and pending messages.
        Raises ``ConversationFileError`` when the state does not fit them."""
        return LoopMachine.from_json(_dumps_bytes(dict(self.machine)), messages=messages)

    def to_session(self, messages: Sequence[Message]) -> Session:
        """The session file's contents: the restored machine and the settings.

        ``messages`` is the session's history (the state holds none).
        """
        return Session(self.restore(messages), self.model, self.root, self.system_prompt, dict(self.metadata))

    def to_bytes(self) -> bytes:
        """The state document as stored (compact UTF-8 JSON)."""
        return _dumps_bytes(
            {
                "format_version": STATE_FORMAT_VERSION,
                "kind": _KIND,
                "model": self.model,
                "root": self.root,
                "system_prompt": self.system_prompt,
                "metadata": dict(self.metadata),
                "machine": dict(self.machine),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes | str, *, source: str = "<state>") -> SessionState:
        """Read a state document. Raises ``ConversationFileError`` naming ``source`` for one that is not JSON,
        of the wrong kind or shape, or of a newer ``format_version`` (refused before anything else is read).
        The machine's own fields are checked by :meth:`restore`.

        ``data`` is the document's JSON (bytes or text).
        """
        try:
            doc = loads_exact(data)
        except orjson.JSONDecodeError as exc:
            raise ConversationFileError(source, f"not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("kind") != _KIND:
            raise ConversationFileError(source, f'not a session state (expected "kind": "{_KIND}")')
        version = doc.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ConversationFileError(source, "missing or invalid format_version")
        if version > STATE_FORMAT_VERSION:
            raise ConversationFileError(
                source,
                f"format_version {version} is newer than this release of loopctl reads ({STATE_FORMAT_VERSION}); "
                "upgrade loopctl to read it",
            )
        machine = doc.get("machine")
        if not isinstance(machine, dict):
            raise ConversationFileError(source, "machine must be an object")
        for key in ("history", "pending"):
            value = machine.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConversationFileError(source, f"machine.{key} must be a number of messages")
        if not isinstance(machine.get("state"), str) or not isinstance(machine.get("outcome"), dict):
            raise ConversationFileError(source, "machine.state and machine.outcome are required")
        for key in ("model", "root", "system_prompt"):
            if doc.get(key) is not None and not isinstance(doc[key], str):
                raise ConversationFileError(source, f"{key} must be a string or null")
        metadata = doc.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ConversationFileError(source, "metadata must be an object")
        return cls(machine, doc.get("model"), doc.get("root"), doc.get("system_prompt"), metadata)


def restore_checked(state: SessionState, messages: Sequence[Message], *, source: str) -> LoopMachine:
    """:meth:`SessionState.restore`, with a machine that does not fit reported as ``ConversationFileError``
    naming ``source``."""
    try:
        return state.restore(messages)
    except ConversationFileError as exc:
        raise ConversationFileError(source, f"machine: {exc.problem}") from None
    except InvalidMessage as exc:
        where = exc.path or "<message>"
        raise ConversationFileError(source, f"machine: bad value at {where}: {exc.expected}") from None
