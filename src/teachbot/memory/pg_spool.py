"""Lessons learned while the memory database is unreachable: one file each in a local spool directory.

The postgres backend (teachbot.memory.pg_store) writes a lesson here, through the same atomic-file helpers
as the file store (temp file, fsync, rename, fsync the directory), when the database cannot take it, and
writes the spooled lessons into the database once it is back, deleting each file only after its row is
committed (a crash in between leaves the file; writing it again is idempotent). A file that cannot be
read, or whose id the database holds with other content, is moved to ``quarantine/``, never deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from teachbot.errors import MemoryStoreError
from teachbot.memory.example import InteractionExample, validate_learned
from teachbot.storage.files import QUARANTINE, SUFFIX, TEMP_SUFFIX, file_lock, fsync_dir, quarantine, sweep_temp, write_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpooledLesson:
    """A lesson waiting for the database: the example, its robot and who sees it (fleet or robot)."""

    example: InteractionExample
    robot_id: str
    shared: str


class Spool:
    """The spool directory of one robot (several processes may share it: writes and flushes hold its lock)."""

    def __init__(self, directory: str | Path, stale_temp_seconds: float = 60.0) -> None:
        self.directory = Path(directory)
        self.stale_temp_seconds = stale_temp_seconds
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MemoryStoreError(f"cannot create the memory spool directory {self.directory}: {exc.strerror}; set "
                                   "memory.store.spool_dir in config/memory.yaml to a writable directory") from None

    @property
    def quarantine_dir(self) -> Path:
        return self.directory / QUARANTINE

    def put(self, lesson: SpooledLesson) -> None:
        """Write the lesson durably (atomic, fsync'ed); MemoryStoreError when the disk refuses it."""
        record = {"example": lesson.example.to_dict(), "robot_id": lesson.robot_id, "shared": lesson.shared}
        try:
            with file_lock(self.directory):
                write_atomic(self._path(lesson.example.id), (json.dumps(record, ensure_ascii=False) + "\n").encode())
        except OSError as exc:
            raise MemoryStoreError(f"cannot queue the lesson {lesson.example.id!r} in {self.directory} while the database "
                                   f"is unreachable: {exc.strerror or exc}; it was not stored") from None

    def lessons(self) -> list[SpooledLesson]:
        """The spooled lessons, oldest first; unreadable files are quarantined, stale temp files swept."""
        found: list[tuple[str, SpooledLesson]] = []
        for name in sorted(os.listdir(self.directory)):
            path = self.directory / name
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                sweep_temp(path, self.quarantine_dir, self.stale_temp_seconds, log, "memory spool")
                continue
            if name.startswith(".") or not name.endswith(SUFFIX):
                continue
            lesson = self._read(path)
            if lesson is not None:
                found.append((lesson.example.created, lesson))
        return [lesson for _, lesson in sorted(found, key=lambda item: (item[0], item[1].example.id))]

    def ids(self) -> set[str]:
        return {name[: -len(SUFFIX)] for name in os.listdir(self.directory) if name.endswith(SUFFIX) and not name.startswith(".")}

    def done(self, example_id: str) -> None:
        """The lesson is in the database: delete its file (and make the deletion durable)."""
        try:
            self._path(example_id).unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.directory)

    def reject(self, example_id: str, why: str) -> None:
        """The database will never take this lesson (its id holds another one): move it aside, with a warning."""
        quarantine(self._path(example_id), self.quarantine_dir, why, log, "memory spool")

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The spool's cross-process lock (a context manager), held around a flush."""
        return file_lock(self.directory)

    def _path(self, example_id: str) -> Path:
        return self.directory / f"{example_id}{SUFFIX}"

    def _read(self, path: Path) -> SpooledLesson | None:
        try:
            record = json.loads(path.read_text())
            example = InteractionExample.from_dict(record.get("example"), str(path))
            validate_learned(example)
            robot_id, shared = record.get("robot_id", ""), record.get("shared", "")
            if not isinstance(robot_id, str) or shared not in ("fleet", "robot"):
                raise MemoryStoreError(f"{path}: robot_id must be a string and shared 'fleet' or 'robot'")
            if path.name != f"{example.id}{SUFFIX}":
                raise MemoryStoreError(f"{path}: id {example.id!r} does not match the file name")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError, MemoryStoreError) as exc:
            quarantine(path, self.quarantine_dir, f"unreadable spooled lesson ({exc})", log, "memory spool")
            return None
        return SpooledLesson(example.with_derived_instructions(), robot_id, shared)
