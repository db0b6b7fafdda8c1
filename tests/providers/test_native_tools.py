"""Built-in tools (:mod:`loopctl.providers.native`): each codec encodes each tool as its provider documents it,
the same entries the recorded requests carry, and refuses up front what its provider does not have."""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import Message
from loopctl.providers import ModelRequest, anthropic, gemini, openai_chat, openai_responses
from loopctl.providers.native import (
    CodeExecution,
    FileSearch,
    ImageGeneration,
    RemoteMCP,
    ToolSearch,
    UserLocation,
    WebFetch,
    WebSearch,
)
from loopctl.tool import ToolSchema
from tests.conftest import Recording
from tests.providers.responses_wire import validate_with_sdk as validate_responses

HI = [Message.user("hi")]
ECHO = ToolSchema("echo", "Echo.", {"type": "object", "properties": {"x": {"type": "string"}}})


def tools_of(codec: Any, *native: Any, **options: Any) -> Any:
    return codec.build_request(HI, model="gemini-3-flash" if codec is gemini else "m", native_tools=native, **options)


class TestTheRecordedRequests:
    """The entries we build for a tool equal those of the recorded request that used it (minus the
    recorder's explicit nulls)."""

    def test_openai_mcp(self) -> None:
        recorded = Recording("openai", "native-mcp").request["tools"]
        mcp = RemoteMCP(
            "deepwiki",
            "https://mcp.deepwiki.com/mcp",
            allowed_tools=["ask_question"],
            headers={"custom-header-key": "custom-header-value"},
            description="DeepWiki MCP server",
        )
        assert tools_of(openai_responses, mcp)["tools"] == recorded

    def test_openai_web_search_code_interpreter_file_search(self) -> None:
        web = tools_of(openai_responses, WebSearch(search_context_size="medium"))
        assert web["tools"] == Recording("openai", "native-web-search").request["tools"]
        code = tools_of(openai_responses, CodeExecution(), reasoning_effort="low")
        recorded = Recording("openai", "native-code-interpreter").request
        assert code["tools"] == recorded["tools"] and code["include"] == recorded["include"]
        files = tools_of(openai_responses, FileSearch(vector_store_ids=["vs_6939ad669c648191821c3a46f90cf33d"]))
        recorded = Recording("openai", "native-file-search").request
        assert files["tools"] == recorded["tools"] and files["include"] == recorded["include"]
        validate_responses(files)

    def test_anthropic_web_fetch_and_mcp_connector(self) -> None:
        fetch = tools_of(anthropic, WebFetch(), prompt_cache=False)["tools"]
        recorded = [
            {k: v for k, v in t.items() if v is not None}
            for t in Recording("anthropic", "native-web-fetch").request["tools"]
        ]
        assert fetch == recorded
        body = tools_of(anthropic, RemoteMCP("deepwiki", "https://mcp.deepwiki.com/mcp"), prompt_cache=False)
        assert body["mcp_servers"] == Recording("anthropic", "native-mcp").request["mcp_servers"]
        assert "tools" not in body

    def test_gemini_google_search_code_execution_url_context(self) -> None:
        assert tools_of(gemini, WebSearch())["tools"] == Recording("gemini", "native-google-search").request["tools"]
        assert (
            tools_of(gemini, CodeExecution())["tools"] == Recording("gemini", "native-code-execution").request["tools"]
        )
        assert tools_of(gemini, WebFetch())["tools"] == [{"urlContext": {}}]


class TestEachCodec:
    def test_anthropic_tools_beside_function_tools_and_cache_breakpoint_on_the_last(self) -> None:
        body = anthropic.build_request(
            HI,
            model="m",
            tools=[ECHO],
            native_tools=[
                WebSearch(
                    max_uses=3, allowed_domains=["example.com"], user_location=UserLocation(city="Paris", country="FR")
                ),
                CodeExecution(),
                ToolSearch(mode="bm25"),
            ],
        )
        assert body["tools"][1:] == [
            {
                "type": "web_search_20250305",
                "name": "web_search",
                "allowed_domains": ["example.com"],
                "max_uses": 3,
                "user_location": {"type": "approximate", "city": "Paris", "country": "FR"},
            },
            {"type": "code_execution_20250825", "name": "code_execution"},
            {
                "type": "tool_search_tool_bm25_20251119",
                "name": "tool_search_tool_bm25",
                "cache_control": {"type": "ephemeral"},
            },
        ]
        assert anthropic.beta_flags(native_tools=[WebSearch()]) == ()
        assert anthropic.beta_flags(native_tools=[RemoteMCP("a", "https://a")]) == (anthropic.MCP_BETA,)

    def test_responses_merges_include_and_keeps_function_tools_first(self) -> None:
        body = openai_responses.build_request(
            HI,
            model="m",
            tools=[ECHO],
            reasoning_effort="low",
            native_tools=[
                FileSearch(vector_store_ids=["vs_1"], max_num_results=3),
                ImageGeneration({"size": "1024x1024"}),
                ToolSearch(),
            ],
        )
        assert [t["type"] for t in body["tools"]] == ["function", "file_search", "image_generation", "tool_search"]
        assert body["tools"][2] == {"type": "image_generation", "size": "1024x1024"}
        assert body["include"] == ["reasoning.encrypted_content", "file_search_call.results"]
        validate_responses(body)

    def test_gemini_file_search_store(self) -> None:
        body = tools_of(gemini, FileSearch(store_names=["fileSearchStores/s1"], max_num_results=4))
        assert body["tools"] == [{"fileSearch": {"fileSearchStoreNames": ["fileSearchStores/s1"], "topK": 4}}]

    def test_the_request_object_carries_native_tools_to_every_codec(self) -> None:
        request = ModelRequest(messages=HI, native_tools=(WebSearch(),))
        body = openai_responses.build_request_from(request, model="m")
        assert body["tools"] == [{"type": "web_search"}]


@pytest.mark.parametrize(
    ("codec", "tool", "message"),
    [
        (anthropic, FileSearch(vector_store_ids=["vs"]), "Anthropic has no built-in file search tool"),
        (anthropic, ImageGeneration(), "Anthropic has no built-in image generation tool"),
        (anthropic, WebSearch(search_context_size="low"), r"native_tools\[0\]\.search_context_size: Anthropic"),
        (anthropic, WebSearch(allowed_domains=["a"], blocked_domains=["b"]), "allowed_domains or blocked_domains"),
        (anthropic, RemoteMCP("a", "https://a", headers={"k": "v"}), r"native_tools\[0\]\.headers"),
        (anthropic, RemoteMCP("a", "https://a", require_approval="always"), "without approval"),
        (openai_responses, WebFetch(), "OpenAI Responses has no built-in web fetch tool"),
        (openai_responses, WebSearch(max_uses=2), r"native_tools\[0\]\.max_uses"),
        (openai_responses, FileSearch(), "at least one vector store"),
        (openai_responses, ToolSearch(mode="regex"), r"native_tools\[0\]\.mode"),
        (gemini, RemoteMCP("a", "https://a"), "Gemini has no built-in remote MCP tool"),
        (gemini, WebSearch(user_location=UserLocation(city="x")), r"native_tools\[0\]\.user_location"),
        (gemini, FileSearch(vector_store_ids=["vs"]), r"native_tools\[0\]\.vector_store_ids"),
        (openai_chat, WebSearch(), "Chat Completions runs no tools itself"),
        (openai_responses, ECHO, "ToolSchema is not a built-in tool"),
    ],
)
def test_a_tool_or_option_the_provider_lacks_is_refused_before_sending(codec: Any, tool: Any, message: str) -> None:
    with pytest.raises(UnsupportedContent, match=message):
        tools_of(codec, tool)


def test_a_remote_mcp_token_never_shows_in_a_repr() -> None:
    tool = RemoteMCP("a", "https://a", authorization="sk-secret-token")
    assert "sk-secret-token" not in repr(tool)
    assert openai_responses.build_request(HI, model="m", native_tools=[tool])["tools"][0]["authorization"] == (
        "sk-secret-token"
    )
