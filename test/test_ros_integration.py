"""Integration: real rclpy sim and skills nodes in this process, driven through their actions and services."""

from __future__ import annotations

import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from rclpy.parameter import Parameter
from teachbot_interfaces.msg import SkillResult
from timing import deadline, pytest_timeout, timeout

from teachbot.world.scene import generate_scene

pytestmark = pytest.mark.timeout(pytest_timeout(240))


def wait_executing(handle, what: str) -> None:
    """Wait until the skills node has started the goal (accepted is not yet running)."""
    until = deadline(30.0)
    while handle.goal_handle.status != GoalStatus.STATUS_EXECUTING:
        assert time.monotonic() < until, f"{what} did not start"
        time.sleep(0.01)


def objects(client):
    return {o.name: o for o in client.world_state().objects}


def joints(client):
    return np.array(client.world_state().joints.position[:7])


def test_world_state_and_reset_by_seed(client, tabletop):
    reply = client.reset(seed=4)
    assert reply.success, reply.message
    expected = generate_scene(4, tabletop)
    state = client.world_state()
    assert state.seed == 4
    assert sorted(o.name for o in state.objects) == sorted(expected.names())
    for spec in expected.objects:
        pose = objects(client)[spec.name].pose.position
        assert [pose.x, pose.y] == pytest.approx(list(spec.position), abs=3e-3)
    assert len(state.joints.name) == 9 and state.held_object == ""


def test_reset_with_a_malformed_scene_reports_and_keeps_the_old_scene(client):
    client.reset(seed=2)
    before = sorted(objects(client))
    reply = client.reset(scene_yaml="objects: [{category: block, color: teal, position: [0, -0.5]}]")
    assert not reply.success and "color must be one of" in reply.message
    assert sorted(objects(client)) == before


def test_put_first_on_second_over_actions_with_feedback(client):
    client.reset(seed=5)
    handle = client.send("put_first_on_second", object_name="blue block", target_name="blue bowl")
    result = handle.result(timeout(60))
    assert result.success and result.code == SkillResult.SUCCESS, result.message
    assert objects(client)["blue block"].supported_by == "blue bowl"
    stages = [stage for stage, _ in handle.feedback]
    assert "grasp" in stages and "release" in stages
    progress = [p for _, p in handle.feedback]
    assert progress == sorted(progress) and progress[-1] > 0.9


def test_unknown_object_over_an_action(client):
    client.reset(seed=0)
    result = client.call("pick", object_name="cup")
    assert not result.success and result.code == SkillResult.UNKNOWN_OBJECT
    assert result.message.startswith("unknown object 'cup'; known: ")


def test_second_goal_while_one_runs_is_refused_with_a_reason(client):
    first = client.send("wait", duration=5.0)
    wait_executing(first, "the first wait")
    second = client.call("wait", duration=0.0)
    assert second.code == SkillResult.BUSY and "skill 'wait' is running" in second.message
    assert first.result(timeout(30)).success


def test_cancel_stops_a_skill(client):
    handle = client.send("wait", duration=30.0)
    wait_executing(handle, "the wait")
    started = time.monotonic()
    handle.cancel(timeout(5.0))
    result = handle.result(timeout(10))
    assert not result.success and result.code == SkillResult.CANCELED
    # the property: the cancel ended the wait, long before its 30 s (2 s on an idle machine)
    assert time.monotonic() - started < 10.0


@pytest.fixture()
def real_time(stack):
    """The sim at real time for the test, so a motion lasts as long as it would on a robot."""
    sim = stack.nodes[0]
    sim.set_parameters([Parameter("real_time_factor", value=1.0)])
    yield
    sim.set_parameters([Parameter("real_time_factor", value=0.0)])


def test_real_time_factor_is_a_live_parameter(stack):
    sim = stack.nodes[0]
    assert not sim.set_parameters([Parameter("real_time_factor", value=-1.0)])[0].successful
    assert sim.set_parameters([Parameter("real_time_factor", value=2.0)])[0].successful and sim.rtf == 2.0
    sim.set_parameters([Parameter("real_time_factor", value=0.0)])


def test_emergency_stop_halts_motion_and_blocks_new_goals(client, real_time):
    client.reset(seed=1)
    assert client.call("go_home").success
    handle = client.send("move_to", position=(0.25, -0.3, 0.1), speed_factor=0.1)  # slow: about 10 s of motion
    wait_executing(handle, "the move")
    time.sleep(0.5)
    assert handle.goal_handle.status == GoalStatus.STATUS_EXECUTING
    client.emergency_stop(True)
    result = handle.result(timeout(10))
    assert not result.success and result.code == SkillResult.EMERGENCY_STOP
    held = joints(client)
    time.sleep(0.5)
    assert np.max(np.abs(joints(client) - held)) < 0.01  # holding position
    refused = client.call("go_home")
    assert refused.code == SkillResult.EMERGENCY_STOP and "publish false" in refused.message
    client.emergency_stop(False)
    until = deadline(10.0)  # the release reaches the skills node on its own topic: until then it still refuses
    while (home := client.call("go_home")).code == SkillResult.EMERGENCY_STOP and time.monotonic() < until:
        time.sleep(0.1)
    assert home.success, home.message


def test_gripper_action_reports_holding(client):
    client.reset(seed=0)
    closed = client.call("gripper", close=True)
    assert closed.success
    opened = client.call("gripper", close=False)
    assert opened.success


def test_handover_releases_when_told(client):
    client.reset(seed=3)
    name = next(n for n in objects(client) if n.endswith("block"))
    handle = client.send("handover", object_name=name, timeout=30.0)
    until = deadline(30)
    while not any(stage == "waiting for human" for stage, _ in handle.feedback):
        assert time.monotonic() < until, "handover never reached the person"
        time.sleep(0.05)
    held = objects(client)[name]
    assert held.held and held.pose.position.z > 0.25
    assert client.release_handover().success
    result = handle.result(timeout(10))
    assert result.success, result.message
    assert not client.release_handover().success  # nothing running any more
