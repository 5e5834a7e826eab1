"""The skills' interfaces implemented directly on a :class:`TabletopWorld` or a :class:`HouseholdWorld`, without ROS.

Used by the core tests and anything that wants the robot in-process; time is simulated time, so a
motion of two seconds costs only the physics steps.
"""

from __future__ import annotations

import math

import numpy as np

from teachbot.perception.household import HouseholdPerception, ThingStatus, WorldThing
from teachbot.sim.camera import CameraSpec
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.skills.household import Thing
from teachbot.skills.interfaces import ObjectInfo
from teachbot.skills.library import SkillLibrary, SkillOutcome
from teachbot.world.floor import BasePath, BasePose


def yaw_of(quaternion: np.ndarray) -> float:
    """Rotation about z of an (x, y, z, w) quaternion."""
    x, y, z, w = quaternion
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


class DirectArm:
    """ArmInterface over the world's controllers; ``sleep`` steps the physics."""

    commands_travel = False  # a command is in the world at once: allowances are simulated time only

    def __init__(self, world: TabletopWorld) -> None:
        self.world = world
        self.arm_joints = world.profile.arm_joints

    def joint_positions(self) -> np.ndarray:
        names, q, _, _ = self.world.joint_state()
        return q[: len(self.arm_joints)]

    def gripper_width(self) -> float:
        return self.world.gripper_width()

    def send_trajectory(self, joint_names: tuple[str, ...], times: np.ndarray, positions: np.ndarray) -> None:
        self.world.command_trajectory(list(joint_names), list(map(float, times)), np.asarray(positions).tolist())

    def send_gripper(self, width: float, effort: float) -> None:
        self.world.command_gripper(width, effort)

    def hold(self) -> None:
        self.world.hold()

    def now(self) -> float:
        return self.world.sim_time

    def sleep(self, seconds: float) -> None:
        self.world.step(max(1, round(seconds / self.world.time_step)))


class WorldObjects:
    """ObjectSource reading the simulator's ground truth."""

    def __init__(self, world: TabletopWorld) -> None:
        self.world = world

    def objects(self) -> dict[str, ObjectInfo]:
        return {
            o.name: ObjectInfo(o.name, o.category, o.position, o.size, yaw_of(o.orientation), o.supported_by)
            for o in self.world.objects()
        }


class DirectBase:
    """BaseInterface over a household world's kinematic base."""

    def __init__(self, world: HouseholdWorld) -> None:
        self.world = world

    def pose(self) -> BasePose:
        return self.world.base_pose

    def send_path(self, path: BasePath) -> None:
        self.world.command_base(path)

    def moving(self) -> bool:
        return self.world.base_moving

    def stop(self) -> None:
        self.world.stop_base()


class WorldHousehold:
    """HouseholdView reading a household world's ground truth and driving its doors and drawers."""

    def __init__(self, world: HouseholdWorld) -> None:
        self.world = world

    def things(self) -> dict[str, Thing]:
        return {
            o.name: Thing(o.name, o.type, o.position, o.size, yaw_of(o.orientation), o.place, o.inside,
                          self.world.rules.thing(o.name).properties, o.states)
            for o in self.world.objects()
        }

    def place_states(self) -> dict[str, dict]:
        return {n: s for n, s in self.world.thing_states().items() if n in self.world.layout.places}

    def opening(self, place: str) -> float:
        return self.world.opening(place)

    def handle(self, place: str, inner: bool = False) -> np.ndarray:
        return self.world.handle_position(place, inner)

    def drive_articulation(self, place: str, open_: bool, fraction: float = 1.0) -> None:
        self.world.command_articulation(place, open_, fraction)


def perceive_household(world: HouseholdWorld, perception: HouseholdPerception, camera: CameraSpec | None = None) -> None:
    """Fold the world's ground truth into household ``perception`` (what the perception node does over
    ROS); with a ``camera`` the mast camera's segmentation image says what is in view."""
    seen = None
    if camera is not None:
        seen = set(np.unique(world.render(world.camera(camera)).segmentation).tolist())
    objects = world.objects()
    things = [WorldThing(o.name, o.type, o.color, o.position, o.size, yaw_of(o.orientation), o.body_id) for o in objects]
    states = world.thing_states()
    status = {o.name: ThingStatus(o.place, o.inside, o.held, _flags(states.get(o.name, {})),
                                  str(states.get(o.name, {}).get("contents") or "")) for o in objects}
    status.update({p: ThingStatus(flags=_flags(states.get(p, {}))) for p in world.layout.places})
    openings = {p: world.opening(p) for p in world.layout.places if world.layout.place(p).openable}
    pose = world.base_pose
    perception.update(things, world.sim_time, (pose.x, pose.y, pose.yaw), openings, status, seen)


def _flags(states: dict) -> dict[str, bool]:
    return {k: bool(v) for k, v in states.items() if k not in ("held", "contents")}


class DirectSkills:
    """SkillCaller over a skill library in this process (tests and in-process runs); the person takes a
    handed-over object after ``handover_after`` seconds."""

    def __init__(self, library: SkillLibrary, handover_after: float = 0.3) -> None:
        self.library = library
        self.handover_after = handover_after

    def call(self, name: str, timeout: float = 60.0, **fields: object) -> SkillOutcome:
        if name in ("handover", "handover_object_to_human"):
            fields.setdefault("timeout", self.handover_after)
        return self.library.run(name, **fields)
