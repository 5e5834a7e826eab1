"""The PyBullet household world: the arm on a holonomic base in a kitchen, objects with states.

The base is moved kinematically along a timed path (``command_base``), the arm rides on it and is
commanded like the tabletop arm (``ArmWorld``). The fridge has a hinged door and the cupboard a drawer,
both real joints driven by motors. States change by physics: a held sponge rubbed over a cleanable
surface makes it clean, a held knife pressed on something sliceable slices it, the hand pressing a
togglable thing switches it; opening and closing follow the joints. The renderer shows states as tints.
No ROS here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pybullet as pb

from teachbot.errors import ControllerError, UnknownObjectError
from teachbot.robot_profile import RobotProfile
from teachbot.sim.arm_world import ArmWorld
from teachbot.sim.camera import CameraSpec
from teachbot.sim.household_bodies import base_body, box_body, object_body, place_body
from teachbot.world.floor import BasePath, BasePose
from teachbot.world.household_layout import BASE_JOINTS, HouseholdLayout, Place, Surface, surface_point
from teachbot.world.household_objects import Catalog, StateRules, Thing, tint
from teachbot.world.household_scene import HouseholdScene

EFFECT_EVERY = 12  # physics steps between checks of contact effects (20 Hz at 240 Hz)
WIPE_DISTANCE = 0.25  # metres a held sponge must rub over a surface to clean it
SLICE_TIME = 0.3  # seconds a held knife must press on something sliceable
OPEN_FRACTION = 0.9  # of its travel: a door or drawer counts as open beyond this, closed below 1 - this
ARTICULATION_FORCE = 80.0
ARTICULATION_SPEED = 1.0
HANDOVER_REACH = 0.15  # metres from the person's hand within which a released object is theirs  # rad/s or m/s


@dataclass
class HouseholdObject:
    """Ground truth of one object (map frame, metres)."""

    name: str
    type: str
    color: str
    body_id: int
    position: np.ndarray
    orientation: np.ndarray
    size: np.ndarray  # bounding box x, y, z
    states: dict[str, Any] = field(default_factory=dict)
    place: str = ""  # the place it stands at or in ('' when held or on the floor)
    supported_by: str = ""  # an object it rests on
    inside: bool = False  # in the fridge or the drawer
    held: bool = False

    @property
    def category(self) -> str:
        """The type, under the name the tabletop's object messages use."""
        return self.type


class HouseholdWorld(ArmWorld):
    """One PyBullet client: room, furniture, the mobile manipulator and the current scene."""

    def __init__(
        self,
        profile: RobotProfile,
        layout: HouseholdLayout | None = None,
        catalog: Catalog | None = None,
        *,
        gui: bool = False,
        time_step: float = 1.0 / 240.0,
        grasp_assist: bool = True,
    ) -> None:
        super().__init__(profile, gui=gui, time_step=time_step, grasp_assist=grasp_assist)
        self.layout = layout or HouseholdLayout.load()
        self.catalog = catalog or Catalog.load()
        self.scene: HouseholdScene | None = None
        self.rules = StateRules(liquids=self.catalog.liquids)
        self._bodies: dict[str, int] = {}  # place name -> body
        self._joints: dict[str, tuple[int, float]] = {}  # openable place -> (joint index, open position)
        self._objects: dict[str, tuple[int, Thing, np.ndarray, str]] = {}  # name -> body, thing, size, colour
        self._base_path: BasePath | None = None
        self._base_path_start = 0.0
        self._effects: dict[tuple[str, str], float] = {}  # (tool, target) -> progress
        self._touching: set[str] = set()
        self._with_person: dict[str, int] = {}  # objects the person holds -> the constraint holding them
        self._last_tool_pos: np.ndarray | None = None
        self._build_floor()
        for place in self.layout.places.values():
            self._build_place(place)
        self._build_base()
        self._load_robot()
        for link in range(-1, pb.getNumJoints(self.robot_id, physicsClientId=self.client)):
            pb.setCollisionFilterPair(self.base_id, self.robot_id, -1, link, 0, physicsClientId=self.client)
        self.base_pose = BasePose(*self.layout.base.start)
        self._place_base(self.base_pose)

    # ----------------------------------------------------------------- construction
    def _build_floor(self) -> None:
        (x0, x1), (y0, y1) = self.layout.room["x"], self.layout.room["y"]
        self.floor_id = box_body(self.client, [(x1 - x0) / 2 + 0.5, (y1 - y0) / 2 + 0.5, 0.05], [(x0 + x1) / 2, (y0 + y1) / 2, -0.05],
                                 (0.8, 0.8, 0.78))

    def _build_place(self, place: Place) -> None:
        body = place_body(self.client, self.layout, place)
        if place.openable:
            self._joints[place.name] = (0, place.joint_limit)
        self._bodies[place.name] = body
        properties = (["cleanable"] if place.cleanable else []) + (["openable"] if place.openable else [])
        self.rules.register(Thing(place.name, properties, kind=place.name, rgb=place.rgb))

    def _build_base(self) -> None:
        self.base_id = base_body(self.client, self.layout.base)

    # ----------------------------------------------------------------- the mobile base
    def teleport_base(self, pose: BasePose) -> None:
        """Put the base at ``pose`` at once (what the hand holds rides along; no physics time passes): for a
        view from a stance, never for a motion a skill makes."""
        self._place_base(pose)

    def _place_base(self, pose: BasePose) -> None:
        # what the hand holds rides along exactly (its constraint would otherwise be strained each step)
        held = self._objects[self._grasped][0] if self._grasped in self._objects else None
        if held is not None:
            hand = pb.getLinkState(self.robot_id, self.hand_index, computeForwardKinematics=True, physicsClientId=self.client)
            obj = pb.getBasePositionAndOrientation(held, physicsClientId=self.client)
            inv = pb.invertTransform(hand[4], hand[5])
            rel = pb.multiplyTransforms(inv[0], inv[1], obj[0], obj[1])
        orn = pb.getQuaternionFromEuler([0, 0, pose.yaw])
        pb.resetBasePositionAndOrientation(self.base_id, [pose.x, pose.y, 0.0], orn, physicsClientId=self.client)
        position, orientation = self.arm_frame(pose)
        # PyBullet places a body by its base's centre of mass, which lies off panda_link0's origin
        inertial = pb.getDynamicsInfo(self.robot_id, -1, physicsClientId=self.client)
        com, com_orn = pb.multiplyTransforms(position.tolist(), orientation.tolist(), inertial[3], inertial[4])
        pb.resetBasePositionAndOrientation(self.robot_id, com, com_orn, physicsClientId=self.client)
        self.base_pose = pose
        if held is not None:
            hand = pb.getLinkState(self.robot_id, self.hand_index, computeForwardKinematics=True, physicsClientId=self.client)
            new = pb.multiplyTransforms(hand[4], hand[5], rel[0], rel[1])
            pb.resetBasePositionAndOrientation(held, new[0], new[1], physicsClientId=self.client)

    def camera(self, spec: CameraSpec) -> CameraSpec:
        """``spec`` (rate, optics) as the robot's mast camera, at its own image size, sees from the base's pose now."""
        pose, b = self.base_pose, self.layout.base
        c, s = math.cos(pose.yaw), math.sin(pose.yaw)

        def to_map(p: tuple[float, float, float]) -> tuple[float, float, float]:
            return (pose.x + c * p[0] - s * p[1], pose.y + s * p[0] + c * p[1], p[2])

        return replace(spec, eye=to_map(b.camera_eye), target=to_map(b.camera_target), far=max(spec.far, 8.0),
                       width=b.camera_size[0], height=b.camera_size[1])

    def arm_frame(self, pose: BasePose | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Position and quaternion of the arm's base (panda_link0) in the map for a base ``pose``."""
        pose = pose or self.base_pose
        return self.layout.base.arm_origin(pose.x, pose.y, pose.yaw), np.array(pb.getQuaternionFromEuler([0, 0, pose.yaw]))

    def command_base(self, path: BasePath) -> None:
        """Follow ``path`` from now (simulated time); replaces any path being followed."""
        if not path.poses:
            raise ControllerError("a base path needs at least one pose")
        self._base_path, self._base_path_start = path, self.sim_time

    def stop_base(self) -> None:
        self._base_path = None

    def hold(self) -> None:
        """Stop the arm and the base where they are (emergency stop, cancel)."""
        self.stop_base()
        super().hold()

    @property
    def base_moving(self) -> bool:
        return self._base_path is not None

    def _after_step(self) -> None:
        if self._base_path is not None:
            t = self.sim_time - self._base_path_start
            self._place_base(self._base_path.pose_at(t))
            if t >= self._base_path.duration:
                self._base_path = None
        self._step_count = getattr(self, "_step_count", 0) + 1
        if self._step_count % EFFECT_EVERY == 0:
            self._contact_effects(EFFECT_EVERY * self.time_step)

    # ----------------------------------------------------------------- articulations
    def command_articulation(self, place: str, open_: bool, fraction: float = 1.0) -> None:
        """Drive the door or drawer of ``place`` open (``fraction`` of the way) or closed (it moves over
        the next steps)."""
        if place not in self._joints:
            raise UnknownObjectError(f"{place!r} has no door or drawer; openable: {sorted(self._joints)}")
        joint, limit = self._joints[place]
        target = limit * min(max(fraction, 0.0), 1.0) if open_ else 0.0
        pb.setJointMotorControl2(self._bodies[place], joint, pb.POSITION_CONTROL, targetPosition=target,
                                 force=ARTICULATION_FORCE, maxVelocity=ARTICULATION_SPEED, physicsClientId=self.client)

    def opening(self, place: str) -> float:
        """How far the door or drawer of ``place`` is open, 0 (closed) to 1 (fully open)."""
        joint, limit = self._joints[place]
        return float(pb.getJointState(self._bodies[place], joint, physicsClientId=self.client)[0]) / limit

    def _set_opening(self, place: str, fraction: float) -> None:
        joint, limit = self._joints[place]
        pb.resetJointState(self._bodies[place], joint, fraction * limit, physicsClientId=self.client)
        self.command_articulation(place, fraction > 0.5)

    def surface(self, place: str) -> Surface:
        """Where things rest at ``place`` now (in the drawer: as far out as it is pulled)."""
        drawer = self.layout.place(place).drawer
        return self.layout.surface(place, self.opening(place) * float(drawer["travel"]) if drawer else 0.0)

    def handle_position(self, place: str, inner: bool = False) -> np.ndarray:
        """Map position of the handle of a door or drawer as it is now (see :meth:`HouseholdLayout.handle`)."""
        if place not in self._joints:
            raise UnknownObjectError(f"{place!r} has no door or drawer; openable: {sorted(self._joints)}")
        return np.array(self.layout.handle(place, self.opening(place), inner))

    def _link_point(self, place: str, local: list[float]) -> np.ndarray:
        """A point given in the frame of the moving part (door or drawer) of ``place``, in the map."""
        state = pb.getLinkState(self._bodies[place], 0, computeForwardKinematics=True, physicsClientId=self.client)
        return np.array(pb.multiplyTransforms(state[4], state[5], local, [0, 0, 0, 1])[0])

    # ----------------------------------------------------------------- scenes
    def reset(self, scene: HouseholdScene) -> None:
        """Replace the objects by ``scene``, set the places' states, park the robot at its start."""
        self.stop_base()
        self.reset_robot()
        for constraint in self._with_person.values():
            pb.removeConstraint(constraint, physicsClientId=self.client)
        self._with_person.clear()
        for body, *_ in self._objects.values():
            pb.removeBody(body, physicsClientId=self.client)
        self._objects.clear()
        self.rules = StateRules(liquids=self.catalog.liquids)
        for place in self.layout.places.values():
            properties = (["cleanable"] if place.cleanable else []) + (["openable"] if place.openable else [])
            flags = {k: bool(v) for k, v in scene.states.get(place.name, {}).items() if k in ("open", "clean")}
            self.rules.register(Thing(place.name, properties, flags, kind=place.name, rgb=place.rgb))
        for name in self._joints:
            self._set_opening(name, 1.0 if self.rules.thing(name).states.open else 0.0)
        for spec in scene.objects:
            thing = self.catalog.make(spec.name, spec.type, spec.color)
            for flag, value in spec.states.items():
                setattr(thing.states, flag, value)
            self.rules.register(thing)
            kind = self.catalog.type(spec.type)
            surface = self.surface(spec.place)
            xy = surface_point(surface, *spec.offset)
            body, size = object_body(self.client, kind.shape, kind.size, kind.mass, xy, surface.z, surface.yaw + spec.yaw)
            self._objects[spec.name] = (body, thing, size, spec.color or kind.color)
        self._place_base(BasePose(*self.layout.base.start))
        self._effects.clear()
        self._touching.clear()
        self.scene = scene
        self.sim_time = 0.0
        self._refresh_tints()
        self.step(int(0.3 / self.time_step))

    def _release_grasp(self) -> None:
        """Letting go next to the person's hand hands the object over: they hold it from then on."""
        name = self._grasped
        super()._release_grasp()
        if name is None or name not in self._objects:
            return
        person = next((p for p in self.layout.places.values() if p.hand is not None), None)
        body = self._objects[name][0]
        pos, orn = pb.getBasePositionAndOrientation(body, physicsClientId=self.client)
        if person is not None and float(np.linalg.norm(np.array(pos) - self.layout.coordinates(person.name))) < HANDOVER_REACH:
            # the person takes it and holds it at their side, out of the way of the next handover
            side = (-person.front[1], person.front[0])
            k = len(self._with_person)
            at = [person.centre[0] + side[0] * (person.width / 2 + 0.08 * (k + 1)),
                  person.centre[1] + side[1] * (person.width / 2 + 0.08 * (k + 1)), 0.9]
            pb.resetBasePositionAndOrientation(body, at, orn, physicsClientId=self.client)
            self._with_person[name] = pb.createConstraint(body, -1, -1, -1, pb.JOINT_FIXED, [0, 0, 0], [0, 0, 0], at,
                                                          childFrameOrientation=orn, physicsClientId=self.client)

    def _graspables(self) -> dict[str, int]:
        return {n: body for n, (body, thing, _, _) in self._objects.items() if thing.has("pickable") and n not in self._with_person}

    # ----------------------------------------------------------------- states by contact
    def _contact_effects(self, dt: float) -> None:
        """Wiping, slicing and switching happen where things touch (see the module docstring)."""
        held = self._grasped
        tool = self.rules.thing(held).kind if held and held in self._objects else ""
        if tool in ("sponge", "knife"):
            body = self._objects[held][0]  # type: ignore[index]
            pos = np.array(pb.getBasePositionAndOrientation(body, physicsClientId=self.client)[0])
            moved = 0.0 if self._last_tool_pos is None else float(np.linalg.norm(pos[:2] - self._last_tool_pos[:2]))
            self._last_tool_pos = pos
            for target, target_body in self._touchables(exclude=held):  # type: ignore[arg-type]
                if not pb.getContactPoints(body, target_body, physicsClientId=self.client):
                    continue
                thing = self.rules.thing(target)
                key = (held, target)
                if tool == "sponge" and thing.has("cleanable") and thing.states.clean is False:
                    self._effects[key] = self._effects.get(key, 0.0) + moved  # type: ignore[index]
                    if self._effects[key] >= WIPE_DISTANCE:  # type: ignore[index]
                        self.rules.wipe(thing, self.rules.thing(held))  # type: ignore[arg-type]
                        self._refresh_tints()
                elif tool == "knife" and thing.has("sliceable") and not thing.states.sliced:
                    self._effects[key] = self._effects.get(key, 0.0) + dt  # type: ignore[index]
                    if self._effects[key] >= SLICE_TIME:  # type: ignore[index]
                        self.rules.slice(thing, self.rules.thing(held))  # type: ignore[arg-type]
                        self._refresh_tints()
        else:
            self._last_tool_pos = None
        touching = set()
        for name, (body, thing, _, _) in self._objects.items():
            if thing.has("togglable") and pb.getContactPoints(self.robot_id, body, physicsClientId=self.client):
                touching.add(name)
                if name not in self._touching:
                    self.rules.toggle(thing)
                    self._refresh_tints()
        self._touching = touching
        for name in self._joints:
            thing = self.rules.thing(name)
            opening = self.opening(name)
            if opening > OPEN_FRACTION and not thing.states.open:
                thing.states.open = True
            elif opening < 1 - OPEN_FRACTION and thing.states.open:
                thing.states.open = False

    def _touchables(self, exclude: str) -> list[tuple[str, int]]:
        found = [(n, b) for n, (b, *_rest) in self._objects.items() if n != exclude]
        return found + [(n, b) for n, b in self._bodies.items() if self.rules.thing(n).has("cleanable")]

    def _refresh_tints(self) -> None:
        for body, thing, _, _ in self._objects.values():
            rgba = tint(thing.rgb or (0.6, 0.6, 0.6), thing.states, self.catalog.tints, self.catalog.liquids)
            pb.changeVisualShape(body, -1, rgbaColor=list(rgba), physicsClientId=self.client)
        for name, body in self._bodies.items():
            thing = self.rules.thing(name)
            if thing.has("cleanable"):
                rgba = tint(thing.rgb or (0.6, 0.6, 0.6), thing.states, self.catalog.tints, self.catalog.liquids)
                pb.changeVisualShape(body, -1, rgbaColor=list(rgba), physicsClientId=self.client)

    # ----------------------------------------------------------------- ground truth
    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """The arm and fingers, the base as virtual joints base_x, base_y, base_yaw, then the door and
        drawer joints ('fridge_door', 'cupboard_drawer')."""
        names, q, v, e = super().joint_state()
        pose = self.base_pose
        places = [self.layout.place(p) for p in self._joints]
        extra_q = [pose.x, pose.y, pose.yaw, *(self.opening(p.name) * p.joint_limit for p in places)]
        zeros = [0.0] * len(extra_q)
        return [*names, *BASE_JOINTS, *(p.joint for p in places)], np.append(q, extra_q), np.append(v, zeros), np.append(e, zeros)

    def command_trajectory(self, joint_names: list[str], times: list[float], positions: list[list[float]]) -> None:
        """The arm's trajectory controller, plus two more behind the same interface: base_x, base_y and
        base_yaw together drive the base along the points; a door or drawer joint alone drives that
        joint to its last point (the simulator's stand-in for the hand pulling it)."""
        names = list(joint_names)
        doors = {self.layout.place(p).joint: p for p in self._joints}
        if names and set(names) <= set(BASE_JOINTS):
            if set(names) != set(BASE_JOINTS) or not positions or len(times) != len(positions):
                raise ControllerError(f"a base trajectory names all of {list(BASE_JOINTS)} with one time per point")
            index = [names.index(j) for j in BASE_JOINTS]
            poses = [BasePose(*(float(point[i]) for i in index)) for point in positions]
            t = [float(x) for x in times]
            if t[0] > 0:
                poses, t = [self.base_pose, *poses], [0.0, *t]
            self.command_base(BasePath(tuple(poses), tuple(t)))
        elif len(names) == 1 and names[0] in doors:
            place = doors[names[0]]
            fraction = float(positions[-1][0]) / self.layout.place(place).joint_limit
            self.command_articulation(place, fraction > 0.0, fraction)
        else:
            super().command_trajectory(names, times, positions)

    def objects(self) -> list[HouseholdObject]:
        """Ground truth of every object: pose, states, the place it is at, what it rests on."""
        held = self.held_object()
        out = []
        for name, (body, thing, size, color) in self._objects.items():
            pos, orn = pb.getBasePositionAndOrientation(body, physicsClientId=self.client)
            states = thing.states.to_dict()
            states["held"] = name == held
            out.append(HouseholdObject(name, thing.kind, color, body, np.array(pos), np.array(orn), size, states, held=name == held))
        for o in out:
            if o.held:
                continue
            o.place, o.inside = self._place_of(o)
            for other in out:
                if other is not o and not other.held and float(np.hypot(*(o.position[:2] - other.position[:2]))) < 0.6 * other.size[0] \
                        and 0.3 * (o.size[2] + other.size[2]) < o.position[2] - other.position[2] < 0.7 * (o.size[2] + other.size[2]):
                    o.supported_by = other.name
        return out

    def _place_of(self, o: HouseholdObject) -> tuple[str, bool]:
        if o.name in self._with_person:
            return next(p.name for p in self.layout.places.values() if p.hand is not None), False
        for place in self.layout.places.values():
            if place.hand is not None:
                continue
            surface = self.surface(place.name)
            c, s = math.cos(surface.yaw), math.sin(surface.yaw)
            dx, dy = o.position[0] - surface.centre[0], o.position[1] - surface.centre[1]
            along, across = dx * c + dy * s, -dx * s + dy * c
            if abs(along) <= surface.half_extents[0] + 0.05 and abs(across) <= surface.half_extents[1] + 0.05 \
                    and surface.z - 0.02 <= o.position[2] - o.size[2] / 2 <= surface.z + 0.3:
                return place.name, place.openable
        return "", False

    def thing_states(self) -> dict[str, dict[str, Any]]:
        """States of every place and object that has any, by name."""
        out = {}
        for name in [*self.layout.places, *self._objects]:
            states = self.rules.thing(name).states.to_dict()
            if states:
                out[name] = states
        return out

    def object_names(self) -> list[str]:
        return list(self._objects)

    def object_type(self, name: str) -> str:
        return self._objects[name][1].kind
