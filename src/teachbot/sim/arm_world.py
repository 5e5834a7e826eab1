"""A position-controlled arm with a parallel gripper in a PyBullet client: the part every simulated world shares.

From the outside it behaves like a real robot's controllers: it takes joint trajectories (followed in
simulated time, interpolated like a joint_trajectory_controller) and gripper width commands, and it
reports joint states. A world (``TabletopWorld``, ``HouseholdWorld``) adds its furniture and objects
and says which bodies the grasp assist may hold. No ROS here: ``teachbot.nodes.sim_node`` wraps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pybullet as pb

from teachbot.errors import ControllerError
from teachbot.robot_profile import RobotProfile
from teachbot.sim.camera import CameraFrame, CameraSpec, render


@dataclass
class _Trajectory:
    joint_indices: list[int]
    start_time: float
    times: np.ndarray  # (K,) seconds from start, first entry 0 (the state when it was received)
    positions: np.ndarray  # (K, n)


class ArmWorld:
    """One PyBullet client holding the robot; subclasses build the world around it."""

    def __init__(self, profile: RobotProfile, *, gui: bool = False, time_step: float = 1.0 / 240.0, grasp_assist: bool = True) -> None:
        self.profile = profile
        self.time_step = time_step
        self.grasp_assist = grasp_assist
        self.client = pb.connect(pb.GUI if gui else pb.DIRECT)
        if self.client < 0:
            raise ControllerError("cannot start PyBullet (GUI needs a display; drop --gui to run headless)")
        pb.setGravity(0, 0, -9.81, physicsClientId=self.client)
        pb.setTimeStep(time_step, physicsClientId=self.client)
        self.sim_time = 0.0
        self._trajectory: _Trajectory | None = None
        self._grasp_constraint: int | None = None
        self._grasped: str | None = None
        self._gripper_target = profile.gripper.max_width

    def _graspables(self) -> dict[str, int]:
        """Bodies the grasp assist may fix to the hand, by name."""
        return {}

    def _after_step(self) -> None:
        """Called after every physics step (a mobile base moves here)."""

    def _load_robot(self) -> None:
        p = self.profile
        self.robot_id = pb.loadURDF(
            str(p.urdf),
            p.base_position,
            pb.getQuaternionFromEuler(p.base_rpy),
            useFixedBase=True,
            flags=pb.URDF_USE_INERTIA_FROM_FILE,
            physicsClientId=self.client,
        )
        index = {}
        links = {}
        self._limits: dict[int, tuple[float, float, float, float]] = {}
        for j in range(pb.getNumJoints(self.robot_id, physicsClientId=self.client)):
            info = pb.getJointInfo(self.robot_id, j, physicsClientId=self.client)
            index[info[1].decode()] = j
            links[info[12].decode()] = j
            self._limits[j] = (info[8], info[9], info[10], info[11])  # lower, upper, effort, velocity
        missing = [n for n in p.joint_names if n not in index]
        if missing or p.ee_link not in links:
            raise ControllerError(
                f"{p.urdf}: joints {missing} / link {p.ee_link!r} not found; fix robot.arm_joints, "
                f"finger_joints or ee_link in {p.source}"
            )
        self.joint_index = {n: index[n] for n in p.joint_names}
        self.arm_indices = [index[n] for n in p.arm_joints]
        self.finger_indices = [index[n] for n in p.finger_joints]
        self.ee_index = links[p.ee_link]
        self.hand_index = pb.getJointInfo(self.robot_id, self.finger_indices[0], physicsClientId=self.client)[16]
        for j in self.finger_indices:
            pb.changeDynamics(self.robot_id, j, lateralFriction=1.5, physicsClientId=self.client)
        self.reset_robot()

    def reset_robot(self) -> None:
        """Arm at home, gripper open, no trajectory, nothing held."""
        self._release_grasp()
        for j, q in zip(self.arm_indices, self.profile.home):
            pb.resetJointState(self.robot_id, j, q, physicsClientId=self.client)
        half = self.profile.gripper.max_width / 2
        for j in self.finger_indices:
            pb.resetJointState(self.robot_id, j, half, physicsClientId=self.client)
        self._trajectory = None
        self._gripper_target = self.profile.gripper.max_width
        self._apply_arm_targets(np.array(self.profile.home), np.zeros(len(self.arm_indices)), self.arm_indices)
        self._apply_gripper()

    # ----------------------------------------------------------------- controllers
    def command_trajectory(self, joint_names: list[str], times: list[float], positions: list[list[float]]) -> None:
        """Follow a joint trajectory from now; like a joint_trajectory_controller, the current state is
        the implicit first point. Finger joints are not part of the arm controller."""
        if not times or len(times) != len(positions):
            raise ControllerError("trajectory needs as many points as time stamps, and at least one")
        unknown = [n for n in joint_names if n not in self.profile.arm_joints]
        if unknown:
            raise ControllerError(
                f"trajectory names joints {unknown} this arm controller does not have; expected {list(self.profile.arm_joints)}"
            )
        if any(len(p) != len(joint_names) for p in positions) or any(b <= a for a, b in zip(times, times[1:])) or times[0] < 0:
            raise ControllerError("trajectory points must have one position per joint and strictly increasing times")
        indices = [self.joint_index[n] for n in joint_names]
        current = [pb.getJointState(self.robot_id, j, physicsClientId=self.client)[0] for j in indices]
        t = np.array([0.0, *times]) if times[0] > 0 else np.array(times, float)
        q = np.array([current, *positions]) if times[0] > 0 else np.array(positions, float)
        self._trajectory = _Trajectory(indices, self.sim_time, t, q)

    def hold(self) -> None:
        """Stop where the arm is now (emergency stop, cancel)."""
        positions = [pb.getJointState(self.robot_id, j, physicsClientId=self.client)[0] for j in self.arm_indices]
        self._trajectory = None
        self._apply_arm_targets(np.array(positions), np.zeros(len(positions)), self.arm_indices)

    def command_gripper(self, width: float, effort: float = 0.0) -> None:
        """Move both fingers to a total opening ``width`` (clamped to the hardware range)."""
        self._gripper_target = float(np.clip(width, 0.0, self.profile.gripper.max_width))
        self._gripper_effort = effort if effort > 0 else self.profile.gripper.effort
        if self._gripper_target > self.gripper_width() + 1e-3:
            self._release_grasp()
        self._apply_gripper()

    def _apply_gripper(self) -> None:
        effort = getattr(self, "_gripper_effort", self.profile.gripper.effort)
        for j in self.finger_indices:
            pb.setJointMotorControl2(self.robot_id, j, pb.POSITION_CONTROL, targetPosition=self._gripper_target / 2,
                                     force=effort, maxVelocity=self._limits[j][3] or 0.2, physicsClientId=self.client)

    def _apply_arm_targets(self, q: np.ndarray, qd: np.ndarray, indices: list[int]) -> None:
        pb.setJointMotorControlArray(
            self.robot_id, indices, pb.POSITION_CONTROL, targetPositions=q.tolist(), targetVelocities=qd.tolist(),
            forces=[self._limits[j][2] for j in indices], positionGains=[0.3] * len(indices),
            velocityGains=[1.0] * len(indices), physicsClientId=self.client,
        )

    def _track(self) -> None:
        tr = self._trajectory
        if tr is None:
            return
        t = self.sim_time - tr.start_time
        if t >= tr.times[-1]:
            self._apply_arm_targets(tr.positions[-1], np.zeros(len(tr.joint_indices)), tr.joint_indices)
            self._trajectory = None
            return
        k = int(np.searchsorted(tr.times, t, side="right")) - 1
        dt = tr.times[k + 1] - tr.times[k]
        alpha = (t - tr.times[k]) / dt
        q = tr.positions[k] + alpha * (tr.positions[k + 1] - tr.positions[k])
        qd = (tr.positions[k + 1] - tr.positions[k]) / dt
        self._apply_arm_targets(q, qd, tr.joint_indices)

    def step(self, n: int = 1) -> None:
        """Advance the physics by ``n`` steps, following the active trajectory."""
        for _ in range(n):
            self._track()
            pb.stepSimulation(physicsClientId=self.client)
            self.sim_time += self.time_step
            self._after_step()
            if self.grasp_assist and self._grasp_constraint is None and self._gripper_target < self.profile.gripper.max_width / 2:
                self._try_grasp()

    @property
    def moving(self) -> bool:
        return self._trajectory is not None

    # ----------------------------------------------------------------- grasping
    def _try_grasp(self) -> None:
        """Fix a block to the hand once both fingers touch it: a stable stand-in for friction grasps."""
        left, right = self.finger_indices
        for name, body in self._graspables().items():
            touch_l = pb.getContactPoints(self.robot_id, body, left, -1, physicsClientId=self.client)
            if not touch_l:
                continue
            if not pb.getContactPoints(self.robot_id, body, right, -1, physicsClientId=self.client):
                continue
            hand = pb.getLinkState(self.robot_id, self.hand_index, physicsClientId=self.client)
            obj_pos, obj_orn = pb.getBasePositionAndOrientation(body, physicsClientId=self.client)
            inv_pos, inv_orn = pb.invertTransform(hand[0], hand[1])
            rel_pos, rel_orn = pb.multiplyTransforms(inv_pos, inv_orn, obj_pos, obj_orn)
            self._grasp_constraint = pb.createConstraint(
                self.robot_id, self.hand_index, body, -1, pb.JOINT_FIXED, [0, 0, 0], rel_pos, [0, 0, 0],
                parentFrameOrientation=rel_orn, physicsClientId=self.client,
            )
            pb.changeConstraint(self._grasp_constraint, maxForce=200, physicsClientId=self.client)
            self._grasped = name
            return

    def _release_grasp(self) -> None:
        if self._grasp_constraint is not None:
            pb.removeConstraint(self._grasp_constraint, physicsClientId=self.client)
        self._grasp_constraint = None
        self._grasped = None

    def held_object(self) -> str:
        """Name of the object between the fingers, or '' when none is."""
        if self._grasped is not None:
            return self._grasped
        left, right = self.finger_indices
        for name, body in self._graspables().items():
            if pb.getContactPoints(self.robot_id, body, left, -1, physicsClientId=self.client) \
                    and pb.getContactPoints(self.robot_id, body, right, -1, physicsClientId=self.client):
                return name
        return ""

    # ----------------------------------------------------------------- state
    def joint_state(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Names, positions, velocities and efforts of the arm and finger joints."""
        names = list(self.profile.joint_names)
        states = pb.getJointStates(self.robot_id, [self.joint_index[n] for n in names], physicsClientId=self.client)
        return names, np.array([s[0] for s in states]), np.array([s[1] for s in states]), np.array([s[3] for s in states])

    def gripper_width(self) -> float:
        return float(sum(pb.getJointState(self.robot_id, j, physicsClientId=self.client)[0] for j in self.finger_indices))

    def ee_position(self) -> np.ndarray:
        return np.array(pb.getLinkState(self.robot_id, self.ee_index, computeForwardKinematics=True, physicsClientId=self.client)[4])

    def render(self, spec: CameraSpec) -> CameraFrame:
        return render(spec, self.client)

    def close(self) -> None:
        if pb.isConnected(self.client):
            pb.disconnect(self.client)
