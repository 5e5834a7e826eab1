"""Helpers of the in-process ROS tests: wait for a condition, call a service with a deadline, and a graph of
nodes spun on one executor thread (as teachbot.nodes.nodeset.run_nodes does) with a probe node for the calls."""

from __future__ import annotations

import threading
import time
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor
from timing import deadline as scaled_deadline
from timing import timeout as scaled

# the timeouts given to these helpers are seconds before timing's scale: the helpers apply it


def wait_until(predicate: Any, timeout: float, what: str = "condition", period: float = 0.05) -> None:
    """Poll ``predicate`` every ``period`` seconds; fail the test when ``timeout`` (scaled) passes first."""
    deadline = scaled_deadline(timeout)
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(period)


def call(client: Any, request: Any, timeout: float) -> Any:
    """The service's answer to ``request``; fails the test when it is not served or does not answer in time (scaled)."""
    assert client.wait_for_service(timeout_sec=scaled(timeout)), f"{client.srv_name} not served"
    done = threading.Event()
    future = client.call_async(request)
    future.add_done_callback(lambda _f: done.set())
    assert done.wait(scaled(timeout)), f"{client.srv_name} did not answer"
    return future.result()


class Graph:
    """Nodes spun on one executor thread for one test, and a probe node (``<prefix>_<name>``) for the calls."""

    def __init__(self, *nodes: Any, name: str, prefix: str = "probe") -> None:
        self.probe = rclpy.create_node(f"{prefix}_{name}")
        self.nodes = (*nodes, self.probe)
        self.executor = SingleThreadedExecutor()
        for node in self.nodes:
            self.executor.add_node(node)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()
        self.closed = False

    def _spin(self) -> None:
        # spin_once until told to stop, so the executor is idle before it shuts down (Executor.shutdown destroys its
        # guard condition at once, and a handler still running in the spin thread would trigger it)
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def client(self, kind: Any, name: str) -> Any:
        return self.probe.create_client(kind, name)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        self.thread.join(timeout=scaled(10.0))
        self.executor.shutdown(timeout_sec=scaled(2.0))
        for node in self.nodes:
            getattr(node, "close", lambda: None)()
            node.destroy_node()
