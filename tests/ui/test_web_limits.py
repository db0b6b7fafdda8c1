"""``loopctl web`` keeps its per-session page records (runs, diffs) bounded: they grew for the server's
lifetime, one entry per run and per file change of every session ever opened."""

from __future__ import annotations

import pytest

from loopctl.ui import web


def test_touch_keeps_the_most_recently_used_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web, "MAX_SESSIONS", 3)
    table: dict[str, list[int]] = {}
    for sid in ("a", "b", "c"):
        web._touch(table, sid, list).append(ord(sid))
    web._touch(table, "a", list).append(0)  # a is used again: b is now the oldest
    web._touch(table, "d", list)
    assert list(table) == ["c", "a", "d"]
    assert table["a"] == [97, 0]  # kept as it was, not made again


def test_the_tables_stay_bounded_over_many_sessions() -> None:
    runs: dict[str, list[int]] = {}
    for n in range(web.MAX_SESSIONS * 2):
        web._touch(runs, f"s{n}", list).append(n)
    assert len(runs) == web.MAX_SESSIONS == 256
    assert next(iter(runs)) == f"s{web.MAX_SESSIONS}"
