"""The ``--store`` option every command that reads or writes sessions accepts, and where it is read from. Kept
apart from the commands so that ``loopctl --help`` (the group takes ``--store`` too) imports none of them."""

from __future__ import annotations

import os
import re
import shlex

import click

__all__ = [
    "SERVE_STORE_HELP",
    "STORE_HELP",
    "STORE_VAR",
    "resume_command",
    "serve_store_option",
    "store_option",
    "store_spec",
]

STORE_VAR = "LOOPCTL_STORE"
"""Environment variable: the CLI's store (a SQLite file, or a PostgreSQL URL or connection string)."""


_STORE_KEY = "loopctl.store"
STORE_HELP = (
    "The session store: a SQLite file, or a PostgreSQL URL or DSN (default: $LOOPCTL_STORE, else "
    ".loopctl/sessions.db)."
)
SERVE_STORE_HELP = (
    "The session store of the served agents' conversations: a SQLite file, or a PostgreSQL URL or DSN "
    "(default: $LOOPCTL_STORE, else none: kept in memory)."
)


def _remember_store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Options are read from the outermost command in: the one nearest the command is read last and wins.
    if value is not None:
        ctx.meta[_STORE_KEY] = value


store_option = click.option(
    "--store", metavar="STORE", expose_value=False, callback=_remember_store, help=STORE_HELP
)
"""The ``--store`` option, accepted by ``loopctl`` itself, ``sessions`` and each of its commands, ``run``,
``approve`` and ``show``: see :func:`store_spec`."""

serve_store_option = click.option(
    "--store", metavar="STORE", expose_value=False, callback=_remember_store, help=SERVE_STORE_HELP
)
"""``mcp serve`` and ``a2a serve``'s ``--store``: read the same way, but with no store named the conversations
are kept in memory (not in ``.loopctl/sessions.db``)."""


def store_spec() -> str | None:
    """The store the command line names: the ``--store`` given nearest the command, else ``$LOOPCTL_STORE``,
    else ``None`` (the default store)."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_STORE_KEY) if ctx is not None else None
    return given or os.environ.get(STORE_VAR) or None


def resume_command(session_id: str) -> str:
    """The command that continues stored session ``session_id``: ``loopctl run "..." --resume ID``, with the
    ``--store`` this command line named (without it the command would look in the default store). A
    PostgreSQL store whose spec holds a password is written ``--store STORE``: a password is not printed.
    The caller makes the text inert."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_STORE_KEY) if ctx is not None else None
    command = f'loopctl run "..." --resume {shlex.quote(session_id)}'
    if not given:
        return command
    secret = re.search(r"://[^/@:]*:[^/@]*@|(?:^|\s)password\s*=", given) is not None
    return f"{command} --store {'STORE' if secret else shlex.quote(given)}"
