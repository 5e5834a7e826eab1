"""The procedural memory: task specifications (config/task_memory.yaml) and what their goals mean.

A task's goals say, object by object, what done means: ``into`` a container, ``give`` to the person,
``point`` at it, ``stack`` into one tower. ``select`` picks the objects a goal is about among those at the
task's place when it began, by category (the config's common sense), type or colour, and ``except_color``
leaves colours out (the tower's coloured cubes: not the black and the white one). The deterministic
working-memory extractor and the multi-task benchmark's checks both read goals through :func:`steps`, so
the robot's idea of "done" and the judge's are the same definition. No ROS, no physics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.config import load_yaml, require
from teachbot.errors import ConfigError
from teachbot.paths import config_path

GOAL_KINDS = ("into", "give", "point", "stack")
WORKING_MODES = ("extractor", "worker")
PERSON, ROBOT = "person", "robot"  # where the person's and the robot's hand hold things


@dataclass(frozen=True)
class ObjectInfo:
    """One object of the environment as the task memory sees it: its type, colour and where it is now
    (a place, the name of what it rests in or on, ``robot`` or ``person``)."""

    type: str
    color: str
    at: str

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "color": self.color, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObjectInfo:
        return cls(str(data.get("type", "")), str(data.get("color", "")), str(data.get("at", "")))


Environment = Mapping[str, ObjectInfo]


@dataclass(frozen=True)
class Goal:
    """One goal of a task: which objects (``select``) and what becomes of them (``kind``, ``target``)."""

    kind: str
    target: str = ""  # the container of an `into` goal
    categories: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    colors: tuple[str, ...] = ()
    except_colors: tuple[str, ...] = ()  # not of these colours (coloured cubes: not black, white or gray)

    def selects(self, info: ObjectInfo, category_of: Mapping[str, frozenset[str]]) -> bool:
        if self.types and info.type not in self.types:
            return False
        if self.colors and info.color not in self.colors:
            return False
        if info.color in self.except_colors:
            return False
        return not self.categories or bool(category_of.get(info.type, frozenset()) & set(self.categories))

    def step_text(self, name: str) -> str:
        """The step for one object, as the working memory says it ('put the apple into box 1')."""
        return {"into": f"put the {name} into {self.target}", "give": f"give the {name} to the person",
                "point": f"point at the {name}", "stack": f"stack the {name} on the tower"}[self.kind]


@dataclass(frozen=True)
class TaskSpec:
    """One task of the procedural memory."""

    name: str
    description: str
    place: str = ""
    reminders: tuple[str, ...] = ()
    goals: tuple[Goal, ...] = ()
    ordered: bool = False

    def relevant(self, environment: Environment, category_of: Mapping[str, frozenset[str]]) -> list[str]:
        """The objects the task is about: at its place (or in something there) and selected by a goal."""
        here = [n for n in environment if self.place == "" or at_place(n, environment, self.place)]
        return [n for n in here if any(g.selects(environment[n], category_of) for g in self.goals)]

    def actions_per_step(self, goal: Goal) -> int:
        """Robot calls one step of ``goal`` needs at least (grasp + put or hand over; one point)."""
        return 1 if goal.kind == "point" else 2


@dataclass(frozen=True)
class Step:
    """One object's step of a task and whether it is done."""

    object: str
    goal: Goal
    done: bool

    @property
    def text(self) -> str:
        return self.goal.step_text(self.object)


@dataclass(frozen=True)
class TaskMemoryConfig:
    """config/task_memory.yaml."""

    enabled: bool = True
    working_memory: str = "extractor"
    declarative_limit: int = 20
    worker_log_lines: int = 40
    worker_temperature: float = 0.2  # the multi-task paper's sampling temperature for its LLMs
    logged_functions: tuple[str, ...] = ()
    categories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    profiles: Mapping[str, Mapping[str, TaskSpec]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None) -> TaskMemoryConfig:
        path = Path(path) if path else config_path("task_memory.yaml")
        source = str(path)
        raw = require(load_yaml(path), "task_memory", source, dict)
        mode = str(raw.get("working_memory", "extractor"))
        if mode not in WORKING_MODES:
            raise ConfigError(f"{source}: task_memory.working_memory must be one of {', '.join(WORKING_MODES)}, got {mode!r}")
        categories = {str(k): tuple(str(t) for t in v) for k, v in (raw.get("categories") or {}).items()}
        profiles = {str(p): {str(n): _spec(str(n), s, categories, f"{source}: task_memory.profiles.{p}.{n}")
                             for n, s in (tasks or {}).items()}
                    for p, tasks in (raw.get("profiles") or {}).items()}
        limit = int(raw.get("declarative_limit", 20))
        if limit < 1:
            raise ConfigError(f"{source}: task_memory.declarative_limit must be at least 1")
        temperature = float(raw.get("worker_temperature", 0.2))
        if not 0.0 <= temperature <= 2.0:
            raise ConfigError(f"{source}: task_memory.worker_temperature must be between 0 and 2, got {temperature}")
        return cls(bool(raw.get("enabled", True)), mode, limit, int(raw.get("worker_log_lines", 40)), temperature,
                   tuple(str(f) for f in raw.get("logged_functions") or ()), categories, profiles)

    def tasks(self, profile: str) -> Mapping[str, TaskSpec]:
        return self.profiles.get(profile, {})

    @property
    def category_of(self) -> dict[str, frozenset[str]]:
        """Object type -> the categories it belongs to."""
        return categories_by_type(self.categories)


def categories_by_type(categories: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    """``{category: [types]}`` turned round: object type -> the categories it belongs to."""
    out: dict[str, set[str]] = {}
    for category, types in categories.items():
        for t in types:
            out.setdefault(t, set()).add(category)
    return {t: frozenset(c) for t, c in out.items()}


def _spec(name: str, raw: Any, categories: Mapping[str, Sequence[str]], source: str) -> TaskSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with description, place, goals")
    goals = []
    for i, row in enumerate(raw.get("goals") or ()):
        where = f"{source}.goals[{i}]"
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: expected a mapping such as {{select: {{category: fruit}}, into: box 1}}")
        kinds = [k for k in GOAL_KINDS if k in row]
        if len(kinds) != 1:
            raise ConfigError(f"{where}: give exactly one of {', '.join(GOAL_KINDS)}")
        select = row.get("select") or {}
        unknown = sorted(set(select) - {"category", "type", "color", "except_color"})
        if unknown:
            raise ConfigError(f"{where}: select takes category, type, color and except_color, not {unknown}")
        cats = _strings(select.get("category"))
        missing = [c for c in cats if c not in categories]
        if missing:
            raise ConfigError(f"{where}: unknown categories {missing}; declare them under task_memory.categories")
        kind = kinds[0]
        target = str(row[kind]) if kind == "into" else ""
        if kind == "into" and not target.strip():
            raise ConfigError(f"{where}: into: needs the container's name")
        goals.append(Goal(kind, target, cats, _strings(select.get("type")), _strings(select.get("color")),
                          _strings(select.get("except_color"))))
    description = str(raw.get("description", "")).strip()
    if not description:
        raise ConfigError(f"{source}: a task needs a description (the coordinator reads it)")
    return TaskSpec(name, description, str(raw.get("place", "")), tuple(str(r) for r in raw.get("reminders") or ()),
                    tuple(goals), bool(raw.get("ordered", False)))


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else (str(value),)


def at_place(name: str, environment: Environment, place: str, depth: int = 8) -> bool:
    """Whether ``name`` is at ``place``: on its surface or in/on something that is (a tower, a box)."""
    at = environment[name].at
    for _ in range(depth):
        if at == place:
            return True
        if at not in environment:
            return False
        at = environment[at].at
    return False


def steps(spec: TaskSpec, relevant: Sequence[str], environment: Environment, pointed: Sequence[str],
          category_of: Mapping[str, frozenset[str]]) -> list[Step]:
    """Every step of ``spec`` for its ``relevant`` objects, in goal order, and whether each is done now:
    ``environment`` is the world now, ``pointed`` the objects pointed at since the task began, in order."""
    out: list[Step] = []
    tower = _tower(spec, relevant, environment, category_of)
    since = 0  # ordered pointing: where in ``pointed`` the current goal's pointing may start
    for goal in spec.goals:
        chosen = [n for n in relevant if n in environment and goal.selects(environment[n], category_of)]
        found: list[int] = []
        for name in chosen:
            at = environment[name].at
            if goal.kind == "into":
                done = at == goal.target
            elif goal.kind == "give":
                done = at == PERSON
            elif goal.kind == "stack":
                done = name in tower
            else:  # point: in an ordered task, only pointing after every object of the goals before it counts
                start = since if spec.ordered else 0
                index = next((i for i in range(start, len(pointed)) if pointed[i] == name), -1) if since >= 0 else -1
                done = index >= 0
                found.append(index)
            out.append(Step(name, goal, done))
        if goal.kind == "point" and spec.ordered and since >= 0:
            since = max(found, default=since - 1) + 1 if all(i >= 0 for i in found) else -1
    return out


def _tower(spec: TaskSpec, relevant: Sequence[str], environment: Environment, category_of: Mapping[str, frozenset[str]]) -> set[str]:
    """The stack goal's objects in the tallest tower of them (a tower needs two; one cube alone is its base,
    counted only once another stands on it)."""
    goal = next((g for g in spec.goals if g.kind == "stack"), None)
    if goal is None:
        return set()
    cubes = {n for n in relevant if n in environment and goal.selects(environment[n], category_of)}
    best: set[str] = set()
    for top in cubes:
        chain, at = {top}, environment[top].at
        while at in cubes and at not in chain:
            chain.add(at)
            at = environment[at].at
        if len(chain) >= 2 and len(chain) > len(best):
            best = chain
    return best


def prompt_block(specs: Mapping[str, TaskSpec]) -> str:
    """The task specifications as the coordinator's base prompt lists them."""
    if not specs:
        return "(no tasks are specified for this robot)"
    lines = []
    for name, spec in specs.items():
        lines.append(f"- {name}: {spec.description}")
        lines += [f"    - {r}" for r in spec.reminders]
    return "\n".join(lines)
