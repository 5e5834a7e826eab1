"""RAIDER's benchmark cases as data, and the simulated worlds they are checked in.

A case (``config/benchmarks/raider/*.yaml``) is a small scene in its world's own scene format, a setup
(what the hand holds, where the household base stands, what rests on what), an action query and its
ground truth: the verdict, the issue type, the objects the query refers to and the facts an explanation
must mention. Issue types, query abstractions and query types are the RAIDER paper's (its §4.1.1):
:data:`ISSUE_LABELS`, :data:`ABSTRACTION_LABELS`, :data:`FORM_LABELS`. :func:`load_cases` reads and checks them; :class:`CaseWorlds` keeps
one PyBullet world per world type, loads a case into it with its setup really applied (the gripper
holds the object, the base stands at its place) and answers with the grounded tools over a scene model
built from the simulator, as perception would. No ROS here.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pybullet as pb
import yaml

from teachbot.config import load_yaml_list
from teachbot.errors import ConfigError, SceneSpecError
from teachbot.paths import config_path
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import make_detector
from teachbot.perception.household import HouseholdPerception
from teachbot.perception.localize import Observation, category_of
from teachbot.perception.pipeline import Perception
from teachbot.raider.config import RaiderConfig
from teachbot.raider.precond import ACTIONS
from teachbot.raider.tools import GroundedTools, Reach, normalise
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.direct import perceive_household
from teachbot.simrobot.factory import make_world, sim_profile
from teachbot.skills.household import CARRY_POINT
from teachbot.skills.kinematics import KinematicsModel
from teachbot.world.floor import BasePath, BasePose
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.household_objects import Catalog
from teachbot.world.household_scene import HouseholdScene, household_scene_from_yaml
from teachbot.world.scene import SceneSpec, TabletopConfig, scene_from_yaml

WORLDS = ("household", "tabletop")
VERDICTS = ("ambiguity", "unfeasibility", "none")
ISSUE_TYPES = ("IA", "IN", "IU1", "IU2", "IU3", "IU4", "IU5", "IU6")  # the order of the paper's Table 1
ISSUE_LABELS = {  # the paper's §4.1.1, word for word where it has words
    "IA": "ambiguity: two or more items match the query",
    "IN": "no issue",
    "IU1": "target not within reach (too far)",
    "IU2": "target obstructed",
    "IU3": "target not present",
    "IU4": "target in wrong state",
    "IU5": "common sense: target with wrong properties",
    "IU6": "robot issue: holding / not holding an object",
}
ABSTRACTIONS = ("AS", "AN", "AR", "AC")
ABSTRACTION_LABELS = {
    "AS": "abstract specific: the arguments named directly and clearly ('pick the banana from the fridge')",
    "AN": "abstract by name: an argument referred to by category or general attribute ('the electronic device')",
    "AR": "abstract by spatial relationship ('the utensil to the left of the microwave')",
    "AC": "abstract by conditioned state ('the clean utensil')",
}
FORMS = ("structured", "natural")
FORM_LABELS = {"structured": "QS structured query", "natural": "QU unstructured (natural language) query"}
VERDICT_OF = {"IA": "ambiguity", "IN": "none", **{f"IU{k}": "unfeasibility" for k in range(1, 7)}}
CASE_FILES = ("household.yaml", "tabletop.yaml")
FIELDS = ("id", "world", "scene", "setup", "query", "form", "abstraction", "expected", "issue_type", "grounding", "facts")
SETUP_KEYS = ("held", "at", "support")
# Tabletop case scenes may use the whole table, not only the benchmark's workspace: out-of-reach cases
# need objects beyond the arm's 0.85 m, and the workspace ends at about that distance.
TABLE_MARGIN = 0.05
SETTLE = 0.3  # seconds of physics after a case's setup
# Words that are no fact of a case: any explanation may use them (or the action's own verb), whatever its reason.
# The reason itself is scored by its issue type (teachbot.evaluation.raider_explain), not by a fact.
LOOSE_FACTS = frozenset({
    "no", "not", "none", "nothing", "can", "cannot", "can't", "is", "it", "the", "a", "an", "hold", "holds", "holding",
    "free", "full", "far", "near", "close", "next to", "reach", "already", "blocked", "blocking", "on it",
    "on top", "occupied", "missing", "issue", "problem", "robot", "hand", "gripper", "object", "thing",
    *(verb for spec in ACTIONS.values() for verb in spec.verbs), *ACTIONS,
})


@dataclass(frozen=True)
class CaseSetup:
    """What is true before the query: ``held`` (a name or ''), ``at`` (the household base's place, ''
    for its start pose) and ``support`` ((object, support) pairs: the object is set on, or in, the support)."""

    held: str = ""
    at: str = ""
    support: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RaiderCase:
    """One benchmark case; ``scene`` is the scene's YAML text in its world's own format."""

    id: str
    world: str
    scene: str
    setup: CaseSetup
    query: str
    form: str
    abstraction: str
    expected: str
    issue_type: str
    grounding: tuple[str, ...]
    facts: tuple[tuple[str, ...], ...]
    source: str = ""

    @property
    def needs_grounding(self) -> bool:
        """The paper's Grnd counts this case: an abstract query (AN, AR, AC) or an ambiguity."""
        return self.abstraction != "AS" or self.issue_type == "IA"

    def scene_spec(self) -> SceneSpec | HouseholdScene:
        """The parsed scene (cached per text)."""
        return _parse_scene(self.world, self.scene, f"{self.source}: case {self.id}")

    def names(self) -> list[str]:
        """The scene's object names, and the household's places."""
        names = list(self.scene_spec().names())
        return names + list(_layout().places) if self.world == "household" else names


# ---------------------------------------------------------------------- loading
@functools.cache
def _layout() -> HouseholdLayout:
    return HouseholdLayout.load()


@functools.cache
def _catalog() -> Catalog:
    return Catalog.load()


@functools.cache
def table_config() -> TabletopConfig:
    """config/tabletop.yaml with the scene bounds widened to the table (less a margin)."""
    cfg = TabletopConfig.load()
    bounds = dict(cfg.bounds, x=(cfg.table_x[0] + TABLE_MARGIN, cfg.table_x[1] - TABLE_MARGIN),
                  y=(cfg.table_y[0] + TABLE_MARGIN, cfg.bounds["y"][1]))
    return replace(cfg, bounds=bounds)


@functools.cache
def _parse_scene(world: str, text: str, source: str) -> SceneSpec | HouseholdScene:
    if world == "household":
        return household_scene_from_yaml(text, _layout(), _catalog(), source=source)
    return scene_from_yaml(text, table_config(), source=source)


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{what} must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def _setup(raw: Any) -> CaseSetup:
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"setup must be a mapping with {', '.join(SETUP_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(SETUP_KEYS))
    if unknown:
        raise ValueError(f"unknown setup keys {unknown}; use {', '.join(SETUP_KEYS)}")
    support = raw.get("support") or {}
    if not isinstance(support, Mapping):
        raise ValueError(f"setup.support must map an object to what it rests on or in, got {support!r}")
    return CaseSetup(str(raw.get("held") or ""), str(raw.get("at") or ""), tuple((str(k), str(v)) for k, v in support.items()))


def parse_case(raw: Any, source: str = "cases") -> RaiderCase:
    """One case from its YAML mapping, checked; a problem is a ConfigError naming ``source`` and the case."""
    cid = str(raw.get("id", "?")) if isinstance(raw, Mapping) else "?"
    try:
        if not isinstance(raw, Mapping):
            raise ValueError(f"expected a mapping with {', '.join(FIELDS)}")
        missing = [f for f in FIELDS if f not in raw]
        unknown = sorted(set(raw) - set(FIELDS))
        if missing or unknown:
            raise ValueError(f"missing fields {missing}" if missing else f"unknown fields {unknown}")
        checks = [("world", WORLDS), ("expected", VERDICTS), ("issue_type", ISSUE_TYPES), ("abstraction", ABSTRACTIONS), ("form", FORMS)]
        for key, allowed in checks:
            if raw[key] not in allowed:
                raise ValueError(f"unknown {key} {raw[key]!r}; use one of {', '.join(allowed)}")
        if VERDICT_OF[raw["issue_type"]] != raw["expected"]:
            raise ValueError(f"verdict {raw['expected']!r} does not fit issue type {raw['issue_type']} "
                             f"(expected {VERDICT_OF[raw['issue_type']]!r})")
        if not isinstance(raw["query"], str) or not raw["query"].strip():
            raise ValueError("query must be a non-empty string")
        if not isinstance(raw["scene"], Mapping):
            raise ValueError("scene must be a mapping in the world's scene format")
        facts = raw["facts"]
        if not isinstance(facts, list) or not facts:
            raise ValueError("facts must be a non-empty list of lists of alternative words")
        case = RaiderCase(
            str(raw["id"]), raw["world"], yaml.safe_dump(dict(raw["scene"]), sort_keys=False), _setup(raw["setup"]),
            raw["query"].strip(), raw["form"], raw["abstraction"], raw["expected"], raw["issue_type"],
            _strings(raw["grounding"] or [], "grounding"), tuple(_strings(f, "each fact") for f in facts), source)
        _check_names(case)
    except SceneSpecError as exc:
        raise ConfigError(str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: case {cid}: {exc}") from None
    return case


def _check_names(case: RaiderCase) -> None:
    objects = list(case.scene_spec().names())
    known = case.names()
    loose = [alt for fact in case.facts for alt in fact if normalise(alt) in LOOSE_FACTS]
    if loose:
        raise ValueError(f"facts {loose} say nothing specific to the case (a word any explanation may use, or an action's "
                         "verb); name the objects and the state, holder or blocker that decide it")
    if case.issue_type == "IU3" and case.grounding:
        raise ValueError("an IU3 case (target not present) grounds to the empty list")
    if case.issue_type == "IA" and len(case.grounding) < 2:
        raise ValueError("an IA case (ambiguity) names every candidate in grounding, at least two")
    strangers = [g for g in case.grounding if g not in known]
    if strangers:
        raise ValueError(f"grounding names {strangers} that are not in the scene; it has {', '.join(known)}")
    s = case.setup
    for name in [s.held, *(n for pair in s.support for n in pair)]:
        if name and name not in objects:
            raise ValueError(f"setup names {name!r}, not an object of the scene ({', '.join(objects)})")
    if any(a == b for a, b in s.support) or (s.held and any(s.held in pair for pair in s.support)):
        raise ValueError("setup.support sets an object on itself, or on or under the held object")
    if s.at and (case.world != "household" or s.at not in _layout().places):
        raise ValueError(f"setup.at must be a household place ({', '.join(_layout().places)}), got {s.at!r}")


def load_cases(paths: Iterable[str | Path] | None = None) -> list[RaiderCase]:
    """The cases of ``paths`` (default: both files in config/benchmarks/raider/), each checked; ids are
    unique over all files. Any problem is a ConfigError naming the file, the case and what is wrong."""
    files = [Path(p) for p in paths] if paths is not None else [config_path("benchmarks", "raider", f) for f in CASE_FILES]
    cases: list[RaiderCase] = []
    seen: dict[str, str] = {}
    for path in files:
        for raw in load_yaml_list(path, "cases"):
            case = parse_case(raw, str(path))
            if case.id in seen:
                raise ConfigError(f"{path}: case {case.id}: duplicate id (also in {seen[case.id]})")
            seen[case.id] = str(path)
            cases.append(case)
    return cases


def mentions(text: str, words: str) -> bool:
    """``words`` occur in ``text`` as whole words (case, underscores and a plural s aside): 'no' is not in 'not'."""
    return re.search(rf"(?<![a-z0-9]){re.escape(normalise(words))}(?:e?s)?(?![a-z0-9])", normalise(text)) is not None


def fact_score(case: RaiderCase, explanation: str) -> float:
    """Share of the case's facts that ``explanation`` mentions (one alternative each, as whole words)."""
    return sum(any(mentions(explanation, alt) for alt in fact) for fact in case.facts) / len(case.facts)


# ---------------------------------------------------------------------- the worlds
def perceive_tabletop(world: TabletopWorld, perception: Perception) -> None:
    """Fold the tabletop world's ground truth into ``perception``'s scene model: each object at its
    category's reference point (body centre, or the base centre for bowls), with what the hand holds."""
    observations, state = [], {}
    for o in world.objects():
        position = np.array(o.position, float)
        if category_of(o.category, perception.config).anchor == "bottom":
            position[2] = pb.getAABB(o.body_id, physicsClientId=world.client)[0][2]
        yaw = float(pb.getEulerFromQuaternion(o.orientation.tolist())[2])
        observations.append(Observation(o.name, o.category, 1.0, position, np.array(o.size, float), yaw, o.color, instance=o.body_id))
        state[o.name] = {"held": str(o.held)}
    perception.scene.update(observations, world.sim_time, None, state)


class CaseWorlds:
    """One simulated world per world type, reused from case to case (``with CaseWorlds() as w``)."""

    def __init__(self, config: RaiderConfig | None = None) -> None:
        self.config = config or RaiderConfig.load()
        self._worlds: dict[str, HouseholdWorld | TabletopWorld] = {}
        self._carry: list[float] | None = None
        self._perception_configs = {"household": PerceptionConfig.load("perception_household"),
                                    "tabletop": PerceptionConfig.load("perception")}

    def __enter__(self) -> CaseWorlds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect every world."""
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()

    def world(self, kind: str) -> HouseholdWorld | TabletopWorld:
        """The world of type ``kind``, created on first use."""
        if kind not in WORLDS:
            raise ConfigError(f"unknown world {kind!r}; use one of {', '.join(WORLDS)}")
        if kind not in self._worlds:
            household = kind == "household"
            self._worlds[kind] = make_world(sim_profile(kind), layout=_layout() if household else None,
                                            catalog=_catalog() if household else None)
        return self._worlds[kind]

    def load(self, case: RaiderCase) -> HouseholdWorld | TabletopWorld:
        """Reset the case's world to its scene and apply the setup; physics settled."""
        world = self.world(case.world)
        world.reset(case.scene_spec())  # type: ignore[arg-type]
        for top, support in case.setup.support:
            self._put_on(world, top, support)
        if case.setup.held:
            if isinstance(world, HouseholdWorld):
                self._carry_pose(world)
            self._hold(world, case.setup.held)
        if case.setup.at:
            assert isinstance(world, HouseholdWorld)
            world.command_base(BasePath((BasePose(*world.layout.location_pose(case.setup.at)),), (0.0,)))
        world.step(round(SETTLE / world.time_step))
        held = world.held_object()
        if held != case.setup.held:
            raise ConfigError(f"{case.source}: case {case.id}: the hand should hold {case.setup.held!r} after the setup, "
                              f"but holds {held!r}")
        return world

    def tools_for(self, case: RaiderCase, style: str = "facts") -> GroundedTools:
        """The grounded tools (in ``style``: facts, the paper's, or judged) over a fresh scene model of the case's
        world after its setup."""
        return self.tools_now(self.load(case), style)

    def tools_now(self, world: HouseholdWorld | TabletopWorld, style: str = "facts") -> GroundedTools:
        """The grounded tools over a fresh scene model of ``world`` as it is now (after the robot or a person acted)."""
        kind = "household" if isinstance(world, HouseholdWorld) else "tabletop"
        reach = Reach.for_robot(world.profile, self.config.reach.get(kind, Reach.radius))  # the skills' workspace too
        if isinstance(world, HouseholdWorld):
            perception = HouseholdPerception(self._perception_configs["household"], world.layout, world.catalog)
            perceive_household(world, perception)
            return GroundedTools(perception.queries, reach, layout=perception.layout, style=style)
        tabletop = Perception(self._perception_configs["tabletop"], detector=make_detector("sim_ground_truth"))
        perceive_tabletop(world, tabletop)
        return GroundedTools(tabletop.queries, reach, style=style)

    # ------------------------------------------------------------------ setup helpers
    @staticmethod
    def _body(world: HouseholdWorld | TabletopWorld, name: str) -> int:
        return next(o.body_id for o in world.objects() if o.name == name)

    def _put_on(self, world: HouseholdWorld | TabletopWorld, top: str, support: str) -> None:
        """Set ``top`` down on (or into) ``support`` from just above it and let it settle."""
        body, under = self._body(world, top), self._body(world, support)
        (_, _, z_top), (_, _, z_high) = pb.getAABB(body, physicsClientId=world.client)
        x, y, _ = pb.getBasePositionAndOrientation(under, physicsClientId=world.client)[0]
        rim = pb.getAABB(under, physicsClientId=world.client)[1][2]
        orientation = pb.getBasePositionAndOrientation(body, physicsClientId=world.client)[1]
        pb.resetBasePositionAndOrientation(body, [x, y, rim + (z_high - z_top) / 2 + 0.002], orientation, physicsClientId=world.client)
        world.step(round(SETTLE / world.time_step))

    def _carry_pose(self, world: HouseholdWorld) -> None:
        """The household arm where the skills carry things: over the base, above the counters."""
        if self._carry is None:
            kin = KinematicsModel(world.profile)
            try:
                self._carry = kin.ik(np.array(CARRY_POINT), kin.grasp_orientation(0.0), np.array(world.profile.home)).tolist()
            finally:
                kin.close()
        world.command_trajectory(list(world.profile.arm_joints), [0.6], [self._carry])
        world.step(round(0.7 / world.time_step))

    @staticmethod
    def _hold(world: HouseholdWorld | TabletopWorld, name: str) -> None:
        """Put ``name`` between the open fingers and close them: the world's grasp assist takes it."""
        body = CaseWorlds._body(world, name)
        world.command_gripper(0.0)
        for _ in range(round(1.0 / world.time_step)):
            hand = pb.getLinkState(world.robot_id, world.ee_index, computeForwardKinematics=True, physicsClientId=world.client)
            pb.resetBasePositionAndOrientation(body, hand[4], hand[5], physicsClientId=world.client)
            pb.resetBaseVelocity(body, [0, 0, 0], [0, 0, 0], physicsClientId=world.client)
            world.step(1)
            if world.held_object() == name:
                return
        raise ConfigError(f"the gripper could not take {name!r}; is it pickable?")


def distribution(cases: Sequence[RaiderCase]) -> dict[str, dict[str, int]]:
    """Counts per issue type and abstraction: {issue type: {abstraction: n}}."""
    out: dict[str, dict[str, int]] = {t: {a: 0 for a in ABSTRACTIONS} for t in ISSUE_TYPES}
    for case in cases:
        out[case.issue_type][case.abstraction] += 1
    return out
