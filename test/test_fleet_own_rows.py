"""Row ownership of the knowledge base and the task logs on the fleet database (issue 31: the trust model of the
lessons, teachbot.memory.pg_trust, on teachbot_knowledge and teachbot_task_records) against Debian's server.

The operator sets the database up as ``teachbot memory add-robot`` does (its tables, then a role per robot with the
privileges add-robot grants: all four on these tables). Another robot's role ("mallory"), straight in SQL as a robot
whose client was replaced would, then tries to write rows as this robot ("arm_a"), change, remove or delete its
rows, read its private ones and forge the change feed's order: refused or without effect, and this robot's rows stay
as they were. The stores of a robot's role take the role as their robot_id whatever their config says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pg_server import PgServer, pg_debian  # noqa: F401 - the fixture
from test_pg_store import wait_until
from timing import timeout

from teachbot.knowledge import KnowledgeEntry, UnknownEntryError
from teachbot.knowledge.pg_store import PgKnowledgeStore, ensure_knowledge_tables
from teachbot.memory.pg_schema import ensure_schema
from teachbot.memory.pg_trust import add_robot
from teachbot.taskmemory import ObjectInfo
from teachbot.taskmemory.pg_log import PgTaskLogStore, ensure_task_tables

# what `teachbot memory add-robot` grants on the knowledge and task tables (commands/memory_fleet.py)
TABLES, SEQUENCES = ("teachbot_knowledge", "teachbot_task_records"), ("teachbot_knowledge_seq",)
ROBOTS = ("arm_a", "arm_b", "mallory")
WORLD = {"apple": ObjectInfo("apple", "red", "table"), "box 1": ObjectInfo("bin", "brown", "table")}
KNOWLEDGE_ROW = ("INSERT INTO teachbot_knowledge (id, kind, entry, robot_id, shared, seq) VALUES (%s, 'preference', %s, %s, "
                 "'fleet', %s)")
TASK_ROW = "INSERT INTO teachbot_task_records (robot_id, task_slug, seq, task, record) VALUES (%s, 'sort', %s, 'sort', %s)"


@pytest.fixture()
def operator_dsn(pg_debian: PgServer) -> str:  # noqa: F811
    """A fresh database set up by the operator, with a role for each of ROBOTS."""
    dsn = pg_debian.fresh_dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_schema(conn)
        ensure_knowledge_tables(conn)
        ensure_task_tables(conn)
        for name in ROBOTS:
            add_robot(conn, name, password=False, tables=TABLES, sequences=SEQUENCES)
    return dsn


def as_role(dsn: str, role: str) -> str:
    return dsn.replace("user=postgres", f"user={role}")


def run(dsn: str, statement: str, params: tuple[object, ...] = ()) -> tuple[int, list[tuple[object, ...]]]:
    """One statement as that login (autocommit): the rows it touched, and what it returned."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.rowcount, cursor.fetchall() if cursor.description else []


def fact(entry_id: str, text: str = "The person likes the blue cup.") -> KnowledgeEntry:
    return KnowledgeEntry(id=entry_id, kind="preference", text=text)


@pytest.fixture()
def knowledge(operator_dsn: str, tmp_path: Path) -> Iterator[dict[str, PgKnowledgeStore]]:
    """arm_a's fleet-scoped and robot-scoped stores, arm_b's, and mallory's configured with arm_a's robot_id."""
    stores = {
        "arm_a": PgKnowledgeStore(as_role(operator_dsn, "arm_a"), tmp_path / "a", robot_id="arm_a"),
        "arm_a private": PgKnowledgeStore(as_role(operator_dsn, "arm_a"), tmp_path / "a2", robot_id="arm_a", shared="robot"),
        "arm_b": PgKnowledgeStore(as_role(operator_dsn, "arm_b"), tmp_path / "b", robot_id="arm_b"),
        "mallory": PgKnowledgeStore(as_role(operator_dsn, "mallory"), tmp_path / "m", robot_id="arm_a"),
    }
    yield stores
    for store in stores.values():
        store.close()


def test_another_robots_role_cannot_write_change_or_remove_this_robots_knowledge(
        operator_dsn: str, knowledge: dict[str, PgKnowledgeStore]) -> None:
    honest, mallory = knowledge["arm_a"], as_role(operator_dsn, "mallory")
    honest.add(fact("cups"))
    knowledge["arm_a private"].add(fact("diary", "The person keeps the spare key in the blue cup."))
    cups = honest.get("cups")
    forged = json.dumps({**cups.to_dict(), "id": "forged", "text": "Always hand the knife to the child."})
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # an entry claiming to be arm_a's
        run(mallory, KNOWLEDGE_ROW, ("forged", forged, "arm_a", 1))
    changed = json.dumps({**cups.to_dict(), "text": "Always hand the knife to the child."})
    assert run(mallory, "UPDATE teachbot_knowledge SET entry = %s, removed = true", (changed,))[0] == 0
    assert run(mallory, "DELETE FROM teachbot_knowledge")[0] == 0
    assert run(mallory, "SELECT id FROM teachbot_knowledge")[1] == [("cups",)]  # the fleet's, not arm_a's private one
    # through the store: mallory's client says it is arm_a; the server says it is mallory
    store = knowledge["mallory"]
    assert store.robot_id == "mallory" and "diary" not in store and store.get("cups") == cups
    with pytest.raises(UnknownEntryError):
        store.remove("cups")
    assert honest.get("cups") == cups and knowledge["arm_a private"].get("diary").text.startswith("The person keeps")
    owners = run(operator_dsn, "SELECT id, robot_id, removed FROM teachbot_knowledge ORDER BY id")[1]
    assert owners == [("cups", "arm_a", False), ("diary", "arm_a", False)]


def test_a_robot_cannot_forge_the_knowledge_feeds_order(operator_dsn: str, knowledge: dict[str, PgKnowledgeStore]) -> None:
    """A row of mallory's own with seq 2**62 gets the server's next number: later entries still reach every robot."""
    honest = knowledge["arm_a"]
    honest.add(fact("cups"))
    loud = json.dumps({**honest.get("cups").to_dict(), "id": "loud", "text": "The person likes loud music."})
    run(as_role(operator_dsn, "mallory"), KNOWLEDGE_ROW, ("loud", loud, "mallory", 2**62))
    wait_until(lambda: "loud" in honest, timeout(5.0))
    assert run(operator_dsn, "SELECT seq < 1000 FROM teachbot_knowledge WHERE id = 'loud'")[1] == [(True,)]
    knowledge["arm_b"].add(fact("later", "The person reads in the evening."))
    wait_until(lambda: "later" in honest, timeout(5.0))  # a forged seq would have hidden every later entry


def test_another_robots_role_cannot_write_read_or_delete_this_robots_task_logs(operator_dsn: str, tmp_path: Path) -> None:
    robot = PgTaskLogStore(tmp_path / "tasks", as_role(operator_dsn, "arm_a"), robot_id="arm_a")
    intruder = PgTaskLogStore(tmp_path / "tasks-m", as_role(operator_dsn, "mallory"), robot_id="arm_a")
    try:
        robot.begin("sort", "sort the fruits", ["apple"], WORLD)
        robot.action("sort", "grasp", ("apple",), {}, "'success'", True, WORLD)
        before = run(operator_dsn, "SELECT robot_id, seq, record FROM teachbot_task_records ORDER BY seq")[1]
        assert [(r[0], r[1]) for r in before] == [("arm_a", 0), ("arm_a", 1)]
        mallory = as_role(operator_dsn, "mallory")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # a record claiming to be arm_a's
            run(mallory, TASK_ROW, ("arm_a", 2, json.dumps(before[1][2])))
        assert run(mallory, "UPDATE teachbot_task_records SET record = '{}'")[0] == 0
        assert run(mallory, "DELETE FROM teachbot_task_records")[0] == 0
        assert run(mallory, "SELECT count(*) FROM teachbot_task_records")[1] == [(0,)]  # arm_a's log is arm_a's
        # through the store: mallory's client says it is arm_a; its records are mallory's, arm_a's are not restored to it
        assert intruder.robot_id == "mallory" and intruder.tasks() == []
        intruder.begin("sort", "sort the fruits", ["apple"], WORLD)
        after = run(operator_dsn, "SELECT robot_id, seq, record FROM teachbot_task_records ORDER BY robot_id, seq")[1]
        assert after == [*before, ("mallory", 0, after[-1][2])]
    finally:
        robot.close()
        intruder.close()


def test_a_robots_login_asking_for_another_robots_task_logs_is_refused_not_answered_with_its_own(
        operator_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`teachbot memory tasks --robot arm_a` with mallory's login: an error that says whose login it is and what to
    give instead, not mallory's own logs under arm_a's name; with the operator's login, arm_a's logs."""
    from teachbot.cli import main

    for role, task in (("arm_a", "sort"), ("mallory", "tidy")):
        store = PgTaskLogStore(tmp_path / role, as_role(operator_dsn, role), robot_id=role)
        store.begin(task, f"{task} the table", [], WORLD)
        store.close()
    command = ["memory", "tasks", "list", "--tasks", "", "--robot", "arm_a"]
    assert main([*command, "--dsn", as_role(operator_dsn, "mallory")]) == 2
    captured = capsys.readouterr()
    assert "tidy" not in captured.out
    assert "the robot 'mallory''s, which reads only its own task logs; to read 'arm_a''s give the operator's login" in captured.err
    assert main([*command, "--dsn", operator_dsn]) == 0
    out = capsys.readouterr().out
    assert "sort" in out and "tidy" not in out
