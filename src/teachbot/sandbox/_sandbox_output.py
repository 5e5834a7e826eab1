"""What a console run prints: print() lines and expression reprs, each cut to a length, at most so many lines.

Standard library only: the sandbox worker (``python -I -S``) loads this file by path, beside
teachbot/sandbox/_sandbox_worker.py.
"""

from __future__ import annotations

from typing import Any


class Output:
    """Console output of one run: print() lines and expression reprs, each cut to max_chars, at most max_lines."""

    def __init__(self, max_chars: int, max_lines: int) -> None:
        self.max_chars, self.max_lines = max_chars, max_lines
        self.items: list[str] = []
        self.count = 0
        self.line: list[str] = []
        self.line_len = 0

    def add(self, text: str) -> None:
        if self.count < self.max_lines:
            self.items.append(text if len(text) <= self.max_chars else text[: self.max_chars] + "... [truncated]")
        elif self.count == self.max_lines:
            self.items.append("... [output truncated]")
        self.count += 1

    def write(self, text: str) -> None:
        pos = 0
        while pos < len(text) and self.count <= self.max_lines:
            nl = text.find("\n", pos)
            end = len(text) if nl < 0 else nl
            room = self.max_chars + 1 - self.line_len
            if room > 0:
                self.line.append(text[pos : min(end, pos + room)])
                self.line_len += min(end - pos, room)
            if nl < 0:
                return
            self.flush_line(force=True)
            pos = nl + 1

    def flush_line(self, force: bool = False) -> None:
        if self.line or force:
            self.add("".join(self.line))
            self.line, self.line_len = [], 0

    def show(self, value: Any) -> None:
        if value is None:
            return
        self.flush_line()
        if type(value) in (str, bytes) and len(value) > self.max_chars:
            value = value[: self.max_chars + 1]
        self.add(repr(value))

    def take(self, final: bool = False) -> list[str]:
        if final:
            self.flush_line()
        items, self.items = self.items, []
        return items
