"""The multi-task benchmark's household world, in-process (no ROS): load one or more task scenes together,
run the household skills on them, read where everything is and what the robot points at.

The scenes are config/benchmarks/multitask/scenes/<task>.yaml, each at its own place (or half of one), so
any of them load together; their object types (the bins, the fruit bowl, jello, sugar, a spoon) are the
household catalog's own (config/household/objects.yaml), so ``teachbot sim --world household --scene
config/benchmarks/multitask/scenes/<task>.yaml`` sets up any one of them. ``truth`` answers for every object
where it is: "robot", "person", the object it rests on or in, or the place it stands on.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pybullet as pb
import yaml

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, SceneSpecError
from teachbot.evaluation.droc_worlds import droc_catalog
from teachbot.paths import config_path
from teachbot.robot_profile import RobotProfile
from teachbot.sim.household_world import HouseholdObject, HouseholdWorld
from teachbot.simrobot.direct import yaw_of
from teachbot.simrobot.factory import make_skills, make_world
from teachbot.skills.household import HouseholdSkills
from teachbot.skills.library import FINGERTIP_DEPTH
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.household_objects import Catalog
from teachbot.world.household_scene import household_scene_from_yaml

PROFILE = "household_sim"
SETTLE = 0.3  # seconds of physics after a scene reset
POINT_MARGIN = 0.02  # metres around an object's footprint within which the fingertips count as over it
POINT_RANGE = 0.25  # metres above an object's top within which fingertips over it point at it
RESTING = 0.02  # metres between an object's bottom and the top of what it rests on or in
FLOOR = "floor"  # truth() of an object on no place (it fell)


def multitask_catalog(path: str | Path | None = None, base: Catalog | None = None) -> Catalog:
    """The household catalog the simulator uses, which holds the multi-task object types; ``path``: a file of
    further types to add (as config/benchmarks/droc/objects.yaml's are)."""
    base = base or Catalog.load()
    return droc_catalog(Path(path), base) if path else base


def scenes_dir() -> Path:
    """Where the task scenes are: config/benchmarks/multitask/scenes/."""
    return config_path("benchmarks", "multitask", "scenes")


class MultitaskWorld:
    """One household world with the multi-task catalog and the household skills on it (``with MultitaskWorld() as w``):
    ``load(*scenes)`` resets it to their union, ``skills()`` acts, ``truth()`` and ``pointed_at()`` judge.
    ``scenes``: another folder of scene files (tests)."""

    def __init__(self, catalog: Catalog | None = None, scenes: str | Path | None = None, profile: str = PROFILE) -> None:
        self.catalog = catalog or multitask_catalog()
        self.layout = HouseholdLayout.load()
        self._dir = Path(scenes) if scenes else scenes_dir()
        self._profile = profile
        self._world: HouseholdWorld | None = None
        self._skills: HouseholdSkills | None = None
        self._raw: dict[str, dict[str, Any]] = {}  # scene name -> its parsed YAML

    def __enter__(self) -> MultitaskWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._skills is not None:
            self._skills.kin.close()
        if self._world is not None:
            self._world.close()
        self._skills = self._world = None

    @property
    def world(self) -> HouseholdWorld:
        """The simulated world, created on first use (without objects until :meth:`load`)."""
        if self._world is None:
            world = make_world(RobotProfile.load(self._profile), layout=self.layout, catalog=self.catalog)
            assert isinstance(world, HouseholdWorld), f"{self._profile} is not a household robot"
            self._world = world
        return self._world

    def skills(self) -> HouseholdSkills:
        """The household skills on the world, as the skills node would run them."""
        if self._skills is None:
            skills = make_skills(self.world)
            assert isinstance(skills, HouseholdSkills)
            self._skills = skills
        return self._skills

    # ------------------------------------------------------------------ scenes
    def scene_names(self) -> list[str]:
        """The task scenes there are (file names without .yaml), sorted."""
        return sorted(p.stem for p in self._dir.glob("*.yaml"))

    def _scene(self, name: str) -> dict[str, Any]:
        if name not in self._raw:
            path = self._dir / f"{name}.yaml"
            if not path.is_file():
                raise ConfigError(f"unknown multi-task scene {name!r}; use one of {', '.join(self.scene_names())}")
            raw = load_yaml(path)
            if not isinstance(raw, dict) or not isinstance(raw.get("objects"), list):
                raise SceneSpecError(f"{path}: expected a mapping with a list 'objects:'")
            self._raw[name] = raw
        return self._raw[name]

    def scene_objects(self, scene: str) -> list[str]:
        """Names of the objects of the task scene ``scene``, fixtures (bins, bowl) included, in file order."""
        return household_scene_from_yaml(yaml.safe_dump(self._scene(scene)), self.layout, self.catalog, source=scene).names()

    def load(self, *scene_names: str) -> HouseholdWorld:
        """Reset the world to the union of the named scenes: robot at its start, nothing held, physics settled.
        Two scenes that name the same object or put objects on the same spot are a SceneSpecError."""
        if not scene_names:
            raise ConfigError(f"load() needs at least one scene: {', '.join(self.scene_names())}")
        objects: list[Any] = []
        states: dict[str, dict[str, Any]] = {}
        for name in scene_names:
            raw = self._scene(name)
            objects += raw["objects"]
            for place, flags in (raw.get("states") or {}).items():
                clash = {k for k, v in flags.items() if states.get(place, {}).get(k, v) != v}
                if clash:
                    raise SceneSpecError(f"scene {name!r} sets {sorted(clash)} of the {place} otherwise than an earlier scene")
                states.setdefault(place, {}).update(flags)
        world = self.world
        text = yaml.safe_dump({"objects": objects, "states": states})
        world.reset(household_scene_from_yaml(text, world.layout, world.catalog, source=" + ".join(scene_names)))
        world.step(round(SETTLE / world.time_step))
        self.skills().held = ""
        return world

    def object_names(self) -> list[str]:
        """Names of the objects loaded now."""
        return self.world.object_names()

    # ------------------------------------------------------------------ ground truth
    def truth(self) -> dict[str, str]:
        """Where each object is: "robot" (held), "person" (the person holds it), the object it rests on
        or in ("box 1", "bowl", "green cube"), else the place whose surface it stands on ("table"), else
        "floor"."""
        world = self.world
        objects = world.objects()
        person = {p.name for p in world.layout.places.values() if p.hand is not None}
        out = {}
        for o in objects:
            if o.held:
                out[o.name] = "robot"
            elif o.place in person:
                out[o.name] = "person"
            else:
                out[o.name] = _resting_on(o, objects) or o.supported_by or o.place or FLOOR
        return out

    def tip(self) -> np.ndarray:
        """Map position of the closed fingertips (the grasp point moved down the fingers)."""
        world = self.world
        state = pb.getLinkState(world.robot_id, world.ee_index, computeForwardKinematics=True, physicsClientId=world.client)
        rotation = np.array(pb.getMatrixFromQuaternion(state[5])).reshape(3, 3)
        return np.array(state[4]) + rotation[:, 2] * FINGERTIP_DEPTH

    def pointed_at(self) -> str:
        """The object the hand points at now: the fingers closed (or holding something), their tips over
        its footprint (POINT_MARGIN around it) and above its top (at most POINT_RANGE); the highest such
        object, "" when none (an open hand hovering over what it just put down points at nothing)."""
        world = self.world
        if not world.held_object() and world.gripper_width() > world.profile.gripper.holding_min_width:
            return ""
        tip = self.tip()
        best, best_top = "", -math.inf
        for o in world.objects():
            if o.held:
                continue
            top = float(o.position[2] + o.size[2] / 2)
            if 0.0 < tip[2] - top <= POINT_RANGE and _over(tip[:2], o, POINT_MARGIN) and top > best_top:
                best, best_top = o.name, top
        return best


def _over(xy: np.ndarray, o: HouseholdObject, margin: float) -> bool:
    """Whether map ``xy`` lies over ``o``'s footprint grown by ``margin`` (round when its sides are equal)."""
    d = np.asarray(xy, float) - o.position[:2]
    half = (float(o.size[0]) / 2, float(o.size[1]) / 2)
    if abs(half[0] - half[1]) < 1e-6:
        return float(np.linalg.norm(d)) <= half[0] + margin
    yaw = yaw_of(o.orientation)
    c, s = math.cos(yaw), math.sin(yaw)
    return abs(c * d[0] + s * d[1]) <= half[0] + margin and abs(-s * d[0] + c * d[1]) <= half[1] + margin


def _resting_on(o: HouseholdObject, objects: list[HouseholdObject]) -> str:
    """The object ``o`` rests on or in, by footprints: its centre over the other's footprint, its bottom
    on that top (the nearest such top). The simulator's ``supported_by`` tests centre distances only, which
    ends before the rim of a wide bin and takes a flat knife beside a cup in the same bin for its support."""
    bottom = float(o.position[2] - o.size[2] / 2)
    best, gap = "", RESTING
    for other in objects:
        if other is o or other.held:
            continue
        d = abs(bottom - float(other.position[2] + other.size[2] / 2))
        if d <= gap and _over(o.position[:2], other, 0.0):
            best, gap = other.name, d
    return best
