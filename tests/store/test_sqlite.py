"""What only the SQLite backend does: the folders it creates, and a disk that fills up under it (for real: a
file size limit on a child process, and a tiny tmpfs where this machine lets root mount one)."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopctl.errors import StoreError
from loopctl.message import Message
from loopctl.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_missing_folders_are_created_private_to_their_owner(tmp_path: Path) -> None:
    # Issue 18, item 5: the folder was made 0o755 (world-readable) while docs/sessions.md promises private.
    umask = os.umask(0o022)
    try:
        (tmp_path / "kept").mkdir(0o755)
        with SQLiteStore(tmp_path / "kept" / "new" / "deeper" / "sessions.db") as store:
            store.append("s", [Message.user("secret")], expected_head=None)
    finally:
        os.umask(umask)
    assert _mode(tmp_path / "kept" / "new") == 0o700
    assert _mode(tmp_path / "kept" / "new" / "deeper") == 0o700
    assert _mode(tmp_path / "kept" / "new" / "deeper" / "sessions.db") == 0o600
    assert _mode(tmp_path / "kept") == 0o755  # a folder that existed is left as it was


# --- a full disk ------------------------------------------------------------------------------------------------

_BIG = [Message.user(f"{i} " + "x" * 3000) for i in range(1000)]  # ~3 MB in one transaction: it spills mid-way


def _small_session(db: Path) -> str | None:
    with SQLiteStore(db) as store:
        return store.append("s", [Message.user("kept")], expected_head=None).head


def _check_nothing_was_lost(db: Path, head: str | None) -> None:
    """The failed append left nothing behind, and the store still works."""
    with SQLiteStore(db) as store:
        assert store.info("s").head == head and store.verify("s") == []
        assert [m.text_content() for m in store.load("s").messages] == ["kept"]
        assert "t" not in {s.id for s in store.sessions()}
        store.append("t", [Message.user("after")], expected_head=None)


def test_a_write_past_the_file_size_limit_reports_the_real_error(tmp_path: Path) -> None:
    # Issue 18, item 20: a write that fails mid-transaction was reported as "cannot rollback - no transaction is
    # active" (SQLite had rolled it back itself, and the second ROLLBACK's error replaced the first).
    db = tmp_path / "sessions.db"
    head = _small_session(db)
    child = textwrap.dedent(
        f"""
        import resource, signal, sys
        from loopctl.errors import StoreError
        from loopctl.message import Message
        from loopctl.store import SQLiteStore
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        store = SQLiteStore({str(db)!r})
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, hard))
        big = [Message.user(f"{{i}} " + "x" * 3000) for i in range(1000)]
        try:
            store.append("s", big, expected_head={head!r})
        except StoreError as exc:
            print(exc)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        store.append("u", [Message.user("same connection, after")], expected_head=None)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"writing to {str(db)!r} failed: disk I/O error\n"
    _check_nothing_was_lost(db, head)


@contextlib.contextmanager
def _tiny_disk(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
            capture_output=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}); the file size limit test covers the same path")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True, timeout=30)


def test_a_full_disk_reports_the_real_error_and_loses_nothing(tmp_path: Path) -> None:
    with _tiny_disk(tmp_path / "disk", "1m") as disk:
        db = disk / "sessions.db"
        head = _small_session(db)
        with SQLiteStore(db) as store:
            with pytest.raises(StoreError) as caught:
                store.append("s", _BIG, expected_head=head)
            assert str(caught.value) == f"writing to {str(db)!r} failed: database or disk is full"
        _check_nothing_was_lost(db, head)
