"""File-system helpers: atomic writes.

A write goes to a temporary file in the target's folder, is flushed to disk (fsync), and replaces the
target in one rename, so a crash mid-write leaves the old file intact and never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["atomic_write_bytes"]


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, new_mode: int = 0o666) -> None:
    """Replace the file at ``path`` with ``data`` atomically; creates missing parent folders.

    A replaced file keeps its permission bits (a script stays executable); a new file gets ``new_mode`` less
    the umask, as ``open()`` would give it. Not ``tempfile.mkstemp``: its files are 0o600, which the rename
    would hand to the target."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
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
