"""The manipulation skills: pick, place, put_first_on_second, handover, move_to, gripper, go_home, wait.

Each skill plans with the kinematics model, passes every target and trajectory through the safety
limits, commands the arm through :class:`ArmInterface`, and reports success only after checking it
(the object is between the fingers, the object rests where it should). Failures are
:class:`~teachbot.errors.TeachbotError` values whose message says how to recover.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from teachbot.errors import (
    AlreadyHoldingError,
    ErrorCode,
    GraspFailedError,
    InvalidArgumentError,
    NotHoldingError,
    PlaceFailedError,
    TeachbotError,
    UnknownObjectError,
)
from teachbot.robot_profile import RobotProfile
from teachbot.skills.arm_motion import ArmMotion
from teachbot.skills.clearance import closing_axis, finger_blockers
from teachbot.skills.interfaces import ArmInterface, CancelToken, ObjectInfo, ObjectSource
from teachbot.skills.kinematics import KinematicsModel
from teachbot.skills.motion import SafetyLimits
from teachbot.skills.parameters import SkillParameters, Tuning, offset_grasp
from teachbot.skills.planning import PathPlanner

Feedback = Callable[[str, float], None]
BOWL_FLOOR = 0.006  # metres from a bowl's base to the top of its floor
OBJECT_LIST_GRACE = 0.5  # seconds to wait for a fresh object list before calling a name unknown
PALM_HEIGHT = 0.02  # metres from the grasp point up to the palm of the Panda hand
FINGERTIP_DEPTH = 0.011  # metres from the grasp point down to the fingertips
GRASP_MARGIN = 0.004
ELONGATED = 0.01  # metres between a footprint's sides beyond which it is gripped across the shorter one
HELD_MAX_DISTANCE = 0.04  # metres between the gripper and the top half of an object it still holds
# a failed pick or place cleans up (puts down what is held, opens, goes home) unless it failed for these
NO_RECOVERY = (ErrorCode.CANCELED, ErrorCode.EMERGENCY_STOP, ErrorCode.BUSY)
RECOVERING_SKILLS = ("pick", "place", "put_first_on_second", "handover")


@dataclass(frozen=True)
class SkillOutcome:
    """Result of a skill: ``message`` is 'success' or a one-line error naming the fix."""

    success: bool
    code: ErrorCode
    message: str
    duration: float
    holding: bool = False
    width: float = 0.0


def _no_feedback(stage: str, progress: float) -> None:
    return None


class SkillLibrary(ArmMotion):
    """All skills of one arm. Not re-entrant: the caller runs one skill at a time. How the arm is moved
    (timed paths, lines, the gripper, waits on the arm's clock) is :class:`ArmMotion`'s."""

    def __init__(self, profile: RobotProfile, arm: ArmInterface, objects: ObjectSource, kinematics: KinematicsModel | None = None) -> None:
        self.profile = profile
        self.arm = arm
        self.source = objects
        self.kin = kinematics or KinematicsModel(profile)
        self.planner = PathPlanner(self.kin, np.array(profile.home))
        self.safety = SafetyLimits(profile.safety, self.kin.max_velocity, self.kin.lower, self.kin.upper)
        self.parameters = SkillParameters.load(profile=profile)  # config/skill_parameters.yaml, this robot's world
        self.held: str = ""
        # height of the surface the arm works on, in its base frame: 0 at the tabletop; a mobile
        # manipulator sets it for the counter or shelf in front of it (transport heights are above it)
        self.floor_z = 0.0
        self._picked_from: dict[str, np.ndarray] = {}  # where each block was last picked (to put it back)
        self._cancel = CancelToken()
        self._feedback: Feedback = _no_feedback

    # ------------------------------------------------------------------ running
    def run(self, skill: str, cancel: CancelToken | None = None, feedback: Feedback | None = None,
            parameter_names: Sequence[str] = (), parameter_values: Sequence[float] = (), **kwargs: object) -> SkillOutcome:
        """Run the skill named ``skill``; robot-level failures come back as an unsuccessful outcome.

        Its parameters (config/skill_parameters.yaml) come as ``parameter_names``/``parameter_values``
        (a goal's fields) or as keywords; they are checked before anything moves."""
        fn = getattr(self, f"skill_{skill}", None)
        if fn is None:
            known = ", ".join(sorted(n[6:] for n in dir(self) if n.startswith("skill_")))
            return SkillOutcome(False, ErrorCode.INVALID_ARGUMENT, f"unknown skill {skill!r}; known: {known}", 0.0)
        try:
            params = self.parameters.from_call(skill, kwargs, parameter_names, parameter_values)
        except TeachbotError as exc:
            return SkillOutcome(False, exc.code, str(exc), 0.0, width=self.arm.gripper_width())
        if params is not None:
            kwargs["params"] = params
        self._cancel = cancel or CancelToken()
        self._feedback = feedback or _no_feedback
        start = time.monotonic()
        q_start = self.arm.joint_positions()
        try:
            extra = fn(**kwargs) or {}
        except TeachbotError as exc:
            if exc.code in (ErrorCode.CANCELED, ErrorCode.EMERGENCY_STOP, ErrorCode.TIMEOUT):
                self.arm.hold()
            message = str(exc)
            if skill in RECOVERING_SKILLS and exc.code not in NO_RECOVERY:
                message += self._recover(q_start)
            return SkillOutcome(False, exc.code, message, time.monotonic() - start, width=self.arm.gripper_width())
        return SkillOutcome(True, ErrorCode.SUCCESS, "success", time.monotonic() - start, **extra)

    def _recover(self, q_start: np.ndarray) -> str:
        """After a failed pick or place: put down what is held, open the gripper, go home, so that the
        next command starts clean. Never raises; returns a sentence to append to the error message."""
        moved = float(np.max(np.abs(self.arm.joint_positions() - q_start))) > 0.02
        self._refresh_held()
        if not moved and not self.held:
            return ""  # failed before moving anything: nothing to clean up
        done = []
        try:
            if self.held:
                name = self.held
                here, _ = self.kin.fk(self.arm.joint_positions())
                for xy in (here[:2], self._picked_from.get(name)):
                    if xy is None:
                        continue
                    try:
                        self.skill_place(target_point=(float(xy[0]), float(xy[1])))
                        done.append(f"put {name!r} down at ({xy[0]:.2f}, {xy[1]:.2f})")
                        break
                    except TeachbotError:
                        self._refresh_held()
                        if not self.held:  # released, only the check failed: it lies near there
                            done.append(f"released {name!r} near ({xy[0]:.2f}, {xy[1]:.2f})")
                            break
            if self.arm.gripper_width() < self.profile.gripper.max_width - 0.005:
                self._gripper(self.profile.gripper.max_width)
            self.held = ""
            here, _ = self.kin.fk(self.arm.joint_positions())
            if here[2] < self.transport_z - 0.02:
                up = np.array([here[0], here[1], self.transport_z])
                try:
                    self._move_line(up, self._current_yaw())
                except TeachbotError:
                    self.arm.hold()  # blocked on the way up: go home from where it is
            self._execute(np.array(self.profile.home), self.profile.safety.default_speed_factor)
            done.append("opened the gripper and went home")
        except TeachbotError as exc:
            self.arm.hold()
            return f" (cleaning up failed too: {exc}; call go_home before the next command)"
        return f" (the robot {', '.join(done)})"

    # ------------------------------------------------------------------ skills
    def skill_pick(self, object_name: str, params: Tuning | None = None) -> dict:
        """Grasp ``object_name`` from above and lift it to the transport height (``params``: see
        config/skill_parameters.yaml)."""
        p = self.parameters.tuning(params, "pick")
        obj = self._object(object_name)
        if obj.category == "bowl":
            raise GraspFailedError(f"cannot pick {obj.name!r}: bowls are fixed to the table; pick a block instead")
        self._refresh_held()
        if self.held:
            raise AlreadyHoldingError(f"already holding {self.held!r}; place it or open the gripper first")
        self.safety.check_point(obj.position, f"{obj.name!r} at")
        self._free_top(obj, f"cannot pick {obj.name!r}")
        grasp = obj.position.copy()
        # the palm stays above a tall object's top and the fingertips above the surface under a flat one
        top, bottom = obj.position[2] + obj.size[2] / 2, obj.position[2] - obj.size[2] / 2
        grasp[2] = max(grasp[2], top - PALM_HEIGHT + GRASP_MARGIN, bottom + FINGERTIP_DEPTH + GRASP_MARGIN)
        grasp[2] = offset_grasp(grasp[2], p["grasp_height_offset"], bottom + FINGERTIP_DEPTH, obj.name)
        approach, speed = p["approach_height"], p["speed_factor"]
        above = grasp + [0, 0, approach]
        lift = np.array([grasp[0], grasp[1], max(self.transport_z, grasp[2] + approach)])
        yaw, period = _grasp_yaw(obj)
        # the fingers' clearance is modelled for the tabletop's cubes (their footprints are exact); for other
        # things (a spice jar in a row) the physics decides, as the DROC tasks' corrections of the opening assume
        clear = self._clear_yaws(obj, grasp[2], yaw, period, p["gripper_width"]) if obj.category == "block" else None
        yaw = self._reachable_yaw(yaw, [above, grasp, lift], period, clear)
        self._stage("open", 0.05)
        self._gripper(p["gripper_width"])
        self._stage("approach", 0.15)
        self._move_joint_space(above, yaw, speed, then=(grasp, lift))
        self._stage("descend", 0.4)
        self._move_line(grasp, yaw, speed)
        self._stage("grasp", 0.55)
        width = self._gripper(0.0, p["gripper_force"])
        if width < self.profile.gripper.holding_min_width:
            self._gripper(self.profile.gripper.max_width)
            self._move_line(above, yaw, speed)
            raise GraspFailedError(
                f"grasp of {obj.name!r} failed: the gripper closed on nothing; check get_obj_pos({obj.name!r}) and try again"
            )
        self.held = obj.name
        self._picked_from[obj.name] = obj.position[:2].copy()
        self._stage("lift", 0.8)
        self._move_line(lift, yaw, speed)
        if self.arm.gripper_width() < self.profile.gripper.holding_min_width:
            self.held = ""
            raise GraspFailedError(f"{obj.name!r} slipped out of the gripper while lifting; try picking it again")
        self._stage("done", 1.0)
        return {"holding": True, "width": self.arm.gripper_width()}

    def skill_place(self, target_name: str = "", target_point: tuple[float, float] | None = None, params: Tuning | None = None) -> dict:
        """Put the held object on ``target_name`` or, when that is empty, at the xy ``target_point``
        (``params``: see config/skill_parameters.yaml)."""
        p = self.parameters.tuning(params, "place")
        self._refresh_held()
        if not self.held:
            raise NotHoldingError("not holding anything; pick an object first")
        held = self._object(self.held)
        offset = np.array([p["place_offset_x"], p["place_offset_y"]])
        xy, rest_z, target_label, tolerance, floor_z = self._place_target(held, target_name, target_point, offset)
        sk, speed = self.profile.skills, p["speed_factor"]
        # the gripper holds the object this far above its centre (a tall one is held near its top)
        above_centre = float(np.clip(self.kin.fk(self.arm.joint_positions())[0][2] - held.position[2], 0.0, held.size[2] / 2))
        release = np.array([xy[0], xy[1], rest_z + sk.place_clearance + above_centre])
        carry = np.array([xy[0], xy[1], max(self.transport_z, release[2] + p["approach_height"])])
        self.safety.check_point(release, "place point")
        yaw, period = _grasp_yaw(held)
        yaw = self._reachable_yaw(yaw, [carry, release], period)
        self._stage("transport", 0.1)
        self._move_joint_space(carry, yaw, speed, then=(release, carry))
        self._stage("lower", 0.5)
        self._move_line(release, yaw, speed, guarded=True)
        self._stage("release", 0.7)
        self._gripper(self.profile.gripper.max_width)
        name, self.held = self.held, ""
        self._stage("retreat", 0.85)
        self._move_line(carry, yaw, speed)
        self._stage("verify", 0.95)
        self._settle(sk.settle_time)
        placed = self._object(name)
        error = float(np.hypot(*(placed.position[:2] - xy)))
        # resting on the target: near it in xy (the benchmark's tolerance for this kind of target) and
        # not below its support (resting on blocks already in a bowl is fine: rest_z counts them)
        fell = placed.position[2] < floor_z - 0.01 or placed.position[2] > rest_z + placed.size[2]
        if error > tolerance or fell:
            raise PlaceFailedError(
                f"{name!r} ended at ({placed.position[0]:.3f}, {placed.position[1]:.3f}, {placed.position[2]:.3f}), "
                f"{error * 100:.1f} cm from {target_label}; pick it up and place it again"
            )
        return {}

    def skill_put_first_on_second(self, object_name: str, target_name: str = "", target_point: tuple[float, float] | None = None,
                                  params: Tuning | None = None) -> dict:
        """Pick ``object_name`` and place it on ``target_name`` (or at ``target_point``), both with ``params``.
        A target that cannot be placed on (unknown, the object itself, a point outside the workspace) fails
        before anything moves: the object is never picked only to be put back."""
        if target_name:
            target = self._object(target_name)  # fail on a bad target before moving anything
            if target_name == object_name:
                raise PlaceFailedError(f"cannot put {object_name!r} on itself; name a different target")
            if target.category == "block":
                self._free_top(target, f"cannot put {object_name!r} on {target_name!r}", PlaceFailedError)
        else:
            if target_point is None or len(target_point) < 2:
                raise InvalidArgumentError("place needs a target name or an [x, y] point")
            p = self.parameters.tuning(params, "place")
            x, y = float(target_point[0]) + p["place_offset_x"], float(target_point[1]) + p["place_offset_y"]
            self.safety.check_point(np.array([x, y, self.transport_z]), "place point")  # where it is carried to
        self._refresh_held()
        outer = self._feedback
        try:
            if self.held != object_name:
                self._feedback = lambda stage, p: outer(stage, 0.5 * p)
                self.skill_pick(object_name, params)
            self._feedback = lambda stage, p: outer(stage, 0.5 + 0.5 * p)
            return self.skill_place(target_name, target_point, params)
        finally:
            self._feedback = outer

    def skill_handover(self, object_name: str = "", timeout: float = 0.0, release: threading.Event | None = None) -> dict:
        """Bring an object to the human handover pose; open when ``release`` is set or after ``timeout``."""
        self._refresh_held()
        if object_name and self.held != object_name:
            self.skill_pick(object_name)
        if not self.held:
            raise NotHoldingError("nothing to hand over; name an object or pick one first")
        pose = self._named_pose("handover")
        self._stage("bring", 0.3)
        self._move_joint_space(pose, 0.0)
        self._stage("waiting for human", 0.6)
        timeout = timeout if timeout > 0 else self.profile.skills.handover_timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (release is not None and release.is_set()):
            self._cancel.check()
            time.sleep(0.02)
        self._stage("release", 0.9)
        self._gripper(self.profile.gripper.max_width)
        self.held = ""
        return {}

    def skill_move_to(self, pose_name: str = "", position: tuple[float, float, float] | None = None, speed_factor: float = 0.0) -> dict:
        """Move the gripper (pointing down) to a named pose or an xyz position."""
        speed = self.safety.speed_factor(speed_factor)
        if pose_name == "home":
            return self.skill_go_home(speed)
        target = self._named_pose(pose_name) if pose_name else np.asarray(position, float)
        if target is None or target.shape != (3,):
            raise InvalidArgumentError("move_to needs a pose name or an [x, y, z] position")
        self.safety.check_point(target)
        self._stage("move", 0.1)
        self._move_joint_space(target, self._reachable_yaw(0.0, [target]), speed)
        self._stage("done", 1.0)
        return {}

    def skill_go_home(self, speed_factor: float = 0.0) -> dict:
        """Joint-space move to the configured home posture."""
        speed = self.safety.speed_factor(speed_factor)
        self._stage("home", 0.1)
        self._execute(np.array(self.profile.home), speed)
        return {}

    def skill_gripper(self, close: bool) -> dict:
        """Open or close; reports whether something is between the fingers."""
        width = self._gripper(0.0 if close else self.profile.gripper.max_width)
        holding = close and width >= self.profile.gripper.holding_min_width
        if not close:
            self.held = ""
        return {"holding": holding, "width": width}

    def skill_wait(self, duration: float = 0.0) -> dict:
        """Stay still for ``duration`` seconds (0: return at once)."""
        if duration < 0:
            raise InvalidArgumentError(f"duration must be >= 0 seconds, got {duration}")
        end = time.monotonic() + duration
        while time.monotonic() < end:
            self._cancel.check()
            self.arm.now()  # a driver that is gone (RosArm: no joint states) ends the wait with its error
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))
        return {}

    @property
    def transport_z(self) -> float:
        """Gripper height while carrying: transport_height above the working surface."""
        return self.floor_z + self.profile.skills.transport_height

    # ------------------------------------------------------------------ helpers
    def _stage(self, stage: str, progress: float) -> None:
        self._cancel.check()
        self._feedback(stage, progress)

    def _object(self, name: str) -> ObjectInfo:
        objects = self.source.objects()
        if name in objects:
            return objects[name]
        wait_for_update = getattr(self.source, "wait_for_update", None)
        if wait_for_update is not None:  # the scene may have just been reset: give the next list a moment
            wait_for_update(OBJECT_LIST_GRACE)
            objects = self.source.objects()
            if name in objects:
                return objects[name]
        known = ", ".join(sorted(objects)) or "none (is the object list being published?)"
        raise UnknownObjectError(f"unknown object {name!r}; known: {known}")

    def _named_pose(self, name: str) -> np.ndarray:
        poses = self.profile.skills.named_poses
        if name not in poses:
            raise UnknownObjectError(f"unknown pose {name!r}; known: home, {', '.join(sorted(poses))}")
        return np.array(poses[name])

    def _place_target(
        self, held: ObjectInfo, target_name: str, point: tuple[float, float] | None, offset: np.ndarray,
    ) -> tuple[np.ndarray, float, str, float, float]:
        """xy of the place point (shifted by ``offset``), the height the held object's centre will rest
        at (on top of whatever already lies there: a stack on a corner, blocks in a bowl), a label, the
        xy tolerance of the check, and the lowest centre height that still counts as resting on the target."""
        half = held.size[2] / 2
        sk = self.profile.skills
        if target_name:
            if target_name == held.name:
                raise PlaceFailedError(f"cannot put {held.name!r} on itself; name a different target")
            target = self._object(target_name)
            if target.category == "block":  # on a block: on its own top, not on whatever already rests there
                self._free_top(target, f"cannot put {held.name!r} on {target.name!r}", PlaceFailedError)
            xy = target.position[:2] + offset
            if target.category == "bowl":
                floor = target.position[2] + BOWL_FLOOR
                # in the bowl: within its radius less a quarter block, as the benchmark's 6 cm
                tolerance = max(sk.place_tolerance, target.size[0] / 2 - held.size[0] / 4)
                return xy, self._support_top(xy, held, floor) + half, target.name, tolerance, floor + half
            top = target.position[2] + target.size[2] / 2
            tolerance = min(sk.place_tolerance, target.size[0])  # on a block: within its width
            return xy, self._support_top(xy, held, top) + half, target.name, tolerance, top + half
        if point is None or len(point) < 2:
            raise InvalidArgumentError("place needs a target name or an [x, y] point")
        xy = np.asarray(point[:2], float) + offset
        floor = self.floor_z
        return xy, self._support_top(xy, held, floor) + half, f"({xy[0]:.3f}, {xy[1]:.3f})", sk.place_tolerance, floor + half

    def _free_top(self, obj: ObjectInfo, what: str, error: type[TeachbotError] = GraspFailedError) -> None:
        """Raise ``error`` ('<what>: 'X' rests on it; move that first') when a block lies on ``obj``."""
        above_it = self._resting_on(obj)
        if above_it:
            raise error(f"{what}: {', '.join(repr(n) for n in above_it)} rests on it; move that first")

    def _clear_yaws(self, obj: ObjectInfo, grasp_z: float, yaw: float, period: float, opening: float) -> list[float]:
        """The hand yaws (``yaw``, then turned by ``period`` either way) at which the open fingers come down beside
        ``obj`` on nothing else; a GraspFailedError naming what is in the way when there is none."""
        others = [o for o in self.source.objects().values() if o.name not in (obj.name, self.held)]
        blocked: dict[str, None] = {}
        clear = []
        for candidate in (yaw, yaw + period, yaw - period):
            axis = closing_axis(self.kin.grasp_orientation(candidate))
            names = finger_blockers(obj, others, grasp_z, axis, opening, FINGERTIP_DEPTH)
            blocked.update(dict.fromkeys(names))
            if not names:
                clear.append(candidate)
        if not clear:
            gaps = ", ".join(f"{n!r} {100 * self._gap(obj, n):.1f} cm from it" for n in blocked)
            raise GraspFailedError(f"cannot pick {obj.name!r}: no room for the gripper's fingers beside it, {gaps}, "
                                   f"{'is' if len(blocked) == 1 else 'are'} in the way on every side the fingers could go; move that first")
        return clear

    def _gap(self, obj: ObjectInfo, name: str) -> float:
        """Horizontal distance between the sides of ``obj`` and ``name``'s boxes (0 when they touch)."""
        other = self.source.objects()[name]
        d = np.abs(other.position[:2] - obj.position[:2]) - (np.asarray(other.size[:2]) + np.asarray(obj.size[:2])) / 2
        return float(np.linalg.norm(np.maximum(d, 0.0)))

    def _resting_on(self, obj: ObjectInfo) -> list[str]:
        """Names of the objects lying on ``obj`` (from positions: the object list of a perception
        system carries no support relations)."""
        names = []
        for o in self.source.objects().values():
            if o.name == obj.name or o.category != "block":
                continue
            dz = o.position[2] - obj.position[2]
            overlap = float(np.hypot(*(o.position[:2] - obj.position[:2]))) < 0.75 * (o.size[0] + obj.size[0]) / 2
            if overlap and 0.5 * obj.size[2] < dz < obj.size[2] + o.size[2]:
                names.append(o.name)
        return sorted(names)

    def _support_top(self, xy: np.ndarray, held: ObjectInfo, base: float) -> float:
        """Height of the highest surface under a held object put down at ``xy``: ``base`` or the top
        of any block (not the held one) whose footprint overlaps it, or a bowl's floor."""
        top = base
        for o in self.source.objects().values():
            if o.name == held.name:
                continue
            reach = (o.size[0] + held.size[0]) / 2 * 0.9 if o.category == "block" else o.size[0] / 2
            if float(np.hypot(*(o.position[:2] - xy))) < reach:
                surface = o.position[2] + o.size[2] / 2 if o.category == "block" else o.position[2] + BOWL_FLOOR
                top = max(top, surface)
        return top

    def _refresh_held(self) -> None:
        """Forget a held object once the fingers say nothing is there: closed on nothing, wide open,
        or the object is no longer between them (a scene reset, a failed motion that dropped it)."""
        if not self.held:
            return
        width = self.arm.gripper_width()
        gone = width < self.profile.gripper.holding_min_width or width > self.profile.gripper.max_width - 0.005
        if not gone:
            obj = self.source.objects().get(self.held)
            here, _ = self.kin.fk(self.arm.joint_positions())
            # a tall object is held near its top: its centre may hang half its height below the fingers
            gone = obj is None or float(np.linalg.norm(obj.position - here)) > HELD_MAX_DISTANCE + obj.size[2] / 2
        if gone:
            self.held = ""


def _grasp_yaw(obj: ObjectInfo) -> tuple[float, float]:
    """Hand yaw for a top-down grasp of ``obj`` and the turn that gives the same grasp.

    At hand yaw 0 the fingers close along the frame's y axis. A square footprint (a block, a round
    thing) is gripped alike from its four sides: the yaw is folded into [-pi/4, pi/4]. An elongated
    one must be gripped across its short side: folded into [-pi/2, pi/2], turned by half turns only."""
    yaw = obj.yaw if obj.size[0] >= obj.size[1] else obj.yaw + math.pi / 2
    if abs(float(obj.size[0]) - float(obj.size[1])) < ELONGATED:
        return float((yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4), math.pi / 2
    return float((yaw + math.pi / 2) % math.pi - math.pi / 2), math.pi
