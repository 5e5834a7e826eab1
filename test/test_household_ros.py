"""The household robot over ROS (issue 11): the sim node's household world, the skills node's household
actions, the base and the doors driven through joints, the console's household API over the skill client.

The stack runs in a child process on a ROS domain of its own: this test session's shared tabletop stack
already has a /sim and a /skills node, and a second pair refuses to start next to it (as it should).
``python test/test_household_ros.py`` runs the scenarios directly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import timing
from timing import deadline, pytest_timeout, timeout

from teachbot.console.household_api import HouseholdRobot
from teachbot.language.dialog import DialogChannel
from teachbot.nodes.nodeset import node_set
from teachbot.robot_profile import RobotProfile
from teachbot.skills.kinematics import KinematicsModel
from teachbot.skills.library import FINGERTIP_DEPTH, GRASP_MARGIN, PALM_HEIGHT

pytestmark = pytest.mark.timeout(pytest_timeout(800))


def test_the_household_stack_over_ros():
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root / "test"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=pytest_timeout(780))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-4000:]
    assert run.stdout.count("ok: ") == len(SCENARIOS), run.stdout


def _household_stack():
    from teachbot.nodes.stack import InProcessStack

    # simulated time runs at most 4x the wall (the skills' allowances hold at any speed, see ArmDeadline, but the
    # mast camera renders at 2 Hz of simulated time and tells perception what is in view)
    specs = node_set("sim", {"world": "household", "real_time_factor": 4.0, "camera": True},
                     only=("sim", "skills", "perception"), extra_parameters={"sim": {"camera_rate": 2.0}})
    s = InProcessStack.from_node_set(specs)
    s.start(wait=timeout(60.0))
    return s


def truth(client):
    return {o.name: o for o in client.world_state().objects}


def held_below_hand(client, stack, name):
    """How far the centre of the held ``name`` hangs below the grasp point of the hand, and its height."""
    state = client.world_state()
    joints = dict(zip(state.joints.name, state.joints.position))
    profile = RobotProfile.load("household_sim")
    hand = KinematicsModel(profile).fk(np.array([joints[j] for j in profile.arm_joints]))[0]
    origin = stack.node("sim").world.layout.base.arm_origin(joints["base_x"], joints["base_y"], joints["base_yaw"])
    thing = {o.name: o for o in state.objects}[name]
    return float(origin[2] + hand[2] - thing.pose.position.z), thing.size.z


def states(stack):
    sim = stack.node("sim")
    with sim.lock:
        return sim.world.thing_states()


def test_the_node_set_for_the_household_world():
    specs = {s.name: s for s in node_set("sim", {"world": "household", "console": True})}
    assert specs["sim"].parameters["robot_profile"] == "household_sim"
    assert specs["interaction_manager"].parameters["api_profile"] == "household"
    assert specs["perception"].parameters["config"] == "perception_household"  # ground truth, the camera for the view


def scenario_fetch_and_hand_over_through_the_actions(household):
    client = household.client
    assert client.reset(seed=0).success  # seed 0: the default kitchen
    result = client.call("grasp", object_name="orange juice", timeout=timeout(120))
    assert result.success, result.message
    assert truth(client)["orange juice"].held
    result = client.call("move_to", location="person", speed_factor=1.0, timeout=timeout(120))
    assert result.success, result.message
    joints = client.world_state().joints
    base = dict(zip(joints.name, joints.position))
    x, y, _ = household.node("sim").world.layout.location_pose("person")
    assert (base["base_x"], base["base_y"]) == pytest.approx((x, y), abs=0.02)
    result = client.call("handover_object_to_human", timeout=timeout(120))  # nobody releases: the configured timeout
    assert result.success, result.message
    juice = truth(client)["orange juice"]
    assert not juice.held and juice.supported_by == ""  # at the person's side, not on the floor
    assert juice.pose.position.z > 0.5


def scenario_fridge_and_wiping_through_the_actions(household):
    client = household.client
    assert client.reset(seed=0).success
    wipe_once = {"surface": "table", "wipe_passes": 1}  # a skill parameter: the client sends it in the goal's parameter fields
    for name, fields in (("open", {"thing": "fridge"}), ("grasp", {"object_name": "sponge"}), ("wipe", wipe_once)):
        handle = client.send(name, **fields)
        result = handle.result(timeout(120))
        assert result.success, f"{name}: {result.message} (stages {handle.feedback})"
    world = states(household)
    assert world["fridge"]["open"] and world["table"]["clean"]
    refused = client.call("open", thing="table", timeout=timeout(30))
    assert not refused.success and "not openable" in refused.message


def scenario_the_console_api_over_ros(household):
    client = household.client
    assert client.reset(seed=0).success
    objects = lambda: [o.name for o in client.world_state().objects]  # noqa: E731

    class Skills:
        def call(self, name, timeout=0.0, **fields):
            return client.call(name, timeout=timing.timeout(120), **fields)

    robot = HouseholdRobot(Skills(), objects, lambda: states(household), DialogChannel(timeout=1.0)).functions()
    assert robot["list_objects"]()[:5] == ["apple juice", "orange juice", "red cup", "blue cup", "sponge"]
    before = list(client.world_state().joints.position)
    with pytest.raises(ValueError, match=re.escape("grasp_height_offset=0.2 is outside its safe range [-0.03, 0.05] m")):
        robot["grasp"]("red cup", grasp_height_offset=0.2)  # refused by the skills node, before anything moves
    assert list(client.world_state().joints.position) == pytest.approx(before, abs=2e-3)
    assert robot["grasp"]("red cup", grasp_height_offset=-0.02) == "success"
    below, height = held_below_hand(client, household, "red cup")
    default = max(0.0, height / 2 - PALM_HEIGHT + GRASP_MARGIN, -height / 2 + FINGERTIP_DEPTH + GRASP_MARGIN)
    assert below == pytest.approx(default - 0.02, abs=0.006)  # gripped 2 cm lower down the cup
    with pytest.raises(RuntimeError, match="already holds 'red cup'"):
        robot["grasp"]("blue cup")
    with pytest.raises(ValueError, match="unknown location 'kitchen'"):
        robot["move_to"]("kitchen")
    assert robot["place_object"]("table") == "success"
    assert robot["get_object_state"]("table") == {"clean": False}
    started = time.monotonic()
    assert robot["move_to"]("shelf", 1.0) == "success"
    assert time.monotonic() - started < timeout(60)


def scenario_the_person_speaking_takes_the_handed_object(household):
    """While the robot holds the juice out, the person's words ("thank you") are the dialog event that
    makes it let go at once (not after the handover timeout); the words still reach the console."""
    import rclpy
    from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate

    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.common import COMMAND_QOS
    from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS, InteractionManagerNode

    client, sim = household.client, household.node("sim")
    assert client.reset(seed=0).success
    model = ScriptedModel(["grasp('apple juice')", "handover_object_to_human()", "wait_for_trigger()"])
    node = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), api_profile="household",
                                  dialog_timeout=60.0)
    person = rclpy.create_node("household_person")
    lines: list[str] = []
    person.create_subscription(TranscriptUpdate, "interaction/transcript", lambda m: lines.extend(m.lines), TRANSCRIPT_QOS)
    speak = person.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
    household.add_node(node)
    household.add_node(person)

    def wait_until(predicate, what, seconds=120.0):
        until = deadline(seconds)
        while not predicate():
            assert time.monotonic() < until, f"timed out waiting for {what}; transcript {lines}"
            time.sleep(0.02)

    person_at = sim.world.layout.location_pose("person")
    not_yet = [time.monotonic()]  # the last moment the robot was seen not yet holding the juice out

    def offering() -> bool:
        with sim.lock:
            juice = {o.name: o for o in sim.world.objects()}["apple juice"]
            hand, base = sim.world.ee_position(), sim.world.base_pose
        at_person = abs(base.x - person_at[0]) < 0.02 and abs(base.y - person_at[1]) < 0.02
        held_out = juice.held and at_person and abs(hand[2] - 1.0) < 0.03  # held out at the person's hand
        if not held_out:
            not_yet[0] = time.monotonic()
        return held_out

    try:
        # no memory node here: the console opens the example store itself before its first wait
        wait_until(lambda: lines == [">>> wait_for_trigger()"], "the console's first wait", 300.0)
        speak.publish(DialogTurn(speaker="user", type="dialog", text="bring me the apple juice"))
        wait_until(offering, "the robot holding the juice out to the person")
        time.sleep(0.3)
        speak.publish(DialogTurn(speaker="user", type="dialog", text="thank you"))
        wait_until(lambda: {o.name: o for o in sim.world.objects()}["apple juice"].place == "person", "the person holding it")
        # let go on the words, not at the end of the handover's wait: that wait (the profile's handover_timeout, of wall
        # time) began after the last moment the robot was seen not yet holding the juice out, so it would end after this
        handover_timeout = RobotProfile.load("household_sim").skills.handover_timeout
        assert time.monotonic() < not_yet[0] + handover_timeout, "the robot let go at the handover timeout, not on the words"
        wait_until(lambda: "{'type': 'dialog', 'text': 'thank you'}" in lines, "the words reaching the console")
        assert lines[lines.index(">>> handover_object_to_human()") + 1] == "'success'"
    finally:
        household.remove_node(node)  # closes it
        household.remove_node(person)


def scenario_perception_of_the_kitchen(household):
    """perception/objects in the map frame, relations with the furniture, states that follow the skills,
    detect() answering with what the mast camera sees."""
    import rclpy
    from teachbot_interfaces.msg import ObjectList, ThingStates
    from teachbot_interfaces.srv import Detect, QueryScene

    from teachbot.nodes.common import LATCHED_QOS

    client = household.client
    assert client.reset(seed=0).success
    probe = rclpy.create_node("household_perception_probe")
    got: dict[str, object] = {}
    probe.create_subscription(ObjectList, "perception/objects", lambda m: got.__setitem__("objects", m), LATCHED_QOS)
    probe.create_subscription(ThingStates, "perception/states", lambda m: got.__setitem__("states", m), LATCHED_QOS)
    query, detect = probe.create_client(QueryScene, "perception/query_scene"), probe.create_client(Detect, "perception/detect")
    household.add_node(probe)

    def ask(service, request, seconds=20.0):
        assert service.wait_for_service(timeout(seconds))
        future = service.call_async(request)
        until = deadline(seconds)
        while not future.done():
            assert time.monotonic() < until, "perception did not answer"
            time.sleep(0.02)
        return future.result()

    def state(name):
        reply = ask(query, QueryScene.Request(query="state", subject=name))
        assert reply.success, reply.message
        return dict(zip(reply.keys, reply.values))

    def wait_for(predicate, what, seconds=60.0):
        until = deadline(seconds)
        while not predicate():
            assert time.monotonic() < until, f"timed out waiting for {what}"
            time.sleep(0.05)

    try:
        wait_for(lambda: "objects" in got and "milk" in {o.name for o in got["objects"].objects} and "states" in got,
                 "perception's object list")
        objects = got["objects"]
        assert objects.header.frame_id == "map"
        milk = next(o for o in objects.objects if o.name == "milk")
        assert milk.pose.position.x == pytest.approx(truth(client)["milk"].pose.position.x, abs=1e-3)
        inside = ask(query, QueryScene.Request(query="relation", relation="inside", subject="milk", object="fridge"))
        assert inside.success and inside.holds
        on = ask(query, QueryScene.Request(query="relation", relation="on top of", subject="apple", object="table"))
        assert on.success and on.holds
        unknown = ask(query, QueryScene.Request(query="relation", relation="near", subject="kettle", object="fridge"))
        assert not unknown.success and "unknown object 'kettle'" in unknown.message
        assert state("fridge")["open"] == "False" and state("milk")["visible"] == "False"
        wait_for(lambda: state("apple")["visible"] == "True", "the apple in the mast camera's view")
        seen = ask(detect, Detect.Request(queries=["apple", "juice"]))
        assert seen.success and {o.name for o in seen.objects} == {"apple"}  # the juice is on the counter, behind
        assert client.call("open", thing="fridge", timeout=timeout(120)).success
        wait_for(lambda: state("fridge")["open"] == "True", "the fridge's state to follow the door")
        # the states and the joint openings reach perception in separate messages: wait for both
        wait_for(lambda: float(state("fridge")["opening"]) > 0.9, "the fridge door's opening in perception")
        assert client.call("grasp", object_name="milk", timeout=timeout(120)).success
        # held, and so neither inside the fridge nor on anything: the relations may come a message after the grasp
        wait_for(lambda: state("milk")["held"] == "True" and state("milk")["supported_by"] == "" and state("milk")["inside"] == "",
                 "the milk held, out of the fridge")
        distance = ask(query, QueryScene.Request(query="distance_to_robot", subject="milk"))
        assert distance.success and distance.value < 0.9  # in the hand: within the arm's reach
        assert client.call("move_to", location="counter", speed_factor=1.0, timeout=timeout(120)).success
        wait_for(lambda: state("apple juice")["visible"] == "True", "the juice in view at the counter")
        assert state("apple")["visible"] == "False"  # the table is behind the robot now
        right = ask(query, QueryScene.Request(query="relation", relation="right_of", subject="red cup", object="apple juice"))
        assert right.success and right.holds  # as the robot facing the counter sees them
    finally:
        household.remove_node(probe)


SCENARIOS = (scenario_perception_of_the_kitchen,
             scenario_fetch_and_hand_over_through_the_actions, scenario_fridge_and_wiping_through_the_actions,
             scenario_the_console_api_over_ros, scenario_the_person_speaking_takes_the_handed_object)


if __name__ == "__main__":
    from teachbot.ros_env import configure_loopback

    configure_loopback()  # a free domain of its own, loopback only
    stack = _household_stack()
    try:
        for scenario in SCENARIOS:
            scenario(stack)
            print(f"ok: {scenario.__name__}", flush=True)
    finally:
        stack.stop()
