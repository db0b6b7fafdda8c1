"""OpenAI clients: Chat Completions (also any OpenAI-compatible server) and Responses, configured by the
official ``openai`` SDK (the ``openai`` extra) and sent as the codec's bytes through the SDK's HTTP client.

``POST {base_url}chat/completions`` and ``POST {base_url}responses``
(platform.openai.com/docs/api-reference/chat/create, .../responses/create); a streamed reply is read as
server-sent events.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import urlsplit

from loopctl.errors import (
    ConnectionFailed,
    MissingAPIKey,
    ProviderError,
    ProviderProtocolError,
    ProviderTimeout,
)
from loopctl.message import Message
from loopctl.message.model import _dumps_bytes
from loopctl.providers import openai_chat
from loopctl.providers.base import EventCallback, ModelRequest
from loopctl.response import ModelResponse, Usage
from loopctl.stream import loads_exact
from loopctl.transport._chain import Chains, Link, lost_state
from loopctl.transport._http import DEFAULT_TIMEOUT, HTTPClient, check_base_url, merge_headers
from loopctl.transport._sdk import import_sdk, sdk_headers

if TYPE_CHECKING:  # the built-in tools' module is imported where a request has one
    from loopctl.providers.native import NativeTool

__all__ = ["OpenAIChatClient", "OpenAIResponsesClient"]


class _Codec:
    """A class's codec module, imported when first used (a process that only talks Chat Completions does not
    load the Responses codec)."""

    def __init__(self, module: str) -> None:
        self.module = module

    def __get__(self, instance: object, owner: type | None = None) -> ModuleType:
        return importlib.import_module(self.module)


class _OpenAIClient(HTTPClient):
    """What the two OpenAI clients share: an ``AsyncOpenAI`` for configuration and its HTTP client."""

    provider = "openai"
    endpoint: ClassVar[str] = ""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        codec_options: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
        native_tools: Sequence[NativeTool] = (),
    ) -> None:
        super().__init__(model, codec_options, native_tools)
        sdk = import_sdk("openai", "openai")
        base = base_url or os.environ.get("OPENAI_BASE_URL")
        if base:
            check_base_url(base, "base_url" if base_url else "OPENAI_BASE_URL")
        if not base or urlsplit(base).hostname == "api.openai.com":
            # OpenAI's own API: requests of one conversation share a prompt_cache_key, so they reach the
            # machines holding their prefix (platform.openai.com/docs/guides/prompt-caching); a compatible
            # server may not know the field, so it is sent there only when asked for.
            self.codec_options.setdefault("prompt_cache_key", "auto")
        # A local OpenAI-compatible server usually needs no key; the SDK still wants a non-empty one.
        key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base else None)
        if not key:
            raise MissingAPIKey("openai", "OPENAI_API_KEY")
        http = sdk.DefaultAsyncHttpxClient(timeout=timeout)
        self._sdk_client = sdk.AsyncOpenAI(
            api_key=key,
            base_url=base,
            timeout=timeout,
            max_retries=0,
            default_headers=dict(default_headers or {}),
            http_client=http,
        )
        self._base_url = str(self._sdk_client.base_url)
        self._start(http, sdk_headers(self._sdk_client), key)

    def _start(self, http: Any, headers: Mapping[str, str], key: str) -> None:
        """Connect to ``http`` (the pool) with ``headers`` at :attr:`_base_url`, and set what the server's kind
        asks for of the codec's options."""
        url = f"{self._base_url.rstrip('/')}/{self.endpoint}"
        self._connect(http, own=True, headers=headers, url=url, stream_url=url, secret=key)
        if self.codec is openai_chat and "max_tokens_param" not in self.codec_options and not _openai_host(url):
            # OpenAI-compatible servers read the output limit from `max_tokens`: Ollama knows no other
            # (openai/openai.go, ChatCompletionRequest.MaxTokens), llama.cpp reads it as `n_predict`;
            # `max_completion_tokens` is OpenAI's own name, which they may ignore and generate on.
            self.codec_options["max_tokens_param"] = "max_tokens"


def _openai_host(url: str) -> bool:
    """Whether ``url`` is OpenAI's own API (or Azure OpenAI's), whose reasoning models refuse ``max_tokens``."""
    host = urlsplit(url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


class OpenAIChatClient(_OpenAIClient):
    """OpenAI Chat Completions, or any OpenAI-compatible server (give ``base_url``).

    ``model``: the model name. ``api_key`` / ``base_url``: default ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``
    (with a ``base_url`` and no key, none is needed); a missing key raises
    :class:`~loopctl.errors.MissingAPIKey`. ``timeout``: seconds (connect, and between bytes of a reply).
    ``codec_options``: extra keyword arguments for :func:`loopctl.providers.openai_chat.build_request`
    (``strict_tools``, ``max_tokens_param``...; at a server other than OpenAI's own API the output limit is
    sent as ``max_tokens``, the name compatible servers read, unless ``max_tokens_param`` says otherwise).
    ``default_headers`` are sent with every request.
    :meth:`~loopctl.transport._http.HTTPClient.generate` gives the errors.
    """

    codec = openai_chat
    endpoint = "chat/completions"

    @classmethod
    def without_sdk(
        cls,
        model: str,
        *,
        base_url: str,
        api_key: str,
        timeout: float = DEFAULT_TIMEOUT,
        codec_options: Mapping[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> Self:
        """A client for an OpenAI-compatible server of one's own at ``base_url``, made without the ``openai``
        SDK (whose import alone takes longer than a short run's start: ``docs/performance.md``, section 2).
        ``loopctl run --model demo`` talks to its local fake server through one.

        Nothing is read from the environment. Every request carries ``Accept`` and ``Content-Type:
        application/json``, ``default_headers``, and ``Authorization: Bearer <api_key>`` (the SDK's own
        headers, less its ``User-Agent`` and ``X-Stainless-*`` telemetry); the pool is an
        ``httpx2.AsyncClient`` with the SDK's defaults (``timeout`` seconds, up to 1,000 connections of which
        100 kept alive, redirects followed); for an ``http://`` URL it loads no root certificates, so an
        ``https://`` redirect from it fails verification. The body, the reply's decoding, the errors and the options
        (``codec_options``; the output limit sent as ``max_tokens`` at a server other than OpenAI's) are the
        constructor's. For OpenAI's own API or a gateway configured by environment variables, use the
        constructor.
        """
        import ssl

        import httpx2

        client = cls.__new__(cls)
        HTTPClient.__init__(client, model, codec_options)
        client._base_url = check_base_url(base_url)
        headers = merge_headers(
            {"Accept": "application/json", "Content-Type": "application/json"},
            default_headers or {},
            {"Authorization": f"Bearer {api_key}"},
        )
        limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
        verify: ssl.SSLContext | bool = True
        if urlsplit(base_url).scheme == "http":
            # No TLS is expected: the pool's context verifies as the default one does, but trusts no root
            # certificate (loading the system's takes ~50 ms), so a redirect to https:// is refused, not trusted.
            verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        http = httpx2.AsyncClient(timeout=timeout, limits=limits, follow_redirects=True, verify=verify)
        client._start(http, headers, api_key)
        return client


class OpenAIResponsesClient(_OpenAIClient):
    """OpenAI Responses. Arguments as :class:`OpenAIChatClient`; ``codec_options`` go to
    :func:`loopctl.providers.openai_responses.build_request` (``store=False``: the API keeps nothing).

    Stateful modes (``docs/transport.md``, "Stateful Responses"), each sending only what the server does not
    hold yet:

    - ``stateful=True``: each call continues the conversation's previous reply with ``previous_response_id``
      and sends only the messages after it (the API keeps the chain: ``store`` must not be ``False``);
    - ``conversation="auto"`` (a Conversations API conversation made for each conversation on its first call)
      or a conversation id of your own: the requests carry ``conversation`` and only the new messages.

    A request that does not continue what the server holds (an edited history, a compaction) is sent whole
    and starts again. When the server no longer has the response or the conversation
    (``previous_response_not_found``: expired, deleted, another project) the request is sent again whole,
    once, and the chain starts again from it.

    ``model`` is the model id (``gpt-5``).
    """

    codec = _Codec("loopctl.providers.openai_responses")
    endpoint = "responses"

    def __init__(
        self,
        model: str,
        *,
        stateful: bool = False,
        conversation: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        if stateful and conversation is not None:
            raise ValueError("stateful (previous_response_id) and conversation cannot be used together")
        if (stateful or conversation is not None) and self.codec_options.get("store") is False:
            raise ValueError("a stateful client needs the API to store its responses: store=False keeps nothing")
        self.stateful = stateful
        self.conversation = conversation
        self._chains = Chains()
        self._continue: dict[str, Any] | None = None  # the codec options of the request being sent
        self._conversations_url = f"{self._base_url.rstrip('/')}/conversations"
        self._compact_url = f"{self._base_url.rstrip('/')}/responses/compact"

    def encode(self, request: ModelRequest, stream: bool) -> bytes:
        """:meth:`HTTPClient.encode`; for a request that continues server-held state, only what follows it.

        ``request`` is the model request; ``stream`` asks for the streamed form.
        """
        if self._continue is None:
            return super().encode(request, stream)
        body = self.codec.build_request_from(
            self._with_native(request), model=self.model, stream=stream, **{**self.codec_options, **self._continue}
        )
        return _dumps_bytes(body)

    async def generate(
        self, request: ModelRequest, *, stream: bool = True, on_event: EventCallback | None = None
    ) -> ModelResponse:
        """:meth:`HTTPClient.generate`, continuing the conversation's server-held state when it can (see the
        class docstring); the same errors.

        ``request``, ``stream`` (streamed reply) and ``on_event`` (called with each decoded event) as for
        :meth:`HTTPClient.generate`.
        """
        if not self.stateful and self.conversation is None:
            return await super().generate(request, stream=stream, on_event=on_event)
        messages = request.messages
        link = self._chains.find(messages)
        conversation = await self._conversation_for(messages, link)
        self._continue = self._plan(link, conversation)
        try:
            try:
                response = await super().generate(request, stream=stream, on_event=on_event)
            except ProviderError as exc:
                if self._continue is None or not lost_state(exc):
                    raise
                # The server no longer holds the chain (or the conversation): everything, once more.
                self._chains.forget(messages)
                conversation = await self._conversation_for(messages, None, fresh=True)
                self._continue = self._plan(None, conversation)
                response = await super().generate(request, stream=stream, on_event=on_event)
        finally:
            self._continue = None
        self._chains.record(messages, response.message, response_id=response.id, conversation=conversation)
        return response

    def _plan(self, link: Link | None, conversation: str | None) -> dict[str, Any] | None:
        if conversation is not None:
            return {"conversation": conversation, "continue_from": len(link.messages) if link is not None else 0}
        if link is not None and link.response_id is not None:
            return {"previous_response_id": link.response_id, "continue_from": len(link.messages)}
        return None

    async def _conversation_for(self, messages: Any, link: Link | None, *, fresh: bool = False) -> str | None:
        """The conversation this request goes to: the given id, the one made for this conversation while it
        continues it, or a new one (``POST /v1/conversations``)."""
        if self.conversation is None:
            return None
        if self.conversation != "auto":
            return self.conversation
        if link is not None and link.conversation is not None and not fresh:
            return link.conversation
        return await self._create_conversation()

    async def _create_conversation(self) -> str:
        """``POST /v1/conversations`` (platform.openai.com/docs/api-reference/conversations/create): a new,
        empty conversation; its id. Errors are typed as a model call's."""
        try:
            raw = await self._post(self._conversations_url, b"{}")
        except self._timeout_errors as exc:
            raise ProviderTimeout(f"no reply in time ({exc})", provider=self.provider) from None
        except self._transport_errors as exc:
            raise ConnectionFailed(f"cannot reach the provider ({exc})", provider=self.provider) from None
        if raw.status_code >= 400:
            raise self.codec.error_from_http(raw.status_code, self._redact(raw.content), dict(raw.headers))
        conversation = loads_exact(raw.content).get("id")
        if not isinstance(conversation, str) or not conversation:
            raise ProviderProtocolError("the new conversation has no id", provider=self.provider)
        return conversation

    async def compact_conversation(
        self, request: ModelRequest, *, instructions: str | None = None
    ) -> tuple[list[Message], Usage]:
        """``POST /v1/responses/compact`` (developers.openai.com/api/docs/guides/compaction, "Standalone
        compact endpoint"): ``request``'s conversation compacted by the API. Returns the window that replaces
        it (the user's messages, then an assistant message holding the opaque
        :class:`~loopctl.message.CompactionPart`: :func:`loopctl.providers.openai_responses.parse_compacted`)
        and the pass's usage. ``instructions`` default to ``request.system``. Errors are typed as a model
        call's (:meth:`HTTPClient.generate`)."""
        options = {k: v for k, v in self.codec_options.items() if k in ("prompt_cache_key", "prompt_cache_retention")}
        body = self.codec.build_compact_request(
            request.messages, model=self.model, system=request.system, instructions=instructions, **options
        )
        try:
            raw = await self._post(self._compact_url, _dumps_bytes(body))
        except self._timeout_errors as exc:
            raise ProviderTimeout(f"no reply in time ({exc})", provider=self.provider) from None
        except self._transport_errors as exc:
            raise ConnectionFailed(f"cannot reach the provider ({exc})", provider=self.provider) from None
        content = raw.content
        if raw.status_code >= 400:
            quoted = self._redact(content)  # a provider's error may quote the key it refused
            error: ProviderError = self.codec.error_from_http(raw.status_code, quoted, dict(raw.headers))
            self._scrub(error)
            raise error
        try:
            parsed: tuple[list[Message], Usage] = self.codec.parse_compacted(loads_exact(content))
        except ProviderError:
            raise
        except ValueError as exc:  # not JSON
            raise ProviderProtocolError(f"the compacted reply is not JSON: {exc}", provider=self.provider) from None
        return parsed
