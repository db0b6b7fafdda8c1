"""Approving file changes: the ``loopctl run`` permission callback.

Reading tools run without asking. A call of a tool that changes files (``write_file``, ``edit_file``) runs
at once with ``--yes``; otherwise, on a terminal, the user sees what it would do — the path resolved and
relative to the root (what the model wrote too, when that differs), and the new content or a diff — and
answers; with no terminal to ask on, it is refused with a reason naming ``--yes``. Every string shown passes
through :func:`~loopctl.cli.inert.inert`. A call the tool will refuse anyway (outside the root, a protected
path) is not asked about: the tool refuses it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from loopctl._lazy import LazyModule
from loopctl.cli.inert import inert
from loopctl.engine import Deny
from loopctl.message import ToolCallPart
from loopctl.tools.files import WRITE_TOOLS, ChangePreview, FileTools, PathOutsideRoot, ProtectedPath

if TYPE_CHECKING:  # rich is imported when a change is shown (docs/performance.md, section 12)
    import rich.console
else:
    rich = LazyModule("rich")

__all__ = ["MAX_DIFF_LINES", "NO_TERMINAL", "Approval", "refused_anyway", "show_diff"]

MAX_DIFF_LINES = 80
"""The most lines of a change's diff the prompt shows (the rest is counted)."""

NO_TERMINAL = "{tool} was not approved: the CLI cannot ask (stdin is not a terminal); run with --yes"
"""The reason a change is refused when there is no terminal to ask on (the model reads it)."""


@dataclass
class Approval:
    """The permission callback of a run over ``files``. ``yes``: allow every change. ``interactive``:
    whether a user can be asked (default: stdin is a terminal). ``before_prompt`` runs before the prompt is
    shown (the transcript stops its spinner). ``refused`` collects the reasons of the changes refused."""

    files: FileTools
    console: rich.console.Console
    yes: bool = False
    interactive: bool | None = None
    before_prompt: Callable[[], None] | None = None
    refused: list[str] = field(default_factory=list)

    def __call__(self, call: ToolCallPart) -> bool | Deny:
        if call.name not in WRITE_TOOLS or self.yes:
            return True
        if refused_anyway(self.files, call):
            return True  # the tool refuses it itself, with the reason
        preview = self.files.preview(call.name, call.input)
        interactive = sys.stdin.isatty() if self.interactive is None else self.interactive
        if not interactive:
            return self._refuse(NO_TERMINAL.format(tool=call.name))
        if self.before_prompt is not None:
            self.before_prompt()
        target = preview.path if preview is not None else "?"
        self._show(call, preview)
        if click.confirm(f"Allow {inert(call.name, one_line=True)} on {inert(target, one_line=True)}?", default=False):
            return True
        return self._refuse(f"The user did not allow {call.name} on {target}.")

    def _refuse(self, reason: str) -> Deny:
        self.refused.append(reason)
        return Deny(reason)

    def _show(self, call: ToolCallPart, preview: ChangePreview | None) -> None:
        from rich.text import Text

        c = self.console
        name = inert(call.name, one_line=True)
        if preview is None:
            c.print(Text(f"? {name} wants to change files", style="bold yellow"))
            return
        path = inert(preview.path, one_line=True)
        c.print(Text.assemble(("? ", "bold yellow"), (f"{name} wants to {preview.action} {path}", "bold")))
        if preview.problem is not None:
            c.print(Text(f"  (no preview: {inert(preview.problem, one_line=True)})", style="dim"))
        show_diff(c, call.input, preview)


def refused_anyway(files: FileTools, call: ToolCallPart) -> bool:
    """Whether the file tool of ``files`` (the run's :class:`~loopctl.tools.files.FileTools`) will refuse
    ``call`` whatever the user says (its path is outside the root or protected), so asking is pointless. A
    preview that fails for another reason (a file it cannot read, which an atomic replace overwrites all the
    same) is no such proof: that change is asked about."""
    raw = call.input.get("path") if isinstance(call.input, dict) else None
    if not isinstance(raw, str):
        return False
    try:
        files._check_writable(files.resolve(raw), raw)
    except (PathOutsideRoot, ProtectedPath):
        return True
    except OSError:  # the tool decides when it runs; the user is asked first
        return False
    return False


def show_diff(console: rich.console.Console, call_input: object, preview: ChangePreview, indent: str = "  ") -> None:
    """Print what a change would do under its heading, each line starting with ``indent``: the path the model
    wrote when it differs from the resolved one, then the diff (at most :data:`MAX_DIFF_LINES` lines, the rest
    counted), coloured as a diff, every line inert. ``loopctl run``'s prompt and ``loopctl approve`` both show
    a write this way.

    ``console`` is where it prints; ``call_input`` is the model's input for the call (its ``path`` is compared with
    the resolved one); ``preview`` is the change, from :meth:`FileTools.preview
    <loopctl.tools.files.FileTools.preview>`.
    """
    from rich.text import Text

    asked = call_input.get("path") if isinstance(call_input, dict) else None
    if isinstance(asked, str) and asked not in (preview.path, f"./{preview.path}"):
        console.print(Text(f"{indent}(the model asked for {inert(asked, one_line=True)})", style="dim"))
    lines = preview.diff.splitlines()
    for line in lines[:MAX_DIFF_LINES]:
        style = (
            "bold"
            if line.startswith(("---", "+++"))
            else "green"
            if line.startswith("+")
            else "red"
            if line.startswith("-")
            else "cyan"
            if line.startswith("@@")
            else ""
        )
        console.print(Text(indent + inert(line, one_line=True), style=style))
    if len(lines) > MAX_DIFF_LINES:
        console.print(Text(f"{indent}… {len(lines) - MAX_DIFF_LINES} more lines of diff", style="dim"))
