"""Small helpers every teachbot node shares: QoS profiles, start-up checks, the main() runner."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.task import Future

from teachbot.ros_env import configure_loopback

SENSOR_QOS = qos_profile_sensor_data  # camera images: best effort, latest only
COMMAND_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# state a late joiner needs at once (object list, world state): reliable, last sample kept for it
LATCHED_QOS = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)


async def wait_for_worker(node: Node, work: concurrent.futures.Future[Any]) -> Any:
    """Await a worker thread's result inside an executor callback, then return it (or raise).

    rclpy resumes a waiting coroutine only when its executor wakes up for something; a node alone in
    its process (ros2 launch) may have nothing else to wake it, so completion wakes it explicitly."""
    done: Future = Future()
    executor = node.executor

    def finished(_work: concurrent.futures.Future[Any]) -> None:
        done.set_result(True)
        if executor is not None:
            # a shutting-down executor may have dropped its guard condition: nothing left to wake then
            with contextlib.suppress(Exception):
                executor.wake()

    work.add_done_callback(finished)
    await done
    return work.result()
# a session's history (transcript, LLM completions): a late joiner such as a recorder gets all of it
TRANSCRIPT_QOS = QoSProfile(
    depth=500, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def completion_publisher(node: Node, publisher: Any, role: str, prices: Any = None) -> Callable[[Any, str], None]:
    """A model listener that publishes each LLM call of ``role`` on ``publisher`` (an LlmCompletion
    publisher, TRANSCRIPT_QOS) with its prompt digest: what a recorded session is replayed from.
    ``prices`` (a teachbot.llm.pricing.PriceTable, default config/prices.yaml) gives each call's cost."""
    from teachbot_interfaces.msg import LlmCompletion

    from teachbot.llm.pricing import PriceTable

    table = prices if prices is not None else PriceTable.load()

    def publish(completion: Any, prompt: str) -> None:
        msg = LlmCompletion(
            role=role, model=completion.model, prompt_digest=completion.prompt_digest, prompt=prompt,
            completion=completion.text, prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens, cached_tokens=completion.cached_tokens,
            latency=completion.latency, finish_reason=completion.finish_reason, cost_usd=table.cost(completion),
        )
        msg.header.stamp = node.get_clock().now().to_msg()
        publisher.publish(msg)

    return publish


class DuplicateNodeError(RuntimeError):
    """Another node of the same name is already running in this ROS domain."""


def refuse_duplicate(node: Node, wait: float = 0.4) -> None:
    """Raise DuplicateNodeError when a node with this node's full name is already on the graph."""
    deadline = time.monotonic() + wait
    full = node.get_fully_qualified_name()
    while time.monotonic() < deadline:
        names = [ns.rstrip("/") + "/" + n for n, ns in node.get_node_names_and_namespaces()]
        if names.count(full) > 1:
            domain = os.environ.get("ROS_DOMAIN_ID", "0")
            raise DuplicateNodeError(
                f"a node named {full} is already running in ROS_DOMAIN_ID={domain}; stop it or start this one "
                f"under another name (--ros-args -r __node:={node.get_name()}_2)"
            )
        time.sleep(0.05)


def run_nodes(factories: Sequence[Callable[[], Node]], args: list[str] | None = None) -> int:
    """Initialise rclpy, build the nodes, spin them on one executor thread, shut down cleanly.

    Returns a process exit status; a configuration error is printed as one line, not a traceback.
    """
    if os.environ.get("TEACHBOT_LOOPBACK", "1") != "0":
        configure_loopback(reserve_domain=False)
    sys.setswitchinterval(0.001)  # see teachbot.nodes.stack: threads wait less for the GIL
    rclpy.init(args=args)
    nodes: list[Node] = []
    status = 0
    try:
        for factory in factories:
            nodes.append(factory())
        executor = SingleThreadedExecutor()  # long work runs on the nodes' own worker threads
        for node in nodes:
            executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # noqa: BLE001 - a node that cannot start says why in one line
        from teachbot.errors import TeachbotError

        if not isinstance(exc, (TeachbotError, DuplicateNodeError)):
            raise
        print(f"error: {exc}", file=sys.stderr)
        status = 2
    finally:
        for node in nodes:
            close = getattr(node, "close", None)
            if close:
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return status
