"""The ``--store`` option every command that reads or writes sessions accepts, and where it is read from. Kept
apart from the commands so that ``loopctl --help`` (the group takes ``--store`` too) imports none of them."""

from __future__ import annotations

import os

import click

__all__ = ["STORE_HELP", "STORE_VAR", "store_option", "store_spec"]

STORE_VAR = "LOOPCTL_STORE"
"""Environment variable: the CLI's store (a SQLite file, or a PostgreSQL URL or connection string)."""


_STORE_KEY = "loopctl.store"
STORE_HELP = (
    "The session store: a SQLite file, or a PostgreSQL URL or DSN (default: $LOOPCTL_STORE, else "
    ".loopctl/sessions.db)."
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


def store_spec() -> str | None:
    """The store the command line names: the ``--store`` given nearest the command, else ``$LOOPCTL_STORE``,
    else ``None`` (the default store)."""
    ctx = click.get_current_context(silent=True)
    given = ctx.meta.get(_STORE_KEY) if ctx is not None else None
    return given or os.environ.get(STORE_VAR) or None
