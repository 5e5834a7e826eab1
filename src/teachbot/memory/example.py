"""One episodic interaction example: a console transcript, its retrieval keys and its provenance.

Mirrors teachbot_interfaces/msg/InteractionExample field for field (``created`` is an ISO 8601 UTC
string here, a builtin_interfaces/Time there), so a node translates without thinking.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from teachbot.errors import MemoryStoreError
from teachbot.language.transcript import Transcript

SEED, LEARNED = "seed", "learned"
SOURCES = (SEED, LEARNED)
# Learned ids name files: no path separators, no leading dot (temp files), bounded length.
ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")
_STR_FIELDS = ("id", "profile", "source", "transcript", "problem", "improvement", "scope", "episode_id", "author_model",
               "embedding_model", "created")


class UnknownExampleError(MemoryStoreError, KeyError):
    """No example with that id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class InteractionExample:
    """An interaction the robot can learn from. ``instructions`` (the user turns) are the retrieval keys."""

    id: str = ""
    profile: str = ""
    source: str = LEARNED
    transcript: str = ""
    instructions: tuple[str, ...] = field(default_factory=tuple)
    problem: str = ""
    improvement: str = ""
    scope: str = ""
    episode_id: str = ""
    author_model: str = ""
    embedding_model: str = ""
    created: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.instructions, tuple):  # accept any sequence of strings (a msg's list)
            object.__setattr__(self, "instructions", tuple(self.instructions))

    @property
    def keys(self) -> tuple[str, ...]:
        """Retrieval keys: the non-blank user turns."""
        return tuple(text for text in self.instructions if text.strip())

    def replace(self, **changes: Any) -> InteractionExample:
        return dataclasses.replace(self, **changes)

    def with_derived_instructions(self) -> InteractionExample:
        """Fill ``instructions`` from the transcript when the caller left them empty."""
        if self.instructions:
            return self
        return self.replace(instructions=tuple(Transcript.parse(self.transcript).instructions()))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["instructions"] = list(self.instructions)
        return data

    @classmethod
    def from_dict(cls, data: Any, where: str = "example") -> InteractionExample:
        """Build from a JSON object; unknown keys are ignored, wrong types raise MemoryStoreError."""
        if not isinstance(data, dict):
            raise MemoryStoreError(f"{where}: expected a JSON object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for name in _STR_FIELDS:
            value = data.get(name, "")
            if not isinstance(value, str):
                raise MemoryStoreError(f"{where}: field '{name}' must be a string, got {value!r:.60}")
            values[name] = value
        instructions = data.get("instructions", [])
        if not isinstance(instructions, list) or not all(isinstance(t, str) for t in instructions):
            raise MemoryStoreError(f"{where}: field 'instructions' must be a list of strings")
        return cls(instructions=tuple(instructions), **values)


def validate_learned(example: InteractionExample) -> None:
    """What a learned example needs before it is written; raises MemoryStoreError naming the field."""
    if not ID_PATTERN.match(example.id):
        raise MemoryStoreError(f"invalid example id {example.id!r}: use letters, digits, '_', '-', '.', ':' (at most 128, "
                               "not starting with '.')")
    if example.source != LEARNED:
        raise MemoryStoreError(f"example {example.id}: source must be '{LEARNED}' (seed examples are hand-written files "
                               f"under memory_store/<profile>/), got {example.source!r}")
    if not example.profile.strip():
        raise MemoryStoreError(f"example {example.id}: 'profile' is empty; name the robot API profile, e.g. 'tabletop'")
    if "/" in example.profile or example.profile.startswith("."):
        raise MemoryStoreError(f"example {example.id}: invalid profile {example.profile!r}")
    if not example.transcript.strip():
        raise MemoryStoreError(f"example {example.id}: 'transcript' is empty")


def utc_now_iso() -> str:
    """Now, as ISO 8601 UTC with milliseconds (provenance ``created``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
