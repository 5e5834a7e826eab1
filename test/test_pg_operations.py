"""``teachbot memory`` on the postgres backend (issue 16, item 4): ``migrate`` copies a file store into the
fleet's database and back (idempotent, resumable after the server went away mid-copy, conflicts named, every
example read back and compared; the knowledge entries and task logs too), and list, show, remove, export and
import work on the database, through the config's backend or ``--dsn``, as do ``memory knowledge`` and ``memory
tasks`` (another robot's logs with ``--robot``). Debian's server: the commands do not depend on pgvector."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pg_server import PgServer, pg_debian  # noqa: F401 - the fixture
from test_pg_store import HashEmbedder, learned, transcript

from teachbot.cli import main
from teachbot.knowledge import KnowledgeEntry, KnowledgeStore
from teachbot.memory import InteractionExample, MemoryConfig, MemoryStore, MemoryStoreError
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.stores.migrate import database_to_files, files_to_database
from teachbot.taskmemory import ObjectInfo
from teachbot.taskmemory.log import TaskLogStore
from teachbot.taskmemory.pg_log import PgTaskLogStore

LESSONS = 23


def lesson(i: int) -> InteractionExample:
    return learned(f"lesson-{i:02d}", "tabletop" if i % 2 else "household", f"task number {i}", problem=f"problem {i}",
                   improvement=f"do {i} better", episode_id=f"ep-{i}", author_model="improvement:scripted",
                   embedding_model="hash-16")


@pytest.fixture()
def robot(tmp_path: Path, pg_debian: PgServer) -> Callable[..., Path]:  # noqa: F811
    """Writes a memory.yaml for a robot under tmp_path (a file store with LESSONS lessons and a seed) on a fresh database."""
    seeds = tmp_path / "seeds" / "tabletop"
    seeds.mkdir(parents=True)
    (seeds / "wave.txt").write_text(transcript("wave at the visitor"))
    files = MemoryStore(tmp_path / "learned", tmp_path / "seeds")
    for i in range(LESSONS):
        files.add(lesson(i))
    dsn = pg_debian.fresh_dsn()

    def config(backend: str = "files", name: str = "memory.yaml", **store: str) -> Path:
        path = tmp_path / name
        settings = {"backend": backend, "dsn": dsn, "robot_id": "arm-1", "scope": "fleet", "seeds_dir": str(tmp_path / "seeds"),
                    "learned_dir": str(tmp_path / "learned"), "spool_dir": str(tmp_path / "spool")}
        path.write_text(yaml.safe_dump({"memory": {"store": {**settings, **store}}}))
        return path

    return config


def database_of(config: Path, **kwargs: object) -> PgMemoryStore:
    settings = MemoryConfig.load(config)
    return PgMemoryStore(settings.dsn, robot_id=str(kwargs.pop("robot_id", "arm-1")), spool_dir=settings.spool_path,
                         listen=False, **kwargs)  # type: ignore[arg-type]


def test_migrate_into_the_database_and_back(robot: Callable[..., Path], tmp_path: Path, pg_debian: PgServer,  # noqa: F811
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = robot()
    source = {e.id: e for e in MemoryStore(tmp_path / "learned").list()}
    assert main(["memory", "migrate", "--to", "postgres", "--config", str(config), "--batch", "5", "--no-embeddings"]) == 0
    out = capsys.readouterr().out
    assert f"{LESSONS} learned examples in {tmp_path / 'learned'}, into the database at host=" in out
    assert f"copied {LESSONS}, already there 0, conflicts 0" in out
    assert f"verified: {LESSONS} of {LESSONS}" in out
    database = dsn_name(config)
    assert pg_debian.psql("SELECT count(*), count(DISTINCT id) FROM teachbot_examples", database) == f"{LESSONS}|{LESSONS}"
    assert pg_debian.psql("SELECT DISTINCT robot_id || '/' || shared FROM teachbot_examples", database) == "arm-1/fleet"
    assert {e.id: e for e in database_of(config).list()} == source  # every field, as the files hold it
    assert len(MemoryStore(tmp_path / "learned", tmp_path / "seeds").list()) == LESSONS + 1  # a copy: the file store is unchanged

    assert main(["memory", "migrate", "--to", "postgres", "--config", str(config), "--no-embeddings"]) == 0
    assert f"copied 0, already there {LESSONS}, conflicts 0" in capsys.readouterr().out  # idempotent
    assert pg_debian.psql("SELECT count(*) FROM teachbot_examples", database) == str(LESSONS)

    # another robot teaches the fleet one more lesson; back to files on a third robot: the fleet's lessons arrive
    database_of(config, robot_id="arm-2").add(learned("from-arm-2", "tabletop", "a lesson of arm 2"))
    back = tmp_path / "back"
    assert main(["memory", "migrate", "--to", "files", "--config", str(config), "--memory", str(back)]) == 0
    out = capsys.readouterr().out
    assert f"verified: {LESSONS + 1} of {LESSONS + 1}" in out
    assert {e.id: e for e in MemoryStore(back).list()} == {**source, "from-arm-2": database_of(config).get("from-arm-2")}
    assert main(["memory", "migrate", "--to", "files", "--config", str(config), "--memory", str(back)]) == 0
    assert "copied 0" in capsys.readouterr().out


def test_migrate_resumes_after_the_server_went_away_mid_copy(robot: Callable[..., Path], tmp_path: Path,
                                                             pg_debian: PgServer) -> None:  # noqa: F811
    config = robot()
    files = MemoryStore(tmp_path / "learned", tmp_path / "seeds")
    target = database_of(config, embedder=HashEmbedder())
    batches: list[int] = []

    def stop_after_two_batches(done: int, total: int) -> None:
        batches.append(done)
        if len(batches) == 2:
            pg_debian.stop()

    try:
        with pytest.raises(MemoryStoreError, match="10 of 23 learned examples are copied; run the migration again"):
            files_to_database(files, target, lambda: database_of(config), 5, stop_after_two_batches)
    finally:
        pg_debian.start()
    assert pg_debian.psql("SELECT count(*) FROM teachbot_examples", dsn_name(config)) == "10"  # whole batches only
    target = database_of(config, embedder=HashEmbedder())
    report = files_to_database(files, target, lambda: database_of(config), 5)
    assert report.complete and len(report.copied) == LESSONS - 10 and len(report.already) == 10 and not report.conflicts
    # the key embeddings went in with the examples: one row per instruction
    assert pg_debian.psql("SELECT count(*) FROM teachbot_example_keys WHERE model = 'hash-16'", dsn_name(config)) == str(LESSONS)


def test_migrate_names_conflicts_and_leaves_them(robot: Callable[..., Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = robot()
    other = database_of(config, robot_id="arm-2")
    taken = learned("lesson-03", "tabletop", "another lesson under a taken id")
    other.add(taken)
    assert main(["memory", "migrate", "--to", "postgres", "--config", str(config), "--no-embeddings"]) == 1
    captured = capsys.readouterr()
    assert "conflicts 1" in captured.out and "left as it is): lesson-03" in captured.out
    assert f"verified: {LESSONS - 1} of {LESSONS}" in captured.out and "not complete" in captured.err
    assert database_of(config).get("lesson-03").transcript == taken.transcript  # the database's own is kept
    files = MemoryStore(tmp_path / "conflicted")
    files.add(learned("lesson-05", "tabletop", "the files' own lesson-05"))
    report = database_to_files(database_of(config), files, lambda: MemoryStore(tmp_path / "conflicted"))
    assert report.conflicts == ["lesson-05"] and report.different == ["lesson-05"] and not report.complete


def test_memory_commands_on_the_database(robot: Callable[..., Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    files_config, pg_config = robot(), robot("postgres", "pg.yaml")
    assert main(["memory", "migrate", "--to", "postgres", "--config", str(files_config), "--no-embeddings"]) == 0
    capsys.readouterr()
    for flags in (["--config", str(pg_config)], ["--config", str(files_config), "--dsn", MemoryConfig.load(pg_config).dsn]):
        assert main(["memory", "list", *flags, "--profile", "tabletop"]) == 0
        out = capsys.readouterr().out
        assert "seed:tabletop/wave" in out and "lesson-01" in out and "lesson-02" not in out
        assert "learned examples in the database at host=" in out
        assert main(["memory", "show", "lesson-07", *flags]) == 0
        assert "problem:         problem 7" in capsys.readouterr().out
    export = tmp_path / "export.jsonl"
    assert main(["memory", "export", str(export), "--config", str(pg_config), "--profile", "household"]) == 0
    assert f"exported {(LESSONS + 1) // 2} examples" in capsys.readouterr().out
    assert main(["memory", "remove", "lesson-00", "lesson-02", "seed:tabletop/wave", "nope", "--config", str(pg_config)]) == 1
    captured = capsys.readouterr()
    assert captured.out.split() == ["removed", "lesson-00", "removed", "lesson-02"]
    assert "read-only" in captured.err and "no learned example with id 'nope'" in captured.err
    assert "lesson-00" not in database_of(pg_config)
    assert main(["memory", "import", str(export), "--config", str(pg_config)]) == 0
    assert "imported 2 examples into the database at" in capsys.readouterr().out
    assert database_of(pg_config).get("lesson-00") == MemoryStore(tmp_path / "learned").get("lesson-00")
    # a file store is still named by --memory, whatever the backend
    assert main(["memory", "list", "--config", str(pg_config), "--memory", str(tmp_path / "learned")]) == 0
    assert f"learned examples in {tmp_path / 'learned'}" in capsys.readouterr().out


def test_commands_say_when_the_database_is_away(robot: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    config = robot("postgres", dsn="host=/nonexistent-socket-dir dbname=teachbot user=robot connect_timeout=2")
    for command in (["list"], ["knowledge", "list"], ["tasks", "list"]):
        started = time.monotonic()
        assert main(["memory", *command, "--config", str(config)]) == 2, command
        assert "is unreachable" in capsys.readouterr().err and time.monotonic() - started < 30
    assert main(["memory", "migrate", "--to", "postgres", "--config", str(robot(dsn=" ")), "--no-embeddings"]) == 2
    assert "no database named" in capsys.readouterr().err


def dsn_name(config: Path) -> str:
    return MemoryConfig.load(config).dsn.split("dbname=")[1].split()[0]


def test_migrate_knowledge_and_task_logs_and_their_commands(robot: Callable[..., Path], tmp_path: Path, pg_debian: PgServer,  # noqa: F811
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    files_config, pg_config = robot(), robot("postgres", "pg.yaml")
    knowledge = KnowledgeStore(tmp_path / "knowledge")
    knowledge.add(KnowledgeEntry(id="tea", kind="preference", text="The visitor likes green tea."))
    knowledge.add(KnowledgeEntry(id="drawer", kind="object_state", text="The top drawer is locked.", object="top drawer"))
    logs = TaskLogStore(tmp_path / "tasks")
    world = {"apple": ObjectInfo("apple", "red", "table")}
    logs.begin("sort", "sort the fruits", ["apple"], world)
    logs.action("sort", "grasp", ("apple",), {}, "'success'", True, world)
    logs.begin("tidy", "tidy the table", [], world)
    assert main(["memory", "migrate", "--to", "postgres", "--config", str(files_config), "--no-embeddings"]) == 0
    out = capsys.readouterr().out
    assert "2 knowledge entries in" in out and "verified: 2 of 2" in out
    assert "3 task log records in" in out and "copied 3, already there 0" in out and "verified: 3 of 3" in out
    database = dsn_name(files_config)
    assert pg_debian.psql("SELECT string_agg(id, ',' ORDER BY id) FROM teachbot_knowledge", database) == "drawer,tea"
    assert pg_debian.psql("SELECT count(*) FROM teachbot_task_records WHERE robot_id = 'arm-1'", database) == "3"
    assert main(["memory", "migrate", "--to", "postgres", "--config", str(files_config), "--no-embeddings"]) == 0
    assert "copied 0, already there 3" in capsys.readouterr().out  # idempotent for the logs too

    # the knowledge and task commands on the database
    assert main(["memory", "knowledge", "list", "--config", str(pg_config), "--kind", "preference"]) == 0
    out = capsys.readouterr().out
    assert "tea" in out and "drawer" not in out and "knowledge in the database at host=" in out
    assert main(["memory", "knowledge", "remove", "drawer", "--config", str(pg_config)]) == 0
    assert pg_debian.psql("SELECT removed FROM teachbot_knowledge WHERE id = 'drawer'", database) == "t"
    other = PgTaskLogStore(tmp_path / "arm-2-tasks", MemoryConfig.load(pg_config).dsn, robot_id="arm-2")
    other.begin("wipe", "wipe the counter", [], world)
    other.close()
    assert main(["memory", "tasks", "list", "--config", str(pg_config)]) == 0
    out = capsys.readouterr().out
    assert "sort" in out and "tidy" in out and "wipe" not in out
    assert main(["memory", "tasks", "show", "wipe", "--config", str(files_config), "--dsn", MemoryConfig.load(pg_config).dsn,
                 "--robot", "arm-2"]) == 0
    assert "asked: wipe the counter" in capsys.readouterr().out
    assert main(["memory", "tasks", "list", "--config", str(files_config), "--robot", "arm-2"]) == 2
    assert "--robot reads another robot's task logs" in capsys.readouterr().err

    # and back into new directories: what the fleet's database holds for this robot
    back = ["--knowledge", str(tmp_path / "kb-back"), "--tasks", str(tmp_path / "tasks-back"), "--memory", str(tmp_path / "ex-back")]
    assert main(["memory", "migrate", "--to", "files", "--config", str(files_config), *back]) == 0
    assert [e.id for e in KnowledgeStore(tmp_path / "kb-back").list()] == ["tea"]
    assert TaskLogStore(tmp_path / "tasks-back").records("sort") == logs.records("sort")
    assert TaskLogStore(tmp_path / "tasks-back").tasks() == logs.tasks()
