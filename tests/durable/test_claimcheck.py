"""The claim-check codec: long strings of big payloads go to the blob store by content hash and come back."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("temporalio")

from temporalio.api.common.v1 import Payload
from temporalio.converter import default

from loopctl.durable._payloads import dumps
from loopctl.durable.claimcheck import BLOB_KEY, BlobMissing, ClaimCheckCodec, DirectoryBlobStore, SessionStoreBlobs
from loopctl.store import SessionStore, SQLiteStore


class MemoryStore:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.puts = 0

    async def put(self, blobs: Mapping[str, bytes]) -> None:
        self.puts += 1
        self.blobs.update(blobs)

    async def get(self, digests: Sequence[str]) -> Mapping[str, bytes]:
        return {d: self.blobs[d] for d in digests if d in self.blobs}


def _payload(value: object) -> Payload:
    return default().payload_converter.to_payloads([value])[0]


def _value(payload: Payload, kind: type) -> object:
    return default().payload_converter.from_payloads([payload], [kind])[0]


async def test_a_small_payload_passes_unchanged() -> None:
    store = MemoryStore()
    p = _payload('{"messages": []}')
    assert await ClaimCheckCodec(store).encode([p]) == [p]
    assert store.blobs == {}


async def test_long_strings_of_a_big_payload_are_stored_once_by_their_hash() -> None:
    store = MemoryStore()
    image = "iVBORw0KGgo" + "A" * 1_000_000
    doc = orjson.dumps({"messages": [{"data": image}, {"data": image}, {"text": "short"}]}).decode()
    codec = ClaimCheckCodec(store)
    [encoded] = await codec.encode([_payload(doc)])
    assert encoded.ByteSize() < 2000
    digest = hashlib.sha256(image.encode()).hexdigest()
    assert list(store.blobs) == [digest]
    assert orjson.loads(orjson.loads(encoded.data))["messages"][0] == {"data": {BLOB_KEY: digest}}
    [decoded] = await codec.decode([encoded])
    assert _value(decoded, str) == doc


async def test_a_payload_still_too_big_after_that_is_stored_whole() -> None:
    store = MemoryStore()
    doc = {"many": ["x" * 1000] * 600}  # no string over the part limit, 600 KB in all
    codec = ClaimCheckCodec(store)
    [encoded] = await codec.encode([_payload(doc)])
    assert encoded.metadata["loopctl-claim-check"] == b"whole"
    assert encoded.ByteSize() < 500
    assert _value((await codec.decode([encoded]))[0], dict) == doc


async def test_an_object_that_looks_like_a_reference_stays_itself() -> None:
    store = MemoryStore()
    doc = {"input": {BLOB_KEY: "not a digest"}, "pad": "y" * 300_000}
    codec = ClaimCheckCodec(store)
    [encoded] = await codec.encode([_payload(doc)])
    assert _value((await codec.decode([encoded]))[0], dict) == doc


async def test_a_missing_or_altered_blob_is_a_clear_error(tmp_path: Path) -> None:
    store = DirectoryBlobStore(tmp_path / "blobs")
    codec = ClaimCheckCodec(store)
    [encoded] = await codec.encode([_payload({"big": "z" * 400_000})])
    [digest] = [p.name for p in (tmp_path / "blobs").iterdir()]
    (tmp_path / "blobs" / digest).write_bytes(b"tampered")
    with pytest.raises(BlobMissing, match="does not match"):
        await codec.decode([encoded])
    (tmp_path / "blobs" / digest).unlink()
    with pytest.raises(BlobMissing, match="does not have"):
        await codec.decode([encoded])


@pytest.fixture(params=["sqlite", "postgres"])
def session_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """A session store on an empty database: a SQLite file, or a schema on the test run's PostgreSQL."""
    store: SessionStore
    if request.param == "sqlite":
        store = SQLiteStore(tmp_path / "sessions.db")
    else:
        from loopctl.store import PostgresStore

        store = PostgresStore(request.getfixturevalue("postgres_dsn"), max_size=2)
    yield store
    store.close()


async def test_a_session_store_keeps_the_blobs_beside_the_sessions(session_store: SessionStore) -> None:
    image = "iVBORw0KGgo" + "B" * 600_000
    codec = ClaimCheckCodec(SessionStoreBlobs(session_store))
    doc = {"messages": [{"data": image}], "note": "short"}
    [encoded] = await codec.encode([_payload(doc)])
    assert encoded.ByteSize() < 2000
    digest = hashlib.sha256(image.encode()).hexdigest()
    assert session_store.get_blobs([bytes.fromhex(digest)]) == {bytes.fromhex(digest): image.encode()}
    # a second worker on the same database reads it back
    assert _value((await ClaimCheckCodec(SessionStoreBlobs(session_store)).decode([encoded]))[0], dict) == doc


async def test_a_blob_missing_from_the_session_store_is_a_clear_error(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as writer, SQLiteStore(tmp_path / "b.db") as other:
        [encoded] = await ClaimCheckCodec(SessionStoreBlobs(writer)).encode([_payload({"big": "q" * 400_000})])
        with pytest.raises(BlobMissing, match="does not have"):
            await ClaimCheckCodec(SessionStoreBlobs(other)).decode([encoded])
        assert await SessionStoreBlobs(other).get(["not hex"]) == {}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=30) | st.text(min_size=40, max_size=60),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", BLOB_KEY, "$loopctl.literal"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60)
@given(value=json_values, nested=st.booleans())
async def test_any_json_payload_decodes_to_what_was_encoded(value: object, nested: bool) -> None:
    store = MemoryStore()
    codec = ClaimCheckCodec(store, threshold=0, part_limit=35)
    original = _payload(orjson.dumps(value).decode() if nested else value)
    [decoded] = await codec.decode(await codec.encode([original]))
    assert decoded == original


WEI = 123456789012345678901  # past 64 bits


@pytest.mark.parametrize("nested", [False, True], ids=["object", "json-text"])
async def test_an_integer_past_64_bits_comes_back_exact_from_a_payload_cut_into_parts(nested: bool) -> None:
    # json-text: what the durable activities carry (their input and result are JSON text written by loopctl)
    store = MemoryStore()
    doc = {"call": {"name": "transfer", "input": {"wei": WEI, "neg": -WEI}}, "image": "iVBOR" + "C" * 300_000}
    codec = ClaimCheckCodec(store)
    original = _payload(dumps(doc) if nested else doc)
    [encoded] = await codec.encode([original])
    assert encoded.metadata["loopctl-claim-check"] == b"parts"  # cut, not stored whole
    assert str(WEI).encode() in encoded.data
    [decoded] = await codec.decode([encoded])
    if nested:
        assert _value(decoded, str) == dumps(doc)
    else:
        assert _value(decoded, dict) == doc
        assert type(_value(decoded, dict)["call"]["input"]["wei"]) is int


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "1e400"])
async def test_a_number_json_cannot_write_back_makes_the_payload_stored_whole(literal: str) -> None:
    store = MemoryStore()
    data = b'{"x": ' + literal.encode() + b', "pad": "' + b"p" * 300_000 + b'"}'
    original = Payload(metadata={"encoding": b"json/plain"}, data=data)
    codec = ClaimCheckCodec(store)
    [encoded] = await codec.encode([original])
    assert encoded.metadata["loopctl-claim-check"] == b"whole"
    assert await codec.decode([encoded]) == [original]


exact_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**200)  # past what orjson reads as an integer
    | st.integers(min_value=-(2**200), max_value=-(2**63) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.text(min_size=40, max_size=60),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", BLOB_KEY, "$loopctl.literal"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=80)
@given(value=exact_values, nested=st.booleans())
async def test_any_json_value_cut_into_parts_decodes_to_the_same_value(value: object, nested: bool) -> None:
    # a long string beside the value makes the payload big, and cutting it out makes it small: the codec
    # reads the JSON, writes the parts payload, and reads it back
    doc = {"value": value, "pad": "p" * 20_000}
    codec = ClaimCheckCodec(MemoryStore(), threshold=10_000, part_limit=35)
    original = _payload(dumps(doc) if nested else doc)
    [encoded] = await codec.encode([original])
    assert encoded.metadata["loopctl-claim-check"] == b"parts"
    [decoded] = await codec.decode([encoded])
    if nested:
        assert _value(decoded, str) == dumps(doc)
    else:
        assert _value(decoded, dict) == doc
