"""The household world's kitchen as data: places, where the robot stands at each, the mobile base.

Read from ``config/household/layout.yaml``; pure Python, no physics. The world builds bodies from it,
the skills navigate and reach with it, the robot API answers ``list_locations`` and
``get_location_coordinates`` from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.config import load_yaml
from teachbot.errors import ConfigError, UnknownObjectError
from teachbot.paths import config_path

CABINET_WALL = 0.03  # metres: walls of the fridge and the cupboard
BASE_JOINTS = ("base_x", "base_y", "base_yaw")  # the holonomic base as virtual joints (metres, metres, radians)


@dataclass(frozen=True)
class Surface:
    """Where things rest at a place: a rectangle at height ``z`` (map frame), axis-aligned in the
    place's own frame (``yaw`` turns it)."""

    centre: tuple[float, float]
    half_extents: tuple[float, float]
    z: float
    yaw: float


@dataclass(frozen=True)
class Place:
    """One piece of furniture (or the person) the robot can go to."""

    name: str
    centre: tuple[float, float]
    size: tuple[float, float]  # along the map's x and y
    height: float
    front: tuple[float, float]  # unit vector from the centre towards where the robot stands
    rgb: tuple[float, float, float]
    cleanable: bool = False
    door: dict[str, Any] | None = None
    drawer: dict[str, Any] | None = None
    shelf_height: float | None = None
    hand: dict[str, float] | None = None
    standoff: float | None = None  # this place's own gap between it and the base, if not the base's

    @property
    def depth(self) -> float:
        """Extent along ``front`` (from the robot's side to the back)."""
        return abs(self.front[0]) * self.size[0] + abs(self.front[1]) * self.size[1]

    @property
    def width(self) -> float:
        """Extent across ``front``."""
        return abs(self.front[1]) * self.size[0] + abs(self.front[0]) * self.size[1]

    @property
    def facing_yaw(self) -> float:
        """Yaw of a robot standing at this place and looking at it."""
        return math.atan2(-self.front[1], -self.front[0])

    @property
    def openable(self) -> bool:
        return self.door is not None or self.drawer is not None

    @property
    def joint(self) -> str:
        """Name of the joint of its door ('<place>_door', radians) or drawer ('<place>_drawer', metres)."""
        return f"{self.name}_door" if self.door is not None else f"{self.name}_drawer" if self.drawer is not None else ""

    @property
    def joint_limit(self) -> float:
        """The joint's fully open position."""
        return float(self.door["open_angle"]) if self.door is not None else float(self.drawer["travel"]) if self.drawer else 0.0


@dataclass(frozen=True)
class BaseSpec:
    size: tuple[float, float, float]
    arm_mount: tuple[float, float, float]
    radius: float
    max_speed: float
    max_yaw_rate: float
    standoff: float
    start: tuple[float, float, float]
    camera_eye: tuple[float, float, float] = (0.05, 0.0, 1.45)  # base frame
    camera_target: tuple[float, float, float] = (0.9, 0.0, 0.75)
    camera_size: tuple[int, int] = (424, 240)

    def arm_origin(self, x: float, y: float, yaw: float) -> np.ndarray:
        """Map position of the arm's base (``arm_mount`` in the base frame) for the base at (x, y, yaw)."""
        m, c, s = self.arm_mount, math.cos(yaw), math.sin(yaw)
        return np.array([x + c * m[0] - s * m[1], y + s * m[0] + c * m[1], m[2]])


@dataclass(frozen=True)
class HouseholdLayout:
    room: dict[str, tuple[float, float]]
    base: BaseSpec
    places: dict[str, Place]
    source: str = ""

    @classmethod
    def load(cls, path: str | Path | None = None) -> HouseholdLayout:
        path = Path(path) if path else config_path("household", "layout.yaml")
        raw = load_yaml(path)
        try:
            b = raw["base"]
            base = BaseSpec(
                size=_vec(b["size"], 3), arm_mount=_vec(b["arm_mount"], 3), radius=float(b["radius"]),
                max_speed=float(b["max_speed"]), max_yaw_rate=float(b["max_yaw_rate"]),
                standoff=float(b["standoff"]), start=_vec(b["start"], 3),
                camera_eye=_vec(b.get("camera", {}).get("eye", [0.05, 0.0, 1.45]), 3),
                camera_target=_vec(b.get("camera", {}).get("target", [0.9, 0.0, 0.75]), 3),
                camera_size=(int(b.get("camera", {}).get("width", 424)), int(b.get("camera", {}).get("height", 240))),
            )
            places = {}
            for name, p in raw["places"].items():
                front = _vec(p["front"], 2)
                norm = math.hypot(*front)
                if norm == 0:
                    raise ValueError(f"place {name}: front must not be [0, 0]")
                places[name] = Place(
                    name=name, centre=_vec(p["centre"], 2), size=_vec(p["size"], 2), height=float(p["height"]),
                    front=(front[0] / norm, front[1] / norm), rgb=_vec(p.get("rgb", [0.6, 0.6, 0.6]), 3),
                    cleanable=bool(p.get("cleanable", False)), door=p.get("door"), drawer=p.get("drawer"),
                    shelf_height=float(p["shelf_height"]) if "shelf_height" in p else None,
                    hand={k: float(v) for k, v in p["hand"].items()} if "hand" in p else None,
                    standoff=float(p["standoff"]) if "standoff" in p else None,
                )
            room = {k: _vec(raw["room"][k], 2) for k in ("x", "y")}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{path}: malformed household layout ({exc}); compare with config/household/layout.yaml") from None
        return cls(room, base, places, str(path))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ queries
    def names(self) -> list[str]:
        return list(self.places)

    def place(self, name: str) -> Place:
        """The place called ``name``; UnknownObjectError listing the known ones otherwise."""
        if name not in self.places:
            raise UnknownObjectError(f"unknown location {name!r}. Use one of list_locations() {self.names()}")
        return self.places[name]

    def location_pose(self, name: str) -> tuple[float, float, float]:
        """(x, y, yaw) where the base stands to work at ``name``: its front ``standoff`` from the place
        (from the front of the drawer pulled out, where there is one)."""
        p = self.place(name)
        standoff = self.base.standoff if p.standoff is None else p.standoff
        distance = p.depth / 2 + standoff + self.base.size[0] / 2 + (float(p.drawer["travel"]) if p.drawer else 0.0)
        return (p.centre[0] + p.front[0] * distance, p.centre[1] + p.front[1] * distance, p.facing_yaw)

    def coordinates(self, name: str) -> list[float]:
        """[x, y, z] of a location: the centre of the place's top, or the person's hand."""
        p = self.place(name)
        if p.hand is not None:
            x, y = p.centre[0] + p.front[0] * p.hand["reach"], p.centre[1] + p.front[1] * p.hand["reach"]
            return [round(x, 3), round(y, 3), round(p.hand["height"], 3)]
        return [round(p.centre[0], 3), round(p.centre[1], 3), round(p.height, 3)]

    def handle(self, name: str, opening: float, inner: bool = False) -> tuple[float, float, float]:
        """Map position of the handle of the door or drawer of ``name`` when it is ``opening`` (0 closed,
        1 fully open): near the door's free edge at hand height, or the middle of the drawer's front.
        ``inner``: a hand's width off the door's inner face, where a hand pushes it shut."""
        p = self.place(name)
        d, w = p.depth, p.width
        if p.door is not None:
            right = p.door.get("hinge", "right") == "right"
            hinge_y = w / 2 if right else -w / 2
            angle = opening * float(p.door["open_angle"]) * (1.0 if right else -1.0)
            x, y = -CABINET_WALL - 0.12 if inner else CABINET_WALL, (-w + 0.08) if right else (w - 0.08)
            c, s = math.cos(angle), math.sin(angle)
            local = (d / 2 + CABINET_WALL / 2 + c * x - s * y, hinge_y + s * x + c * y, float(p.shelf_height or p.height / 2) + 0.2)
        elif p.drawer is not None:
            depth, travel = float(p.drawer["depth"]), float(p.drawer["travel"])
            local = (d / 2 - depth / 2 - 0.005 + opening * travel + depth / 2 + 0.03, 0.0, float(p.drawer["floor_height"]) + 0.06)
        else:
            raise UnknownObjectError(f"{name!r} has no door or drawer; openable: {[n for n, q in self.places.items() if q.openable]}")
        yaw = math.atan2(p.front[1], p.front[0])  # the place's own x axis points at the robot
        c, s = math.cos(yaw), math.sin(yaw)
        return p.centre[0] + c * local[0] - s * local[1], p.centre[1] + s * local[0] + c * local[1], local[2]

    def fixed_boxes(self, name: str) -> list[tuple[list[float], list[float]]]:
        """The fixed part of a place as boxes (half extents, centre) in its own frame (origin at its
        centre on the floor, x towards the robot): a solid block, or a fridge's walls and the block
        under its shelf, or a cupboard's body around its drawer. Doors and drawers are not included."""
        p = self.place(name)
        d, w, h = p.depth, p.width, p.height
        wall = CABINET_WALL
        if p.door is not None:
            shelf = float(p.shelf_height or h / 2)
            return [
                ([wall / 2, w / 2, h / 2], [-d / 2 + wall / 2, 0, h / 2]),  # back
                ([d / 2, wall / 2, h / 2], [0, w / 2 - wall / 2, h / 2]),  # sides
                ([d / 2, wall / 2, h / 2], [0, -w / 2 + wall / 2, h / 2]),
                ([d / 2, w / 2, wall / 2], [0, 0, h - wall / 2]),  # top
                ([d / 2, w / 2, shelf / 2], [0, 0, shelf / 2]),  # below the shelf
            ]
        if p.drawer is not None:
            below, width = float(p.drawer["floor_height"]) - 0.012, float(p.drawer["width"])
            return [
                ([d / 2, w / 2, below / 2], [0, 0, below / 2]),  # the body under the drawer
                ([d / 2, w / 2, wall / 2], [0, 0, h - wall / 2]),  # top
                ([wall / 2, w / 2, (h - below) / 2], [-d / 2 + wall / 2, 0, (h + below) / 2]),  # back
                ([d / 2, (w - width) / 4, (h - below) / 2], [0, (w + width) / 4, (h + below) / 2]),  # beside the drawer
                ([d / 2, (w - width) / 4, (h - below) / 2], [0, -(w + width) / 4, (h + below) / 2]),
            ]
        return [([d / 2, w / 2, h / 2], [0, 0, h / 2])]

    def obstacles(self) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """Every place's fixed boxes in the map: (centre, half extents, yaw about z)."""
        out = []
        for p in self.places.values():
            yaw = math.atan2(p.front[1], p.front[0])
            c, s = math.cos(yaw), math.sin(yaw)
            for half, centre in self.fixed_boxes(p.name):
                x, y = p.centre[0] + c * centre[0] - s * centre[1], p.centre[1] + s * centre[0] + c * centre[1]
                out.append((np.array([x, y, centre[2]]), np.array(half), yaw))
        return out

    def surface(self, name: str, drawer_open: float = 0.0) -> Surface:
        """Where things put at ``name`` rest: the top; in the fridge its shelf; in the cupboard its
        drawer (pulled out by ``drawer_open`` metres). Kept 4 cm inside the edges."""
        p = self.place(name)
        margin = 0.04
        yaw = p.facing_yaw
        if p.drawer is not None:
            d = p.drawer
            depth, width = float(d["depth"]), float(d["width"])
            offset = p.depth / 2 - depth / 2 + drawer_open
            centre = (p.centre[0] + p.front[0] * offset, p.centre[1] + p.front[1] * offset)
            return Surface(centre, (depth / 2 - margin, width / 2 - margin), float(d["floor_height"]), yaw)
        z = p.shelf_height if p.shelf_height is not None else p.height
        return Surface(p.centre, (p.depth / 2 - margin, p.width / 2 - margin), z, yaw)


def surface_point(surface: Surface, along: float, across: float) -> tuple[float, float]:
    """Map xy of the point ``along`` (away from the robot standing there) and ``across`` (to its left)
    of a surface's centre."""
    c, s = math.cos(surface.yaw), math.sin(surface.yaw)
    return surface.centre[0] + along * c - across * s, surface.centre[1] + along * s + across * c


def surface_offset(surface: Surface, x: float, y: float) -> tuple[float, float]:
    """Inverse of :func:`surface_point`: (along, across) of map point (x, y)."""
    c, s = math.cos(surface.yaw), math.sin(surface.yaw)
    dx, dy = x - surface.centre[0], y - surface.centre[1]
    return dx * c + dy * s, -dx * s + dy * c


def _vec(value: Any, n: int) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise ValueError(f"expected {n} numbers, got {value!r}")
    return tuple(float(v) for v in value)
