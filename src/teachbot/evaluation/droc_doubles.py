"""Stand-in models for the DROC evaluation (``teachbot eval droc --models doubles``).

They prove the evaluation's mechanics, not any model's quality: that the console runs the task, that the
person's words reach the correction handler and come back as a re-run or a replan, that the extractor
stores what was corrected and that retrieval brings it back (or keeps it away) for the next object. Each
double answers from what its prompt holds, in the styles chat models use (fenced JSON, prose around it):

- ``InteractionDouble`` reads the person's request and what ``list_objects()`` (``get_obj_names()`` on the
  tabletop) answers, the first thing it types, and turns them into a plan with a small grammar of the API's
  verbs (teachbot.evaluation.droc_request: it is never handed the task, the variant or its plan). It types
  the plan one statement per turn, with the keywords its prompt's "# What I know:" block gives the call's
  skill (``name=value`` of a learned skill parameter; the console applies nothing silently unless
  ``--inject-learned``), then ``wait_for_trigger()``; after a failed statement or a re-run typed by the
  console it hands back at once. A name that fits several listed objects ("my cup") is the one its prompt
  names as the right one (the "# What I know:" block, a "# correction: plan-level" note, the person's
  corrections; the newest correction weighs most, the knowledge least), else a guess drawn from the seed and
  the episode (the same for every method). With ``cap=True`` it is the
  Code-as-Policies baseline's model: no handler reads the person's words, so it turns a skill-level
  sentence into the corrected call itself, one FIXED step (the grounding of config/knowledge.yaml for an
  object of the default size, i.e. without the object's scale) from the value it last wrote, and remembers
  nothing between episodes.
- ``CorrectionDouble`` answers the handler's three prompts from their text. The dependence prompt
  (prompts/droc_dependence.txt) shows only the correction: a wrong object named back, "I meant", "the first
  time" or "continue" -> (b) the initial interaction; "the usual way" or a direction word (higher, left,
  narrower, so far...) -> (c) no dependence; anything else ("a bit more", "try again") -> (a) the last
  interaction. The solver prompts (prompts/droc_correction.txt with the selected history, or
  prompts/droc_correction_full.txt with all of it, where it also says the dependence by the same rules) give
  it the person's words and the skill being done (the "doing now" line, or the last of the listed calls),
  which it maps to one JSON answer: lower/higher -> grasp_height_offset, narrower/wider/less (of the hand) ->
  gripper_width, left/right -> the place offsets, less/further (of a drawer) -> pull_distance, "the usual
  way" -> the declared default, "not the X ... the Y" -> plan-level; "a bit more" or "a bit less" without a
  parameter word repeats (or reverses) the parameter change of a skill-level note, when the history shown
  holds one.
- ``ExtractionDouble`` (teachbot.evaluation.droc_extraction_double) answers the extractor's prompts.

Imperfect understanding (``Understanding``): one named level, ``noise``, the same for every method, and a
seed (one per trial). Each reading a double makes can go wrong with probability ``noise``, drawn from the
seed, the words read and the episode being played (``begin_draw``), never from the method: the handler's
double can take a correction's dependence for another one, read its direction the other way round ("a bit
lower" as higher, the object it names as the one it does not mean) or, when its prompt lists several skill
calls, take another call for the one being corrected (more history to read, more chances to slip); the
interaction double can miss a line of its "# What I know:" block or not take in a correction naming the
right object, and CaP's double read a direction the other way round; the extraction double can miss a
correction (at either level). With ``noise`` 0 they read perfectly (the mechanics tests).

What they cannot show: whether a model finds the right parameter or object from free wording, writes no
keyword when it should, or invents knowledge; those need ``--models config``. Both interaction doubles
read one thing out of an error: a refused value whose message names the limit is tried again at it.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from teachbot.evaluation.doubles import current_transcript, literal_call, person_words
from teachbot.evaluation.droc_request import Guess, RequestReader, is_look, looks_taken, world_of
from teachbot.evaluation.droc_tasks import Call
from teachbot.evaluation.reading_doubles import unit
from teachbot.knowledge.correction import rewrite_call, skill_calls
from teachbot.knowledge.grounding import CorrectionConfig, ground, resolve
from teachbot.language.prompts import CURRENT_HEADER
from teachbot.language.transcript import NOTE_PREFIX, Transcript
from teachbot.llm.base import SYSTEM_END
from teachbot.llm.scripted import ScriptedModel
from teachbot.simrobot.factory import sim_profile
from teachbot.skills.household_signatures import HOUSEHOLD_TARGETS
from teachbot.skills.parameters import SkillParameters

WAIT = "wait_for_trigger()"
KNOWN = "# What I know:"
SKILL_NOTE = NOTE_PREFIX + "skill-level"
PLAN_NOTE = NOTE_PREFIX + "plan-level"
DEFAULT_WORDS = ("normally", "usual", "normal way", "the way you normally")
INITIAL_WORDS = ("first time", "at first", "continue", "i asked", "i meant", "originally", "to begin with")
DIRECTION_WORDS = frozenset({"higher", "lower", "left", "right", "wider", "narrower", "closer", "nearer", "faster", "slower",
                             "further", "farther", "away", "wide", "up", "down"})
DEPENDENCE_START = "A human is issuing corrections"  # the first words of prompts/droc_dependence.txt
# "not the X" / "I meant the Y", "is the Y", "take the Y": a wrong object named back
NOT_THE = re.compile(r"\bnot the ([a-z][a-z ]*?)\s*[.,!;]", re.I)
MEANT_THE = re.compile(r"\b(?:meant|mean|is|take|want) the ([a-z][a-z ]*?)\s*[.,!;]", re.I)


T = TypeVar("T")
REVERSED = {"+": "-", "-": "+", "left": "right", "right": "left"}


@dataclass
class Understanding:
    """How well a double reads: each reading goes wrong with probability ``noise`` (0: never), drawn from
    ``seed``, the episode being played (``draw``, set by :meth:`begin_draw`) and the words read."""

    noise: float = 0.0
    seed: int = 0
    draw: str = ""
    seen: dict[tuple[str, ...], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {self.noise}")

    def slips(self, *read: str, fresh: bool = False) -> bool:
        """Whether the reading of ``read`` (what is read and the words) goes wrong. ``fresh``: a new reading of
        the same words in this episode draws again (the person said them again); else it reads them as before."""
        if fresh:
            count = self.seen[read] = self.seen.get(read, 0) + 1
            read = (*read, str(count))
        return self.noise > 0 and unit(self.seed, self.draw, *read) < self.noise

    def other(self, options: Sequence[T], right: T, *read: str) -> T:
        """One of ``options`` other than ``right``, drawn like a slip (``right`` when there is no other)."""
        others = [o for o in options if o != right]
        return others[int(unit(self.seed, self.draw, "other", *read) * len(others))] if others else right


class NoisyReader:
    """A double with an ``Understanding``: ``begin_draw(key)`` names the episode it plays next (the same
    key for every method, so that the methods meet the same slips where they read the same words)."""

    understanding: Understanding

    def begin_draw(self, key: str) -> None:
        """Draw this episode's slips from ``key`` (e.g. 'trial/task/iteration/variant')."""
        self.understanding.draw = key
        self.understanding.seen.clear()


def render_call(call: Call, keywords: Mapping[str, Any] | None = None) -> str:
    """``call`` as the console's function call: its target(s) positional, ``keywords`` by name (a
    handover's timeout is the simulated person's, not an argument)."""
    fields = dict(call.fields)
    if call.skill == "put_first_on_second":
        args = [fields.pop("object_name"), fields.pop("target_name")]
    elif call.skill in HOUSEHOLD_TARGETS:
        args = [fields.pop(HOUSEHOLD_TARGETS[call.skill])]
    else:
        args = []
    text = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in (keywords or {}).items())])
    return f"{call.skill}({text})"


def wrong_object(words: str) -> tuple[str, str] | None:
    """(what the person did not mean, what they meant) in a sentence naming the wrong object; None otherwise."""
    meant = MEANT_THE.findall(words + " ")
    if not meant:
        return None
    wrong = NOT_THE.findall(words + " ")
    return (wrong[0].strip() if wrong else ""), meant[-1].strip()


def read_parameter(words: str, skill: str) -> tuple[str, str] | None:
    """(parameter, direction) a skill-level sentence asks of ``skill``: direction '+', '-', 'left', 'right',
    or 'default' (parameter '' when the sentence names none); None when the words say nothing of the kind."""
    said = words.lower()
    w = set(re.findall(r"[a-z]+", said))
    if any(d in said for d in DEFAULT_WORDS):
        return "", "default"
    if skill in ("grasp", "put_first_on_second", "pick"):
        if "higher" in w:
            return "grasp_height_offset", "+"
        if "lower" in w:
            return "grasp_height_offset", "-"
        if "wider" in w:
            return "gripper_width", "+"
        if w & {"narrower", "wide"} or ("less" in w and w & {"gripper", "hand", "open"}):
            return "gripper_width", "-"
    if skill in ("place_object", "place", "put_first_on_second"):
        for side in ("left", "right"):
            if side in w:
                return ("place_offset_across" if skill == "place_object" else "place_offset_x"), side
    if skill == "open":
        if w & {"less"} or "so far" in said:
            return "pull_distance", "-"
        if w & {"further", "farther", "more"}:
            return "pull_distance", "+"
    return None


def knowledge_block(prompt: str) -> str:
    """The "# What I know:" lines of a console prompt ('' when it has none)."""
    shown = prompt.split(SYSTEM_END, 1)[-1].split(CURRENT_HEADER, 1)[0]
    if KNOWN not in shown:
        return ""
    lines = shown.split(KNOWN, 1)[1].splitlines()[1:]
    block = []
    for line in lines:
        if not line.startswith("# - "):
            break
        block.append(line)
    return "\n".join(block)


def _outputs_after(transcript: Transcript, index: int) -> list[str]:
    return [e.text for e in transcript.entries[index + 1:] if e.kind == "output"]


def _said_lines(transcript: Transcript) -> list[tuple[int, str]]:
    """(entry index, words) of the person's outputs; an output that holds the person's dict and then a
    correction note (rendered on consecutive lines) counts by its first line."""
    out = []
    for i, entry in enumerate(transcript.entries):
        if entry.kind != "output" or i == 0 or transcript.entries[i - 1].kind != "code":
            continue
        if not re.search(r"\b(wait_for_trigger|ask)\(", transcript.entries[i - 1].text):
            continue
        first = entry.text.split("\n", 1)[0]
        try:
            value = ast.literal_eval(first.strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, dict) and isinstance(value.get("text"), str) and value["text"]:
            out.append((i, value["text"]))
    return out or person_words(transcript)


class InteractionDouble(ScriptedModel, NoisyReader):
    """The interaction model's stand-in (see the module docstring): it reads only its prompt."""

    def __init__(self, cap: bool = False, understanding: Understanding | None = None, guess: Guess | None = None) -> None:
        super().__init__(respond=self.answer, name="interaction:droc-cap-double" if cap else "interaction:droc-double")
        self.cap, self.fixed_guess = cap, guess
        self.understanding = understanding or Understanding()
        self.config = CorrectionConfig.load()

    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        world = world_of(prompt)
        said = _said_lines(transcript)
        if not said:
            return WAIT
        last, words = said[-1]
        outputs = _outputs_after(transcript, last - 1)  # the person's output itself, and what followed
        if any(SKILL_NOTE in text for text in outputs):
            return WAIT  # the console re-ran the corrected call itself
        entries = transcript.entries
        acted = [i for i in range(last + 1, len(entries)) if entries[i].kind == "code" and not is_look(entries[i].text)]
        code = [entries[i] for i in acted]
        if any(i + 1 < len(entries) and entries[i + 1].kind == "output" and _failed(entries[i + 1].text) for i in acted):
            return at_limit(transcript) or WAIT  # a statement failed: hand back to the person
        if self.cap and len(said) > 1 and wrong_object(words) is None:
            before = Transcript(transcript.entries[:last])
            call = self.cap_call(before, words, world)
            if call:  # the corrected call, then back to the person
                return WAIT if code else call
        plan = self.plan(prompt, transcript, said, world)
        if isinstance(plan, str):
            return plan  # a look first
        if len(code) >= len(plan):
            return WAIT
        call = plan[len(code)]
        return render_call(call, {} if self.cap else self.learned(prompt, call, world))

    def known(self, prompt: str) -> list[str]:
        """The lines of the prompt's "# What I know:" block this reader takes in (each missed with the noise)."""
        return [line for line in knowledge_block(prompt).splitlines() if not self.understanding.slips("knowledge line", line)]

    def learned(self, prompt: str, call: Call, world: str) -> dict[str, float]:
        """The keywords the knowledge block gives ``call``: every ``name=value`` of a line it takes in whose name
        ``call``'s skill declares (its signature in the prompt), the first line's value winning."""
        declared = _bound(world).declared(call.skill)
        values: dict[str, float] = {}
        for line in self.known(prompt):
            said = line.split("(learned from", 1)[0] + " " + "".join(re.findall(r"\(\w+: [^)]*\)", line))
            for name, value in re.findall(r"\b(\w+)=(-?\d+(?:\.\d+)?(?:e-?\d+)?)", said):
                if name in declared and name not in values:
                    values[name] = float(value)
        return values

    def plan(self, prompt: str, transcript: Transcript, said: list[tuple[int, str]], world: str) -> tuple[Call, ...] | str:
        """The request read with what the looks answered (droc_request.RequestReader), steered by what the prompt
        says of the right choice: the person's corrections (each taken in or not, with the noise; the newest
        weighs most), the "# correction: plan-level" notes, then the "# What I know:" lines (those about this
        request first); or the look to type first."""
        read = self.understanding
        notes = [line for e in transcript.entries if e.kind == "output" for line in e.text.splitlines()
                 if line.startswith(PLAN_NOTE)]
        corrections = [w for i, (_, w) in enumerate(said[1:]) if not read.slips("correction", w, str(i))]  # one not taken in: the same plan
        request = said[0][1].strip().lower()
        known = sorted(self.known(prompt), key=lambda line: request not in line.lower())  # lines about this request first
        hints = [*reversed(corrections), *reversed(notes), *known]
        return RequestReader(world, looks_taken(transcript), hints, self.guess).plan(said[0][1])

    def guess(self, words: str, candidates: Sequence[str]) -> str:
        """Which of several listed objects an ambiguous name means, with no hint in the prompt: one drawn from the
        seed and the episode (the same draw for every method)."""
        if self.fixed_guess is not None:
            return self.fixed_guess(words, candidates)
        read = self.understanding
        return candidates[int(unit(read.seed, read.draw, "which", words, *candidates) * len(candidates))]

    def cap_call(self, transcript: Transcript, words: str, world: str) -> str:
        """CaP: the last parameterised call again, one fixed step further the way the words say ('' when they say none)."""
        parameters = _bound(world)
        names = [n for n in HOUSEHOLD_TARGETS if parameters.declared(n)] + ["put_first_on_second"]
        calls = [c for _, c in skill_calls(transcript, names, parameters)]
        if not calls:
            return ""
        last = calls[-1]
        read = read_parameter(words, last.skill)
        declared = parameters.declared(last.skill)
        if read is None:
            return ""
        name, direction = read
        if direction in REVERSED and self.understanding.slips("correction", words, str(len(person_words(transcript)))):
            direction = REVERSED[direction]  # read the other way round
        if direction == "default":
            return rewrite_call(last.source, {k: v for k, v in last.kwargs.items() if k not in declared})
        resolved = resolve(declared, name, direction)
        if resolved is None or resolved[1] == 0:
            return ""
        name, sign = resolved
        spec = declared[name]
        base = last.kwargs.get(name, parameters.check(last.skill)[name])
        value = ground(spec, float(base), sign, "small", None, None, self.config).value  # no object size: a fixed step
        return rewrite_call(last.source, {**last.kwargs, name: value})


@functools.cache
def _bound(world: str) -> SkillParameters:
    """The world's skill parameters bound to its simulated robot (profile defaults filled in)."""
    return SkillParameters.load(world, sim_profile(world))


def at_limit(transcript: Transcript) -> str:
    """The last statement again at the limit its refusal names ("... the lowest grasp of it is
    grasp_height_offset=-0.004 m"), as a model reading the error would; '' when there is none to take."""
    entries = transcript.entries
    if len(entries) < 2 or entries[-2].kind != "code" or entries[-1].kind != "output":
        return ""
    limit = re.search(r"\bis (\w+)=([-+]?\d*\.?\d+)", entries[-1].text)
    call = parse_call(entries[-2].text)
    if limit is None or call is None or limit.group(1) not in call[2] or not entries[-1].text.startswith("ValueError"):
        return ""
    again = rewrite_call(entries[-2].text, {**call[2], limit.group(1): float(limit.group(2))})
    return again if again != entries[-2].text else ""


def _failed(output: str) -> bool:
    first = output.strip().splitlines()[-1] if output.strip() else ""
    return bool(re.match(r"^[A-Z]\w*(Error|Exception)\b", first))


def depends_on(words: str) -> str:
    """What a correction depends on, from its words alone: ``initial``, ``none`` or ``last`` (see the module docstring)."""
    said = words.lower()
    if wrong_object(words) is not None or any(p in said for p in INITIAL_WORDS):
        return "initial"
    if any(d in said for d in DEFAULT_WORDS) or set(re.findall(r"[a-z]+", said)) & DIRECTION_WORDS or "so far" in said:
        return "none"
    return "last"


def noted_change(history: str) -> tuple[str, str] | None:
    """(parameter, '+' or '-') of the newest skill-level note in ``history``; None when it holds none."""
    found = re.findall(r"again with (\w+)=([-+\d.e]+) \(was ([-+\d.e]+)", history)
    if not found:
        return None
    name, value, base = found[-1]
    return name, "+" if float(value) > float(base) else "-"


class CorrectionDouble(ScriptedModel, NoisyReader):
    """The correction model's stand-in (see the module docstring)."""

    def __init__(self, understanding: Understanding | None = None) -> None:
        super().__init__(respond=self.answer, name="correction:droc-double")
        self.answers = 0
        self.understanding = understanding or Understanding()

    def dependence(self, words: str) -> str:
        """What ``words`` depend on as this double reads them (``depends_on``, or another one when it slips)."""
        found = depends_on(words)
        return self.understanding.other(("last", "initial", "none"), found, "dependence", words) \
            if self.understanding.slips("dependence", words, fresh=True) else found

    def answer(self, prompt: str) -> str:
        self.answers += 1
        asked = re.search(r'^Correction: "(.*)"$', prompt, re.M)
        if asked and prompt.startswith(DEPENDENCE_START):
            letter = {"last": "a", "initial": "b", "none": "c"}[self.dependence(asked.group(1))]
            return f"({letter})" if self.answers % 2 else f"The correction depends on ({letter})."
        said = prompt.rsplit("The person now says:", 1)[-1].split("\n", 1)[0].strip()
        whole = "The latest skill calls, oldest first:" in prompt  # the whole-history prompt (Ours-E)
        if whole:
            section = prompt.split("The latest skill calls, oldest first:", 1)[-1].split("The person now says:", 1)[0]
            sources = re.findall(r"^\d+\. (.+?)(?:\s+<- the last action)?\s*$", section, re.M)
        else:
            sources = re.findall(r"^The skill the robot is doing now [^:]*: (\w+\(.*\))\s*$", prompt, re.M)
        history = prompt.split("The person now says:", 1)[0]
        answer: dict[str, Any] = {"correction": False, "level": "none", "history": "none", "skill": "", "object": "",
                                  "parameter": "", "direction": "", "amount": "", "value": None, "absolute": False,
                                  "constraint": ""}
        named = wrong_object(said)
        understanding = self.understanding
        source = sources[-1] if sources else ""
        if len(sources) > 1 and understanding.slips("which call", said, fresh=True):
            source = understanding.other(sources, source, "which call", said)  # took another listed call for the one corrected
        last = parse_call(source) if source else None
        read = read_parameter(said, last[0]) if last is not None and named is None else None
        misread = understanding.slips("correction", said, fresh=True)
        if named is not None and misread and named[0]:
            named = (named[1], named[0])  # the object named back taken for the one meant
        if read is not None and misread and read[1] in REVERSED:
            read = (read[0], REVERSED[read[1]])  # the direction read the other way round
        if read is None and last is not None and named is None and set(re.findall(r"[a-z]+", said.lower())) & {"more", "less"}:
            change = noted_change(history)  # "a bit more": the change the last interaction made, again (or reversed)
            if change is not None:
                read = (change[0], change[1] if "more" in said.lower() else {"+": "-", "-": "+"}[change[1]])
        if named is not None:
            wrong, meant = named
            constraint = f"Use the {meant}" + (f", not the {wrong}." if wrong else ".")
            answer.update(correction=True, level="plan", history="initial", constraint=constraint)
            why = f"The person means another object: the {meant}."
        elif read is not None and last is not None:
            skill, obj, keywords = last
            name, direction = read
            answer.update(correction=True, level="skill", history="last", skill=skill, object=obj, amount="small")
            if direction == "default":
                declared = declared_defaults(prompt, skill)
                name = next((k for k in keywords if k in declared), next(iter(declared), "")) if declared else ""
                if not name:
                    answer.update(level="plan", history="none", constraint=said)
                else:
                    answer.update(history="none", parameter=name, value=declared[name], absolute=True, direction="")
                why = "The person wants the skill done the default way."
            else:
                answer.update(parameter=name, direction=direction)
                why = f"The person wants {skill} on the {obj} redone with {name} changed ({direction})."
        elif said:
            answer.update(correction=True, level="plan", history="last", constraint=said)
            why = "The person asks for another attempt; the plan should be redone."
        else:
            why = "Nothing to correct."
        if whole:
            answer["history"] = self.dependence(said)
        else:
            answer.pop("history")
        body = json.dumps(answer)
        if self.answers % 2:
            return f"{why}\n```json\n{body}\n```"
        return f"Here is how I read it:\n{body}\nThat is all."


def parse_call(source: str) -> tuple[str, str, dict[str, Any]] | None:
    call = literal_call(source)
    return (call[0], str(call[1][0]) if call[1] else "", call[2]) if call else None


def declared_defaults(prompt: str, skill: str) -> dict[str, float]:
    """The parameters the correction prompt lists under ``skill``'s declaration, with their numeric defaults."""
    part = prompt.split(f"def {skill}(", 1)
    if len(part) < 2:
        return {}
    block = part[1].split("\n\ndef ", 1)[0]
    found = re.findall(r"#\s+(\w+): default (-?[\d.]+)", block)
    return {name: float(value) for name, value in found}
