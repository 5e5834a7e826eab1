"""Spans as JSON Lines: one file per day (UTC), appended by every process of a run, and read back.

A line is one finished span::

    {"trace_id": "<32 hex>", "span_id": "<16 hex>", "parent_id": "<16 hex>" | null, "name": "skill.goal",
     "service": "teachbot", "kind": "internal", "start_ns": ..., "end_ns": ..., "status": "ok|error|unset",
     "status_message": "...", "attributes": {...}, "events": [{"name": ..., "time_ns": ..., "attributes": {...}}]}

Writers hold an exclusive ``flock`` on the day's file while they append a batch, so the lines of several
processes (the nodes of one robot) never interleave; a reader skips a torn last line (a writer killed mid-line).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

log = logging.getLogger(__name__)
SUFFIX = ".jsonl"


@dataclass(frozen=True)
class SpanRecord:
    """One span as read back from a trace file."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    status: str = "unset"
    status_message: str = ""
    service: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[dict[str, Any], ...] = ()

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpanRecord:
        return cls(trace_id=str(data["trace_id"]), span_id=str(data["span_id"]), parent_id=data.get("parent_id") or None,
                   name=str(data["name"]), start_ns=int(data["start_ns"]), end_ns=int(data["end_ns"]),
                   status=str(data.get("status", "unset")), status_message=str(data.get("status_message", "")),
                   service=str(data.get("service", "")), attributes=dict(data.get("attributes") or {}),
                   events=tuple(data.get("events") or ()))


def span_dict(span: ReadableSpan) -> dict[str, Any]:
    """The JSON object of one finished SDK span."""
    context, parent = span.get_span_context(), span.parent
    status = span.status.status_code
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "name": span.name,
        "service": str(span.resource.attributes.get("service.name", "")),
        "kind": span.kind.name.lower(),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": {StatusCode.OK: "ok", StatusCode.ERROR: "error"}.get(status, "unset"),
        "status_message": span.status.description or "",
        "attributes": {key: list(value) if isinstance(value, tuple) else value for key, value in (span.attributes or {}).items()},
        "events": [{"name": event.name, "time_ns": event.timestamp,
                    "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (event.attributes or {}).items()}}
                   for event in span.events],
    }


def day_file(directory: Path, time_ns: int) -> Path:
    """The file of the UTC day ``time_ns`` falls on."""
    day = datetime.fromtimestamp(time_ns / 1e9, tz=UTC).strftime("%Y-%m-%d")
    return directory / f"{day}{SUFFIX}"


class JsonlSpanExporter(SpanExporter):
    """Appends finished spans to ``<directory>/<UTC day>.jsonl`` (the exporter of the default configuration)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        by_day: dict[Path, list[str]] = {}
        for finished in spans:
            by_day.setdefault(day_file(self.directory, finished.end_time or 0), []).append(
                json.dumps(span_dict(finished), ensure_ascii=False, default=str) + "\n")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._lock:
                for path, lines in by_day.items():
                    _append(path, "".join(lines).encode())
        except OSError as exc:
            if not self._warned:  # a full disk must not stop the robot: one line, then the spans are dropped
                log.warning("tracing: cannot write spans to %s (%s); traces are incomplete until it can", self.directory, exc)
                self._warned = True
            return SpanExportResult.FAILURE
        self._warned = False
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the lines of one batch stay together whoever else appends
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)  # and the lock with it


def read_spans(directory: str | Path, days: Iterable[str] | None = None) -> list[SpanRecord]:
    """Every span in the day files of ``directory`` (all days, or the ``YYYY-MM-DD`` days given), by start time.

    A line that is not a span (torn by a killed writer, or edited) is skipped with a warning."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    wanted = set(days) if days is not None else None
    records: list[SpanRecord] = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        if wanted is None or path.stem in wanted:
            records += parse_spans(path.read_text(errors="replace"), str(path))
    return sorted(records, key=lambda r: (r.start_ns, r.end_ns))


def parse_spans(text: str, where: str) -> list[SpanRecord]:
    """The spans of JSON Lines ``text`` (read from ``where``); a line that is not a span is skipped with a warning."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(SpanRecord.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("tracing: %s:%d is not a span (%s); skipped", where, number, exc)
    return records
