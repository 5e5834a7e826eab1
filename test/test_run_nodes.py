"""run_nodes, the loop of every node process: a ROS error raised while the process is being stopped is a stop.

SIGTERM (or SIGINT) shuts rclpy's context down from its signal handler. If that lands while the executor is between
two waits, rclpy raises RCLError ('the given context is not valid') instead of ExternalShutdownException; the node
process then printed a traceback on an ordinary stop (seen on `teachbot sim --processes` under SIGTERM). The child
process here makes that error for real: a timer shuts the context down and then asks rcl for a guard condition.
An error while the context is still valid stays an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from timing import pytest_timeout

ROOT = Path(__file__).resolve().parents[1]


def run_child(mode: str) -> subprocess.CompletedProcess[str]:
    """This file as a node process on a ROS domain of its own, its node's timer doing ``mode``."""
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, __file__, mode], env=env, capture_output=True, text=True,
                          timeout=pytest_timeout(120))


def test_an_rcl_error_after_the_context_was_shut_down_is_a_quiet_stop() -> None:
    run = run_child("stopped")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "RCLError" not in run.stderr, run.stderr[-3000:]
    assert "timer fired" in run.stdout, run.stdout  # the error was really raised in the executor's loop


def test_an_error_while_the_context_is_valid_still_fails_the_process() -> None:
    run = run_child("broken")
    assert run.returncode != 0 and "RuntimeError: the node broke" in run.stderr, run.stderr[-3000:]


def node_process(mode: str) -> int:
    """run_nodes with one node whose timer fails as ``mode`` says."""
    import rclpy
    from rclpy.node import Node

    from teachbot.nodes.common import run_nodes
    from teachbot.ros_env import configure_loopback

    configure_loopback()  # a domain of its own: not the session stack's

    def make() -> Node:
        node = rclpy.create_node("run_nodes_probe")

        def fire() -> None:
            print("timer fired", flush=True)
            if mode == "broken":
                raise RuntimeError("the node broke")
            node.context.shutdown()  # what rclpy's SIGTERM handler does
            node.create_guard_condition(lambda: None)  # rcl: the given context is not valid (RCLError)

        node.create_timer(0.05, fire)
        return node

    return run_nodes([make])


if __name__ == "__main__":
    raise SystemExit(node_process(sys.argv[1]))
