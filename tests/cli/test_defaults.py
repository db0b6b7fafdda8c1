"""The command line's defaults are the library's: a session run with ``loopctl run`` and continued with
``BareLoop`` (or the other way round) is bounded the same way."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from loopctl.cli import main
from loopctl.engine import RunConfig


@pytest.mark.parametrize("command", ["run", "approve", "web"])
def test_max_turns_defaults_to_the_librarys(command: str) -> None:
    # `loopctl run` stopped at 50 model calls where RunConfig, the docs and every other entry point said 200.
    found = main.get_command(click.Context(main), command)
    assert found is not None
    params = {p.name: p for p in found.params}
    assert params["max_turns"].default == RunConfig().max_turns == 200
    shown = CliRunner().invoke(main, [command, "--help"], terminal_width=200).output
    assert "[default: 200; x>=1]" in shown
