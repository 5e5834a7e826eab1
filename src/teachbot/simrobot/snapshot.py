"""A scene as the robot knew it at one moment: each object's name, kind, colour and pose, as plain data.

The learning request carries two of them (teachbot.learning.call.LearnRequest): the scene when the episode's
first request came and the one the person accepted when they asked the robot to learn. The rehearsal of a lesson
(teachbot.learning.rehearsal) rebuilds the first in a copy of the simulated world (:func:`world_from_scene`)
and compares where the lesson leaves the objects with the second. Pure data and words here, no physics; over ROS
a scene travels as the JSON of :func:`scene_to_json`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from teachbot.world.scene import CATEGORIES, TabletopConfig

Scene = tuple["SceneObject", ...]


@dataclass(frozen=True)
class SceneObject:
    """One object: ``position`` its centre (robot base frame, metres), ``yaw`` about z; ``category`` 'block' or
    'bowl' on the tabletop ('' when unknown), ``color`` '' when unknown."""

    name: str
    category: str
    color: str
    position: tuple[float, float, float]
    yaw: float = 0.0


def scene_from_positions(positions: Mapping[str, Sequence[float]], labels: Mapping[str, str] | None = None,
                         yaws: Mapping[str, float] | None = None) -> Scene:
    """A scene from an object list (name -> [x, y, z], what perception and the console's functions read).
    The category is the object's detector label, else the last word of a tabletop name ('green block'), the
    colour what comes before it."""
    objects = []
    for name, xyz in positions.items():
        words = name.split()
        category = (labels or {}).get(name) or (words[-1] if words and words[-1] in CATEGORIES else "")
        color = " ".join(words[:-1]) if len(words) > 1 and words[-1] == category else ""
        z = float(xyz[2]) if len(xyz) > 2 else 0.0
        objects.append(SceneObject(name, category, color, (float(xyz[0]), float(xyz[1]), z),
                                   float((yaws or {}).get(name, 0.0))))
    return tuple(objects)


def scene_to_json(scene: Sequence[SceneObject]) -> str:
    """The compact form of a scene in a ROS request ('' for none)."""
    if not scene:
        return ""
    return json.dumps([[o.name, o.category, o.color, [round(v, 4) for v in o.position], round(o.yaw, 4)] for o in scene],
                      separators=(",", ":"))


def scene_from_json(text: str) -> Scene:
    """Read :func:`scene_to_json` back; ValueError names what is malformed."""
    if not text.strip():
        return ()
    try:
        rows = json.loads(text)
        return tuple(SceneObject(str(name), str(category), str(color), (float(p[0]), float(p[1]), float(p[2])), float(yaw))
                     for name, category, color, p, yaw in rows)
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"a scene must be a JSON list of [name, category, color, [x, y, z], yaw]: {exc}") from None


def where(obj: SceneObject, scene: Sequence[SceneObject], table: TabletopConfig) -> str:
    """Where an object is, in the words a person watching the table would use: 'in the blue bowl', 'on the red
    block', 'on the table near the left side' (the nearest of the table's named places)."""
    x, y, z = obj.position
    for other in scene:
        if other.name == obj.name:
            continue
        ox, oy, oz = other.position
        gap = math.hypot(x - ox, y - oy)
        if other.category == "bowl" and gap < table.bowl_radius and z < oz + table.bowl_height + table.block_size:
            return f"in the {other.name}"
        if other.category == "block" and gap < 0.75 * table.block_size and 0.5 * table.block_size < z - oz < 1.5 * table.block_size:
            return f"on the {other.name}"
    place = min(table.named_points.items(), key=lambda item: math.hypot(item[1][0] - x, item[1][1] - y))[0]
    return f"on the table near the {place}"
