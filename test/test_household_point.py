"""point_at: the household robot points at a thing with the closed hand and keeps pointing, judged on the
simulator's ground truth (teachbot.evaluation.multitask_world); its console function and declaration."""

from __future__ import annotations

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.console.household_api import HouseholdRobot
from teachbot.console.prompt import PromptBuilder
from teachbot.errors import ErrorCode
from teachbot.evaluation.multitask_world import MultitaskWorld
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.simrobot.direct import DirectSkills
from teachbot.skills.household_gestures import POINT_HEIGHT
from teachbot.skills.household_signatures import HOUSEHOLD_SKILLS, HOUSEHOLD_TARGETS

pytestmark = pytest.mark.timeout(pytest_timeout(300))
POINT_COLORS = ("red apple", "soup can", "yellow lemon", "long banana", "navel orange", "bosc pear")


@pytest.fixture(scope="module")
def multitask():
    with MultitaskWorld() as w:
        yield w


@pytest.fixture(scope="module")
def colors(multitask):
    """The point_colors scene, loaded once: pointing moves nothing."""
    multitask.load("point_colors")
    return multitask


def ok(outcome):
    assert outcome.success, outcome.message
    return outcome


def top_of(world, name: str) -> float:
    o = next(o for o in world.objects() if o.name == name)
    return float(o.position[2] + o.size[2] / 2)


@pytest.mark.parametrize("name", POINT_COLORS)
def test_the_fingertips_end_above_the_thing_and_stay(colors, name):
    ok(colors.skills().run("point_at", object_name=name))
    assert colors.pointed_at() == name
    tip = colors.tip()
    assert tip[2] - top_of(colors.world, name) == pytest.approx(POINT_HEIGHT, abs=0.02)
    assert colors.skills().arm.gripper_width() < 0.01  # the fingers closed
    colors.world.step(240)  # a second later the arm still points
    assert colors.pointed_at() == name and np.linalg.norm(colors.tip() - tip) < 0.01
    assert colors.truth()[name] == "workbench"  # nothing was pushed


def test_nothing_is_pointed_at_with_the_arm_stowed(multitask):
    multitask.load("point_colors")
    assert multitask.pointed_at() == ""


def test_an_unknown_thing_is_refused_with_the_known_names(colors):
    refused = colors.skills().run("point_at", object_name="purple elephant")
    assert not refused.success and refused.code == ErrorCode.UNKNOWN_OBJECT
    assert "unknown object 'purple elephant'" in refused.message and "'red apple'" in refused.message


def test_a_full_hand_points_too_with_what_it_holds_above_the_thing(multitask):
    multitask.load("point_colors")
    skills = multitask.skills()
    ok(skills.run("grasp", object_name="soup can"))
    ok(skills.run("point_at", object_name="red apple"))
    assert multitask.pointed_at() == "red apple" and multitask.truth()["soup can"] == "robot"
    can = next(o for o in multitask.world.objects() if o.name == "soup can")
    bottom = float(can.position[2] - can.size[2] / 2)
    assert bottom - top_of(multitask.world, "red apple") == pytest.approx(POINT_HEIGHT, abs=0.02)
    refused = skills.run("point_at", object_name="soup can")
    assert not refused.success and "the hand holds it" in refused.message
    ok(skills.run("place_object", location="workbench"))  # the next motion ends the pointing
    assert multitask.pointed_at() == ""


def test_the_console_function_points(multitask):
    multitask.load("point_colors")
    world = multitask.world
    robot = HouseholdRobot(DirectSkills(multitask.skills()), world.object_names, world.thing_states, DialogChannel(), world.layout)
    assert robot.functions()["point_at"]("bosc pear") == "success"
    assert multitask.pointed_at() == "bosc pear"
    with pytest.raises(ValueError, match="unknown object 'grey bosc pear'"):
        robot.functions()["point_at"]("grey bosc pear")


def test_point_at_is_declared_in_the_household_api_and_its_prompt():
    assert HOUSEHOLD_TARGETS["point_at"] == "object_name"
    api = RobotApi.load("household")
    assert "point_at" in api.names
    assert "def point_at(object_name: str) -> str:" in PromptBuilder.for_profile(api).base()


def test_the_skills_node_serves_point_at():
    pytest.importorskip("rclpy")
    pytest.importorskip("teachbot_interfaces")
    from teachbot.nodes.skills_node import skills_for
    from teachbot.robot_profile import RobotProfile

    assert HOUSEHOLD_SKILLS["point_at"].target == "object_name" and HOUSEHOLD_SKILLS["point_at"].extras == ()
    assert "point_at" in skills_for(RobotProfile.load("household_sim"))
