"""Every code block of the documentation site (``README.md`` and ``docs/**/*.md``, the generated API pages
aside) is either run here or marked as not run, naming what it needs:

- a ``python`` block runs as written, each in a fresh process in a scratch folder holding a copy of
  ``examples/``; when a block titled ``Output`` follows it (```` ```text title="Output" ````), what it prints
  must be exactly that, else it must assert what it shows. All of them (the not-run ones too) pass
  ``mypy --strict`` with the project's settings;
- ``<!-- not run: needs ... -->`` before a block: complete code that needs what it names (a key, a server);
  it is type-checked, not run;
- ``<!-- fragment: needs ... -->`` before a block: a part of a program (it names the objects it assumes); it
  is neither run nor type-checked;
- a page's ``bash`` blocks run in order in one scratch folder with ``bash -e`` (``loopctl`` and ``python``
  are the project's), each ``Output`` block compared the same way; ``json`` blocks parse; every block names its language.

The examples in ``examples/`` run and leave nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(
    r"^(?P<indent> *)```(?P<info>[^\n]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.MULTILINE | re.DOTALL
)
_MARK = re.compile(r"<!-- (?P<kind>not run|fragment): (?P<why>[^>]*?) -->\s*$")
LANGUAGES = {"python", "bash", "json", "text", "toml", "yaml", "http", "sql"}


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts, its language, its text, and how it is marked."""

    where: str
    lang: str
    title: str
    code: str
    mark: str | None  # "not run", "fragment" or None
    why: str
    output: str | None  # the text of the Output block that follows it, if one does


def pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").glob("**/*.md") if "reference/api" not in p.as_posix())
    return [ROOT / "README.md", *docs]


def parse(path: Path) -> list[Block]:
    text = path.read_text()
    found = list(_FENCE.finditer(text))
    out = []
    for i, m in enumerate(found):
        info = m.group("info").strip()
        lang = info.split()[0] if info else ""
        title_m = re.search(r'title="([^"]*)"', info)
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        output = None
        if i + 1 < len(found):
            nxt = found[i + 1]
            between = text[m.end() : nxt.start()]
            if not between.strip() and 'title="Output"' in nxt.group("info"):
                output = nxt.group("code")
        line = text[: m.start("code")].count("\n") + 1
        out.append(
            Block(
                where=f"{path.relative_to(ROOT).as_posix()}:{line}",
                lang=lang,
                title=title_m.group(1) if title_m else "",
                code=m.group("code"),
                mark=mark.group("kind") if mark else None,
                why=mark.group("why") if mark else "",
                output=output,
            )
        )
    return out


ALL = [b for page in pages() for b in parse(page)]
RUN_PYTHON = [b for b in ALL if b.lang == "python" and b.mark is None]
RUN_BASH = [b for b in ALL if b.lang == "bash" and b.mark is None]
TYPED_PYTHON = [b for b in ALL if b.lang == "python" and b.mark != "fragment"]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py"))


def test_every_block_names_its_language_and_every_mark_what_it_needs() -> None:
    bad = [f"{b.where}: no language" for b in ALL if b.lang not in LANGUAGES]
    bad += [f"{b.where}: a mark must say what it needs" for b in ALL if b.mark and not b.why.startswith("needs ")]
    bad += [
        f"{b.where}: a run python block shows an Output block or asserts"
        for b in RUN_PYTHON
        if b.output is None and "assert " not in b.code
    ]
    assert bad == []


def test_the_docs_have_runnable_blocks() -> None:
    assert len(RUN_PYTHON) >= 10
    assert sum(b.where.startswith("docs/fake-server.md") for b in RUN_PYTHON) == 2


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "json" and b.mark is None], ids=lambda b: b.where)
def test_a_json_block_parses(block: Block) -> None:
    json.loads(block.code)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path


def _run_block(code: str, scratch: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=scratch, env=_env(), capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("block", RUN_PYTHON, ids=lambda b: b.where)
def test_a_docs_block_runs_as_written(block: Block, scratch: Path) -> None:
    code, where = block.code, block.where
    done = _run_block(code, scratch)
    assert done.returncode == 0, f"{where}\n{done.stdout}\n{done.stderr}"
    if block.output is not None:
        assert done.stdout == block.output, f"{where}: the printed output is not the page's Output block"
    if "workflow_id=" in code:
        # A durable example keeps its records in the folder it runs from: run again, the workflow id has
        # already run and its recorded run comes back. The README's DBOS block waited forever for an approval
        # the recorded run never asks for, and printed ~130 lines of DBOS's INFO log.
        assert block.output is not None, f"{where}: a durable example shows its Output block"
        assert (done.stdout, done.stderr) == (block.output, "")
        again = _run_block(code, scratch)
        assert (again.returncode, again.stdout, again.stderr) == (0, block.output, "")


BASH_PAGES = sorted({b.where.split(":")[0] for b in RUN_BASH})


@pytest.mark.parametrize("page", BASH_PAGES)
def test_a_pages_bash_blocks_run_as_written(page: str, scratch: Path) -> None:
    # A page's blocks run in order in one folder: a later block may use what an earlier one made.
    env = _env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["LOOPCTL_DEMO_DELAY"] = "0"
    for block in [b for b in RUN_BASH if b.where.startswith(page + ":")]:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=scratch, env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{block.where}\n{done.stdout}\n{done.stderr}"
        if block.output is not None:
            assert done.stdout == block.output, block.where


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
    for block in TYPED_PYTHON:
        where, code = block.where, block.code
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


TYPED = [(b.where, b.code) for b in TYPED_PYTHON] + [(f"examples/{p.name}", p.read_text()) for p in EXAMPLES]


# One worker runs them (the "mypy" xdist group, tests/conftest.py): _mypy is cached per process, and each
# worker that ran one of them type-checked every block, from a cold cache, at the same time.
@pytest.mark.xdist_group("mypy")
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


def _table_rows(page: str) -> dict[str, list[str]]:
    """``| `Name` | `field`, `field` | ... |`` rows of a page: name -> fields."""
    rows: dict[str, list[str]] = {}
    for line in (ROOT / page).read_text().splitlines():
        m = re.match(r"\| `(\w+)` \| ((?:`\w+`(?:, )?)*) \|", line)
        if m:
            rows[m.group(1)] = re.findall(r"`(\w+)`", m.group(2))
    return rows


def test_the_streaming_guide_lists_every_event_and_its_fields() -> None:
    # The table of events is the guide's promise: a new event or field must appear in it.
    import dataclasses
    import typing

    from loopctl.engine import LoopEvent, events
    from loopctl.stream import StreamEvent

    rows = _table_rows("docs/guides/streaming.md")
    for union in (LoopEvent, StreamEvent):
        for cls in typing.get_args(union):
            if isinstance(cls, typing.ForwardRef):
                cls = getattr(events, cls.__forward_arg__)
            assert rows.get(cls.__name__) == [f.name for f in dataclasses.fields(cls)], cls.__name__


def test_the_format_versions_the_docs_state_are_the_codes() -> None:
    # docs/sessions.md showed a session state whose machine had format_version 1, three versions behind.
    from loopctl import message, session, store
    from loopctl.engine import machine

    versions = {
        "FORMAT_VERSION": message.FORMAT_VERSION,
        "SESSION_FORMAT_VERSION": session.SESSION_FORMAT_VERSION,
        "STATE_FORMAT_VERSION": store.STATE_FORMAT_VERSION,
        "SCHEMA_VERSION": store.SCHEMA_VERSION,
        "MACHINE_FORMAT_VERSION": machine.MACHINE_FORMAT_VERSION,
    }
    wrong = []
    for path in [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("src/**/*.py")]:
        text = path.read_text()
        for m in re.finditer(r"(?<![A-Z_])([A-Z_]*VERSION)`? *= *(\d+)", text):
            if m.group(1) in versions and path.suffix == ".md" and int(m.group(2)) != versions[m.group(1)]:
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
        for m in re.finditer(r'"machine": *\{"format_version": *(\d+)', text):
            if int(m.group(1)) != versions["MACHINE_FORMAT_VERSION"]:
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert wrong == []
