"""The ``loopctl`` command line.

``loopctl run "TASK" --model SPEC --root DIR`` runs an agent with the built-in file tools over DIR, streams
the transcript, and saves the session in the store (``.loopctl/sessions.db``; ``loopctl sessions`` lists
them); ``--resume ID`` continues a stored session, ``--resume FILE`` a session file. ``--model demo`` runs a
scripted task through a local fake provider server and a real client, with no API key.
``loopctl show FILE`` prints a saved session or conversation; ``loopctl check FILE`` checks one.
``python -m loopctl`` is the same command line.

Environment: ``LOOPCTL_DEMO_DELAY`` sets the seconds between the demo model's streamed events (default
0.01), to watch the demo stream slowly or to interrupt it with Ctrl-C part way.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from loopctl.cli.sessions import STORE_VAR, RunTarget, sessions
from loopctl.errors import ConversationFileError, LoopError, MissingAPIKey

__all__ = ["main"]

_EXIT = {"completed": 0, "cancelled": 130}

DEMO_DELAY_VAR = "LOOPCTL_DEMO_DELAY"
"""Environment variable: seconds between the streamed events of ``--model demo`` (0 to 60; default 0.01)."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="loopctl")
def main() -> None:
    """loopctl: run LLM agents that call tools in a loop."""


@main.command()
@click.argument("task")
@click.option(
    "--model", "-m", "model", help='provider:model (openai:, openai-responses:, anthropic:, gemini:) or "demo".'
)
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The folder the file tools may use (default: the current folder, or the resumed session's).",
)
@click.option("--yes", "-y", is_flag=True, help="Allow file changes without asking.")
@click.option(
    "--session", "session_path", type=click.Path(dir_okay=False, path_type=Path), help="Save to this file instead."
)
@click.option("--resume", help="Continue a stored session (its id) or a session file.")
@click.option("--store", "store_spec", envvar=STORE_VAR, help="The session store (default: .loopctl/sessions.db).")
@click.option("--system", "system_prompt", help="A system prompt for the session.")
@click.option("--max-turns", type=click.IntRange(1), default=50, show_default=True)
@click.option("--max-tokens", type=click.IntRange(1), help="Output token limit per model call.")
@click.option("--reasoning-effort", type=click.Choice(["minimal", "low", "medium", "high"]))
@click.option("--context-window", type=click.IntRange(1000), help="The model's context window in tokens.")
@click.option("--no-stream", is_flag=True, help="Wait for whole replies instead of streaming them.")
@click.option("--hide-thinking", is_flag=True, help="Do not print the model's reasoning.")
@click.option("--otel", is_flag=True, help="Export traces and metrics over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT).")
@click.option("--mcp", "mcp_commands", multiple=True, metavar="'COMMAND ARGS'", help="Add an MCP server's tools.")
@click.option("--mcp-url", "mcp_urls", multiple=True, metavar="URL", help="Add a streamable-HTTP MCP server's tools.")
def run(
    task: str,
    model: str | None,
    root: Path | None,
    yes: bool,
    session_path: Path | None,
    resume: str | None,
    store_spec: str | None,
    system_prompt: str | None,
    max_turns: int,
    max_tokens: int | None,
    reasoning_effort: str | None,
    context_window: int | None,
    no_stream: bool,
    hide_thinking: bool,
    otel: bool,
    mcp_commands: tuple[str, ...],
    mcp_urls: tuple[str, ...],
) -> None:
    """Run TASK with an agent that can list, read, search, write and edit files under --root."""
    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    saved: list[str] = []  # where the session was saved, once it was
    try:
        code = asyncio.run(
            _run(
                console,
                task=task,
                model=model,
                root=root,
                yes=yes,
                session_path=session_path,
                resume=resume,
                store_spec=store_spec,
                system_prompt=system_prompt,
                max_turns=max_turns,
                max_tokens=max_tokens,
                reasoning_effort=reasoning_effort,
                context_window=context_window,
                stream=not no_stream,
                show_thinking=not hide_thinking,
                saved=saved,
                extras={"otel": otel, "mcp_commands": mcp_commands, "mcp_urls": mcp_urls},
            )
        )
    except KeyboardInterrupt:  # a second Ctrl-C: the run stopped at once, its salvaged session saved
        where = f"; the session is saved to {saved[-1]}" if saved else ""
        err.print(Text(f"⏹ stopped{where}", style="yellow"))
        sys.exit(130)
    except MissingAPIKey as exc:
        err.print(Text(f"error: {exc}", style="bold red"))
        err.print('Or try the whole stack with no key: loopctl run "TASK" --model demo --root DIR')
        sys.exit(2)
    except (ConversationFileError, LoopError, click.UsageError) as exc:
        err.print(Text(f"error: {exc}", style="bold red"))
        sys.exit(2)
    except ImportError as exc:  # a provider SDK (an optional extra) is not installed
        err.print(Text(f"error: {exc}", style="bold red"))
        sys.exit(2)
    sys.exit(code)


async def _run(console: Console, **opts: Any) -> int:
    from loopctl.cli.files import WRITE_TOOLS, FileTools
    from loopctl.cli.render import Transcript
    from loopctl.engine import BareLoop, Deny, LoopMachine, MachineState, RunConfig, SessionConfig
    from loopctl.session import Session

    resume_arg: str | None = opts["resume"]
    # A stored session unless a file is named (--session, or --resume with a file that exists).
    in_store = opts["session_path"] is None and not (resume_arg and Path(resume_arg).is_file())
    resume = Path(resume_arg) if resume_arg and not in_store else None
    session: Session | None = Session.load(resume) if resume else None
    target = RunTarget(opts["store_spec"], resume_arg) if in_store else None
    if target is not None and resume_arg:
        session = target.settings()
    model = opts["model"] or (session.model if session else None)
    if not model:
        raise click.UsageError("--model is required (or --resume a session that names one)")
    root = opts["root"] or (Path(session.root) if session and session.root else Path("."))
    system_prompt = opts["system_prompt"] or (session.system_prompt if session else None)
    try:
        files = FileTools(root)
    except OSError as exc:  # a resumed session's folder that was moved or deleted since
        raise click.UsageError(f"the root folder {str(root)!r} cannot be used ({exc.strerror}); pass --root") from None
    machine = session.machine if session and target is None else LoopMachine()
    if machine.state not in (MachineState.START, MachineState.TERMINAL):
        machine.cancel()  # a session saved mid-run: keep its coherent prefix
    path = opts["session_path"] or resume or _default_session_path()

    def permission(call: Any) -> Any:
        if call.name not in WRITE_TOOLS or opts["yes"]:
            return True
        if not sys.stdin.isatty():
            return Deny(f"{call.name} was not approved: the CLI cannot ask (stdin is not a terminal); run with --yes")
        transcript.close()
        target = call.input.get("path", "?") if isinstance(call.input, dict) else "?"
        ok = click.confirm(f"Allow {call.name} on {target}?", default=False)
        return True if ok else Deny(f"The user did not allow {call.name} on {target}.")

    transcript = Transcript(console, show_thinking=opts["show_thinking"])
    session_obj = Session(machine, model=model, root=str(files.root), system_prompt=system_prompt)

    def autosave(event: Any) -> None:
        from loopctl.engine import ToolCallFinished, TurnFinished

        if target is None and isinstance(event, (TurnFinished, ToolCallFinished)):
            with contextlib.suppress(OSError):
                session_obj.save(path)

    async with _client(model, files.root) as client, contextlib.AsyncExitStack() as stack:
        from loopctl.cli.integrations import open_integrations

        taken = {t.name for t in files.tools()}
        conversation_id = target.session_id if target is not None else path.stem
        servers, observers = await open_integrations(
            stack, taken=taken, conversation_id=conversation_id, **opts["extras"]
        )
        try:  # before any model call: a run whose session cannot be saved would be lost at the end
            if target is None:
                path.parent.mkdir(parents=True, exist_ok=True)
            else:
                target.open(model=model, root=str(files.root), system_prompt=system_prompt)
        except OSError as exc:
            raise click.UsageError(
                f"cannot save the session to {str(path)!r} ({exc.strerror}: {exc.filename})"
            ) from None
        from loopctl.compact import PRESETS, ContextBudget

        # The token counter's preset follows the provider (characters per token, image prices...).
        prefix = model.partition(":")[0]
        budget = ContextBudget.for_provider(
            prefix if prefix in PRESETS else "default", window=opts["context_window"] or 200_000
        )
        config = SessionConfig(system_prompt=system_prompt or _DEFAULT_SYSTEM.format(root=files.root), budget=budget)
        loop = BareLoop(
            client,
            [*files.tools(), *servers],
            config,
            observers=[transcript, autosave, *observers],
            permission=permission,
            **(target.loop_args() if target is not None else {"machine": machine}),
        )
        run_config = RunConfig(
            max_turns=opts["max_turns"],
            max_tokens=opts["max_tokens"],
            reasoning_effort=opts["reasoning_effort"],
            stream=opts["stream"],
        )
        cancel = asyncio.Event()
        # Ctrl-C stays ours until the session is saved: a second press while saving is not lost work.
        with _sigint(cancel, console):
            try:
                result = await loop.run(opts["task"], run_config, cancel=cancel)
            except BaseException:  # stopped at once (a second Ctrl-C): the machine salvaged what it could
                transcript.close()
                if target is not None:  # the loop saved it to the store
                    opts["saved"].append(target.where())
                    target.close()
                    raise
                with contextlib.suppress(Exception):
                    session_obj.save(path)
                    opts["saved"].append(str(path))
                raise
            transcript.close()
            if target is not None:
                target.close()
                _summary(console, result, None, model)
                sid = target.session_id
                console.print(Text(f'  session {sid}; continue with: loopctl run "..." --resume {sid}', style="dim"))
                return _EXIT.get(result.outcome.kind.value, 1)
            try:
                session_obj.save(path)
                opts["saved"].append(str(path))
            except OSError as exc:  # the folder was checked before the run; the disk may still fill up
                _summary(console, result, None, model)
                Console(stderr=True, highlight=False, soft_wrap=True).print(
                    Text(f"error: cannot save the session to {str(path)!r} ({exc.strerror})", style="bold red")
                )
                return 2
            _summary(console, result, str(path), model)
    return _EXIT.get(result.outcome.kind.value, 1)


_DEFAULT_SYSTEM = (
    "You are a careful coding agent working in the folder {root}. Use the file tools to look before you "
    "change anything; keep changes small; when done, answer with a short summary of what you did."
)


def _default_session_path() -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(".loopctl") / "sessions" / f"{stamp}.json"


@contextlib.asynccontextmanager
async def _client(model: str, root: Path) -> Any:
    """The model client for ``model``; ``demo`` starts the fake provider server for the scripted demo."""
    from loopctl.providers.clients import from_string

    if model != "demo":
        try:
            client = from_string(model)
        except ValueError as exc:  # an unknown prefix: the user's typo, not a crash
            raise click.UsageError(f'{exc}, or "demo"') from None
        try:
            yield client
        finally:
            await client.aclose()
        return
    from loopctl.testing.demo import DemoScript
    from loopctl.testing.server import FakeProviderServer

    # A real client (OpenAI Chat Completions over the openai SDK) against a local fake server that plays a
    # scripted model: the whole stack runs, no key needed.
    with FakeProviderServer(DemoScript(), event_delay=_demo_delay()) as server:
        client = from_string("openai:demo-model", base_url=server.openai_base_url, api_key="demo-key")
        try:
            yield client
        finally:
            await client.aclose()


def _demo_delay() -> float:
    """Seconds between the demo's streamed events: :data:`DEMO_DELAY_VAR`, else 0.01. Raises
    ``click.UsageError`` for a value that is not a number of seconds from 0 to 60."""
    raw = os.environ.get(DEMO_DELAY_VAR)
    if raw is None or not raw.strip():
        return 0.01
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:
        raise click.UsageError(f"{DEMO_DELAY_VAR} must be a number of seconds from 0 to 60, got {raw!r}")
    return value


@contextlib.contextmanager
def _sigint(cancel: asyncio.Event, console: Console) -> Iterator[None]:
    """Ctrl-C sets ``cancel`` (the run stops at its next await and keeps a coherent history); a second
    Ctrl-C interrupts at once."""
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        if cancel.is_set():
            loop.remove_signal_handler(signal.SIGINT)
            raise KeyboardInterrupt
        console.print(Text("\n⏹ cancelling… (Ctrl-C again to stop at once)", style="yellow"))
        cancel.set()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError):  # not the main thread, or a platform without it
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGINT)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(console: Console, result: Any, path: str | None, model: str) -> None:
    u = result.usage
    outcome = result.outcome
    style = "green" if outcome.kind.value == "completed" else "yellow" if outcome.kind.value == "cancelled" else "red"
    line = f"● {outcome.kind.value}"
    if outcome.error:
        line += f": {outcome.error}"
    console.print(Text(line, style=f"bold {style}"))
    console.print(
        Text(
            f"  {_plural(len(result.turns), 'turn')} · {u.input_tokens:,} tokens in ({u.cache_read_tokens:,} cached) · "
            f"{u.output_tokens:,} out · {result.duration:.1f} s",
            style="dim",
        )
    )
    if path is not None:
        console.print(Text(f'  session saved to {path}; continue with: loopctl run "..." --resume {path}', style="dim"))


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def show(file: Path) -> None:
    """Print a saved session or conversation file."""
    messages = _read_messages(file)
    console = Console(highlight=False, soft_wrap=True)
    for m in messages:
        console.print(Text(f"── {m.role.value}", style="bold"))
        console.print(Text(str(m)))


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(file: Path) -> None:
    """Check a saved session or conversation file against the pairing and placement rules."""
    from loopctl.message import check_conversation

    messages = _read_messages(file)
    problems = check_conversation(messages)
    for p in problems:
        click.echo(str(p))
    click.echo(f"{_plural(len(messages), 'message')}, {_plural(len(problems), 'problem')}")
    sys.exit(1 if problems else 0)


def _read_messages(file: Path) -> list[Any]:
    from loopctl.message import load_conversation
    from loopctl.session import Session

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        with open(file, "rb") as f:
            head = f.read(4096)
        if b'"loopctl-session"' in head or b'"kind"' in head:
            return list(Session.load(file).machine.full_history())
        return load_conversation(file)
    except (ConversationFileError, LoopError) as exc:
        err.print(Text(f"error: {exc}", style="bold red"))
        sys.exit(2)
    except OSError as exc:  # the first look at the file (the readers report their own failures)
        err.print(Text(f"error: {file}: cannot read the file ({exc.strerror})", style="bold red"))
        sys.exit(2)


main.add_command(sessions)
