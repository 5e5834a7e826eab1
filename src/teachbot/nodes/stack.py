"""The sim and skills nodes composed in one process, for the CLI, tests and benchmarks.

Where ``ros2 launch`` is available the same nodes run as separate processes (launch/sim.launch.py);
here they share one MultiThreadedExecutor on a background thread.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import rclpy
from rclpy.executors import Executor, MultiThreadedExecutor, SingleThreadedExecutor

from teachbot.nodes.sim_node import SimNode
from teachbot.nodes.skill_client import SkillClient
from teachbot.nodes.skills_node import SkillsNode
from teachbot.ros_env import configure_loopback

SWITCH_INTERVAL = 0.001  # seconds


class InProcessStack:
    """Start with :meth:`start`, talk to it through :attr:`client`, end with :meth:`stop`."""

    def __init__(self, robot_profile: str = "panda_sim", sim: bool = True, threads: int = 1, **sim_overrides: Any) -> None:
        self.robot_profile = robot_profile
        self.with_sim = sim
        self.sim_overrides = sim_overrides
        self.threads = threads
        self.nodes: list[Any] = []
        self.client: SkillClient | None = None
        self._executor: Executor | None = None
        self._thread: threading.Thread | None = None
        self._owns_context = False

    def start(self, wait: float = 30.0) -> SkillClient:
        configure_loopback()
        # the physics thread and numpy release and retake the GIL constantly; a short switch
        # interval keeps the ROS and skill threads from waiting 5 ms for it each time
        sys.setswitchinterval(SWITCH_INTERVAL)
        if not rclpy.ok():
            rclpy.init()
            self._owns_context = True
        if self.with_sim:
            self.nodes.append(SimNode(**self.sim_overrides))
        self.nodes.append(SkillsNode(self.robot_profile))
        # every callback is short (skills run on the skills node's own worker threads), so one
        # executor thread is enough and costs far less per message than a thread pool
        self._executor = SingleThreadedExecutor() if self.threads <= 1 else MultiThreadedExecutor(num_threads=self.threads)
        for node in self.nodes:
            self._executor.add_node(node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True, name="teachbot-stack")
        self._thread.start()
        self.client_node = rclpy.create_node("teachbot_client")
        self.client = SkillClient(self.client_node)
        self.client.spin_in_background()
        self.client.wait_ready(wait, sim=self.with_sim)
        return self.client

    def add_node(self, node: Any) -> None:
        """Spin another node (e.g. the interaction manager) on the stack's executor."""
        self.nodes.append(node)
        if self._executor is not None:
            self._executor.add_node(node)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client_node.destroy_node()
            self.client = None
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=2.0)
            if self._thread is not None:
                self._thread.join(timeout=2.0)
        for node in self.nodes:
            close = getattr(node, "close", None)
            if close:
                close()
            node.destroy_node()
        self.nodes.clear()
        if self._owns_context and rclpy.ok():
            rclpy.shutdown()

    def __enter__(self) -> SkillClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

