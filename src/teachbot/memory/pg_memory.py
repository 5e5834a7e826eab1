"""Episodic memory on the postgres backend: retrieval in SQL with pgvector's HNSW index, or in process.

teachbot.stores.backend.open_memory(config) builds it when memory.store.backend is ``postgres``.

Where the database has pgvector (its embeddings are ``vector``), the learned examples are retrieved in SQL:
the query e = sum_i gamma^(i-1) E(I^i) is computed here as in the file backend (retrieval.query_vector),
the HNSW index of this embedding model (partial, inner product) returns the nearest key rows of the
examples this robot may see, and an example's score is its best key's, S(H) = max_j e . E(I_H^j): the core
paper's score, with HNSW's approximate nearest neighbours in place of the exact scan. Only key rows of length 1 and
of the model's dimension are ranked (the schema refuses others; a row that gets through anyway, from a database of
version 1, is skipped and logged: teachbot.memory.pg_checks). Seed examples (files)
and lessons still queued for the database are scored in process and merged by score. Without pgvector,
this is the file backend's EpisodicMemory over the PgMemoryStore: the in-process index kept in sync from
the database (the store catches up on every NOTIFY).

A retrieval never waits on the database longer than its read timeout (memory.store.timeouts.read_s, 2 s by
default; teachbot.storage.pg_link's ``within``): when the database is away, or stops answering in that time,
the learned examples read before are scored in process (an index built on first need, its key embeddings from
the embedder's cache where they are), so the answer comes from what is loaded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import numpy as np
import psycopg
from psycopg import sql

from teachbot.memory.embedding import Embedder
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import LEARNED, InteractionExample
from teachbot.memory.pg_checks import LIMITS, score_problem
from teachbot.memory.pg_rows import key_dimension
from teachbot.memory.pg_schema import VECTOR, embedding_literal, ensure_hnsw_index
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.memory.retrieval import RetrievalConfig, Retrieved, Retriever, query_vector
from teachbot.storage.pg_link import DatabaseAway

log = logging.getLogger(__name__)

CANDIDATES_PER_K = 4  # key rows fetched per example asked for (an example may own several of the nearest keys)
MIN_CANDIDATES, MAX_CANDIDATES = 40, 1000  # pgvector's hnsw.ef_search range we use (its maximum is 1000)
BACKFILL_BATCH = 256


class PgEpisodicMemory(EpisodicMemory):
    """EpisodicMemory over a PgMemoryStore; with pgvector, learned examples are retrieved in SQL (HNSW)."""

    store: PgMemoryStore

    def __init__(self, store: PgMemoryStore, embedder: Embedder, retrieval: RetrievalConfig | None = None) -> None:
        super().__init__(store, embedder, retrieval)
        store.embedder = embedder  # every add stores its key embeddings under this model's name
        self._with_keys: set[str] = set()  # learned ids known to have key rows of this model
        self._dim = 0
        self._sql_lock = threading.Lock()
        self._was_sql = self.in_sql
        self._loaded = Retriever(embedder, retrieval)  # SQL mode: the learned examples held, for a database that is away
        self._loaded_lock = threading.Lock()
        self._told: set[tuple[str, int]] = set()  # key rows skipped as untrusted, each told once

    @property
    def in_sql(self) -> bool:
        """Learned examples are retrieved in SQL (the database has pgvector)."""
        return self.store.embedding_type == VECTOR

    def sync(self) -> bool:
        """In SQL mode: the in-process index holds the seeds and queued lessons only, and every learned example
        gets key rows of this model in the database (embedded here when another writer left them out)."""
        with self._lock:
            if self.in_sql != self._was_sql:  # the database answered for the first time: index anew
                self._was_sql, self._seen_version = self.in_sql, -1
        if not self.in_sql:
            return super().sync()
        with self._lock:
            self.store.refresh()
            if self.store.version == self._seen_version:
                return False
            version, examples = self.store.snapshot()
            queued = self.store.queued
            local = [e for e in examples if e.source != "learned" or e.id in queued]
            added, removed = self.retriever.sync(local)
            if self._backfill([e for e in examples if e.source == "learned" and e.id not in queued]):
                self._seen_version = version
            return bool(added or removed)

    def retrieve(self, newest_first: Sequence[str], profile: str = "", k: int | None = None) -> list[Retrieved]:
        """Top-k for the instructions, NEWEST FIRST; most similar last (as EpisodicMemory.retrieve). Waits on the
        database at most its read timeout, then answers from the examples loaded (see the module docstring)."""
        with self.store.link.within(self.store.link.timeouts.read_s):
            if not self.in_sql:
                return super().retrieve(newest_first, profile, k)
            return self._retrieve_sql(newest_first, profile, k)

    def _retrieve_sql(self, newest_first: Sequence[str], profile: str, k: int | None) -> list[Retrieved]:
        self.sync()
        config = self.retriever.config
        recent = [t for t in newest_first if t.strip()][: config.recent]
        k = k or config.k
        if not recent or k <= 0:
            return []
        local = self.retriever.retrieve(newest_first, profile, k)
        query = query_vector(np.asarray(self.embedder.embed(recent), dtype=np.float32), config.gamma)
        try:  # during an outage the link answers at once (DatabaseAway): no retrieval waits on a connect
            learned = self._nearest(query, profile, k)
        except DatabaseAway as exc:
            self.store.link.tell(exc, "retrieval", "retrieving from the examples read before until it is back")
            learned = self._nearest_loaded(newest_first, profile, k)
        merged = sorted([*local, *learned], key=lambda r: (r.score, r.example.id))
        return merged[-k:]

    def _nearest(self, query: np.ndarray, profile: str, k: int) -> list[Retrieved]:
        """The k learned examples whose best key is nearest to ``query`` (HNSW; an exact scan when it finds too few)."""
        if not self._dim:
            return []
        limit = min(MAX_CANDIDATES, max(MIN_CANDIDATES, CANDIDATES_PER_K * k))
        found = self.store.link.run(lambda conn: self._search(conn, query, profile, limit, exact=False))
        if len(found) < k:  # a selective filter (profile, scope) left too few of the index's candidates
            found = self.store.link.run(lambda conn: self._search(conn, query, profile, k * CANDIDATES_PER_K, exact=True))
        results: list[Retrieved] = []
        for example_id, key_index, score in found:
            problem = score_problem(score)
            if problem:  # a key row the server's checks did not stop (a database of version 1, say): never ranked
                self._untrusted(example_id, key_index, problem)
                continue
            try:
                example = self.store.get(example_id)
            except KeyError:  # removed meanwhile, or not caught up yet
                continue
            keys = example.keys
            results.append(Retrieved(example, float(score), keys[key_index] if key_index < len(keys) else ""))
            if len(results) == k:
                break
        return sorted(results, key=lambda r: (r.score, r.example.id))

    def _untrusted(self, example_id: str, key_index: int, problem: str) -> None:
        """One error line per key row that retrieval skipped as untrusted."""
        if (example_id, key_index) not in self._told:
            self._told.add((example_id, key_index))
            log.error("memory: skipping key %d of %r in the database at %s: %s; `teachbot memory remove --any-robot %s` "
                      "deletes the lesson", key_index, example_id, self.store.where, problem, example_id)

    def _nearest_loaded(self, newest_first: Sequence[str], profile: str, k: int) -> list[Retrieved]:
        """The k learned examples held in this process that are nearest (the database being away): scored here."""
        _, examples = self.store.snapshot()
        queued = self.store.queued  # already in the in-process index
        learned = [e for e in examples if e.source == LEARNED and e.id not in queued]
        with self._loaded_lock:
            self._loaded.sync(learned)
            return self._loaded.retrieve(newest_first, profile, k)

    def _search(self, conn: psycopg.Connection, query: np.ndarray, profile: str, limit: int,
                exact: bool) -> list[tuple[str, int, float]]:
        """(example id, best key index, score) per example, best first, from the ``limit`` nearest key rows."""
        vector = sql.SQL("(embedding::vector({dim}))").format(dim=sql.Literal(self._dim))
        statement = sql.SQL(
            "SELECT example_id, key_index, score FROM ("
            " SELECT DISTINCT ON (example_id) example_id, key_index, score FROM ("
            "  SELECT example_id, key_index, -({vector} <#> %(q)s::vector({dim})) AS score FROM teachbot_example_keys"
            "  WHERE model = {model} AND (shared = 'fleet' OR robot_id = %(robot)s){profile}"
            "  AND vector_dims(embedding) = {dim} AND abs(vector_norm(embedding) - 1) <= {tolerance}"
            "  ORDER BY {vector} <#> %(q)s::vector({dim}) LIMIT %(limit)s) AS nearest"
            " ORDER BY example_id, score DESC) AS best ORDER BY score DESC, example_id DESC"
        ).format(vector=vector, dim=sql.Literal(self._dim), model=sql.Literal(self.embedder.name),
                 tolerance=sql.Literal(LIMITS.norm_tolerance),
                 profile=sql.SQL(" AND profile = %(profile)s") if profile else sql.SQL(""))
        with self._sql_lock, conn.transaction():
            if exact:
                conn.execute("SET LOCAL enable_indexscan = off")
            else:
                conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(limit)))
            rows = conn.execute(statement, {"q": embedding_literal(query, VECTOR), "robot": self.store.robot_id,
                                            "profile": profile, "limit": limit}).fetchall()
        return [(row[0], int(row[1]), float(row[2])) for row in rows]

    def _backfill(self, learned: list[InteractionExample]) -> bool:
        """Key rows of this model for the learned examples that lack them (imported, or written by another model),
        and this model's HNSW index once its dimension is known; False when the database was away."""
        current = {e.id for e in learned}
        self._with_keys &= current
        unknown = [e for e in learned if e.id not in self._with_keys and e.keys]
        model = self.embedder.name
        try:
            have: set[str] = set()
            for start in range(0, len(unknown), 50_000):
                ids = [e.id for e in unknown[start:start + 50_000]]
                have |= {row[0] for row in self.store.link.run(lambda conn, ids=ids: conn.execute(
                    "SELECT DISTINCT example_id FROM teachbot_example_keys WHERE model = %s AND example_id = ANY(%s)",
                    (model, ids)).fetchall())}
            missing = [e for e in unknown if e.id not in have]
            for start in range(0, len(missing), BACKFILL_BATCH):
                self.store.add_keys(missing[start:start + BACKFILL_BATCH])
            self._with_keys |= {e.id for e in unknown}
            if not self._dim:
                dim = self.store.link.run(lambda conn: key_dimension(conn, model))
                if dim:
                    self.store.link.run(lambda conn: ensure_hnsw_index(conn, model, dim))
                    self._dim = dim
        except DatabaseAway as exc:
            self.store.link.tell(exc, "embeddings", "the new examples' embeddings are stored when it is back")
            return False
        return True
