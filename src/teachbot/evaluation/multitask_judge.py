"""The multi-task benchmark's judge (teachbot.evaluation.multitask), from the simulator's ground truth only.

- A task's objects: every object of its scene (config/benchmarks/multitask/scenes/<task>.yaml) but the
  containers its goals put things into (box 1, the bowl); its goal objects: those its goals select
  (teachbot.taskmemory.specs.TaskSpec.relevant) when the case began.
- Success, as strict as the paper's ("the system must generate all the required actions correctly"): every
  step of the task's goals is done at the end, and no action of the robot while the task was the one asked
  for touched anything but its goal objects and its containers (putting the cup in the fruit bowl, pointing
  at the orange, giving the apple for the jello each fail the task), and no action of it ran after the
  person interrupted it and before they asked to go on (:class:`~teachbot.evaluation.multitask_protocol.SkillRecorder`
  refuses those and counts them).
- Retention: a probe's answer names exactly the true objects (:class:`NameMatcher`, tolerant of wording);
  an answer naming no object counts only when it says there is nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from teachbot.taskmemory import ObjectInfo, TaskMemoryConfig, TaskSpec, steps
from teachbot.taskmemory.environment import color_of

NOTHING_WORDS = ("nothing", "none", "no object", "all done", "everything is done")
ARTICLES = frozenset({"a", "an", "the", "some"})


@dataclass(frozen=True)
class Probe:
    """A question of the person about a task: ``at`` the objects of the task at this place or in this object;
    ``pointed`` the objects pointed at; ``tower`` the cubes in the tower; none of them (the task probe): the
    objects whose steps are still open."""

    ask: str
    at: str = ""
    pointed: bool = False
    tower: bool = False


def words_of(text: str) -> list[str]:
    """``text`` as lower-case words, underscores as spaces, articles dropped ('The small_bowl': small, bowl)."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower().replace("_", " ")) if w not in ARTICLES]


def singular(word: str, vocabulary: Iterable[str]) -> str:
    """``word`` in the singular when a singular form is in ``vocabulary`` ('cubes': cube, 'glasses': glass,
    'berries': berry); else as it is."""
    if not word.endswith("s") or len(word) <= 3:
        return word
    known = set(vocabulary)
    return next((c for c in (word[:-1], word[:-2], word[:-3] + "y") if c in known), word)


class NameMatcher:
    """Which of a task's objects an answer names, tolerant of wording.

    The rule: the answer and the names are normalised alike -- lower case, underscores as spaces, the
    articles a, an, the and some dropped, each word in the singular ('The apples' reads 'apple'). A phrase of
    the answer names an object when it is

    1. the object's full name ('fresh apple'), or
    2. one of its short names -- its catalog type ('small bowl' for a small_bowl), the last word of its name
       ('apple' for 'fresh apple', 'can' for 'tin can'), or either preceded by the object's colour ('red
       apple' for a red apple named 'fresh apple') -- and that short name fits no other object of the task.

    So "the apple" is "fresh apple" when the task has one apple, and names nothing when it has two (an
    ambiguous answer is not a right one). Longer phrases are read first, and a phrase is read once ('red
    cup' is not also 'cup')."""

    def __init__(self, objects: Mapping[str, ObjectInfo]) -> None:
        self.objects = dict(objects)
        aliases: dict[tuple[str, ...], set[str]] = {}
        full: dict[tuple[str, ...], str] = {}
        for name, info in self.objects.items():
            full[tuple(words_of(name))] = name
            for short in self._short(name, info):
                aliases.setdefault(short, set()).add(name)
        self.vocabulary = {w for phrase in (*full, *aliases) for w in phrase}
        self.phrases: dict[tuple[str, ...], str] = {p: next(iter(n)) for p, n in aliases.items() if len(n) == 1}
        self.phrases.update(full)  # a full name always names its object

    @staticmethod
    def _short(name: str, info: ObjectInfo) -> set[tuple[str, ...]]:
        heads = {tuple(words_of(info.type))} if info.type else set()
        name_words = words_of(name)
        if name_words:
            heads.add((name_words[-1],))
        colour = tuple(words_of(info.color))
        return heads | ({colour + h for h in heads} if colour else set())

    def named(self, text: str) -> set[str]:
        """The objects ``text`` names (see the class's rule)."""
        said = [singular(w, self.vocabulary) for w in words_of(text)]
        found: set[str] = set()
        for phrase in sorted(self.phrases, key=len, reverse=True):
            n = len(phrase)
            i = 0
            while i + n <= len(said):
                if tuple(said[i:i + n]) == phrase:
                    found.add(self.phrases[phrase])
                    said[i:i + n] = ["\0"]  # read once
                i += 1
        return found

    def score(self, answer: Sequence[str], truth: set[str]) -> float:
        """1.0 when ``answer`` names exactly the objects of ``truth`` (or says there is nothing when there is none)."""
        text = " ".join(answer)
        said = self.named(text)
        if not said and not truth:
            return 1.0 if any(w in text.lower() for w in NOTHING_WORDS) else 0.0
        return 1.0 if said == truth else 0.0


def named_objects(text: str, names: Iterable[str], types: Mapping[str, ObjectInfo] | None = None) -> set[str]:
    """The object names a sentence mentions (:class:`NameMatcher`; ``types``: each name's type and colour,
    else by full names and last words only)."""
    return NameMatcher({n: (types or {}).get(n, ObjectInfo("", "", "")) for n in names}).named(text)


def score_answer(answer: Sequence[str], truth: set[str], names: Iterable[str],
                 types: Mapping[str, ObjectInfo] | None = None) -> float:
    """1.0 when the answer names exactly the true objects (or says there is nothing when there is none)."""
    return NameMatcher({n: (types or {}).get(n, ObjectInfo("", "", "")) for n in names}).score(answer, truth)


def required_actions(spec: TaskSpec, relevant: Sequence[str], env: Mapping[str, ObjectInfo],
                     category_of: Mapping[str, frozenset[str]]) -> int:
    """Robot actions the task needs at least (a tower's base needs none)."""
    total = 0
    for goal in spec.goals:
        chosen = [n for n in relevant if goal.selects(env[n], category_of)]
        total += spec.actions_per_step(goal) * (len(chosen) - (1 if goal.kind == "stack" and chosen else 0))
    return total


@dataclass(frozen=True)
class TaskObjects:
    """A task's objects for judging actions: ``goal`` (what its goals select), ``targets`` (the containers
    its goals fill) and ``scene`` (every object of its scene)."""

    goal: frozenset[str]
    targets: frozenset[str]
    scene: frozenset[str]

    @property
    def allowed(self) -> frozenset[str]:
        """What an action may touch while the task is asked for."""
        return self.goal | self.targets

    @property
    def answerable(self) -> frozenset[str]:
        """The objects an answer about the task is read for: its scene's, less its containers."""
        return self.scene - self.targets


@dataclass
class Judge:
    """Ground truth of one case: each task's objects (at its place when the case began) and its steps now."""

    world: Any
    memory_config: TaskMemoryConfig
    relevant: dict[str, list[str]] = field(default_factory=dict)
    objects: dict[str, TaskObjects] = field(default_factory=dict)

    def environment(self) -> dict[str, ObjectInfo]:
        world = self.world.world
        catalog = world.catalog
        type_colors = {t: s.color for t, s in catalog.types.items()}
        out = {}
        for name, at in self.world.truth().items():
            kind = world.object_type(name)
            out[name] = ObjectInfo(kind, color_of(name, kind, catalog.colors, type_colors), at)
        return out

    def start(self, specs: Iterable[TaskSpec]) -> None:
        """Note each task's objects as the case begins."""
        env = self.environment()
        for spec in specs:
            self.relevant[spec.name] = spec.relevant(env, self.memory_config.category_of)
            targets = frozenset(g.target for g in spec.goals if g.kind == "into" and g.target in env)
            scene = frozenset(self.world.scene_objects(spec.name)) if hasattr(self.world, "scene_objects") else frozenset(env)
            self.objects[spec.name] = TaskObjects(frozenset(self.relevant[spec.name]), targets, scene)

    def steps(self, spec: TaskSpec, pointed: Sequence[str]) -> list[Any]:
        return steps(spec, self.relevant[spec.name], self.environment(), pointed, self.memory_config.category_of)

    def done(self, spec: TaskSpec, pointed: Sequence[str]) -> bool:
        """Every step of the task done (a task with no goal objects is never done)."""
        return bool(self.relevant[spec.name]) and all(s.done for s in self.steps(spec, pointed))

    def probe_truth(self, spec: TaskSpec, probe: Probe, kind: str, pointed: Sequence[str]) -> set[str]:
        """The objects a right answer to the probe names, now."""
        all_steps = self.steps(spec, pointed)
        if kind == "task":
            return {s.object for s in all_steps if not s.done}
        mine = self.objects[spec.name].answerable
        if probe.pointed:
            return {n for n in pointed if n in mine}
        if probe.tower:
            return {s.object for s in all_steps if s.done}
        env = self.environment()
        return {n for n in mine if n in env and env[n].at == probe.at}

    def matcher(self, task: str) -> NameMatcher:
        """The name matcher of a task's answers: its objects, by their true types and colours."""
        env = self.environment()
        return NameMatcher({n: env[n] for n in sorted(self.objects[task].answerable) if n in env})
