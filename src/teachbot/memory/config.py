"""``config/memory.yaml``: where the store lives, which embedding model, and the retrieval parameters.

The store's ``backend`` is ``files`` (one robot: the learned examples are files in ``learned_dir``) or
``postgres`` (a fleet shares one PostgreSQL database, ``dsn``; teachbot.memory.pg_store), with this robot's
``robot_id`` as provenance, the ``scope`` of its lessons (``fleet`` or ``robot``), a ``spool_dir`` for
lessons learned while the database is away and the ``timeouts`` of its connections (teachbot.storage.pg_timeouts).
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.memory.retrieval import RetrievalConfig
from teachbot.paths import config_path, share_dir
from teachbot.storage.pg_timeouts import PgTimeouts


@dataclass(frozen=True)
class MemoryConfig:
    """Resolved memory settings. ``model_path`` None means the bundled all-MiniLM-L6-v2; ``cache_dir`` None, no cache.
    ``knowledge_dir`` None (a config made in code) means ``knowledge`` next to ``learned_dir``, ``tasks_dir``
    None ``tasks`` next to it."""

    learned_dir: Path
    seeds_dir: Path | None = None
    model_path: Path | None = None
    model_name: str = ""
    device: str = "cpu"
    batch_size: int = 64
    cache_dir: Path | None = None
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    knowledge_dir: Path | None = None
    tasks_dir: Path | None = None
    backend: str = "files"
    dsn: str = ""
    robot_id: str = ""
    scope: str = "fleet"
    spool_dir: Path | None = None
    timeouts: PgTimeouts = field(default_factory=PgTimeouts)

    @property
    def robot_name(self) -> str:
        """This robot's id in the fleet's provenance: ``robot_id``, or the host name when that is empty."""
        return self.robot_id or socket.gethostname()

    @property
    def spool_path(self) -> Path:
        """Where the postgres backend queues lessons while the database is away (default ``pg_spool`` next to learned_dir)."""
        return self.spool_dir or self.learned_dir.parent / "pg_spool"

    @property
    def knowledge_path(self) -> Path:
        """The directory of the distilled knowledge base (teachbot.knowledge)."""
        return self.knowledge_dir or self.learned_dir.parent / "knowledge"

    @property
    def tasks_path(self) -> Path:
        """The directory of the task memory's per-task logs (teachbot.taskmemory)."""
        return self.tasks_dir or self.learned_dir.parent / "tasks"

    @classmethod
    def load(cls, path: str | Path | None = None) -> MemoryConfig:
        path = Path(path) if path else config_path("memory.yaml")
        return cls.from_mapping(load_yaml(path), str(path))

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], source: str = "memory config", base: Path | None = None) -> MemoryConfig:
        """Build from the parsed YAML; relative paths resolve against ``base`` (default: the share dir)."""
        base = base or share_dir()
        memory = _section(raw, "memory", source)
        store, embedding, retrieval = (_section(memory, name, source, f"memory.{name}") for name in ("store", "embedding", "retrieval"))

        def path_of(section: dict[str, Any], key: str, where: str) -> Path | None:
            value = section.get(key, "")
            if not isinstance(value, str):
                raise ConfigError(f"{source}: {where}.{key} must be a path string, got {value!r}")
            if not value:
                return None
            path = Path(value).expanduser()
            return path if path.is_absolute() else (base / path).resolve()

        learned = path_of(store, "learned_dir", "memory.store")
        if learned is None:
            raise ConfigError(f"{source}: memory.store.learned_dir is empty; name the directory for learned examples")
        try:
            settings = RetrievalConfig(k=int(retrieval.get("k", 16)), gamma=float(retrieval.get("gamma", 0.6)),
                                       recent=int(retrieval.get("recent_instructions", 3)))
            batch_size = int(embedding.get("batch_size", 64))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: memory.retrieval / memory.embedding: {exc}") from None
        if settings.k < 1 or settings.recent < 1 or not 0.0 <= settings.gamma <= 1.0 or batch_size < 1:
            raise ConfigError(f"{source}: need retrieval.k >= 1, retrieval.recent_instructions >= 1, 0 <= retrieval.gamma <= 1 "
                              f"and embedding.batch_size >= 1; got {settings} and batch_size {batch_size}")
        backend, dsn, robot_id, scope = (store.get(key, default) for key, default in
                                         (("backend", "files"), ("dsn", ""), ("robot_id", ""), ("scope", "fleet")))
        for key, value in (("backend", backend), ("dsn", dsn), ("robot_id", robot_id), ("scope", scope)):
            if not isinstance(value, str):
                raise ConfigError(f"{source}: memory.store.{key} must be a string, got {value!r}")
        if backend not in BACKENDS:
            raise ConfigError(f"{source}: memory.store.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if scope not in SCOPES:
            raise ConfigError(f"{source}: memory.store.scope must be one of {', '.join(SCOPES)} (who sees this robot's "
                              f"lessons), got {scope!r}")
        if backend == "postgres" and not dsn.strip():
            raise ConfigError(f"{source}: memory.store.backend is postgres but memory.store.dsn is empty; give the database's "
                              "connection string, e.g. 'host=db.local dbname=teachbot user=robot'")
        if robot_id and not ROBOT_ID.match(robot_id):
            raise ConfigError(f"{source}: memory.store.robot_id {robot_id!r}: use letters, digits, '_', '-', '.' (at most 64)")
        return cls(
            backend=backend,
            dsn=dsn.strip(),
            robot_id=robot_id,
            scope=scope,
            spool_dir=path_of(store, "spool_dir", "memory.store"),
            timeouts=PgTimeouts.from_mapping(store.get("timeouts"), source),
            learned_dir=learned,
            seeds_dir=path_of(store, "seeds_dir", "memory.store"),
            model_path=path_of(embedding, "model_path", "memory.embedding"),
            model_name=str(embedding.get("name", "") or ""),
            device=str(embedding.get("device", "cpu") or "cpu"),
            batch_size=batch_size,
            cache_dir=path_of(embedding, "cache_dir", "memory.embedding"),
            retrieval=settings,
            knowledge_dir=path_of(store, "knowledge_dir", "memory.store") or learned.parent / "knowledge",
            tasks_dir=path_of(store, "tasks_dir", "memory.store") or learned.parent / "tasks",
        )


BACKENDS = ("files", "postgres")
SCOPES = ("fleet", "robot")
ROBOT_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def _section(raw: dict[str, Any], key: str, source: str, dotted: str = "") -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{dotted or key}' must be a mapping, got {value!r}")
    return value
