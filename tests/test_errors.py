"""Every error of the tree pickles and unpickles as itself (a durable engine's records, multiprocessing)."""

from __future__ import annotations

import pickle

import pytest

import loopctl.errors as errors
from loopctl.engine import Outcome, OutcomeKind, Run
from loopctl.response import Usage

RUN: Run[str] = Run(Outcome(OutcomeKind.FAILED, "boom", "LoopError"), "", (), Usage(), 0.5)

SAMPLES: list[errors.LoopError] = [
    errors.LoopError("plain"),
    errors.InvalidMessage("parts[2].source.data", "base64 text"),
    errors.InvalidConversation(["problem one"]),
    errors.ConversationFileError("a.json", "not JSON"),
    errors.RateLimited("slow down", retry_after=2.5, provider="anthropic", status=429),
    errors.AuthenticationError("bad key", provider="openai", status=401, body={"error": {"code": "x"}}),
    errors.MissingAPIKey("openai", "OPENAI_API_KEY"),
    errors.ToolTimeout("grep", 3.0),
    errors.ConcurrentUpdate("s-1", "a" * 64, "b" * 64),
    errors.StoreCorrupt("bad row", session_id="s-1", node="ab"),
    errors.OutputValidationError(["age: Input should be a valid integer"]),
    errors.RunFailed("the run ended with outcome failed", RUN),
    errors.OutputInvalid("the run ended with outcome output_invalid", RUN, ["x: missing"]),
]


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_unpickles_as_the_same_class_with_the_same_text_and_attributes(error: errors.LoopError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert back.retryable == error.retryable
    assert vars(back).keys() == vars(error).keys()
    for name, value in vars(error).items():
        if name != "run":
            assert getattr(back, name) == value, name
    if isinstance(error, errors.RunError):
        assert back.run.outcome == RUN.outcome  # type: ignore[attr-defined]


def test_a_retryable_flag_set_on_the_instance_survives() -> None:
    error = errors.LoopError("custom")
    error.retryable = True
    assert pickle.loads(pickle.dumps(error)).retryable is True


def test_the_overflow_patterns_compile_when_first_read() -> None:
    # A fresh process that imports the errors compiles none of the patterns (docs/performance.md, section 2);
    # reading OVERFLOW_NUMBERS compiles them once, the same tuple on every read, and overflow_counts uses it.
    import json
    import subprocess
    import sys

    probe = (
        "import json, re, loopctl.errors as e\n"
        "before = e._overflow_numbers.cache_info().currsize\n"
        "numbers = e.OVERFLOW_NUMBERS\n"
        "print(json.dumps([before, numbers is e.OVERFLOW_NUMBERS, len(numbers),"
        " all(isinstance(p, re.Pattern) and isinstance(n, str) for p, n in numbers)]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [0, True, 11, True]
    assert "OVERFLOW_NUMBERS" in dir(errors)
    assert errors.overflow_counts("prompt is too long: 208,310 tokens > 200000 maximum") == (208310, 200000)
    missing = "NOT_THERE"  # a name mypy would refuse as an attribute
    with pytest.raises(AttributeError, match="no attribute 'NOT_THERE'"):
        getattr(errors, missing)
