"""The fleet memory's writes and change feed in SQL (tables: teachbot.memory.pg_schema), one transaction each.

Every writing transaction takes the advisory WRITE_LOCK first, so the sequence numbers of committed changes
only grow and a reader catches up with ``seq > <the last one it saw>``; each ends with a NOTIFY on CHANNEL
(delivered at commit, never for a rolled-back write). Used by teachbot.memory.pg_store.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg

from teachbot.errors import MemoryStoreError
from teachbot.memory.example import InteractionExample
from teachbot.memory.pg_schema import CHANNEL, EXAMPLE_COLUMNS, VECTOR, embedding_literal, example_from_row
from teachbot.storage.pg_link import WRITE_LOCK

SELECT = ", ".join(EXAMPLE_COLUMNS)
VISIBLE = "(shared = 'fleet' OR robot_id = %(robot)s)"  # the rows a robot sees: the fleet's and its own
Vectors = tuple[str, np.ndarray] | None  # (embedding model, one row per key) or None


def insert_example(conn: psycopg.Connection, example: InteractionExample, robot_id: str, shared: str, vectors: Vectors,
                   embedding_type: str, confirmed: str = "", server_time: bool = False) -> tuple[str, InteractionExample]:
    """Write one example and its key embeddings: ('added', the example as stored: ``created`` is the server's for a
    robot's role), ('same', it) when the id holds this example already (``created`` aside), ('conflict', it) when
    another example holds the id, or one this role may not overwrite (another robot's). A removed example's id may
    be taken again. ``confirmed``: 'person' when the robot's person confirmed the lesson (pg_trust); ``server_time``:
    the server sets ``created`` (a robot's role), so a retried add differs from the row in ``created`` only."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        row = conn.execute(f"SELECT {SELECT}, removed FROM teachbot_examples WHERE id = %s", (example.id,)).fetchone()
        if row is not None and not row[-1]:
            try:
                held = example_from_row(row[:-1])
            except MemoryStoreError:  # an unreadable row (another writer's) is another example
                return "conflict", example
            same = held.replace(created="") == example.replace(created="") if server_time else held == example
            return ("same" if same else "conflict"), held
        values = {name: getattr(example, name) for name in EXAMPLE_COLUMNS}
        values.update(instructions=list(example.instructions), robot_id=robot_id, shared=shared, confirmed=confirmed)
        columns = [*EXAMPLE_COLUMNS, "robot_id", "shared", "confirmed"]
        try:
            with conn.transaction():  # a savepoint: a row of another robot's that this role cannot see is a conflict
                created = conn.execute(
                    f"INSERT INTO teachbot_examples ({', '.join(columns)}, seq, removed) "
                    f"VALUES ({', '.join(f'%({c})s' for c in columns)}, nextval('teachbot_memory_seq'), false) "
                    f"ON CONFLICT (id) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in columns)}, "
                    "seq = excluded.seq, removed = false RETURNING created", values).fetchone()[0]
        except psycopg.errors.InsufficientPrivilege as exc:
            if "row-level security" not in str(exc):
                raise  # a refusal of this row's content (pg_trust's trigger): the caller says why
            return "conflict", example
        stored = example.replace(created=created)
        conn.execute("DELETE FROM teachbot_example_keys WHERE example_id = %s", (example.id,))
        if vectors is not None:
            model, rows = vectors
            cast = "vector" if embedding_type == VECTOR else "real[]"
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO teachbot_example_keys (example_id, model, key_index, profile, robot_id, shared, embedding) "
                    f"VALUES (%s, %s, %s, %s, %s, %s, %s::{cast})",
                    [(example.id, model, i, example.profile, robot_id, shared, embedding_literal(row, embedding_type))
                     for i, row in enumerate(rows)])
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"add {example.id}"))
    return "added", stored


def delete_example(conn: psycopg.Connection, example_id: str, robot_id: str, any_robot: bool = False) -> str | None:
    """Mark an example of ``robot_id`` removed (a tombstone with a new seq) and drop its keys; with ``any_robot`` (the
    operator) any robot's. None when done, else the robot_id of the visible example that is not ``robot_id``'s, or ''
    when there is none."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        mine = "" if any_robot else " AND robot_id = %(robot)s"
        found = conn.execute(f"UPDATE teachbot_examples SET removed = true, seq = nextval('teachbot_memory_seq') "
                             f"WHERE id = %(id)s AND NOT removed{mine} RETURNING id",
                             {"id": example_id, "robot": robot_id}).fetchone()
        if found is None:
            owner = conn.execute(f"SELECT robot_id FROM teachbot_examples WHERE id = %(id)s AND NOT removed AND {VISIBLE}",
                                 {"id": example_id, "robot": robot_id}).fetchone()
            return "" if owner is None else str(owner[0])
        conn.execute("DELETE FROM teachbot_example_keys WHERE example_id = %s", (example_id,))
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"remove {example_id}"))
    return None


def insert_missing_keys(conn: psycopg.Connection, rows: list[tuple[InteractionExample, Vectors]], embedding_type: str) -> None:
    """Key embeddings for stored examples that lack them under that model (examples removed meanwhile are skipped)."""
    cast = "vector" if embedding_type == VECTOR else "real[]"
    with conn.transaction(), conn.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        cursor.executemany(
            "INSERT INTO teachbot_example_keys (example_id, model, key_index, profile, robot_id, shared, embedding) "
            f"SELECT id, %s, %s, profile, robot_id, shared, %s::{cast} FROM teachbot_examples WHERE id = %s "
            "AND NOT removed ON CONFLICT DO NOTHING",
            [(model, i, embedding_literal(row, embedding_type), e.id)
             for e, vectors in rows if vectors is not None for model, matrix in [vectors] for i, row in enumerate(matrix)])


def changes_since(conn: psycopg.Connection, seq: int, robot_id: str) -> list[tuple[Any, ...]]:
    """The rows ``robot_id`` sees changed after ``seq``, in commit order: (EXAMPLE_COLUMNS..., removed, seq)."""
    return conn.execute(f"SELECT {SELECT}, removed, seq FROM teachbot_examples WHERE seq > %(seq)s AND {VISIBLE} "
                        "ORDER BY seq", {"seq": seq, "robot": robot_id}).fetchall()


def key_dimension(conn: psycopg.Connection, model: str) -> int:
    """The dimension of ``model``'s key embeddings as the database recorded it with its first key (0: none yet)."""
    row = conn.execute("SELECT dim FROM teachbot_key_models WHERE model = %s", (model,)).fetchone()
    return int(row[0]) if row else 0
