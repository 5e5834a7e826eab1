"""The lessons panel's data: learned examples as plain rows, search over them, the newest one, JSON Lines export.

Rows come from the memory node's memory/list (teachbot.memory.InteractionExample); the export has the format of
``teachbot memory export`` (one ``InteractionExample.to_dict()`` per line), so ``teachbot memory import`` reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from teachbot.memory.example import LEARNED, InteractionExample
from teachbot.web.highlight import Tokens, highlight

SEARCHED = ("improvement", "problem", "scope", "transcript", "episode_id", "id")


def learned(examples: Iterable[InteractionExample]) -> list[InteractionExample]:
    """The learned examples, newest first (by creation time, then id)."""
    rows = [e for e in examples if e.source == LEARNED]
    return sorted(rows, key=lambda e: (e.created, e.id), reverse=True)


def matches(example: InteractionExample, query: str) -> bool:
    """Whether every word of ``query`` occurs (case-insensitive) in the lesson's sentence, problem, scope,
    transcript, episode or id."""
    text = " ".join(str(getattr(example, name)) for name in SEARCHED).lower()
    return all(word in text for word in query.lower().split())


def search(examples: Iterable[InteractionExample], query: str) -> list[InteractionExample]:
    """The learned examples matching ``query``, newest first."""
    return [e for e in learned(examples) if matches(e, query)]


def newest(examples: Iterable[InteractionExample]) -> InteractionExample | None:
    """The last lesson learned (what "undo the last lesson" removes), or None."""
    rows = learned(examples)
    return rows[0] if rows else None


def row(example: InteractionExample) -> dict[str, Any]:
    """One lesson for the page: its fields, and its improved transcript as highlighted tokens."""
    return {
        "id": example.id, "profile": example.profile, "problem": example.problem, "improvement": example.improvement,
        "scope": example.scope, "created": example.created, "episode_id": example.episode_id,
        "author_model": example.author_model, "instructions": list(example.keys),
        "transcript": highlighted(example.transcript),
    }


@lru_cache(maxsize=256)
def highlighted(transcript: str) -> list[Tokens]:
    """A transcript as highlighted tokens, computed once per text (a page of lessons is asked for again on every
    memory change; the result is only serialised, never changed)."""
    return highlight(transcript.rstrip("\n").splitlines())


def export_lines(examples: Sequence[InteractionExample]) -> str:
    """The lessons as JSON Lines, as ``teachbot memory export`` writes them."""
    return "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in learned(examples))
