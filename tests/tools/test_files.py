"""The file tools (loopctl.tools.files): what they return, their retention tags, and confinement to the root."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from loopctl.message import Retention
from loopctl.tool import ToolContext, ToolOutput
from loopctl.tools.files import FileTools, PathOutsideRoot


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    # TODO: handle errors\n    return 1\n")
    (root / "README.md").write_text("hello\nTODO: write docs\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("TODO: not searched")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    return root


async def call(ft: FileTools, name: str, **args: object) -> ToolOutput:
    tool = {t.name: t for t in ft.tools()}[name]
    out = await tool.call(dict(args), ToolContext("c", name))
    assert isinstance(out, ToolOutput)
    return out


async def test_list_files_shows_folders_with_a_slash_and_skips_vcs_folders(project: Path) -> None:
    out = await call(FileTools(project), "list_files")
    assert out.content == "README.md\nsrc/\n(not shown: .git/; list a folder by name to see inside)"
    assert out.retention is Retention.REQUERY
    rec = await call(FileTools(project), "list_files", recursive=True)
    assert rec.content == "README.md\nsrc/\nsrc/app.py"


async def test_read_file_numbers_lines_and_is_requery(project: Path) -> None:
    out = await call(FileTools(project), "read_file", path="src/app.py")
    assert out.content == "    1\tdef main():\n    2\t    # TODO: handle errors\n    3\t    return 1"
    assert out.retention is Retention.REQUERY
    part = await call(FileTools(project), "read_file", path="src/app.py", offset=1, limit=1)
    assert part.content == "    2\t    # TODO: handle errors"


async def test_search_returns_file_line_hits(project: Path) -> None:
    out = await call(FileTools(project), "search", pattern="TODO")
    assert out.content == "README.md:2: TODO: write docs\nsrc/app.py:2: # TODO: handle errors"


async def test_write_and_edit_are_durable_and_change_the_file(project: Path) -> None:
    ft = FileTools(project)
    w = await call(ft, "write_file", path="notes/TODO.md", content="- a\n")
    assert (w.content, w.retention, w.is_error) == ("created notes/TODO.md (4 bytes)", Retention.DURABLE, False)
    e = await call(ft, "edit_file", path="notes/TODO.md", old="- a", new="- b")
    assert e.retention is Retention.DURABLE
    assert (project / "notes" / "TODO.md").read_text() == "- b\n"


async def test_edit_refuses_an_ambiguous_or_missing_old_text(project: Path) -> None:
    ft = FileTools(project)
    out = await call(ft, "edit_file", path="README.md", old="zzz", new="y")
    assert out.is_error is True
    assert out.content == "Error: `old` must occur exactly once in 'README.md'; it occurs 0 times"


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "src/../../secret.txt"])
async def test_paths_that_escape_the_root_are_refused(project: Path, path: str) -> None:
    out = await call(FileTools(project), "read_file", path=path)
    assert out.is_error is True
    assert out.content == f"Refused: {path!r} is outside the project root; only paths inside it are allowed"


async def test_a_symlink_that_escapes_the_root_is_refused(project: Path) -> None:
    os.symlink(project.parent / "secret.txt", project / "link.txt")
    os.symlink(project.parent, project / "up")
    ft = FileTools(project)
    out = await call(ft, "read_file", path="link.txt")
    assert out.is_error is True
    assert "outside the project root" in str(out.content)
    w = await call(ft, "write_file", path="up/evil.txt", content="x")
    assert w.is_error is True
    assert not (project.parent / "evil.txt").exists()
    listing = await call(ft, "list_files")
    assert "link.txt" not in str(listing.content)
    assert "TOP SECRET" not in str((await call(ft, "search", pattern="SECRET")).content)


def test_resolve_accepts_the_root_itself_and_refuses_nul(project: Path) -> None:
    ft = FileTools(project)
    assert ft.resolve(".") == project.resolve()
    with pytest.raises(PathOutsideRoot):
        ft.resolve("a\0b")


async def test_read_file_reads_only_the_capped_bytes_of_a_huge_file(project: Path) -> None:
    # It read the whole file and then kept the first max_read_bytes: a 1 TB (sparse) file failed with
    # MemoryError, and any big file was loaded whole for nothing.
    huge = project / "huge.log"
    with open(huge, "wb") as f:
        f.write(b"first line\n" + b"x" * 9000)  # text as far as the binary sniff looks, then 1 TB of one line
        f.truncate(2**40)
    ft = FileTools(project, max_read_bytes=100)
    out = await call(ft, "read_file", path="huge.log", limit=1)
    assert (out.is_error, out.content) == (False, "    1\tfirst line")
    out = await call(ft, "read_file", path="huge.log")
    assert out.content == "    1\tfirst line\n... (stopped at the size cap of 100 bytes; read on with offset=1)"
    out = await call(ft, "read_file", path="huge.log", offset=1)
    assert out.content == f"    2\t{'x' * 100}\n... (line 2 is cut at the size cap of 100 bytes)"


async def test_search_finds_a_hit_in_a_file_whose_cap_cuts_a_character(project: Path) -> None:
    # The first max_read_bytes of a UTF-8 file were decoded strictly, so a cut inside a multi-byte character
    # raised UnicodeDecodeError and the whole file was skipped: "no match" for a hit on line 1.
    (project / "big.md").write_bytes(b"TODO: first\n" + "\u00e9".encode() * 50)
    out = await call(FileTools(project, max_read_bytes=21), "search", pattern="TODO", path="big.md")
    assert out.content == "big.md:1: TODO: first"


async def test_write_and_edit_keep_a_files_permissions_and_new_files_get_the_usual_ones(project: Path) -> None:
    # The atomic write went through tempfile.mkstemp, whose 0o600 the rename handed to the file: an edited
    # script lost its execute bit, and every new file was private to its owner.
    script = project / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    ft = FileTools(project)
    await call(ft, "edit_file", path="run.sh", old="hi", new="hello")
    assert (script.stat().st_mode & 0o777, script.read_text()) == (0o755, "#!/bin/sh\necho hello\n")
    umask = os.umask(0)
    os.umask(umask)
    await call(ft, "write_file", path="new.txt", content="x")
    assert (project / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def _swap_after_check(ft: FileTools, swap: Callable[[], None]) -> None:
    """Make ``ft`` run ``swap`` right after each path check, as a process racing the tool would."""
    check = ft.resolve

    def racing(path: str) -> Path:
        resolved = check(path)
        swap()
        return resolved

    ft.resolve = racing  # type: ignore[method-assign]


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="POSIX only")
async def test_a_folder_replaced_by_a_symlink_after_the_check_is_not_written_through(
    project: Path, tmp_path: Path
) -> None:
    # The write went to the checked path by name, so a folder swapped for a symlink to the outside between the
    # check and the write took the file out of the project.
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "notes").mkdir()

    def swap() -> None:
        if not (project / "notes").is_symlink():
            (project / "notes").rmdir()
            (project / "notes").symlink_to(outside, target_is_directory=True)

    ft = FileTools(project)
    _swap_after_check(ft, swap)
    out = await call(ft, "write_file", path="notes/todo.md", content="x")
    assert (out.is_error, out.content) == (
        True,
        "Refused: 'notes/todo.md' became a symbolic link while in use; refused",
    )
    assert list(outside.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="POSIX only")
@pytest.mark.parametrize("tool", ["read_file", "edit_file", "write_file"])
async def test_a_file_replaced_by_a_symlink_after_the_check_is_not_followed(
    project: Path, tmp_path: Path, tool: str
) -> None:
    secret = tmp_path / "secret.txt"  # "TOP SECRET", outside the project
    target = project / "README.md"

    def swap() -> None:
        if not target.is_symlink():
            target.unlink()
            target.symlink_to(secret)

    ft = FileTools(project)
    _swap_after_check(ft, swap)
    args = {"read_file": {}, "edit_file": {"old": "TOP", "new": "NOT"}, "write_file": {"content": "gone"}}[tool]
    out = await call(ft, tool, path="README.md", **args)
    assert out.is_error is True
    assert "TOP SECRET" not in str(out.content)
    assert secret.read_text() == "TOP SECRET"
