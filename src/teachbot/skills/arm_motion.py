"""How the skills move the arm: timed joint paths sent through the safety limits, straight lines, the gripper,
and the waits that judge completion on the arm's own clock.

:class:`ArmMotion` is the part of :class:`~teachbot.skills.library.SkillLibrary` (and of the household
library built on it) that commands the arm; the skills themselves, and what they know of the objects,
stay in the library. Pure Python: the arm is an :class:`~teachbot.skills.interfaces.ArmInterface`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from teachbot.errors import MotionTimeoutError, UnreachableError
from teachbot.robot_profile import RobotProfile
from teachbot.skills.interfaces import ArmInterface, CancelToken, ObjectSource
from teachbot.skills.kinematics import KinematicsModel
from teachbot.skills.motion import JointTrajectory, SafetyLimits, time_path
from teachbot.skills.planning import PathPlanner

GRIPPER_STILL_TIME = 0.06  # seconds of arm time without finger motion that count as stopped
CONTACT_STILL_TIME = 0.15  # seconds of arm time without joint motion that end a guarded move in contact
CONTACT_MAX_ERROR = 0.15  # rad: a guarded move that stops this close to its goal stopped on contact
# a wait also gives up once the arm's clock has not moved on for this many times its allowance in wall
# seconds, so a frozen simulator or driver cannot hang a skill; a slow but running one gets its full allowance
WALL_BACKSTOP_FACTOR = 4.0
SWEEP_CLEARANCE = 0.05  # metres between a swinging gripper (or what it holds) and the highest object


class ArmDeadline:
    """A time allowance measured on the arm's clock (simulated time may run faster or slower than
    the wall), with a wall-clock backstop for a clock that has stopped. A clock that jumps back (a
    simulator reset rewinds it to zero) counts as no time passing, never as negative time.

    Where commands travel as messages (``commands_travel``), it expires once the allowance has passed on the
    arm's clock *and* on the wall: a simulator that runs slower than the wall (a loaded machine) gets its full
    simulated allowance, and one that runs faster (``real_time_factor`` above 1, or 0) does not spend the
    allowance while the command is still on its way to it (a message that waits 1 s for a busy executor is 4
    simulated seconds at 4x). A real arm's clock is the wall's, so for it this is the allowance as it reads. An
    arm in this process (the simulator stepped by the skill itself) counts its own clock only, so its outcome
    does not depend on the machine's speed. The backstop counts only wall time during which the arm's clock
    stood still (or went back): a slow clock is not a stopped one."""

    def __init__(self, arm: ArmInterface, seconds: float, wall: Callable[[], float] = time.monotonic,
                 commands_travel: bool = True) -> None:
        self._arm = arm
        self._seconds = seconds
        self._wall = wall
        self._on_the_wall = commands_travel
        self._last = arm.now()
        self._elapsed = 0.0
        self._wall_start = self._wall_moved = wall()

    def elapsed(self) -> float:
        """Arm-clock seconds since the allowance started."""
        now = self._arm.now()
        if now > self._last:
            self._elapsed += now - self._last
            self._wall_moved = self._wall()
        self._last = now
        return self._elapsed

    def expired(self) -> bool:
        elapsed, wall = self.elapsed(), self._wall()
        if elapsed > self._seconds and (not self._on_the_wall or wall - self._wall_start > self._seconds):
            return True
        return wall - self._wall_moved > WALL_BACKSTOP_FACTOR * self._seconds


class ArmMotion:
    """Arm and gripper motions of a skill library; the library sets the attributes below."""

    profile: RobotProfile
    arm: ArmInterface
    source: ObjectSource
    kin: KinematicsModel
    planner: PathPlanner
    safety: SafetyLimits
    held: str
    _cancel: CancelToken

    def _deadline(self, seconds: float) -> ArmDeadline:
        """An allowance of ``seconds`` on this arm's clock (see ArmDeadline)."""
        return ArmDeadline(self.arm, seconds, commands_travel=self.arm.commands_travel)

    def _current_yaw(self) -> float:
        """Yaw of the hand now, relative to the top-down grasp orientation."""
        _, quat = self.kin.fk(self.arm.joint_positions())
        x, y, z, w = quat
        return float(math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)) - self.profile.grasp_rpy[2])

    def _gripper(self, width: float, force: float = 0.0) -> float:
        """Command a width (with ``force``, or the profile's effort), wait until the fingers have
        stopped (on the arm's clock), return the width."""
        self.arm.send_gripper(width, force or self.profile.gripper.effort)
        deadline = self._deadline(2.0 + self.profile.skills.motion_timeout_margin)
        samples: list[tuple[float, float]] = []
        while not deadline.expired():
            self._cancel.check()
            self.arm.sleep(0.005)
            now, current = deadline.elapsed(), self.arm.gripper_width()
            samples.append((now, current))
            # still = no change since a sample at least GRIPPER_STILL_TIME old (a gap in the joint
            # states must not look like stillness, so the window starts at that older sample)
            older = [i for i, (t, _) in enumerate(samples) if t <= now - GRIPPER_STILL_TIME]
            window = [w for _, w in samples[older[-1]:]] if older else []
            settled = bool(window) and max(window) - min(window) < 5e-4
            # closing counts as done where the fingers stopped only once they have moved: still at the
            # start they may not have had the command yet (a loaded machine, a slow driver)
            moved = abs(current - samples[0][1]) > 2e-3
            if settled and (abs(current - width) < 2e-3 or (width == 0.0 and moved) or now - samples[0][0] > 0.5):
                return current
        raise MotionTimeoutError("the gripper did not stop moving; check the gripper driver, then retry")

    def _reachable_yaw(self, yaw: float, points: list[np.ndarray], period: float = math.pi / 2,
                       candidates: Sequence[float] | None = None) -> float:
        """``yaw`` or the same grasp turned by ``period`` (a quarter turn for a cube, a half turn for an
        elongated thing) for which every point has an IK solution; close to the robot's base only some
        hand orientations are within the joint limits. ``candidates``: the yaws to try instead, in order."""
        error: Exception | None = None
        for candidate in (yaw, yaw + period, yaw - period) if candidates is None else candidates:
            seed = self.arm.joint_positions()
            try:
                for point in points:
                    seed = self.kin.ik(point, self.kin.grasp_orientation(candidate), seed)
                return candidate
            except UnreachableError as exc:
                error = error or exc
        raise error or UnreachableError("no reachable hand orientation")

    def _settle(self, seconds: float) -> None:
        """Let ``seconds`` pass on the arm's clock (released objects come to rest)."""
        deadline = self._deadline(seconds + self.profile.skills.motion_timeout_margin)
        while deadline.elapsed() < seconds and not deadline.expired():
            self._cancel.check()
            self.arm.sleep(0.005)

    def _move_joint_space(self, xyz: np.ndarray, yaw: float, speed: float = 0.0, then: tuple[np.ndarray, ...] = ()) -> None:
        """Joint-space move to ``xyz``, arriving in a posture from which the straight lines through
        ``then`` (the moves that follow) can be followed; see :meth:`PathPlanner.goal_posture`."""
        self.safety.check_point(xyz)
        orientation, q0 = self.kin.grasp_orientation(yaw), self.arm.joint_positions()
        _, path = self.planner.goal_posture(xyz, orientation, q0, then, self._clear_height())
        self._execute_path(path, speed or self.profile.safety.default_speed_factor)

    def _move_line(self, xyz: np.ndarray, yaw: float, speed: float = 0.0, guarded: bool = False) -> None:
        """Straight-line gripper motion (see :meth:`PathPlanner.line`)."""
        self.safety.check_point(xyz)
        path = self.planner.line(self.arm.joint_positions(), xyz, self.kin.grasp_orientation(yaw))
        self._execute_path(path, speed or self.profile.safety.default_speed_factor, guarded)

    def _execute(self, q_goal: np.ndarray, speed: float) -> None:
        """Joint-space move to ``q_goal`` that keeps the gripper off the table (see :meth:`PathPlanner.joint_path`)."""
        self._execute_path(self.planner.joint_path(self.arm.joint_positions(), q_goal, self._clear_height()), speed)

    def _clear_height(self) -> float:
        """Gripper height above which a swing cannot touch anything on the table: the highest top of
        an object not held, plus what hangs below the gripper, plus SWEEP_CLEARANCE."""
        objects = self.source.objects()
        tops = [o.position[2] + o.size[2] / 2 for o in objects.values() if o.name != self.held]
        below = objects[self.held].size[2] / 2 if self.held in objects else 0.0
        return max(tops, default=0.0) + below + SWEEP_CLEARANCE

    def _execute_path(self, path: np.ndarray, speed: float, guarded: bool = False) -> None:
        """Time, check and send a joint path, then wait until the arm has reached its end.

        A ``guarded`` move (lowering a held object onto its support) also ends when, after its planned
        duration, the arm has stopped within CONTACT_MAX_ERROR of the goal: it is resting on contact,
        as an object held a little low in the fingers touches down before the planned height."""
        self.kin.check_limits(path[-1])
        traj = time_path(self.profile.arm_joints, path, self.kin.max_velocity, speed)
        # the arm may rest a hair beyond a margined limit (a goal on the limit, tracked with a little
        # overshoot); points interpolated from there would be refused, so they start at the limit
        traj = JointTrajectory(traj.joint_names, traj.times, np.clip(traj.positions, self.kin.lower, self.kin.upper))
        self.safety.check_trajectory(path[0], traj)
        self.arm.send_trajectory(traj.joint_names, traj.times, traj.positions)
        goal = traj.positions[-1]
        tol = self.profile.skills.position_tolerance
        # completion and the give-up deadline are judged on the arm's clock (a loaded machine may run
        # the simulator slower than the wall); _Deadline's wall backstop catches a frozen clock
        deadline = self._deadline(traj.duration + self.profile.skills.motion_timeout_margin)
        still_since, last_q = 0.0, self.arm.joint_positions()
        while True:
            self._cancel.check()
            self.arm.sleep(0.005)
            now, q = deadline.elapsed(), self.arm.joint_positions()
            err = float(np.max(np.abs(q - goal)))
            if now >= traj.duration and err < tol:
                return
            if np.max(np.abs(q - last_q)) > 1e-3:
                still_since, last_q = now, q
            if guarded and now >= traj.duration and now - still_since >= CONTACT_STILL_TIME and err < CONTACT_MAX_ERROR:
                self.arm.hold()  # stop pushing down where it rests
                return
            if deadline.expired():
                raise MotionTimeoutError(
                    f"the arm did not reach its goal within {traj.duration + self.profile.skills.motion_timeout_margin:.1f} s "
                    f"(still {err:.3f} rad away); check the controller and for obstacles, then retry"
                )
