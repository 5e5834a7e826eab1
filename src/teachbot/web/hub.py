"""The page's state and its clients, between the ROS bridge (any thread) and the web server (its asyncio loop).

The bridge reports what happens (:meth:`Hub.dialog`, :meth:`Hub.transcript`, ...); the hub keeps a bounded
history for pages that join late and sends every event to each connected page as one JSON text. What a page asks
for (:meth:`Hub.handle`, a checked message of teachbot.web.protocol) goes to a :class:`Robot`, the bridge's side.
A page that cannot keep up is disconnected (it reconnects and gets the whole state again) instead of queueing
without bound: each page's queue is bounded in bytes. The lessons panel is paged (only a page's rows are sent and
highlighted) and told of memory changes at most once a ``lessons_debounce`` (a fleet's burst of updates is one).
An episode's spans (:meth:`Hub.trace`) come from the trace files (teachbot.web.traces), which every process of the
robot writes: the page asks for them, the hub adds the transcript lines it knows.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from teachbot.memory.example import InteractionExample
from teachbot.web import lessons as lesson_rows
from teachbot.web.highlight import highlight, plain
from teachbot.web.traces import TraceReader

QUEUE_LIMIT = 1000  # events waiting for one page; past it the page is disconnected (it reconnects)
QUEUE_BYTES = 4 * 1024 * 1024  # bytes of events waiting for one page (config/web.yaml max_queue_bytes)


class RobotUnavailable(RuntimeError):
    """A node the page needs (memory, the interaction manager) does not answer; the message says which."""


class Robot(Protocol):
    """What the page can ask of the robot (the ROS bridge implements it; blocking calls have their own timeouts)."""

    def say(self, text: str) -> None: ...
    def answer(self, question: str, text: str) -> None: ...
    def emergency_stop(self, engaged: bool) -> None: ...
    def end_conversation(self) -> None: ...
    def list_lessons(self) -> list[InteractionExample]: ...
    def remove_lesson(self, example_id: str) -> str: ...
    def set_confirm(self, on: bool) -> str: ...


@dataclass
class Client:
    """One connected page: its queue of JSON texts (ASCII: a character is a byte), filled from any thread through its
    loop, bounded in number and in bytes."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    closed: bool = False
    limit_bytes: int = QUEUE_BYTES
    queued_bytes: int = 0

    def push(self, text: str | None) -> None:
        """(In the loop) queue ``text``; None or an overflow ends the page's connection."""
        if self.closed:
            return
        if (text is None or self.queue.qsize() >= QUEUE_LIMIT
                or self.queued_bytes + len(text) > self.limit_bytes):
            self.closed = True
            self.queue.put_nowait(None)
            return
        self.queued_bytes += len(text)
        self.queue.put_nowait(text)

    async def next_text(self) -> str | None:
        """(In the loop) the next text to send, None when the connection is to end."""
        text = await self.queue.get()
        if text is not None:
            self.queued_bytes -= len(text)
        return text


class Hub:
    """Bounded state of the page plus its clients. Thread-safe."""

    def __init__(self, robot: Robot, *, transcript_lines: int = 2000, dialog_turns: int = 200, max_clients: int = 8,
                 clock: Callable[[], float] = time.time, traces: TraceReader | None = None,
                 max_queue_bytes: int = QUEUE_BYTES, lessons_page: int = 20, lessons_debounce: float = 1.0) -> None:
        """``traces`` reads the episode traces (default: the folder of config/tracing.yaml, or TEACHBOT_TRACE_DIR);
        ``max_queue_bytes`` bounds each page's queue; ``lessons_page`` rows per page of the lessons panel;
        ``lessons_debounce`` seconds between two ``lessons_changed`` events."""
        self.robot, self.clock = robot, clock
        self.max_queue_bytes, self.lessons_page, self.lessons_debounce = max_queue_bytes, lessons_page, lessons_debounce
        self._changed_at = float("-inf")
        self._changed_timer: threading.Timer | None = None

        self.traces = traces if traces is not None else TraceReader.configured()
        self.max_clients = max_clients
        self.transcript_lines = transcript_lines
        self._lock = threading.Lock()
        self._clients: list[Client] = []
        self._dialog: deque[dict[str, Any]] = deque(maxlen=dialog_turns)
        self._transcript: deque[dict[str, Any]] = deque()
        self._lines = 0
        self._objects: dict[str, Any] = {"type": "objects", "objects": []}
        self._pending: dict[str, Any] = {"type": "pending", "lesson": None}
        self.status: dict[str, Any] = {"type": "status", "estop": None, "confirm": None, "nodes": {}, "camera": "",
                                       "camera_error": "", "robot": ""}

    # ------------------------------------------------------------------ clients
    def connect(self, loop: asyncio.AbstractEventLoop) -> Client | None:
        """A new page's client with the whole state queued; None when ``max_clients`` pages are connected."""
        client = Client(loop, limit_bytes=self.max_queue_bytes)
        with self._lock:
            if len(self._clients) >= self.max_clients:
                return None
            self._clients.append(client)
            for event in self._snapshot():
                client.push(json.dumps(event))
        return client

    def disconnect(self, client: Client) -> None:
        with self._lock:
            if client in self._clients:
                self._clients.remove(client)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)

    def _snapshot(self) -> list[dict[str, Any]]:
        return [dict(self.status), self._objects, *self._dialog, *self._transcript, self._pending]

    def _send(self, event: dict[str, Any]) -> None:
        """(Under the lock) queue ``event`` for every page."""
        text = json.dumps(event)
        for client in self._clients:
            try:
                client.loop.call_soon_threadsafe(client.push, text)
            except RuntimeError:  # its loop is closed: the server is stopping
                client.closed = True

    # ------------------------------------------------------------------ events from the robot
    def dialog(self, speaker: str, text: str, question: tuple[str, str] | None = None) -> None:
        """Someone spoke (dialog/user or dialog/robot); ``question``: (kind, id) when the robot asked (the page's
        buttons for it send the id back)."""
        event: dict[str, Any] = {"type": "dialog", "speaker": speaker, "text": text, "time": self.clock()}
        if question is not None:
            event["question"] = {"kind": question[0], "id": question[1]}
        with self._lock:
            self._dialog.append(event)
            self._send(event)

    def transcript(self, episode: str, first_line: int, lines: list[str]) -> None:
        """An update of the console transcript (interaction/transcript), highlighted once for every page."""
        event = {"type": "transcript", "episode": episode, "first": first_line, "lines": highlight(lines),
                 "time": self.clock()}
        with self._lock:
            self._transcript.append(event)
            self._lines += len(lines)
            while self._lines > self.transcript_lines and len(self._transcript) > 1:
                self._lines -= len(self._transcript.popleft()["lines"])
            self._send(event)

    def objects(self, objects: list[dict[str, Any]]) -> None:
        """The object list (name and position of each)."""
        event = {"type": "objects", "objects": objects}
        with self._lock:
            if event == self._objects:
                return
            self._objects = event
            self._send(event)

    def pending(self, lesson: InteractionExample | None) -> None:
        """The lesson waiting for the person's answer, or None once answered."""
        event = {"type": "pending", "lesson": None if lesson is None else lesson_rows.row(lesson)}
        with self._lock:
            self._pending = event
            self._send(event)

    def update_status(self, **changes: Any) -> None:
        """E-stop, confirm mode, which nodes are up, the camera; sent only when something changed."""
        with self._lock:
            merged = {**self.status, **changes}
            if merged == self.status:
                return
            self.status = merged
            self._send(dict(merged))

    def lessons_changed(self) -> None:
        """The memory changed (memory/updated): pages refresh their lessons panel, told at most once per
        ``lessons_debounce`` seconds (changes within it are one event at its end)."""
        with self._lock:
            if self._changed_timer is not None:
                return  # one is due already: it covers this change
            wait = self._changed_at + self.lessons_debounce - time.monotonic()
            if wait <= 0:
                self._changed_at = time.monotonic()
                self._send({"type": "lessons_changed"})
                return
            self._changed_timer = threading.Timer(wait, self._lessons_changed_due)
            self._changed_timer.daemon = True
            self._changed_timer.start()

    def _lessons_changed_due(self) -> None:
        with self._lock:
            self._changed_timer = None
            self._changed_at = time.monotonic()
            self._send({"type": "lessons_changed"})

    def close(self) -> None:
        """End every page's connection (the server is stopping)."""
        with self._lock:
            if self._changed_timer is not None:
                self._changed_timer.cancel()
                self._changed_timer = None
            for client in self._clients:
                try:
                    client.loop.call_soon_threadsafe(client.push, None)
                except RuntimeError:
                    client.closed = True

    # ------------------------------------------------------------------ what a page asks
    def handle(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Act on one checked message (teachbot.web.protocol.parse); the replies for the page that sent it.
        Blocking (service calls): the server runs it in its thread pool."""
        kind = message["type"]
        try:
            if kind == "say":
                self.robot.say(message["text"])
                return []
            if kind == "answer":
                self.robot.answer(message["question"], message["text"])
                return []
            if kind in ("stop", "resume"):
                self.robot.emergency_stop(kind == "stop")
                self.update_status(estop=kind == "stop")
                return [note("emergency stop engaged: the robot halts and refuses to move until you release it" if kind == "stop"
                             else "emergency stop released: the robot may move again")]
            if kind == "end":
                self.robot.end_conversation()
                return [note("conversation ended: the robot starts afresh with what you say next")]
            if kind == "lessons":
                return [self._lessons(message["query"], int(message.get("offset", 0)))]
            if kind == "remove":
                return [note(self.robot.remove_lesson(message["id"]))]
            if kind == "undo":
                last = lesson_rows.newest(self.robot.list_lessons())
                if last is None:
                    return [note("there is no learned lesson to undo")]
                self.robot.remove_lesson(last.id)
                return [note(f"removed the last lesson ({last.id}): {last.improvement or last.problem}")]
            if kind == "confirm_mode":
                return [note(self.robot.set_confirm(bool(message["on"])))]
            if kind == "trace":
                return [self.trace(message["episode"], message["known"])]
        except RobotUnavailable as exc:
            return [note(str(exc), error=True)]
        raise ValueError(f"unhandled message type {kind!r}")  # protocol.FIELDS and this method disagree: a bug

    def _lessons(self, query: str, offset: int) -> dict[str, Any]:
        """One page of the lessons matching ``query`` from ``offset`` (newest first); only its rows are highlighted."""
        found = lesson_rows.search(self.robot.list_lessons(), query)
        offset = max(0, min(offset, (len(found) - 1) // self.lessons_page * self.lessons_page)) if found else 0
        shown = found[offset:offset + self.lessons_page]
        return {"type": "lessons", "query": query, "offset": offset, "total": len(found), "page": self.lessons_page,
                "lessons": [lesson_rows.row(e) for e in shown]}

    def trace(self, episode: str = "", known: str = "") -> dict[str, Any]:
        """The ``trace`` event of ``episode`` ('' = the newest episode of the transcript, else of the trace files):
        its spans in tree order (teachbot.web.traces.rows), or ``unchanged`` when ``known`` is its version.
        Reads the files (cached): the server runs it in its thread pool."""
        with self._lock:
            if not episode and self._transcript:
                episode = str(self._transcript[-1]["episode"])
            lines: dict[int, str] = {}
            for event in self._transcript:
                if event["episode"] == episode:
                    lines.update(enumerate(plain(event["lines"]), int(event["first"])))
        if not episode:
            episode = self.traces.newest_episode()
        return self.traces.event(episode, lines, known)

    def export(self) -> str:
        """Every learned lesson as JSON Lines (``teachbot memory export``'s format)."""
        return lesson_rows.export_lines(self.robot.list_lessons())


def note(text: str, error: bool = False) -> dict[str, Any]:
    """A one-line notice for the page."""
    return {"type": "note", "text": text, "error": error}
