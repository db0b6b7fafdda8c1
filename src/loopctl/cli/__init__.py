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

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.text import Text

from loopctl import __version__
from loopctl.cli.approvals import approve
from loopctl.cli.report import fail
from loopctl.cli.run import DEMO_DELAY_VAR, run
from loopctl.cli.sessions import sessions, store_option
from loopctl.cli.show import check, show
from loopctl.errors import ConversationFileError, LoopError, MissingAPIKey

__all__ = ["DEMO_DELAY_VAR", "DISTRIBUTION", "main"]

DISTRIBUTION = "pyloopctl"
"""The name loopctl is installed by (``pip install 'pyloopctl[all]'``); the import name and the command are
``loopctl`` (the ``loopctl`` on PyPI is an unrelated project)."""


class _Group(click.Group):
    """The command group, reporting every error in one style: click's usage errors, the errors of loopctl
    (:class:`~loopctl.errors.LoopError`), and a missing provider SDK."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any
    ) -> NoReturn:
        extra.pop("standalone_mode", None)
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            # click's own (a bad option) carry their command; ours (a folder that cannot be used) need no help.
            hints = [f"(see {exc.ctx.command_path} --help)"] if exc.ctx is not None else []
            fail(exc.format_message(), *hints, code=exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), code=exc.exit_code)
        except click.Abort:  # Ctrl-C at a prompt
            Console(stderr=True, highlight=False).print(Text("⏹ stopped", style="yellow"))
            sys.exit(130)
        except MissingAPIKey as exc:
            fail(str(exc), 'Or try the whole stack with no key: loopctl run "TASK" --model demo --root DIR')
        except (ConversationFileError, LoopError) as exc:
            fail(str(exc))
        except ImportError as exc:  # a provider SDK (an optional extra) is not installed
            fail(str(exc))
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, package_name=DISTRIBUTION, message="%(prog)s %(version)s (%(package)s)")
@store_option
def main() -> None:
    """loopctl: run LLM agents that call tools in a loop."""


main.add_command(run)
main.add_command(show)
main.add_command(check)
main.add_command(sessions)
main.add_command(approve)
