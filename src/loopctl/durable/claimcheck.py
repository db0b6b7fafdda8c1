"""Big values out of Temporal's history: a payload codec that stores long strings by content hash.

Temporal refuses a payload over 2 MB (the server's blob size limit, ``limit.blobSize.error``; it warns from
512 KB), and every activity's input and result is a payload in the workflow history. An agent run's payloads
grow with the conversation (each model call sends it whole) and with what tools return (an image, a big
file). :class:`ClaimCheckCodec` keeps them small: in a payload over ``threshold`` bytes, each string longer
than ``part_limit`` characters (image data, a long tool output) is stored in a :class:`BlobStore` under the
SHA-256 of its UTF-8 bytes and replaced by ``{"$loopctl.blob": "<hex digest>"}``
(:class:`SessionStoreBlobs` keeps them in a :mod:`loopctl.store` session store, :class:`DirectoryBlobStore`
in a shared folder). The same image sent again with every later model call is stored once. A payload still
over ``threshold`` after that is stored whole. Decoding reverses both and checks each digest.

Payloads the codec changed carry the metadata ``encoding: loopctl/claim-check``; others pass unchanged, so
a history written without the codec still decodes. The JSON it reads and writes keeps every value exact:
integers of any size stay integers (a token amount past 64 bits), as in the message model
(``docs/wire-format.md``); a payload whose JSON it cannot write back as it was (``NaN``, a lone surrogate) is
stored whole. Every process that reads the history (workers, clients,
a ``Replayer``) needs the codec and the same store.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pydantic_core

try:
    from temporalio.api.common.v1 import Payload
    from temporalio.converter import PayloadCodec
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        f"loopctl.durable.claimcheck needs the Temporal SDK: pip install 'pyloopctl[temporal]' ({exc})"
    ) from exc

from loopctl._lazy import LazyModule
from loopctl.errors import InvalidMessage, LoopError
from loopctl.message.model import _dumps_bytes

if TYPE_CHECKING:
    import loopctl.store
else:  # the annotations' modules, imported when an annotation is read (loopctl._lazy)
    loopctl = LazyModule("loopctl")

__all__ = ["BLOB_KEY", "BlobMissing", "BlobStore", "ClaimCheckCodec", "DirectoryBlobStore", "SessionStoreBlobs"]

BLOB_KEY = "$loopctl.blob"
"""The key of the object that stands for a stored string."""

_LITERAL_KEY = "$loopctl.literal"  # wraps an object of the application's that looks like a blob reference
_ENCODING = b"loopctl/claim-check"
_WHOLE = b"whole"
_PARTS = b"parts"


class BlobMissing(LoopError):
    """A payload refers to a blob the store does not have (or whose bytes do not match their digest)."""


@runtime_checkable
class BlobStore(Protocol):
    """Where the codec keeps blobs: bytes by their SHA-256 hex digest. ``put`` of a digest it has is a no-op."""

    async def put(self, blobs: Mapping[str, bytes]) -> None:
        """Store each blob under its digest.

        ``blobs`` maps each digest (hex SHA-256) to its bytes.
        """

    async def get(self, digests: Sequence[str]) -> Mapping[str, bytes]:
        """The blobs of ``digests`` it has (a missing one is left out)."""


class DirectoryBlobStore:
    """A :class:`BlobStore` in a folder shared by the workers (one file per blob, named by its digest,
    written atomically).

    ``path`` is the folder (created when missing).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    async def put(self, blobs: Mapping[str, bytes]) -> None:
        """Write the blobs not yet there."""
        await asyncio.to_thread(self._put, blobs)

    def _put(self, blobs: Mapping[str, bytes]) -> None:
        for digest, data in blobs.items():
            target = self.path / digest
            if target.exists():
                continue
            tmp = target.with_name(f".{digest}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)

    async def get(self, digests: Sequence[str]) -> Mapping[str, bytes]:
        """Read the blobs there.

        ``digests`` are the hex digests wanted; a missing one is left out of the result.
        """
        return await asyncio.to_thread(self._get, digests)

    def _get(self, digests: Sequence[str]) -> dict[str, bytes]:
        out = {}
        for digest in digests:
            target = self.path / digest
            if target.exists():
                out[digest] = target.read_bytes()
        return out


class SessionStoreBlobs:
    """A :class:`BlobStore` in the blob table of a :mod:`loopctl.store` session store
    (:class:`~loopctl.store.SQLiteStore`, or :class:`~loopctl.store.PostgresStore` for workers on several
    machines): the blobs sit in the table of the sessions' own big payloads, keyed by the SHA-256 of their
    bytes as those are (``docs/sessions.md``), and ``verify`` keeps checking only what sessions refer to.
    The store's own errors (:class:`~loopctl.errors.StoreError`) go through."""

    def __init__(self, store: loopctl.store.SessionStore) -> None:
        self.store = store

    async def put(self, blobs: Mapping[str, bytes]) -> None:
        """Store the blobs (one write transaction)."""
        await self.store.aput_blobs({bytes.fromhex(d): data for d, data in blobs.items()})

    async def get(self, digests: Sequence[str]) -> Mapping[str, bytes]:
        """The blobs the store has (a digest that is not hex text is one it does not have).

        ``digests`` are the hex digests wanted; a missing one is left out of the result.
        """
        keys = []
        for digest in digests:
            try:
                keys.append(bytes.fromhex(digest))
            except ValueError:
                continue
        found = await self.store.aget_blobs(keys)
        return {key.hex(): data for key, data in found.items()}


class ClaimCheckCodec(PayloadCodec):
    """A Temporal payload codec that moves long strings of big payloads into ``store`` (see the module).

    ``threshold``: payloads at or under this many bytes pass unchanged (default 256 KiB). ``part_limit``:
    strings longer than this many characters are stored (default 16 Ki characters). Use it with
    ``dataclasses.replace(temporalio.converter.default(), payload_codec=ClaimCheckCodec(store))`` as the
    client's ``data_converter``.
    """

    def __init__(self, store: BlobStore, *, threshold: int = 256 * 1024, part_limit: int = 16 * 1024) -> None:
        self.store = store
        self.threshold = threshold
        self.part_limit = part_limit

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Payloads with their long strings (or, when that is not enough, the whole payload) stored.

        ``payloads`` are the Temporal payloads to send.
        """
        return [await self._encode(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """The original payloads."""
        return [await self._decode(p) for p in payloads]

    async def _encode(self, payload: Payload) -> Payload:
        if payload.ByteSize() <= self.threshold:
            return payload
        blobs: dict[str, bytes] = {}
        if payload.metadata.get("encoding") == b"json/plain":
            value = _json_or_none(payload.data)
            if value is not None:
                nested = isinstance(value, str)
                inner = _json_or_none(value) if nested else value
                data = None
                if inner is not None:
                    try:
                        replaced = _externalize(inner, self.part_limit, blobs)
                        data = _dumps_bytes(_dumps_bytes(replaced).decode() if nested else replaced)
                    except (InvalidMessage, ValueError):  # what JSON cannot write back: the whole payload keeps it
                        data = None
                if data is not None:
                    out = Payload(metadata=dict(payload.metadata), data=data)
                    out.metadata["encoding"] = _ENCODING
                    out.metadata["loopctl-claim-check"] = _PARTS
                    out.metadata["loopctl-original-encoding"] = b"json/plain"
                    out.metadata["loopctl-nested"] = b"1" if nested else b"0"
                    if out.ByteSize() <= self.threshold:
                        await self.store.put(blobs)
                        return out
        whole = payload.SerializeToString()
        digest = hashlib.sha256(whole).hexdigest()
        blobs = {digest: whole}
        await self.store.put(blobs)
        return Payload(
            metadata={"encoding": _ENCODING, "loopctl-claim-check": _WHOLE}, data=_dumps_bytes({BLOB_KEY: digest})
        )

    async def _decode(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != _ENCODING:
            return payload
        kind = payload.metadata.get("loopctl-claim-check")
        value = _loads(payload.data)
        if kind == _WHOLE:
            digest = value[BLOB_KEY]
            data = (await self._fetch([digest]))[digest]
            out = Payload()
            out.ParseFromString(data)
            return out
        nested = payload.metadata.get("loopctl-nested") == b"1"
        inner = _loads(value) if nested else value
        digests: list[str] = []
        _references(inner, digests)
        found = await self._fetch(digests)
        restored = _internalize(inner, found)
        data = _dumps_bytes(_dumps_bytes(restored).decode() if nested else restored)
        out = Payload(metadata=dict(payload.metadata), data=data)
        out.metadata["encoding"] = payload.metadata["loopctl-original-encoding"]
        for key in ("loopctl-claim-check", "loopctl-original-encoding", "loopctl-nested"):
            del out.metadata[key]
        return out

    async def _fetch(self, digests: Sequence[str]) -> Mapping[str, bytes]:
        wanted = sorted(set(digests))
        found = await self.store.get(wanted) if wanted else {}
        for digest in wanted:
            data = found.get(digest)
            if data is None:
                raise BlobMissing(f"the payload refers to blob {digest}, which the blob store does not have")
            if hashlib.sha256(data).hexdigest() != digest:
                raise BlobMissing(f"blob {digest} in the blob store does not match its digest")
        return found


def _loads(data: str | bytes) -> Any:
    """The value of JSON ``data``, exact: integers of any size stay integers (orjson would read one past 64
    bits as a float); ``NaN`` and ``Infinity`` are refused (``ValueError``), as nothing writes them back."""
    return pydantic_core.from_json(data, allow_inf_nan=False)


def _json_or_none(data: str | bytes) -> Any:
    """The value of the JSON object or array ``data``; ``None`` for anything else (a payload the codec cannot
    cut into parts: it is stored whole, or passes when small)."""
    if not data or data[0] not in ("{[" if isinstance(data, str) else b'{["'):
        return None
    try:
        return _loads(data)
    except ValueError:
        return None


def _externalize(value: Any, limit: int, blobs: dict[str, bytes]) -> Any:
    """``value`` with its strings longer than ``limit`` put in ``blobs`` and replaced by references. Raises
    ``ValueError`` for a number JSON cannot write back (``1e400`` reads as infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be written back as JSON")
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        data = value.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {BLOB_KEY: digest}
    if isinstance(value, list):
        return [_externalize(v, limit, blobs) for v in value]
    if isinstance(value, dict):
        out = {k: _externalize(v, limit, blobs) for k, v in value.items()}
        if len(value) == 1 and (BLOB_KEY in value or _LITERAL_KEY in value):
            return {_LITERAL_KEY: out}  # the application's own object of that shape stays itself
        return out
    return value


def _references(value: Any, out: list[str]) -> None:
    if isinstance(value, list):
        for v in value:
            _references(v, out)
    elif isinstance(value, dict):
        if len(value) == 1 and BLOB_KEY in value and isinstance(value[BLOB_KEY], str):
            out.append(value[BLOB_KEY])
        elif len(value) == 1 and _LITERAL_KEY in value:
            for v in value[_LITERAL_KEY].values():
                _references(v, out)
        else:
            for v in value.values():
                _references(v, out)


def _internalize(value: Any, blobs: Mapping[str, bytes]) -> Any:
    if isinstance(value, list):
        return [_internalize(v, blobs) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and BLOB_KEY in value and isinstance(value[BLOB_KEY], str):
            return blobs[value[BLOB_KEY]].decode("utf-8")
        if len(value) == 1 and _LITERAL_KEY in value:
            return {k: _internalize(v, blobs) for k, v in value[_LITERAL_KEY].items()}
        return {k: _internalize(v, blobs) for k, v in value.items()}
    return value
