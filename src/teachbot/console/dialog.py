"""The dialog between a person and the console: utterances in, the robot's words out.

``wait_for_trigger()`` and ``ask()`` block on the next utterance, with a timeout; closing the channel
ends the session (the console reports ``SessionEnded``).
"""

from __future__ import annotations

import queue
from collections.abc import Callable


class SessionEnded(Exception):
    """The person left (the dialog was closed)."""


class DialogChannel:
    """A queue of utterances from the person plus a callback for what the robot says."""

    def __init__(self, on_say: Callable[[str], None] | None = None, timeout: float = 300.0) -> None:
        self._incoming: queue.Queue[str | None] = queue.Queue()
        self.on_say = on_say or (lambda _text: None)
        self.timeout = timeout
        self.said: list[str] = []

    def put_user(self, text: str) -> None:
        """An utterance of the person (from a topic, a terminal, a test)."""
        self._incoming.put(text)

    def close(self) -> None:
        self._incoming.put(None)

    def say(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"say() takes a string, got {type(text).__name__}; use say(str(value))")
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
        self.say(question)
        return self.wait_for_trigger()
