"""The dialog between a person and the console: utterances in, the robot's words out.

``wait_for_trigger()`` and ``ask()`` block on the next utterance, with a timeout; closing the channel
ends the session (the console reports ``SessionEnded``). Both directions are bounded (teachbot.language.bounds):
a sentence of the robot over ``max_say_chars`` is an error, only its newest ``max_said_kept`` sentences are
kept; an utterance of the person over ``max_heard_chars``, or one more while ``max_heard_waiting`` wait
unread, is not taken and the robot says why (a flood on dialog/user never grows the node).

Every question has an id (:class:`Question`, told to ``on_question``: the page's buttons carry it). An answer from a
button names its question (``put_user(text, answers=id)``); it is taken only while that question is open, and only
as that question's answer, never as words for a later wait. ``ask_after()`` (the approval gate, lesson confirmation)
takes only words said after the question: what the person typed before it waits for the next ``wait_for_trigger()``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from teachbot.language.bounds import Bounds, too_long_to_say

CUT = " [...]"  # ends a sentence of the robot's own that fit() shortened
_END = object()  # queued by end_conversation(): no utterance is this object
CONVERSATION_ENDED = "the person ended the conversation; the next episode waits for them"


QUESTION_TYPE, ANSWER_TYPE = "question", "answer"  # DialogTurn.type prefixes that carry a question's id


def question_type(kind: str, question_id: str) -> str:
    """The DialogTurn.type of a robot's question on dialog/robot: ``question:<kind>:<id>``."""
    return f"{QUESTION_TYPE}:{kind}:{question_id}"


def answer_type(question_id: str) -> str:
    """The DialogTurn.type of a page button's answer on dialog/user: ``answer:<id>``."""
    return f"{ANSWER_TYPE}:{question_id}"


def turn_question(turn_type: str) -> tuple[str, str]:
    """(kind, id) of a question turn, ('', id) of an answer turn, ('', '') of any other turn."""
    head, _, rest = turn_type.partition(":")
    if head == QUESTION_TYPE:
        kind, _, question_id = rest.partition(":")
        return kind, question_id
    return ("", rest) if head == ANSWER_TYPE else ("", "")


class SessionEnded(Exception):
    """The person left (the dialog was closed)."""


@dataclass(frozen=True)
class Question:
    """A question of the robot: ``id`` (what a page's buttons send back), ``kind`` (``ask``: the console's own,
    ``approval``: the motion gate's, ``lesson``: a lesson read back) and its text; ``open`` False once answered."""

    id: str
    kind: str
    text: str
    open: bool = True


@dataclass(frozen=True)
class _Heard:
    """One queued item: the person's words (or _END/None), its arrival number, the question id a button gave."""

    text: str | object | None
    seq: int
    answers: str = ""


class DialogChannel:
    """A queue of utterances from the person plus a callback for what the robot says."""

    def __init__(self, on_say: Callable[[str], None] | None = None, timeout: float = 300.0,
                 bounds: Bounds | None = None, on_question: Callable[[Question], None] | None = None) -> None:
        """``on_say`` speaks a sentence; ``on_question`` (default: ``on_say`` of an open question's text) is told each
        question as it opens and again, ``open`` False, once it is answered or given up."""
        self._heard: deque[_Heard] = deque()
        self._changed = threading.Condition()
        self._seq = 0  # numbers the queued items: an answer counts only when it came after its question
        self.on_say = on_say or (lambda _text: None)
        self.on_question = on_question or (lambda q: self.on_say(q.text) if q.open else None)
        self.timeout = timeout
        self.said: deque[str] = deque()
        self._refusing = False  # said that it takes no more until the console catches up
        self.question: Question | None = None  # the open question, if any
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

    def put_user(self, text: str, answers: str = "") -> bool:
        """An utterance of the person (from a topic, a terminal, a test); False when it was not taken (too long,
        or too many waiting unread, and the robot said why; or ``answers`` names a question that is not open).

        ``answers``: the id of the question a page's button answered ('' for words typed or spoken); such an
        answer is taken only while that question is open, and only as its answer."""
        if answers:
            with self._changed:
                if self.question is None or self.question.id != answers:
                    return False  # a stale click (a double click, another question's button): nobody's answer
        if len(text) > self.max_heard_chars:
            self.on_say(self.fit(f"What you said is too long for me ({len(text)} characters; I take at most "
                                 f"{self.max_heard_chars}), so I did not take it. Please say it in fewer words."))
            return False
        with self._changed:
            waiting = len(self._heard)
            taken = waiting < self.max_heard_waiting
            tell = not taken and not self._refusing  # said once per flood, not once per utterance
            self._refusing = not taken
            if taken:
                self._put(text, answers)
        if tell:
            self.on_say(f"You said {waiting} things I have not read yet, so I take nothing more until I have "
                        "caught up. Please wait for my answer.")
        return taken

    def _put(self, item: str | object | None, answers: str = "") -> None:
        """(Under ``_changed``) queue one item and wake the waiter."""
        self._seq += 1
        self._heard.append(_Heard(item, self._seq, answers))
        self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._put(None)

    def end_conversation(self) -> None:
        """The person ended the conversation (the page's button): the robot's next wait_for_trigger()/ask() finds
        nobody at once, which ends the episode quietly as a dialog timeout does; the next episode waits for them."""
        with self._changed:
            self._put(_END)

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
        return self._next(None, f"nobody spoke within {self.timeout:.0f} s; call wait_for_trigger() again to keep waiting")

    def ask(self, question: str) -> dict:
        """Say ``question`` (bounded like say()) and wait for the answer: the person's next words (the console's own
        questions; words said before it count, as the person may have answered already)."""
        return self._question(question, "ask", after=False)[0]

    def ask_after(self, question: str, kind: str) -> dict:
        """Ask ``question`` (of ``kind``: approval, lesson) and wait for an answer given after it: words typed or
        spoken after it was said, or a button that names it. Earlier words stay queued for the next wait; the
        returned dict also names the question (``question``: its id). TimeoutError when nobody answers in time."""
        heard, asked = self._question(question, kind, after=True)
        return {**heard, "question": asked}

    def _question(self, text: str, kind: str, after: bool) -> tuple[dict, str]:
        """(the answer, the question's id)."""
        if not isinstance(text, str):
            raise TypeError(f"ask() takes a string, got {type(text).__name__}; use ask(str(value))")
        if len(text) > self.max_say_chars:
            raise too_long_to_say("ask", self.max_say_chars, len(text))
        question = Question(uuid.uuid4().hex[:12], kind, text)
        with self._changed:
            self.question, since = question, self._seq
        self.said.append(text)
        try:
            self.on_question(question)
            heard = self._next(question.id, f"nobody spoke within {self.timeout:.0f} s; call wait_for_trigger() again to "
                                            "keep waiting", since if after else None)
        finally:
            with self._changed:
                self.question = None
            self.on_question(Question(question.id, kind, text, open=False))
        return heard, question.id

    def _next(self, question: str | None, silent: str, since: int | None = None) -> dict:
        """The next item for a wait (``question`` None) or for the open question ``question`` (with ``since``: only
        items queued after that number). Buttons' answers to any other question are dropped; closing and ending
        count whenever they came."""
        deadline = time.monotonic() + self.timeout
        with self._changed:
            while True:
                for item in list(self._heard):
                    if item.text is None:
                        raise SessionEnded("the person ended the conversation")  # stays queued: closed for later calls
                    if item.text is _END:
                        self._heard.remove(item)
                        raise TimeoutError(CONVERSATION_ENDED)
                    if item.answers and item.answers != question:
                        self._heard.remove(item)  # a button of a question that is no longer open
                        continue
                    if since is not None and item.seq <= since:
                        continue  # said before the question: not its answer; it waits for the next wait_for_trigger()
                    self._heard.remove(item)
                    return {"type": "dialog", "text": item.text}
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(silent)
                self._changed.wait(left)
