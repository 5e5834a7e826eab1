"""Learning from an interaction: the improvement LLM's three-prompt chain (plus a scope question).

(1) is there a problem, as a JSON verdict ``{"problem": true|false, "description": "one sentence"}``;
(2) how to do better, one sentence, no code; (scope) under which condition the lesson applies; (3) the
improved interaction in console syntax. The result is discarded when the call does not directly follow
the person's words (or the console's answer to their correction), when (1) finds no problem, when the
improved transcript is invalid (does not parse, calls anything but the profile's API, calls
learn_from_interaction()), equals the input, does not start with the person's original request or
names an object that was not in the scene.

The whole chain runs under an optional deadline (``time.monotonic()``) and a ``cancelled()`` check:
before each LLM call it stops with a not-ok lesson when either says so, and each call gets the seconds
left as its ``timeout``. Given the person's own sentence of how to do better (their edit of the lesson read back
to them, teachbot.interaction.confirm), the chain skips (1) and (2) and asks for the scope and the improved
interaction from that sentence. Ablations: ``off`` (never learn), ``store_raw`` (store the interaction as it
was, no LLM), ``improve`` (the default).
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from teachbot.language.json_reply import json_values
from teachbot.language.prompts import load_prompt
from teachbot.language.registry import RobotApi
from teachbot.language.reply import code_block, strip_reasoning
from teachbot.language.transcript import NOTE_PREFIX, Transcript, utterance_text
from teachbot.llm.base import Model
from teachbot.sandbox.validate import transcript_problems
from teachbot.tracing import set_attributes, span

MODES = ("improve", "store_raw", "off")
LEARN_CALL = "learn_from_interaction()"
SPOKEN_CALLS = ("say", "ask")  # their string arguments are words to the person, not object names
UNSTRUCTURED_NOTE = "the problem verdict was not JSON; its text was read as the problem"
CANCELLED = "the learning call was cancelled; nothing was stored"


@dataclass(frozen=True)
class Lesson:
    """What the improvement chain produced; ``transcript`` is what should be stored (when ``ok``)."""

    ok: bool
    reason: str  # why it was discarded, or what the robot will do differently
    problem: str = ""
    improvement: str = ""
    scope: str = ""
    transcript: str = ""
    notes: tuple[str, ...] = ()  # remarks on how the answers were read (e.g. an unstructured verdict)


@dataclass(frozen=True)
class Verdict:
    """The answer to "is there a problem": ``structured`` when it was read from a JSON object."""

    problem: bool
    description: str
    structured: bool = True


def deadline_message(seconds: float) -> str:
    """The reason given when a learning call with ``seconds`` in all ran out of time."""
    if seconds <= 0:
        return "the learning call's deadline had passed before it started; nothing was stored"
    return f"the learning call ran past its deadline of {seconds:.1f} s; nothing was stored"


class _Stopped(Exception):
    """The deadline passed or the caller cancelled: ``reason`` is the lesson's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Budget:
    """The time left to one learn() call."""

    deadline: float | None
    cancelled: Callable[[], bool] | None
    start: float = field(default_factory=time.monotonic)

    def check(self) -> float | None:
        """Seconds left (None: no deadline); raises _Stopped when cancelled or past the deadline."""
        if self.cancelled is not None and self.cancelled():
            raise _Stopped(CANCELLED)
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Stopped(deadline_message(self.deadline - self.start))
        return left


class Improver:
    """Runs the chain with one model for one robot API profile."""

    def __init__(self, model: Model, api: RobotApi, mode: str = "improve") -> None:
        if mode not in MODES:
            raise ValueError(f"learning mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.model, self.api, self.mode = model, api, mode
        self.templates = {name: load_prompt(f"improve_{name}.txt") for name in ("problem", "better", "scope", "transcript")}

    def _ask(self, budget: _Budget, name: str, **fields: str) -> str:
        prompt = self.templates[name].replace("{api}", self.api.import_block())
        for key, value in fields.items():
            prompt = prompt.replace("{" + key + "}", value)
        timeout = budget.check()
        with span("learning.step", {"learning.step": name}) as current:
            try:
                text = self.model.generate(prompt, stop=(), timeout=timeout).text
            except Exception:
                budget.check()  # a call cut short by the deadline or a cancellation: that is the answer
                raise
            answer = strip_reasoning(text)
            set_attributes(current, {"learning.verdict": answer.strip().splitlines()[0] if answer.strip() else ""})
        return answer

    def learn(
        self,
        transcript_text: str,
        *,
        scene_objects: Sequence[str] = (),
        deadline: float | None = None,
        cancelled: Callable[[], bool] | None = None,
        problem: str = "",
        improvement: str = "",
    ) -> Lesson:
        """The lesson of ``transcript_text`` (the console text up to and including the learn call).

        ``scene_objects``: the object names the robot knew (empty: not checked); ``deadline``: on
        ``time.monotonic()``, for the whole chain; ``cancelled``: stops the chain before its next call;
        ``improvement``: the person's own sentence of how to do better (with the ``problem`` found before),
        which replaces the model's answers to (1) and (2)."""
        if self.mode == "off":
            return Lesson(False, "learning is switched off (learning.mode: off)")
        history = _without_learn_call(transcript_text)
        if history is None:
            return Lesson(False, "learn_from_interaction() must directly follow what the person said; nothing was learned")
        if self.mode == "store_raw":
            return Lesson(True, "I stored this interaction as it was.", transcript=history)
        found: dict[str, Any] = {}
        budget = _Budget(deadline, cancelled)
        try:
            if improvement.strip():
                return self._from_sentence(history, tuple(scene_objects), budget, found, problem, improvement)
            return self._chain(history, tuple(scene_objects), budget, found)
        except _Stopped as stop:
            return Lesson(False, stop.reason, **found)

    def _chain(self, history: str, scene_objects: tuple[str, ...], budget: _Budget, found: dict[str, Any]) -> Lesson:
        verdict = parse_verdict(self._ask(budget, "problem", transcript=history))
        notes = () if verdict.structured else (UNSTRUCTURED_NOTE,)
        found.update(problem=verdict.description, notes=notes)
        suffix = "" if verdict.structured else f" ({UNSTRUCTURED_NOTE})"
        if not verdict.problem:
            return Lesson(False, "the improvement model found no problem in this interaction" + suffix, **found)
        if not verdict.description:
            said = "said there is a problem but not which" if verdict.structured else "gave no answer to whether there is a problem"
            return Lesson(False, f"the improvement model {said}; nothing was learned", **found)
        problem = verdict.description
        improvement = _one_sentence(self._ask(budget, "better", transcript=history, problem=problem))
        return self._from_sentence(history, scene_objects, budget, found, problem, improvement, notes, suffix)

    def _from_sentence(self, history: str, scene_objects: tuple[str, ...], budget: _Budget, found: dict[str, Any],
                       problem: str, improvement: str, notes: tuple[str, ...] = (), suffix: str = "") -> Lesson:
        """Steps (scope) and (3) from the problem and the sentence of how to do better."""
        improvement = " ".join(improvement.split())
        found.update(problem=problem, improvement=improvement)
        scope = _one_sentence(self._ask(budget, "scope", transcript=history, improvement=improvement))
        found["scope"] = scope
        answer = self._ask(budget, "transcript", transcript=history, problem=problem, improvement=improvement,
                           scene=_scene_note(scene_objects))
        improved = _from_first_statement(Transcript.parse(code_block(answer))).render()
        budget.check()  # the last answer came too late: it must not be stored
        rejection = improved_transcript_problem(improved, history, scene_objects, self.api)
        if rejection:
            return Lesson(False, rejection + suffix, **found)
        return Lesson(True, improvement, problem, improvement, scope, improved, notes)


# ---------------------------------------------------------------------------------------- verdict
_LABEL = re.compile(r"^(?:\*\*)?(?:final answer|answer|verdict|problem|description)(?:\*\*)?\s*:\s*(?:\*\*)?\s*", re.I)
_DESCRIPTION_KEYS = ("description", "reason", "explanation", "problem_description")


def parse_verdict(answer: str) -> Verdict:
    """Read the answer to the problem prompt: the first JSON (or Python-literal) object with a
    ``problem`` key; else an answer that is exactly "NO PROBLEM" means none, and anything else is a
    problem described by its first sentence (``structured`` False). Never a search over prose."""
    text = strip_reasoning(answer)
    for value in json_values(text):
        verdict = _verdict_of(value)
        if verdict is not None:
            return verdict
    bare = text.strip().strip("*`\"' \t\n").rstrip(".!").strip()
    if bare.lower() == "no problem":
        return Verdict(False, "", structured=False)
    lines = [line for line in text.splitlines() if not line.strip().startswith("```")]
    prose = _LABEL.sub("", " ".join(" ".join(lines).split())).strip().strip("*").strip()
    return Verdict(True, _one_sentence(prose), structured=False)


def _verdict_of(value: dict[Any, Any]) -> Verdict | None:
    keys = {str(k).strip().lower(): v for k, v in value.items()}
    if "problem" not in keys:
        return None
    flag = keys["problem"]
    if isinstance(flag, str):
        flag = {"true": True, "yes": True, "false": False, "no": False}.get(flag.strip().lower())
    elif isinstance(flag, int) and flag in (0, 1):
        flag = bool(flag)
    if not isinstance(flag, bool):
        return None
    description = next((keys[k] for k in _DESCRIPTION_KEYS if isinstance(keys.get(k), str)), "")
    return Verdict(flag, _one_sentence(description))


# ---------------------------------------------------------------------------------------- improved transcript
def improved_transcript_problem(improved: str, history: str, scene_objects: Sequence[str], api: RobotApi) -> str:
    """Why ``improved`` may not be stored as the lesson of ``history`` ('' when it may)."""
    problems = transcript_problems(improved, api, forbid=("learn_from_interaction",))
    if problems:
        return "the improved interaction is not valid: " + "; ".join(problems[:3])
    if _normalise(improved) == _normalise(history):
        return "the improved interaction is the same as the original"
    wanted = Transcript.parse(history).instructions()
    got = Transcript.parse(improved).instructions()
    if wanted and (not got or _words(got[0]) != _words(wanted[0])):
        first = repr(got[0]) if got else "no request"
        return f"the improved interaction does not start with the person's request {wanted[0]!r} (it starts with {first})"
    unknown = unknown_objects(improved, scene_objects)
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        return f"the improved interaction names {names}, not in the scene ({', '.join(scene_objects)})"
    return ""


def unknown_objects(text: str, scene_objects: Sequence[str]) -> list[str]:
    """String constants of ``text``'s code that look like object names (their last word is the category,
    the last word, of a scene object) but are not among ``scene_objects``; words spoken through say()/ask()
    and bare category words ('block') are no names. Empty when ``scene_objects`` is."""
    known = {_words(name) for name in scene_objects if name.strip()}
    categories = {name.split()[-1] for name in known}
    unknown: list[str] = []
    for source in Transcript.parse(text).code():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        skip = {id(n) for call in ast.walk(tree) if _spoken_or_formatted(call) for n in ast.walk(call)}
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            name = _words(node.value)
            words = name.split()
            if len(words) > 1 and words[-1].strip(".,;:!?") in categories and name not in known and node.value not in unknown:
                unknown.append(node.value)
    return unknown


def _spoken_or_formatted(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SPOKEN_CALLS


def _scene_note(scene_objects: Sequence[str]) -> str:
    if not scene_objects:
        return ""
    return " The objects the robot knew in this scene: " + ", ".join(scene_objects) + ". Name no other object."


# ---------------------------------------------------------------------------------------- helpers
def _without_learn_call(text: str) -> str | None:
    """The transcript before the final learn_from_interaction(), if that call directly follows the
    person's words (a wait_for_trigger()/ask() answered with a dialog dict), or the console's answer to
    their correction; otherwise None."""
    transcript = Transcript.parse(text)
    entries = transcript.entries
    while entries and entries[-1].kind == "output":  # the learn call's own output, if any
        entries = entries[:-1]
    if len(entries) < 3 or entries[-1].kind != "code" or entries[-1].text.strip() != LEARN_CALL:
        return None
    before = list(entries[:-1])
    # the console's own answer to a correction (its '# correction: ' note, maybe the re-run call and its
    # result) may stand between the person's words and the learn call; parsed back, the note is part of
    # the output that holds the person's words
    noted = [i for i in range(max(0, len(before) - 3), len(before)) if before[i].kind == "output"
             and any(line.startswith(NOTE_PREFIX) for line in before[i].text.splitlines())]
    if noted:
        before = before[:noted[0] + 1]
    if len(before) < 2:
        return None
    said, asked = before[-1], before[-2]
    if said.kind != "output" or asked.kind != "code" or not utterance_text(said.text):  # (the note is a comment to it)
        return None
    if not re.match(r"^\s*(\w+\s*=\s*)?(wait_for_trigger|ask)\(", asked.text):
        return None
    return Transcript(list(entries[:-1])).render()


def _from_first_statement(transcript: Transcript) -> Transcript:
    """``transcript`` without the prose a model may write before its first ``>>>`` statement."""
    first = next((i for i, entry in enumerate(transcript.entries) if entry.kind == "code"), 0)
    return Transcript(list(transcript.entries[first:]))


def _one_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).strip()


def _words(text: str) -> str:
    return " ".join(text.lower().split())


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines() if line.strip())
