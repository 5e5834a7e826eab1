"""Gripper paths in joint space: straight lines followed posture by posture, and joint-space moves that
keep the gripper off the table.

Close in front of the Panda's base a top-down gripper is reachable only in some postures, and the
postures found there may lie far (several radians) from the usual ones. Interpolating between such
postures swings the hand through whatever stands below: a straight line is therefore followed only
where one posture carries it through, and a joint-space move goes up and over when the direct
interpolation would dip.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from teachbot.errors import UnreachableError
from teachbot.skills.kinematics import KinematicsModel

CARTESIAN_STEP = 0.02  # metres between IK waypoints on straight-line moves
LINE_TUBE = 0.03  # metres a joint-space stand-in for a straight line may stray from it
WAYPOINT_STRAY = 0.005  # metres the gripper may leave a straight line between two of its waypoints
SWEEP_SAMPLES = 24  # postures checked along each leg of a joint-space move
SWEEP_DIP = 0.01  # metres a joint-space move's gripper may go below the lower of its two ends
LINK_RADIUS = 0.06  # metres: the arm's links as points inflated by this much
COLLISION_SAMPLES = 8  # postures checked against the obstacles along each leg of a path
OVER_HEIGHTS = (0.35, 0.5, 0.65)  # metres: the heights a joint-space move climbs to when the direct one would dip


class PathPlanner:
    """Joint paths for the gripper pointing down, on one :class:`KinematicsModel`."""

    def __init__(self, kin: KinematicsModel, home: np.ndarray) -> None:
        self.kin = kin
        self.home = np.asarray(home, float)
        # boxes the arm's links must keep out of, in the arm's frame: (centre, half extents, yaw);
        # a mobile manipulator sets its furniture here (the tabletop has none beyond the table)
        self.obstacles: list[tuple[np.ndarray, np.ndarray, float]] = []

    def collides(self, q: np.ndarray) -> bool:
        """Whether the arm's links from the shoulder to the wrist (origins and the middles between them)
        come within LINK_RADIUS of an obstacle box. The hand is left out: it must touch what it works on."""
        if not self.obstacles:
            return False
        points = self.kin.link_points(q)
        for centre, half, yaw in self.obstacles:
            c, s = math.cos(yaw), math.sin(yaw)
            d = points - centre
            local = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2]], axis=1)
            if np.any(np.all(np.abs(local) < half + LINK_RADIUS, axis=1)):
                return True
        return False

    def path_collides(self, path: list[np.ndarray] | np.ndarray) -> bool:
        """Whether any posture along the joint-space interpolation of ``path`` collides."""
        if not self.obstacles:
            return False
        path = list(path)
        return any(self.collides(a + t * (b - a)) for a, b in zip(path[:-1], path[1:]) for t in np.linspace(0.0, 1.0, COLLISION_SAMPLES))

    # ------------------------------------------------------------------ straight lines
    def trace(self, q0: np.ndarray, start: np.ndarray, end: np.ndarray, orientation: np.ndarray) -> np.ndarray | None:
        """Joint waypoints every CARTESIAN_STEP along the line from ``start`` (where ``q0`` puts the
        gripper) to ``end``, each solved locally from the one before, or None where the posture would
        have to jump (the gripper would leave the line between two waypoints by more than WAYPOINT_STRAY)."""
        path, q, before = [np.asarray(q0, float)], np.asarray(q0, float), np.asarray(start, float)
        for point in line_points(before, np.asarray(end, float)):
            try:
                q_next = self.kin.ik(point, orientation, q, local=True)
            except UnreachableError:
                return None
            middle, _ = self.kin.fk((q + q_next) / 2)
            if np.linalg.norm(middle - (before + point) / 2) > WAYPOINT_STRAY:
                return None
            path.append(q_next)
            q, before = q_next, point
        return np.array(path)

    def traces(self, q: np.ndarray, start: np.ndarray, points: tuple[np.ndarray, ...], orientation: np.ndarray) -> bool:
        """Whether the straight lines from ``start`` through ``points`` can be followed from posture ``q``."""
        for end in points:
            path = self.follow(q, start, end, orientation)
            if path is None:
                return False
            q, start = path[-1], end
        return True

    def follow(self, q0: np.ndarray, start: np.ndarray, end: np.ndarray, orientation: np.ndarray) -> np.ndarray | None:
        """:meth:`trace`, or where one posture cannot carry the line (right in front of the Panda's base
        some heights are out of reach pointing down) a joint-space move to a posture at ``end`` whose
        gripper path stays within LINE_TUBE of the line; None when neither exists."""
        path = self.trace(q0, start, end, orientation)
        if path is not None:
            return path
        for q_end in self.kin.ik_solutions(end, orientation, q0):
            if self._in_tube(q0, q_end, start, end):
                return np.array([q0, q_end])
        return None

    def line(self, q0: np.ndarray, end: np.ndarray, orientation: np.ndarray) -> np.ndarray:
        """A joint path moving the gripper straight from where ``q0`` holds it to ``end`` (see
        :meth:`follow`); UnreachableError when there is none."""
        start, _ = self.kin.fk(q0)
        path = self.follow(q0, start, end, orientation)
        if path is None:
            raise UnreachableError(
                f"cannot move the gripper straight from ({start[0]:.2f}, {start[1]:.2f}, {start[2]:.2f}) to "
                f"({end[0]:.2f}, {end[1]:.2f}, {end[2]:.2f}); choose a point farther from the robot's base"
            )
        return path

    def _in_tube(self, q0: np.ndarray, q1: np.ndarray, start: np.ndarray, end: np.ndarray) -> bool:
        axis = end - start
        length = float(np.linalg.norm(axis)) or 1.0
        for s in np.linspace(0.0, 1.0, 21):
            point, _ = self.kin.fk(q0 + s * (q1 - q0))
            along = float(np.clip(np.dot(point - start, axis) / length**2, 0.0, 1.0))
            if np.linalg.norm(point - (start + along * axis)) > LINE_TUBE or point[2] < min(start[2], end[2]) - 0.005:
                return False
        return True

    # ------------------------------------------------------------------ joint-space moves
    def goal_posture(
        self, xyz: np.ndarray, orientation: np.ndarray, q0: np.ndarray, then: tuple[np.ndarray, ...] = (),
        clear_z: float = math.inf,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The posture to reach ``xyz`` in from ``q0``, and the joint path there: the nearest posture
        from which the straight lines through ``then`` can be followed and that a joint-space move
        reaches without dipping (:meth:`joint_path`); failing that, the nearest such move at all."""
        fallback = None
        for candidate in self.kin.ik_solutions(xyz, orientation, q0):
            if self.collides(candidate):
                continue
            try:
                path = self.joint_path(q0, candidate, clear_z)
            except UnreachableError:
                continue
            if self.traces(candidate, xyz, then, orientation):
                return candidate, path
            fallback = fallback or (candidate, path)
        if fallback is None:
            q = self.kin.ik(xyz, orientation, q0)  # raises the unreachable error if there is no posture
            return q, self.joint_path(q0, q, clear_z)  # or the no-path error
        return fallback

    def joint_path(self, q0: np.ndarray, q_goal: np.ndarray, clear_z: float = math.inf) -> np.ndarray:
        """Postures from ``q0`` to ``q_goal`` whose joint-space interpolation keeps the gripper off
        whatever stands on the table: never more than SWEEP_DIP below the lower of the two ends, or
        always above ``clear_z`` (the caller's height clear of every object). Tried in turn: directly;
        straight up to one of OVER_HEIGHTS above the start, across, and straight down to the goal
        (directly or through home); through home. Raises UnreachableError when none keeps clear."""
        q0, q_goal = np.asarray(q0, float), np.asarray(q_goal, float)
        start, orientation_start = self.kin.fk(q0)
        goal, orientation_goal = self.kin.fk(q_goal)
        floor = min(min(start[2], goal[2]) - SWEEP_DIP, clear_z)
        for path in self._detours(q0, q_goal, start, goal, orientation_start, orientation_goal):
            if self.lowest(path) >= floor and not self.path_collides(path):
                return np.array(path)
        raise UnreachableError(
            f"no joint-space move from ({start[0]:.2f}, {start[1]:.2f}, {start[2]:.2f}) to ({goal[0]:.2f}, "
            f"{goal[1]:.2f}, {goal[2]:.2f}) keeps the gripper off the table and the arm clear of the furniture; call go_home, then retry"
        )

    def _detours(
        self, q0: np.ndarray, q_goal: np.ndarray, start: np.ndarray, goal: np.ndarray,
        orientation_start: np.ndarray, orientation_goal: np.ndarray,
    ) -> Iterator[list[np.ndarray]]:
        """The candidate paths of :meth:`joint_path`, computed lazily (the climbs cost IK solves)."""
        yield [q0, q_goal]
        for height in OVER_HEIGHTS:
            up = self._up(start, orientation_start, q0, height)
            down = self._up(goal, orientation_goal, q_goal, height) if up else []
            if up and down:
                yield [q0, *up, *down[::-1], q_goal]
                yield [q0, *up, self.home, *down[::-1], q_goal]
        yield [q0, self.home, q_goal]

    def lowest(self, path: list[np.ndarray]) -> float:
        """The lowest gripper height along the joint-space interpolation of ``path``."""
        low = math.inf
        for a, b in zip(path[:-1], path[1:]):
            for s in np.linspace(0.0, 1.0, SWEEP_SAMPLES):
                low = min(low, float(self.kin.fk(a + s * (b - a))[0][2]))
        return low

    def _up(self, xyz: np.ndarray, orientation: np.ndarray, seed: np.ndarray, height: float) -> list[np.ndarray]:
        """Postures after ``seed`` that take the gripper straight up to ``height`` above ``xyz``
        (empty when that line cannot be followed)."""
        up = np.array([xyz[0], xyz[1], max(height, xyz[2])])
        path = self.trace(seed, xyz, up, orientation)
        return [] if path is None else list(path[1:])


def line_points(start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """Points every CARTESIAN_STEP from ``start`` (excluded) to ``end`` (included)."""
    steps = max(1, int(math.ceil(np.linalg.norm(end - start) / CARTESIAN_STEP)))
    return [start + (end - start) * k / steps for k in range(1, steps + 1)]
