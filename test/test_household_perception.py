"""Perception in the household world: the scene model from ground truth, furniture in the relations,
directions that turn with the robot, states and properties, what the mast camera sees."""

from __future__ import annotations

import math

import numpy as np
import pytest

from teachbot.errors import ConfigError, InvalidArgumentError, UnknownObjectError
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.household import HouseholdPerception, ThingStatus, WorldThing, fixture_bodies
from teachbot.sim.camera import CameraSpec
from teachbot.simrobot.direct import perceive_household
from teachbot.skills.navigation import time_path
from teachbot.world.floor import BasePose
from teachbot.world.household_layout import HouseholdLayout


@pytest.fixture()
def perception():
    return HouseholdPerception(PerceptionConfig.load("perception_household"))


def thing(name, kind, x, y, z, size=(0.06, 0.06, 0.1), sid=-1):
    return WorldThing(name, kind, "", np.array([x, y, z]), np.array(size), 0.0, sid)


def test_the_config_says_where_objects_come_from():
    cfg = PerceptionConfig.load("perception_household")
    assert cfg.observe == "world_state" and cfg.relations.viewer == "robot" and cfg.base_frame == "map"
    assert PerceptionConfig.load("perception").observe == "camera"
    raw = {"perception": {"backend": "sim_ground_truth", "observe": "telepathy"}}
    with pytest.raises(ConfigError, match="observe must be one of"):
        PerceptionConfig.from_mapping(raw)
    raw = {"perception": {"backend": "sim_ground_truth", "relations": {"viewer": "bird"}}}
    with pytest.raises(ConfigError, match="viewer must be 'fixed' or 'robot'"):
        PerceptionConfig.from_mapping(raw)


def test_furniture_bodies_follow_the_drawer():
    layout = HouseholdLayout.load()
    closed = {b.name: b for b in fixture_bodies(layout, {"cupboard": 0.0})}
    opened = {b.name: b for b in fixture_bodies(layout, {"cupboard": 1.0})}
    assert closed["fridge"].container and closed["cupboard"].container and not closed["counter"].container
    travel = layout.place("cupboard").joint_limit
    moved = opened["cupboard"].centre - closed["cupboard"].centre
    assert np.allclose(moved, np.array(layout.place("cupboard").front) * travel)
    assert closed["counter"].top == pytest.approx(0.9) and closed["fridge"].bottom == pytest.approx(1.0)


def test_relations_with_furniture_and_between_objects(perception):
    things = [
        thing("apple", "apple", 1.05, 0.6, 0.75 + 0.04, (0.08, 0.08, 0.08)),
        thing("banana", "banana", 1.05, 0.2, 0.75 + 0.02, (0.18, 0.04, 0.04)),
        thing("milk", "milk", 3.0, 1.75, 1.0 + 0.09, (0.07, 0.07, 0.18)),
        thing("bowl", "bowl", 3.0, -1.3, 0.9 + 0.03, (0.16, 0.16, 0.06)),
        thing("pear", "pear", 3.0, -1.3, 0.9 + 0.01 + 0.045, (0.07, 0.07, 0.09)),
    ]
    perception.update(things, 1.0, (0.0, 0.4, 0.0))
    q = perception.queries
    assert q.relation("on_top_of", "apple", "table") and not q.relation("inside", "apple", "table")
    assert q.relation("inside", "milk", "fridge") and not q.relation("inside", "milk", "cupboard")
    assert q.relation("inside", "pear", "bowl") and q.relation("on_top_of", "bowl", "counter")
    assert q.supported_by("pear") == "bowl" and q.supported_by("bowl") == "counter"
    assert q.supported_by("milk") == "fridge"
    assert q.relation("near", "apple", "banana") is False  # 40 cm apart
    assert q.relation("near", "bowl", "counter") and not q.relation("near", "apple", "counter")
    assert q.relation("above", "apple", "table") and q.relation("below", "table", "apple")
    assert not q.relation("above", "pear", "bowl")  # in it, not above it
    assert sorted(q.related("on_top_of", "table")) == ["apple", "banana"]
    assert q.contents("fridge") == ["milk"] and q.contents("bowl") == ["pear"]
    with pytest.raises(InvalidArgumentError, match="not a container"):
        q.contents("table")
    with pytest.raises(UnknownObjectError, match="places: .*fridge"):
        q.relation("near", "kettle", "fridge")


def test_directions_turn_with_the_robot(perception):
    things = [thing("apple", "apple", 1.05, 0.6, 0.79), thing("banana", "banana", 1.05, 0.2, 0.77)]
    perception.update(things, 1.0, (0.0, 0.4, 0.0))  # facing +x: the apple (+y) is on the robot's left
    q = perception.queries
    assert q.relation("left_of", "apple", "banana") and q.relation("right_of", "banana", "apple")
    perception.update(things, 2.0, (2.1, 0.4, math.pi))  # facing -x from across the table: sides swap
    assert q.relation("right_of", "apple", "banana") and not q.relation("left_of", "apple", "banana")
    perception.update([thing("apple", "apple", 1.3, 0.4, 0.79), thing("banana", "banana", 1.0, 0.4, 0.77)], 3.0,
                      (0.0, 0.4, 0.0))
    assert q.relation("in_front_of", "banana", "apple") and q.relation("behind", "apple", "banana")


def test_distance_is_from_the_arm_where_the_base_stands(perception):
    perception.update([thing("apple", "apple", 1.05, 0.4, 0.79)], 1.0, (0.5, 0.4, 0.0))
    mount = perception.layout.base.arm_mount
    arm = np.array([0.5 + mount[0], 0.4 + mount[1], mount[2]])
    assert perception.queries.distance_to_robot("apple") == pytest.approx(float(np.linalg.norm([1.05, 0.4, 0.79] - arm)))
    perception.update([thing("apple", "apple", 1.05, 0.4, 0.79)], 2.0, (-1.0, 0.4, 0.0))
    arm = np.array([-1.0 + mount[0], 0.4 + mount[1], mount[2]])
    assert perception.queries.distance_to_robot("apple") == pytest.approx(float(np.linalg.norm([1.05, 0.4, 0.79] - arm)))
    table = perception.queries.distance_to_robot("table")  # to the nearest edge of the table
    assert table == pytest.approx(1.2 - 0.4 - (-1.0 + mount[0]))


def test_states_and_properties_of_objects_and_places(perception):
    status = {"milk": ThingStatus("fridge", True, False, {"filled": True}, "milk"), "fridge": ThingStatus(flags={"open": False})}
    perception.update([thing("milk", "milk", 3.0, 1.75, 1.09, (0.07, 0.07, 0.18))], 1.0, (0.0, 0.0, 0.0),
                      {"fridge": 0.0, "cupboard": 0.0}, status)
    q = perception.queries
    milk = q.state("milk")
    assert milk["supported_by"] == "fridge" and milk["inside"] == "fridge" and milk["place"] == "fridge"
    assert milk["filled"] == "True" and milk["contents"] == "milk" and milk["held"] == "False"
    assert "on_table" not in milk
    fridge = q.state("fridge")
    assert fridge["open"] == "False" and fridge["opening"] == "0.00" and fridge["kind"] == "place"
    props = q.properties("milk")
    assert props["category"] == "milk" and props["pickable"] == "true" and props["container"] == "true"
    assert q.properties("fridge")["openable"] == "true" and q.properties("table")["cleanable"] == "true"
    assert q.properties("table")["openable"] == "false"


def test_the_real_kitchen_through_the_mast_camera(kitchen):
    perception = HouseholdPerception(PerceptionConfig.load("perception_household"))
    camera = CameraSpec()
    perceive_household(kitchen, perception, camera)
    q = perception.queries
    names = {o.name for o in perception.scene.objects()}
    assert names == set(kitchen.object_names())
    assert q.state("milk")["inside"] == "fridge" and q.state("milk")["visible"] == "False"  # behind the closed door
    assert q.supported_by("apple") == "table" and q.supported_by("red cup") == "counter"
    assert q.supported_by("sponge") == "sink" and q.supported_by("knife") == "workbench"
    assert q.state("apple")["visible"] == "True"  # the robot starts facing the table
    assert q.state("fridge")["open"] == "False" and q.state("table")["clean"] == "False"
    # turn the base to face the workbench: the table leaves the view, the bread comes in
    start = kitchen.base_pose
    path = time_path([start, BasePose(start.x, start.y, math.pi)], max_speed=0.5, max_yaw_rate=1.2, speed_factor=1.0)
    kitchen.command_base(path)
    kitchen.step(int((path.duration + 0.2) / kitchen.time_step))
    perceive_household(kitchen, perception, camera)
    assert q.state("apple")["visible"] == "False" and q.state("bread")["visible"] == "True"
    # the knife lies 35 cm to the bread's left as the robot faces the workbench (scene offsets: across)
    assert q.relation("left_of", "knife", "bread") and not q.relation("near", "knife", "bread")
    assert q.relation("near", "red cup", "blue cup") and not q.relation("near", "red cup", "apple juice")
