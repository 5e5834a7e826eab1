"""The knowledge base on disk: one JSON file per distilled entry, with the example store's guarantees.

Layout (``memory_store/knowledge/`` unless ``memory.store.knowledge_dir`` in config/memory.yaml says
otherwise)::

    <dir>/<id>.json       one KnowledgeEntry (KnowledgeEntry.to_dict), written atomically
    <dir>/.lock           flock'ed around writes (duplicate-id check + write, remove)
    <dir>/quarantine/     unreadable files and stale partial writes, moved aside (never deleted)

As in ``teachbot.memory.store``: there is no index, listing is reading the directory; every write goes
to a dot-named temp file in the same directory, is fsync'ed, renamed over the final name and the
directory is fsync'ed (``teachbot.storage.files``), so a ``kill -9`` at any point leaves the whole
entry or none of it, and several processes may add at once. A store object notices what other
processes added or removed (one stat of the directory when nothing changed). A write that fails (a
full disk) is a KnowledgeError saying so and what to do; the stored entries stay as they were.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path

from teachbot.knowledge.entry import KINDS, KnowledgeEntry, KnowledgeError, UnknownEntryError, utc_now_iso
from teachbot.knowledge.store_protocol import KnowledgeImportReport
from teachbot.memory.store import write_failure
from teachbot.storage.files import SUFFIX, TEMP_SUFFIX, file_lock, fsync_dir, quarantine, sweep_temp, write_atomic, write_jsonl

log = logging.getLogger(__name__)

QUARANTINE_NAME = "quarantine"
# While the directory's last change is this recent, a refresh rescans even if its mtime looks unchanged
# (directory mtimes have coarse granularity: a change in the same clock tick must not be missed).
_RACY_NS = 1_000_000_000
_WHAT = "knowledge store"


class KnowledgeStore:
    """Knowledge entries persisted one file each in ``directory``. Thread-safe; safe across processes.

    ``version`` changes whenever the set of entries this object sees changes (for caches built on it).
    """

    def __init__(self, directory: str | Path, stale_temp_seconds: float = 60.0) -> None:
        self.directory = Path(directory)
        self.stale_temp_seconds = stale_temp_seconds
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KnowledgeError(f"cannot create the knowledge directory {self.directory}: {exc.strerror}; set "
                                 "memory.store.knowledge_dir in config/memory.yaml to a writable directory") from None
        self._lock = threading.RLock()
        self._entries: dict[str, KnowledgeEntry] = {}
        self._signatures: dict[str, tuple[int, int, int]] = {}  # id -> (inode, size, mtime_ns) of its file when read
        self._dir_mtime: int | None = None
        self._version = 0
        self.refresh()

    # ------------------------------------------------------------------ reading
    @property
    def version(self) -> int:
        return self._version

    @property
    def quarantine_dir(self) -> Path:
        return self.directory / QUARANTINE_NAME

    def __len__(self) -> int:
        self.refresh()
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        self.refresh()
        return entry_id in self._entries

    def get(self, entry_id: str) -> KnowledgeEntry:
        """The entry with this id; UnknownEntryError if there is none."""
        self.refresh()
        with self._lock:
            found = self._entries.get(entry_id)
        if found is None:
            raise UnknownEntryError(f"no knowledge entry with id {entry_id!r}; `teachbot memory knowledge list` shows the stored ids")
        return found

    def list(self, kind: str = "", object: str = "", task: str = "", scope: str = "") -> list[KnowledgeEntry]:  # noqa: A002
        """Entries oldest first, filtered ('' matches all): ``kind``/``scope`` exactly, ``object``/``task`` as
        case-insensitive substrings of the entry's object and task."""
        if kind and kind not in KINDS:
            raise KnowledgeError(f"unknown kind filter {kind!r}; use one of {', '.join(KINDS)}")
        self.refresh()
        with self._lock:
            entries = sorted(self._entries.values(), key=lambda e: (e.created, e.id))
        obj, text = object.casefold(), task.casefold()
        return [e for e in entries if (not kind or e.kind == kind) and (not scope or e.scope == scope)
                and obj in e.object.casefold() and text in e.task.casefold()]

    def snapshot(self) -> tuple[int, list[KnowledgeEntry]]:
        """``version`` and every entry, consistently (after a refresh)."""
        self.refresh()
        with self._lock:
            return self._version, list(self._entries.values())

    def refresh(self) -> bool:
        """Pick up entries other processes added or removed; cheap (one stat) when nothing changed."""
        with self._lock:
            try:
                mtime = os.stat(self.directory).st_mtime_ns
            except FileNotFoundError:
                raise KnowledgeError(f"the knowledge directory {self.directory} was removed") from None
            if mtime == self._dir_mtime and time.time_ns() - mtime > _RACY_NS:
                return False
            self._dir_mtime = mtime
            changed = self._scan()
            if changed:
                self._version += 1
            return changed

    # ------------------------------------------------------------------ writing
    def add(self, entry: KnowledgeEntry) -> str:
        """Persist an entry and return its id (generated when empty; ``provenance.created`` filled when empty).

        A duplicate id raises KnowledgeError.
        """
        prepared = _prepare(entry)
        try:
            with self._lock, file_lock(self.directory):
                if not self._add_locked(prepared):
                    raise KnowledgeError(f"a knowledge entry with id {prepared.id!r} already exists; remove it first or leave id empty")
        except OSError as exc:  # write_atomic removed its temp file: the store is as it was
            raise KnowledgeError(write_failure(exc, f"the knowledge entry {prepared.id!r}", self.directory,
                                               "memory.store.knowledge_dir")) from None
        return prepared.id

    def remove(self, entry_id: str) -> None:
        """Delete an entry; an unknown id raises UnknownEntryError."""
        if not isinstance(entry_id, str) or not entry_id or "/" in entry_id or entry_id.startswith("."):
            raise UnknownEntryError(f"no knowledge entry with id {entry_id!r}")
        with self._lock:
            with file_lock(self.directory):
                try:
                    self._path(entry_id).unlink()
                except FileNotFoundError:
                    self._forget(entry_id)
                    raise UnknownEntryError(f"no knowledge entry with id {entry_id!r}") from None
                fsync_dir(self.directory)
            if self._forget(entry_id):
                self._version += 1

    def export_jsonl(self, path: str | Path, kind: str = "", object: str = "", task: str = "") -> int:  # noqa: A002
        """Write the matching entries to one JSON Lines file (atomically); returns how many."""
        return write_jsonl(path, (e.to_dict() for e in self.list(kind=kind, object=object, task=task)))

    def import_jsonl(self, path: str | Path) -> KnowledgeImportReport:
        """Add the entries of a JSON Lines export: ids already stored are skipped, bad lines are reported
        (``report.errors``, each 'file:line: why') and the good ones imported."""
        path = Path(path)
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise KnowledgeError(f"cannot read {path}: {exc}") from None
        report = KnowledgeImportReport()
        entries = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                entries.append(_prepare(KnowledgeEntry.from_dict(json.loads(line), where)))
            except json.JSONDecodeError as exc:
                report.errors.append(f"{where}: not JSON ({exc.msg})")
            except KnowledgeError as exc:
                report.errors.append(str(exc))
        self.refresh()
        with self._lock, file_lock(self.directory):
            for entry in entries:
                (report.added if self._add_locked(entry) else report.skipped).append(entry.id)
        return report

    # ------------------------------------------------------------------ internals
    def _path(self, entry_id: str) -> Path:
        return self.directory / f"{entry_id}{SUFFIX}"

    def _forget(self, entry_id: str) -> bool:
        self._signatures.pop(entry_id, None)
        return self._entries.pop(entry_id, None) is not None

    def _add_locked(self, entry: KnowledgeEntry) -> bool:
        """Write unless the id exists (caller holds both locks); False for a duplicate."""
        path = self._path(entry.id)
        if path.exists():
            return False
        write_atomic(path, (json.dumps(entry.to_dict(), ensure_ascii=False, indent=1) + "\n").encode())
        self._entries[entry.id] = entry
        try:
            info = path.stat()
            self._signatures[entry.id] = (info.st_ino, info.st_size, info.st_mtime_ns)
        except FileNotFoundError:  # removed by another process already
            self._forget(entry.id)
        self._version += 1
        return True

    def _scan(self) -> bool:
        """Bring the entries in line with the directory (caller holds ``_lock``); True when something changed."""
        names = os.listdir(self.directory)
        on_disk = {name[: -len(SUFFIX)] for name in names if name.endswith(SUFFIX) and not name.startswith(".")}
        for name in names:
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                sweep_temp(self.directory / name, self.quarantine_dir, self.stale_temp_seconds, log, _WHAT)
        changed = False
        for gone in self._entries.keys() - on_disk:
            changed = self._forget(gone) or changed
        for entry_id in sorted(on_disk):
            try:
                info = self._path(entry_id).stat()
            except FileNotFoundError:
                changed = self._forget(entry_id) or changed
                continue
            except OSError:
                info = None
            if info is not None and self._signatures.get(entry_id) == (info.st_ino, info.st_size, info.st_mtime_ns):
                continue  # unchanged since read
            entry = self._load(entry_id)
            if entry is None:
                changed = self._forget(entry_id) or changed
            elif self._entries.get(entry_id) != entry:
                self._entries[entry_id] = entry
                changed = True
        return changed

    def _load(self, entry_id: str) -> KnowledgeEntry | None:
        path = self._path(entry_id)
        try:
            with open(path, "rb") as handle:
                info = os.fstat(handle.fileno())
                data = handle.read()
            entry = KnowledgeEntry.from_dict(json.loads(data), str(path))
            if entry.id != entry_id:
                raise KnowledgeError(f"{path}: id {entry.id!r} does not match the file name")
        except FileNotFoundError:
            return None  # removed by another process since the listing
        except OSError as exc:  # not a regular file, no permission: leave it where it is
            log.warning("%s: %s cannot be read (%s); ignored", _WHAT, path, exc)
            return None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError and KnowledgeError are ValueErrors
            quarantine(path, self.quarantine_dir, f"unreadable entry ({exc})", log, _WHAT)
            return None
        self._signatures[entry_id] = (info.st_ino, info.st_size, info.st_mtime_ns)
        return entry


def _prepare(entry: KnowledgeEntry) -> KnowledgeEntry:
    """The entry as stored: an id and a creation time."""
    changes: dict = {}
    if not entry.id:
        changes["id"] = uuid.uuid4().hex
    if not entry.provenance.created:
        changes["provenance"] = {"created": utc_now_iso()}
    return entry.replace(**changes) if changes else entry
