"""The dialog between a person and the console: utterances in, the robot's words out.

``wait_for_trigger()`` and ``ask()`` block on the next utterance, with a timeout; closing the channel
ends the session (the console reports ``SessionEnded``). What the robot says is bounded (teachbot.console.bounds):
a sentence over ``max_say_chars`` is an error, and only the newest ``max_said_kept`` sentences are kept.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable

from teachbot.console.bounds import Bounds, too_long_to_say

CUT = " [...]"  # ends a sentence of the robot's own that fit() shortened


class SessionEnded(Exception):
    """The person left (the dialog was closed)."""


class DialogChannel:
    """A queue of utterances from the person plus a callback for what the robot says."""

    def __init__(self, on_say: Callable[[str], None] | None = None, timeout: float = 300.0,
                 bounds: Bounds | None = None) -> None:
        self._incoming: queue.Queue[str | None] = queue.Queue()
        self.on_say = on_say or (lambda _text: None)
        self.timeout = timeout
        self.said: deque[str] = deque()
        self.limit(bounds or Bounds())

    def limit(self, bounds: Bounds) -> None:
        """Apply the say and history limits (the interaction core applies its config's)."""
        self.max_say_chars = bounds.max_say_chars
        self.said = deque(self.said, maxlen=bounds.max_said_kept)

    def fit(self, text: str) -> str:
        """The robot's own sentence (not console code's) cut to ``max_say_chars``."""
        if len(text) <= self.max_say_chars:
            return text
        return text[: max(0, self.max_say_chars - len(CUT))] + CUT

    def put_user(self, text: str) -> None:
        """An utterance of the person (from a topic, a terminal, a test)."""
        self._incoming.put(text)

    def close(self) -> None:
        self._incoming.put(None)

    def say(self, text: str) -> None:
        """Speak one sentence; over ``max_say_chars`` it raises ArgumentTooLarge and nothing is said."""
        self._speak(text, "say")

    def _speak(self, text: str, what: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"{what}() takes a string, got {type(text).__name__}; use {what}(str(value))")
        if len(text) > self.max_say_chars:
            raise too_long_to_say(what, self.max_say_chars, len(text))
        self.said.append(text)
        self.on_say(text)

    def wait_for_trigger(self) -> dict:
        """Block until the person speaks; the console shows the returned dict."""
        try:
            text = self._incoming.get(timeout=self.timeout)
        except queue.Empty:
            raise TimeoutError(
                f"nobody spoke within {self.timeout:.0f} s; call wait_for_trigger() again to keep waiting"
            ) from None
        if text is None:
            self._incoming.put(None)  # stay closed for any later call
            raise SessionEnded("the person ended the conversation")
        return {"type": "dialog", "text": text}

    def ask(self, question: str) -> dict:
        """Say ``question`` (bounded like say()) and wait for the answer."""
        self._speak(question, "ask")
        return self.wait_for_trigger()
