"""The console transcript: ``>>>`` statements, ``...`` continuations, results as ``repr``.

A transcript is a list of entries, each either code (one statement, possibly several lines) or the
output that followed it. Rendering is exactly what the LLM sees and what memory stores; parsing
reads such text back (seed examples, learned examples).

A console episode's transcript has ``max_chars`` (config/interaction.yaml bounds.max_transcript_chars): past
it the oldest console outputs are elided with a marker, then the newest output is cut; the person's words
and the code are never touched, so ``over_limit`` can still become true (the session then stops).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from teachbot.language.budget import KEEP_CHARS

PROMPT = ">>> "
CONTINUATION = "... "
TRIGGER_CALLS = ("wait_for_trigger", "ask")  # calls whose return value is what the person said
ELIDED = "... [output elided: the transcript is at its size limit]"
CUT = "... [output cut: the transcript is at its size limit]"
NOTE_PREFIX = "# correction: "  # the console's note on a correction it took (the learner and DROC read it)


@dataclass(frozen=True)
class Entry:
    """``kind`` is 'code' (a statement as typed) or 'output' (what the console printed after it)."""

    kind: str
    text: str

    def render(self) -> str:
        if self.kind == "output":
            return self.text
        first, *rest = self.text.split("\n")
        return "\n".join([PROMPT + first, *(CONTINUATION + line for line in rest)])


@dataclass
class Transcript:
    """An episode of the console, in order; ``max_chars`` bounds its rendered size (0: no limit)."""

    entries: list[Entry] = field(default_factory=list)
    max_chars: int = 0

    def add_code(self, source: str) -> None:
        self.entries.append(Entry("code", source.rstrip("\n")))
        self._bound()

    def add_output(self, text: str) -> None:
        if text:
            self.entries.append(Entry("output", text.rstrip("\n")))
            self._bound()

    def insert_code_before_last(self, source: str) -> None:
        """Put a definition before the newest statement (function generation)."""
        index = max((i for i, e in enumerate(self.entries) if e.kind == "code"), default=len(self.entries))
        self.entries.insert(index, Entry("code", source.rstrip("\n")))
        self._bound()

    def chars(self) -> int:
        """Length of ``render()``."""
        return sum(len(e.render()) for e in self.entries) + max(0, len(self.entries) - 1)

    @property
    def over_limit(self) -> bool:
        """Over ``max_chars`` even with every console output it may shorten shortened."""
        return 0 < self.max_chars < self.chars()

    def _bound(self) -> None:
        """Elide the oldest console outputs, then cut the newest one, until the transcript fits ``max_chars``."""
        over = self.chars() - self.max_chars if self.max_chars else 0
        if over <= 0:
            return
        protected = person_outputs(self.entries)
        newest = len(self.entries) - 1
        for index, entry in enumerate(self.entries[:newest]):
            if over <= 0:
                return
            short = entry.text[:KEEP_CHARS].split("\n")[0] + ELIDED
            if entry.kind == "output" and index not in protected and len(short) < len(entry.text):
                self.entries[index] = Entry("output", short)
                over -= len(entry.text) - len(short)
        entry = self.entries[newest]
        if over > 0 and entry.kind == "output" and newest not in protected:
            keep = max(KEEP_CHARS, len(entry.text) - over - len(CUT))
            if keep + len(CUT) < len(entry.text):
                self.entries[newest] = Entry("output", entry.text[:keep] + CUT)

    def render(self) -> str:
        return "\n".join(e.render() for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def code(self) -> list[str]:
        return [e.text for e in self.entries if e.kind == "code"]

    def instructions(self) -> list[str]:
        """What the person said, oldest first: the text of the dicts returned by wait_for_trigger()/ask()."""
        return [utterance_text(self.entries[i].text) for i in sorted(person_outputs(self.entries))]

    @classmethod
    def parse(cls, text: str) -> Transcript:
        """Read console text back: ``>>>`` starts code, ``...`` continues it, anything else is output."""
        transcript = cls()
        code: list[str] | None = None
        output: list[str] = []

        def flush() -> None:
            nonlocal code, output
            if code is not None:
                transcript.add_code("\n".join(code))
            if output:
                transcript.add_output("\n".join(output))
            code, output = None, []

        for line in text.splitlines():
            if line.startswith(PROMPT.rstrip()) and (line == PROMPT.rstrip() or line.startswith(PROMPT)):
                flush()
                code = [line[len(PROMPT):]]
            elif code is not None and not output and (line.startswith(CONTINUATION) or line == CONTINUATION.rstrip()):
                code.append(line[len(CONTINUATION):])
            elif code is not None or output or line.strip():
                output.append(line)
        flush()
        return transcript


def person_outputs(entries: list[Entry]) -> set[int]:
    """Indices of the outputs that hold the person's words (a dialog dict after wait_for_trigger()/ask())."""
    return {
        i + 1 for i, (before, after) in enumerate(zip(entries, entries[1:]))
        if before.kind == "code" and after.kind == "output" and _calls_trigger(before.text) and utterance_text(after.text)
    }


def _calls_trigger(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in TRIGGER_CALLS
        for node in ast.walk(tree)
    )


def utterance_text(output: str) -> str:
    """The 'text' of a dialog dict repr such as ``{'type': 'dialog', 'text': 'hi'}``; else ''."""
    try:
        value = ast.literal_eval(output.strip())
    except (ValueError, SyntaxError):
        return ""
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    return value if isinstance(value, str) else ""
