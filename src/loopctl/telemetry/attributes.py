"""The names OpenTelemetry GenAI semantic conventions give to spans, attributes and metrics, and loopctl's own.

Source: the OpenTelemetry GenAI semantic conventions (status Development), kept in the
``open-telemetry/semantic-conventions-genai`` repository: ``docs/gen-ai/gen-ai-spans.md`` (inference and
execute-tool spans), ``gen-ai-agent-spans.md`` (invoke-agent span), ``gen-ai-metrics.md`` (metrics) and the
JSON schemas of ``gen_ai.input.messages`` / ``gen_ai.output.messages``. Names under ``loopctl.`` are ours, for
what the conventions do not cover (compaction passes, run totals). Pure constants.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "OP_CHAT",
    "OP_GENERATE_CONTENT",
    "OP_EXECUTE_TOOL",
    "OP_INVOKE_AGENT",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_CONVERSATION_ID",
    "ERROR_TYPE",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_TEMPERATURE",
    "GEN_AI_REQUEST_STOP_SEQUENCES",
    "GEN_AI_REQUEST_STREAM",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_REASONING_OUTPUT_TOKENS",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOOL_DEFINITIONS",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_CLIENT_TOKEN_USAGE",
    "GEN_AI_CLIENT_OPERATION_DURATION",
    "GEN_AI_TOKEN_TYPE",
    "TOKEN_TYPE_INPUT",
    "TOKEN_TYPE_OUTPUT",
    "TOKEN_USAGE_BUCKETS",
    "DURATION_BUCKETS",
    "ERROR_CANCELLED",
    "ERROR_TOOL",
    "ERROR_DENIED",
    "LOOPCTL_OUTCOME",
    "LOOPCTL_TURNS",
    "LOOPCTL_RUN_INPUT_TOKENS",
    "LOOPCTL_RUN_OUTPUT_TOKENS",
    "LOOPCTL_REASONING_EFFORT",
    "LOOPCTL_RETRY_EVENT",
    "LOOPCTL_RETRY_ATTEMPT",
    "LOOPCTL_RETRY_DELAY",
    "LOOPCTL_FALLBACK_EVENT",
    "LOOPCTL_FALLBACK_FROM",
    "LOOPCTL_FALLBACK_TO",
    "LOOPCTL_RUN_COST",
    "LOOPCTL_COMPACTION_KIND",
    "LOOPCTL_COMPACTION_REASON",
    "LOOPCTL_COMPACTION_TOKENS_BEFORE",
    "LOOPCTL_COMPACTION_TOKENS_AFTER",
    "PROVIDER_NAMES",
]

# --- operations (gen_ai.operation.name) ----------------------------------------------------------------------
OP_CHAT: Final = "chat"
"""A chat completion call (OpenAI Chat and Responses, Anthropic Messages)."""
OP_GENERATE_CONTENT: Final = "generate_content"
"""Gemini's generateContent, the conventions' name for it."""
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_INVOKE_AGENT: Final = "invoke_agent"

# --- common ------------------------------------------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
"""The host the model call goes to (the client's ``api_url``), on chat spans and the client metrics."""
SERVER_PORT: Final = "server.port"
"""Its port (the URL's, or 443 / 80 by scheme); set whenever ``server.address`` is."""

# --- agent ---------------------------------------------------------------------------------------------------
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"

# --- request -------------------------------------------------------------------------------------------------
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_OUTPUT_TYPE: Final = "gen_ai.output.type"
"""The output type the request asks for: ``json`` when it asks for a JSON object (``NativeOutput``)."""
OUTPUT_TYPE_JSON: Final = "json"

# --- response ------------------------------------------------------------------------------------------------
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
"""Seconds from sending the (last) attempt to its stream's first event; streamed calls only."""

# --- usage (tokens) ------------------------------------------------------------------------------------------
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"

# --- tools ---------------------------------------------------------------------------------------------------
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"

# --- content (opt-in: OTelObserver(capture_content=True)); JSON strings on spans -------------------------------
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"

# --- metrics -------------------------------------------------------------------------------------------------
GEN_AI_CLIENT_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
"""Histogram of tokens per model call, unit ``{token}``, one record per ``gen_ai.token.type``."""
GEN_AI_CLIENT_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
"""Histogram of model-call durations in seconds (retries included)."""
GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
"""Histogram of seconds from sending a streamed model call (its last attempt) to its first chunk."""
GEN_AI_INVOKE_AGENT_DURATION: Final = "gen_ai.invoke_agent.duration"
"""Histogram of run durations in seconds (the invoke_agent span's duration)."""
GEN_AI_EXECUTE_TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
"""Histogram of tool-call durations in seconds (the execute_tool span's duration), for calls that ran."""
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
TOKEN_TYPE_INPUT: Final = "input"
TOKEN_TYPE_OUTPUT: Final = "output"

TOKEN_USAGE_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
"""The explicit bucket boundaries the conventions give ``gen_ai.client.token.usage``."""
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""The explicit bucket boundaries the conventions give ``gen_ai.client.operation.duration``,
``gen_ai.client.operation.time_to_first_chunk`` and ``gen_ai.execute_tool.duration`` (seconds)."""
INVOKE_AGENT_DURATION_BUCKETS: Final = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6)
"""The explicit bucket boundaries the conventions give ``gen_ai.invoke_agent.duration`` (seconds)."""

# --- error.type values of our own (the conventions ask instrumentations to list theirs) --------------------------
ERROR_CANCELLED: Final = "cancelled"
"""The operation was cancelled (the run's cancel signal, or its task was cancelled)."""
ERROR_TOOL: Final = "tool_error"
"""A tool call ended in an error result the model reads (the tool raised, timed out, got bad input...)."""
ERROR_DENIED: Final = "denied"
"""The permission callback refused the tool call; the tool did not run."""

# --- loopctl's own -------------------------------------------------------------------------------------------
LOOPCTL_OUTCOME: Final = "loopctl.run.outcome"
"""How a run ended (``completed``, ``failed``, ``max_turns``...: ``loopctl.engine.OutcomeKind``)."""
LOOPCTL_TURNS: Final = "loopctl.run.turns"
"""Model calls in the run."""
LOOPCTL_RUN_INPUT_TOKENS: Final = "loopctl.run.usage.input_tokens"
"""The run's total input tokens: a sum over its chat spans, kept off ``gen_ai.usage.*`` so backends that sum
those do not count a call twice."""
LOOPCTL_RUN_OUTPUT_TOKENS: Final = "loopctl.run.usage.output_tokens"
"""The run's total output tokens (see :data:`LOOPCTL_RUN_INPUT_TOKENS`)."""
LOOPCTL_REASONING_EFFORT: Final = "loopctl.request.reasoning_effort"
"""The request's ``reasoning_effort`` (``minimal``, ``low``, ``medium``, ``high``)."""
LOOPCTL_RETRY_EVENT: Final = "loopctl.retry"
"""The span event on a chat span for each retried attempt (attributes ``loopctl.retry.attempt``,
``loopctl.retry.delay`` in seconds, and ``error.type``)."""
LOOPCTL_RETRY_ATTEMPT: Final = "loopctl.retry.attempt"
LOOPCTL_RETRY_DELAY: Final = "loopctl.retry.delay"
LOOPCTL_FALLBACK_EVENT: Final = "loopctl.fallback"
"""The span event on a chat span when the call moves to the next client of a fallback chain (attributes
``loopctl.fallback.from``, ``loopctl.fallback.to`` as ``provider:model``, and ``error.type``); the span's
``gen_ai.provider.name`` and ``gen_ai.request.model`` then name the new client."""
LOOPCTL_FALLBACK_FROM: Final = "loopctl.fallback.from"
LOOPCTL_FALLBACK_TO: Final = "loopctl.fallback.to"
LOOPCTL_TOOL_DEFERRED: Final = "loopctl.tool.deferred"
"""``true`` on the ``execute_tool`` span of a call deferred for approval (a sub-agent's run that paused)."""
LOOPCTL_RUN_COST: Final = "loopctl.run.cost"
"""The run's cost in USD (a string holding the decimal), when every reply's price is known."""
LOOPCTL_COMPACTION_KIND: Final = "loopctl.compaction.kind"
"""``prune``, ``truncate`` or ``summarize``."""
LOOPCTL_COMPACTION_REASON: Final = "loopctl.compaction.reason"
"""``prune_line``, ``threshold`` or ``emergency``."""
LOOPCTL_COMPACTION_TOKENS_BEFORE: Final = "loopctl.compaction.tokens_before"
LOOPCTL_COMPACTION_TOKENS_AFTER: Final = "loopctl.compaction.tokens_after"
LOOPCTL_PROMPT_CACHE_BUST: Final = "loopctl.prompt_cache.bust"
"""On a chat span whose request does not extend the previous one's: what changed
(:class:`~loopctl.engine.PromptCacheBust`'s ``reason``, ``"messages[2] (user) changed"``)."""
LOOPCTL_PROMPT_CACHE_BUST_INDEX: Final = "loopctl.prompt_cache.bust_index"
"""The index of the first message that changed (absent when the tools or the system prompt did)."""

PROVIDER_NAMES: Final = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}
"""``ModelClient.provider`` to ``gen_ai.provider.name`` (Gemini's AI Studio endpoint is ``gcp.gemini``); any
other provider string is recorded as it is."""
