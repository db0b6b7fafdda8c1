"""``loopctl sessions``: the sessions in the store (:mod:`loopctl.store`).

    loopctl sessions list                      every session, the most recently changed first
    loopctl sessions show ID                   its messages, each with its node id
    loopctl sessions fork ID [--at NODE]       a new session sharing ID's messages (up to NODE)
    loopctl sessions export ID FILE            write it as a session file (docs/wire-format.md)
    loopctl sessions import FILE               store a session or conversation file
    loopctl sessions verify ID                 re-derive every hash; exit 1 when a row was changed

The store is ``--store`` (a SQLite file, or a ``postgresql://`` URL or libpq ``key=value`` string for
PostgreSQL), else ``$LOOPCTL_STORE``, else ``.loopctl/sessions.db`` in the current folder: the store
``loopctl run`` saves to. ``--store`` may be given anywhere on the command line: ``loopctl --store S sessions
list``, ``loopctl sessions --store S list`` and ``loopctl sessions list --store S`` are the same (the one
nearest the command wins); so for ``run``, ``approve`` and ``show``. Node ids may be shortened to any unique
prefix of 4 hex digits or more. Text the model or a tool wrote is printed inert: control characters are
shown as escapes, never sent to the terminal.
"""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from loopctl._lazy import LazyModule
from loopctl.cli.inert import inert
from loopctl.cli.options import STORE_VAR, resume_command, store_option, store_spec
from loopctl.cli.report import stderr, stdout
from loopctl.errors import ConversationFileError, LoopError

if TYPE_CHECKING:  # rich: imported when a command prints (loopctl run imports this module before it does)
    import rich.console

    import loopctl.session
    import loopctl.store
    import loopctl.store.base
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")
    rich = LazyModule("rich")

__all__ = [
    "DEFAULT_STORE",
    "STORE_VAR",
    "RunTarget",
    "absent_store",
    "check_id",
    "inert",
    "open_store",
    "sessions",
    "store_option",
    "store_spec",
]

DEFAULT_STORE = Path(".loopctl") / "sessions.db"
"""The CLI's store when neither ``--store`` nor ``$LOOPCTL_STORE`` names one (relative to the current folder)."""


def check_id(session_id: str) -> str:
    """``session_id`` when it can name a session (:func:`loopctl.store.base.check_session_id`), else a one-line
    ``CommandError``."""
    from loopctl.cli.report import CommandError
    from loopctl.store.base import check_session_id

    try:
        return check_session_id(session_id)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def absent_store(spec: str | None) -> Path | None:
    """The SQLite file the store ``spec`` names when it does not exist yet: nothing is stored there, and a
    command that only reads or continues a session creates none. ``None`` for a file that exists and for
    PostgreSQL."""
    if spec and is_postgres(spec):
        return None
    path = Path(spec) if spec else DEFAULT_STORE
    return None if path.exists() else path


def is_postgres(spec: str) -> bool:
    """Whether a store spec names a PostgreSQL database (a URL or a libpq ``key=value`` string)."""
    return spec.startswith(("postgresql://", "postgres://")) or bool(re.match(r"^\s*\w+\s*=", spec))


def open_store(spec: str | None = None) -> loopctl.store.SessionStore:
    """The store named by ``spec`` (see the module docstring), opened. Raises ``StoreError`` when it cannot
    be opened."""
    from loopctl.store import SQLiteStore

    if not spec:
        return SQLiteStore(DEFAULT_STORE)
    if is_postgres(spec):
        try:
            from loopctl.store import PostgresStore
        except ImportError as exc:
            raise click.UsageError(str(exc)) from None
        return PostgresStore(spec)
    return SQLiteStore(spec)


class RunTarget:
    """Where ``loopctl run`` keeps its session when no file is named: the session ``resume`` of the store
    ``spec`` (see :func:`open_store`), or a new session with a fresh id (:func:`loopctl.store.new_session_id`:
    two runs started in the same second get two sessions)."""

    def __init__(self, spec: str | None, resume: str | None) -> None:
        from loopctl.store import new_session_id

        self.spec = spec
        self.resume = resume
        self.session_id = resume if resume is not None else new_session_id()
        self.store: loopctl.store.SessionStore | None = None

    def _open(self) -> loopctl.store.SessionStore:
        if self.store is None:
            self.store = open_store(self.spec)
        return self.store

    def settings(self) -> loopctl.session.Session:
        """The resumed session's settings (model, root, system prompt) as a :class:`~loopctl.session.Session`
        (its machine is empty: the loop loads the messages). Raises ``SessionNotFound`` naming the store."""
        from loopctl.engine import LoopMachine
        from loopctl.errors import SessionNotFound
        from loopctl.session import Session

        store = self._open()
        try:
            st = store.info(self.session_id).state
        except SessionNotFound:
            raise SessionNotFound(
                f"no session {self.session_id!r} in {store!r}, and no file of that name", session_id=self.session_id
            ) from None
        if st is None:
            return Session(LoopMachine())
        return Session(LoopMachine(), st.model, st.root, st.system_prompt, dict(st.metadata))

    def open(
        self, *, model: str, root: str, system_prompt: str | None, metadata: dict[str, object] | None = None
    ) -> None:
        """Open the store and, for a new session, create it with these settings (before any model call).

        ``model`` (a model spec), ``root`` (the file tools' folder), ``system_prompt`` and ``metadata`` are the new
        session's settings.
        """
        from loopctl.store import SessionState

        store = self._open()
        if self.resume is None:
            state = SessionState.at_rest(0).with_settings(
                model=model, root=root, system_prompt=system_prompt, metadata=metadata
            )
            store.create(self.session_id, state=state)

    def loop_args(self) -> dict[str, object]:
        """``BareLoop``'s keyword arguments for the session."""
        return {"store": self._open(), "session_id": self.session_id}

    def where(self) -> str:
        """Where the session is, for messages."""
        return f"the store as {self.session_id}"

    def close(self) -> None:
        """Close the store."""
        if self.store is not None:
            self.store.close()


@contextmanager
def _store(ctx: click.Context) -> Iterator[loopctl.store.SessionStore]:
    """The command's store, closed after the command; store and file errors end the command with exit 2."""
    from rich.text import Text

    err = stderr()
    try:
        store = open_store(store_spec())
        try:
            yield store
        finally:
            store.close()
    except (LoopError, ConversationFileError, ValueError) as exc:
        err.print(Text(f"error: {inert(str(exc))}", style="bold red"))
        sys.exit(2)


def _absent_store(ctx: click.Context) -> Path | None:
    """:func:`absent_store` of the command's store (``sessions list`` in a new folder left a ``.loopctl/``
    behind)."""
    return absent_store(store_spec())


def _require_store(ctx: click.Context, session_id: str) -> None:
    """End a command that reads ``session_id`` with a one-line error (exit 2) when the id cannot name a session
    or there is no store."""
    check_id(session_id)
    path = _absent_store(ctx)
    if path is not None:
        from rich.text import Text

        message = f"error: no session {inert(repr(session_id))} (no store at {inert(str(path))})"
        stderr().print(Text(message, style="bold red"))
        sys.exit(2)


def _console() -> rich.console.Console:
    return stdout()


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


@click.group()
@store_option
def sessions() -> None:
    """List, show, fork, export, import and verify stored sessions."""


@sessions.command("list")
@store_option
@click.pass_context
def list_sessions(ctx: click.Context) -> None:
    """Every session, the most recently changed first: id, messages, last outcome, model, last change."""
    from rich.text import Text

    if _absent_store(ctx) is not None:
        _console().print("no sessions")
        return
    with _store(ctx) as store:
        rows = store.sessions()
    console = _console()
    if not rows:
        console.print("no sessions")
        return
    width = max(len(r.id) for r in rows)
    for r in rows:
        state = r.state
        outcome = state.outcome if state is not None else "unreadable"
        model = (state.model if state is not None else None) or "-"
        console.print(
            Text(f"{inert(r.id):<{width}}  {r.length:>6} msgs  {outcome:<16} {inert(model):<28} {_when(r.updated_at)}")
        )


@sessions.command()
@store_option
@click.argument("session_id")
@click.option("--thinking/--no-thinking", default=False, help="Show the model's reasoning too.")
@click.pass_context
def show(ctx: click.Context, session_id: str, thinking: bool) -> None:
    """Print a session's messages, each with its index and node id."""
    from rich.text import Text

    _require_store(ctx, session_id)
    with _store(ctx) as store:
        loaded = store.load(session_id)
    from loopctl.cli.inert import expand_tabs
    from loopctl.cli.render import message_text

    console = _console()
    st = loaded.state
    console.print(
        Text(
            f"session {inert(loaded.id)} · {len(loaded.messages)} messages · head "
            f"{(loaded.head or 'none')[:12]} · {st.outcome} · model {inert(st.model or '-')}",
            style="bold",
        )
    )
    parent = st.metadata.get("loopctl.parent")  # a sub-agent's session: loopctl.agent.PARENT_KEY
    if isinstance(parent, dict):
        console.print(
            Text(
                f"sub-agent {inert(str(parent.get('agent', '?')))} of session {inert(str(parent.get('session', '?')))} "
                f"(call {inert(str(parent.get('call', '?')))})"
            )
        )
    for i, (node, m) in enumerate(zip(loaded.node_ids, loaded.messages, strict=True)):
        console.print(Text(f"── [{i}] {m.role.value}  {node[:12]}", style="bold"))
        if thinking:
            for p in m.parts:
                text = getattr(p, "text", None)
                if p.is_thinking() and text:
                    console.print(Text(expand_tabs(inert(text))[0], style="dim"))
        console.print(Text(message_text(m)))


@sessions.command()
@store_option
@click.argument("session_id")
@click.option("--at", "node", help="The node to fork at (an id or a unique prefix; default: the head).")
@click.option("--as", "new_id", help="The new session's id (default: a fresh one).")
@click.pass_context
def fork(ctx: click.Context, session_id: str, node: str | None, new_id: str | None) -> None:
    """Start a new session from SESSION_ID's messages (up to --at); the two then go their own ways."""
    from rich.text import Text

    _require_store(ctx, session_id)
    with _store(ctx) as store:
        at = store.find_node(node) if node else None
        info = store.fork(session_id, at=at, new_id=new_id)
        answered = len([h for h in store.heads(info.id) if h.kind == "fork"]) > 1
    note = "; the tool calls of its last reply were answered as not run" if answered else ""
    _console().print(
        Text(
            f"forked {inert(session_id)} as {inert(info.id)} ({info.length} messages{note}); continue with: "
            + inert(resume_command(info.id))
        )
    )


@sessions.command("export")
@store_option
@click.argument("session_id")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def export_session(ctx: click.Context, session_id: str, file: Path) -> None:
    """Write a session to FILE as a session file (readable by loopctl show, loopctl run --resume FILE and
    loopctl sessions import)."""
    from rich.text import Text

    _require_store(ctx, session_id)
    with _store(ctx) as store:
        try:
            store.export_file(session_id, file)
        except OSError as exc:
            raise ValueError(f"cannot write {str(file)!r} ({exc.strerror})") from None
    _console().print(Text(f"exported {inert(session_id)} to {inert(str(file))}"))


@sessions.command("import")
@store_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--as", "new_id", help="The new session's id (default: the file's name).")
@click.pass_context
def import_session(ctx: click.Context, file: Path, new_id: str | None) -> None:
    """Store a session file (as loopctl run wrote them before the store) or a conversation file."""
    from rich.text import Text

    with _store(ctx) as store:
        info = store.import_file(file, session_id=new_id)
    _console().print(
        Text(
            f"imported {inert(str(file))} as {inert(info.id)} ({info.length} messages); continue with: "
            + inert(resume_command(info.id))
        )
    )


@sessions.command()
@click.argument("session_id")
@store_option
@click.pass_context
def verify(ctx: click.Context, session_id: str) -> None:
    """Re-derive every hash of a session's chains and compare its head with its head log; list what does not
    match (exit 1), or say it is sound. A sound chain is checked against the conversation rules too: a session
    at rest must have every tool call answered, its last reply's too (a run continuing it would cut that reply
    off)."""
    from rich.text import Text

    _require_store(ctx, session_id)
    with _store(ctx) as store:
        problems: list[object] = list(store.verify(session_id))
        length = store.info(session_id).length
        if not problems:
            problems += _rule_problems(store.load(session_id))
    console = _console()
    for p in problems:
        console.print(Text(inert(str(p)), style="red"))
    if problems:
        sys.exit(1)
    console.print(Text(f"{inert(session_id)}: {length} messages, every hash matches"))


def _rule_problems(loaded: loopctl.store.base.StoredSession) -> list[str]:
    """The conversation-rule problems of a loaded session (``check_conversation``; at rest unless a run is in
    flight or paused), each naming the session, the node and the part."""
    from loopctl.message import check_conversation

    state = loaded.state
    at_rest = not state.in_flight and state.outcome != "awaiting_approval"
    out = []
    for p in check_conversation(list(loaded.messages), at_rest=at_rest):
        found = re.match(r"messages\[(\d+)\]", p.path)
        where = f"session {loaded.id!r}"
        if found is not None:
            index = int(found.group(1))
            where += f", node {loaded.node_ids[index][:12]} (message {index}, {p.path})"
        out.append(f"{where}: {p.detail} [{p.rule.value}]")
    return out
