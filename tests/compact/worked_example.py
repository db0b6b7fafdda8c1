"""The worked example of docs/compaction.md, built here so a test keeps the document's numbers true."""

from __future__ import annotations

from loopctl.compact import ContextBudget, HeuristicTokenCounter
from loopctl.message import Message, Retention, Role, TextPart, ThinkingPart, ToolCallPart, ToolResultPart

SOURCE = "def export(rows):\n    client = s3_client()\n    for row in rows:\n        client.put(row)\n" * 30
LOGS = "2024-05-02T03:14:07Z ERROR export failed: ExpiredToken (token age 61m)\n" * 28
CONFIG = "export:\n  bucket: nightly-exports\n  token_ttl_minutes: 60\n" * 30
TESTS = "tests/test_export.py::test_refresh PASSED\n" * 30


def _call(i: int, name: str, **args: object) -> ToolCallPart:
    return ToolCallPart(id=f"c{i}", name=name, input=args)


def _result(i: int, name: str, output: str, retention: Retention | None = None) -> ToolResultPart:
    return ToolResultPart(call_id=f"c{i}", name=name, output=output, is_error=False, retention=retention)


def conversation() -> list[Message]:
    A, U = Role.ASSISTANT, Role.USER
    return [
        Message.user("Find out why the nightly export fails, and fix it."),
        Message.new(A, [_call(1, "read_file", path="export.py")]),
        Message.new(U, [_result(1, "read_file", SOURCE)]),
        Message.new(A, [_call(3, "save_note", text="root cause")]),
        Message.new(
            U,
            [
                _result(
                    3,
                    "save_note",
                    "Root cause: the S3 token expires after 60 min; the export runs 90 min.",
                    Retention.DURABLE,
                )
            ],
        ),
        Message.new(A, [_call(2, "search_logs", query="export failed")]),
        Message.new(U, [_result(2, "search_logs", LOGS, Retention.REQUERY)]),
        Message.new(
            A,
            [
                ThinkingPart(text="The TTL is in config.yaml.", signature="sig", provider="anthropic"),
                _call(4, "read_file", path="config.yaml"),
            ],
        ),
        Message.new(U, [_result(4, "read_file", CONFIG)]),
        Message.new(A, [TextPart(text="Token refresh added."), _call(5, "run_tests", path="tests/test_export.py")]),
        Message.new(U, [_result(5, "run_tests", TESTS)]),
        Message.assistant("The export now refreshes its S3 token every 30 minutes; the tests pass."),
    ]


def budget() -> ContextBudget:
    return ContextBudget(window=2_500, protected_tail=300, counter=HeuristicTokenCounter())


SUMMARY = (
    "The user asked why the nightly export fails. export.py uploads every row with one S3 client created "
    "at the start; the root cause is in the durable note below. The logs (re-run search_logs "
    "'export failed' to see them) were not shown here."
)
