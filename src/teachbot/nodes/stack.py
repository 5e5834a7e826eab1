"""A node set (teachbot.nodes.nodeset) composed in one process, for the CLI, tests and benchmarks.

Where ``ros2 launch`` is available the same nodes run as separate processes (launch/*.launch.py);
here they share one executor on a background thread. ``InProcessStack(robot_profile, sim=True,
**sim_overrides)`` is the bare robot (sim and skills nodes); ``InProcessStack.from_node_set(specs)``
is any node set, e.g. everything ``teachbot sim`` runs.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import rclpy
from rclpy.executors import Executor, MultiThreadedExecutor, SingleThreadedExecutor

from teachbot.nodes.nodeset import NodeSpec, node_set
from teachbot.nodes.skill_client import SkillClient
from teachbot.robot_profile import RobotProfile
from teachbot.ros_env import configure_loopback
from teachbot.tracing.setup import configure as configure_tracing

SWITCH_INTERVAL = 0.001  # seconds


class InProcessStack:
    """Start with :meth:`start`, talk to it through :attr:`client`, end with :meth:`stop`."""

    def __init__(
        self, robot_profile: str = "panda_sim", sim: bool = True, threads: int = 1, *,
        specs: Sequence[NodeSpec] | None = None, **sim_overrides: Any,
    ) -> None:
        """Without ``specs``: the sim (unless ``sim`` is false) and skills nodes of ``robot_profile``,
        ``sim_overrides`` being SimNode parameters. With ``specs``: exactly those nodes, in order."""
        if specs is None:
            mode = "sim" if sim else "robot"
            specs = node_set(mode, {"robot_profile": robot_profile}, only=("sim", "skills"),
                             extra_parameters={"sim": sim_overrides} if sim else None)
        elif sim_overrides:
            raise TypeError("give the sim node's parameters in its NodeSpec when passing specs")
        self.specs = list(specs)
        self.robot_profile = robot_profile
        self.with_sim = any(s.name == "sim" for s in self.specs)
        self.threads = threads
        self.nodes: list[Any] = []
        self.skipped: list[NodeSpec] = []  # nodes of parts of the project that are not installed
        self.client: SkillClient | None = None
        self._executor: Executor | None = None
        self._thread: threading.Thread | None = None
        self._owns_context = False
        self._stopping = False

    @classmethod
    def from_node_set(cls, specs: Sequence[NodeSpec], threads: int = 1) -> InProcessStack:
        """A stack of exactly these nodes (see teachbot.nodes.nodeset.node_set)."""
        profile = next((str(s.parameters["robot_profile"]) for s in specs if "robot_profile" in s.parameters), "panda_sim")
        return cls(profile, threads=threads, specs=specs)

    def start(self, wait: float = 30.0, on_node: Callable[[NodeSpec], None] | None = None) -> SkillClient:
        """Build every node (``on_node`` is told before each), spin them, and wait until the skills answer.

        A node that fails to start stops the nodes already built and raises its error.
        """
        configure_loopback()
        configure_tracing("teachbot-stack")  # every node of the stack writes its spans through one provider
        self._stopping = False
        # the physics thread and numpy release and retake the GIL constantly; a short switch
        # interval keeps the ROS and skill threads from waiting 5 ms for it each time
        sys.setswitchinterval(SWITCH_INTERVAL)
        if not rclpy.ok():
            rclpy.init()
            self._owns_context = True
        # every callback is short (skills and LLM calls run on the nodes' own worker threads), so one
        # executor thread is enough and costs far less per message than a thread pool
        self._executor = SingleThreadedExecutor() if self.threads <= 1 else MultiThreadedExecutor(num_threads=self.threads)
        built: dict[int, Any] = {}
        try:
            # the simulator is built last: its physics thread starts with it, and at real_time_factor 0
            # it holds the GIL so much that another node's imports (torch, transformers) crawl behind it
            for index, spec in sorted(enumerate(self.specs), key=lambda item: item[1].name == "sim"):
                if spec.provided_by and not spec.available():
                    self.skipped.append(spec)
                    continue
                if on_node is not None:
                    on_node(spec)
                built[index] = spec.create()
            for index in sorted(built):
                self.add_node(built.pop(index))
            self._thread = threading.Thread(target=self._spin, daemon=True, name="teachbot-stack")
            self._thread.start()
            self.client_node = rclpy.create_node("teachbot_client")
            self.client = SkillClient(self.client_node, profile=RobotProfile.load(self.robot_profile))
            self.client.spin_in_background()
            self.client.wait_ready(wait, sim=self.with_sim)
        except BaseException:
            for node in built.values():  # built but not yet handed to the executor
                close = getattr(node, "close", None)
                if close:
                    close()
                node.destroy_node()
            self.stop()
            raise
        return self.client

    def _spin(self) -> None:
        executor = self._executor
        try:
            executor.spin()
        except Exception:
            # rclpy may trip over a guard condition it is destroying while stop() shuts it down
            if not self._stopping:
                raise

    def add_node(self, node: Any) -> None:
        """Spin another node (e.g. the interaction manager) on the stack's executor."""
        self.nodes.append(node)
        if self._executor is not None:
            self._executor.add_node(node)

    def remove_node(self, node: Any, timeout: float = 10.0) -> None:
        """Stop spinning ``node`` (:func:`let_go`: without racing the executor thread), close it and destroy it."""
        executor = self._executor
        if executor is not None:
            let_go(executor, node, spinning=self._thread is not None and self._thread.is_alive(), timeout=timeout)
        if node in self.nodes:
            self.nodes.remove(node)
        close = getattr(node, "close", None)
        if close:
            close()
        node.destroy_node()

    def node(self, name: str) -> Any:
        """The running node of this name; KeyError if there is none."""
        for node in self.nodes:
            if node.get_name() == name:
                return node
        raise KeyError(f"no node {name!r} in this stack; running: {', '.join(n.get_name() for n in self.nodes)}")

    def stop(self) -> None:
        """Stop spinning, close and destroy every node, and shut rclpy down if this stack started it."""
        if self.client is not None:
            self.client.close()
            self.client_node.destroy_node()
            self.client = None
        self._stopping = True
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=2.0)
            if self._thread is not None:
                self._thread.join(timeout=10.0)  # a callback still running must end before its node is destroyed
            self._executor = None
        for node in reversed(self.nodes):
            close = getattr(node, "close", None)
            if close:
                close()
            node.destroy_node()
        self.nodes.clear()
        if self._owns_context and rclpy.ok():
            rclpy.shutdown()
            self._owns_context = False

    def __enter__(self) -> SkillClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def let_go(executor: Executor, node: Any, spinning: bool = True, timeout: float = 10.0) -> None:
    """Take ``node`` off ``executor`` so that it can be destroyed without racing the executor's thread.

    rclpy's executor gathers its nodes' entities before it waits on them; a node destroyed from another thread
    in between makes the spin thread raise (``InvalidHandle``, or RCLError 'action client pointer is invalid')
    and the executor stops for good. So while it spins, the removal runs as a task on the executor, and this
    returns only after a second task has run, which the executor takes up only at the top of a pass that no
    longer lists the node. ``spinning`` False: nothing spins it, the node is removed at once."""
    if not spinning:
        executor.remove_node(node)
        return
    for step in (lambda: executor.remove_node(node), lambda: None):
        task = executor.create_task(step)
        deadline = time.monotonic() + timeout
        while not task.done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the executor did not let go of {node.get_name()!r} within {timeout:.0f} s")
            time.sleep(0.01)
