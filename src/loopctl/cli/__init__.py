"""The ``loopctl`` command line.

``loopctl run "TASK" --model SPEC --root DIR`` runs an agent with the file tools of
:mod:`loopctl.tools.files` over DIR, streams the transcript, and saves the session; ``--resume FILE``
continues a saved session. ``--model demo`` runs a scripted task through a local fake provider server and a
real client, with no API key. ``loopctl show FILE`` prints a saved session or conversation; ``loopctl check
FILE`` checks one. ``python -m loopctl`` is the same command line.

Layout: one module per command (:mod:`~loopctl.cli.run`, :mod:`~loopctl.cli.show`, :mod:`~loopctl.cli.sessions`
for the session store, :mod:`~loopctl.cli.approvals` for runs paused on deferred calls), registered on
:data:`main` below; :mod:`~loopctl.cli.render` is the transcript, :mod:`~loopctl.cli.approve` the approval
prompt, :mod:`~loopctl.cli.autosave` the session file, :mod:`~loopctl.cli.inert` the escaping every string
from a model or a tool goes through. Errors, click's own included, are reported here in one style
(``error: ...`` on stderr, exit status 2 for a usage error or bad input).

Environment: ``LOOPCTL_DEMO_DELAY`` sets the seconds between the demo model's streamed events (default
0.01), to watch the demo stream slowly or to interrupt it with Ctrl-C part way.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import click

from loopctl import __version__
from loopctl.cli.options import store_option
from loopctl.errors import ConversationFileError, LoopError, MissingAPIKey

__all__ = ["DEMO_DELAY_VAR", "DISTRIBUTION", "main"]

DISTRIBUTION = "pyloopctl"
"""The name loopctl is installed by (``pip install 'pyloopctl[all]'``); the import name and the command are
``loopctl`` (the ``loopctl`` on PyPI is an unrelated project)."""


DEMO_DELAY_VAR = "LOOPCTL_DEMO_DELAY"
"""Environment variable: seconds between the streamed events of ``--model demo`` (0 to 60; default 0.01)."""

# The commands, imported when one is run or asked for its help (``loopctl --help`` imports none of them: they
# bring in the message model, the engine, the store, rich...): name -> (module, attribute, short help). The
# short help is the first sentence of the command's help, as click shows it (tests/cli/test_start.py checks
# that it is).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "a2a": ("loopctl.cli.serve", "a2a", "Serve loopctl agents over the Agent2Agent (A2A) protocol."),
    "mcp": ("loopctl.cli.serve", "mcp", "Serve loopctl's tools and agents over the Model Context Protocol."),
    "approve": (
        "loopctl.cli.approvals",
        "approve",
        "Decide the tool calls SESSION_ID's run awaits, then continue the run.",
    ),
    "check": (
        "loopctl.cli.show",
        "check",
        "Check a saved session or conversation file, or a stored session (by its id), against the pairing and "
        "placement rules.",
    ),
    "run": (
        "loopctl.cli.run",
        "run",
        "Run TASK with an agent that can list, read, search, write and edit files under --root.",
    ),
    "sessions": ("loopctl.cli.sessions", "sessions", "List, show, fork, export, import and verify stored sessions."),
    "show": (
        "loopctl.cli.show",
        "show",
        "Print a saved session (its model, root, outcome and usage, then the conversation), a conversation file, "
        "or a stored session (by its id).",
    ),
    "web": (
        "loopctl.cli.web",
        "web",
        "Serve a local chat with the agent, and a browser of the sessions, on http://127.0.0.1:8700/.",
    ),
}


@contextlib.contextmanager
def _long_lived() -> Iterator[None]:
    """Import a command's module with the cyclic collector off, then move what the process holds to the
    collector's permanent generation (``gc.freeze()``): modules, classes and functions that live as long as the
    process, which each collection would otherwise scan again (about 25 collections while ``loopctl run``'s
    module and its imports load: docs/performance.md, section 2). The collector is left as it was; the group's
    :meth:`_Group.main` moves them back (``gc.unfreeze()``) when the command ends, for a process that runs
    commands in-process."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


class _Group(click.Group):
    """The command group, reporting every error in one style: click's usage errors, the errors of loopctl
    (:class:`~loopctl.errors.LoopError`), and a missing provider SDK. Its commands are loaded when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    _mains = 0  # the main() calls under way: only they undo the freeze (a docs tool asking for a command does not)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute, _ = COMMANDS[cmd_name]
            with _long_lived() if self._mains else contextlib.nullcontext():
                command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands of ``--help``, from the short helps above (no command is imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is not None:
                text = loaded.get_short_help_str(limit)
            else:
                text = click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> NoReturn:
        frozen = gc.get_freeze_count()  # what a caller moved to the permanent generation itself stays there
        self._mains += 1
        try:
            self._main(args, prog_name, **extra)
        finally:
            self._mains -= 1
            if not frozen:  # what the command's start froze (_long_lived, run), back to the collector
                gc.unfreeze()

    def _main(self, args: Sequence[str] | None, prog_name: str | None, **extra: Any) -> NoReturn:
        extra.pop("standalone_mode", None)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            from loopctl.cli.report import fail

            # click's own (a bad option) carry their command; ours (a folder that cannot be used) need no help.
            hints = [f"(see {exc.ctx.command_path} --help)"] if exc.ctx is not None else []
            fail(exc.format_message(), *hints, code=exc.exit_code)
        except click.ClickException as exc:
            from loopctl.cli.report import fail

            fail(exc.format_message(), code=exc.exit_code)
        except click.Abort:  # Ctrl-C at a prompt
            from rich.console import Console
            from rich.text import Text

            Console(stderr=True, highlight=False).print(Text("⏹ stopped", style="yellow"))
            sys.exit(130)
        except MissingAPIKey as exc:
            from loopctl.cli.report import fail

            fail(str(exc), 'Or try the whole stack with no key: loopctl run "TASK" --model demo --root DIR')
        except (ConversationFileError, LoopError) as exc:
            from loopctl.cli.report import fail

            fail(str(exc))
        except ImportError as exc:  # a provider SDK (an optional extra) is not installed
            from loopctl.cli.report import fail

            fail(str(exc))
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, package_name=DISTRIBUTION, message="%(prog)s %(version)s (%(package)s)")
@store_option
def main() -> None:
    """loopctl: run LLM agents that call tools in a loop."""
