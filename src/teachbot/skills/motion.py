"""Time-parametrised joint trajectories and the safety checks every trajectory passes before it is sent.

A path (joint waypoints) is timed with a minimum-jerk profile whose peak joint speed equals
``speed_factor`` times each joint's URDF velocity limit; :class:`SafetyLimits` refuses anything that
would leave the workspace, exceed the joint limits or go faster than ``max_speed_factor`` allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teachbot.errors import LimitExceededError, OutOfWorkspaceError
from teachbot.robot_profile import SafetyConfig

MIN_JERK_PEAK = 1.875  # peak of d/dtau of 10 tau^3 - 15 tau^4 + 6 tau^5
MIN_SEGMENT_TIME = 0.15  # seconds: even a tiny motion is not a jump


@dataclass(frozen=True)
class JointTrajectory:
    """Points after the current state: ``times[k]`` seconds from start, ``positions[k]`` per arm joint."""

    joint_names: tuple[str, ...]
    times: np.ndarray  # (K,)
    positions: np.ndarray  # (K, n)

    @property
    def duration(self) -> float:
        return float(self.times[-1]) if len(self.times) else 0.0


@dataclass(frozen=True)
class SafetyLimits:
    """Hard limits from config; every skill goes through these and no argument can widen them."""

    config: SafetyConfig
    max_velocity: np.ndarray  # URDF joint velocity limits, rad/s
    lower: np.ndarray
    upper: np.ndarray

    def speed_factor(self, requested: float) -> float:
        """The speed factor to use: the default for 0, an error above the maximum or below zero."""
        if requested == 0:
            return self.config.default_speed_factor
        limit = self.config.max_speed_factor
        if not 0 < requested <= limit:
            raise LimitExceededError(
                f"speed_factor {requested:g} is outside (0, {limit:g}] (safety.max_speed_factor); use a value in that range"
            )
        return float(requested)

    def check_point(self, xyz: np.ndarray, what: str = "target") -> None:
        """Raise OutOfWorkspaceError when a gripper position lies outside the configured box."""
        for axis, value in zip("xyz", xyz):
            lo, hi = self.config.workspace[axis]
            if not lo - 1e-9 <= value <= hi + 1e-9:
                bounds = ", ".join(f"{a} in [{self.config.workspace[a][0]:g}, {self.config.workspace[a][1]:g}]" for a in "xyz")
                raise OutOfWorkspaceError(
                    f"{what} ({xyz[0]:.3f}, {xyz[1]:.3f}, {xyz[2]:.3f}) is outside the workspace {bounds}; "
                    f"choose a point inside it"
                )

    def check_trajectory(self, start: np.ndarray, traj: JointTrajectory) -> None:
        """Joint limits at every point and speed on every segment, against the hard maximum.

        The start is where the arm is: it may sit a hair beyond a margined limit, and moving away
        from there must stay possible, so only the commanded points are limit-checked."""
        q = np.vstack([start, traj.positions])
        t = np.concatenate([[0.0], traj.times])
        points = traj.positions
        outside = (points < self.lower - 1e-6) | (points > self.upper + 1e-6)
        if np.any(outside):
            k, i = np.argwhere(outside)[0]
            raise LimitExceededError(
                f"trajectory point {k} puts joint {traj.joint_names[i]} at {points[k, i]:.3f} rad, outside "
                f"[{self.lower[i]:.3f}, {self.upper[i]:.3f}]"
            )
        dt = np.diff(t)
        if np.any(dt <= 0):
            raise LimitExceededError("trajectory times must increase strictly")
        speed = np.abs(np.diff(q, axis=0)) / dt[:, None]
        cap = self.max_velocity * self.config.max_speed_factor * 1.001
        if np.any(speed > cap):
            k, i = np.argwhere(speed > cap)[0]
            raise LimitExceededError(
                f"trajectory segment {k} moves joint {traj.joint_names[i]} at {speed[k, i]:.2f} rad/s, above "
                f"the limit {cap[i]:.2f} rad/s"
            )


def time_path(
    joint_names: tuple[str, ...],
    waypoints: np.ndarray,
    max_velocity: np.ndarray,
    speed_factor: float,
    samples: int = 12,
) -> JointTrajectory:
    """Time a joint path (first row = current state, not included in the output) with min-jerk timing.

    The path parameter is arc length in 'joint time' (each segment's slowest joint at full allowed
    speed), so the peak speed of any joint is at most ``speed_factor * max_velocity``.
    """
    waypoints = np.asarray(waypoints, float)
    seg = np.max(np.abs(np.diff(waypoints, axis=0)) / (max_velocity * speed_factor), axis=1)
    length = float(np.sum(seg))
    duration = max(MIN_SEGMENT_TIME, length * MIN_JERK_PEAK)
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    n = max(samples, 2 * (len(waypoints) - 1))
    tau = np.linspace(0.0, 1.0, n + 1)[1:]
    s = 10 * tau**3 - 15 * tau**4 + 6 * tau**5
    if length <= 0:
        positions = np.repeat(waypoints[-1:], n, axis=0)
    else:
        positions = np.stack([np.interp(s * length, cum, waypoints[:, i]) for i in range(waypoints.shape[1])], axis=1)
    return JointTrajectory(joint_names, tau * duration, positions)
