"""The Python a newcomer copies works: every ``python`` block of ``README.md``, ``docs/fake-server.md`` and
``docs/agent.md``
runs as written (each in a fresh process, in a scratch folder holding a copy of ``examples/``), except blocks
marked ``<!-- not run: ... -->`` (they need a key or a server); the examples run and leave nothing behind;
and all of it passes ``mypy --strict`` with the project's settings."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/fake-server.md", "docs/agent.md")
_BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL)


def blocks() -> list[tuple[str, str, str | None]]:
    """``(id, code, why-not-run)`` for every python block of the docs."""
    out = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for m in _BLOCK.finditer(text):
            line = text[: m.start("code")].count("\n") + 1
            out.append((f"{doc}:{line}", m.group("code"), m.group("why")))
    return out


BLOCKS = blocks()
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def test_the_docs_have_runnable_blocks() -> None:
    assert len([b for b in BLOCKS if b[2] is None]) >= 5
    assert [b[0].split(":")[0] for b in BLOCKS].count("docs/fake-server.md") == 2


def _run_block(code: str, scratch: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=scratch, env=_env(), capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(("where", "code"), [pytest.param(b[0], b[1], id=b[0]) for b in BLOCKS if b[2] is None])
def test_a_docs_block_runs_as_written(where: str, code: str, scratch: Path) -> None:
    done = _run_block(code, scratch)
    assert done.returncode == 0, f"{where}\n{done.stdout}\n{done.stderr}"
    if "workflow_id=" in code:
        # A durable example keeps its records in the folder it runs from: run again, the workflow id has
        # already run and its recorded run comes back. The README's DBOS block waited forever for an approval
        # the recorded run never asks for, and printed ~130 lines of DBOS's INFO log.
        assert (done.stdout, done.stderr) == ("Sent.\n", "")
        again = _run_block(code, scratch)
        assert (again.returncode, again.stdout, again.stderr) == (0, "Sent.\n", "")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_an_example_runs_and_leaves_nothing_behind(example: Path, tmp_path: Path) -> None:
    # examples/build_conversation.py saved conversation.json into the folder it ran from: the repo root.
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []


@cache
def _mypy(folder: str) -> dict[str, list[str]]:
    """mypy --strict over every docs block and example (written under ``folder``), with the project's
    configuration: the errors of each, by id."""
    base = Path(folder)
    base.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    for where, code, _ in BLOCKS:
        # mypy caches by module name: a name of its own for each text, never an earlier block's.
        p = base / f"docs_block_{hashlib.sha256(code.encode()).hexdigest()[:16]}.py"
        p.write_text(code)
        files[str(p)] = where
    for example in EXAMPLES:
        files[str(example)] = f"examples/{example.name}"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--config-file", str(ROOT / "pyproject.toml"),
         *files],
        cwd=ROOT, env={**_env(), "MYPYPATH": str(ROOT / "src")}, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    # By file name: mypy replays a cached module's errors under the path it had when checked, and the name
    # (the text's hash, or the example's name) is what identifies the text.
    by_name = {Path(path).name: where for path, where in files.items()}
    errors: dict[str, list[str]] = {where: [] for where in files.values()}
    for line in done.stdout.splitlines():
        name = Path(line.split(":", 1)[0]).name
        if name in by_name and ": error:" in line:
            errors[by_name[name]].append(line)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return errors


TYPED = [(b[0], b[1]) for b in BLOCKS] + [(f"examples/{p.name}", p.read_text()) for p in EXAMPLES]


@pytest.mark.parametrize("where", [pytest.param(where, id=where) for where, _ in TYPED])
def test_docs_python_passes_mypy_strict(where: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    # `from loopctl.providers import from_string` typed as object: the README's first snippet failed mypy.
    errors = _mypy(str(tmp_path_factory.getbasetemp() / "mypy-docs"))
    assert errors[where] == []


# Sources a user cannot open: the project's private spec and guide, and its issue tracker.
_PRIVATE = re.compile(
    r"python-api\.md|spec/\S|\bthe guide\b|\bguide,|\bguide's\b|\(guide\b|\bthe issue\b|\bissue \d|\(issue\b",
    re.IGNORECASE,
)
_PUBLIC_GUIDES = re.compile(r"(function-calling|reasoning|error-code|\"Vision\"|vision\"|models\") guide|OpenAI's guide")


def test_docs_cite_only_sources_a_user_can_open() -> None:
    # Docs and docstrings cited python-api.md, "the guide" and "issue 5": files and threads no user can open.
    found = []
    for path in [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("src/**/*.py")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _PRIVATE.search(_PUBLIC_GUIDES.sub("", line)):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
