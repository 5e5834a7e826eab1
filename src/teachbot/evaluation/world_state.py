"""Simulator ground truth as plain data, so tasks judge success without ROS or PyBullet.

Converters read the GetWorldState service response (duck-typed: no message import), the world's own
``ObjectState`` list, or a scene spec (the state before physics settles it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from teachbot.evaluation.benchmark import Benchmark
from teachbot.world.scene import SceneSpec, TabletopConfig


@dataclass(frozen=True)
class ObjectTruth:
    """One object: ``position`` is its centre (base frame, metres); ``supported_by`` what it rests on or in."""

    name: str
    category: str
    color: str
    position: tuple[float, float, float]
    supported_by: str = ""
    inside: bool = False
    held: bool = False

    @property
    def xy(self) -> tuple[float, float]:
        return self.position[0], self.position[1]

    @property
    def z(self) -> float:
        return self.position[2]

    def xy_distance(self, point: Iterable[float]) -> float:
        px, py = list(point)[:2]
        return math.hypot(self.position[0] - px, self.position[1] - py)


@dataclass(frozen=True)
class WorldState:
    """Every object of the scene, in scene order, and the name of the held object ('' for none)."""

    objects: tuple[ObjectTruth, ...]
    held_object: str = ""

    def __post_init__(self) -> None:
        names = [o.name for o in self.objects]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate object names in a world state: {names}")

    def get(self, name: str) -> ObjectTruth:
        for o in self.objects:
            if o.name == name:
                return o
        raise KeyError(f"no object named {name!r}; the state holds {', '.join(self.names())}")

    def __contains__(self, name: object) -> bool:
        return any(o.name == name for o in self.objects)

    def names(self) -> list[str]:
        return [o.name for o in self.objects]

    def blocks(self) -> list[ObjectTruth]:
        return [o for o in self.objects if o.category == "block"]

    def bowls(self) -> list[ObjectTruth]:
        return [o for o in self.objects if o.category == "bowl"]

    @classmethod
    def from_ros(cls, response: Any) -> WorldState:
        """From a teachbot_interfaces GetWorldState response (or anything shaped like one)."""
        objects = tuple(
            ObjectTruth(
                name=o.name, category=o.category, color=o.color,
                position=(float(o.pose.position.x), float(o.pose.position.y), float(o.pose.position.z)),
                supported_by=o.supported_by, inside=bool(o.inside), held=bool(o.held),
            )
            for o in response.objects
        )
        return cls(objects, held_object=str(getattr(response, "held_object", "")))

    @classmethod
    def from_sim(cls, objects: Iterable[Any], held_object: str = "") -> WorldState:
        """From ``teachbot.sim.world.TabletopWorld.objects()``."""
        return cls(tuple(
            ObjectTruth(o.name, o.category, o.color, tuple(float(v) for v in o.position[:3]),  # type: ignore[arg-type]
                        o.supported_by, bool(o.inside), bool(o.held))
            for o in objects
        ), held_object=held_object)

    @classmethod
    def from_scene(cls, scene: SceneSpec, table: TabletopConfig | None = None) -> WorldState:
        """The state a scene spec describes: blocks resting on the table, bowls at table height."""
        half = (table.block_size if table else 0.04) / 2
        return cls(tuple(
            ObjectTruth(o.name, o.category, o.color, (o.position[0], o.position[1], half if o.category == "block" else 0.0))
            for o in scene.objects
        ))


def describe(obj: ObjectTruth, state: WorldState) -> str:
    """Where an object is, in words a person watching the table would use, never coordinates: 'in the blue bowl',
    'on the green block', 'on the table near the top left corner' (the nearest of the benchmark's named places)."""
    if obj.held or state.held_object == obj.name:
        return "still in the gripper"
    if obj.supported_by:
        support = state.get(obj.supported_by) if obj.supported_by in state else None
        word = "in" if obj.inside or (support is not None and support.category == "bowl") else "on"
        return f"{word} the {obj.supported_by}"
    return f"on the table near the {nearest_place(obj.position[0], obj.position[1])}"


def nearest_place(x: float, y: float) -> str:
    """The benchmark's named place (a corner, a side, the middle) nearest to (x, y)."""
    return min(_places().items(), key=lambda item: math.hypot(item[1][0] - x, item[1][1] - y))[0]


def towards(start: tuple[float, float], goal: tuple[float, float], near: float = 0.1) -> str:
    """Which way an object must go, as a person points it out: 'a little further to the right and to the top'."""
    dx, dy = goal[0] - start[0], goal[1] - start[1]
    ways = [w for w, d in (("to the right" if dx > 0 else "to the left", abs(dx)), ("to the top" if dy > 0 else "to the bottom", abs(dy)))
            if d > 0.25 * max(abs(dx), abs(dy), 1e-9)]
    return f"{'a little further ' if math.hypot(dx, dy) < near else 'further '}{' and '.join(ways)}"


@functools.lru_cache(maxsize=1)
def _places() -> dict[str, tuple[float, float]]:
    return dict(Benchmark.load().named_points)
