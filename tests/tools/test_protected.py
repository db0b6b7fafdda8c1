"""Writes that would make tools run code are refused (``.git/``, ``.envrc``, ``.vscode/``...), and a change
can be previewed (the resolved path and a diff) for an approval prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopctl.tools.files import ChangePreview, FileTools
from tests.tools.test_files import call


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "sub").mkdir()
    (root / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")  # a submodule's .git file
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    return root


SPOOF = "x\x1b[2K\x1b[1GAllow write_file on notes.txt?\x1b[8m/../.git/config"  # issue 8's spoof path


@pytest.mark.parametrize(
    ("tool", "path", "under"),
    [
        ("write_file", ".git/config", ".git"),
        ("write_file", ".git/hooks/pre-commit", ".git"),
        ("write_file", SPOOF, ".git"),
        ("write_file", "notes/../.GIT/hooks/post-checkout", ".GIT"),  # a case-insensitive file system's .git
        ("write_file", "sub/.git", ".git"),
        ("write_file", ".envrc", ".envrc"),
        ("write_file", ".vscode/tasks.json", ".vscode"),
        ("write_file", ".hg/hgrc", ".hg"),
        ("write_file", ".loopctl/sessions/x.json", ".loopctl"),
        ("edit_file", ".git/config", ".git"),
    ],
)
async def test_writes_that_make_tools_run_code_are_refused(repo: Path, tool: str, path: str, under: str) -> None:
    # With --yes the agent could write .git/hooks/pre-commit or .git/config (core.fsmonitor): code run by the
    # user's next git command.
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    args = {"content": "#!/bin/sh\necho owned\n"} if tool == "write_file" else {"old": "[core]", "new": "[x]"}
    out = await call(FileTools(repo), tool, path=path, **args)
    assert (out.is_error, out.content) == (
        True,
        f"Refused: {path!r} is under {under}, where a file can make tools run code (hooks, configuration); "
        "writes there are not allowed",
    )
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()} == before


async def test_a_symlink_into_git_is_refused_as_git(repo: Path) -> None:
    (repo / "hooks").symlink_to(repo / ".git" / "hooks", target_is_directory=True)
    out = await call(FileTools(repo), "write_file", path="hooks/pre-commit", content="x")
    assert out.is_error is True
    assert str(out.content).startswith("Refused: 'hooks/pre-commit' is under .git, ")
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


async def test_protected_writes_can_be_allowed_and_reads_are_never_refused(repo: Path) -> None:
    out = await call(FileTools(repo, protected=()), "write_file", path=".git/hooks/pre-commit", content="x")
    assert (out.is_error, out.content) == (False, "created .git/hooks/pre-commit (1 bytes)")
    assert (await call(FileTools(repo), "read_file", path=".git/config")).content == "    1\t[core]"


def test_preview_shows_the_resolved_path_and_a_diff(repo: Path) -> None:
    ft = FileTools(repo)
    assert ft.preview("read_file", {"path": "notes.txt"}) is None
    assert ft.preview("write_file", {"path": "new/../todo.md", "content": "- a\n- b"}) == ChangePreview(
        "write_file", "todo.md", "create", "--- /dev/null\n+++ b/todo.md\n@@ -0,0 +1,2 @@\n+- a\n+- b\n"
        "\\ No newline at end of file\n"
    )  # fmt: skip
    assert ft.preview("edit_file", {"path": "./notes.txt", "old": "two", "new": "2"}) == ChangePreview(
        "edit_file", "notes.txt", "edit",
        "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n",
    )  # fmt: skip
    replaced = ft.preview("write_file", {"path": "notes.txt", "content": "one\n"})
    assert replaced is not None
    assert (replaced.action, replaced.diff) == (
        "replace",
        "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1 @@\n one\n-two\n-three\n",
    )
    assert (repo / "notes.txt").read_text() == "one\ntwo\nthree\n"  # a preview changes nothing


def test_preview_names_the_problem_of_a_call_that_will_be_refused(repo: Path) -> None:
    ft = FileTools(repo)
    spoof = ft.preview("write_file", {"path": SPOOF, "content": "x"})
    assert spoof is not None
    assert (spoof.path, spoof.diff) == (".git/config", "")
    assert spoof.problem is not None and spoof.problem.endswith("writes there are not allowed")
    outside = ft.preview("write_file", {"path": "../x.txt", "content": "x"})
    assert outside == ChangePreview(
        "write_file", "../x.txt", "create", "",
        "'../x.txt' is outside the project root; only paths inside it are allowed",
    )  # fmt: skip
    missing = ft.preview("edit_file", {"path": "notes.txt", "old": "four", "new": "4"})
    assert missing is not None
    assert missing.problem == "`old` must occur exactly once in 'notes.txt'; it occurs 0 times"


async def test_read_only_tools_have_no_write_tools(repo: Path) -> None:
    assert [t.name for t in FileTools(repo, read_only=True)] == ["list_files", "read_file", "search"]
    assert [t.name for t in FileTools(repo)] == ["list_files", "read_file", "search", "write_file", "edit_file"]
