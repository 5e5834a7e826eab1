"""Durable one-file-per-record helpers (and the JSON Lines exports): the example store (``teachbot.memory.store``) and the knowledge
base (``teachbot.knowledge.store``) both write through them, so both keep the same guarantees and look
the same on disk (``.json`` files, dot-named ``.tmp`` temp files, ``.lock`` and ``quarantine/``).

Guarantees, for a directory written only through these functions:

- ``write_atomic``: a temp file in the same directory, fsync'ed, renamed over the final name, then the
  directory fsync'ed (a failure of that last step alone is a DirectorySyncError: the file is in place). A
  reader (or a ``kill -9`` at any point) sees the whole file or none of it; at worst a dot-named temp file is
  left behind, which ``sweep_temp`` moves aside once it is stale.
- ``file_lock``: an exclusive ``flock`` on ``<directory>/.lock``; the kernel releases it when the
  holder dies, so a killed writer never wedges the others.
- ``quarantine``: unreadable files are moved to ``<directory>/quarantine/``, never deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"
LOCK_NAME = ".lock"
QUARANTINE = "quarantine"

__all__ = ["LOCK_NAME", "QUARANTINE", "SUFFIX", "TEMP_SUFFIX", "DirectorySyncError", "file_lock", "fsync_dir", "quarantine",
           "sweep_temp", "write_atomic", "write_jsonl"]


def fsync_dir(directory: Path) -> None:
    """fsync a directory, so a rename or unlink in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectorySyncError(OSError):
    """``write_atomic`` put the file in place under its name, but fsync of its directory failed: it is there for every
    reader now, and may only be lost if the machine loses power before the directory reaches the disk."""


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename over ``path``, fsync the directory (DirectorySyncError when only
    that last step failed: the file is in place)."""
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
    try:
        fsync_dir(path.parent)
    except OSError as exc:
        raise DirectorySyncError(exc.errno, f"{path} is written, but fsync of its directory failed: {exc.strerror or exc}") from exc


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line to ``path`` atomically (its folder created when missing); returns how many."""
    path = Path(path)
    lines = [json.dumps(record, ensure_ascii=False) + "\n" for record in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(lines).encode())
    return len(lines)


@contextlib.contextmanager
def file_lock(directory: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``directory`` (its ``.lock`` file) meanwhile; other processes wait."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock (and so does the kernel when a holder is killed)


def quarantine(path: Path, quarantine_dir: Path, why: str, log: logging.Logger, what: str = "store") -> Path | None:
    """Move ``path`` into ``quarantine_dir`` (a unique name; never deleted); returns where, or None.

    None when another process moved it first, or when it cannot be moved (then it is logged and left).
    """
    target = quarantine_dir / f"{path.name.lstrip('.')}.{time.time_ns()}"
    try:
        quarantine_dir.mkdir(exist_ok=True)
        os.replace(path, target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s: %s: %s; could not move it aside (%s), ignoring it", what, path, why, exc)
        return None
    log.warning("%s: %s: %s; moved to %s", what, path, why, target)
    return target


def sweep_temp(path: Path, quarantine_dir: Path, stale_seconds: float, log: logging.Logger, what: str = "store") -> None:
    """A dot-named temp file is a write in progress, or one a killed writer left: quarantine it once stale."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return
    if age > stale_seconds:
        quarantine(path, quarantine_dir, f"partial write left by an interrupted writer ({age:.0f} s old)", log, what)
