"""The knowledge base and the task logs on the memory's postgres backend (issue 16, item 1) against Debian's server:
teachbot.knowledge.pg_store.PgKnowledgeStore and teachbot.taskmemory.pg_log.PgTaskLogStore.

Knowledge: the file store's behaviours (round trip of every field, duplicates, filters, removal, export and
import), an entry at another robot's next read, robot scope, three writer processes with one killed by kill -9
(nothing lost, nothing partial), and a server stop: reads serve what was read, an add is queued and written by
the background retry once the server is back. Task logs: every record copied into the database, restored from it
into an empty directory (a robot that lost its disk resumes its task), appends while the server is away copied
when it is back, logs that differ left alone with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pg_server import PgServer, pg_debian  # noqa: F401 - the fixture
from test_pg_store import wait_until
from timing import timeout

from teachbot.knowledge import KnowledgeEntry, KnowledgeError, Provenance, UnknownEntryError
from teachbot.knowledge.pg_store import PgKnowledgeStore
from teachbot.taskmemory import ObjectInfo, TaskMemory, TaskMemoryConfig
from teachbot.taskmemory.pg_log import PgTaskLogStore

SRC = Path(__file__).resolve().parents[1] / "src"
CUPS = dict(kind="skill_parameter", text="Grasp cups 2 cm higher than the default.", task="put the cup on the shelf",
            object="cup", skill="pick", parameters={"height_offset": 0.02, "approach": "top", "offsets": [0, 0, 0.02]},
            image_embedding=[0.25, 0.5, 0.125], image_model="hsv-test",
            provenance=Provenance(episode_id="ep-3", robot_id="arm-1", model="gpt-test", source=("no, grab it higher",)))


def fact(entry_id: str, text: str = "The person likes the blue cup.", kind: str = "preference", **fields: object) -> KnowledgeEntry:
    return KnowledgeEntry(id=entry_id, kind=kind, text=text, **fields)  # type: ignore[arg-type]


@pytest.fixture()
def dsn(pg_debian: PgServer) -> str:  # noqa: F811
    return pg_debian.fresh_dsn()


@pytest.fixture()
def knowledge(dsn: str, tmp_path: Path) -> Iterator[Callable[..., PgKnowledgeStore]]:
    opened: list[PgKnowledgeStore] = []

    def make(robot_id: str = "arm-1", shared: str = "fleet", spool: str = "") -> PgKnowledgeStore:
        store = PgKnowledgeStore(dsn, tmp_path / (spool or f"spool-{robot_id}-{len(opened)}"), robot_id=robot_id, shared=shared)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# ---------------------------------------------------------------------------------------------- knowledge
def test_knowledge_round_trip_filters_and_scope(knowledge: Callable[..., PgKnowledgeStore], tmp_path: Path) -> None:
    arm1, arm2 = knowledge("arm-1"), knowledge("arm-2")
    cups = arm1.add(KnowledgeEntry(id="cups", **CUPS))  # type: ignore[arg-type]
    stored = arm1.get(cups)
    assert stored.parameters["offsets"] == (0, 0, 0.02) and stored.provenance.created.endswith("+00:00")
    assert arm2.get("cups") == stored  # at the other robot's next read, every field as stored
    assert arm1.add(stored) == "cups"  # exactly this entry again: a no-op
    with pytest.raises(KnowledgeError, match="already exists"):
        arm2.add(fact("cups"))
    arm2.add(fact("", "The top drawer is locked.", "object_state", object="top drawer"))
    assert [e.kind for e in arm1.list()] == ["skill_parameter", "object_state"]
    assert [e.id for e in arm1.list(kind="skill_parameter", object="CUP", task="shelf")] == ["cups"]
    with pytest.raises(KnowledgeError, match="unknown kind"):
        arm1.list(kind="habit")
    private = knowledge("arm-3", shared="robot")
    private.add(fact("mine", "Arm 3 grasps slowly.", "robot_constraint"))
    assert "mine" in knowledge("arm-3") and "mine" not in arm1 and len(arm1) == 2
    with pytest.raises(UnknownEntryError):
        arm1.remove("mine")
    arm2.remove("cups")
    assert "cups" not in arm1 and arm1.version > 0
    export = tmp_path / "kb.jsonl"
    assert arm1.export_jsonl(export) == 1
    report = knowledge("arm-4").import_jsonl(export)
    assert report.added == [] and len(report.skipped) == 1  # already in the fleet's database
    export.write_text(export.read_text() + '{"id": "bad"\n' + json.dumps(fact("new-one").to_dict()) + "\n")
    report = knowledge("arm-4").import_jsonl(export)
    assert report.added == ["new-one"] and len(report.errors) == 1 and "not JSON" in report.errors[0]


WRITER = textwrap.dedent("""
    import sys
    from teachbot.knowledge import KnowledgeEntry
    from teachbot.knowledge.pg_store import PgKnowledgeStore
    dsn, tag, count, spool = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    store = PgKnowledgeStore(dsn, spool, robot_id=tag)
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        entry_id = f"{tag}-{i}"
        store.add(KnowledgeEntry(id=entry_id, kind="object_info", text=f"Fact {entry_id}.", object=f"object {entry_id}",
                                 image_embedding=[(i % 97) / 8 for i in range(4000)], image_model="big-test"))
        print(entry_id, flush=True)
""")


def test_three_knowledge_writers_and_a_kill_9_lose_and_corrupt_nothing(knowledge: Callable[..., PgKnowledgeStore], dsn: str,
                                                                       tmp_path: Path, pg_debian: PgServer) -> None:  # noqa: F811
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    procs = []
    for tag, count in (("a", 30), ("b", 30), ("k", 100_000)):
        proc = subprocess.Popen([sys.executable, str(script), dsn, tag, str(count), str(tmp_path / f"spool-{tag}")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        procs.append(proc)
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    time.sleep(random.Random(3).uniform(0.3, 0.8))
    os.kill(procs[2].pid, signal.SIGKILL)
    outputs = [proc.communicate(timeout=timeout(120))[0].split() for proc in procs]
    assert [p.returncode for p in procs] == [0, 0, -signal.SIGKILL]
    stored = {e.id: e for e in knowledge("reader").list()}
    reported = sum(outputs, [])
    assert set(reported) <= set(stored) and len(stored) - len(reported) <= 1  # at most the add the kill cut short
    assert {f"a-{i}" for i in range(30)} | {f"b-{i}" for i in range(30)} <= set(stored)
    for entry_id, entry in stored.items():
        assert entry.text == f"Fact {entry_id}." and entry.object == f"object {entry_id}"
        assert entry.image_embedding == tuple((i % 97) / 8 for i in range(4000))  # whole (about 30 KB of JSON)
    database = dsn.split("dbname=")[1].split()[0]
    assert pg_debian.psql("SELECT count(*), count(DISTINCT seq) FROM teachbot_knowledge", database) == f"{len(stored)}|{len(stored)}"


def test_knowledge_while_the_server_is_away(knowledge: Callable[..., PgKnowledgeStore], pg_debian: PgServer,  # noqa: F811
                                            tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    robot = knowledge("arm-1", spool="spool-away")
    robot.add(fact("before", "The person likes tea."))
    with caplog.at_level(logging.INFO):
        pg_debian.stop()
        try:
            assert [e.id for e in robot.list()] == ["before"]  # what was read before
            assert "unreachable" in caplog.text and "retrying" in caplog.text
            started = time.monotonic()
            robot.add(fact("during", "The person likes green tea now."))
            assert time.monotonic() - started < 1.0  # no connect timeout: the backoff says it is away
            assert (tmp_path / "spool-away" / "during.json").is_file() and "queued" in caplog.text
            assert {e.id for e in robot.list()} == {"before", "during"}  # this robot uses it at once
            with pytest.raises(KnowledgeError, match="unreachable.*not removed"):
                robot.remove("before")
            robot.remove("during")  # a queued entry is simply unqueued
            robot.add(fact("during", "The person likes green tea now."))
        finally:
            pg_debian.start()
        # nobody touches the robot's store: its background retry writes the queue
        wait_until(lambda: not (tmp_path / "spool-away" / "during.json").exists(), 10.0)
        wait_until(lambda: "wrote 1 queued entry" in caplog.text, 2.0)  # said right after the file went
    assert "is back" in caplog.text
    assert knowledge("arm-2").get("during").text == "The person likes green tea now."


# ---------------------------------------------------------------------------------------------- task logs
WORLD = {"apple": ObjectInfo("apple", "red", "table"), "box 1": ObjectInfo("bin", "brown", "table")}


def act(store: PgTaskLogStore, n: int) -> None:
    for i in range(n):
        store.action("sort", "grasp" if i % 2 == 0 else "place_object", ("apple",) if i % 2 == 0 else ("box 1",), {"i": i},
                     "'success'", True, WORLD)


def test_task_logs_are_copied_and_restored(dsn: str, tmp_path: Path, pg_debian: PgServer) -> None:  # noqa: F811
    robot = PgTaskLogStore(tmp_path / "tasks", dsn, robot_id="arm-1")
    robot.begin("sort", "sort the fruits", ["apple"], WORLD)
    act(robot, 5)
    other = PgTaskLogStore(tmp_path / "tasks-arm-2", dsn, robot_id="arm-2")
    other.begin("tidy", "tidy the table", [], WORLD)
    database = dsn.split("dbname=")[1].split()[0]
    assert pg_debian.psql("SELECT robot_id, count(*) FROM teachbot_task_records GROUP BY 1 ORDER BY 1", database) == "arm-1|6\narm-2|1"
    # the robot lost its disk: a new directory is restored from the database, and its task resumes there
    replacement = PgTaskLogStore(tmp_path / "new-disk", dsn, robot_id="arm-1")
    assert replacement.records("sort") == robot.records("sort") and replacement.tasks() == ["sort"]
    memory = TaskMemory(replacement, TaskMemoryConfig.load(), "household", lambda: WORLD)
    assert [a["action"] for a in memory.declarative("sort")][-2:] == ["place_object('box 1', i=3)", "grasp('apple', i=4)"]
    replacement.action("sort", "grasp", ("apple",), {}, "'success'", True, WORLD)
    robot.sync()  # the first directory catches up with what the replacement appended
    assert [r.function for r in robot.records("sort")] == [r.function for r in replacement.records("sort")]
    assert pg_debian.psql("SELECT count(*) FROM teachbot_task_records WHERE robot_id = 'arm-1'", database) == "7"
    for store in (robot, other, replacement):
        store.close()


def test_task_log_appends_while_the_server_is_away(dsn: str, tmp_path: Path, pg_debian: PgServer,  # noqa: F811
                                                   caplog: pytest.LogCaptureFixture) -> None:
    robot = PgTaskLogStore(tmp_path / "tasks", dsn, robot_id="arm-1")
    robot.begin("sort", "sort the fruits", ["apple"], WORLD)
    database = dsn.split("dbname=")[1].split()[0]
    with caplog.at_level(logging.INFO):
        pg_debian.stop()
        try:
            started = time.monotonic()
            act(robot, 4)  # appended durably to the file; the database gets them later
            assert time.monotonic() - started < 2.0 and len(robot.records("sort")) == 5 and robot.pending()
            assert "unreachable" in caplog.text
        finally:
            pg_debian.start()
        wait_until(lambda: not robot.pending(), 10.0)  # the background retry copied them
    assert pg_debian.psql("SELECT count(*), max(seq) FROM teachbot_task_records", database) == "5|4"
    # a directory whose log differs from the database's is left alone, with a warning
    diverged = tmp_path / "diverged"
    local = PgTaskLogStore(diverged, "host=/nonexistent dbname=x connect_timeout=1", robot_id="arm-1")
    local.begin("sort", "something else entirely", [], {})
    local.close()
    with caplog.at_level(logging.WARNING):
        again = PgTaskLogStore(diverged, dsn, robot_id="arm-1")
    assert "differ at record 0" in caplog.text and len(again.records("sort")) == 1
    assert pg_debian.psql("SELECT count(*) FROM teachbot_task_records", database) == "5"
    robot.close()
    again.close()
