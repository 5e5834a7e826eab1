"""Native tool calling (the OpenAI tools API) as the backends record it: the prompt a conversation is kept
under, the text a reply is kept as, and reading that text back.

A conversation with tools is recorded as ``conversation_prompt(messages, tools)``: canonical JSON (sorted
keys, no spaces) of ``{"messages": [...], "tools": [...]}``, so its ``prompt_digest`` does not depend on
dict order. A reply is recorded as its text when it asks for no tool call, else as one JSON object
``{"content": "...", "tool_calls": [{"id": "...", "name": "...", "arguments": "..."}]}`` (``render_reply``);
``parse_reply`` reads either form back, which is what ``ScriptedModel.chat_tools`` scripts and replays.
Arguments are kept as the exact string the model wrote: the next request carries it, so a replayed
conversation hashes as the recorded one did.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from teachbot.llm.base import LLMError, ToolCallRequest

REPLY_KEYS = frozenset({"content", "tool_calls"})


def conversation_prompt(messages: Sequence[dict], tools: Sequence[dict]) -> str:
    """The conversation as one string: what is digested, recorded and handed to listeners."""
    return json.dumps({"messages": list(messages), "tools": list(tools)}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)


def render_reply(text: str, calls: Sequence[ToolCallRequest]) -> str:
    """A reply as a completion text: ``text`` alone, or the JSON object with its tool calls."""
    if not calls:
        return text
    return json.dumps({"content": text, "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]},
                      ensure_ascii=False)


def parse_reply(raw: str) -> tuple[str, tuple[ToolCallRequest, ...]]:
    """(text, tool calls) of a scripted or recorded reply: a JSON object with only ``content`` and/or
    ``tool_calls`` keys, else plain text. A call's ``arguments`` may be a JSON object or its string;
    a missing ``id`` becomes ``call_<n>``."""
    try:
        value = json.loads(raw) if raw.lstrip().startswith("{") else None
    except ValueError:
        value = None
    if not isinstance(value, dict) or not value or not set(value) <= REPLY_KEYS:
        return raw, ()
    calls = []
    for n, call in enumerate(value.get("tool_calls") or [], start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise LLMError(f"scripted tool call {n} must be an object with a 'name' (and 'arguments', 'id'), got {call!r}")
        arguments = call.get("arguments", {})
        calls.append(ToolCallRequest(str(call.get("id") or f"call_{n}"), call["name"],
                                     arguments if isinstance(arguments, str) else json.dumps(arguments)))
    return str(value.get("content") or ""), tuple(calls)


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def calls_from_message(message: Any) -> tuple[ToolCallRequest, ...]:
    """The function tool calls of an OpenAI chat message (the client's object or a dict). Servers that send
    the arguments as an object get them as JSON; a call without an id gets ``call_<n>``."""
    calls = []
    for n, call in enumerate(_get(message, "tool_calls") or [], start=1):
        function = _get(call, "function")
        if function is None:  # a custom (free-form) tool call: none is ever offered
            continue
        arguments = _get(function, "arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(ToolCallRequest(str(_get(call, "id") or f"call_{n}"), str(_get(function, "name") or ""), arguments))
    return tuple(calls)
