"""DROC's correction handler: is what the person just said a correction, of the plan or of a skill, and
on which part of the history does it depend?

Two model calls, as DROC's paper has it (``corrections.history_selection``, the default):

1. the dependence (``prompts/droc_dependence.txt``): from the correction's words alone the model answers
   what it depends on: (a) the last interaction, (b) the initial interaction, (c) nothing;
2. the solution (``prompts/droc_correction.txt``): the model sees the parameterised skills of the robot API
   with their parameters, ranges and docs, the skill being done (its latest call without its values), ONLY
   the selected history (``last``: the transcript since the person's previous words; ``initial``: the
   original request and the robot's first attempt; ``none``: nothing) and the utterance, and answers one
   JSON object.

With ``history_selection: false`` (the paper's Ours-E) one call (``prompts/droc_correction_full.txt``) sees
the whole history (the request, the transcript since, the last skill calls) and also says the dependence.

A plan-level correction gives a constraint the interaction LLM replans with; a skill-level one names a
call, a parameter, a direction and an amount (or an explicit change), which ``grounding`` turns into the
parameter's new value in the object's scale; the call is re-run with it. The change starts from the values
of the call being corrected: the latest call of that skill on that object, or with ``initial`` the first
one (the robot re-runs a corrected call from the start, so the latest call's values are where it is now;
``last`` and ``none`` differ in what the solver is shown, as in the paper).

Whatever the model does (an error, an unreadable answer, a skill or parameter that does not exist), the
handler answers: the safe fallback is a plan-level correction whose constraint is the utterance itself.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from teachbot.knowledge.grounding import CorrectionConfig, Grounded, ground, number_text, resolve, words
from teachbot.language.json_reply import read_json
from teachbot.language.prompts import load_prompt
from teachbot.language.registry import RobotApi
from teachbot.language.reply import strip_reasoning
from teachbot.language.transcript import NOTE_PREFIX, Transcript, person_outputs, utterance_text
from teachbot.llm.base import Model
from teachbot.skills.parameters import SkillParameters

log = logging.getLogger(__name__)

LEVELS = ("plan", "skill", "none")
HISTORIES = ("last", "initial", "none")
HISTORY_TEXT = {"last": "about the last action", "initial": "about the initial request", "none": "regardless of the history"}
HISTORY_SYNONYMS = {"previous": "last", "latest": "last", "recent": "last", "current": "last", "first": "initial",
                    "original": "initial", "start": "initial", "beginning": "initial", "no": "none", "default": "none",
                    "defaults": "none", "independent": "none"}
DEPENDENCE_LETTERS = {"a": "last", "b": "initial", "c": "none"}  # the dependence prompt's (a), (b), (c)
DEPENDENCE_WORDS = (("last interaction", "last"), ("initial interaction", "initial"), ("no dependence", "none"))
RECENT_CALLS = 5  # skill calls the prompt lists

__all__ = ["HISTORIES", "LEVELS", "Correction", "CorrectionConfig", "CorrectionHandler", "SkillCall",
           "fill", "parameter_block", "read_dependence", "skill_calls"]


@dataclass(frozen=True)
class SkillCall:
    """A parameterised robot-API call found in the transcript; ``object`` is what it acts on (its first
    positional argument, '' when it has none)."""

    skill: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    source: str
    object: str


@dataclass(frozen=True)
class Correction:
    """What an utterance is: a plan-level correction (``constraint``), a skill-level one (``call`` re-run as
    ``statement`` with the new ``parameters``) or none. ``note`` is the one transcript line saying so."""

    is_correction: bool
    level: str
    history: str
    constraint: str = ""
    call: SkillCall | None = None
    parameters: Mapping[str, float] = field(default_factory=dict)
    changes: tuple[str, ...] = ()
    statement: str = ""
    note: str = ""
    raw: str = ""
    dependence_raw: str = ""  # the dependence step's answer as it came ('' when that step did not run)

    def note_line(self) -> str:
        """The line for the transcript, starting with NOTE_PREFIX ('' when this is no correction)."""
        if self.note or not self.is_correction:
            return self.note
        about = HISTORY_TEXT.get(self.history, HISTORY_TEXT["last"])
        if self.level == "skill" and self.statement:
            return f"{NOTE_PREFIX}skill-level, {about}: {self.statement}"
        return f"{NOTE_PREFIX}plan-level, {about}: {one_line(self.constraint)}"


class CorrectionHandler:
    """Classifies and grounds the person's corrections for one robot API and one world's skill parameters.

    ``object_size``: an object's (x, y, z) extents in metres, or None when unknown (the configured default
    size is used then)."""

    def __init__(self, model: Model, api: RobotApi, parameters: SkillParameters, config: CorrectionConfig | None = None,
                 object_size: Callable[[str], Sequence[float] | None] = lambda _n: None) -> None:
        self.model = model
        self.api = api
        self.parameters = parameters
        self.config = config or CorrectionConfig()
        self.object_size = object_size
        self.skills = tuple(name for name in api.names if parameters.declared(name))
        # (skill, object) -> the learned parameter values the console applied to that call, if any (set by the
        # console when it has a knowledge base): the base a relative correction starts from
        self.learned: Callable[[str, str], Mapping[str, Any]] | None = None
        if self.config.history_selection:
            self.template = load_prompt(self.config.prompt)
            self.dependence_template = load_prompt(self.config.dependence_prompt)
        else:
            self.template, self.dependence_template = load_prompt(self.config.full_history_prompt), ""

    def last_calls(self, transcript: Transcript | str) -> list[SkillCall]:
        """The parameterised skill calls of the transcript with literal arguments, oldest first."""
        return [call for _, call in skill_calls(transcript, self.skills, self.parameters)]

    def acted_since_last_words(self, transcript: Transcript | str) -> bool:
        """Whether a parameterised skill ran between the person's previous words and their newest ones
        (only then can the newest words correct an action)."""
        transcript = as_transcript(transcript)
        said = sorted(person_outputs(transcript.entries))
        previous = said[-2] if len(said) >= 2 else -1
        return any(index > previous for index, _ in skill_calls(transcript, self.skills, self.parameters))

    def dependence_prompt(self, utterance: str) -> str:
        """Step 1's prompt: the correction's words alone."""
        return fill(self.dependence_template, {"correction": one_line(utterance).replace('"', "'")})

    def dependence(self, utterance: str) -> tuple[str, str]:
        """Step 1: what ``utterance`` depends on (``last``, ``initial`` or ``none``) and the model's answer as it
        came; ``last`` when the model fails or its answer names none of the three."""
        try:
            raw = self.model.generate(self.dependence_prompt(utterance), stop=(), temperature=0.0,
                                      max_tokens=self.config.dependence_max_tokens).text
        except Exception as exc:  # any backend failure: the most common case, the last interaction
            log.warning("correction: the dependence model failed (%s); taking the last interaction", exc)
            return "last", ""
        found = read_dependence(raw)
        if found is None:
            log.warning("correction: cannot read the dependence answer %r; taking the last interaction", raw[:200])
        return found or "last", raw

    def prompt(self, utterance: str, transcript: Transcript | str, history: str | None = None) -> str:
        """The solution prompt for ``utterance`` after ``transcript``: with ``history`` (``last``, ``initial``,
        ``none``) the two-step solver's, showing only that history; without, the whole-history prompt (Ours-E)."""
        transcript = as_transcript(transcript)
        if history is not None:
            calls = self.last_calls(transcript)
            current = plain_call(calls[-1], self.parameters.declared(calls[-1].skill)) if calls else "(no skill call with parameters yet)"
            fields = {"skills": parameter_block(self.api, self.parameters), "current": current,
                      "history": self.selected_history(transcript, utterance, history), "utterance": one_line(utterance)}
            return fill(self.template, fields)
        calls = self.last_calls(transcript)
        recent = calls[-RECENT_CALLS:]
        listing = "\n".join(f"{i}. {call.source}" + ("   <- the last action" if i == len(recent) else "")
                            for i, call in enumerate(recent, 1)) or "(no skill call with parameters yet)"
        instructions = transcript.instructions()
        fields = {"skills": parameter_block(self.api, self.parameters), "request": one_line(instructions[0]) if instructions else "(none)",
                  "history": self._history(transcript), "calls": listing, "utterance": one_line(utterance)}
        return fill(self.template, fields)

    def handle(self, utterance: str, transcript: Transcript | str) -> Correction:
        """What ``utterance`` (the person's newest words) corrects in ``transcript``; never raises for the model's sake."""
        fallback = plan_fallback(utterance)
        if not utterance.strip():
            return Correction(False, "none", "none")
        if not self.config.enabled:
            return fallback
        transcript = as_transcript(transcript)
        history, dependence_raw = self.dependence(utterance) if self.config.history_selection else (None, "")
        try:
            raw = self.model.generate(self.prompt(utterance, transcript, history), stop=(), temperature=0.0,
                                      max_tokens=self.config.max_tokens).text
        except Exception as exc:  # any backend failure: the interaction LLM replans with the utterance
            log.warning("correction: the model failed (%s); treating %r as a plan-level correction", exc, utterance[:80])
            return replace(fallback, dependence_raw=dependence_raw)
        answer = read_json(raw, ("correction", "level"))
        if answer is None:
            log.warning("correction: cannot read the model's answer %r; treating it as a plan-level correction", raw[:200])
            return replace(plan_fallback(utterance, raw), dependence_raw=dependence_raw)
        try:
            found = self._interpret(answer, utterance, transcript, raw, history)
        except (TypeError, ValueError, OverflowError) as exc:  # a value of an unexpected type in the answer
            log.warning("correction: the model's answer %r does not fit (%s); treating it as a plan-level correction", raw[:200], exc)
            found = plan_fallback(utterance, raw)
        return replace(found, dependence_raw=dependence_raw)

    def selected_history(self, transcript: Transcript, utterance: str, history: str) -> str:
        """The part of the history the solver sees for ``history`` (see the module docstring), with its heading."""
        spoken = sorted(person_outputs(transcript.entries))
        if spoken and utterance_text(transcript.entries[spoken[-1]].text).strip() == utterance.strip():
            now = spoken.pop()  # the current words are in the transcript: the history ends before them
            end = now - 1 if transcript.entries[now - 1].kind == "code" else now
        else:
            end = len(transcript.entries)
        limit = self.config.history_lines
        if history == "none" or not spoken:
            return ("What this correction depends on: nothing; no earlier interaction is shown." if history == "none" else
                    f"What this correction depends on: the {'last' if history == 'last' else 'initial'} interaction (none yet).")
        start = spoken[-1] if history == "last" else spoken[0]
        stop = end if history == "last" or len(spoken) == 1 else spoken[1] - 1
        lines = Transcript(transcript.entries[max(0, start - 1):stop]).render().splitlines()
        if len(lines) > limit:  # the last interaction's newest lines, the initial one's first ones
            lines = ["(earlier lines left out)", *lines[-limit:]] if history == "last" else [*lines[:limit], "(later lines left out)"]
        heading = ("What this correction depends on: the last interaction, from the person's previous words on" if history == "last"
                   else "What this correction depends on: the initial interaction, the person's original request and the robot's "
                        "first attempt")
        return (f"{heading} (console transcript: \">>> \" lines are the robot's statements, the other lines are their results "
                f"and what the person said):\n" + "\n".join(lines))

    # ------------------------------------------------------------------ internals
    def _history(self, transcript: Transcript) -> str:
        """The transcript from the person's first request on, its last ``history_lines`` lines."""
        spoken = sorted(person_outputs(transcript.entries))
        start = spoken[0] + 1 if spoken else 0
        lines = Transcript(transcript.entries[start:]).render().splitlines()
        if len(lines) > self.config.history_lines:
            lines = ["(earlier lines left out)", *lines[-self.config.history_lines:]]
        return "\n".join(lines) or "(nothing yet)"

    def _interpret(self, answer: Mapping[str, Any], utterance: str, transcript: Transcript, raw: str,
                   selected: str | None = None) -> Correction:
        flag = _flag(answer.get("correction"))
        level = " ".join(words(str(answer.get("level") or ""))).replace(" level", "")
        if flag is False or level == "none" or (flag is None and level not in ("plan", "skill")):
            return Correction(False, "none", "none", raw=raw)
        history = selected if selected is not None else _history_of(answer.get("history"))
        if level == "skill":
            found = self._skill(answer, history, transcript, raw)
            if found is not None:
                return found
            log.info("correction: the skill-level answer %r names no call or parameter to change; replanning instead", raw[:200])
            return plan_fallback(utterance, raw)
        constraint = one_line(str(answer.get("constraint") or "")) or one_line(utterance)
        return Correction(True, "plan", history, constraint=constraint,
                          note=f"{NOTE_PREFIX}plan-level, {HISTORY_TEXT[history]}: {constraint}", raw=raw)

    def _skill(self, answer: Mapping[str, Any], history: str, transcript: Transcript, raw: str) -> Correction | None:
        skill = str(answer.get("skill") or "").strip()
        parameter = str(answer.get("parameter") or "").strip()
        located = skill_calls(transcript, self.skills, self.parameters)
        calls = [call for _, call in located]
        if skill and skill not in self.skills:
            return None
        candidates = [c for c in calls if c.skill == skill] if skill else calls
        if not candidates:
            return None
        target = _matching(candidates, str(answer.get("object") or "")) or candidates[-1]
        same = [c for c in candidates if c.skill == target.skill and _same_object(c.object, target.object)]
        base_call = same[0] if history == "initial" else target
        declared = self.parameters.declared(base_call.skill)
        resolved = resolve(declared, parameter, str(answer.get("direction") or ""))
        value = _number(answer.get("value"))
        if resolved is None or (resolved[1] == 0 and value is None):
            return None
        name, sign = resolved
        spec = declared[name]
        applied = self.learned(base_call.skill, call_subject(base_call, calls)) if self.learned is not None else {}
        default = applied.get(name, self.parameters.default(spec))  # a learned default the console applied silently
        base = base_call.kwargs.get(name, default)
        if isinstance(base, bool) or not isinstance(base, (int, float)):
            log.info("correction: %s has no known value to change (a robot profile default, unbound)", name)
            return None
        size = self._size(call_subject(base_call, calls))
        grounded = ground(spec, float(base), sign, answer.get("amount"), value, size, self.config,
                          absolute=_flag(answer.get("absolute")) is True)
        kept = dict(base_call.kwargs)
        kept[name] = grounded.value
        statement = rewrite_call(base_call.source, kept)
        values = {k: v for k, v in kept.items() if k in declared and isinstance(v, (int, float)) and not isinstance(v, bool)}
        note = f"{NOTE_PREFIX}skill-level, {HISTORY_TEXT[history]}: {plain_call(base_call, declared)} again with {_was(grounded)}"
        return Correction(True, "skill", history, call=base_call, parameters=values, changes=(grounded.change,),
                          statement=statement, note=note, raw=raw)

    def _size(self, name: str) -> Sequence[float] | None:
        if not name:
            return None
        try:
            return self.object_size(name)
        except Exception as exc:  # the size source is a helper (perception, the scene model): never fatal here
            log.warning("correction: object_size(%r) failed (%s); using the default size", name, exc)
            return None


# ---------------------------------------------------------------------------------------- helpers
def plan_fallback(utterance: str, raw: str = "") -> Correction:
    """The safe answer when the model cannot be used: a plan-level correction about the last action, the
    utterance as its constraint."""
    constraint = one_line(utterance)
    return Correction(True, "plan", "last", constraint=constraint, note=f"{NOTE_PREFIX}plan-level, {HISTORY_TEXT['last']}: {constraint}",
                      raw=raw)


def as_transcript(transcript: Transcript | str) -> Transcript:
    return Transcript.parse(transcript) if isinstance(transcript, str) else transcript


def skill_calls(transcript: Transcript | str, skills: Sequence[str], parameters: SkillParameters | None = None
                ) -> list[tuple[int, SkillCall]]:
    """(entry index, call) of every call of ``skills`` in the transcript's code whose arguments are literals,
    oldest first. A call without positional arguments acts on its first string keyword argument that is
    not a declared parameter."""
    out: list[tuple[int, SkillCall]] = []
    for index, entry in enumerate(as_transcript(transcript).entries):
        if entry.kind != "code":
            continue
        try:
            tree = ast.parse(entry.text)
        except SyntaxError:
            continue
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in skills]
        for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
            call = _call(node, entry.text, parameters)
            if call is not None:
                out.append((index, call))
    return out


def _call(node: ast.Call, text: str, parameters: SkillParameters | None) -> SkillCall | None:
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None  # a variable or an expression: not a call that can be re-run as written
    if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    skill = node.func.id  # type: ignore[attr-defined]
    declared = parameters.declared(skill) if parameters is not None else {}
    if args:
        obj = args[0] if isinstance(args[0], str) else str(args[0])
    else:
        obj = next((v for k, v in kwargs.items() if isinstance(v, str) and k not in declared), "")
    source = ast.get_source_segment(text, node) or ast.unparse(node)
    return SkillCall(skill, args, kwargs, source, obj)


def parameter_block(api: RobotApi, parameters: SkillParameters) -> str:
    """The declarations of the API's skills that take parameters, each followed by its parameters with
    default, safe range and doc: what the correction and extraction prompts show."""
    blocks = []
    for function in api.functions:
        declared = parameters.declared(function.name)
        if not declared:
            continue
        lines = [function.declaration(), "    # parameters:"]
        for name, spec in declared.items():
            default = parameters.default(spec)
            shown = "the robot's own value" if default is None else number_text(int(default) if spec.integer else default)
            unit = f" {spec.unit}" if spec.unit else ""
            lines.append(f"    #   {name}: default {shown}{unit if default is not None else ''}, range {spec.range_text()}; {spec.doc}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) or "(no skill takes parameters)"


def rewrite_call(source: str, kwargs: Mapping[str, Any]) -> str:
    """``source`` (one call) with its keyword arguments set to ``kwargs`` (in their order); positional
    arguments are kept as written."""
    node = ast.parse(source.strip(), mode="eval").body
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a call: {source!r}")
    node.keywords = [ast.keyword(arg=name, value=ast.Constant(value)) if _constant(value) else
                     ast.keyword(arg=name, value=ast.parse(repr(value), mode="eval").body) for name, value in kwargs.items()]
    return ast.unparse(node)


def plain_call(call: SkillCall, declared: Mapping[str, Any]) -> str:
    """The call without its parameter keywords, e.g. ``grasp('cup')``."""
    return rewrite_call(call.source, {k: v for k, v in call.kwargs.items() if k not in declared})


def fill(template: str, fields: Mapping[str, str]) -> str:
    """``template`` with each ``{name}`` of ``fields`` replaced in one pass (a value holding a placeholder stays as it is)."""
    pattern = re.compile("|".join(re.escape("{" + key + "}") for key in fields))
    return pattern.sub(lambda m: fields[m.group(0)[1:-1]], template)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def _constant(value: Any) -> bool:
    return value is None or isinstance(value, (str, bytes, bool, int, float, complex))


def _was(grounded: Grounded) -> str:
    text = f"{grounded.parameter}={number_text(grounded.value)} (was {number_text(grounded.base)}"
    return text + (f", {grounded.change[grounded.change.index('clamped'):]}" if grounded.clamped else ")")


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return {"true": True, "yes": True, "false": False, "no": False}.get(value.strip().lower())
    return None


def read_dependence(answer: str) -> str | None:
    """The dependence step's answer: the first "(a)", "(b)" or "(c)" outside its reasoning (or a bare letter, or
    the category's name) as ``last``, ``initial`` or ``none``; None when it names none of them."""
    text = strip_reasoning(answer).casefold()
    letter = re.search(r"\(([abc])\)", text) or re.fullmatch(r"\W*([abc])\W*", text)
    if letter:
        return DEPENDENCE_LETTERS[letter.group(1)]
    named = [(text.find(phrase), history) for phrase, history in DEPENDENCE_WORDS if phrase in text]
    return min(named)[1] if named else None


def _history_of(value: Any) -> str:
    for word in words(str(value or "")):
        word = HISTORY_SYNONYMS.get(word, word)
        if word in HISTORIES:
            return word
    return "last"


def _number(value: Any) -> float | None:
    """An explicit change: a number, or a string such as '0.02', '2 cm', '-5 mm'; None when there is none."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = re.fullmatch(r"\s*([+-]?\d+(?:\.\d*)?|[+-]?\.\d+)\s*(mm|cm|m)?\s*", str(value))
    if not match:
        return None
    scale = {"mm": 0.001, "cm": 0.01, "m": 1.0, None: 1.0}[match.group(2)]
    return float(match.group(1)) * scale


def _same_object(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def _matching(calls: Sequence[SkillCall], name: str) -> SkillCall | None:
    """The latest call on the object ``name`` (exactly, else all its words in the call's object)."""
    if not name.strip():
        return None
    exact = [c for c in calls if _same_object(c.object, name)]
    if exact:
        return exact[-1]
    said = set(words(name)) - {"the", "a", "an"}
    loose = [c for c in calls if said and said <= set(words(c.object))]
    return loose[-1] if loose else None


# skills whose parameters are about the object held, not their first argument (a location): the skill that took it
HELD_BY = {"place_object": "grasp"}


def call_subject(call: SkillCall, calls: Sequence[SkillCall]) -> str:
    """The object a call's parameters are about (its knowledge is keyed by, its corrections scaled by): what it
    acts on, except for place_object, whose first argument is a location: there, the object grasped last before it."""
    if call.skill not in HELD_BY:
        return call.object
    before = calls[: next((i for i, c in enumerate(calls) if c is call), len(calls))]
    taken = [c for c in before if c.skill == HELD_BY[call.skill]]
    return taken[-1].object if taken else ""


def person_said(transcript: Transcript, before: int) -> str:
    """The person's last words at or before entry ``before`` ('' when none)."""
    spoken = [i for i in sorted(person_outputs(transcript.entries)) if i <= before]
    return utterance_text(transcript.entries[spoken[-1]].text) if spoken else ""
