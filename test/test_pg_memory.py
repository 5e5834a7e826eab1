"""Retrieval on the postgres backend (teachbot.memory.pg_memory): in SQL through pgvector's HNSW index on
pgserver's server, through the in-process index on Debian's; either way the same top-k and scores as the
file backend over the same examples, seeds merged in, profile and scope filters, examples written without
embeddings filled in, and a lesson learned by another robot retrieved within a second."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from pg_server import PgServer, pg_server  # noqa: F401 - the fixture
from test_pg_store import HashEmbedder, learned, transcript

from teachbot.memory import EpisodicMemory, MemoryStore
from teachbot.memory.pg_memory import PgEpisodicMemory
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.memory.retrieval import RetrievalConfig
from teachbot.stores.backend import open_memory

TASKS = [f"{verb} the {colour} block {where}" for verb in ("put", "move", "stack") for colour in ("red", "green", "blue")
         for where in ("in the bowl", "on the left", "next to the cup")]


def memory_on(dsn: str, tmp_path: Path, robot: str, seeds: Path | None = None, shared: str = "fleet") -> PgEpisodicMemory:
    store = PgMemoryStore(dsn, seeds, robot_id=robot, spool_dir=tmp_path / f"spool-{robot}", shared=shared)
    return PgEpisodicMemory(store, HashEmbedder(), RetrievalConfig(k=5))


@pytest.fixture()
def seeds(tmp_path: Path) -> Path:
    (tmp_path / "seeds" / "tabletop").mkdir(parents=True)
    (tmp_path / "seeds" / "tabletop" / "one.txt").write_text(transcript(TASKS[0]))
    return tmp_path / "seeds"


def test_same_top_k_as_the_file_backend(pg_server: PgServer, tmp_path: Path, seeds: Path) -> None:  # noqa: F811
    memory = memory_on(pg_server.fresh_dsn(), tmp_path, "r1", seeds)
    files = EpisodicMemory(MemoryStore(tmp_path / "learned", seeds), HashEmbedder(), RetrievalConfig(k=5))
    try:
        assert memory.in_sql == pg_server.has_pgvector
        for i, task in enumerate(TASKS):
            example = learned(f"ex{i:02d}", "household" if i % 3 == 0 else "tabletop", task, f"again: {task}")
            memory.add(example)
            files.add(example)
        for query, profile in [(["put the red block in the bowl"], ""), (["stack it", "move the blue block"], "tabletop"),
                               (["anything"], "household"), (["nothing"], "kitchen")]:
            ours, theirs = memory.retrieve(query, profile), files.retrieve(query, profile)
            assert [r.example.id for r in ours] == [r.example.id for r in theirs], (query, profile)
            assert np.allclose([r.score for r in ours], [r.score for r in theirs], atol=1e-5)
            assert [r.best_key for r in ours] == [r.best_key for r in theirs]
        assert "seed:tabletop/one" in [r.example.id for r in memory.retrieve([TASKS[0]], "tabletop")]
        memory.remove("ex01")
        files.remove("ex01")
        assert [r.example.id for r in memory.retrieve([TASKS[1]])] == [r.example.id for r in files.retrieve([TASKS[1]])]
    finally:
        memory.store.close()


def test_hnsw_index_serves_the_query(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    if not pg_server.has_pgvector:
        pytest.skip("Debian's server has no pgvector: the in-process index serves (tested above)")
    dsn = pg_server.fresh_dsn()
    memory = memory_on(dsn, tmp_path, "r1")
    try:
        for i, task in enumerate(TASKS):
            memory.add(learned(f"ex{i:02d}", "tabletop", task))
        memory.retrieve(["put the red block in the bowl"])
        database = dsn.split("dbname=")[1].split()[0]
        plan = pg_server.psql("SET enable_seqscan = off; EXPLAIN SELECT example_id FROM teachbot_example_keys "
                              "WHERE model = 'hash-16' ORDER BY (embedding::vector(16)) <#> "
                              f"'[{','.join(['1'] * 16)}]'::vector(16) LIMIT 5", database)
        assert "teachbot_keys_hnsw_" in plan
    finally:
        memory.store.close()


def test_scope_and_embeddings_filled_in_for_examples_written_without(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    dsn = pg_server.fresh_dsn()
    plain = PgMemoryStore(dsn, robot_id="cli", spool_dir=tmp_path / "spool-cli", listen=False)  # no embedder: no key rows
    plain.add(learned("imported", "tabletop", TASKS[4]))
    private = memory_on(dsn, tmp_path, "r1", shared="robot")
    other = memory_on(dsn, tmp_path, "r2")
    try:
        private.add(learned("mine", "tabletop", TASKS[4] + " carefully"))
        assert {r.example.id for r in private.retrieve([TASKS[4]])} == {"imported", "mine"}
        assert {r.example.id for r in other.retrieve([TASKS[4]])} == {"imported"}
    finally:
        for store in (plain, private.store, other.store):
            store.close()


def test_a_lesson_reaches_another_robots_retrieval_within_a_second(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    dsn = pg_server.fresh_dsn()
    robot_a, robot_b = memory_on(dsn, tmp_path, "r1"), memory_on(dsn, tmp_path, "r2")
    try:
        robot_b.retrieve(["warm up"])
        robot_a.add(learned("taught", "tabletop", "hand me the screwdriver"))
        taught = time.monotonic()
        while "taught" not in [r.example.id for r in robot_b.retrieve(["hand me the screwdriver"])]:
            assert time.monotonic() - taught < 1.0, "the lesson did not reach the other robot within 1 s"
            time.sleep(0.01)
    finally:
        robot_a.store.close()
        robot_b.store.close()


def test_open_memory_picks_the_configured_backend(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    from teachbot.memory.config import MemoryConfig

    base = {"learned_dir": str(tmp_path / "learned"), "seeds_dir": ""}
    files = open_memory(MemoryConfig.from_mapping({"memory": {"store": base}}), HashEmbedder())
    assert type(files) is EpisodicMemory and isinstance(files.store, MemoryStore)
    config = MemoryConfig.from_mapping({"memory": {"store": {**base, "backend": "postgres", "dsn": pg_server.fresh_dsn(),
                                                             "robot_id": "arm-1", "spool_dir": str(tmp_path / "spool")}}})
    memory = open_memory(config, HashEmbedder())
    try:
        assert isinstance(memory, PgEpisodicMemory) and memory.store.robot_id == "arm-1"
        memory.add(learned("one", "tabletop", "wave"))
        assert [r.example.id for r in memory.retrieve(["wave"])] == ["one"]
    finally:
        memory.store.close()
