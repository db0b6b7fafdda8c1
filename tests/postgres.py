"""Pytest fixtures for a real PostgreSQL server (``loopctl.testing.postgres.PostgresServer``), shared by every
test that needs one (the session store; durable execution later).

``postgres_server`` starts one throwaway cluster for the whole test run (a Unix socket in a temporary folder,
stopped and deleted at the end); ``postgres_dsn`` gives each test a fresh, empty schema of a test database;
``postgres_database`` a fresh database of its own. When PostgreSQL cannot be started the tests that need it
fail, saying why: they are never skipped silently. Set ``LOOPCTL_SKIP_POSTGRES=1`` to skip them on a
machine without PostgreSQL (``python3 make.py test`` installs it with apt-get when it runs as root).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from loopctl.testing.postgres import PostgresServer, PostgresUnavailable

SKIP_VAR = "LOOPCTL_SKIP_POSTGRES"
TEST_DATABASE = "loopctl_test"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the test run, with the database :data:`TEST_DATABASE` created."""
    if os.environ.get(SKIP_VAR) == "1":
        pytest.skip(f"{SKIP_VAR}=1: the PostgreSQL tests are skipped")
    server = PostgresServer()
    try:
        server.start()
        server.create_database(TEST_DATABASE)
    except PostgresUnavailable as exc:
        server.stop()
        pytest.fail(
            f"PostgreSQL could not be started: {exc}\n(set {SKIP_VAR}=1 to skip the PostgreSQL tests)", pytrace=False
        )
    yield server
    server.stop()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """A connection string whose tables go to a new, empty schema of the test database."""
    import psycopg

    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server.dsn(TEST_DATABASE), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return postgres_server.dsn(TEST_DATABASE, search_path=schema)


@pytest.fixture
def postgres_database(postgres_server: PostgresServer) -> str:
    """A connection string to a new, empty database of its own."""
    return postgres_server.create_database(f"db_{secrets.token_hex(6)}")
