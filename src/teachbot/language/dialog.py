"""The dialog between a person and the console: utterances in, the robot's words out.

``wait_for_trigger()`` and ``ask()`` block on the next utterance, with a timeout; closing the channel
ends the session (the console reports ``SessionEnded``). Both directions are bounded (teachbot.language.bounds):
a sentence of the robot over ``max_say_chars`` is an error, only its newest ``max_said_kept`` sentences are
kept; an utterance of the person over ``max_heard_chars``, or one more while ``max_heard_waiting`` wait
unread, is not taken and the robot says why (a flood on dialog/user never grows the node).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable

from teachbot.language.bounds import Bounds, too_long_to_say

CUT = " [...]"  # ends a sentence of the robot's own that fit() shortened
_END = object()  # queued by end_conversation(): no utterance is this object
CONVERSATION_ENDED = "the person ended the conversation; the next episode waits for them"


class SessionEnded(Exception):
    """The person left (the dialog was closed)."""


class DialogChannel:
    """A queue of utterances from the person plus a callback for what the robot says."""

    def __init__(self, on_say: Callable[[str], None] | None = None, timeout: float = 300.0,
                 bounds: Bounds | None = None) -> None:
        self._incoming: queue.Queue[str | object | None] = queue.Queue()
        self.on_say = on_say or (lambda _text: None)
        self.timeout = timeout
        self.said: deque[str] = deque()
        self._refusing = False  # said that it takes no more until the console catches up
        self._heard_lock = threading.Lock()
        self.limit(bounds or Bounds())

    def limit(self, bounds: Bounds) -> None:
        """Apply the say, history and hearing limits (the interaction core applies its config's)."""
        self.max_say_chars = bounds.max_say_chars
        self.said = deque(self.said, maxlen=bounds.max_said_kept)
        self.max_heard_chars, self.max_heard_waiting = bounds.max_heard_chars, bounds.max_heard_waiting

    def fit(self, text: str) -> str:
        """The robot's own sentence (not console code's) cut to ``max_say_chars``."""
        if len(text) <= self.max_say_chars:
            return text
        return text[: max(0, self.max_say_chars - len(CUT))] + CUT

    def put_user(self, text: str) -> bool:
        """An utterance of the person (from a topic, a terminal, a test); False when it was not taken (too long,
        or too many waiting unread), and the robot said why."""
        if len(text) > self.max_heard_chars:
            self.on_say(self.fit(f"What you said is too long for me ({len(text)} characters; I take at most "
                                 f"{self.max_heard_chars}), so I did not take it. Please say it in fewer words."))
            return False
        with self._heard_lock:
            waiting = self._incoming.qsize()
            taken = waiting < self.max_heard_waiting
            tell = not taken and not self._refusing  # said once per flood, not once per utterance
            self._refusing = not taken
            if taken:
                self._incoming.put(text)
        if tell:
            self.on_say(f"You said {waiting} things I have not read yet, so I take nothing more until I have "
                        "caught up. Please wait for my answer.")
        return taken

    def close(self) -> None:
        self._incoming.put(None)

    def end_conversation(self) -> None:
        """The person ended the conversation (the page's button): the robot's next wait_for_trigger()/ask() finds
        nobody at once, which ends the episode quietly as a dialog timeout does; the next episode waits for them."""
        self._incoming.put(_END)

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
        if text is _END:
            raise TimeoutError(CONVERSATION_ENDED)
        return {"type": "dialog", "text": text}

    def ask(self, question: str) -> dict:
        """Say ``question`` (bounded like say()) and wait for the answer."""
        self._speak(question, "ask")
        return self.wait_for_trigger()
