"""Learning from an interaction: the improvement LLM's three-prompt chain (plus a scope question).

(1) what is the problem, one sentence; (2) how to do better, one sentence, no code; (scope) under
which condition the lesson applies; (3) the improved interaction in console syntax. The result is
discarded when the call does not directly follow the person's words, when (1) finds no problem, when
the improved transcript is invalid (does not parse, calls anything but the profile's API, calls
learn_from_interaction()) or equals the input. Ablations: ``off`` (never learn), ``store_raw``
(store the interaction as it was, no LLM), ``improve`` (the default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from teachbot.console.prompt import load_prompt
from teachbot.console.registry import RobotApi
from teachbot.console.session import strip_fences
from teachbot.console.transcript import Transcript, utterance_text
from teachbot.console.validate import transcript_problems
from teachbot.llm.base import Model

MODES = ("improve", "store_raw", "off")
LEARN_CALL = "learn_from_interaction()"


@dataclass(frozen=True)
class Lesson:
    """What the improvement chain produced; ``transcript`` is what should be stored (when ``ok``)."""

    ok: bool
    reason: str  # why it was discarded, or what the robot will do differently
    problem: str = ""
    improvement: str = ""
    scope: str = ""
    transcript: str = ""


class Improver:
    """Runs the chain with one model for one robot API profile."""

    def __init__(self, model: Model, api: RobotApi, mode: str = "improve") -> None:
        if mode not in MODES:
            raise ValueError(f"learning mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.model, self.api, self.mode = model, api, mode
        self.templates = {name: load_prompt(f"improve_{name}.txt") for name in ("problem", "better", "scope", "transcript")}

    def _ask(self, name: str, **fields: str) -> str:
        prompt = self.templates[name].replace("{api}", self.api.import_block())
        for key, value in fields.items():
            prompt = prompt.replace("{" + key + "}", value)
        return self.model.generate(prompt, stop=()).text.strip()

    def learn(self, transcript_text: str) -> Lesson:
        """The lesson of ``transcript_text`` (the console text up to and including the learn call)."""
        if self.mode == "off":
            return Lesson(False, "learning is switched off (learning.mode: off)")
        history = _without_learn_call(transcript_text)
        if history is None:
            return Lesson(False, "learn_from_interaction() must directly follow what the person said; nothing was learned")
        if self.mode == "store_raw":
            return Lesson(True, "I stored this interaction as it was.", transcript=history)
        problem = _one_sentence(self._ask("problem", transcript=history))
        if not problem or re.search(r"\bno problem\b", problem, re.IGNORECASE):
            return Lesson(False, "the improvement model found no problem in this interaction", problem=problem)
        improvement = _one_sentence(self._ask("better", transcript=history, problem=problem))
        scope = _one_sentence(self._ask("scope", transcript=history, improvement=improvement))
        improved = strip_fences(self._ask("transcript", transcript=history, problem=problem, improvement=improvement))
        improved = Transcript.parse(improved).render()
        problems = transcript_problems(improved, self.api, forbid=("learn_from_interaction",))
        if problems:
            return Lesson(False, "the improved interaction is not valid: " + "; ".join(problems[:3]), problem, improvement, scope)
        if _normalise(improved) == _normalise(history):
            return Lesson(False, "the improved interaction is the same as the original", problem, improvement, scope)
        return Lesson(True, improvement, problem, improvement, scope, improved)


def _without_learn_call(text: str) -> str | None:
    """The transcript before the final learn_from_interaction(), if that call directly follows the
    person's words (a wait_for_trigger()/ask() answered with a dialog dict); otherwise None."""
    transcript = Transcript.parse(text)
    entries = transcript.entries
    while entries and entries[-1].kind == "output":  # the learn call's own output, if any
        entries = entries[:-1]
    if len(entries) < 3 or entries[-1].kind != "code" or entries[-1].text.strip() != LEARN_CALL:
        return None
    said, asked = entries[-2], entries[-3]
    if said.kind != "output" or asked.kind != "code" or not utterance_text(said.text):
        return None
    if not re.match(r"^\s*(\w+\s*=\s*)?(wait_for_trigger|ask)\(", asked.text):
        return None
    return Transcript(list(entries[:-1])).render()


def _one_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).strip()


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines() if line.strip())
