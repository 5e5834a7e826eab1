"""The episodic memory store: read-only seed transcripts plus a directory of learned examples.

Layout (``memory_store/`` in the share dir unless configured otherwise)::

    memory_store/<profile>/*.txt   seed examples, one hand-written console transcript per file
    memory_store/learned/<id>.json one learned example per file, with provenance
    memory_store/learned/.lock     flock'ed around writes (duplicate-id check + write)
    memory_store/learned/quarantine/  unreadable files and stale partial writes, moved aside
    memory_store/learned/.cache/examples.snapshot  a rebuildable cache of the parsed examples

There is no shared index: listing is reading the directory. Every write goes to a temp file in the
same directory, is fsync'ed, renamed over the final name and the directory is fsync'ed, so a
``kill -9`` at any point leaves either the whole example or none of it (plus, at worst, a dot-named
temp file that loading ignores and later quarantines). Several processes may add at once. A write
that fails (a full disk: ENOSPC) leaves the stored examples as they were and is a MemoryStoreError
saying so and what to do (``write_failure``), never a bare OSError that would take the memory node down.

The example files stay the only source of truth. To start quickly with many of them, a scan that had
to parse many files writes ``.cache/examples.snapshot``: the parsed examples with each file's inode,
size, mtime and ctime. A later start takes an example from it only when its file still has exactly
that signature (one stat instead of open + read + JSON); anything else is read from the file. Entries
whose ctime was under a second old when it was written are left out (a change in the same clock tick
would not show), and the file is checksummed, so a stale, torn or missing snapshot costs time only.
It also carries a fingerprint of this module and of the example module (their source files) and the
Python version: a snapshot written by other code is ignored, so what it holds was parsed and
validated exactly as a file read now would be.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import hashlib
import json
import logging
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from teachbot.memory import example as example_module
from teachbot.memory.example import (
    LEARNED,
    SEED,
    InteractionExample,
    MemoryStoreError,
    UnknownExampleError,
    validate_learned,
)
from teachbot.memory.records import prepare_learned, read_learned_jsonl, read_seeds
from teachbot.memory.store_protocol import ImportReport
from teachbot.storage.files import QUARANTINE, SUFFIX, TEMP_SUFFIX, file_lock, fsync_dir, quarantine, sweep_temp, write_atomic, write_jsonl

log = logging.getLogger(__name__)

# Directory mtimes have coarse granularity: while the last change is this recent, a refresh rescans
# even if the mtime looks unchanged, so a change in the same clock tick is never missed.
_RACY_NS = 1_000_000_000
SNAPSHOT_DIR = ".cache"
SNAPSHOT_NAME = "examples.snapshot"
SNAPSHOT_MIN = 512  # a scan reads or writes the snapshot only for at least this many new examples
_SNAPSHOT_MAGIC = b"TBSNAP03"
_SNAPSHOT_HEAD = struct.Struct("<8sI")  # magic, length of the JSON header that follows
_FIELDS = tuple(f.name for f in dataclasses.fields(InteractionExample))
_TEXT_FIELDS = tuple(name for name in _FIELDS if name != "instructions")
_INSTRUCTIONS_AT = _FIELDS.index("instructions")


class MemoryStore:
    """Seed and learned interaction examples; learned ones persisted atomically, one file each.

    ``seeds_dir`` holds ``<profile>/*.txt`` (None: no seeds). Thread-safe; safe across processes.
    ``version`` changes whenever the set of examples this object sees changes (for index sync).
    """

    def __init__(self, learned_dir: str | Path, seeds_dir: str | Path | None = None, stale_temp_seconds: float = 60.0) -> None:
        self.learned_dir = Path(learned_dir)
        self.seeds_dir = Path(seeds_dir) if seeds_dir is not None else None
        self.stale_temp_seconds = stale_temp_seconds
        try:
            self.learned_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MemoryStoreError(f"cannot create the learned example directory {self.learned_dir}: {exc.strerror}; "
                                   "set store.learned_dir in config/memory.yaml to a writable directory") from None
        self._lock = threading.RLock()
        self._seeds: dict[str, InteractionExample] = {}
        self._learned: dict[str, InteractionExample] = {}
        self._signatures: dict[str, tuple[int, int, int, int]] = {}  # id -> its file's signature when read (snapshot)
        self._dir_mtime: int | None = None
        self._version = 0
        self.reload_seeds()
        self.refresh()

    # ------------------------------------------------------------------ reading
    @property
    def version(self) -> int:
        return self._version

    @property
    def quarantine_dir(self) -> Path:
        return self.learned_dir / QUARANTINE

    def __len__(self) -> int:
        self.refresh()
        return len(self._seeds) + len(self._learned)

    def __contains__(self, example_id: object) -> bool:
        self.refresh()
        return example_id in self._seeds or example_id in self._learned

    def get(self, example_id: str) -> InteractionExample:
        """The example with this id; UnknownExampleError if there is none."""
        self.refresh()
        with self._lock:
            found = self._seeds.get(example_id) or self._learned.get(example_id)
        if found is None:
            raise UnknownExampleError(f"no example with id {example_id!r}; list() shows the stored ids")
        return found

    def list(self, profile: str = "", source: str = "") -> list[InteractionExample]:
        """Examples matching the filters ('' matches all): seeds by id, then learned oldest first."""
        if source not in ("", SEED, LEARNED):
            raise MemoryStoreError(f"unknown source filter {source!r}; use '{SEED}', '{LEARNED}' or ''")
        self.refresh()
        with self._lock:
            seeds = sorted(self._seeds.values(), key=lambda e: e.id) if source in ("", SEED) else []
            learned = sorted(self._learned.values(), key=lambda e: (e.created, e.id)) if source in ("", LEARNED) else []
        return [e for e in seeds + learned if not profile or e.profile == profile]

    def snapshot(self) -> tuple[int, list[InteractionExample]]:
        """``version`` and every example it stands for, consistently, without refreshing (call refresh() first)."""
        with self._lock:
            return self._version, [*self._seeds.values(), *self._learned.values()]

    def refresh(self) -> bool:
        """Pick up learned examples other processes added or removed; cheap (one stat) when nothing changed."""
        with self._lock:
            try:
                mtime = os.stat(self.learned_dir).st_mtime_ns
            except FileNotFoundError:
                raise MemoryStoreError(f"the learned example directory {self.learned_dir} was removed") from None
            if mtime == self._dir_mtime and time.time_ns() - mtime > _RACY_NS:
                return False
            self._dir_mtime = mtime
            return self._scan()

    def reload_seeds(self) -> None:
        """(Re)read ``<seeds_dir>/<profile>/*.txt``; seeds are read-only here."""
        seeds = read_seeds(self.seeds_dir, skip=self.learned_dir)
        with self._lock:
            if seeds != self._seeds:
                self._seeds = seeds
                self._version += 1

    # ------------------------------------------------------------------ writing
    def add(self, example: InteractionExample, confirmed: bool = False) -> str:
        """Persist a learned example and return its id (generated when empty).

        ``created`` is filled with the current UTC time and ``instructions`` from the transcript when
        empty. A duplicate id, an invalid id or a missing profile/transcript raises MemoryStoreError.
        ``confirmed`` changes nothing here: a robot's own files are shared with no other robot.
        """
        return self._add(example)[0].id

    def _add(self, example: InteractionExample) -> tuple[InteractionExample, int]:
        """add(), returning the example as stored and ``version`` just before it went in (it is one more after)."""
        prepared = prepare_learned(example)
        validate_learned(prepared)
        try:
            with self._lock, self._file_lock():
                before = self._version
                if not self._add_locked(prepared):
                    raise MemoryStoreError(f"an example with id {prepared.id!r} already exists; remove it first or leave id empty")
        except OSError as exc:  # write_atomic removed its temp file: the store is as it was
            raise MemoryStoreError(write_failure(exc, f"the example {prepared.id!r}", self.learned_dir,
                                                 "memory.store.learned_dir")) from None
        return prepared, before

    def remove(self, example_id: str) -> None:
        """Delete a learned example. Seeds are files to edit by hand; unknown ids raise UnknownExampleError."""
        with self._lock:
            if example_id in self._seeds:
                raise MemoryStoreError(f"{example_id!r} is a seed example (read-only); delete its file under {self.seeds_dir}")
            path = self._path(example_id)
            with self._file_lock():
                try:
                    path.unlink()
                except FileNotFoundError:
                    self._learned.pop(example_id, None)
                    self._signatures.pop(example_id, None)
                    raise UnknownExampleError(f"no learned example with id {example_id!r}") from None
                fsync_dir(self.learned_dir)
            self._signatures.pop(example_id, None)
            if self._learned.pop(example_id, None) is not None:
                self._version += 1

    def export_jsonl(self, path: str | Path, profile: str = "", source: str = LEARNED) -> int:
        """Write the matching examples to one JSON Lines file (atomically); returns how many."""
        return write_jsonl(path, (e.to_dict() for e in self.list(profile=profile, source=source)))

    def import_jsonl(self, path: str | Path) -> ImportReport:
        """Add the learned examples of a JSON Lines export, skipping ids already stored and seed records.

        The whole file is validated before anything is written; an error names the line.
        """
        examples, seeds = read_learned_jsonl(path)
        self.refresh()
        report = ImportReport(skipped=seeds)
        with self._lock, self._file_lock():
            for example in examples:
                (report.added if self._add_locked(example) else report.skipped).append(example.id)
        return report

    # ------------------------------------------------------------------ internals
    def _path(self, example_id: str) -> Path:
        return self.learned_dir / f"{example_id}{SUFFIX}"

    def _file_lock(self) -> contextlib.AbstractContextManager[None]:
        return file_lock(self.learned_dir)

    def _add_locked(self, example: InteractionExample) -> bool:
        """Write unless the id exists (caller holds both locks); False for a duplicate."""
        path = self._path(example.id)
        if example.id in self._seeds or path.exists():
            return False
        write_atomic(path, (json.dumps(example.to_dict(), ensure_ascii=False, indent=1) + "\n").encode())
        self._learned[example.id] = example
        self._version += 1
        return True

    def _scan(self) -> bool:
        names = os.listdir(self.learned_dir)
        on_disk = {name[: -len(SUFFIX)] for name in names if name.endswith(SUFFIX) and not name.startswith(".")}
        for name in names:
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                self._check_temp(self.learned_dir / name)
        changed = False
        for gone in self._learned.keys() - on_disk:
            del self._learned[gone]
            self._signatures.pop(gone, None)
            changed = True
        new = sorted(on_disk - self._learned.keys())
        if new:
            with _gc_paused(len(new) >= SNAPSHOT_MIN), _directory_fd(self.learned_dir) as dir_fd:
                changed = self._load_new(new, len(on_disk), dir_fd) or changed
        if changed:
            self._version += 1
        return changed

    def _load_new(self, new: list[str], on_disk: int, dir_fd: int | None) -> bool:
        """Load the examples ``new`` (sorted ids), from the snapshot where their files are unchanged."""
        snapshot = self._read_snapshot() if len(new) >= SNAPSHOT_MIN and 4 * len(new) >= on_disk else {}
        changed, parsed = False, 0
        learned, signatures, stat_ = self._learned, self._signatures, os.stat
        for example_id in new:
            cached = snapshot.get(example_id)
            if cached is not None:
                try:
                    info = stat_(example_id + SUFFIX, dir_fd=dir_fd) if dir_fd is not None else stat_(self._path(example_id))
                except FileNotFoundError:
                    continue  # removed by another process since the listing
                except OSError:
                    info = None  # read below, which says why
                if info is not None:
                    signature = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)  # as _signature()
                    if signature == cached[0]:  # the file as parsed and validated when the snapshot was written
                        learned[example_id] = cached[1]  # (its instructions were in the file: nothing to derive)
                        signatures[example_id] = signature
                        changed = True
                        continue
            example = self._load(example_id, dir_fd)
            parsed += 1
            if example is not None:
                learned[example_id] = example
                changed = True
        if parsed >= SNAPSHOT_MIN and 16 * parsed >= len(self._learned):
            self._write_snapshot()
        return changed

    def _load(self, example_id: str, dir_fd: int | None = None) -> InteractionExample | None:
        path = self._path(example_id)
        try:
            fd = os.open(example_id + SUFFIX, os.O_RDONLY, dir_fd=dir_fd) if dir_fd is not None else os.open(path, os.O_RDONLY)
            try:
                info = os.fstat(fd)
                data = _read_all(fd, info)
            finally:
                os.close(fd)
            record = json.loads(data)
            example = InteractionExample.from_dict(record, str(path))
            validate_learned(example)
            if example.id != example_id:
                raise MemoryStoreError(f"{path}: id {example.id!r} does not match the file name")
        except FileNotFoundError:
            return None  # removed by another process since the listing
        except OSError as exc:  # not a regular file, no permission: leave it where it is
            log.warning("memory store: %s cannot be read (%s); ignored", path, OSError(exc.errno, exc.strerror, str(path)))
            return None
        except (ValueError, MemoryStoreError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            self._quarantine(path, f"unreadable example ({exc})")
            return None
        if example.instructions and stat.S_ISREG(info.st_mode):  # derived ones are derived again, never cached
            self._signatures[example_id] = _signature(info)
        return example.with_derived_instructions()

    # ------------------------------------------------------------------ snapshot (a cache; the files are the truth)
    @property
    def _snapshot_path(self) -> Path:
        return self.learned_dir / SNAPSHOT_DIR / SNAPSHOT_NAME

    def _read_snapshot(self) -> dict[str, tuple[tuple[int, int, int, int], InteractionExample]]:
        """id -> (file signature, example as read then) from the snapshot; {} when there is none or it is damaged."""
        if _code_fingerprint() is None:
            return {}
        try:
            data = self._snapshot_path.read_bytes()
            return _decode_snapshot(data)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            log.info("memory store: ignoring the example snapshot %s (%s); examples are read from their files", self._snapshot_path, exc)
            return {}

    def _write_snapshot(self) -> None:
        """Snapshot of the examples with a known file signature whose ctime is over a second old."""
        if _code_fingerprint() is None:
            return
        cutoff = time.time_ns() - _RACY_NS
        entries = [(self._learned[i], sig) for i, sig in self._signatures.items() if sig[3] < cutoff and i in self._learned]
        directory = self.learned_dir / SNAPSHOT_DIR
        try:
            directory.mkdir(exist_ok=True)
            for old in directory.glob(f".{SNAPSHOT_NAME}.*{TEMP_SUFFIX}"):  # left by a killed writer
                with contextlib.suppress(OSError):
                    if time.time() - old.stat().st_mtime > self.stale_temp_seconds:
                        old.unlink()
            data = _encode_snapshot(entries)
            fd, tmp = tempfile.mkstemp(prefix=f".{SNAPSHOT_NAME}.", suffix=TEMP_SUFFIX, dir=directory)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, self._snapshot_path)  # no fsync: a lost or torn snapshot is only ignored
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except (OSError, TypeError, ValueError) as exc:  # only a cache: never let it fail a scan
            log.info("memory store: could not write the example snapshot in %s (%s); start-up will read every file", directory, exc)

    def _check_temp(self, path: Path) -> None:
        """A dot-named temp file is a write in progress, or one a killed writer left: quarantine old ones."""
        sweep_temp(path, self.quarantine_dir, self.stale_temp_seconds, log, "memory store")

    def _quarantine(self, path: Path, why: str) -> None:
        quarantine(path, self.quarantine_dir, why, log, "memory store")


def write_failure(exc: OSError, what: str, directory: Path, config_key: str) -> str:
    """The message for a write into ``directory`` that failed with ``exc``: the cause, what was kept, what to do."""
    where = f"set {config_key} in config/memory.yaml to another disk"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"cannot store {what}: the disk holding {directory} is full ({exc.strerror}); it was not stored and "
                f"nothing stored before was changed. Free space on that disk, or {where}")
    return (f"cannot store {what} in {directory}: {exc.strerror or exc}; it was not stored and nothing stored before "
            f"was changed. Check that the directory is writable, or {where}")


def _signature(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _read_all(fd: int, info: os.stat_result) -> bytes:
    data = os.read(fd, info.st_size + 1)
    if stat.S_ISREG(info.st_mode) and len(data) <= info.st_size:
        return data  # a short read of a regular file is its end
    chunks = [data]
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _directory_fd(directory: Path) -> Iterator[int | None]:
    """The directory open, for opening its files by name (None where os.open takes no dir_fd)."""
    if os.open not in os.supports_dir_fd or os.stat not in os.supports_dir_fd:
        yield None
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _gc_paused(active: bool) -> Iterator[None]:
    """No cyclic garbage collection meanwhile: loading many examples allocates only live objects."""
    if not active or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_fingerprint: list[str | None] = []


def _code_fingerprint() -> str | None:
    """sha256 of the source of this module and the example module, and the Python version (None if unreadable)."""
    if not _fingerprint:

        digest = hashlib.sha256(f"{sys.version_info[:3]} {_FIELDS}".encode())
        try:
            for module_file in (__file__, example_module.__file__):
                digest.update(Path(module_file).read_bytes())
        except (OSError, TypeError):  # no source files (frozen, zipped): no snapshots
            _fingerprint.append(None)
        else:
            _fingerprint.append(digest.hexdigest())
    return _fingerprint[0]


_SIGNATURE = np.dtype([("ino", "<i8"), ("size", "<i8"), ("mtime_ns", "<i8"), ("ctime_ns", "<i8")])


def _encode_snapshot(entries: list[tuple[InteractionExample, tuple[int, int, int, int]]]) -> bytes:
    """Header (JSON), then: signatures int64[n,4], instruction counts int32[n], string references int32[m] and
    the table of distinct strings (lengths int64[u], UTF-8 text).

    The m references go column by column (every id, then every profile, ...), then every example's
    instructions; equal strings are stored once (and shared once read back, as repeated fields are).
    """
    examples = [example for example, _ in entries]
    table: dict[str, int] = {}
    refs: list[int] = []
    for name in _TEXT_FIELDS:
        refs.extend(table.setdefault(getattr(example, name), len(table)) for example in examples)
    for example in examples:
        refs.extend(table.setdefault(text, len(table)) for text in example.instructions)
    text = "".join(table).encode("utf-8", "surrogatepass")
    body = b"".join([
        np.asarray([sig for _, sig in entries], dtype=np.int64).reshape(len(entries), 4).tobytes(),
        np.asarray([len(example.instructions) for example in examples], dtype=np.int32).tobytes(),
        np.asarray(refs, dtype=np.int32).tobytes(),
        np.asarray([len(s) for s in table], dtype=np.int64).tobytes(),
        text,
    ])
    header = json.dumps({"fields": list(_FIELDS), "code": _code_fingerprint(), "count": len(entries), "refs": len(refs),
                         "strings": len(table), "text_bytes": len(text), "crc32": zlib.crc32(body)}).encode()
    return _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, len(header)) + header + body


def _decode_snapshot(data: bytes) -> dict[str, tuple[tuple[int, int, int, int], InteractionExample]]:
    magic, header_size = _SNAPSHOT_HEAD.unpack_from(data)
    if magic != _SNAPSHOT_MAGIC:
        raise ValueError("not an example snapshot of this format")
    header = json.loads(data[_SNAPSHOT_HEAD.size:_SNAPSHOT_HEAD.size + header_size])
    if header["fields"] != list(_FIELDS) or header["code"] != _code_fingerprint():
        raise ValueError("written by another version")
    n, m, u, text_bytes = (int(header[key]) for key in ("count", "refs", "strings", "text_bytes"))
    start = _SNAPSHOT_HEAD.size + header_size
    if len(data) - start != 36 * n + 4 * m + 8 * u + text_bytes or zlib.crc32(memoryview(data)[start:]) != header["crc32"]:
        raise ValueError("damaged (size or checksum)")
    signatures = np.frombuffer(data, dtype=_SIGNATURE, count=n, offset=start).tolist()  # tuples
    counts = np.frombuffer(data, dtype=np.int32, count=n, offset=start + 32 * n)
    refs = np.frombuffer(data, dtype=np.int32, count=m, offset=start + 36 * n)
    ends = np.cumsum(np.frombuffer(data, dtype=np.int64, count=u, offset=start + 36 * n + 4 * m)).tolist()
    text = data[start + 36 * n + 4 * m + 8 * u:].decode("utf-8", "surrogatepass")
    width = len(_TEXT_FIELDS)
    if ((ends[-1] if ends else 0) != len(text) or int(counts.sum()) + width * n != m or (counts < 0).any()
            or (m and (int(refs.min()) < 0 or int(refs.max()) >= u))):
        raise ValueError("inconsistent")
    distinct = np.empty(u, dtype=object)
    distinct[:] = [text[a:b] for a, b in zip([0, *ends[:-1]], ends)]
    strings = distinct[refs].tolist()
    columns = [strings[i * n:(i + 1) * n] for i in range(width)]
    flat = strings[width * n:]
    bounds = np.cumsum(counts).tolist()
    columns.insert(_INSTRUCTIONS_AT, [tuple(flat[a:b]) for a, b in zip([0, *bounds[:-1]], bounds)])
    examples = map(InteractionExample, *columns)
    return dict(zip(columns[_FIELDS.index("id")], zip(signatures, examples)))
