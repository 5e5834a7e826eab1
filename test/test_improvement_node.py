"""The improvement service answers when its node spins alone on an executor with no other traffic
(as under ros2 launch, one process per node): the LLM chain's worker thread must wake the executor."""

from __future__ import annotations

import threading

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from teachbot_interfaces.srv import Improve

from teachbot.llm.scripted import ScriptedModel
from teachbot.nodes.improvement_node import ImprovementNode

pytestmark = pytest.mark.timeout(60)

TRANSCRIPT = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the blue bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'no, I meant the green block; remember that'}
>>> learn_from_interaction()"""


def test_improve_answers_without_other_traffic(ros_context):
    # the chain stops at the second answer (the script runs out): an LLM failure is an answer too
    teacher = ScriptedModel(["The robot took the red block, but the person meant the green block."])
    node = ImprovementNode(model=teacher, mode="improve")
    caller = rclpy.create_node("improve_caller", namespace="/improvement_wake_test")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        client = caller.create_client(Improve, "/improvement/improve")
        done = threading.Event()
        assert client.wait_for_service(timeout_sec=10.0)
        future = client.call_async(Improve.Request(profile="tabletop", transcript=TRANSCRIPT))
        future.add_done_callback(lambda _f: done.set())
        caller_exec = SingleThreadedExecutor()
        caller_exec.add_node(caller)
        # the caller only spins until the answer arrives; the improvement node has no timers or
        # subscriptions, so only the worker's completion can wake its executor
        deadline = 20.0
        while not done.is_set() and deadline > 0:
            caller_exec.spin_once(timeout_sec=0.1)
            deadline -= 0.1
        assert done.is_set(), "the improvement service never answered: its executor was not woken"
        assert teacher.served == 1
        response = future.result()
        assert not response.stored and response.message.startswith("could not learn"), response
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        caller.destroy_node()
