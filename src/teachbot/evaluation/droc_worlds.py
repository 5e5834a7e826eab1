"""The worlds of DROC's evaluation tasks, in-process (no ROS): load a variant's scene, run skill calls with
given parameters against it, read the ground truth, and render the object's camera crop.

``DrocWorlds`` keeps one PyBullet world per world type (the household one with the object types of
config/benchmarks/droc/objects.yaml added to its catalog) and one skill library on it, as the skills
node would run them. ``attempt`` resets the world to a variant's scene and runs its plan with the task's
parameters on the call of the task's skill (a plan-level mistake: ``plan=variant.wrong_plan()``),
returning the outcomes, the ground truth before and after, and the task's judgement. ``crop`` renders
the object (or the cupboard, the fridge) from a camera half a metre in front of it and above, and cuts it
out by the segmentation: RGB, depth and mask for the visual descriptors of teachbot.knowledge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pybullet as pb

from teachbot.config import load_yaml, require
from teachbot.errors import ConfigError
from teachbot.evaluation.droc_tasks import Call, DrocTask, ThingTruth, Truth, Variant
from teachbot.knowledge.descriptor import crop_object
from teachbot.paths import config_path
from teachbot.sim.camera import CameraSpec
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.factory import SIM_PROFILES, make_skills, make_world, sim_profile
from teachbot.skills.library import SkillLibrary, SkillOutcome
from teachbot.world.household_layout import surface_offset
from teachbot.world.household_objects import Catalog, parse_type
from teachbot.world.household_scene import household_scene_from_yaml
from teachbot.world.scene import scene_from_yaml

SETTLE = 0.3  # seconds of physics after a scene reset
CAMERA = {"width": 200, "height": 150, "fov_y": 45.0}  # the object camera: small crops, as a hand camera sees them
OBJECT_VIEW = (0.35, 0.3)  # metres in front of the object (towards the robot) and above it
PLACE_VIEW = (1.6, 0.5)  # the same for a piece of furniture (the cupboard, the fridge)
UPRIGHT = 0.9  # cosine of the tilt of an object's z axis below which it fell over


def droc_catalog(path: str | Path | None = None, base: Catalog | None = None) -> Catalog:
    """The household catalog with the DROC object types (config/benchmarks/droc/objects.yaml) added."""
    base = base or Catalog.load()
    path = Path(path) if path else config_path("benchmarks", "droc", "objects.yaml")
    raw, source = load_yaml(path), str(path)
    types = dict(base.types)
    for name, spec in require(raw, "types", source, dict).items():
        if str(name) in types:
            raise ConfigError(f"{source}: type {name!r} is already in {base.source}; give the new type another name")
        types[str(name)] = parse_type(str(name), spec, source, base.liquids)
    return replace(base, types=types)


@dataclass(frozen=True)
class Attempt:
    """One run of a plan against a variant: each call's outcome, the ground truth before and after, the
    parameters given to the task's skill, and what is wrong (empty: the task is done)."""

    task: DrocTask
    variant: Variant
    outcomes: tuple[tuple[Call, SkillOutcome], ...]
    before: Truth
    after: Truth
    params: Mapping[str, float]
    problems: tuple[str, ...]

    @property
    def success(self) -> bool:
        return not self.problems

    def correction(self, choice: int = 0) -> str:
        """The person's sentence for this attempt ('' when it succeeded)."""
        return self.task.correction(self.variant, self.before, self.after, self.params, choice)


@dataclass(frozen=True)
class Crop:
    """The object's pixels: RGB (uint8), metric depth and the mask of its pixels, cut to its box."""

    rgb: np.ndarray
    depth: np.ndarray
    mask: np.ndarray


class DrocWorlds:
    """One simulated world per world type and its skills, reused from variant to variant (``with DrocWorlds() as w``)."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self._catalog = catalog
        self._worlds: dict[str, HouseholdWorld | TabletopWorld] = {}
        self._skills: dict[str, SkillLibrary] = {}

    def __enter__(self) -> DrocWorlds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for skills in self._skills.values():
            skills.kin.close()
        for world in self._worlds.values():
            world.close()
        self._skills.clear()
        self._worlds.clear()

    def world(self, kind: str) -> HouseholdWorld | TabletopWorld:
        """The world of type ``kind``, created on first use."""
        if kind not in SIM_PROFILES:
            raise ConfigError(f"unknown world {kind!r}; use one of {', '.join(SIM_PROFILES)}")
        if kind not in self._worlds:
            if kind == "household":
                self._catalog = self._catalog or droc_catalog()
            self._worlds[kind] = make_world(sim_profile(kind), catalog=self._catalog if kind == "household" else None)
        return self._worlds[kind]

    def skills(self, kind: str) -> SkillLibrary:
        """The skill library on the world of type ``kind`` (household skills for the household)."""
        if kind not in self._skills:
            self._skills[kind] = make_skills(self.world(kind))
        return self._skills[kind]

    # ------------------------------------------------------------------ scenes and truth
    def load(self, task: DrocTask, variant: Variant) -> HouseholdWorld | TabletopWorld:
        """Reset the task's world to the variant's scene (robot at its start, nothing held); physics settled."""
        world = self.world(task.world)
        if isinstance(world, HouseholdWorld):
            world.reset(household_scene_from_yaml(variant.scene, world.layout, world.catalog, source=f"{task.id}/{variant.name}"))
        else:
            world.reset(scene_from_yaml(variant.scene, world.table, source=f"{task.id}/{variant.name}"))
        world.step(round(SETTLE / world.time_step))
        skills = self.skills(task.world)
        skills.held = ""
        return world

    def truth(self, kind: str) -> Truth:
        """The ground truth of the world of type ``kind`` now."""
        world = self.world(kind)
        held = world.held_object()
        things = {}
        for o in world.objects():
            z_axis = pb.getMatrixFromQuaternion(list(o.orientation))[8]
            if isinstance(world, HouseholdWorld):
                sphere = world.catalog.type(o.type).shape == "sphere"
                offset = surface_offset(world.surface(o.place), float(o.position[0]), float(o.position[1])) \
                    if o.place in world.layout.places and world.layout.place(o.place).hand is None else None
                things[o.name] = ThingTruth(o.name, o.type, _triple(o.position), _triple(o.size), sphere or z_axis > UPRIGHT,
                                            o.name == held, o.place, o.supported_by, offset, o.inside)
            else:
                upright = z_axis > UPRIGHT or o.category == "bowl"
                things[o.name] = ThingTruth(o.name, o.category, _triple(o.position), _triple(o.size), upright, o.name == held, "table",
                                            o.supported_by)
        openings = {p: world.opening(p) for p in world.layout.places if world.layout.place(p).openable} \
            if isinstance(world, HouseholdWorld) else {}
        return Truth(things, held, openings)

    # ------------------------------------------------------------------ running
    def run(self, task: DrocTask, calls: tuple[Call, ...], params: Mapping[str, float] | None = None) -> list[tuple[Call, SkillOutcome]]:
        """Run ``calls`` on the loaded world, with ``params`` on each call of the task's skill; stops at the first failure."""
        skills = self.skills(task.world)
        out = []
        for call in calls:
            extra: dict[str, Any] = dict(params or {}) if call.skill == task.skill else {}
            outcome = skills.run(call.skill, **dict(call.fields), **extra)
            out.append((call, outcome))
            if not outcome.success:
                break
        return out

    def attempt(self, task: DrocTask, variant: Variant, params: Mapping[str, float] | None = None,
                plan: tuple[Call, ...] | None = None) -> Attempt:
        """Load the variant, run its plan (or ``plan``) with ``params`` and judge the result."""
        world = self.load(task, variant)
        before = self.truth(task.world)
        outcomes = self.run(task, plan if plan is not None else variant.plan, params)
        world.step(round(SETTLE / world.time_step))
        after = self.truth(task.world)
        return Attempt(task, variant, tuple(outcomes), before, after, dict(params or {}),
                       tuple(task.problems(variant, before, after)))

    # ------------------------------------------------------------------ camera
    def crop(self, task: DrocTask, variant: Variant, load: bool = True) -> Crop:
        """The variant's object (or piece of furniture) as a camera in front of and above it sees it:
        RGB, depth and mask cut to the object's box. ``load``: reset to the variant's scene first."""
        world = self.load(task, variant) if load else self.world(task.world)
        if isinstance(world, HouseholdWorld):
            if variant.object in world.layout.places:
                place = world.layout.place(variant.object)
                centre = np.array([*place.centre, place.height / 2])
                body, front, (ahead, up) = _place_body(world, variant.object), np.array(place.front, float), PLACE_VIEW
            else:
                thing = next(o for o in world.objects() if o.name == variant.object)
                centre, body = np.array(thing.position, float), thing.body_id
                front, (ahead, up) = np.array(world.layout.place(thing.place).front, float), OBJECT_VIEW
        else:
            thing = next(o for o in world.objects() if o.name == variant.object)
            centre, body = np.array(thing.position, float), thing.body_id
            front, (ahead, up) = -centre[:2] / max(float(np.linalg.norm(centre[:2])), 1e-6), OBJECT_VIEW  # towards the robot's base
        eye = centre + np.array([front[0] * ahead, front[1] * ahead, up])
        spec = CameraSpec(width=CAMERA["width"], height=CAMERA["height"], fov_y=CAMERA["fov_y"], eye=_triple(eye),
                          target=_triple(centre), near=0.05, far=max(3.0, 2 * math.hypot(ahead, up)))
        frame = world.render(spec)
        rgb, depth, mask = crop_object(frame.rgb, frame.depth, frame.segmentation, body)
        assert depth is not None
        return Crop(rgb, depth, mask)


def _place_body(world: HouseholdWorld, name: str) -> int:
    """The body of the piece of furniture ``name``: the one standing at its centre."""
    centre = world.layout.place(name).centre
    for index in range(pb.getNumBodies(physicsClientId=world.client)):
        body = pb.getBodyUniqueId(index, physicsClientId=world.client)
        x, y, _ = pb.getBasePositionAndOrientation(body, physicsClientId=world.client)[0]
        if math.hypot(x - centre[0], y - centre[1]) < 1e-6 and body not in (world.robot_id, world.base_id):
            return body
    raise ConfigError(f"no body stands at the {name}'s centre {centre}")


def _triple(values: Any) -> tuple[float, float, float]:
    return float(values[0]), float(values[1]), float(values[2])
