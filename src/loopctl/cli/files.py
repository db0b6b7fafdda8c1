"""The CLI's built-in file tools, confined to one root folder.

``list_files``, ``read_file`` and ``search`` return results tagged ``Requery`` (the model can fetch them
again, so compaction may clear them); ``write_file`` and ``edit_file`` return results tagged ``Durable``
(what was changed is not re-derivable) and are the calls the CLI asks approval for. Every path is resolved
(symlinks included) and refused when it lands outside the root. The file is then opened from the root one
folder at a time without following a symbolic link (POSIX ``openat`` with ``O_NOFOLLOW``), so a folder or
file replaced by a symlink between that check and the read or write is refused too, never followed out.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from loopctl._fs import atomic_write_bytes
from loopctl.message import Retention
from loopctl.tool import FunctionTool, ToolOutput, tool

__all__ = ["WRITE_TOOLS", "FileTools", "PathOutsideRoot"]

WRITE_TOOLS = frozenset({"write_file", "edit_file"})
"""The tools that change files (the CLI asks approval for these unless ``--yes``)."""

_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".loopctl"})


class PathOutsideRoot(ValueError):
    """A path that resolves (through ``..`` or a symlink) outside the tools' root folder."""


class FileTools:
    """File tools over ``root``. ``max_read_bytes`` caps one read (bytes); ``max_results`` caps listings and
    search hits (lines)."""

    def __init__(self, root: str | os.PathLike[str], *, max_read_bytes: int = 100_000, max_results: int = 500) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"{self.root} is not a folder")
        self.max_read_bytes = max_read_bytes
        self.max_results = max_results

    def resolve(self, path: str) -> Path:
        """The absolute path of ``path`` (relative to the root), refused if it resolves outside the root."""
        if "\0" in path:
            raise PathOutsideRoot(f"{path!r} is not a valid path")
        candidate = (self.root / path).resolve(strict=False)
        if candidate != self.root and self.root not in candidate.parents:
            raise PathOutsideRoot(f"{path!r} is outside the project root; only paths inside it are allowed")
        return candidate

    def _rel(self, p: Path) -> str:
        rel = p.relative_to(self.root).as_posix()
        return rel or "."

    def tools(self) -> list[FunctionTool]:
        """The five tools, bound to this root."""
        ft = self

        @tool
        def list_files(path: str = ".", recursive: bool = False) -> ToolOutput:
            """List the files and folders under a folder of the project (folders end with "/").

            Args:
                path: folder relative to the project root
                recursive: list the whole tree under it
            """
            return ft._guard(Retention.REQUERY, lambda: ft._list(path, recursive))

        @tool
        def read_file(path: str, offset: int = 0, limit: int | None = None) -> ToolOutput:
            """Read a text file of the project, with line numbers.

            Args:
                path: file relative to the project root
                offset: first line to show (0-based)
                limit: how many lines to show (default: all, up to the size cap)
            """
            return ft._guard(Retention.REQUERY, lambda: ft._read(path, offset, limit))

        @tool
        def search(pattern: str, path: str = ".") -> ToolOutput:
            """Search the project's text files for a regular expression; returns "file:line: text" hits.

            Args:
                pattern: a Python regular expression
                path: folder or file to search, relative to the project root
            """
            return ft._guard(Retention.REQUERY, lambda: ft._search(pattern, path))

        @tool
        def write_file(path: str, content: str) -> ToolOutput:
            """Create or replace a text file of the project with the given content.

            Args:
                path: file relative to the project root
                content: the whole new content
            """
            return ft._guard(Retention.DURABLE, lambda: ft._write(path, content))

        @tool
        def edit_file(path: str, old: str, new: str) -> ToolOutput:
            """Replace exactly one occurrence of `old` with `new` in a text file of the project.

            Args:
                path: file relative to the project root
                old: the exact text to replace (must occur exactly once)
                new: the replacement text
            """
            return ft._guard(Retention.DURABLE, lambda: ft._edit(path, old, new))

        return [list_files, read_file, search, write_file, edit_file]

    # --- implementations (each returns text or raises) ---------------------------------------------------

    def _guard(self, retention: Retention, fn: object) -> ToolOutput:
        try:
            text = fn()  # type: ignore[operator]
        except PathOutsideRoot as exc:
            return ToolOutput(f"Refused: {exc}", is_error=True, retention=retention)
        except (OSError, ValueError, re.error) as exc:
            return ToolOutput(f"Error: {exc}", is_error=True, retention=retention)
        return ToolOutput(text, retention=retention)

    def _list(self, path: str, recursive: bool) -> str:
        base = self.resolve(path)
        if not base.is_dir():
            raise ValueError(f"{path!r} is not a folder")
        out: list[str] = []
        walker = sorted(base.rglob("*")) if recursive else sorted(base.iterdir())
        for p in walker:
            if any(part in _SKIP_DIRS for part in p.relative_to(base).parts):
                continue
            try:
                self.resolve(str(p.relative_to(self.root)))
            except PathOutsideRoot:
                continue  # a symlink pointing out of the root is not shown
            out.append(self._rel(p) + ("/" if p.is_dir() else ""))
            if len(out) >= self.max_results:
                out.append(f"... (stopped at {self.max_results} entries)")
                break
        return "\n".join(out) if out else "(empty folder)"

    def _read(self, path: str, offset: int, limit: int | None) -> str:
        p = self.resolve(path)
        if not p.is_file():
            raise ValueError(f"{path!r} is not a file")
        data = self._read_bytes(p, path, self.max_read_bytes + 1)
        truncated = len(data) > self.max_read_bytes
        text = data[: self.max_read_bytes].decode("utf-8", errors="replace")
        lines = text.splitlines()
        end = len(lines) if limit is None else min(len(lines), offset + max(0, limit))
        body = "\n".join(f"{i + 1:>5}\t{lines[i]}" for i in range(max(0, offset), end))
        if truncated:
            body += f"\n... (file larger than {self.max_read_bytes} bytes; read it in parts with offset/limit)"
        return body or "(empty file)"

    def _search(self, pattern: str, path: str) -> str:
        regex = re.compile(pattern)
        base = self.resolve(path)
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        hits: list[str] = []
        for f in files:
            if any(part in _SKIP_DIRS for part in f.relative_to(self.root).parts):
                continue
            try:
                rel = str(f.relative_to(self.root))
                self.resolve(rel)
                # A cap may cut the last character in two: that tail is dropped, not taken for binary.
                text = codecs.getincrementaldecoder("utf-8")().decode(self._read_bytes(f, rel, self.max_read_bytes))
            except (PathOutsideRoot, UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{self._rel(f)}:{n}: {line.strip()}")
                    if len(hits) >= self.max_results:
                        return "\n".join(hits) + f"\n... (stopped at {self.max_results} hits)"
        return "\n".join(hits) if hits else f"no match for {pattern!r}"

    def _write(self, path: str, content: str) -> str:
        p = self.resolve(path)
        if p.is_dir():
            raise ValueError(f"{path!r} is a folder")
        existed = p.exists()
        self._write_bytes(p, path, content.encode("utf-8"))
        verb = "replaced" if existed else "created"
        return f"{verb} {self._rel(p)} ({len(content.encode('utf-8'))} bytes)"

    def _edit(self, path: str, old: str, new: str) -> str:
        p = self.resolve(path)
        if not p.is_file():
            raise ValueError(f"{path!r} is not a file")
        text = self._read_bytes(p, path, None).decode("utf-8")
        count = text.count(old) if old else 0
        if count != 1:
            raise ValueError(f"`old` must occur exactly once in {path!r}; it occurs {count} times")
        self._write_bytes(p, path, text.replace(old, new, 1).encode("utf-8"))
        return f"edited {self._rel(p)}: replaced {len(old)} characters with {len(new)}"

    # --- opening without following a symlink -------------------------------------------------------------

    @contextlib.contextmanager
    def _folder_of(self, p: Path, path: str, *, create: bool) -> Iterator[tuple[int, str]]:
        """A descriptor of the folder holding ``p`` (a resolved path inside the root), reached from the root
        one folder at a time without following a symlink (missing folders made when ``create``), and the
        file's name in it. A symlink met on the way (one swapped in since ``resolve``) is refused."""
        names = p.relative_to(self.root).parts
        if not names:
            raise ValueError(f"{path!r} is the project folder, not a file")
        fd = os.open(self.root, os.O_RDONLY | _DIRECTORY)
        try:
            for name in names[:-1]:
                try:
                    inner = _open_at(name, os.O_RDONLY | _DIRECTORY, fd, path)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, dir_fd=fd)
                    inner = _open_at(name, os.O_RDONLY | _DIRECTORY, fd, path)
                os.close(fd)
                fd = inner
            yield fd, names[-1]
        finally:
            os.close(fd)

    def _read_bytes(self, p: Path, path: str, size: int | None) -> bytes:
        """The first ``size`` bytes (all with ``None``) of the regular file ``p``; only those are read."""
        if not _AT:
            with open(p, "rb") as f:
                return f.read() if size is None else f.read(size)
        with self._folder_of(p, path, create=False) as (folder, name):
            # O_NONBLOCK: a FIFO swapped in must not block the open (it is refused just below).
            fd = _open_at(name, os.O_RDONLY | os.O_NONBLOCK, folder, path)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise ValueError(f"{path!r} is not a file")
                return f.read() if size is None else f.read(size)

    def _write_bytes(self, p: Path, path: str, data: bytes) -> None:
        """Replace (or create) the file ``p`` with ``data`` atomically, as ``atomic_write_bytes`` does, in the
        folder reached without following a symlink; a replaced file keeps its mode."""
        if not _AT:
            atomic_write_bytes(p, data)
            return
        with self._folder_of(p, path, create=True) as (folder, name):
            try:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                mode: int | None = None
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise PathOutsideRoot(f"{path!r} became a symbolic link while in use; refused")
                mode = stat.S_IMODE(st.st_mode)
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            fd = _open_at(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, folder, path)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    if mode is not None:
                        os.fchmod(f.fileno(), mode)
                    os.fsync(f.fileno())
                os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=folder)
                raise


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Opening relative to a folder descriptor without following symlinks: POSIX. Elsewhere (Windows) the tools
# fall back to plain paths, checked by resolve() alone.
_AT = bool(_NOFOLLOW) and {os.open, os.mkdir, os.stat, os.rename, os.unlink} <= os.supports_dir_fd


def _open_at(name: str, flags: int, folder: int, path: str) -> int:
    try:
        return os.open(name, flags | _NOFOLLOW, 0o666, dir_fd=folder)
    except OSError as exc:
        # O_NOFOLLOW on a symlink fails with ELOOP, or ENOTDIR when a folder was asked for.
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink_at(name, folder):
            raise PathOutsideRoot(f"{path!r} became a symbolic link while in use; refused") from None
        raise


def _is_symlink_at(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False
