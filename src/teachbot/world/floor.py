"""Where a mobile base stands and goes on the floor: poses, timed paths and obstacle footprints.

Plain data shared by the simulator (which drives the base along a path), the navigation skill (which
plans one) and perception; no physics and no planning here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Footprint:
    """An obstacle: a rectangle on the floor, ``yaw`` radians about its centre."""

    name: str
    centre: tuple[float, float]
    half_extents: tuple[float, float]
    yaw: float = 0.0


@dataclass(frozen=True)
class BasePose:
    """Where the base stands on the floor: metres, and radians about the vertical."""

    x: float
    y: float
    yaw: float


def wrap_angle(angle: float) -> float:
    """``angle`` in radians, wrapped to [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


@dataclass(frozen=True)
class BasePath:
    """Poses and the times (seconds from the start, strictly increasing from 0.0) they are reached."""

    poses: tuple[BasePose, ...]
    times: tuple[float, ...]

    def pose_at(self, t: float) -> BasePose:
        """Linear interpolation in x, y and the shorter way round in yaw; clamped to [0, duration]."""
        if t <= 0.0:
            return self.poses[0]
        if t >= self.times[-1]:
            return self.poses[-1]
        k = int(np.searchsorted(self.times, t, side="right")) - 1
        a, b = self.poses[k], self.poses[k + 1]
        s = (t - self.times[k]) / (self.times[k + 1] - self.times[k])
        return BasePose(a.x + s * (b.x - a.x), a.y + s * (b.y - a.y), wrap_angle(a.yaw + s * wrap_angle(b.yaw - a.yaw)))

    @property
    def duration(self) -> float:
        return self.times[-1]

    @property
    def length(self) -> float:
        return sum(math.hypot(b.x - a.x, b.y - a.y) for a, b in zip(self.poses, self.poses[1:]))
