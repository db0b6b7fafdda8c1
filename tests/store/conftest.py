"""Fixtures: each store test runs against both backends, a SQLite file and a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loopctl.store import SessionStore, SQLiteStore

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend's name."""
    return str(request.param)


@pytest.fixture
def open_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SessionStore]]:
    """Opens (another) store on the same database: several stores stand for several processes."""
    opened: list[SessionStore] = []
    if backend == "sqlite":
        path = tmp_path / "sessions.db"

        def make() -> SessionStore:
            opened.append(SQLiteStore(path))
            return opened[-1]

    else:
        dsn = request.getfixturevalue("postgres_dsn")

        def make() -> SessionStore:
            from loopctl.store import PostgresStore

            opened.append(PostgresStore(dsn, max_size=4))
            return opened[-1]

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(open_store: Callable[[], SessionStore]) -> SessionStore:
    """A store on an empty database."""
    return open_store()


@pytest.fixture
def location(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the ``store`` fixture's database is, for worker processes: ``sqlite:PATH`` or ``postgres:DSN``."""
    if backend == "sqlite":
        return f"sqlite:{tmp_path / 'sessions.db'}"
    return f"postgres:{request.getfixturevalue('postgres_dsn')}"
