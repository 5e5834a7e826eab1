"""Common sense for the multi-task benchmark's stand-ins: reading a task's words, guessing an object from its
name, and the worker double (Prompts 4 and 5 of the multi-task memory paper), all from prompt text only.

What the stand-ins know besides their prompts is what any chat model knows: which object types are fruits or
kitchenware (config/task_memory.yaml's ``categories``), the household's object types and colours (the
catalog: a banana is yellow, a mug is a cup) and its place names (the layout). They are never handed a task's
specification: :class:`Reader` turns the sentences of a task's description and reminders into goals (what
goes where, what to point at, what to give, what to stack) the way the prompt says them.

Imperfection is one seeded parameter, ``slip``: the chance that one decision goes wrong (an object judged
wrongly relevant, an object's place misread from an older log entry, a planned step forgotten). Each
decision's draw depends on the case's seed and the decision only (:func:`draw`), so an answer is the same
every time the same prompt is read, the same for every method of a case, and different across trials.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from teachbot.llm.scripted import ScriptedModel
from teachbot.taskmemory.specs import Goal, ObjectInfo, TaskSpec, categories_by_type, steps

SYNONYMS = {"mug": "cup", "block": "cube", "tumbler": "glass", "powder": "jello"}  # what a name may call a type
ACHROMATIC = ("black", "white", "gray", "grey")
SELECT_ASK = "Name the objects that are relevant to the given task from the following:"
DECLARATIVE_ASK = '"environment_state"'  # the declarative prompt asks for this key (prompts/task_memory_declarative.txt)
_TASK_HEAD = re.compile(r"^(\S+) task: (.+)$")
_ENTRY = re.compile(r"^Log entry \d+:$")
_STEP = re.compile(r"^(put|give|point at|stack) the (.+?)(?: into (.+)| to the person| on the tower)?$")
VERBS = {"put": "into", "give": "give", "point at": "point", "stack": "stack"}


def draw(seed: int, key: str) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and ``key`` (one decision of one case)."""
    digest = hashlib.sha256(f"{seed}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def stem(word: str, vocabulary: Iterable[str] = ()) -> str:
    """``word`` in the singular: the first of its singular candidates ('cubes': cube, 'glasses': glass,
    'berries': berry) that ``vocabulary`` knows, else it without a final s."""
    word = word.lower()
    known = set(vocabulary)
    candidates = [word, word[:-1], word[:-2], word[:-3] + "y"] if word.endswith("s") and len(word) > 3 else [word]
    return next((c for c in candidates if c in known), candidates[1] if len(candidates) > 1 else word)


@dataclass(frozen=True)
class Reader:
    """Common sense: ``categories`` (category -> types), ``type_colors`` (type -> its usual colour), ``colors``
    (colour words) and ``places`` (place names of the house)."""

    categories: Mapping[str, Sequence[str]]
    type_colors: Mapping[str, str]
    colors: frozenset[str]
    places: tuple[str, ...]

    @classmethod
    def of(cls, catalog: object, categories: Mapping[str, Sequence[str]], places: Iterable[str]) -> Reader:
        types = getattr(catalog, "types")  # noqa: B009 -- any catalog with types and colours
        return cls(dict(categories), {t: s.color for t, s in types.items()}, frozenset(getattr(catalog, "colors")),  # noqa: B009
                   tuple(places))

    @property
    def category_of(self) -> dict[str, frozenset[str]]:
        """Object type -> the categories it belongs to, by the common sense this reader has."""
        return categories_by_type(self.categories)

    def guess(self, name: str, at: str = "") -> ObjectInfo:
        """An object's type and colour from its name ('red mug': a red cup, 'ripe banana': a yellow banana)."""
        words = [w for w in re.findall(r"[a-z_]+", name.lower())]
        type_ = ""
        for word in reversed(words):
            word = SYNONYMS.get(word, word)
            if word in self.type_colors:
                type_ = word
                break
        color = next((w for w in words if w in self.colors and w != type_), self.type_colors.get(type_, ""))
        return ObjectInfo(type_ or (words[-1] if words else name), color, at)

    # ------------------------------------------------------------------ a task's words
    def read(self, name: str, description: str, reminders: Sequence[str] = ()) -> TaskSpec:
        """The task a description and its reminders describe: its place, its goals in order, whether their
        order matters. A clause names what goes where ('the fruits ... into box 1'), what to point at
        ('every yellow object'), to give or to stack; a task of one goal also takes the types its reminders
        name ('The recipe needs the jello powder and the sugar.')."""
        text = description.lower()
        place = next((p for p in self.places if re.search(rf"\b(?:on|at|from|in) the {re.escape(p)}\b", text)), "")
        clauses = [c for c in re.split(r",? then |,? and (?=the |at |into |every |all )|; ", text.rstrip(".")) if c.strip()]
        kind = ("point" if re.search(r"\bpoint", text) else "stack" if re.search(r"\btower\b|\bstack", text)
                else "give" if re.search(r"\bgive\b|\bhand\b", text) else "into")
        goals = []
        for clause in clauses:
            target = ""
            into = re.search(r"\binto (box \d+|the [a-z0-9 ]+?)(?=$|,| and | one )", clause)
            if kind == "into":
                if not into:
                    continue
                target = into.group(1).removeprefix("the ").strip()
            selector = self._selector(clause.replace(into.group(0), " ") if into else clause, place)
            if any(selector):
                goals.append(Goal(kind, target, *selector))
        if len(goals) == 1 and reminders:
            extra = self._selector(" ".join(reminders).lower(), place)[1]
            goal = goals[0]
            if goal.types and extra:
                goals = [Goal(goal.kind, goal.target, goal.categories, tuple(dict.fromkeys(goal.types + extra)), goal.colors)]
        ordered = kind == "point" and " then " in text
        return TaskSpec(name, description, place, tuple(reminders), tuple(goals), ordered)

    def _selector(self, clause: str, place: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """(categories, types, colours) a clause names; types rule over categories ('the cubes', not 'cube')."""
        vocabulary = {*self.categories, *self.type_colors, *SYNONYMS, *self.colors}
        words = [stem(w, vocabulary) for w in re.findall(r"[a-z_]+", clause) if w not in (place, "person", "robot")]
        categories = tuple(dict.fromkeys(w for w in words if w in self.categories))
        types = tuple(dict.fromkeys(SYNONYMS.get(w, w) for w in words if SYNONYMS.get(w, w) in self.type_colors))
        colors = tuple(dict.fromkeys(w for w in words if w in self.colors and w not in types))
        if re.search(r"\bcolou?red\b", clause):
            colors = tuple(c for c in sorted(self.colors) if c not in ACHROMATIC)
        if types:
            categories = ()
        return categories, types, colors

    def relevant(self, spec: TaskSpec, names: Sequence[str], seed: int = 0, slip: float = 0.0) -> list[str]:
        """The objects of ``names`` a goal of ``spec`` selects, goal by goal (the pointing order); each judged
        wrongly with chance ``slip``."""
        category_of = self.category_of
        out: list[str] = []
        for goal in spec.goals:
            out += [n for n in names if n not in out and goal.selects(self.guess(n), category_of)]
        return [n for n in names if (n in out) != (draw(seed, f"select/{spec.name}/{n}") < slip)] if slip else out


def task_text(prompt: str) -> tuple[str, str, list[str]]:
    """(task, description, reminders) of a worker prompt: its ``<task> task: <description>`` line, then the
    '- ' lines under a 'Reminders' header (Prompt 5) or the lines up to the instruction (Prompt 4)."""
    lines = [line.strip() for line in prompt.splitlines()]
    for i, line in enumerate(lines):
        match = _TASK_HEAD.match(line)
        if not match:
            continue
        rest = lines[i + 1:]
        if rest and rest[0].startswith("Reminders"):
            reminders = [r.removeprefix("- ") for r in _until(rest[1:], lambda r: not r.startswith("- "))]
        else:
            reminders = _until(rest, lambda r: not r or r.startswith(SELECT_ASK))
        return match.group(1), match.group(2), [r for r in reminders if r != "(none)"]
    return "", "", []


def _until(lines: Sequence[str], stop: Callable[[str], bool]) -> list[str]:
    out = []
    for line in lines:
        if stop(line):
            break
        out.append(line)
    return out


class WorkerDouble(ScriptedModel):
    """The worker LLM offline: answers the selection prompt (Prompt 4) with the objects a :class:`Reader`
    reads the task to be about, and the state prompt (Prompt 5) with the steps done and to do as the task's
    log entries show them (the last entry for where things are, the actions for what was pointed at), and the
    declarative prompt with the environment and task state of the last entry. It sees only its prompt: with no
    log entries it knows of nothing done."""

    def __init__(self, reader: Reader, slip: float = 0.0, seed: int = 0) -> None:
        super().__init__(respond=self.answer, name="worker-double")
        self.reader, self.slip, self.seed = reader, slip, seed

    def reseeded(self, seed: int) -> WorkerDouble:
        """The same double with another seed (one case of one trial)."""
        return WorkerDouble(self.reader, self.slip, seed)

    def answer(self, prompt: str) -> str:
        task, description, reminders = task_text(prompt)
        spec = self.reader.read(task, description, reminders)
        if SELECT_ASK in prompt:
            listed = prompt.split(SELECT_ASK, 1)[1].strip().splitlines()[0]
            names = [n.strip() for n in listed.split(",") if n.strip()]
            return ", ".join(self.reader.relevant(spec, names, self.seed, self.slip))
        if DECLARATIVE_ASK in prompt:
            return json.dumps(self.declarative(spec, prompt))
        return json.dumps(self.state(spec, prompt))

    def declarative(self, spec: TaskSpec, prompt: str) -> dict[str, object]:
        """The declarative prompt's answer: the task's objects still at its place by the last log entry, the
        others by where they are in the order they got there, and what the actions pointed at."""
        names = _objects(prompt)
        place_line = re.search(r"^The task's place: (.*)$", prompt, re.M)
        place = place_line.group(1).strip() if place_line else spec.place
        entries, pointed = self.entries(prompt, spec.name, names)
        arrived: dict[str, int] = {}
        for k, entry in enumerate(entries):
            for name, at in entry.items():
                if k == 0 or entries[k - 1].get(name) != at:
                    arrived[name] = k
        where = entries[-1] if entries else {}
        state: dict[str, list[str]] = {}
        for name in sorted((n for n in names if where.get(n, place) != place), key=lambda n: arrived.get(n, 0)):
            state.setdefault(where[name], []).append(name)
        return {"environment_state": [n for n in names if where.get(n, place) == place], "task_state": state,
                "pointed_at": pointed}

    def state(self, spec: TaskSpec, prompt: str) -> dict[str, object]:
        names = _objects(prompt)
        entries, pointed = self.entries(prompt, spec.name, names)
        where = entries[-1] if entries else {}
        env = {n: self.reader.guess(n, where.get(n, spec.place)) for n in names}
        all_steps = steps(spec, names, env, pointed, self.reader.category_of)
        done = [s.text for s in all_steps if s.done]
        remaining = [s.text for s in all_steps if not s.done]
        state = f"{len(done)} of {len(all_steps)} steps done" + (f"; next: {remaining[0]}" if remaining else "")
        return {"task_reminders": list(spec.reminders), "task_state": state, "done": done, "remaining": remaining,
                "task_relevant_objects": {n: where[n] for n in names if n in where}}

    def entries(self, prompt: str, task: str, names: Sequence[str]) -> tuple[list[dict[str, str]], list[str]]:
        """Where each object was after each log entry (read anew, except what is misread from the entry
        before with chance ``slip``), and what the actions pointed at, in order."""
        out: list[dict[str, str]] = []
        pointed: list[str] = []
        current: dict[str, str] | None = None
        for line in prompt.splitlines():
            line = line.strip()
            if _ENTRY.match(line):
                current = {}
                out.append(current)
            elif current is not None and line.startswith("Action: "):
                call = re.match(r"Action: point_at\('([^']+)'\) -> (?!failed)", line)
                if call:
                    pointed.append(call.group(1))
            elif current is not None and ": " in line and not line.startswith("Task "):
                at, listed = line.split(": ", 1)
                for name in (n.strip() for n in listed.split(",")):
                    if name in names:
                        current[name] = at
            elif current is not None and not line:
                current = None
        if self.slip:
            for k in range(1, len(out)):
                for name in names:
                    if draw(self.seed, f"read/{task}/{name}/{k}") < self.slip and name in out[k - 1]:
                        out[k][name] = out[k - 1][name]
        return out, pointed


def _objects(prompt: str) -> list[str]:
    """The names of a worker prompt's 'The task's objects:' line."""
    objects = re.search(r"^The task's objects: (.*)$", prompt, re.M)
    return [n.strip() for n in objects.group(1).split(",")] if objects and objects.group(1) != "(none)" else []


def steps_of(state: Mapping[str, object], key: str) -> list[tuple[str, str, str]]:
    """(kind, object, target) of each step sentence of a working memory's ``done`` or ``remaining``."""
    out = []
    for text in state.get(key, []) if isinstance(state.get(key), list) else []:  # type: ignore[union-attr]
        match = _STEP.match(str(text))
        if match:
            out.append((VERBS[match.group(1)], match.group(2), match.group(3) or ""))
    return out
