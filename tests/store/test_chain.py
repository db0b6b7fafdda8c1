"""The hash chain's rules: what a node id covers, and that cutting big payloads out is exact."""

from __future__ import annotations

import base64
import hashlib

from hypothesis import given
from hypothesis import strategies as st

from loopctl.message import ImagePart, ImageSource, Message, Role, TextPart, ToolCallPart, ToolResultPart
from loopctl.store.chain import (
    NODE_ID_TAG,
    ROOT_PARENT,
    blob_hash,
    canonical_bytes,
    join_payloads,
    node_id,
    read_refs,
    split_payloads,
)
from tests.strategies import messages


def test_a_node_id_is_sha256_of_the_tag_the_parent_and_the_canonical_bytes() -> None:
    m = Message.user("hello")
    data = canonical_bytes(m)
    assert data == b'{"role":"user","parts":[{"type":"text","text":"hello"}]}' == m.to_json().encode()
    root = node_id(None, data)
    assert root == hashlib.sha256(NODE_ID_TAG + ROOT_PARENT + data).digest()
    child = node_id(root, data)
    assert child == hashlib.sha256(NODE_ID_TAG + root + data).digest()
    assert child != root


def test_the_same_message_after_different_parents_has_different_ids() -> None:
    data = canonical_bytes(Message.assistant("ok"))
    a = node_id(None, canonical_bytes(Message.user("a")))
    b = node_id(None, canonical_bytes(Message.user("b")))
    assert node_id(a, data) != node_id(b, data)


def _big_message() -> Message:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(3000)).decode()
    return Message.new(
        Role.USER,
        [
            ToolResultPart(call_id="c1", name="read_file", output="line\n" * 600),
            ImagePart(source=ImageSource(media_type="image/png", data=png)),
            TextPart(text="short"),
        ],
    )


def test_big_strings_are_cut_out_and_put_back_byte_for_byte() -> None:
    m = _big_message()
    data = canonical_bytes(m)
    split = split_payloads(data, m.to_dict(), threshold=1024)
    assert len(split.refs) == 2  # the tool output and the image data; "short" stays inline
    assert split.body == (
        b'{"role":"user","parts":[{"type":"tool_result","call_id":"c1","name":"read_file","output":,"is_error":null},'
        b'{"type":"image","source":{"encoding":"base64","media_type":"image/png","data":}},'
        b'{"type":"text","text":"short"}]}'
    )
    assert all(blob_hash(v) == k for k, v in split.blobs.items())
    assert join_payloads(split.body, read_refs(split.packed_refs(), len(split.body)), split.blobs) == data


def test_a_payload_repeated_inside_one_message_is_one_blob() -> None:
    text = "x" * 5000
    m = Message.new(Role.ASSISTANT, [TextPart(text=text), ToolCallPart(id="c", name="write", input={"text": text})])
    data = canonical_bytes(m)
    split = split_payloads(data, m.to_dict(), threshold=1024)
    assert len(split.refs) == 2 and len(split.blobs) == 1
    assert join_payloads(split.body, list(split.refs), split.blobs) == data


@given(messages(), st.sampled_from([3, 16, 64, 1024]))
def test_every_message_splits_and_joins_to_its_canonical_bytes(message: Message, threshold: int) -> None:
    data = canonical_bytes(message)
    split = split_payloads(data, message.to_dict(), threshold=threshold)
    refs = read_refs(split.packed_refs(), len(split.body))
    assert refs == list(split.refs)
    assert join_payloads(split.body, refs, split.blobs) == data
    assert Message.from_json(join_payloads(split.body, refs, split.blobs)) == message
    assert all(len(v) >= threshold for v in split.blobs.values())


def test_references_that_go_backwards_or_past_the_body_are_refused() -> None:
    import struct

    import pytest

    packed = struct.pack(">I32s", 5, b"a" * 32) + struct.pack(">I32s", 2, b"b" * 32)
    with pytest.raises(ValueError, match="out of order"):
        read_refs(packed, 10)
    with pytest.raises(ValueError, match="past the body"):
        read_refs(struct.pack(">I32s", 11, b"a" * 32), 10)
    with pytest.raises(ValueError, match="whole number"):
        read_refs(b"abc", 10)
