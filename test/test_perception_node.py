"""The perception node on the simulator's camera: the object list it publishes, its detect and
scene-query services, and a console session whose object functions it serves."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import rclpy
import ros_graph
from rclpy.executors import SingleThreadedExecutor
from teachbot_interfaces.msg import ObjectList
from teachbot_interfaces.srv import Detect, QueryScene
from timing import pytest_timeout

from teachbot.errors import ConfigError
from teachbot.llm.scripted import ScriptedModel
from teachbot.nodes.common import LATCHED_QOS
from teachbot.nodes.interaction_manager_node import InteractionManagerNode
from teachbot.nodes.perception_node import PerceptionNode

pytestmark = pytest.mark.timeout(pytest_timeout(500))

SCENE = """objects:
  - {category: block, color: red, position: [-0.12, -0.45]}
  - {category: block, color: green, position: [0.05, -0.62]}
  - {category: bowl, color: blue, position: [0.12, -0.38]}
"""


def wait_until(predicate, timeout=60.0, what="condition"):
    ros_graph.wait_until(predicate, timeout, what, period=0.05)


class Running:
    """Nodes spun on their own executor thread for one test."""

    def __init__(self, *nodes):
        self.nodes = nodes
        self.executor = SingleThreadedExecutor()
        for node in nodes:
            self.executor.add_node(node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        # as InProcessStack.stop: stop spinning before the nodes close (an action client destroyed while the
        # executor waits on it is an error in the spin thread)
        self.executor.shutdown(timeout_sec=2.0)
        self.thread.join(timeout=2.0)
        for node in self.nodes:
            getattr(node, "close", lambda: None)()
            node.destroy_node()


def call(client, request, timeout=20.0):
    return ros_graph.call(client, request, timeout)


def latest_objects(probe):
    lists = []
    probe.create_subscription(ObjectList, "/perception/objects", lists.append, LATCHED_QOS)
    return lists


def test_the_object_list_services_and_relations_come_from_the_camera(client, sim_camera, ros_context):
    client.reset(scene_yaml=SCENE)
    truth = {o.name: o for o in client.world_state().objects}
    node = PerceptionNode()
    probe = rclpy.create_node("perception_probe")
    lists = latest_objects(probe)
    detect = probe.create_client(Detect, "/perception/detect")
    query = probe.create_client(QueryScene, "/perception/query_scene")
    with Running(node, probe):
        wait_until(lambda: lists and {o.name for o in lists[-1].objects} == set(truth), what="the scene's objects")
        msg = lists[-1]
        assert msg.header.frame_id == "base"
        for o in msg.objects:
            p, t = o.pose.position, truth[o.name].pose.position
            error = float(np.linalg.norm([p.x - t.x, p.y - t.y, p.z - t.z]))
            assert error < 0.01, f"{o.name} published {error * 100:.2f} cm from ground truth"
            assert o.label == truth[o.name].category and o.id > 0 and o.bbox.width > 0

        reply = call(detect, Detect.Request(queries=["block"]))
        assert reply.success and sorted(o.name for o in reply.objects) == ["green block", "red block"]
        assert call(detect, Detect.Request(queries=["cup"])).objects == []

        def ask(**fields):
            return call(query, QueryScene.Request(**fields))

        assert ask(query="relation", relation="left_of", subject="red block", object="blue bowl").holds
        assert not ask(query="relation", relation="left_of", subject="blue bowl", object="red block").holds
        assert ask(query="relation", relation="in_front_of", subject="green block", object="red block").holds
        far = ask(query="distance_to_robot", subject="green block")
        assert far.success and far.value == pytest.approx(np.hypot(0.05, 0.62), abs=0.02)
        state = ask(query="state", subject="red block")
        assert dict(zip(state.keys, state.values))["held"] == "False"  # what the simulator knows
        props = ask(query="properties", subject="blue bowl")
        assert dict(zip(props.keys, props.values))["container"] == "true"
        bad = ask(query="relation", relation="under", subject="red block", object="blue bowl")
        assert not bad.success and "use one of left_of" in bad.message
        unknown = ask(query="state", subject="purple block")
        assert not unknown.success and "perception knows: blue bowl, green block, red block" in unknown.message


def test_a_console_session_gets_its_objects_from_perception(client, sim_camera, ros_context):
    """get_obj_names/get_obj_pos in the transcript come from perception (config/interaction.yaml's
    objects_topic), and after the robot acts perception sees the block in the bowl."""
    client.reset(scene_yaml=SCENE)
    truth = {o.name: o for o in client.world_state().objects}
    model = ScriptedModel([  # the console itself runs the first wait_for_trigger()
        "get_obj_names()",
        "get_obj_pos('red block')",
        "put_first_on_second('red block', 'blue bowl')",
        "wait_for_trigger()",
    ])
    perception = PerceptionNode()
    im = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), dialog_timeout=60.0)
    assert im.objects_topic == "/perception/objects"
    probe = rclpy.create_node("perception_probe_2")
    lists = latest_objects(probe)
    query = probe.create_client(QueryScene, "/perception/query_scene")
    with Running(perception, im, probe):
        wait_until(lambda: lists and {o.name for o in lists[-1].objects} == set(truth), what="perception's first list")
        # no memory node here: the console opens the example store itself before its first wait (the sentence
        # embedder's imports take about two minutes on a loaded 2-core machine)
        wait_until(lambda: im.session is not None and im.session.transcript.code() == ["wait_for_trigger()"],
                   timeout=300.0, what="the console's own wait for the person")
        assert model.served == 0
        im.dialog.put_user("put the red block in the blue bowl")
        wait_until(lambda: model.served >= 4, what="the scripted statements")
        lines = im.session.transcript.render().splitlines()
        assert lines[3] == "['blue bowl', 'green block', 'red block']"
        x, y = eval(lines[5])  # noqa: S307 - the console's repr of a list of two floats
        t = truth["red block"].pose.position
        assert abs(x - t.x) < 0.01 and abs(y - t.y) < 0.01
        assert lines[7] == "'success'"

        def in_bowl():
            reply = call(query, QueryScene.Request(query="relation", relation="inside", subject="red block", object="blue bowl"))
            return reply.success and reply.holds
        wait_until(in_bowl, what="perception to see the red block inside the blue bowl")
    world = {o.name: o for o in client.world_state().objects}
    assert world["red block"].supported_by == "blue bowl"


def test_sim_ground_truth_without_a_simulator_is_refused(ros_context):
    with pytest.raises(ConfigError, match="set perception.backend in .*perception.yaml or the perception_backend"):
        PerceptionNode(namespace="/no_sim", world_state_service="")


def test_images_of_every_supported_encoding_convert():
    from sensor_msgs.msg import Image

    from teachbot.nodes.convert import image_array

    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    assert np.array_equal(image_array(_msg(rgb, "rgb8")), rgb)
    assert np.array_equal(image_array(_msg(rgb[:, :, ::-1], "bgr8")), rgb)
    depth_mm = np.array([[1000, 250], [0, 65535]], dtype=np.uint16)
    assert np.allclose(image_array(_msg(depth_mm, "16UC1")), depth_mm / 1000.0)
    seg = np.array([[-1, 7]], dtype=np.int32)
    assert np.array_equal(image_array(_msg(seg, "32SC1")), seg)
    with pytest.raises(ValueError, match="not supported; use one of"):
        image_array(Image(height=1, width=1, encoding="yuv422", step=2, data=b"\x00\x00"))


def _msg(array, encoding):
    from builtin_interfaces.msg import Time

    from teachbot.nodes.convert import image_msg

    return image_msg(array, encoding, "camera", Time())
