"""A throwaway PostgreSQL server for tests and benchmarks: ``initdb`` into a temporary folder, ``pg_ctl start``
on a Unix socket inside it (no TCP port, so parallel runs never collide), stopped and deleted on close.

    with PostgresServer() as pg:
        store = PostgresStore(pg.dsn())

PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` user (which the Debian
package creates), through ``runuser`` or ``su``. :func:`find_bindir` looks for ``initdb`` and ``pg_ctl``:
``$LOOPCTL_PG_BINDIR``, then ``PATH``, then ``/usr/lib/postgresql/<version>/bin`` (Debian and Ubuntu keep
them there, off ``PATH``), newest version first. ``python3 make.py test`` installs PostgreSQL with apt-get
when it is missing.

Standard library only (``make.py`` loads :func:`find_bindir` from this file before any virtual environment
exists).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BINDIR_VAR", "PostgresServer", "PostgresUnavailable", "find_bindir"]

BINDIR_VAR = "LOOPCTL_PG_BINDIR"
"""Environment variable: the folder holding ``initdb`` and ``pg_ctl``, when they are not found otherwise."""

_DEBIAN_ROOT = Path("/usr/lib/postgresql")


class PostgresUnavailable(RuntimeError):
    """PostgreSQL could not be found or started; the text says what was tried and how to fix it."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path.parent.parent.name)) or (0,)


def find_bindir(search: Sequence[Path] | None = None) -> Path | None:
    """The folder holding PostgreSQL's ``initdb`` and ``pg_ctl``, or ``None``. ``search`` replaces the
    default places (``$LOOPCTL_PG_BINDIR``, ``PATH``, ``/usr/lib/postgresql/*/bin``), for tests."""
    candidates: list[Path] = []
    if search is not None:
        candidates = list(search)
    else:
        env = os.environ.get(BINDIR_VAR)
        if env:
            candidates.append(Path(env))
        on_path = shutil.which("pg_ctl")
        if on_path:
            candidates.append(Path(on_path).resolve().parent)
        candidates += [p.parent for p in sorted(_DEBIAN_ROOT.glob("*/bin/pg_ctl"), key=_version_key, reverse=True)]
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


class PostgresServer:
    """A PostgreSQL cluster owned by this object.

    ``durable=False`` (the default, for tests) turns off ``fsync`` and synchronous commits: fast, and a crash
    of the server may lose recent commits (a crash of a client never does). Benchmarks pass ``durable=True``
    for the server's default settings. ``user`` is the superuser's name (trust authentication over the
    socket only).

    ``bindir`` is the folder holding ``initdb`` and ``pg_ctl`` (default: :func:`find_bindir`).
    """

    def __init__(self, *, bindir: Path | None = None, durable: bool = False, user: str = "loopctl") -> None:
        self.bindir = bindir
        self.durable = durable
        self.user = user
        self.port = 5432  # only names the socket file: the server listens on no TCP port
        self.base: Path | None = None
        self._run_as: list[str] = []
        self._started = False

    @property
    def socket_dir(self) -> Path:
        """The folder of the server's Unix socket (the ``host`` of a connection string)."""
        assert self.base is not None, "the server is not started"
        return self.base / "sock"

    @property
    def data_dir(self) -> Path:
        """The cluster's data folder."""
        assert self.base is not None, "the server is not started"
        return self.base / "data"

    def dsn(self, dbname: str = "postgres", *, search_path: str | None = None) -> str:
        """A libpq connection string for ``dbname``; ``search_path`` picks the schema unqualified tables are
        created in and read from."""
        parts = [f"host={self.socket_dir}", f"port={self.port}", f"user={self.user}", f"dbname={dbname}"]
        if search_path is not None:
            parts.append(f"options='-csearch_path={search_path}'")
        return " ".join(parts)

    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``dbname`` (for libraries that take URLs, SQLAlchemy's included)."""
        return f"postgresql://{self.user}@/{dbname}?host={self.socket_dir}&port={self.port}"

    # --- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> PostgresServer:
        """Create and start the cluster; raises :class:`PostgresUnavailable` with the server's log when it
        cannot."""
        bindir = self.bindir or find_bindir()
        if bindir is None:
            raise PostgresUnavailable(
                "PostgreSQL's initdb and pg_ctl were not found (looked in $LOOPCTL_PG_BINDIR, PATH and "
                "/usr/lib/postgresql/*/bin); install PostgreSQL (python3 make.py test does it with apt-get as "
                "root; by hand: apt-get install postgresql)"
            )
        self.bindir = bindir
        self._run_as = self._runner()
        self.base = Path(tempfile.mkdtemp(prefix="loopctl-pg-"))
        self.socket_dir.mkdir()
        if self._run_as:
            import pwd

            entry = pwd.getpwnam("postgres")
            for p in (self.base, self.socket_dir):
                os.chown(p, entry.pw_uid, entry.pw_gid)
        settings = ["-c", "listen_addresses=", "-k", str(self.socket_dir), "-p", str(self.port)]
        if not self.durable:
            settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        settings += ["-c", "shared_buffers=32MB", "-c", "max_connections=200"]
        try:
            self._pg(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                self.user,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                *(["--no-sync"] if not self.durable else []),
            )
            self._pg(
                "pg_ctl",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.base / "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                shlex.join(settings),
                "start",
            )
        except PostgresUnavailable:
            self._cleanup()
            raise
        self._started = True
        return self

    def stop(self) -> None:
        """Stop the server and delete its folder (a no-op when it is not running)."""
        if self._started:
            with contextlib.suppress(PostgresUnavailable):
                self._pg("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60", "stop")
            self._started = False
        self._cleanup()

    def create_database(self, name: str) -> str:
        """Create the database ``name`` and return its connection string."""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
            raise ValueError(f"invalid database name {name!r}")
        self._pg("createdb", "-h", str(self.socket_dir), "-p", str(self.port), "-U", self.user, name)
        return self.dsn(name)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PostgresServer({self.base})" if self.base else "PostgresServer(not started)"

    # --- helpers -------------------------------------------------------------------------------------------

    def _runner(self) -> list[str]:
        """The prefix that runs a command as the ``postgres`` user when we are root (PostgreSQL refuses root)."""
        if os.name != "posix" or os.geteuid() != 0:
            return []
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable(
                "running as root, and there is no 'postgres' user to run PostgreSQL as (PostgreSQL refuses to "
                "run as root; the Debian package creates the user)"
            ) from None
        if shutil.which("runuser"):
            return ["runuser", "-u", "postgres", "--"]
        return ["su", "postgres", "-s", "/bin/sh", "-c"]

    def _pg(self, tool: str, *args: str) -> None:
        assert self.bindir is not None
        cmd = [str(self.bindir / tool), *args]
        if self._run_as[:1] == ["su"]:
            cmd = [*self._run_as, shlex.join(cmd)]
        else:
            cmd = [*self._run_as, *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd="/")
        if result.returncode != 0:
            log = ""
            if self.base is not None and (self.base / "server.log").exists():
                log = (self.base / "server.log").read_text(errors="replace")[-2000:]
            raise PostgresUnavailable(
                f"{tool} failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
                + (f"\nserver log:\n{log}" if log else "")
            )

    def _cleanup(self) -> None:
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None
