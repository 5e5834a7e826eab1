"""The household skills: a mobile manipulator that drives to places, grasps, places (into containers:
:mod:`teachbot.skills.household_containers`), hands over, points (:mod:`teachbot.skills.household_gestures`),
opens and closes, switches, slices and wipes.

Arm motions are the tabletop skills' (:class:`SkillLibrary`) in the arm's own base frame, which rides
on the base: object positions from the map are turned into that frame with the base's pose, and the
working surface's height becomes the library's ``floor_z``. The base drives along collision-free paths
(:mod:`teachbot.skills.navigation`) with the arm stowed. States are never set by a skill: the skill
moves, the world (or the real kitchen) changes, and the skill checks the change it wanted happened.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from teachbot.errors import (
    AlreadyHoldingError,
    InvalidArgumentError,
    LimitExceededError,
    MotionTimeoutError,
    NotHoldingError,
    PlaceFailedError,
    UnknownObjectError,
    UnreachableError,
)
from teachbot.robot_profile import RobotProfile
from teachbot.skills.household_containers import apart, container_spot, hand_blockers, hand_outline, takes
from teachbot.skills.household_gestures import Gestures
from teachbot.skills.interfaces import ArmInterface, ObjectInfo
from teachbot.skills.library import SkillLibrary
from teachbot.skills.navigation import NavigationMap, time_path
from teachbot.skills.parameters import Tuning, pull_fraction
from teachbot.world.floor import BasePose, Footprint
from teachbot.world.household_layout import HouseholdLayout, Surface, surface_offset, surface_point
from teachbot.world.household_objects import StateError

DOCK_CLEARANCE = 0.05  # metres beyond the navigation radius where a path ends before docking straight in
AT_LOCATION = 0.05  # metres (and 0.1 rad) from a location's pose that count as being there
NEAR_ARM = 1.3  # metres from the arm within which objects matter to its motions
SPOT_STEP = 0.04  # metres between candidate spots when looking for room on a surface
WIPE_STROKE = 0.3  # metres of one wiping stroke across the surface
CARRY_POINT = (0.18, 0.0, 0.5)  # arm frame: where the hand holds things while the base drives (over the base, above the counters)
DRAWER_BACK = 0.15  # metres the base stands further back to push an open drawer shut
DOOR_CLEARANCE = 0.08  # metres between the base and a door's free edge while it swings
LATERAL_TOLERANCE = 0.15  # metres sideways from the arm within which a thing on a place is worked on without moving
RELEASE_LIFT = 0.06  # metres the open hand rises after letting go of a handed-over object
HANDOVER_GAP = 0.02  # metres between what the hand holds out and the person's body
WIPE_REACHES = (0.5, 0.6, 0.4, 0.68)  # metres from the arm's base to the wiping strokes tried, in order
WIPE_CLEARANCE = 0.02  # metres between the sponge and things standing on the surface
WIPE_PRESS = 0.003  # metres a sponge is pressed onto the surface it wipes
PRESS_DEPTH = 0.01  # metres a pressing finger goes below the top it presses on (a switch)
PRESS_APPROACH = 0.06  # metres above a top where a pressing motion starts


def stance_pose(layout: HouseholdLayout, location: str, across: float = 0.0, back: float = 0.0) -> BasePose:
    """Where the base stands at ``location``, shifted ``across`` metres to the robot's left along the place's
    front (to stand in front of one thing on a wide counter: :func:`side_step`) and ``back`` metres away from
    it (out of a door's way)."""
    x, y, yaw = layout.location_pose(location)
    c, s = math.cos(yaw), math.sin(yaw)
    return BasePose(x - s * across - c * back, y + c * across - s * back, yaw)


def side_step(layout: HouseholdLayout, place: str, near: Any) -> tuple[float, float] | None:
    """How the skills stand to work on the map point ``near`` on ``place``: (``across`` for :func:`stance_pose`,
    the base's step to its left along the place's front to face the point, none within LATERAL_TOLERANCE and at
    most to the place's end; the point's own offset to the left of the place's middle). None at the person
    (their hand is worked at from the front)."""
    p = layout.place(place)
    if p.hand is not None:
        return None
    _, offset = surface_offset(layout.surface(place), float(near[0]), float(near[1]))
    limit = max(0.0, p.width / 2 - layout.base.size[1] / 2)
    return (0.0 if abs(offset) < LATERAL_TOLERANCE else float(np.clip(offset, -limit, limit))), offset


@dataclass(frozen=True)
class Thing:
    """An object as the household skills see it (map frame)."""

    name: str
    type: str
    position: np.ndarray
    size: np.ndarray
    yaw: float
    place: str
    inside: bool
    properties: frozenset[str]
    states: dict[str, Any]


class BaseInterface(Protocol):
    """The controller interface of a holonomic base."""

    def pose(self) -> BasePose: ...
    def send_path(self, path: Any) -> None: ...
    def moving(self) -> bool: ...
    def stop(self) -> None: ...


class HouseholdView(Protocol):
    """What the skills know of the kitchen: things with their states, doors and drawers."""

    def things(self) -> dict[str, Thing]: ...
    def place_states(self) -> dict[str, dict[str, Any]]: ...
    def opening(self, place: str) -> float: ...
    def handle(self, place: str, inner: bool = False) -> np.ndarray: ...
    def drive_articulation(self, place: str, open_: bool, fraction: float = 1.0) -> None: ...


class ArmFrameObjects:
    """ObjectSource for the arm: things near it, in its base frame."""

    def __init__(self, skills: HouseholdSkills) -> None:
        self.skills = skills

    def objects(self) -> dict[str, ObjectInfo]:
        out = {}
        origin, _ = self.skills.arm_frame()
        for t in self.skills.view.things().values():
            if float(np.linalg.norm(t.position[:2] - origin[:2])) > NEAR_ARM:
                continue
            # a household bowl is a solid that things rest on top of, not the tabletop's hollow "bowl" (its floor near its base)
            kind = "solid_bowl" if t.type == "bowl" else t.type
            out[t.name] = ObjectInfo(t.name, kind, self.skills.to_arm(t.position), t.size, t.yaw - self.skills.base.pose().yaw)
        return out


class HouseholdSkills(Gestures, SkillLibrary):
    """All household skills of one mobile manipulator. Not re-entrant, like :class:`SkillLibrary`."""

    def __init__(self, profile: RobotProfile, arm: ArmInterface, base: BaseInterface, view: HouseholdView,
                 layout: HouseholdLayout | None = None) -> None:
        self.base, self.view = base, view
        self.layout = layout or HouseholdLayout.load()
        super().__init__(profile, arm, ArmFrameObjects(self))
        footprints = [Footprint(p.name, p.centre, (p.size[0] / 2, p.size[1] / 2)) for p in self.layout.places.values()]
        (x0, x1), (y0, y1) = self.layout.room["x"], self.layout.room["y"]
        self.map = NavigationMap(((x0, x1), (y0, y1)), footprints, self.layout.base.radius)
        self._furniture = self.layout.obstacles()  # map frame; the planner gets them in the arm's frame
        self._handover_release: threading.Event | None = None

    # ------------------------------------------------------------------ frames
    def arm_frame(self) -> tuple[np.ndarray, float]:
        """Map position of the arm's base and the base's yaw."""
        pose = self.base.pose()
        return self.layout.base.arm_origin(pose.x, pose.y, pose.yaw), pose.yaw

    def to_arm(self, point: np.ndarray) -> np.ndarray:
        origin, yaw = self.arm_frame()
        d = np.asarray(point, float) - origin
        c, s = math.cos(yaw), math.sin(yaw)
        return np.array([c * d[0] + s * d[1], -s * d[0] + c * d[1], d[2]])

    def to_map(self, point: np.ndarray) -> np.ndarray:
        origin, yaw = self.arm_frame()
        c, s = math.cos(yaw), math.sin(yaw)
        return origin + np.array([c * point[0] - s * point[1], s * point[0] + c * point[1], point[2]])

    def _plan_around_furniture(self) -> None:
        """Hand the planner the furniture near the base as it stands now, in the arm's frame."""
        origin, yaw = self.arm_frame()
        c, s = math.cos(yaw), math.sin(yaw)
        boxes = []
        for centre, half, box_yaw in self._furniture:
            d = centre - origin
            if math.hypot(d[0], d[1]) > NEAR_ARM + float(np.linalg.norm(half[:2])):
                continue
            boxes.append((np.array([c * d[0] + s * d[1], -s * d[0] + c * d[1], d[2]]), half, box_yaw - yaw))
        self.planner.obstacles = boxes

    # ------------------------------------------------------------------ checks
    def _thing(self, name: str) -> Thing:
        things = self.view.things()
        if name not in things:
            raise UnknownObjectError(f"unknown object {name!r}. Use one of list_objects() {sorted(things)}")
        return things[name]

    def _hand(self, hand: str) -> None:
        if hand not in self.profile.hands:
            arms = ", ".join(repr(h) for h in self.profile.hands)
            raise InvalidArgumentError(
                f"this robot has no {hand!r} hand (its hands: {arms}); hand={hand!r} needs a two-arm robot profile"
            )

    def _holding(self) -> str:
        self._refresh_held()
        return self.held

    def _reachable_inside(self, place: str, what: str) -> None:
        p = self.layout.place(place)
        if p.openable and not self.view.place_states().get(place, {}).get("open", False):
            raise StateError(f"{what} is in the {place}, which is closed; open('{place}') first", "closed", place)

    # ------------------------------------------------------------------ driving
    def at(self, location: str, across: float = 0.0, back: float = 0.0) -> bool:
        goal = stance_pose(self.layout, location, across, back)
        x, y, yaw = goal.x, goal.y, goal.yaw
        pose = self.base.pose()
        turn = abs((pose.yaw - yaw + math.pi) % (2 * math.pi) - math.pi)
        return math.hypot(pose.x - x, pose.y - y) < AT_LOCATION and turn < 0.1

    def skill_move_to(  # type: ignore[override]
        self, location: str = "", speed_factor: float = 0.5, across: float = 0.0, back: float = 0.0, params: Tuning | None = None, **_: Any
    ) -> dict:
        """Drive to a named location with the arm stowed, at ``speed_factor`` of the base's top speed
        (the one in ``params`` when given; ``across``, ``back``: see :func:`stance_pose`)."""
        speed_factor = params["speed_factor"] if params is not None else speed_factor
        self.layout.place(location)  # unknown: lists the known ones
        if not 0 < speed_factor <= self.profile.safety.max_speed_factor:
            raise LimitExceededError(
                f"speed_factor {speed_factor} is outside (0, {self.profile.safety.max_speed_factor}]; use e.g. 0.2 for slow, 1.0 for fast"
            )
        if self.at(location, across, back):
            return {}
        goal = stance_pose(self.layout, location, across, back)
        p = self.layout.place(location)
        standoff = self.layout.base.standoff if p.standoff is None else p.standoff
        out = max(0.0, self.layout.base.radius + DOCK_CLEARANCE - standoff - self.layout.base.size[0] / 2 - back)
        approach = BasePose(goal.x + p.front[0] * out, goal.y + p.front[1] * out, goal.yaw)
        poses = self.map.plan(self.base.pose(), approach) + [goal]
        path = time_path(poses, self.layout.base.max_speed, self.layout.base.max_yaw_rate, speed_factor)
        self._stage("stow", 0.05)
        self._stow()
        self._stage("drive", 0.2)
        self.base.send_path(path)
        # on the arm's clock (the base runs on the same simulated or robot time), with ArmDeadline's wall backstop
        deadline = self._deadline(4 * path.duration + 10.0)
        start = self.arm.now()
        while self.arm.now() - start < path.duration or self.base.moving():
            self._cancel.check()
            self.arm.sleep(0.02)
            if deadline.expired():
                self.base.stop()
                raise MotionTimeoutError(f"the base did not reach {location!r} in time; check the base driver, then retry")
        self._plan_around_furniture()
        return {}

    def _stow(self) -> None:
        """Arm in for driving: folded over the base, or holding something a little out in front (a
        long thing held over the base would hit the arm's own links)."""
        self._plan_around_furniture()  # the base may have been moved (a reset, a person pushing it)
        if self._holding():
            # pull straight back at this height first (out of a fridge, off a shelf), then to the carry point
            here, yaw = self.kin.fk(self.arm.joint_positions())[0], self._current_yaw()
            target = np.array([CARRY_POINT[0], CARRY_POINT[1], max(CARRY_POINT[2], here[2])])
            if here[0] > target[0] + 0.05:
                self._move_line(np.array([target[0], here[1], here[2]]), yaw)
            q = self.kin.ik(target, self.kin.grasp_orientation(yaw), self.arm.joint_positions())
        else:
            q = np.array(self.profile.stowed or self.profile.home)
        if float(np.max(np.abs(self.arm.joint_positions() - q))) > 0.05:
            self._execute(q, self.profile.safety.default_speed_factor)

    def _work_at(self, place: str, near: np.ndarray | None = None, across: float = 0.0, back: float = 0.0) -> None:
        """Drive to ``place`` unless there (in front of the point ``near`` on it, if given, or ``across``
        metres to the side), and work on its surface."""
        step = None if near is None else side_step(self.layout, place, near)
        if step is not None:
            across, offset = step
            if self.at(place, 0.0) or self.at(place, across):  # already here: stay if the thing is in reach sideways
                here = self.base.pose()
                current = surface_offset(self.layout.surface(place), here.x, here.y)[1]
                if abs(current - offset) < LATERAL_TOLERANCE:
                    across = current
        if not self.at(place, across, back):
            self.skill_move_to(place, speed_factor=self.profile.safety.default_speed_factor, across=across, back=back)
        self._plan_around_furniture()
        self.floor_z = self._surface(place).z - self.layout.base.arm_mount[2]

    def _surface(self, place: str) -> Surface:
        """Where things rest at ``place`` now (in a drawer: as far out as it is pulled)."""
        drawer = self.layout.place(place).drawer
        return self.layout.surface(place, self.view.opening(place) * float(drawer["travel"]) if drawer else 0.0)

    # ------------------------------------------------------------------ manipulation
    def skill_grasp(self, object_name: str, hand: str = "right", params: Tuning | None = None) -> dict:
        """Drive to the object's place and pick it up (``params``: as the tabletop pick's)."""
        self._hand(hand)
        held = self._holding()
        if held:
            raise AlreadyHoldingError(f"the {hand} hand already holds {held!r}; place it or hand it over first")
        thing = self._thing(object_name)
        if "pickable" not in thing.properties:
            kind = thing.type.replace("_", " ")
            raise InvalidArgumentError(f"cannot grasp {object_name!r}: a {kind} is not something the hand can pick up")
        if not thing.place:
            where = np.round(thing.position, 2).tolist()
            raise UnreachableError(f"{object_name!r} is not on any place the robot can reach (it lies at {where})")
        if thing.inside:
            self._reachable_inside(thing.place, repr(object_name))
        self._work_at(thing.place, thing.position)
        result = self.skill_pick(object_name, self.parameters.tuning(params, "grasp"))
        self._stow()
        return result

    def skill_place_object(self, location: str, hand: str = "right", params: Tuning | None = None) -> dict:
        """Put what the hand holds on a free spot of ``location`` (a place), on an object, or into a container
        object (a bin, a bowl: a free spot inside it), shifted by ``params``' place offsets along and across
        the place's surface."""
        self._hand(hand)
        held = self._holding()
        if not held:
            raise NotHoldingError(f"the {hand} hand holds nothing; grasp(...) an object first")
        p = self.parameters.tuning(params, "place_object")
        shift = (p["place_offset_along"], p["place_offset_across"])
        things = self.view.things()
        if location in things and location != held:
            target = things[location]
            surface = self._surface(target.place)  # in a drawer: as far out as it is pulled
            if any(shift):  # the shifted point stays on the place the object stands on (the gate's place zones rely on it)
                self._on_surface(surface, target.place, target.position[:2], shift, things[held])
            self._work_at(target.place, target.position)
            dx, dy = self._arm_shift(surface, *shift)
            if takes(target, things[held]):  # into a bin or bowl: a free spot of its own, beside what is in it
                now = self.view.things()  # the held thing turned with the base
                spot = container_spot(target, now[held], [t for t in now.values() if t.place == target.place], self.to_arm)
                if any(shift):
                    self._on_surface(surface, target.place, spot, shift, things[held])
                dx, dy = np.add((dx, dy), (self.to_arm(np.array([*spot, 0.0])) - self.to_arm(target.position))[:2])
            return self.skill_place(target_name=location, params=Tuning({**p, "place_offset_x": dx, "place_offset_y": dy}, self.profile))
        place = self.layout.place(location)
        if place.hand is not None:
            raise InvalidArgumentError(f"cannot put things down on the {location}; hand them over with handover_object_to_human()")
        if place.openable:
            self._reachable_inside(location, f"the spot for {held!r}")
        spot = self._free_spot(location, things[held])
        if any(shift):  # the free spot moved as asked, but not off the surface
            surface = self._surface(location)
            spot = surface_point(surface, *self._on_surface(surface, location, spot, shift, things[held]))
        self._work_at(location, np.array([*spot, 0.0]))  # in front of the spot: on a crowded wide place it may lie far to the side
        return self.skill_place(target_point=tuple(self.to_arm(np.array([*spot, 0.0]))[:2]), params=p)

    @staticmethod
    def _on_surface(surface: Surface, place: str, point: Any, shift: tuple[float, float], held: Thing) -> tuple[float, float]:
        """(along, across) on ``surface`` of map ``point`` moved by the place offsets ``shift``; PlaceFailedError
        when ``held`` put there would hang over the edge of ``place``."""
        need = float(max(held.size[:2])) / 2
        along, across = np.add(surface_offset(surface, float(point[0]), float(point[1])), shift)
        if abs(along) > surface.half_extents[0] - need or abs(across) > surface.half_extents[1] - need:
            raise PlaceFailedError(f"place_offset_along={shift[0]:g}, place_offset_across={shift[1]:g} would put {held.name!r} "
                                   f"over the edge of the {place}; use smaller offsets")
        return float(along), float(across)

    def _arm_shift(self, surface: Surface, along: float, across: float) -> tuple[float, float]:
        """A shift ``along``/``across`` a surface (see :func:`surface_point`) in the arm's frame."""
        dx, dy = np.subtract(surface_point(surface, along, across), surface.centre)
        yaw = self.base.pose().yaw
        return math.cos(yaw) * dx + math.sin(yaw) * dy, -math.sin(yaw) * dx + math.cos(yaw) * dy

    def _free_spot(self, location: str, held: Thing) -> tuple[float, float]:
        """The free spot of the surface nearest to the robot, clear of the objects already there."""
        surface = self._surface(location)
        others = [t for t in self.view.things().values() if t.name != held.name and t.place == location]
        need = float(max(held.size[:2])) / 2
        taller = hand_blockers(held, others, surface.z)  # the hand is wider than what it holds
        for along in np.arange(-surface.half_extents[0] + need, surface.half_extents[0] - need + 1e-9, SPOT_STEP):
            for across in sorted(np.arange(-surface.half_extents[1] + need, surface.half_extents[1] - need + 1e-9, SPOT_STEP), key=abs):
                xy = surface_point(surface, float(along), float(across))
                clear = all(math.hypot(xy[0] - t.position[0], xy[1] - t.position[1]) > need + float(max(t.size[:2])) / 2 + 0.02
                            for t in others)
                if clear and all(apart(hand_outline(held, np.array(xy), turned=False), o, 0.0) for o in taller):
                    return xy
        raise PlaceFailedError(f"the {location} has no free spot for {held.name!r}; clear it or choose another place")

    def _free_band(self, surface: str, s: Any, sponge: Thing) -> float:
        """``along`` of a wiping stroke across the surface in front of the robot that no object stands in:
        the reachable bands from near to far, the first clear one."""
        half_band = float(max(sponge.size[:2])) / 2 + WIPE_CLEARANCE
        here, across_here = surface_offset(s, *self.to_map(np.array([0.0, 0.0, 0.0]))[:2])
        footprints = []  # each thing on the surface: its centre and half extents along the surface's axes
        for t in self.view.things().values():
            if t.place == surface and t.name != sponge.name:
                a, c = surface_offset(s, float(t.position[0]), float(t.position[1]))
                phi = t.yaw - s.yaw
                footprints.append((a, c, abs(math.cos(phi)) * t.size[0] / 2 + abs(math.sin(phi)) * t.size[1] / 2,
                                   abs(math.sin(phi)) * t.size[0] / 2 + abs(math.cos(phi)) * t.size[1] / 2))
        for reach in WIPE_REACHES:
            along = float(np.clip(here + reach, -s.half_extents[0] + half_band, s.half_extents[0] - half_band))
            if not any(abs(a - along) < half_band + half_a and abs(c - across_here) < WIPE_STROKE / 2 + half_band + half_c
                       for a, c, half_a, half_c in footprints):
                return along
        raise PlaceFailedError(f"no clear strip of the {surface} to wipe in front of the robot; move the things on it first")

    def skill_handover_object_to_human(self, hand: str = "right", timeout: float = 0.0, release: threading.Event | None = None) -> dict:
        """Drive to the person, hold the object out to their hand, let go when they take it (``release``)
        or after ``timeout`` seconds."""
        self._hand(hand)
        held = self._holding()
        if not held:
            raise NotHoldingError(f"the {hand} hand holds nothing to hand over; grasp(...) an object first")
        person = next(p.name for p in self.layout.places.values() if p.hand is not None)
        self._work_at(person)
        target = self.to_arm(np.array(self.layout.coordinates(person)))
        # a long thing held out (a banana, a knife) may point at the person: it stops short of their body
        thing, p = self.view.things().get(held), self.layout.place(person)
        ahead = float(max(thing.size[:2])) / 2 if thing is not None else 0.0
        target[0] -= max(0.0, ahead + HANDOVER_GAP - (float(p.hand["reach"]) - p.depth / 2))
        self._stage("offer", 0.4)
        self._move_joint_space(target, self._reachable_yaw(0.0, [target]))
        self._stage("waiting for human", 0.6)
        timeout = timeout if timeout > 0 else self.profile.skills.handover_timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (release is not None and release.is_set()):
            self._cancel.check()
            self.arm.sleep(0.02)
        self._stage("release", 0.9)
        self._gripper(self.profile.gripper.max_width)
        self.held = ""
        here = self.kin.fk(self.arm.joint_positions())[0]
        self._move_line(here + np.array([0.0, 0.0, RELEASE_LIFT]), self._current_yaw())  # fingers up off what the person holds
        self._stow()
        return {}

    # ------------------------------------------------------------------ states
    def _articulate(self, thing: str, open_: bool, params: Tuning | None = None) -> dict:
        place = self.layout.place(thing) if thing in self.layout.places else None
        if place is None or not place.openable:
            openable = [p.name for p in self.layout.places.values() if p.openable]
            kind = self.view.things()[thing].type if thing in self.view.things() else None
            if kind is None and place is None:
                raise UnknownObjectError(f"unknown thing {thing!r}; openable here: {openable}")
            raise StateError(f"cannot {'open' if open_ else 'close'} {thing!r}: it is not openable (openable here: {', '.join(openable)})",
                             "not_openable", thing)
        fraction = pull_fraction(thing, place.drawer, params) if open_ else 0.0
        is_open = bool(self.view.place_states().get(thing, {}).get("open", False))
        # a drawer pulled out only part of the way still counts as closed, and can still be pushed shut
        if is_open == open_ and (open_ or self.view.opening(thing) < 0.05):
            raise StateError(f"the {thing} is already {'open' if open_ else 'closed'}", f"already_{'open' if open_ else 'closed'}", thing)
        if self._holding():
            verb = "open" if open_ else "close"
            raise AlreadyHoldingError(f"the hand holds {self.held!r}; place it first, it needs a free hand to {verb} the {thing}")
        # a door swings towards the robot: open it standing beside its free edge, close it standing
        # back from the open door (out of its sweep, with its handle in front)
        across = back = 0.0
        if place.door is not None and open_:
            side = -1.0 if place.door.get("hinge", "right") == "left" else 1.0
            across = side * (place.width / 2 + self.layout.base.size[1] / 2 + DOOR_CLEARANCE)
        elif place.door is not None:
            back = place.width + DOOR_CLEARANCE - self.layout.base.standoff
        elif not open_:
            back = DRAWER_BACK  # the pulled-out drawer's handle would be too close to the arm's base
        self._work_at(thing, across=across, back=back)
        # open: hook the handle from the front; close: push the open door from its inner side
        reach = self.to_arm(self.view.handle(thing, inner=not open_ and place.door is not None))
        if open_ or place.drawer is not None:
            reach = reach - np.array([0.06, 0.0, 0.0])
        self._stage("reach handle", 0.3)
        self._move_joint_space(reach, self._reachable_yaw(0.0, [reach]))
        self._stage("pull" if open_ else "push", 0.5)
        self.view.drive_articulation(thing, open_, fraction)
        self._stow()
        deadline = self._deadline(8.0)  # 8 s of the arm's (simulated) time for the door to swing
        while not deadline.expired():
            opening = self.view.opening(thing)
            if (opening > fraction - 0.05) if open_ else (opening < 0.05):
                return {}
            self.arm.sleep(0.05)
        raise MotionTimeoutError(f"the {thing} did not {'open' if open_ else 'close'} fully; check for something in the way, then retry")

    def skill_open(self, thing: str, params: Tuning | None = None) -> dict:
        """Open a door or drawer (the fridge, the cupboard); a drawer as far as ``params``' pull_distance."""
        return self._articulate(thing, True, self.parameters.tuning(params, "open"))

    def skill_close(self, thing: str) -> dict:
        """Close a door or drawer."""
        return self._articulate(thing, False)

    def _press(self, thing: Thing, depth: float) -> None:
        """Lower what the hand holds (or the closed fingers) onto the top of ``thing`` and lift again."""
        self._work_at(thing.place, thing.position)
        top = self.to_arm(thing.position + np.array([0.0, 0.0, thing.size[2] / 2]))
        held = self.view.things().get(self.held) if self.held else None
        below = float(held.size[2]) / 2 if held is not None else 0.0
        above = top + [0, 0, below + PRESS_APPROACH]
        yaw = self._reachable_yaw(0.0, [above])
        self._move_joint_space(above, yaw)
        self._move_line(top + [0, 0, below - depth], yaw, speed=0.2, guarded=True)
        self._settle(0.4)
        self._move_line(above, yaw)

    def skill_toggle(self, thing: str) -> dict:
        """Switch something on or off by pressing it (a lamp, a kettle)."""
        t = self._thing(thing)
        if "togglable" not in t.properties:
            switchable = sorted(n for n, o in self.view.things().items() if "togglable" in o.properties)
            raise StateError(f"cannot toggle {thing!r}: it has no switch (switchable here: {', '.join(switchable) or 'nothing'})",
                             "not_togglable", thing)
        if self._holding():
            raise AlreadyHoldingError(f"the hand holds {self.held!r}; place it first, it needs a free hand to press the switch")
        before = bool(t.states.get("on"))
        self._gripper(0.0)
        self._press(t, PRESS_DEPTH)
        self._gripper(self.profile.gripper.max_width)
        self._stow()
        if bool(self._thing(thing).states.get("on")) == before:
            raise PlaceFailedError(f"pressing {thing!r} did not switch it; try again")
        return {}

    def skill_slice(self, object_name: str) -> dict:
        """Slice something sliceable with the knife in the hand."""
        t = self._thing(object_name)
        if "sliceable" not in t.properties:
            raise StateError(f"cannot slice {object_name!r}: a {t.type.replace('_', ' ')} is not sliceable", "not_sliceable", object_name)
        if t.states.get("sliced"):
            raise StateError(f"{object_name!r} is already sliced", "already_sliced", object_name)
        held = self._holding()
        if not held or self.view.things()[held].type != "knife":
            raise StateError(f"slicing needs a knife in the hand{f' (it holds {held!r})' if held else ''}; grasp('knife') first",
                             "needs_tool", object_name)
        self._press(t, WIPE_PRESS)
        self._stow()
        if not self._thing(object_name).states.get("sliced"):
            raise PlaceFailedError(f"the knife did not cut {object_name!r}; check that it lies on a surface, then retry")
        return {}

    def skill_wipe(self, surface: str, params: Tuning | None = None) -> dict:
        """Wipe a surface (the table, the counter) with the sponge in the hand until it is clean, in
        ``params``' wipe_passes back-and-forth passes at its speed_factor."""
        params = self.parameters.tuning(params, "wipe")
        place = self.layout.place(surface)
        if not place.cleanable:
            wipeable = [p.name for p in self.layout.places.values() if p.cleanable]
            raise StateError(f"cannot wipe the {surface}: choose one of {', '.join(wipeable)}", "not_cleanable", surface)
        held = self._holding()
        if not held or self.view.things()[held].type != "sponge":
            raise StateError(f"wiping needs the sponge in the hand{f' (it holds {held!r})' if held else ''}; grasp('sponge') first",
                             "needs_tool", surface)
        self._work_at(surface)
        sponge = self.view.things()[held]
        s = self.layout.surface(surface)
        along = self._free_band(surface, s, sponge)
        # the fingers hold the sponge this far above its bottom; press it a few millimetres onto the surface
        held_above = self.kin.fk(self.arm.joint_positions())[0][2] - (self.to_arm(sponge.position)[2] - float(sponge.size[2]) / 2)
        z = self.floor_z + held_above - WIPE_PRESS
        ends = [self.to_arm(np.array([*surface_point(s, along, side * WIPE_STROKE / 2), 0.0]))[:2] for side in (-1, 1)]
        yaw = self._current_yaw()
        self._move_joint_space(np.array([*ends[0], z + 0.08]), yaw)
        self._move_line(np.array([*ends[0], z]), yaw, speed=0.2, guarded=True)
        for k in range(2 * int(params["wipe_passes"])):
            self._move_line(np.array([*ends[(k + 1) % 2], z]), yaw, speed=params["speed_factor"])
        self._move_line(np.array([*ends[0], z + 0.1]), yaw)
        self._stow()
        if self.view.place_states().get(surface, {}).get("clean") is False:
            raise PlaceFailedError(f"the {surface} is still dirty; wipe it again")
        return {}
