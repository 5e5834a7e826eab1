"""Room for the open fingers beside a thing to be picked: which other things a top-down grasp would hit.

A parallel gripper lowers its open fingers on both sides of the thing. Where another thing stands closer to it
than a finger is thick, on the axis the fingers close along, the finger comes down on that thing and pushes it
away (or presses it into the table): a pick that reports success then has moved something nobody asked it to
move. :func:`finger_blockers` names the things the fingers would come down on for one hand yaw; the pick turns
the hand (a quarter turn for a square footprint) to a yaw with room, and fails naming the blockers when none has.

The finger is the Franka Panda's (its collision mesh: 26.4 mm outward from the inner face, 21 mm across, its tip
11 mm below the grasp point at most); footprints are the things' boxes turned by their yaw, a tabletop bowl's a
disc. Pure numpy, all in the arm's base frame.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from teachbot.skills.interfaces import ObjectInfo

FINGER_THICKNESS = 0.0264  # metres a finger reaches outward from its inner face
FINGER_HALF_SPAN = 0.0105  # metres from a finger's middle to its side, across the closing axis
FINGER_MARGIN = 0.003  # metres kept free around a finger's footprint
HOLLOW = ("bowl",)  # the tabletop's hollow bowls: round, and what lies in one is held by its floor, not its rim
DISC_SIDES = 16


def closing_axis(orientation: np.ndarray) -> np.ndarray:
    """The horizontal unit axis the fingers close along for a hand ``orientation`` (quaternion x, y, z, w): the
    hand's y axis, the Panda's finger joint axis."""
    x, y, z, w = (float(v) for v in orientation)
    axis = np.array([2 * (x * y - w * z), 1 - 2 * (x * x + z * z)])
    norm = float(np.linalg.norm(axis))
    return axis / norm if norm > 1e-9 else np.array([0.0, 1.0])


def _rectangle(centre: np.ndarray, u: np.ndarray, half_u: float, half_v: float) -> np.ndarray:
    v = np.array([-u[1], u[0]])
    return np.array([centre + su * half_u * u + sv * half_v * v for su, sv in ((1, 1), (-1, 1), (-1, -1), (1, -1))])


def finger_footprints(centre: np.ndarray, axis: np.ndarray, opening: float) -> list[np.ndarray]:
    """The two open fingers' footprints (corners, (4, 2)) around the grasp point ``centre`` (xy), the fingers
    ``opening`` metres apart along ``axis``; each grown by FINGER_MARGIN."""
    half_u = FINGER_THICKNESS / 2 + FINGER_MARGIN
    middle = opening / 2 + FINGER_THICKNESS / 2
    return [_rectangle(centre[:2] + side * middle * axis, axis, half_u, FINGER_HALF_SPAN + FINGER_MARGIN) for side in (1, -1)]


def footprint(obj: ObjectInfo) -> np.ndarray:
    """Corners of ``obj``'s footprint: its box turned by its yaw, a polygon round a hollow bowl's disc."""
    centre = obj.position[:2]
    if obj.category in HOLLOW:
        r = float(obj.size[0]) / 2
        angles = np.linspace(0.0, 2 * math.pi, DISC_SIDES, endpoint=False)
        return centre + r * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    u = np.array([math.cos(obj.yaw), math.sin(obj.yaw)])
    return _rectangle(centre, u, float(obj.size[0]) / 2, float(obj.size[1]) / 2)


def overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex polygons (corners in order) overlap (separating axis test)."""
    for poly in (a, b):
        edges = np.roll(poly, -1, axis=0) - poly
        for edge in edges:
            normal = np.array([-edge[1], edge[0]])
            pa, pb = a @ normal, b @ normal
            if pa.max() <= pb.min() or pb.max() <= pa.min():
                return False
    return True


def finger_blockers(obj: ObjectInfo, others: Iterable[ObjectInfo], grasp_z: float, axis: np.ndarray, opening: float,
                    tip_depth: float) -> list[str]:
    """Names of the things among ``others`` the open fingers would come down on when grasping ``obj`` at height
    ``grasp_z`` with the fingers ``opening`` apart along ``axis``: those whose footprint a finger's overlaps and
    whose top is above the fingertips (``tip_depth`` below the grasp point). ``obj`` itself, what it rests on
    (its top is below the fingertips) and a hollow bowl ``obj`` lies in do not count."""
    fingers = finger_footprints(obj.position, axis, opening)
    tips = grasp_z - tip_depth
    names = []
    for o in others:
        if o.name == obj.name or o.position[2] + float(o.size[2]) / 2 <= tips:
            continue
        if o.category in HOLLOW and float(np.hypot(*(obj.position[:2] - o.position[:2]))) < float(o.size[0]) / 2:
            continue  # obj lies in this bowl: the fingers go down inside its rim
        shape = footprint(o)
        if any(overlap(f, shape) for f in fingers):
            names.append(o.name)
    return sorted(names)
