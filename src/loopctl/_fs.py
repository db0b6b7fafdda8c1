"""File-system helpers: atomic writes, private folders.

A write goes to a temporary file in the target's folder, is flushed to disk (fsync), and replaces the
target in one rename, so a crash mid-write leaves the old file intact and never a half-written one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["atomic_write_bytes", "make_private_folders"]


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, *, new_mode: int = 0o666, make_parents: bool = True
) -> None:
    """Replace the file at ``path`` with ``data`` atomically, then flush the folder entry (POSIX), so the
    rename survives a power cut.

    Missing parent folders are created unless ``make_parents=False``, which raises ``FileNotFoundError``
    naming the folder. A replaced file keeps its permission bits (a script stays executable); a new file gets
    ``new_mode`` less the umask, as ``open()`` would give it. Not ``tempfile.mkstemp``: its files are 0o600,
    which the rename would hand to the target."""
    target = Path(path)
    if make_parents:
        target.parent.mkdir(parents=True, exist_ok=True)
    elif not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder to save into", str(target.parent))
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), new_mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if mode is not None:
                os.chmod(tmp, mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    """Flush the folder entry of a rename to disk (POSIX; Windows cannot open a folder, and needs not)."""
    if os.name == "nt":
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def make_private_folders(folder: str | os.PathLike[str]) -> None:
    """Create ``folder`` and each missing folder above it private to their owner (0o700, whatever the umask:
    they will hold whole conversations). Folders that exist are left as they are. Raises ``OSError``."""
    target = Path(folder)
    missing: list[Path] = []
    while not target.is_dir():
        missing.append(target)
        if target.parent == target:
            break
        target = target.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # made by another process meanwhile: its owner chose its mode
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
