"""Images a provider cannot read are refused before they enter the conversation (issue 8, item 9): an input
image before the run starts, a tool's image as the tool's error result. Each provider's documented types and
size limits (``loopctl.engine.images``)."""

from __future__ import annotations

import base64
import struct

import pytest

from loopctl.engine import BareLoop, OutcomeKind
from loopctl.engine.images import RULES, image_problem, image_size, rules_for
from loopctl.errors import UnsupportedContent
from loopctl.message import ImagePart, ImageSource, Message, MessagePart, Role, TextPart, ToolResultPart
from loopctl.testing import FakeProviderServer, ScriptedClient
from loopctl.tool import ToolOutput, tool
from tests.fake_clients import KINDS, make_client


def image(media_type: str, raw: bytes) -> ImagePart:
    return ImagePart(source=ImageSource(media_type=media_type, data=base64.b64encode(raw).decode()))


def png(width: int = 1, height: int = 1, pad: int = 0) -> bytes:
    """A PNG signature and IHDR chunk (all the check reads), then ``pad`` bytes."""
    ihdr = struct.pack(">II", width, height) + b"\x08\x06\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0" + b"\0" * pad


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + b"\0" * 9
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00"
SVG = image("image/svg+xml", b"<svg xmlns='http://www.w3.org/2000/svg'/>")


def with_image(*parts: ImagePart | TextPart) -> Message:
    return Message.new(Role.USER, [TextPart(text="look"), *parts])


# --- the rules --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "part", "problem"),
    [
        ("anthropic", SVG, "its media type 'image/svg+xml' is not one of image/png, image/jpeg, image/gif, image/webp"),
        ("openai", SVG, "its media type 'image/svg+xml' is not one of image/png, image/jpeg, image/gif, image/webp"),
        ("gemini", image("image/gif", GIF), "its media type 'image/gif' is not one of image/png, image/jpeg, "
         "image/webp, image/heic, image/heif"),
        ("anthropic", image("image/png", png(pad=3_932_160)),
         "it is 5,242,924 bytes of base64, over the limit of 5,242,880"),
        ("openai", image("image/png", png(pad=20 * 1024 * 1024)), "it is 20,971,553 bytes, over the limit of 20,971,520"),
        ("anthropic", image("image/png", png(8001, 10)), "it is 8001 x 10 pixels, over the limit of 8000 a side"),
        ("anthropic", image("image/jpeg", jpeg(300, 9000)), "it is 300 x 9000 pixels, over the limit of 8000 a side"),
        ("gemini", image("image/heic", b"\0\0\0\x18ftypjunk...."), "its bytes are not HEIC data"),
    ],
)  # fmt: skip
def test_each_provider_refuses_what_its_documentation_says_it_refuses(
    provider: str, part: ImagePart, problem: str
) -> None:
    assert image_problem(part, rules_for(provider)) == problem


@pytest.mark.parametrize(
    ("provider", "part"),
    [
        ("anthropic", image("image/png", png(pad=3_932_127))),  # 5,242,880 base64 characters: the limit itself
        ("anthropic", image("image/png", png(8000, 8000))),
        ("openai", image("image/png", png(20_000, 20_000))),  # OpenAI resizes; no pixel limit
        ("gemini", image("image/heic", b"\0\0\0\x18ftypheic\0\0\0\0mif1heic")),
        ("gemini", image("image/webp", b"RIFF\0\0\0\0WEBPVP8 ")),
        ("scripted", image("image/gif", GIF)),
    ],
)
def test_what_a_provider_reads_passes(provider: str, part: ImagePart) -> None:
    assert image_problem(part, rules_for(provider)) is None


def test_sizes_are_read_from_each_formats_header() -> None:
    assert image_size(png(640, 480), "image/png") == (640, 480)
    assert image_size(jpeg(1024, 768), "image/jpeg") == (1024, 768)
    assert image_size(b"GIF89a\x80\x02\xe0\x01", "image/gif") == (640, 480)
    vp8x = b"RIFF\0\0\0\0WEBPVP8X" + b"\0" * 8 + (639).to_bytes(3, "little") + (479).to_bytes(3, "little")
    assert image_size(vp8x, "image/webp") == (640, 480)
    assert image_size(b"\xff\xd8\xff\xe0\x00", "image/jpeg") is None  # cut short: the provider decides


def test_every_client_provider_has_rules() -> None:
    assert set(RULES) == {"anthropic", "openai", "gemini"}
    assert {make_client(kind, "http://127.0.0.1:9").provider for kind in KINDS} == set(RULES)


# --- input images: refused before the run -----------------------------------------------------------------------


async def test_an_input_image_the_provider_cannot_read_is_refused_before_it_enters_the_conversation() -> None:
    # The SVG went into the conversation and the run failed with a 400 (or UnsupportedContent); it stayed in
    # history, so every later run failed the same way.
    client = ScriptedClient(["fine"])
    client.provider = "anthropic"
    loop = BareLoop(client)
    with pytest.raises(UnsupportedContent, match=r"^input\.parts\[1\]: the image cannot be sent to anthropic: its"):
        await loop.run(with_image(SVG))
    assert (list(loop.history), client.calls) == ([], 0)
    assert (await loop.run("without it")).output == "fine"


async def test_an_image_inside_a_tool_result_of_the_input_is_checked_too() -> None:
    client = ScriptedClient(["fine"])
    client.provider = "gemini"
    result = MessagePart.tool_result("c1", "shot", [TextPart(text="x"), image("image/gif", GIF)])
    loop = BareLoop(client)
    with pytest.raises(
        UnsupportedContent, match=r"^input\.parts\[0\]\.output\[1\]: the image cannot be sent to gemini"
    ):
        await loop.run(Message.new(Role.USER, [result]))


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


UNREADABLE = {
    "openai": SVG,
    "openai-responses": SVG,
    "anthropic": image("image/png", png(9000, 9000)),
    "gemini": image("image/gif", GIF),
}


async def test_no_request_is_sent_with_an_input_image_the_real_clients_provider_refuses(kind: str) -> None:
    with FakeProviderServer(["fine"]) as server:
        client = make_client(kind, server)
        loop = BareLoop(client)
        try:
            with pytest.raises(UnsupportedContent, match=r"^input\.parts\[1\]: the image cannot be sent"):
                await loop.run(with_image(UNREADABLE[kind]))
            assert server.requests == []
            run = await loop.run(with_image(image("image/png", png(4, 4))))
        finally:
            await client.aclose()
    assert run.outcome.kind is OutcomeKind.COMPLETED
    assert len(server.requests) == 1


async def test_a_tool_image_the_real_clients_provider_refuses_becomes_the_tools_error_result(kind: str) -> None:
    @tool
    async def shot() -> ToolOutput:
        """Screenshot."""
        return ToolOutput([TextPart(text="the screen"), UNREADABLE[kind]])

    call = Message.new(Role.ASSISTANT, [MessagePart.tool_call("s1", "shot", {})])
    with FakeProviderServer([call, "seen"]) as server:
        client = make_client(kind, server)
        loop = BareLoop(client, [shot])
        try:
            run = await loop.run("look")
        finally:
            await client.aclose()
    assert run.outcome.kind is OutcomeKind.COMPLETED
    (result,) = [p for p in loop.history[2].parts if isinstance(p, ToolResultPart)]
    assert result.is_error is True
    assert str(result.output).startswith("Tool 'shot' returned an image that cannot be sent: ")
    assert result.output.images() == ()
