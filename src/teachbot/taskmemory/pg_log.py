"""The task logs on the memory's ``postgres`` backend: each robot's logs copied into the fleet's database.

A task log is this robot's own record of what it did, appended at the pace of its actions, and it must be
appendable whether or not the network is up. So ``PgTaskLogStore`` keeps the file logs of TaskLogStore as they
are (durable appends under a lock, torn tails cut: teachbot.taskmemory.log) and copies every record into the
table ``teachbot_task_records`` (robot id, task, position in the task's log, the record), right after it is
appended, or by a background retry when the database was away (teachbot.storage.pg_link: one warning line, one
more when it is back). Copying is idempotent (the key is robot, task and position), so a retry after a lost
answer, two processes of one robot, or a crash between append and copy never duplicate a record.

The other way, when the database holds more of a task's log than the files (a robot with a new disk, a
replacement under the same robot id, ``teachbot memory tasks --dsn`` reading another robot's), the missing records
are appended to the files on open, provided the files hold a beginning of the database's log (else the task is
left alone, with a warning): a robot resumes its tasks from the fleet's database.

Against a robot whose client was replaced, the server holds this (row-level security, teachbot.memory.pg_trust,
once the operator's `teachbot memory add-robot` added it): a robot's role reads, writes and deletes only the
records whose ``robot_id`` is its role; the operator's login reads every robot's.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import psycopg

from teachbot.errors import MemoryStoreError
from teachbot.memory.pg_trust import bound_robot, ensure_own_rows
from teachbot.storage.pg_link import DatabaseAway, DatabaseRefused, PgLink, ensure_tables
from teachbot.storage.pg_timeouts import PgTimeouts
from teachbot.taskmemory.log import SUFFIX, LogRecord, TaskLogStore, slug

log = logging.getLogger(__name__)

_DDL = """
CREATE TABLE IF NOT EXISTS teachbot_task_records (
    robot_id text NOT NULL,
    task_slug text NOT NULL,
    seq integer NOT NULL,
    task text NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (robot_id, task_slug, seq)
)
"""


def ensure_task_tables(conn: psycopg.Connection) -> None:
    """The task records' table, created when missing, with the fleet's row ownership (teachbot.memory.pg_trust: a
    robot's role reads, writes and deletes only its own records), added by the operator's login; a robot's login on a
    table still without it is warned about it."""
    ensure_tables(conn, "teachbot_task_records", _DDL)
    if not ensure_own_rows(conn, "teachbot_task_records", "robot_id = current_user"):
        log.warning("task memory: the table teachbot_task_records has no row-level security yet, so any robot can change "
                    "any robot's task logs; the operator adds it by running `teachbot memory add-robot` (README: Fleet memory)")


class PgTaskLogStore(TaskLogStore):
    """``robot_id``'s task logs in ``directory``, copied into (and restored from) the fleet database at ``dsn``."""

    def __init__(self, directory: str | Path, dsn: str, *, robot_id: str, timeouts: PgTimeouts | None = None) -> None:
        super().__init__(directory)
        if not robot_id.strip():
            raise ValueError("memory.store.robot_id is empty; name this robot (its task logs are kept under its name)")
        self.robot_id = robot_id
        self.link = PgLink(dsn, "task memory", self._connected, retry=self.sync, pending=self.pending, timeouts=timeouts)
        self.where = self.link.where
        self._copied: dict[str, int] = {}  # task slug -> records known to be in the database
        self._copy_lock = threading.Lock()
        self.sync()

    def append(self, record: LogRecord) -> LogRecord:
        """Append durably to the file log (TaskLogStore.append), then copy what the database lacks of this task."""
        stored = super().append(record)
        try:
            self.link.run(lambda conn: self._copy(conn, slug(stored.task)))
        except DatabaseAway:
            self.link.schedule_retry()  # the record is safe in the file; it goes into the database when it is back
        except DatabaseRefused as exc:  # e.g. a text jsonb cannot hold: the record is safe in the file all the same
            log.error("task memory: %s; the record of %r stays in %s only", exc, stored.task, self.directory)
        return stored

    def pending(self) -> bool:
        """Some appended record is not known to be in the database yet."""
        return any(self._copied.get(name, 0) < count for name, count in self._local_counts().items())

    def sync(self) -> bool:
        """Copy what the database lacks and restore what the files lack, for every task; False when it is away."""
        try:
            held = dict(self.link.run(lambda conn: conn.execute(
                "SELECT task_slug, count(*) FROM teachbot_task_records WHERE robot_id = %s GROUP BY task_slug",
                (self.robot_id,)).fetchall()))
            local = self._local_counts()
            for name in sorted(held.keys() | local.keys()):
                start = local.get(name, 0)
                if held.get(name, 0) > start:
                    self.link.run(lambda conn, n=name, first=start: self._restore(conn, n, first))
                else:
                    self._copied[name] = held.get(name, 0)
                    self.link.run(lambda conn, n=name: self._copy(conn, n))
        except DatabaseAway:
            self.link.schedule_retry()
            return False
        except (MemoryStoreError, ValueError, TypeError, KeyError) as exc:  # a refused record, a row not readable here
            log.error("task memory: copying the task logs to or from the database at %s failed: %s", self.where, exc)
            return False
        return True

    def close(self) -> None:
        self.link.close()

    # ------------------------------------------------------------------ internals
    def _connected(self, conn: psycopg.Connection) -> None:
        """Each new connection: the table; a robot's role is this store's robot_id (the server allows no other)."""
        ensure_task_tables(conn)
        role = bound_robot(conn, "teachbot_task_records")
        if role is not None and role != self.robot_id:
            log.warning("task memory: this robot logs in to the database at %s as the robot %r: that is its robot_id "
                        "(memory.store.robot_id says %r)", self.where, role, self.robot_id)
            self.robot_id = role

    def _local_counts(self) -> dict[str, int]:
        return {path.name[: -len(SUFFIX)]: len(self._read(path)) for path in self.directory.glob(f"*{SUFFIX}")}

    def _copy(self, conn: psycopg.Connection, name: str) -> None:
        """Insert the records of task ``name`` from the first one the database may lack (idempotent)."""
        with self._copy_lock:
            records = self._read(self.directory / f"{name}{SUFFIX}")
            start = self._copied.get(name, 0)
            if start >= len(records):
                return
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO teachbot_task_records (robot_id, task_slug, seq, task, record) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    [(self.robot_id, name, r.seq, r.task, json.dumps(r.to_json(), default=repr)) for r in records[start:]])
            self._copied[name] = len(records)

    def _restore(self, conn: psycopg.Connection, name: str, start: int) -> None:
        """Append the database's records of task ``name`` from position ``start`` on to the file log, when the
        file's records are the beginning of the database's (compared by the last one the file holds)."""
        rows = conn.execute("SELECT seq, record FROM teachbot_task_records WHERE robot_id = %s AND task_slug = %s "
                            "AND seq >= %s ORDER BY seq", (self.robot_id, name, max(start - 1, 0))).fetchall()
        records = [LogRecord.from_json(data, seq) for seq, data in rows]
        if start:
            local = self._read(self.directory / f"{name}{SUFFIX}")
            if not records or records[0] != local[start - 1]:
                log.warning("task memory: the log of %r in %s and in the database at %s differ at record %d; it is left "
                            "as it is in both", name, self.directory, self.where, start - 1)
                self._copied[name] = start  # never copied over the database's own
                return
            records = records[1:]
        for record in records:
            TaskLogStore.append(self, record)
        self._copied[name] = start + len(records)
        if records:
            log.info("task memory: restored %d record%s of %r from the database at %s", len(records),
                     "s" * (len(records) != 1), name, self.where)
