"""The skills' interfaces implemented directly on a :class:`TabletopWorld`, without ROS.

Used by the core tests and anything that wants the robot in-process; time is simulated time, so a
motion of two seconds costs only the physics steps.
"""

from __future__ import annotations

import math

import numpy as np

from teachbot.sim.world import TabletopWorld
from teachbot.skills.interfaces import ObjectInfo


def yaw_of(quaternion: np.ndarray) -> float:
    """Rotation about z of an (x, y, z, w) quaternion."""
    x, y, z, w = quaternion
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


class DirectArm:
    """ArmInterface over the world's controllers; ``sleep`` steps the physics."""

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
