"""Provider-native parts from real recorded replies (``tests/fixtures/provider-traffic/*/native-*``, copied from
pydantic-ai's cassettes: ``INDEX.md``): every block and item type decodes, whole and streamed, with its fields
kept; replays to its own provider byte for byte; replays to every other provider as notes its API accepts.

The rules: ``docs/wire-format.md``, "Provider-native parts"; ``docs/providers.md``, "Provider-native parts".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from loopctl.message import (
    CompactionPart,
    Message,
    MessagePart,
    Role,
    ServerToolCallPart,
    ServerToolResultPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    check_conversation,
)
from loopctl.providers import anthropic, gemini, openai_chat, openai_responses
from loopctl.response import ModelResponse
from tests.conftest import Recording, recordings
from tests.providers.anthropic_reader import normalized
from tests.providers.responses_wire import validate_with_sdk as validate_responses
from tests.providers.test_anthropic_properties import validate_with_sdk as validate_anthropic

CODECS: dict[str, Any] = {"anthropic": anthropic, "openai": openai_responses, "gemini": gemini}
NATIVE = {p: [n for n in recordings(p, "native-") if Recording(p, n).meta["status"] == 200] for p in CODECS}
REPLIES = [
    (p, n)
    for p, names in NATIVE.items()
    for n in names
    if not Recording(p, n).has("response.json") or Recording(p, n).response_json.get("object") != "response.compaction"
]
NATIVE_TYPES = (ServerToolCallPart, ServerToolResultPart, CompactionPart)


def reply(provider: str, name: str, split: int | None = None) -> ModelResponse:
    """The recorded reply, decoded whole (a JSON body) or streamed (cut every ``split`` bytes)."""
    rec = Recording(provider, name)
    codec = CODECS[provider]
    if rec.has("response.json"):
        response: ModelResponse = codec.parse_response(rec.response_json)
        return response
    body = rec.response_sse
    chunks = [body] if split is None else [body[i : i + split] for i in range(0, len(body), split)]
    streamed: ModelResponse = codec.parse_stream(chunks)
    return streamed


def native(message: Message) -> list[MessagePart]:
    return [p for p in message.parts if isinstance(p, NATIVE_TYPES)]


WITH_NATIVE = [r for r in REPLIES if native(reply(*r).message)]  # (a follow-up's reply may hold none)
WHOLE = [r for r in WITH_NATIVE if Recording(*r).has("response.json")]


def blocks_of(provider: str, name: str) -> list[dict[str, Any]]:
    """The recorded reply's own blocks / items / parts (non-streamed recordings)."""
    body = Recording(provider, name).response_json
    if provider == "anthropic":
        return list(body["content"])
    if provider == "openai":
        return list(body["output"])
    return list(body["candidates"][0]["content"]["parts"])


# --- every block type decodes, whole and streamed ---------------------------------------------------------


def test_every_block_type_of_the_issue_is_recorded_and_decoded() -> None:
    """The block and item types issue 21 lists, each decoded from a real reply into its native part."""
    seen: set[str] = set()
    for provider, name in REPLIES:
        for part in native(reply(provider, name).message):
            raw = getattr(part, "raw", None) or {}
            seen.add(str(raw.get("type")) if "type" in raw else next(iter(raw), ""))
    assert {
        "server_tool_use",
        "web_search_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "web_fetch_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "tool_search_tool_result",
        "web_search_call",
        "code_interpreter_call",
        "file_search_call",
        "mcp_call",
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
        "executableCode",
        "codeExecutionResult",
        "groundingMetadata",
        "urlContextMetadata",
        "compaction",
    } <= seen


@pytest.mark.parametrize(("provider", "name"), [r for r in REPLIES if not Recording(*r).has("response.json")])
@pytest.mark.parametrize("split", [1, 7, 64])
def test_a_streamed_reply_decodes_the_same_however_the_bytes_are_split(provider: str, name: str, split: int) -> None:
    assert reply(provider, name, split).message == reply(provider, name).message


@pytest.mark.parametrize(("provider", "name"), REPLIES)
def test_every_recorded_reply_decodes_to_a_sound_message_with_its_native_parts(provider: str, name: str) -> None:
    message = reply(provider, name).message
    assert check_conversation([Message.user("q"), message]) == []
    assert all(p.provider == ("openai" if provider == "openai" else provider) for p in native(message))
    # The message survives its own wire form: every field kept.
    assert Message.from_json(message.to_json()) == message


@pytest.mark.parametrize(("provider", "name"), WHOLE)
def test_each_raw_block_is_the_recorded_block_exactly(provider: str, name: str) -> None:
    """``raw`` holds the provider's block or item exactly as received: same keys, same order, same bytes."""
    recorded = [orjson.dumps(b) for b in blocks_of(provider, name)]
    raws = [orjson.dumps(p.raw) for p in native(reply(provider, name).message) if getattr(p, "raw", None)]
    if provider == "gemini":
        candidate = Recording(provider, name).response_json["candidates"][0]
        recorded += [orjson.dumps({k: v}) for k, v in candidate.items() if k.endswith("Metadata")]
    assert raws and all(raw in recorded for raw in raws)


class TestFieldsKept:
    def test_anthropic_web_search_keeps_encrypted_content_and_citations(self) -> None:
        message = reply("anthropic", "native-web-search").message
        call, result = native(message)
        assert isinstance(call, ServerToolCallPart) and isinstance(result, ServerToolResultPart)
        assert (call.id, call.name, call.input) == (
            "srvtoolu_01EoSNE7k4dUJyGatASCV5qs",
            "web_search",
            {"query": "San Francisco weather today"},
        )
        assert result.call_id == call.id and result.name == "web_search" and result.is_error is None
        assert result.raw is not None and result.raw["content"][0]["encrypted_content"].startswith("EroTCioIBxgC")
        assert result.output.splitlines()[0] == (
            "San Francisco, CA Weather Forecast | AccuWeather "
            "<https://www.accuweather.com/en/us/san-francisco/94103/weather-forecast/347629> (6 days ago)"
        )
        cited = [p for p in message.parts if isinstance(p, TextPart) and p.citations]
        assert len(cited) == 9 and all(p.provider == "anthropic" for p in cited)
        first = cited[0].citations
        assert first is not None and first[0]["type"] == "web_search_result_location"
        assert first[0]["encrypted_index"].startswith("Eo8BCioIBxgC")

    def test_anthropic_streamed_server_tool_input_and_citations_are_assembled(self) -> None:
        message = reply("anthropic", "native-web-search-stream").message
        calls = [p for p in message.parts if isinstance(p, ServerToolCallPart)]
        assert [c.input for c in calls] == [
            {"query": "top world news today"},
            {"query": "breaking news headlines August 14 2025"},
        ]
        assert calls[0].raw == {
            "type": "server_tool_use",
            "id": "srvtoolu_01NcU4XNwyxWK6a9tcJZ8wGY",
            "name": "web_search",
            "input": {"query": "top world news today"},
        }
        assert any(isinstance(p, TextPart) and p.citations for p in message.parts)

    def test_anthropic_code_execution_mcp_fetch_and_tool_search(self) -> None:
        code = native(reply("anthropic", "native-code-execution").message)
        assert code[0].name == "bash_code_execution" and code[1].output == "37170\n"  # type: ignore[union-attr]
        mcp = native(reply("anthropic", "native-mcp").message)
        call = mcp[0]
        assert isinstance(call, ServerToolCallPart) and call.server == "deepwiki" and call.name == "ask_question"
        assert call.id.startswith("mcptoolu_") and mcp[1].name == "mcp"  # type: ignore[union-attr]
        fetch = native(reply("anthropic", "native-web-fetch").message)
        assert fetch[0].input == {"url": "https://ai.pydantic.dev"}  # type: ignore[union-attr]
        assert fetch[1].output.startswith("https://ai.pydantic.dev\n")  # type: ignore[union-attr]
        search = native(reply("anthropic", "native-tool-search").message)
        assert search[1].output == "tools found: get_exchange_rate, mortgage_calculator"  # type: ignore[union-attr]
        assert search[0].raw is not None and search[0].raw["caller"] == {"type": "direct"}

    def test_anthropic_compaction_block_whole_and_streamed(self) -> None:
        whole = native(reply("anthropic", "native-compaction").message)[0]
        streamed = native(reply("anthropic", "native-compaction-stream").message)[0]
        for part in (whole, streamed):
            assert isinstance(part, CompactionPart) and part.provider == "anthropic"
            assert part.summary.startswith("The user provided a very long context")
            assert part.raw["type"] == "compaction" and part.raw["content"] == part.summary

    def test_openai_items_keep_their_ids_and_results(self) -> None:
        web = native(reply("openai", "native-web-search").message)
        assert web[0].raw is not None and web[0].raw["id"] == "ws_028829e50fbcad090068c9c8306aec8195ae9451d32175ed69"
        assert web[1].raw is None  # the call's item carries the result
        code = native(reply("openai", "native-code-interpreter").message)
        assert code[0].input["container_id"].startswith("cntr_")  # type: ignore[union-attr,index,call-overload]
        assert code[1].output == "-428330955.97745"  # type: ignore[union-attr]
        files = native(reply("openai", "native-file-search").message)
        assert files[1].output.startswith("tmpd_9a5dki.txt: Paris is the capital of France")  # type: ignore[union-attr]
        mcp = native(reply("openai", "native-mcp").message)
        assert [(p.name, getattr(p, "server", None)) for p in mcp] == [
            ("mcp_list_tools", "deepwiki"),
            ("mcp_list_tools", None),
            ("ask_question", "deepwiki"),
            ("ask_question", None),
        ]
        search = native(reply("openai", "native-tool-search").message)
        assert search[1].call_id == search[0].id and search[1].raw is not None  # type: ignore[union-attr]
        compaction = native(reply("openai", "native-compaction").message)[0]
        assert isinstance(compaction, CompactionPart) and compaction.raw["encrypted_content"].startswith("gAAAAA")
        cited = [p for p in reply("openai", "native-file-search").message.parts if isinstance(p, TextPart)]
        assert cited[0].citations is not None and cited[0].citations[0]["type"] == "file_citation"

    def test_openai_streamed_items_are_completed_from_output_item_done(self) -> None:
        message = reply("openai", "native-code-interpreter-stream").message
        calls = [p for p in message.parts if isinstance(p, ServerToolCallPart)]
        assert len(calls) == 3 and all(c.raw is not None and c.raw["status"] == "completed" for c in calls)
        assert calls[0].input == {
            "code": "n = pow(123456, 123)\nlen(str(n))",
            "container_id": calls[0].raw["container_id"],
        }  # type: ignore[index]
        stream = reply("openai", "native-file-search-stream").message
        assert [type(p).__name__ for p in stream.parts] == ["ServerToolCallPart", "ServerToolResultPart", "TextPart"]
        text = stream.parts[2]
        assert isinstance(text, TextPart) and text.citations and text.citations[0]["type"] == "file_citation"

    def test_gemini_code_execution_keeps_the_signature_on_its_part(self) -> None:
        parts = native(reply("gemini", "native-code-execution").message)
        call, result = parts[0], parts[1]
        assert isinstance(call, ServerToolCallPart) and isinstance(result, ServerToolResultPart)
        assert call.id == "h0mwtrhs" == result.call_id
        assert call.raw is not None and call.raw["thoughtSignature"].startswith("EtUBCtIBAQw51sfL")
        assert result.output == "Current day in Utrecht: Tuesday, May 05, 2026\n" and result.is_error is None

    def test_gemini_grounding_becomes_a_search_call_and_its_sources(self) -> None:
        message = reply("gemini", "native-google-search").message
        call, result = native(message)
        assert isinstance(call, ServerToolCallPart) and call.name == "google_search"
        assert call.input == {"queries": ["weather in San Francisco today"]}
        assert call.raw is not None and set(call.raw) == {"groundingMetadata"}
        assert isinstance(result, ServerToolResultPart) and "weather.gov" in result.output
        url = native(reply("gemini", "native-url-context").message)
        assert [p.name for p in url] == ["grounding", "grounding", "url_context", "url_context"]  # type: ignore[union-attr]
        assert url[3].output == "https://ai.pydantic.dev: URL_RETRIEVAL_STATUS_SUCCESS"  # type: ignore[union-attr]


# --- replay to the same provider: byte for byte -------------------------------------------------------------


def _next(message: Message) -> Message:
    """The user's next message after ``message``: the results of the calls of our own tools it made (a
    reply's function calls must be answered before anything follows: the pairing rules), then text."""
    results = [MessagePart.tool_result(p.id, p.name, "ok") for p in message.parts if isinstance(p, ToolCallPart)]
    return Message.new(Role.USER, [*results, TextPart(text="next")])


def _replayed(provider: str, message: Message) -> list[Any]:
    """What the codec sends for ``message`` as the middle of a three-message conversation (a reply holding a
    compaction is sent from its compaction on: what came before is what the provider no longer reads)."""
    conversation = [Message.user("first"), message, _next(message)]
    if provider == "anthropic":
        body = anthropic.build_request(conversation, model="m", prompt_cache=False)
        return [b for m in body["messages"] if m["role"] == "assistant" for b in m["content"]]
    if provider == "openai":
        body = openai_responses.build_request(conversation, model="m")
        return [i for i in body["input"] if i.get("role") != "user" and i.get("type") != "function_call_output"]
    body = gemini.build_request(conversation, model="gemini-3-flash-preview")
    return list(body["contents"][1]["parts"])


@pytest.mark.parametrize(("provider", "name"), WHOLE)
def test_a_reply_replays_to_its_own_provider_byte_for_byte(provider: str, name: str) -> None:
    """Every native block the reply held is sent back as the same bytes, in place (ids, encrypted content,
    signatures kept), and nothing else of it is lost."""
    sent = [orjson.dumps(b) for b in _replayed(provider, reply(provider, name).message)]
    recorded = [orjson.dumps(b) for b in blocks_of(provider, name)]
    native_recorded = [
        b
        for b, block in zip(recorded, blocks_of(provider, name), strict=True)
        if (block.get("type") in anthropic_native or block.get("type") in openai_responses.NATIVE_ITEMS)
        or "executableCode" in block
        or "codeExecutionResult" in block
    ]
    if provider == "gemini" and not native_recorded:
        # Grounding only: the candidate's metadata has no place in a Content, so the model turn goes back as
        # its content alone, exactly (what google-genai's own history keeps).
        assert sent == recorded
        return
    assert native_recorded
    positions = [sent.index(b) for b in native_recorded]
    assert positions == sorted(positions)  # in their recorded order


anthropic_native = {
    "server_tool_use",
    "mcp_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_result",
    "compaction",
}

FOLLOWUPS = [
    ("anthropic", "native-web-search"),
    ("anthropic", "native-web-fetch"),
    ("anthropic", "native-mcp"),
    ("anthropic", "native-compaction"),
]


@pytest.mark.parametrize(("provider", "name"), FOLLOWUPS)
def test_the_recorded_followup_carries_our_replayed_blocks(provider: str, name: str) -> None:
    """The next request the API accepted (a 200) sent the previous reply's native blocks: those we send for
    the decoded reply are the same (the recorder wrote its SDK's unset ``citations`` as ``null`` inside MCP
    and fetch results, which ``normalized`` drops; the byte-for-byte check is against the reply above)."""
    followup = Recording(provider, f"{name}-followup").request
    recorded = [b for b in followup["messages"][1]["content"] if b["type"] in anthropic_native]
    sent = [b for b in _replayed(provider, reply(provider, name).message) if b["type"] in anthropic_native]
    assert sent and normalized(sent) == normalized(recorded)


def test_a_web_search_reply_replays_verbatim_to_responses_and_validates_against_the_sdk() -> None:
    message = reply("openai", "native-web-search").message
    body = openai_responses.build_request([Message.user("q"), message, Message.user("and?")], model="gpt-5")
    validate_responses(body)
    recorded = blocks_of("openai", "native-web-search")
    assert [i.get("type") for i in body["input"][1:-1]] == [i["type"] for i in recorded]
    assert orjson.dumps(body["input"][2]) == orjson.dumps(recorded[1])  # the web_search_call item, as received
    assert body["input"][1]["encrypted_content"] == recorded[0]["encrypted_content"]


# --- replay to another provider: notes, never a block its API does not know ---------------------------------


def _build_for(target: str, conversation: list[Message]) -> dict[str, Any]:
    if target == "anthropic":
        return anthropic.build_request(conversation, model="claude-sonnet-4-5")
    if target == "openai":
        return openai_responses.build_request(conversation, model="gpt-5")
    if target == "chat":
        return openai_chat.build_request(conversation, model="gpt-4o")
    return gemini.build_request(conversation, model="gemini-2.5-flash")


VALIDATORS: dict[str, Callable[[dict[str, Any]], None]] = {
    "anthropic": validate_anthropic,
    "openai": validate_responses,
}


@pytest.mark.parametrize(
    ("provider", "name", "target"),
    [(p, n, t) for p, n in WITH_NATIVE for t in ("anthropic", "openai", "chat", "gemini") if t != p],
)
def test_a_reply_crosses_to_another_provider_as_notes(provider: str, name: str, target: str) -> None:
    message = reply(provider, name).message
    body = _build_for(target, [Message.user("q"), message, _next(message)])
    text = json.dumps(body, ensure_ascii=False)
    for part in native(message):
        if isinstance(part, CompactionPart):
            # Never sent to another provider, in any form.
            assert orjson.dumps(part.raw).decode() not in text and "[Compaction" not in text
            continue
        assert f"[{part.name}" in text  # the note that stands for it
        raw = part.raw
        if raw is not None:
            for secret in ("encrypted_content", "thoughtSignature", "encrypted_index"):
                if isinstance(raw.get(secret), str):
                    assert raw[secret] not in text
    if target in VALIDATORS:
        VALIDATORS[target](body)


def test_notes_read_as_text_for_the_other_provider() -> None:
    message = reply("gemini", "native-code-execution").message
    body = anthropic.build_request([Message.user("q"), message, Message.user("ok")], model="claude-sonnet-4-5")
    texts = [b["text"] for b in body["messages"][1]["content"] if b["type"] == "text"]
    assert texts[0] == (
        '[code_execution ran at gemini with input: {"code":"from datetime import datetime\\nimport pytz\\n\\n# Get the '
        "current time in Utrecht, Netherlands (Europe/Amsterdam timezone)\\nutrecht_timezone = pytz.timezone("
        "'Europe/Amsterdam')\\nutrecht_time = datetime.now(utrecht_timezone)\\n\\n# Format the date\\ntoday_date = "
        'utrecht_time.strftime(\\"%A, %B %d, %Y\\")\\nprint(f\\"Current day in Utrecht: {today_date}\\")\\n",'
        '"language":"PYTHON"}]'
    )
    assert texts[1] == "[code_execution result: Current day in Utrecht: Tuesday, May 05, 2026\n]"


def test_a_user_message_cannot_carry_a_native_part() -> None:
    call = native(reply("anthropic", "native-web-search").message)[0]
    from loopctl.errors import UnsupportedContent

    for target in ("anthropic", "openai", "chat", "gemini"):
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\]"):
            _build_for(target, [Message.new(Role.USER, [call])])


def test_a_reply_with_thinking_and_server_tools_keeps_thinking_first_for_anthropic() -> None:
    sent = _replayed("anthropic", reply("anthropic", "native-web-search").message)
    assert [b["type"] for b in sent[:3]] == ["thinking", "server_tool_use", "web_search_tool_result"]
    assert isinstance(reply("anthropic", "native-web-search").message.parts[0], ThinkingPart)


def test_an_image_generation_call_decodes_and_replays() -> None:
    """No recorded reply holds one (INDEX.md): an item of openai-python's ``ImageGenerationCall`` shape."""
    item = {
        "id": "ig_1",
        "type": "image_generation_call",
        "status": "completed",
        "result": "aGk=",
        "revised_prompt": "a fox",
    }
    body = {
        "id": "resp_1",
        "status": "completed",
        "model": "gpt-5",
        "output": [
            item,
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Here.", "annotations": []}],
            },
        ],
    }
    message = openai_responses.parse_response(body).message
    call, result = native(message)
    assert isinstance(call, ServerToolCallPart) and call.input == {"revised_prompt": "a fox"} and call.raw == item
    assert isinstance(result, ServerToolResultPart) and result.output == "[image generated: 4 base64 characters]"
    assert _replayed("openai", message)[0] == item
