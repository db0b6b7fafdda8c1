"""``loopctl show`` and ``loopctl check``: a saved session or conversation file, or a stored session, printed
or checked.

The argument is a file when one of that name exists (as ``loopctl run --resume`` reads it), else the id of a
session in the store (``--store``, as ``loopctl sessions``). A file is a session when it is a JSON object whose
``kind`` is ``"loopctl-session"`` (``docs/wire-format.md``, "Session files"), else a conversation file; the
whole document decides, never a look at its first bytes. Everything printed passes through
:func:`~loopctl.cli.inert.inert`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson
from rich.text import Text

from loopctl.cli.inert import inert
from loopctl.cli.report import fail, stdout, tokens
from loopctl.cli.sessions import store_option

__all__ = ["check", "read_file", "read_source", "show"]


def read_file(file: Path) -> tuple[Any, list[Any]]:
    """The session (``None`` for a conversation file) and the messages of ``file``; exits with a one-line
    error for a file that cannot be read."""
    from loopctl.errors import ConversationFileError, LoopError
    from loopctl.message import loads_conversation
    from loopctl.session import Session
    from loopctl.stream import loads_exact

    try:
        data = file.read_bytes()
    except OSError as exc:
        fail(f"{file}: cannot read the file ({exc.strerror})")
    try:
        try:
            doc = loads_exact(data)
        except orjson.JSONDecodeError:
            doc = None  # the reader below names the problem
        if isinstance(doc, dict) and doc.get("kind") == "loopctl-session":
            session = Session.from_bytes(data, source=str(file))
            return session, list(session.machine.full_history())
        return None, loads_conversation(data, source=str(file))
    except (ConversationFileError, LoopError) as exc:
        fail(str(exc))


def read_source(source: str) -> tuple[Any, list[Any]]:
    """The session (``None`` for a conversation file) and the messages of ``source``: the file of that name
    when one exists, else the stored session of that id (in the store the command line names). Exits with a
    one-line error when neither can be read."""
    from loopctl.cli.sessions import absent_store, check_id, open_store, store_spec
    from loopctl.errors import ConversationFileError, LoopError

    path = Path(source)
    if path.is_file():
        return read_file(path)
    if path.is_dir():
        fail(f"{source}: is a folder, not a session file")
    check_id(source)
    spec = store_spec()
    missing = absent_store(spec)
    if missing is not None:
        fail(f"no file {source!r}, and no stored session of that id (no store at {missing})")
    try:
        store = open_store(spec)
        try:
            session = store.load(source).to_session()
        finally:
            store.close()
    except LookupError:  # SessionNotFound
        fail(f"no file {source!r}, and no session of that id in {store!r}")
    except (ConversationFileError, LoopError, ValueError) as exc:
        fail(str(exc))
    return session, list(session.machine.full_history())


@click.command()
@click.argument("source", metavar="FILE_OR_ID")
@store_option
def show(source: str) -> None:
    """Print a saved session (its model, root, outcome and usage, then the conversation), a conversation file,
    or a stored session (by its id)."""
    session, messages = read_source(source)
    console = stdout()
    if session is not None:
        for label, value in _facts(session):
            console.print(Text.assemble((f"{label:<8} ", "bold"), inert(value, one_line=True)))
        console.print()
    from loopctl.cli.render import message_text

    for m in messages:
        console.print(Text(f"── {m.role.value}", style="bold"))
        console.print(Text(message_text(m)))


def _facts(session: Any) -> list[tuple[str, str]]:
    from loopctl.cli.autosave import usage_of
    from loopctl.engine import MachineState

    machine = session.machine
    outcome = machine.outcome
    if machine.state in (MachineState.START, MachineState.TERMINAL):
        ended = outcome.kind.value if machine.state is MachineState.TERMINAL else "no run yet"
        if outcome.error:
            ended += f": {outcome.error}"
    else:
        ended = f"running, or stopped mid-run ({machine.state.value}; --resume continues it)"
    usage = usage_of(session)
    spent = machine.usage  # the last run's, kept in the machine's state (a stored session has no CLI sum)
    if usage is not None:
        used = (
            f"{tokens(usage.input_tokens)} tokens in ({tokens(usage.cache_read_tokens)} cached) · "
            f"{tokens(usage.output_tokens)} out"
        )
    elif spent.requests:
        calls = f"{spent.requests:,} model call{'s' if spent.requests != 1 else ''}"
        used = f"last run: {tokens(spent.input_tokens)} tokens in · {tokens(spent.output_tokens)} out ({calls})"
    else:
        used = "not recorded"
    count = len(machine.full_history())
    return [
        ("model", session.model or "(none)"),
        ("root", session.root or "(none)"),
        ("outcome", ended),
        ("usage", used),
        ("messages", f"{count:,}"),
    ]


@click.command()
@click.argument("source", metavar="FILE_OR_ID")
@store_option
def check(source: str) -> None:
    """Check a saved session or conversation file, or a stored session (by its id), against the pairing and
    placement rules. A conversation file, or a session at rest, must have every tool call answered, the last
    reply's too (it is continued from there); a session saved mid-run may end with calls its run was running."""
    from loopctl.engine import MachineState
    from loopctl.message import check_conversation

    session, messages = read_source(source)
    at_rest = session is None or session.machine.state in (MachineState.START, MachineState.TERMINAL)
    problems = check_conversation(messages, at_rest=at_rest)
    for p in problems:
        click.echo(inert(str(p)))
    n, k = len(messages), len(problems)
    click.echo(f"{n} message{'' if n == 1 else 's'}, {k} problem{'' if k == 1 else 's'}")
    sys.exit(1 if problems else 0)
