"""Kinematics from the robot's URDF, using a private PyBullet DIRECT client as the IK/FK model.

The same model serves a simulated and a real arm: it never touches the simulation's client.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pybullet as pb

from teachbot.errors import ConfigError, LimitExceededError, UnreachableError
from teachbot.robot_profile import RobotProfile

# metres between the asked and the reached gripper position: PyBullet's IK converges slowly near the
# joint limits; 5 mm leaves 15 mm per side when an 8 cm gripper closes on a 4 cm block
IK_TOLERANCE = 0.005
IK_ORIENTATION_TOLERANCE = 0.02  # 1 - |<q_asked, q_reached>|
# metres: once the error is within IK_TOLERANCE, an IK call that brings it down by less than this ends
# the refinement. Null-space IK stalls 1.5-3 mm off (its pull towards home); the further calls of the
# eight crept the posture a little towards home and made up most of a pick-and-place's planning time
IK_STALL = 0.0002
# extra IK starts tried when neither the seed nor home converges. Close in front of the Panda's base
# (the benchmark's "top side", 0.25 m out) pointing down is reachable only with the elbow turned out
# sideways, which PyBullet's local IK never finds from the usual postures; fixed starts spread over the
# joint ranges (deterministic, so a plan repeats) find it.
IK_EXTRA_STARTS = 24
IK_STARTS_SEED = 7
DISTINCT_POSTURE = 0.2  # rad: two IK answers further apart than this in some joint are different postures


class KinematicsModel:
    """Forward and inverse kinematics of the arm described by a :class:`RobotProfile`."""

    def __init__(self, profile: RobotProfile) -> None:
        self.profile = profile
        self.client = pb.connect(pb.DIRECT)
        try:
            self.body = pb.loadURDF(
                str(profile.urdf), profile.base_position, pb.getQuaternionFromEuler(profile.base_rpy),
                useFixedBase=True, physicsClientId=self.client,
            )
        except pb.error as exc:
            pb.disconnect(self.client)
            raise ConfigError(f"cannot load URDF {profile.urdf} ({exc}); fix robot.urdf in {profile.source}") from None
        joints, links = {}, {}
        self._movable: list[int] = []
        lower, upper, velocity = [], [], []
        for j in range(pb.getNumJoints(self.body, physicsClientId=self.client)):
            info = pb.getJointInfo(self.body, j, physicsClientId=self.client)
            joints[info[1].decode()] = j
            links[info[12].decode()] = j
            if info[2] != pb.JOINT_FIXED:
                self._movable.append(j)
                lower.append(info[8])
                upper.append(info[9])
                velocity.append(info[11])
        missing = [n for n in profile.arm_joints if n not in joints]
        if missing or profile.ee_link not in links:
            raise ConfigError(f"{profile.urdf}: joints {missing} or link {profile.ee_link!r} missing; fix {profile.source}")
        self.arm = [joints[n] for n in profile.arm_joints]
        self.ee = links[profile.ee_link]
        arm_pos = [self._movable.index(j) for j in self.arm]
        margin = profile.safety.joint_limit_margin
        self.lower = np.array([lower[i] for i in arm_pos]) + margin
        self.upper = np.array([upper[i] for i in arm_pos]) - margin
        self.max_velocity = np.array([velocity[i] or 1.0 for i in arm_pos])
        # IK works over all movable joints; pad the non-arm ones (fingers) with their own limits
        self._ik_lower, self._ik_upper = np.array(lower), np.array(upper)
        self._ik_lower[arm_pos], self._ik_upper[arm_pos] = self.lower, self.upper
        self._arm_pos = arm_pos
        self._rest = (self._ik_lower + self._ik_upper) / 2
        self._rest[arm_pos] = profile.home
        rng = np.random.default_rng(IK_STARTS_SEED)
        self._starts = [rng.uniform(self.lower, self.upper) for _ in range(IK_EXTRA_STARTS)]

    def _set(self, q: np.ndarray) -> None:
        for j, v in zip(self.arm, q):
            pb.resetJointState(self.body, j, float(v), physicsClientId=self.client)

    def fk(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gripper position and quaternion (x, y, z, w) in the base frame for arm joints ``q``."""
        self._set(q)
        state = pb.getLinkState(self.body, self.ee, computeForwardKinematics=True, physicsClientId=self.client)
        return np.array(state[4]), np.array(state[5])

    def link_points(self, q: np.ndarray) -> np.ndarray:
        """Points along the arm for arm joints ``q`` (base frame): the origins of the links from the
        second joint to the wrist and the middles between consecutive ones."""
        self._set(q)
        origins = np.array([pb.getLinkState(self.body, j, computeForwardKinematics=True, physicsClientId=self.client)[4]
                            for j in self.arm[1:]])
        return np.vstack([origins, (origins[:-1] + origins[1:]) / 2])

    def grasp_orientation(self, yaw: float = 0.0) -> np.ndarray:
        """Top-down gripper orientation, turned by ``yaw`` about the vertical."""
        r, p, y = self.profile.grasp_rpy
        return np.array(pb.getQuaternionFromEuler([r, p, y + yaw]))

    def check_limits(self, q: np.ndarray) -> None:
        """Raise LimitExceededError when a joint value lies outside the (margined) URDF limits."""
        bad = [i for i, v in enumerate(q) if not self.lower[i] - 1e-6 <= v <= self.upper[i] + 1e-6]
        if bad:
            i = bad[0]
            raise LimitExceededError(
                f"joint {self.profile.arm_joints[i]} would reach {q[i]:.3f} rad, outside its limit "
                f"[{self.lower[i]:.3f}, {self.upper[i]:.3f}]; choose another target"
            )

    def ik(self, position: np.ndarray, orientation: np.ndarray, seed: np.ndarray, local: bool = False) -> np.ndarray:
        """Arm joints reaching ``position``/``orientation``, preferring solutions near ``seed``.

        Null-space IK towards the home posture first (keeps the elbow up), then a plain refinement,
        from ``seed`` and, if that fails and ``local`` is false, from the home posture and then from
        fixed starts spread over the joint ranges; every answer is checked by FK and against the
        joint limits. ``local`` keeps the answer in the seed's posture (for waypoints of a line).
        """
        best_err = np.inf
        for q, err in self._attempts(position, orientation, seed, local):
            if q is not None:
                return q
            best_err = min(best_err, err)
        raise UnreachableError(
            f"cannot reach ({position[0]:.3f}, {position[1]:.3f}, {position[2]:.3f}) with the gripper pointing "
            f"down (closest {best_err * 100:.1f} cm away); the arm cannot get there, choose another point"
        )

    def ik_solutions(self, position: np.ndarray, orientation: np.ndarray, seed: np.ndarray) -> Iterator[np.ndarray]:
        """Every distinct posture reaching ``position``/``orientation`` that the starts of :meth:`ik`
        find, the one nearest ``seed`` first; computed lazily."""
        found: list[np.ndarray] = []
        for q, _ in self._attempts(position, orientation, seed, False):
            if q is not None and all(np.max(np.abs(q - f)) > DISTINCT_POSTURE for f in found):
                found.append(q)
                yield q

    def _attempts(
        self, position: np.ndarray, orientation: np.ndarray, seed: np.ndarray, local: bool
    ) -> Iterator[tuple[np.ndarray | None, float]]:
        """(posture or None, its error) for each start in turn."""
        position = np.asarray(position, float)
        starts = [np.asarray(seed, float)]
        if not local:
            starts += [np.asarray(self.profile.home, float), *self._starts]
        for start in starts:
            q, err = self._solve(position, orientation, start)
            ok = err < IK_TOLERANCE and self._clear_of_table(q, position)
            yield (q if ok else None), err

    def _clear_of_table(self, q: np.ndarray, target: np.ndarray) -> bool:
        """No link origin of the arm past the shoulder below the table top (the base's height):
        postures from the extra starts may fold an elbow into the table."""
        self._set(q)
        for j in self.arm[2:]:
            z = pb.getLinkState(self.body, j, computeForwardKinematics=True, physicsClientId=self.client)[4][2]
            if z < self.profile.base_position[2]:
                return False
        return True

    def _solve(self, position: np.ndarray, orientation: np.ndarray, seed: np.ndarray) -> tuple[np.ndarray, float]:
        """Up to 8 null-space IK calls, each refining the last, then (if still off) up to 8 plain ones;
        each series stops once the error is within IK_TOLERANCE / 4, or within IK_TOLERANCE and no
        longer falling by IK_STALL."""
        best, best_err = seed, np.inf
        self._set(seed)
        for null_space in (True, False):
            for _ in range(8):
                if null_space:
                    sol = pb.calculateInverseKinematics(
                        self.body, self.ee, position.tolist(), orientation.tolist(),
                        lowerLimits=self._ik_lower.tolist(), upperLimits=self._ik_upper.tolist(),
                        jointRanges=(self._ik_upper - self._ik_lower).tolist(), restPoses=self._rest.tolist(),
                        maxNumIterations=100, residualThreshold=1e-6, physicsClientId=self.client,
                    )
                else:
                    sol = pb.calculateInverseKinematics(
                        self.body, self.ee, position.tolist(), orientation.tolist(),
                        maxNumIterations=100, residualThreshold=1e-6, physicsClientId=self.client,
                    )
                q = np.clip(np.array([sol[i] for i in self._arm_pos]), self.lower, self.upper)
                reached, quat = self.fk(q)
                err = float(np.linalg.norm(reached - position))
                gain = 0.0
                if err < best_err and 1 - abs(float(np.dot(quat, orientation))) < IK_ORIENTATION_TOLERANCE:
                    best, best_err, gain = q, err, best_err - err
                if err < IK_TOLERANCE / 4 or (best_err < IK_TOLERANCE and gain < IK_STALL):
                    break
            if best_err < IK_TOLERANCE:
                break
        return best, best_err

    def close(self) -> None:
        if pb.isConnected(self.client):
            pb.disconnect(self.client)
