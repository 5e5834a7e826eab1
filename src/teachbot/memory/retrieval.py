"""Retrieval of interaction examples by the similarity of their user turns to the newest instructions.

DESIGN.md "Retrieval score": with I^1 the newest of the N most recent instructions and E a normalised
embedding, the query is e = sum_i gamma^(i-1) E(I^i); an example H with keys I_H^j scores
S(H) = max_j e . E(I_H^j). The top-k examples are returned with the most similar LAST (closest to the
current transcript in the prompt). Examples without keys are never retrieved.

All keys live in one float32 matrix, rows of an example contiguous, so scoring is one mat-vec plus a
``maximum.reduceat``; adding appends rows, removing marks them dead and compacts now and then.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from teachbot.memory.embedding import Embedder
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
        batch = [e for e in examples if e.keys]
        if not batch:
            return 0
        texts = [key for e in batch for key in e.keys]
        vectors = self.embedder.embed(texts)
        with self._lock:
            self.remove(e.id for e in batch)
            self._append(batch, vectors)
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
        # einsum, not BLAS gemv: OpenBLAS threads on a busy 2-core machine made the mat-vec 3-6x slower
        scores = np.einsum("ij,j->i", self._rows[: self._n_rows], query)
        best = np.maximum.reduceat(scores, self._starts[:n_slots])
        mask = self._alive[:n_slots]
        if profile:
            mask = mask & (self._profile[:n_slots] == self._profiles[profile])
        return np.where(mask, best, -np.inf).astype(np.float32)

    def _retrieved(self, slot: int, query: np.ndarray, score: float) -> Retrieved:
        start = int(self._starts[slot])
        rows = self._rows[start:start + self._slot_rows(slot)]
        example = self._examples[slot]
        return Retrieved(example, score, example.keys[int(np.argmax(rows @ query))])

    # ------------------------------------------------------------------ storage
    def _slot_rows(self, slot: int) -> int:
        end = self._starts[slot + 1] if slot + 1 < len(self._examples) else self._n_rows
        return int(end - self._starts[slot])

    def _append(self, batch: list[InteractionExample], vectors: np.ndarray) -> None:
        n_new, dim = vectors.shape
        if self._rows.shape[1] != dim:
            if self._n_rows:
                raise ValueError(f"embedder {self.embedder.name!r} changed dimension from {self._rows.shape[1]} to {dim}")
            self._rows = np.zeros((0, dim), dtype=np.float32)
        self._rows = _grow(self._rows, self._n_rows + n_new)
        self._rows[self._n_rows:self._n_rows + n_new] = vectors
        first_slot = len(self._examples)
        n_slots = first_slot + len(batch)
        self._starts, self._alive, self._profile = (_grow(a, n_slots) for a in (self._starts, self._alive, self._profile))
        row = self._n_rows
        for offset, example in enumerate(batch):
            slot = first_slot + offset
            self._starts[slot] = row
            self._alive[slot] = True
            self._profile[slot] = self._profiles.setdefault(example.profile, len(self._profiles))
            self._examples.append(example)
            self._slot[example.id] = slot
            row += len(example.keys)
        self._n_rows = row

    def _compact(self) -> None:
        """Drop the rows of removed examples (O(n); amortised over many removals)."""
        keep = [s for s in range(len(self._examples)) if self._alive[s]]
        examples = [self._examples[s] for s in keep]
        pieces = [self._rows[self._starts[s]:self._starts[s] + self._slot_rows(s)] for s in keep]
        dim = self._rows.shape[1]
        self._rows, self._n_rows, self._dead_rows = np.zeros((0, dim), dtype=np.float32), 0, 0
        self._starts, self._alive, self._profile = np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int32)
        self._examples, self._slot = [], {}
        if examples:
            self._append(examples, np.concatenate(pieces))


def _grow(array: np.ndarray, needed: int) -> np.ndarray:
    """``array`` with capacity for ``needed`` leading entries (doubling, so appends are amortised O(1))."""
    if len(array) >= needed:
        return array
    capacity = max(needed, 2 * len(array), 64)
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown
