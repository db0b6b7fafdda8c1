"""Opening a ``PostgresStore`` that no wait can open fails at once with libpq's reason (an unknown host, a
wrong password, a database that does not exist); before, each waited out the pool's 30-second
``connect_timeout`` and then said only "within 30 s". The password never shows."""

from __future__ import annotations

import time

import pytest

from loopctl.errors import StoreError

psycopg = pytest.importorskip("psycopg")

from loopctl.store.postgres import PostgresStore  # noqa: E402


def test_an_unknown_host_fails_at_once_naming_why() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        PostgresStore("postgresql://u:s3cret-pw@nonexistent-host.invalid/db")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "nonexistent-host.invalid" in message and "s3cret-pw" not in message
    assert "within" not in message  # the reason, not the timeout


def test_a_database_that_does_not_exist_fails_at_once(postgres_dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(postgres_dsn) | {"dbname": "no_such_database_here"}
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"no_such_database_here.*does not exist"):
        PostgresStore(make_conninfo(**{k: str(v) for k, v in params.items()}))
    assert time.monotonic() - started < 10
