"""The one place that picks the episodic memory's backend from config/memory.yaml (memory.store.backend).

``files``: EpisodicMemory over the file store. ``postgres``: PgEpisodicMemory over a PgMemoryStore on the
fleet's database (teachbot.memory.pg_memory); the knowledge base and the task logs likewise (open_knowledge,
open_task_logs). psycopg is imported only for ``postgres``, so a machine that runs the file store alone needs no
PostgreSQL client. ``forward_logs`` hands the stores' log lines (an outage,
a catch-up, queued lessons written) to a node's logger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teachbot.errors import MemoryStoreError
from teachbot.knowledge.store import KnowledgeStore
from teachbot.knowledge.store_protocol import KnowledgeBase
from teachbot.memory.config import MemoryConfig
from teachbot.memory.embedding import Embedder, SentenceTransformerEmbedder, cached
from teachbot.memory.episodic import EpisodicMemory
from teachbot.taskmemory.log import TaskLogStore

if TYPE_CHECKING:  # psycopg is imported only for the postgres backend
    from teachbot.memory.pg_store import PgMemoryStore


def open_memory(config: MemoryConfig | None = None, embedder: Embedder | None = None) -> EpisodicMemory:
    """The episodic memory of ``config`` (default config/memory.yaml) on its backend; the model loads lazily."""
    config = config or MemoryConfig.load()
    if config.backend != "postgres":
        return EpisodicMemory.open(config, embedder)
    from teachbot.memory.pg_memory import PgEpisodicMemory  # deferred: psycopg, for the postgres backend only

    embedder = embedder or config_embedder(config)
    return PgEpisodicMemory(open_database(config, embedder=embedder), embedder, config.retrieval)


def config_embedder(config: MemoryConfig) -> Embedder:
    """The sentence embedder ``config`` names, with its cache (the model loads on first use)."""
    model = SentenceTransformerEmbedder(config.model_path, config.model_name, config.device, config.batch_size)
    return cached(model, config.cache_dir)


def open_database(config: MemoryConfig, dsn: str = "", *, listen: bool = True, embedder: Embedder | None = None) -> PgMemoryStore:
    """The fleet database's store for this robot as ``config`` says (``dsn`` overrides its memory.store.dsn).
    ``listen`` False: no background connection, every read asks the database (the ``teachbot memory`` commands)."""
    from teachbot.memory.pg_store import PgMemoryStore  # deferred: psycopg, for the postgres backend only

    return PgMemoryStore(_dsn(config, dsn), config.seeds_dir, robot_id=config.robot_name, spool_dir=config.spool_path,
                         shared=config.scope, embedder=embedder, listen=listen, timeouts=config.timeouts)


def open_knowledge(config: MemoryConfig, directory: Path | None = None, dsn: str = "", offline_ok: bool = True) -> KnowledgeBase:
    """The knowledge base on ``config``'s backend: files in ``directory`` (default: the config's knowledge_dir), or
    the fleet database (``dsn`` overrides the config's; entries queued in ``<spool_dir>/knowledge`` while it is away;
    ``offline_ok`` False: reads raise while it is away, as the commands want)."""
    if config.backend != "postgres" and not dsn:
        return KnowledgeStore(directory or config.knowledge_path)
    from teachbot.knowledge.pg_store import PgKnowledgeStore  # deferred: psycopg, for the postgres backend only

    return PgKnowledgeStore(_dsn(config, dsn), config.spool_path / "knowledge", robot_id=config.robot_name, shared=config.scope,
                            offline_ok=offline_ok, timeouts=config.timeouts)


def open_task_logs(config: MemoryConfig, directory: Path | None = None, dsn: str = "", robot_id: str = "") -> TaskLogStore:
    """The task logs in ``directory`` (default: the config's tasks_dir); on the postgres backend (or with ``dsn``)
    copied into the fleet database and restored from it, under ``robot_id`` (default: this robot's)."""
    if config.backend != "postgres" and not dsn:
        return TaskLogStore(directory or config.tasks_path)
    from teachbot.taskmemory.pg_log import PgTaskLogStore  # deferred: psycopg, for the postgres backend only

    return PgTaskLogStore(directory or config.tasks_path, _dsn(config, dsn), robot_id=robot_id or config.robot_name,
                          timeouts=config.timeouts)


def _dsn(config: MemoryConfig, dsn: str) -> str:
    if not (dsn or config.dsn).strip():
        raise MemoryStoreError("no database named: give --dsn 'host=... dbname=... user=...' or memory.store.dsn in "
                               "config/memory.yaml")
    return dsn or config.dsn


class _Forward(logging.Handler):
    """Python log records as lines of another logger (rclpy's: ``info``, ``warning``, ``error``)."""

    def __init__(self, logger: Any) -> None:
        super().__init__(logging.INFO)
        self.logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if record.levelno >= logging.ERROR:
                self.logger.error(text)
            elif record.levelno >= logging.WARNING:
                self.logger.warning(text)
            else:
                self.logger.info(text)
        except Exception:  # noqa: BLE001 - logging must never raise into the store's threads
            self.handleError(record)


STORE_LOGGERS = ("teachbot.memory", "teachbot.knowledge", "teachbot.taskmemory", "teachbot.storage")


def forward_logs(logger: Any, names: tuple[str, ...] = STORE_LOGGERS) -> Callable[[], None]:
    """Send the info, warning and error lines of the ``names`` loggers (the stores, their database link and spool) to
    ``logger`` (a ROS node's), so a database outage is a line of the memory node's log; returns the function that
    undoes it."""
    targets = [logging.getLogger(name) for name in names]
    handler, levels = _Forward(logger), [target.level for target in targets]
    for target in targets:
        target.addHandler(handler)
        target.setLevel(logging.INFO)

    def undo() -> None:
        for target, level in zip(targets, levels):
            target.removeHandler(handler)
            if not any(isinstance(h, _Forward) for h in target.handlers):  # the last node to close restores the level
                target.setLevel(level)

    return undo
