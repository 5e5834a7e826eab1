"""The household robot over ROS (issue 11): the sim node's household world, the skills node's household
actions, the base and the doors driven through joints, the console's household API over the skill client."""

from __future__ import annotations

import time

import pytest

from teachbot.console.dialog import DialogChannel
from teachbot.console.household_api import HouseholdRobot
from teachbot.nodeset import node_set

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def household(ros_context):
    from teachbot.nodes.stack import InProcessStack

    # simulated time runs at most 4x the wall: at "as fast as possible" a loaded machine delivers a
    # trajectory to the sim after the skill's whole allowance of simulated time has passed
    s = InProcessStack("household_sim", real_time_factor=4.0, camera_enabled=False)
    s.start()
    yield s
    s.stop()


def truth(client):
    return {o.name: o for o in client.world_state().objects}


def states(stack):
    sim = stack.node("sim")
    with sim.lock:
        return sim.world.thing_states()


def test_the_node_set_for_the_household_world():
    specs = {s.name: s for s in node_set("sim", {"world": "household", "console": True})}
    assert specs["sim"].parameters["robot_profile"] == "household_sim"
    assert specs["interaction_manager"].parameters["api_profile"] == "household"
    assert "perception" not in specs  # the console reads the simulator's objects and states


def test_fetch_and_hand_over_through_the_actions(household):
    client = household.client
    assert client.reset(seed=0).success  # seed 0: the default kitchen
    result = client.call("grasp", object_name="orange juice", timeout=120)
    assert result.success, result.message
    assert truth(client)["orange juice"].held
    result = client.call("move_to", location="person", speed_factor=1.0, timeout=120)
    assert result.success, result.message
    joints = client.world_state().joints
    base = dict(zip(joints.name, joints.position))
    x, y, _ = household.node("sim").world.layout.location_pose("person")
    assert (base["base_x"], base["base_y"]) == pytest.approx((x, y), abs=0.02)
    result = client.call("handover_object_to_human", timeout=120)  # nobody releases: the configured timeout
    assert result.success, result.message
    juice = truth(client)["orange juice"]
    assert not juice.held and juice.supported_by == ""  # at the person's side, not on the floor
    assert juice.pose.position.z > 0.5


def test_fridge_and_wiping_through_the_actions(household):
    client = household.client
    assert client.reset(seed=0).success
    for name, fields in (("open", {"thing": "fridge"}), ("grasp", {"object_name": "sponge"}), ("wipe", {"surface": "table"})):
        handle = client.send(name, **fields)
        result = handle.result(120)
        assert result.success, f"{name}: {result.message} (stages {handle.feedback})"
    world = states(household)
    assert world["fridge"]["open"] and world["table"]["clean"]
    refused = client.call("open", thing="table", timeout=30)
    assert not refused.success and "not openable" in refused.message


def test_the_console_api_over_ros(household):
    client = household.client
    assert client.reset(seed=0).success
    objects = lambda: [o.name for o in client.world_state().objects]  # noqa: E731

    class Skills:
        def call(self, name, timeout=0.0, **fields):
            return client.call(name, timeout=120, **fields)

    robot = HouseholdRobot(Skills(), objects, lambda: states(household), DialogChannel(timeout=1.0)).functions()
    assert robot["list_objects"]()[:5] == ["apple juice", "orange juice", "red cup", "blue cup", "sponge"]
    assert robot["grasp"]("red cup") == "success"
    with pytest.raises(RuntimeError, match="already holds 'red cup'"):
        robot["grasp"]("blue cup")
    with pytest.raises(ValueError, match="unknown location 'kitchen'"):
        robot["move_to"]("kitchen")
    assert robot["place_object"]("table") == "success"
    assert robot["get_object_state"]("table") == {"clean": False}
    started = time.monotonic()
    assert robot["move_to"]("shelf", 1.0) == "success"
    assert time.monotonic() - started < 60
