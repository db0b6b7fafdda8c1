"""MCP results and names in loopctl's terms (``loopctl.mcp.convert``): one test per rule."""

from __future__ import annotations

import base64

import mcp_types as t
import pytest

from loopctl.mcp.convert import MAX_TOOL_NAME, exposed_names, is_textual, to_tool_output
from loopctl.message import ImagePart, Retention, TextPart
from loopctl.tool import ToolOutput

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def result(*content: object, structured: object = None, is_error: bool = False) -> t.CallToolResult:
    return t.CallToolResult(content=list(content), structured_content=structured, is_error=is_error)  # type: ignore[arg-type]


def test_text_blocks_become_one_text() -> None:
    out = to_tool_output(result(t.TextContent(type="text", text="a"), t.TextContent(type="text", text="b")))
    assert out == ToolOutput("a\nb")


def test_an_image_block_becomes_an_image_part_next_to_the_text() -> None:
    out = to_tool_output(
        result(t.TextContent(type="text", text="look"), t.ImageContent(type="image", data=PNG_B64, mime_type="image/png"))
    )
    text, image = out.tool_content().parts
    assert text == TextPart(text="look")
    assert isinstance(image, ImagePart) and (image.source.media_type, image.source.data) == ("image/png", PNG_B64)


def test_an_image_type_no_provider_reads_becomes_a_note() -> None:
    out = to_tool_output(result(t.ImageContent(type="image", data="PHN2Zz4=", mime_type="image/svg+xml")))
    assert out.content == "[an image of type image/svg+xml was left out: models read PNG, JPEG, GIF and WebP]"


def test_image_data_that_is_not_base64_becomes_a_note() -> None:
    out = to_tool_output(result(t.ImageContent(type="image", data="not base64!", mime_type="image/png")))
    assert out.content == "[an image of type image/png was left out: its data is not base64]"


def test_structured_content_alone_becomes_its_json_text() -> None:
    assert to_tool_output(result(structured={"result": 5, "ok": True})).content == '{"result":5,"ok":true}'


def test_content_blocks_win_over_structured_content() -> None:
    out = to_tool_output(result(t.TextContent(type="text", text="5"), structured={"result": 5}))
    assert out.content == "5"


def test_is_error_marks_an_error_result() -> None:
    out = to_tool_output(result(t.TextContent(type="text", text="no such file"), is_error=True))
    assert (out.content, out.is_error) == ("no such file", True)


def test_embedded_resources_audio_and_links_become_text() -> None:
    out = to_tool_output(
        result(
            t.EmbeddedResource(type="resource", resource=t.TextResourceContents(uri="file:///a.txt", text="hello")),
            t.EmbeddedResource(
                type="resource",
                resource=t.BlobResourceContents(uri="file:///a.png", blob=PNG_B64, mime_type="image/png"),
            ),
            t.EmbeddedResource(
                type="resource",
                resource=t.BlobResourceContents(uri="file:///a.bin", blob="AAAA", mime_type="application/zip"),
            ),
            t.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            t.ResourceLink(type="resource_link", name="notes", uri="file:///notes.md", description="my notes"),
        )
    )
    parts = out.tool_content().parts
    assert [p.text if isinstance(p, TextPart) else p.source.media_type for p in parts] == [
        "[resource file:///a.txt]\nhello",
        "image/png",
        "[resource file:///a.bin of type application/zip was left out: binary data]",
        "[audio of type audio/wav was left out: models do not read audio results]",
        "[resource link: notes <file:///notes.md>: my notes]",
    ]


def blob(uri: str, data: bytes, mime_type: str) -> t.EmbeddedResource:
    encoded = base64.b64encode(data).decode()
    return t.EmbeddedResource(type="resource", resource=t.BlobResourceContents(uri=uri, blob=encoded, mime_type=mime_type))


def test_a_blob_of_a_textual_type_is_decoded_as_text() -> None:
    # Before: every blob that was not an image was dropped as "binary data" (the reference everything server
    # sends its dynamic text resources as text/plain blobs).
    out = to_tool_output(
        result(
            blob("demo://a", b"Resource 1: plain", "text/plain"),
            blob("demo://b", b'{"caf\xc3\xa9": 1}', "application/json"),
            blob("demo://c", b"<a/>", "application/atom+xml"),
            blob("demo://d", "caf\u00e9".encode("latin-1"), "text/plain; charset=ISO-8859-1"),
            blob("demo://e", b"\xff\xfe\x00", "text/plain"),
            blob("demo://f", b"\x1f\x8b", "application/gzip"),
        )
    )
    assert out.content == "\n".join(
        [
            "[resource demo://a]\nResource 1: plain",
            '[resource demo://b]\n{"caf\u00e9": 1}',
            "[resource demo://c]\n<a/>",
            "[resource demo://d]\ncaf\u00e9",
            "[resource demo://e of type text/plain was left out: its data is not text]",
            "[resource demo://f of type application/gzip was left out: binary data]",
        ]
    )


@pytest.mark.parametrize(
    ("mime_type", "textual"),
    [
        ("text/markdown", True), ("application/json", True), ("application/vnd.api+json", True),
        ("application/yaml", True), ("Application/JSON; charset=utf-8", True), ("application/octet-stream", False),
        ("application/pdf", False), ("image/svg+xml", True), ("", False), (None, False),
    ],
)  # fmt: skip
def test_which_types_are_text(mime_type: str | None, textual: bool) -> None:
    assert is_textual(mime_type) is textual


def test_an_empty_result_is_empty_text_with_the_retention_given() -> None:
    assert to_tool_output(result(), Retention.DURABLE) == ToolOutput("", retention=Retention.DURABLE)


def test_names_get_the_prefix_and_only_characters_providers_accept() -> None:
    assert exposed_names(["read_file", "fs.list", "a/b c"], "fs") == ["fs_read_file", "fs_fs_list", "fs_a_b_c"]
    assert exposed_names(["read-file"]) == ["read-file"]


def test_names_are_cut_to_the_limit_and_made_unique() -> None:
    long = "x" * 80
    assert exposed_names(["a.b", "a_b", "a/b"]) == ["a_b", "a_b_2", "a_b_3"]
    first, second = exposed_names([long, long + "y"])
    assert (len(first), len(second)) == (MAX_TOOL_NAME, MAX_TOOL_NAME)
    assert first != second and second.endswith("_2")
