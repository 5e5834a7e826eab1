#!/usr/bin/env python3
"""Fleet memory on PostgreSQL with pgvector: retrieval at 100 000 and 1 000 000 lessons, the time a lesson takes to
reach another robot, and adds per second with three writers at once (issue 16).

As the issue defines it:

* retrieval: PgEpisodicMemory.retrieve (k = 16, the three newest instructions as the query) on a database holding
  N learned lessons, each with one key embedding: a random unit vector of all-MiniLM-L6-v2's dimension (384),
  bulk-loaded with COPY (binary, for the vectors), then pgvector's HNSW index built by the backend's own
  ensure_hnsw_index (m 16, ef_construction 64). The query's embedding is a random unit vector too, so the
  figure is the store and SQL path (the sentence model's few ms per new text are bench/memory_retrieval.py's).
  Also: recall@16 of the HNSW answer against an exact scan, and the SQL search alone at other hnsw.ef_search
  values (random 384-d vectors are the hardest case for HNSW: real sentence embeddings cluster), the load and
  index build times, the disk taken, and the time a robot takes to open the store (it reads every lesson it may
  see). Goal: median <= 50 ms at 1M.
* recall on real embeddings (``--embedded``, 20 000 by default): lessons keyed by all-MiniLM-L6-v2 embeddings
  of distinct generated instructions; recall@16 of retrieve (and at each ef_search) against an exact scan, and
  retrieve's time with the model embedding the query.
* reach: a robot adds a lesson; another robot's store (another process, LISTEN/NOTIFY) holds it. From the
  add call to the other process's change callback. Goal: at most 1 s.
* adds per second: three writer processes (PgMemoryStore.add: the row, its 384-d key row and the HNSW
  index entry, NOTIFY; one transaction each, serialised on the advisory lock) add lessons as fast as they
  can into the first (smallest) database.

A private pgvector server (pgserver's PostgreSQL 16 with pgvector, as the tests use; fsync on, as a real server)
is started in a temporary directory with shared_buffers and maintenance_work_mem set for the size; ``--dsn`` names an existing server
instead (it must have pgvector; a fresh database is created per size and dropped after).

Usage: python bench/fleet_memory.py [--sizes 100000 1000000] [--runs 200] [--reach 50] [--adds 200] [--dsn DSN] [--smoke]
"""

from __future__ import annotations

import _common as C

C.setup()

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from psycopg import conninfo  # noqa: E402

sys.path.insert(0, str(C.REPO / "test"))
from pg_server import PgServer, bin_dir_for  # noqa: E402

from teachbot.memory import InteractionExample  # noqa: E402
from teachbot.memory.pg_memory import PgEpisodicMemory  # noqa: E402
from teachbot.memory.pg_schema import ensure_hnsw_index, ensure_schema, hnsw_index_name  # noqa: E402
from teachbot.memory.pg_store import PgMemoryStore  # noqa: E402
from teachbot.memory.retrieval import RetrievalConfig, query_vector  # noqa: E402

GOAL_RETRIEVE_MS = 50.0
GOAL_REACH_S = 1.0
DIM = 384  # all-MiniLM-L6-v2
MODEL = "bench-random-384"
K = 16
EF_SWEEP = (64, 200, 500, 1000)  # hnsw.ef_search values timed for the recall/latency trade-off (retrieve uses 4 k = 64)
RECALL_QUERIES = 10
CHUNK = 20_000  # rows per COPY write
COLUMNS = ("id", "profile", "transcript", "instructions", "problem", "improvement", "scope", "episode_id", "author_model",
           "embedding_model", "created", "robot_id", "shared", "seq", "removed")


class RandomEmbedder:
    """A random unit vector of DIM per text, the same for the same text (its digest seeds the generator)."""

    name = MODEL

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")).normal(size=DIM)
                for t in texts]
        out = np.array(rows, dtype=np.float32).reshape(len(texts), DIM)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def instruction(i: int) -> str:
    return f"lesson {i}: put the block number {i % 997} on the tray"


def transcript(text: str) -> str:
    return f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': {text!r}}}\n>>> say('done')"


# ------------------------------------------------------------------ bulk load
def bulk_load(dsn: str, size: int, seed: int, model: str = MODEL, texts: Sequence[str] | None = None,
              vectors_of: Any = None) -> dict[str, float]:
    """``size`` lessons (one 384-d key each) into an empty database with COPY; then the HNSW index. Seconds taken.
    The keys are random unit vectors, or ``vectors_of(texts)`` of ``texts`` (the lessons' instructions) under ``model``."""
    rng = np.random.default_rng(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_schema(conn)
        started = time.perf_counter()
        with conn.cursor().copy(f"COPY teachbot_examples ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for i in range(size):
                text = texts[i] if texts is not None else instruction(i)
                copy.write_row((f"bench-{i:07d}", "tabletop", transcript(text), [text], "", "", "", "", "bench", model,
                                f"2026-01-01T00:00:00.{i % 1000:03d}+00:00", f"robot-{i % 3}", "fleet", i + 1, False))
        rows_s = time.perf_counter() - started
        with conn.cursor().copy("COPY teachbot_example_keys (example_id, model, key_index, profile, robot_id, shared, "
                                "embedding) FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
            for start in range(0, size, CHUNK):
                if vectors_of is not None and texts is not None:
                    vectors = np.asarray(vectors_of(list(texts[start:start + CHUNK])), dtype=np.float32)
                else:
                    vectors = rng.normal(size=(min(CHUNK, size - start), DIM)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                copy.write(_key_rows(start, vectors, model))
            copy.write(struct.pack(">h", -1))
        conn.execute("SELECT setval('teachbot_memory_seq', %s)", (size,))
        load_s = time.perf_counter() - started
        conn.execute("ANALYZE teachbot_examples")
        conn.execute("ANALYZE teachbot_example_keys")
        started = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '4GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        ensure_hnsw_index(conn, model, DIM)
        index_s = time.perf_counter() - started
    return {"copy_rows_s": round(rows_s, 2), "copy_total_s": round(load_s, 2), "index_build_s": round(index_s, 2)}


def _key_rows(start: int, vectors: np.ndarray, model: str = MODEL) -> bytes:
    """COPY BINARY tuples of teachbot_example_keys: 7 fields, the vector in pgvector's binary form."""
    fixed = [struct.pack(">i", len(b)) + b for b in (model.encode(),)]
    tail = b"".join(struct.pack(">i", len(b)) + b for b in (b"tabletop",))
    vector_head = struct.pack(">iHH", 4 + 4 * DIM, DIM, 0)
    big_endian = vectors.astype(">f4")
    parts = []
    for offset, row in enumerate(big_endian):
        i = start + offset
        example_id, robot = f"bench-{i:07d}".encode(), f"robot-{i % 3}".encode()
        parts.append(b"".join((struct.pack(">hi", 7, len(example_id)), example_id, fixed[0], struct.pack(">ii", 4, 0), tail,
                               struct.pack(">i", len(robot)), robot, struct.pack(">i", 5), b"fleet", vector_head, row.tobytes())))
    return b"".join(parts)


def disk(dsn: str) -> dict[str, float]:
    """Megabytes: the database, the lessons' table, the key rows and the HNSW index."""
    name = hnsw_index_name(MODEL, DIM)
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_database_size(current_database()), pg_total_relation_size('teachbot_examples'), "
                           "pg_relation_size('teachbot_example_keys'), pg_relation_size(%s)", (name,)).fetchone()
    return {key: round(value / 2**20, 1) for key, value in zip(("database_mb", "examples_mb", "keys_mb", "hnsw_mb"), row)}


# ------------------------------------------------------------------ retrieval
def measure_retrieval(dsn: str, size: int, runs: int, scratch: Path) -> dict[str, Any]:
    """Open a robot's store on the database (until it holds every lesson), then time ``runs`` retrievals of new random
    queries; recall@K against an exact scan."""
    embedder = RandomEmbedder()
    started = time.perf_counter()
    store = PgMemoryStore(dsn, robot_id="bench-reader", spool_dir=scratch / "spool", embedder=embedder)
    while len(store.snapshot()[1]) < size:  # the listener's first catch-up reads every lesson this robot may see
        time.sleep(0.05)
    open_s = time.perf_counter() - started
    try:
        memory = PgEpisodicMemory(store, embedder, RetrievalConfig(k=K))
        sync_s, _ = C.timed(memory.sync)
        assert memory.in_sql, "the server has no pgvector"
        for w in range(5):
            memory.retrieve([f"warm-up {w}"])
        times, recalls = [], []
        for r in range(runs):
            query = [f"query {r} newest", f"query {r} before", f"query {r} first"]
            elapsed, found = C.timed(lambda q=query: memory.retrieve(q))
            assert len(found) == K
            times.append(elapsed * 1000)
        sweep: dict[int, dict[str, list[float]]] = {ef: {"ms": [], "recall": []} for ef in EF_SWEEP}
        for r in range(RECALL_QUERIES):  # the exact top-K once per query, then the index at each ef_search
            query = [f"recall {r} newest", f"recall {r} before", f"recall {r} first"]
            vector = query_vector(np.asarray(embedder.embed(query), dtype=np.float32), memory.retriever.config.gamma)
            exact = {row[0] for row in store.link.run(lambda conn, v=vector: memory._search(conn, v, "", K, exact=True))[:K]}
            recalls.append(len(exact & {f.example.id for f in memory.retrieve(query)}) / K)
            for ef in EF_SWEEP:
                elapsed, rows = C.timed(lambda v=vector, ef=ef: store.link.run(lambda conn: memory._search(conn, v, "", ef, exact=False)))
                sweep[ef]["ms"].append(elapsed * 1000)
                sweep[ef]["recall"].append(len(exact & {row[0] for row in rows[:K]}) / K)
        plan = store.link.run(lambda conn: "\n".join(row[0] for row in conn.execute(
            f"EXPLAIN SELECT example_id FROM teachbot_example_keys WHERE model = '{MODEL}' ORDER BY "
            f"(embedding::vector({DIM})) <#> %s::vector({DIM}) LIMIT 64", (embedder.embed(["x"])[0].tolist(),)).fetchall()))
    finally:
        store.close()
    return {"retrieve_ms": C.summary(times, 2), "recall_at_k": round(float(np.mean(recalls)), 4),
            "ef_search_sweep": {str(ef): {"sql_median_ms": round(float(np.median(v["ms"])), 2),
                                          "recall_at_k": round(float(np.mean(v["recall"])), 4)} for ef, v in sweep.items()},
            "open_s": round(open_s, 2), "first_sync_s": round(sync_s, 2), "hnsw_index_used": hnsw_index_name(MODEL, DIM) in plan}


def measure_embedded(admin: str, size: int, scratch: Path) -> dict[str, Any]:
    """Recall@K of the HNSW retrieval where the keys are all-MiniLM-L6-v2 embeddings of ``size`` distinct generated
    instructions (real embeddings cluster, unlike random vectors), and the retrieval time with the model in it."""
    from teachbot.memory.embedding import SentenceTransformerEmbedder

    model = SentenceTransformerEmbedder()
    texts = instructions(size + RECALL_QUERIES * 3)
    lessons, queries = texts[:size], texts[size:]
    name = f"bench_fleet_embedded_{os.getpid()}"
    dsn = _create_database(admin, name)
    try:
        embed_s, _ = C.timed(lambda: model.embed(lessons[:1]))
        load = bulk_load(dsn, size, 0, model.name, lessons, model.embed)
        store = PgMemoryStore(dsn, robot_id="bench-reader", spool_dir=scratch / "spool-embedded", embedder=model)
        while len(store.snapshot()[1]) < size:
            time.sleep(0.05)
        memory = PgEpisodicMemory(store, model, RetrievalConfig(k=K))
        try:
            memory.sync()
            sweep: dict[int, list[float]] = {ef: [] for ef in EF_SWEEP}
            times, recalls = [], []
            for r in range(RECALL_QUERIES):
                query = queries[3 * r:3 * r + 3]
                elapsed, found = C.timed(lambda q=query: memory.retrieve(q))
                times.append(elapsed * 1000)
                vector = query_vector(np.asarray(model.embed(query), dtype=np.float32), memory.retriever.config.gamma)
                exact = {row[0] for row in store.link.run(lambda conn, v=vector: memory._search(conn, v, "", K, exact=True))[:K]}
                recalls.append(len(exact & {f.example.id for f in found}) / K)
                for ef in EF_SWEEP:
                    rows = store.link.run(lambda conn, v=vector, ef=ef: memory._search(conn, v, "", ef, exact=False))
                    sweep[ef].append(len(exact & {row[0] for row in rows[:K]}) / K)
        finally:
            store.close()
    finally:
        _drop_database(admin, name)
    return {"size": size, "model": model.name, **load, "recall_at_k": round(float(np.mean(recalls)), 4),
            "recall_by_ef_search": {str(ef): round(float(np.mean(v)), 4) for ef, v in sweep.items()},
            "retrieve_with_model_ms": C.summary(times, 2), "model_load_s": round(embed_s, 2)}


def instructions(count: int) -> list[str]:
    """``count`` distinct instructions from templates (bench/memory_retrieval.py's vocabulary), shuffled."""
    openers = ["", "please", "could you", "now", "can you", "carefully", "quickly", "go ahead and"]
    verbs = ["put", "move", "place", "bring", "hand me", "stack", "push", "give me", "pick up", "drop"]
    things = [f"{c} {t}" for c in ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
              for t in ("block", "cup", "bottle", "apple", "bowl")]
    places = ["in the blue bowl", "on the left", "on the right", "next to the green block", "to me", "on the top shelf",
              "into the drawer", "on the tray", "near the sink", "in the corner"]
    closers = ["", "when you can", "and then wait", "for me", "right now", "without knocking anything over"]
    combos = [" ".join(w for w in (o, v, "the", t, p, c) if w) for o in openers for v in verbs for t in things
              for p in places for c in closers]
    np.random.default_rng(7).shuffle(combos)
    if count > len(combos):
        raise SystemExit(f"--embedded at most {len(combos)}")
    return combos[:count]


# ------------------------------------------------------------------ child processes
def child(role: str, dsn: str, tag: str, count: int, scratch: str) -> int:
    """``watcher``: print each lesson others add as it arrives; ``writer``: add ``count`` lessons after 'go'."""
    embedder = RandomEmbedder()
    say_lock = threading.Lock()

    def say(**event: Any) -> None:
        with say_lock:
            print(json.dumps(event), flush=True)

    store = PgMemoryStore(dsn, robot_id=tag, spool_dir=Path(scratch) / f"spool-{tag}", embedder=embedder,
                          listen=role == "watcher")
    if role == "watcher":
        store.on_change = lambda change: [say(seen=i, t=time.monotonic()) for i in change.added]
    say(ready=tag)
    sys.stdin.readline()  # go (the watcher: stop)
    started = time.monotonic()
    for i in range(count if role == "writer" else 0):
        text = f"{tag} lesson {i}: wipe the table number {i}"
        store.add(InteractionExample(id=f"{tag}-{i}", profile="tabletop", transcript=transcript(text)))
    say(done=tag, seconds=time.monotonic() - started)
    store.close()
    return 0


def spawn(role: str, dsn: str, tag: str, count: int, scratch: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--child", role, dsn, tag, str(count), str(scratch)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    line = proc.stdout.readline() if proc.stdout else ""
    if '"ready"' not in line:
        raise RuntimeError(f"{role} {tag} did not start: {line!r}")
    return proc


def measure_reach(dsn: str, count: int, scratch: Path) -> dict[str, Any]:
    """Seconds from a robot's add call to another process's store holding the lesson (LISTEN/NOTIFY)."""
    watcher = spawn("watcher", dsn, "watcher", 0, scratch)
    seen: dict[str, float] = {}
    reader = threading.Thread(target=lambda: [seen.setdefault(e["seen"], e["t"]) for e in _events(watcher.stdout)
                                              if "seen" in e], daemon=True)
    reader.start()
    adder = PgMemoryStore(dsn, robot_id="adder", spool_dir=scratch / "spool-adder", embedder=RandomEmbedder(), listen=False)
    sent: dict[str, float] = {}
    try:
        for i in range(count):
            example_id = f"reach-{i}"
            sent[example_id] = time.monotonic()
            adder.add(InteractionExample(id=example_id, profile="tabletop", transcript=transcript(f"reach lesson {i}")))
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while len(seen.keys() & sent.keys()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        adder.close()
        watcher.communicate("stop\n", timeout=30)
    delays = [seen[i] - t for i, t in sent.items() if i in seen]
    return {**C.summary([d * 1000 for d in delays], 1), "arrived": len(delays), "sent": count}


def _events(lines: Any) -> Any:
    """The JSON events among a child's output lines (anything else a library printed is skipped)."""
    for line in lines:
        if line.startswith("{"):
            yield json.loads(line)


def measure_adds(dsn: str, per_writer: int, scratch: Path) -> dict[str, Any]:
    """Three writer processes add ``per_writer`` lessons each, all at once: lessons per second over the wall time."""
    writers = [spawn("writer", dsn, f"w{n}", per_writer, scratch) for n in range(3)]
    started = time.monotonic()
    for proc in writers:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = [list(_events(proc.communicate(timeout=1800)[0].splitlines()))[-1] for proc in writers]
    wall = time.monotonic() - started
    if any(proc.returncode for proc in writers):
        raise RuntimeError("a writer failed")
    return {"writers": 3, "adds": 3 * per_writer, "wall_s": round(wall, 2), "adds_per_s": round(3 * per_writer / wall, 1),
            "per_writer_per_s": [round(per_writer / r["seconds"], 1) for r in results]}


# ------------------------------------------------------------------ main
def main() -> None:
    p = C.parser(__doc__.splitlines()[0], runs=200, smoke={"runs": 3, "sizes": [500], "reach": 2, "adds": 3, "embedded": 50})
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="lessons per database (ascending)")
    p.add_argument("--reach", type=int, default=50, help="lessons timed from one robot to another (default 50)")
    p.add_argument("--adds", type=int, default=200, help="lessons per writer for adds per second (default 200)")
    p.add_argument("--dsn", default="", help="an existing server with pgvector (default: a private one)")
    p.add_argument("--embedded", type=int, default=20_000,
                   help="lessons keyed by real all-MiniLM-L6-v2 embeddings for the recall check (default 20000; 0: none)")
    p.add_argument("--child", nargs=5, help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        raise SystemExit(child(args.child[0], args.child[1], args.child[2], int(args.child[3]), args.child[4]))
    sizes = sorted(args.sizes)
    scratch = Path(tempfile.mkdtemp(prefix="teachbot-bench-fleet-"))
    server = None
    settings = {"shared_buffers": "1GB", "maintenance_work_mem": "4GB", "max_parallel_maintenance_workers": "1",
                "max_wal_size": "8GB", "checkpoint_timeout": "30min"}
    try:
        if args.dsn:
            admin = args.dsn
        else:
            bin_dir = bin_dir_for("pgvector")
            if bin_dir is None:
                raise SystemExit("pgserver (PostgreSQL with pgvector) is not installed: make setup")
            server = PgServer(bin_dir, fsync=True, settings=settings)  # as a real server: commits reach the disk
            server.start()
            admin = server.dsn
            C.say(f"private pgvector server in {server.root} ({', '.join(f'{k}={v}' for k, v in settings.items())})")
        by_size: dict[int, dict[str, Any]] = {}
        reach = adds = embedded = None
        if args.embedded:
            C.say(f"{args.embedded} lessons keyed by all-MiniLM-L6-v2 embeddings: recall of the HNSW retrieval ...")
            embedded = measure_embedded(admin, args.embedded, scratch)
            C.say(f"  recall@{K} {embedded['recall_at_k']} (by ef_search: {embedded['recall_by_ef_search']}), retrieve with "
                  f"the model: median {embedded['retrieve_with_model_ms']['median']} ms")
        for size in sizes:
            name = f"bench_fleet_{size}_{os.getpid()}"
            dsn = _create_database(admin, name)
            try:
                C.say(f"{size} lessons: loading with COPY and building the HNSW index ...")
                load = bulk_load(dsn, size, seed=size)
                C.say(f"  loaded in {load['copy_total_s']} s, index built in {load['index_build_s']} s")
                sizes_mb = disk(dsn)
                C.say(f"  disk: {sizes_mb}")
                result = measure_retrieval(dsn, size, args.runs, scratch)
                r = result["retrieve_ms"]
                C.say(f"  retrieve: median {r['median']} ms, p90 {r.get('p90')} ms, recall@{K} {result['recall_at_k']}, "
                      f"store opened in {result['open_s']} s")
                by_size[size] = {**load, **sizes_mb, **result}
                if size == sizes[0]:
                    reach = measure_reach(dsn, args.reach, scratch)
                    C.say(f"  reach: median {reach['median']} ms, max {reach['max']} ms ({reach['arrived']} of {reach['sent']})")
                    adds = measure_adds(dsn, args.adds, scratch)
                    C.say(f"  adds: {adds['adds_per_s']} per second with 3 writers")
            finally:
                _drop_database(admin, name)
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(scratch, ignore_errors=True)
    largest = by_size[sizes[-1]]
    median = largest["retrieve_ms"]["median"]
    reach_s = reach["median"] / 1000 if reach and reach["median"] is not None else None
    goals = {"retrieve_ms": {"size": sizes[-1], "median": median, **C.goal_fields(median, GOAL_RETRIEVE_MS)},
             "reach_s": {"median": reach_s, "max": reach["max"] / 1000 if reach and reach["max"] is not None else None,
                         **C.goal_fields(reach["max"] / 1000 if reach and reach["max"] is not None else None, GOAL_REACH_S)}}
    C.emit({"benchmark": "fleet_memory", "unit": "ms", "runs": args.runs, "size": sizes[-1], "median": median,
            "p90": largest["retrieve_ms"].get("p90"), **C.goal_fields(median, GOAL_RETRIEVE_MS),
            "meets_goal": all(g["meets_goal"] for g in goals.values()), "goals": goals,
            "by_size": {str(k): v for k, v in by_size.items()}, "embedded": embedded, "reach_ms": reach, "adds": adds,
            "server": "pgserver PostgreSQL 16 + pgvector 0.6.2" if server else "given --dsn",
            "settings": settings if server else {}, "machine": C.machine(), "loadavg_during": os.getloadavg()})


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def _create_database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    parts = conninfo.conninfo_to_dict(admin)
    parts["dbname"] = name
    return conninfo.make_conninfo(**parts)


def _drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
