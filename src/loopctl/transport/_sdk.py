"""Configuration from an official SDK: the key, base URL and headers it resolves, and its HTTP client.

The ``openai`` and ``anthropic`` SDKs are made once per client, with their own retries off, and asked for
what they know: the base URL (argument, then ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``), the auth
headers, the default headers (``User-Agent``, ``anthropic-version``, ``OpenAI-Organization`` /
``OpenAI-Project`` from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID``, ``ANTHROPIC_CUSTOM_HEADERS``, platform
headers, the caller's ``default_headers``), and their default HTTP client (``DefaultAsyncHttpxClient``:
connection limits, redirects). That HTTP client is handed to the SDK as its ``http_client`` and used by
loopctl to send, so the SDK and loopctl share one connection pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from loopctl.transport._http import merge_headers

__all__ = ["import_sdk", "sdk_headers"]


def import_sdk(module: str, extra: str) -> ModuleType:
    """The SDK ``module``, or an ``ImportError`` saying which extra installs it."""
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"the {module} SDK is not installed: pip install 'pyloopctl[{extra}]'") from None


def sdk_headers(client: Any, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers ``client`` (an ``AsyncOpenAI`` or ``AsyncAnthropic``) sends with every request it makes
    with an API key, read once from its public ``default_headers`` and ``auth_headers``; values the SDK
    leaves out (its ``Omit`` marker) are dropped. ``extra`` is laid over them. A name is one header whatever
    its case (:func:`~loopctl.transport._http.merge_headers`): a caller's ``user-agent`` among the SDK's
    ``default_headers`` replaces its ``User-Agent``, where the SDK itself would send both."""
    return merge_headers(client.default_headers, client.auth_headers, extra or {})
