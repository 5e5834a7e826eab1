"""Retrieval of interaction examples by the similarity of their user turns to the newest instructions.

DESIGN.md "Retrieval score": with I^1 the newest of the N most recent instructions and E a normalised
embedding, the query is e = sum_i gamma^(i-1) E(I^i); an example H with keys I_H^j scores
S(H) = max_j e . E(I_H^j). The top-k examples are returned with the most similar LAST (closest to the
current transcript in the prompt). Examples without keys are never retrieved.

All keys live in one float32 matrix, rows of an example contiguous, so scoring is one mat-vec plus a
``maximum.reduceat``; adding appends rows, removing marks them dead and compacts now and then.
A large index is scored in a few slices of whole examples on as many threads (numpy lets go of the
GIL); every row's dot product is computed exactly as in one pass, so the scores are the same bits.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from teachbot.memory.embedding import CachedEmbedder, Embedder
from teachbot.memory.example import InteractionExample


@dataclass(frozen=True)
class RetrievalConfig:
    """``k`` examples by default; ``recent`` newest instructions form the query, weighted by ``gamma``."""

    k: int = 16
    gamma: float = 0.6
    recent: int = 3


@dataclass(frozen=True)
class Retrieved:
    """One retrieved example, its score S(H) and the key that achieved it."""

    example: InteractionExample
    score: float
    best_key: str


def query_vector(newest_first: np.ndarray, gamma: float) -> np.ndarray:
    """e = sum_i gamma^(i-1) E(I^i) over embedding rows ordered newest first."""
    weights = gamma ** np.arange(len(newest_first), dtype=np.float32)
    return (weights[:, None] * newest_first).sum(axis=0).astype(np.float32)


# Below this many key rows one pass is quicker than handing a slice to another thread.
PARALLEL_MIN_ROWS = 32_768
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _scoring_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def _scoring_pool() -> ThreadPoolExecutor | None:
    """Helper threads for scoring slices (the caller scores one slice itself); None on one CPU."""
    global _pool
    if _pool is None and _scoring_threads() > 1:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(_scoring_threads() - 1, thread_name_prefix="teachbot-retrieval")
    return _pool


class Retriever:
    """An in-memory key index over interaction examples; thread-safe."""

    def __init__(self, embedder: Embedder, config: RetrievalConfig | None = None) -> None:
        self.embedder = embedder
        self.config = config or RetrievalConfig()
        self._lock = threading.RLock()
        self._rows = np.zeros((0, 0), dtype=np.float32)  # key embeddings, capacity rows
        self._n_rows = 0
        self._starts = np.zeros(0, dtype=np.int64)  # first row of each slot
        self._alive = np.zeros(0, dtype=bool)
        self._profile = np.zeros(0, dtype=np.int32)
        self._examples: list[InteractionExample] = []  # by slot
        self._slot: dict[str, int] = {}  # example id -> slot
        self._profiles: dict[str, int] = {}
        self._dead_rows = 0

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, example_id: object) -> bool:
        return example_id in self._slot

    @property
    def ids(self) -> set[str]:
        with self._lock:
            return set(self._slot)

    # ------------------------------------------------------------------ index maintenance
    def add(self, examples: Iterable[InteractionExample]) -> int:
        """Index examples (their keys embedded in one batch); ids already indexed are replaced. Returns how many were indexed."""
        batch, counts, texts = [], [], []
        for e in examples:
            keys = e.keys
            if keys:
                batch.append(e)
                counts.append(len(keys))
                texts.extend(keys)
        if not batch:
            return 0
        vectors = self.embedder.embed(texts)
        with self._lock:
            self.remove(e.id for e in batch)
            self._append(batch, vectors, counts)
        return len(batch)

    def remove(self, example_ids: Iterable[str]) -> int:
        """Forget examples by id (unknown ids are ignored); returns how many were removed."""
        removed = 0
        with self._lock:
            for example_id in example_ids:
                slot = self._slot.pop(example_id, None)
                if slot is None:
                    continue
                self._alive[slot] = False
                self._dead_rows += self._slot_rows(slot)
                removed += 1
            if self._dead_rows > max(1024, self._n_rows // 4):
                self._compact()
        return removed

    def sync(self, examples: Iterable[InteractionExample]) -> tuple[int, int]:
        """Make the index hold exactly ``examples`` (by id): embed only the new ones. Returns (added, removed)."""
        wanted = {e.id: e for e in examples}
        with self._lock:
            stale = [i for i, slot in self._slot.items()
                     if (e := wanted.get(i)) is None or (e is not self._examples[slot] and e != self._examples[slot])]
            removed = self.remove(stale)
            added = self.add(e for i, e in wanted.items() if i not in self._slot)
        return added, removed

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, newest_first: Sequence[str], profile: str = "", k: int | None = None) -> list[Retrieved]:
        """Top-k examples for the instructions (NEWEST FIRST, as in RetrieveExamples.srv), most similar last.

        ``profile`` '' searches every profile; ``k`` None or 0 uses the configured default.
        """
        recent = [t for t in newest_first if t.strip()][: self.config.recent]
        k = k or self.config.k
        if not recent or k <= 0:
            return []
        query = query_vector(self.embedder.embed(recent), self.config.gamma)
        with self._lock:
            best = self._slot_scores(query, profile)
            valid = int(np.count_nonzero(best > -np.inf))
            if valid == 0:
                return []
            top = min(k, valid)
            chosen = np.argpartition(-best, top - 1)[:top]
            order = sorted(chosen.tolist(), key=lambda s: (best[s], self._examples[s].id))
            return [self._retrieved(slot, query, float(best[slot])) for slot in order]

    def _slot_scores(self, query: np.ndarray, profile: str) -> np.ndarray:
        """S(H) per slot; -inf for removed slots and other profiles."""
        n_slots = len(self._examples)
        if n_slots == 0:
            return np.zeros(0, dtype=np.float32)
        if profile and profile not in self._profiles:
            return np.full(n_slots, -np.inf, dtype=np.float32)
        best = self._best_per_slot(query, n_slots)
        mask = self._alive[:n_slots]
        if profile:
            mask = mask & (self._profile[:n_slots] == self._profiles[profile])
        best[~mask] = -np.inf
        return best

    def _best_per_slot(self, query: np.ndarray, n_slots: int) -> np.ndarray:
        """max_j e . E(I_H^j) for every slot (dead ones too), as a new float32 array."""
        best = np.empty(n_slots, dtype=np.float32)
        pool = _scoring_pool() if self._n_rows >= PARALLEL_MIN_ROWS else None
        parts = 1 if pool is None else min(_scoring_threads(), n_slots)
        bounds = [n_slots * i // parts for i in range(parts + 1)]
        futures = [pool.submit(self._score_slots, query, best, bounds[i], bounds[i + 1]) for i in range(1, parts)] if pool else []
        self._score_slots(query, best, bounds[0], bounds[1])
        for future in futures:
            future.result()
        return best

    def _score_slots(self, query: np.ndarray, out: np.ndarray, first: int, end: int) -> None:
        """Scores of slots [first, end) into ``out``: their rows are contiguous, so one slice of the matrix."""
        if first >= end:
            return
        row0 = int(self._starts[first])
        row1 = int(self._starts[end]) if end < len(self._examples) else self._n_rows
        # einsum, not BLAS gemv: OpenBLAS threads on a busy 2-core machine made the mat-vec 3-6x slower
        scores = np.einsum("ij,j->i", self._rows[row0:row1], query)
        out[first:end] = np.maximum.reduceat(scores, self._starts[first:end] - row0)

    def _retrieved(self, slot: int, query: np.ndarray, score: float) -> Retrieved:
        start = int(self._starts[slot])
        rows = self._rows[start:start + self._slot_rows(slot)]
        example = self._examples[slot]
        return Retrieved(example, score, example.keys[int(np.argmax(rows @ query))])

    # ------------------------------------------------------------------ storage
    def _slot_rows(self, slot: int) -> int:
        end = self._starts[slot + 1] if slot + 1 < len(self._examples) else self._n_rows
        return int(end - self._starts[slot])

    def _append(self, batch: list[InteractionExample], vectors: np.ndarray, counts: list[int]) -> None:
        """Slots for ``batch`` (in order; ``counts[i]`` key rows each) over the rows ``vectors``."""
        n_new, dim = vectors.shape
        if self._rows.shape[1] != dim:
            if self._n_rows:
                raise ValueError(f"embedder {self.embedder.name!r} changed dimension from {self._rows.shape[1]} to {dim}")
            self._rows = np.zeros((0, dim), dtype=np.float32)
        if not self._adopt(vectors):
            self._rows = _grow(self._rows, self._n_rows + n_new)
            self._rows[self._n_rows:self._n_rows + n_new] = vectors
        first_slot = len(self._examples)
        n_slots = first_slot + len(batch)
        self._starts, self._alive, self._profile = (_grow(a, n_slots) for a in (self._starts, self._alive, self._profile))
        sizes = np.asarray(counts, dtype=np.int64)
        ends = np.cumsum(sizes)
        self._starts[first_slot:n_slots] = self._n_rows + ends - sizes
        self._alive[first_slot:n_slots] = True
        profiles = self._profiles
        self._profile[first_slot:n_slots] = [profiles.setdefault(e.profile, len(profiles)) for e in batch]
        self._examples.extend(batch)
        self._slot.update(zip([e.id for e in batch], range(first_slot, n_slots)))
        self._n_rows += int(ends[-1])

    def _adopt(self, vectors: np.ndarray) -> bool:
        """Make a first, large batch the matrix itself (no copy): a fresh array from our own CachedEmbedder only.

        Building the index of a large store then touches its ~1.5 KB per key once, not twice; the spare
        rows come from growing the array in place (realloc, so the pages are not copied either).
        """
        if (self._n_rows or len(vectors) < PARALLEL_MIN_ROWS or not isinstance(self.embedder, CachedEmbedder)
                or vectors.dtype != np.float32 or not vectors.flags.c_contiguous or not vectors.flags.owndata):
            return False
        try:
            vectors.resize(_capacity(0, len(vectors)), vectors.shape[1], refcheck=False)
        except ValueError:
            return False
        self._rows = vectors
        return True

    def _compact(self) -> None:
        """Drop the rows of removed examples (O(n); amortised over many removals)."""
        keep = [s for s in range(len(self._examples)) if self._alive[s]]
        examples = [self._examples[s] for s in keep]
        counts = [self._slot_rows(s) for s in keep]
        pieces = [self._rows[self._starts[s]:self._starts[s] + n] for s, n in zip(keep, counts)]
        dim = self._rows.shape[1]
        self._rows, self._n_rows, self._dead_rows = np.zeros((0, dim), dtype=np.float32), 0, 0
        self._starts, self._alive, self._profile = np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int32)
        self._examples, self._slot = [], {}
        if examples:
            self._append(examples, np.concatenate(pieces), counts)


def _grow(array: np.ndarray, needed: int) -> np.ndarray:
    """``array`` with capacity for ``needed`` leading entries: 1/8 spare, growing by half (appends amortised O(1)).

    The spare room means the first add after loading a large index does not copy the whole matrix.
    """
    if len(array) >= needed:
        return array
    capacity = _capacity(len(array), needed)
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def _capacity(current: int, needed: int) -> int:
    return max(needed + needed // 8, current + current // 2, 64)
