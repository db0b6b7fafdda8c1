"""A cold start imports only what it needs (issue 23): ``import loopctl`` and ``loopctl --help`` import neither
pydantic nor the message model, nor a command's module; the list of commands ``--help`` prints without
importing them says what each command's own help says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click

from loopctl.cli import COMMANDS, main

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
