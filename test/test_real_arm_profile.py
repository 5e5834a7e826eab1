"""A real-arm profile (other topic names, perception as the object source) drives a fake controller
node that only speaks the controller topics: no simulator, no code change, only config."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import rclpy
from fake_controller import FakeController
from rclpy.executors import MultiThreadedExecutor
from teachbot_interfaces.msg import DetectedObject, ObjectList, SkillResult
from timing import deadline, pytest_timeout, timeout

from teachbot.nodes.common import LATCHED_QOS
from teachbot.nodes.skill_client import SkillClient
from teachbot.nodes.skills_node import SkillsNode
from teachbot.robot_profile import RobotProfile

pytestmark = pytest.mark.timeout(pytest_timeout(120))


@pytest.fixture(scope="module")
def real_arm(ros_context):
    profile = RobotProfile.load("panda_real")
    controller = FakeController(profile)
    skills = SkillsNode("panda_real", namespace="/panda")
    client_node = rclpy.create_node("real_arm_client", namespace="/panda")
    perception = rclpy.create_node("fake_perception")
    objects_pub = perception.create_publisher(ObjectList, profile.topics["objects"], LATCHED_QOS)
    executor = MultiThreadedExecutor(num_threads=4)
    for node in (controller, skills, client_node, perception):
        executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    client = SkillClient(client_node, estop_topic=profile.topics["emergency_stop"])
    client.wait_ready(30, sim=False)
    yield profile, controller, client, objects_pub
    client.close()
    skills.close()
    executor.shutdown(timeout_sec=2)
    for node in (controller, skills, client_node, perception):
        node.destroy_node()


def test_profile_names_other_topics_than_the_sim(real_arm):
    profile, *_ = real_arm
    sim = RobotProfile.load("panda_sim")
    assert profile.topics["joint_trajectory"] != sim.topics["joint_trajectory"]
    assert profile.topics["objects"] == "/perception/objects"
    assert profile.safety.max_speed_factor < sim.safety.max_speed_factor


def test_move_to_drives_the_controller_through_its_topics(real_arm):
    profile, controller, client, _ = real_arm
    result = client.call("move_to", position=(0.1, -0.4, 0.3), speed_factor=0.5)
    assert result.success, result.message
    assert controller.trajectories, "no trajectory reached the controller topic"
    last = controller.trajectories[-1]
    assert list(last.joint_names) == list(profile.arm_joints)
    from teachbot.skills.kinematics import KinematicsModel

    kin = KinematicsModel(profile)
    position, _ = kin.fk(controller.q)
    kin.close()
    assert position == pytest.approx([0.1, -0.4, 0.3], abs=0.01)
    assert client.call("go_home").success
    assert controller.q == pytest.approx(profile.home, abs=0.02)


def test_the_real_profile_limits_apply(real_arm):
    _, _, client, _ = real_arm
    result = client.call("move_to", pose_name="handover", speed_factor=0.8)  # fine in sim, too fast here
    assert result.code == SkillResult.LIMIT_EXCEEDED and "(0, 0.5]" in result.message


def test_grasp_on_nothing_is_reported_not_claimed(real_arm):
    _, controller, client, objects_pub = real_arm
    msg = ObjectList()
    msg.objects = [DetectedObject(id=1, name="red block", label="block", score=0.9)]
    msg.objects[0].pose.position.x, msg.objects[0].pose.position.y, msg.objects[0].pose.position.z = 0.0, -0.5, 0.02
    msg.objects[0].size.x = msg.objects[0].size.y = msg.objects[0].size.z = 0.04
    objects_pub.publish(msg)
    time.sleep(0.2)
    result = client.call("pick", object_name="red block")
    assert result.code == SkillResult.GRASP_FAILED and "closed on nothing" in result.message
    assert controller.width == pytest.approx(0.08, abs=0.005)  # opened again after the failed grasp


def test_emergency_stop_on_the_profile_topic(real_arm):
    profile, controller, client, _ = real_arm
    handle = client.send("move_to", position=(-0.2, -0.6, 0.3), speed_factor=0.1)
    time.sleep(0.3)
    client.emergency_stop(True)
    result = handle.result(timeout(10))
    assert result.code == SkillResult.EMERGENCY_STOP
    until = deadline(2.0)
    while len(controller.trajectories[-1].points) != 0:  # the hold command is the last one received
        assert time.monotonic() < until, "no hold command reached the controller"
        time.sleep(0.01)
    q = controller.q.copy()
    time.sleep(0.3)
    assert np.max(np.abs(controller.q - q)) < 1e-6
    client.emergency_stop(False)
    time.sleep(0.1)
    assert client.call("go_home").success
