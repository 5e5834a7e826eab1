"""The base's floor planner and path timing (pure Python: no ROS, no physics)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from teachbot.errors import LimitExceededError, UnreachableError
from teachbot.skills.navigation import NavigationMap, time_path
from teachbot.world.floor import BasePath, BasePose, Footprint

KITCHEN = ((0.0, 6.0), (0.0, 5.0))
RADIUS = 0.3
TABLE = Footprint("table", (3.0, 2.5), (0.6, 0.4))


def _samples(path: BasePath, n: int = 2000) -> list[BasePose]:
    return [path.pose_at(t) for t in np.linspace(0.0, path.duration, n)]


def _min_clearance_to(fp: Footprint, poses: list[BasePose]) -> float:
    """Distance from the nearest sampled centre to an axis-aligned footprint (computed here independently)."""
    best = math.inf
    for p in poses:
        dx = max(abs(p.x - fp.centre[0]) - fp.half_extents[0], 0.0)
        dy = max(abs(p.y - fp.centre[1]) - fp.half_extents[1], 0.0)
        best = min(best, math.hypot(dx, dy))
    return best


def test_straight_path_in_an_empty_room():
    nav = NavigationMap(KITCHEN, [], RADIUS)
    start, goal = BasePose(1.0, 1.0, 0.0), BasePose(4.0, 3.0, math.pi / 2)
    poses = nav.plan(start, goal)
    assert poses[0] == start and poses[-1] == goal
    assert len(poses) == 2  # one straight segment
    path = time_path(poses, max_speed=0.5, max_yaw_rate=1.0, speed_factor=1.0)
    assert path.length == pytest.approx(math.hypot(3.0, 2.0))


def test_path_around_a_table_keeps_robot_radius_from_it():
    nav = NavigationMap(KITCHEN, [TABLE], RADIUS)
    start, goal = BasePose(1.0, 2.5, 0.0), BasePose(5.0, 2.5, math.pi)
    poses = nav.plan(start, goal)
    assert poses[0] == start and poses[-1] == goal
    assert 3 <= len(poses) <= 6  # shortcut into a few straight segments, not a staircase of cells
    path = time_path(poses, max_speed=0.5, max_yaw_rate=1.0, speed_factor=1.0)
    samples = _samples(path)
    assert all(nav.free(p.x, p.y) for p in samples)
    assert _min_clearance_to(TABLE, samples) >= RADIUS
    # The detour is short: no longer than going round the table's corners with the robot's clearance.
    assert path.length < 4.0 + 2 * (0.4 + RADIUS + 0.1)
    assert path.pose_at(path.duration / 2).y != pytest.approx(2.5)  # it did go round


def test_free_reflects_inflation_and_walls():
    nav = NavigationMap(KITCHEN, [TABLE], RADIUS)
    assert nav.free(3.0, 2.5 + 0.4 + RADIUS + 0.01)
    assert not nav.free(3.0, 2.5 + 0.4 + RADIUS - 0.01)
    assert not nav.free(0.1, 2.0)  # the base would touch the wall
    assert not nav.free(-1.0, 2.0)


def test_rotated_obstacle_is_respected():
    diagonal = Footprint("counter", (3.0, 2.5), (1.5, 0.2), yaw=math.pi / 4)
    nav = NavigationMap(KITCHEN, [diagonal], RADIUS)
    assert not nav.free(3.0 + 0.5, 2.5 + 0.5)  # on the counter's long axis
    assert nav.free(3.0 + 0.6, 2.5 - 0.6)  # across it, 0.85 m from its axis
    path = time_path(nav.plan(BasePose(4.5, 1.0, 0.0), BasePose(1.5, 4.0, 0.0)), 0.5, 1.0, 1.0)
    assert all(nav.free(p.x, p.y) for p in _samples(path))


def test_no_path_through_a_wall_of_obstacles():
    wall = [Footprint(f"cabinet {k}", (3.0, 0.5 + k), (0.3, 0.5)) for k in range(5)]
    nav = NavigationMap(KITCHEN, wall, RADIUS)
    with pytest.raises(UnreachableError, match="no collision-free path.*choose another location"):
        nav.plan(BasePose(1.0, 2.5, 0.0), BasePose(5.0, 2.5, 0.0))


def test_goal_inside_an_obstacle_names_it():
    nav = NavigationMap(KITCHEN, [TABLE, Footprint("fridge", (5.5, 4.5), (0.3, 0.3))], RADIUS)
    with pytest.raises(UnreachableError, match="blocked by table.*choose another location"):
        nav.plan(BasePose(1.0, 1.0, 0.0), BasePose(3.0, 2.5, 0.0))
    with pytest.raises(UnreachableError, match="blocked by fridge"):  # within the inflation, not on it
        nav.plan(BasePose(1.0, 1.0, 0.0), BasePose(5.5, 4.5 - 0.3 - RADIUS + 0.05, 0.0))


def test_start_inside_an_obstacle_or_outside_the_room_is_refused():
    nav = NavigationMap(KITCHEN, [TABLE], RADIUS)
    with pytest.raises(UnreachableError, match="inside table"):
        nav.plan(BasePose(3.0, 2.5, 0.0), BasePose(1.0, 1.0, 0.0))
    with pytest.raises(UnreachableError, match="outside the room"):
        nav.plan(BasePose(-0.5, 2.5, 0.0), BasePose(1.0, 1.0, 0.0))


def test_base_parked_close_to_a_counter_can_leave_without_getting_closer():
    counter = Footprint("counter", (3.0, 0.3), (2.0, 0.3))
    nav = NavigationMap(KITCHEN, [counter], RADIUS)
    start = BasePose(3.0, 0.6 + 0.2, 0.0)  # 0.2 m from the counter, inside the 0.3 m inflation
    assert not nav.free(start.x, start.y)
    poses = nav.plan(start, BasePose(3.0, 3.5, 0.0))
    samples = _samples(time_path(poses, 0.5, 1.0, 1.0))
    assert _min_clearance_to(counter, samples) >= 0.2 - 0.005
    assert all(nav.free(p.x, p.y) for p in samples if math.hypot(p.x - start.x, p.y - start.y) > RADIUS)


def test_yaw_turns_to_the_goal_along_the_way():
    nav = NavigationMap(KITCHEN, [TABLE], RADIUS)
    poses = nav.plan(BasePose(1.0, 2.5, 0.0), BasePose(5.0, 2.5, math.pi / 2))
    yaws = [p.yaw for p in poses]
    assert all(b >= a for a, b in zip(yaws, yaws[1:]))  # monotonic, the short way round
    assert 0.0 < yaws[1] < math.pi / 2


def test_time_path_drives_at_the_scaled_speed():
    poses = [BasePose(0.0, 0.0, 0.0), BasePose(2.0, 0.0, 0.0)]
    path = time_path(poses, max_speed=0.5, max_yaw_rate=1.0, speed_factor=0.5)
    assert path.times == (0.0, pytest.approx(8.0))
    assert path.duration == pytest.approx(8.0) and path.length == pytest.approx(2.0)
    assert path.pose_at(2.0).x == pytest.approx(0.5)


def test_turning_in_place_is_timed_by_the_yaw_rate():
    poses = [BasePose(1.0, 1.0, 0.0), BasePose(1.0, 1.0, math.pi / 2)]
    path = time_path(poses, max_speed=0.5, max_yaw_rate=0.5, speed_factor=1.0)
    assert path.duration == pytest.approx(math.pi)
    assert path.length == 0.0
    assert path.pose_at(math.pi / 2).yaw == pytest.approx(math.pi / 4)


@pytest.mark.parametrize("factor", [0.0, 1.5, -0.2])
def test_speed_factor_out_of_range_is_refused(factor):
    with pytest.raises(LimitExceededError, match=r"\(0, 1\]"):
        time_path([BasePose(0.0, 0.0, 0.0), BasePose(1.0, 0.0, 0.0)], 0.5, 1.0, factor)


def test_pose_at_interpolates_and_clamps():
    path = BasePath((BasePose(0.0, 0.0, 0.0), BasePose(1.0, 2.0, 0.0), BasePose(1.0, 4.0, 0.0)), (0.0, 1.0, 3.0))
    assert path.pose_at(0.5) == BasePose(0.5, 1.0, 0.0)
    assert path.pose_at(2.0) == BasePose(1.0, 3.0, 0.0)
    assert path.pose_at(-1.0) == path.poses[0] and path.pose_at(10.0) == path.poses[-1]
    assert path.duration == 3.0 and path.length == pytest.approx(math.sqrt(5.0) + 2.0)


def test_pose_at_turns_the_short_way_across_pi():
    a, b = BasePose(0.0, 0.0, math.radians(170)), BasePose(0.0, 0.0, math.radians(-170))
    path = BasePath((a, b), (0.0, 1.0))
    mid = path.pose_at(0.5)
    assert abs(mid.yaw) == pytest.approx(math.pi)  # through 180 degrees, not through 0
    assert math.degrees(path.pose_at(0.25).yaw) == pytest.approx(175.0)
    timed = time_path([a, b], max_speed=1.0, max_yaw_rate=math.radians(10), speed_factor=1.0)
    assert timed.duration == pytest.approx(2.0)  # 20 degrees at 10 deg/s, not 340
