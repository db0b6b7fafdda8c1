"""The JSON forms of what crosses a durable step's boundary read back as the same values."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopctl.durable._payloads import (
    OutputValues,
    check_from_dict,
    check_to_dict,
    dumps,
    error_from_dict,
    error_to_dict,
    loads,
    record_from_dict,
    record_to_dict,
    response_from_dict,
    response_to_dict,
    run_from_dict,
    run_to_dict,
)
from loopctl.engine.machine import Outcome, OutcomeKind, OutputCheck
from loopctl.engine.run import NO_OUTPUT, Run, ToolCallRecord, Turn
from loopctl.errors import (
    AuthenticationError,
    ContextOverflow,
    LoopError,
    OutputInvalid,
    OutputValidationError,
    RateLimited,
    ToolTimeout,
)
from loopctl.message import Message, Role
from loopctl.output import NativeOutput, OutputTool
from loopctl.response import InvalidToolCall, ModelResponse, StopReason, Usage
from tests import strategies as s
from tests.durable import workload

usages = st.builds(Usage, *[st.integers(0, 2**40)] * 5)


@given(
    parts=st.lists(s.wire_part, max_size=4),
    usage=usages,
    stop=st.sampled_from(list(StopReason)),
    raw=st.none() | s.short_text,
    invalid=st.lists(st.builds(InvalidToolCall, s.identifier, s.identifier, s.text, s.short_text), max_size=2),
)
def test_a_model_response_round_trips_through_json(parts, usage, stop, raw, invalid) -> None:
    response = ModelResponse(
        Message.new(Role.ASSISTANT, parts), usage, stop, raw, "m-1", "resp-1", invalid_tool_calls=tuple(invalid)
    )
    assert response_from_dict(loads(dumps(response_to_dict(response)))) == response


@given(call=s.tool_call_part(), data=st.data(), duration=st.floats(0, 1e6), ran=st.booleans())
def test_a_tool_call_record_round_trips_through_json(call, data, duration, ran) -> None:
    record = ToolCallRecord(call, data.draw(s.tool_result_part(call)), duration, ran)
    assert record_from_dict(loads(dumps(record_to_dict(record)))) == record


def test_a_recorded_error_is_the_same_class_with_the_same_text_and_attributes() -> None:
    original = RateLimited("slow down", retry_after=2.5, provider="anthropic", status=429)
    back = error_from_dict(loads(dumps(error_to_dict(original))))
    assert type(back) is RateLimited
    assert str(back) == str(original) == "anthropic: slow down (HTTP 429)"
    assert back.retryable is True
    assert (back.retry_after, back.status, back.provider) == (2.5, 429, "anthropic")  # type: ignore[attr-defined]


def test_a_recorded_context_overflow_is_still_caught_as_one() -> None:
    back = error_from_dict(error_to_dict(ContextOverflow("prompt is too long", provider="openai", status=400)))
    assert isinstance(back, ContextOverflow)
    assert back.retryable is False


def test_an_error_of_a_class_from_outside_loopctl_keeps_its_name_and_retryability() -> None:
    class QuotaGone(LoopError):
        retryable = True

    back = error_from_dict(error_to_dict(QuotaGone("no quota")))
    assert type(back).__name__ == "QuotaGone"
    assert isinstance(back, LoopError)
    assert back.retryable is True
    assert str(back) == "no quota"
    assert type(error_from_dict(error_to_dict(QuotaGone("again")))) is type(back)


def test_non_scalar_attributes_are_left_out() -> None:
    error = AuthenticationError("bad key", provider="openai", status=401, body={"error": {"code": "x"}})
    data = error_to_dict(error)
    assert "body" not in data["attrs"]
    assert data["attrs"]["status"] == 401
    assert str(error_from_dict(data)) == str(error)


def test_a_tool_timeout_reads_back_with_its_fields() -> None:
    back = error_from_dict(error_to_dict(ToolTimeout("grep", 3.0)))
    assert (back.tool, back.timeout, str(back)) == ("grep", 3.0, "tool 'grep' timed out after 3 s")  # type: ignore[attr-defined]


# --- typed output and whole runs ------------------------------------------------------------------------------


@given(label=st.text(max_size=20), score=st.integers(-(2**53), 2**53))
def test_a_typed_value_crosses_as_json_and_is_validated_again(label: str, score: int) -> None:
    values = OutputValues(workload.Verdict)
    value = workload.Verdict(label=label, score=score)
    back = values.load(loads(dumps(values.dump(value))))
    assert type(back) is workload.Verdict
    assert back == value


@pytest.mark.parametrize(
    ("output_type", "value"),
    [
        (list[int], [1, 2, 3]),
        (dict[str, float], {"a": 1.5}),
        (datetime.date, datetime.date(2026, 12, 1)),
        (OutputTool(workload.Verdict), workload.Verdict(label="x", score=1)),
        (NativeOutput(list[workload.Verdict]), [workload.Verdict(label="y", score=2)]),
        (None, "plain text"),
    ],
)
def test_each_kind_of_output_type_round_trips(output_type: object, value: object) -> None:
    values = OutputValues(output_type)
    assert values.load(loads(dumps(values.dump(value)))) == value


def test_a_verdict_round_trips_with_its_check_and_problems() -> None:
    values = OutputValues(workload.Verdict)
    for verdict in [
        (OutputCheck("f1"), workload.Verdict(label="ok", score=5), []),
        (OutputCheck("f1", "The answer is not valid: score: missing.", "score: missing"), NO_OUTPUT, ["x"]),
        (None, NO_OUTPUT, []),
    ]:
        assert check_from_dict(loads(dumps(check_to_dict(*verdict, values))), values) == verdict


def _run(outcome: Outcome, output: object, error: BaseException | None) -> Run[object]:
    reply = Message.assistant("done")
    turn = Turn(1, (Message.user("go"),), reply, (), Usage(3, 1), StopReason.END_TURN, 0.25)
    return Run(outcome, output, (turn,), Usage(3, 1), 0.5, error, text="done")


def test_a_run_round_trips_with_its_typed_output_its_text_and_its_error() -> None:
    values = OutputValues(workload.Verdict)
    ok = _run(Outcome(OutcomeKind.COMPLETED), workload.Verdict(label="ok", score=5), None)
    back = run_from_dict(loads(dumps(run_to_dict(ok, values))), values)
    assert (back.output, back.text, back.error, back.turns, back.usage) == (ok.output, "done", None, ok.turns, ok.usage)
    invalid = _run(
        Outcome(OutcomeKind.OUTPUT_INVALID, "score: missing", "OutputValidationError"),
        NO_OUTPUT,
        OutputValidationError(["score: missing"]),
    )
    back = run_from_dict(loads(dumps(run_to_dict(invalid, values))), values)
    assert back.outcome == invalid.outcome
    assert type(back.error) is OutputValidationError
    assert back.error.errors == ["score: missing"]
    with pytest.raises(OutputInvalid) as raised:
        back.output  # noqa: B018 - reading it raises
    assert raised.value.errors == ["score: missing"]


def test_an_output_validators_own_exception_keeps_its_builtin_class() -> None:
    back = error_from_dict(error_to_dict(ValueError("the ledger is closed")))
    assert type(back) is ValueError
    assert str(back) == "the ledger is closed"
