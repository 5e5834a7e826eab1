"""DROC's evaluation tasks as data: skill-level tasks with object variations over three iterations, and
plan-level ones, each with a ground-truth success check and the corrections a person would say.

A task (``config/benchmarks/droc/*.yaml``) is one instruction in one world (``household`` or ``tabletop``)
with the skill whose parameter a skill-level correction changes (config/skill_parameters.yaml) and its
variants: the object taught on (``teach``), the same object again (``same``), one that looks alike and
needs the same change (``similar``) and one that looks different and needs the default or another change
(``dissimilar``). Each variant brings its scene, the oracle ``plan`` (the skill calls that do the task),
the parameter range that makes it succeed in the simulation (``needs``; measured, see
test/test_droc_tasks.py) and the value two "a bit" corrections give from the default (``corrected``).
``iterations`` lists the variants of DROC's three rounds.

:meth:`DrocTask.problems` judges the simulator's ground truth before and after the robot acted
(:class:`Truth`); :meth:`DrocTask.correction` is the simulated person: from the state after a failed
attempt (and the parameters used, when known) the sentence they say, from the task's templates: a
wrong object ("no, the other cup"), or the direction a skill parameter must move in words ("grasp it a
bit lower"), never the parameter's name. Pure Python: the worlds are in
:mod:`teachbot.evaluation.droc_worlds`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from teachbot.config import load_yaml_list
from teachbot.errors import ConfigError
from teachbot.paths import config_path
from teachbot.simrobot.factory import sim_profile
from teachbot.skills.parameters import SkillParameters

WORLDS = ("household", "tabletop")
LEVELS = ("skill", "plan")
ROLES = ("teach", "same", "similar", "dissimilar", "train", "test")
TASK_FILES = ("household.yaml", "tabletop.yaml", "plan_level.yaml")
# the kinds of knowledge of the paper's plan-level tasks (its Table II): a train task, then a test task
KNOWLEDGE_TYPES = ("preference", "feasibility", "common_sense", "scene")
# what the person says, by the kind of mistake: a parameter to raise or lower, the default to come back
# to (a change that does not apply to this object), the wrong object taken, or none of these
SAYINGS = ("increase", "decrease", "default", "wrong_object", "retry")
CHECKS = ("held", "handed_over", "placed", "rests_on", "opening", "undisturbed")
TASK_FIELDS = ("id", "world", "level", "skill", "parameter", "instruction", "plan", "success", "corrections", "variants",
               "iterations", "type")
VARIANT_FIELDS = ("name", "role", "object", "scene", "needs", "corrected", "steps", "distractor", "instruction", "plan",
                  "success")
MOVED = 0.015  # metres another object may be pushed before it counts as disturbed
LIFTED = 0.02  # metres a grasped object must rise


# ---------------------------------------------------------------------- ground truth
@dataclass(frozen=True)
class ThingTruth:
    """One object after (or before) an attempt: map or base frame, metres. ``offset`` is (along, across)
    on the surface of its household place; ``place`` is 'person' for what the person holds."""

    name: str
    type: str
    position: tuple[float, float, float]
    size: tuple[float, float, float]
    upright: bool = True
    held: bool = False
    place: str = ""
    supported_by: str = ""
    offset: tuple[float, float] | None = None
    inside: bool = False  # in a drawer or the fridge (it rides along with the drawer)


@dataclass(frozen=True)
class Truth:
    """The simulator's ground truth at one moment: objects by name, the held one, door/drawer openings (0..1)."""

    objects: Mapping[str, ThingTruth]
    held: str = ""
    openings: Mapping[str, float] = field(default_factory=dict)

    def get(self, name: str) -> ThingTruth:
        if name not in self.objects:
            raise KeyError(f"no object {name!r} in the world; it has {', '.join(self.objects)}")
        return self.objects[name]


# ---------------------------------------------------------------------- the data
@dataclass(frozen=True)
class Call:
    """One skill call of a plan: the skill's name and its fields (no parameters)."""

    skill: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Variant:
    """One object variation of a task (see the module docstring)."""

    name: str
    role: str
    object: str
    scene: str  # YAML text of the scene, in the world's own scene format
    instruction: str
    plan: tuple[Call, ...]
    success: Mapping[str, Any]
    needs: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    corrected: Mapping[str, float] = field(default_factory=dict)
    steps: int = 0
    distractor: str = ""

    def wrong_plan(self) -> tuple[Call, ...]:
        """The plan with the distractor in place of the object: a plan-level mistake."""
        if not self.distractor:
            raise ValueError(f"variant {self.name!r} has no distractor")
        return tuple(Call(c.skill, {k: self.distractor if v == self.object else v for k, v in c.fields.items()}) for c in self.plan)


@dataclass(frozen=True)
class DrocTask:
    """One DROC task: see the module docstring and config/benchmarks/droc/household.yaml."""

    id: str
    world: str
    level: str
    skill: str
    parameter: str
    instruction: str
    corrections: Mapping[str, tuple[str, ...]]
    variants: tuple[Variant, ...]
    iterations: tuple[tuple[str, ...], ...]
    source: str = ""
    type: str = ""  # a Table II pair's kind of knowledge (KNOWLEDGE_TYPES); '' for the iterated tasks

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"task {self.id} has no variant {name!r}; it has {', '.join(v.name for v in self.variants)}")

    def iteration(self, number: int) -> list[Variant]:
        """The variants of DROC's iteration ``number`` (1, 2, 3; a Table II pair: 1 train, 2 test, none in 3)."""
        return [self.variant(n) for n in self.iterations[number - 1]] if number <= len(self.iterations) else []

    def defaults(self) -> dict[str, float]:
        """The skill's parameter defaults for the world's simulated robot."""
        return dict(_parameters(self.world).check(self.skill))

    def default(self) -> float:
        """The default of the task's parameter."""
        return float(self.defaults()[self.parameter]) if self.parameter else math.nan

    # ------------------------------------------------------------------ judging
    def problems(self, variant: Variant, before: Truth, after: Truth) -> list[str]:
        """What is wrong in ``after`` (from the ground truth ``before`` the robot acted), in plain words; empty on success."""
        out: list[str] = []
        for kind, spec in variant.success.items():
            for one in spec if isinstance(spec, list) else [spec]:  # a check may list several specs
                out += _CHECKS[kind](one, variant, before, after)
        return out

    def success(self, variant: Variant, before: Truth, after: Truth) -> bool:
        return not self.problems(variant, before, after)

    def diagnose(self, variant: Variant, before: Truth, after: Truth) -> str:
        """The problems in one line, for a user-simulator model; '' on success."""
        return "; ".join(self.problems(variant, before, after))

    def wrong_objects(self, variant: Variant, before: Truth, after: Truth) -> list[str]:
        """Objects other than the variant's that the robot took: now held, with the person, or newly on the
        support the task puts things on."""
        support = (variant.success.get("rests_on") or {}).get("support", "")
        wrong = []
        for name, thing in after.objects.items():
            if name == variant.object or name not in before.objects:
                continue
            was = before.objects[name]
            taken = thing.held or (thing.place == "person" and was.place != "person") \
                or (bool(support) and thing.supported_by == support and was.supported_by != support)
            if taken:
                wrong.append(name)
        return wrong

    def answer(self, variant: Variant, question: str) -> str:
        """The person's answer to the robot's ``ask(question)``, from the ground truth of what they want: where
        the thing goes for a "where" question, which thing they mean for one that asks which or names things of
        the object's kind, else their request again (they have nothing more to say)."""
        asked = question.lower()
        goal = variant.success.get("placed") or variant.success.get("rests_on") or {}
        goal = goal[0] if isinstance(goal, list) else goal
        where = goal.get("at") or goal.get("support")
        if "where" in asked and where:
            return f"{'In' if 'bowl' in where or 'drawer' in where else 'On'} the {where}."
        noun = variant.object.split()[-1]
        if "which" in asked or re.search(rf"\b{re.escape(noun)}s?\b", asked):
            return f"I mean the {variant.object}."
        return f"Please {variant.instruction}."

    def direction(self, variant: Variant, used: Mapping[str, float] | None = None) -> str:
        """Which way the parameters ``used`` (the defaults where not given) miss what the variant needs:
        'increase', 'decrease', 'default' (a change this object does not want), or '' when they fit."""
        values = {**self.defaults(), **dict(used or {})}
        for name, (low, high) in variant.needs.items():
            if values[name] > high + 1e-9:
                return "decrease"
            if values[name] < low - 1e-9:
                return "increase"
        defaults = self.defaults()
        changed = [n for n in (used or {})
                   if n not in variant.needs and not math.isclose(float(values[n]), float(defaults[n]), abs_tol=1e-9)]
        return "default" if changed else ""

    def correction(self, variant: Variant, before: Truth, after: Truth, used: Mapping[str, float] | None = None,
                   choice: int = 0) -> str:
        """The person's sentence after the robot acted ('' when the task is done): the wrong object named,
        else the direction the task's parameter must move (from ``used``, the parameters the robot
        called the skill with; None: the defaults), else a plain retry. ``choice`` picks among the
        task's sentences for that case."""
        if self.success(variant, before, after):
            return ""
        wrong = self.wrong_objects(variant, before, after)
        saying = "wrong_object" if wrong else (self.direction(variant, used) if self.level == "skill" else "") or "retry"
        options = self.corrections.get(saying) or DEFAULT_SAYINGS[saying]
        return options[choice % len(options)].format(object=variant.object, wrong=wrong[0] if wrong else "")


DEFAULT_SAYINGS: dict[str, tuple[str, ...]] = {
    "increase": ("A bit more, please.",),
    "decrease": ("A bit less, please.",),
    "default": ("Just do it the way you normally do.",),
    "wrong_object": ("No, not the {wrong}. I meant the {object}.",),
    "retry": ("That did not work. Please try again.",),
}


# ---------------------------------------------------------------------- success checks
def _held(spec: Any, variant: Variant, before: Truth, after: Truth) -> list[str]:
    name = str(spec)
    thing = after.get(name)
    if not thing.held:
        return [f"the {name} is not in the gripper"]
    if thing.position[2] < before.get(name).position[2] + LIFTED:
        return [f"the {name} is in the gripper but was not lifted"]
    return []


def _handed_over(spec: Any, variant: Variant, before: Truth, after: Truth) -> list[str]:
    name = str(spec)
    return [] if after.get(name).place == "person" else [f"the person does not have the {name}"]


def _placed(spec: Mapping[str, Any], variant: Variant, before: Truth, after: Truth) -> list[str]:
    name, at = str(spec["object"]), str(spec["at"])
    thing = after.get(name)
    if thing.held:
        return [f"the {name} is still in the gripper"]
    if thing.place != at or thing.offset is None:
        return [f"the {name} is not on the {at}" + (f" (it is on the {thing.place})" if thing.place else "")]
    out = []
    words = {"along": ("closer to the front edge", "further back"), "across": ("further to the right", "further to the left")}
    for axis, index in (("along", 0), ("across", 1)):
        if axis not in spec:
            continue
        low, high = spec[axis]
        value = thing.offset[index]
        if value < low or value > high:
            far = words[axis][0 if value < low else 1]
            miss = (low - value) if value < low else (value - high)
            out.append(f"the {name} stands {miss * 100:.1f} cm {far} on the {at} than the person wants it")
    return out


def _rests_on(spec: Mapping[str, Any], variant: Variant, before: Truth, after: Truth) -> list[str]:
    name, support = str(spec["object"]), str(spec["support"])
    return [] if after.get(name).supported_by == support and not after.get(name).held else [f"the {name} is not in the {support}"]


def _opening(spec: Mapping[str, Any], variant: Variant, before: Truth, after: Truth) -> list[str]:
    place = str(spec["place"])
    low, high = spec["range"]
    value = after.openings.get(place, 0.0)
    if low - 1e-9 <= value <= high + 1e-9:
        return []
    how = "not open far enough" if value < low else "open too far"
    return [f"the {place} is {how}: {value:.0%} of the way, the person wants {low:.0%} to {high:.0%}"]


def _undisturbed(spec: Any, variant: Variant, before: Truth, after: Truth) -> list[str]:
    if not spec:
        return []
    out = []
    moved = {variant.object, *(str(one["object"]) for key in ("placed", "rests_on") for one in _specs(variant.success, key))}
    for name, was in before.objects.items():
        if name in moved or name not in after.objects:  # what the task moves
            continue
        now = after.objects[name]
        if was.inside and now.inside and now.upright:
            continue  # in a drawer that was pulled out
        if was.upright and not now.upright:
            out.append(f"the {name} fell over")
        elif math.dist(was.position, now.position) > MOVED:
            out.append(f"the {name} was pushed {math.dist(was.position, now.position) * 100:.0f} cm")
    return out


_CHECKS = {"held": _held, "handed_over": _handed_over, "placed": _placed, "rests_on": _rests_on, "opening": _opening,
           "undisturbed": _undisturbed}


# ---------------------------------------------------------------------- loading
@functools.cache
def _parameters(world: str) -> SkillParameters:
    return SkillParameters.load(world, sim_profile(world))


def _fill(value: Any, obj: str) -> Any:
    """``value`` with '{object}' filled in, through lists and mappings."""
    if isinstance(value, str):
        return value.replace("{object}", obj)
    if isinstance(value, Mapping):
        return {k: _fill(v, obj) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fill(v, obj) for v in value]
    return value


def _range(value: Any, what: str) -> tuple[float, float]:
    if not (isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value)
            and value[0] <= value[1]):
        raise ValueError(f"{what} must be [low, high] with low <= high, got {value!r}")
    return float(value[0]), float(value[1])


def _plan(raw: Any, obj: str, what: str) -> tuple[Call, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{what} must be a non-empty list of [skill, {{fields}}]")
    calls = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], Mapping)):
            raise ValueError(f"{what}: each call is [skill, {{fields}}], got {item!r}")
        calls.append(Call(item[0], _fill(dict(item[1]), obj)))
    return tuple(calls)


def _success(raw: Any, obj: str, what: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"{what} must map checks ({', '.join(CHECKS)}) to their specs")
    unknown = sorted(set(raw) - set(CHECKS))
    if unknown:
        raise ValueError(f"{what}: unknown check {unknown[0]!r}; known: {', '.join(CHECKS)}")
    spec = _fill(dict(raw), obj)
    for key, need in (("placed", ("object", "at")), ("rests_on", ("object", "support")), ("opening", ("place", "range"))):
        for one in _specs(spec, key):
            if not isinstance(one, Mapping) or any(k not in one for k in need):
                raise ValueError(f"{what}.{key} needs {', '.join(need)}")
    for key, axes in (("placed", ("along", "across")), ("opening", ("range",))):
        for one in _specs(spec, key):
            for axis in axes:
                if axis in one:
                    one[axis] = _range(one[axis], f"{what}.{key}.{axis}")
    spec.setdefault("undisturbed", True)
    return spec


def _specs(spec: Mapping[str, Any], key: str) -> list[Any]:
    """The specs of check ``key`` in ``spec`` (a check may list several); [] when it has none."""
    if key not in spec:
        return []
    return list(spec[key]) if isinstance(spec[key], list) else [spec[key]]


def _variant(raw: Any, task: Mapping[str, Any], parameters: SkillParameters) -> Variant:
    if not isinstance(raw, Mapping):
        raise ValueError(f"a variant must be a mapping with {', '.join(VARIANT_FIELDS[:5])}")
    name = str(raw.get("name", "?"))
    unknown = sorted(set(raw) - set(VARIANT_FIELDS))
    missing = [f for f in ("name", "role", "object", "scene") if f not in raw]
    if unknown or missing:
        raise ValueError(f"variant {name}: " + (f"unknown fields {unknown}" if unknown else f"missing fields {missing}"))
    if raw["role"] not in ROLES:
        raise ValueError(f"variant {name}: role must be one of {', '.join(ROLES)}, got {raw['role']!r}")
    if not isinstance(raw["scene"], Mapping):
        raise ValueError(f"variant {name}: scene must be a mapping in the world's scene format")
    obj = str(raw["object"])
    declared = parameters.declared(task["skill"])
    needs = {str(k): _range(v, f"variant {name}: needs.{k}") for k, v in (raw.get("needs") or {}).items()}
    corrected = {str(k): float(v) for k, v in (raw.get("corrected") or {}).items()}
    for key in [*needs, *corrected]:
        if key not in declared:
            raise ValueError(f"variant {name}: {key!r} is not a parameter of {task['skill']} ({', '.join(declared) or 'none'})")
    for key, value in corrected.items():
        declared[key].validate(value)
        low, high = needs.get(key, (-math.inf, math.inf))
        if not low - 1e-9 <= value <= high + 1e-9:
            raise ValueError(f"variant {name}: corrected {key}={value:g} is outside what it needs [{low:g}, {high:g}]")
    return Variant(
        name, raw["role"], obj, yaml.safe_dump(dict(raw["scene"]), sort_keys=False),
        _fill(str(raw.get("instruction") or task["instruction"]), obj),
        _plan(raw.get("plan") or task["plan"], obj, f"variant {name}: plan"),
        _success(raw.get("success") or task["success"], obj, f"variant {name}: success"),
        needs, corrected, int(raw.get("steps", 0)), str(raw.get("distractor") or ""))


def parse_task(raw: Any, source: str = "tasks") -> DrocTask:
    """One task from its YAML mapping, checked; a problem is a ConfigError naming ``source`` and the task."""
    tid = str(raw.get("id", "?")) if isinstance(raw, Mapping) else "?"
    try:
        if not isinstance(raw, Mapping):
            raise ValueError(f"expected a mapping with {', '.join(TASK_FIELDS)}")
        unknown = sorted(set(raw) - set(TASK_FIELDS))
        missing = [f for f in TASK_FIELDS if f not in raw and f not in ("parameter", "plan", "success", "corrections", "type")]
        if unknown or missing:
            raise ValueError(f"unknown fields {unknown}" if unknown else f"missing fields {missing}")
        if raw["world"] not in WORLDS or raw["level"] not in LEVELS:
            raise ValueError(f"world must be one of {', '.join(WORLDS)} and level one of {', '.join(LEVELS)}")
        parameters = _parameters(raw["world"])
        parameter = str(raw.get("parameter") or "")
        if raw["level"] == "skill" and parameter not in parameters.declared(raw["skill"]):
            raise ValueError(f"a skill-level task names a parameter of {raw['skill']}: one of "
                             f"{', '.join(parameters.declared(raw['skill'])) or 'none'}, got {parameter!r}")
        corrections = raw.get("corrections") or {}
        if not isinstance(corrections, Mapping) or set(corrections) - set(SAYINGS):
            raise ValueError(f"corrections must map some of {', '.join(SAYINGS)} to lists of sentences")
        sentences = {str(k): tuple(str(s) for s in v) for k, v in corrections.items()}
        for options in sentences.values():
            for sentence in options:
                if parameter and (parameter in sentence or "_" in sentence):
                    raise ValueError(f"a person's sentence names no parameter: {sentence!r}")
        variants = tuple(_variant(v, raw, parameters) for v in raw["variants"] or [])
        names = [v.name for v in variants]
        if len(set(names)) != len(names) or not variants:
            raise ValueError(f"variants need distinct names, got {names}")
        iterations = tuple(tuple(str(n) for n in it) for it in raw["iterations"] or [])
        kind = str(raw.get("type") or "")
        if kind and (kind not in KNOWLEDGE_TYPES or raw["level"] != "plan"):
            raise ValueError(f"type (a plan-level train/test pair) must be one of {', '.join(KNOWLEDGE_TYPES)}, got {kind!r}")
        if kind:
            if len(iterations) != 2 or [v.role for it in iterations for v in variants if v.name in it] != ["train", "test"]:
                raise ValueError("a train/test pair has two iterations: [[its train variant], [its test variant]]")
        elif len(iterations) != 3 or any(not it or set(it) - set(names) for it in iterations):
            raise ValueError(f"iterations must be three non-empty lists of variant names ({', '.join(names)})")
        if raw["level"] == "plan" and not kind and any(not v.distractor for v in variants):
            raise ValueError("every variant of a plan-level task names its distractor (the object a wrong plan takes)")
        return DrocTask(tid, raw["world"], raw["level"], str(raw["skill"]), parameter, str(raw["instruction"]), sentences,
                        variants, iterations, source, kind)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{source}: task {tid}: {exc}") from None


def load_tasks(paths: Iterable[str | Path] | None = None) -> list[DrocTask]:
    """The tasks of ``paths`` (default: household.yaml and tabletop.yaml in config/benchmarks/droc/), each
    checked; ids are unique over all files."""
    files = [Path(p) for p in paths] if paths is not None else [config_path("benchmarks", "droc", f) for f in TASK_FILES]
    tasks: list[DrocTask] = []
    for path in files:
        for raw in load_yaml_list(path, "tasks"):
            task = parse_task(raw, str(path))
            if task.id in (t.id for t in tasks):
                raise ConfigError(f"{path}: task {task.id}: duplicate id")
            tasks.append(task)
    return tasks


def variants_by_role(tasks: Sequence[DrocTask], role: str) -> list[tuple[DrocTask, Variant]]:
    """Every (task, variant) of ``role`` over ``tasks``."""
    return [(t, v) for t in tasks for v in t.variants if v.role == role]
