"""``loopctl run``: one agent run over a folder, streamed to the terminal and saved as a session.

The run is built from small parts, each a function here, so an option is a few lines: :class:`RunOptions`
(the command's options), :func:`build_client` (the model client; ``demo`` starts the fake provider server),
:func:`build_observers` (the transcript, the autosave), :func:`file_tools` and :func:`build_tools` (what the
agent may call), and the approval prompt
(:mod:`loopctl.cli.approve`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from loopctl._lazy import LazyModule
from loopctl.cli import DEMO_DELAY_VAR  # the command group's module, which imports this one only when it runs
from loopctl.cli.inert import inert
from loopctl.cli.options import resume_command
from loopctl.cli.report import CommandError, run_console, stderr, tokens, warn
from loopctl.cli.sessions import store_option, store_spec

if TYPE_CHECKING:  # the run's parts are imported when a run starts, so that `loopctl --help` stays quick
    import rich.console  # when the run first prints (run_console)

    import loopctl.cli.autosave
    import loopctl.cli.render
    import loopctl.engine
    import loopctl.session
    import loopctl.tool
    import loopctl.tools.files
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")
    rich = LazyModule("rich")

__all__ = ["DEMO_DELAY_VAR", "RunOptions", "build_client", "build_observers", "build_tools", "file_tools", "run"]


_EXIT = {"completed": 0, "cancelled": 130}

_DEFAULT_SYSTEM = (
    "You are a careful coding agent working in the folder {root}. Use the file tools to look before you "
    "change anything; keep changes small; when done, answer with a short summary of what you did."
)


@dataclass(frozen=True)
class RunOptions:
    """The options of ``loopctl run``, as click parsed them (one field per option)."""

    task: str
    model: str | None
    base_url: str | None
    root: Path | None
    yes: bool
    allow_protected_writes: bool
    session_path: Path | None
    resume: str | None
    store_spec: str | None
    system_prompt: str | None
    max_turns: int
    max_tokens: int | None
    reasoning_effort: str | None
    context_window: int | None
    no_stream: bool
    hide_thinking: bool
    otel: bool
    mcp_commands: tuple[str, ...]
    mcp_urls: tuple[str, ...]


@click.command()
@click.argument("task")
@click.option(
    "--model", "-m", "model", help='provider:model (openai:, openai-responses:, anthropic:, gemini:) or "demo".'
)
@click.option(
    "--base-url",
    help="The API's base URL: any OpenAI-compatible server for openai: (vLLM, Ollama, LM Studio, LiteLLM...), or "
    "a gateway for the others. Default: OPENAI_BASE_URL, ANTHROPIC_BASE_URL, GEMINI_BASE_URL, or the resumed "
    "session's.",
)
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The folder the file tools may use and the MCP servers' root (default: the current folder, or the resumed "
    "session's).",
)
@click.option("--yes", "-y", is_flag=True, help="Allow file changes without asking.")
@click.option(
    "--allow-protected-writes",
    is_flag=True,
    help="Let the agent write under .git/ and the other paths whose files make tools run code (.envrc, .hg/, "
    ".vscode/...); refused otherwise, even with --yes.",
)
@click.option(
    "--session",
    "session_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Save to this session file (a new one) instead of the store.",
)
@click.option("--resume", help="Continue a stored session (its id) or a session file.")
@store_option
@click.option("--system", "system_prompt", help="A system prompt for the session.")
@click.option(
    "--max-turns", type=click.IntRange(1), default=200, show_default=True, help="Model calls per run, as the library's."
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    help="Output token limit per model call (default: the model's own, at most 32,000; for a local server a "
    "quarter of its context, at most 8,192).",
)
@click.option(
    "--reasoning-effort",
    type=click.Choice(["minimal", "low", "medium", "high"]),
    help="How much the model reasons before it answers (models that reason; default: the provider's).",
)
@click.option(
    "--context-window",
    type=click.IntRange(1000),
    help="The model's context window in tokens (default: what a local server reports, else what the provider "
    "publishes, else 200,000).",
)
@click.option("--no-stream", is_flag=True, help="Wait for whole replies instead of streaming them.")
@click.option("--hide-thinking", is_flag=True, help="Do not print the model's reasoning.")
@click.option("--otel", is_flag=True, help="Export traces and metrics over OTLP (OTEL_EXPORTER_OTLP_ENDPOINT).")
@click.option("--mcp", "mcp_commands", multiple=True, metavar="'COMMAND ARGS'", help="Add an MCP server's tools.")
@click.option("--mcp-url", "mcp_urls", multiple=True, metavar="URL", help="Add a streamable-HTTP MCP server's tools.")
def run(**opts: Any) -> None:
    """Run TASK with an agent that can list, read, search, write and edit files under --root."""
    opts["store_spec"] = store_spec()
    options = RunOptions(**{f.name: opts[f.name] for f in fields(RunOptions)})
    console = run_console()
    saved: list[str] = []  # where the session was saved, once it was
    # The start (imports, the client, the tools) makes many objects that live as long as the process and few
    # cycles: the cyclic collector is off until the loop starts (_started), then finds them in its permanent
    # generation. It collected ~70 ms of nothing before the first request (docs/performance.md, section 2).
    collecting = gc.isenabled()
    frozen = gc.get_freeze_count()  # what a caller moved to the permanent generation itself stays there
    gc.disable()
    try:
        code = asyncio.run(_run(console, options, saved, collect=collecting))
    # A second Ctrl-C: the run stopped at once, its salvaged session saved. asyncio.run raises CancelledError
    # instead of KeyboardInterrupt when the interrupted task was cancelled more than once (the two presses raced).
    except (KeyboardInterrupt, asyncio.CancelledError):
        from rich.text import Text

        where = f"; the session is saved to {inert(saved[-1], one_line=True)}" if saved else ""
        stderr().print(Text(f"⏹ stopped{where}", style="yellow"))
        sys.exit(130)
    finally:  # as it was (a process that runs the command in-process, such as a test, goes on)
        if not frozen:
            gc.unfreeze()
        if collecting:
            gc.enable()
    sys.exit(code)


def _started(collect: bool) -> None:
    """The run's start is over: what it made is moved to the collector's permanent generation (not scanned
    again by each collection) and the collector is on again (when ``collect``: it was on before the run)."""
    gc.freeze()
    if collect:
        gc.enable()


async def _run(console: rich.console.Console, o: RunOptions, saved: list[str], *, collect: bool = True) -> int:
    from loopctl.cli.approve import Approval
    from loopctl.cli.autosave import cli_values
    from loopctl.cli.sessions import RunTarget
    from loopctl.engine import BareLoop, RunConfig
    from loopctl.session import Session

    for name, text in (("TASK", o.task), ("--system", o.system_prompt)):
        if text is not None and not _is_text(text):  # a command line's bytes that are not UTF-8
            raise CommandError(f"{name} is not valid text (it holds bytes that are not UTF-8)")
    if not o.task.strip():  # providers refuse an empty user turn (a 400 after the run has started)
        raise CommandError("TASK is empty: say what the agent should do, e.g. loopctl run \"Summarize README.md\"")
    # The session lives in the store unless a file is named (--session, or --resume with a file that exists).
    resume_file = Path(o.resume) if o.resume and Path(o.resume).is_file() else None
    if o.resume is not None and resume_file is None:
        _check_resume(o.resume, o.store_spec)
    target = RunTarget(o.store_spec, o.resume) if o.session_path is None and resume_file is None else None
    with contextlib.ExitStack() as held:
        session: loopctl.session.Session | None = None
        if resume_file is not None:
            held.enter_context(_locked(resume_file))
            session = Session.load(resume_file)
        elif target is not None and o.resume is not None:
            session = target.settings()
        cli_meta = cli_values(session.metadata) if session else {}
        model = _model_spec(o.model or (session.model if session else None))
        saved_url = cli_meta.get("base_url") if o.model is None else None  # a new --model drops the old URL
        base_url = o.base_url or (saved_url if isinstance(saved_url, str) else None)
        if model == "demo" and o.base_url:
            raise CommandError("--base-url does not apply to --model demo (it starts its own server)")
        files = file_tools(o.root or (_session_root(session) if session else None) or Path("."), o)
        file_list = files.tools()  # built once (each tool's schema is built from its signature and docstring)
        session_obj = _session_for_run(session, model, base_url, files.root, o)

        async with build_client(model, base_url) as client, contextlib.AsyncExitStack() as stack:
            # Before any model call: a run whose session cannot be saved would be lost at the end.
            path: Path | None = None
            if target is None:
                path = _session_file(o, resume_file, session_obj)
            created = path is not None and path != resume_file
            try:
                if path is not None and created:
                    held.enter_context(_locked(path))
                from loopctl.cli.integrations import TerminalElicitation, open_integrations

                asking = TerminalElicitation()  # the MCP servers' questions to the user
                servers, extra_observers = await open_integrations(
                    stack,
                    taken={t.name for t in file_list},
                    conversation_id=target.session_id if target is not None else path.stem if path else None,
                    otel=o.otel,
                    mcp_commands=o.mcp_commands,
                    mcp_urls=o.mcp_urls,
                    roots=[files.root],
                    elicitation=asking,
                    sampling=client,
                )
                if target is not None:  # after the MCP servers: one that does not start leaves no empty session
                    stack.callback(target.close)
                    target.open(
                        model=model,
                        root=session_obj.root or "",
                        system_prompt=session_obj.system_prompt,
                        metadata=session_obj.metadata,
                    )
            except BaseException:
                if path is not None and created:  # nothing ran: leave no empty session file behind
                    with contextlib.suppress(OSError):
                        path.unlink()
                raise
            if not o.yes and not sys.stdin.isatty():
                warn("stdin is not a terminal, so file changes will be refused; pass --yes to allow them")
            transcript, autosave, observers = build_observers(console, session_obj, path, o)
            approval = Approval(files, console, yes=o.yes, before_prompt=transcript.close)
            asking.before_prompt = transcript.close
            where: dict[str, Any] = target.loop_args() if target is not None else {"machine": session_obj.machine}
            window, max_tokens = await model_sizes(client, model, o.context_window, o.max_tokens)
            loop = BareLoop(
                client,
                build_tools(file_list, servers),
                _session_config(model, files.root, session_obj.system_prompt, window),
                observers=[*observers, *extra_observers],
                permission=approval,
                **where,
            )
            run_config = RunConfig(
                max_turns=o.max_turns,
                max_tokens=max_tokens,
                reasoning_effort=o.reasoning_effort,  # type: ignore[arg-type]
                stream=not o.no_stream,
            )
            cancel = asyncio.Event()
            _started(collect)
            # Ctrl-C stays ours until the session is saved: a second press while saving is not lost work.
            with _sigint(cancel, console):
                try:
                    result = await loop.run(o.task, run_config, cancel=cancel)
                except BaseException:  # stopped at once (a second Ctrl-C): the machine salvaged what it could
                    transcript.close()
                    if target is not None:  # the loop saved it to the store
                        saved.append(target.where())
                    elif autosave is not None and path is not None and autosave.save():
                        saved.append(str(path))
                    raise
                transcript.close()
                from rich.text import Text

                if target is not None:
                    _summary(console, result, None, approval.refused)
                    sid = inert(target.session_id, one_line=True)
                    again = inert(resume_command(target.session_id), one_line=True)
                    console.print(Text(f"  session {sid}; continue with: {again}", style="dim"))
                    if result.outcome.error_type == "ConcurrentUpdate":
                        # Refused at a later save than the first: the same error, and exit code, as a refusal
                        # of the first save (which raises before the run starts).
                        stderr().print(Text(f"error: {inert(result.outcome.error or '')}", style="bold red"))
                        return 2
                    return _EXIT.get(result.outcome.kind.value, 1)
                assert autosave is not None
                assert path is not None
                ok = autosave.save()
                _summary(console, result, path if ok else None, approval.refused)
                if not ok:
                    stderr().print(Text(f"error: the session could not be saved to {_shown(path)}", style="bold red"))
                    return 2
                saved.append(str(path))
    return _EXIT.get(result.outcome.kind.value, 1)


# --- the parts of a run ---------------------------------------------------------------------------------------


def file_tools(root: Path, o: RunOptions) -> loopctl.tools.files.FileTools:
    """The file tools over ``root`` (``CommandError`` when it cannot be used).

    ``o`` is the command's options (:class:`RunOptions`: ``--yes``, ``--allow-protected-writes``).
    """
    from loopctl.tools.files import PROTECTED_NAMES, FileTools

    try:
        return FileTools(root, protected=() if o.allow_protected_writes else PROTECTED_NAMES)
    except OSError as exc:  # a resumed session's folder that was moved or deleted since
        raise CommandError(f"the root folder {_shown(root)} cannot be used ({exc.strerror}); pass --root") from None


def build_tools(
    files: Iterable[loopctl.tool.Tool], providers: Sequence[loopctl.tool.ToolProvider] = ()
) -> list[loopctl.tool.Tool | loopctl.tool.ToolProvider]:
    """The tools the agent gets: the file tools, then the tool providers (``--mcp`` servers).

    ``files`` are the file tools (:func:`file_tools`, or the list of its tools).
    """
    return [*files, *providers]


@contextlib.asynccontextmanager
async def build_client(model: str, base_url: str | None = None) -> AsyncIterator[Any]:
    """The model client for ``model`` (``base_url`` passed on when given); ``demo`` starts the fake provider
    server for the scripted demo. ``CommandError`` for a spec that names no known provider."""
    from loopctl.errors import InvalidModelSpec
    from loopctl.providers import from_string

    if model != "demo":
        from loopctl.errors import InvalidBaseURL

        options = {"base_url": base_url} if base_url else {}
        try:
            client = from_string(model, **options)
        except InvalidBaseURL as exc:  # refused when the client is made: named as the user gave it
            name = "--base-url" if exc.source == "base_url" else exc.source
            hint = f"; did you mean {exc.suggestion!r}?" if exc.suggestion is not None else ""
            raise CommandError(f"{name} {exc.url!r} is not an http:// or https:// URL{hint}") from None
        except InvalidModelSpec as exc:  # an unknown prefix: the user's typo, not a crash
            import difflib

            from loopctl.providers._spec import DEMO_IN_CODE

            problem, suggestion = exc.problem, exc.suggestion
            if suggestion is None and difflib.get_close_matches(model.strip().lower(), ["demo"]):
                suggestion = "demo"  # --model Demo, dmeo, demo2
            if problem == DEMO_IN_CODE:  # the library's word on "Demo", which the command line takes as "demo"
                problem = f"unknown model spec {model!r}"
            hint = f"; did you mean {suggestion!r}?" if suggestion is not None else ""
            raise CommandError(f'{problem}; expected one of {", ".join(exc.known)}, or "demo"{hint}') from None
        try:
            yield client
        finally:
            await client.aclose()
        return
    from loopctl.testing.demo import DemoScript
    from loopctl.testing.server import FakeProviderServer
    from loopctl.transport.openai import OpenAIChatClient

    # A real client (OpenAI Chat Completions: the codec, the pool, the stream's decoding) against a local fake
    # server that plays a scripted model: the whole stack runs, no key needed. Made without the openai SDK,
    # which configures real providers (their keys, environment, headers) and whose import alone would take
    # longer than the rest of the demo's start (docs/performance.md, section 2).
    with FakeProviderServer(DemoScript(), event_delay=_demo_delay()) as server:
        demo = OpenAIChatClient.without_sdk("demo-model", base_url=server.openai_base_url, api_key="demo-key")
        try:
            yield demo
        finally:
            await demo.aclose()


def build_observers(
    console: rich.console.Console, session: loopctl.session.Session, path: Path | None, o: RunOptions
) -> tuple[loopctl.cli.render.Transcript, loopctl.cli.autosave.Autosave | None, list[loopctl.engine.Observer]]:
    """The transcript, the autosave of a session file at ``path`` (``None`` with the store, which the loop
    saves to itself), and the observers of the run in the order they are called (the autosave first, so what
    the transcript shows as done is saved).

    ``console`` is where the transcript prints; ``o`` the command's options (:class:`RunOptions`).
    """
    from loopctl.cli.autosave import Autosave
    from loopctl.cli.render import Transcript

    transcript = Transcript(console, show_thinking=not o.hide_thinking)
    if path is None:
        return transcript, None, [transcript]
    where = path

    def on_error(exc: BaseException) -> None:
        warn(f"cannot save the session to {where} ({_reason(exc)}); the run goes on")

    autosave = Autosave(session, path, on_error=on_error)
    return transcript, autosave, [autosave, transcript]


def _session_for_run(
    session: loopctl.session.Session | None, model: str, base_url: str | None, root: Path, o: RunOptions
) -> loopctl.session.Session:
    """The session this run saves: the resumed one (its metadata kept) or a new one, with this run's model,
    root and system prompt, and the CLI's own values in ``metadata["cli"]``."""
    from loopctl.cli.autosave import CLI_KEY, cli_values
    from loopctl.engine import LoopMachine, MachineState
    from loopctl.session import Session

    machine = session.machine if session else LoopMachine()
    if machine.state not in (MachineState.START, MachineState.TERMINAL):
        machine.cancel()  # a session saved mid-run (its process was killed): keep its coherent prefix
    metadata = dict(session.metadata) if session else {}
    cli_meta = cli_values(metadata)
    cli_meta.pop("base_url", None)
    cli_meta.pop("root_bytes", None)
    if base_url is not None and model != "demo":
        cli_meta["base_url"] = base_url
    root_text = str(root)
    if not _is_text(root_text):  # a folder name that is not UTF-8: kept exactly beside a readable form
        cli_meta["root_bytes"] = base64.b64encode(os.fsencode(root)).decode()
        root_text = _readable(root_text)
    metadata[CLI_KEY] = cli_meta
    system_prompt = o.system_prompt or (session.system_prompt if session else None)
    return Session(machine, model=model, root=root_text, system_prompt=system_prompt, metadata=metadata)


async def model_sizes(
    client: Any, model: str, context_window: int | None, max_tokens: int | None
) -> tuple[int, int | None]:
    """The window the conversation may fill and the output limit of each reply, in tokens, for ``model`` (the
    ``--model`` spec) served by ``client``: ``--context-window`` or the model's own (what a server of one's own
    reports, else what its provider publishes, else 200,000: :mod:`loopctl.model_limits`), less the room of a
    reply; and ``--max-tokens`` or the model's default (:func:`loopctl.model_limits.default_max_tokens`). The
    demo model keeps the defaults and asks for no limit."""
    from loopctl import model_limits

    if model == "demo":
        return context_window or model_limits.DEFAULT_CONTEXT_WINDOW, max_tokens
    api_url = getattr(client, "api_url", None)
    local = model_limits.is_local(api_url)
    limits: model_limits.ModelLimits | None
    if local:
        key = os.environ.get("OPENAI_API_KEY") if client.provider.startswith("openai") else None
        limits = await model_limits.probe(model_limits.server_root(api_url or ""), client.model, api_key=key)
    else:
        limits = model_limits.published(client.provider, client.model)
    if max_tokens is None:
        max_tokens = model_limits.default_max_tokens(limits, local=local)
    window = context_window or (limits.context_window if limits is not None else None)
    window = window or model_limits.DEFAULT_CONTEXT_WINDOW
    return model_limits.input_window(window, max_tokens), max_tokens


def _session_config(model: str, root: Path, system_prompt: str | None, window: int) -> loopctl.engine.SessionConfig:
    from loopctl.compact import PRESETS, ContextBudget
    from loopctl.engine import SessionConfig

    # The token counter's preset follows the provider (characters per token, image prices...).
    prefix = model.partition(":")[0]
    budget = ContextBudget.for_provider(prefix if prefix in PRESETS else "default", window=window)
    return SessionConfig(
        system_prompt=system_prompt or _DEFAULT_SYSTEM.format(root=_readable(str(root))), budget=budget
    )


def _check_resume(resume: str, spec: str | None) -> None:
    """``CommandError`` (one line, exit 2) for a ``--resume`` that names no file and cannot name a stored
    session: empty, not a session id, or in a store that does not exist (which is not created)."""
    from loopctl.cli.sessions import absent_store, check_id

    if not resume:
        raise CommandError("--resume needs a session id or a session file")
    check_id(resume)
    missing = absent_store(spec)
    if missing is not None:
        raise CommandError(
            f"no session {inert(repr(resume), one_line=True)} (no store at {_shown(missing)}) and no file of that name"
        )


def _model_spec(model: str | None) -> str:
    """The model spec, checked for what the user can fix: missing, or a provider with no model name."""
    if not model:
        raise CommandError("--model is required (or --resume a session that names one)")
    from loopctl.providers._spec import EXAMPLES

    prefix, sep, name = model.partition(":")
    if sep and not name.strip():
        example = EXAMPLES.get(prefix, EXAMPLES["anthropic"])
        raise CommandError(f"--model {model} has no model name: write {prefix}:MODEL (for example {example})")
    return model


def _session_file(o: RunOptions, resume_file: Path | None, session: loopctl.session.Session) -> Path:
    """The session file the run saves to: the resumed file, or ``--session`` (a new file, made exclusively)."""
    from loopctl.cli.autosave import create_session_file

    if resume_file is not None and (o.session_path is None or _same_file(o.session_path, resume_file)):
        return resume_file
    assert o.session_path is not None
    try:
        return create_session_file(o.session_path, session)
    except FileExistsError as exc:
        if exc.filename == str(o.session_path):
            raise CommandError(
                f"{_shown(o.session_path)} already exists; continue it with --resume, or choose another --session"
            ) from None
        raise CommandError(
            f"cannot save the session to {_shown(o.session_path)} ({exc.strerror}: {exc.filename})"
        ) from None
    except OSError as exc:
        raise CommandError(
            f"cannot save the session to {_shown(o.session_path)} ({exc.strerror}: {exc.filename})"
        ) from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """:func:`~loopctl.cli.autosave.lock_session`, a lock that cannot be made being a usage error."""
    from loopctl.cli.autosave import lock_session

    try:
        lock = lock_session(path)
        lock.__enter__()
    except OSError as exc:
        raise CommandError(f"cannot save the session to {_shown(path)} ({exc.strerror}: {exc.filename})") from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def _session_root(session: loopctl.session.Session) -> Path | None:
    """The root folder a session names: exactly, from the CLI's ``root_bytes`` when its name is not UTF-8."""
    from loopctl.cli.autosave import cli_values

    raw = cli_values(session.metadata).get("root_bytes")
    if isinstance(raw, str):
        with contextlib.suppress(ValueError):
            return Path(os.fsdecode(base64.b64decode(raw, validate=True)))
    return Path(session.root) if session.root else None


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _readable(text: str) -> str:
    """``text`` with each undecodable byte of a file name (a lone surrogate) as U+FFFD: text a request and a
    JSON file can hold."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if not _is_text(text) else text


def _shown(path: Path | None) -> str:
    return repr(inert(str(path), one_line=True))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _demo_delay() -> float:
    """Seconds between the demo's streamed events: :data:`DEMO_DELAY_VAR`, else 0.01. Raises
    ``CommandError`` for a value that is not a number of seconds from 0 to 60."""
    raw = os.environ.get(DEMO_DELAY_VAR)
    if raw is None or not raw.strip():
        return 0.01
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:
        raise CommandError(f"{DEMO_DELAY_VAR} must be a number of seconds from 0 to 60, got {raw!r}")
    return value


@contextlib.contextmanager
def _sigint(cancel: asyncio.Event, console: rich.console.Console) -> Iterator[None]:
    """Ctrl-C sets ``cancel`` (the run stops at its next await and keeps a coherent history); a second
    Ctrl-C interrupts at once."""
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        from rich.text import Text

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


def print_summary(
    console: rich.console.Console,
    result: Any,
    refused: Sequence[str] = (),
    details: Sequence[tuple[str, str]] = (),
    *,
    label: str = "",
) -> None:
    """The summary of a finished run (a :class:`~loopctl.engine.Run`), as ``loopctl run`` and ``loopctl
    approve`` print it: ``● OUTCOME[: error][ · N file changes refused]``; then each of ``details``, a
    ``(line, style)`` pair, as given; then ``N turns · T tokens in (C cached) · O out · S s[ · $cost]``; then
    each reason in ``refused`` (the reasons file changes were refused) once. ``label`` opens the usage line
    (``loopctl approve``: ``"this continuation: "``). Text from the run is inert."""
    from rich.text import Text

    from loopctl.cli.render import dollars

    u = result.usage
    outcome = result.outcome
    kind = outcome.kind.value
    style = (
        "green"
        if kind == "completed" and not refused
        else "yellow"
        if kind in ("completed", "cancelled", "awaiting_approval")
        else "red"
    )
    line = f"● {kind}"
    if outcome.error:
        line += f": {inert(outcome.error)}"
    if refused:
        line += f" · {_plural(len(refused), 'file change')} refused"
    console.print(Text(line, style=f"bold {style}"))
    for text, detail_style in details:
        console.print(Text(text, style=detail_style))
    console.print(
        Text(
            f"  {label}{_plural(len(result.turns), 'turn')} · {tokens(u.input_tokens)} tokens in "
            f"({tokens(u.cache_read_tokens)} cached) · {tokens(u.output_tokens)} out · {result.duration:.1f} s"
            + (f" · {dollars(result.cost)}" if result.cost is not None and result.turns else ""),
            style="dim",
        )
    )
    for reason in dict.fromkeys(refused):  # each reason once
        console.print(Text(f"  refused: {inert(reason, one_line=True)}", style="yellow"))


def _summary(console: rich.console.Console, result: Any, path: Path | None, refused: list[str]) -> None:
    from rich.text import Text

    print_summary(console, result, refused)
    if path is not None:
        shown = inert(str(path), one_line=True)
        console.print(
            Text(f'  session saved to {shown}; continue with: loopctl run "..." --resume {shown}', style="dim")
        )
