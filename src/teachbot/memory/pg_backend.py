"""The one place that picks the episodic memory's backend from config/memory.yaml (memory.store.backend).

``files``: EpisodicMemory over the file store. ``postgres``: PgEpisodicMemory over a PgMemoryStore on the
fleet's database (teachbot.memory.pg_memory). psycopg is imported only for ``postgres``, so a machine that
runs the file store alone needs no PostgreSQL client.
"""

from __future__ import annotations

from teachbot.memory.config import MemoryConfig
from teachbot.memory.embedding import Embedder, SentenceTransformerEmbedder, cached
from teachbot.memory.episodic import EpisodicMemory


def open_memory(config: MemoryConfig | None = None, embedder: Embedder | None = None) -> EpisodicMemory:
    """The episodic memory of ``config`` (default config/memory.yaml) on its backend; the model loads lazily."""
    config = config or MemoryConfig.load()
    if config.backend != "postgres":
        return EpisodicMemory.open(config, embedder)
    from teachbot.memory.pg_memory import PgEpisodicMemory
    from teachbot.memory.pg_store import PgMemoryStore

    if embedder is None:
        model = SentenceTransformerEmbedder(config.model_path, config.model_name, config.device, config.batch_size)
        embedder = cached(model, config.cache_dir)
    store = PgMemoryStore(config.dsn, config.seeds_dir, robot_id=config.robot_name, spool_dir=config.spool_path,
                          shared=config.scope, embedder=embedder)
    return PgEpisodicMemory(store, embedder, config.retrieval)
