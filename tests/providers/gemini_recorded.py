"""Test helper: read a recorded Gemini request body back into loopctl messages.

Handles what the recordings hold: ``systemInstruction``, user ``text`` / ``inlineData`` / ``functionResponse``
parts, model ``text`` / ``functionCall`` parts with their ``thoughtSignature``. The recorders re-encoded bytes
as base64url (google-genai sends ``bytes`` that way); the reader turns them back into standard base64, as
the API returned them, so the messages hold what a loopctl run would have held.
"""

from __future__ import annotations

import base64
from typing import Any

from loopctl.message import (
    ImagePart,
    ImageSource,
    Message,
    MessagePart,
    Role,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)


def standard_base64(text: str) -> str:
    """base64url (with or without padding) -> standard padded base64; standard input comes back unchanged."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return base64.b64encode(raw).decode()


def system_of(body: dict[str, Any]) -> str | None:
    instruction = body.get("systemInstruction")
    if not instruction:
        return None
    return "".join(p["text"] for p in instruction["parts"])


def messages_of(body: dict[str, Any]) -> list[Message]:
    """The ``contents`` of a recorded request as messages. Calls get the ids the request gave them (or
    ``call_<n>``); results are paired with the calls of the previous model content in order."""
    out: list[Message] = []
    last_calls: list[ToolCallPart] = []
    counter = 0
    for content in body["contents"]:
        parts: list[MessagePart] = []
        if content.get("role") == "model":
            last_calls = []
            for part in content["parts"]:
                signature = part.get("thoughtSignature")
                if signature is not None:
                    parts.append(ThinkingPart(text="", signature=standard_base64(signature), provider="gemini"))
                if "functionCall" in part:
                    call = part["functionCall"]
                    counter += 1
                    minted = "id" in call
                    tool_call = ToolCallPart(
                        id=call.get("id", f"call_{counter}"),
                        name=call["name"],
                        input=call.get("args", {}),
                        provider="gemini" if minted else None,
                    )
                    last_calls.append(tool_call)
                    parts.append(tool_call)
                else:
                    parts.append(TextPart(text=part["text"]))
            out.append(Message.new(Role.ASSISTANT, parts))
            continue
        answered = 0
        for part in content["parts"]:
            if "functionResponse" in part:
                response = part["functionResponse"]
                call = last_calls[answered]
                answered += 1
                payload = response["response"]
                (key, value), *_ = payload.items()
                parts.append(
                    ToolResultPart(call_id=call.id, name=response["name"], output=str(value), is_error=key == "error")
                )
            elif "inlineData" in part:
                data = part["inlineData"]
                source = ImageSource.new_base64(data["mimeType"], standard_base64(data["data"]))
                parts.append(ImagePart(source=source))
            else:
                parts.append(TextPart(text=part["text"]))
        out.append(Message.new(Role.USER, parts))
    return out
