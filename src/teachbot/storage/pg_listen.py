"""A store's background connection to the fleet database: LISTEN for other processes' changes, reconnect when
the server goes, start again after any other error.

One daemon thread per listening store (the example memory, teachbot.memory.pg_store). It connects (with the
connect options of the store's PgLink, teachbot.storage.pg_link: its keepalives notice a server or network that
is gone while the connection idles), runs ``LISTEN``, calls ``on_connect`` (the store catches up with everything
committed while it was away and writes its queue), then ``on_notify`` after each batch of notifications. A lost or
refused connection calls ``on_outage`` and is retried with the link's doubling backoff (RETRY_MIN_S to
RETRY_MAX_S), until ``stop()``. Any other error (a bug, an unexpected reply, a callback's exception) is logged and
the thread starts over after the same backoff, with a new connection and ``on_connect``'s catch-up: fleet sync
never stops for good.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from teachbot.storage.pg_link import CONNECTION_ERRORS, RETRY_MAX_S, RETRY_MIN_S

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often the thread looks at its stop flag


class Listener:
    """LISTEN on ``channel`` over ``dsn`` in a daemon thread, with the callbacks above (each run on that thread)."""

    def __init__(self, dsn: str, channel: str, connect_options: dict[str, Any], *, on_connect: Callable[[], None],
                 on_notify: Callable[[], None], on_outage: Callable[[BaseException], None], name: str = "teachbot-listen") -> None:
        self.dsn, self.channel, self.connect_options = dsn, channel, connect_options
        self.on_connect, self.on_notify, self.on_outage = on_connect, on_notify, on_outage
        self.name = name
        self.restarts = 0  # how often an unexpected error made it start over
        self._stop = threading.Event()
        self._backoff = RETRY_MIN_S
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end and wait for it (at most a poll and a connect)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * POLL_S + float(self.connect_options.get("connect_timeout", 5)))

    def _run(self) -> None:
        self._backoff = RETRY_MIN_S
        while not self._stop.is_set():
            try:
                self._listen()
                return  # stopped
            except CONNECTION_ERRORS as exc:
                try:
                    self.on_outage(exc)
                except Exception:  # noqa: BLE001 - the outage callback's bug must not end fleet sync
                    log.exception("%s: the outage callback failed", self.name)
            except Exception:  # noqa: BLE001 - whatever went wrong, listening starts over
                self.restarts += 1
                log.exception("%s: listening to the database failed; starting over in %.1f s", self.name, self._backoff)
            self._stop.wait(self._backoff)
            self._backoff = min(self._backoff * 2, RETRY_MAX_S)

    def _listen(self) -> None:
        """One connection's life: LISTEN, catch up, then wait for notifications until ``stop()`` or an error."""
        with psycopg.connect(self.dsn, autocommit=True, **self.connect_options) as conn:
            conn.execute(f"LISTEN {self.channel}")
            self.on_connect()
            self._backoff = RETRY_MIN_S  # connected and caught up: the next failure is retried soon
            while not self._stop.is_set():
                if any(True for _ in conn.notifies(timeout=POLL_S)):
                    self.on_notify()
