"""Stand-ins that read only their prompt: they prove that the method learns, not how a stand-in was written.

Unlike the oracle doubles (teachbot.evaluation.doubles), nothing here is told the task, its expert plan, its
variant or its success rule: each model decides from the text it is sent, as a real model would, with what a
language model brings along (which phrases name a place on the table, which name an object). Where a stand-in
must be imperfect to show a difference, the imperfection is a seeded parameter, the same for every method:

- ``ReaderModel`` (the robot's interaction model) imitates the example in its prompt whose request is most like
  the current one, carrying the differing words over into the example's string literals (a named place or an
  object is one unit: "top left corner" becomes "bottom side", never "bottom left side"), and where the example
  took an object from what the console printed (the first of a sorted list), it takes the one printed here. It holds a
  **misconception**: a seeded share ``confusion`` of the table's named places it mixes up with another place,
  whenever it must write such a place itself (adapted from an example that named another one); a place it
  copies from an example whose request said the same words is right, as in-context evidence overrides a prior.
  After a correction it fixes the table only from the person's words ("the red block is not on the top side"
  → ``put_first_on_second('red block', 'top side')``) and calls ``learn_from_interaction()`` first when they ask
  it to remember.
- ``TutorModel`` (the improvement model) answers the chain's prompts from the transcript shown in them: the
  problem from the person's correction, the lesson in words, and the improved interaction: the robot's first
  attempt with each place it got wrong replaced by the place the person named (or, when the attempt holds no
  such place, the moves the person asked for). A seeded share ``slip`` of its lessons are wrong: it writes the
  first attempt back unchanged, as a careless teacher would.
- ``ReaderProgramModel`` (the Code-as-Policies baselines) does what the reader does, in CaP's format: the
  closest ``# instruction`` of its prompt's examples adapted as a whole program; a correction (a new ``# ...``
  line) becomes the moves it names.

So ``ours`` can get better only by retrieving a lesson that holds the right place for the words of a request,
``ours-no-learning`` keeps its misconception, and ``ours-no-improve`` (the raw interaction stored) imitates its
own wrong first attempt.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable, Sequence

from teachbot.evaluation.doubles import (
    LEARN,
    REMEMBER,
    WAIT,
    current_transcript,
    imitate_with_outputs,
    person_words,
    prompt_examples,
    steps_since,
    swap_literals,
)
from teachbot.language.transcript import Transcript
from teachbot.llm.base import SYSTEM_END
from teachbot.llm.scripted import ScriptedModel

# the table's named places as a person says them (a language model knows the words, not the benchmark's list)
PLACES = tuple([f"{v} {h} corner" for v in ("top", "bottom") for h in ("left", "right")]
               + [f"{s} side" for s in ("top", "bottom", "left", "right")] + ["middle"])
PLACE = r"(?:(?:top|bottom) (?:left|right) corner|(?:top|bottom|left|right) side|middle)"
THING = r"[a-z]+ (?:block|bowl)"
# "the red block is not on the top side", "... is not in the blue bowl", "... is still in the gripper; it should be
# on the green block": what the person wants where, in their words
# (and, when they say so, what it rests on now: "...: it is on the pink block")
WANTED = re.compile(rf"\bthe ({THING}) is (?:not (?:on|in) the|still in the gripper; it should be (?:on|in) the) "
                    rf"({PLACE}|{THING})\b(?:: it is (?:on|in) the ({THING})\b)?", re.I)


def unit(seed: int, *words: str) -> float:
    """A number in [0, 1) drawn from ``seed`` and ``words`` alone: the same for every method and every resume."""
    digest = hashlib.sha256("/".join([str(seed), *words]).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def confusions(rate: float, seed: int) -> dict[str, str]:
    """The places a reader of ``seed`` mixes up: each with probability ``rate``, with a place drawn from the others."""
    mixed = {}
    for place in PLACES:
        if unit(seed, "confuse", place) < rate:
            others = [p for p in PLACES if p != place]
            mixed[place] = others[int(unit(seed, "as", place) * len(others))]
    return mixed


def wanted(words: str) -> list[tuple[str, str]]:
    """(object, where it should be) for every object the person's words say is not where they want it; a later
    mention of an object replaces an earlier one. In the order they can be moved: an object the words say another
    one rests on comes after that one."""
    found: dict[str, str] = {}
    under: dict[str, str] = {}  # object -> what it rests on now
    for match in WANTED.finditer(words):
        found[match.group(1).lower()] = match.group(2).lower()
        if match.group(3):
            under[match.group(1).lower()] = match.group(3).lower()
    order: list[str] = []
    left = list(found)
    while left:  # the topmost first: nothing left to move rests on it
        free = next((t for t in left if not any(under.get(o) == t for o in left if o != t)), left[0])
        order.append(free)
        left.remove(free)
    return [(thing, found[thing]) for thing in order]


def moves(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Statements that put each object where the person wants it; objects sent to one place are stacked there."""
    out, top = [], {}
    for thing, target in pairs:
        below = top.get(target, target) if re.fullmatch(PLACE, target) else target
        out.append(f"put_first_on_second({thing!r}, {below!r})")
        if re.fullmatch(PLACE, target):
            top[target] = thing
    return out


class ReaderModel(ScriptedModel):
    """The robot's interaction model: see the module docstring. ``threshold``: the word overlap an example's
    request needs to be imitated."""

    def __init__(self, confusion: float = 0.0, seed: int = 0, threshold: float = 0.6) -> None:
        super().__init__(respond=self.answer, name=f"interaction:reader(confusion={confusion:g})")
        self.mixed, self.threshold = confusions(confusion, seed), threshold

    def misread(self, value: str) -> str:
        """The place this reader writes for a place it adapted (its misconception), else ``value``."""
        return self.mixed.get(value, value)

    def answer(self, prompt: str) -> str:
        transcript = current_transcript(prompt)
        said = person_words(transcript)
        if not said:
            return WAIT
        last_index, last_words = said[-1]
        if len(said) > 1:  # corrected (or answered): learn when asked to, then do what the words say
            if REMEMBER.search(last_words) and steps_since(transcript, last_index, skip=()) == 0:
                return LEARN
            lines = moves(wanted(last_words))
        else:
            found = imitate_with_outputs(prompt_examples(prompt), last_words, self.threshold, self.misread, units)
            if found is None:
                lines = ["say('I do not know how to do that yet. Please tell me what you want where.')"]
            else:
                step = steps_since(transcript, last_index)  # no learn call before the first correction
                if step >= len(found):
                    return WAIT
                return read_outputs(found[step][0], [out for _, out in found[:step]], ran(transcript, last_index),
                                    last_words)
        step = steps_since(transcript, last_index)
        return lines[step] if step < len(lines) else WAIT


def units(text: str) -> list[str]:
    """A request in the units a reader compares and carries over: a named place or an object is one unit
    ("top left corner", "red block"), any other word another."""
    return re.findall(rf"(?:{PLACE}|{THING})\b|\S+", text.lower())


def ran(transcript: Transcript, index: int) -> list[tuple[str, str]]:
    """Each statement typed after entry ``index`` with the output the console showed after it ('' for none)."""
    entries = transcript.entries
    return [(entries[k].text, entries[k + 1].text if k + 1 < len(entries) and entries[k + 1].kind == "output" else "")
            for k in range(index + 1, len(entries)) if entries[k].kind == "code"]


def read_outputs(statement: str, shown: Sequence[str], got: Sequence[tuple[str, str]], request: str) -> str:
    """``statement`` with each object its example named from an output (the first of a printed list, say) replaced by
    the object in the same place of the same statement's output here: a reader follows what the console showed it,
    not the example's table. Objects the request names stay."""
    for name in dict.fromkeys(re.findall(rf"'({THING})'", statement)):
        if name in request.lower():
            continue
        for index in range(len(shown) - 1, -1, -1):
            position = _position(shown[index], name)
            if position is None or index >= len(got):
                continue
            here = _at(got[index][1], position)
            if here is not None and here != name:
                statement = swap_literals(statement, [(name, here)])
            break
    return statement


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None


def _position(output: str, name: str) -> int | None:
    """Where ``name`` stands in a printed list of names (-1: the whole output is that name); None: not there."""
    value = _literal(output)
    if value == name:
        return -1
    if isinstance(value, list | tuple) and name in value:
        return list(value).index(name)
    return None


def _at(output: str, position: int) -> str | None:
    value = _literal(output)
    if position == -1:
        return value if isinstance(value, str) else None
    if isinstance(value, list | tuple) and position < len(value) and isinstance(value[position], str):
        return value[position]
    return None


class TutorModel(ScriptedModel):
    """The improvement model: see the module docstring. ``slip``: the seeded share of wrong lessons."""

    def __init__(self, slip: float = 0.0, seed: int = 0) -> None:
        super().__init__(respond=self.answer, name=f"improvement:tutor(slip={slip:g})")
        self.slip, self.seed = slip, seed

    def answer(self, prompt: str) -> str:
        shown = _shown_transcript(prompt)
        said = person_words(shown)
        request = said[0][1] if said else ""
        pairs = wanted(" ".join(words for _, words in said[1:]))
        if '"problem"' in prompt:
            problem = len(said) > 1
            description = ("The robot did not put " + _and(f"the {t} {_preposition(w)} the {w}" for t, w in pairs) + "."
                           if pairs else "The person corrected the robot." if problem else "The person did not correct it.")
            return "```json\n" + json.dumps({"problem": problem, "description": description}) + "\n```"
        if "How can the robot do better" in prompt:
            return ("Put " + _and(f"the {t} {_preposition(w)} the {w}" for t, w in pairs) + " when the person asks for that."
                    if pairs else "Do what the person asks, for every object they name.")
        if "Under which condition" in prompt:
            return f"Whenever the person asks: {request}"
        return self.lesson(shown, said, pairs)

    def lesson(self, shown: Transcript, said: list[tuple[int, str]], pairs: list[tuple[str, str]]) -> str:
        """The interaction as it should have gone: the first request, the better attempt, ``wait_for_trigger()``."""
        if not said:
            return "```python\n>>> wait_for_trigger()\n```"
        start, request = said[0]
        end = said[1][0] if len(said) > 1 else len(shown.entries)
        attempt = [e.text for e in shown.entries[start + 1:end] if e.kind == "code"
                   and not e.text.startswith(("wait_for_trigger(", LEARN))]
        better = attempt if unit(self.seed, "slip", shown.render()) < self.slip else _corrected(attempt, request, pairs)
        lines = [f">>> {WAIT}", repr({"type": "dialog", "text": request})]
        for statement in better:
            first, *rest = statement.split("\n")
            lines += [f">>> {first}", *(f"... {r}" for r in rest)]
        lines.append(f">>> {WAIT}")
        return "```python\n" + "\n".join(lines) + "\n```"


def _corrected(attempt: list[str], request: str, pairs: list[tuple[str, str]]) -> list[str]:
    """The attempt with each place the request does not name replaced by the one the person named that the attempt
    lacks; with no such place, the moves the person asked for."""
    written = [p for p in PLACES if any(re.search(rf"'{p}'", s) for s in attempt)]
    wrong = [p for p in written if p not in request.lower()]
    right = list(dict.fromkeys(w for _, w in pairs if re.fullmatch(PLACE, w) and w in request.lower() and w not in written))
    if wrong and right:
        swaps = list(zip(wrong, right))
        return [swap_literals(s, swaps) for s in attempt]
    return moves(pairs) or attempt


class ReaderProgramModel(ScriptedModel):
    """The reader for the CaP baselines: whole programs from its prompt's ``# instruction`` examples."""

    def __init__(self, confusion: float = 0.0, seed: int = 0, threshold: float = 0.6) -> None:
        super().__init__(respond=self.answer, name=f"interaction:reader-program(confusion={confusion:g})")
        self.reader = ReaderModel(confusion, seed, threshold)

    def answer(self, prompt: str) -> str:
        *examples, current = _cap_tasks(prompt)
        said = [line[2:] for line in current if line.startswith("# ")]
        if len(said) > 1:
            program = moves(wanted(said[-1]))
        else:
            found = imitate_with_outputs([_as_transcript(example) for example in examples], said[0] if said else "",
                                         self.reader.threshold, self.reader.misread, units)
            program = [line for line, _ in found] if found is not None else ["say('I do not know how to do that yet.')"]
        return "```python\n" + "\n".join(program) + "\n```"


def _cap_tasks(prompt: str) -> list[list[str]]:
    """The CaP prompt's tasks (its examples, then the current one), each as its lines from ``objects = ...``."""
    text = prompt.replace(SYSTEM_END, "\n\n")
    blocks = [b.strip("\n") for b in re.split(r"\n\s*\n(?=objects = )", text)]
    return [b.splitlines() for b in blocks if b.startswith("objects = ")]


def _as_transcript(task: list[str]) -> Transcript:
    """A CaP example as console text: its first ``# instruction`` as the person's words, its program as statements
    (top-level lines, with their indented continuations), up to the next ``# ...`` line."""
    transcript = Transcript()
    said = [i for i, line in enumerate(task) if line.startswith("# ")]
    if not said:
        return transcript
    transcript.add_code(WAIT)
    transcript.add_output(repr({"type": "dialog", "text": task[said[0]][2:]}))
    statement: list[str] = []
    for line in task[said[0] + 1:]:
        if line.startswith("# "):
            break
        if line[:1] in (" ", "\t") and statement:
            statement.append(line)
            continue
        if statement:
            transcript.add_code("\n".join(statement))
        statement = [line]
    if statement:
        transcript.add_code("\n".join(statement))
    transcript.add_code(WAIT)
    return transcript


def _shown_transcript(prompt: str) -> Transcript:
    """The interaction an improvement prompt shows (its console text between the prompt's own paragraphs)."""
    match = re.search(r"\n\n(>>> .*?)\n\n(?:The problem|Did the robot|The lesson)", prompt, re.S)
    return Transcript.parse(match.group(1)) if match else Transcript()


def _preposition(where: str) -> str:
    return "in" if where.endswith("bowl") else "on"


def _and(parts: Iterable[str]) -> str:
    items = list(parts)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
