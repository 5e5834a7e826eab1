"""The household world without ROS: layout, scenes, the mobile base, articulations, states by contact."""

from __future__ import annotations

import math

import numpy as np
import pybullet as pb
import pytest

from teachbot.errors import SceneSpecError, UnknownObjectError
from teachbot.skills.navigation import time_path
from teachbot.world.floor import BasePose
from teachbot.world.household_layout import HouseholdLayout
from teachbot.world.household_scene import generate_household_scene, household_scene_from_yaml


@pytest.fixture()
def world(household_world):
    return household_world


def by_name(world):
    return {o.name: o for o in world.objects()}


def test_layout_answers_the_seed_transcripts_coordinates():
    layout = HouseholdLayout.load()
    shelf, table = layout.coordinates("shelf"), layout.coordinates("table")
    assert shelf == [-0.5, 2.1, 1.1] and table == [1.2, 0.4, 0.75]
    assert round(math.dist(shelf[:2], table[:2]), 1) == 2.4
    x, y, yaw = layout.location_pose("counter")
    assert x < 3.1 - 0.3 and y == pytest.approx(-1.3) and yaw == pytest.approx(0.0)  # in front, facing it
    with pytest.raises(UnknownObjectError, match="kitchen.*list_locations"):
        layout.place("kitchen")


def test_the_default_scene_stands_where_it_says(kitchen):
    objects = by_name(kitchen)
    assert objects["apple juice"].place == "counter" and objects["sponge"].place == "sink"
    assert objects["milk"].place == "fridge" and objects["milk"].inside
    for o in objects.values():  # resting on their surfaces, nothing fell
        assert o.position[2] > 0.5, o
    states = kitchen.thing_states()
    assert states["table"] == {"clean": False} and states["fridge"] == {"open": False}
    assert states["milk"]["filled"] and states["milk"]["contents"] == "milk"


def test_the_base_follows_a_timed_path_and_carries_the_arm(kitchen):
    start = kitchen.base_pose
    path = time_path([start, BasePose(0.5, 0.0, math.pi / 2)], max_speed=0.5, max_yaw_rate=1.0, speed_factor=1.0)
    arm_before = np.array(pb.getBasePositionAndOrientation(kitchen.robot_id, physicsClientId=kitchen.client)[0])
    kitchen.command_base(path)
    assert kitchen.base_moving
    kitchen.step(int(path.duration / 2 / kitchen.time_step))
    assert 0.1 < kitchen.base_pose.x < 0.4  # half way, not teleported
    kitchen.step(int((path.duration / 2 + 0.1) / kitchen.time_step))
    assert not kitchen.base_moving
    assert (kitchen.base_pose.x, kitchen.base_pose.y, kitchen.base_pose.yaw) == pytest.approx((0.5, 0.0, math.pi / 2), abs=1e-6)
    arm_after = np.array(pb.getBasePositionAndOrientation(kitchen.robot_id, physicsClientId=kitchen.client)[0])
    mount = kitchen.layout.base.arm_mount
    assert arm_after - arm_before == pytest.approx([0.5 - mount[0], mount[0], 0.0], abs=1e-6)  # the mount turned with the base
    names, q, _, _ = kitchen.joint_state()
    assert names[-5:] == ["base_x", "base_y", "base_yaw", "fridge_door", "cupboard_drawer"]
    assert q[-5:-2] == pytest.approx([0.5, 0.0, math.pi / 2])


def test_fridge_door_and_drawer_are_joints_and_their_state_follows(kitchen):
    assert kitchen.opening("fridge") == pytest.approx(0.0, abs=1e-3)
    kitchen.command_articulation("fridge", True)
    kitchen.command_articulation("cupboard", True)
    kitchen.step(60)
    assert 0.0 < kitchen.opening("fridge") < 0.9  # it swings, it does not jump
    kitchen.step(600)
    assert kitchen.opening("fridge") > 0.95 and kitchen.opening("cupboard") > 0.95
    assert kitchen.thing_states()["fridge"]["open"] and kitchen.thing_states()["cupboard"]["open"]
    kitchen.command_articulation("fridge", False)
    kitchen.step(600)
    assert not kitchen.thing_states()["fridge"]["open"]
    with pytest.raises(UnknownObjectError, match="openable"):
        kitchen.command_articulation("table", True)


def test_dirty_table_is_tinted_until_a_held_sponge_rubs_it(kitchen):
    table = kitchen._bodies["table"]
    dirty = pb.getVisualShapeData(table, physicsClientId=kitchen.client)[0][7]
    sponge = kitchen._objects["sponge"][0]
    # a sponge held (the grasp is the world's) and pressed on the table, moved back and forth
    kitchen._grasped = "sponge"
    z = kitchen.layout.place("table").height + 0.014
    for k in range(40):
        x = 1.0 + 0.15 * math.sin(k / 3)
        pb.resetBasePositionAndOrientation(sponge, [x, 0.4, z], [0, 0, 0, 1], physicsClientId=kitchen.client)
        kitchen.step(12)
    kitchen._grasped = None
    assert kitchen.thing_states()["table"]["clean"] is True
    clean = pb.getVisualShapeData(table, physicsClientId=kitchen.client)[0][7]
    assert clean != dirty


def test_scene_errors_name_the_object_and_the_fix():
    with pytest.raises(SceneSpecError, match="objects\\[0\\].*unknown object type 'teapot'"):
        household_scene_from_yaml("objects:\n  - {type: teapot, at: table}\n")
    with pytest.raises(SceneSpecError, match="'at' must be one of"):
        household_scene_from_yaml("objects:\n  - {type: apple, at: garage}\n")
    with pytest.raises(SceneSpecError, match="hangs over the edge"):
        household_scene_from_yaml("objects:\n  - {type: apple, at: table, offset: [0.9, 0]}\n")
    with pytest.raises(SceneSpecError, match="overlap"):
        household_scene_from_yaml("objects:\n  - {type: apple, at: table}\n  - {type: pear, at: table, offset: [0.02, 0]}\n")


def test_generated_scenes_repeat_with_their_seed_and_load_in_the_world(world):
    a, b = generate_household_scene(3), generate_household_scene(3)
    assert a == b and 4 <= len(a.objects) <= 8
    world.reset(a)
    assert sorted(world.object_names()) == sorted(a.names())
    assert all(o.place for o in world.objects())  # each stands on a place


def test_the_layouts_handle_geometry_follows_the_simulated_joints(kitchen):
    """The skills find handles from the layout and the opening alone (as from joint states): that must
    match where the simulated door and drawer really put them."""
    from teachbot.world.household_layout import CABINET_WALL as WALL

    place = kitchen.layout.place("fridge")
    w = place.width
    for opening in (0.0, 0.5, 1.0):
        kitchen._set_opening("fridge", opening)
        kitchen._set_opening("cupboard", opening)
        door_local = [WALL, w - 0.08, float(place.shelf_height) + 0.2]  # hinge on the left: the handle at +y
        assert kitchen.handle_position("fridge") == pytest.approx(kitchen._link_point("fridge", door_local), abs=1e-6)
        drawer = kitchen.layout.place("cupboard").drawer
        assert kitchen.handle_position("cupboard") == pytest.approx(
            kitchen._link_point("cupboard", [float(drawer["depth"]) / 2 + 0.03, 0.0, 0.06]), abs=1e-6)
