"""What every example store offers: the file store (teachbot.memory.store.MemoryStore) and the fleet's
database (teachbot.memory.pg_store.PgMemoryStore). The episodic memory, the memory node, the migrations and
``teachbot memory`` use a store only through this."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from teachbot.memory.example import LEARNED, InteractionExample


@dataclass(frozen=True)
class ImportReport:
    """Ids written by an import, and ids skipped because the store already had them."""

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@runtime_checkable
class ExampleStore(Protocol):
    """Seed and learned interaction examples, kept durably; ``version`` grows with every change seen."""

    @property
    def version(self) -> int: ...

    @property
    def quarantine_dir(self) -> Path: ...

    def get(self, example_id: str) -> InteractionExample:
        """The example with this id; UnknownExampleError when there is none."""
        ...

    def list(self, profile: str = "", source: str = "") -> list[InteractionExample]:
        """The examples of a profile and source ('' for all), oldest first."""
        ...

    def snapshot(self) -> tuple[int, list[InteractionExample]]:
        """The version and every example, read together."""
        ...

    def refresh(self) -> bool:
        """Take in changes made by other processes or robots; whether anything changed."""
        ...

    def reload_seeds(self) -> None:
        """Read the seed examples again."""
        ...

    def add(self, example: InteractionExample, confirmed: bool = False) -> str:
        """Store a learned example; its id. MemoryStoreError when it cannot be stored. ``confirmed``: this robot's
        person confirmed the lesson (a fleet store shares only such lessons; a robot's own store ignores it)."""
        ...

    def remove(self, example_id: str) -> None:
        """Remove a learned example; UnknownExampleError when there is none."""
        ...

    def export_jsonl(self, path: str | Path, profile: str = "", source: str = LEARNED) -> int:
        """Write the matching examples to one JSON Lines file; how many."""
        ...

    def import_jsonl(self, path: str | Path) -> ImportReport:
        """Add the examples of a JSON Lines export, skipping ids already stored."""
        ...
