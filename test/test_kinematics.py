"""Kinematics model, trajectory timing and the safety limits."""

from __future__ import annotations

import numpy as np
import pybullet as pb
import pytest

from teachbot.errors import LimitExceededError, OutOfWorkspaceError, UnreachableError
from teachbot.skills.kinematics import IK_TOLERANCE, KinematicsModel
from teachbot.skills.motion import JointTrajectory, SafetyLimits, time_path
from teachbot.skills.planning import PathPlanner, line_points


@pytest.fixture(scope="module")
def kin(profile):
    k = KinematicsModel(profile)
    yield k
    k.close()


@pytest.fixture(scope="module")
def limits(kin, profile):
    return SafetyLimits(profile.safety, kin.max_velocity, kin.lower, kin.upper)


@pytest.mark.parametrize(
    "xyz",
    [(0.0, -0.5, 0.02), (0.2, -0.3, 0.02), (-0.2, -0.7, 0.02), (0.25, -0.75, 0.03), (-0.25, -0.25, 0.05), (0.25, -0.3, 0.35)],
)
def test_ik_reaches_workspace_points_pointing_down(kin, profile, xyz):
    target = np.array(xyz)
    orientation = kin.grasp_orientation(0.3)
    q = kin.ik(target, orientation, np.array(profile.home))
    reached, quat = kin.fk(q)
    assert np.linalg.norm(reached - target) < IK_TOLERANCE
    assert 1 - abs(np.dot(quat, orientation)) < 0.02
    kin.check_limits(q)


def test_fk_of_home_is_above_the_table(kin, profile):
    position, _ = kin.fk(np.array(profile.home))
    assert position[2] > 0.3 and -0.6 < position[1] < -0.3


def test_unreachable_point_says_so(kin, profile):
    with pytest.raises(UnreachableError, match="cannot reach"):
        kin.ik(np.array([0.0, -1.2, 0.02]), kin.grasp_orientation(), np.array(profile.home))


def test_joint_limit_check_names_the_joint(kin, profile):
    q = np.array(profile.home)
    q[3] = 0.5  # panda_joint4 must stay negative
    with pytest.raises(LimitExceededError, match="panda_joint4"):
        kin.check_limits(q)


def test_time_path_respects_speed_factor(kin, profile, limits):
    start = np.array(profile.home)
    goal = start + np.array([0.8, -0.3, 0.2, 0.4, 0.0, -0.3, 1.0])
    for factor in (0.1, 0.5, 1.0):
        traj = time_path(profile.arm_joints, np.array([start, goal]), kin.max_velocity, factor)
        q = np.vstack([start, traj.positions])
        t = np.concatenate([[0.0], traj.times])
        speed = np.abs(np.diff(q, axis=0)) / np.diff(t)[:, None]
        assert np.all(speed <= kin.max_velocity * factor * 1.001)
        assert np.allclose(traj.positions[-1], goal)
        limits.check_trajectory(start, traj)
    slow = time_path(profile.arm_joints, np.array([start, goal]), kin.max_velocity, 0.1)
    fast = time_path(profile.arm_joints, np.array([start, goal]), kin.max_velocity, 1.0)
    assert slow.duration == pytest.approx(10 * fast.duration, rel=1e-6)


def test_safety_rejects_speed_factor_above_the_limit(limits, profile):
    assert limits.speed_factor(0) == profile.safety.default_speed_factor
    assert limits.speed_factor(0.3) == 0.3
    for bad in (-0.1, profile.safety.max_speed_factor + 0.01, 5.0):
        with pytest.raises(LimitExceededError, match="safety.max_speed_factor"):
            limits.speed_factor(bad)


def test_safety_rejects_points_outside_the_workspace(limits):
    limits.check_point(np.array([0.0, -0.5, 0.1]))
    for xyz in ((0.31, -0.5, 0.1), (0.0, -0.1, 0.1), (0.0, -0.5, -0.01), (0.0, -0.5, 0.6)):
        with pytest.raises(OutOfWorkspaceError, match="outside the workspace x in"):
            limits.check_point(np.array(xyz))


def test_safety_rejects_a_too_fast_or_out_of_range_trajectory(limits, profile, kin):
    start = np.array(profile.home)
    jump = JointTrajectory(profile.arm_joints, np.array([0.05]), np.array([start + 0.5]))
    with pytest.raises(LimitExceededError, match="rad/s"):
        limits.check_trajectory(start, jump)
    beyond = start.copy()
    beyond[0] = kin.upper[0] + 0.1
    with pytest.raises(LimitExceededError, match="outside"):
        limits.check_trajectory(start, JointTrajectory(profile.arm_joints, np.array([10.0]), np.array([beyond])))


# ------------------------------------------------------------------ planning cost (issue 24, item 5)
@pytest.fixture()
def ik_calls(monkeypatch):
    """Counts PyBullet IK calls (the planner's cost) from here on."""
    calls = {"n": 0}
    solve = pb.calculateInverseKinematics

    def counting(*args, **kwargs):
        calls["n"] += 1
        return solve(*args, **kwargs)

    monkeypatch.setattr(pb, "calculateInverseKinematics", counting)
    return calls


ABOVE, GRASP = np.array([0.1, -0.5, 0.12]), np.array([0.1, -0.5, 0.02])


@pytest.mark.parametrize("xyz", [(0.0, -0.5, 0.02), (0.2, -0.3, 0.02), (-0.2, -0.7, 0.02)])
def test_ik_stops_refining_once_the_error_no_longer_falls(kin, profile, ik_calls, xyz):
    """Null-space IK stalls 1.5-3 mm off: once within IK_TOLERANCE it stops instead of making all its
    eight calls (which crept the posture and cost most of a pick-and-place's planning)."""
    target = np.array(xyz)
    q = kin.ik(target, kin.grasp_orientation(0.3), np.array(profile.home))
    assert np.linalg.norm(kin.fk(q)[0] - target) < IK_TOLERANCE
    assert ik_calls["n"] <= 3


def test_a_straight_line_costs_at_most_two_ik_calls_per_waypoint(kin, profile, ik_calls):
    orientation = kin.grasp_orientation(0.2)
    q0 = kin.ik(ABOVE, orientation, np.array(profile.home))
    start, _ = kin.fk(q0)
    ik_calls["n"] = 0
    path = PathPlanner(kin, np.array(profile.home)).trace(q0, start, GRASP, orientation)
    assert path is not None and ik_calls["n"] <= 2 * (len(path) - 1)
    for q, point in zip(path[1:], line_points(start, GRASP)):
        assert np.linalg.norm(kin.fk(q)[0] - point) < IK_TOLERANCE
    assert np.max(np.abs(np.diff(path, axis=0))) < 0.1  # one posture carries the line: no jumps
