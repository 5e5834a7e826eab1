"""The knowledge base on the memory's ``postgres`` backend: distilled entries in the fleet's PostgreSQL database.

``PgKnowledgeStore`` has the interface of the file store (teachbot.knowledge.store.KnowledgeStore: add, get,
list, remove, snapshot, refresh, version, export_jsonl, import_jsonl; the same errors), so the memory node, the
retriever and ``teachbot memory knowledge`` use either; teachbot.stores.backend.open_knowledge picks it.

Guarantees, as the examples' (teachbot.memory.pg_store):

- an entry is one transaction (its row with a new sequence number under an advisory lock, so sequence numbers
  only grow at commit): whole or absent whoever dies when; writers in any number of processes lose nothing;
- an ``add`` of an id holding exactly that entry is a no-op (a retry after a lost answer); another entry under a
  taken id is a KnowledgeError; a removal is a tombstone, so every robot sees it go;
- every read catches up with what was committed since the last one (one query by sequence number), so an entry
  a robot learns is in the others' retrieval at their next use;
- the database going away is one warning line (teachbot.storage.pg_link): reads serve the entries read before,
  and ``add`` queues the entry durably in the spool directory (teachbot.storage.spool, as the examples' spool),
  written by a background retry as soon as the database is back;
- a read waits on the database at most the link's read timeout (memory.store.timeouts.read_s), then serves the
  entries read before; the lock readers take is never held while the database is asked (writes and catch-ups
  take their own); an error the database answers with is a KnowledgeError of that call, and a row that is not a
  readable entry is skipped with one error line.

Who sees an entry: the fleet (``shared`` 'fleet') or only the robot that learned it ('robot'). Against a robot whose
client was replaced, the server holds this (row-level security, teachbot.memory.pg_trust.ensure_own_rows, once the
operator's `teachbot memory add-robot` added it): a robot's role reads only those rows, writes and removes only
entries whose ``robot_id`` is its role, and cannot forge ``seq``; such a store writes its spooled entries as its own.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import psycopg

from teachbot.knowledge.entry import KINDS, KnowledgeEntry, KnowledgeError, UnknownEntryError
from teachbot.knowledge.store import _prepare
from teachbot.knowledge.store_protocol import KnowledgeImportReport
from teachbot.memory.pg_trust import bound_robot, ensure_own_rows
from teachbot.storage.files import write_jsonl
from teachbot.storage.pg_link import RETRY_MAX_S, SHARED_VALUES, DatabaseAway, DatabaseRefused, PgLink, ensure_tables
from teachbot.storage.pg_timeouts import PgTimeouts
from teachbot.storage.spool import Spool, SpoolFormat

log = logging.getLogger(__name__)

WRITE_LOCK = 0x7465616368 + 16  # advisory lock of knowledge writes (the examples' is pg_schema.WRITE_LOCK)
_VISIBLE = "(shared = 'fleet' OR robot_id = %(robot)s)"
_DDL = """
CREATE SEQUENCE IF NOT EXISTS teachbot_knowledge_seq;
CREATE TABLE IF NOT EXISTS teachbot_knowledge (
    id text PRIMARY KEY,
    kind text NOT NULL,
    entry jsonb NOT NULL,
    robot_id text NOT NULL,
    shared text NOT NULL CHECK (shared IN ('fleet', 'robot')),
    seq bigint NOT NULL,
    removed boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS teachbot_knowledge_by_seq ON teachbot_knowledge (seq)
"""


ENTRIES = SpoolFormat[KnowledgeEntry](
    field="entry", encode=KnowledgeEntry.to_dict, decode=KnowledgeEntry.from_dict, id=lambda e: e.id,
    created=lambda e: e.created, what="knowledge spool", error=KnowledgeError)


def ensure_knowledge_tables(conn: psycopg.Connection) -> None:
    """The knowledge tables, created when missing, with the fleet's row ownership (teachbot.memory.pg_trust: a robot's
    role writes and removes only its own entries, reads the fleet's and its own; the server sets ``seq``), added by
    the operator's login; a robot's login on a table still without it is warned about it."""
    ensure_tables(conn, "teachbot_knowledge", _DDL)
    if not ensure_own_rows(conn, "teachbot_knowledge", _VISIBLE.replace("%(robot)s", "current_user"),
                           "teachbot_knowledge_seq", WRITE_LOCK):
        log.warning("knowledge store: the table teachbot_knowledge has no row-level security yet, so any robot can change "
                    "any robot's entries; the operator adds it by running `teachbot memory add-robot` (README: Fleet memory)")


class PgKnowledgeStore:
    """Knowledge entries in the fleet database, as ``robot_id`` sees them; ``spool_dir`` queues entries while it is away.
    ``offline_ok`` False (the ``teachbot memory`` commands): a read while the database is away raises KnowledgeError."""

    def __init__(self, dsn: str, spool_dir: str | Path, *, robot_id: str, shared: str = "fleet", offline_ok: bool = True,
                 timeouts: PgTimeouts | None = None) -> None:
        if shared not in SHARED_VALUES:
            raise KnowledgeError(f"memory.store.scope must be one of {SHARED_VALUES}, got {shared!r}")
        if not robot_id.strip():
            raise KnowledgeError("memory.store.robot_id is empty; name this robot (it is every entry's provenance)")
        self.spool = Spool(spool_dir, ENTRIES)  # the local part of this store: entries waiting for the database
        self.directory = self.spool.directory
        self.robot_id, self.shared, self.offline_ok = robot_id, shared, offline_ok
        self.link = PgLink(dsn, "knowledge store", self._connected, retry=self._refresh_now,
                           pending=lambda: bool(self._queued or self.spool.deferred), timeouts=timeouts)
        self.where = self.link.where
        self._lock = threading.RLock()  # the entries held here; never held while the database is asked
        self._sync = threading.RLock()  # writes and catch-ups, one at a time
        self._bound = False  # row-level security binds this login: robot_id is its role
        self._poison: set[tuple[str, int]] = set()  # (id, seq) of rows skipped as unreadable, told once each
        self._entries: dict[str, KnowledgeEntry] = {}  # the visible rows, as last read
        self._queued: dict[str, KnowledgeEntry] = {s.item.id: s.item for s in self.spool.items()}
        self._last_seq = 0
        self._version = 0
        self._refresh_now()

    # ------------------------------------------------------------------ reading
    @property
    def version(self) -> int:
        return self._version

    @property
    def quarantine_dir(self) -> Path:
        return self.spool.quarantine_dir

    def __len__(self) -> int:
        self.refresh()
        with self._lock:
            return len(self._entries.keys() | self._queued.keys())

    def __contains__(self, entry_id: object) -> bool:
        self.refresh()
        with self._lock:
            return entry_id in self._entries or entry_id in self._queued

    def get(self, entry_id: str) -> KnowledgeEntry:
        """The entry with this id; UnknownEntryError if there is none (for this robot)."""
        self.refresh()
        with self._lock:
            found = self._entries.get(entry_id) or self._queued.get(entry_id)
        if found is None:
            raise UnknownEntryError(f"no knowledge entry with id {entry_id!r}; `teachbot memory knowledge list` shows the stored ids")
        return found

    def list(self, kind: str = "", object: str = "", task: str = "", scope: str = "") -> list[KnowledgeEntry]:  # noqa: A002
        """Entries oldest first, filtered as KnowledgeStore.list does."""
        if kind and kind not in KINDS:
            raise KnowledgeError(f"unknown kind filter {kind!r}; use one of {', '.join(KINDS)}")
        version, entries = self.snapshot()
        obj, text = object.casefold(), task.casefold()
        return [e for e in sorted(entries, key=lambda e: (e.created, e.id)) if (not kind or e.kind == kind)
                and (not scope or e.scope == scope) and obj in e.object.casefold() and text in e.task.casefold()]

    def snapshot(self) -> tuple[int, list[KnowledgeEntry]]:
        """``version`` and every entry, consistently (after catching up)."""
        self.refresh()
        with self._lock:
            return self._version, list({**self._queued, **self._entries}.values())

    def refresh(self) -> bool:
        """Write queued entries, then catch up with what was committed since the last read; True if something
        changed. While the database is away (or gives no answer within the read timeout), nothing changes (and a
        background retry writes the queue later)."""
        with self.link.within(self.link.timeouts.read_s):
            return self._refresh_now(self.link.timeouts.read_s)

    def _refresh_now(self, wait: float | None = None) -> bool:
        """``refresh`` without the read timeout (the first read, the background retry): waits up to ``wait`` seconds
        (None: the link's reply timeout) for another thread's write or catch-up."""
        if not self._sync.acquire(timeout=self.link.timeouts.reply_s if wait is None else wait):
            if not self.offline_ok:
                raise KnowledgeError(f"knowledge store: another call to the database at {self.where} has no answer yet; "
                                     "nothing was read")
            return False
        try:
            changed = self._flush() if self._queued or self.spool.deferred else False
            rows = self.link.run(lambda conn: conn.execute(
                f"SELECT id, entry, removed, seq FROM teachbot_knowledge WHERE seq > %(seq)s AND {_VISIBLE} ORDER BY seq",
                {"seq": self._last_seq, "robot": self.robot_id}).fetchall())
            return self._catch_up(rows) or changed
        except DatabaseAway as exc:
            if not self.offline_ok:
                raise KnowledgeError(self.link.unreachable(exc, "nothing was read")) from None
            return False
        except DatabaseRefused as exc:
            raise KnowledgeError(str(exc)) from None
        finally:
            self._sync.release()

    # ------------------------------------------------------------------ writing
    def add(self, entry: KnowledgeEntry) -> str:
        """Store an entry and return its id (generated when empty; ``provenance.created`` filled when empty).

        Another entry under a taken id raises KnowledgeError; while the database is away the entry is queued.
        """
        prepared = _prepare(entry)
        with self._lock:
            if prepared.id in self._queued and self._queued[prepared.id] != prepared:
                raise KnowledgeError(f"a knowledge entry with id {prepared.id!r} already exists; remove it first or leave id empty")
        with self._sync:
            try:
                outcome = self.link.run(lambda conn: self._insert(conn, prepared))
            except DatabaseAway as exc:
                self._queue(prepared, exc)
                return prepared.id
            except DatabaseRefused as exc:
                raise KnowledgeError(f"the knowledge entry {prepared.id!r} was not stored: {exc}") from None
            if outcome == "conflict":
                raise KnowledgeError(f"a knowledge entry with id {prepared.id!r} already exists; remove it first or leave id empty")
            self._hold(prepared)
        return prepared.id

    def remove(self, entry_id: str) -> None:
        """Delete an entry (for every robot that sees it); an unknown id raises UnknownEntryError."""
        with self._lock:
            queued = self._queued.pop(entry_id, None)
            if queued is not None:
                self.spool.done(entry_id)
                self._version += 1
        with self._sync:
            try:
                found = self.link.run(lambda conn: self._delete(conn, entry_id))
            except DatabaseAway as exc:
                if queued is not None:
                    return  # it never reached the database
                raise KnowledgeError(self.link.unreachable(exc, f"{entry_id!r} was not removed; try again")) from None
            except DatabaseRefused as exc:
                raise KnowledgeError(str(exc)) from None
            with self._lock:
                if self._entries.pop(entry_id, None) is not None:
                    self._version += 1
        if not found and queued is None:
            raise UnknownEntryError(f"no knowledge entry with id {entry_id!r}")

    def export_jsonl(self, path: str | Path, kind: str = "", object: str = "", task: str = "") -> int:  # noqa: A002
        """Write the matching entries to one JSON Lines file (atomically); returns how many."""
        return write_jsonl(path, (e.to_dict() for e in self.list(kind=kind, object=object, task=task)))

    def import_jsonl(self, path: str | Path) -> KnowledgeImportReport:
        """Add the entries of a JSON Lines export in one transaction: ids already stored are skipped, bad lines reported
        (``report.errors``) and the good ones imported. KnowledgeError when the database is away."""
        path = Path(path)
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise KnowledgeError(f"cannot read {path}: {exc}") from None
        report, entries = KnowledgeImportReport(), []
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    entries.append(_prepare(KnowledgeEntry.from_dict(json.loads(line), f"{path}:{number}")))
                except json.JSONDecodeError as exc:
                    report.errors.append(f"{path}:{number}: not JSON ({exc.msg})")
                except KnowledgeError as exc:
                    report.errors.append(str(exc))
        outcomes = self.add_batch(entries, f"nothing of {path} was imported; try again")
        for entry, outcome in zip(entries, outcomes):
            (report.added if outcome == "added" else report.skipped).append(entry.id)
        return report

    def add_batch(self, entries: list[KnowledgeEntry], unreachable: str = "nothing was written; try again") -> list[str]:
        """Entries in ONE transaction: per entry 'added', 'same' (already stored, equal) or 'conflict' (left as it is);
        an id twice in the batch: its second one is 'same' or 'conflict'. KnowledgeError when the database is away."""
        prepared = [_prepare(e) for e in entries]

        def insert_all(conn: psycopg.Connection) -> list[str]:
            with conn.transaction():
                return [self._insert(conn, e) for e in prepared]

        with self._sync:
            try:
                outcomes = self.link.run(insert_all)
            except DatabaseAway as exc:
                raise KnowledgeError(self.link.unreachable(exc, unreachable)) from None
            except DatabaseRefused as exc:
                raise KnowledgeError(f"{exc}; {unreachable}") from None
            for entry, outcome in zip(prepared, outcomes):
                if outcome == "added":
                    self._hold(entry)
        return outcomes

    def close(self) -> None:
        self.link.close()

    # ------------------------------------------------------------------ database
    def _connected(self, conn: psycopg.Connection) -> None:
        """Each new connection: the tables; a robot's role is this store's robot_id (the server allows no other)."""
        ensure_knowledge_tables(conn)
        role = bound_robot(conn, "teachbot_knowledge")
        self._bound = role is not None
        if role is not None and role != self.robot_id:
            log.warning("knowledge store: this robot logs in to the database at %s as the robot %r: that is its robot_id "
                        "(memory.store.robot_id says %r)", self.where, role, self.robot_id)
            self.robot_id = role

    def _insert(self, conn: psycopg.Connection, entry: KnowledgeEntry, robot_id: str = "", shared: str = "") -> str:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            row = conn.execute("SELECT entry, removed FROM teachbot_knowledge WHERE id = %s FOR UPDATE", (entry.id,)).fetchone()
            if row is not None and not row[1]:
                return "same" if KnowledgeEntry.from_dict(row[0]) == entry else "conflict"
            conn.execute("INSERT INTO teachbot_knowledge (id, kind, entry, robot_id, shared, seq, removed) VALUES "
                         "(%s, %s, %s, %s, %s, nextval('teachbot_knowledge_seq'), false) ON CONFLICT (id) DO UPDATE SET "
                         "kind = excluded.kind, entry = excluded.entry, robot_id = excluded.robot_id, shared = excluded.shared, "
                         "seq = excluded.seq, removed = false",
                         (entry.id, entry.kind, json.dumps(entry.to_dict()), robot_id or self.robot_id, shared or self.shared))
        return "added"

    def _delete(self, conn: psycopg.Connection, entry_id: str) -> bool:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            found = conn.execute(f"UPDATE teachbot_knowledge SET removed = true, seq = nextval('teachbot_knowledge_seq') "
                                 f"WHERE id = %(id)s AND NOT removed AND {_VISIBLE} RETURNING id",
                                 {"id": entry_id, "robot": self.robot_id}).fetchone()
        return found is not None

    def _catch_up(self, rows: list[tuple[object, ...]]) -> bool:
        """Apply the changes read (id, entry, removed, seq); a row that is not a readable entry is skipped (and what was
        held under its id forgotten), with one error line."""
        changed = False
        with self._lock:
            for entry_id, data, removed, seq in rows:
                entry = None
                if not removed:
                    try:
                        entry = KnowledgeEntry.from_dict(data, f"knowledge entry {entry_id} in the database")
                    except (KnowledgeError, TypeError, ValueError, AttributeError) as exc:
                        if (str(entry_id), int(seq)) not in self._poison:  # type: ignore[call-overload]
                            self._poison.add((str(entry_id), int(seq)))  # type: ignore[call-overload]
                            log.error("knowledge store: skipping the row %r of the database at %s: it is not a readable "
                                      "entry (%s)", entry_id, self.where, exc)
                if entry is None:
                    changed = self._entries.pop(entry_id, None) is not None or changed
                else:
                    if self._entries.get(entry_id) != entry:
                        self._entries[entry_id] = entry
                        changed = True
                self._last_seq = max(self._last_seq, seq)
            if changed:
                self._version += 1
        return changed

    def _hold(self, entry: KnowledgeEntry) -> None:
        with self._lock:
            if self._entries.get(entry.id) != entry:
                self._entries[entry.id] = entry
                self._version += 1

    # ------------------------------------------------------------------ the spool
    def _queue(self, entry: KnowledgeEntry, exc: DatabaseAway) -> None:
        self.spool.put(entry, self.robot_id, self.shared)
        with self._lock:
            self._queued[entry.id] = entry
            self._version += 1
        log.info("%s", self.link.unreachable(exc, f"the entry {entry.id!r} is queued in {self.directory} and is written "
                                                  "when the database is back"))
        self.link.schedule_retry()

    def _flush(self) -> bool:
        """Write the queued entries (each its own transaction), deleting each file after its commit."""
        written = 0
        with self._sync, self.spool.lock():
            if self.spool.deferred:  # files that could not be read before: try them again
                for spooled in self.spool.items():
                    with self._lock:
                        self._queued.setdefault(spooled.item.id, spooled.item)
            for entry_id in sorted(self._queued, key=lambda i: (self._queued[i].created, i)):
                spooled = self.spool.load(entry_id)
                if spooled is None:
                    if entry_id not in self.spool.deferred:  # written by another process sharing this spool
                        with self._lock:
                            self._queued.pop(entry_id, None)
                    continue  # else: cannot be read now, tried again later
                robot_id = self.robot_id if self._bound else spooled.robot_id or self.robot_id  # a robot's role: its own
                entry, shared = spooled.item, spooled.shared
                try:
                    outcome = self.link.run(lambda conn, e=entry, r=robot_id, s=shared: self._insert(conn, e, r, s))
                    why = "the database holds another entry under this id"
                except DatabaseRefused as exc:
                    outcome, why = "conflict", f"the database refused it ({exc})"
                if outcome == "conflict":
                    self.spool.reject(entry_id, why)
                else:
                    self.spool.done(entry_id)
                    written += 1
                with self._lock:
                    if outcome != "conflict" and (shared == "fleet" or robot_id == self.robot_id):
                        self._entries[entry_id] = entry
                    self._queued.pop(entry_id, None)
                    self._version += 1
        if self.spool.deferred:  # a file that could not be read now: tried again in a while
            self.link.schedule_retry(RETRY_MAX_S)
        if written:
            log.info("knowledge store: wrote %d queued entr%s into the database at %s", written,
                     "y" if written == 1 else "ies", self.where)
        return written > 0
