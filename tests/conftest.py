"""Shared test helpers: the recorded provider traffic (copied from ../shared/fixtures, see its INDEX.md), and a
real PostgreSQL server (:mod:`tests.postgres`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.postgres import postgres_database, postgres_dsn, postgres_server

__all__ = ["postgres_database", "postgres_dsn", "postgres_server"]  # fixtures for every test module

TRAFFIC = Path(__file__).parent / "fixtures" / "provider-traffic"


class Recording:
    """One recorded exchange: ``<provider>/<name>.*`` files."""

    def __init__(self, provider: str, name: str) -> None:
        self.provider = provider
        self.name = name
        self.base = TRAFFIC / provider

    def _path(self, suffix: str) -> Path:
        return self.base / f"{self.name}.{suffix}"

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads(self._path("meta.json").read_text())

    @property
    def request(self) -> dict[str, Any]:
        return json.loads(self._path("request.json").read_text())

    def has(self, suffix: str) -> bool:
        return self._path(suffix).exists()

    @property
    def response_json(self) -> Any:
        return json.loads(self._path("response.json").read_text())

    @property
    def response_sse(self) -> bytes:
        """The streamed body, byte-exact."""
        if self.has("response.sse"):
            return self._path("response.sse").read_bytes()
        # The one response-only fixture stores one SSE data payload per line, framing not recorded.
        lines = self._path("response.chunks.jsonl").read_text().splitlines()
        return b"".join(b"data: " + line.encode() + b"\n\n" for line in lines if line.strip())


def recordings(provider: str, prefix: str = "") -> list[str]:
    """Names of the recordings of ``provider`` whose names start with ``prefix``."""
    return sorted(p.name[: -len(".meta.json")] for p in (TRAFFIC / provider).glob(f"{prefix}*.meta.json"))


@pytest.fixture
def traffic() -> type[Recording]:
    return Recording
