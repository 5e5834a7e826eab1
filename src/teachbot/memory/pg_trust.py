"""The fleet memory's trust model in the database (schema version 2): a role per robot, row-level security, rows
stamped by the server.

Who is who: the **operator** is the role that owns the tables (it ran the schema's creation or upgrade; a superuser
counts too) and bypasses row-level security. A **robot** is a login role that is a member of ROBOT_GROUP
(``teachbot memory add-robot NAME`` creates it): its identity is its role, ``current_user``, whatever its client says.
What the server guarantees against a robot role, however its client behaves (README: Fleet memory, trust):

- it reads the fleet's rows and its own, and writes only rows whose ``robot_id`` is its role (policies); it cannot
  delete rows at all (no privilege) and marks only its own removed;
- ``seq`` (the change feed's order) and, for a robot, ``created`` are set by the server (a trigger), under the
  writers' advisory lock: a robot cannot backdate a lesson nor hide later changes from the feed;
- a robot's row is shared with the fleet only when it says its person confirmed the lesson (``confirmed =
  'person'``) and its role is a member of SHARING_GROUP (``add-robot`` grants it unless ``--no-share``); an operator's
  ``teachbot memory promote`` shares any row (``confirmed = 'operator <role>'``);
- a key embedding is a finite vector of length 1 (a CHECK) with the dimension its model has in
  ``teachbot_key_models`` (the first key of a model records it; a trigger checks every later one); its ``robot_id``,
  ``shared`` and ``profile`` are copied from its lesson, which must be one the writer can see; at most one key per
  instruction of the lesson;
- sizes: the transcript and the number of instructions are bounded (teachbot.memory.pg_checks.LIMITS).

Whether a transcript is console text calling only its profile's API cannot be checked in SQL: every robot checks
it on write and again on read (pg_checks). A database whose robots all log in as the operator (one shared login,
schema version 1's only setup) gets the checks, the server-set ``seq`` and the clients' scoping, but none of the
guarantees against a robot: any robot can then do what the operator can.

The knowledge base's and the task logs' tables get the same row ownership (:func:`ensure_own_rows`): a robot writes,
changes and deletes only its own rows; it reads the fleet's knowledge entries and its own, and only its own task
records; the knowledge's ``seq`` is set by the server.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from teachbot.errors import MemoryStoreError
from teachbot.memory.pg_checks import LIMITS
from teachbot.storage.pg_link import SCHEMA_LOCK, WRITE_LOCK

ROBOT_GROUP = "teachbot_robot"  # every robot's role is a member
SHARING_GROUP = "teachbot_sharing"  # robots that may share person-confirmed lessons with the fleet
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,62}$")  # a robot's role and robot_id (lower case: no quoting surprises)
VECTOR = "vector"

_FUNCTIONS = """
CREATE OR REPLACE FUNCTION teachbot_in_group(grp text, who text DEFAULT current_user) RETURNS boolean LANGUAGE sql STABLE
SET search_path = pg_catalog AS $f$
  SELECT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member
                 WHERE g.rolname = grp AND u.rolname = who) $f$
;;
CREATE OR REPLACE FUNCTION teachbot_now() RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog AS $f$
  SELECT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"+00:00"') $f$
;;
CREATE OR REPLACE FUNCTION teachbot_unit(e real[]) RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $f$
  SELECT array_ndims(e) = 1 AND array_position(e, NULL) IS NULL
     AND coalesce((SELECT abs(sqrt(sum(x::float8 * x::float8)) - 1) FROM unnest(e) AS x) <= {tolerance}, false) $f$
;;
CREATE OR REPLACE FUNCTION teachbot_examples_stamp() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema} AS $f$
BEGIN
  PERFORM pg_advisory_xact_lock({write_lock});
  IF teachbot_in_group('{robot_group}') THEN
    IF TG_OP = 'UPDATE' AND NEW.removed AND NOT OLD.removed THEN
      NEW := OLD;  -- a removal: the tombstone keeps the row as it was
      NEW.removed := true;
    ELSE
      IF NEW.confirmed NOT IN ('', 'person') THEN
        RAISE EXCEPTION 'a robot marks its lesson confirmed by its person (''person'') or not at all, not %', NEW.confirmed
          USING ERRCODE = 'insufficient_privilege';
      END IF;
      IF NEW.shared = 'fleet' AND NOT (NEW.confirmed = 'person' AND teachbot_in_group('{sharing_group}')) THEN
        RAISE EXCEPTION 'robot % may not share lesson % with the fleet: %', current_user, NEW.id,
          CASE WHEN NEW.confirmed = 'person' THEN 'its role may not share (teachbot memory add-robot without --no-share)'
               ELSE 'no person confirmed it (an operator can: teachbot memory promote)' END
          USING ERRCODE = 'insufficient_privilege';
      END IF;
      NEW.created := teachbot_now();
    END IF;
  ELSIF NEW.created = '' THEN
    NEW.created := teachbot_now();
  END IF;
  NEW.seq := nextval('teachbot_memory_seq');
  RETURN NEW;
END $f$
;;
CREATE OR REPLACE FUNCTION teachbot_keys_stamp() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema} AS $f$
DECLARE
  lesson record;
  known integer;
BEGIN
  SELECT robot_id, shared, profile, cardinality(instructions) AS keys INTO lesson FROM teachbot_examples
   WHERE id = NEW.example_id AND NOT removed;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no lesson % that this role sees: its keys cannot be stored', NEW.example_id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NEW.key_index < 0 OR NEW.key_index >= lesson.keys THEN
    RAISE EXCEPTION 'lesson % has % instructions: no key %', NEW.example_id, lesson.keys, NEW.key_index
      USING ERRCODE = 'check_violation';
  END IF;
  NEW.robot_id := lesson.robot_id;
  NEW.shared := lesson.shared;
  NEW.profile := lesson.profile;
  INSERT INTO teachbot_key_models (model, dim) VALUES (NEW.model, {dims}(NEW.embedding)) ON CONFLICT DO NOTHING;
  SELECT dim INTO known FROM teachbot_key_models WHERE model = NEW.model;
  IF {dims}(NEW.embedding) IS DISTINCT FROM known THEN
    RAISE EXCEPTION 'an embedding of % values for model % (its embeddings have %)', {dims}(NEW.embedding), NEW.model, known
      USING ERRCODE = 'check_violation';
  END IF;
  RETURN NEW;
END $f$
;;
CREATE OR REPLACE FUNCTION teachbot_ensure_hnsw(model text, dim integer) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema} AS $f$
DECLARE
  name text := 'teachbot_keys_hnsw_' || left(encode(sha256(convert_to(model, 'UTF8') || '\\x00'::bytea
                                                         || convert_to(dim::text, 'UTF8')), 'hex'), 16);
BEGIN
  IF dim < 1 OR dim > 2000 THEN
    RAISE EXCEPTION 'embedding dimension % cannot have an HNSW index (pgvector allows 1..2000)', dim;
  END IF;
  PERFORM pg_advisory_xact_lock({schema_lock});
  IF to_regclass(name) IS NULL THEN
    EXECUTE format('CREATE INDEX %I ON teachbot_example_keys USING hnsw ((embedding::vector(%s)) vector_ip_ops) '
                   'WHERE model = %L', name, dim, model);
  END IF;
END $f$
"""

_TRUST = """
ALTER TABLE teachbot_examples ADD COLUMN IF NOT EXISTS confirmed text NOT NULL DEFAULT '';
ALTER TABLE teachbot_examples ALTER COLUMN robot_id SET DEFAULT current_user;
CREATE TABLE IF NOT EXISTS teachbot_key_models (model text PRIMARY KEY, dim integer NOT NULL);
INSERT INTO teachbot_key_models (model, dim) SELECT DISTINCT ON (model) model, {dims}(embedding)
  FROM teachbot_example_keys ORDER BY model ON CONFLICT DO NOTHING;
ALTER TABLE teachbot_examples DROP CONSTRAINT IF EXISTS teachbot_examples_size;
ALTER TABLE teachbot_examples ADD CONSTRAINT teachbot_examples_size
  CHECK (length(transcript) <= {transcript_chars} AND cardinality(instructions) <= {instructions}) NOT VALID;
ALTER TABLE teachbot_example_keys DROP CONSTRAINT IF EXISTS teachbot_keys_unit;
ALTER TABLE teachbot_example_keys ADD CONSTRAINT teachbot_keys_unit CHECK ({unit}) NOT VALID;
DROP TRIGGER IF EXISTS teachbot_examples_stamp ON teachbot_examples;
CREATE TRIGGER teachbot_examples_stamp BEFORE INSERT OR UPDATE ON teachbot_examples
  FOR EACH ROW EXECUTE FUNCTION teachbot_examples_stamp();
DROP TRIGGER IF EXISTS teachbot_keys_stamp ON teachbot_example_keys;
CREATE TRIGGER teachbot_keys_stamp BEFORE INSERT ON teachbot_example_keys
  FOR EACH ROW EXECUTE FUNCTION teachbot_keys_stamp();
ALTER TABLE teachbot_examples ENABLE ROW LEVEL SECURITY;
ALTER TABLE teachbot_example_keys ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS teachbot_read ON teachbot_examples;
CREATE POLICY teachbot_read ON teachbot_examples FOR SELECT USING (shared = 'fleet' OR robot_id = current_user);
DROP POLICY IF EXISTS teachbot_write ON teachbot_examples;
CREATE POLICY teachbot_write ON teachbot_examples FOR INSERT WITH CHECK (robot_id = current_user);
DROP POLICY IF EXISTS teachbot_change ON teachbot_examples;
CREATE POLICY teachbot_change ON teachbot_examples FOR UPDATE USING (robot_id = current_user)
  WITH CHECK (robot_id = current_user);
DROP POLICY IF EXISTS teachbot_read ON teachbot_example_keys;
CREATE POLICY teachbot_read ON teachbot_example_keys FOR SELECT USING (shared = 'fleet' OR robot_id = current_user);
DROP POLICY IF EXISTS teachbot_write ON teachbot_example_keys;
CREATE POLICY teachbot_write ON teachbot_example_keys FOR INSERT WITH CHECK (true);
DROP POLICY IF EXISTS teachbot_drop ON teachbot_example_keys;
CREATE POLICY teachbot_drop ON teachbot_example_keys FOR DELETE USING (robot_id = current_user)
"""

_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {group};
GRANT SELECT ON teachbot_meta TO {group};
GRANT SELECT, INSERT, UPDATE ON teachbot_examples TO {group};
GRANT SELECT, INSERT, DELETE ON teachbot_example_keys TO {group};
GRANT SELECT, INSERT ON teachbot_key_models TO {group};
GRANT USAGE ON SEQUENCE teachbot_memory_seq TO {group}
"""


_OWN_ROWS = """
CREATE OR REPLACE FUNCTION teachbot_stamp_seq() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, {schema} AS $f$
BEGIN
  PERFORM pg_advisory_xact_lock(TG_ARGV[1]::bigint);
  NEW.seq := nextval(TG_ARGV[0]);
  RETURN NEW;
END $f$
;;
ALTER TABLE {table} ALTER COLUMN robot_id SET DEFAULT current_user
;;
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY
;;
DROP POLICY IF EXISTS teachbot_read ON {table}
;;
CREATE POLICY teachbot_read ON {table} FOR SELECT USING ({readable})
;;
DROP POLICY IF EXISTS teachbot_write ON {table}
;;
CREATE POLICY teachbot_write ON {table} FOR INSERT WITH CHECK (robot_id = current_user)
;;
DROP POLICY IF EXISTS teachbot_change ON {table}
;;
CREATE POLICY teachbot_change ON {table} FOR UPDATE USING (robot_id = current_user) WITH CHECK (robot_id = current_user)
;;
DROP POLICY IF EXISTS teachbot_drop ON {table}
;;
CREATE POLICY teachbot_drop ON {table} FOR DELETE USING (robot_id = current_user)
"""
_STAMP_SEQ = """
DROP TRIGGER IF EXISTS teachbot_stamp_seq ON {table}
;;
CREATE TRIGGER teachbot_stamp_seq BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW
  EXECUTE FUNCTION teachbot_stamp_seq({sequence}, {lock})
"""


def ensure_own_rows(conn: Any, table: str, readable: str, sequence: str = "", lock: int = 0) -> bool:
    """Row-level security on ``table`` (a table with a ``robot_id`` column) as on the lessons: a robot's role reads the
    rows ``readable`` (SQL) allows, and inserts, changes and deletes only rows whose ``robot_id`` is its role, whatever
    privileges it was granted; with ``sequence``, the server sets every written row's ``seq`` (under the advisory
    ``lock``), so no robot can forge the change feed's order. The owner of the table (the operator) is not bound.

    Applied once, by a login that owns the table (``teachbot memory add-robot`` runs it as the operator; the schema
    lock is held); True when the table has it, False when it has not and this login may not add it."""
    secured, owner = conn.execute("SELECT c.relrowsecurity, pg_has_role(c.relowner, 'USAGE') FROM pg_class c "
                                  "WHERE c.oid = to_regclass(%s)", (table,)).fetchone()
    if secured:
        return True
    if not owner:
        return False
    schema = _ident(conn, conn.execute("SELECT current_schema()").fetchone()[0])
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        if conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass(%s)", (table,)).fetchone()[0]:
            return True  # another operator's connection did it meanwhile
        statements = _OWN_ROWS.format(schema=schema, table=_ident(conn, table), readable=readable).split("\n;;\n")
        if sequence:
            statements += _STAMP_SEQ.format(table=_ident(conn, table), sequence=sql.Literal(sequence).as_string(conn),
                                            lock=sql.Literal(str(lock)).as_string(conn)).split("\n;;\n")
        for statement in statements:
            conn.execute(statement)
    return True


def bound_robot(conn: Any, table: str) -> str | None:
    """This login's role when row-level security binds it on ``table`` (a robot's role: that is its robot_id), else
    None (the operator, or a shared login that owns the tables)."""
    row = conn.execute("SELECT row_security_active(%s), current_user", (table,)).fetchone()
    return str(row[1]) if row[0] else None


def apply_trust(conn: Any, embedding_type: str) -> None:
    """Schema version 2's functions, triggers, constraints and policies (idempotent; the schema lock is held)."""
    schema = conn.execute("SELECT current_schema()").fetchone()[0]
    dims = "vector_dims" if embedding_type == VECTOR else "cardinality"
    unit = (f"abs(vector_norm(embedding) - 1) <= {LIMITS.norm_tolerance}" if embedding_type == VECTOR
            else "teachbot_unit(embedding)")
    functions = _FUNCTIONS.format(schema=_ident(conn, schema), write_lock=WRITE_LOCK, schema_lock=SCHEMA_LOCK,
                                  robot_group=ROBOT_GROUP, sharing_group=SHARING_GROUP, dims=dims,
                                  tolerance=LIMITS.norm_tolerance)
    for statement in functions.split("\n;;\n"):
        if embedding_type != VECTOR and "teachbot_ensure_hnsw" in statement:
            continue  # no pgvector: no index to make
        conn.execute(statement)
    trust = _TRUST.format(dims=dims, unit=unit, transcript_chars=LIMITS.transcript_chars, instructions=LIMITS.instructions)
    for statement in trust.split(";"):
        if statement.strip():
            conn.execute(statement)


def _ident(conn: Any, name: str) -> str:
    return conn.execute("SELECT quote_ident(%s)", (name,)).fetchone()[0]


@dataclass(frozen=True)
class Identity:
    """Who this connection is: its role, and whether that role is a robot's (else: the operator, or a shared login)."""

    role: str
    robot: bool
    may_share: bool


def read_identity(conn: Any) -> Identity:
    """The connection's role and its groups (the schema of version 2 exists)."""
    row = conn.execute("SELECT current_user, teachbot_in_group(%s), teachbot_in_group(%s)",
                       (ROBOT_GROUP, SHARING_GROUP)).fetchone()
    return Identity(str(row[0]), bool(row[1]), bool(row[2]))


# ------------------------------------------------------------------------------------------ operator actions
@dataclass(frozen=True)
class NewRobot:
    """What ``add_robot`` made: the role, and its password (None when the operator asked for none)."""

    role: str
    password: str | None
    may_share: bool


def add_robot(conn: Any, name: str, *, share: bool = True, password: bool = True,
              tables: tuple[str, ...] = (), sequences: tuple[str, ...] = ()) -> NewRobot:
    """Create (or update) the login role ``name`` of one robot: a member of ROBOT_GROUP (and SHARING_GROUP when
    ``share``), with a new random password unless ``password`` is False (certificate or peer authentication), and
    the groups' privileges on the memory's tables plus ``tables`` (all four privileges) and ``sequences`` (usage).
    Needs the operator's login with CREATEROLE; MemoryStoreError when ``name`` is an existing role that is not a robot's."""
    if not ROLE_NAME.match(name):
        raise MemoryStoreError(f"robot name {name!r}: use lower-case letters, digits, '_', '-', '.' (at most 63), "
                               "starting with a letter or '_'")
    secret = secrets.token_urlsafe(24) if password else None
    with conn.transaction():
        for group in (ROBOT_GROUP, SHARING_GROUP):
            if not _role_exists(conn, group):
                conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(group)))
        role = sql.Identifier(name)
        if _role_exists(conn, name):
            special, member = conn.execute("SELECT rolsuper OR rolcreaterole OR rolbypassrls, teachbot_in_group(%s, %s) "
                                           "FROM pg_roles WHERE rolname = %s", (ROBOT_GROUP, name, name)).fetchone()
            if special or not member:
                raise MemoryStoreError(f"the role {name!r} exists and is not a robot's (not a member of {ROBOT_GROUP}); "
                                       "choose another name")
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN").format(role))
        else:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS").format(role))
        if secret is not None:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(secret)))
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(ROBOT_GROUP), role))
        conn.execute(sql.SQL("{} {} {} {}").format(sql.SQL("GRANT" if share else "REVOKE"), sql.Identifier(SHARING_GROUP),
                                                 sql.SQL("TO" if share else "FROM"), role))
        grant_groups(conn, tables, sequences)
    return NewRobot(name, secret, share)


def grant_groups(conn: Any, tables: tuple[str, ...] = (), sequences: tuple[str, ...] = ()) -> None:
    """ROBOT_GROUP's privileges on the memory's tables, and all four on ``tables``, usage of ``sequences``."""
    schema = _ident(conn, conn.execute("SELECT current_schema()").fetchone()[0])
    group = sql.Identifier(ROBOT_GROUP)
    for statement in _GRANTS.format(schema=schema, group=ROBOT_GROUP).split(";"):
        if statement.strip():
            conn.execute(statement)
    for table in tables:
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(sql.Identifier(table), group))
    for sequence in sequences:
        conn.execute(sql.SQL("GRANT USAGE ON SEQUENCE {} TO {}").format(sql.Identifier(sequence), group))


def _role_exists(conn: Any, name: str) -> bool:
    return bool(conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (name,)).fetchone()[0])


def promote(conn: Any, example_id: str, channel: str) -> str:
    """Share a learned example with the whole fleet (the operator's decision; ``confirmed`` records who), and tell
    every robot (NOTIFY on ``channel``). Returns the robot it came from; MemoryStoreError when there is none."""
    with conn.transaction():
        row = conn.execute("UPDATE teachbot_examples SET shared = 'fleet', confirmed = 'operator ' || current_user "
                           "WHERE id = %s AND NOT removed RETURNING robot_id", (example_id,)).fetchone()
        if row is None:
            raise MemoryStoreError(f"no learned example with id {example_id!r}")
        conn.execute("UPDATE teachbot_example_keys SET shared = 'fleet' WHERE example_id = %s", (example_id,))
        conn.execute("SELECT pg_notify(%s, %s)", (channel, f"add {example_id}"))
    return str(row[0])


def owner_of(conn: Any, example_id: str) -> str | None:
    """The robot_id of a learned example that this connection sees (None when it sees none)."""
    row = conn.execute("SELECT robot_id FROM teachbot_examples WHERE id = %s AND NOT removed", (example_id,)).fetchone()
    return None if row is None else str(row[0])
