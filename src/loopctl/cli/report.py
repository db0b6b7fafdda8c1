"""How the command line reports: one error style, on stderr."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click
from rich.console import Console
from rich.text import Text

from loopctl.cli.inert import inert

__all__ = ["CommandError", "fail", "stderr", "stdout", "warn"]


class CommandError(click.ClickException):
    """Input the user can fix that no option parser could see (a folder that cannot be used, a model spec
    with no model name): reported as ``error: ...``, exit status 2, with no pointer to ``--help``."""

    exit_code = 2


class _ReportConsole(Console):
    """A console whose reader may stop reading: a closed pipe ends the command with status 0 (rich's own
    default is 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # What is still buffered goes nowhere, so the interpreter's last flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        raise SystemExit(0)


def stdout() -> Console:
    """A console on stdout for a command that prints a report (``show``, ``sessions ...``): no highlighting, no
    hard wrapping. A reader that stops early (``loopctl show s.json | head -1``) has what it wanted, so the
    closed pipe ends the command with status 0, as ``git log | head`` does. (``run``, ``approve`` and
    ``check`` keep status 1 for it: their status says how the run or the check went.)"""
    return _ReportConsole(highlight=False, soft_wrap=True)


def stderr() -> Console:
    """A console on stderr (no highlighting, no hard wrapping)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, *hints: str, code: int = 2) -> NoReturn:
    """Print ``error: MESSAGE`` (made inert: it may quote a provider, a file or a model) and each hint on
    stderr, and exit with ``code``.

    ``message`` is the sentence; ``hints`` are further lines (what to try).
    """
    err = stderr()
    err.print(Text(f"error: {inert(message)}", style="bold red"))
    for hint in hints:
        err.print(Text(hint))
    sys.exit(code)


def warn(message: str) -> None:
    """Print ``warning: MESSAGE`` (made inert) on stderr.

    ``message`` is the sentence.
    """
    stderr().print(Text(f"warning: {inert(message)}", style="yellow"))
