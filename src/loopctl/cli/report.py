"""How the command line reports: one error style, on stderr."""

from __future__ import annotations

import sys
from typing import NoReturn

import click
from rich.console import Console
from rich.text import Text

from loopctl.cli.inert import inert

__all__ = ["CommandError", "fail", "stderr", "warn"]


class CommandError(click.ClickException):
    """Input the user can fix that no option parser could see (a folder that cannot be used, a model spec
    with no model name): reported as ``error: ...``, exit status 2, with no pointer to ``--help``."""

    exit_code = 2


def stderr() -> Console:
    """A console on stderr (no highlighting, no hard wrapping)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, *hints: str, code: int = 2) -> NoReturn:
    """Print ``error: MESSAGE`` (made inert: it may quote a provider, a file or a model) and each hint on
    stderr, and exit with ``code``."""
    err = stderr()
    err.print(Text(f"error: {inert(message)}", style="bold red"))
    for hint in hints:
        err.print(Text(hint))
    sys.exit(code)


def warn(message: str) -> None:
    """Print ``warning: MESSAGE`` (made inert) on stderr."""
    stderr().print(Text(f"warning: {inert(message)}", style="yellow"))
