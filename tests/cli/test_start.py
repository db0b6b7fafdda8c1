"""A cold start imports only what it needs (issue 23): ``import loopctl`` and ``loopctl --help`` import neither
pydantic nor the message model, nor a command's module; the list of commands ``--help`` prints without
importing them says what each command's own help says."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from rich.console import Console

from loopctl.cli import COMMANDS, main
from loopctl.cli.report import run_console

ROOT = Path(__file__).resolve().parents[2]

# What the group itself needs: the report of errors, and the --store option the group and the commands share.
CHEAP = {"loopctl.cli.report", "loopctl.cli.options"}
HEAVY = ("pydantic", "loopctl.message", "loopctl.engine", "loopctl.store", "rich", "httpx", "httpx2")


def _modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()[-1]
    return set(json.loads(out))


def test_import_loopctl_loads_no_model_and_no_http() -> None:
    loaded = _modules_after("import loopctl")
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}


def test_the_help_of_the_command_group_imports_no_command() -> None:
    code = "from loopctl.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    loaded = _modules_after(code)
    assert not {m for m in loaded if m.startswith(HEAVY)}
    assert not {m for m in loaded if m.startswith("loopctl.cli.") and m not in CHEAP}


def test_a_name_of_the_package_loads_on_first_use() -> None:
    loaded = _modules_after("from loopctl import Message\nMessage.user('x')")
    assert "loopctl.message.model" in loaded


def test_the_short_helps_listed_are_the_commands_own() -> None:
    ctx = click.Context(main)
    for name, (module, attribute, short) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None
        assert command.name == name, (module, attribute)
        for limit in (30, 45, 60, 200):
            assert click.Command(name, help=short).get_short_help_str(limit) == command.get_short_help_str(limit)


# What `loopctl run --model demo` does not need before its first request: the SDKs (the demo's client is made
# without one), the clients and codecs of the other providers, the price data (read when a reply is priced),
# what the file tools load when they first search or list (pathspec, regex) or preview a change (difflib), the
# built-in provider tools (none is asked for), loopctl.testing's scripted clients (the demo is the fake server),
# and rich: its output is not a terminal (no spinner) and nothing is printed before the first reply
# (docs/performance.md, section 12).
DEMO_NEEDS_NOT = (
    "openai",
    "anthropic",
    "google",
    "genai_prices",
    "pathspec",
    "regex",
    "difflib",
    "rich",
    "loopctl.providers.native",
    "loopctl.testing.models",
    "loopctl.transport.anthropic",
    "loopctl.transport.gemini",
    "loopctl.transport.openai_ws",
    "loopctl.providers.anthropic",
    "loopctl.providers.gemini",
    "loopctl.providers.openai_responses",
    "loopctl.testing.wire.anthropic",
    "loopctl.testing.wire.gemini",
    "loopctl.testing.wire.openai_responses",
)

_AT_FIRST_REQUEST = """
import json, os, sys
root, seen = sys.argv[1:3]
def hook(event, args):
    if event == "socket.connect":
        compiled = [
            sys.modules[m].__dict__[f].cache_info().currsize
            for m, f in (("loopctl.errors", "_overflow_numbers"), ("loopctl.providers._common", "_overflow"))
        ]
        inert = sys.modules.get("loopctl.cli.inert")
        compiled.append(inert._patterns.cache_info().currsize if inert is not None else 0)
        with open(seen, "w") as f:
            json.dump({"address": list(args[1]), "modules": sorted(sys.modules), "compiled": compiled}, f)
        os._exit(0)
sys.addaudithook(hook)
sys.argv = ["loopctl", "run", "List the files.", "--model", "demo", "--root", root, "--yes"]
from loopctl.cli import main
main()
"""


def test_the_demo_run_loads_only_what_it_uses_before_its_first_request(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("TODO: a note\n")
    seen = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    # this checkout's loopctl (not the one the environment installed), and nothing else from PYTHONPATH
    env.update(LOOPCTL_DEMO_DELAY="0", LOOPCTL_STORE=str(tmp_path / "sessions.db"), PYTHONPATH=str(ROOT / "src"))
    subprocess.run(
        [sys.executable, "-c", _AT_FIRST_REQUEST, str(root), str(seen)], cwd=tmp_path, env=env, check=True, timeout=120
    )
    first = json.loads(seen.read_text())
    assert first["address"][0] == "127.0.0.1"  # the demo's own fake server
    loaded = set(first["modules"])
    assert not {m for m in loaded if any(m == d or m.startswith(d + ".") for d in DEMO_NEEDS_NOT)}
    # the real stack runs: the Chat Completions client and codec over httpx2, and the session store
    assert {"httpx2", "loopctl.transport.openai", "loopctl.providers.openai_chat", "loopctl.store.sqlite"} <= loaded
    # the patterns that read a context overflow (OVERFLOW_NUMBERS, is_context_overflow) are compiled when an error
    # is read, and those that make text inert when the CLI first prints (docs/performance.md, section 12)
    assert first["compiled"] == [0, 0, 0]


def test_a_run_in_process_leaves_the_cyclic_collector_as_it_found_it(tmp_path: Path) -> None:
    # `loopctl run` turns the collector off while it starts and freezes what the start made (section 2 of
    # docs/performance.md); a process that runs the command in-process gets both undone.
    from click.testing import CliRunner

    (tmp_path / "notes.txt").write_text("TODO: a note\n")
    env = {"LOOPCTL_DEMO_DELAY": "0", "LOOPCTL_STORE": str(tmp_path / "sessions.db")}
    args = ["run", "List the files.", "--model", "demo", "--root", str(tmp_path), "--yes"]
    assert gc.isenabled()
    done = CliRunner().invoke(main, args, env=env)
    assert done.exit_code == 0, done.output
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.disable()
    try:
        assert CliRunner().invoke(main, args, env=env).exit_code == 0
        assert not gc.isenabled()
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_commands_module_loads_with_the_collector_off_and_stays_out_of_its_scans() -> None:
    # The objects a command's module brings (modules, classes, functions: they live as long as the process) go
    # to the collector's permanent generation once loaded, so no collection scans them again; the collector is
    # left as it was (docs/performance.md, section 2).
    from loopctl.cli import _long_lived

    assert gc.isenabled()
    try:
        with _long_lived():
            assert not gc.isenabled()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_command_run_in_process_unfreezes_what_its_start_froze_and_keeps_a_callers_freeze(tmp_path: Path) -> None:
    from click.testing import CliRunner

    missing = str(tmp_path / "missing.json")
    for frozen_by_caller in (False, True):
        main.commands.pop("show", None)  # loaded again: its module's objects are frozen as the command starts
        if frozen_by_caller:
            gc.freeze()
        try:
            done = CliRunner().invoke(main, ["show", missing])
            assert done.exit_code == 2, done.output
            assert gc.isenabled()
            assert (gc.get_freeze_count() > 0) is frozen_by_caller
        finally:
            gc.unfreeze()


def test_a_run_in_process_keeps_a_callers_freeze(tmp_path: Path) -> None:
    # A caller that froze its own objects (gc.freeze()) before running `loopctl run` in-process keeps them frozen,
    # as the group keeps them for every other command: run's own end unfroze everything.
    from click.testing import CliRunner

    env = {"LOOPCTL_DEMO_DELAY": "0", "LOOPCTL_STORE": str(tmp_path / "sessions.db")}
    args = ["run", "List the files.", "--model", "demo", "--root", str(tmp_path), "--yes"]
    keep = [[] for _ in range(1000)]  # objects of the caller's, frozen with everything else
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        done = CliRunner().invoke(main, args, env=env)
        assert done.exit_code == 0, done.output
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen - 100, (frozen, gc.get_freeze_count())
    finally:
        gc.unfreeze()
    assert len(keep) == 1000


def test_a_command_asked_for_outside_main_is_loaded_without_a_freeze() -> None:
    # A tool that walks the commands (a docs generator, a test) calls get_command without main(), which alone
    # undoes the freeze: before, the whole heap of that process stayed in the permanent generation.
    main.commands.pop("show", None)
    assert gc.get_freeze_count() == 0
    command = main.get_command(click.Context(main), "show")
    assert command is not None and command.name == "show"
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def _made(console: Console) -> Console | None:
    return object.__getattribute__(console, "_console")  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("environment", "tty"),
    [({}, False), ({}, True), ({"FORCE_COLOR": "1"}, False), ({"FORCE_COLOR": ""}, True), ({"TTY_COMPATIBLE": "0"}, True)],
)
def test_the_run_console_says_what_riches_own_says_about_the_terminal(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], tty: bool
) -> None:
    # `loopctl run`'s console is made when first used; the transcript asks it whether it is a terminal (to show
    # its spinner) before the first request, and gets rich's own answer, the console made only when stdout is a
    # terminal or an environment variable could make it one.
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    main_end, other_end = os.openpty()
    if not tty:
        os.close(other_end)
    try:
        with os.fdopen(other_end, "w") if tty else open(os.devnull, "w") as out:
            monkeypatch.setattr(sys, "stdout", out)
            console = run_console()
            assert console.is_terminal is Console(highlight=False, soft_wrap=True).is_terminal
            assert (_made(console) is not None) is (tty or bool(environment))
    finally:
        os.close(main_end)


def test_the_run_console_is_a_rich_console_once_used(capsys: pytest.CaptureFixture[str]) -> None:
    console = run_console()
    assert _made(console) is None
    console.print("[bold]saved[/bold]", end="")  # markup, as rich reads it
    assert capsys.readouterr().out == "saved"
    made = _made(console)
    assert isinstance(made, Console)
    console.quiet = True  # set on the console itself
    assert made.quiet is True
    console.print("not shown")
    assert capsys.readouterr().out == ""
