"""The conversation model: ``Message{role, parts}`` and its five part kinds.

The wire form and the rules a conversation keeps: ``docs/wire-format.md``.
Every value here is an immutable pydantic model compared by value; a message in a history never changes
under you. The JSON wire form is written by hand (``to_dict``) so that key order and the "always written" /
"written only when set" rules are exactly those of ``docs/wire-format.md``, and read through pydantic so
that bad input is refused with a path, never coerced.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import binascii
import enum
import json
import math
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import FrozenInstanceError
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, Self, TypeAlias, TypeVar, Union, cast

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    JsonValue,
    RootModel,
    StrictBool,
    Tag,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, PydanticUndefined, core_schema

from loopctl.errors import InvalidMessage

__all__ = [
    "CompactionPart",
    "ImagePart",
    "ImageSource",
    "Message",
    "MessagePart",
    "Part",
    "Retention",
    "Role",
    "ServerToolCallPart",
    "ServerToolResultPart",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolContent",
    "ToolContentPart",
    "ToolResultPart",
]


class Role(enum.StrEnum):
    """Who sent a message (``docs/wire-format.md``, "Conversation rules").

    ``USER`` is a human turn and also carries tool results; ``ASSISTANT`` is the model's reply;
    ``SYSTEM`` is context the framework injects, folded per provider by the request builders.
    """

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


class Retention(enum.StrEnum):
    """How compaction may treat a tool result (``docs/compaction.md``, "Retention classes"). Untagged is ``None``.

    ``REQUERY``: re-derivable (a file read, a search hit); cleared after the untagged pool runs out, with a
    marker naming the call. ``DURABLE``: not re-derivable; never pruned, summarized rather than deleted.
    Wire form: ``{"type": "requery"}`` / ``{"type": "durable"}`` (bare strings also read).
    """

    REQUERY = "requery"
    DURABLE = "durable"


def _read_retention(value: object) -> object:
    """Accept ``{"type": "requery"}``, ``"requery"`` or a :class:`Retention`; refuse anything else."""
    if value is None or isinstance(value, Retention):
        return value
    if isinstance(value, dict):
        if "type" not in value:
            raise ValueError('expected {"type": "requery"} or {"type": "durable"}, got an object without "type"')
        value = value["type"]
    if isinstance(value, str):
        try:
            return Retention(value)
        except ValueError:
            pass
    raise ValueError(f'expected "requery" or "durable", got {value!r}')


def _retention_arg(value: object) -> Retention | None:
    try:
        return cast(Retention | None, _read_retention(value))
    except ValueError as exc:
        raise InvalidMessage("retention", str(exc)) from None


_SURROGATE_ERROR = "expected a string that is valid Unicode (found a lone surrogate)"


class _Writable:
    """The core schema of :data:`Str`: a strict ``str`` that pydantic-core reads as UTF-8 (a pattern that
    matches any text makes it do so), so a string with a lone surrogate, which no JSON writer can write, is
    refused in C as it is validated (error ``string_unicode``), in every way a value is built: a
    constructor, ``from_dict``, ``model_validate``, ``model_copy``, a part inside a message. JSON text holds
    none (pydantic's JSON parser refuses an unpaired escape), so it costs a pattern match there."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.str_schema(strict=True, pattern="")

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "string"}


Str: TypeAlias = Annotated[str, _Writable]
"""A strict string (never coerced) that can be written as UTF-8: a lone surrogate is refused where it enters."""


# ``defer_build``: pydantic builds a model's validator when it is first used, not at import (the build of the
# whole model took about 45 ms of every ``import loopctl``, and a process that never builds a message, such as
# ``loopctl --help``, paid it too).
_CONFIG = ConfigDict(frozen=True, extra="ignore", validate_default=False, hide_input_in_errors=True, defer_build=True)


def _refuse_assignment(self: object, name: str, value: object = None) -> NoReturn:
    raise FrozenInstanceError(
        f"cannot change {type(self).__name__}.{name}: messages and parts are immutable values; build a new one"
    )


class _Value(BaseModel):
    """The common base of the model's values: frozen, compared by value, and refusing bad input with
    :class:`~loopctl.errors.InvalidMessage` (never a pydantic error) from every constructor."""

    model_config = _CONFIG

    def __init__(self, /, **data: Any) -> None:
        # What ``BaseModel.__init__`` does (the class's validator, filling this instance), called directly:
        # a frame and a ``super()`` less for every value built.
        try:
            type(self).__pydantic_validator__.validate_python(data, self_instance=self)
        except ValidationError as exc:
            raise _invalid(exc, "") from None

    # Tells pydantic this __init__ only wraps the base one, so nested validation (from_json, from_dict) goes
    # straight through pydantic-core instead of calling back into Python for every part.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    # pydantic's frozen models raise a pydantic ValidationError on assignment; an immutable value raises
    # what a frozen dataclass raises.
    __setattr__ = _refuse_assignment
    __delattr__ = _refuse_assignment

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with the fields in ``update`` replaced. Unlike pydantic's own ``model_copy``, which sets
        them unchecked, the new values are validated as a constructor's are: a bad one raises
        :class:`~loopctl.errors.InvalidMessage` naming the field (``text``, ``input.path``), and a name that
        is no field raises ``TypeError``. Without ``update`` the copy is the same value."""
        if not update:
            return super().model_copy(deep=deep)
        fields = type(self).model_fields
        unknown = [name for name in update if name not in fields]
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {unknown[0]!r}")
        data = {name: getattr(self, name) for name in fields}
        data.update(update)
        return _validate(type(self), data, "")


class ImageSource(_Value):
    """Base64 image bytes with their media type (``docs/wire-format.md``, "image").

    Wire form: ``{"encoding": "base64", "media_type": "image/png", "data": "<base64>"}``. ``encoding`` is
    always ``"base64"``; ``data`` must be standard base64 (RFC 4648 section 4, padded, no line breaks) or
    :class:`~loopctl.errors.InvalidMessage` is raised.
    """

    encoding: Literal["base64"] = "base64"
    """Always ``"base64"``; any other value is refused."""
    media_type: Str
    """MIME type of the image, e.g. ``"image/png"``."""
    data: Str
    """The image bytes, base64-encoded."""

    @field_validator("data")
    @classmethod
    def _data_is_base64(cls, data: str) -> str:
        try:
            binascii.a2b_base64(data, strict_mode=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"expected standard base64 image data ({exc})") from None
        return data

    @classmethod
    def new_base64(cls, media_type: str, data: str) -> ImageSource:
        """Build a source from a media type and base64 text; raises ``InvalidMessage`` if ``data`` is not
        base64.

        ``media_type`` is the image's type (``image/png``, ``image/jpeg``, ``image/gif``, ``image/webp``).
        """
        return cls(media_type=media_type, data=data)

    def to_dict(self) -> dict[str, Any]:
        """The wire object: ``{"encoding", "media_type", "data"}`` in that order."""
        return {"encoding": "base64", "media_type": self.media_type, "data": self.data}

    def __repr__(self) -> str:
        return f"ImageSource(media_type={self.media_type!r}, data=<{len(self.data)} base64 chars>)"


class MessagePart(_Value):
    """One part of a message (``docs/wire-format.md``, "Parts"): the base of the five kinds.

    The kinds are :class:`TextPart`, :class:`ImagePart`, :class:`ToolCallPart`, :class:`ThinkingPart` and
    :class:`ToolResultPart`, told apart on the wire by ``"type"``. The constructors ``MessagePart.text``,
    ``MessagePart.tool_call`` and ``MessagePart.tool_result`` build the common kinds.
    """

    if TYPE_CHECKING:
        # Assigned after the subclasses are built (see the end of this module): a classmethod named
        # ``text`` on the base would otherwise become the default of TextPart's ``text`` field, and a
        # missing ``text`` on input would silently read as the constructor.
        @classmethod
        def text(cls, text: str) -> TextPart:
            """A text part holding ``text``."""
            ...

    @staticmethod
    def tool_call(id: str, name: str, input: Any) -> ToolCallPart:  # noqa: A002 - the documented names
        """A tool call: the model asks to run ``name`` with JSON ``input`` under the provider-assigned ``id``."""
        return ToolCallPart(id=id, name=name, input=input)

    @staticmethod
    def tool_result(
        call_id: str, name: str, output: ToolContent | str | Sequence[ToolContentPart], is_error: bool = False
    ) -> ToolResultPart:
        """A tool result answering the call ``call_id`` of tool ``name``.

        ``is_error`` is always stored as a bool (``docs/wire-format.md``, "tool_result"): anything but
        ``True``/``False`` (``None`` included) raises ``InvalidMessage``, as nothing is coerced; build
        ``ToolResultPart(is_error=None)`` for an unset flag. ``retention`` starts untagged (``None``).

        ``output`` is the result: text, a :class:`ToolContent`, or a list of text and image parts; ``is_error``
        marks a failure the model should read as one.
        """
        if not isinstance(is_error, bool):
            raise InvalidMessage("is_error", f"expected true or false, got {type(is_error).__name__}")
        return ToolResultPart(call_id=call_id, name=name, output=output, is_error=is_error)

    @staticmethod
    def from_dict(data: object) -> Part:
        """Read one part from its wire object; raises ``InvalidMessage`` naming the bad path.

        ``data`` is the part's wire object (a parsed JSON object).
        """
        try:
            part = _PART_ADAPTER.validate_python(data)
        except ValidationError as exc:
            raise _invalid(exc, "", tagged_root=True) from None
        return part

    # --- readers ---------------------------------------------------------------------------------------

    def is_text(self) -> bool:
        """True for a :class:`TextPart`."""
        return False

    def is_image(self) -> bool:
        """True for an :class:`ImagePart`."""
        return False

    def is_tool_call(self) -> bool:
        """True for a :class:`ToolCallPart`."""
        return False

    def is_thinking(self) -> bool:
        """True for a :class:`ThinkingPart`."""
        return False

    def is_tool_result(self) -> bool:
        """True for a :class:`ToolResultPart`."""
        return False

    def as_text(self) -> str | None:
        """The text of a :class:`TextPart`, else ``None`` (a thinking part is not text)."""
        return None

    def with_retention(self, retention: Retention | str | None) -> MessagePart:
        """A copy tagged with ``retention`` (a :class:`Retention`, ``"requery"``/``"durable"``, or ``None`` for
        untagged); only tool results carry one, other kinds come back unchanged (the same object).

        Raises ``InvalidMessage`` for any other value, whatever the part kind."""
        _retention_arg(retention)
        return self

    def display(self) -> str | None:
        """This part's chunk of ``str(message)`` (``docs/wire-format.md``, "Conversation rules"), or ``None``
        when it adds none."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """The wire object, ``type`` first, then the fields in declaration order."""
        raise NotImplementedError

    def to_json(self) -> str:
        """Compact JSON of :meth:`to_dict`, non-ASCII written as UTF-8; raises ``InvalidMessage`` for a
        string that cannot be written (a lone surrogate)."""
        return _dumps(self.to_dict())

    def __str__(self) -> str:
        return self.display() or ""

    def __repr_args__(self) -> Any:
        # Unset optional keys are noise in a debugger; the wire form omits them too.
        for name, value in super().__repr_args__():
            if value is None and name in _OPTIONAL_KEYS:
                continue
            yield name, value


_OPTIONAL_KEYS = frozenset(
    {"item_id", "signature", "redacted", "provider", "retention", "citations", "server", "raw", "is_error"}
)


class TextPart(MessagePart):
    """Plain text. Wire: ``{"type": "text", "text": "hello"}``."""

    type: Literal["text"] = Field(default="text", repr=False)
    text: Str  # type: ignore[assignment]
    """The text, fully assembled (streamed deltas concatenated)."""
    item_id: Str | None = None
    """Extension (``docs/wire-format.md``): the provider's id of the output item this text came in (OpenAI
    Responses ``msg_…``), sent back so a preceding reasoning item keeps its following item. Omitted when
    unset."""
    citations: tuple[dict[str, JsonValue], ...] | None = None
    """Extension (``docs/wire-format.md``, "Provider-native parts"): the sources the provider attached to this
    text, each exactly as received (Anthropic ``citations`` of a text block, OpenAI Responses
    ``annotations`` of an ``output_text``), replayed only to ``provider``. Omitted when unset."""
    provider: Str | None = None
    """Extension: who attached ``citations`` (``"anthropic"``, ``"openai"``). Omitted when unset."""

    @field_validator("citations")
    @classmethod
    def _citations_are_writable(cls, value: Any) -> Any:
        return None if value is None else tuple(_raw_is_writable(list(value)))

    def is_text(self) -> bool:
        return True

    def as_text(self) -> str:
        return self.text

    def display(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        if self.item_id is None and self.citations is None and self.provider is None:
            return {"type": "text", "text": self.text}
        d: dict[str, Any] = {"type": "text", "text": self.text}
        if self.item_id is not None:
            d["item_id"] = self.item_id
        if self.citations is not None:
            d["citations"] = list(self.citations)
        if self.provider is not None:
            d["provider"] = self.provider
        return d


class ImagePart(MessagePart):
    """A base64 image; valid only in user messages and tool results (``docs/wire-format.md``, "image").

    Wire: ``{"type": "image", "source": {"encoding": "base64", "media_type": "image/png", "data": "…"}}``.
    """

    type: Literal["image"] = Field(default="image", repr=False)
    source: ImageSource
    """The image bytes and media type."""

    def is_image(self) -> bool:
        return True

    def display(self) -> str:
        return f"[Image: {self.source.media_type}]"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "image", "source": self.source.to_dict()}


class ToolCallPart(MessagePart):
    """The model asks to run a tool. Wire: ``{"type": "tool_call", "id", "name", "input"}``.

    ``id`` is assigned by the provider and unique within a turn; ``input`` is any JSON value (usually an
    object). The extensions ``item_id`` and ``provider`` are written only when set.
    """

    type: Literal["tool_call"] = Field(default="tool_call", repr=False)
    id: Str
    """The provider's call id; the :class:`ToolResultPart` that answers it carries the same ``call_id``."""
    name: Str
    """The tool's name, as offered in the request's tools."""
    input: JsonValue
    """The arguments, a JSON value (a streamed ``""`` reads as ``{}``)."""
    item_id: Str | None = None
    """Extension (``docs/wire-format.md``): the provider's item id of this call when it differs from the call
    id (OpenAI Responses ``fc_…``). Omitted when unset."""
    provider: Str | None = None
    """Extension (``docs/wire-format.md``): the provider that minted ``id``, set when a codec must know it to
    send the id back (``"gemini"``: Gemini's ``functionCall.id`` is echoed only to Gemini, while the ids the
    Gemini codec derives for calls that came without one are never sent). Omitted when unset."""

    @field_validator("input", mode="wrap")
    @classmethod
    def _input_is_json(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # The common case costs a few calls into C: orjson writes the value (refusing a lone surrogate in a
        # string or key, a key that is not a string, an integer past 64 bits and every type but the exact
        # JSON ones: subclasses, dataclasses and dates go to ``default``, which refuses them), reads it back
        # (the copy the part keeps: a caller's later change to its dict never reaches the part), and the
        # copy must equal the value (a tuple, an enum member, a UUID or a NaN is written as something else:
        # not equal). The depth is measured only when the text could be deep. Anything else takes the full
        # check (:func:`_checked_input`), which says what is wrong and where.
        try:
            text = orjson.dumps(value, default=_not_plain, option=_PLAIN)
        except (orjson.JSONEncodeError, RecursionError):
            return _checked_input(value, handler)
        shallow = text.count(b"[") + text.count(b"{") <= MAX_INPUT_DEPTH or json_depth(value) <= MAX_INPUT_DEPTH
        if info.mode == "json":  # read from JSON text: a fresh value of the JSON types, its strings valid
            if shallow and _finite(value, text):
                return value
        elif shallow:
            copy = orjson.loads(text)
            if copy == value:
                return copy
        return _checked_input(value, handler)

    def is_tool_call(self) -> bool:
        return True

    def display(self) -> str:
        return f"[Tool: {self.name} with input: {_display_json(self.input)}]"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": "tool_call", "id": self.id, "name": self.name, "input": self.input}
        if self.item_id is not None:
            d["item_id"] = self.item_id
        if self.provider is not None:
            d["provider"] = self.provider
        return d


class ThinkingPart(MessagePart):
    """The model's private reasoning (``docs/wire-format.md``, "thinking").

    Wire: ``{"type": "thinking", "text": "…", "signature": "…"}``; ``signature``, ``redacted`` and the
    extensions are written only when set. Signatures and redacted payloads are opaque and replayed verbatim,
    only to the provider named in ``provider`` (``docs/providers.md``, "The reasoning replay policy").
    """

    type: Literal["thinking"] = Field(default="thinking", repr=False)
    text: Str  # type: ignore[assignment]
    """The visible reasoning (or summary); ``""`` for a redacted block."""
    signature: Str | None = None
    """The provider's signature over this block (Anthropic ``signature``, Gemini ``thoughtSignature``, OpenAI
    Responses ``encrypted_content``), exactly as received."""
    redacted: Str | None = None
    """The opaque payload of a block the provider withheld (Anthropic ``redacted_thinking.data``)."""
    provider: Str | None = None
    """Extension: who minted ``signature``/``redacted`` (``"anthropic"``, ``"gemini"``, ``"openai"``)."""
    item_id: Str | None = None
    """Extension: the provider's id of the reasoning item (OpenAI Responses ``rs_…``)."""

    def is_thinking(self) -> bool:
        return True

    def display(self) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": "thinking", "text": self.text}
        if self.signature is not None:
            d["signature"] = self.signature
        if self.redacted is not None:
            d["redacted"] = self.redacted
        if self.provider is not None:
            d["provider"] = self.provider
        if self.item_id is not None:
            d["item_id"] = self.item_id
        return d


MAX_INPUT_DEPTH = 128
"""The deepest a tool call's ``input`` may nest (arrays and objects; ``{}`` is 1 level, ``{"a": []}`` 2).
Every reader and writer of conversation, machine and session files handles this depth with room to spare
(``docs/wire-format.md``)."""


def json_depth(value: object) -> int:
    """How many arrays and objects ``value`` nests (0 for a scalar); iterative, so any depth is safe to
    measure. Tuples count as arrays."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > MAX_INPUT_DEPTH + 1:
                return deepest  # deep enough to refuse; no need to walk a huge value
        stack.extend((child, depth) for child in children)
    return deepest


def _unwritable_at(value: object, path: str, *, numbers: bool = False, strings: bool = False) -> str | None:
    """The sub-path (``.x[1]``) of the first value in a JSON value that JSON cannot carry, or ``None``: when
    ``numbers``, a NaN or infinite float; when ``strings``, a string or key with a lone surrogate (a bad key
    is named with its surrogate escaped, so the path stays printable)."""
    if isinstance(value, float):
        return None if not numbers or math.isfinite(value) else path
    if isinstance(value, str):
        return path if strings and has_lone_surrogate(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            if strings and isinstance(k, str) and has_lone_surrogate(k):
                return f"{path}.{k.encode('utf-8', 'backslashreplace').decode()}"
            if isinstance(v, (float, dict, list)) or (strings and isinstance(v, str)):
                found = _unwritable_at(v, f"{path}.{k}", numbers=numbers, strings=strings)
                if found is not None:
                    return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (float, dict, list)) or (strings and isinstance(v, str)):
                found = _unwritable_at(v, f"{path}[{i}]", numbers=numbers, strings=strings)
                if found is not None:
                    return found
    return None


def has_lone_surrogate(value: str) -> bool:
    """True for a string with a lone surrogate, which cannot be written as UTF-8. O(1) for ASCII text; other
    text is encoded once (faster than searching it for the surrogate range)."""
    if value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# The string fields of each value, checked for lone surrogates (beside a tool call's input and a result's
# output, which are walked).
_STRING_FIELDS: dict[str, tuple[str, ...]] = {
    "ImageSource": ("media_type",),
    "TextPart": ("text", "item_id", "provider"),
    "ThinkingPart": ("text", "signature", "redacted", "provider", "item_id"),
    "ToolCallPart": ("id", "name", "item_id", "provider"),
    "ToolResultPart": ("call_id", "name"),
    "ServerToolCallPart": ("id", "name", "provider", "server"),
    "ServerToolResultPart": ("call_id", "name", "output", "provider"),
    "CompactionPart": ("provider", "summary"),
}


def lone_surrogate_in_json(value: object, path: str) -> str | None:
    """``path`` plus the sub-path (``.properties.q``) of the first string or key of a JSON value that has a
    lone surrogate, or ``None`` (a bad key is named with its surrogate escaped, so the path stays
    printable)."""
    return _unwritable_at(value, path, strings=True)


def lone_surrogate_at(value: object) -> str | None:
    """The path (``parts[1].input.q``; ``text`` for a part) of the first string in a message, a part, an
    image source or a tool output that has a lone surrogate, so cannot be written as UTF-8; ``None`` when
    there is none. One pass; ASCII strings cost O(1) each."""
    if isinstance(value, Message):
        for i, part in enumerate(value.parts):
            found = lone_surrogate_at(part)
            if found is not None:
                return f"parts[{i}].{found}"
        return None
    if isinstance(value, ToolContent):
        root = value.root
        if isinstance(root, str):
            return "" if has_lone_surrogate(root) else None
        for i, sub in enumerate(root):
            found = lone_surrogate_at(sub)
            if found is not None:
                return f"[{i}].{found}"
        return None
    for name in _STRING_FIELDS.get(type(value).__name__, ()):
        field_value = getattr(value, name)
        if field_value is not None and has_lone_surrogate(field_value):
            return name
    if isinstance(value, (ToolCallPart, ServerToolCallPart)):
        found = _unwritable_at(value.input, "input", strings=True)
        if found is not None or not isinstance(value, ServerToolCallPart):
            return found
    if isinstance(value, (ServerToolCallPart, ServerToolResultPart, CompactionPart)) and value.raw is not None:
        return _unwritable_at(value.raw, "raw", strings=True)
    if isinstance(value, TextPart) and value.citations is not None:
        return _unwritable_at(list(value.citations), "citations", strings=True)
    if isinstance(value, ToolResultPart):
        found = lone_surrogate_at(value.output)
        return None if found is None else f"output{found}"
    if isinstance(value, ImagePart):
        found = lone_surrogate_at(value.source)
        return None if found is None else f"source.{found}"
    return None


_PLAIN = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _not_plain(value: object) -> NoReturn:
    raise TypeError(type(value).__name__)


def _finite(value: object, text: bytes) -> bool:
    """Whether a JSON value holds no NaN or infinity, given the bytes orjson wrote for it (it writes those as
    ``null``: without a ``null`` there is none)."""
    return b"null" not in text or _unwritable_at(value, "", numbers=True) is None


def _checked_input(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A tool call's ``input`` checked in full, naming what is wrong and where: nested at most
    :data:`MAX_INPUT_DEPTH` levels (measured before pydantic walks the value: its own limit, about 255 levels,
    gives an error with no path, and the JSON readers of conversation and machine files stop sooner, about
    195 levels inside a file, so a deeper input could be saved but never read back), a JSON value (pydantic's
    ``JsonValue``), no NaN or infinity (``JsonValue`` takes them; orjson would write them as ``null``), no
    lone surrogate in a string or key."""
    if json_depth(value) > MAX_INPUT_DEPTH:
        raise PydanticCustomError(
            "too_deep", f"expected JSON nested at most {MAX_INPUT_DEPTH} levels deep (arrays and objects)"
        )
    value = handler(value)
    found = _unwritable_at(value, "", numbers=True)
    if found is not None:
        raise PydanticCustomError(
            "non_finite_number", "expected a finite number (JSON has no NaN or Infinity)", {"subpath": found}
        )
    found = _unwritable_at(value, "", strings=True)
    if found is not None:
        raise PydanticCustomError("string_surrogate", _SURROGATE_ERROR, {"subpath": found})
    return value


ToolContentPart: TypeAlias = Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]
"""A part of a multipart tool output: a :class:`TextPart` or an :class:`ImagePart` (same JSON shapes)."""


def _tool_content_tag(value: object) -> str | None:
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "multipart"
    return None


_ToolContentRoot: TypeAlias = Annotated[
    Union[Annotated[Str, Tag("string")], Annotated[tuple[ToolContentPart, ...], Tag("multipart")]],
    Discriminator(
        _tool_content_tag,
        custom_error_type="tool_content_type",
        custom_error_message="expected a string or an array of text/image parts",
    ),
]


class ToolContent(RootModel):  # type: ignore[type-arg]
    """A tool's output (``docs/wire-format.md``, "ToolContent"): plain text or a list of text and image parts.

    Untagged on the wire: a bare JSON string, or a bare array of ``text``/``image`` parts. A plain ``str`` is
    accepted wherever a ``ToolContent`` is. ``str(content)`` joins the text parts with ``"\\n"`` and skips
    images.
    """

    # The root type is declared as a field, not as ``RootModel[...]``: a parametrized RootModel is a class
    # pydantic builds at once, at import, where this one is built when first used.
    model_config = ConfigDict(frozen=True, hide_input_in_errors=True, defer_build=True)
    root: _ToolContentRoot

    def __init__(self, /, root: Any = PydanticUndefined, **data: Any) -> None:
        try:
            super().__init__(root, **data)
        except ValidationError as exc:
            raise _invalid(exc, "", tagged_root=True) from None
        if not isinstance(self.root, str):
            # Parts handed in as objects are kept as they are (pydantic does not validate an instance again):
            # one made without validation (``model_construct``) is checked here, where a tool's output enters.
            found = lone_surrogate_at(self)
            if found is not None:
                raise InvalidMessage(found, _SURROGATE_ERROR)

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]
    __setattr__ = _refuse_assignment
    __delattr__ = _refuse_assignment

    @classmethod
    def from_string(cls, text: str) -> ToolContent:
        """The text form."""
        return cls(text)

    @classmethod
    def from_multipart(cls, parts: Iterable[TextPart | ImagePart]) -> ToolContent:
        """The multipart form (text and images, in order).

        ``parts`` are the text and image parts, in order.
        """
        return cls(tuple(parts))

    def is_string(self) -> bool:
        """True for the text form."""
        return isinstance(self.root, str)

    @property
    def parts(self) -> tuple[TextPart | ImagePart, ...]:
        """The parts of the multipart form; the text form reads as one :class:`TextPart`."""
        root = self.root
        return (TextPart(text=root),) if isinstance(root, str) else root

    def images(self) -> tuple[ImagePart, ...]:
        """The image parts, in order (none for the text form)."""
        root = self.root
        return () if isinstance(root, str) else tuple(p for p in root if isinstance(p, ImagePart))

    def to_wire(self) -> str | list[dict[str, Any]]:
        """The wire value: the string itself, or the list of part objects."""
        root = self.root
        return root if isinstance(root, str) else [p.to_dict() for p in root]

    def __str__(self) -> str:
        root = self.root
        if isinstance(root, str):
            return root
        return "\n".join(p.text for p in root if isinstance(p, TextPart))

    def __repr__(self) -> str:
        return f"ToolContent({self.root!r})"


def _read_tool_content(value: object) -> object:
    if isinstance(value, (str, ToolContent)):
        return value
    if isinstance(value, list):
        return tuple(value)
    return value


class ToolResultPart(MessagePart):
    """The answer to a tool call; rides in a user message (``docs/wire-format.md``, "Conversation rules").

    Wire: ``{"type": "tool_result", "call_id", "name", "output", "is_error"[, "retention"]}``. ``name`` is
    always written (``""`` when empty, and ``""`` when missing on input, for old data); ``is_error`` is always
    written (``true``, ``false`` or ``null``); ``retention`` only when set.
    """

    type: Literal["tool_result"] = Field(default="tool_result", repr=False)
    call_id: Str
    """The ``id`` of the :class:`ToolCallPart` this answers."""
    name: Str = ""
    """The called tool's name; Gemini matches results by name. ``""`` in old data."""
    output: ToolContent
    """What the tool returned."""
    is_error: StrictBool | None = None
    """``True`` marks a failed run; ``None`` and ``False`` both mean success."""
    retention: Retention | None = None
    """How compaction may treat this result; ``None`` is untagged."""

    _read_output = field_validator("output", mode="before")(_read_tool_content)
    _read_retention = field_validator("retention", mode="before")(_read_retention)

    def is_tool_result(self) -> bool:
        return True

    def failed(self) -> bool:
        """True when ``is_error`` is ``True`` (``None`` and ``False`` are success)."""
        return self.is_error is True

    def with_retention(self, retention: Retention | str | None) -> ToolResultPart:
        """A new result tagged with ``retention`` (``None`` removes the tag); this one is unchanged."""
        return self.model_copy(update={"retention": _retention_arg(retention)})

    def display(self) -> str:
        return f"[Tool Result: {self.output}]"

    def to_dict(self) -> dict[str, Any]:
        output = self.output.root
        d: dict[str, Any] = {
            "type": "tool_result",
            "call_id": self.call_id,
            "name": self.name,
            "output": output if isinstance(output, str) else [p.to_dict() for p in output],
            "is_error": self.is_error,
        }
        if self.retention is not None:
            d["retention"] = {"type": self.retention.value}
        return d


# --- provider-native parts (docs/wire-format.md, "Provider-native parts") -------------------------------------


def _raw_is_writable(value: Any) -> Any:
    # The provider's own block is replayed verbatim, so it must be JSON that JSON can carry (no NaN, no lone
    # surrogate): refused where it enters, as a tool call's input is, not when the conversation is written.
    if value is None:
        return value
    found = _unwritable_at(value, "", numbers=True)
    if found is not None:
        raise PydanticCustomError(
            "non_finite_number", "expected a finite number (JSON has no NaN or Infinity)", {"subpath": found}
        )
    found = _unwritable_at(value, "", strings=True)
    if found is not None:
        raise PydanticCustomError("string_surrogate", _SURROGATE_ERROR, {"subpath": found})
    return value


class ServerToolCallPart(MessagePart):
    """A tool the provider ran on its own side (web search, code execution, file search, remote MCP...): the
    call. Rides in assistant messages; the engine never runs it (``docs/wire-format.md``, "Provider-native
    parts").

    Wire: ``{"type": "server_tool_call", "id", "name", "input", "provider"[, "server"][, "raw"]}``. ``id`` is
    the provider's id of the call (Anthropic ``srvtoolu_…``, OpenAI Responses ``ws_…``/``ci_…``...), ``name``
    the tool's name as the provider reports it (``web_search``, ``code_execution``, ``code_interpreter``,
    ``file_search``, ``google_search``...; for a remote MCP call the MCP tool's name, with the server's label in
    ``server``), ``input`` what the call was given, ``provider`` who ran it. ``raw`` is the provider's block or
    item exactly as received, sent back verbatim to that provider only; without it (pruned, or built by hand)
    every codec sends the call as a note in text.
    """

    type: Literal["server_tool_call"] = Field(default="server_tool_call", repr=False)
    id: Str
    """The provider's id of the call; a :class:`ServerToolResultPart` of the same message answers it by
    ``call_id``."""
    name: Str
    """The tool's name as the provider reports it."""
    input: JsonValue
    """What the call was given (a query, code, arguments), as a JSON value."""
    provider: Str
    """Who ran the call (``"anthropic"``, ``"openai"``, ``"gemini"``)."""
    server: Str | None = None
    """For a remote MCP call: the server's label. Omitted when unset."""
    raw: dict[str, JsonValue] | None = None
    """The provider's block or item exactly as received (ids, encrypted content, signatures kept); replayed
    only to ``provider``. Omitted when unset."""

    _input_is_writable = field_validator("input")(_raw_is_writable)
    _raw_is_writable = field_validator("raw")(_raw_is_writable)

    def display(self) -> str:
        where = f" on {self.server}" if self.server else ""
        return f"[Server Tool: {self.name}{where} with input: {_display_json(self.input)}]"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "type": "server_tool_call",
            "id": self.id,
            "name": self.name,
            "input": self.input,
            "provider": self.provider,
        }
        if self.server is not None:
            d["server"] = self.server
        if self.raw is not None:
            d["raw"] = self.raw
        return d


class ServerToolResultPart(MessagePart):
    """What a provider-side tool call returned (``docs/wire-format.md``, "Provider-native parts"). Rides in
    the assistant message of its call, after it.

    Wire: ``{"type": "server_tool_result", "call_id", "name", "output", "provider"[, "is_error"][,
    "retention"][, "raw"]}``. ``output`` is the result as readable text (search hits as titles and URLs, a
    program's output, a fetched page), what compaction measures and other providers read; ``raw`` is the
    provider's block exactly as received (Anthropic ``web_search_tool_result`` with its encrypted content...),
    replayed only to ``provider``. An OpenAI Responses item holds call and result in one item, kept as the
    call's ``raw``; its result part then has no ``raw``. ``is_error`` and ``retention`` mean what they mean on
    a :class:`ToolResultPart` and are written only when set.
    """

    type: Literal["server_tool_result"] = Field(default="server_tool_result", repr=False)
    call_id: Str
    """The ``id`` of the :class:`ServerToolCallPart` this answers."""
    name: Str
    """The tool's name, as on the call."""
    output: Str
    """The result as readable text."""
    provider: Str
    """Who ran the call."""
    is_error: StrictBool | None = None
    """``True`` when the provider reports the call failed. Omitted when unset."""
    retention: Retention | None = None
    """How compaction may treat this result (as for a :class:`ToolResultPart`); omitted when unset."""
    raw: dict[str, JsonValue] | None = None
    """The provider's result block exactly as received; replayed only to ``provider``. Omitted when unset."""

    _read_retention = field_validator("retention", mode="before")(_read_retention)
    _raw_is_writable = field_validator("raw")(_raw_is_writable)

    def failed(self) -> bool:
        """True when ``is_error`` is ``True``."""
        return self.is_error is True

    def with_retention(self, retention: Retention | str | None) -> ServerToolResultPart:
        """A new result tagged with ``retention`` (``None`` removes the tag); this one is unchanged."""
        return self.model_copy(update={"retention": _retention_arg(retention)})

    def display(self) -> str:
        return f"[Server Tool Result: {self.output}]"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "type": "server_tool_result",
            "call_id": self.call_id,
            "name": self.name,
            "output": self.output,
            "provider": self.provider,
        }
        if self.is_error is not None:
            d["is_error"] = self.is_error
        if self.retention is not None:
            d["retention"] = {"type": self.retention.value}
        if self.raw is not None:
            d["raw"] = self.raw
        return d


class CompactionPart(MessagePart):
    """A provider's own compaction of the conversation before it (``docs/wire-format.md``, "Provider-native
    parts"): OpenAI's opaque ``compaction`` item, Anthropic's ``compaction`` block. Rides in assistant
    messages; sent back verbatim to ``provider`` only, and to no other provider (it stands for the context it
    replaced, which only its provider can read).

    Wire: ``{"type": "compaction", "provider", "summary", "raw"}``. ``summary`` is the readable summary when
    the provider gives one (Anthropic's block ``content``), ``""`` for an opaque one; ``raw`` is the item or
    block exactly as received.
    """

    type: Literal["compaction"] = Field(default="compaction", repr=False)
    provider: Str
    """Who compacted (``"openai"``, ``"anthropic"``)."""
    summary: Str = ""
    """The readable summary, ``""`` when the provider keeps it opaque."""
    raw: dict[str, JsonValue]
    """The provider's item or block exactly as received."""

    _raw_is_writable = field_validator("raw")(_raw_is_writable)

    def display(self) -> str:
        return (
            f"[Compaction by {self.provider}: {self.summary}]" if self.summary else f"[Compaction by {self.provider}]"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"type": "compaction", "provider": self.provider, "summary": self.summary, "raw": self.raw}


NATIVE_PART_TYPES: tuple[str, ...] = ("server_tool_call", "server_tool_result", "compaction")
"""The ``type`` values of the provider-native parts (``docs/wire-format.md``, "Provider-native parts"); a
conversation file holding one is written as ``format_version`` 2."""

NativePart: TypeAlias = Union[ServerToolCallPart, ServerToolResultPart, CompactionPart]
"""Any provider-native part."""


Part: TypeAlias = Annotated[
    Union[
        TextPart,
        ImagePart,
        ToolCallPart,
        ThinkingPart,
        ToolResultPart,
        ServerToolCallPart,
        ServerToolResultPart,
        CompactionPart,
    ],
    Field(discriminator="type"),
]
"""Any part kind, discriminated by ``type``: the five core kinds (text, image, thinking, tool call, tool
result), and the provider-native ones."""

PART_TYPES: tuple[str, ...] = ("text", "image", "tool_call", "thinking", "tool_result", *NATIVE_PART_TYPES)
"""The ``type`` values this release knows."""


class Message(_Value):
    """One turn of a conversation: a sender and a bundle of parts (``docs/wire-format.md``, "Messages").

    ``parts`` is stored as a tuple and may be empty (silence). Wire: ``{"role": "user", "parts": [...]}``.
    Build with :meth:`user`, :meth:`assistant` or :meth:`new`; there is deliberately no ``Message.system``
    (system guidance belongs in the session's system prompt).
    """

    role: Role
    """Who spoke."""
    parts: tuple[Part, ...]
    """What was said, in order. Required on the wire (a message read without ``parts`` is refused, as the
    original's serde reading is); the keyword constructor ``Message(role=...)`` defaults it to ``()``."""

    def __init__(self, /, **data: Any) -> None:
        if "parts" not in data:
            data["parts"] = ()
        # _Value.__init__ written out (a message is the value built most often).
        try:
            type(self).__pydantic_validator__.validate_python(data, self_instance=self)
        except ValidationError as exc:
            raise _invalid(exc, "") from None

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message with one text part; raises ``InvalidMessage`` (``parts[0].text``) for text that is
        not a ``str`` or holds a lone surrogate."""
        return _validate(cls, {"role": Role.USER, "parts": ({"type": "text", "text": text},)}, "")

    @classmethod
    def assistant(cls, text: str) -> Message:
        """An assistant message with one text part; raises ``InvalidMessage`` as :meth:`user` does."""
        return _validate(cls, {"role": Role.ASSISTANT, "parts": ({"type": "text", "text": text},)}, "")

    @classmethod
    def new(cls, role: Role | str, parts: Iterable[MessagePart] = ()) -> Message:
        """A message with any role and parts (full control); raises ``InvalidMessage`` on bad input."""
        return _validate(cls, {"role": role, "parts": tuple(parts)}, "")

    @classmethod
    def from_dict(cls, data: object) -> Message:
        """Read a message from its wire object; raises ``InvalidMessage`` naming the bad path
        (``parts[2].source.data``) and what was expected."""
        return _validate(cls, data, "")

    @classmethod
    def from_json(cls, data: str | bytes) -> Message:
        """Read a message from JSON text; raises ``InvalidMessage`` for bad JSON or a bad shape.

        ``data`` is the JSON text or its UTF-8 bytes.
        """
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            raise _invalid(exc, "") from None

    # --- readers ---------------------------------------------------------------------------------------

    def text_content(self) -> str:
        """All text parts joined with no separator (``"a"`` + ``"b"`` is ``"ab"``); other kinds skipped."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    def tool_call_parts(self) -> list[tuple[str, str, Any]]:
        """``(id, name, input)`` for every tool call, in order."""
        return [(p.id, p.name, p.input) for p in self.parts if isinstance(p, ToolCallPart)]

    def tool_calls(self) -> list[ToolCallPart]:
        """The tool-call parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    def tool_results(self) -> list[ToolResultPart]:
        """The tool-result parts, in order."""
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    def to_dict(self) -> dict[str, Any]:
        """The wire object: ``{"role": ..., "parts": [...]}``."""
        return {"role": self.role.value, "parts": [p.to_dict() for p in self.parts]}

    def to_json(self) -> str:
        """Compact JSON (no spaces, non-ASCII as UTF-8); the same message always gives the same bytes.

        Raises ``InvalidMessage`` for a string that cannot be written as UTF-8 (a lone surrogate)."""
        return _dumps(self.to_dict())

    def __str__(self) -> str:
        """The display (``docs/wire-format.md``, "Conversation rules"): one chunk per part joined with
        ``"\\n"``; thinking adds no chunk."""
        return "\n".join(chunk for p in self.parts if (chunk := p.display()) is not None)


# The constructor ``MessagePart.text(s)``; assigned here, after TextPart and ThinkingPart have
# collected their own ``text`` fields, so it can never be taken for a field default.
def _text_constructor(cls: type[MessagePart], text: str) -> TextPart:
    """A text part."""
    return TextPart(text=text)


class _TextConstructor:
    """``MessagePart.text``: :func:`_text_constructor` as a classmethod, except on a class that has a ``text``
    field (``TextPart``, ``ThinkingPart``, any subclass of theirs, a part class that declares one), which has
    no such class attribute, as pydantic gives a field none. A class made after this module (a user's) then
    has its ``text`` field as declared (required, a strict string that refuses a lone surrogate): pydantic
    takes a class attribute it finds on a base for the default of a field, and the classmethod made the field
    optional, its default the bound constructor."""

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        cls = owner if owner is not None else type(obj)
        if obj is None and (
            "text" in getattr(cls, "__pydantic_fields__", ())
            or any("text" in vars(k).get("__annotations__", ()) for k in cls.__mro__)  # a class being made
        ):
            raise AttributeError(f"type object {cls.__name__!r} has no attribute 'text'")
        return types.MethodType(_text_constructor, cls)


MessagePart.text = _TextConstructor()  # type: ignore[assignment,method-assign]


# --- JSON helpers ------------------------------------------------------------------------------------------

from pydantic import TypeAdapter  # noqa: E402 - kept next to its only uses

_PART_ADAPTER: TypeAdapter[Part] = TypeAdapter(Part, config=ConfigDict(defer_build=True))


def _display_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _dumps(obj: Any) -> str:
    return _dumps_bytes(obj).decode()


def _dumps_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON. orjson does the work; integers it cannot write (past 64 bits) are written as their
    exact digits (``orjson.Fragment``), so every other value is written by orjson either way and a value's
    bytes never depend on what else the document holds (the codecs' incremental bodies join fragments
    written separately). A lone surrogate raises ``InvalidMessage`` with its path."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:
        if "surrogates" in str(exc) or "UTF-8" in str(exc):
            path = _findhas_lone_surrogate(obj, "")
            raise InvalidMessage(path, "expected a string that is valid Unicode (found a lone surrogate)") from None
        try:
            return orjson.dumps(_big_ints_as_fragments(obj))
        except (orjson.JSONEncodeError, RecursionError):
            pass
        try:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except ValueError as exc2:
            raise InvalidMessage("", f"expected JSON-compatible values ({exc2})") from None


_INT64 = (-(2**63), 2**64 - 1)  # what orjson writes as a number: int64 and uint64


def _big_ints_as_fragments(value: Any) -> Any:
    """``value`` with every integer orjson cannot write replaced by an ``orjson.Fragment`` of its digits
    (containers copied only where they hold one)."""
    if type(value) is int:
        return orjson.Fragment(str(value)) if not _INT64[0] <= value <= _INT64[1] else value
    if isinstance(value, dict):
        return {k: _big_ints_as_fragments(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_big_ints_as_fragments(v) for v in value]
    return value


def _findhas_lone_surrogate(value: Any, path: str) -> str:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return ""
    if isinstance(value, dict):
        for k, v in value.items():
            found = _findhas_lone_surrogate(k, path) or _findhas_lone_surrogate(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _findhas_lone_surrogate(v, f"{path}[{i}]")
            if found:
                return found
    return ""


# --- validation errors -------------------------------------------------------------------------------------


def _path_of(loc: tuple[int | str, ...], prefix: str, *, tagged_root: bool = False) -> str:
    """Turn a pydantic error location into a wire path such as ``messages[3].parts[1].source.data``.

    pydantic adds the tags of the unions it tried to the location: a part's ``type`` (``text``,
    ``tool_call``...) after the index of a part, ``string``/``multipart`` after ``output``, and the JSON type
    (``dict``, ``list``...) before each key of a tool ``input``. They are not part of the wire path and are
    dropped here. ``tagged_root`` says the location starts with such a tag (a part or a ``ToolContent``
    validated on its own).
    """
    out = prefix
    items = list(loc)
    i = 0
    at_tag = tagged_root
    while i < len(items):
        item = items[i]
        if at_tag and isinstance(item, str) and item in _TAGS:
            at_tag = False
            i += 1
            continue
        if isinstance(item, int):
            out += f"[{item}]"
            at_tag = True  # an element of parts, of a multipart output, or of a conversation
        else:
            out += f".{item}" if out else item
            at_tag = item == "output"
            if item == "input":
                # A JsonValue location alternates a type tag and a key or index.
                for key in items[i + 2 :: 2]:
                    out += f"[{key}]" if isinstance(key, int) else f".{key}"
                break
        i += 1
    return out


_TAGS = frozenset((*PART_TYPES, "string", "multipart"))


_EXPECTED = {
    "missing": "a value is required here (missing key)",
    "string_type": "expected a string",
    "bool_type": "expected true, false or null",
    "union_tag_not_found": 'expected an object with a "type" key',
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "dict_type": "expected an object",
    "string_unicode": "expected JSON text that is valid Unicode (found a lone surrogate)",
    "tuple_type": "expected an array",
    "list_type": "expected an array",
    "invalid-json-value": "expected a JSON value (null, true/false, a number, a string, an array, or an object "
    "with string keys)",
}


def _invalid(exc: ValidationError, prefix: str, *, tagged_root: bool = False) -> InvalidMessage:
    """The first error of ``exc`` as ``InvalidMessage``: its wire path and what was expected there."""
    err = exc.errors(include_url=False, include_input=False)[0]
    path = _path_of(tuple(err["loc"]), prefix, tagged_root=tagged_root)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    expected = _EXPECTED.get(kind)
    if kind == "string_unicode" and err["loc"]:  # a field's string, built from Python values
        expected = _SURROGATE_ERROR
    elif kind == "union_tag_invalid":
        expected = f"unknown part type {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    elif kind == "json_invalid":
        expected = f"invalid JSON ({err['msg']})"
    elif expected is None:
        msg = err["msg"]
        for lead, repl in (("Value error, ", ""), ("Input should be ", "expected ")):
            if msg.startswith(lead):
                msg = repl + msg[len(lead) :]
        expected = msg
    if "subpath" in ctx:
        path = (path + ctx["subpath"]) if path else ctx["subpath"].lstrip(".")
    return InvalidMessage(path, expected)


_T = TypeVar("_T", bound=BaseModel)


def assemble(cls: type[_T], *, set_fields: Iterable[str] | None = None, **fields: Any) -> _T:
    """A value of ``cls`` made of ``fields`` without validating them again: for the engine's own values built
    from values that were validated where they entered (a message of the tool results it was given, a result
    of the call's own id and name and a checked content). ``fields`` must name every field, each holding what
    validation would have made of it (a ``tuple`` of parts, a :class:`ToolContent`...). ``set_fields`` names
    the fields the constructor call it stands for would have been given (``model_fields_set``, what
    ``model_dump(exclude_unset=True)`` writes); every field when ``None``."""
    value = cls.__new__(cls)
    _set(value, "__dict__", fields)
    _set(value, "__pydantic_fields_set__", set(fields if set_fields is None else set_fields))
    _set(value, "__pydantic_extra__", None)
    _set(value, "__pydantic_private__", None)
    return value


_set = object.__setattr__


def _validate(target: type[_T], data: object, prefix: str) -> _T:
    try:
        return target.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, prefix) from None
