"""Spatial relations, distances, states and properties of scene-model objects.

What the console and the issue-detection agent ask: ``check_obj_relationship``,
``dist_to_target``, ``get_obj_state``, ``get_obj_properties``. Directions are the viewer's
(config ``perception.relations``: by default the person across the table, as in Code as Policies;
``viewer: robot`` turns them with a mobile robot's heading). Fixed things such as furniture take part
in relations as *fixtures*: rectangles that things rest on or in, never tracked, never listed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from teachbot.errors import InvalidArgumentError, UnknownObjectError
from teachbot.perception.config import PerceptionConfig, RelationConfig
from teachbot.perception.localize import category_of
from teachbot.perception.scene_model import SceneModel, TrackedObject

RELATIONS = ("left_of", "right_of", "in_front_of", "behind", "on_top_of", "inside", "near", "blocking", "above", "below")


@dataclass(frozen=True, eq=False)
class Body:
    """The geometry relations need: footprint centre and radius, bottom and top heights."""

    name: str
    centre: np.ndarray  # xy
    radius: float
    bottom: float
    top: float
    container: bool
    half: tuple[float, float] | None = None  # a rectangle's half extents (fixtures); None: the circle of ``radius``
    yaw: float = 0.0  # the rectangle's turn about z

    def covers(self, point: np.ndarray) -> bool:
        """Whether the xy ``point`` lies over this body's footprint."""
        d = np.asarray(point[:2], float) - self.centre
        if self.half is None:
            return float(np.linalg.norm(d)) < self.radius
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return abs(d[0] * c + d[1] * s) <= self.half[0] and abs(-d[0] * s + d[1] * c) <= self.half[1]

    def edge_distance(self, point: np.ndarray) -> float:
        """Horizontal distance from the xy ``point`` to the footprint's edge (negative: inside)."""
        d = np.asarray(point[:2], float) - self.centre
        if self.half is None:
            return float(np.linalg.norm(d)) - self.radius
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        q = np.abs([d[0] * c + d[1] * s, -d[0] * s + d[1] * c]) - np.asarray(self.half)
        return float(np.linalg.norm(np.maximum(q, 0.0))) + min(float(q.max()), 0.0)

    @classmethod
    def of(cls, obj: TrackedObject, config: PerceptionConfig) -> Body:
        spec = category_of(obj.label, config)
        h = float(obj.size[2])
        bottom = float(obj.position[2]) if spec.anchor == "bottom" else float(obj.position[2]) - h / 2
        return cls(obj.name, obj.position[:2].astype(float), float(max(obj.size[0], obj.size[1])) / 2, bottom,
                   bottom + h, bool(spec.properties.get("container", False)))


RobotPose = Callable[[], tuple[float, float, float]]  # x, y, yaw of a mobile robot's base now


class SceneQueries:
    """Relations and queries over a list of tracked objects, and over fixed ``fixtures`` (furniture)."""

    def __init__(self, scene: SceneModel, fixtures: Callable[[], Sequence[Body]] | None = None,
                 robot_pose: RobotPose | None = None) -> None:
        self.scene = scene
        self.config: PerceptionConfig = scene.config
        self.rel: RelationConfig = scene.config.relations
        self._fixtures = fixtures or (lambda: ())
        self._robot_pose = robot_pose

    def _objects(self) -> list[TrackedObject]:
        return self.scene.objects()

    def fixtures(self) -> dict[str, Body]:
        """The fixed things by name (none on the tabletop)."""
        return {b.name: b for b in self._fixtures()}

    # ------------------------------------------------------------------ lookups
    def object(self, name: str) -> TrackedObject:
        objects = self._objects()
        for obj in objects:
            if obj.name == name:
                return obj
        known = ", ".join(sorted(o.name for o in objects)) or "none (is perception seeing the table?)"
        places = ", ".join(sorted(self.fixtures()))
        raise UnknownObjectError(f"unknown object {name!r}; perception knows: {known}" + (f"; places: {places}" if places else ""))

    def body(self, name: str) -> Body:
        fixture = self.fixtures().get(name)
        return fixture if fixture is not None else Body.of(self.object(name), self.config)

    def _bodies(self) -> list[Body]:
        return [*(Body.of(o, self.config) for o in self._objects()), *self._fixtures()]

    def robot_frame(self) -> tuple[np.ndarray, float]:
        """Where the robot's base is (config ``robot_base``, in the mobile base's frame when there is one) and its yaw."""
        base = np.asarray(self.rel.robot_base, float)
        if self._robot_pose is None:
            return base, 0.0
        x, y, yaw = self._robot_pose()
        c, s = math.cos(yaw), math.sin(yaw)
        return np.array([x + c * base[0] - s * base[1], y + s * base[0] + c * base[1], base[2]]), float(yaw)

    def _axis(self, axis: tuple[float, float, float]) -> np.ndarray:
        """A direction of the config in the scene: as given, or turned with the robot (``viewer: robot``)."""
        v = np.asarray(axis[:2], float)
        if self.rel.viewer != "robot":
            return v
        _, yaw = self.robot_frame()
        c, s = math.cos(yaw), math.sin(yaw)
        return np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])

    # ------------------------------------------------------------------ relations
    def relation(self, relation: str, subject: str, obj: str) -> bool:
        """Whether ``subject`` stands in ``relation`` to ``obj`` (e.g. "left_of", "red block", "blue bowl")."""
        key = relation.strip().lower().replace(" ", "_")
        if key not in RELATIONS:
            raise InvalidArgumentError(f"unknown relation {relation!r}; use one of {', '.join(RELATIONS)}")
        if subject == obj:
            raise InvalidArgumentError(f"a relation needs two different objects, got {subject!r} twice")
        a, b = self.body(subject), self.body(obj)
        return bool(getattr(self, f"_{key}")(a, b))

    def related(self, relation: str, obj: str) -> list[str]:
        """Every object and fixture that stands in ``relation`` to ``obj`` (what is on top of the plate?)."""
        self.body(obj)  # an unknown name is an error, not an empty answer
        names = [o.name for o in self._objects()] + list(self.fixtures())
        return [n for n in names if n != obj and self.relation(relation, n, obj)]

    def _offset(self, a: Body, b: Body, axis: tuple[float, float, float]) -> float:
        return float((a.centre - b.centre) @ self._axis(axis))

    def _left_of(self, a: Body, b: Body) -> bool:
        return self._offset(a, b, self.rel.right) < -self.rel.margin

    def _right_of(self, a: Body, b: Body) -> bool:
        return self._offset(a, b, self.rel.right) > self.rel.margin

    def _in_front_of(self, a: Body, b: Body) -> bool:
        return self._offset(a, b, self.rel.forward) > self.rel.margin

    def _behind(self, a: Body, b: Body) -> bool:
        return self._offset(a, b, self.rel.forward) < -self.rel.margin

    def _gap(self, a: Body, b: Body) -> float:
        """Horizontal gap between the footprints (negative: they overlap)."""
        if a.half is None and b.half is None:
            return float(np.linalg.norm(a.centre - b.centre)) - a.radius - b.radius
        if b.half is None:
            a, b = b, a
        return b.edge_distance(a.centre) - (a.radius if a.half is None else 0.0)  # a rectangle to a circle's centre

    def _on_top_of(self, a: Body, b: Body) -> bool:
        """``a`` rests on ``b``: on its top surface, or on the floor of (or something in) a container."""
        over = b.covers(a.centre)
        if b.container:
            return over and b.bottom - self.rel.contact <= a.bottom <= b.top
        return over and abs(a.bottom - b.top) <= self.rel.contact

    def _inside(self, a: Body, b: Body) -> bool:
        """``a`` is within container ``b``: over its floor and below its rim."""
        return b.container and b.covers(a.centre) and b.bottom - self.rel.contact <= a.bottom < b.top - self.rel.contact

    def _above(self, a: Body, b: Body) -> bool:
        """``a`` is over ``b``'s footprint and higher than its top (resting on it or not)."""
        return b.covers(a.centre) and a.bottom >= b.top - self.rel.contact and not self._inside(a, b)

    def _below(self, a: Body, b: Body) -> bool:
        return self._above(b, a)

    def _near(self, a: Body, b: Body) -> bool:
        return self._gap(a, b) < self.rel.near and abs(a.bottom - b.bottom) < self.rel.near + max(a.top - a.bottom, b.top - b.bottom)

    def _blocking(self, a: Body, b: Body) -> bool:
        """``a`` keeps the gripper from taking ``b`` from above: it rests on ``b``, or stands closer to
        ``b`` than the fingers need, at ``b``'s height (a container holding ``b`` does not count)."""
        if not b.container and self._on_top_of(a, b):
            return True
        if self._inside(b, a) or self._inside(a, b) or self._on_top_of(b, a) or a.top <= b.bottom + self.rel.contact:
            return False  # its container, what it holds, what it rests on, or below it
        return self._gap(a, b) < self.rel.blocking_clearance

    # ------------------------------------------------------------------ queries
    def distance_to_robot(self, name: str) -> float:
        """Metres from the robot's base (config relations.robot_base, moved with a mobile base) to the
        object's reference point; to a fixture's nearest edge."""
        base, _ = self.robot_frame()
        fixture = self.fixtures().get(name)
        if fixture is not None:
            return max(fixture.edge_distance(base), 0.0)
        return float(np.linalg.norm(self.object(name).position - base))

    def supported_by(self, name: str) -> str:
        """The object or fixture ``name`` rests on or in ('' for the table), the highest such support."""
        a = self.body(name)
        supports = [(b.top, b.name) for b in self._bodies() if b.name != name and self._on_top_of(a, b)]
        return max(supports)[1] if supports else ""

    def state(self, name: str) -> dict[str, str]:
        """Where the object is and what holds it: from perception, overridden by what the simulator knows."""
        obj = self.object(name)
        support = self.supported_by(name)
        inside = support if support and self._inside(self.body(name), self.body(support)) else ""
        a = self.body(name)
        lifted = not support and a.bottom > self.config.localization.table_height + self.rel.contact
        state = {
            "position": ", ".join(f"{v:.3f}" for v in obj.position),
            "yaw": f"{obj.yaw:.3f}",
            "supported_by": support,
            "inside": inside,
            "on_table": str(not support and not lifted),
            "lifted": str(lifted),
            "visible": str(obj.seen),
            "hidden": obj.hidden,
            "seconds_since_seen": f"{max(0.0, self.scene.stamp - obj.last_seen):.2f}",
        }
        state.update(obj.state)
        return state

    def properties(self, name: str) -> dict[str, str]:
        """What kind of thing it is: config properties of its category plus what was measured."""
        obj = self.object(name)
        spec = category_of(obj.label, self.config)
        props = {"name": obj.name, "category": spec.name, "color": obj.color,
                 "size": ", ".join(f"{v:.3f}" for v in obj.size), "score": f"{obj.score:.2f}"}
        props.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in spec.properties.items()})
        return props
