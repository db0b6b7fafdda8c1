"""Messages -> Gemini request body: recorded follow-ups rebuilt, each wire rule, the small failing inputs.

Wire rules and their sources: docs/providers/gemini.md.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any, ClassVar, Literal

import pytest

from loopctl.errors import UnsupportedContent
from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolContent,
    ToolResultPart,
)
from loopctl.providers import ConversionCache, ModelRequest, gemini
from loopctl.tool import ForceTool, ToolSchema
from tests.conftest import Recording
from tests.providers.gemini_recorded import messages_of, standard_base64, system_of

G3 = "gemini-3-pro-preview"
G25 = "gemini-2.5-flash"
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()
SIG = "CikB0e2Kbw5tJ9dwYB9m1I9W28H1Pvbhg7iFnlQJ+/Y="  # a signature as Gemini sends them: standard base64


def user(*parts: MessagePart | str) -> Message:
    return Message.new(Role.USER, [TextPart(text=p) if isinstance(p, str) else p for p in parts])


def assistant(*parts: MessagePart | str) -> Message:
    return Message.new(Role.ASSISTANT, [TextPart(text=p) if isinstance(p, str) else p for p in parts])


def system(text: str) -> Message:
    return Message.new(Role.SYSTEM, [TextPart(text=text)])


def carrier(sig: str = SIG, provider: str | None = "gemini") -> ThinkingPart:
    return ThinkingPart(text="", signature=sig, provider=provider)


def call(id: str, name: str = "get_weather", **args: Any) -> ToolCallPart:
    return ToolCallPart(id=id, name=name, input=args)


def result(call_id: str, output: Any, name: str = "", is_error: bool = False) -> ToolResultPart:
    return ToolResultPart(call_id=call_id, name=name, output=output, is_error=is_error)


def png(data: str = PNG, media_type: str = "image/png") -> ImagePart:
    return ImagePart(source=ImageSource(media_type=media_type, data=data))


def contents(messages: list[Message], model: str = G3, **kw: Any) -> list[dict[str, Any]]:
    return gemini.build_request(messages, model=model, **kw)["contents"]


# --- the recorded follow-ups -----------------------------------------------------------------------------


def normalized(followup: dict[str, Any], minted_ids: bool) -> list[dict[str, Any]]:
    """The recorded follow-up ``contents`` with what the recorder itself added or re-encoded undone:

    - ``thoughtSignature``: google-genai sends ``bytes`` base64url-encoded (``-``/``_``) where the API had
      returned standard base64 (``+``/``/``); both decode to the same bytes. We send exactly what we received,
      so the recorded value is brought back to standard base64.
    - ``functionCall.id`` / ``functionResponse.id``: pydantic-ai mints its own ids (``pyd_ai_...``) for calls
      Gemini sent without one; loopctl never sends such ids (``minted_ids=False`` drops them).
    - ``functionResponse.response``: the recorder's wrapper key (pydantic-ai ``return_value``, Mirascope
      ``output``) becomes loopctl's ``output``.
    - ``role`` is kept; ``generationConfig``, ``tools`` and ``systemInstruction`` are options the recorder
      set and are not compared (only ``contents`` is).
    """
    out = copy.deepcopy(followup["contents"])
    for content in out:
        for part in content["parts"]:
            if "thoughtSignature" in part:
                part["thoughtSignature"] = standard_base64(part["thoughtSignature"])
            if "functionCall" in part and not minted_ids:
                part["functionCall"].pop("id", None)
            if "functionResponse" in part:
                response = part["functionResponse"]
                if not minted_ids:
                    response.pop("id", None)
                ((_, value),) = response["response"].items()
                response["response"] = {"output": value}
    return out


@pytest.mark.parametrize("name", ["tools-parallel-stream", "gemini3-tool-signature-stream"])
def test_recorded_followup_contents_are_rebuilt_from_messages(name: str) -> None:
    first, followup = Recording("gemini", name), Recording("gemini", f"{name}-followup")
    reply = gemini.parse_stream([first.response_sse])
    calls = reply.message.tool_calls()
    assert all(c.provider is None for c in calls)  # Gemini sent these calls without ids
    responses = [p["functionResponse"] for p in followup.request["contents"][-1]["parts"]]
    # Results carry no name: the codec fills it from the call they answer.
    results = [result(c.id, next(iter(r["response"].values()))) for c, r in zip(calls, responses, strict=True)]
    conversation = [*messages_of(first.request), reply.message, Message.new(Role.USER, results)]

    body = gemini.build_request(conversation, model=followup.meta["request_model"], system=system_of(first.request))

    assert body["contents"] == normalized(followup.request, minted_ids=False)
    # The signature is replayed byte for byte as the reply carried it (standard base64), not re-encoded.
    sent = body["contents"][1]["parts"][0]["thoughtSignature"]
    assert "+" in sent or "/" in sent
    assert base64.b64decode(sent) == base64.urlsafe_b64decode(
        followup.request["contents"][1]["parts"][0]["thoughtSignature"]
    )


def test_recorded_user_image_is_rebuilt_as_inline_data() -> None:
    recorded = Recording("gemini", "image-inline-data").request
    body = gemini.build_request(messages_of(recorded), model=G25)
    expected = copy.deepcopy(recorded["contents"])
    image = expected[0]["parts"][1]["inlineData"]
    image["data"] = standard_base64(image["data"])  # the recorder re-encoded the bytes as base64url
    assert body["contents"] == expected


@pytest.mark.parametrize(
    "name", ["text", "text-stream", "thinking-stream", "tools-parallel", "error-400-api-key-invalid"]
)
def test_recorded_first_requests_contents_are_rebuilt(name: str) -> None:
    recorded = Recording("gemini", name).request
    assert gemini.build_request(messages_of(recorded), model=G25)["contents"] == recorded["contents"]


# --- the small failing inputs of issue 3 ---------------------------------------------------------------------


class TestToolResultHoldingPng:
    def conversation(self) -> list[Message]:
        output = ToolContent.from_multipart([TextPart(text="here it is"), png()])
        return [user("screenshot please"), assistant(call("c1", "screenshot")), user(result("c1", output))]

    def test_gemini3_carries_it_inside_the_function_response(self) -> None:
        # "Multimodal function responses", Gemini 3 series: inlineData parts nested in functionResponse.
        assert contents(self.conversation(), G3)[2] == {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "screenshot",
                        "response": {"output": "here it is"},
                        "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}],
                    }
                }
            ],
        }

    def test_earlier_models_get_it_moved_to_inline_data_right_after_the_responses(self) -> None:
        two = ToolContent.from_multipart([png(), TextPart(text="a"), png(media_type="image/jpeg")])
        conversation = [
            user("go"),
            assistant(call("c1", "shot"), call("c2", "note")),
            user(result("c1", two), result("c2", "noted"), "and then?"),
        ]
        assert contents(conversation, G25)[2]["parts"] == [
            {"functionResponse": {"name": "shot", "response": {"output": "a"}}},
            {"functionResponse": {"name": "note", "response": {"output": "noted"}}},
            {"inlineData": {"mimeType": "image/png", "data": PNG}},
            {"inlineData": {"mimeType": "image/jpeg", "data": PNG}},
            {"text": "and then?"},
        ]

    def test_an_image_type_function_responses_do_not_take_is_moved_even_for_gemini3(self) -> None:
        output = ToolContent.from_multipart([png(media_type="image/gif")])
        parts = contents([user("x"), assistant(call("c1", "f")), user(result("c1", output))], G3)[2]["parts"]
        assert parts == [
            {"functionResponse": {"name": "f", "response": {"output": ""}}},
            {"inlineData": {"mimeType": "image/gif", "data": PNG}},
        ]

    def test_the_per_generation_default_can_be_overridden(self) -> None:
        parts = contents(self.conversation(), G25, function_response_parts=True)[2]["parts"]
        assert parts[0]["functionResponse"]["parts"] == [{"inlineData": {"mimeType": "image/png", "data": PNG}}]
        parts = contents(self.conversation(), G3, function_response_parts=False)[2]["parts"]
        assert "parts" not in parts[0]["functionResponse"]
        assert parts[1] == {"inlineData": {"mimeType": "image/png", "data": PNG}}


class TestGemini3FunctionCallReplayedWithAndWithoutItsSignature:
    def test_with_its_signature_the_call_carries_it_exactly(self) -> None:
        conversation = [user("weather?"), assistant(carrier(), call("c1", city="Paris")), user(result("c1", "sunny"))]
        assert contents(conversation, G3)[1]["parts"] == [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG}
        ]

    def test_without_it_the_first_call_of_the_turn_gets_googles_documented_dummy(self) -> None:
        # ai.google.dev/gemini-api/docs/thought-signatures, FAQ 1: calls the model did not produce may carry
        # "skip_thought_signature_validator"; only the first functionCall of each step is validated.
        conversation = [user("weather?"), assistant(call("c1", city="Paris"), call("c2", city="Rome"))]
        assert contents(conversation, G3)[1]["parts"] == [
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": gemini.SKIP_SIGNATURE,
            },
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
        ]

    def test_another_providers_signature_is_dropped_and_replaced_by_the_dummy(self) -> None:
        conversation = [user("x"), assistant(carrier("c2lnbmF0dXJl", provider="anthropic"), call("c1"))]
        assert contents(conversation, G3)[1]["parts"] == [
            {"functionCall": {"name": "get_weather", "args": {}}, "thoughtSignature": gemini.SKIP_SIGNATURE}
        ]

    def test_earlier_generations_do_not_validate_and_get_no_dummy(self) -> None:
        conversation = [user("x"), assistant(call("c1"))]
        assert contents(conversation, G25)[1]["parts"] == [{"functionCall": {"name": "get_weather", "args": {}}}]

    def test_the_fallback_can_be_switched_either_way(self) -> None:
        conversation = [user("x"), assistant(call("c1"))]
        assert "thoughtSignature" not in contents(conversation, G3, signature_fallback=False)[1]["parts"][0]
        signed = contents(conversation, "gemini-flash-latest", signature_fallback=True)[1]["parts"][0]
        assert signed["thoughtSignature"] == gemini.SKIP_SIGNATURE

    def test_each_step_of_a_turn_is_checked_on_its_own(self) -> None:
        conversation = [
            user("check the flight, then book a taxi"),
            assistant(carrier(), call("c1", "check_flight")),
            user(result("c1", "delayed")),
            assistant(call("c2", "book_taxi")),
            user(result("c2", "booked")),
        ]
        model_turns = [c["parts"][0] for c in contents(conversation, G3) if c["role"] == "model"]
        assert [t["thoughtSignature"] for t in model_turns] == [SIG, gemini.SKIP_SIGNATURE]


class TestToolResultWhoseOutputIsAPlainString:
    def conversation(self, *results: ToolResultPart) -> list[Message]:
        return [user("x"), assistant(call("c1", "get_country"), call("c2", "get_city")), user(*results)]

    def test_a_plain_string_becomes_an_output_object(self) -> None:
        parts = contents(self.conversation(result("c1", "Mexico"), result("c2", '{"a": 1}')))[2]["parts"]
        assert parts == [
            {"functionResponse": {"name": "get_country", "response": {"output": "Mexico"}}},
            {"functionResponse": {"name": "get_city", "response": {"output": '{"a": 1}'}}},
        ]

    def test_a_failed_call_becomes_an_error_object(self) -> None:
        parts = contents(
            self.conversation(result("c1", "no network", is_error=True), result("c2", "ok", is_error=False))
        )
        assert [p["functionResponse"]["response"] for p in parts[2]["parts"]] == [
            {"error": "no network"},
            {"output": "ok"},
        ]

    def test_multipart_text_is_joined_with_newlines(self) -> None:
        output = ToolContent.from_multipart([TextPart(text="one"), TextPart(text="two")])
        parts = contents(self.conversation(result("c1", output), result("c2", "")))[2]["parts"]
        assert parts[0]["functionResponse"]["response"] == {"output": "one\ntwo"}
        assert parts[1]["functionResponse"]["response"] == {"output": ""}


class TestSystemMessageInTheMiddle:
    def test_it_is_folded_into_system_instruction_after_the_system_argument(self) -> None:
        conversation = [
            system("Be brief."),
            user("hi"),
            assistant("hello"),
            system("Now answer in French."),
            user("bye"),
        ]
        body = gemini.build_request(conversation, model=G3, system="You are a bot.")
        assert body["systemInstruction"] == {"parts": [{"text": "You are a bot.\nBe brief.\nNow answer in French."}]}
        assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]

    def test_the_user_turns_around_it_are_merged_so_roles_alternate(self) -> None:
        conversation = [user("first"), system("mind the rules"), user("second"), assistant("ok")]
        body = gemini.build_request(conversation, model=G3)
        assert body["contents"] == [
            {"role": "user", "parts": [{"text": "first"}, {"text": "second"}]},
            {"role": "model", "parts": [{"text": "ok"}]},
        ]
        assert body["systemInstruction"] == {"parts": [{"text": "mind the rules"}]}

    def test_no_system_text_no_system_instruction(self) -> None:
        assert "systemInstruction" not in gemini.build_request([user("hi")], model=G3, system="")

    def test_a_system_message_with_an_image_cannot_be_folded(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\].*system message"):
            gemini.build_request([user("x"), Message.new(Role.SYSTEM, [png()])], model=G3)


class VideoPart(MessagePart):
    """A part kind this release does not know (as a newer release might write one)."""

    type: Literal["video"] = "video"
    uri: str = ""


class TestPartTypeFromANewerRelease:
    @pytest.mark.parametrize("role", [Role.USER, Role.ASSISTANT])
    def test_it_raises_unsupported_content_naming_the_type_and_its_path(self, role: Role) -> None:
        message = Message.model_construct(role=role, parts=(TextPart(text="look"), VideoPart(uri="v.mp4")))
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[1\]: unknown part type 'video'"):
            gemini.build_request([user("hi"), message], model=G3)

    def test_parts_in_a_role_gemini_cannot_carry_are_refused_with_their_path(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[1\]\.parts\[0\]: the image part .*assistant"):
            gemini.build_request([user("hi"), assistant(png())], model=G3)
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\]: the tool_call part .*user"):
            gemini.build_request([user(call("c1"))], model=G3)


class TestCallsWithoutId:
    def test_synthetic_ids_are_never_sent_back(self) -> None:
        # Vertex refuses functionCall.id / functionResponse.id ("Unknown name "id""); Gemini matches by name and
        # order when there are none.
        conversation = [
            user("x"),
            assistant(call("resp_0", "f"), call("resp_1", "g")),
            user(result("resp_0", "a"), result("resp_1", "b")),
        ]
        body = contents(conversation, G25)
        assert body[1]["parts"] == [
            {"functionCall": {"name": "f", "args": {}}},
            {"functionCall": {"name": "g", "args": {}}},
        ]
        assert body[2]["parts"] == [
            {"functionResponse": {"name": "f", "response": {"output": "a"}}},
            {"functionResponse": {"name": "g", "response": {"output": "b"}}},
        ]

    def test_ids_gemini_minted_are_echoed_on_the_call_and_its_response(self) -> None:
        minted = ToolCallPart(id="fc-7", name="f", input={"q": 1}, provider="gemini")
        body = contents([user("x"), assistant(carrier(), minted), user(result("fc-7", "a"))], G3)
        assert body[1]["parts"] == [
            {"functionCall": {"name": "f", "args": {"q": 1}, "id": "fc-7"}, "thoughtSignature": SIG}
        ]
        assert body[2]["parts"] == [{"functionResponse": {"name": "f", "response": {"output": "a"}, "id": "fc-7"}}]

    def test_a_reply_with_minted_ids_keeps_them_and_their_origin(self) -> None:
        body = {
            "candidates": [
                {
                    "content": {"parts": [{"functionCall": {"id": "fc-7", "name": "f", "args": {}}}]},
                    "finishReason": "STOP",
                }
            ],
            "responseId": "r",
        }
        assert gemini.parse_response(body).message == assistant(
            ToolCallPart(id="fc-7", name="f", input={}, provider="gemini")
        )

    def test_another_providers_ids_are_not_sent_either(self) -> None:
        conversation = [user("x"), assistant(call("toolu_01ABC", "f")), user(result("toolu_01ABC", "a"))]
        body = contents(conversation, G25)
        assert "id" not in body[1]["parts"][0]["functionCall"]
        assert "id" not in body[2]["parts"][0]["functionResponse"]

    def test_responses_follow_the_order_of_the_calls_they_answer(self) -> None:
        # With no ids, Gemini pairs responses with calls by order (thought-signatures FAQ 2: "FC1, FC2, FR1, FR2").
        conversation = [
            user("x"),
            assistant(call("a", "f", n=1), call("b", "f", n=2), call("c", "g")),
            user(result("c", "3"), "note"),
            user(result("b", "2"), result("a", "1")),
        ]
        assert contents(conversation, G25)[2]["parts"] == [
            {"functionResponse": {"name": "f", "response": {"output": "1"}}},
            {"functionResponse": {"name": "f", "response": {"output": "2"}}},
            {"functionResponse": {"name": "g", "response": {"output": "3"}}},
            {"text": "note"},
        ]

    def test_decoded_ids_derive_from_the_response_id_and_position(self) -> None:
        parts = [
            {"functionCall": {"name": "f", "args": {}}},
            {"text": "and"},
            {"functionCall": {"name": "g", "args": {}}},
        ]
        body = {"candidates": [{"content": {"parts": parts}, "finishReason": "STOP"}], "responseId": "abc"}
        assert [c.id for c in gemini.parse_response(body).message.tool_calls()] == ["abc_0", "abc_1"]


class TestSignatureOnALaterTextlessPart:
    """Gemini 3 streams may put the signature of a text answer on a last part with empty (or no) text
    (thought-signatures FAQ 3). It is kept as that part: a carrier and an empty TextPart, replayed as
    received."""

    def stream(self, last: dict[str, Any]) -> bytes:
        chunks = [
            {"candidates": [{"content": {"parts": [{"text": "4"}], "role": "model"}, "index": 0}], "responseId": "r"},
            {
                "candidates": [{"content": {"parts": [last], "role": "model"}, "finishReason": "STOP", "index": 0}],
                "responseId": "r",
            },
        ]
        return b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks)

    @pytest.mark.parametrize("last", [{"text": "", "thoughtSignature": SIG}, {"thoughtSignature": SIG}])
    def test_it_decodes_to_a_carrier_before_an_empty_text_part(self, last: dict[str, Any]) -> None:
        message = gemini.parse_stream([self.stream(last)]).message
        assert message == assistant("4", carrier(), TextPart(text=""))
        assert message.text_content() == "4"

    def test_it_is_replayed_on_an_empty_text_part_as_received(self) -> None:
        reply = gemini.parse_stream([self.stream({"text": "", "thoughtSignature": SIG})]).message
        assert contents([user("2+2?"), reply, user("thanks")])[1]["parts"] == [
            {"text": "4"},
            {"text": "", "thoughtSignature": SIG},
        ]


# --- each rule ---------------------------------------------------------------------------------------------


class TestThinkingReplay:
    def test_gemini_thought_summaries_are_replayed_as_thought_parts(self) -> None:
        conversation = [
            user("x"),
            assistant(
                ThinkingPart(text="plan", provider="gemini"),
                ThinkingPart(text="sum", signature=SIG, provider="gemini"),
                "answer",
            ),
        ]
        assert contents(conversation)[1]["parts"] == [
            {"text": "plan", "thought": True},
            {"text": "sum", "thought": True, "thoughtSignature": SIG},
            {"text": "answer"},
        ]

    @pytest.mark.parametrize("provider", [None, "anthropic", "openai"])
    def test_reasoning_gemini_did_not_mint_is_omitted(self, provider: str | None) -> None:
        conversation = [user("x"), assistant(ThinkingPart(text="hmm", signature=SIG, provider=provider), "answer")]
        assert contents(conversation, G25)[1]["parts"] == [{"text": "answer"}]

    def test_a_signature_that_is_not_base64_cannot_be_geminis_and_is_not_sent(self) -> None:
        conversation = [
            user("x"),
            assistant(ThinkingPart(text="t", signature="not base64!", provider="gemini"), call("c")),
        ]
        assert contents(conversation, G25)[1]["parts"] == [
            {"text": "t", "thought": True},
            {"functionCall": {"name": "get_weather", "args": {}}},
        ]

    @pytest.mark.parametrize("signature", ["00", "QR==", "AAB", "abcd=", "AAAA===="])
    def test_a_signature_that_is_not_canonical_base64_is_not_sent(self, signature: str) -> None:
        # Base64 whose last character has stray bits ("00", the hypothesis example that failed the SDK check),
        # or with padding where none belongs, was sent; google-genai's types (and so the API's bytes field)
        # refuse it: "Data should be valid base64: Invalid last symbol".
        conversation = [
            user("x"),
            assistant(ThinkingPart(text="t", signature=signature, provider="gemini"), call("c")),
        ]
        assert contents(conversation, G25)[1]["parts"] == [
            {"text": "t", "thought": True},
            {"functionCall": {"name": "get_weather", "args": {}}},
        ]

    @pytest.mark.parametrize("signature", ["AA", "AAA", "AA==", "QQ=", "ab-_", "ab+/", SIG])
    def test_a_signature_in_canonical_base64_is_sent_as_received(self, signature: str) -> None:
        conversation = [user("x"), assistant(ThinkingPart(text="t", signature=signature, provider="gemini"))]
        assert contents(conversation, G25)[1]["parts"] == [
            {"text": "t", "thought": True, "thoughtSignature": signature}
        ]

    def test_an_empty_carrier_with_nothing_to_sign_is_an_empty_thought_part(self) -> None:
        conversation = [user("x"), assistant("answer", carrier())]
        assert contents(conversation)[1]["parts"] == [
            {"text": "answer"},
            {"text": "", "thought": True, "thoughtSignature": SIG},
        ]

    def test_a_carrier_signs_text_too(self) -> None:
        assert contents([user("x"), assistant(carrier(), "answer")])[1]["parts"] == [
            {"text": "answer", "thoughtSignature": SIG}
        ]


class TestShapes:
    def test_roles_alternate_and_adjacent_same_role_messages_merge_in_the_request_only(self) -> None:
        conversation = [user("a"), user("b"), assistant("c"), assistant("d"), user("e")]
        before = [m.model_copy() for m in conversation]
        assert contents(conversation) == [
            {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
            {"role": "model", "parts": [{"text": "c"}, {"text": "d"}]},
            {"role": "user", "parts": [{"text": "e"}]},
        ]
        assert conversation == before

    def test_empty_text_and_empty_messages_are_left_out(self) -> None:
        conversation = [user("a", ""), Message.new(Role.ASSISTANT, []), user(""), assistant("", "b")]
        assert contents(conversation) == [
            {"role": "user", "parts": [{"text": "a"}]},
            {"role": "model", "parts": [{"text": "b"}]},
        ]

    def test_a_message_with_nothing_to_send_does_not_split_the_turns_around_it(self) -> None:
        conversation = [user("a"), assistant(""), system("s"), user("b")]
        assert contents(conversation) == [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}]

    def test_user_images_are_inline_data(self) -> None:
        assert contents([user("what is this?", png())])[0]["parts"][1] == {
            "inlineData": {"mimeType": "image/png", "data": PNG}
        }

    def test_a_result_name_is_filled_from_the_call_it_answers(self) -> None:
        conversation = [user("x"), assistant(call("c1", "lookup")), user(result("c1", "found", name=""))]
        assert contents(conversation)[2]["parts"][0]["functionResponse"]["name"] == "lookup"

    def test_the_calls_name_wins_over_a_stale_result_name(self) -> None:
        # The stored name won: a result stored as "unknown" (or under a tool's old name) went out as the
        # response to another function. Gemini matches responses to calls by name.
        conversation = [user("x"), assistant(call("c1", "lookup")), user(result("c1", "found", name="unknown"))]
        assert contents(conversation)[2]["parts"][0]["functionResponse"]["name"] == "lookup"

    def test_in_a_parallel_turn_each_result_goes_out_under_its_own_calls_name(self) -> None:
        # Results stored with each other's names (a swap) went out under the other call's name.
        conversation = [
            user("x"),
            assistant(call("c1", "lookup"), call("c2", "search")),
            user(result("c1", "one", name="search"), result("c2", "two", name="lookup")),
        ]
        responses = [p["functionResponse"] for p in contents(conversation)[2]["parts"]]
        assert [(r["name"], r["response"]) for r in responses] == [
            ("lookup", {"output": "one"}),
            ("search", {"output": "two"}),
        ]

    def test_a_nameless_result_without_its_call_cannot_be_sent(self) -> None:
        with pytest.raises(UnsupportedContent, match=r"messages\[0\]\.parts\[0\].*'c9'"):
            gemini.build_request([user(result("c9", "x"))], model=G3)

    def test_results_split_over_several_user_messages_become_one_user_content(self) -> None:
        conversation = [
            user("x"),
            assistant(call("a", "f"), call("b", "g")),
            user(result("a", "1")),
            user(result("b", "2")),
        ]
        assert contents(conversation, G25)[2] == {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "f", "response": {"output": "1"}}},
                {"functionResponse": {"name": "g", "response": {"output": "2"}}},
            ],
        }

    @pytest.mark.parametrize(("value", "args"), [(None, {}), ([1, 2], {"value": [1, 2]}), ("s", {"value": "s"})])
    def test_call_input_that_is_not_an_object_is_wrapped(self, value: Any, args: Any) -> None:
        conversation = [user("x"), assistant(ToolCallPart(id="c", name="f", input=value))]
        assert contents(conversation, G25)[1]["parts"][0]["functionCall"]["args"] == args


class TestOptions:
    def test_no_model_and_nothing_for_streaming_in_the_body(self) -> None:
        body = gemini.build_request([user("hi")], model=G3, stream=True)
        assert (
            body
            == gemini.build_request([user("hi")], model=G3)
            == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        )

    def test_generation_config(self) -> None:
        body = gemini.build_request([user("hi")], model=G25, max_tokens=100, temperature=0.5, stop=["END", "STOP"])
        assert body["generationConfig"] == {
            "maxOutputTokens": 100,
            "temperature": 0.5,
            "stopSequences": ["END", "STOP"],
        }

    @pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high"])
    def test_reasoning_effort_is_a_thinking_level_for_gemini3(self, effort: Any) -> None:
        config = gemini.build_request([user("hi")], model=G3, reasoning_effort=effort)["generationConfig"]
        assert config == {"thinkingConfig": {"thinkingLevel": effort, "includeThoughts": True}}

    @pytest.mark.parametrize(("effort", "budget"), [("minimal", 512), ("low", 2048), ("medium", 8192), ("high", 24576)])
    def test_reasoning_effort_is_a_thinking_budget_before_gemini3(self, effort: Any, budget: int) -> None:
        config = gemini.build_request([user("hi")], model=G25, reasoning_effort=effort)["generationConfig"]
        assert config == {"thinkingConfig": {"thinkingBudget": budget, "includeThoughts": True}}

    def test_include_thoughts_alone_and_switched_off(self) -> None:
        assert gemini.build_request([user("hi")], model=G3, include_thoughts=True)["generationConfig"] == {
            "thinkingConfig": {"includeThoughts": True}
        }
        config = gemini.build_request([user("hi")], model=G3, reasoning_effort="low", include_thoughts=False)
        assert config["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "low", "includeThoughts": False}

    def test_an_unknown_effort_is_refused(self) -> None:
        with pytest.raises(UnsupportedContent, match="reasoning_effort"):
            gemini.build_request([user("hi")], model=G3, reasoning_effort="max")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("choice", "config"),
        [
            ("auto", {"mode": "AUTO"}),
            ("none", {"mode": "NONE"}),
            ("required", {"mode": "ANY"}),
            (ForceTool("get_weather"), {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
        ],
    )
    def test_tool_choice(self, choice: Any, config: dict[str, Any]) -> None:
        body = gemini.build_request([user("hi")], model=G3, tools=[ToolSchema("get_weather")], tool_choice=choice)
        assert body["toolConfig"] == {"functionCallingConfig": config}

    def test_tool_choice_without_tools_is_not_written(self) -> None:
        assert "toolConfig" not in gemini.build_request([user("hi")], model=G3, tool_choice="required")

    def test_extra_is_merged_last_object_by_object(self) -> None:
        body = gemini.build_request(
            [user("hi")],
            model=G3,
            max_tokens=10,
            extra={"generationConfig": {"topK": 5, "maxOutputTokens": 20}, "safetySettings": [{"category": "X"}]},
        )
        assert body["generationConfig"] == {"maxOutputTokens": 20, "topK": 5}
        assert body["safetySettings"] == [{"category": "X"}]

    def test_build_request_from_a_model_request(self) -> None:
        tools = [ToolSchema("f", "does f")]
        request = ModelRequest(
            messages=[user("hi")],
            system="sys",
            tools=tools,
            max_tokens=5,
            temperature=0.1,
            stop=["x"],
            tool_choice="auto",
            reasoning_effort="high",
            extra={"cachedContent": "cachedContents/1"},
        )
        assert gemini.build_request_from(request, model=G3, stream=True) == gemini.build_request(
            [user("hi")],
            model=G3,
            system="sys",
            tools=tools,
            max_tokens=5,
            temperature=0.1,
            stop=["x"],
            tool_choice="auto",
            reasoning_effort="high",
            extra={"cachedContent": "cachedContents/1"},
        )

    def test_model_generation(self) -> None:
        assert [
            gemini.model_generation(m)
            for m in (
                "gemini-3-pro-preview",
                "gemini-3.1-pro-preview",
                "models/gemini-2.5-flash",
                "projects/p/locations/global/publishers/google/models/gemini-3-flash-preview",
                "gemini-flash-latest",
                "gemini-exp-1206",
            )
        ] == [3, 3, 2, 3, None, None]


class TestTools:
    SCHEMA: ClassVar[dict[str, Any]] = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"anyOf": [{"enum": ["c", "f"]}, {"type": "null"}]}},
        "required": ["city"],
        "additionalProperties": False,
    }

    def test_json_schema_is_sent_as_parameters_json_schema(self) -> None:
        body = gemini.build_request([user("hi")], model=G3, tools=[ToolSchema("get_weather", "Weather.", self.SCHEMA)])
        expected = {k: v for k, v in self.SCHEMA.items() if k != "$schema"}
        assert body["tools"] == [
            {
                "functionDeclarations": [
                    {"name": "get_weather", "description": "Weather.", "parametersJsonSchema": expected}
                ]
            }
        ]

    def test_a_schema_without_type_is_declared_an_object(self) -> None:
        body = gemini.build_request([user("hi")], model=G3, tools=[ToolSchema("now", "", {})])
        assert body["tools"][0]["functionDeclarations"] == [{"name": "now", "parametersJsonSchema": {"type": "object"}}]

    def test_the_openapi_dialect_converts(self) -> None:
        body = gemini.build_request(
            [user("hi")], model=G3, tools=[ToolSchema("get_weather", "", self.SCHEMA)], schema_dialect="openapi"
        )
        assert body["tools"][0]["functionDeclarations"] == [
            {
                "name": "get_weather",
                "parameters": {
                    "type": "OBJECT",
                    "properties": {
                        "city": {"type": "STRING"},
                        "units": {"type": "STRING", "enum": ["c", "f"], "format": "enum", "nullable": True},
                    },
                    "required": ["city"],
                },
            }
        ]

    def test_an_unknown_dialect_is_refused(self) -> None:
        with pytest.raises(UnsupportedContent, match="schema_dialect"):
            gemini.build_request([user("hi")], model=G3, tools=[ToolSchema("f")], schema_dialect="xml")  # type: ignore[arg-type]


class TestConversionCache:
    def conversation(self) -> list[Message]:
        return [
            system("rules"),
            user("x", png()),
            assistant(carrier(), call("c1", "f", a=1), call("c2", "g")),
            user(result("c2", ToolContent.from_multipart([png()])), result("c1", "one")),
            assistant("done"),
        ]

    @pytest.mark.parametrize("model", [G3, G25])
    def test_the_body_is_the_same_with_and_without_a_cache(self, model: str) -> None:
        conversation = self.conversation()
        cache = ConversionCache()
        first = gemini.build_request(conversation, model=model, cache=cache)
        assert len(cache) == 4  # the system message is not cached: its text is folded every time
        second = gemini.build_request(conversation, model=model, cache=cache)
        assert first == second == gemini.build_request(conversation, model=model)

    def test_a_result_converts_again_when_the_call_it_answers_changes(self) -> None:
        answer = user(result("c1", "one"))
        cache = ConversionCache()
        before = gemini.build_request([user("x"), assistant(call("c1", "f")), answer], model=G25, cache=cache)
        after = gemini.build_request([user("x"), assistant(call("c1", "h")), answer], model=G25, cache=cache)
        assert before["contents"][2]["parts"][0]["functionResponse"]["name"] == "f"
        assert after["contents"][2]["parts"][0]["functionResponse"]["name"] == "h"

    def test_cached_pieces_are_not_changed_by_later_builds(self) -> None:
        conversation = self.conversation()
        cache = ConversionCache()
        first = json.dumps(gemini.build_request(conversation, model=G3, cache=cache))
        gemini.build_request([*conversation, user("more")], model=G3, cache=cache)
        assert json.dumps(gemini.build_request(conversation, model=G3, cache=cache)) == first
