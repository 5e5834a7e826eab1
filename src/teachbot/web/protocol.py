"""What a page may send, checked before anything acts on it: JSON objects of known types with typed, bounded fields.

A message is one JSON object with a ``type``:

    {"type": "say", "text": "..."}            words for the robot (dialog/user), at most the dialog's max_heard_chars
    {"type": "answer", "question": "...", "text": "..."}
                                              a button's answer to the robot's question of that id (approve, keep);
                                              the robot takes it only while that question is open
    {"type": "stop"} / {"type": "resume"}     the emergency stop engaged / released
    {"type": "end"}                           the conversation is over (the robot's next wait ends it quietly)
    {"type": "lessons", "query": "...", "offset": 0}
                                              a page of the lessons panel's list (from ``offset``, newest first),
                                              filtered by the search words
    {"type": "remove", "id": "..."}           remove one learned lesson
    {"type": "undo"}                          remove the newest learned lesson
    {"type": "confirm_mode", "on": true}      confirm-before-store on or off
    {"type": "trace", "episode": "...", "known": "..."}
                                              the spans of an episode (its id; '' = the newest), unless the page
                                              has them already: ``known`` the version its last answer named

Anything else (not JSON, not an object, another type, a missing or mistyped field, text too long, an id that
cannot name a lesson, a key that does not belong) is refused with a reason and never reaches the robot.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from teachbot.memory.example import ID_PATTERN

FIELDS: dict[str, dict[str, type]] = {
    "say": {"text": str},
    "answer": {"question": str, "text": str},
    "stop": {},
    "resume": {},
    "end": {},
    "lessons": {"query": str, "offset": int},
    "remove": {"id": str},
    "undo": {},
    "confirm_mode": {"on": bool},
    "trace": {"episode": str, "known": str},
}
OPTIONAL = {("lessons", "query"), ("lessons", "offset"), ("trace", "episode"), ("trace", "known")}
QUESTION_PATTERN = re.compile(r"^[0-9a-f]{12}$")  # a question id as the dialog makes it (teachbot.language.dialog)
EPISODE_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{0,64}$")  # an episode id as the console makes it (12 hex digits)
MAX_OFFSET = 1_000_000  # a lessons page's first row: far more than any memory holds
MAX_VERSION_CHARS = 200  # a trace version (teachbot.web.traces.TraceReader.event) is far shorter


class Refused(ValueError):
    """A message from a page that is not acted on; the text says why (sent back to the page)."""


@dataclass(frozen=True)
class Limits:
    """The bounds a message is checked against."""

    max_text_chars: int = 4000  # config/interaction.yaml bounds.max_heard_chars: the dialog's own bound
    max_query_chars: int = 200
    max_message_bytes: int = 16384


def clean_text(text: str) -> str:
    """Words as the person typed them, without control or format characters (newlines and tabs become spaces,
    bidirectional overrides and zero-width characters are dropped), whitespace collapsed."""
    kept = "".join(" " if c in "\r\n\t" else c for c in text if c in "\r\n\t" or unicodedata.category(c)[0] != "C")
    return " ".join(kept.split())


def parse(raw: str | bytes, limits: Limits) -> dict[str, Any]:
    """The checked message in ``raw``; raises :class:`Refused` with the reason."""
    if isinstance(raw, bytes):
        raise Refused("binary messages are not accepted")
    if len(raw.encode("utf-8", "surrogatepass")) > limits.max_message_bytes:
        raise Refused(f"message over {limits.max_message_bytes} bytes")
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        raise Refused("not JSON") from None
    if not isinstance(message, dict):
        raise Refused("a message is a JSON object")
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in FIELDS:
        raise Refused(f"unknown message type {str(kind)[:40]!r}; known: {', '.join(FIELDS)}")
    wanted = FIELDS[kind]
    extra = sorted(set(message) - set(wanted) - {"type"})
    if extra:
        raise Refused(f"{kind}: unexpected field(s) {', '.join(repr(str(e)[:40]) for e in extra[:5])}")
    out: dict[str, Any] = {"type": kind}
    for name, kind_of in wanted.items():
        if name not in message:
            if (kind, name) in OPTIONAL:
                out[name] = kind_of()
                continue
            raise Refused(f"{kind}: missing field {name!r}")
        value = message[name]
        if not isinstance(value, kind_of) or (kind_of is not bool and isinstance(value, bool)):
            raise Refused(f"{kind}: field {name!r} must be {kind_of.__name__}")
        out[name] = value
    if kind in ("say", "answer"):
        text = clean_text(out["text"])
        if not text:
            raise Refused(f"{kind}: nothing to say")
        if len(text) > limits.max_text_chars:
            raise Refused(f"{kind}: {len(text)} characters; the robot takes at most {limits.max_text_chars} "
                          "(bounds.max_heard_chars in config/interaction.yaml)")
        out["text"] = text
        if kind == "answer" and not QUESTION_PATTERN.match(out["question"]):
            raise Refused("answer: not a question id")
    elif kind == "lessons":
        query = clean_text(out["query"])
        if len(query) > limits.max_query_chars:
            raise Refused(f"lessons: a search of at most {limits.max_query_chars} characters")
        if not 0 <= out["offset"] <= MAX_OFFSET:
            raise Refused(f"lessons: an offset of 0 to {MAX_OFFSET}")
        out["query"] = query
    elif kind == "remove" and not ID_PATTERN.match(out["id"]):
        raise Refused("remove: not a lesson id")
    elif kind == "trace":
        if not EPISODE_PATTERN.match(out["episode"]):
            raise Refused("trace: not an episode id")
        if len(out["known"]) > MAX_VERSION_CHARS:
            raise Refused("trace: not a trace version")
    return out


class RateLimit:
    """At most ``per_second`` messages per second on average over ``window`` seconds (a token bucket)."""

    def __init__(self, per_second: float, window: float = 5.0) -> None:
        self.rate, self.capacity = per_second, per_second * window
        self.tokens, self.last = self.capacity, None

    def allow(self, now: float) -> bool:
        """Whether a message arriving at ``now`` (monotonic seconds) may pass."""
        if self.last is not None:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True
