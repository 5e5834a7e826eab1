"""The memory's ``postgres`` backend: learned examples in a PostgreSQL database that a fleet of robots shares.

``PgMemoryStore`` has the public interface of the file store (teachbot.memory.store.MemoryStore: add, get,
list, remove, snapshot, refresh, version, export_jsonl, import_jsonl; the same errors), so the memory node
and ``teachbot memory`` use either. Seed examples stay files (``seeds_dir``), read as the file store reads them.

Guarantees (tables: teachbot.memory.pg_schema):

- a lesson is one transaction (its row, its key embeddings, its NOTIFY): all of it or none, whoever dies
  when; writers in any number of processes and robots serialise on an advisory lock, so none is lost;
- ``add`` of an id that holds exactly that example is a no-op (a retry after a connection dropped during
  the commit); other content under a taken id is a MemoryStoreError, as in the file store;
- the database going away is one warning line and a retry in the background (the store's connection is a
  teachbot.storage.pg_link.PgLink), never an exception on the read path: reads serve the examples read
  before, and ``add`` queues the lesson durably in the local spool (teachbot.storage.spool), written into
  the database as soon as it is back; a database that stops answering is away after the link's timeouts
  (teachbot.storage.pg_timeouts), and no lock that a reader takes is held while the database is asked: writes
  and catch-ups take their own lock (``_sync``), the examples read so far have theirs (``_lock``);
- the database answering with an error (bad data such as a NUL in a text) is a MemoryStoreError of that call;
  a row this store cannot read as a lesson (another writer's, e.g. a NULL instruction) is skipped with an error
  line, once, and every other lesson still served;
- LISTEN/NOTIFY: a background connection (teachbot.storage.pg_listen) hears every add and remove and catches this store up at once
  (``on_change`` then gets what others added or removed), so a lesson learned on one robot reaches the
  others' retrieval within milliseconds; after an outage, it catches up with what was committed meanwhile.

Examples are visible to this robot when shared with the fleet or learned by this robot (``robot_id``: with a robot's
role, the role). Trust (teachbot.memory.pg_trust): ``shared_for``, ``remove`` of this robot's lessons only, and
lessons and key embeddings checked on write and read (teachbot.memory.pg_checks; a row that fails is skipped).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg

from teachbot.errors import MemoryStoreError
from teachbot.memory.embedding import Embedder
from teachbot.memory.example import LEARNED, SEED, InteractionExample, UnknownExampleError, validate_learned
from teachbot.memory.pg_checks import check_lesson, check_vectors
from teachbot.memory.pg_lessons import LESSONS, PoisonLog, StoreChange, confirmed_mark, read_lesson
from teachbot.memory.pg_rows import changes_since, delete_example, insert_example, insert_missing_keys
from teachbot.memory.pg_schema import CHANNEL, REAL_ARRAY, ensure_schema
from teachbot.memory.pg_trust import Identity, promote, read_identity
from teachbot.memory.records import prepare_learned, read_learned_jsonl, read_seeds
from teachbot.memory.store_protocol import ImportReport
from teachbot.storage.files import write_jsonl
from teachbot.storage.pg_link import CONNECT_TIMEOUT_S, RETRY_MAX_S, SHARED_VALUES, DatabaseAway, DatabaseRefused, PgLink
from teachbot.storage.pg_listen import Listener
from teachbot.storage.pg_timeouts import PgTimeouts
from teachbot.storage.spool import Spool

log = logging.getLogger(__name__)


class PgMemoryStore:
    """Seed examples from files plus the learned examples of a PostgreSQL database shared by a fleet.

    ``robot_id`` is this robot's provenance; ``shared`` ('fleet' or 'robot') who sees the lessons it adds.
    ``embedder``: when given, ``add`` stores the keys' embeddings under its name in the same transaction.
    ``listen`` False: no background connection; every read queries the database and raises
    MemoryStoreError when it is unreachable (the ``teachbot memory`` commands). ``on_change(StoreChange)`` runs
    after a catch-up that brought others' changes (not for the first read, nor this store's own adds and
    removes), on the thread that caught up: the listener's, or a reader's. ``timeouts``: how long the database may
    take to answer (memory.store.timeouts; the defaults of PgTimeouts when None).
    """

    def __init__(self, dsn: str, seeds_dir: str | Path | None = None, *, robot_id: str, spool_dir: str | Path,
                 shared: str = "fleet", embedder: Embedder | None = None, listen: bool = True,
                 on_change: Callable[[StoreChange], None] | None = None, timeouts: PgTimeouts | None = None) -> None:
        if shared not in SHARED_VALUES:
            raise MemoryStoreError(f"memory.store.scope must be one of {SHARED_VALUES}, got {shared!r}")
        if not robot_id.strip():
            raise MemoryStoreError("memory.store.robot_id is empty; name this robot (it is every lesson's provenance)")
        self.link = PgLink(dsn, "memory store", self._ensure_schema, retry=self._after_outage,
                           pending=lambda: bool(self._spooled or self.spool.deferred), meanwhile=self._meanwhile,
                           timeouts=timeouts)
        self.dsn, self.where = dsn, self.link.where
        self.robot_id, self.shared = robot_id, shared
        self.identity: Identity | None = None  # who the database says this login is (read on each new connection)
        self.seeds_dir = Path(seeds_dir) if seeds_dir is not None else None
        self.embedder = embedder
        self.on_change = on_change
        self.spool = Spool(spool_dir, LESSONS)
        self.embedding_type = REAL_ARRAY
        self._lock = threading.RLock()  # the examples held here; never held while the database is asked
        self._sync = threading.RLock()  # writes and catch-ups, one at a time, so a catch-up never sees a write half done
        self._poison = PoisonLog(self.where)  # the rows skipped as unreadable, told once each
        self._seeds: dict[str, InteractionExample] = {}
        self._learned: dict[str, InteractionExample] = {}  # visible rows of the database, as last read
        self._spooled: dict[str, InteractionExample] = {lesson.item.id: lesson.item for lesson in self.spool.items()}
        self._last_seq = 0
        self._tracking = False  # the first catch-up is done: later ones collect others' changes for on_change
        self._added: list[str] = []
        self._removed: list[str] = []
        self._version = 0
        self._dirty = threading.Event()
        self._first_contact = threading.Event()  # the listener caught up once, or found the database away
        self.reload_seeds()
        self._listener: Listener | None = None
        if listen:
            self._dirty.set()
            self._listener = Listener(dsn, CHANNEL, self.link.connect_options, on_connect=self._back_online,
                                      on_notify=self._notified, on_outage=self._note_outage, name="teachbot-memory-listen")
            self._listener.start()
            self._first_contact.wait(2 * CONNECT_TIMEOUT_S + 5)
        else:
            self.refresh()

    # ------------------------------------------------------------------ reading
    @property
    def version(self) -> int:
        return self._version

    @property
    def online(self) -> bool:
        """The last contact with the database succeeded (or none was tried yet)."""
        return self.link.online

    @property
    def listening(self) -> bool:
        """A background connection follows the database (and says whether it is reachable)."""
        return self._listener is not None

    @property
    def queued(self) -> frozenset[str]:
        """The ids of the lessons waiting in the spool for the database."""
        with self._lock:
            return frozenset(self._spooled)

    @property
    def learned_dir(self) -> Path:
        """This store's local directory: the spool of lessons waiting for the database."""
        return self.spool.directory

    @property
    def quarantine_dir(self) -> Path:
        return self.spool.quarantine_dir

    def __len__(self) -> int:
        self.refresh()
        with self._lock:
            return len(self._seeds) + len(self._learned.keys() | self._spooled.keys())

    def __contains__(self, example_id: object) -> bool:
        self.refresh()
        with self._lock:
            return example_id in self._seeds or example_id in self._learned or example_id in self._spooled

    def get(self, example_id: str) -> InteractionExample:
        """The example with this id; UnknownExampleError if there is none (for this robot)."""
        self.refresh()
        with self._lock:
            found = self._seeds.get(example_id) or self._learned.get(example_id) or self._spooled.get(example_id)
        if found is None:
            raise UnknownExampleError(f"no example with id {example_id!r}; list() shows the stored ids")
        return found

    def list(self, profile: str = "", source: str = "") -> list[InteractionExample]:
        """Examples matching the filters ('' matches all): seeds by id, then learned oldest first."""
        if source not in ("", SEED, LEARNED):
            raise MemoryStoreError(f"unknown source filter {source!r}; use '{SEED}', '{LEARNED}' or ''")
        self.refresh()
        with self._lock:
            seeds = sorted(self._seeds.values(), key=lambda e: e.id) if source in ("", SEED) else []
            learned = ({**self._spooled, **self._learned}.values() if source in ("", LEARNED) else [])
            learned = sorted(learned, key=lambda e: (e.created, e.id))
        return [e for e in seeds + learned if not profile or e.profile == profile]

    def snapshot(self) -> tuple[int, list[InteractionExample]]:
        """``version`` and every example it stands for, consistently, without refreshing."""
        with self._lock:
            return self._version, [*self._seeds.values(), *{**self._spooled, **self._learned}.values()]

    def refresh(self) -> bool:
        """Catch up with the database; True if the examples changed. With the listener this queries only after a
        NOTIFY or a reconnect (else nothing changed), and waits for another thread's catch-up at most the link's read
        timeout; while the database is away (or slow) it serves what it has."""
        return self._refresh(self.link.timeouts.read_s if self._listener is not None else None)

    def _refresh(self, wait: float | None) -> bool:
        """``refresh``, waiting at most ``wait`` seconds (None: the link's reply timeout) for a write or a catch-up
        of another thread to end."""
        if self._listener is not None and (not self._dirty.is_set() or not self.link.online):
            return False
        limit = self.link.timeouts.reply_s if wait is None else wait
        if not self._sync.acquire(timeout=limit):
            if self._listener is None:
                raise MemoryStoreError(f"memory store: another call to the database at {self.where} has had no answer for "
                                       f"{limit:.1f} s; nothing was read")
            return False  # the thread holding it catches up (the listener's), or gives up and marks the link away
        try:
            self._dirty.clear()
            try:
                rows = self.link.run(lambda conn: changes_since(conn, self._last_seq, self.robot_id))
                with self._lock:
                    changed = self._catch_up(rows)
                if self._spooled or self.spool.deferred:
                    changed = self._flush_spool() or changed
                    if self.spool.deferred:  # a file that could not be read now: tried again in a while
                        self.link.schedule_retry(RETRY_MAX_S)
            except DatabaseAway as exc:
                if self._listener is None:
                    raise MemoryStoreError(self.link.unreachable(exc, "nothing was read")) from None
                self._dirty.set()
                changed = False
            except BaseException:
                self._dirty.set()  # caught up by the next reader or notification
                raise
        finally:
            self._sync.release()
        self._report_changes()
        return changed

    def reload_seeds(self) -> None:
        """(Re)read ``<seeds_dir>/<profile>/*.txt``; seeds are read-only files, as in the file store."""
        seeds = read_seeds(self.seeds_dir, skip=self.spool.directory)
        with self._lock:
            if seeds != self._seeds:
                self._seeds = seeds
                self._version += 1

    # ------------------------------------------------------------------ writing
    def add(self, example: InteractionExample, confirmed: bool = False) -> str:
        """Store a learned example in one transaction and return its id (generated when empty).

        As the file store: ``created`` and ``instructions`` are filled when empty; an invalid example or an
        id taken by another example raises MemoryStoreError. While the database is unreachable the lesson
        is queued durably in the spool (one warning line) and written when it is back. ``confirmed``: this robot's
        person confirmed the lesson (with a robot's role only such a lesson goes to the fleet: ``shared_for``).
        """
        prepared = prepare_learned(example)
        validate_learned(prepared)
        try:
            check_lesson(prepared)
        except MemoryStoreError as exc:
            raise MemoryStoreError(f"the lesson {prepared.id!r} was not stored: {exc}") from None
        mark = confirmed_mark(confirmed)
        with self._lock:
            if prepared.id in self._seeds or (prepared.id in self._spooled and self._spooled[prepared.id] != prepared):
                raise MemoryStoreError(f"an example with id {prepared.id!r} already exists; remove it first or leave id empty")
        vectors = self.embed_keys(prepared)
        try:
            with self._sync:  # a catch-up must not see the row before this store holds it (others' news only)
                outcome, stored = self.link.run(lambda conn: insert_example(
                    conn, prepared, self.robot_id, self.shared_for(mark), vectors, self.embedding_type, mark, self.stamped))
                if outcome != "conflict":
                    self._stored_locally(stored)
        except DatabaseRefused as exc:
            raise MemoryStoreError(f"the lesson {prepared.id!r} was not stored: {exc}") from None
        except DatabaseAway as exc:
            self.spool.put(prepared, self.robot_id, self.shared, mark)
            with self._lock:
                self._spooled[prepared.id] = prepared
                self._version += 1
            # the first queued lesson of an outage is a warning line, the others are info lines
            self.link.tell(exc, "queue", f"the lesson {prepared.id!r} is queued in {self.spool.directory} and is written "
                                         "when the database is back", again=logging.INFO)
            self.link.schedule_retry()
            return prepared.id
        if outcome == "conflict":
            raise MemoryStoreError(f"an example with id {prepared.id!r} already exists; remove it first or leave id empty")
        return prepared.id

    def remove(self, example_id: str) -> None:
        """Delete one of this robot's learned examples, for every robot that sees it; another robot's lesson is refused
        (MemoryStoreError naming it). Seeds are files to edit; unknown ids raise UnknownExampleError."""
        self._remove(example_id, any_robot=False)

    def remove_any_robot(self, example_id: str) -> None:
        """As :meth:`remove`, for any robot's lesson: the operator's ``teachbot memory remove --any-robot`` (a robot's
        role cannot, whatever it asks: the server's row-level security refuses it)."""
        self._remove(example_id, any_robot=True)

    def _remove(self, example_id: str, any_robot: bool) -> None:
        with self._lock:
            if example_id in self._seeds:
                raise MemoryStoreError(f"{example_id!r} is a seed example (read-only); delete its file under {self.seeds_dir}")
            spooled = self._spooled.pop(example_id, None)
            if spooled is not None:
                self.spool.done(example_id)
                self._version += 1
        try:
            with self._sync:  # as in add: the tombstone and this store's forgetting are one step for a catch-up
                other = self.link.run(lambda conn: delete_example(conn, example_id, self.robot_id, any_robot))
                with self._lock:
                    if other is None and self._learned.pop(example_id, None) is not None:
                        self._version += 1
        except DatabaseAway as exc:
            if spooled is not None:
                return  # it never reached the database
            raise MemoryStoreError(self.link.unreachable(exc, f"{example_id!r} was not removed; try again")) from None
        if other and spooled is None:
            raise MemoryStoreError(f"{example_id!r} is a lesson of robot {other!r}, not of this robot ({self.robot_id}); "
                                   f"only that robot removes it, or an operator: teachbot memory remove --any-robot {example_id}")
        if other == "" and spooled is None:
            raise UnknownExampleError(f"no learned example with id {example_id!r}")

    def promote(self, example_id: str) -> str:
        """Share a learned example with the fleet (an operator's login: a robot's is refused); returns whose it is."""
        return self.link.run(lambda conn: promote(conn, example_id, CHANNEL))

    @property
    def stamped(self) -> bool:
        """The database sets ``created`` of this store's lessons (it logs in as a robot's role)."""
        return self.identity is not None and self.identity.robot

    def shared_for(self, confirmed: str) -> str:
        """Who sees a lesson this store writes: the configured scope, but with a robot's role only a lesson its person
        confirmed goes to the fleet (the database refuses others: pg_trust)."""
        identity = self.identity
        if identity is not None and identity.robot and (confirmed != "person" or not identity.may_share):
            return "robot"
        return self.shared

    def export_jsonl(self, path: str | Path, profile: str = "", source: str = LEARNED) -> int:
        """Write the matching examples to one JSON Lines file (atomically); returns how many."""
        return write_jsonl(path, (e.to_dict() for e in self.list(profile=profile, source=source)))

    def import_jsonl(self, path: str | Path) -> ImportReport:
        """Add the learned examples of a JSON Lines export in ONE transaction, skipping ids already stored and seeds.

        The whole file is validated first (an error names the line); MemoryStoreError when the database is away.
        """
        examples, seeds = read_learned_jsonl(path)
        report = ImportReport(skipped=seeds + [e.id for e in examples if e.id in self._seeds])  # seed ids: never shadowed
        examples = [e for e in examples if e.id not in self._seeds]
        outcomes = self.add_batch(examples, f"nothing of {path} was imported; try again")
        for example, outcome in zip(examples, outcomes):
            (report.added if outcome == "added" else report.skipped).append(example.id)
        return report

    def add_batch(self, examples: list[InteractionExample], unreachable: str = "nothing was written; try again") -> list[str]:
        """Store learned examples in ONE transaction: per example 'added', 'same' (already stored, equal) or 'conflict'
        (another example holds its id; left as it is). MemoryStoreError ending in ``unreachable`` when the database is
        away (nothing is queued: the caller retries the whole batch)."""
        prepared = [prepare_learned(e) for e in examples]
        for example in prepared:
            validate_learned(example)
            check_lesson(example)
        vectors = [self.embed_keys(e) for e in prepared]

        def insert_all(conn: psycopg.Connection) -> list[tuple[str, InteractionExample]]:
            with conn.transaction():
                return [insert_example(conn, e, self.robot_id, self.shared_for(""), v, self.embedding_type, "", self.stamped)
                        for e, v in zip(prepared, vectors)]

        try:
            with self._sync:  # as in add: a catch-up never takes these rows for others' news
                written = self.link.run(insert_all)
                for outcome, stored in written:
                    if outcome == "added":
                        self._stored_locally(stored)
        except DatabaseAway as exc:
            raise MemoryStoreError(self.link.unreachable(exc, unreachable)) from None
        return [outcome for outcome, _ in written]

    def add_keys(self, examples: list[InteractionExample]) -> None:
        """Store the key embeddings of ``embedder`` for stored examples that lack them (one transaction; examples
        removed meanwhile are skipped). Raises DatabaseAway when the database is away."""
        rows = [(e, self.embed_keys(e)) for e in examples]
        self.link.run(lambda conn: insert_missing_keys(conn, rows, self.embedding_type))

    def close(self) -> None:
        """Stop the listener and close the connections."""
        if self._listener is not None:
            self._listener.stop()
        self.link.close()

    def __enter__(self) -> PgMemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ database
    def _ensure_schema(self, conn: psycopg.Connection) -> None:
        """Each new connection of the link: the tables (created or migrated when need be) and the key column's type."""
        self.embedding_type = ensure_schema(conn)
        identity = read_identity(conn)
        if identity.robot and identity.role != self.robot_id:
            log.warning("memory store: this robot logs in to the database at %s as the robot %r: that is its robot_id "
                        "(memory.store.robot_id says %r)", self.where, identity.role, self.robot_id)
            self.robot_id = identity.role
        self.identity = identity

    def _catch_up(self, rows: list[tuple[object, ...]]) -> bool:
        """Apply the visible changes committed after the last one seen (``changes_since``: sequence numbers only grow
        at commit; ``_lock`` is held); after the first catch-up, what changed is kept for ``on_change``. A row that is
        not a readable lesson is skipped (and what this store held under its id forgotten), with one error line."""
        changed = False
        for row in rows:
            example_id, removed, seq = row[0], row[-2], int(row[-1])  # type: ignore[call-overload]
            if seq <= self._last_seq:
                continue
            example = None
            if not removed:
                try:
                    example = read_lesson(row[:-2])
                except (MemoryStoreError, TypeError, ValueError) as exc:
                    self._poison.skip(str(example_id), seq, exc)
            if example is None:
                gone = self._learned.pop(str(example_id), None) is not None
                if gone and self._tracking:
                    self._removed.append(str(example_id))
                changed = gone or changed
            else:
                example_id = example.id
                if self._learned.get(example_id) != example:
                    self._learned[example_id] = example
                    changed = True
                    if self._tracking:
                        self._added.append(example_id)
            self._last_seq = max(self._last_seq, seq)
        if changed:
            self._version += 1
        self._tracking = True
        return changed

    def _flush_spool(self) -> bool:
        """Write the spooled lessons into the database, oldest first; stops at the first connection failure. A lesson
        the database refuses (bad data) is moved to the spool's quarantine; a file that cannot be read now stays."""
        written = 0
        with self._sync, self.spool.lock():  # the row and this store's holding it are one step for a catch-up (see add)
            for lesson in self.spool.items():
                example = lesson.item
                vectors = self.embed_keys(example)
                try:
                    outcome, example = self.link.run(lambda conn, e=example, ls=lesson, v=vectors: insert_example(
                        conn, e, self.robot_id if self.identity and self.identity.robot else ls.robot_id,
                        self.shared_for(ls.confirmed) if ls.shared == "fleet" else "robot", v, self.embedding_type,
                        ls.confirmed, self.stamped))
                except DatabaseRefused as exc:
                    outcome, why = "refused", f"the database refused it ({exc})"
                else:
                    why = "the database holds another example under this id"
                with self._lock:
                    self._spooled.pop(example.id, None)
                    if outcome in ("conflict", "refused"):
                        self.spool.reject(example.id, why)
                        self._removed.append(example.id)
                    else:
                        self.spool.done(example.id)
                        written += 1
                        if lesson.shared == "fleet" or lesson.robot_id == self.robot_id or self.identity and self.identity.robot:
                            self._learned[example.id] = example
                    self._version += 1
        if written:
            log.info("memory store: wrote %d queued lesson%s into the database at %s", written, "s" * (written != 1), self.where)
        return written > 0

    def _report_changes(self) -> None:
        """Hand the changes collected since the last call to ``on_change`` (outside the store's lock)."""
        with self._lock:
            change = StoreChange(tuple(self._added), tuple(self._removed))
            self._added.clear()
            self._removed.clear()
        if (change.added or change.removed) and self.on_change is not None:
            try:
                self.on_change(change)
            except Exception:  # a callback's bug must not stop the listener or a reader  # noqa: BLE001
                log.exception("memory store: on_change callback failed")

    def _stored_locally(self, example: InteractionExample) -> None:
        with self._lock:
            if self._learned.get(example.id) != example:
                self._learned[example.id] = example
                self._version += 1

    def embed_keys(self, example: InteractionExample) -> tuple[str, np.ndarray] | None:
        """(model name, one row per key) for the key rows, or None without an embedder; MemoryStoreError when the
        embedder gives what no robot would trust (pg_checks.check_vectors)."""
        if self.embedder is None or not example.keys:
            return None
        rows = np.asarray(self.embedder.embed(list(example.keys)), dtype=np.float32)
        check_vectors(self.embedder.name, rows)
        return self.embedder.name, rows

    def _meanwhile(self) -> str:
        """What the store does during an outage (the end of its outage warning)."""
        return f"serving the {len(self._learned)} learned examples read before, queueing new lessons in {self.spool.directory}; retrying"

    # ------------------------------------------------------------------ listener
    def _notified(self) -> None:
        self._dirty.set()
        self._background_refresh()

    def _back_online(self) -> None:
        """The listener is connected: try the store's own connection too, then catch up and write the queue."""
        self.link.reconnect()
        self._dirty.set()
        self._background_refresh()
        self._first_contact.set()

    def _after_outage(self) -> None:
        """The link's background retry reached the database again: catch up and write the queue."""
        self._dirty.set()
        self._refresh(None)

    def _note_outage(self, exc: BaseException) -> None:
        """The listener lost the database: so did the store (no reader waits on a connect meanwhile)."""
        self.link.mark_away(exc)
        self._first_contact.set()

    def _background_refresh(self) -> None:
        """A catch-up on the listener's (or the retry timer's) thread: every error is a log line, never the thread's end."""
        try:
            self._refresh(None)
        except MemoryStoreError as exc:  # e.g. a schema from a newer teachbot: say it, keep serving
            log.error("%s", exc)
        except Exception:  # noqa: BLE001 - a bug or an unexpected database reply must not stop fleet sync
            log.exception("memory store: catching up with the database at %s failed; retrying at the next change", self.where)
            self._dirty.set()
