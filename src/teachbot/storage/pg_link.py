"""One connection to the fleet database for a store that asks it on use (the knowledge base, the task logs).

``PgLink.run(work)`` runs ``work(conn)`` on a lazily opened connection (autocommit; ``ensure`` creates the store's
tables on each new connection) and replaces a broken connection once (a restarted server). Once the database could
not be reached, ``run`` raises DatabaseAway at once, never waiting on a connect or on the connection's lock, and a
daemon timer tries to reconnect with a doubling backoff (RETRY_MIN_S .. RETRY_MAX_S); the outage is one warning
line, its end one more. When it is back the timer calls ``retry()`` (the store writes what it queued and catches
up), again while ``pending()`` says work waits: what was queued is written when the database is back, used or not.

A database that stops answering (a hung or stopped server, a cut network) is an outage too, after the timeouts of
teachbot.storage.pg_timeouts (memory.store.timeouts of config/memory.yaml): libpq's keepalives and TCP timeout,
the server's statement_timeout, and this link's own reply deadline: a call without an answer after ``reply_s``
(less inside ``within(seconds)``, as a retrieval asks) has its socket closed by the link's watchdog thread and
raises DatabaseAway; a caller waiting for the connection gives up at its deadline too. Any other database error
(bad data such as a NUL in a text, a constraint) is DatabaseRefused, a MemoryStoreError: the call failed, the
link and the database are fine.

Every postgres store of the fleet memory talks to the database through one PgLink: the examples
(teachbot.memory.pg_store, which also listens on a second connection: teachbot.storage.pg_listen, and tells its
link of an outage the listener saw first), the knowledge base and the task logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import conninfo

from teachbot.errors import MemoryStoreError
from teachbot.storage.pg_timeouts import PgTimeouts

log = logging.getLogger(__name__)

RETRY_MIN_S, RETRY_MAX_S = 0.2, 2.0
CONNECT_TIMEOUT_S = 5  # when the DSN names no connect_timeout
WRITE_LOCK = 0x7465616368  # advisory lock held by every writing transaction (commit order = seq order)
SCHEMA_LOCK = WRITE_LOCK + 1  # advisory lock held while tables are created or migrated
SHARED_VALUES = ("fleet", "robot")  # who sees a row: the whole fleet, or only the robot that wrote it
CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)  # the connection (or server) failed, not the call


class DatabaseAway(Exception):
    """The fleet database could not be reached; ``cause`` is why (psycopg's error, or the last one)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause

    def line(self) -> str:
        """The cause's first line."""
        text = str(self.cause).strip()
        return text.splitlines()[0] if text else type(self.cause).__name__


class DatabaseRefused(MemoryStoreError):
    """The database answered with an error that is not an outage (bad data, a constraint): this call failed."""


def safe_dsn(dsn: str) -> str:
    """The DSN for log lines and messages: host, port, database and user, never a password."""
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(an invalid DSN)"
    return " ".join(f"{key}={parts[key]}" for key in ("host", "port", "dbname", "user") if parts.get(key))


def connect_options(given: dict[str, Any], timeouts: PgTimeouts) -> dict[str, Any]:
    """``psycopg.connect`` keywords besides the DSN: the timeouts' libpq parameters that the DSN (``given``) does not
    name itself; a statement_timeout is added to the DSN's own ``options`` unless they set one."""
    options: dict[str, Any] = {"connect_timeout": _whole(timeouts.connect_s)}
    options.update(timeouts.libpq())
    chosen = {key: value for key, value in options.items() if key not in given}
    if "options" in given:
        own = str(given["options"])
        chosen["options"] = own if "statement_timeout" in own else f"{own} {options['options']}"
    return chosen


class PgLink:
    """The connection of one store (``what`` names it in log lines); see the module docstring."""

    def __init__(self, dsn: str, what: str, ensure: Callable[[psycopg.Connection], None],
                 retry: Callable[[], None] | None = None, pending: Callable[[], bool] | None = None,
                 meanwhile: Callable[[], str] = lambda: "serving what was read before, queueing new writes; retrying",
                 timeouts: PgTimeouts | None = None) -> None:
        try:
            given = conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise MemoryStoreError(f"memory.store.dsn is not a PostgreSQL connection string: {exc}") from None
        self.dsn, self.where, self.what = dsn, safe_dsn(dsn), what
        self.timeouts = timeouts or PgTimeouts()
        self._options = connect_options(given, self.timeouts)
        self._ensure, self._retry, self._pending, self._meanwhile = ensure, retry, pending, meanwhile
        self._lock = threading.RLock()  # the connection: one call at a time (held across its network I/O, bounded)
        self._state = threading.RLock()  # the outage state and the retry timer (never held across network I/O)
        self._conn: psycopg.Connection | None = None
        self._stale = False  # another connection saw the server go: replace this one before its next use
        self._away: DatabaseAway | None = None  # set during an outage
        self._next_try = 0.0
        self._backoff = RETRY_MIN_S
        self._timer: threading.Timer | None = None
        self._closed = False
        self._told: set[str] = set()  # the concerns warned of in this outage (see ``tell``)
        self._local = threading.local()  # a caller's deadline (``within``)
        self._watch = threading.Condition(threading.Lock())  # the watchdog's view of the call in flight
        self._inflight: tuple[int, float, psycopg.Connection] | None = None
        self._calls = 0
        self._cut_call = 0  # the last call the watchdog cut off
        self._watchdog: threading.Thread | None = None

    @property
    def online(self) -> bool:
        """The last contact with the database succeeded (or none was tried yet)."""
        return self._away is None

    @property
    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect`` besides the DSN (connect, keepalive, TCP and statement timeouts
        unless the DSN names them)."""
        return dict(self._options)

    @contextlib.contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Every ``run`` of this thread meanwhile ends within ``seconds`` from now, all of them together (DatabaseAway
        after that), as a retrieval that must answer from what is loaded asks."""
        previous = getattr(self._local, "deadline", None)
        deadline = time.monotonic() + seconds
        self._local.deadline = deadline if previous is None else min(previous, deadline)
        try:
            yield
        finally:
            self._local.deadline = previous

    def run(self, work: Callable[[psycopg.Connection], Any], *, reconnect: bool = False) -> Any:
        """``work(conn)``; DatabaseAway when the database is unreachable or does not answer in time (at once during
        an outage: the background timer reconnects; ``reconnect`` True is that timer's own attempt); DatabaseRefused
        when it answers with an error."""
        away = self._away
        if away is not None and not reconnect:
            raise away
        limit = self.timeouts.reply_s
        deadline = getattr(self._local, "deadline", None)
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic())
        if limit <= 0 or not self._lock.acquire(timeout=limit):
            raise DatabaseAway(TimeoutError(f"no answer within {self._seconds(limit)}: the connection is busy with a call "
                                            "that has none yet"))
        try:
            return self._run_locked(work, reconnect, time.monotonic() + limit, limit)
        finally:
            self._lock.release()

    def reconnect(self) -> bool:
        """Try the database now (also during an outage); True when it answered."""
        try:
            self.run(lambda conn: None, reconnect=True)
        except DatabaseAway:
            return False
        except MemoryStoreError as exc:  # e.g. a schema from a newer teachbot: reachable, and said so by the caller
            log.error("%s", exc)
            return False
        return True

    def mark_away(self, cause: BaseException) -> None:
        """Another connection to the same server failed (a listener's): treat the database as away from now on, with the
        warning line and the background retry of an outage, so no caller waits on a connect meanwhile; a call in flight
        is cut off."""
        self._stale = True
        self._cut_inflight()
        with self._state:
            if self._away is None:
                self._went_away(cause)

    def unreachable(self, exc: DatabaseAway, consequence: str) -> str:
        """A message line: which database, why, and what happens meanwhile."""
        return f"{self.what}: the database at {self.where} is unreachable ({exc.line()}); {consequence}"

    def tell(self, exc: DatabaseAway, concern: str, consequence: str, again: int = logging.DEBUG) -> None:
        """Log ``unreachable(exc, consequence)``: a warning the first time ``concern`` meets this outage, at level ``again``
        after that (one warning per outage and concern, not one per call)."""
        with self._state:
            first = concern not in self._told
            self._told.add(concern)
        log.log(logging.WARNING if first else again, "%s", self.unreachable(exc, consequence))

    def schedule_retry(self, at_least: float = RETRY_MIN_S) -> None:
        """Try again after the backoff (``at_least`` seconds from now): reconnect if need be, then ``retry()`` (again
        and again while ``pending()``)."""
        with self._state:
            if self._closed or (self._timer is not None and self._timer.is_alive()):
                return
            delay = max(self._next_try - time.monotonic(), at_least)
            self._timer = threading.Timer(delay, self._retry_now)
            self._timer.daemon = True
            self._timer.start()

    def close(self) -> None:
        """Stop retrying and close the connection (a call still waiting on the database is cut off)."""
        with self._state:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
        self._cut_inflight()
        with self._watch:
            self._watch.notify_all()
        if self._lock.acquire(timeout=self.timeouts.reply_s):
            try:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            finally:
                self._lock.release()

    # ------------------------------------------------------------------ the connection
    def _run_locked(self, work: Callable[[psycopg.Connection], Any], reconnect: bool, deadline: float, limit: float) -> Any:
        for attempt in (1, 2):
            if self._away is not None and not reconnect:  # the database went away while this call waited
                raise self._away
            try:
                if self._stale or self._conn is None or self._conn.closed:
                    self._drop()
                    conn = psycopg.connect(self.dsn, autocommit=True, **self._options)
                    try:
                        self._watched(conn, self._ensure, deadline)
                    except BaseException:
                        conn.close()
                        raise
                    self._conn = conn
                result = self._watched(self._conn, work, deadline)
            except CONNECTION_ERRORS as exc:
                cut = self._cut_call == self._calls
                self._drop()
                # a cut-off call, a cancelled statement or a spent deadline: the server does not answer in time
                if attempt == 2 or cut or isinstance(exc, psycopg.errors.QueryCanceled) or time.monotonic() >= deadline:
                    cause: BaseException = exc
                    if cut:
                        cause = TimeoutError(f"no answer within {self._seconds(limit)}; the connection was closed")
                    with self._state:
                        self._went_away(cause)
                        away = self._away
                    raise away from exc  # type: ignore[misc]
                continue
            except psycopg.Error as exc:
                text = str(exc).strip().splitlines()
                raise DatabaseRefused(f"{self.what}: the database at {self.where} refused it: "
                                      f"{text[0] if text else type(exc).__name__}") from exc
            with self._state:
                if self._away is not None:
                    self._away = None
                    self._backoff = RETRY_MIN_S
                    self._told.clear()
                    log.warning("%s: the database at %s is back", self.what, self.where)
            return result
        raise AssertionError("unreachable")

    def _watched(self, conn: psycopg.Connection, work: Callable[[psycopg.Connection], Any], deadline: float) -> Any:
        """``work(conn)``, cut off by the watchdog at ``deadline``."""
        with self._watch:
            self._calls += 1
            self._inflight = (self._calls, deadline, conn)
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch_calls, name=f"teachbot-pg-watchdog ({self.what})",
                                                  daemon=True)
                self._watchdog.start()
            self._watch.notify_all()
        try:
            return work(conn)
        finally:
            with self._watch:
                self._inflight = None

    def _watch_calls(self) -> None:
        """The watchdog thread: closes the socket of a call that passed its deadline (its recv then fails at once)."""
        with self._watch:
            while not self._closed:
                if self._inflight is None:
                    self._watch.wait()
                    continue
                call, deadline, conn = self._inflight
                left = deadline - time.monotonic()
                if left > 0:
                    self._watch.wait(left)
                    continue
                self._inflight = None
                self._cut_call = call
                log.warning("%s: the database at %s gave no answer in time; closing the connection", self.what, self.where)
                _shut(conn)

    def _cut_inflight(self) -> None:
        with self._watch:
            if self._inflight is not None:
                call, _, conn = self._inflight
                self._inflight = None
                self._cut_call = call
                _shut(conn)

    def _drop(self) -> None:
        """Close the connection (the link's lock is held)."""
        self._stale = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    @staticmethod
    def _seconds(limit: float) -> str:
        return f"{max(limit, 0.0):.1f} s"

    def _went_away(self, exc: BaseException) -> None:
        """The outage starts (or goes on): remember why, warn once, retry after the backoff (``_state`` is held)."""
        first = self._away is None
        self._away = DatabaseAway(exc)
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, RETRY_MAX_S)
        if first:
            log.warning("%s", self.unreachable(self._away, self._meanwhile()))
        self.schedule_retry()

    def _retry_now(self) -> None:
        with self._state:
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
            self.schedule_retry(RETRY_MAX_S if self.online else RETRY_MIN_S)


def _shut(conn: psycopg.Connection) -> None:
    """Shut the connection's socket down for both directions: a call blocked on it fails at once (the fd stays open,
    so it is never reused under a reader's feet; ``close`` frees it)."""
    with contextlib.suppress(OSError, psycopg.Error):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


def _whole(seconds: float) -> int:
    return max(1, round(seconds))


def ensure_tables(conn: psycopg.Connection, table: str, ddl: str) -> None:
    """Run ``ddl`` (statements split on ';') unless ``table`` exists; concurrent callers serialise on the schema lock."""
    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        for statement in ddl.split(";"):
            if statement.strip():
                conn.execute(statement)
