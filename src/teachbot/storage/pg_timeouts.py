"""How long the fleet memory waits on its database (memory.store.timeouts of config/memory.yaml), without psycopg.

Three layers, so that a database that stops answering never freezes a robot (README: Fleet memory, failures):

- libpq's own: ``connect_timeout``; TCP keepalives (a peer or network that is gone is noticed on an idle
  connection, the listener's); ``tcp_user_timeout`` (data the server's host does not acknowledge);
- the server's: ``statement_timeout`` (a statement the server cannot finish in time is cancelled by it);
- the client's: a call of teachbot.storage.pg_link.PgLink that has no answer after ``reply_s`` (``read_s`` on
  a retrieval) is cut off by closing its socket. Only this one catches a server that is stopped (``kill
  -STOP``) or hung: its kernel still acknowledges data and answers keepalives.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from teachbot.errors import ConfigError


@dataclass(frozen=True)
class PgTimeouts:
    """Seconds (``keepalive_count``: probes); see the module docstring and config/memory.yaml."""

    connect_s: float = 5.0
    statement_s: float = 10.0
    reply_s: float = 15.0
    read_s: float = 2.0
    keepalive_idle_s: float = 10.0
    keepalive_interval_s: float = 5.0
    keepalive_count: int = 3
    tcp_user_timeout_s: float = 10.0

    @classmethod
    def from_mapping(cls, raw: Any, source: str = "memory config") -> PgTimeouts:
        """From memory.store.timeouts (missing keys keep their defaults); ConfigError naming a bad key or value."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: memory.store.timeouts must be a mapping, got {raw!r}")
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                raise ConfigError(f"{source}: memory.store.timeouts.{key} is unknown; use {', '.join(known)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{source}: memory.store.timeouts.{key} must be a positive number, got {value!r}")
            values[key] = int(value) if key == "keepalive_count" else float(value)
        return cls(**values)

    def libpq(self) -> dict[str, Any]:
        """libpq connection parameters (psycopg.connect keywords): keepalives, TCP and statement timeouts."""
        return {"keepalives": 1, "keepalives_idle": _whole(self.keepalive_idle_s),
                "keepalives_interval": _whole(self.keepalive_interval_s), "keepalives_count": self.keepalive_count,
                "tcp_user_timeout": int(self.tcp_user_timeout_s * 1000),
                "options": f"-c statement_timeout={int(self.statement_s * 1000)}"}


def _whole(seconds: float) -> int:
    return max(1, round(seconds))
