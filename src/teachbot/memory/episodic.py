"""Episodic memory as one object: the store, the embedder and a retrieval index kept in step with it.

The memory node wraps this: add/list/remove/export/import go to ``memory.store`` (or ``add`` here,
which also stamps the embedding model and indexes at once), retrieval goes through ``retrieve``,
which first picks up whatever other processes wrote to the store.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from teachbot.language.transcript import Transcript
from teachbot.memory.config import MemoryConfig
from teachbot.memory.embedding import Embedder, SentenceTransformerEmbedder, cached
from teachbot.memory.example import InteractionExample
from teachbot.memory.retrieval import RetrievalConfig, Retrieved, Retriever
from teachbot.memory.store import SNAPSHOT_MIN, MemoryStore, _gc_paused
from teachbot.memory.store_protocol import ExampleStore


class EpisodicMemory:
    """A MemoryStore plus a Retriever over it."""

    def __init__(self, store: ExampleStore, embedder: Embedder, retrieval: RetrievalConfig | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.retriever = Retriever(embedder, retrieval)
        self._lock = threading.Lock()
        self._seen_version = -1

    @classmethod
    def open(cls, config: MemoryConfig | str | Path | None = None, embedder: Embedder | None = None) -> EpisodicMemory:
        """From a MemoryConfig or a config file (default config/memory.yaml). The model loads lazily, on first need."""
        if not isinstance(config, MemoryConfig):
            config = MemoryConfig.load(config)
        if embedder is not None:
            return cls(MemoryStore(config.learned_dir, config.seeds_dir), embedder, config.retrieval)
        model = SentenceTransformerEmbedder(config.model_path, config.model_name, config.device, config.batch_size)
        # The embedding cache reads its file (I/O and checksums, mostly outside the GIL) while the store
        # reads the examples: with a large store the two take about as long, so start-up takes about half.
        with ThreadPoolExecutor(1, thread_name_prefix="teachbot-memory-open") as pool:
            pending = pool.submit(cached, model, config.cache_dir)
            try:
                store = MemoryStore(config.learned_dir, config.seeds_dir)
            finally:
                embedder = pending.result()  # its error, if any, wins only when the store opened
        return cls(store, embedder, config.retrieval)

    def sync(self) -> bool:
        """Bring the index in step with the store (embedding only new keys); True if anything changed."""
        with self._lock:
            self.store.refresh()
            if self.store.version == self._seen_version:
                return False
            version, examples = self.store.snapshot()
            with _gc_paused(len(examples) - len(self.retriever) >= SNAPSHOT_MIN):  # a large store being indexed
                added, removed = self.retriever.sync(examples)
            self._seen_version = version
            return bool(added or removed)

    def add(self, example: InteractionExample, confirmed: bool = False) -> str:
        """Store a learned example (its embedding model stamped) and index it; returns its id. ``confirmed``: the
        person confirmed it (the fleet store shares only such lessons)."""
        stamped = example if example.embedding_model else example.replace(embedding_model=self.embedder.name)
        if type(self.store).add is not MemoryStore.add:  # a store that adds in its own way: as it says
            example_id = self.store.add(stamped, confirmed=confirmed)
            self.sync()
            return example_id
        stored, before = self.store._add(stamped)
        with self._lock:
            if self._seen_version == before:  # the index was in step and this add is the only change since
                self.retriever.add([stored])  # no directory rescan: retrieve() picks up other processes' changes
                self._seen_version = before + 1
                return stored.id
        self.sync()
        return stored.id

    def remove(self, example_id: str) -> None:
        self.store.remove(example_id)
        self.sync()

    def warm_up(self) -> None:
        """Load the embedding model now (seconds), so the first new query text does not wait for it."""
        warm = getattr(self.embedder, "warm_up", None)  # a test double may have nothing to load
        if warm is not None:
            warm()

    def retrieve(self, newest_first: Sequence[str], profile: str = "", k: int | None = None) -> list[Retrieved]:
        """Top-k for the instructions, NEWEST FIRST; most similar last. See Retriever.retrieve."""
        self.sync()
        return self.retriever.retrieve(newest_first, profile, k)

    def retrieve_for(self, transcript: Transcript, profile: str = "", k: int | None = None) -> list[Retrieved]:
        """Top-k for the instructions in a transcript (which lists them oldest first)."""
        return self.retrieve(list(reversed(transcript.instructions())), profile, k)

    def __len__(self) -> int:
        return len(self.store)
