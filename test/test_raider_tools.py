"""RAIDER's grounded tools over the household scene model and the tabletop's: answers from perception,
forgiving names, clear errors. The facts style (the paper's, the default) gives distances in metres and answers a name
that fits several objects for every match; the judged style (a labelled ablation) says within reach and raises
"could be any of"."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import make_detector
from teachbot.perception.household import HouseholdPerception, ThingStatus, WorldThing
from teachbot.perception.localize import Observation
from teachbot.perception.pipeline import Perception
from teachbot.raider.tools import GroundedTools, Reach, ToolError


def thing(name, kind, x, y, z, size=(0.06, 0.06, 0.1)):
    return WorldThing(name, kind, "", np.array([x, y, z]), np.array(size))


@pytest.fixture()
def kitchen_tools():
    perception = HouseholdPerception(PerceptionConfig.load("perception_household"))
    things = [
        thing("apple", "apple", 1.05, 0.6, 0.79, (0.08, 0.08, 0.08)),
        thing("plate", "plate", 1.05, 0.2, 0.76, (0.2, 0.2, 0.02)),
        thing("banana", "banana", 1.05, 0.2, 0.79, (0.18, 0.04, 0.04)),
        thing("red cup", "cup", 3.0, -1.1, 0.945, (0.065, 0.065, 0.09)),
        thing("blue cup", "cup", 3.0, -1.4, 0.945, (0.065, 0.065, 0.09)),
        thing("milk", "milk", 3.0, 1.75, 1.09, (0.07, 0.07, 0.18)),
        thing("apple juice", "apple_juice", 3.0, -1.6, 0.98, (0.06, 0.06, 0.16)),
    ]
    status = {"red cup": ThingStatus("counter", held=False, flags={"clean": False, "filled": False}),
              "fridge": ThingStatus(flags={"open": False}), "milk": ThingStatus("fridge", True, flags={"filled": True})}
    at_table = perception.layout.location_pose("table")  # the robot stands at the table
    perception.update(things, 1.0, at_table, {"fridge": 0.0, "cupboard": 0.0}, status)
    return GroundedTools(perception.queries, Reach(0.85, mobile=True), layout=perception.layout)


def test_the_six_tools_answer_from_the_scene(kitchen_tools):
    t = kitchen_tools
    assert t.robot_holding() == "The robot's hand is empty: it holds nothing."
    seen = json.loads(t.object_detection())
    assert "apple juice" in seen["objects"] and "fridge" in seen["places"]
    assert json.loads(t.get_obj_state("fridge"))["open"] == "False"
    red = json.loads(t.get_obj_state("red cup"))
    assert red["supported_by"] == "counter" and red["clean"] == "False"
    assert t.check_obj_relationship("inside", "fridge") == "milk is inside fridge."
    assert t.check_obj_relationship("on top of", "plate") == "banana is on top of plate."
    assert t.check_obj_relationship("blocking", "plate") == "banana is blocking plate."
    assert t.check_obj_relationship("on top of", "apple") == "Nothing is on top of apple."
    props = json.loads(t.get_obj_properties("plate"))  # too wide for the gripper: not pickable
    assert props["category"] == "plate" and "pickable" not in props and props["container"] == "true"
    assert json.loads(t.get_obj_properties("red cup"))["pickable"] == "true"
    assert json.loads(t.get_obj_properties("fridge"))["openable"] == "true"


def test_distance_counts_a_drive_to_the_place(kitchen_tools):
    near = kitchen_tools.dist_to_target("apple")
    # facts: metres, no verdict; from where grasp stands: 0.2 m left of the table's middle, in front of the apple
    assert re.fullmatch(r"apple is 0\.\d\d m from the arm's base where the robot stands; after move_to\('table'\) and the "
                        r"skills' 0\.20 m step to the robot's left along it to face apple, it would be 0\.\d\d m from the "
                        r"arm's base\.", near), near
    assert "after move_to('counter') it would be" in kitchen_tools.dist_to_target("blue cup")  # 0.1 m aside: no step
    far = kitchen_tools.dist_to_target("red cup")
    metres = [float(v) for v in re.findall(r"([\d.]+) m from", far)]
    assert metres[0] > 0.85 >= metres[1] and "after move_to('counter')" in far and "reach" not in far
    assert kitchen_tools.reachable("red cup")  # after the drive: the judgement the facts style leaves to the model
    judged = GroundedTools(kitchen_tools.queries, kitchen_tools.reach, layout=kitchen_tools.layout, style="judged")
    assert "within the arm's reach" in judged.dist_to_target("apple")
    far = judged.dist_to_target("red cup")
    assert "out of the arm's reach" in far and "after move_to('counter')" in far and "within reach" in far


def test_names_are_matched_forgivingly_and_errors_say_what_exists(kitchen_tools):
    t = kitchen_tools
    assert json.loads(t.get_obj_state("Apple_Juice"))["name"] == "apple juice"
    assert json.loads(t.get_obj_state("apple juce"))["name"] == "apple juice"  # a typo
    assert json.loads(t.get_obj_state("the milk"))["name"] == "milk"  # an article
    both = t.get_obj_state("cup")  # every match, for the model to judge
    assert both.startswith("'cup' matches 2 objects: blue cup, red cup.\n")
    assert [json.loads(line.split(": ", 1)[1])["name"] for line in both.splitlines()[1:]] == ["blue cup", "red cup"]
    assert t.check_obj_relationship("on top of", "cup").splitlines()[1:] == ["blue cup: Nothing is on top of blue cup.",
                                                                             "red cup: Nothing is on top of red cup."]
    with pytest.raises(ToolError, match="could be any of blue cup, red cup"):
        t.resolve("cup")
    judged = GroundedTools(t.queries, t.reach, layout=t.layout, style="judged")
    with pytest.raises(ToolError, match="could be any of blue cup, red cup"):
        judged.get_obj_state("cup")
    with pytest.raises(ToolError, match="no object or place called 'kettle'; the robot knows: .*apple"):
        t.get_obj_state("kettle")
    with pytest.raises(ToolError, match="unknown relationship 'under'; use one of left of"):
        t.check_obj_relationship("under", "apple")
    with pytest.raises(ToolError, match="there is no tool 'look_around'"):
        t.call("look_around")
    with pytest.raises(ToolError, match="missing a required argument"):
        t.call("get_obj_state", [])


def test_holding_comes_from_the_hand():
    perception = HouseholdPerception(PerceptionConfig.load("perception_household"))
    perception.update([thing("knife", "knife", 0.3, 0.0, 1.0)], 1.0, (0.0, 0.0, 0.0), {},
                      {"knife": ThingStatus(held=True)})
    tools = GroundedTools(perception.queries)
    assert tools.robot_holding() == "The robot is holding knife."
    assert GroundedTools(perception.queries, held=lambda: "").robot_holding().startswith("The robot's hand is empty")


def test_tabletop_tools_use_the_fixed_arm():
    config = PerceptionConfig.load("perception")
    perception = Perception(config, detector=make_detector("sim_ground_truth"))

    def obs(name, pos, size=(0.04, 0.04, 0.04)):
        return Observation(name, name.split()[-1], 1.0, np.array(pos, float), np.array(size, float))

    perception.scene.update([obs("green block", [0.1, -0.5, 0.02]), obs("blue block", [0.1, -0.5, 0.06]),
                             obs("red block", [0.1, -1.2, 0.02])], 1.0)
    tools = GroundedTools(perception.queries, Reach(0.85))
    assert tools.check_obj_relationship("on top of", "green block") == "blue block is on top of green block."
    assert tools.dist_to_target("green block").endswith("m from the arm's base where the robot stands.")
    far = tools.dist_to_target("red block")
    assert float(re.findall(r"([\d.]+) m from", far)[0]) > 0.85 and "move_to" not in far
    assert tools.reachable("green block") and not tools.reachable("red block")
    judged = GroundedTools(perception.queries, Reach(0.85), style="judged")
    assert "within the arm's reach" in judged.dist_to_target("green block")
    assert "out of the arm's reach" in judged.dist_to_target("red block")
    boxed = GroundedTools(perception.queries, Reach(0.85, workspace=((-0.3, 0.3), (-0.8, -0.2), (0.0, 0.5))))
    assert "(its top at x " in boxed.dist_to_target("green block")  # the point the workspace is about
    assert "workspace x -0.3 to 0.3 m, y -0.8 to -0.2 m, z 0 to 0.5 m" in boxed.reach.describe()
    assert "places" not in json.loads(tools.object_detection())
