"""Fixtures of the durable tests: an in-process DBOS on a SQLite system database in the test's folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


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
