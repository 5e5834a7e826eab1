"""The memory's postgres backend (teachbot.memory.pg_store) against real servers started by test/pg_server.py:
Debian's PostgreSQL (no pgvector: real[] embeddings) and pgserver's bundled one (pgvector: vector embeddings).

The file store's behaviours where they apply (round trip with provenance, duplicates and invalid examples,
seeds and filters, export/import), the fleet's: who sees a lesson (fleet or robot scope), NOTIFY reaching
another store within 1 s, three writer processes at once, kill -9 of writers mid-add, and the server
stopping and coming back (error line, lessons queued in the spool, caught up and written afterwards).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from pg_server import PgServer, pg_server  # noqa: F401 - the fixture
from timing import timeout

from teachbot.memory import LEARNED, SEED, InteractionExample, MemoryStoreError, UnknownExampleError
from teachbot.memory.pg_store import PgMemoryStore, StoreChange

SRC = Path(__file__).resolve().parents[1] / "src"
TEST = Path(__file__).resolve().parent
# The tests with child processes or a killed server exercise what both kinds share (transactions, locks, WAL,
# reconnects): one kind keeps the file fast. The embeddings' column type differs, so the rest runs on both.
ONE_KIND = pytest.mark.parametrize("pg_server", ["debian"], indirect=True)


class HashEmbedder:
    """Deterministic unit vectors (16-d) from a text's digest: the key rows need numbers, not meaning."""

    name = "hash-16"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")).normal(size=16)
                for t in texts]
        rows = np.array(rows, dtype=np.float32).reshape(len(texts), 16)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def transcript(*turns: str) -> str:
    lines = []
    for text in turns:
        lines += [">>> wait_for_trigger()", repr({"type": "dialog", "text": text}), ">>> say('done')"]
    return "\n".join(lines)


def learned(example_id: str = "", profile: str = "tabletop", *turns: str, **provenance: str) -> InteractionExample:
    return InteractionExample(id=example_id, profile=profile, transcript=transcript(*(turns or ("put the red block in the bowl",))),
                              **provenance)


def wait_until(condition: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``condition()`` held (polled every 5 ms); fails the test after ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.005)
    return time.monotonic() - start


@pytest.fixture()
def dsn(pg_server: PgServer) -> str:  # noqa: F811 - pytest's fixture argument
    return pg_server.fresh_dsn()


@pytest.fixture()
def stores(dsn: str, tmp_path: Path) -> Iterator[Callable[..., PgMemoryStore]]:
    """Opens PgMemoryStores on this test's database (robot 'r1', own spool each unless given); closes them after."""
    opened: list[PgMemoryStore] = []

    def make(robot_id: str = "r1", **kwargs: object) -> PgMemoryStore:
        kwargs.setdefault("spool_dir", tmp_path / f"spool-{robot_id}-{len(opened)}")
        store = PgMemoryStore(str(kwargs.pop("dsn", dsn)), robot_id=robot_id, **kwargs)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture()
def seeds(tmp_path: Path) -> Path:
    root = tmp_path / "memory_store"
    (root / "tabletop").mkdir(parents=True)
    (root / "tabletop" / "put_block.txt").write_text(transcript("put the red block in the blue bowl") + "\n")
    (root / "household").mkdir()
    (root / "household" / "juice.txt").write_text(transcript("bring me the apple juice"))
    return root


def test_round_trip_keeps_provenance_and_embeddings(stores: Callable[..., PgMemoryStore], pg_server: PgServer, dsn: str) -> None:  # noqa: F811
    store = stores(embedder=HashEmbedder())
    assert store.embedding_type == ("vector" if pg_server.has_pgvector else "real[]")
    example_id = store.add(learned("", "tabletop", "put the red block in the bowl", "no, the green one", problem="took the wrong block",
                                   improvement="ask which block when two match", scope="on the tabletop", episode_id="ep-7",
                                   author_model="gpt-test", embedding_model="hash-16"))
    got = store.get(example_id)
    assert got.source == LEARNED and got.instructions == ("put the red block in the bowl", "no, the green one")
    assert got.created.endswith("+00:00")
    reopened = stores(listen=False)  # a restarted node, and the CLI's mode
    assert reopened.get(example_id) == got and [e.id for e in reopened.list()] == [example_id]
    assert len(reopened) == 1 and example_id in reopened
    database = dsn.split("dbname=")[1].split()[0]
    row = pg_server.psql(f"SELECT robot_id, shared, episode_id FROM teachbot_examples WHERE id = '{example_id}'", database)
    assert row == "r1|fleet|ep-7"
    keys = pg_server.psql(f"SELECT key_index, model FROM teachbot_example_keys WHERE example_id = '{example_id}' ORDER BY 1",
                          database)
    assert keys.splitlines() == ["0|hash-16", "1|hash-16"]
    store.remove(example_id)
    assert len(store) == 0 and example_id not in stores(listen=False)
    assert pg_server.psql(f"SELECT count(*) FROM teachbot_example_keys WHERE example_id = '{example_id}'", database) == "0"
    with pytest.raises(UnknownExampleError):
        store.get(example_id)
    with pytest.raises(UnknownExampleError):
        store.remove(example_id)
    again = store.add(got)  # a removed id may be taught again
    assert stores(listen=False).get(again) == got


def test_duplicates_invalid_examples_and_idempotent_add(stores: Callable[..., PgMemoryStore]) -> None:
    store = stores()
    first = learned("a1").replace(created="2026-01-01T00:00:00.000+00:00")
    assert store.add(first) == "a1"
    assert store.add(first) == "a1"  # exactly this example again (a retried add): nothing changes
    with pytest.raises(MemoryStoreError, match="already exists"):
        store.add(learned("a1"))  # another example under a taken id
    with pytest.raises(MemoryStoreError, match="already exists"):
        stores("r2").add(learned("a1", "tabletop", "something else"))
    for bad, why in [(learned("../escape"), "invalid example id"), (learned(".hidden"), "invalid example id"),
                     (learned("x", ""), "profile"), (InteractionExample(id="y", profile="tabletop"), "transcript"),
                     (learned("z").replace(source=SEED), "source")]:
        with pytest.raises(MemoryStoreError, match=why):
            store.add(bad)
    assert [e.id for e in stores(listen=False).list()] == ["a1"]


def test_seeds_stay_files_and_filters_work(stores: Callable[..., PgMemoryStore], seeds: Path) -> None:
    store = stores(seeds_dir=seeds)
    store.add(learned("l1", "tabletop", "stack the blocks"))
    store.add(learned("l2", "household", "wipe the table"))
    assert {e.id for e in store.list()} == {"seed:tabletop/put_block", "seed:household/juice", "l1", "l2"}
    assert {e.id for e in store.list(profile="household")} == {"seed:household/juice", "l2"}
    assert [e.id for e in store.list(source=LEARNED)] == ["l1", "l2"]
    assert store.get("seed:tabletop/put_block").source == SEED
    with pytest.raises(MemoryStoreError, match="read-only"):
        store.remove("seed:household/juice")
    with pytest.raises(MemoryStoreError, match="unknown source"):
        store.list(source="other")


def test_export_import_round_trip_skips_known_ids(stores: Callable[..., PgMemoryStore], seeds: Path, tmp_path: Path,
                                                  pg_server: PgServer) -> None:  # noqa: F811
    source = stores(seeds_dir=seeds)
    ids = [source.add(learned("", "tabletop", f"task {i}", problem=f"p{i}")) for i in range(5)]
    export = tmp_path / "export" / "memory.jsonl"
    assert source.export_jsonl(export) == 5
    target = stores(dsn=pg_server.fresh_dsn(), seeds_dir=seeds)
    target.add(source.get(ids[0]))
    report = target.import_jsonl(export)
    assert sorted(report.added) == sorted(ids[1:]) and report.skipped == [ids[0]]
    assert {e.id: e for e in target.list(source=LEARNED)} == {e.id: e for e in source.list(source=LEARNED)}
    assert target.import_jsonl(export).added == []
    everything = tmp_path / "all.jsonl"
    assert source.export_jsonl(everything, source="") == 7
    assert target.import_jsonl(everything).added == []  # seeds are never imported
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(learned("ok1").to_dict()) + "\n{not json\n")
    with pytest.raises(MemoryStoreError, match=r"bad.jsonl:2: not JSON"):
        target.import_jsonl(bad)
    assert "ok1" not in target


def test_robot_scope_stays_on_its_robot(stores: Callable[..., PgMemoryStore]) -> None:
    private = stores("r1", shared="robot")
    fleet = stores("r2")
    private.add(learned("mine", "tabletop", "my own habit"))
    fleet.add(learned("ours", "tabletop", "a fleet lesson"))
    assert wait_until(lambda: "ours" in private, 2.0) < 2.0
    other = stores("r3", listen=False)
    assert "ours" in other and "mine" not in other
    assert "mine" in stores("r1", listen=False)
    with pytest.raises(UnknownExampleError):
        other.remove("mine")
    with pytest.raises(MemoryStoreError, match="scope"):
        stores("r4", shared="everyone")


def test_notify_brings_a_lesson_to_another_store_within_one_second(stores: Callable[..., PgMemoryStore]) -> None:
    changes: list[StoreChange] = []
    robot_b = stores("r2")
    robot_b.on_change = changes.append
    robot_a = stores("r1")
    delays = []
    for i in range(5):
        robot_a.add(learned(f"lesson-{i}", "tabletop", f"lesson number {i}"))
        sent = time.monotonic()
        # snapshot() does not query: only the listener's catch-up can make it appear there
        wait_until(lambda i=i: any(e.id == f"lesson-{i}" for e in robot_b.snapshot()[1]), 1.0)
        delays.append(time.monotonic() - sent)
    robot_a.remove("lesson-0")
    wait_until(lambda: all(e.id != "lesson-0" for e in robot_b.snapshot()[1]), 1.0)
    assert max(delays) < 1.0
    # the callback told robot b of each of robot a's changes once; robot b's own add and remove are not news to it
    robot_b.add(learned("own", "tabletop", "robot b's own lesson"))
    robot_b.remove("own")
    wait_until(lambda: "lesson-0" in sum((c.removed for c in changes), ()), 1.0)
    assert sorted(sum((c.added for c in changes), ())) == [f"lesson-{i}" for i in range(5)]
    assert list(sum((c.removed for c in changes), ())) == ["lesson-0"]


# ---------------------------------------------------------------------------------------------- processes
WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, sys.argv[6])
    from test_pg_store import HashEmbedder
    from teachbot.memory import InteractionExample
    from teachbot.memory.pg_store import PgMemoryStore
    dsn, tag, count, size, spool = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    store = PgMemoryStore(dsn, robot_id=tag, spool_dir=spool, embedder=HashEmbedder(), listen=False)
    print("ready", flush=True)
    sys.stdin.readline()  # the go signal
    for i in range(count):
        example_id = f"{tag}-{i}"
        body = (example_id + " ") * size
        store.add(InteractionExample(id=example_id, profile="tabletop", episode_id=tag,
                  transcript=f">>> wait_for_trigger()\\n{{'type': 'dialog', 'text': 'task {example_id}'}}\\n>>> say({body!r})"))
        print(example_id, flush=True)
""")


def start_writer(script: Path, dsn: str, tag: str, count: int, size: int, spool: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), dsn, tag, str(count), str(size), str(spool), str(TEST)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def check_example(example: InteractionExample, size: int) -> None:
    assert example.instructions == (f"task {example.id}",)
    assert example.transcript.count(example.id) == size + 1


@ONE_KIND
def test_three_writer_processes_lose_and_duplicate_nothing(stores: Callable[..., PgMemoryStore], dsn: str, tmp_path: Path,
                                                            pg_server: PgServer) -> None:  # noqa: F811
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    watcher = stores("watcher")  # opened before: hears the writers' NOTIFYs
    procs = [start_writer(script, dsn, tag, 40, 10, tmp_path / f"spool-{tag}") for tag in ("a", "b", "c")]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=timeout(120))[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    expected = sorted(f"{tag}-{i}" for tag in "abc" for i in range(40))
    assert sorted(sum(outputs, [])) == expected
    wait_until(lambda: len(watcher.snapshot()[1]) == 120, 2.0)
    assert sorted(e.id for e in watcher.list()) == expected
    for example in stores("reader", listen=False).list():
        check_example(example, 10)
    database = dsn.split("dbname=")[1].split()[0]
    assert pg_server.psql("SELECT count(*), count(DISTINCT seq) FROM teachbot_examples", database) == "120|120"
    assert pg_server.psql("SELECT count(*) FROM teachbot_example_keys", database) == "120"


@ONE_KIND
def test_kill_9_of_writers_mid_add_loses_and_corrupts_nothing(stores: Callable[..., PgMemoryStore], dsn: str, tmp_path: Path,
                                                               pg_server: PgServer) -> None:  # noqa: F811
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    rng = random.Random(7)
    reported: list[str] = []
    for round_ in range(4):
        # ~25 KB per example, and under the fleet's 32000-character transcript limit for every id up to 'k3-9999'
        # (5000 repetitions passed it at 'k2-100', which a fast writer reaches before the kill)
        proc = start_writer(script, dsn, f"k{round_}", 10_000, 3_000, tmp_path / "spool-k")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(rng.uniform(0.1, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        reported += out.split()
    assert len(reported) >= 4
    stored = {e.id: e for e in stores("reader", listen=False).list()}
    assert set(reported) <= set(stored), "an example reported as added is missing"
    assert len(stored) - len(reported) <= 4  # at most one commit per kill landed after its last report
    for example in stored.values():
        check_example(example, 3_000)
    database = dsn.split("dbname=")[1].split()[0]
    # every stored example has its key row: the row and its keys commit together or not at all
    assert pg_server.psql("SELECT count(*) FROM teachbot_examples e WHERE NOT EXISTS "
                          "(SELECT 1 FROM teachbot_example_keys k WHERE k.example_id = e.id)", database) == "0"
    assert not list((tmp_path / "spool-k").glob("*.json"))  # the database was there: nothing was queued


def test_server_restart_queues_lessons_then_catches_up(stores: Callable[..., PgMemoryStore], pg_server: PgServer,  # noqa: F811
                                                       caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    robot_a = stores("r1", embedder=HashEmbedder(), spool_dir=tmp_path / "spool-a")
    robot_a.add(learned("before", "tabletop", "learned before the outage"))
    with caplog.at_level(logging.WARNING, logger="teachbot.memory.pg_store"):
        pg_server.stop()
        try:
            wait_until(lambda: not robot_a.online, 3.0)
            assert "unreachable" in caplog.text and "retrying" in caplog.text
            assert [e.id for e in robot_a.list()] == ["before"]  # reads serve what was read before
            queued = robot_a.add(learned("during", "tabletop", "learned while the database was away"))
            assert (tmp_path / "spool-a" / "during.json").exists() and "queued" in caplog.text
            assert {e.id for e in robot_a.list()} == {"before", "during"}  # this robot uses it at once
            with pytest.raises(MemoryStoreError, match="unreachable.*not removed"):
                robot_a.remove("before")
            with pytest.raises(MemoryStoreError, match="unreachable"):
                stores("cli", listen=False)
        finally:
            pg_server.start()
    robot_b = stores("r2", listen=False)
    robot_b.add(learned("after", "tabletop", "learned by another robot after the restart"))
    wait_until(lambda: not (tmp_path / "spool-a" / "during.json").exists(), 5.0)  # the queue is written when it is back
    wait_until(lambda: "after" in {e.id for e in robot_a.snapshot()[1]}, 5.0)  # and robot a caught up
    assert queued in stores("r3", listen=False)
    assert "is back" in caplog.text
    assert sorted(e.id for e in robot_a.list()) == ["after", "before", "during"]


@ONE_KIND
def test_crash_of_the_server_keeps_committed_lessons(stores: Callable[..., PgMemoryStore], pg_server: PgServer) -> None:  # noqa: F811
    store = stores("r1")
    ids = [store.add(learned(f"c{i}", "tabletop", f"crash lesson {i}")) for i in range(3)]
    pg_server.kill()
    pg_server.start()  # recovery from the WAL
    assert sorted(e.id for e in stores("r2", listen=False).list()) == ids
    store.add(learned("c3", "tabletop", "after the crash"))  # straight in, or queued until the store reconnects
    reader = stores("r2", listen=False)
    wait_until(lambda: "c3" in reader, 5.0)


def test_spooled_lessons_are_written_once_and_conflicts_set_aside(stores: Callable[..., PgMemoryStore], tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from teachbot.memory.pg_store import LESSONS
    from teachbot.storage.spool import Spool

    first = stores("r1")
    committed = learned("sent", "tabletop", "committed, but the answer was lost").replace(created="2026-01-01T00:00:00.000+00:00")
    first.add(committed)
    first.add(learned("taken", "tabletop", "the fleet's lesson"))
    spool = Spool(tmp_path / "spool-again", LESSONS)
    spool.put(committed, "r1", "fleet")  # the retry of an add whose commit did happen
    spool.put(learned("taken", "tabletop", "another lesson under the same id").replace(
        created="2026-01-02T00:00:00.000+00:00"), "r1", "fleet")
    spool.put(learned("fresh", "household", "queued while away").replace(
        created="2026-01-03T00:00:00.000+00:00"), "r1", "robot")
    with caplog.at_level(logging.WARNING):
        again = stores("r1", spool_dir=tmp_path / "spool-again")
    assert spool.ids() == set()
    assert [p.name.rsplit(".", 1)[0] for p in spool.quarantine_dir.iterdir()] == ["taken.json"]
    assert "holds another example" in caplog.text
    assert again.get("sent") == committed.with_derived_instructions() and again.get("taken").instructions == ("the fleet's lesson",)
    reader = stores("r1", listen=False)
    assert "fresh" in reader and "fresh" not in stores("r2", listen=False)  # its robot scope travelled with it
