"""Walking the project: ``list_files`` and ``search`` prune .git/, node_modules/ and what .gitignore ignores
while they walk (they never enter those folders), with git's rules; a folder asked for by name is shown."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopctl.tools import files as files_module
from loopctl.tools.files import FileTools
from tests.tools.test_files import call


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in {
        ".gitignore": "build/\n*.log\n!keep.log\n/top.txt\n",
        "src/app.py": "# TODO app\n",
        "src/.gitignore": "generated.py\n!important.log\n",
        "src/generated.py": "# TODO generated\n",
        "src/important.log": "TODO important\n",
        "src/top.txt": "TODO nested top is not the root's /top.txt\n",
        "top.txt": "TODO top\n",
        "debug.log": "TODO debug\n",
        "keep.log": "TODO keep\n",
        "build/out.js": "// TODO built\n",
        "node_modules/pkg/index.js": "// TODO dependency\n",
        ".git/config": "TODO git\n",
        ".git/info/exclude": "local-only.txt\n",
        "local-only.txt": "TODO local\n",
    }.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


async def test_list_files_honours_gitignore_at_every_level(repo: Path) -> None:
    out = await call(FileTools(repo), "list_files", recursive=True)
    assert str(out.content).splitlines() == [
        ".gitignore",
        "keep.log",
        "src/",
        "src/.gitignore",
        "src/app.py",
        "src/important.log",
        "src/top.txt",
    ]
    top = await call(FileTools(repo), "list_files")
    assert str(top.content).splitlines() == [
        ".gitignore",
        "keep.log",
        "src/",
        "(not shown: .git/, build/, debug.log, local-only.txt, node_modules/, top.txt; list a folder by name to "
        "see inside)",
    ]


async def test_search_honours_gitignore_and_skips_vcs_and_dependency_folders(repo: Path) -> None:
    out = await call(FileTools(repo), "search", pattern="TODO")
    assert str(out.content).splitlines() == [
        "keep.log:1: TODO keep",
        "src/app.py:1: # TODO app",
        "src/important.log:1: TODO important",
        "src/top.txt:1: TODO nested top is not the root's /top.txt",
    ]


async def test_without_gitignore_only_the_skip_folders_are_left_out(repo: Path) -> None:
    out = await call(FileTools(repo, gitignore=False), "search", pattern="TODO")
    assert [line.split(":")[0] for line in str(out.content).splitlines()] == [
        "build/out.js",
        "debug.log",
        "keep.log",
        "local-only.txt",
        "src/app.py",
        "src/generated.py",
        "src/important.log",
        "src/top.txt",
        "top.txt",
    ]


async def test_a_folder_asked_for_by_name_is_listed_and_searched_even_when_ignored(repo: Path) -> None:
    ft = FileTools(repo)
    assert (await call(ft, "list_files", path="build")).content == "build/out.js"
    assert (await call(ft, "list_files", path="node_modules", recursive=True)).content == (
        "node_modules/pkg/\nnode_modules/pkg/index.js"
    )
    assert (await call(ft, "search", pattern="TODO", path="build")).content == "build/out.js:1: // TODO built"
    assert (await call(ft, "read_file", path="debug.log")).content == "    1\tTODO debug"


async def test_the_walk_never_enters_skipped_or_ignored_folders(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # list_files and search walked all of node_modules/ and .git/ (rglob), then dropped what they found there.
    for i in range(50):
        (repo / "node_modules" / f"dep{i}").mkdir()
    scanned: list[str] = []
    real = os.scandir

    def recording(path: str | os.PathLike[str]) -> Iterator[os.DirEntry[str]]:
        scanned.append(Path(path).relative_to(repo).as_posix())
        return real(path)

    monkeypatch.setattr(files_module.os, "scandir", recording)
    await call(FileTools(repo), "search", pattern="TODO")
    assert sorted(scanned) == [".", "src"]
    scanned.clear()
    await call(FileTools(repo), "list_files", recursive=True)
    assert sorted(scanned) == [".", "src"]


async def test_a_symlinked_folder_is_listed_but_not_entered(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.txt").write_text("TODO once\n")
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)  # a cycle, inside the root
    ft = FileTools(tmp_path)
    assert (await call(ft, "list_files", recursive=True)).content == "loop/\nreal/\nreal/a.txt"
    assert (await call(ft, "search", pattern="TODO")).content == "real/a.txt:1: TODO once"
