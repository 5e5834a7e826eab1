"""``teachbot memory add-robot`` and ``promote``: the operator's side of the fleet memory's trust model
(teachbot.memory.pg_trust; README: Fleet memory, trust).

    teachbot memory add-robot NAME [--no-share] [--no-password] [--dsn DSN]   # a database role for one robot
    teachbot memory promote ID [ID ...] [--dsn DSN]                           # share lessons with the whole fleet

Both run with the operator's login (the role that owns the tables, with CREATEROLE for add-robot), named by --dsn
or by memory.store.dsn of the config. ``add-robot`` creates (or upgrades) the schema, creates the robot's role and
prints what goes into that robot's config/memory.yaml and ~/.pgpass. ``teachbot memory remove --any-robot`` removes
another robot's lesson (teachbot.commands.memory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from teachbot.memory import MemoryConfig, MemoryStoreError


def register(actions: argparse._SubParsersAction) -> None:
    """Add ``memory add-robot`` and ``memory promote``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default="", metavar="FILE", help="memory config (default config/memory.yaml)")
    common.add_argument("--dsn", default="", help="the operator's login to the fleet's database (default: store.dsn of "
                        "the config)")
    add = actions.add_parser("add-robot", parents=[common], help="create a robot's database role (operator)",
                             description="Create one robot's database role: it writes and removes only its own lessons.")
    add.add_argument("name", help="the robot's name: its role and robot_id (lower-case letters, digits, _ - .)")
    add.add_argument("--no-share", action="store_true",
                     help="its lessons never reach the fleet unless an operator promotes them (even person-confirmed ones)")
    add.add_argument("--no-password", action="store_true",
                     help="set no password (the server authenticates it by certificate or peer)")
    add.set_defaults(func=run_add_robot)
    promote = actions.add_parser("promote", parents=[common], help="share learned lessons with the whole fleet (operator)")
    promote.add_argument("ids", nargs="+", metavar="ID")
    promote.set_defaults(func=run_promote)


def operator_dsn(args: argparse.Namespace) -> str:
    """--dsn, else the config's memory.store.dsn; MemoryStoreError when neither names a database."""
    dsn = args.dsn or MemoryConfig.load(args.config or None).dsn
    if not dsn.strip():
        raise MemoryStoreError("no database named: give --dsn with the operator's login, e.g. 'host=db.local "
                               "dbname=teachbot user=teachbot_admin'")
    return dsn


def run_add_robot(args: argparse.Namespace) -> int:
    """Create the role, then print the robot's config and its ~/.pgpass line."""
    import psycopg  # deferred: psycopg, for the postgres backend only

    from teachbot.knowledge.pg_store import ensure_knowledge_tables  # deferred: psycopg, for the postgres backend only
    from teachbot.memory.pg_schema import ensure_schema  # deferred: psycopg, for the postgres backend only
    from teachbot.memory.pg_trust import add_robot  # deferred: psycopg, for the postgres backend only
    from teachbot.taskmemory.pg_log import ensure_task_tables  # deferred: psycopg, for the postgres backend only

    dsn = operator_dsn(args)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_schema(conn)
        ensure_knowledge_tables(conn)
        ensure_task_tables(conn)
        made = add_robot(conn, args.name, share=not args.no_share, password=not args.no_password,
                         tables=("teachbot_knowledge", "teachbot_task_records"), sequences=("teachbot_knowledge_seq",))
    print(robot_config(dsn, made.role, made.password, made.may_share))
    return 0


def robot_config(dsn: str, role: str, password: str | None, may_share: bool) -> str:
    """What the operator hands to the robot: its memory.yaml keys, and the password line of its ~/.pgpass."""
    from psycopg import conninfo  # deferred: psycopg, for the postgres backend only

    given: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    host, port, dbname = given.get("host", "localhost"), str(given.get("port", "5432")), given.get("dbname", role)
    robot_dsn = (f"host={host} port={port} dbname={dbname} user={role} sslmode=verify-full "
                 "sslrootcert=/etc/teachbot/fleet-ca.crt")
    lines = [f"robot {role} may now use the fleet memory: it writes and removes only its own lessons"
             + ("; lessons its person confirmed go to the fleet" if may_share else "; its lessons reach the fleet only "
                "when an operator promotes them (teachbot memory promote ID)"),
             "", "# in that robot's config/memory.yaml:", "memory:", "  store:", "    backend: postgres",
             f'    dsn: "{robot_dsn}"', f"    robot_id: {role}", "    scope: fleet", "",
             "# the server's CA certificate goes to /etc/teachbot/fleet-ca.crt on the robot (sslmode=verify-full: "
             "README: Fleet memory, TLS)"]
    if password is not None:
        pgpass = Path("~/.pgpass")
        lines += [f"# in that robot's {pgpass} (mode 600), shown once:", f"{host}:{port}:{dbname}:{role}:{password}"]
    return "\n".join(lines)


def run_promote(args: argparse.Namespace) -> int:
    """Promote each id; every failure is reported and makes the exit status 1."""
    from teachbot.stores.backend import open_database  # deferred: loaded when the command runs

    store = open_database(MemoryConfig.load(args.config or None), operator_dsn(args), listen=False)
    failed = 0
    try:
        for example_id in args.ids:
            try:
                robot = store.promote(example_id)
            except MemoryStoreError as exc:
                failed += 1
                print(f"error: {example_id}: {exc}", file=sys.stderr)
            else:
                print(f"promoted {example_id} (learned by {robot}): every robot of the fleet now retrieves it")
    finally:
        store.close()
    return 1 if failed else 0
