#!/usr/bin/env python3
"""Episodic memory retrieval latency with 100, 1 000 and 10 000 stored examples, and the time to embed one query.

Synthetic learned examples (1-3 user turns each, drawn from a pool of templated instructions) are
written to a store in a temp directory through MemoryStore.add (atomic, fsync'ed), then retrieved
through EpisodicMemory.retrieve with three-instruction queries whose embeddings are cached (as in a
session, where the same instructions are re-queried every step): that is store refresh + index sync
check + scoring + top-k. The real all-MiniLM-L6-v2 embeds the pool once; its vectors persist under
out/bench-memory-cache, so later runs embed nothing. Query embedding (a new text, through the model)
is timed separately. Goal: retrieval median under 20 ms at 10 000 examples, roughly flat growth.

Usage: python bench/memory_retrieval.py [--runs 300] [--sizes 100 1000 10000]
"""

from __future__ import annotations

import _common as C

C.setup()

import random  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

GOAL_MEDIAN_MS = 20.0
CACHE_DIR = C.REPO / "out" / "bench-memory-cache"

VERBS = ["put", "move", "place", "bring", "hand me", "stack", "push", "give me", "pick up", "drop"]
THINGS = [f"{color} {thing}" for color in ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
          for thing in ("block", "cup", "bottle", "apple", "bowl")]
PLACES = ["in the blue bowl", "on the left", "on the right", "next to the green block", "to me", "on the top shelf",
          "into the drawer", "on the tray", "near the sink", "in the corner"]


def instruction_pool(size: int, rng: random.Random) -> list[str]:
    combos = [f"{v} the {t} {p}" for v in VERBS for t in THINGS for p in PLACES]
    rng.shuffle(combos)
    return combos[:size]


def main() -> None:
    p = C.parser(__doc__.splitlines()[0], runs=300)
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000])
    p.add_argument("--pool", type=int, default=4000, help="distinct synthetic instructions (default 4000)")
    args = p.parse_args()
    from teachbot.memory import (
        CachedEmbedder,
        EmbeddingCache,
        EpisodicMemory,
        InteractionExample,
        MemoryStore,
        RetrievalConfig,
        SentenceTransformerEmbedder,
    )
    from teachbot.memory.embedding import text_key

    rng = random.Random(0)
    pool = instruction_pool(args.pool, rng)
    model = SentenceTransformerEmbedder()
    embedder = CachedEmbedder(model, EmbeddingCache(CACHE_DIR, model.name))
    load_s, _ = C.timed(lambda: model.embed(["warm up"]))
    missing = sum(v is None for v in embedder.cache.lookup([text_key(t) for t in pool]))
    pool_s, _ = C.timed(lambda: embedder.embed(pool))  # once; cached for this and later runs
    C.say(f"model load + first embed {load_s:.2f} s; pool of {len(pool)} instructions: {missing} embedded in {pool_s:.1f} s")

    novel = [f"please {rng.choice(VERBS)} the {rng.choice(THINGS)} {rng.choice(PLACES)} #{time.time_ns()}-{i}" for i in range(30)]
    query_ms = []
    for text in novel:
        seconds, _ = C.timed(lambda text=text: model.embed([text]))
        query_ms.append(seconds * 1e3)
    query_stats = C.summary(query_ms, 3)
    C.say(f"embedding one new query (model, CPU): median {query_stats['median']} ms")

    by_size = {}
    with tempfile.TemporaryDirectory(prefix="teachbot-bench-memory-") as tmp:
        store = MemoryStore(Path(tmp) / "learned")
        memory = EpisodicMemory(store, embedder, RetrievalConfig(k=16))
        add_ms: list[float] = []
        stored = 0
        for size in sorted(args.sizes):
            while stored < size:
                n, stored = stored, stored + 1
                turns = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
                transcript = "\n".join(f">>> wait_for_trigger()\n{{'type': 'dialog', 'text': {t!r}}}\n>>> say('ok')" for t in turns)
                example = InteractionExample(id=f"ex{n}", profile="tabletop", transcript=transcript)
                seconds, _ = C.timed(lambda example=example: store.add(example))
                add_ms.append(seconds * 1e3)
            sync_s, _ = C.timed(memory.sync)
            time.sleep(1.1)  # past the store's racy-mtime window: steady state
            memory.retrieve(pool[:3])
            latencies = []
            for _ in range(args.runs):
                query = rng.sample(pool, 3)
                seconds, results = C.timed(lambda query=query: memory.retrieve(query))
                if len(results) != min(16, size):
                    raise RuntimeError(f"retrieved {len(results)} of {size}")
                latencies.append(seconds * 1e3)
            stats = C.summary(latencies, 3)
            p99 = round(C.percentile(latencies, 99), 3)
            keys = sum(len(e.keys) for e in store.list())
            by_size[str(size)] = {"median": stats["median"], "p99": p99, "keys": keys, "index_sync_s": round(sync_s, 3), "stats": stats}
            C.say(f"{size:>6} examples ({keys} keys): retrieval median {stats['median']} ms, p99 {p99} ms "
                  f"(index sync {sync_s:.2f} s)")
        after_add = []  # a lesson arrives, then the next step retrieves: rescan + index one example
        for i in range(20):
            example = InteractionExample(id=f"late{i}", profile="tabletop", transcript=f">>> wait_for_trigger()\n{{'text': {pool[i]!r}}}")
            seconds, _ = C.timed(lambda example=example: (memory.add(example), memory.retrieve(rng.sample(pool, 3))))
            after_add.append(seconds * 1e3)
        after_add_stats = C.summary(after_add, 3)
        C.say(f"add + next retrieval at {len(store)} examples: median {after_add_stats['median']} ms")
    add_stats = C.summary(add_ms, 3)
    C.say(f"store.add (atomic, fsync'ed): median {add_stats['median']} ms over {len(add_ms)} adds")

    largest = by_size[str(max(args.sizes))]
    smallest = by_size[str(min(args.sizes))]
    growth = round(largest["median"] / smallest["median"], 2) if smallest["median"] else None
    C.say(f"growth {min(args.sizes)} -> {max(args.sizes)}: x{growth}")
    C.emit({
        "benchmark": "memory_retrieval", "unit": "ms", "runs": args.runs, "size": max(args.sizes),
        "median": largest["median"], "p99": largest["p99"], **C.goal_fields(largest["median"], GOAL_MEDIAN_MS),
        "growth_ratio": growth, "by_size": by_size,
        "query_embedding_ms": {"median": query_stats["median"], "p90": query_stats.get("p90")},
        "add_ms": {"median": add_stats["median"], "p90": add_stats.get("p90")},
        "add_then_retrieve_ms": {"median": after_add_stats["median"], "max": after_add_stats["max"]},
        "pool": {"size": len(pool), "embedded_now": missing, "seconds": round(pool_s, 2)}, "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
