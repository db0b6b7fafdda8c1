"""Every recorded OpenAI Responses exchange (tests/fixtures/provider-traffic/openai/responses-*, INDEX.md):
replies parse value by value, errors raise their typed error, streams decode the same however the bytes are
split, and each follow-up request is rebuilt from its predecessor."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from loopctl.errors import InvalidRequest, ProviderError
from loopctl.message import Message, Role, TextPart, ThinkingPart, ToolCallPart
from loopctl.providers import openai_responses as codec
from loopctl.response import ModelResponse, StopReason, Usage
from tests.conftest import Recording, recordings
from tests.providers.responses_wire import read_input, tool_results, validate_with_sdk

OPENAI = "openai"
STREAMS = [n for n in recordings(OPENAI, "responses-") if Recording(OPENAI, n).has("response.sse")]


def rec(name: str) -> Recording:
    return Recording(OPENAI, name)


def reply(name: str) -> ModelResponse:
    r = rec(name)
    return codec.parse_stream([r.response_sse]) if r.has("response.sse") else codec.parse_response(r.response_json)


def sse_events(name: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in rec(name).response_sse.decode().splitlines()
        if line.startswith("data: ")
    ]


def test_every_responses_recording_is_covered() -> None:
    covered = {
        "responses-error-400-on-stream-request",
        "responses-error-400-reasoning-without-following-item",
        "responses-image-base64",
        "responses-reasoning-summary-stream",
        "responses-reasoning-tool",
        "responses-reasoning-tool-followup",
        "responses-reasoning-tool-stream",
        "responses-text",
        "responses-text-stream",
        "responses-tools-parallel-stream",
        "responses-tools-parallel-stream-followup",
    }
    assert set(recordings(OPENAI, "responses-")) == covered


# --- replies, value by value ---------------------------------------------------------------------------------


def test_text_reply() -> None:
    r = reply("responses-text")
    assert r.message == Message.new(
        Role.ASSISTANT,
        [TextPart(text="4200 + 42 equals 4242.", item_id="msg_0bee99a5de5b12910068f966a1fb3c819587e157227fc327ff")],
    )
    assert r.usage == Usage(input_tokens=16, output_tokens=11, cache_read_tokens=0, reasoning_tokens=0)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.END_TURN, "completed")
    assert r.model == "gpt-4o-2024-08-06"
    assert r.id == "resp_0bee99a5de5b12910068f9669f8f3481958652a29720d87669"
    assert r.invalid_tool_calls == ()


def test_text_stream() -> None:
    r = reply("responses-text-stream")
    assert r.message == Message.new(
        Role.ASSISTANT,
        [TextPart(text="4200 + 42 equals 4242.", item_id="msg_0360bd45725b0a010068f966a601b081958e95c4085b086532")],
    )
    assert r.usage == Usage(input_tokens=16, output_tokens=11, cache_read_tokens=0, reasoning_tokens=0)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.END_TURN, "completed")
    assert r.model == "gpt-4o-2024-08-06"
    assert r.id == "resp_0360bd45725b0a010068f966a4c4a881959717ba17b93477ef"


def test_image_reply() -> None:
    r = reply("responses-image-base64")
    assert r.message.parts == (
        TextPart(
            text="The image is a globe composed of puzzle pieces displaying various characters, representing the "
            "logo of Wikipedia.",
            item_id="msg_0e123783deb788010068f96c34a5988193a8a5f3e10c95de15",
        ),
    )
    assert r.usage == Usage(input_tokens=269, output_tokens=20, cache_read_tokens=0, reasoning_tokens=0)
    assert r.stop_reason is StopReason.END_TURN
    assert r.id == "resp_0e123783deb788010068f96c3331a48193b13ccede896854ad"


def test_reasoning_tool_reply_one_thinking_part_per_summary_part() -> None:
    raw = rec("responses-reasoning-tool").response_json
    item = raw["output"][0]
    r = reply("responses-reasoning-tool")
    *thinking, call = r.message.parts
    rs_id = "rs_68c42d29124881968e24c1ca8c1fc7860e8bc41441c948f6"
    assert [p.text for p in thinking] == [s["text"] for s in item["summary"]]
    assert [len(p.text) for p in thinking] == [515, 558, 614, 591, 633]
    assert thinking[0].text.startswith("**Creating a structured poem**\n\nI need to craft a 12-line po")
    assert all(isinstance(p, ThinkingPart) and p.provider == "openai" and p.item_id == rs_id for p in thinking)
    # encrypted_content rides on the first part only, byte for byte.
    assert thinking[0].signature == item["encrypted_content"]
    assert len(thinking[0].signature) == 9572
    assert thinking[0].signature.startswith("gAAAAABoxC0_aDtrISw_")
    assert [p.signature for p in thinking[1:]] == [None] * 4
    assert call == ToolCallPart(
        id="call_gL7JE6GDeGGsFubqO2XGytyO",
        name="update_plan",
        input=json.loads(raw["output"][1]["arguments"]),
        item_id="fc_68c42d3e9e4881968b15fbb8253f58540e8bc41441c948f6",
    )
    assert call.input["plan"].startswith("Plan:\n1) Determine required first-letter acrostics")
    assert r.usage == Usage(input_tokens=124, output_tokens=1926, cache_read_tokens=0, reasoning_tokens=1792)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.TOOL_CALL, "completed")
    assert r.model == "gpt-5-2025-08-07"
    assert r.id == "resp_68c42d28772c819684459966ee2201ed0e8bc41441c948f6"


def test_reasoning_tool_followup_reply_counts_cached_tokens_inside_input() -> None:
    r = reply("responses-reasoning-tool-followup")
    assert len(r.message.parts) == 1
    text = r.message.parts[0]
    assert isinstance(text, TextPart)
    assert text.item_id == "msg_68c42d408eec8196ae1c5883e07c093e0e8bc41441c948f6"
    assert text.text.startswith("Softly old fountains illumine alleys\nDunes over harbor aglow\n")
    assert text.text.endswith("Dusty alleys murmur, amber spices curl under starlight")
    assert r.usage == Usage(input_tokens=2087, output_tokens=124, cache_read_tokens=2048, reasoning_tokens=0)
    assert r.stop_reason is StopReason.END_TURN


def test_reasoning_tool_stream_latches_encrypted_content_from_output_item_done() -> None:
    events = sse_events("responses-reasoning-tool-stream")
    added = next(e for e in events if e["type"] == "response.output_item.added")["item"]["encrypted_content"]
    done = next(e for e in events if e["type"] == "response.output_item.done")["item"]["encrypted_content"]
    assert len(added) == 824
    assert len(done) == 3896
    r = reply("responses-reasoning-tool-stream")
    assert r.message.parts == (
        ThinkingPart(
            text="",
            signature=done,
            provider="openai",
            item_id="rs_0050471a34b36ae60068c97bac4dcc819595fd0f80d6b3c405",
        ),
        ToolCallPart(
            id="call_CWXgs68YprAjp6t0371hiPOI",
            name="final_result",
            input={"result": 6666},
            item_id="fc_0050471a34b36ae60068c97bf19d9c819590eaf42c0edc1042",
        ),
    )
    assert r.usage == Usage(input_tokens=53, output_tokens=469, cache_read_tokens=0, reasoning_tokens=448)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.TOOL_CALL, "completed")
    assert r.model == "gpt-5-2025-08-07"
    assert r.id == "resp_0050471a34b36ae60068c97b94a480819587a9d70cf2979b33"


def test_reasoning_summary_stream() -> None:
    events = sse_events("responses-reasoning-summary-stream")
    final = next(e for e in events if e["type"] == "response.completed")["response"]["output"]
    summaries = [s["text"] for s in final[0]["summary"]]
    rs_id = "rs_0a1097cbfef27a8c00696afa2459008196a08a4261aba00f56"
    r = reply("responses-reasoning-summary-stream")
    assert r.message.parts == (
        *(ThinkingPart(text=t, provider="openai", item_id=rs_id) for t in summaries),
        TextPart(text="3", item_id="msg_0a1097cbfef27a8c00696afa33407081969902b1b1da52f678"),
    )
    assert [t[:26] for t in summaries] == [
        "**Exploring prime numbers*",
        "**Testing prime candidates",
        "**Final count of primes**\n",
    ]
    assert r.usage == Usage(input_tokens=32, output_tokens=839, cache_read_tokens=0, reasoning_tokens=832)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.END_TURN, "completed")
    assert r.id == "resp_0a1097cbfef27a8c00696afa23fb9c819693455c72eabd7718"


def test_parallel_tool_calls_stream_kept_apart() -> None:
    r = reply("responses-tools-parallel-stream")
    assert r.message.parts == (
        ToolCallPart(
            id="call_sKC7OABqf2A2PTLCm0CLeRWV",
            name="secret_retrieval_tool",
            input={"password": "mellon"},
            item_id="fc_0c3b09d20eedf2d30068f966bad8b88190af96d232f504ef1f",
        ),
        ToolCallPart(
            id="call_OdR3s3xop0vtgkDyWRMLafuH",
            name="secret_retrieval_tool",
            input={"password": "radiance"},
            item_id="fc_0c3b09d20eedf2d30068f966bafd288190a9045fdc554de6d5",
        ),
    )
    assert r.usage == Usage(input_tokens=36, output_tokens=54, cache_read_tokens=0, reasoning_tokens=0)
    assert (r.stop_reason, r.raw_stop_reason) == (StopReason.TOOL_CALL, "completed")
    assert r.id == "resp_0c3b09d20eedf2d30068f966b9b7048190b7501a24a1447ec0"


def test_parallel_tools_followup_stream_reply() -> None:
    r = reply("responses-tools-parallel-stream-followup")
    assert r.message.parts == (
        TextPart(
            text="Here are the secrets associated with each password:\n\n- **mellon**: Welcome to Moria!\n"
            "- **radiance**: Life before Death",
            item_id="msg_0c3b09d20eedf2d30068f966bc0afc81909ccc6a383749530f",
        ),
    )
    assert r.usage == Usage(input_tokens=136, output_tokens=32, cache_read_tokens=0, reasoning_tokens=0)
    assert r.stop_reason is StopReason.END_TURN


# --- errors ----------------------------------------------------------------------------------------------------


def test_error_body_sent_to_a_stream_request_raises_invalid_request() -> None:
    body = rec("responses-error-400-on-stream-request").response_json
    decoder = codec.StreamDecoder()
    assert decoder.feed(json.dumps(body).encode()) == []
    with pytest.raises(InvalidRequest) as info:
        decoder.finish()
    assert type(info.value) is InvalidRequest
    assert info.value.provider == "openai"
    assert info.value.provider_message == (
        "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but got -1 instead."
    )
    assert info.value.body == body
    assert not info.value.retryable


def test_error_400_on_stream_request_through_error_from_http() -> None:
    body = rec("responses-error-400-on-stream-request").response_json
    err = codec.error_from_http(400, json.dumps(body).encode())
    assert type(err) is InvalidRequest
    assert err.status == 400
    assert err.provider_message is not None
    assert err.provider_message.startswith("Invalid 'temperature'")


def test_error_400_reasoning_without_following_item() -> None:
    body = rec("responses-error-400-reasoning-without-following-item").response_json
    message = (
        "Item 'rs_68c42de022c881948db7ed1cc2529f2e0202c9ad459e0d23' of type 'reasoning' was provided without "
        "its required following item."
    )
    err = codec.error_from_http(400, body)
    assert type(err) is InvalidRequest
    assert (err.status, err.provider_message) == (400, message)
    with pytest.raises(InvalidRequest) as info:
        codec.parse_response(body)
    assert info.value.provider_message == message


# --- streams split anywhere ---------------------------------------------------------------------------------


def _by_line(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@pytest.mark.parametrize("name", STREAMS)
def test_stream_decodes_the_same_whole_by_line_and_byte_by_byte(name: str) -> None:
    data = rec(name).response_sse
    whole = codec.parse_stream([data])
    assert codec.parse_stream(_by_line(data)) == whole
    assert codec.parse_stream(data[i : i + 1] for i in range(len(data))) == whole


@pytest.mark.parametrize("name", STREAMS)
def test_stream_and_its_final_response_object_agree(name: str) -> None:
    # response.completed carries the whole Response: decoding it as a non-streamed reply gives the same
    # message, except the reasoning signature, which the API re-encrypts for each copy (see the latching test).
    final = next(e for e in sse_events(name) if e["type"] == "response.completed")["response"]
    streamed = reply(name)
    whole = codec.parse_response(final)
    strip = [
        p.model_copy(update={"signature": None}) if isinstance(p, ThinkingPart) else p for p in whole.message.parts
    ]
    mine = [
        p.model_copy(update={"signature": None}) if isinstance(p, ThinkingPart) else p for p in streamed.message.parts
    ]
    assert mine == strip
    assert (streamed.usage, streamed.stop_reason, streamed.id, streamed.model) == (
        whole.usage,
        whole.stop_reason,
        whole.id,
        whole.model,
    )


# --- follow-ups rebuilt -----------------------------------------------------------------------------------------
#
# Normalizations of the recorded follow-up `input` (what the recording's client library added, not the API):
# - responses-tools-parallel-stream-followup (Mirascope): its `function_call` items carry "status": "completed",
#   copied from the reply's output items. `status` is output-only ("Populated when items are returned via
#   API", openai-python ResponseFunctionToolCallParam); this builder does not send it, so it is removed.
# Nothing else is changed: reasoning ids, encrypted_content, fc_ ids and call ids must match exactly.


def _normalize_followup(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items = copy.deepcopy(items)
    for item in items:
        if item.get("type") == "function_call":
            item.pop("status", None)
    return items


def _rebuild(name: str, **options: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    first, followup = rec(name), rec(f"{name}-followup")
    conversation = [
        *read_input(first.request["input"]),
        reply(name).message,
        tool_results(followup.request["input"]),
    ]
    request = followup.request
    body = codec.build_request(
        conversation,
        model=request["model"],
        system=request.get("instructions"),
        system_as_instructions="instructions" in request,
        tools=(),
        **options,
    )
    return body, _normalize_followup(request["input"])


def test_followup_reasoning_tool_rebuilt_exactly() -> None:
    body, expected = _rebuild("responses-reasoning-tool", reasoning_effort="low", reasoning_summary="detailed")
    assert body["input"] == expected
    assert body["instructions"] == rec("responses-reasoning-tool-followup").request["instructions"]
    assert body["reasoning"] == {"effort": "low", "summary": "detailed"}
    assert body["include"] == ["reasoning.encrypted_content"]
    # The replayed reasoning item is the reply's own, byte for byte, and its following item keeps its id.
    reasoning, call = body["input"][1], body["input"][2]
    assert (
        reasoning["encrypted_content"]
        == rec("responses-reasoning-tool").response_json["output"][0]["encrypted_content"]
    )
    assert call["id"] == "fc_68c42d3e9e4881968b15fbb8253f58540e8bc41441c948f6"
    validate_with_sdk(body)


def test_followup_tools_parallel_stream_rebuilt_exactly() -> None:
    body, expected = _rebuild("responses-tools-parallel-stream", stream=True)
    assert body["input"] == expected
    assert body["input"][0] == {"role": "developer", "content": "Use parallel tool calling."}
    assert [i["call_id"] for i in body["input"][2:]] == [
        "call_sKC7OABqf2A2PTLCm0CLeRWV",
        "call_OdR3s3xop0vtgkDyWRMLafuH",
        "call_sKC7OABqf2A2PTLCm0CLeRWV",
        "call_OdR3s3xop0vtgkDyWRMLafuH",
    ]
    assert body["stream"] is True
    validate_with_sdk(body)


def test_recorded_image_request_rebuilt() -> None:
    # Normalization: Mirascope writes "type": "message" on the user message; the builder leaves the optional
    # key out (both are EasyInputMessageParam).
    request = rec("responses-image-base64").request
    body = codec.build_request(read_input(request["input"]), model=request["model"])
    expected = copy.deepcopy(request["input"])
    del expected[0]["type"]
    assert body["input"] == expected
    assert body["input"][0]["content"][1]["image_url"].startswith("data:image/png;base64,iVBORw0KGgo")
    validate_with_sdk(body)


def test_recorded_request_with_a_reasoning_item_lacking_its_following_item_is_repaired() -> None:
    # The request that got the recorded 400: a reasoning item followed by an assistant message without its id.
    # Read back, the text has no item_id, so the reasoning item is left out and the request is one the API takes.
    request = rec("responses-error-400-reasoning-without-following-item").request
    conversation = read_input(request["input"])
    assert [m.role for m in conversation] == [Role.USER, Role.ASSISTANT, Role.USER]
    body = codec.build_request(conversation, model="gpt-5", reasoning_effort="low")
    assert body["input"] == [
        {"role": "user", "content": "What is the meaning of life?"},
        {"role": "assistant", "content": "The meaning of life is 42"},
        {"role": "user", "content": "Anything to add?"},
    ]
    validate_with_sdk(body)


def test_error_recordings_are_errors_for_every_entry_point() -> None:
    for name in ("responses-error-400-on-stream-request", "responses-error-400-reasoning-without-following-item"):
        body = rec(name).response_json
        with pytest.raises(ProviderError):
            codec.parse_response(body)
        with pytest.raises(ProviderError):
            codec.parse_stream([json.dumps(body).encode()])
