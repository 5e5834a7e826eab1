"""The fleet memory's tables in PostgreSQL (the memory's ``postgres`` backend), created or checked on connect.

One row per learned example in ``teachbot_examples`` (the example's fields, its provenance ``robot_id``
and who sees it, ``shared``: ``fleet`` or ``robot``), and one row per retrieval key and embedding model
in ``teachbot_example_keys`` (the key's sentence embedding). Every change of an example takes the next
value of ``teachbot_memory_seq`` while holding a transaction-level advisory lock, so the sequence numbers
of committed changes only grow: a process catches up with ``WHERE seq > <the last one it saw>``. A
removal keeps the row as a tombstone (``removed``) with a new sequence number, so other processes see it
go; its key rows are deleted. Seed examples stay files and are never stored here.

Where the server has pgvector (the ``vector`` extension), embeddings are ``vector`` and each embedding
model gets a partial HNSW index (inner product) over its rows, cast to its dimension; elsewhere they are
``real[]`` and retrieval uses the in-process index. ``teachbot_meta`` records the schema version and
which of the two this database uses.

Version 2 adds the trust model (teachbot.memory.pg_trust: a role per robot, row-level security, server-set ``seq``
and ``created``, checked key embeddings). A database of version 1 is upgraded on the first connection of a login
that owns its tables (the operator's, or the shared login every robot used with version 1); a robot's role cannot
upgrade it and is told so.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np

from teachbot.errors import MemoryStoreError
from teachbot.memory.example import LEARNED, InteractionExample
from teachbot.memory.pg_trust import apply_trust
from teachbot.storage.pg_link import SCHEMA_LOCK

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
CHANNEL = "teachbot_memory"  # LISTEN/NOTIFY channel; payload '<add|remove> <example id>'
VECTOR, REAL_ARRAY = "vector", "real[]"

EXAMPLE_COLUMNS = ("id", "profile", "transcript", "instructions", "problem", "improvement", "scope", "episode_id",
                   "author_model", "embedding_model", "created")

_TABLES = """
CREATE TABLE IF NOT EXISTS teachbot_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE SEQUENCE IF NOT EXISTS teachbot_memory_seq;
CREATE TABLE IF NOT EXISTS teachbot_examples (
    id text PRIMARY KEY,
    profile text NOT NULL,
    transcript text NOT NULL,
    instructions text[] NOT NULL,
    problem text NOT NULL DEFAULT '',
    improvement text NOT NULL DEFAULT '',
    scope text NOT NULL DEFAULT '',
    episode_id text NOT NULL DEFAULT '',
    author_model text NOT NULL DEFAULT '',
    embedding_model text NOT NULL DEFAULT '',
    created text NOT NULL,
    robot_id text NOT NULL DEFAULT '',
    shared text NOT NULL CHECK (shared IN ('fleet', 'robot')),
    seq bigint NOT NULL,
    removed boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS teachbot_examples_seq ON teachbot_examples (seq);
CREATE TABLE IF NOT EXISTS teachbot_example_keys (
    example_id text NOT NULL REFERENCES teachbot_examples (id) ON DELETE CASCADE,
    model text NOT NULL,
    key_index integer NOT NULL,
    profile text NOT NULL,
    robot_id text NOT NULL,
    shared text NOT NULL,
    embedding {embedding_type} NOT NULL,
    PRIMARY KEY (example_id, model, key_index)
);
"""


def ensure_schema(conn: Any) -> str:
    """Create the tables when missing (concurrent callers serialise on an advisory lock); check the version.

    Returns the embedding column type of this database: VECTOR or REAL_ARRAY. ``conn`` is a psycopg
    connection in autocommit mode.
    """
    version = 0
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        exists = conn.execute("SELECT to_regclass('teachbot_meta') IS NOT NULL").fetchone()[0]
        if exists:
            meta = dict(conn.execute("SELECT key, value FROM teachbot_meta").fetchall())
            version = int(meta.get("schema_version", "0"))
            if version > SCHEMA_VERSION:
                raise MemoryStoreError(f"the memory database has schema version {version}, newer than this teachbot "
                                       f"({SCHEMA_VERSION}); update teachbot on this robot")
            if version == SCHEMA_VERSION:
                return meta.get("embedding_type", REAL_ARRAY)
            embedding_type = meta.get("embedding_type", REAL_ARRAY)
        else:
            embedding_type = _vector_type(conn)
            for statement in _TABLES.format(embedding_type=embedding_type).split(";"):
                if statement.strip():
                    conn.execute(statement)
        owner = conn.execute("SELECT pg_has_role(tableowner, 'USAGE') FROM pg_tables WHERE tablename = 'teachbot_examples' "
                             "AND schemaname = current_schema()").fetchone()
        if not (owner and owner[0]):
            user = conn.execute("SELECT current_user").fetchone()[0]
            raise MemoryStoreError(f"the memory database has schema version {version}, older than this "
                                   f"teachbot's ({SCHEMA_VERSION}), and this login ({user}) may not upgrade it: the operator "
                                   "upgrades it by running `teachbot memory list --dsn <the operator's DSN>` once "
                                   "(README: Fleet memory, upgrading)")
        apply_trust(conn, embedding_type)
        conn.execute("INSERT INTO teachbot_meta (key, value) VALUES ('schema_version', %s), ('embedding_type', %s) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION), embedding_type))
        return embedding_type


def _vector_type(conn: Any) -> str:
    """VECTOR when pgvector is installed on the server (created here if needed and allowed), else REAL_ARRAY."""
    available = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()[0]
    if not available:
        log.info("memory store: the server has no pgvector; embeddings are real[] and retrieval uses the in-process index")
        return REAL_ARRAY
    try:
        with conn.transaction():  # a savepoint: a refused CREATE EXTENSION leaves the schema transaction usable
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except Exception as exc:  # noqa: BLE001 - psycopg's InsufficientPrivilege and friends: fall back, say why
        log.warning("memory store: pgvector is on the server but CREATE EXTENSION vector failed (%s); retrieval uses the "
                    "in-process index (a superuser can run CREATE EXTENSION vector in this database)", exc)
        return REAL_ARRAY
    return VECTOR


def hnsw_index_name(model: str, dim: int) -> str:
    """The name of the HNSW index of one embedding model's rows (a digest: model names may be any text)."""
    return "teachbot_keys_hnsw_" + hashlib.sha256(f"{model}\0{dim}".encode()).hexdigest()[:16]


def ensure_hnsw_index(conn: Any, model: str, dim: int) -> None:
    """A partial HNSW index (inner product) over ``model``'s key rows cast to vector(dim); created once (by the
    schema's teachbot_ensure_hnsw, named as ``hnsw_index_name``)."""
    if not 0 < dim <= 2000:
        raise MemoryStoreError(f"embedding dimension {dim} of {model!r} cannot have an HNSW index (pgvector allows 1..2000)")
    if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (hnsw_index_name(model, dim),)).fetchone()[0]:
        return
    with conn.transaction():  # the schema's function runs as its owner: a robot's role may not create an index
        conn.execute("SELECT teachbot_ensure_hnsw(%s, %s)", (model, dim))


def embedding_literal(row: np.ndarray, embedding_type: str) -> str | list[float]:
    """One embedding as the parameter for its column: pgvector's text form, or a float list for real[]."""
    if embedding_type == VECTOR:
        return "[" + ",".join(map(repr, row.tolist())) + "]"
    return row.tolist()


def example_from_row(row: tuple[Any, ...]) -> InteractionExample:
    """An InteractionExample from the EXAMPLE_COLUMNS of a row (learned: the database holds no seeds); MemoryStoreError
    naming the field when a value is not text (a NULL instruction written by another client, say)."""
    values = dict(zip(EXAMPLE_COLUMNS, row))
    instructions = values["instructions"]
    if not isinstance(instructions, (list, tuple)) or not all(isinstance(text, str) for text in instructions):
        raise MemoryStoreError(f"example {values.get('id')!r}: 'instructions' must be texts, got {instructions!r:.80}")
    for name, value in values.items():
        if name != "instructions" and not isinstance(value, str):
            raise MemoryStoreError(f"example {values.get('id')!r}: '{name}' must be a text, got {value!r:.80}")
    values["instructions"] = tuple(instructions)
    return InteractionExample(source=LEARNED, **values)
