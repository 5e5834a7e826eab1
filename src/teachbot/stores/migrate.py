"""``teachbot memory migrate``: copy a robot's memory from its files into the fleet's database, or back: the learned
examples, the knowledge entries and the task logs.

A migration copies and never deletes: the source stays as it was, so a robot can go back to it by switching
``memory.store.backend`` again. It is idempotent and resumable: into the database, examples go in batches of
one transaction each (a lesson is whole or absent, whenever the copy is stopped), and an example the target
already holds unchanged counts as ``already`` there, so running it again finishes an interrupted copy and
changes nothing after a finished one. An id the target holds with other content is a ``conflict``: left as it
is in the target and named in the report. Afterwards every source example is read back from a freshly opened
target and compared field by field (``verified``); the report says what is missing or different.

Into the database, examples and entries get this robot's id as provenance and the configured scope; the examples'
key embeddings are stored with them when an embedder is given (else the robots fill them in on first use).
Back to files, what this robot sees (the fleet's and its own) is written one atomic file each. Task logs are a
robot's own: teachbot.taskmemory.pg_log copies them record by record, both ways (``task_logs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.errors import MemoryStoreError
from teachbot.knowledge.store import KnowledgeStore
from teachbot.memory.example import LEARNED
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.memory.store import MemoryStore
from teachbot.storage.pg_link import DatabaseAway, PgLink
from teachbot.taskmemory.log import TaskLogStore, slug
from teachbot.taskmemory.pg_log import PgTaskLogStore, ensure_task_tables

BATCH = 500  # examples or entries per transaction into the database
Progress = Callable[[int, int], None]  # (done, total)


@dataclass
class MigrationReport:
    """What a migration did: ids copied, already there unchanged, in conflict; how many read back equal."""

    what: str  # "learned examples", "knowledge entries"
    source: str
    target: str
    total: int = 0
    copied: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    verified: int = 0
    missing: list[str] = field(default_factory=list)  # not in the target after the copy (read back afresh)
    different: list[str] = field(default_factory=list)  # in the target with other content (conflicts among them)
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every source example is in the target, equal."""
        return self.verified == self.total and not self.missing and not self.different

    def summary(self) -> str:
        """One paragraph for the person who ran it."""
        lines = [f"{self.total} {self.what} in {self.source}, into {self.target}:",
                 f"copied {len(self.copied)}, already there {len(self.already)}, conflicts {len(self.conflicts)}",
                 f"verified: {self.verified} of {self.total} read back from {self.target} equal to the source"]
        if self.conflicts:
            lines.append("conflicts (the target holds another example under the id; left as it is): " + ", ".join(self.conflicts))
        if self.missing:
            lines.append("missing in the target: " + ", ".join(self.missing))
        if self.different:
            lines.append("different in the target: " + ", ".join(self.different))
        return "\n".join(lines + self.notes)


def files_to_database(files: MemoryStore, database: PgMemoryStore, reopen: Callable[[], PgMemoryStore],
                      batch: int = BATCH, progress: Progress | None = None) -> MigrationReport:
    """Copy the learned examples of ``files`` into ``database`` (``reopen()`` opens it afresh for the check)."""
    return into_database(files.list(source=LEARNED), database.add_batch, lambda: _listed(reopen(), source=LEARNED),
                         MigrationReport("learned examples", str(files.learned_dir), f"the database at {database.where}"),
                         batch, progress)


def database_to_files(database: PgMemoryStore, files: MemoryStore, reopen: Callable[[], MemoryStore],
                      progress: Progress | None = None) -> MigrationReport:
    """Copy the learned examples ``database`` shows this robot into the file store ``files``."""
    return into_files(database.list(source=LEARNED), files.get, files.add, lambda: reopen().list(source=LEARNED),
                      MigrationReport("learned examples", f"the database at {database.where}", str(files.learned_dir)), progress)


def knowledge_to_database(files: KnowledgeStore, database: Any, reopen: Callable[[], Any], batch: int = BATCH,
                          progress: Progress | None = None) -> MigrationReport:
    """Copy the knowledge entries of ``files`` into the database's knowledge base (a PgKnowledgeStore)."""
    return into_database(files.list(), database.add_batch, lambda: _listed(reopen()),
                         MigrationReport("knowledge entries", str(files.directory), f"the database at {database.where}"),
                         batch, progress)


def knowledge_to_files(database: Any, files: KnowledgeStore, reopen: Callable[[], KnowledgeStore],
                       progress: Progress | None = None) -> MigrationReport:
    """Copy the knowledge entries the database shows this robot into the file knowledge base ``files``."""
    return into_files(database.list(), files.get, files.add, lambda: reopen().list(),
                      MigrationReport("knowledge entries", f"the database at {database.where}", str(files.directory)), progress)


def into_database(items: list[Any], add_batch: Callable[[list[Any], str], list[str]], read_back: Callable[[], list[Any]],
                  report: MigrationReport, batch: int = BATCH, progress: Progress | None = None) -> MigrationReport:
    """``items`` (examples or entries: ``.id`` and equality) in batches of one transaction each, then read back."""
    report.total = len(items)
    for start in range(0, len(items), max(batch, 1)):
        chunk = items[start:start + batch]
        _tally(report, chunk, add_batch(chunk, f"{start} of {len(items)} {report.what} are copied; run the migration again"))
        if progress is not None:
            progress(start + len(chunk), len(items))
    _verify(report, items, read_back())
    return report


def into_files(items: list[Any], get: Callable[[str], Any], add: Callable[[Any], str], read_back: Callable[[], list[Any]],
               report: MigrationReport, progress: Progress | None = None) -> MigrationReport:
    """``items`` into a file store one atomic file each (an id it holds: 'same' or 'conflict'), then read back."""
    report.total = len(items)
    for done, item in enumerate(items, 1):
        try:
            held = get(item.id)
        except KeyError:  # UnknownExampleError, UnknownEntryError
            add(item)
            outcome = "added"
        else:
            outcome = "same" if held == item else "conflict"
        _tally(report, [item], [outcome])
        if progress is not None and (done % BATCH == 0 or done == len(items)):
            progress(done, len(items))
    _verify(report, items, read_back())
    return report


def _listed(store: Any, **filters: str) -> list[Any]:
    """Everything ``store`` lists, and then it is closed."""
    try:
        return store.list(**filters)
    finally:
        store.close()


def _tally(report: MigrationReport, items: Iterable[Any], outcomes: Iterable[str]) -> None:
    for item, outcome in zip(items, outcomes):
        {"added": report.copied, "same": report.already, "conflict": report.conflicts}[outcome].append(item.id)


def _verify(report: MigrationReport, examples: list[Any], target: list[Any]) -> None:
    """Compare every source example with the target's, as read back afresh: equal (verified), other content, missing."""
    held = {e.id: e for e in target}
    for example in examples:
        if example.id not in held:
            report.missing.append(example.id)
        elif held[example.id] == example:
            report.verified += 1
        else:
            report.different.append(example.id)


def task_logs(directory: Path, dsn: str, robot_id: str, scratch: Path) -> MigrationReport:
    """Make the task logs in ``directory`` and ``robot_id``'s in the database agree (both ways: records the database
    lacks are copied into it, records the files lack are restored), then restore the database's copy into ``scratch``
    and compare it with the files task by task. MemoryStoreError when the database is away."""
    link = PgLink(dsn, "task memory", ensure_task_tables)
    try:  # what the database held before (opening a PgTaskLogStore copies at once)
        database_before = dict(link.run(lambda conn: conn.execute(
            "SELECT task_slug, count(*) FROM teachbot_task_records WHERE robot_id = %s GROUP BY 1", (robot_id,)).fetchall()))
    except DatabaseAway as exc:
        raise MemoryStoreError(link.unreachable(exc, "the task logs were not copied; run the migration again")) from None
    finally:
        link.close()
    plain = TaskLogStore(directory)
    files_before = {task: len(plain.records(task)) for task in plain.tasks()}
    store = PgTaskLogStore(directory, dsn, robot_id=robot_id)
    report = MigrationReport("task log records", str(directory), f"the database at {store.where} (robot {robot_id})")
    try:
        if not store.sync():
            raise MemoryStoreError(f"the database at {store.where} went away; the task logs are not all copied: run the "
                                   "migration again")
        fresh = PgTaskLogStore(scratch, dsn, robot_id=robot_id)
        try:
            for task in store.tasks():
                records = store.records(task)
                name = slug(task)
                report.total += len(records)
                report.already += [f"{name}#{r.seq}" for r in records[:database_before.get(name, 0)]]
                report.copied += [f"{name}#{r.seq}" for r in records[database_before.get(name, 0):]]
                restored = len(records) - files_before.get(task, 0)
                if restored:
                    report.notes.append(f"{restored} record{'s' * (restored != 1)} of {task!r} restored into the files")
                if fresh.records(task) == records:
                    report.verified += len(records)
                else:
                    report.different.append(task)
        finally:
            fresh.close()
        return report
    finally:
        store.close()
