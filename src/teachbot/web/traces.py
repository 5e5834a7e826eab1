"""An episode's spans for the page, read from the trace folder's day files (teachbot.tracing.jsonl) and kept.

The files are the one record every process of the robot writes to, so the page reads them rather than asking a
node. :class:`TraceReader` keeps what it has read: on each look it stats the newest day files and reads only the
lines appended since (a file that shrank or was replaced is read again), so a page asking every second costs a
``stat`` per file while nothing happens.

Finding the episode: its root span ``episode`` (attribute ``teachbot.episode_id``) is written only when the
episode ends, as every span is written when it ends. Until then the running episode's trace is the one whose
statement spans name it (``teachbot.episode_id``), or whose learning spans do (``learning.episode_id``). Traces
written before statements named their episode are found by their statements: a trace without an ``episode`` span
whose ``statement`` spans each sit at a transcript line of this episode (``console.line``, numbered as
TranscriptUpdate numbers them) holding the same code, none past the lines the page knows. A trace that began
before the newest finished episode is left alone (one interaction manager runs one episode at a time, so it was
abandoned: a process killed mid-episode never writes its episode span). Of the traces left, the newest.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.errors import ConfigError
from teachbot.tracing.jsonl import SUFFIX, SpanRecord, parse_spans
from teachbot.tracing.setup import TracingConfig
from teachbot.tracing.spans import EPISODE_ID, EPISODE_SPAN, NODE
from teachbot.tracing.tree import SHOWN, episode_trace, ordered

log = logging.getLogger(__name__)
STATEMENT, LINE, SOURCE, LEARNING_EPISODE = "statement", "console.line", "console.source", "learning.episode_id"
PROMPT = ">>> "
COMPARED_CHARS = 200  # a statement's first line and its transcript line agree on this many characters
ATTRIBUTE_CHARS = 300  # an attribute's text as the page shows it (the files keep up to max_attribute_chars)
DAYS = 2  # the newest day files read: an episode across midnight (UTC) has spans in two
MAX_ROWS = 3000  # spans sent to the page for one episode (the rest are counted as left_out)


@dataclass
class _DayFile:
    """What was read of one day file: up to ``offset`` (the end of its last whole line)."""

    inode: int = -1
    size: int = -1
    mtime_ns: int = -1
    offset: int = 0
    records: list[SpanRecord] = field(default_factory=list)


class TraceReader:
    """The spans of the newest ``days`` day files in ``directory``, read again only where a file changed. Thread-safe."""

    def __init__(self, directory: str | Path, *, enabled: bool = True, days: int = DAYS,
                 attribute_chars: int = ATTRIBUTE_CHARS) -> None:
        self.directory, self.enabled = Path(directory), enabled
        self.days, self.attribute_chars = max(1, days), attribute_chars
        self._lock = threading.Lock()
        self._files: dict[str, _DayFile] = {}
        self._by_trace: dict[str, list[SpanRecord]] = {}
        self._episodes: dict[str, SpanRecord] = {}  # episode id -> its (finished) episode span
        self._open: set[str] = set()  # traces with statements or learning spans and no episode span (yet)
        self._closed: set[str] = set()  # traces with an episode span
        self.reads = 0  # how many times a file's bytes were read (the cache's test reads it)

    @classmethod
    def configured(cls) -> TraceReader:
        """A reader of the folder the spans go to (config/tracing.yaml; TEACHBOT_TRACE_DIR overrides)."""
        config = TracingConfig.load()
        return cls(config.trace_dir(), enabled=config.enabled)

    # ------------------------------------------------------------------ reading
    def refresh(self) -> None:
        """Read what was appended to the newest day files since the last look."""
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(SUFFIX))[-self.days:]
        except OSError:
            names = []
        rebuild = any(name not in names for name in self._files)
        for name in list(self._files):
            if name not in names:
                del self._files[name]
        fresh: list[SpanRecord] = []
        for name in names:
            state = self._files.setdefault(name, _DayFile())
            try:
                stat = (self.directory / name).stat()
            except OSError:
                continue
            if (stat.st_ino, stat.st_size, stat.st_mtime_ns) == (state.inode, state.size, state.mtime_ns):
                continue
            if stat.st_ino != state.inode or stat.st_size < state.offset:  # replaced or cut: read it whole again
                rebuild = rebuild or state.inode != -1
                state.offset, state.records = 0, []
            state.inode, state.size, state.mtime_ns = stat.st_ino, stat.st_size, stat.st_mtime_ns
            added = self._read(name, state)
            state.records.extend(added)
            fresh.extend(added)
        if rebuild:
            self._by_trace, self._episodes, self._open, self._closed = {}, {}, set(), set()
            fresh = [record for state in self._files.values() for record in state.records]
        for record in fresh:
            self._index(record)

    def _read(self, name: str, state: _DayFile) -> list[SpanRecord]:
        """The whole lines after ``state.offset`` (a line still being written waits for the next look)."""
        try:
            with (self.directory / name).open("rb") as f:
                f.seek(state.offset)
                data = f.read()
        except OSError as exc:
            log.warning("traces: cannot read %s: %s", self.directory / name, exc)
            return []
        self.reads += 1
        whole = data[: data.rfind(b"\n") + 1]
        state.offset += len(whole)
        return parse_spans(whole.decode("utf-8", errors="replace"), f"{self.directory / name} (appended part, line)")

    def _index(self, record: SpanRecord) -> None:
        self._by_trace.setdefault(record.trace_id, []).append(record)
        if record.name == EPISODE_SPAN:
            self._episodes[str(record.attributes.get(EPISODE_ID, ""))] = record
            self._closed.add(record.trace_id)
            self._open.discard(record.trace_id)
        elif (record.name == STATEMENT or LEARNING_EPISODE in record.attributes or EPISODE_ID in record.attributes) \
                and record.trace_id not in self._closed:
            self._open.add(record.trace_id)

    # ------------------------------------------------------------------ an episode
    def newest_episode(self) -> str:
        """The id of the newest finished episode in the files ('' when there is none)."""
        with self._lock:
            self._refresh()
            newest = max(self._episodes.values(), key=lambda r: r.start_ns, default=None)
            return str(newest.attributes.get(EPISODE_ID, "")) if newest is not None else ""

    def spans(self, episode_id: str, lines: Mapping[int, str]) -> tuple[list[SpanRecord], bool]:
        """The spans of episode ``episode_id`` by start time, and whether it has ended (its episode span is written);
        ``lines`` its transcript lines the page knows, by number (to find it while it runs; see the module docstring)."""
        with self._lock:
            self._refresh()
            top = self._episodes.get(episode_id)
            if top is not None:
                try:
                    return episode_trace(self._by_trace[top.trace_id], episode_id), True
                except ConfigError:  # cannot happen with the span just found; the whole trace then
                    return sorted(self._by_trace[top.trace_id], key=lambda r: (r.start_ns, r.end_ns)), True
            found = self._running(episode_id, lines)
            spans = self._by_trace.get(found, []) if found else []
            return sorted(spans, key=lambda r: (r.start_ns, r.end_ns)), False

    def _running(self, episode_id: str, lines: Mapping[int, str]) -> str:
        """The trace of the running episode ``episode_id`` ('' when none is found yet)."""
        finished = max((r.start_ns for r in self._episodes.values()), default=0)
        best, best_start = "", -1
        for trace_id in self._open:
            spans = self._by_trace[trace_id]
            verdict = _evidence(spans, episode_id, lines)
            if verdict == "exact":
                return trace_id
            start = min(r.start_ns for r in spans)
            if verdict == "match" and start >= finished and start > best_start:
                best, best_start = trace_id, start
        return best

    def event(self, episode_id: str, lines: Mapping[int, str], known: str = "") -> dict[str, Any]:
        """The page's ``trace`` event for ``episode_id``: its spans in tree order as rows (see :func:`rows`), or
        ``unchanged`` when they are what the page's ``known`` version says it has."""
        spans, done = self.spans(episode_id, lines) if episode_id else ([], False)
        trace_id = spans[0].trace_id if spans else ""
        version = f"{episode_id}:{trace_id}:{len(spans)}:{int(done)}:{max((r.end_ns for r in spans), default=0)}"
        event: dict[str, Any] = {"type": "trace", "episode": episode_id, "version": version}
        if known and known == version:
            return {**event, "unchanged": True}
        return {**event, "trace_id": trace_id, "done": done, "tracing": self.enabled,
                **rows(spans, self.attribute_chars)}


def _evidence(spans: Sequence[SpanRecord], episode_id: str, lines: Mapping[int, str]) -> str:
    """'exact' (a statement or learning span names the episode), 'match' (every statement agrees with the transcript
    and at least one is at a known line: traces written before statements named their episode), or '' (another
    episode's trace)."""
    matched = 0
    last = max(lines, default=-1)
    for record in spans:
        named = str(record.attributes.get(EPISODE_ID) or record.attributes.get(LEARNING_EPISODE) or "")
        if named:
            return "exact" if named == episode_id else ""
        if record.name != STATEMENT or not isinstance(record.attributes.get(LINE), int):
            continue
        line = int(record.attributes[LINE])
        if line > last:
            return ""  # a statement past the lines published so far: not this episode's
        if line in lines:
            first = str(record.attributes.get(SOURCE, "")).split("\n", 1)[0]
            if (PROMPT + first)[:COMPARED_CHARS].rstrip() != lines[line][:COMPARED_CHARS].rstrip():
                return ""
            matched += 1
    return "match" if matched else ""


def rows(trace: Sequence[SpanRecord], chars: int = ATTRIBUTE_CHARS, limit: int = MAX_ROWS) -> dict[str, Any]:
    """The spans as the page's timeline draws them: ``spans`` in tree order (each with its depth, start and length
    in ms after the first span began, node, status, transcript line for a statement, its telling attributes as
    ``shown`` and the rest as ``attributes``, texts cut to ``chars``), the timeline's length ``total_ms``, and how
    many spans past the first ``limit`` were ``left_out``."""
    if not trace:
        return {"spans": [], "total_ms": 0.0, "left_out": 0}
    origin = min(r.start_ns for r in trace)
    out = []
    for depth, record in ordered(trace)[:limit]:
        telling = SHOWN.get(record.name, ())
        line = record.attributes.get(LINE) if record.name == STATEMENT else None
        out.append({
            "id": record.span_id, "parent": record.parent_id, "depth": depth, "name": record.name,
            "node": str(record.attributes.get(NODE, "")),
            "start_ms": round((record.start_ns - origin) / 1e6, 3),
            "ms": round(max(0, record.end_ns - record.start_ns) / 1e6, 3),
            "status": record.status, "error": _cut(record.status_message, chars),
            "line": line if isinstance(line, int) else None,
            "shown": [[key, _cut(record.attributes[key], chars)] for key in telling if key in record.attributes],
            "attributes": [[key, _cut(value, chars)] for key, value in sorted(record.attributes.items())
                           if key not in telling and key != NODE],
        })
    total = (max(r.end_ns for r in trace) - origin) / 1e6
    return {"spans": out, "total_ms": round(total, 3), "left_out": max(0, len(trace) - limit)}


def _cut(value: object, chars: int) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"
