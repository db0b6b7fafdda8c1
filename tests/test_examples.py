"""The README's typed-output agent, streaming loop and deferred approval (``examples/``) run without a key,
the README shows the first as it is and leads to the others, and they type-check under ``mypy --strict`` with ``run.output`` typed as the output
type."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["typed_output.py", "streaming.py", "approval.py"]


def body(name: str) -> str:
    """The example's code from its first import on (the docstring is the file's own)."""
    text = (ROOT / "examples" / name).read_text()
    return text[text.index("from __future__") :]


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "printed"),
    [
        ("typed_output.py", "Oslo -3.5 cold\nstill cold\n"),
        ("streaming.py", "-> add({'a': 2, 'b': 40})\n<- 42\ncompleted 2 + 40 is 42.\nAgain: 2 + 40 is 42.\n"),
        ("approval.py", "awaiting_approval [('c1', 'send_email')]\ncompleted Sent. sent to ana@example.com\n"),
    ],
)
def test_each_example_runs_without_a_key(name: str, printed: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == printed


def test_the_readme_shows_the_typed_output_example_as_it_is() -> None:
    assert body("typed_output.py") in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_readme_names_each_example(name: str) -> None:
    # The README became a front door (the guides hold the long examples); it still leads to every example file.
    readme = (ROOT / "README.md").read_text()
    assert f"(examples/{name})" in readme or f"`examples/{name}`" in readme


@pytest.mark.xdist_group("mypy")  # one worker runs mypy, on a warm cache (tests/conftest.py)
def test_the_examples_type_check_strictly() -> None:
    done = mypy(*(f"examples/{name}" for name in EXAMPLES))
    assert (done.returncode, done.stdout) == (0, "")


@pytest.mark.xdist_group("mypy")
def test_run_output_is_typed_as_the_output_type_not_any(tmp_path: Path) -> None:
    # Without the typing, run.output is Any and the wrong assignments below pass unnoticed.
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        textwrap.dedent(
            """
            from pydantic import BaseModel
            from loopctl.engine import BareLoop
            from loopctl.output import NativeOutput
            from loopctl.testing import ScriptedClient

            class City(BaseModel):
                name: str

            loop = BareLoop(ScriptedClient([]))
            a: int = loop.run_sync("x", output_type=City).output
            b: int = loop.run_sync("x", output_type=NativeOutput(City)).output
            c: int = loop.run_sync("x").output
            """
        )
    )
    done = mypy(str(wrong))
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 3, done.stdout
    assert 'expression has type "City", variable has type "int"' in errors[0]
    assert 'expression has type "str", variable has type "int"' in errors[2]
