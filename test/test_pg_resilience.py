"""A memory that survives its database (issue 31, items 4, 5 and 9), against real servers (test/pg_server.py).

- the server stopped (SIGSTOP of the postmaster and its backends) with a lesson being added: retrieval answers
  from what is loaded within 5 s, and is right; listing answers too; the lesson is queued, then written once
  the server runs again;
- a NUL in a transcript: a clear error, nothing stored, the store (and the memory node, over ROS) go on serving;
- a row with a NULL instruction written by another client: skipped with one error line, retrieval works;
- the listener meets an unexpected error: it starts over, and another robot's lessons still arrive;
- a spooled lesson that cannot be read for a while (EMFILE) stays in the spool and is written when it can be.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import ros_graph
import yaml
from pg_server import PgServer, pg_server, pg_vector  # noqa: F401 - the fixtures
from teachbot_interfaces.msg import InteractionExample as ExampleMsg
from teachbot_interfaces.srv import AddExample, RetrieveExamples
from test_pg_store import HashEmbedder, learned, transcript, wait_until
from timing import timeout

import teachbot.memory.pg_store as pg_store_module
from teachbot.errors import ConfigError
from teachbot.memory import MemoryStoreError
from teachbot.memory.config import MemoryConfig
from teachbot.memory.pg_memory import PgEpisodicMemory
from teachbot.memory.pg_store import LESSONS, PgMemoryStore
from teachbot.memory.retrieval import RetrievalConfig, Retrieved
from teachbot.nodes.memory_node import MemoryNode
from teachbot.storage.pg_link import connect_options
from teachbot.storage.pg_listen import Listener
from teachbot.storage.pg_timeouts import PgTimeouts
from teachbot.storage.spool import Spool
from teachbot.stores.backend import open_memory

ONE_KIND = pytest.mark.parametrize("pg_server", ["debian"], indirect=True)
ANSWER_WITHIN_S = 5.0  # the property asked for: a retrieval answers within 5 s of the server freezing (wall clock)
# short reply timeouts keep the frozen-server test brief; the read timeout is the configured default (2 s)
QUICK = PgTimeouts(connect_s=2.0, reply_s=4.0, statement_s=3.0)


def memory_on(dsn: str, tmp_path: Path, robot: str, timeouts: PgTimeouts | None = QUICK) -> PgEpisodicMemory:
    store = PgMemoryStore(dsn, None, robot_id=robot, spool_dir=tmp_path / f"spool-{robot}", timeouts=timeouts)
    return PgEpisodicMemory(store, HashEmbedder(), RetrievalConfig(k=3))


def server_pids(server: PgServer) -> list[int]:
    """The postmaster and its children (every backend), from its pid file and /proc."""
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    children = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat_file.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat_file.parent.name))
    return [postmaster, *children]


@contextlib.contextmanager
def frozen(server: PgServer) -> Iterator[None]:
    """The whole server stopped (kill -STOP) meanwhile: it accepts TCP/Unix data and keepalives, and never answers."""
    pids = server_pids(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``work`` on a daemon thread; the dict gets its 'result' or 'error' and 'seconds'."""
    out: dict[str, Any] = {}

    def run() -> None:
        start = time.monotonic()
        try:
            out["result"] = work()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
        out["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_frozen_server_leaves_retrieval_answering_from_what_is_loaded(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    dsn = pg_server.fresh_dsn()
    memory = memory_on(dsn, tmp_path, "arm-1")
    other = PgMemoryStore(dsn, robot_id="arm-2", spool_dir=tmp_path / "spool-arm-2", embedder=HashEmbedder())
    try:
        other.add(learned("green-left", "tabletop", "put the green block on the left"))
        memory.add(learned("red-bowl", "tabletop", "put the red block in the bowl"))
        wait_until(lambda: "green-left" in memory.store, timeout(5.0))
        assert memory.retrieve(["put the green block on the left"])[-1].example.id == "green-left"
        with frozen(pg_server):
            adding, added = in_thread(lambda: memory.add(learned("wave", "tabletop", "wave at the visitor")))
            time.sleep(0.3)  # the add is waiting on the frozen server (it used to hold the store's and the link's locks)
            asking, asked = in_thread(lambda: memory.retrieve(["put the green block on the left"]))
            asking.join(timeout(30.0))
            listing, listed = in_thread(lambda: memory.store.list(source="learned"))
            listing.join(timeout(30.0))
            assert "seconds" in asked, "retrieval did not answer while the server was frozen"
            assert "error" not in asked, asked.get("error")
            found: list[Retrieved] = asked["result"]
            assert found[-1].example.id == "green-left"  # right: the lesson read before, scored as usual
            assert found[-1].score == pytest.approx(1.0, abs=1e-4)
            assert asked["seconds"] < max(ANSWER_WITHIN_S, timeout(ANSWER_WITHIN_S)), asked["seconds"]
            assert "seconds" in listed and "error" not in listed, listed
            assert {"green-left", "red-bowl"} <= {e.id for e in listed["result"]}
            adding.join(timeout(30.0))
            assert added.get("result") == "wave", added  # queued in the spool once the server gave no answer
        wait_until(lambda: "wave" in other, timeout(30.0))  # written once the server runs again
        assert not memory.store.queued
    finally:
        memory.store.close()
        other.close()


def test_a_nul_in_a_transcript_is_an_error_and_the_store_goes_on(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    memory = memory_on(pg_server.fresh_dsn(), tmp_path, "arm-1")
    try:
        bad = learned("nul", "tabletop", "put the red\x00 block in the bowl")
        with pytest.raises(MemoryStoreError, match=r"'nul' was not stored: .*NUL"):
            memory.store.add(bad)
        assert "nul" not in memory.store and not memory.store.queued  # neither stored nor queued for ever
        memory.add(learned("fine", "tabletop", "put the blue block in the bowl"))
        assert memory.retrieve(["put the blue block in the bowl"])[-1].example.id == "fine"
    finally:
        memory.store.close()


def insert_null_instruction_row(dsn: str) -> None:
    """Another client writes a row that is no lesson (an instruction is NULL) and tells every robot of it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO teachbot_examples (id, profile, transcript, instructions, created, robot_id, shared, seq) "
                     "VALUES ('poison', 'tabletop', %s, ARRAY['put the green block on the left', NULL], "
                     "'2026-01-01T00:00:00+00:00', 'mallory', 'fleet', nextval('teachbot_memory_seq'))",
                     (transcript("put the green block on the left"),))
        conn.execute("SELECT pg_notify('teachbot_memory', 'add poison')")


def test_a_row_with_a_null_instruction_is_skipped_and_logged(pg_server: PgServer, tmp_path: Path,  # noqa: F811
                                                             caplog: pytest.LogCaptureFixture) -> None:
    dsn = pg_server.fresh_dsn()
    memory = memory_on(dsn, tmp_path, "arm-1")
    other = PgMemoryStore(dsn, robot_id="arm-2", spool_dir=tmp_path / "spool-arm-2", embedder=HashEmbedder())
    try:
        memory.add(learned("red-bowl", "tabletop", "put the red block in the bowl"))
        with caplog.at_level(logging.ERROR, logger="teachbot.memory"):
            insert_null_instruction_row(dsn)
            other.add(learned("green-left", "tabletop", "put the green block on the left"))  # after the poison row
            wait_until(lambda: "green-left" in memory.store, timeout(5.0))
            found = memory.retrieve(["put the green block on the left"])
            assert found[-1].example.id == "green-left" and "poison" not in [r.example.id for r in found]
            assert "poison" not in memory.store and "poison" not in other
            assert memory.retrieve(["put the red block in the bowl"])[-1].example.id == "red-bowl"
        skipped = [r for r in caplog.records if "skipping the row 'poison'" in r.getMessage()]
        assert len(skipped) == 2, [r.getMessage() for r in caplog.records]  # once for each of the two robots, not per read
    finally:
        memory.store.close()
        other.close()


@ONE_KIND
def test_the_store_hears_other_robots_after_an_unexpected_error(pg_server: PgServer, tmp_path: Path,  # noqa: F811
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = pg_server.fresh_dsn()
    failures: list[str] = []
    armed = threading.Event()  # after the first catch-up: the error comes with a notification
    changes_since = pg_store_module.changes_since

    def fails_once_on_the_listener(*args: Any) -> Any:
        if armed.is_set() and threading.current_thread().name == "teachbot-memory-listen" and not failures:
            failures.append("boom")
            raise RuntimeError("an unexpected error while catching up")
        return changes_since(*args)

    store = PgMemoryStore(dsn, robot_id="arm-1", spool_dir=tmp_path / "spool-arm-1")
    other = PgMemoryStore(dsn, robot_id="arm-2", spool_dir=tmp_path / "spool-arm-2")
    monkeypatch.setattr(pg_store_module, "changes_since", fails_once_on_the_listener)

    def held() -> set[str]:  # what the store holds, without a catch-up of the reader's own
        return {e.id for e in store.snapshot()[1]}

    try:
        armed.set()
        other.add(learned("first", "tabletop", "put the red block in the bowl"))
        wait_until(lambda: bool(failures), timeout(5.0))
        other.add(learned("second", "tabletop", "put the green block on the left"))
        wait_until(lambda: {"first", "second"} <= held(), timeout(10.0))
    finally:
        store.close()
        other.close()


@ONE_KIND
def test_the_listener_starts_over_after_an_unexpected_error(pg_server: PgServer) -> None:  # noqa: F811
    dsn = pg_server.fresh_dsn()
    connects: list[float] = []
    notified: list[float] = []

    def on_notify() -> None:
        notified.append(time.monotonic())
        if len(notified) == 1:
            raise RuntimeError("a bug in the callback")

    listener = Listener(dsn, "teachbot_test", {"connect_timeout": 5}, on_connect=lambda: connects.append(time.monotonic()),
                        on_notify=on_notify, on_outage=lambda exc: None)
    listener.start()
    try:
        wait_until(lambda: len(connects) == 1, timeout(5.0))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("NOTIFY teachbot_test, 'one'")
            wait_until(lambda: len(connects) == 2, timeout(5.0))  # started over: connected and caught up again
            conn.execute("NOTIFY teachbot_test, 'two'")
            wait_until(lambda: len(notified) == 2, timeout(5.0))
        assert listener.restarts == 1
    finally:
        listener.stop()


@ONE_KIND
def test_a_spooled_lesson_unreadable_for_a_while_is_written_later(pg_server: PgServer, tmp_path: Path,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = pg_server.fresh_dsn()
    spool_dir = tmp_path / "spool-arm-1"
    blocked = threading.Event()
    blocked.set()
    read_text = Path.read_text

    def emfile_while_blocked(path: Path, *args: Any, **kwargs: Any) -> str:
        if blocked.is_set() and path.parent == spool_dir and path.suffix == ".json":
            raise OSError(errno.EMFILE, "Too many open files")
        return read_text(path, *args, **kwargs)

    # a lesson queued by an earlier run, while the database was away
    Spool(spool_dir, LESSONS).put(learned("queued", "tabletop", "stack the blocks").replace(
        created="2026-01-01T00:00:00.000+00:00", instructions=("stack the blocks",)), "arm-1", "fleet")
    monkeypatch.setattr(Path, "read_text", emfile_while_blocked)
    store = PgMemoryStore(dsn, robot_id="arm-1", spool_dir=spool_dir)
    other = PgMemoryStore(dsn, robot_id="arm-2", spool_dir=tmp_path / "spool-arm-2")
    try:
        store.refresh()
        assert (spool_dir / "queued.json").exists() and not store.quarantine_dir.exists()  # not set aside
        assert "queued" not in other
        blocked.clear()  # the process has file descriptors again: the retry writes it, nobody has to ask
        # written, then taken out of the spool (the file goes after the row is committed: wait for both)
        wait_until(lambda: "queued" in other and not (spool_dir / "queued.json").exists(), timeout(15.0))
    finally:
        store.close()
        other.close()


def test_the_memory_node_answers_a_nul_with_an_error_and_lives(ros_context: None, pg_vector: PgServer,  # noqa: F811
                                                               tmp_path: Path) -> None:
    config_file = tmp_path / "memory.yaml"
    config_file.write_text(yaml.safe_dump({"memory": {"store": {
        "backend": "postgres", "dsn": pg_vector.fresh_dsn(), "robot_id": "arm-1", "seeds_dir": "",
        "learned_dir": str(tmp_path / "learned"), "spool_dir": str(tmp_path / "spool"),
        "knowledge_dir": str(tmp_path / "kb"), "tasks_dir": str(tmp_path / "tasks")}}}))
    config = MemoryConfig.load(config_file)
    node = MemoryNode(open_memory(config, HashEmbedder()), config=str(config_file))
    graph = ros_graph.Graph(node, name="pg_resilience")
    try:
        add, retrieve = graph.client(AddExample, "memory/add"), graph.client(RetrieveExamples, "memory/retrieve")
        bad = ExampleMsg(id="nul", profile="tabletop", source="learned", transcript=transcript("wave\x00 at the visitor"))
        answer = ros_graph.call(add, AddExample.Request(example=bad), 30.0)
        assert not answer.success and "NUL" in answer.message, answer.message
        good = ExampleMsg(id="bow", profile="tabletop", source="learned", transcript=transcript("bow to the guest"))
        assert ros_graph.call(add, AddExample.Request(example=good), 30.0).success  # the node lives
        found = ros_graph.call(retrieve, RetrieveExamples.Request(instructions=["bow to the guest"], k=2), 30.0)
        assert [e.id for e in found.examples][-1:] == ["bow"]
    finally:
        graph.close()
        node.close()
        node.destroy_node()


def test_the_timeouts_come_from_the_config_and_a_dsn_keeps_its_own(tmp_path: Path) -> None:
    shipped = MemoryConfig.load()  # config/memory.yaml names every timeout with its default
    assert shipped.timeouts == PgTimeouts()
    config_file = tmp_path / "memory.yaml"
    config_file.write_text(yaml.safe_dump({"memory": {"store": {"learned_dir": str(tmp_path), "timeouts": {"read_s": 1}}}}))
    assert MemoryConfig.load(config_file).timeouts.read_s == 1.0
    config_file.write_text(yaml.safe_dump({"memory": {"store": {"learned_dir": str(tmp_path), "timeouts": {"read": 1}}}}))
    with pytest.raises(ConfigError, match="memory.store.timeouts.read is unknown"):
        MemoryConfig.load(config_file)
    options = connect_options(psycopg.conninfo.conninfo_to_dict("host=db keepalives_idle=60 options='-c search_path=x'"),
                              PgTimeouts())
    assert "keepalives_idle" not in options and options["keepalives"] == 1 and options["tcp_user_timeout"] == 10000
    assert options["options"] == "-c search_path=x -c statement_timeout=10000"
