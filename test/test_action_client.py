"""teachbot's ActionClient: a goal whose answer the executor takes in the middle of send_goal_async still
completes the future the caller holds (rclpy 9.1.2 returned a second, orphaned future; ros2/rclpy#1123).

The race is made certain rather than left to a busy machine: the send pauses between rclpy's two
registrations (in the feedback-callback bookkeeping that sits between them) while an executor thread
spins the server and the client."""

from __future__ import annotations

import threading
import time

import pytest
from timing import timeout


class _PausingDict(dict):
    """Pauses the sending thread on the first insertion, giving the executor time to take the answer."""

    def __setitem__(self, key, value):
        time.sleep(0.5)
        super().__setitem__(key, value)


@pytest.fixture()
def node_and_server(ros_context):
    import rclpy
    from rclpy.action import ActionServer
    from rclpy.executors import MultiThreadedExecutor
    from teachbot_interfaces.action import Wait

    node = rclpy.create_node("action_client_race")

    def execute(handle):
        handle.succeed()
        return Wait.Result()

    server = ActionServer(node, Wait, "race/wait", execute)
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    yield node, Wait
    executor.shutdown(timeout_sec=2.0)
    server.destroy()
    node.destroy_node()
    thread.join(timeout=2.0)


def test_goal_answered_during_send_completes_the_returned_future(node_and_server):
    from teachbot.nodes.action_client import ActionClient

    node, wait = node_and_server
    client = ActionClient(node, wait, "race/wait")
    assert client.wait_for_server(timeout_sec=timeout(10.0))
    client._feedback_callbacks = _PausingDict()
    for _ in range(3):
        future = client.send_goal_async(wait.Goal(), feedback_callback=lambda _msg: None)
        done = threading.Event()
        future.add_done_callback(lambda _f, done=done: done.set())
        assert done.wait(timeout(10.0)), "the goal's answer went to a future nobody holds"
        assert future.result().accepted
    # the client goes with the node, after the fixture's executor has stopped (destroying it while the executor
    # spins would race the executor's wait set)


def test_every_goal_sender_uses_the_race_free_client():
    """No module of the stack makes rclpy's own ActionClient (only nodes/action_client.py wraps it)."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "teachbot"
    pattern = re.compile(r"from rclpy\.action import[^\n]*\bActionClient\b|rclpy\.action\.ActionClient\b")
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p.name != "action_client.py" and pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == [], f"use teachbot.nodes.action_client.ActionClient in {offenders}"
