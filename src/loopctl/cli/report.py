"""How the command line reports: one error style, on stderr."""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn, cast

import click

from loopctl._lazy import LazyModule
from loopctl.cli.inert import inert

if TYPE_CHECKING:  # rich is imported when something is printed (docs/performance.md, section 12)
    import rich.console
else:
    rich = LazyModule("rich")

__all__ = ["CommandError", "fail", "run_console", "stderr", "stdout", "tokens", "warn"]


class CommandError(click.ClickException):
    """Input the user can fix that no option parser could see (a folder that cannot be used, a model spec
    with no model name): reported as ``error: ...``, exit status 2, with no pointer to ``--help``."""

    exit_code = 2


@functools.cache
def _report_console() -> type[rich.console.Console]:
    """The class of :func:`stdout`'s consoles, made when first asked for (it subclasses rich's)."""
    from rich.console import Console

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

    return _ReportConsole


def stdout() -> rich.console.Console:
    """A console on stdout for a command that prints a report (``show``, ``sessions ...``): no highlighting, no
    hard wrapping. A reader that stops early (``loopctl show s.json | head -1``) has what it wanted, so the
    closed pipe ends the command with status 0, as ``git log | head`` does. (``run``, ``approve`` and
    ``check`` keep status 1 for it: their status says how the run or the check went.)"""
    return _report_console()(highlight=False, soft_wrap=True)


def stderr() -> rich.console.Console:
    """A console on stderr (no highlighting, no hard wrapping)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def run_console() -> rich.console.Console:
    """The console ``loopctl run`` prints on (stdout, no highlighting, no hard wrapping), made, and rich
    imported, when it is first used. Asking it whether it is a terminal (``is_terminal``: the transcript's
    spinner does before each model call) makes it only when something could make it one: stdout is a terminal,
    or ``FORCE_COLOR`` or ``TTY_COMPATIBLE`` is set; otherwise the answer is rich's, ``False``. So a run whose
    output goes to a file or a pipe imports rich only when it first prints (docs/performance.md, section 12)."""
    return cast("rich.console.Console", _WhenUsed({"highlight": False, "soft_wrap": True}))


class _WhenUsed:
    """Stands for a rich ``Console`` made with ``options`` when one of its attributes is first read or set."""

    __slots__ = ("_console", "_options")

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options
        self._console: rich.console.Console | None = None

    def _made(self) -> rich.console.Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    @property
    def is_terminal(self) -> bool:
        if self._console is None and not _may_be_terminal():
            return False  # what rich would answer: nothing forces a terminal and stdout is not one
        return self._made().is_terminal

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _WhenUsed.__slots__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._made(), name, value)


def _may_be_terminal() -> bool:
    """Whether a rich console on stdout, made now with no ``force_terminal``, could say it is a terminal: it says
    so only when ``TTY_COMPATIBLE`` or ``FORCE_COLOR`` is set, or its file (stdout, or the file a rich proxy
    stands for) says it is a tty. Errs towards ``True`` (then the console is made and asked)."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    out = sys.stdout
    if out is None:
        return False  # rich writes to its null file, which is no terminal
    if hasattr(out, "rich_proxied_file"):
        return True
    isatty = getattr(out, "isatty", None)
    try:
        return isatty is not None and bool(isatty())
    except ValueError:  # a closed file (rich says False too)
        return False


def fail(message: str, *hints: str, code: int = 2) -> NoReturn:
    """Print ``error: MESSAGE`` (made inert: it may quote a provider, a file or a model) and each hint on
    stderr, and exit with ``code``.

    ``message`` is the sentence; ``hints`` are further lines (what to try).
    """
    from rich.text import Text

    err = stderr()
    err.print(Text(f"error: {inert(message)}", style="bold red"))
    for hint in hints:
        err.print(Text(hint))
    sys.exit(code)


def warn(message: str) -> None:
    """Print ``warning: MESSAGE`` (made inert) on stderr.

    ``message`` is the sentence.
    """
    from rich.text import Text

    stderr().print(Text(f"warning: {inert(message)}", style="yellow"))


def tokens(count: int | None) -> str:
    """A token count as shown (``12,345``), or ``?`` when the provider did not report it."""
    return "?" if count is None else f"{count:,}"
