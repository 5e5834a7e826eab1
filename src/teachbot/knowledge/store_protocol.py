"""What every knowledge store offers: the files (teachbot.knowledge.store.KnowledgeStore) and the fleet's
database (teachbot.knowledge.pg_store.PgKnowledgeStore). The retriever, the memory node, the migrations and
``teachbot memory knowledge`` use a store only through this."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from teachbot.knowledge.entry import KnowledgeEntry


@dataclass(frozen=True)
class KnowledgeImportReport:
    """What an import did: ids written, ids skipped (already stored, or twice in the file), bad lines ('file:line: why')."""

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@runtime_checkable
class KnowledgeBase(Protocol):
    """Distilled knowledge entries, kept durably; ``version`` grows with every change seen."""

    @property
    def version(self) -> int: ...

    @property
    def quarantine_dir(self) -> Path: ...

    def get(self, entry_id: str) -> KnowledgeEntry:
        """The entry with this id; KnowledgeError when there is none."""
        ...

    def list(self, kind: str = "", object: str = "", task: str = "", scope: str = "") -> list[KnowledgeEntry]:  # noqa: A002
        """The matching entries ('' matches all), oldest first."""
        ...

    def snapshot(self) -> tuple[int, list[KnowledgeEntry]]:
        """The version and every entry, read together."""
        ...

    def refresh(self) -> bool:
        """Take in changes made by other processes or robots; whether anything changed."""
        ...

    def add(self, entry: KnowledgeEntry) -> str:
        """Store an entry; its id. KnowledgeError when it cannot be stored."""
        ...

    def remove(self, entry_id: str) -> None:
        """Remove an entry; KnowledgeError when there is none."""
        ...

    def export_jsonl(self, path: str | Path, kind: str = "", object: str = "", task: str = "") -> int:  # noqa: A002
        """Write the matching entries to one JSON Lines file; how many."""
        ...

    def import_jsonl(self, path: str | Path) -> KnowledgeImportReport:
        """Add the entries of a JSON Lines export; ids already stored are skipped, bad lines reported."""
        ...
