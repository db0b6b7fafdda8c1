"""The ``--store`` option every command that reads or writes sessions accepts, and where it is read from; and the
limits options of the commands that serve HTTP. Kept apart from the commands so that ``loopctl --help`` (the
group takes ``--store`` too) imports none of them."""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from loopctl._lazy import LazyModule

if TYPE_CHECKING:
    import loopctl.server_limits
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "SERVE_STORE_HELP",
    "STORE_HELP",
    "STORE_VAR",
    "resume_command",
    "serve_store_option",
    "server_limit_options",
    "server_limits",
    "store_option",
    "store_spec",
]

STORE_VAR = "LOOPCTL_STORE"
"""Environment variable: the CLI's store (a SQLite file, or a PostgreSQL URL or connection string)."""


_STORE_KEY = "loopctl.store"
STORE_HELP = (
    "The session store: a SQLite file, or a PostgreSQL URL or DSN (default: $LOOPCTL_STORE, else .loopctl/sessions.db)."
)
SERVE_STORE_HELP = (
    "The session store of the served agents' conversations: a SQLite file, or a PostgreSQL URL or DSN "
    "(default: $LOOPCTL_STORE, else none: kept in memory)."
)


def _remember_store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # Options are read from the outermost command in: the one nearest the command is read last and wins.
    if value is not None:
        ctx.meta[_STORE_KEY] = value


store_option = click.option("--store", metavar="STORE", expose_value=False, callback=_remember_store, help=STORE_HELP)
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


_MAX_SECONDS = 10**9
"""The longest ``--keep-alive-timeout`` (about 31 years: the event loop's timers are floats)."""


class _Seconds(click.FloatRange):
    """Seconds, more than 0 (``inf``: no deadline); ``nan`` is refused (``FloatRange`` lets it through)."""

    name = "seconds"

    def __init__(self) -> None:
        super().__init__(0, min_open=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        return seconds


def server_limit_options(*, max_body_bytes: int | None = None) -> Callable[[_F], _F]:
    """The options of a command serving HTTP that set its :class:`~loopctl.server_limits.ServerLimits`
    (``docs/web.md``, "Server limits"): ``--max-body-bytes`` (default ``max_body_bytes``, else
    :data:`~loopctl.server_limits.MAX_BODY_BYTES`), ``--header-timeout``,
    ``--body-timeout``, ``--keep-alive-timeout`` and ``--max-connections``. Read them with
    :func:`server_limits`."""
    from loopctl import server_limits as d

    if max_body_bytes is None:
        max_body_bytes = d.MAX_BODY_BYTES

    def decorate(command: _F) -> _F:
        for option in reversed(
            [
                click.option(
                    "--max-body-bytes",
                    type=click.IntRange(1),
                    default=max_body_bytes,
                    show_default=f"{max_body_bytes // 1024**2} MiB" if max_body_bytes % 1024**2 == 0 else True,
                    help="The largest request body read; a larger one is answered 413.",
                ),
                click.option(
                    "--header-timeout",
                    type=_Seconds(),
                    default=d.HEADER_TIMEOUT,
                    show_default=True,
                    help="Seconds a connection has to send a request's head (its headers); then it is closed.",
                ),
                click.option(
                    "--body-timeout",
                    type=_Seconds(),
                    default=d.BODY_TIMEOUT,
                    show_default=True,
                    help=f"Seconds a request's body may take, plus 1 s per {d.BODY_MIN_RATE} bytes received; a "
                    "slower one is answered 408.",
                ),
                click.option(
                    "--keep-alive-timeout",
                    type=click.IntRange(1, _MAX_SECONDS),
                    default=d.KEEP_ALIVE_TIMEOUT,
                    show_default=True,
                    help="Seconds an idle connection is kept open after a response.",
                ),
                click.option(
                    "--max-connections",
                    type=click.IntRange(0),
                    default=d.MAX_CONNECTIONS,
                    show_default=True,
                    help="Connections (or running requests) served at once; past it a request is answered 503. "
                    "0: no limit.",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


def server_limits(options: Mapping[str, Any]) -> loopctl.server_limits.ServerLimits:
    """The :class:`~loopctl.server_limits.ServerLimits` the options of :func:`server_limit_options` give (the
    command's keyword arguments ``options``); ``click.UsageError`` naming the option ServerLimits refuses."""
    from loopctl.server_limits import ServerLimits

    try:
        return ServerLimits(
            max_body_bytes=options["max_body_bytes"],
            header_timeout=options["header_timeout"],
            body_timeout=options["body_timeout"],
            keep_alive_timeout=options["keep_alive_timeout"],
            max_connections=options["max_connections"] or None,
        )
    except ValueError as exc:  # "ServerLimits: max_body_bytes is too large ...": named as the option
        found = re.match(r"ServerLimits: (\w+) (.*)", str(exc))
        raise click.UsageError(f"--{found[1].replace('_', '-')} {found[2]}" if found else str(exc)) from None
