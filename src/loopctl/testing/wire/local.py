"""Local model servers as the fake provider server plays them: llama.cpp's ``llama-server``, vLLM and Ollama.

Each answers the endpoints that say how big its context is, and refuses a prompt that does not fit with its
own error body, as its source writes them:

- **llama.cpp** (github.com/ggml-org/llama.cpp, ``tools/server``): ``GET /props`` holds
  ``default_generation_settings.n_ctx``, the context of one slot (server-context.cpp, ``get_props``);
  ``GET /v1/models`` lists the model with ``meta.n_ctx_train``, the context it was trained for, which is not
  the one the server runs with. A prompt of ``n_ctx`` tokens or more is refused with HTTP 400 ``{"error":
  {"code": 400, "message": "request (N tokens) exceeds the available context size (M tokens), try increasing
  it", "type": "exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": M}}`` (server-common.cpp
  ``format_error_response``, server-task.cpp ``server_task_result_error::to_json``), on the Chat and the
  Anthropic-compatible endpoint alike, and as plain JSON even when a stream was asked for ("in streaming mode,
  the first error must be treated as non-stream response", server-context.cpp).
- **vLLM** (github.com/vllm-project/vllm): ``GET /v1/models`` lists the model with ``max_model_len``
  (``ModelCard``, vllm/entrypoints/openai/serving_engine.py). A prompt of ``max_model_len`` tokens or more is
  refused with "This model's maximum context length is M tokens. However, your request has N input tokens.
  Please reduce the length of the input messages." (vllm/entrypoints/renderer.py), and a prompt that fits
  with too large a ``max_tokens`` with "'max_tokens' or 'max_completion_tokens' is too large: K. This model's
  maximum context length is M tokens and your request has N input tokens (K > M - N).", both HTTP 400
  ``{"error": {"message", "type": "BadRequestError", "param": null, "code": 400}}``.
- **Ollama** (github.com/ollama/ollama): ``GET /api/ps`` lists the loaded models with the ``context_length``
  each runs with (api/types.go ``ProcessModelResponse``); ``POST /api/show`` gives the model's
  ``parameters`` (``num_ctx`` when its Modelfile sets one) and ``model_info`` (``<arch>.context_length``:
  the trained context). A prompt longer than the loaded context is refused with HTTP 400 "the prompt is
  longer than the context length currently available to the model; shorten the prompt, adjust the context
  length in settings, or use a model with a longer context length" (llm/llama_server.go) in the OpenAI shape
  ``{"error": {"message", "type": "invalid_request_error", "param": null, "code": null}}``
  (openai/openai.go ``NewError``).

A prompt's size is estimated as the fake server estimates usage: 4 bytes of the request body a token. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = ["LocalKind", "LocalServer"]

LocalKind: TypeAlias = Literal["llama.cpp", "vllm", "ollama"]
"""The local servers the fake provider server can play."""

_OLLAMA_OVERFLOW = (
    "the prompt is longer than the context length currently available to the model; shorten the prompt, "
    "adjust the context length in settings, or use a model with a longer context length"
)


@dataclass(slots=True)
class LocalServer:
    """A local model server of ``kind`` running ``model`` with a context of ``context_window`` tokens (the
    model was trained for ``trained_window``, default four times as many). For Ollama, ``loaded=False``
    leaves the model out of ``/api/ps`` (not loaded yet), and ``num_ctx`` is the Modelfile's parameter shown
    by ``/api/show`` (``None``: not set); ``POST /api/generate`` with only a model, Ollama's way to load one,
    loads it (:attr:`loaded` becomes true), or fails with HTTP 500 when ``loadable`` is false (not enough
    memory)."""

    kind: LocalKind
    context_window: int = 8192
    model: str = "local-model"
    trained_window: int | None = None
    loaded: bool = True
    num_ctx: int | None = None
    loadable: bool = True

    @property
    def trained(self) -> int:
        """The context the model was trained for, in tokens."""
        return self.trained_window if self.trained_window is not None else self.context_window * 4

    def info(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        """``(HTTP status, JSON body)`` for one of the server's own endpoints (any path prefix before them), or
        ``None`` for a path that is not one.

        ``method`` and ``path`` are the request's (``GET``, ``/props``); ``body`` its parsed JSON body.
        """
        if self.kind == "llama.cpp":
            if method == "GET" and path.endswith("/props"):
                return 200, self._props()
            if method == "GET" and path.endswith("/models"):
                meta = {"vocab_type": 2, "n_vocab": 151936, "n_ctx_train": self.trained, "n_embd": 2048}
                card = {"id": self.model, "object": "model", "created": 0, "owned_by": "llamacpp", "meta": meta}
                return 200, {"object": "list", "data": [card]}
        elif self.kind == "vllm":
            if method == "GET" and path.endswith("/models"):
                card = {
                    "id": self.model,
                    "object": "model",
                    "created": 0,
                    "owned_by": "vllm",
                    "root": self.model,
                    "parent": None,
                    "max_model_len": self.context_window,
                    "permission": [],
                }
                return 200, {"object": "list", "data": [card]}
        elif self.kind == "ollama":
            if method == "GET" and path.endswith("/api/ps"):
                running = [self._ps_entry()] if self.loaded else []
                return 200, {"models": running}
            if method == "POST" and path.endswith("/api/show"):
                asked = body.get("model") if isinstance(body, Mapping) else None
                if asked not in (self.model, self.model.removesuffix(":latest")):
                    return 404, {"error": f"model '{asked}' not found"}
                return 200, self._show()
            if method == "POST" and path.endswith("/api/generate") and isinstance(body, Mapping):
                if set(body) == {"model"} and body["model"] == self.model:
                    if not self.loadable:
                        return 500, {"error": "model requires more system memory than is available"}
                    self.loaded = True
                    return 200, {"model": self.model, "created_at": "2030-01-01T00:00:00Z", "response": "",
                                 "done": True, "done_reason": "load"}  # fmt: skip
                return None
            if method == "GET" and path.endswith("/models"):
                card = {"id": self.model, "object": "model", "created": 0, "owned_by": "library"}
                return 200, {"object": "list", "data": [card]}
        return None

    def refusal(self, prompt_tokens: int, max_tokens: int | None) -> tuple[int, Any] | None:
        """``(HTTP status, JSON body)`` refusing a prompt of ``prompt_tokens`` tokens that asks for at most
        ``max_tokens`` output tokens, or ``None`` when the server takes it."""
        n, window = prompt_tokens, self.context_window
        if self.kind == "llama.cpp":
            if n < window:  # the prompt alone is compared: generation stops when the context is full
                return None
            message = f"request ({n} tokens) exceeds the available context size ({window} tokens), try increasing it"
            error = {
                "code": 400,
                "message": message,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": n,
                "n_ctx": window,
            }
            return 400, {"error": error}
        if self.kind == "vllm":
            if n >= window:
                message = (
                    f"This model's maximum context length is {window} tokens. However, your request has {n} input "
                    "tokens. Please reduce the length of the input messages."
                )
            elif max_tokens is not None and n + max_tokens > window:
                message = (
                    f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
                    f"context length is {window} tokens and your request has {n} input tokens ({max_tokens} > "
                    f"{window} - {n})."
                )
            else:
                return None
            return 400, {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}
        if n < window:
            return None
        error = {"message": _OLLAMA_OVERFLOW, "type": "invalid_request_error", "param": None, "code": None}
        return 400, {"error": error}

    def _props(self) -> dict[str, Any]:
        params = {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "max_tokens": -1}
        return {
            "default_generation_settings": {"n_ctx": self.context_window, "params": params},
            "total_slots": 1,
            "model_alias": self.model,
            "model_path": f"/models/{self.model}.gguf",
            "modalities": {"vision": False, "audio": False},
            "build_info": "b0000-fake",
        }

    def _ps_entry(self) -> dict[str, Any]:
        return {
            "name": self.model,
            "model": self.model,
            "size": 2_000_000_000,
            "digest": "0" * 64,
            "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B", "quantization_level": "Q4_K_M"},
            "expires_at": "2030-01-01T00:00:00Z",
            "size_vram": 2_000_000_000,
            "context_length": self.context_window,
        }

    def _show(self) -> dict[str, Any]:
        parameters = 'stop "<|eot_id|>"'
        if self.num_ctx is not None:
            parameters = f"num_ctx {self.num_ctx}\n{parameters}"
        return {
            "modelfile": f"FROM {self.model}\n",
            "parameters": parameters,
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B", "quantization_level": "Q4_K_M"},
            "model_info": {
                "general.architecture": "llama",
                "general.parameter_count": 3_212_749_888,
                "llama.context_length": self.trained,
                "llama.embedding_length": 3072,
            },
            "capabilities": ["completion", "tools"],
        }
