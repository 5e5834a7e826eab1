"""The worlds of DROC's evaluation tasks, in-process (no ROS): load a variant's scene, run skill calls with
given parameters against it, read the ground truth, and cut an object out of a camera image as the robot does.

``DrocWorlds`` keeps one PyBullet world per world type (the household one with the object types of
config/benchmarks/droc/objects.yaml added to its catalog) and one skill library on it, as the skills
node would run them. ``attempt`` resets the world to a variant's scene and runs its plan with the task's
parameters on the call of the task's skill (a plan-level mistake: ``plan=variant.wrong_plan()``),
returning the outcomes, the ground truth before and after, and the task's judgement. ``crop`` cuts the
object out as ``perception/describe_object`` does, never by the simulator's segmentation ids: on the
tabletop from the fixed scene camera of config/sim.yaml, by the detector's box of its track and the pixels
that depth puts above the table inside its footprint (:func:`tabletop_crops`); in the household from the
robot's mast camera, the base standing where the skills stand to work at the thing's place, by the
projection of its pose and size and by depth, the arm stowed out of the camera's view (a piece of furniture,
the cupboard or the fridge: its box, seen from a metre behind where the robot stands at it). RGB, depth and
mask for the visual descriptors of teachbot.knowledge.
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
from teachbot.errors import ConfigError, InvalidArgumentError, UnknownObjectError
from teachbot.evaluation.droc_tasks import Call, DrocTask, ThingTruth, Truth, Variant
from teachbot.knowledge.object_crop import ObjectBounds, object_crop
from teachbot.paths import config_path
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import Frame
from teachbot.perception.household import household_categories
from teachbot.perception.localize import CameraModel, category_of
from teachbot.perception.pipeline import Perception
from teachbot.sim.camera import CameraSpec, quaternion_from_matrix
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.direct import yaw_of
from teachbot.simrobot.factory import SIM_PROFILES, make_skills, make_world, sim_profile
from teachbot.skills.household import side_step, stance_pose
from teachbot.skills.library import SkillLibrary, SkillOutcome
from teachbot.world.household_layout import surface_offset
from teachbot.world.household_objects import Catalog, parse_type
from teachbot.world.household_scene import household_scene_from_yaml
from teachbot.world.scene import scene_from_yaml

SETTLE = 0.3  # seconds of physics after a scene reset
LOOK_TURN = math.pi / 2  # radians the stowed arm turns to the robot's left while the mast camera looks: out of its view
FURNITURE_BACK = 1.0  # metres behind its stance from where a piece of furniture is seen whole
FRONT_PARTS = 0.06  # metres its door or drawer front and handle stand out of a piece of furniture's box
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
        self._perception: dict[str, PerceptionConfig] = {}  # per world type, loaded on the first crop

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
        """The variant's object (or piece of furniture) as the robot's camera sees it, cut out as
        ``perception/describe_object`` cuts it (see the module docstring; no segmentation ids): RGB, depth and
        mask. ``load``: reset to the variant's scene first. InvalidArgumentError when the camera does not see
        it (hidden, e.g. behind a closed door, or out of view); UnknownObjectError for a name not in the scene."""
        world = self.load(task, variant) if load else self.world(task.world)
        if isinstance(world, HouseholdWorld):
            return household_crop(world, variant.object, self._household_config(world))
        crops = tabletop_crops(world, self._tabletop_config())
        if variant.object not in crops:
            if variant.object not in {o.name for o in world.objects()}:
                raise UnknownObjectError(f"no {variant.object!r} in the scene")
            raise InvalidArgumentError(f"perception does not see the {variant.object} from the scene camera")
        return crops[variant.object]

    def _tabletop_config(self) -> PerceptionConfig:
        if "tabletop" not in self._perception:
            self._perception["tabletop"] = PerceptionConfig.load("perception")
        return self._perception["tabletop"]

    def _household_config(self, world: HouseholdWorld) -> PerceptionConfig:
        """config/perception_household.yaml with the catalog's types as categories, as HouseholdPerception has it."""
        if "household" not in self._perception:
            config = PerceptionConfig.load("perception_household")
            self._perception["household"] = replace(config, categories={**household_categories(world.catalog), **config.categories})
        return self._perception["household"]


def camera_model(spec: CameraSpec) -> CameraModel:
    """``spec`` as perception models the camera (intrinsics and pose, in the frame of its eye and target)."""
    rotation, eye = spec.pose()
    return CameraModel.from_pose(spec.K, spec.width, spec.height, eye, quaternion_from_matrix(rotation))


def scene_camera() -> tuple[CameraSpec, CameraModel]:
    """The fixed scene camera of config/sim.yaml, and the same camera as perception models it."""
    spec = CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])
    return spec, camera_model(spec)


def tabletop_crops(world: TabletopWorld, config: PerceptionConfig | None = None) -> dict[str, Crop]:
    """The tabletop's scene now from the fixed scene camera, each object perception finds in it cut out as
    ``perception/describe_object`` does, by name: the detector's box of its track and depth (object_crop).
    The ``sim_ground_truth`` detector reads the segmentation ids as the simulated robot's does; the crops do not.
    An object perception does not find, or too little of which is in view, has no crop."""
    spec, camera = scene_camera()
    cfg = config or PerceptionConfig.load("perception")
    perception = Perception(cfg)
    image = world.render(spec)
    labels = {s.body_id: {"category": s.category, "color": s.color, "name": s.name} for s in world.objects()}
    perception.update(Frame(image.rgb, image.depth, image.segmentation, labels, 1.0), camera)  # the detector reads the ids
    crop_frame = Frame(image.rgb, image.depth)  # the crop does not: box and depth only
    crops = {}
    for track in perception.scene.objects():
        bounds = ObjectBounds.of(track.position, track.size, track.yaw, category_of(track.label, cfg).anchor)
        try:
            crops[track.name] = Crop(*object_crop(crop_frame, camera, bounds, track.box))
        except InvalidArgumentError:  # hidden (another object, the arm) or out of view
            continue
    return crops


def household_crop(world: HouseholdWorld, name: str, config: PerceptionConfig) -> Crop:
    """The thing ``name`` (or the piece of furniture) from the robot's mast camera (config/household/layout.yaml
    base.camera, the optics of config/sim.yaml's camera) with the base where the skills stand to work at its
    place (:func:`stance_pose` with :func:`side_step`; a piece of furniture: from FURNITURE_BACK behind its
    stance, its box grown by its front parts), cut out as the perception node's ``describe_object`` does in the
    household: the projection of its pose and size (no detector box) and the pixels depth puts inside that box
    above its support. The arm is stowed as the skills drive, turned out of the camera's view (:func:`_look_posture`);
    the base, the arm and every body are put back after."""
    layout = world.layout
    if name in layout.places:
        place = layout.place(name)
        stance = stance_pose(layout, name, back=FURNITURE_BACK)
        front = np.array(place.front, float)
        centre = np.array([*(np.array(place.centre) + front * FRONT_PARTS / 2), place.height / 2])
        bounds = ObjectBounds(centre, np.array([*(np.array(place.size) + np.abs(front) * FRONT_PARTS), place.height]), 0.0)
    else:
        thing = next((o for o in world.objects() if o.name == name), None)
        if thing is None:
            raise UnknownObjectError(f"no {name!r} in the household scene")
        if not thing.place or thing.place not in layout.places:
            raise InvalidArgumentError(f"{name} is on no place the robot works at")
        step = side_step(layout, thing.place, thing.position)
        stance = stance_pose(layout, thing.place, step[0] if step is not None else 0.0)
        bounds = ObjectBounds.of(thing.position, thing.size, yaw_of(thing.orientation), category_of(thing.type, config).anchor)
    optics = CameraSpec.from_config(load_yaml(config_path("sim.yaml"))["camera"])
    before, saved = world.base_pose, pb.saveState(physicsClientId=world.client)
    try:
        world.teleport_base(stance)  # no physics time passes
        # the arm stowed as the skills drive, turned aside: at home, or stowed straight, it hides what is in front
        for joint, q in zip(world.arm_indices, _look_posture(world)):
            pb.resetJointState(world.robot_id, joint, q, physicsClientId=world.client)
        spec = world.camera(optics)
        image = world.render(spec)
    finally:  # the world exactly as it was: base, arm and every body
        pb.restoreState(saved, physicsClientId=world.client)
        pb.removeState(saved, physicsClientId=world.client)
        world.base_pose = before
    return Crop(*object_crop(Frame(image.rgb, image.depth), camera_model(spec), bounds, None))


def _triple(values: Any) -> tuple[float, float, float]:
    return float(values[0]), float(values[1]), float(values[2])


def _look_posture(world: HouseholdWorld) -> tuple[float, ...]:
    """The stowed arm (the skills' posture at a place before they reach) turned LOOK_TURN about its first joint."""
    q = list(world.profile.stowed or world.profile.home)
    q[0] += LOOK_TURN
    return tuple(q)
