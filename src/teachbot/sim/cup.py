"""A drinking cup for the simulator that can stand upright (open top) or flipped (closed bottom up).

The paper's visual case (DROC, "Hang cup on rack"): an upright and a flipped cup need different
policies, and the robot must tell them apart by shape while the colours differ. The cup is a tapered
hollow frustum with a floor: its *visual* shape is a triangle mesh built here (no mesh file; outer wall,
inner wall, rim, floor both sides), its *collision* shape a compound of primitives (a ring of tilted wall
boxes and a floor disc), so it rests and can be pushed like a real cup. No ROS here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pybullet as pb

from teachbot.errors import InvalidArgumentError

UPRIGHT, FLIPPED = "upright", "flipped"
POSES = (UPRIGHT, FLIPPED)


@dataclass(frozen=True)
class CupGeometry:
    """A tapered cup in metres: wider at the rim than at the base, like a paper or plastic cup."""

    height: float = 0.10
    top_radius: float = 0.042
    bottom_radius: float = 0.03
    wall: float = 0.004
    floor: float = 0.006
    segments: int = 24  # around the mesh
    wall_boxes: int = 12  # around the collision ring

    def __post_init__(self) -> None:
        if not (0 < self.wall < self.bottom_radius <= self.top_radius and 0 < self.floor < self.height and self.segments >= 8
                and self.wall_boxes >= 6):
            raise InvalidArgumentError(f"cup geometry is not a cup: {self}")

    @property
    def size(self) -> np.ndarray:
        """Its bounding box (x, y, z)."""
        return np.array([2 * self.top_radius, 2 * self.top_radius, self.height])


def cup_mesh(geometry: CupGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (N, 3) and triangle indices (M*3,) of the cup, upright, base at z = 0, counter-clockwise
    seen from outside (the floor's inside and the inner wall face the cup's hollow)."""
    g, n = geometry, geometry.segments
    angles = 2 * math.pi * np.arange(n) / n
    ring = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    inner_top, inner_bottom = g.top_radius - g.wall, g.bottom_radius - g.wall
    # the inner wall's radius where it meets the floor (the wall tapers the same way inside)
    inner_floor = inner_bottom + (inner_top - inner_bottom) * g.floor / g.height
    rings = [(g.bottom_radius, 0.0), (g.top_radius, g.height), (inner_top, g.height), (inner_floor, g.floor)]
    vertices = [np.column_stack([ring * radius, np.full(n, z)]) for radius, z in rings]
    centres = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, g.floor]])
    vertices = np.vstack([*vertices, centres])
    outer_bottom, outer_top, rim_inner, floor_ring = (k * n for k in range(4))
    bottom_centre, floor_centre = 4 * n, 4 * n + 1
    triangles: list[tuple[int, int, int]] = []
    for i in range(n):
        j = (i + 1) % n
        # bands between two rings, counter-clockwise from outside: the outer wall (facing out), the rim
        # (facing up), the inner wall (facing the hollow)
        for low, high in ((outer_bottom, outer_top), (outer_top, rim_inner), (rim_inner, floor_ring)):
            triangles.extend([(low + i, low + j, high + j), (low + i, high + j, high + i)])
        triangles.append((floor_centre, floor_ring + i, floor_ring + j))  # the floor's inside, facing up
        triangles.append((bottom_centre, outer_bottom + j, outer_bottom + i))  # the base, facing down
    return vertices, np.asarray(triangles, dtype=np.int32).ravel()


def _collision_shape(client: int, g: CupGeometry) -> int:
    """A ring of wall boxes leaning with the taper, plus a floor disc, about the cup's half height (the body frame)."""
    lean = math.atan2(g.top_radius - g.bottom_radius, g.height)
    mid_radius = (g.top_radius + g.bottom_radius) / 2 - g.wall / 2
    slant = math.hypot(g.height, g.top_radius - g.bottom_radius)
    half_width = math.pi * (g.top_radius + g.bottom_radius) / 2 / g.wall_boxes * 1.05
    types, halves, orientations = [pb.GEOM_CYLINDER], [[0, 0, 0]], [[0.0, 0.0, 0.0, 1.0]]
    positions = [[0.0, 0.0, g.floor / 2 - g.height / 2]]
    radii, lengths = [g.bottom_radius], [g.floor]
    for k in range(g.wall_boxes):
        a = 2 * math.pi * k / g.wall_boxes
        types.append(pb.GEOM_BOX)
        halves.append([g.wall / 2, half_width, slant / 2])
        positions.append([mid_radius * math.cos(a), mid_radius * math.sin(a), 0.0])
        orientations.append(list(pb.getQuaternionFromEuler([0.0, -lean, a])))  # lean outwards, then turn to angle a
        radii.append(0.0)
        lengths.append(0.0)
    return pb.createCollisionShapeArray(types, radii=radii, halfExtents=halves, lengths=lengths,
                                        collisionFramePositions=positions, collisionFrameOrientations=orientations,
                                        physicsClientId=client)


def cup_body(client: int, rgba: tuple[float, float, float, float] | list[float], xy: tuple[float, float], pose: str = UPRIGHT,
             yaw: float = 0.0, z: float = 0.0, mass: float = 0.15, geometry: CupGeometry | None = None) -> int:
    """A cup of colour ``rgba`` standing on height ``z`` at ``xy``: ``upright`` (open top) or ``flipped``
    (turned over about its x axis: the closed base up, the rim on the support)."""
    if pose not in POSES:
        raise InvalidArgumentError(f"a cup stands {' or '.join(POSES)}, not {pose!r}")
    g = geometry or CupGeometry()
    vertices, indices = cup_mesh(g)
    # the body's frame is the cup's half height, so turning it over keeps it on the support
    centred = vertices - np.array([0.0, 0.0, g.height / 2])
    visual = pb.createVisualShape(pb.GEOM_MESH, vertices=centred.tolist(), indices=indices.tolist(), rgbaColor=list(rgba),
                                  physicsClientId=client)
    collision = _collision_shape(client, g)
    roll = math.pi if pose == FLIPPED else 0.0
    body = pb.createMultiBody(mass, collision, visual, basePosition=[xy[0], xy[1], z + g.height / 2 + 1e-3],
                              baseOrientation=pb.getQuaternionFromEuler([roll, 0.0, yaw]), physicsClientId=client)
    pb.changeDynamics(body, -1, lateralFriction=1.0, spinningFriction=0.002, physicsClientId=client)
    return body


def cup_pose(client: int, body: int) -> str:
    """``upright`` when the cup's own z axis points up, else ``flipped`` (what a task's success check reads)."""
    _, orientation = pb.getBasePositionAndOrientation(body, physicsClientId=client)
    axis_z = pb.getMatrixFromQuaternion(orientation)[8]
    return UPRIGHT if axis_z > 0 else FLIPPED
