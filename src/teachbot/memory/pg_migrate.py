"""``teachbot memory migrate``: copy a robot's learned examples from its file store into the fleet's database, or back.

A migration copies and never deletes: the source stays as it was, so a robot can go back to it by switching
``memory.store.backend`` again. It is idempotent and resumable: into the database, examples go in batches of
one transaction each (a lesson is whole or absent, whenever the copy is stopped), and an example the target
already holds unchanged counts as ``already`` there, so running it again finishes an interrupted copy and
changes nothing after a finished one. An id the target holds with other content is a ``conflict``: left as it
is in the target and named in the report. Afterwards every source example is read back from a freshly opened
target and compared field by field (``verified``); the report says what is missing or different.

Into the database, the examples get this robot's id as provenance and the configured scope; their key
embeddings are stored with them when an embedder is given (else the robots fill them in on first use).
Back to files, the examples this robot sees (the fleet's and its own) are written one atomic file each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from teachbot.memory.example import LEARNED, InteractionExample, UnknownExampleError
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.memory.store import MemoryStore

BATCH = 500  # examples per transaction into the database


@dataclass
class MigrationReport:
    """What a migration did: ids copied, already there unchanged, in conflict; how many read back equal."""

    source: str
    target: str
    total: int = 0
    copied: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    verified: int = 0
    missing: list[str] = field(default_factory=list)  # not in the target after the copy (read back afresh)
    different: list[str] = field(default_factory=list)  # in the target with other content (conflicts among them)

    @property
    def complete(self) -> bool:
        """Every source example is in the target, equal."""
        return self.verified == self.total and not self.missing and not self.different

    def summary(self) -> str:
        """One paragraph for the person who ran it."""
        lines = [f"{self.total} learned example{'s' * (self.total != 1)} in {self.source}, into {self.target}:",
                 f"copied {len(self.copied)}, already there {len(self.already)}, conflicts {len(self.conflicts)}",
                 f"verified: {self.verified} of {self.total} read back from {self.target} equal to the source"]
        if self.conflicts:
            lines.append("conflicts (the target holds another example under the id; left as it is): " + ", ".join(self.conflicts))
        if self.missing:
            lines.append("missing in the target: " + ", ".join(self.missing))
        return "\n".join(lines)


def files_to_database(files: MemoryStore, database: PgMemoryStore, reopen: Callable[[], PgMemoryStore],
                      batch: int = BATCH, progress: Callable[[int, int], None] | None = None) -> MigrationReport:
    """Copy the learned examples of ``files`` into ``database`` (``reopen()`` opens it afresh for the check)."""
    examples = files.list(source=LEARNED)
    report = MigrationReport(str(files.learned_dir), f"the database at {database.where}", len(examples))
    for start in range(0, len(examples), max(batch, 1)):
        chunk = examples[start:start + batch]
        outcomes = database.add_batch(chunk, f"{start} of {len(examples)} examples are copied; run the migration again")
        _tally(report, chunk, outcomes)
        if progress is not None:
            progress(start + len(chunk), len(examples))
    fresh = reopen()
    try:
        _verify(report, examples, fresh.list(source=LEARNED))
    finally:
        fresh.close()
    return report


def database_to_files(database: PgMemoryStore, files: MemoryStore, reopen: Callable[[], MemoryStore],
                      progress: Callable[[int, int], None] | None = None) -> MigrationReport:
    """Copy the learned examples ``database`` shows this robot into the file store ``files``."""
    examples = database.list(source=LEARNED)
    report = MigrationReport(f"the database at {database.where}", str(files.learned_dir), len(examples))
    for done, example in enumerate(examples, 1):
        try:
            held = files.get(example.id)
        except UnknownExampleError:
            files.add(example)
            outcome = "added"
        else:
            outcome = "same" if held == example else "conflict"
        _tally(report, [example], [outcome])
        if progress is not None and (done % BATCH == 0 or done == len(examples)):
            progress(done, len(examples))
    _verify(report, examples, reopen().list(source=LEARNED))
    return report


def _tally(report: MigrationReport, examples: Iterable[InteractionExample], outcomes: Iterable[str]) -> None:
    for example, outcome in zip(examples, outcomes):
        {"added": report.copied, "same": report.already, "conflict": report.conflicts}[outcome].append(example.id)


def _verify(report: MigrationReport, examples: list[InteractionExample], target: list[InteractionExample]) -> None:
    """Compare every source example with the target's, as read back afresh: equal (verified), other content, missing."""
    held = {e.id: e for e in target}
    for example in examples:
        if example.id not in held:
            report.missing.append(example.id)
        elif held[example.id] == example:
            report.verified += 1
        else:
            report.different.append(example.id)
