"""File tools confined to one root folder: ``list_files``, ``read_file``, ``search``, ``write_file`` and
``edit_file``, the tools of the ``loopctl`` command, for any agent::

    from loopctl.engine import BareLoop
    from loopctl.tools.files import FileTools

    loop = BareLoop(client, FileTools("./project"))           # all five tools
    loop = BareLoop(client, [*FileTools("./project", read_only=True), my_tool])

``list_files``, ``read_file`` and ``search`` return results tagged ``Requery`` (the model can fetch them
again, so compaction may clear them); ``write_file`` and ``edit_file`` (:data:`WRITE_TOOLS`) return results
tagged ``Durable`` (what was changed is not re-derivable). A failure is an error result the model reads
(``Refused: ...`` or ``Error: ...``), never an exception out of the tool.

Confinement. Every path is resolved (symlinks included) and refused when it lands outside the root. The
file is then opened from the root one folder at a time without following a symbolic link (POSIX ``openat``
with ``O_NOFOLLOW``), so a folder or file replaced by a symlink between that check and the read or write is
refused too, never followed out. Writes under :data:`PROTECTED_NAMES` (``.git/`` and other places whose
files make tools run code: git hooks and ``core.fsmonitor``, direnv's ``.envrc``, editor tasks) are refused
unless ``protected=()``.

Walking. ``list_files`` and ``search`` prune :data:`SKIP_DIRS` (``.git/``, ``node_modules/``...) and what
``.gitignore`` files (and ``.git/info/exclude``) ignore as they walk, with git's rules (``gitwildmatch``, via
the ``pathspec`` library), and do not descend into symlinked folders. A folder asked for by name is listed or
searched even when it is ignored.

Limits. ``read_file`` returns at most ``max_read_bytes`` of text, starting at any line (``offset`` counts
lines, so every line of a big file can be reached); ``search`` reads every line of every file (binary files,
holding a NUL byte in their first 8 KiB, are skipped), and runs the model's pattern with the ``regex``
library, which matches without holding the GIL and stops a match after ``match_timeout`` seconds, so a
pattern that backtracks catastrophically ends as an error result instead of freezing the event loop. A
cancelled call (a tool timeout, Ctrl-C) stops at its next line, file or match.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from loopctl._frozen import dataclass
from loopctl._fs import atomic_write_bytes
from loopctl.message import Retention
from loopctl.tool import FunctionTool, ToolOutput, tool

if TYPE_CHECKING:  # pathspec (and regex) are imported when a tool first needs them, not to start a run
    import pathspec

__all__ = [
    "PROTECTED_NAMES",
    "READ_TOOLS",
    "SKIP_DIRS",
    "WRITE_TOOLS",
    "ChangePreview",
    "FileTools",
    "PathOutsideRoot",
    "ProtectedPath",
]

WRITE_TOOLS = frozenset({"write_file", "edit_file"})
"""The tools that change files (the ``loopctl`` command asks approval for these unless ``--yes``)."""

READ_TOOLS = frozenset({"list_files", "read_file", "search"})
"""The tools that only read (``FileTools(root, read_only=True)`` has these alone)."""

SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", ".jj", ".bzr", "node_modules", "__pycache__", ".venv", ".loopctl",
        ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox",
    }
)  # fmt: skip
"""Folder names ``list_files`` and ``search`` never walk into (a folder asked for by name is still listed)."""

PROTECTED_NAMES = frozenset({".git", ".hg", ".svn", ".jj", ".bzr", ".envrc", ".vscode", ".loopctl"})
"""Names that make a write refused when any folder or file on the resolved path has one (compared
case-insensitively, as a case-insensitive file system would): version-control folders run hooks and commands
their configuration names (``.git/hooks/*``, ``core.fsmonitor``, ``core.pager``; a ``.git`` *file* points git
at another folder), direnv runs ``.envrc`` on entering the folder, VS Code runs ``.vscode/tasks.json`` tasks
on opening it, and ``.loopctl/`` holds the command's own sessions."""

_BINARY_SNIFF = 8192  # bytes looked at for a NUL: git's and grep's test for a binary file
_PIECE = 1 << 20  # the longest piece of one line search matches at once (a longer line is searched in pieces)
_HIT_CHARS = 300  # a search hit's line is shown up to this many characters
_PREVIEW_BYTES = 1 << 20  # a bigger file is not read whole for a change's preview
_CHUNK_MATCH_SECONDS = 0.25  # a search of a whole chunk that takes longer goes on line by line


class PathOutsideRoot(ValueError):
    """A path that resolves (through ``..`` or a symlink) outside the tools' root folder."""


class ProtectedPath(ValueError):
    """A write to a path under one of the protected names (:data:`PROTECTED_NAMES`)."""


class _NotAFile(ValueError):
    """A path that is no regular file (a folder, a FIFO, a device)."""


class _Stopped(Exception):
    """The call was cancelled (its await ended); the worker thread stops here."""


@dataclass(frozen=True, slots=True)
class ChangePreview:
    """What a ``write_file`` or ``edit_file`` call would do, for an approval prompt (see
    :meth:`FileTools.preview`).

    ``path`` is the target resolved and relative to the root (``"notes/todo.md"``), or the path as given when
    it cannot be resolved. ``action`` is ``"create"``, ``"replace"`` or ``"edit"``. ``diff`` is a unified diff
    of the change (``""`` when there is none to show). ``problem`` says why the call will be refused or fail
    (outside the root, a protected path, ``old`` not found...), else ``None``. Every string may hold what the
    model wrote: escape it before a terminal shows it.
    """

    tool: str
    path: str
    action: Literal["create", "replace", "edit"]
    diff: str
    problem: str | None = None


class FileTools:
    """The five file tools over ``root`` (an existing folder; ``OSError`` otherwise). Iterating gives the
    tools, so a ``FileTools`` can be passed to :class:`~loopctl.engine.BareLoop` as its tools.

    ``read_only``: only ``list_files``, ``read_file`` and ``search``. ``max_read_bytes``: the most text one
    ``read_file`` returns (bytes of the file). ``max_results``: the most entries one listing, and hits one
    search, returns. ``match_timeout``: seconds one match of a search pattern may take (on one line).
    ``search_timeout``: seconds one search may take in all (it then returns the hits found, saying it
    stopped). ``protected``: names under which writes are refused (:data:`PROTECTED_NAMES`; ``()`` allows
    all). ``skip_dirs``: folder names walks never enter (:data:`SKIP_DIRS`). ``gitignore``: honour
    ``.gitignore`` files while walking.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        read_only: bool = False,
        max_read_bytes: int = 100_000,
        max_results: int = 500,
        match_timeout: float = 1.0,
        search_timeout: float = 30.0,
        protected: Iterable[str] = PROTECTED_NAMES,
        skip_dirs: Iterable[str] = SKIP_DIRS,
        gitignore: bool = True,
    ) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(self.root))
        self.read_only = read_only
        self.max_read_bytes = max_read_bytes
        self.max_results = max_results
        self.match_timeout = match_timeout
        self.search_timeout = search_timeout
        self.protected = frozenset(n.casefold() for n in protected)
        self.skip_dirs = frozenset(skip_dirs)
        self.gitignore = gitignore

    # --- paths ---------------------------------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The absolute path of ``path`` (relative to the root), refused with :class:`PathOutsideRoot` if it
        resolves outside the root."""
        if "\0" in path:
            raise PathOutsideRoot(f"{path!r} is not a valid path")
        candidate = (self.root / path).resolve(strict=False)
        if candidate != self.root and self.root not in candidate.parents:
            raise PathOutsideRoot(f"{path!r} is outside the project root; only paths inside it are allowed")
        return candidate

    def relative(self, path: str) -> str:
        """``path`` resolved and relative to the root, with ``/`` separators (``"."`` for the root itself);
        :class:`PathOutsideRoot` as :meth:`resolve`. What an approval prompt should show: ``a/../b.txt`` is
        ``b.txt``."""
        return self._rel(self.resolve(path))

    def _rel(self, p: Path) -> str:
        rel = p.relative_to(self.root).as_posix()
        return rel or "."

    def _check_writable(self, p: Path, path: str) -> None:
        for name in p.relative_to(self.root).parts:
            if name.casefold() in self.protected:
                raise ProtectedPath(
                    f"{path!r} is under {name}, where a file can make tools run code (hooks, configuration); "
                    "writes there are not allowed"
                )

    # --- the tools -----------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[FunctionTool]:
        return iter(self.tools())

    def tools(self) -> list[FunctionTool]:
        """The tools, bound to this root: ``list_files``, ``read_file``, ``search`` and (unless
        ``read_only``) ``write_file`` and ``edit_file``."""
        ft = self

        @tool
        async def list_files(path: str = ".", recursive: bool = False) -> ToolOutput:
            """List the files and folders under a folder of the project (folders end with "/"). Folders such
            as .git/ and node_modules/ and what .gitignore ignores are skipped; list one by name to see it.

            Args:
                path: folder relative to the project root
                recursive: list the whole tree under it
            """
            return await ft._threaded(Retention.REQUERY, lambda stop: ft._list(path, recursive, stop))

        @tool
        async def read_file(path: str, offset: int = 0, limit: int | None = None) -> ToolOutput:
            """Read a text file of the project, with line numbers.

            Args:
                path: file relative to the project root
                offset: first line to show (0-based); any line of the file can be reached
                limit: how many lines to show (default: as many as fit the size cap)
            """
            return await ft._threaded(Retention.REQUERY, lambda stop: ft._read(path, offset, limit, stop))

        @tool
        async def search(pattern: str, path: str = ".") -> ToolOutput:
            """Search the project's text files for a regular expression; returns "file:line: text" hits.
            Skips binary files, .git/, node_modules/ and what .gitignore ignores.

            Args:
                pattern: a regular expression (Python syntax), matched against each line
                path: folder or file to search, relative to the project root
            """
            return await ft._threaded(Retention.REQUERY, lambda stop: ft._search(pattern, path, stop))

        @tool
        async def write_file(path: str, content: str) -> ToolOutput:
            """Create or replace a text file of the project with the given content.

            Args:
                path: file relative to the project root
                content: the whole new content
            """
            return await ft._threaded(Retention.DURABLE, lambda stop: ft._write(path, content), stoppable=False)

        @tool
        async def edit_file(path: str, old: str, new: str) -> ToolOutput:
            """Replace exactly one occurrence of `old` with `new` in a text file of the project.

            Args:
                path: file relative to the project root
                old: the exact text to replace (must occur exactly once)
                new: the replacement text
            """
            return await ft._threaded(Retention.DURABLE, lambda stop: ft._edit(path, old, new), stoppable=False)

        if self.read_only:
            return [list_files, read_file, search]
        return [list_files, read_file, search, write_file, edit_file]

    def preview(self, name: str, input: Any) -> ChangePreview | None:  # noqa: A002 - a tool call's name
        """What the call ``name(**input)`` would change, without changing anything; ``None`` for a tool that
        changes no file (or input that is not an object). For an approval prompt: show ``path`` and ``diff``
        (escaped) and ask."""
        if name not in WRITE_TOOLS or not isinstance(input, dict):
            return None
        raw = input.get("path")
        shown = raw if isinstance(raw, str) else repr(raw)
        action: Literal["create", "replace", "edit"] = "edit" if name == "edit_file" else "create"
        try:
            if not isinstance(raw, str):
                raise ValueError("the call has no path")
            p = self.resolve(raw)
            shown = self._rel(p)
            self._check_writable(p, raw)
            exists = p.is_file()
            big = exists and p.stat().st_size > _PREVIEW_BYTES
            if name == "write_file":
                content = input.get("content")
                if not isinstance(content, str):
                    raise ValueError("the call has no content")
                action = "replace" if exists else "create"
                # A big file is not read: the preview shows the new content alone.
                old_text = self._read_bytes(p, raw, None).decode("utf-8", "replace") if exists and not big else None
                new_text = content
            else:
                if not exists:
                    raise ValueError(f"{raw!r} is not a file")
                whole = self._read_bytes(p, raw, None).decode("utf-8") if not big else None
                if whole is None:  # a big file: the preview shows the replaced text alone
                    old_text, new_text = _edited_texts(input.get("old"), input.get("new"))
                else:
                    old_text, new_text = whole, _edited(whole, input.get("old"), input.get("new"), raw)
        except (PathOutsideRoot, ProtectedPath, OSError, ValueError) as exc:
            return ChangePreview(name, shown, action, "", _problem(exc))
        import difflib  # imported for the first preview (an approval prompt), not to start a run

        diff = difflib.unified_diff(
            (old_text or "").splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile="/dev/null" if old_text is None else f"a/{shown}",
            tofile=f"b/{shown}",
        )
        return ChangePreview(name, shown, action, "".join(_newline_ended(diff)))

    # --- running in a worker thread ------------------------------------------------------------------------

    async def _threaded(
        self, retention: Retention, fn: Callable[[threading.Event], str], *, stoppable: bool = True
    ) -> ToolOutput:
        """Run ``fn`` in a worker thread. When the await is cancelled (a tool timeout, Ctrl-C), ``fn``'s stop
        event is set and it stops at its next check (a write, which is quick and atomic, runs to its end)."""
        stop = threading.Event()
        try:
            return await asyncio.to_thread(self._guard, retention, fn, stop)
        finally:
            if stoppable:
                stop.set()

    def _guard(self, retention: Retention, fn: Callable[[threading.Event], str], stop: threading.Event) -> ToolOutput:
        try:
            text = fn(stop)
        except (PathOutsideRoot, ProtectedPath) as exc:
            return ToolOutput(f"Refused: {exc}", is_error=True, retention=retention)
        except _Stopped:
            return ToolOutput("Error: stopped", is_error=True, retention=retention)
        except (OSError, ValueError, _regex().error) as exc:  # evaluated only when something was raised
            return ToolOutput(f"Error: {_problem(exc)}", is_error=True, retention=retention)
        return ToolOutput(text, retention=retention)

    # --- implementations (each returns text or raises) ---------------------------------------------------

    def _list(self, path: str, recursive: bool, stop: threading.Event) -> str:
        base = self.resolve(path)
        if not base.is_dir():
            raise ValueError(f"{path!r} is not a folder")
        out: list[str] = []
        skipped: list[str] = []
        for p, is_dir in self._walk(base, recursive, stop, skipped if not recursive else None):
            out.append(self._rel(p) + ("/" if is_dir else ""))
            if len(out) >= self.max_results:
                out.append(f"... (stopped at {self.max_results} entries)")
                break
        if skipped:
            shown = ", ".join(skipped[:8]) + (f" and {len(skipped) - 8} more" if len(skipped) > 8 else "")
            out.append(f"(not shown: {shown}; list a folder by name to see inside)")
        return "\n".join(out) if out else "(empty folder)"

    def _read(self, path: str, offset: int, limit: int | None, stop: threading.Event) -> str:
        p = self.resolve(path)
        if not p.is_file():
            raise ValueError(f"{path!r} is not a file")
        offset = max(0, offset)
        cap = self.max_read_bytes
        out: list[str] = []
        used = 0  # bytes of the file shown so far
        lines = 0  # lines of the file seen so far
        with self._open_read(p, path) as f:
            if b"\0" in f.read(_BINARY_SNIFF):
                return f"(a binary file of {os.fstat(f.fileno()).st_size:,} bytes; not shown)"
            f.seek(0)
            for n, piece, first, _ in _pieces(f, stop, cap + 1):
                lines = n + 1
                if n < offset or not first:
                    continue  # before the offset, or the rest of a line already cut
                if limit is not None and len(out) >= max(0, limit):
                    break
                if used + len(piece) > cap:
                    if out:
                        out.append(f"... (stopped at the size cap of {cap:,} bytes; read on with offset={n})")
                    else:  # one line longer than the cap
                        text = codecs.getincrementaldecoder("utf-8")("replace").decode(piece[:cap])
                        out.append(f"{n + 1:>5}\t{text}")
                        out.append(f"... (line {n + 1} is cut at the size cap of {cap:,} bytes)")
                    break
                used += len(piece)
                out.append(f"{n + 1:>5}\t{_line_text(piece)}")
        if out:
            return "\n".join(out)
        if limit is not None and limit <= 0:
            return "(no lines asked for)"
        if offset > 0 and lines <= offset:
            return f"(offset {offset} is past the end: the file has {lines} lines)"
        return "(empty file)"

    def _search(self, pattern: str, path: str, stop: threading.Event) -> str:
        search = _Search(pattern, time.monotonic() + self.search_timeout, self.match_timeout, self.max_results, stop)
        base = self.resolve(path)
        files: Iterable[tuple[Path, bool]]
        files = [(base, False)] if base.is_file() else self._walk(base, True, stop, None)
        try:
            for f, is_dir in files:
                if is_dir:
                    continue
                rel = self._rel(f)
                try:
                    with self._open_read(f, rel) as fh:
                        if b"\0" in fh.read(_BINARY_SNIFF):
                            continue  # a binary file
                        fh.seek(0)
                        search.file(fh, rel)
                except (PathOutsideRoot, _NotAFile, OSError):
                    continue  # swapped for a symlink, not a regular file, or unreadable: not searched
        except _SearchOver as over:
            note = (
                f"... (stopped at {self.max_results} hits)"
                if over.where is None
                else f"... (stopped after {self.search_timeout:g} s, in {over.where}; search a narrower path)"
            )
            return "\n".join([*search.hits, note])
        return "\n".join(search.hits) if search.hits else f"no match for {pattern!r}"

    def _write(self, path: str, content: str) -> str:
        p = self.resolve(path)
        self._check_writable(p, path)
        if p.is_dir():
            raise ValueError(f"{path!r} is a folder")
        existed = p.exists()
        data = content.encode("utf-8")
        self._write_bytes(p, path, data)
        verb = "replaced" if existed else "created"
        return f"{verb} {self._rel(p)} ({len(data)} bytes)"

    def _edit(self, path: str, old: str, new: str) -> str:
        p = self.resolve(path)
        self._check_writable(p, path)
        if not p.is_file():
            raise ValueError(f"{path!r} is not a file")
        text = self._read_bytes(p, path, None).decode("utf-8")
        self._write_bytes(p, path, _edited(text, old, new, path).encode("utf-8"))
        return f"edited {self._rel(p)}: replaced {len(old)} characters with {len(new)}"

    # --- walking -------------------------------------------------------------------------------------------

    def _walk(
        self, base: Path, recursive: bool, stop: threading.Event, skipped: list[str] | None
    ) -> Iterator[tuple[Path, bool]]:
        """``(path, is_dir)`` under ``base`` (itself excluded), depth first, sorted by name in each folder;
        skip folders, ignored entries and symlinks leading out of the root are left out (their names go to
        ``skipped`` when given). Symlinked folders are listed, not entered."""
        rules = self._rules_for(base)

        def walk(folder: Path, rules: list[tuple[str, pathspec.GitIgnoreSpec]]) -> Iterator[tuple[Path, bool]]:
            if stop.is_set():
                raise _Stopped
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                return
            if recursive:
                rules = rules + self._rules_in(folder)
            for e in entries:
                p = Path(e.path)
                link = e.is_symlink()
                if link:
                    try:
                        target = self.resolve(self._rel(p))
                    except PathOutsideRoot:
                        continue  # a symlink pointing out of the root is not shown
                    is_dir = target.is_dir()
                else:
                    try:
                        is_dir = e.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                if (is_dir and e.name in self.skip_dirs) or _ignored(rules, self._rel(p), is_dir):
                    if skipped is not None:
                        skipped.append(e.name + ("/" if is_dir else ""))
                    continue
                yield p, is_dir
                if recursive and is_dir and not link:
                    yield from walk(p, rules)

        return walk(base, rules if recursive else [*rules, *self._rules_in(base)])

    def _rules_for(self, base: Path) -> list[tuple[str, pathspec.GitIgnoreSpec]]:
        """The ignore rules of the folders above ``base`` (from the root down), ``base``'s own excluded (the
        walk adds each folder's as it enters it). None when ``base`` itself is ignored: a folder asked for by
        name is walked."""
        if not self.gitignore:
            return []
        rules: list[tuple[str, pathspec.GitIgnoreSpec]] = []
        exclude = self._spec_file(self.root / ".git" / "info" / "exclude", "")
        if exclude is not None:
            rules.append(exclude)
        folder = self.root
        for name in base.relative_to(self.root).parts:
            rules += self._rules_in(folder)
            folder = folder / name
            if _ignored(rules, self._rel(folder), True):
                return []
        return rules

    def _rules_in(self, folder: Path) -> list[tuple[str, pathspec.GitIgnoreSpec]]:
        if not self.gitignore:
            return []
        prefix = "" if folder == self.root else self._rel(folder) + "/"
        spec = self._spec_file(folder / ".gitignore", prefix)
        return [] if spec is None else [spec]

    def _spec_file(self, p: Path, prefix: str) -> tuple[str, pathspec.GitIgnoreSpec] | None:
        try:
            data = self._read_bytes(p, self._rel(p), 1 << 20)
        except (OSError, ValueError):
            return None
        lines = data.decode("utf-8", "replace").splitlines()
        import pathspec

        return prefix, pathspec.GitIgnoreSpec.from_lines(lines)

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

    @contextlib.contextmanager
    def _open_read(self, p: Path, path: str) -> Iterator[IO[bytes]]:
        """The regular file ``p``, open for reading in binary."""
        if not _AT:
            with open(p, "rb") as f:
                yield f
            return
        with self._folder_of(p, path, create=False) as (folder, name):
            # O_NONBLOCK: a FIFO swapped in must not block the open (it is refused just below).
            fd = _open_at(name, os.O_RDONLY | os.O_NONBLOCK, folder, path)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise _NotAFile(f"{path!r} is not a file")
            yield f

    def _read_bytes(self, p: Path, path: str, size: int | None) -> bytes:
        """The first ``size`` bytes (all with ``None``) of the regular file ``p``; only those are read."""
        with self._open_read(p, path) as f:
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


class _SearchOver(Exception):
    """The search stops: at the hit limit (``where`` is ``None``) or its time limit (``where``: the file)."""

    def __init__(self, where: str | None) -> None:
        self.where = where


# Patterns whose match on a line could fail once the line has neighbours (negative lookarounds, \A \Z \z \G,
# atomic groups and possessive quantifiers, flags turned off inline): searched line by line only, never a chunk
# at a time. (What else a line matches alone it matches in its chunk: more text around it can only add
# matches, and ^ $ \b see a line end in both.)
_LINE_ONLY = r"\\[AZzG]|\(\?<?!|\(\?>|[*+?}]\+|\(\?[a-zA-Z]*-"


def _regex() -> Any:
    """The ``regex`` module, imported on first use."""
    import regex

    return regex


class _Search:
    """One search: the hits so far, matched line by line with git-grep's semantics, fast.

    A chunk of lines (about 1 MiB) is searched at once, ``^`` and ``$`` at line boundaries: a line that
    matches on its own also matches inside its chunk, so the chunk's matches lead to every line that can
    match, and only those lines are then searched alone, which decides. (A match of the chunk may run over a
    line end; the line-alone search drops it.) A pattern for which that does not hold (:data:`_LINE_ONLY`)
    is searched one line at a time. Each match may take ``match_timeout`` seconds; the whole search ends at
    ``deadline`` (``time.monotonic``)."""

    def __init__(
        self, pattern: str, deadline: float, match_timeout: float, max_hits: int, stop: threading.Event
    ) -> None:
        self.pattern = pattern
        regex = _regex()
        self.line = regex.compile(pattern)
        self.chunk = None if regex.search(_LINE_ONLY, pattern) else regex.compile(pattern, regex.MULTILINE)
        self.deadline = deadline
        self.match_timeout = match_timeout
        self.max_hits = max_hits
        self.stop = stop
        self.hits: list[str] = []

    def _timeout(self, rel: str, limit: float | None = None) -> float:
        """Seconds the next match may take; raises :class:`_Stopped` once the call is cancelled and
        :class:`_SearchOver` once the search's time is up."""
        if self.stop.is_set():
            raise _Stopped
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _SearchOver(rel)
        return min(self.match_timeout if limit is None else limit, left)

    def file(self, f: IO[bytes], rel: str) -> None:
        """Search the file ``f`` (``rel``: its path in the hits)."""
        first = 0  # the index of the chunk's first line
        while True:
            if self.stop.is_set():
                raise _Stopped
            data = f.read(_PIECE)
            if not data:
                return
            if not data.endswith(b"\n"):
                data += f.readline(_PIECE)  # finish the line (a longer one is searched in pieces)
            # A CRLF line end is a line end: "x$" matches "x\r\n" line by line, so it must in the chunk too.
            text = data.decode("utf-8", "replace").replace("\r\n", "\n")
            self._chunk(text, first, rel)
            first += text.count("\n")

    def _chunk(self, text: str, first: int, rel: str) -> None:
        if self.chunk is None:
            starts: Iterable[int] = _line_starts(text)
        else:
            starts = self._candidates(text, rel)
        counted, n = 0, first + 1  # line n starts at text[counted]
        for start in starts:
            n += text.count("\n", counted, start)
            counted = start
            end = text.find("\n", start)
            line = text[start : end if end >= 0 else len(text)]
            try:
                found = self.line.search(line, timeout=self._timeout(rel))
            except TimeoutError:
                self._timeout(rel)  # the whole search's time ran out: that is the report
                raise ValueError(
                    f"the pattern {self.pattern!r} took over {self.match_timeout:g} s on one line ({rel}:{n}); "
                    "it backtracks too much: simplify it"
                ) from None
            if found:
                self.hits.append(f"{rel}:{n}: {_cut(line.strip(), _HIT_CHARS)}")
                if len(self.hits) >= self.max_hits:
                    raise _SearchOver(None)

    def _candidates(self, text: str, rel: str) -> Iterator[int]:
        """The start of each line of ``text`` where a match of the chunk pattern starts (the lines that can
        match); every line from where the chunk search timed out."""
        assert self.chunk is not None
        pos = 0
        while pos < len(text):
            try:
                m = self.chunk.search(text, pos, timeout=self._timeout(rel, _CHUNK_MATCH_SECONDS))
            except TimeoutError:
                self._timeout(rel)
                yield from _line_starts(text, pos)  # line by line from here: the line that is too slow is named
                return
            if m is None:
                return
            start = text.rfind("\n", 0, m.start()) + 1
            if start >= len(text):
                return  # an empty match after the last line end: no line is there
            yield start
            end = text.find("\n", m.start())
            if end < 0:
                return
            pos = end + 1


def _line_starts(text: str, pos: int = 0) -> Iterator[int]:
    """The index of each line's start in ``text`` from ``pos`` (a line start)."""
    while pos < len(text):
        yield pos
        end = text.find("\n", pos)
        if end < 0:
            return
        pos = end + 1


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


def _pieces(f: IO[bytes], stop: threading.Event, size: int) -> Iterator[tuple[int, bytes, bool, bool]]:
    """``(line index, piece, first, last)`` for each line of ``f`` (split at ``\\n`` only, as editors and
    ``grep`` count), in pieces of at most ``size`` bytes: a longer line comes in several pieces under one
    index, ``first`` on its first and ``last`` on its last. Raises :class:`_Stopped` once ``stop`` is set."""
    n = 0
    first = True
    while True:
        if stop.is_set():
            raise _Stopped
        piece = f.readline(size)
        if not piece:
            return
        last = piece.endswith(b"\n")
        yield n, piece, first, last
        if last:
            n += 1
            first = True
        else:
            first = False


def _line_text(piece: bytes) -> str:
    """A line's text: UTF-8 (bytes that are not, as U+FFFD), without its line ending (``\n`` or ``\r\n``)."""
    text = piece.decode("utf-8", "replace")
    return text[:-1].removesuffix("\r") if text.endswith("\n") else text


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _ignored(rules: list[tuple[str, pathspec.GitIgnoreSpec]], rel: str, is_dir: bool) -> bool:
    """Whether git would ignore ``rel`` (relative to the root) under ``rules``, ``(folder prefix, spec)``
    pairs from the root down: the last rule that matches decides, so a deeper ``.gitignore`` (or a later
    ``!pattern``) overrides."""
    decision = False
    for prefix, spec in rules:
        if not rel.startswith(prefix):
            continue
        result = spec.check_file(rel[len(prefix) :] + ("/" if is_dir else ""))
        if result.include is not None:
            decision = result.include
    return decision


def _edited_texts(old: Any, new: Any) -> tuple[str, str]:
    if not isinstance(old, str) or not isinstance(new, str):
        raise ValueError("the call needs `old` and `new` texts")
    return old, new


def _edited(text: str, old: Any, new: Any, path: str) -> str:
    old, new = _edited_texts(old, new)
    count = text.count(old) if old else 0
    if count != 1:
        raise ValueError(f"`old` must occur exactly once in {path!r}; it occurs {count} times")
    return text.replace(old, new, 1)


def _newline_ended(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


def _problem(exc: BaseException) -> str:
    """An exception's text for the model; an ``OSError`` names its reason and file, not its errno."""
    if isinstance(exc, OSError) and exc.strerror:
        name = exc.filename
        return f"{exc.strerror}: {name}" if name else exc.strerror
    return str(exc)
