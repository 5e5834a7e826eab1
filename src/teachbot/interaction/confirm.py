"""Confirm-before-store: the robot reads a lesson back in one sentence and stores it only once the person agrees.

After ``learn_from_interaction()`` the learner answers with a candidate lesson and stores nothing. The robot
says the lesson's sentence (what it will do differently) and asks; the person answers through the dialog,
the same way in ``teachbot chat`` (typing) and on the web page (its buttons send the same words):

- a clear yes (prompts/lessons.yaml ``agree``): the candidate is stored as it is;
- a clear no: nothing is stored;
- a sentence of their own: it replaces the robot's sentence, the learner writes the lesson again from it
  (scope and improved transcript follow the person's words) and that lesson is read back and asked about in turn
  (stored only on a yes; at most ``MAX_EDITS`` sentences, then nothing is stored);
- anything shorter than a sentence: asked once more, then nothing is stored; no answer: nothing is stored.

Only an answer given after the question counts (DialogChannel.ask_after): words typed before it, or a button of
another question, are not taken as its answer.

ROS-free; the wording is data (prompts/lessons.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.language.dialog import DialogChannel
from teachbot.learning.call import LearningCall, LearnReply, LearnRequest
from teachbot.memory.example import InteractionExample
from teachbot.paths import share_dir
from teachbot.sandbox import robot_time

WORDING = "lessons.yaml"
TEXTS = ("question", "again", "stored", "edited", "read_back", "rejected", "no_answer", "failed", "not_stored",
         "reason_rejected", "reason_no_answer", "reason_unclear", "reason_edits")
YES, NO, EDIT, UNCLEAR, SILENT = "yes", "no", "edit", "unclear", "silent"
MAX_EDITS = 3  # sentences of the person's own, each rewritten and read back, before the robot gives up


@dataclass(frozen=True)
class ConfirmWording:
    """The ``confirm:`` section of prompts/lessons.yaml."""

    texts: Mapping[str, str]
    yes: frozenset[str]
    no: frozenset[str]
    min_sentence_words: int = 3

    @classmethod
    def load(cls, path: str = "") -> ConfirmWording:
        """prompts/lessons.yaml (or ``path``); a ConfigError naming the file and the key."""
        source = path or str(share_dir() / "prompts" / WORDING)
        section = load_yaml(source).get("confirm")
        if not isinstance(section, Mapping):
            raise ConfigError(f"{source}: confirm: missing")
        missing = [k for k in TEXTS if not isinstance(section.get(k), str)]
        if missing:
            raise ConfigError(f"{source}: confirm: needs the texts {', '.join(missing)}")
        words = {}
        for key in ("agree", "refuse"):
            value = section.get(key)
            if not isinstance(value, list) or not value or not all(isinstance(w, str) and words_of(w) for w in value):
                raise ConfigError(f"{source}: confirm.{key}: must be a non-empty list of quoted words, got {value!r}")
            words[key] = frozenset(words_of(w) for w in value)
        if words["agree"] & words["refuse"]:
            raise ConfigError(f"{source}: confirm: {sorted(words['agree'] & words['refuse'])} are both agree and refuse")
        least = section.get("min_sentence_words", 3)
        if not isinstance(least, int) or isinstance(least, bool) or least < 1:
            raise ConfigError(f"{source}: confirm.min_sentence_words: must be a positive integer, got {least!r}")
        return cls({k: section[k] for k in TEXTS}, words["agree"], words["refuse"], least)

    def classify(self, answer: str) -> str:
        """YES, NO, EDIT (a sentence of the person's own) or UNCLEAR."""
        said = words_of(answer)
        if said in self.yes:
            return YES
        if said in self.no:
            return NO
        return EDIT if len(said.split()) >= self.min_sentence_words else UNCLEAR


def words_of(text: str) -> str:
    """An answer as compared with the word lists: lower-case words, punctuation dropped (apostrophes kept)."""
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def sentence_of(lesson: InteractionExample) -> str:
    """The one sentence the robot reads back: what it will do differently."""
    text = " ".join((lesson.improvement or lesson.problem).split()) or "this interaction as it went"  # (store_raw)
    return text if text[-1] in ".!?" else text + "."


class LessonConfirmation:
    """Asks the person about one candidate lesson and stores what they agreed to (see the module docstring).

    ``on_pending(lesson)`` is told the candidate while the question is open and ``None`` once it is answered
    (the web page shows the candidate and its buttons from it); ``log`` takes one-line notices."""

    def __init__(self, learner: LearningCall, dialog: DialogChannel, wording: ConfirmWording | None = None, *,
                 on_pending: Callable[[InteractionExample | None], None] = lambda _lesson: None,
                 log: Callable[[str], None] = lambda _line: None) -> None:
        self.learner, self.dialog = learner, dialog
        self.wording = wording or ConfirmWording.load()
        self.on_pending, self.log = on_pending, log

    def run(self, request: LearnRequest, candidate: InteractionExample, timeout: float,
            redo: Callable[[LearnRequest], LearnReply]) -> str | None:
        """Ask about ``candidate`` (from ``request``); store on yes, re-learn from an edit with ``redo``.

        Returns the console output of learn_from_interaction(): None when a lesson was stored, else
        ``nothing learned: <why>``."""
        texts = self.wording.texts
        lesson, question, edits = candidate, texts["question"], 0
        while True:
            sentence = sentence_of(lesson)
            self.on_pending(lesson)
            try:
                kind, answer = self._ask(question.format(sentence=sentence))
            finally:
                self.on_pending(None)
            self.log(f"lesson read back to the person: {sentence!r}; answer: {kind} {answer!r}")
            if kind == YES:
                return self._store(lesson, timeout, texts["edited" if edits else "stored"].format(sentence=sentence))
            if kind == NO:
                self._say(texts["rejected"])
                return texts["not_stored"].format(why=texts["reason_rejected"])
            if kind == SILENT:
                self._say(texts["no_answer"])
                return texts["not_stored"].format(why=texts["reason_no_answer"].format(timeout=self.dialog.timeout))
            if kind == UNCLEAR:
                self._say(texts["rejected"])
                return texts["not_stored"].format(why=texts["reason_unclear"])
            if edits >= MAX_EDITS:
                self._say(texts["rejected"])
                return texts["not_stored"].format(why=texts["reason_edits"].format(count=edits + 1))
            edited = " ".join(answer.split())
            reply = redo(replace(request, store=False, problem=candidate.problem, improvement=edited))
            if reply.lesson is None:
                self._say(texts["failed"].format(reason=reply.message))
                return texts["not_stored"].format(why=reply.message)
            # the rewritten lesson is read back: the person agrees to what will be stored, not to their own words
            lesson, question, edits = reply.lesson.replace(improvement=edited), texts["read_back"], edits + 1

    def _ask(self, question: str) -> tuple[str, str]:
        """(kind, the person's words): asked once more when the first answer is unclear."""
        for attempt in range(2):
            try:
                with robot_time.not_counted():  # waiting for the person is not robot time
                    answer = self.dialog.ask_after(
                        self.dialog.fit(question if attempt == 0 else self.wording.texts["again"]), "lesson")
            except TimeoutError:
                return SILENT, ""
            said = str(answer.get("text", "")) if isinstance(answer, Mapping) else str(answer)
            kind = self.wording.classify(said)
            if kind != UNCLEAR:
                return kind, said
        return UNCLEAR, said

    def _store(self, lesson: InteractionExample, timeout: float, said: str) -> str | None:
        reply = self.learner.store(lesson, timeout)
        if not reply.stored:
            self._say(self.wording.texts["failed"].format(reason=reply.message))
            return self.wording.texts["not_stored"].format(why=reply.message)
        self.log(f"lesson stored as {reply.example_id} after the person confirmed it")
        self._say(said)
        return None

    def _say(self, text: str) -> None:
        self.dialog.on_say(self.dialog.fit(text))


def pending_payload(lesson: InteractionExample | None) -> dict[str, Any]:
    """The candidate as plain data (for a topic or a page); {} when none is pending."""
    return {} if lesson is None else {**lesson.to_dict(), "sentence": sentence_of(lesson)}
