"""The household skills end to end in the simulation, judged on the world's ground truth (issue 11)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from timing import pytest_timeout

from teachbot.console.approval import ApprovalGate
from teachbot.console.household_api import HouseholdRobot
from teachbot.errors import ErrorCode
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.paths import config_path
from teachbot.simrobot.direct import DirectArm, DirectBase, DirectSkills, WorldHousehold
from teachbot.skills.household import HouseholdSkills
from teachbot.world.household_layout import surface_offset
from teachbot.world.household_scene import household_scene_from_yaml

pytestmark = pytest.mark.timeout(pytest_timeout(300))


@pytest.fixture()
def world(household_world):
    return household_world


@pytest.fixture()
def robot(kitchen):
    return HouseholdSkills(kitchen.profile, DirectArm(kitchen), DirectBase(kitchen), WorldHousehold(kitchen))


def truth(world):
    return {o.name: o for o in world.objects()}


def ok(outcome):
    assert outcome.success, outcome.message
    return outcome


def test_fetch_the_juice_and_hand_it_over(world, robot):
    ok(robot.run("grasp", object_name="apple juice"))
    assert truth(world)["apple juice"].held
    ok(robot.run("move_to", location="person"))
    ok(robot.run("handover_object_to_human", timeout=0.2))
    juice = truth(world)["apple juice"]
    assert juice.place == "person" and not juice.held and juice.position[2] > 0.5  # the person holds it
    assert not world.held_object()
    stowed = np.array(world.profile.stowed)
    assert np.max(np.abs(DirectArm(world).joint_positions() - stowed)) < 0.05  # arm back in


def test_clean_the_table_with_the_sponge(world, robot):
    assert world.thing_states()["table"]["clean"] is False
    ok(robot.run("grasp", object_name="sponge"))
    ok(robot.run("wipe", surface="table"))
    assert world.thing_states()["table"]["clean"] is True
    ok(robot.run("place_object", location="sink"))
    assert truth(world)["sponge"].place == "sink"


def test_fridge_door_guards_the_milk(world, robot):
    refused = robot.run("grasp", object_name="milk")
    assert not refused.success and "open('fridge') first" in refused.message
    ok(robot.run("open", thing="fridge"))
    assert world.opening("fridge") > 0.9
    ok(robot.run("grasp", object_name="milk"))
    busy = robot.run("close", thing="fridge")
    assert not busy.success and "free hand" in busy.message
    ok(robot.run("place_object", location="table"))
    assert truth(world)["milk"].place == "table"
    ok(robot.run("close", thing="fridge"))
    assert world.opening("fridge") < 0.05 and world.thing_states()["fridge"]["open"] is False


def test_things_put_in_the_drawer_are_shut_in(world, robot):
    ok(robot.run("open", thing="cupboard"))
    ok(robot.run("grasp", object_name="apple"))
    ok(robot.run("place_object", location="cupboard"))
    ok(robot.run("close", thing="cupboard"))
    apple = truth(world)["apple"]
    assert apple.place == "cupboard" and apple.inside and world.opening("cupboard") < 0.05
    refused = robot.run("grasp", object_name="apple")
    assert not refused.success and refused.code == ErrorCode.INVALID_ARGUMENT and "closed" in refused.message


def test_slicing_needs_the_knife(world, robot):
    refused = robot.run("slice", object_name="bread")
    assert not refused.success and "grasp('knife')" in refused.message
    ok(robot.run("grasp", object_name="knife"))
    ok(robot.run("slice", object_name="bread"))
    assert world.thing_states()["bread"]["sliced"] is True
    again = robot.run("slice", object_name="bread")
    assert not again.success and "already sliced" in again.message


def test_pressing_a_lamp_switches_it(world, robot):
    world.reset(household_scene_from_yaml("objects:\n  - {name: lamp, type: lamp, at: table, offset: [-0.15, 0.0]}\n"))
    ok(robot.run("toggle", thing="lamp"))
    assert world.thing_states()["lamp"]["on"] is True
    ok(robot.run("toggle", thing="lamp"))
    assert world.thing_states()["lamp"]["on"] is False


def test_slow_is_slower_and_the_speed_limit_holds(world, robot):
    ok(robot.run("move_to", location="table", speed_factor=1.0))
    start = world.sim_time
    ok(robot.run("move_to", location="shelf", speed_factor=1.0))
    fast = world.sim_time - start
    ok(robot.run("move_to", location="table", speed_factor=1.0))
    start = world.sim_time
    ok(robot.run("move_to", location="shelf", speed_factor=0.25))
    slow = world.sim_time - start
    assert slow > 2.5 * fast
    pose = world.base_pose
    x, y, yaw = world.layout.location_pose("shelf")
    assert (pose.x, pose.y) == pytest.approx((x, y), abs=1e-6) and math.cos(pose.yaw - yaw) > 0.999


@pytest.mark.parametrize(("skill", "fields", "expected"), [
    ("move_to", {"location": "kitchen"}, "unknown location 'kitchen'. Use one of list_locations() ['table', 'counter'"),
    ("move_to", {"location": "table", "speed_factor": 1.5}, "speed_factor=1.5 is outside its safe range [0.1, 1]"),
    ("grasp", {"object_name": "teapot"}, "unknown object 'teapot'. Use one of list_objects()"),
    ("grasp", {"object_name": "red cup", "hand": "left"}, "hand='left' needs a two-arm robot profile"),
    ("handover_object_to_human", {}, "holds nothing to hand over"),
    ("place_object", {"location": "table"}, "holds nothing"),
    ("open", {"thing": "table"}, "cannot open 'table': it is not openable (openable here: fridge, cupboard)"),
    ("close", {"thing": "fridge"}, "the fridge is already closed"),
    ("wipe", {"surface": "table"}, "wiping needs the sponge in the hand; grasp('sponge') first"),
    ("toggle", {"thing": "apple"}, "cannot toggle 'apple': it has no switch"),
    # skill parameters (config/skill_parameters.yaml): checked before anything moves
    ("grasp", {"object_name": "red cup", "grasp_height_offset": 0.2}, "grasp_height_offset=0.2 is outside its safe range [-0.03, 0.05] m"),
    ("open", {"thing": "cupboard", "pull_distance": 0.5}, "pull_distance=0.5 is outside its safe range [0.1, 0.32] m"),
    ("open", {"thing": "fridge", "pull_distance": 0.2}, "pull_distance applies to drawers; the fridge has a door"),
    ("wipe", {"surface": "table", "parameter_names": ["wipe_passes"], "parameter_values": [2.5]}, "wipe_passes must be a whole number"),
    ("toggle", {"thing": "lamp", "parameter_names": ["force"], "parameter_values": [1.0]}, "unknown parameter 'force' for toggle"),
])
def test_bad_requests_get_one_clear_line_and_no_motion(world, robot, skill, fields, expected):
    base, arm = world.base_pose, DirectArm(world).joint_positions()
    outcome = robot.run(skill, **fields)
    assert not outcome.success and expected in outcome.message and "\n" not in outcome.message
    assert world.base_pose == base
    assert np.max(np.abs(DirectArm(world).joint_positions() - arm)) < 1e-3


def test_a_full_hand_cannot_grasp_again(world, robot):
    ok(robot.run("grasp", object_name="orange juice"))
    base = world.base_pose
    outcome = robot.run("grasp", object_name="red cup")
    assert not outcome.success and outcome.code == ErrorCode.ALREADY_HOLDING
    assert "already holds 'orange juice'" in outcome.message and world.base_pose == base


def console(world, robot):
    """The household console functions over these skills in this process."""
    return HouseholdRobot(DirectSkills(robot), lambda: [o.name for o in world.objects()], world.thing_states,
                          DialogChannel(timeout=1.0)).functions()


def test_pull_distance_opens_the_drawer_part_of_the_way(world, robot):
    travel = world.layout.place("cupboard").drawer["travel"]
    assert console(world, robot)["open"]("cupboard", pull_distance=travel / 2) == "success"
    assert world.opening("cupboard") == pytest.approx(0.5, abs=0.05)
    assert world.thing_states()["cupboard"]["open"] is False  # half out still counts as closed: things inside stay out of reach
    ok(robot.run("close", thing="cupboard"))  # and it can still be pushed shut
    assert world.opening("cupboard") < 0.05


def test_wipe_passes_sets_the_number_of_strokes(world, robot):
    strokes = []
    send = robot.arm.send_trajectory
    robot.arm.send_trajectory = lambda *a: (strokes.append(a), send(*a))[1]  # type: ignore[method-assign]
    ok(robot.run("grasp", object_name="sponge"))
    counts = []
    for passes in (None, 1):
        strokes.clear()
        fields = {} if passes is None else {"wipe_passes": passes}
        assert console(world, robot)["wipe"]("table", **fields) == "success"
        counts.append(len(strokes))
    assert counts[0] - counts[1] == 2 * (3 - 1)  # the default three passes, then one: two strokes a pass
    assert world.thing_states()["table"]["clean"] is True


def test_place_offsets_move_the_spot_on_the_surface(world, robot):
    ok(robot.run("grasp", object_name="red cup"))
    cup = robot.view.things()["red cup"]
    robot._work_at("counter")
    spot = robot._free_spot("counter", cup)  # where it would go
    assert console(world, robot)["place_object"]("counter", place_offset_along=0.06, place_offset_across=-0.05) == "success"
    surface = world.layout.surface("counter")
    along, across = surface_offset(surface, *truth(world)["red cup"].position[:2])
    expected = np.add(surface_offset(surface, *spot), (0.06, -0.05))
    assert (along, across) == pytest.approx(tuple(expected), abs=0.015)
    ok(robot.run("grasp", object_name="red cup"))
    refused = robot.run("place_object", location="counter", place_offset_across=-0.1)
    assert not refused.success and "over the edge of the counter" in refused.message


EDGE_SCENE = """
objects:
  - {name: red cup, type: cup, color: red, at: table, offset: [-0.2, 0.0]}
  - {name: box, type: box, at: table, offset: [-0.3, -0.5]}
"""


def test_a_place_offset_that_leaves_the_safe_zone_is_refused_before_anything_moves(world, robot, tmp_path):
    """Issue 31, item 3, household: the gate's zone (the work surfaces) holds the box's place, the table; an offset
    that would put the cup beside the box and over the table's edge (it fell to the floor before) is refused by the
    skill before the arm moves, so a place zone sees the place the robot really puts things; a small one is kept."""
    world.reset(household_scene_from_yaml(EDGE_SCENE))
    raw = yaml.safe_load(config_path("approval.yaml").read_text())
    raw["profiles"]["household"]["rules"] = {"place_object": {"outside": "work_surfaces"}}
    (tmp_path / "approval.yaml").write_text(yaml.safe_dump(raw))
    said: list[str] = []
    gate = ApprovalGate.load(str(tmp_path / "approval.yaml"), RobotApi.load("household"), DialogChannel(said.append, timeout=1.0))
    assert gate is not None
    where = lambda: {o.name: o.place for o in world.objects()}  # noqa: E731 - where perception says things are
    functions = gate.wrap(HouseholdRobot(DirectSkills(robot), lambda: [o.name for o in world.objects()], world.thing_states,
                                         DialogChannel(timeout=1.0), where=where).functions())
    ok(robot.run("grasp", object_name="red cup"))
    arm = DirectArm(world).joint_positions()
    with pytest.raises(RuntimeError, match=r"place_offset_along=-0.1, place_offset_across=-0.1 would put 'red cup' "
                                              r"over the edge of the table; use smaller offsets"):
        functions["place_object"]("box", place_offset_along=-0.1, place_offset_across=-0.1)
    assert said == []  # the box is on the table, inside the zone: no question, and the skill keeps the point there
    cup = truth(world)["red cup"]
    assert cup.held and cup.position[2] > 0.75  # still in the hand, not on the floor
    assert np.max(np.abs(DirectArm(world).joint_positions() - arm)) < 1e-3  # the arm did not move
    assert functions["place_object"]("box", place_offset_along=0.02) == "success"
    cup = truth(world)["red cup"]
    assert not cup.held and cup.place == "table"
