"""``loopctl approve SESSION``: decide the tool calls a stored run is waiting on, then continue the run.

    loopctl approve ID --list                   the calls the run awaits: id, tool, why, the whole input
    loopctl approve ID --all                    approve every one and continue
    loopctl approve ID --approve C1 --deny C2 --reason "not that file"
    loopctl approve ID --modify C1 '{"path": "notes.txt", "content": "..."}'
    loopctl approve ID                          ask about each call (at a terminal)

A run pauses with outcome ``awaiting_approval`` when its permission check defers calls
(``docs/guardrails.md``, "Approvals that wait"). This command loads the session from the store (``--store``,
``$LOOPCTL_STORE``, else ``.loopctl/sessions.db``: the store of ``loopctl sessions``), records the decisions
and continues the run there: the approved calls run once, the denied ones give the model their reason, and
the model goes on until the run ends. Calls left undecided stay pending. The run continues with the model
of the session (or ``--model``; its ``--base-url`` is kept) and the CLI's file tools over the session's
root (or ``--root``); its own file changes after the approved calls are asked for as ``loopctl run`` asks
(:mod:`loopctl.cli.approve`; ``--yes`` allows them).

Text the model wrote (tool names, inputs, reasons) is printed inert: control characters become escapes.
Exit status: 0 when the run completed or still awaits calls left undecided, 2 for a usage or store error,
130 when interrupted, 1 for any other outcome.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.text import Text

from loopctl.cli.inert import inert
from loopctl.cli.report import CommandError
from loopctl.cli.sessions import absent_store, check_id, open_store, store_option, store_spec

__all__ = ["approve", "decide_interactively", "describe"]


def describe(pending: Any, indent: str = "") -> str:
    """A pending call as it is decided on: a line ``id  tool  — reason``, then its whole input as indented
    JSON, one key per line, each line after the first starting with ``indent``. Nothing is cut: the model
    writes the input and its key order, and a long harmless value must not push another out of sight. Every
    line is inert (control and invisible characters written as escapes; JSON already escapes the C0
    controls inside strings)."""
    head = _head(pending)
    try:
        body = orjson.dumps(pending.input, option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONEncodeError:  # integers past 64 bits
        body = json.dumps(pending.input, indent=2, ensure_ascii=False)
    lines = [inert(head, one_line=True)] + [indent + "    " + inert(line, one_line=True) for line in body.splitlines()]
    return "\n".join(lines)


def show_pending(console: Console, pending: Any, files: Any = None, indent: str = "") -> None:
    """Print a pending call once, as it is decided on: the line ``id  tool  — reason``; then, for a call that
    writes a file (and ``files``, the :class:`~loopctl.tools.files.FileTools` it would run with), what it would
    change, as ``loopctl run`` shows it before asking (the path resolved, then a diff); for any other call, or a
    write the tool will refuse (the reason is shown), its whole input as JSON (:func:`describe`)."""
    from loopctl.cli.approve import show_diff

    preview = files.preview(pending.name, pending.input) if files is not None else None
    if preview is None or preview.problem is not None:
        console.print(Text(indent + describe(pending, indent=indent)))
        if preview is not None and preview.problem is not None:
            problem = inert(preview.problem, one_line=True)
            console.print(Text(f"{indent}    the tool will refuse it: {problem}", style="dim"))
        return
    console.print(Text(indent + inert(_head(pending), one_line=True)))
    path = inert(preview.path, one_line=True)
    console.print(Text(f"{indent}    wants to {preview.action} {path}", style="bold"))
    show_diff(console, pending.input, preview, indent=indent + "    ")


def _head(pending: Any) -> str:
    head = f"{pending.id}  {pending.name}"
    return head + (f"  — {pending.reason}" if pending.reason else "")


def decide_interactively(
    pending: Sequence[Any], prompt: Callable[..., Any] = click.prompt, show: Callable[[Any], None] | None = None
) -> dict[str, Any]:
    """Ask about each pending call, showing it once (``show``; default: its whole input, :func:`describe`):
    approve, deny (with a reason), modify (new input as JSON), or skip (it stays pending). ``prompt`` is
    :func:`click.prompt`'s signature (tests pass their own)."""
    from loopctl.engine import Approve, Deny, Modify

    decisions: dict[str, Any] = {}
    for p in pending:
        if show is not None:
            show(p)
        else:
            click.echo(describe(p))
        choice = prompt("  [a]pprove, [d]eny, [m]odify, [s]kip", type=click.Choice(["a", "d", "m", "s"]), default="s")
        if choice == "a":
            decisions[p.id] = Approve()
        elif choice == "d":
            reason = prompt("  reason the model reads", default="The user denied this tool call.")
            decisions[p.id] = Deny(str(reason))
        elif choice == "m":
            while True:
                raw = prompt("  new input (JSON)")
                try:
                    decisions[p.id] = Modify(orjson.loads(str(raw)))
                    break
                except orjson.JSONDecodeError as exc:
                    click.echo(f"  not JSON ({exc}); try again")
    return decisions


@click.command()
@click.argument("session_id")
@store_option
@click.option("--list", "only_list", is_flag=True, help="List the calls the run awaits, decide nothing.")
@click.option("--all", "approve_all", is_flag=True, help="Approve every pending call.")
@click.option("--approve", "approved", multiple=True, metavar="CALL_ID", help="Approve this call.")
@click.option("--deny", "denied", multiple=True, metavar="CALL_ID", help="Deny this call.")
@click.option("--reason", default="The user denied this tool call.", help="What the model reads for a denied call.")
@click.option("--modify", "modified", multiple=True, nargs=2, metavar="CALL_ID JSON", help="Run it with this input.")
@click.option("--model", "-m", "model", help="provider:model to continue with (default: the session's).")
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The folder the file tools may use (default: the session's).",
)
@click.option("--yes", "-y", is_flag=True, help="Allow the continued run's file changes without asking.")
@click.option(
    "--max-turns", type=click.IntRange(1), default=200, show_default=True, help="Model calls per run, as the library's."
)
@click.option("--no-stream", is_flag=True, help="Wait for whole replies instead of streaming them.")
def approve(
    session_id: str,
    only_list: bool,
    approve_all: bool,
    approved: tuple[str, ...],
    denied: tuple[str, ...],
    reason: str,
    modified: tuple[tuple[str, str], ...],
    model: str | None,
    root: Path | None,
    yes: bool,
    max_turns: int,
    no_stream: bool,
) -> None:
    """Decide the tool calls SESSION_ID's run awaits, then continue the run."""
    try:
        code = asyncio.run(
            _approve(
                session_id,
                store_spec(),
                only_list=only_list,
                approve_all=approve_all,
                approved=approved,
                denied=denied,
                reason=reason,
                modified=modified,
                model=model,
                root=root,
                yes=yes,
                max_turns=max_turns,
                stream=not no_stream,
            )
        )
    except KeyboardInterrupt:
        Console(stderr=True, highlight=False).print(Text("⏹ stopped; the session keeps what was done", style="yellow"))
        sys.exit(130)
    sys.exit(code)


async def _approve(session_id: str, store_spec: str | None, **opts: Any) -> int:
    from loopctl.cli.approve import Approval
    from loopctl.cli.autosave import cli_values
    from loopctl.cli.render import Transcript
    from loopctl.cli.run import build_client, model_sizes
    from loopctl.engine import Approve, BareLoop, Deny, MachineState, Modify, RunConfig, SessionConfig
    from loopctl.errors import ApprovalError, ConcurrentUpdate, SessionNotFound
    from loopctl.tools.files import PROTECTED_NAMES, FileTools

    console = Console(highlight=False, soft_wrap=True)
    check_id(session_id)
    missing = absent_store(store_spec)
    if missing is not None:  # nothing to approve, and no store to create
        raise CommandError(f"no session {session_id!r} (no store at {inert(str(missing), one_line=True)})")
    store = open_store(store_spec)
    try:
        try:
            loaded = store.load(session_id)
        except SessionNotFound:
            raise CommandError(f"no session {session_id!r} in {store!r}") from None
        state = loaded.state
        model = opts["model"] or state.model
        saved_url = cli_values(state.metadata).get("base_url") if opts["model"] is None else None
        base_url = saved_url if isinstance(saved_url, str) else None
        root = opts["root"] or (Path(state.root) if state.root else None)
        machine = loaded.machine()
        if machine.state is not MachineState.AWAITING_APPROVAL:
            raise CommandError(f"session {session_id!r} awaits no approval (its last run: {state.outcome})")
        pending = machine.pending_approvals
        files: FileTools | None = None
        if root is not None:
            try:
                files = FileTools(root, protected=PROTECTED_NAMES)
            except OSError as exc:
                root_error = exc.strerror
        console.print(Text(f"session {inert(session_id, one_line=True)} awaits {len(pending)} call(s):", style="bold"))

        def show(p: Any) -> None:
            show_pending(console, p, files, indent="  ")

        decisions = _from_flags(pending, opts, Approve, Deny, Modify)
        if opts["only_list"] or decisions or not sys.stdin.isatty():
            for p in pending:  # each call shown once, as run shows a change: a write as its diff
                show(p)
        if opts["only_list"]:
            return 0
        if not decisions:
            if not sys.stdin.isatty():
                raise CommandError("no decisions: pass --all, --approve ID, --deny ID or --modify ID JSON")
            decisions = decide_interactively(pending, show=show)
            if not decisions:
                console.print("nothing decided; the calls stay pending")
                return 0
        if not model:
            raise CommandError("--model is required (the session names none)")
        if root is None:
            raise CommandError("--root is required (the session names none)")
        if files is None:
            raise CommandError(f"the root folder {inert(str(root))} cannot be used ({root_error}); pass --root")
        transcript = Transcript(console)
        approval = Approval(files, console, yes=opts["yes"], before_prompt=transcript.close)
        async with build_client(model, base_url) as client:
            window, max_tokens = await model_sizes(client, model, None, None)
            loop = BareLoop(
                client,
                list(files),
                SessionConfig(context_window=window),
                observers=[transcript],
                permission=approval,
                store=store,
                session_id=session_id,
            )
            try:
                config = RunConfig(max_turns=opts["max_turns"], stream=opts["stream"], max_tokens=max_tokens)
                run = await loop.run(approvals=decisions, config=config)
            except (ApprovalError, ConcurrentUpdate) as exc:
                # Another process decided these calls first (or the run changed since it was listed): the
                # decisions were not recorded, and nothing ran.
                raise CommandError(
                    f"the decisions were not recorded, and nothing ran: {exc} (see: loopctl approve "
                    f"{session_id} --list)"
                ) from None
            finally:
                transcript.close()
    finally:
        store.close()
    _summary(console, run, approval.refused, decisions, loop.machine.usage)
    kind = run.outcome.kind.value
    return 0 if kind in ("completed", "awaiting_approval") else 130 if kind == "cancelled" else 1


def _from_flags(pending: Sequence[Any], opts: dict[str, Any], approve: Any, deny: Any, modify: Any) -> dict[str, Any]:
    """The decisions the flags give; raises ``click.UsageError`` for a call id that is not pending, a call
    decided twice, or an input that is not JSON."""
    ids = {p.id for p in pending}
    decisions: dict[str, Any] = {}

    def put(call_id: str, decision: Any) -> None:
        if call_id not in ids:
            raise CommandError(f"call {call_id!r} is not pending (pending: {', '.join(sorted(ids))})")
        if call_id in decisions:
            raise CommandError(f"call {call_id!r} is decided twice")
        decisions[call_id] = decision

    for call_id in opts["approved"]:
        put(call_id, approve())
    for call_id in opts["denied"]:
        put(call_id, deny(opts["reason"]))
    for call_id, raw in opts["modified"]:
        try:
            put(call_id, modify(orjson.loads(raw)))
        except orjson.JSONDecodeError as exc:
            raise CommandError(f"--modify {call_id}: the input is not JSON ({exc})") from None
    if opts["approve_all"]:
        for p in pending:
            decisions.setdefault(p.id, approve())
    return decisions


def _summary(
    console: Console, run: Any, refused: Sequence[str], decisions: dict[str, Any] | None = None, whole: Any = None
) -> None:
    """``loopctl run``'s summary (:func:`loopctl.cli.run.print_summary`) of the continued run, with what
    became of each decided call after the outcome line (the input a ``Modify`` gave, and its error when it
    failed) and the calls still pending; its usage line is this continuation's (``run.usage``, ``run.cost``),
    followed by the whole run's, the part before the pause included (``whole``: the machine's ``RunUsage``)."""
    from loopctl.cli.render import dollars
    from loopctl.cli.run import print_summary
    from loopctl.engine import Modify

    details = []
    for r in run.resumed_calls:
        decision = (decisions or {}).get(r.call.id)
        mark = "ran" if r.ran else "not run"
        if r.ran and isinstance(decision, Modify):
            given = orjson.dumps(decision.input).decode()
            mark += f" with the modified input {given[:300]}{'… (shortened)' if len(given) > 300 else ''}"
        if r.ran and r.result.is_error:
            text = str(r.result.output)
            mark += f", and failed: {text[:200]}{'…' if len(text) > 200 else ''}"
        details.append((inert(f"  {r.call.id} {r.call.name}: {mark}", one_line=True), "dim"))
    if run.pending_approvals:
        ids = inert(", ".join(p.id for p in run.pending_approvals), one_line=True)
        details.append((f"  still awaiting: {ids}", "yellow"))
    print_summary(console, run, refused, details, label="this continuation: ")
    if whole is not None:
        spent = f" · {dollars(whole.cost)}" if whole.cost is not None and whole.requests else ""
        console.print(
            Text(
                f"  the whole run: {whole.requests} model call(s) · {whole.input_tokens:,} tokens in · "
                f"{whole.output_tokens:,} out{spent}",
                style="dim",
            )
        )
