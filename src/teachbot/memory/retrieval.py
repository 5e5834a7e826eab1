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
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from teachbot.memory.embedding import CachedEmbedder, Embedder, _one_intra_op_thread
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
# From this many key rows on, a retrieval screens every row with a half-precision mat-vec (half the
# memory traffic of float32, through torch) and scores exactly only the slots that can
# still be in the top-k; the scan is memory-bound, so this about halves it at 100 000 examples.
FAST_MIN_ROWS = 32_768
HALF_SAFE_SCORE = 1024.0  # |q| * max |key| above this: no screening (float16 tops out at 65504)
QUERY_CACHE_SIZE = 256  # query texts whose embedding a Retriever keeps (a session re-queries its newest instructions)
_UNIT_ROUNDOFF_HALF = 2.0 ** -11
_UNIT_ROUNDOFF_SINGLE = 2.0 ** -24


def _half_error_bound(query_norm: float, max_key_norm: float, dim: int) -> float:
    """An upper bound on |screened score - exact float32 score| for any key row.

    Rounding the query and the key to float16 moves q . k by at most 2u |q||k| (u = 2^-11, to first
    order), float32 accumulation (both in the screen and in the exact score) by at most 2 d 2^-24 |q||k|,
    rounding the result to float16 by u |q||k|; one more u |q||k| and 2^-16 absolute (subnormals) spare.
    """
    scale = query_norm * max_key_norm
    return scale * (4.0 * _UNIT_ROUNDOFF_HALF + 2.0 * dim * _UNIT_ROUNDOFF_SINGLE) + 2.0 ** -16


_half_checked: list[bool] = []


def _half_mv_ok() -> bool:
    """torch is importable and its float16 mat-vec on this machine stays well inside _half_error_bound (checked once)."""
    if not _half_checked:
        ok = False
        try:
            import torch  # deferred: torch

            rng = np.random.default_rng(12345)
            dim = 384
            keys = rng.standard_normal((4096, dim)).astype(np.float32)
            keys /= np.linalg.norm(keys, axis=1, keepdims=True)
            keys[:64] = np.abs(keys[:64])  # rows aligned with the query: scores near |q|, the largest rounding
            query = (np.abs(rng.standard_normal(dim)) + 0.5).astype(np.float32)
            query *= 1.96 / np.linalg.norm(query)  # the largest query norm with gamma 0.6 over 3 instructions
            exact = keys.astype(np.float64) @ query.astype(np.float64)
            rough = torch.mv(torch.from_numpy(keys).half(), torch.from_numpy(query).half()).float().numpy()
            bound = _half_error_bound(float(np.linalg.norm(query)), 1.0, dim)
            ok = bool(np.all(np.abs(rough - exact) <= bound / 4))
        except Exception:  # no torch, no half kernels: the exact scan serves  # noqa: BLE001
            ok = False
        _half_checked.append(ok)
    return _half_checked[0]


def _top_k(slots: np.ndarray, scores: np.ndarray, k: int, examples: list[InteractionExample]) -> tuple[np.ndarray, np.ndarray]:
    """The k best (slot, score) pairs by (score, example id), in ascending order: most similar last."""
    if len(slots) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        need = k - len(above)
        if len(tied) > need:
            tied = np.asarray(sorted(tied.tolist(), key=lambda i: examples[slots[i]].id)[len(tied) - need:], dtype=np.intp)
        keep = np.concatenate([above, tied])
        slots, scores = slots[keep], scores[keep]
    order = sorted(range(len(slots)), key=lambda i: (scores[i], examples[slots[i]].id))
    return slots[order], scores[order]
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
        self._half: object | None = None  # torch float16 copy of the first _half_n rows (see _half_rows)
        self._half_n = 0
        self._max_norm = 0.0  # largest key row norm among those copied
        self._query_rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_lock = threading.Lock()

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
        query = query_vector(self._embed_query(recent), self.config.gamma)
        with self._lock:
            slots, scores = self._top_slots(query, profile, k)
            return [self._retrieved(int(slot), query, float(score)) for slot, score in zip(slots, scores)]

    def _embed_query(self, texts: list[str]) -> np.ndarray:
        """Rows for the query texts; a text embedded for a recent query is not embedded again (LRU by text)."""
        cache = self._query_rows
        with self._query_lock:
            found = [cache.get(text) for text in texts]
            for text, row in zip(texts, found):
                if row is not None:
                    cache.move_to_end(text)
        missing = list(dict.fromkeys(text for text, row in zip(texts, found) if row is None))
        if missing:
            fresh = dict(zip(missing, np.asarray(self.embedder.embed(missing), dtype=np.float32)))
            found = [fresh[text] if row is None else row for text, row in zip(texts, found)]
            with self._query_lock:
                for text, row in fresh.items():
                    cache[text] = row
                    cache.move_to_end(text)
                while len(cache) > QUERY_CACHE_SIZE:
                    cache.popitem(last=False)
        return np.stack(found)

    def _top_slots(self, query: np.ndarray, profile: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top-k slots (alive, of the profile) and their exact scores S(H), most similar last (caller holds _lock).

        Ties are broken by example id (the larger id counts as more similar), so the result is one
        well-defined list. A large index is screened with half-precision scores first (see _screen);
        the slots it keeps are scored exactly, so the result is the same as scoring every slot exactly.
        """
        n_slots = len(self._examples)
        if n_slots == 0 or (profile and profile not in self._profiles):
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float32)
        mask = self._alive[:n_slots]
        if profile:
            mask = mask & (self._profile[:n_slots] == self._profiles[profile])
        candidates = self._screen(query, mask, k) if self._n_rows >= FAST_MIN_ROWS else None
        if candidates is None:
            best = self._best_per_slot(query, n_slots)
            candidates = np.flatnonzero(mask)
            scores = best[candidates]
        else:
            scores = self._exact_scores(query, candidates)
        return _top_k(candidates, scores, k, self._examples)

    def _screen(self, query: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray | None:
        """Slots that may be in the exact top-k, from half-precision scores; None when screening does not apply.

        Every half-precision slot score is within ``delta`` of the exact one (see _half_error_bound),
        so a slot more than 2 * delta below the k-th best screened score has at least k slots above it
        exactly and cannot be in the top-k.
        """
        half = self._half_rows()
        if half is None:
            return None
        norm = float(np.linalg.norm(query))
        delta = _half_error_bound(norm, self._max_norm, query.shape[0])
        if not np.isfinite(norm) or norm * self._max_norm > HALF_SAFE_SCORE:
            return None
        import torch  # deferred: torch

        # One thread: the scan is memory-bound, and on a busy machine a second OpenMP thread waiting for a
        # core made it slower (16-25 ms instead of 12-15 ms at 200 000 rows on 2 shared cores).
        with _one_intra_op_thread(True):
            rough = torch.mv(half[: self._n_rows], torch.from_numpy(query.astype(np.float16))).float().numpy()
        n_slots = len(mask)
        best = np.maximum.reduceat(rough, self._starts[:n_slots])
        best[~mask] = -np.inf
        valid = int(np.count_nonzero(mask))
        if valid <= k:
            return np.flatnonzero(mask)
        kth = float(np.partition(best, n_slots - k)[n_slots - k])
        return np.flatnonzero(best >= kth - 2.0 * delta)

    def _exact_scores(self, query: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """S(H) of the given slots, computed row by row exactly as _score_slots does."""
        starts = self._starts[slots]
        ends = np.where(slots + 1 < len(self._examples), self._starts[np.minimum(slots + 1, len(self._examples) - 1)], self._n_rows)
        counts = ends - starts
        offsets = np.cumsum(counts) - counts
        rows = np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))
        scores = np.einsum("ij,j->i", self._rows[rows], query)
        return np.maximum.reduceat(scores, offsets)

    def _half_rows(self) -> object | None:
        """A float16 torch copy of the key rows, brought up to date (rows are only ever appended between
        compactions); None when torch is missing or its half-precision mat-vec fails the self-check."""
        if not _half_mv_ok():
            return None
        import torch  # deferred: torch

        if self._half is None or self._half.shape[0] < self._n_rows:
            grown = torch.empty((len(self._rows), self._rows.shape[1]), dtype=torch.float16)
            if self._half is not None:
                grown[: self._half_n] = self._half[: self._half_n]
            self._half = grown
        if self._half_n < self._n_rows:
            new = self._rows[self._half_n:self._n_rows]
            for start in range(0, len(new), 65_536):  # bounded temporaries
                part = new[start:start + 65_536]
                self._max_norm = max(self._max_norm, float(np.max(np.linalg.norm(part, axis=1), initial=0.0)))
                self._half[self._half_n + start:self._half_n + start + len(part)] = torch.from_numpy(np.ascontiguousarray(part))
            self._half_n = self._n_rows
        return self._half

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
        return Retrieved(example, score, example.keys[int(np.argmax(np.einsum("ij,j->i", rows, query)))])

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
        if (self._n_rows or len(vectors) < PARALLEL_MIN_ROWS or type(self.embedder) is not CachedEmbedder
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
        self._half, self._half_n, self._max_norm = None, 0, 0.0
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
