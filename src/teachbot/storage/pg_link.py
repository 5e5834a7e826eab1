"""One connection to the fleet database for a store that asks it on use (the knowledge base, the task logs).

``PgLink.run(work)`` runs ``work(conn)`` under a lock on a lazily opened connection (autocommit; ``ensure`` creates
the store's tables on each new connection) and replaces a broken connection once (a restarted server). Once the
database could not be reached, ``run`` raises DatabaseAway at once, never waiting on a connect, and a daemon timer
tries to reconnect with a doubling backoff (RETRY_MIN_S .. RETRY_MAX_S); the outage is one warning line, its end
one more. When it is back the timer calls ``retry()`` (the store writes what it queued and catches up), again
while ``pending()`` says work waits: what was queued is written when the database is back, used or not.

Every postgres store of the fleet memory talks to the database through one PgLink: the examples
(teachbot.memory.pg_store, which also listens on a second connection: teachbot.storage.pg_listen, and tells its
link of an outage the listener saw first), the knowledge base and the task logs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import conninfo

from teachbot.errors import MemoryStoreError

log = logging.getLogger(__name__)

RETRY_MIN_S, RETRY_MAX_S = 0.2, 2.0
CONNECT_TIMEOUT_S = 5  # when the DSN names no connect_timeout
WRITE_LOCK = 0x7465616368  # advisory lock held by every writing transaction (commit order = seq order)
SCHEMA_LOCK = WRITE_LOCK + 1  # advisory lock held while tables are created or migrated
SHARED_VALUES = ("fleet", "robot")  # who sees a row: the whole fleet, or only the robot that wrote it


class DatabaseAway(Exception):
    """The fleet database could not be reached; ``cause`` is why (psycopg's error, or the last one)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause

    def line(self) -> str:
        """The cause's first line."""
        text = str(self.cause).strip()
        return text.splitlines()[0] if text else type(self.cause).__name__


def safe_dsn(dsn: str) -> str:
    """The DSN for log lines and messages: host, port, database and user, never a password."""
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(an invalid DSN)"
    return " ".join(f"{key}={parts[key]}" for key in ("host", "port", "dbname", "user") if parts.get(key))


class PgLink:
    """The connection of one store (``what`` names it in log lines); see the module docstring."""

    def __init__(self, dsn: str, what: str, ensure: Callable[[psycopg.Connection], None],
                 retry: Callable[[], None] | None = None, pending: Callable[[], bool] | None = None,
                 meanwhile: Callable[[], str] = lambda: "serving what was read before, queueing new writes; retrying") -> None:
        try:
            given = conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise MemoryStoreError(f"memory.store.dsn is not a PostgreSQL connection string: {exc}") from None
        self.dsn, self.where, self.what = dsn, safe_dsn(dsn), what
        self._options = {} if "connect_timeout" in given else {"connect_timeout": CONNECT_TIMEOUT_S}
        self._ensure, self._retry, self._pending, self._meanwhile = ensure, retry, pending, meanwhile
        self._lock = threading.RLock()
        self._conn: psycopg.Connection | None = None
        self._away: DatabaseAway | None = None  # set during an outage
        self._next_try = 0.0
        self._backoff = RETRY_MIN_S
        self._timer: threading.Timer | None = None
        self._closed = False
        self._told: set[str] = set()  # the concerns warned of in this outage (see ``tell``)

    @property
    def online(self) -> bool:
        """The last contact with the database succeeded (or none was tried yet)."""
        return self._away is None

    @property
    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect`` besides the DSN (a connect timeout unless the DSN names one)."""
        return dict(self._options)

    def run(self, work: Callable[[psycopg.Connection], Any], *, reconnect: bool = False) -> Any:
        """``work(conn)``; DatabaseAway when the database is unreachable (at once during an outage: the background
        timer reconnects; ``reconnect`` True is that timer's own attempt)."""
        with self._lock:
            if self._away is not None and not reconnect:
                raise self._away
            for attempt in (1, 2):
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = psycopg.connect(self.dsn, autocommit=True, **self._options)
                        self._ensure(self._conn)
                    result = work(self._conn)
                except psycopg.OperationalError as exc:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                    if attempt == 2:
                        self._went_away(exc)
                        raise self._away from exc  # type: ignore[misc]
                    continue
                if self._away is not None:
                    self._away = None
                    self._backoff = RETRY_MIN_S
                    self._told.clear()
                    log.warning("%s: the database at %s is back", self.what, self.where)
                return result
        raise AssertionError("unreachable")

    def reconnect(self) -> bool:
        """Try the database now (also during an outage); True when it answered."""
        try:
            self.run(lambda conn: None, reconnect=True)
        except DatabaseAway:
            return False
        return True

    def mark_away(self, cause: BaseException) -> None:
        """Another connection to the same server failed (a listener's): treat the database as away from now on, with the
        warning line and the background retry of an outage, so no caller waits on a connect meanwhile."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._away is None:
                self._went_away(cause)

    def unreachable(self, exc: DatabaseAway, consequence: str) -> str:
        """A message line: which database, why, and what happens meanwhile."""
        return f"{self.what}: the database at {self.where} is unreachable ({exc.line()}); {consequence}"

    def tell(self, exc: DatabaseAway, concern: str, consequence: str, again: int = logging.DEBUG) -> None:
        """Log ``unreachable(exc, consequence)``: a warning the first time ``concern`` meets this outage, at level ``again``
        after that (one warning per outage and concern, not one per call)."""
        with self._lock:
            first = concern not in self._told
            self._told.add(concern)
        log.log(logging.WARNING if first else again, "%s", self.unreachable(exc, consequence))

    def schedule_retry(self) -> None:
        """Try again after the backoff: reconnect if need be, then ``retry()`` (again and again while ``pending()``)."""
        with self._lock:
            if self._closed or (self._timer is not None and self._timer.is_alive()):
                return
            delay = max(self._next_try - time.monotonic(), RETRY_MIN_S)
            self._timer = threading.Timer(delay, self._retry_now)
            self._timer.daemon = True
            self._timer.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _went_away(self, exc: BaseException) -> None:
        first = self._away is None
        self._away = DatabaseAway(exc)
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, RETRY_MAX_S)
        if first:
            log.warning("%s", self.unreachable(self._away, self._meanwhile()))
        self.schedule_retry()

    def _retry_now(self) -> None:
        with self._lock:
            self._timer = None  # this timer is done: schedule_retry may start the next one
        if not self.reconnect():
            return  # _went_away scheduled the next try
        try:
            if self._retry is not None:
                self._retry()
        except DatabaseAway:
            return
        except Exception:  # noqa: BLE001 - a timer thread must not die silently with work pending
            log.exception("%s: retrying the database failed", self.what)
        if self._pending is not None and self._pending():
            self.schedule_retry()


def ensure_tables(conn: psycopg.Connection, table: str, ddl: str) -> None:
    """Run ``ddl`` (statements split on ';') unless ``table`` exists; concurrent callers serialise on the schema lock."""
    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        for statement in ddl.split(";"):
            if statement.strip():
                conn.execute(statement)
