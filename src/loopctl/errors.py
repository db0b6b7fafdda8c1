"""The one error tree of loopctl.

Every error the library raises on purpose derives from :class:`LoopError`, so a caller can catch one base.
Each error says, in its text, what was wrong and where, and answers :attr:`LoopError.retryable`: whether
sending the same thing again later could succeed (a rate limit, an overload, a dropped stream) or not (a bad
conversation, a bad key).

The tree is split the way h11 splits its protocol errors: errors about what *the caller* built
(:class:`InvalidMessage`, :class:`InvalidConversation`, :class:`ConversationFileError`) are also
``ValueError``; errors about what *the provider* sent or said are :class:`ProviderError`.

This module is pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loopctl._lazy import LazyModule

if TYPE_CHECKING:
    import loopctl.engine.limits
    import loopctl.engine.permission
    import loopctl.engine.run
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = [
    "ApprovalError",
    "AuthenticationError",
    "AwaitingApproval",
    "CompactionError",
    "CompactionNoProgress",
    "CompactionOverflow",
    "ConcurrentUpdate",
    "ConnectionFailed",
    "OVERFLOW_NUMBERS",
    "ContextOverflow",
    "ConversationFileError",
    "CostUnknown",
    "FallbackExhausted",
    "FallbackFailed",
    "HookFailed",
    "InvalidBaseURL",
    "InvalidConversation",
    "InvalidMessage",
    "InvalidModelSpec",
    "InvalidRequest",
    "LoopDetected",
    "LoopError",
    "MachineStateError",
    "MissingAPIKey",
    "MaxTokensReached",
    "ModelNotFound",
    "OutputInvalid",
    "OutputValidationError",
    "Overloaded",
    "ProviderError",
    "ProviderProtocolError",
    "ProviderTimeout",
    "RateLimited",
    "RunCancelled",
    "RunError",
    "RunFailed",
    "RunRefused",
    "ServerError",
    "SessionBusy",
    "SessionExists",
    "SessionNotFound",
    "StoreCorrupt",
    "StoreError",
    "StreamTruncated",
    "ToolError",
    "ToolTimeout",
    "TurnLimitReached",
    "UnsupportedContent",
    "UsageLimitReached",
]


class LoopError(Exception):
    """Base of every error loopctl raises on purpose.

    ``str(err)`` is a human sentence naming what went wrong and where. :attr:`retryable` says whether the
    same operation may succeed if tried again later.

    ``message`` is that sentence, also kept as :attr:`message`.
    """

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its class, its args and its attributes, rebuilt without calling ``__init__`` (whose
        # parameters differ from ``args`` in most subclasses): so an error crosses a process boundary
        # (multiprocessing, a durable engine's records) as itself.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[LoopError], args: tuple[Any, ...], state: dict[str, Any]) -> LoopError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# --- errors in what the caller built -------------------------------------------------------------------


class InvalidMessage(LoopError, ValueError):
    """A message or part that does not fit the model (``docs/wire-format.md``).

    Raised for a wrong type, a missing required key, an unknown part ``type``, an ``encoding`` other than
    ``base64``, image data that is not base64, or a string that cannot be written as UTF-8 (a lone
    surrogate). :attr:`path` is where the bad value sits, in the form ``parts[2].source.data``
    (empty for the top-level value); the text says what was expected.
    """

    def __init__(self, path: str, expected: str) -> None:
        self.path = path
        self.expected = expected
        where = path or "<message>"
        super().__init__(f"{where}: {expected}")


class InvalidConversation(LoopError, ValueError):
    """A conversation that breaks one or more of the pairing and placement rules.

    Raised by ``check_conversation(messages, strict=True)``; :attr:`problems` holds every
    :class:`~loopctl.message.ConversationProblem` found, each with its path and the rule it breaks.
    """

    def __init__(self, problems: list[object]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the conversation breaks {len(problems)} rule(s):\n{lines}")


class InvalidModelSpec(LoopError, ValueError):
    """A model string that names no known provider, or no model (``"provider:model"``: ``docs/guides/models.md``).

    Raised by :func:`~loopctl.providers.from_string` and by :class:`~loopctl.Agent` when it is made.
    :attr:`spec` is the string, :attr:`problem` what is wrong with it, :attr:`known` the forms accepted
    (``"openai:MODEL"``...), and :attr:`suggestion` the spec it most likely meant (``"openai:gpt-5"`` for
    ``"gpt-5"``), or ``None``.
    """

    def __init__(self, spec: str, problem: str, *, known: tuple[str, ...], suggestion: str | None = None) -> None:
        self.spec = spec
        self.problem = problem
        self.known = known
        self.suggestion = suggestion
        hint = f"; did you mean {suggestion!r}?" if suggestion is not None else ""
        super().__init__(f"{problem}; expected one of {', '.join(known)}{hint}")


class InvalidBaseURL(LoopError, ValueError):
    """A client's base URL (given, or from ``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` or ``GEMINI_BASE_URL``)
    that is not an ``http://`` or ``https://`` URL with a host (a port that is not a number, spaces around it:
    the SDK sent to ``%20http://...``), raised when the client is made.

    Such a URL (``localhost:11434/v1``, the scheme left out) otherwise failed every request as
    :class:`ConnectionFailed`, each retried. :attr:`url` is the URL, :attr:`source` where it came from
    (``"base_url"``, or the environment variable's name), and :attr:`suggestion` the URL it most likely meant
    (``http://`` put in front), or ``None``.
    """

    def __init__(self, url: str, suggestion: str | None = None, *, source: str = "base_url") -> None:
        self.url = url
        self.suggestion = suggestion
        self.source = source
        hint = f"; did you mean {suggestion!r}?" if suggestion is not None else ""
        where = "" if source == "base_url" else f" (from {source})"
        super().__init__(
            f"base URL {url!r}{where} is not an http:// or https:// URL with a host (a port, if any, a number; "
            f"no spaces around it){hint}"
        )


class ConversationFileError(LoopError, ValueError):
    """A conversation file that cannot be read: not JSON, the wrong shape, or a newer ``format_version``.

    :attr:`source` names the file (a path, or ``"<string>"``) and ``problem`` says what is wrong with it.
    Reading never changes the file.
    """

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


class UnsupportedContent(LoopError, ValueError):
    """A request builder met content it cannot carry (for example a part type from a newer release).

    The text names the part and its path in the conversation.
    """


class MachineStateError(LoopError, RuntimeError):
    """The loop machine was fed something its current state does not accept (you misused it)."""


# --- errors from the provider ----------------------------------------------------------------------------


class ProviderError(LoopError):
    """Something the provider said or sent.

    :attr:`provider` names the API (``"anthropic"``, ``"openai"``, ``"openai-responses"``, ``"gemini"``),
    :attr:`status` the HTTP status when there was one, :attr:`provider_message` the provider's own error
    text, and :attr:`body` the raw error body (a JSON value or text) when one was received.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        provider_message: str | None = None,
        body: object = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.provider_message = provider_message
        self.body = body
        prefix = f"{provider}: " if provider else ""
        status_part = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{prefix}{message}{status_part}")


class RateLimited(ProviderError):
    """The provider refused the request for rate or quota reasons (HTTP 429). Retryable.

    :attr:`retry_after` is the wait the provider asked for, in seconds, or ``None``.
    """

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)  # type: ignore[arg-type]


class Overloaded(ProviderError):
    """The provider is overloaded (Anthropic 529 ``overloaded_error``, HTTP 503). Retryable.

    :attr:`retry_after` is the wait the provider asked for, in seconds, or ``None``.
    """

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kw)  # type: ignore[arg-type]


class ServerError(ProviderError):
    """The provider failed on its side (HTTP 5xx other than an overload). Retryable."""

    retryable = True


class ConnectionFailed(ProviderError):
    """The provider could not be reached (DNS, refused or reset connection) before a reply began. Retryable."""

    retryable = True


class ProviderTimeout(ProviderError):
    """The provider did not answer within the client's timeout. Retryable."""

    retryable = True


class StreamTruncated(ProviderError):
    """A reply ended before it was complete: a stream before its final event, or a whole (JSON) body before
    its declared length (the connection dropped after the reply began). Retryable.

    A retry starts the message afresh; nothing of the cut reply is kept.
    """

    retryable = True


class InvalidRequest(ProviderError):
    """The provider rejected the request as malformed (HTTP 400 ``invalid_request_error`` and kin)."""


class ContextOverflow(InvalidRequest):
    """The request is longer than the model's context window (a provider 400 that says so).

    :attr:`prompt_tokens` is the size of the prompt the provider refused and :attr:`context_window` the most
    it would have taken for that request (its window, less the output tokens asked for when it counts them
    too), both in the provider's tokens; ``None`` when it did not say. When not given, they are read from the
    provider's error: llama.cpp's ``n_prompt_tokens`` and ``n_ctx`` fields, else the numbers in the message
    as each provider words it (see :data:`OVERFLOW_NUMBERS`).
    """

    def __init__(
        self, message: str, *, prompt_tokens: int | None = None, context_window: int | None = None, **kw: Any
    ) -> None:
        super().__init__(message, **kw)
        if prompt_tokens is None or context_window is None:
            found = overflow_counts(self.provider_message or message, self.body)
            if found is not None:
                prompt_tokens, context_window = found
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window


class ModelNotFound(InvalidRequest):
    """The provider does not know the model, or the account may not use it (HTTP 404)."""


class AuthenticationError(ProviderError):
    """The API key is missing, wrong or lacks permission (HTTP 401/403)."""


class MissingAPIKey(AuthenticationError):
    """No API key was given and the provider's usual environment variable is unset.

    :attr:`env_var` names the variable to set.
    """

    def __init__(self, provider: str, env_var: str) -> None:
        self.env_var = env_var
        super().__init__(f"no API key: set the {env_var} environment variable", provider=provider)


class ProviderProtocolError(ProviderError):
    """The provider sent something that is not a valid reply (garbage where JSON or SSE belongs)."""


class FallbackFailed(LoopError):
    """Every client of a :class:`~loopctl.providers.FallbackClient` failed the call, the last one in a way that
    would have moved it to another client. :attr:`errors` holds each attempt's ``(label, error)``, in the
    order tried (``label`` is ``"provider:model"``; a client retried counts once, with its last error).
    :attr:`retryable` is true when every error was."""

    def __init__(self, errors: Sequence[tuple[str, LoopError]]) -> None:
        self.errors = tuple(errors)
        self.retryable = bool(self.errors) and all(e.retryable for _, e in self.errors)
        listed = "; ".join(f"{label}: {type(e).__name__}: {e}" for label, e in self.errors)
        super().__init__(f"every model of the fallback chain failed ({listed})")


# --- errors in the loop itself ----------------------------------------------------------------------------


class ToolError(LoopError):
    """A tool could not run. The engine turns these into error results the model reads; they reach the
    caller only from direct tool calls."""


class ToolTimeout(ToolError):
    """A tool ran past its timeout (seconds in :attr:`timeout`)."""

    def __init__(self, tool: str, timeout: float) -> None:
        self.tool = tool
        self.timeout = timeout
        super().__init__(f"tool {tool!r} timed out after {timeout:g} s")


class HookFailed(LoopError):
    """A hook (:class:`~loopctl.engine.Hook`) raised, or returned what its method may not: the run fails with
    this error. :attr:`hook` names the hook (its ``name`` attribute, else its class), :attr:`method` the
    method (``before_model``, ``after_model``, ``before_tool``, ``after_tool``), :attr:`call_id` the tool
    call whose ``before_tool`` or ``after_tool`` it was (``None`` for the model's hooks); the hook's own
    exception is the ``__cause__``.

    ``problem`` is a sentence on what went wrong (the exception, or what the method returned).
    """

    def __init__(self, hook: str, method: str, problem: str, *, call_id: str | None = None) -> None:
        self.hook = hook
        self.method = method
        self.call_id = call_id
        super().__init__(f"hook {hook}.{method} failed: {problem}")


class ApprovalError(LoopError, ValueError):
    """Approvals that do not fit the loop's run: ``approvals=`` for a loop whose run is not paused, a call id
    that awaits no approval, a decision of the wrong type, or new input given to a paused run without
    deciding it (decide its calls, denying them all to drop them, or, on a
    :class:`~loopctl.engine.BareLoop`, end it with ``loop.machine.cancel()``)."""


class CostUnknown(LoopError):
    """A run with a cost limit got a reply whose price is unknown (:mod:`loopctl.pricing`), so the limit
    cannot be checked: the run stops rather than spend unchecked."""


class CompactionError(LoopError):
    """A compaction pass could not bring the conversation under the budget.

    :attr:`tokens_before` and :attr:`tokens_after` are estimates in tokens; :attr:`target` is the size the
    pass aimed for, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        target: int | None = None,
    ) -> None:
        self.tokens_before = tokens_before
        self.tokens_after = tokens_after
        self.target = target
        super().__init__(message)


class CompactionNoProgress(CompactionError):
    """A compaction pass saved nothing; the run ends rather than loop forever."""


class CompactionOverflow(CompactionError):
    """Even the parts a pass must keep (the first message, ``Durable`` results with their calls, the
    protected tail) do not fit the target; the numbers are on the error."""


# --- errors of the session store (loopctl.store) ----------------------------------------------------------


class StoreError(LoopError):
    """A session store could not do what was asked: the database cannot be opened or written, its schema is
    newer than this release reads, or a base class for the more specific errors below.

    :attr:`session_id` names the session concerned, when there is one.
    """

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message)


class ConcurrentUpdate(StoreError):
    """An append named a head that is no longer the session's head: another writer moved it first.

    Nothing was written. :attr:`expected` is the head the writer named and :attr:`actual` the head it found
    (node ids in hex, ``None`` for an empty or missing session); :attr:`expected_revision` and
    :attr:`actual_revision` the revisions, when the writer named one and the head is the same (another
    writer saved a new state at that head). Load the session again and redo the work on top of the new
    head; retrying the same append cannot succeed.
    """

    def __init__(
        self,
        session_id: str,
        expected: str | None,
        actual: str | None,
        *,
        expected_revision: int | None = None,
        actual_revision: int | None = None,
    ) -> None:
        self.expected = expected
        self.actual = actual
        self.expected_revision = expected_revision
        self.actual_revision = actual_revision
        if expected == actual and expected_revision is not None:
            what = (
                f"its revision is {actual_revision}, not {expected_revision} as this writer expected (same head "
                f"{_short(actual)}, a new state)"
            )
        else:
            what = f"its head is {_short(actual)}, not {_short(expected)} as this writer expected"
        super().__init__(
            f"session {session_id!r} was changed by another writer: {what}; nothing was written (load the session "
            "again)",
            session_id=session_id,
        )


class SessionBusy(LoopError, RuntimeError):
    """A run was started on a conversation that is running already: a second ``run()`` on one
    :class:`~loopctl.engine.BareLoop`, or on one session of an :class:`~loopctl.agent.Agent` (the same session
    id of the same store, or the same in-memory conversation), while the first is not over. Nothing of the
    second run happened: no input was added, nothing was saved. Wait for the first run, or run the second on
    another session (``agent.session(..., on_busy="wait")`` queues runs of one session instead).

    :attr:`session_id` names the session, when the conversation has one.
    """

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message)


class SessionNotFound(StoreError, LookupError):
    """No session of that id in the store (or no node of that id, for a lookup by node)."""


class SessionExists(StoreError, ValueError):
    """A new session (a fork, an import) was given the id of a session that already exists."""


class StoreCorrupt(StoreError):
    """A stored row cannot be read back: a node whose message does not parse, a chain with a missing link, a
    state document of the wrong shape. :attr:`node` is the node's id (hex) when one is concerned.
    ``store.verify(session_id)`` lists every such problem of a session."""

    def __init__(self, message: str, *, session_id: str | None = None, node: str | None = None) -> None:
        self.node = node
        super().__init__(message, session_id=session_id)


def _short(node: str | None) -> str:
    return "empty" if node is None else node[:12]


# --- how a run ended -----------------------------------------------------------------------------------------


class OutputValidationError(LoopError, ValueError):
    """The model's answer did not validate as the run's output type, after every retry the run allowed.

    :attr:`errors` lists what was wrong, one sentence each (for pydantic errors: ``location: message``), the
    same text the model was sent.
    """

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("the output is not valid: " + "; ".join(errors))


class RunError(LoopError):
    """A run that did not complete, raised by :meth:`loopctl.engine.Run.raise_for_outcome` (as httpx's
    ``raise_for_status`` raises for an error status). :attr:`run` is the record (outcome, turns, usage); the
    error that ended the run, if one did, is ``run.error`` and this error's ``__cause__``. Each outcome kind
    has its subclass, so ``except RunCancelled`` catches just that."""

    def __init__(self, message: str, run: loopctl.engine.run.Run[Any]) -> None:
        self.run = run
        super().__init__(message)


class RunFailed(RunError):
    """An error ended the run (outcome ``FAILED``, or ``CONTEXT_OVERFLOW``: it could not fit the window)."""


class RunCancelled(RunError):
    """The caller cancelled the run (outcome ``CANCELLED``)."""


class TurnLimitReached(RunError):
    """The run made ``max_turns`` model calls without an answer (outcome ``MAX_TURNS``)."""


class MaxTokensReached(RunError):
    """The answer was cut off by the output token limit (outcome ``MAX_TOKENS``)."""


class RunRefused(RunError):
    """The provider stopped the answer for content filtering or safety (outcome ``REFUSED``)."""


class UsageLimitReached(RunError):
    """A usage limit ended the run (outcome ``LIMIT_REACHED``); :attr:`limit` says which (``dimension``,
    ``spent``, ``limit``)."""

    def __init__(
        self, message: str, run: loopctl.engine.run.Run[Any], limit: loopctl.engine.limits.LimitHit | None
    ) -> None:
        self.limit = limit
        super().__init__(message, run)


class LoopDetected(RunError):
    """The model repeated the same tool call past the loop-detection limit (outcome ``LOOP_DETECTED``)."""


class FallbackExhausted(RunError):
    """Every model of the fallback chain failed (outcome ``FALLBACK_EXHAUSTED``); :attr:`errors` lists each
    ``(label, error)`` (``run.error`` is the :class:`FallbackFailed`)."""

    def __init__(self, message: str, run: loopctl.engine.run.Run[Any], errors: Sequence[tuple[str, LoopError]]) -> None:
        self.errors = tuple(errors)
        super().__init__(message, run)


class AwaitingApproval(RunError):
    """The run is paused on tool calls that await approval (outcome ``AWAITING_APPROVAL``); :attr:`pending`
    lists them. Continue it with ``loop.run(approvals={call_id: Approve() | Deny(reason) | Modify(input)})``."""

    def __init__(
        self,
        message: str,
        run: loopctl.engine.run.Run[Any],
        pending: Sequence[loopctl.engine.permission.PendingApproval],
    ) -> None:
        self.pending = tuple(pending)
        super().__init__(message, run)


class OutputInvalid(RunError):
    """The answer did not validate as the output type, after the retries (outcome ``OUTPUT_INVALID``);
    :attr:`errors` lists what was wrong."""

    def __init__(self, message: str, run: loopctl.engine.run.Run[Any], errors: list[str]) -> None:
        self.errors = errors
        super().__init__(message, run)


# --- the numbers of a context overflow -------------------------------------------------------------------------

_N = r"(\d[\d,]*)"

_OVERFLOW_SOURCES: tuple[tuple[str, int, str], ...] = (
    # Anthropic: "prompt is too long: 208310 tokens > 200000 maximum", and "input length and `max_tokens` exceed
    # context limit: 188240 + 21333 > 200000".
    (_N + r" tokens > " + _N, 0, "n max"),
    (r"exceed context limit: " + _N + r" \+ " + _N + r" > " + _N, 0, "n out window"),
    # llama.cpp (tools/server/server-context.cpp, ERROR_TYPE_EXCEED_CONTEXT_SIZE): "request (12010 tokens)
    # exceeds the available context size (8192 tokens), try increasing it".
    (r"\(" + _N + r" tokens\) exceeds the available context size \(" + _N + r" tokens\)", 0, "n max"),
    # vLLM (vllm/renderers/params.py): "You passed 9000 input tokens and requested 1000 output tokens. However,
    # the model's context length is only 8192 tokens, resulting in a maximum input length of 7192 tokens."
    (r"passed " + _N + r" input tokens.*?maximum input length of " + _N + r" tokens", re.S, "n max"),
    # vLLM (vllm/entrypoints/openai/serving_engine.py, v0.10.2 on): "'max_tokens' or 'max_completion_tokens' is
    # too large: 1000. This model's maximum context length is 8192 tokens and your request has 7500 input tokens
    # (1000 > 8192 - 7500)."
    (r"too large: " + _N + r"\. This model's maximum context length is " + _N + r" tokens and your "
                r"request has " + _N + r" input tokens", 0, "out window n"),
    # vLLM's later wording: "This model's maximum context length is 32768 tokens. However, you requested 1000
    # output tokens and your prompt contains at least 32000 input tokens, for a total of ...".
    (r"maximum context length is " + _N + r" tokens\. However, you requested " + _N + r" output "
                r"tokens and your prompt contains (?:at least )?" + _N + r" input tokens", 0, "window out n"),
    # vLLM (vllm/entrypoints/renderer.py): "This model's maximum context length is 8192 tokens. However, your
    # request has 9000 input tokens. Please reduce the length of the input messages."
    (r"maximum context length is " + _N + r" tokens\. However, your request has " + _N + " input tokens", 0,
     "max n"),
    # OpenAI, and vLLM before 0.10.2: "This model's maximum context length is 8192 tokens. However, you requested
    # 9224 tokens (1224 in the messages, 8000 in the completion)."
    (r"maximum context length is " + _N + r" tokens\. However, you requested " + _N + r" tokens \("
                + _N + r" in the messages, " + _N + r" in the completion\)", 0, "window total n out"),
    # OpenAI: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532
    # tokens."
    (r"maximum context length is " + _N + r" tokens.*?resulted in " + _N + r" tokens", re.S, "max n"),
    # Gemini: "The input token count (1572864) exceeds the maximum number of tokens allowed (1048576)".
    (r"input token count \(" + _N + r"\) exceeds the maximum number of tokens allowed \(" + _N + r"\)", 0,
     "n max"),
    # Ollama's MLX runner (x/mlxrunner/pipeline.go): "input length (9000 tokens) exceeds the model's maximum
    # context length (8192 tokens)".
    (r"input length \(" + _N + r" tokens\) exceeds the model's maximum context length \(" + _N
                + r" tokens\)", 0, "n max"),
)  # fmt: skip


if TYPE_CHECKING:  # compiled when first read (module __getattr__): only an overflow error is read with them
    OVERFLOW_NUMBERS: tuple[tuple[re.Pattern[str], str], ...]
    """How each provider states the size of a prompt it refused and the most it takes: a pattern, and the names of
    its groups in order (``n``: the prompt's tokens; ``max``: the most it takes; ``window``, ``out``: the window and
    the output tokens asked for, whose difference is the most it takes; ``total``: ignored)."""


@functools.cache
def _overflow_numbers() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern, flags), names) for pattern, flags, names in _OVERFLOW_SOURCES)


if not TYPE_CHECKING:  # hidden from mypy, which checks every other name of the module as it is

    def __getattr__(name: str) -> Any:
        if name == "OVERFLOW_NUMBERS":
            return _overflow_numbers()
        raise AttributeError(f"module 'loopctl.errors' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "OVERFLOW_NUMBERS"})


def overflow_counts(message: str | None, body: object = None) -> tuple[int, int] | None:
    """``(prompt tokens, the most the provider takes)`` from a context-overflow error: llama.cpp's
    ``n_prompt_tokens`` and ``n_ctx`` fields in ``body``'s ``error`` object, else the first of
    :data:`OVERFLOW_NUMBERS` that matches ``message``; ``None`` when neither gives them."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        n, ctx = error.get("n_prompt_tokens"), error.get("n_ctx")
        if isinstance(n, int) and isinstance(ctx, int) and _whole(n) and _whole(ctx):
            return n, ctx
    if not message:
        return None
    for pattern, names in _overflow_numbers():
        found = pattern.search(message)
        if found is None:
            continue
        got = dict(zip(names.split(), (int(g.replace(",", "")) for g in found.groups()), strict=True))
        most = got["max"] if "max" in got else got["window"] - got["out"]
        if most > 0:
            return got["n"], most
    return None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
