"""A pick never comes down on another thing, and a block is put on a block's own top (issue 28, item 1).

In the simulator a pick whose open finger landed on a neighbour 1 cm away pushed it aside and reported success,
and put_first_on_second onto a block with another block on it put the object on that other block and reported
success: on a real robot both are silent collisions. Now the pick turns the hand to a yaw with room for both
fingers (teachbot.skills.clearance) or fails naming what is in the way, and a covered block is refused as a
target before anything moves. Physics decides every outcome here, no ROS.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from teachbot.errors import ErrorCode
from teachbot.simrobot.direct import DirectArm, WorldObjects
from teachbot.skills.clearance import closing_axis, finger_blockers
from teachbot.skills.interfaces import ObjectInfo
from teachbot.skills.kinematics import KinematicsModel
from teachbot.skills.library import FINGERTIP_DEPTH, SkillLibrary
from teachbot.world.scene import scene_from_yaml

ONE_SIDE = """
objects:
  - {category: block, color: red, position: [0.0, -0.5]}
  - {category: block, color: green, position: [0.05, -0.5]}
"""
TWO_SIDES = ONE_SIDE + "  - {category: block, color: blue, position: [0.0, -0.45]}\n"
STACK = """
objects:
  - {category: block, color: green, position: [0.1, -0.5]}
  - {category: block, color: blue, position: [0.25, -0.4]}
  - {category: block, color: red, position: [-0.15, -0.45]}
"""


def positions(world):
    return {o.name: o.position.copy() for o in world.objects()}


def library(world, profile, tabletop, scene):
    world.reset(scene_from_yaml(scene, tabletop))
    return SkillLibrary(profile, DirectArm(world), WorldObjects(world))


def test_the_fingers_close_along_the_hands_y_axis(profile):
    kin = KinematicsModel(profile)
    try:  # the tabletop profile's grasp yaw is -pi/2: at hand yaw 0 the fingers close along the table's x axis
        assert np.allclose(np.abs(closing_axis(kin.grasp_orientation(0.0))), [1.0, 0.0], atol=1e-6)
        assert np.allclose(np.abs(closing_axis(kin.grasp_orientation(math.pi / 2))), [0.0, 1.0], atol=1e-6)
    finally:
        kin.close()


def test_finger_blockers_are_the_neighbours_a_finger_lands_on():
    size = np.array([0.04, 0.04, 0.04])
    red = ObjectInfo("red block", "block", np.array([0.0, -0.5, 0.02]), size)
    green = ObjectInfo("green block", "block", np.array([0.05, -0.5, 0.02]), size)  # 1 cm gap on x
    far = ObjectInfo("far block", "block", np.array([0.12, -0.5, 0.02]), size)  # 8 cm gap: a finger fits
    under = ObjectInfo("low block", "block", np.array([0.05, -0.5, -0.03]), size)  # its top below the fingertips
    bowl = ObjectInfo("blue bowl", "bowl", np.array([0.0, -0.5, 0.0]), np.array([0.14, 0.14, 0.04]))  # red lies in it
    others = [red, green, far, under, bowl]
    along_x, along_y = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert finger_blockers(red, others, 0.024, along_x, 0.08, FINGERTIP_DEPTH) == ["green block"]
    assert finger_blockers(red, others, 0.024, along_y, 0.08, FINGERTIP_DEPTH) == []
    assert finger_blockers(red, others, 0.024, along_x, 0.2, FINGERTIP_DEPTH) == ["far block"]  # wider: past green


def test_a_pick_beside_a_close_neighbour_turns_the_hand_and_leaves_it_where_it_was(world, profile, tabletop):
    lib = library(world, profile, tabletop, ONE_SIDE)
    before = positions(world)
    out = lib.run("pick", object_name="red block")
    assert out.success, out.message
    assert world.held_object() == "red block"
    assert np.linalg.norm(positions(world)["green block"] - before["green block"]) < 0.005  # was pushed 3.2 cm


def test_a_pick_boxed_in_on_two_sides_fails_naming_what_is_in_the_way(world, profile, tabletop):
    lib = library(world, profile, tabletop, TWO_SIDES)
    before = positions(world)
    out = lib.run("pick", object_name="red block")
    assert not out.success and out.code == ErrorCode.GRASP_FAILED
    assert "no room for the gripper's fingers" in out.message
    assert "'green block' 1.0 cm from it" in out.message and "'blue block' 1.0 cm from it" in out.message
    assert "move that first" in out.message
    assert world.held_object() == ""
    after = positions(world)
    for name in before:
        assert np.allclose(before[name], after[name], atol=2e-3), name


@pytest.mark.parametrize("skill", ["put_first_on_second", "place"])
def test_a_block_with_a_block_on_it_is_refused_as_a_target(world, profile, tabletop, skill):
    lib = library(world, profile, tabletop, STACK)
    assert lib.run("put_first_on_second", object_name="blue block", target_name="green block").success
    assert {o.name: o.supported_by for o in world.objects()}["blue block"] == "green block"
    if skill == "place":
        assert lib.run("pick", object_name="red block").success
    before = positions(world)
    out = lib.run(skill, object_name="red block", target_name="green block") if skill != "place" else \
        lib.run("place", target_name="green block")
    assert not out.success and out.code == ErrorCode.PLACE_FAILED
    assert "cannot put 'red block' on 'green block': 'blue block' rests on it; move that first" in out.message
    supports = {o.name: o.supported_by for o in world.objects()}
    assert supports["red block"] != "blue block"  # before: put on the blue block on top, reported as success
    if skill == "put_first_on_second":  # refused before anything moved
        assert np.allclose(before["red block"], positions(world)["red block"], atol=2e-3)
