"""The PyBullet tabletop world: the arm (``ArmWorld``) at a table with blocks, bowls and cups (upright or flipped).

What only a simulator has (ground truth, reset) sits beside the controllers. No ROS here:
``teachbot.nodes.sim_node`` wraps it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pybullet as pb

from teachbot.errors import InvalidArgumentError
from teachbot.robot_profile import RobotProfile
from teachbot.sim.arm_world import ArmWorld
from teachbot.sim.cup import CupGeometry, cup_body, cup_pose
from teachbot.world.scene import SceneSpec, TabletopConfig

TABLE_RGBA = (0.78, 0.66, 0.5, 1.0)
BOWL_WALL_SEGMENTS = 16


@dataclass
class ObjectState:
    """Ground truth of one object (base frame, metres)."""

    name: str
    category: str
    color: str
    body_id: int
    position: np.ndarray
    orientation: np.ndarray  # quaternion x, y, z, w
    size: np.ndarray
    supported_by: str = ""
    inside: bool = False
    held: bool = False


class TabletopWorld(ArmWorld):
    """One PyBullet client holding the robot, the table and the current scene of blocks and bowls."""

    def __init__(
        self,
        profile: RobotProfile,
        table: TabletopConfig | None = None,
        *,
        gui: bool = False,
        time_step: float = 1.0 / 240.0,
        grasp_assist: bool = True,
    ) -> None:
        super().__init__(profile, gui=gui, time_step=time_step, grasp_assist=grasp_assist)
        self.table = table or TabletopConfig.load()
        self.scene: SceneSpec | None = None
        self._objects: dict[str, tuple[int, str, str, np.ndarray]] = {}  # name -> body, category, color, size
        self._build_table()
        self._load_robot()

    def _graspables(self) -> dict[str, int]:
        return {name: body for name, (body, category, _, _) in self._objects.items() if category == "block"}

    # ----------------------------------------------------------------- construction
    def _build_table(self) -> None:
        t = self.table
        half = [(t.table_x[1] - t.table_x[0]) / 2, (t.table_y[1] - t.table_y[0]) / 2, t.table_thickness / 2]
        centre = [(t.table_x[0] + t.table_x[1]) / 2, (t.table_y[0] + t.table_y[1]) / 2, -t.table_thickness / 2]
        col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=half, physicsClientId=self.client)
        vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=half, rgbaColor=TABLE_RGBA, physicsClientId=self.client)
        self.table_id = pb.createMultiBody(0, col, vis, basePosition=centre, physicsClientId=self.client)
        pb.changeDynamics(self.table_id, -1, lateralFriction=1.0, physicsClientId=self.client)

    def reset(self, scene: SceneSpec, heights: Mapping[str, float] | None = None) -> None:
        """Replace the objects by ``scene`` and send the robot home. ``heights``: the centre height of blocks that do
        not rest on the table (in a bowl, on another block), by name, so a perceived scene is rebuilt as it stood."""
        self.reset_robot()
        for body, *_ in self._objects.values():
            pb.removeBody(body, physicsClientId=self.client)
        self._objects.clear()
        for spec in scene.objects:
            if spec.category == "bowl":
                body, size = self._make_bowl(spec.color, spec.position)
            elif spec.category == "cup":
                body = cup_body(self.client, self._rgba(spec.color), spec.position, spec.pose, spec.yaw)
                size = CupGeometry().size
            else:
                body, size = self._make_block(spec.color, spec.position, spec.yaw, (heights or {}).get(spec.name))
            self._objects[spec.name] = (body, spec.category, spec.color, size)
        self.scene = scene
        self.sim_time = 0.0
        self.step(int(0.25 / self.time_step))  # let blocks settle

    def _rgba(self, color: str) -> list[float]:
        return [*self.table.rgb.get(color, (0.6, 0.6, 0.6)), 1.0]

    def _make_block(self, color: str, xy: tuple[float, float], yaw: float, z: float | None = None) -> tuple[int, np.ndarray]:
        s = self.table.block_size
        z = s / 2 + 1e-3 if z is None else max(float(z), s / 2) + 1e-3
        col = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[s / 2] * 3, physicsClientId=self.client)
        vis = pb.createVisualShape(pb.GEOM_BOX, halfExtents=[s / 2] * 3, rgbaColor=self._rgba(color), physicsClientId=self.client)
        body = pb.createMultiBody(
            self.table.block_mass, col, vis, basePosition=[xy[0], xy[1], z],
            baseOrientation=pb.getQuaternionFromEuler([0, 0, yaw]), physicsClientId=self.client,
        )
        pb.changeDynamics(body, -1, lateralFriction=self.table.block_friction, spinningFriction=0.001, physicsClientId=self.client)
        return body, np.array([s, s, s])

    def _make_bowl(self, color: str, xy: tuple[float, float]) -> tuple[int, np.ndarray]:
        """A fixed bowl: a thin floor plus a ring of wall boxes (no mesh file needed)."""
        r, h, w = self.table.bowl_radius, self.table.bowl_height, self.table.bowl_wall
        n = BOWL_WALL_SEGMENTS
        types, halves, frames, orns = [pb.GEOM_BOX], [[0.72 * r, 0.72 * r, 0.003]], [[0, 0, 0.003]], [[0, 0, 0, 1]]
        seg = math.pi * r / n * 1.1
        for k in range(n):
            a = 2 * math.pi * k / n
            types.append(pb.GEOM_BOX)
            halves.append([w / 2, seg, h / 2])
            frames.append([(r - w / 2) * math.cos(a), (r - w / 2) * math.sin(a), h / 2])
            orns.append(pb.getQuaternionFromEuler([0, 0, a]))
        col = pb.createCollisionShapeArray(types, halfExtents=halves, collisionFramePositions=frames,
                                           collisionFrameOrientations=orns, physicsClientId=self.client)
        vis = pb.createVisualShapeArray(types, halfExtents=halves, visualFramePositions=frames,
                                        visualFrameOrientations=orns, physicsClientId=self.client)
        body = pb.createMultiBody(0, col, vis, basePosition=[xy[0], xy[1], 0.0], physicsClientId=self.client)
        pb.changeVisualShape(body, -1, rgbaColor=self._rgba(color), physicsClientId=self.client)
        return body, np.array([2 * r, 2 * r, h])

    def cup_pose(self, name: str) -> str:
        """``upright`` or ``flipped``: how the cup ``name`` stands now."""
        body, category, _, _ = self._objects[name]
        if category != "cup":
            raise InvalidArgumentError(f"{name} is a {category}, not a cup")
        return cup_pose(self.client, body)

    def objects(self) -> list[ObjectState]:
        """Ground truth of every object, with what it rests on or in."""
        held = self.held_object()
        states = []
        for name, (body, category, color, size) in self._objects.items():
            pos, orn = pb.getBasePositionAndOrientation(body, physicsClientId=self.client)
            states.append(ObjectState(name, category, color, body, np.array(pos), np.array(orn), size, held=name == held))
        for a in states:
            if a.category != "block" or a.held:
                continue
            for b in states:
                if b is a:
                    continue
                dxy = float(np.hypot(*(a.position[:2] - b.position[:2])))
                dz = float(a.position[2] - b.position[2])
                if b.category == "bowl" and dxy < self.table.bowl_radius - a.size[0] / 4 and dz < b.size[2] + a.size[2]:
                    a.supported_by, a.inside = b.name, True
                elif b.category == "block" and dxy < 0.75 * b.size[0] and 0.5 * b.size[2] < dz < 1.5 * b.size[2]:
                    a.supported_by = b.name
        return states

    def object_names(self) -> list[str]:
        return list(self._objects)

