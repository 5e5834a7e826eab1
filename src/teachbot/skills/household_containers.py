"""Putting things into a container that stands on a surface (a bin, a fruit bowl): a free spot inside
its footprint, clear of what already rests in it, so that several things fit side by side instead of
piling up on its centre.

The skills see sizes, not shapes: a footprint with equal sides counts as round (a bowl, a ball, a cup; a
square box counted as round only makes its spots more cautious), any other as a rectangle turned by the
thing's yaw. The hand is wider than what it holds: a spot beside something that reaches up to the hand's
body (above the fingers, where the pick grips the held thing) also keeps the hand (HAND_HALF) clear of it. Pure geometry over
:class:`~teachbot.skills.household.Thing` values; no physics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from teachbot.errors import PlaceFailedError
from teachbot.skills.library import ELONGATED, FINGERTIP_DEPTH, GRASP_MARGIN, PALM_HEIGHT

if TYPE_CHECKING:
    from teachbot.skills.household import Thing

CONTAINER_EDGE = 0.01  # metres between a thing put into a container and the container's rim
CONTAINER_GAP = 0.02  # metres between two things side by side in a container (as on a surface)
CONTAINER_STEP = 0.01  # metres between candidate spots in a container
CONTAINER_ROW = 0.01  # metres of distance from the robot that count as one row of spots (nearest row first)
ROUND = 1e-6  # metres between a footprint's sides below which it counts as round
# the Panda hand's body above the fingers (measured: panda_hand's bounding box with the hand pointing down):
HAND_HALF = (0.106, 0.036)  # metres, half its footprint along the fingers' closing line and across it
HAND_BOTTOM = 0.035  # metres from the grasp point (panda_grasptarget) up to its underside


@dataclass(frozen=True)
class Outline:
    """A thing's footprint on the floor plan: centre (map xy), half extents along its own axes, yaw."""

    centre: np.ndarray
    half: tuple[float, float]
    yaw: float

    @classmethod
    def of(cls, thing: Thing, centre: np.ndarray | None = None) -> Outline:
        """``thing``'s footprint, moved to ``centre`` if given."""
        xy = np.asarray(thing.position[:2] if centre is None else centre, float)
        return cls(xy, (float(thing.size[0]) / 2, float(thing.size[1]) / 2), float(thing.yaw))

    @property
    def round(self) -> bool:
        return abs(self.half[0] - self.half[1]) < ROUND

    def axes(self) -> tuple[np.ndarray, np.ndarray]:
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return np.array([c, s]), np.array([-s, c])

    def extent(self, axis: np.ndarray) -> float:
        """Half the footprint's length along the unit vector ``axis``."""
        if self.round:
            return self.half[0]
        u, v = self.axes()
        return abs(float(axis @ u)) * self.half[0] + abs(float(axis @ v)) * self.half[1]

    def radius(self) -> float:
        """Distance from the centre to the footprint's farthest point."""
        return self.half[0] if self.round else math.hypot(*self.half)


def apart(a: Outline, b: Outline, gap: float) -> bool:
    """Whether ``a`` and ``b`` are at least ``gap`` apart (two round ones exactly; otherwise by separating
    axes of both, which never calls overlapping footprints apart)."""
    d = b.centre - a.centre
    if a.round and b.round:
        return float(np.linalg.norm(d)) >= a.half[0] + b.half[0] + gap
    return any(abs(float(d @ axis)) >= a.extent(axis) + b.extent(axis) + gap for axis in (*a.axes(), *b.axes()))


def inside(thing: Outline, container: Outline, edge: float) -> bool:
    """Whether ``thing`` lies within ``container``'s footprint, at least ``edge`` from its rim."""
    rel = thing.centre - container.centre
    if container.round:
        return float(np.linalg.norm(rel)) + thing.radius() <= container.half[0] - edge
    return all(abs(float(rel @ axis)) + thing.extent(axis) <= half - edge for axis, half in zip(container.axes(), container.half))


def takes(container: Thing, held: Thing) -> bool:
    """Whether ``held`` goes *into* ``container`` (a spot of its own) rather than on top of its centre: a
    container that stays where it stands (not pickable) and is wider than the held thing."""
    return "container" in container.properties and "pickable" not in container.properties \
        and float(max(container.size[:2])) > float(max(held.size[:2]))


def container_spot(container: Thing, held: Thing, others: Iterable[Thing],
                   to_arm: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
    """Map xy where ``held`` (its footprint turned as it is held now) goes into ``container``: inside its
    footprint, clear of ``others`` (the things near it), in the row nearest to the robot (``to_arm``: map
    point to the arm's frame, x ahead), from the row's middle out. PlaceFailedError when none is free."""
    others = list(others)
    box = Outline.of(container)
    blockers = [Outline.of(t) for t in others if t.name not in (container.name, held.name)]
    taller = hand_blockers(held, [t for t in others if t.name != container.name], float(container.position[2] + container.size[2] / 2))
    reach = box.half[0] if box.round else max(box.half)
    ks = np.arange(-math.floor(reach / CONTAINER_STEP), math.floor(reach / CONTAINER_STEP) + 1) * CONTAINER_STEP
    u, v = box.axes()
    free = []
    for a in ks:
        for b in ks:
            spot = Outline.of(held, box.centre + a * u + b * v)
            if inside(spot, box, CONTAINER_EDGE) and all(apart(spot, o, CONTAINER_GAP) for o in blockers) \
                    and all(apart(hand_outline(held, spot.centre), o, 0.0) for o in taller):
                free.append(spot.centre)
    if not free:
        raise PlaceFailedError(f"the {container.name} has no free spot for {held.name!r} (it holds "
                               f"{_listing(container, others, held)}); take something out or choose another place")
    middle = float(to_arm(np.array([*box.centre, 0.0]))[1])
    arm = [to_arm(np.array([*xy, 0.0])) for xy in free]
    near = min(float(p[0]) for p in arm)
    best = min(range(len(free)), key=lambda i: (round((float(arm[i][0]) - near) / CONTAINER_ROW), abs(float(arm[i][1]) - middle)))
    return float(free[best][0]), float(free[best][1])


def hand_blockers(held: Thing, others: Iterable[Thing], floor: float) -> list[Outline]:
    """Footprints of ``others`` that reach up to the hand's body while it puts ``held`` down on a top at
    height ``floor`` (the hand's underside as the pick grips it: SkillLibrary.skill_pick's grasp point)."""
    h = float(held.size[2])
    underside = floor + max(h / 2, h - PALM_HEIGHT + GRASP_MARGIN, FINGERTIP_DEPTH + GRASP_MARGIN) + HAND_BOTTOM
    return [Outline.of(t) for t in others if t.name != held.name and float(t.position[2] + t.size[2] / 2) > underside]


def hand_outline(held: Thing, centre: np.ndarray, turned: bool = True) -> Outline:
    """The hand's footprint over ``held`` put down at ``centre``: its fingers close across an elongated
    thing's short side (``turned``: ``held``'s yaw is the one it will have there); a round or square thing
    may be gripped from any side, and an unknown turn may be any, so then round."""
    sx, sy = float(held.size[0]), float(held.size[1])
    if abs(sx - sy) <= ELONGATED or not turned:
        return Outline(np.asarray(centre, float), (HAND_HALF[0], HAND_HALF[0]), 0.0)
    along = float(held.yaw) if sx >= sy else float(held.yaw) + math.pi / 2
    return Outline(np.asarray(centre, float), HAND_HALF, along + math.pi / 2)


def _listing(container: Thing, others: Iterable[Thing], held: Thing) -> str:
    """The things whose centres lie over ``container``'s footprint, for an error message."""
    box = Outline.of(container)
    names = [t.name for t in others if t.name not in (container.name, held.name)
             and inside(Outline(np.asarray(t.position[:2], float), (0.0, 0.0), 0.0), box, 0.0)]
    return ", ".join(repr(n) for n in sorted(names)) or "nothing, but it is too small"
