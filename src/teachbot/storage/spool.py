"""Records written while the fleet database is unreachable: one file each in a local spool directory.

The postgres backends of the example memory (teachbot.memory.pg_store) and of the knowledge base
(teachbot.knowledge.pg_store) queue what the database cannot take here, through the atomic-file helpers of
teachbot.storage.files (temp file, fsync, rename, fsync the directory), and write it into the database once
it is back, deleting each file only after its row is committed (a crash in between leaves the file; writing it
again is idempotent). A file that is not a readable record, or whose id the database holds with other content (or
that the database refuses), is moved to ``quarantine/``, never deleted; a temp file a killed writer left is moved
there once stale. A file that cannot be opened or read now (too many open files, a permission, an I/O error) is
left where it is and tried again (``deferred``): a transient error never sets a lesson aside. A lesson whose file
is in place when only the directory's fsync failed is stored (with a warning), not reported lost.

On disk a record is ``{"<field>": <the item>, "robot_id": ..., "shared": "fleet"|"robot"}`` (and ``"confirmed":
"person"`` for a lesson its person confirmed) named
``<id>.json``; ``field`` is ``example`` for lessons and ``entry`` for knowledge entries.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from teachbot.storage.files import (
    QUARANTINE,
    SUFFIX,
    TEMP_SUFFIX,
    DirectorySyncError,
    file_lock,
    fsync_dir,
    quarantine,
    sweep_temp,
    write_atomic,
)
from teachbot.storage.pg_link import SHARED_VALUES

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Spooled(Generic[T]):
    """An item waiting for the database: the item, the robot that wrote it and who sees it ('fleet' or 'robot')."""

    item: T
    robot_id: str
    shared: str
    confirmed: str = ""  # 'person': the robot's person confirmed it (the fleet memory's trust model); '' not


@dataclass(frozen=True)
class SpoolFormat(Generic[T]):
    """How one kind of item is spooled: its ``field`` in the record, ``encode`` to a JSON object, ``decode`` from one
    (``decode(data, where)`` raises ValueError, AttributeError or ``error`` on bad data), its ``id`` and ``created``
    (the order a flush writes in), ``what`` for log lines ("memory spool") and ``error`` for messages."""

    field: str
    encode: Callable[[T], dict[str, Any]]
    decode: Callable[[Any, str], T]
    id: Callable[[T], str]
    created: Callable[[T], str]
    what: str
    error: type[Exception]


class Spool(Generic[T]):
    """The spool directory of one store (several processes may share it: writes and flushes hold its lock)."""

    def __init__(self, directory: str | Path, form: SpoolFormat[T], stale_temp_seconds: float = 60.0) -> None:
        self.directory = Path(directory)
        self.form = form
        self.stale_temp_seconds = stale_temp_seconds
        self._deferred: set[str] = set()  # file names that could not be read at the last look (tried again later)
        self._told: set[tuple[str, int | None]] = set()  # (name, errno) already warned of
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise form.error(f"cannot create the {form.what} directory {self.directory}: {exc.strerror}; set "
                             "memory.store.spool_dir in config/memory.yaml to a writable directory") from None

    @property
    def quarantine_dir(self) -> Path:
        return self.directory / QUARANTINE

    @property
    def deferred(self) -> frozenset[str]:
        """The ids whose files could not be read at the last look (a transient error): still here, to be tried again."""
        return frozenset(name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name for name in self._deferred)

    def put(self, item: T, robot_id: str, shared: str, confirmed: str = "") -> None:
        """Write the item durably (atomic, fsync'ed); ``form.error`` when the disk refuses it."""
        record = {self.form.field: self.form.encode(item), "robot_id": robot_id, "shared": shared}
        if confirmed:
            record["confirmed"] = confirmed
        item_id = self.form.id(item)
        try:
            with file_lock(self.directory):
                write_atomic(self._path(item_id), (json.dumps(record, ensure_ascii=False) + "\n").encode())
        except DirectorySyncError as exc:  # the file is in place: it is read and written to the database like any other
            log.warning("%s: %s; %r is queued, but may not survive a power loss before the disk catches up",
                        self.form.what, exc.strerror, item_id)
        except OSError as exc:
            raise self.form.error(f"cannot queue {item_id!r} in {self.directory} while the database is unreachable: "
                                  f"{exc.strerror or exc}; it was not stored") from None

    def items(self) -> list[Spooled[T]]:
        """The spooled items, oldest first; files that are not records are quarantined, stale temp files swept, files
        that cannot be read now left for the next look (``deferred``)."""
        found: list[Spooled[T]] = []
        self._deferred.clear()
        try:
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            self._defer(str(self.directory), exc)
            return []
        for name in names:
            path = self.directory / name
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                sweep_temp(path, self.quarantine_dir, self.stale_temp_seconds, log, self.form.what)
                continue
            if name.startswith(".") or not name.endswith(SUFFIX):
                continue
            spooled = self._read(path)
            if spooled is not None:
                found.append(spooled)
        return sorted(found, key=lambda s: (self.form.created(s.item), self.form.id(s.item)))

    def load(self, item_id: str) -> Spooled[T] | None:
        """The spooled item with this id, or None (written and deleted by another process, or quarantined now)."""
        return self._read(self._path(item_id))

    def ids(self) -> set[str]:
        return {name[: -len(SUFFIX)] for name in os.listdir(self.directory) if name.endswith(SUFFIX) and not name.startswith(".")}

    def done(self, item_id: str) -> None:
        """The item is in the database (or withdrawn): delete its file, durably. A file that cannot be deleted stays
        (logged): writing it again later is idempotent."""
        try:
            self._path(item_id).unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("%s: cannot delete %s (%s); it is written again later, which changes nothing",
                        self.form.what, self._path(item_id), exc.strerror or exc)
            return
        try:
            fsync_dir(self.directory)
        except OSError as exc:
            log.warning("%s: fsync of %s failed after deleting %r (%s)", self.form.what, self.directory, item_id,
                        exc.strerror or exc)

    def reject(self, item_id: str, why: str) -> None:
        """The database will never take this item (its id holds another one): move it aside, with a warning."""
        quarantine(self._path(item_id), self.quarantine_dir, why, log, self.form.what)

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The spool's cross-process lock (a context manager), held around a flush."""
        return file_lock(self.directory)

    def _path(self, item_id: str) -> Path:
        return self.directory / f"{item_id}{SUFFIX}"

    def _read(self, path: Path) -> Spooled[T] | None:
        try:
            record = json.loads(path.read_text())
            item = self.form.decode(record.get(self.form.field), str(path))
            robot_id, shared = record.get("robot_id", ""), record.get("shared", "")
            confirmed = record.get("confirmed", "")
            if not isinstance(robot_id, str) or shared not in SHARED_VALUES or confirmed not in ("", "person"):
                raise self.form.error(f"{path}: robot_id must be a string, shared 'fleet' or 'robot', confirmed '' or "
                                      "'person'")
            if path.name != f"{self.form.id(item)}{SUFFIX}":
                raise self.form.error(f"{path}: id {self.form.id(item)!r} does not match the file name")
        except FileNotFoundError:
            return None
        except OSError as exc:  # the file is there but cannot be read now: never a reason to set a lesson aside
            self._defer(path.name, exc)
            return None
        except (ValueError, AttributeError, self.form.error) as exc:
            quarantine(path, self.quarantine_dir, f"unreadable spooled record ({exc})", log, self.form.what)
            return None
        self._deferred.discard(path.name)
        return Spooled(item, robot_id, shared, confirmed)

    def _defer(self, name: str, exc: OSError) -> None:
        """A transient error on ``name``: left for the next look, with one warning per file and error."""
        self._deferred.add(name)
        if (name, exc.errno) not in self._told:
            self._told.add((name, exc.errno))
            log.warning("%s: cannot read %s now (%s); it stays in %s and is tried again", self.form.what, name,
                        exc.strerror or exc, self.directory)
