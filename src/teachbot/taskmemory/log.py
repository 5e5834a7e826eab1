"""The declarative memory: per-task logs of what the robot did and the world after each action.

One append-only JSON Lines file per task (``<directory>/<slug>.jsonl``). A record is a ``begin`` (the
task began or was resumed: the instruction, the objects it is about, the world then) or an ``action``
(the robot function, its arguments, its result, and the environment after it: what is where).

Guarantees (as the example store's, teachbot.storage.files):

- An append takes the directory's ``flock``, cuts a torn tail left by a writer killed mid-line (that
  record was never acknowledged), writes the line, flushes and fsyncs before it returns: an acknowledged
  record survives ``kill -9`` and power loss; concurrent writers in several processes never interleave.
- Readers never take the lock: they read whole lines only and skip a line that does not parse (only a
  torn tail can be one), so a crash mid-append costs at most the record being written.
- A record that cannot be written whole (a full disk: a short write, ENOSPC at write or fsync) is cut
  off again before the lock is released and the append raises TaskLogError saying so; the log is as it
  was, never acknowledged with a torn last line.
- Reading is incremental: each task's file is parsed from where the last read stopped, so a query over
  10k logged actions costs what is new since the last one, not the whole log.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.errors import ConfigError, TeachbotError
from teachbot.memory.store import write_failure
from teachbot.storage.files import file_lock, fsync_dir
from teachbot.taskmemory.specs import ObjectInfo

LOG = logging.getLogger(__name__)
SUFFIX = ".jsonl"
BEGIN, ACTION = "begin", "action"
MAX_LINE = 1 << 20  # bytes of one record; a bigger one is refused, never written half


class TaskLogError(TeachbotError):
    """A record could not be written (e.g. the disk is full); the log is as it was before the append."""


@dataclass(frozen=True)
class LogRecord:
    """One line of a task's log."""

    kind: str  # begin | action
    task: str
    time: float
    seq: int = 0  # the record's index in its task's log (from 0)
    instruction: str = ""  # begin: what the person asked
    relevant: tuple[str, ...] = ()  # begin: the objects the task is about
    function: str = ""  # action: the robot function
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    result: str = ""  # action: its repr, or the error line
    ok: bool = True
    environment: Mapping[str, ObjectInfo] = field(default_factory=dict)  # the world after it

    def call_text(self) -> str:
        """The action as console source, e.g. ``place_object('box 1')``."""
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.function}({', '.join(parts)})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "task": self.task, "time": round(self.time, 6)}
        if self.kind == BEGIN:
            out.update(instruction=self.instruction, relevant=list(self.relevant))
        else:
            out.update(function=self.function, args=list(self.args), kwargs=dict(self.kwargs), result=self.result, ok=self.ok)
        out["environment"] = {n: i.to_json() for n, i in self.environment.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], seq: int) -> LogRecord:
        env = {str(n): ObjectInfo.from_json(i) for n, i in (data.get("environment") or {}).items()}
        return cls(str(data["kind"]), str(data["task"]), float(data["time"]), seq, str(data.get("instruction", "")),
                   tuple(str(r) for r in data.get("relevant") or ()), str(data.get("function", "")),
                   tuple(data.get("args") or ()), dict(data.get("kwargs") or {}), str(data.get("result", "")),
                   bool(data.get("ok", True)), env)


def slug(task: str) -> str:
    """The file name of a task's log: lower case, words joined by '_' ('Sort fruits' -> 'sort_fruits')."""
    name = re.sub(r"[^a-z0-9]+", "_", task.strip().lower()).strip("_")
    if not name:
        raise ValueError(f"a task needs a name with letters or digits, got {task!r}")
    return name[:80]


@dataclass
class _Cache:
    offset: int = 0
    records: list[LogRecord] = field(default_factory=list)
    last_begin: int = -1  # index of the newest begin record
    last_fresh: int = -1  # index of the newest begin record that started the task afresh


class TaskLogStore:
    """The per-task logs in ``directory`` (created when missing)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the task log directory {self.directory}: {exc.strerror}; "
                              "set task_memory's store directory to a writable place") from None
        self._cache: dict[str, _Cache] = {}
        self._guard = threading.Lock()

    # ------------------------------------------------------------------ writing
    def append(self, record: LogRecord) -> LogRecord:
        """Append ``record`` to its task's log durably (see the module's guarantees); returns it with its seq."""
        line = (json.dumps(record.to_json(), separators=(",", ":"), default=repr) + "\n").encode()
        if len(line) > MAX_LINE:
            raise ValueError(f"a task log record of {len(line)} bytes is over the {MAX_LINE}-byte limit; log fewer objects")
        path = self.path(record.task)
        with self._guard, file_lock(self.directory):
            new = not path.exists()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as exc:
                raise TaskLogError(write_failure(exc, f"a record of task {record.task!r}", self.directory,
                                                 "memory.store.tasks_dir")) from None
            try:
                size = os.fstat(fd).st_size
                tail = _torn_tail(fd, size)
                if tail:
                    LOG.warning("task log %s: cutting a torn last record of %d bytes (a writer died mid-append)", path, tail)
                    os.ftruncate(fd, size - tail)
                _append_whole(fd, line, size - tail, path)
            except OSError as exc:
                raise TaskLogError(write_failure(exc, f"a record of task {record.task!r}", self.directory,
                                                 "memory.store.tasks_dir")) from None
            finally:
                os.close(fd)
            if new:
                fsync_dir(self.directory)
            records = self._refresh(path).records  # still locked: the newest record is ours
            return records[-1] if records else record

    def begin(self, task: str, instruction: str, relevant: Sequence[str], environment: Mapping[str, ObjectInfo]) -> LogRecord:
        return self.append(LogRecord(BEGIN, task, time.time(), instruction=instruction, relevant=tuple(relevant),
                                     environment=dict(environment)))

    def action(self, task: str, function: str, args: Sequence[Any], kwargs: Mapping[str, Any], result: str, ok: bool,
               environment: Mapping[str, ObjectInfo]) -> LogRecord:
        return self.append(LogRecord(ACTION, task, time.time(), function=function, args=tuple(_plain(a) for a in args),
                                     kwargs={k: _plain(v) for k, v in kwargs.items()}, result=result, ok=ok,
                                     environment=dict(environment)))

    # ------------------------------------------------------------------ reading
    def path(self, task: str) -> Path:
        return self.directory / f"{slug(task)}{SUFFIX}"

    def tasks(self) -> list[str]:
        """The tasks with a log, by the time they last began (oldest first)."""
        names = []
        with self._guard:  # the caches' own lists, not copies: this runs on every query
            for path in self.directory.glob(f"*{SUFFIX}"):
                cache = self._refresh(path)
                if cache.records:
                    newest = cache.records[cache.last_begin if cache.last_begin >= 0 else -1]
                    names.append((newest.time, cache.records[0].task))
        return [name for _, name in sorted(names)]

    def records(self, task: str) -> list[LogRecord]:
        """Every record of ``task`` (a copy of the cached list)."""
        return self._read(self.path(task))

    def since_begin(self, task: str, first: bool = False) -> list[LogRecord]:
        """The records since the task's newest begin (``first``: since its first begin after the last
        fresh start, i.e. the whole current run with its resumptions)."""
        with self._guard:
            cache = self._refresh(self.path(task))
            records = cache.records
            if not records:
                return []
            start = max(cache.last_fresh if first else cache.last_begin, 0)
            return list(records[start:])

    def current(self) -> str:
        """The task that began last ('' when none has)."""
        tasks = self.tasks()
        return tasks[-1] if tasks else ""

    def _read(self, path: Path) -> list[LogRecord]:
        with self._guard:
            return list(self._refresh(path).records)

    def _refresh(self, path: Path) -> _Cache:
        cache = self._cache.setdefault(path.name, _Cache())
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            self._cache[path.name] = _Cache()
            return self._cache[path.name]
        if size < cache.offset:  # the log was replaced (restored, imported): read it again
            cache = self._cache[path.name] = _Cache()
        if size == cache.offset:
            return cache
        with path.open("rb") as handle:
            handle.seek(cache.offset)
            data = handle.read(size - cache.offset)
        end = data.rfind(b"\n") + 1  # whole lines only; a torn tail waits (or is cut by the next append)
        for raw in data[:end].splitlines():
            try:
                record = LogRecord.from_json(json.loads(raw), len(cache.records))
            except (ValueError, KeyError, TypeError) as exc:
                LOG.warning("task log %s: skipping an unreadable record (%s)", path, exc)
                continue
            if record.kind == BEGIN:
                cache.last_begin = len(cache.records)
                if _fresh(record):
                    cache.last_fresh = len(cache.records)
            cache.records.append(record)
        cache.offset += end
        return cache


def _fresh(record: LogRecord) -> bool:
    """Whether a begin record started the task afresh (not a resumption)."""
    return record.kind == BEGIN and not record.instruction.startswith(RESUMED)


RESUMED = "(resumed) "  # the instruction of a begin record that resumes an unfinished run


def _append_whole(fd: int, line: bytes, end: int, path: Path) -> None:
    """Write ``line`` at the end of the log (which is ``end`` bytes long) and fsync, or leave the log ``end``
    bytes long and raise: a write may take only part of the line (a full disk), and fsync may fail after it."""
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, end)
            os.fsync(fd)
        except OSError as undo:  # the next append cuts the torn tail; readers skip it meanwhile
            LOG.warning("task log %s: could not cut a partly written record (%s)", path, undo)
        raise


def _torn_tail(fd: int, size: int) -> int:
    """Bytes after the last newline of the file (a record cut short by a killed writer)."""
    if size == 0:
        return 0
    back = min(size, MAX_LINE + 1)
    data = os.pread(fd, back, size - back)
    return len(data) - (data.rfind(b"\n") + 1)


def _plain(value: Any) -> Any:
    """A JSON-safe copy of an argument (numbers, strings, lists, dicts; anything else as its repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)
