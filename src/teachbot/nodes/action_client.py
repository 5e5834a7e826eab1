"""An rclpy ActionClient whose goal futures always complete.

rclpy 9.1.2 (the Kilted wheel) registers a sent goal's future under the client's lock and then, outside
it, registers a second future for the same sequence number and returns that one. When the executor takes
the server's answer between the two (a busy machine, server and client in one process), the answer
completes the first future and the returned one waits forever: a goal that was accepted looks unanswered
(ros2/rclpy#1123, whose backport left this duplicate behind). Holding the client's lock, made reentrant,
across the whole send keeps the executor from taking the answer until the returned future is registered.
"""

from __future__ import annotations

import threading
from typing import Any

from rclpy.action import ActionClient as _RclpyActionClient


class ActionClient(_RclpyActionClient):
    """rclpy's ActionClient with a race-free :meth:`send_goal_async`; use it wherever a goal is sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.RLock()  # the executor's take_data waits on it while a send is under way

    def send_goal_async(self, goal: Any, feedback_callback: Any = None, goal_uuid: Any = None) -> Any:
        """Send a goal; the returned future completes once the server accepts or rejects it."""
        with self._lock:
            return super().send_goal_async(goal, feedback_callback=feedback_callback, goal_uuid=goal_uuid)
