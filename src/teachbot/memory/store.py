"""The episodic memory store: read-only seed transcripts plus a directory of learned examples.

Layout (``memory_store/`` in the share dir unless configured otherwise)::

    memory_store/<profile>/*.txt   seed examples, one hand-written console transcript per file
    memory_store/learned/<id>.json one learned example per file, with provenance
    memory_store/learned/.lock     flock'ed around writes (duplicate-id check + write)
    memory_store/learned/quarantine/  unreadable files and stale partial writes, moved aside

There is no shared index: listing is reading the directory. Every write goes to a temp file in the
same directory, is fsync'ed, renamed over the final name and the directory is fsync'ed, so a
``kill -9`` at any point leaves either the whole example or none of it (plus, at worst, a dot-named
temp file that loading ignores and later quarantines). Several processes may add at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from teachbot.console.transcript import Transcript
from teachbot.memory.example import (
    LEARNED,
    SEED,
    InteractionExample,
    MemoryStoreError,
    UnknownExampleError,
    utc_now_iso,
    validate_learned,
)

log = logging.getLogger(__name__)

SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"
LOCK_NAME = ".lock"
QUARANTINE = "quarantine"
# Directory mtimes have coarse granularity: while the last change is this recent, a refresh rescans
# even if the mtime looks unchanged, so a change in the same clock tick is never missed.
_RACY_NS = 1_000_000_000


@dataclass(frozen=True)
class ImportReport:
    """Ids written by an import, and ids skipped because the store already had them."""

    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


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
        seeds: dict[str, InteractionExample] = {}
        if self.seeds_dir is not None and self.seeds_dir.is_dir():
            learned = self.learned_dir.resolve()
            for folder in sorted(p for p in self.seeds_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
                if folder.resolve() == learned:
                    continue
                for path in sorted(folder.glob("*.txt")):
                    example = _read_seed(path, folder.name)
                    if example is not None:
                        seeds[example.id] = example
        with self._lock:
            if seeds != self._seeds:
                self._seeds = seeds
                self._version += 1

    # ------------------------------------------------------------------ writing
    def add(self, example: InteractionExample) -> str:
        """Persist a learned example and return its id (generated when empty).

        ``created`` is filled with the current UTC time and ``instructions`` from the transcript when
        empty. A duplicate id, an invalid id or a missing profile/transcript raises MemoryStoreError.
        """
        prepared = _prepare(example)
        validate_learned(prepared)
        with self._lock, self._file_lock():
            if not self._add_locked(prepared):
                raise MemoryStoreError(f"an example with id {prepared.id!r} already exists; remove it first or leave id empty")
        return prepared.id

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
                    raise UnknownExampleError(f"no learned example with id {example_id!r}") from None
                _fsync_dir(self.learned_dir)
            if self._learned.pop(example_id, None) is not None:
                self._version += 1

    def export_jsonl(self, path: str | Path, profile: str = "", source: str = LEARNED) -> int:
        """Write the matching examples to one JSON Lines file (atomically); returns how many."""
        examples = self.list(profile=profile, source=source)
        data = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in examples).encode()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, data)
        return len(examples)

    def import_jsonl(self, path: str | Path) -> ImportReport:
        """Add the learned examples of a JSON Lines export, skipping ids already stored and seed records.

        The whole file is validated before anything is written; an error names the line.
        """
        path = Path(path)
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise MemoryStoreError(f"cannot read {path}: {exc}") from None
        examples, seeds = [], []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MemoryStoreError(f"{where}: not JSON ({exc.msg})") from None
            example = InteractionExample.from_dict(record, where)
            if example.source == SEED:
                seeds.append(example.id)  # seeds are files shipped with the package, never imported
                continue
            example = _prepare(example)
            try:
                validate_learned(example)
            except MemoryStoreError as exc:
                raise MemoryStoreError(f"{where}: {exc}") from None
            examples.append(example)
        self.refresh()
        report = ImportReport(skipped=seeds)
        with self._lock, self._file_lock():
            for example in examples:
                (report.added if self._add_locked(example) else report.skipped).append(example.id)
        return report

    # ------------------------------------------------------------------ internals
    def _path(self, example_id: str) -> Path:
        return self.learned_dir / f"{example_id}{SUFFIX}"

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        fd = os.open(self.learned_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock (and so does the kernel when a holder is killed)

    def _add_locked(self, example: InteractionExample) -> bool:
        """Write unless the id exists (caller holds both locks); False for a duplicate."""
        path = self._path(example.id)
        if example.id in self._seeds or path.exists():
            return False
        _write_atomic(path, (json.dumps(example.to_dict(), ensure_ascii=False, indent=1) + "\n").encode())
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
            changed = True
        for new in sorted(on_disk - self._learned.keys()):
            example = self._load(new)
            if example is not None:
                self._learned[new] = example
                changed = True
        if changed:
            self._version += 1
        return changed

    def _load(self, example_id: str) -> InteractionExample | None:
        path = self._path(example_id)
        try:
            record = json.loads(path.read_bytes())
            example = InteractionExample.from_dict(record, str(path))
            validate_learned(example)
            if example.id != example_id:
                raise MemoryStoreError(f"{path}: id {example.id!r} does not match the file name")
        except FileNotFoundError:
            return None  # removed by another process since the listing
        except OSError as exc:  # not a regular file, no permission: leave it where it is
            log.warning("memory store: %s cannot be read (%s); ignored", path, exc)
            return None
        except (ValueError, MemoryStoreError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            self._quarantine(path, f"unreadable example ({exc})")
            return None
        return example.with_derived_instructions()

    def _check_temp(self, path: Path) -> None:
        """A dot-named temp file is a write in progress, or one a killed writer left: quarantine old ones."""
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return
        if age > self.stale_temp_seconds:
            self._quarantine(path, f"partial write left by an interrupted writer ({age:.0f} s old)")

    def _quarantine(self, path: Path, why: str) -> None:
        target = self.quarantine_dir / f"{path.name.lstrip('.')}.{time.time_ns()}"
        try:
            self.quarantine_dir.mkdir(exist_ok=True)
            os.replace(path, target)
        except FileNotFoundError:
            return  # another process moved it first
        except OSError as exc:
            log.warning("memory store: %s: %s; could not move it aside (%s), ignoring it", path, why, exc)
            return
        log.warning("memory store: %s: %s; moved to %s", path, why, target)


def _prepare(example: InteractionExample) -> InteractionExample:
    return example.replace(
        id=example.id or uuid.uuid4().hex,
        source=example.source or LEARNED,
        created=example.created or utc_now_iso(),
    ).with_derived_instructions()


def _read_seed(path: Path, profile: str) -> InteractionExample | None:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("memory store: seed example %s cannot be read (%s); skipped", path, exc)
        return None
    instructions = tuple(Transcript.parse(text).instructions())
    if not instructions:
        log.warning("memory store: seed example %s has no wait_for_trigger()/ask() turn; it will never be retrieved", path)
    return InteractionExample(id=f"seed:{profile}/{path.stem}", profile=profile, source=SEED, transcript=text.strip(),
                              instructions=instructions)


def _write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename over ``path``, fsync the directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
